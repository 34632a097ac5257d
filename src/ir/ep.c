/*
 * ep.c — expert parallelism in the graph (docs/architecture.md, "Mixture
 * of experts"): like tensor parallelism the graph describes ONE member of
 * an EP group of E data-parallel replicas. Expert params hold their
 * member's 1/E of the experts (axis 0); the all-to-all pair moves the
 * dispatch grid's blocks to the experts' owners and back (ir/ep.h), run
 * by the runtime on the group (runtime/ep.c).
 */
#include <string.h>

#include "ir/ep.h"
#include "pipit_moe.h"
#include "util/checked.h"

#define EP_MAX_RANKS 64 /* the transports' collective group limit (runtime/transport.h) */
#define IN(i) (&g->nodes[n->in[i]])
#define bad(...) pipit__err(PIPIT_STATUS_SHAPE, __VA_ARGS__)

static int bad_handle(const pipit_graph *g, const char *fn) {
    if (g && g->magic == PIPIT_GRAPH_MAGIC) return 0;
    pipit__err(PIPIT_STATUS_MISUSE, "%s: %s", fn, g ? "invalid graph handle (freed, or not a pipit_graph)" : "graph is NULL");
    return 1;
}

static int has_ep_nodes(const pipit_graph *g) {
    for (int32_t i = 0; i < g->n; i++)
        if (pipit__param_experts(&g->nodes[i]) || g->nodes[i].op == PIPIT_OP_EP_A2A || g->nodes[i].op == PIPIT_OP_EP_A2A_REV)
            return 1;
    return 0;
}

pipit_status pipit_graph_set_expert_parallel(pipit_graph *g, int E) {
    if (bad_handle(g, __func__)) return PIPIT_STATUS_MISUSE;
    if (E < 1 || E > EP_MAX_RANKS)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: E = %d expert-parallel ranks (1 to %d)", __func__, E, EP_MAX_RANKS);
    if (E != pipit__graph_ep(g) && has_ep_nodes(g))
        return pipit__err(PIPIT_STATUS_INVALID,
                          "%s: the graph already holds expert params or all-to-alls for E = %d; set E = %d before "
                          "the first of them",
                          __func__, pipit__graph_ep(g), E);
    g->ep = E;
    return PIPIT_STATUS_OK;
}

int pipit_graph_expert_parallel(const pipit_graph *g) { return bad_handle(g, __func__) ? 0 : pipit__graph_ep(g); }

pipit_val pipit_param_experts(pipit_graph *g, const char *name, pipit_dtype dt, int ndim, const int64_t *shape) {
    const char *fn = __func__;
    if (bad_handle(g, fn)) return (pipit_val){g, -1};
    if (g->status != PIPIT_STATUS_OK) return pipit__param_as(g, fn, name, dt, ndim, shape); /* names the first error */
    int E = pipit__graph_ep(g);
    const char *nm = name ? name : "(null)";
    if (ndim < 1 || ndim > PIPIT_MAX_DIMS || !shape) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "%s '%s': rank %d%s (experts stacked on axis 0: rank 1 to %d)", fn,
                          nm, ndim, shape ? "" : ", shape NULL", PIPIT_MAX_DIMS);
        return (pipit_val){g, -1};
    }
    if (shape[0] < 1 || shape[0] % E != 0) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE,
                          "%s '%s': %lld experts (axis 0) do not split over %d expert-parallel rank%s", fn, nm,
                          (long long)shape[0], E, E == 1 ? "" : "s");
        return (pipit_val){g, -1};
    }
    int64_t local[PIPIT_MAX_DIMS];
    memcpy(local, shape, sizeof(int64_t) * (size_t)ndim);
    local[0] /= E;
    pipit_val v = pipit__param_as(g, fn, name, dt, ndim, local);
    if (v.id >= 0) g->nodes[v.id].iattr[2] = 1;
    return v;
}

static pipit_val a2a(pipit_graph *g, const char *fn, pipit__opcode op, pipit_val x) {
    if (bad_handle(g, fn)) return (pipit_val){g, -1};
    return pipit__build(g, fn, op, 1, &x, NULL, (int64_t[4]){pipit__graph_ep(g), 0, 0, 0});
}
pipit_val pipit_ep_dispatch(pipit_graph *g, pipit_val x) { return a2a(g, __func__, PIPIT_OP_EP_A2A, x); }
pipit_val pipit_ep_combine(pipit_graph *g, pipit_val y) { return a2a(g, __func__, PIPIT_OP_EP_A2A_REV, y); }

/* [X, C, ...] <-> [X/E, E C, ...]: `fwd` divides axis 0 and multiplies
 * axis 1 by E, the reverse the other way. */
static pipit_status a2a_shape(const pipit_graph *g, pipit__node *n, int fwd) {
    const pipit__node *x = IN(0);
    int64_t E = n->iattr[0];
    if (E < 1 || E > EP_MAX_RANKS) return bad("E = %lld expert-parallel ranks (1 to %d)", (long long)E, EP_MAX_RANKS);
    if (x->ndim < 2) return bad("x must have rank >= 2 ([experts, capacity, ...])");
    int split = fwd ? 0 : 1, grow = fwd ? 1 : 0;
    if (x->shape[split] % E != 0)
        return bad("axis %d (%lld) does not split over %lld expert-parallel ranks", split, (long long)x->shape[split],
                   (long long)E);
    n->dtype = x->dtype;
    n->ndim = x->ndim;
    memcpy(n->shape, x->shape, sizeof n->shape);
    n->shape[split] /= E;
    if (!pipit__mul_i64(x->shape[grow], E, &n->shape[grow])) return bad("axis %d times E overflows", grow);
    return PIPIT_STATUS_OK;
}

pipit_status pipit__op_ep_a2a_shape(const pipit_graph *g, pipit__node *n) { return a2a_shape(g, n, 1); }
pipit_status pipit__op_ep_a2a_rev_shape(const pipit_graph *g, pipit__node *n) { return a2a_shape(g, n, 0); }

void pipit__op_ep_a2a_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    din[0] = pipit__node_add(g, PIPIT_OP_EP_A2A_REV, 1, &dout, NULL, (int64_t[4]){g->nodes[id].iattr[0], 0, 0, 0});
}
void pipit__op_ep_a2a_rev_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    din[0] = pipit__node_add(g, PIPIT_OP_EP_A2A, 1, &dout, NULL, (int64_t[4]){g->nodes[id].iattr[0], 0, 0, 0});
}
