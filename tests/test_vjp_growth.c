/*
 * test_vjp_growth.c — every VJP rule run on a graph whose node array is
 * full, so that the first (or second, third, ...) node the rule adds moves
 * the array. A rule that holds a pointer into the array across a call that
 * adds a node (op_ROPE_vjp passed its node's own fattr to add_node, issue
 * 25 item 3) reads freed memory: AddressSanitizer reports it (the ASan
 * build of this test), and without it the rule may build its nodes from
 * stale bytes. Oracle: the same rule on the same graph with room to spare
 * must add exactly the same nodes.
 */
#include <string.h>

#include "ir/graph.h"
#include "op_cases.h"
#include "test.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

/* The most nodes one VJP rule adds (a division by a broadcast operand:
 * div, sum_to, mul, sum_to) with some margin: growth is tried at each. */
enum { MAX_ADDS = 8 };

/* A leaf with the dtype and shape of node `like` (dout), or an unused
 * scalar leaf (padding). */
static int32_t add_leaf(pipit_graph *g, int32_t like) {
    int32_t id = pipit__node_add(g, PIPIT_OP_INPUT, 0, NULL, NULL, NULL);
    if (id >= 0 && like >= 0) {
        pipit__node *n = &g->nodes[id];
        const pipit__node *l = &g->nodes[like];
        n->dtype = l->dtype;
        n->ndim = l->ndim;
        memcpy(n->shape, l->shape, sizeof n->shape);
    }
    return id;
}

/* A copy of g (its node array exactly full), with dout for node j and
 * padding up to cap - room nodes; with spare > 0 the array then gets
 * `spare` more slots, so nothing the VJP adds moves it. */
static pipit_graph *prepare(const pipit_graph *g, int32_t j, int room, int spare, int32_t *dout) {
    pipit_graph *c = pipit__graph_clone(g, g->n);
    if (!c) return NULL;
    *dout = add_leaf(c, j);
    while (c->n < c->cap - room) add_leaf(c, -1);
    if (spare) {
        pipit__node *nodes = pipit__realloc(c->nodes, sizeof *nodes * ((size_t)c->cap + (size_t)spare));
        if (!nodes) {
            pipit_graph_free(c);
            return NULL;
        }
        c->nodes = nodes;
        c->cap += spare;
    }
    return c;
}

static int same_node(const pipit__node *a, const pipit__node *b) {
    return a->op == b->op && a->dtype == b->dtype && a->ndim == b->ndim && a->nin == b->nin &&
           a->flags == b->flags && !memcmp(a->in, b->in, sizeof a->in) && !memcmp(a->shape, b->shape, sizeof a->shape) &&
           !memcmp(a->fattr, b->fattr, sizeof a->fattr) && !memcmp(a->iattr, b->iattr, sizeof a->iattr) &&
           a->origin == b->origin;
}

/* Runs the VJP of every node of g that has one, with the array growing at
 * its 1st, 2nd, ... added node, against the run with room; marks tested
 * ops. Returns the number of mismatches. */
static int check_graph(const pipit_graph *g, const char *what, int *tested) {
    int bad = 0;
    for (int32_t j = 0; j < g->n; j++) {
        const pipit__op_info *info = &pipit__ops[g->nodes[j].op];
        if (!info->vjp || g->nodes[j].dtype == PIPIT_I32) continue; /* ids: autodiff never asks their gradient */
        for (int room = 0; room < MAX_ADDS; room++) {
            int32_t d1 = -1, d2 = -1;
            pipit_graph *full = prepare(g, j, room, 0, &d1), *roomy = prepare(g, j, room, 4 * MAX_ADDS, &d2);
            if (!full || !roomy || d1 < 0 || d1 != d2) {
                fprintf(stderr, "%s: could not copy the graph\n", what);
                pipit_graph_free(full);
                pipit_graph_free(roomy);
                return bad + 1;
            }
            int32_t n0 = full->n, cap0 = full->cap;
            int32_t din1[PIPIT_MAX_IN], din2[PIPIT_MAX_IN];
            for (int k = 0; k < PIPIT_MAX_IN; k++) din1[k] = din2[k] = -1;
            info->vjp(full, j, d1, din1);
            info->vjp(roomy, j, d2, din2);
            int same = full->status == roomy->status && full->n == roomy->n &&
                       !memcmp(din1, din2, sizeof din1);
            for (int32_t i = n0; same && i < full->n; i++) same = same_node(&full->nodes[i], &roomy->nodes[i]);
            if (!same) {
                fprintf(stderr, "%s: the VJP of node %d (%s) differs when the node array grows at its node %d\n",
                        what, (int)j, info->name, room + 1);
                bad++;
            }
            if (full->status) {
                fprintf(stderr, "%s: the VJP of node %d (%s) failed: %s\n", what, (int)j, info->name, full->errmsg);
                bad++;
            }
            int grew = full->cap != cap0;
            pipit_graph_free(full);
            pipit_graph_free(roomy);
            tested[g->nodes[j].op] = 1;
            if (!grew) break; /* it adds at most `room` nodes: growth at each position was tried */
        }
    }
    return bad;
}

/* One case: y from the builder, loss = sum(y * R), compiled (so the graph
 * holds the backward too: VJPs of backward ops such as slice_dx, scale or
 * permute are checked on the nodes autodiff made). */
static int check_case(pipit_val (*build)(pipit_graph *), const char *name, int *tested) {
    pipit_graph *g = pipit_graph_new();
    pipit_val y = build(g);
    int nd = pipit_val_ndim(y);
    int64_t shape[PIPIT_MAX_DIMS];
    for (int i = 0; i < nd; i++) shape[i] = pipit_val_dim(y, i);
    pipit_val r = pipit_input(g, "R", pipit_val_dtype(y), nd, shape);
    pipit_val loss = pipit_sum(g, pipit_mul(g, y, r));
    if (pipit_val_dtype(loss) == PIPIT_BF16) loss = pipit_cast(g, loss, PIPIT_F32);
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.microbatches = 1}, &p)) {
        fprintf(stderr, "%s: compile failed: %s\n", name, pipit_errmsg());
        pipit_graph_free(g);
        return 1;
    }
    int bad = check_graph(g, name, tested);
    pipit_program_free(p);
    pipit_graph_free(g);
    return bad;
}

/* A cast that adds a node in its VJP (to bf16 and back), which the f64
 * op cases (a cast to the same dtype) never make. */
static pipit_val b_cast_bf16(pipit_graph *g) {
    pipit_val x = pipit_param(g, "x", PIPIT_F32, 2, SH(2, 3));
    pipit_val c = pipit_cast(g, x, PIPIT_BF16);
    return pipit_cast(g, pipit_mul(g, c, c), PIPIT_F32);
}

PIPIT_TEST(vjp_node_array_growth) {
    int tested[PIPIT_OP_COUNT] = {0};
    int bad = 0;
    op_cases_loop_mode = 0;
    op_cases_dtype = PIPIT_F64;
    for (int i = 0; i < op_ncases; i++) bad += check_case(op_cases[i].build, op_cases[i].name, tested);
    bad += check_case(b_cast_bf16, "cast_bf16", tested);
    ASSERT_EQ_I64(bad, 0);
    for (int op = 0; op < PIPIT_OP_COUNT; op++)
        if (pipit__ops[op].vjp && !tested[op])
            PIPIT_FAIL_("the VJP of %s was never run on a graph about to grow", pipit__ops[op].name);
}
