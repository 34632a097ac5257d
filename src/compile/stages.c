/*
 * stages.c — stage inference. Forward: stage(op) = max over its staged
 * inputs, a yield adds one; values with no staged input are placed at their
 * first use. Backward: a node lives in the stage of the forward op whose VJP
 * emitted it, except a backward yield, which moves one stage earlier. The B/W
 * split is then a reachability question inside each stage's backward.
 * Pre-loop nodes (params only) and the post-loop region (their backward)
 * run outside the microbatch loop, on every rank that needs them.
 */
#include "compile/stages.h"
#include "compile/emit.h"

#include <string.h>

static uint8_t *mark_live(const pipit__plan *p) {
    const pipit_graph *g = p->g;
    uint8_t *live = pipit__calloc((size_t)g->n, 1);
    if (!live) return NULL;
    live[p->loss] = 1;
    for (int i = 0; i < p->noutputs; i++) live[p->outputs[i]] = 1;
    for (int i = 0; i < p->gr.ntargets; i++)
        for (int u = 0; u < p->gr.t[i].nuses; u++) live[p->gr.t[i].contrib[u]] = 1;
    for (int32_t i = g->n - 1; i >= 0; i--)
        if (live[i])
            for (int k = 0; k < g->nodes[i].nin; k++) live[g->nodes[i].in[k]] = 1;
    return live;
}

/* Forward stages by data flow; -1 = unstaged so far. first_use: [n]
 * scratch, every entry -1. */
static void forward_stages(const pipit__plan *p, pipit__staging *st, int32_t *first_use) {
    const pipit_graph *g = p->g;
    for (int32_t i = 0; i < p->gr.fwd_end; i++) {
        const pipit__node *n = &g->nodes[i];
        int32_t s = -1;
        for (int k = 0; k < n->nin; k++) s = PIPIT_MAX(s, st->stage[n->in[k]]);
        if (n->op == PIPIT_OP_YIELD) s = PIPIT_MAX(s, 0) + 1;
        st->stage[i] = s;
    }
    /* Unstaged values go to their first (lowest) consumer's stage. Walking
     * backwards, every consumer of node j has been placed when j is reached,
     * so j's stage is final and can be offered to its inputs (one pass: a
     * scan of all later nodes per unstaged node was quadratic). */
    for (int32_t j = p->gr.fwd_end - 1; j >= 0; j--) {
        const pipit__node *c = &g->nodes[j];
        if (st->stage[j] < 0 && !(pipit__ops[c->op].flags & OPF_LEAF))
            st->stage[j] = first_use[j] < 0 ? 0 : first_use[j];
        if (!st->live[j]) continue;
        /* a yield reads its input one stage before its output's stage */
        int32_t use = st->stage[j] - (c->op == PIPIT_OP_YIELD);
        for (int k = 0; k < c->nin; k++) {
            int32_t *best = &first_use[c->in[k]];
            if (*best < 0 || use < *best) *best = use;
        }
    }
}

static void backward_stages(const pipit__plan *p, pipit__staging *st) {
    const pipit_graph *g = p->g;
    for (int32_t i = p->gr.fwd_end; i < g->n; i++) {
        const pipit__node *n = &g->nodes[i];
        if (i == p->gr.seed) { st->stage[i] = -1; continue; }
        int32_t s = n->origin >= 0 ? st->stage[n->origin] : st->S - 1;
        if (n->flags & NODE_BWD_YIELD) s -= 1;
        st->stage[i] = PIPIT_MAX(s, 0);
    }
}

/* B: backward nodes of a stage that lead to a value another stage reads.
 * Marked by walking consumers to producers from those values. */
