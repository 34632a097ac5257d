/*
 * tp.c — tensor parallelism in the graph (DESIGN 2.6): the graph describes
 * ONE of a stage's T ranks (SPMD). Sharded params hold their local shard
 * (the axis cut into T parts, or `parts` blocks each cut into T), the
 * Megatron collectives are graph ops (ops.c: TP_COPY, TP_SUM, TP_MAX), and
 * the vocab-parallel cross-entropy is built from them. Which ops may read
 * a sharded param directly is decided here, once, at compile.
 */
#include <string.h>

#include "ir/graph.h"

#define TP_MAX_RANKS 64 /* the in-stage all-reduce's group limit (runtime/transport.h) */

static int bad_handle(const pipit_graph *g, const char *fn) {
    if (g && g->magic == PIPIT_GRAPH_MAGIC) return 0;
    pipit__err(PIPIT_STATUS_MISUSE, "%s: %s", fn, g ? "invalid graph handle (freed, or not a pipit_graph)" : "graph is NULL");
    return 1;
}

/* Whether anything T-dependent is in the graph yet: a sharded param or a
 * collective. */
static int has_tp_nodes(const pipit_graph *g) {
    for (int32_t i = 0; i < g->n; i++) {
        const pipit__node *n = &g->nodes[i];
        if (pipit__param_shard_axis(n) >= 0 || (pipit__ops[n->op].flags & OPF_COLL) || n->op == PIPIT_OP_TP_COPY)
            return 1;
    }
    return 0;
}

pipit_status pipit_graph_set_tensor_parallel(pipit_graph *g, int T) {
    if (bad_handle(g, __func__)) return PIPIT_STATUS_MISUSE;
    if (T < 1 || T > TP_MAX_RANKS)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: T = %d tensor-parallel ranks per stage (1 to %d)", __func__, T,
                          TP_MAX_RANKS);
    if (T != pipit__graph_tp(g) && has_tp_nodes(g))
        return pipit__err(PIPIT_STATUS_INVALID,
                          "%s: the graph already holds sharded params or collectives for T = %d; set T = %d before "
                          "the first of them",
                          __func__, pipit__graph_tp(g), T);
    g->tp = T;
    return PIPIT_STATUS_OK;
}

int pipit_graph_tensor_parallel(const pipit_graph *g) { return bad_handle(g, __func__) ? 0 : pipit__graph_tp(g); }

pipit_val pipit_param_sharded(pipit_graph *g, const char *name, pipit_dtype dt, int ndim, const int64_t *shape, int axis,
                              int parts) {
    const char *fn = __func__;
    if (bad_handle(g, fn)) return (pipit_val){g, -1};
    if (g->status != PIPIT_STATUS_OK) return pipit__param_as(g, fn, name, dt, ndim, shape); /* names the first error */
    int T = pipit__graph_tp(g);
    const char *nm = name ? name : "(null)";
    if (ndim < 1 || ndim > PIPIT_MAX_DIMS || !shape || axis < -ndim || axis >= ndim) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "%s '%s': axis %d of a rank-%d shape%s", fn, nm, axis, ndim,
                          shape ? "" : " (shape is NULL)");
        return (pipit_val){g, -1};
    }
    if (axis < 0) axis += ndim;
    if (parts < 1 || shape[axis] < 1 || shape[axis] % ((int64_t)parts * T) != 0) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE,
                          "%s '%s': axis %d of %lld elements does not split into %d part%s x %d tensor-parallel "
                          "rank%s",
                          fn, nm, axis, (long long)shape[axis], parts, parts == 1 ? "" : "s", T, T == 1 ? "" : "s");
        return (pipit_val){g, -1};
    }
    int64_t local[PIPIT_MAX_DIMS];
    memcpy(local, shape, sizeof(int64_t) * (size_t)ndim);
    local[axis] /= T;
    pipit_val v = pipit__param_as(g, fn, name, dt, ndim, local);
    if (v.id >= 0) {
        g->nodes[v.id].iattr[0] = axis + 1;
        g->nodes[v.id].iattr[1] = parts;
    }
    return v;
}

pipit_val pipit_tp_copy(pipit_graph *g, pipit_val x) { return pipit__build(g, __func__, PIPIT_OP_TP_COPY, 1, &x, NULL, NULL); }
pipit_val pipit_tp_sum(pipit_graph *g, pipit_val x) { return pipit__build(g, __func__, PIPIT_OP_TP_SUM, 1, &x, NULL, NULL); }
pipit_val pipit_tp_max(pipit_graph *g, pipit_val x) { return pipit__build(g, __func__, PIPIT_OP_TP_MAX, 1, &x, NULL, NULL); }

/* mean over rows of log(sum_v exp(z_v - m)) - (z_y - m), with m the
 * global row max (no gradient: the loss does not depend on it) and each of
 * max, sum of exponentials and target logit reduced over the T ranks: no
 * rank ever holds a full row of logits. */
