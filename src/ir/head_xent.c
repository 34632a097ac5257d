/*
 * head_xent.c — the fused LM head + cross-entropy builders: the mean over
 * rows of log sum_v exp(h W_v) - h W_y, from the hidden states h and the
 * head's weight W [V, d] (the tied embedding or lm_head), without the
 * [rows, V] logits ever being stored (ops.def HEAD_XENT: the op keeps one
 * log-sum-exp and one target logit per row; its backward recomputes the
 * logits chunk by chunk, once).
 */
#include "ir/graph.h"

/* The op's [3, ...] output's first two rows: lse and the target logit. */
static void rows_of(pipit_graph *g, const char *fn, pipit_val st, pipit_val *lse, pipit_val *zt) {
    const pipit__node *n = &g->nodes[st.id];
    int64_t iattr[4] = {0}, rows = pipit__node_numel(n) / 3;
    int nd = n->ndim - 1;
    for (int i = 0; i < nd; i++) iattr[i] = n->shape[i + 1];
    *lse = pipit__build(g, fn, PIPIT_OP_VIEW, 1, &st, (double[4]){(double)nd, 0}, iattr);
    *zt = pipit__build(g, fn, PIPIT_OP_VIEW, 1, &st, (double[4]){(double)nd, (double)rows}, iattr);
}

static pipit_val fail_named(pipit_graph *g, const char *fn, pipit_val v) {
    if (v.id < 0 && g && g->magic == PIPIT_GRAPH_MAGIC && g->status != PIPIT_STATUS_OK)
        pipit__err(g->status, "%s: %s", fn, g->errmsg);
    return v;
}

pipit_val pipit_head_xent_mean(pipit_graph *g, pipit_val h, pipit_val W, pipit_val targets) {
    const char *fn = __func__;
    pipit_val st = pipit__build(g, fn, PIPIT_OP_HEAD_XENT, 3, (pipit_val[]){h, W, targets}, NULL, NULL);
    if (st.id < 0) return fail_named(g, fn, st);
    pipit_val lse, zt;
    rows_of(g, fn, st, &lse, &zt);
    return fail_named(g, fn, pipit_mean(g, pipit_sub(g, lse, zt)));
}

/* Vocab parallel: each rank's lse over its classes is combined as
 * pipit_tp_xent_mean combines its sums: m = max over ranks (a constant),
 * lse = m + log(sum over ranks of exp(lse_t - m)); the target logit is
 * one rank's value (the others add exact zeros). Three all-reduces of
 * one number per row; no rank holds a row of logits. */
pipit_val pipit_tp_head_xent_mean(pipit_graph *g, pipit_val h, pipit_val W, pipit_val targets) {
    const char *fn = __func__;
    pipit_val st = pipit__build(g, fn, PIPIT_OP_HEAD_XENT, 3, (pipit_val[]){h, W, targets}, NULL,
                                (int64_t[4]){1, 0, 0, 0});
    if (st.id < 0) return fail_named(g, fn, st);
    pipit_val lse, zt;
    rows_of(g, fn, st, &lse, &zt);
    pipit_val m = pipit_tp_max(g, lse);
    pipit_val s = pipit_tp_sum(g, pipit_exp(g, pipit_sub(g, lse, m)));
    pipit_val rows = pipit_sub(g, pipit_add(g, pipit_log(g, s), m), pipit_tp_sum(g, zt));
    return fail_named(g, fn, pipit_mean(g, rows));
}