static pipit_status split_bw(const pipit__plan *p, pipit__staging *st) {
    const pipit_graph *g = p->g;
    uint8_t *inB = pipit__calloc((size_t)g->n, 1);
    if (!inB) return pipit__err(PIPIT_STATUS_NOMEM, "stage inference: out of memory");
    for (int32_t j = g->n - 1; j >= p->gr.fwd_end; j--) {
        const pipit__node *n = &g->nodes[j];
        if (!st->live[j] || !pipit__node_runs(n) || (n->flags & NODE_POST)) continue;
        for (int k = 0; k < n->nin; k++) {
            int32_t r = pipit__alias_root(g, n->in[k]);
            if (r < p->gr.fwd_end || !pipit__node_runs(&g->nodes[r])) continue;
            /* r is a backward value: cross-stage readers make it B; so do B readers in its stage */
            if (st->stage[r] != st->stage[j] || inB[j]) inB[r] = 1;
        }
    }
    for (int32_t i = 0; i < g->n; i++) {
        if (!st->live[i] || !pipit__node_runs(&g->nodes[i])) st->phase[i] = PH_NONE;
        else if (i < p->gr.fwd_end) st->phase[i] = p->gr.preloop[i] ? PH_PRE : PH_F;
        else if (g->nodes[i].flags & NODE_POST) st->phase[i] = PH_POST;
        else st->phase[i] = inB[i] ? PH_B : PH_W;
    }
    pipit__free(inB);
    return PIPIT_STATUS_OK;
}

/* The user's post-loop region: everything the pipit_set_grad values are
 * computed from, back to params and accumulated gradients. It may not touch
 * per-microbatch inputs or values the step itself computes. */
static pipit_status mark_gradpost(const pipit__plan *p, pipit__staging *st) {
    const pipit_graph *g = p->g;
    uint8_t *in = pipit__calloc((size_t)g->n, 1);
    if (!in) return pipit__err(PIPIT_STATUS_NOMEM, "stage inference: out of memory");
    for (int32_t k = 0; k < g->ngradset; k++) in[g->gradset[k][1]] = 1;
    pipit_status s = PIPIT_STATUS_OK;
    for (int32_t i = p->gr.fwd_end - 1; i >= 0 && !s; i--) {
        if (!in[i]) continue;
        const pipit__node *n = &g->nodes[i];
        if (n->op == PIPIT_OP_PARAM || (n->flags & NODE_GRADOF)) continue;
        if (n->op == PIPIT_OP_INPUT)
            s = pipit__err(PIPIT_STATUS_INVALID, "post-loop ops (pipit_set_grad) may not read the input '%s'", n->name);
        else if (st->live[i])
            s = pipit__err(PIPIT_STATUS_INVALID,
                           "node %d (%s) is used both by the step and by post-loop ops (pipit_set_grad); build it twice",
                           i, pipit__ops[n->op].name);
        for (int k = 0; k < n->nin; k++) in[n->in[k]] = 1;
        if (pipit__node_runs(n)) st->phase[i] = PH_GRADPOST;
    }
    pipit__free(in);
    return s;
}

pipit_status pipit__infer_stages(const pipit__plan *p, pipit__staging *st) {
    const pipit_graph *g = p->g;
    memset(st, 0, sizeof *st);
    st->stage = pipit__malloc(sizeof(int32_t) * (size_t)g->n);
    st->phase = pipit__calloc((size_t)g->n, 1);
    st->live = mark_live(p);
    int32_t *first_use = pipit__malloc(sizeof(int32_t) * (size_t)g->n);
    if (!st->stage || !st->phase || !st->live || !first_use) {
        pipit__free(first_use);
        pipit__staging_free(st);
        return pipit__err(PIPIT_STATUS_NOMEM, "stage inference: out of memory");
    }
    for (int32_t i = 0; i < g->n; i++) first_use[i] = -1;
    forward_stages(p, st, first_use);
    pipit__free(first_use);
    int32_t S = 1;
    for (int32_t i = 0; i < p->gr.fwd_end; i++)
        if (st->live[i]) S = PIPIT_MAX(S, st->stage[i] + 1);
    st->S = S;
    if (st->stage[p->loss] != S - 1) {
        pipit__staging_free(st);
        return pipit__err(PIPIT_STATUS_INVALID,
                          "the loss is in stage %d but the graph has %d stages: the loss must be computed "
                          "in the last stage (is a yield missing before the loss?)",
                          st->stage[p->loss], S);
    }
    backward_stages(p, st);
    pipit_status s = split_bw(p, st);
    if (!s) s = mark_gradpost(p, st);
    if (s) pipit__staging_free(st);
    return s;
}

void pipit__staging_free(pipit__staging *st) {
    pipit__free(st->stage);
    pipit__free(st->phase);
    pipit__free(st->live);
    memset(st, 0, sizeof *st);
}