pipit_val pipit_tp_xent_mean(pipit_graph *g, pipit_val logits, pipit_val targets) {
    const char *fn = __func__;
    if (bad_handle(g, fn)) return (pipit_val){g, -1};
    pipit_val m = pipit_tp_max(g, pipit_reduce_max(g, logits, -1, 1));
    pipit_val zs = pipit_sub(g, logits, m);
    pipit_val s = pipit_tp_sum(g, pipit_reduce_sum(g, pipit_exp(g, zs), -1, 0));
    pipit_val zt = pipit_tp_sum(g, pipit__build(g, fn, PIPIT_OP_TP_PICK, 2, (pipit_val[]){zs, targets}, NULL, NULL));
    pipit_val loss = pipit_mean(g, pipit_sub(g, pipit_log(g, s), zt));
    if (loss.id < 0 && g->status != PIPIT_STATUS_OK) pipit__err(g->status, "%s: %s", fn, g->errmsg);
    return loss;
}

/* The param whose shard value v is: the param itself or its cast
 * (options.dtype bf16 reads f32 params through one); -1 otherwise. */
static int32_t shard_source(const pipit_graph *g, int32_t v) {
    while (g->nodes[v].op == PIPIT_OP_CAST) v = g->nodes[v].in[0];
    return g->nodes[v].op == PIPIT_OP_PARAM ? v : -1;
}

int pipit__tp_rows_sharded(const pipit_graph *g, int32_t table) {
    int32_t p = shard_source(g, table);
    return p >= 0 && pipit__param_shard_axis(&g->nodes[p]) == 0;
}

/* Whether op `n` reading a param sharded along `axis` as input k computes
 * the right local piece: a matmul (column- or row-parallel), the bias of a
 * column-parallel output, an embedding (vocab-parallel along rows). */
static int has_rule(const pipit__node *n, int k, const pipit__node *param, int axis) {
    switch ((pipit__opcode)n->op) {
    case PIPIT_OP_CAST: return 1; /* options.dtype bf16's copy: a shard of the same axis, its readers checked */
    case PIPIT_OP_MATMUL: return axis >= param->ndim - 2;
    case PIPIT_OP_BIAS_ADD: return k == 1;
    case PIPIT_OP_EMBED: return k == 0 && (axis == 1 || n->iattr[1] == 1);
    case PIPIT_OP_HEAD_XENT: return k == 1 && axis == 0 && n->iattr[0] == 1; /* pipit_tp_head_xent_mean */
    default: return 0;
    }
}

/* `what` reads the param: named by the public call that added it. */
static pipit_status no_rule(const pipit_graph *g, int32_t param, const char *what) {
    const pipit__node *p = &g->nodes[param];
    return pipit__err(PIPIT_STATUS_INVALID,
                      "parameter '%s' is sharded along axis %d over the stage's %d tensor-parallel ranks, but %s "
                      "has no sharded rule for it: a sharded param may feed pipit_matmul, pipit_bias_add, "
                      "pipit_embed and pipit_tp_head_xent_mean only (declare it with pipit_param to replicate it)",
                      p->name, pipit__param_shard_axis(p), pipit__graph_tp(g), what);
}

pipit_status pipit__tp_check_uses(const pipit_graph *g, int32_t fwd_end) {
    for (int32_t j = 0; j < fwd_end; j++) {
        const pipit__node *n = &g->nodes[j];
        for (int k = 0; k < n->nin; k++) {
            const pipit__node *in = &g->nodes[n->in[k]];
            int32_t param = shard_source(g, n->in[k]);
            int gradof = param < 0 && (in->flags & NODE_GRADOF);
            if (gradof) param = (int32_t)in->iattr[0];
            if (param < 0 || pipit__param_shard_axis(&g->nodes[param]) < 0) continue;
            const pipit__node *pn = &g->nodes[param];
            if (!gradof && has_rule(n, k, pn, pipit__param_shard_axis(pn))) continue;
            char what[160]; /* the public call that added the reader (internal nodes: the op) */
            snprintf(what, sizeof what, "%s (node %d, op %s)%s", n->api ? n->api : "an internal node", (int)j,
                     pipit__ops[n->op].name, gradof ? " of its accumulated gradient (pipit_grad_of)" : "");
            return no_rule(g, param, what);
        }
    }
    for (int32_t k = 0; k < g->ngradset; k++) {
        if (pipit__param_shard_axis(&g->nodes[g->gradset[k][0]]) < 0) continue;
        char what[96];
        snprintf(what, sizeof what, "a gradient transform (pipit_set_grad, node %d)", (int)g->gradset[k][1]);
        return no_rule(g, g->gradset[k][0], what);
    }
    return PIPIT_STATUS_OK;
}
