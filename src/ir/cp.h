/*
 * cp.h — context parallelism in the graph (ir/cp.c; docs/architecture.md
 * "Context parallelism"). The graph describes ONE of a context group's C
 * ranks: its sequence inputs hold S/C tokens, chunks c and 2C-1-c of the
 * sequence cut into 2C chunks of L = S/(2C) (Llama 3's load-balanced
 * causal split). The five ops of the op table, C = iattr of each:
 *   CP_GATHER(x [B, 2L, ...]) -> [B, S, ...]: the group's all-gather along
 *       axis 1, the rows put in GLOBAL sequence order (member k's rows
 *       [0, L) are chunk k, its rows [L, 2L) chunk 2C-1-k). C = iattr[0].
 *       Any dtype. VJP: CP_SCATTER.
 *   CP_SCATTER(dy [B, S, ...]) -> [B, 2L, ...]: the inverse permutation,
 *       then the reduce-scatter: member c gets the rank-order sum of every
 *       member's rows of its own two chunks. Float only. VJP: CP_GATHER.
 *   ROPE_CP(x [B, 2L, H*D] or [B, 2L, H, D]): ROPE's attributes, with
 *       iattr[1] = C in place of the position offset: row i of member c is
 *       at global position chunk(i) * L + i mod L. VJP: itself, inverse.
 *   ATTENTION_CP(q [B, 2L, Hq*D], k [B, S, Hkv*D], v [B, S, Hkv*D]) ->
 *       [B, 2L, Hq*D]: k and v in global order (CP_GATHER's output);
 *       Hq = iattr[0], Hkv = iattr[1], causal iattr[2] (query at global
 *       position t sees keys 0..t), C = iattr[3], scale fattr[0].
 *   ATTN_CP_D(q, k, v, dout) -> [dq | dk | dv] flat (as attn_qkv_d).
 * The collectives are OPF_COLL (runtime/cp.c: INS_TP instructions over the
 * C replicas of the group); ROPE_CP and ATTENTION_CP read the rank's index
 * c from the kernel context (pipit__kctx.cp). At C = 1 every one of them
 * is its plain counterpart (the gradient checks of tests/op_cases.c run
 * them so).
 */
#ifndef PIPIT_IR_CP_H
#define PIPIT_IR_CP_H

#include "ir/graph.h"

/* The global row of member c's local row i (of 2L), with L rows a chunk. */
static inline int64_t pipit__cp_row(int64_t i, int64_t L, int C, int c) {
    return i < L ? (int64_t)c * L + i : (int64_t)(2 * C - 1 - c) * L + (i - L);
}
/* The graph's C (1 when never set). */
static inline int pipit__graph_cp(const pipit_graph *g) { return g->cp > 0 ? g->cp : 1; }

pipit_status pipit__op_cp_gather_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_cp_gather_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);
pipit_status pipit__op_cp_scatter_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_cp_scatter_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);
pipit_status pipit__op_rope_cp_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_rope_cp_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);
pipit_status pipit__op_attention_cp_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_attention_cp_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);
pipit_status pipit__op_attn_cp_d_shape(const pipit_graph *g, pipit__node *n);

#define op_CP_GATHER_shape pipit__op_cp_gather_shape
#define op_CP_GATHER_vjp pipit__op_cp_gather_vjp
#define op_CP_SCATTER_shape pipit__op_cp_scatter_shape
#define op_CP_SCATTER_vjp pipit__op_cp_scatter_vjp
#define op_ROPE_CP_shape pipit__op_rope_cp_shape
#define op_ROPE_CP_vjp pipit__op_rope_cp_vjp
#define op_ATTENTION_CP_shape pipit__op_attention_cp_shape
#define op_ATTENTION_CP_vjp pipit__op_attention_cp_vjp
#define op_ATTN_CP_D_shape pipit__op_attn_cp_d_shape
#define op_ATTN_CP_D_vjp NULL

/* Packed documents under CP (ir/cp_doc.c; pipit_attention_cp_docs):
 *   ATTENTION_CP_DOC(q [B, 2L, Hq*D], kv [B, S, 2*Hkv*D], doc i32 [B, S])
 *       -> [B, 2L, Hq*D]: kv the gathered rows k | v (CP_GATHER of their
 *       concat), doc the gathered document ids (non-decreasing along S:
 *       the kernel refuses a decrease); a query at global position t sees
 *       the keys of its own document only (causal: up to t). iattr and
 *       fattr as ATTENTION_CP's. No gradient for doc.
 *   ATTN_CP_DOC_D(q, kv, dout, doc) -> [dq | dkv] flat. */
pipit_status pipit__op_attention_cp_doc_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_attention_cp_doc_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);
pipit_status pipit__op_attn_cp_doc_d_shape(const pipit_graph *g, pipit__node *n);
#define op_ATTENTION_CP_DOC_shape pipit__op_attention_cp_doc_shape
#define op_ATTENTION_CP_DOC_vjp pipit__op_attention_cp_doc_vjp
#define op_ATTN_CP_DOC_D_shape pipit__op_attn_cp_doc_d_shape
#define op_ATTN_CP_DOC_D_vjp NULL

/* Llama's rotary embedding under CP (x as pipit_rope_scaled's, no
 * position offset): ROPE_CP at the graph's C. */
pipit_val pipit__rope_cp(pipit_graph *g, pipit_val x, int heads, double theta, const double scaling_f[3],
                         int64_t scaling_orig);

#endif
