/*
 * op_cases.c — one small graph per op of the table, and per layout that
 * matters (broadcasting on either side, transposes, batched and broadcast
 * matmuls, grouped-query attention, views): the f64 gradient checks
 * (test_ops.c) and the bf16-vs-f32 checks (test_bf16.c) run the same ones.
 */
#include "op_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph.h"
#include "pipit_cp.h"
#include "pipit_moe.h"
#include "util/bf16.h"

#define F64 op_cases_dtype /* the builders' float dtype */
#define SH(...) (int64_t[]){__VA_ARGS__}

pipit_dtype op_cases_dtype = PIPIT_F64;
int op_cases_loop_mode;

static pipit_val P(pipit_graph *g, const char *n, int nd, const int64_t *s) {
    pipit_val p = pipit_param(g, n, F64, nd, s);
    if (!op_cases_loop_mode) return p;
    char name[64];
    snprintf(name, sizeof name, "ones_%s", n);
    return pipit_mul(g, p, pipit_input(g, name, F64, nd, s));
}
static pipit_val idx_input(pipit_graph *g, const char *n, int nd, const int64_t *s) {
    return pipit_input(g, n, PIPIT_I32, nd, s);
}

static pipit_val b_embed(pipit_graph *g) {
    return pipit_embed(g, P(g, "t", 2, SH(5, 3)), idx_input(g, "idx", 2, SH(2, 3)));
}
static pipit_val b_add(pipit_graph *g) { return pipit_add(g, P(g, "a", 2, SH(2, 3)), P(g, "b", 2, SH(2, 3))); }
static pipit_val b_mul(pipit_graph *g) { return pipit_mul(g, P(g, "a", 2, SH(2, 3)), P(g, "b", 2, SH(2, 3))); }
static pipit_val b_mul_same(pipit_graph *g) {
    pipit_val a = P(g, "a", 2, SH(2, 3));
    return pipit_mul(g, a, a); /* one param used twice by one op */
}
static pipit_val b_scale(pipit_graph *g) { return pipit_scale(g, P(g, "a", 2, SH(2, 3)), 0.7); }
static pipit_val b_mm_nn(pipit_graph *g) { return pipit_matmul(g, P(g, "a", 2, SH(3, 4)), P(g, "b", 2, SH(4, 2)), 0, 0); }
static pipit_val b_mm_tn(pipit_graph *g) { return pipit_matmul(g, P(g, "a", 2, SH(4, 3)), P(g, "b", 2, SH(4, 2)), 1, 0); }
static pipit_val b_mm_nt(pipit_graph *g) { return pipit_matmul(g, P(g, "a", 2, SH(3, 4)), P(g, "b", 2, SH(2, 4)), 0, 1); }
static pipit_val b_mm_tt(pipit_graph *g) { return pipit_matmul(g, P(g, "a", 2, SH(4, 3)), P(g, "b", 2, SH(2, 4)), 1, 1); }
static pipit_val b_mm_bcast(pipit_graph *g) {
    return pipit_matmul(g, P(g, "a", 3, SH(2, 3, 4)), P(g, "b", 2, SH(4, 5)), 0, 0);
}
static pipit_val b_mm_bcast_nt(pipit_graph *g) {
    return pipit_matmul(g, P(g, "a", 3, SH(2, 3, 4)), P(g, "b", 2, SH(5, 4)), 0, 1);
}
static pipit_val b_mm_bcast_tn(pipit_graph *g) { /* trans_a with a broadcast b: a is transposed first */
    return pipit_matmul(g, P(g, "a", 3, SH(2, 4, 3)), P(g, "b", 2, SH(4, 5)), 1, 0);
}
static pipit_val b_mm_bcast_tt(pipit_graph *g) {
    return pipit_matmul(g, P(g, "a", 3, SH(2, 4, 3)), P(g, "b", 2, SH(5, 4)), 1, 1);
}
static pipit_val b_mm_batched(pipit_graph *g) {
    return pipit_matmul(g, P(g, "a", 3, SH(2, 4, 3)), P(g, "b", 3, SH(2, 5, 4)), 1, 1);
}
static pipit_val b_mm_batched_nn(pipit_graph *g) {
    return pipit_matmul(g, P(g, "a", 3, SH(2, 3, 4)), P(g, "b", 3, SH(2, 4, 5)), 0, 0);
}
static pipit_val b_bias(pipit_graph *g) { return pipit_bias_add(g, P(g, "x", 3, SH(2, 3, 4)), P(g, "b", 1, SH(4))); }
static pipit_val b_ln(pipit_graph *g) {
    return pipit_layernorm(g, P(g, "x", 3, SH(2, 3, 5)), P(g, "w", 1, SH(5)), P(g, "b", 1, SH(5)), 1e-5);
}
static pipit_val b_gelu(pipit_graph *g) { return pipit_gelu(g, P(g, "x", 2, SH(3, 4))); }
static pipit_val b_attn(pipit_graph *g) { return pipit_attention(g, P(g, "qkv", 3, SH(2, 4, 18)), 3); }
static pipit_val b_xent(pipit_graph *g) {
    pipit_val logits = P(g, "x", 3, SH(2, 3, 5));
    return pipit_xent_mean(g, logits, idx_input(g, "idx", 2, SH(2, 3)));
}
static pipit_val b_sum(pipit_graph *g) { return pipit_sum(g, P(g, "x", 2, SH(2, 3))); }
static pipit_val b_mean(pipit_graph *g) { return pipit_mean(g, P(g, "x", 2, SH(2, 3))); }
static pipit_val b_fill(pipit_graph *g) {
    pipit_val s = pipit_sum(g, P(g, "x", 2, SH(2, 3)));
    return pipit__val(g, pipit__fill(g, s.id, 2, SH(3, 2), 0.5));
}
static pipit_val b_reshape(pipit_graph *g) { return pipit_reshape(g, P(g, "x", 2, SH(2, 6)), 3, SH(3, 2, 2)); }
static pipit_val b_transpose(pipit_graph *g) {
    pipit_val x = pipit_transpose(g, P(g, "x", 3, SH(2, 3, 4)), 0, 2);
    return pipit_mul(g, x, x); /* nonlinear so a wrong permutation shows */
}
static pipit_val b_yield(pipit_graph *g) { return pipit_yield(g, pipit_gelu(g, P(g, "x", 2, SH(2, 3)))); }

/* ---- the general op set ---- */

static pipit_val x23(pipit_graph *g, const char *n) { return P(g, n, 2, SH(2, 3)); }
static pipit_val b_sub(pipit_graph *g) { return pipit_sub(g, x23(g, "a"), x23(g, "b")); }
static pipit_val b_div(pipit_graph *g) { return pipit_div(g, x23(g, "a"), pipit_exp(g, x23(g, "b"))); }
/* broadcasting: a row vector, both sides, rank extension, a scalar */
static pipit_val b_add_row(pipit_graph *g) { return pipit_add(g, P(g, "a", 3, SH(2, 3, 4)), P(g, "b", 1, SH(4))); }
static pipit_val b_mul_both(pipit_graph *g) {
    return pipit_mul(g, P(g, "a", 3, SH(2, 1, 4)), P(g, "b", 2, SH(3, 1))); /* -> [2,3,4] */
}
static pipit_val b_sub_left(pipit_graph *g) { return pipit_sub(g, P(g, "a", 1, SH(3)), P(g, "b", 3, SH(2, 2, 3))); }
static pipit_val b_div_both(pipit_graph *g) {
    return pipit_div(g, P(g, "a", 2, SH(3, 1)), pipit_exp(g, P(g, "b", 3, SH(2, 1, 5))));
}
static pipit_val b_mul_scalar(pipit_graph *g) { return pipit_mul(g, P(g, "a", 0, NULL), P(g, "b", 2, SH(2, 3))); }
static pipit_val b_add_col(pipit_graph *g) { return pipit_add(g, P(g, "a", 2, SH(4, 5)), P(g, "b", 2, SH(4, 1))); }
static pipit_val b_bcast_to(pipit_graph *g) {
    pipit_val y = pipit_broadcast_to(g, P(g, "x", 2, SH(3, 1)), 3, SH(2, 3, 4));
    return pipit_mul(g, y, y);
}
static pipit_val b_neg(pipit_graph *g) { return pipit_neg(g, x23(g, "x")); }
static pipit_val b_exp(pipit_graph *g) { return pipit_exp(g, x23(g, "x")); }
static pipit_val b_log(pipit_graph *g) { /* log of a positive value: log(e^a + e^b) */
    return pipit_log(g, pipit_add(g, pipit_exp(g, x23(g, "a")), pipit_exp(g, x23(g, "b"))));
}
static pipit_val b_sqrt(pipit_graph *g) { return pipit_sqrt(g, pipit_exp(g, x23(g, "x"))); }
static pipit_val b_rsqrt(pipit_graph *g) { return pipit_rsqrt(g, pipit_exp(g, x23(g, "x"))); }
static pipit_val b_abs(pipit_graph *g) { return pipit_abs(g, P(g, "x", 2, SH(3, 4))); }
static pipit_val b_relu(pipit_graph *g) { return pipit_relu(g, P(g, "x", 2, SH(3, 4))); }
static pipit_val b_silu(pipit_graph *g) { return pipit_silu(g, P(g, "x", 2, SH(3, 4))); }
static pipit_val b_sigmoid(pipit_graph *g) { return pipit_sigmoid(g, P(g, "x", 2, SH(3, 4))); }
static pipit_val b_tanh(pipit_graph *g) { return pipit_tanh(g, P(g, "x", 2, SH(3, 4))); }
static pipit_val x234(pipit_graph *g) { return P(g, "x", 3, SH(2, 3, 4)); }
static pipit_val b_rsum_last(pipit_graph *g) { return pipit_reduce_sum(g, x234(g), -1, 0); }
static pipit_val b_rsum_first(pipit_graph *g) { return pipit_reduce_sum(g, x234(g), 0, 1); }
static pipit_val b_rmean_mid(pipit_graph *g) { return pipit_reduce_mean(g, x234(g), 1, 0); }
static pipit_val b_rmax_mid(pipit_graph *g) { return pipit_reduce_max(g, x234(g), 1, 1); }
static pipit_val b_rmax_last(pipit_graph *g) { return pipit_reduce_max(g, x234(g), -1, 0); }
static pipit_val b_softmax(pipit_graph *g) { return pipit_softmax(g, P(g, "x", 3, SH(2, 3, 5))); }
static pipit_val b_log_softmax(pipit_graph *g) { return pipit_log_softmax(g, P(g, "x", 3, SH(2, 3, 5))); }
static pipit_val b_slice_mid(pipit_graph *g) { return pipit_slice(g, x234(g), 1, 1, 2); } /* a copy */
static pipit_val b_slice_lead(pipit_graph *g) { return pipit_slice(g, P(g, "x", 3, SH(4, 3, 2)), 0, 1, 2); } /* a view */
static pipit_val b_slice_neg(pipit_graph *g) { return pipit_slice(g, x234(g), -1, 3, 1); }
static pipit_val b_concat_mid(pipit_graph *g) {
    pipit_val xs[3] = {P(g, "a", 3, SH(2, 1, 3)), P(g, "b", 3, SH(2, 2, 3)), P(g, "c", 3, SH(2, 3, 3))};
    return pipit_concat(g, 3, xs, 1);
}
static pipit_val b_concat_lead(pipit_graph *g) { /* its gradients are views */
    pipit_val xs[2] = {P(g, "a", 2, SH(2, 3)), P(g, "b", 2, SH(1, 3))};
    return pipit_concat(g, 2, xs, 0);
}
static pipit_val b_concat_many(pipit_graph *g) { /* 6 inputs: two chained nodes */
    pipit_val xs[6];
    char n[16];
    for (int i = 0; i < 6; i++) {
        snprintf(n, sizeof n, "x%d", i);
        xs[i] = P(g, n, 2, SH(2, 1 + i % 2));
    }
    return pipit_concat(g, 6, xs, -1);
}
static pipit_val b_split(pipit_graph *g) { /* pieces put back in another order */
    pipit_val s[3];
    pipit_split(g, P(g, "x", 2, SH(3, 5)), -1, 3, SH(1, 2, 2), s);
    pipit_val r[3] = {s[2], pipit_mul(g, s[0], s[0]), s[1]};
    return pipit_concat(g, 3, r, 1);
}
static pipit_val b_gather(pipit_graph *g) {
    return pipit_gather(g, P(g, "t", 3, SH(5, 2, 3)), idx_input(g, "idx", 2, SH(2, 2)));
}
static pipit_val b_gather_1d(pipit_graph *g) { return pipit_gather(g, P(g, "t", 1, SH(5)), idx_input(g, "idx", 1, SH(4))); }
static pipit_val b_rmsnorm(pipit_graph *g) {
    return pipit_rmsnorm(g, P(g, "x", 3, SH(2, 3, 5)), P(g, "w", 1, SH(5)), 1e-5);
}
static pipit_val b_rope(pipit_graph *g) { return pipit_rope(g, P(g, "x", 3, SH(2, 3, 8)), 2, 10000.0); }
static pipit_val b_rope_ex(pipit_graph *g) { /* [B,T,H,D], D = 6, positions from 5 */
    return pipit_rope_ex(g, P(g, "x", 4, SH(1, 5, 2, 6)), 2, 500000.0, 5);
}
static pipit_val b_rope_llama3(pipit_graph *g) { /* D = 8, theta 500: one frequency in each llama3 band */
    return pipit_rope_scaled(g, P(g, "x", 3, SH(2, 6, 16)), 2, 500.0, 3, &(pipit_rope_scaling){8, 1, 4, 64});
}
/* A cast to x's own dtype (a copy: f64 differences cannot see a cast that
 * rounds); casts to bf16 are checked against the f32 program in
 * tests/test_bf16.c. */
static pipit_val b_cast(pipit_graph *g) {
    pipit_val x = x23(g, "x");
    pipit_val c = pipit__val(g, x.id < 0 ? -1 : pipit__node_add(g, PIPIT_OP_CAST, 1, &x.id, NULL, SH(F64, 0, 0, 0)));
    return pipit_mul(g, c, c);
}
/* q [2,3,Hq*2]; k, v [2,S,Hkv*2] */
static pipit_val attn_case(pipit_graph *g, int hq, int hkv, int causal, int64_t S) {
    pipit_val q = P(g, "q", 3, SH(2, 3, hq * 2)), k = P(g, "k", 3, SH(2, S, hkv * 2)), v = P(g, "v", 3, SH(2, S, hkv * 2));
    return pipit_attention_qkv(g, q, k, v, &(pipit_attention_opts){hq, hkv, causal, 0});
}
static pipit_val b_attn_mha(pipit_graph *g) { return attn_case(g, 2, 2, 1, 3); }
static pipit_val b_attn_gqa2(pipit_graph *g) { return attn_case(g, 4, 2, 1, 3); }
static pipit_val b_attn_mqa(pipit_graph *g) { return attn_case(g, 4, 1, 0, 3); }
static pipit_val b_attn_cross(pipit_graph *g) { return attn_case(g, 4, 2, 0, 5); } /* S != T */
/* Only k is a param: its gradient, a view into the middle of the
 * backward's [dq | dk | dv], is that buffer's only reader, and must not
 * become the target the whole buffer is written into. */
static pipit_val b_attn_k_only(pipit_graph *g) {
    pipit_val q = pipit_input(g, "q", F64, 3, SH(1, 3, 4)), v = pipit_input(g, "v", F64, 3, SH(1, 3, 2));
    pipit_val k = pipit_param(g, "k", F64, 3, SH(1, 3, 2));
    return pipit_attention_qkv(g, q, k, v, &(pipit_attention_opts){2, 1, 1, 0});
}
/* Packed documents: qkv [2,5,(Hq+2Hkv)*2] per row q | k | v, doc ids
 * "doc" [2,5] filled 0 0 0 1 1 per sequence (op_cases_fill_feeds). */
static pipit_val doc_case(pipit_graph *g, int hq, int hkv, int causal) {
    pipit_val qkv = P(g, "qkv", 3, SH(2, 5, (hq + 2 * hkv) * 2));
    return pipit_attention_docs(g, qkv, idx_input(g, "doc", 2, SH(2, 5)), &(pipit_attention_opts){hq, hkv, causal, 0});
}
static pipit_val b_attn_doc(pipit_graph *g) { return doc_case(g, 2, 2, 1); }
/* Context parallelism at C = 1 (the gradient checks run one rank): rope_cp
 * and attention_cp over this rank's two chunks (the whole sequence), the
 * gather/scatter pair an identity; tests/test_cp.c checks C > 1. */
static pipit_val cp_case(pipit_graph *g, int hq, int hkv, int causal) {
    pipit_val q = pipit_rope_cp(g, P(g, "q", 3, SH(2, 4, hq * 2)), hq, 10000, NULL);
    pipit_val k = pipit_rope_cp(g, P(g, "k", 3, SH(2, 4, hkv * 2)), hkv, 10000, NULL);
    return pipit_attention_cp(g, q, k, P(g, "v", 3, SH(2, 4, hkv * 2)), &(pipit_attention_opts){hq, hkv, causal, 0});
}
static pipit_val b_attn_cp(pipit_graph *g) { return cp_case(g, 2, 1, 1); }
/* Packed documents under CP at C = 1: doc ids "doc" [2, 6] (0 0 0 1 1 1). */
static pipit_val cp_doc_case(pipit_graph *g, int hq, int hkv, int causal) {
    pipit_val q = P(g, "q", 3, SH(2, 6, hq * 2)), k = P(g, "k", 3, SH(2, 6, hkv * 2));
    return pipit_attention_cp_docs(g, q, k, P(g, "v", 3, SH(2, 6, hkv * 2)), idx_input(g, "doc", 2, SH(2, 6)),
                                   &(pipit_attention_opts){hq, hkv, causal, 0});
}
static pipit_val b_attn_cp_doc(pipit_graph *g) { return cp_doc_case(g, 4, 2, 1); }
static pipit_val b_attn_cp_doc_full(pipit_graph *g) { return cp_doc_case(g, 2, 2, 0); }
static pipit_val b_attn_cp_full(pipit_graph *g) { return cp_case(g, 2, 2, 0); }
static pipit_val b_attn_doc_gqa(pipit_graph *g) { return doc_case(g, 4, 2, 1); }
static pipit_val b_attn_doc_full(pipit_graph *g) { return doc_case(g, 2, 1, 0); }

/* Tensor parallelism at T = 1 (the collectives are identities; tests/test_tp.c
 * checks them over several ranks): Megatron's f and g around a product, the
 * vocab-parallel cross-entropy, and an embedding of a row-sharded table. */
static pipit_val b_tp_copy_sum(pipit_graph *g) {
    pipit_val x = pipit_tp_copy(g, P(g, "x", 2, SH(2, 3)));
    return pipit_tp_sum(g, pipit_matmul(g, pipit_gelu(g, x), P(g, "w", 2, SH(3, 4)), 0, 0));
}
/* Sequence parallelism at T = 1 (identities; tests/test_sp.c checks T > 1). */
static pipit_val b_sp_trio(pipit_graph *g) {
    pipit_val x = pipit_sp_split(g, P(g, "x", 3, SH(2, 4, 3)), 1);
    return pipit_sp_scatter(g, pipit_gelu(g, pipit_sp_gather(g, x, -2)), 1);
}
static pipit_val b_tp_xent(pipit_graph *g) {
    return pipit_tp_xent_mean(g, P(g, "x", 3, SH(2, 3, 5)), idx_input(g, "idx", 2, SH(2, 3)));
}
/* The fused head + cross-entropy (d = 5, V = 7), and its vocab-parallel
 * form at T = 1 over a row-sharded W. */
static pipit_val b_head_xent(pipit_graph *g) {
    return pipit_head_xent_mean(g, P(g, "h", 3, SH(2, 3, 5)), P(g, "w", 2, SH(7, 5)), idx_input(g, "idx", 2, SH(2, 3)));
}
static pipit_val b_tp_head_xent(pipit_graph *g) {
    pipit_val w = pipit_param_sharded(g, "w", F64, 2, SH(7, 5), 0, 1);
    return pipit_tp_head_xent_mean(g, pipit_tp_copy(g, P(g, "h", 2, SH(6, 5))), w, idx_input(g, "idx", 1, SH(6)));
}
static pipit_val b_embed_vp(pipit_graph *g) {
    pipit_val t = pipit_param_sharded(g, "t", F64, 2, SH(5, 3), 0, 1); /* read by the embedding itself */
    return pipit_embed(g, t, idx_input(g, "idx", 2, SH(2, 3)));
}

/* Mixture of experts (pipit_moe.h): top-k values, and a routed layer of
 * 5 tokens x 2 choices over 3 experts of 2 slots (4 choices dropped):
 * top-k of the router logits, softmax over the chosen, the slots,
 * dispatch, an elementwise expert and the weighted combine -- or the
 * weights applied at the dispatch (its weight gradient), a linear expert
 * there (bf16 vs f32: one rounding fewer, within the 2-ulp bound). */
static pipit_val b_topk(pipit_graph *g) { return pipit_topk(g, P(g, "x", 3, SH(2, 3, 5)), 3, NULL); }
static pipit_val moe_layer(pipit_graph *g, int weigh_at_dispatch) {
    pipit_val idx, x = P(g, "x", 2, SH(5, 4));
    pipit_val w = pipit_softmax(g, pipit_topk(g, P(g, "r", 2, SH(5, 3)), 2, &idx));
    pipit_val slots = pipit_moe_slots(g, idx, 3, 2);
    pipit_val xe = pipit_moe_dispatch(g, x, slots, 3, 2, weigh_at_dispatch ? &w : NULL);
    pipit_val ye = weigh_at_dispatch ? pipit_scale(g, xe, 0.5) : pipit_mul(g, xe, xe); /* bf16: rounded once */
    return pipit_moe_combine(g, ye, slots, weigh_at_dispatch ? NULL : &w);
}
static pipit_val b_moe_combine(pipit_graph *g) { return moe_layer(g, 0); }
static pipit_val b_moe_dispatch_w(pipit_graph *g) { return moe_layer(g, 1); }
/* Expert parallelism's all-to-all pair at E = 1 (identities; tests/test_ep.c
 * checks them over EP groups), around an expert param. */
static pipit_val b_ep_a2a(pipit_graph *g) {
    pipit_val xe = pipit_ep_dispatch(g, pipit_mul(g, P(g, "x", 3, SH(2, 3, 4)), P(g, "y", 3, SH(2, 3, 4))));
    pipit_val w = pipit_param_experts(g, "w", F64, 3, SH(2, 4, 5));
    return pipit_ep_combine(g, pipit_matmul(g, xe, w, 0, 0));
}

const op_case op_cases[] = {
    {"topk", b_topk}, {"moe_combine", b_moe_combine}, {"moe_dispatch_weighted", b_moe_dispatch_w},
    {"ep_a2a", b_ep_a2a},
    {"embed", b_embed},         {"add", b_add},           {"mul", b_mul},
    {"mul_same", b_mul_same},   {"scale", b_scale},       {"matmul_nn", b_mm_nn},
    {"matmul_tn", b_mm_tn},     {"matmul_nt", b_mm_nt},   {"matmul_tt", b_mm_tt},
    {"matmul_bcast", b_mm_bcast}, {"matmul_bcast_nt", b_mm_bcast_nt},
    {"matmul_bcast_tn", b_mm_bcast_tn}, {"matmul_bcast_tt", b_mm_bcast_tt},
    {"matmul_batched", b_mm_batched}, {"matmul_batched_nn", b_mm_batched_nn},
    {"bias_add", b_bias},       {"layernorm", b_ln},      {"gelu", b_gelu},
    {"attention", b_attn},      {"xent_mean", b_xent},    {"sum", b_sum},
    {"mean", b_mean},           {"fill", b_fill},         {"reshape", b_reshape},
    {"transpose", b_transpose}, {"yield", b_yield},
    {"sub", b_sub},             {"div", b_div},           {"add_row", b_add_row},
    {"mul_both_sides", b_mul_both}, {"sub_rank_extend", b_sub_left}, {"div_both_sides", b_div_both},
    {"mul_scalar", b_mul_scalar}, {"add_col", b_add_col}, {"broadcast_to", b_bcast_to},
    {"neg", b_neg},             {"exp", b_exp},           {"log", b_log},
    {"sqrt", b_sqrt},           {"rsqrt", b_rsqrt},       {"abs", b_abs},
    {"relu", b_relu},           {"silu", b_silu},         {"sigmoid", b_sigmoid},
    {"tanh", b_tanh},           {"reduce_sum_last", b_rsum_last}, {"reduce_sum_first_keep", b_rsum_first},
    {"reduce_mean_mid", b_rmean_mid}, {"reduce_max_mid_keep", b_rmax_mid}, {"reduce_max_last", b_rmax_last},
    {"softmax", b_softmax},     {"log_softmax", b_log_softmax}, {"slice_mid", b_slice_mid},
    {"slice_lead_view", b_slice_lead}, {"slice_neg_axis", b_slice_neg}, {"concat_mid", b_concat_mid},
    {"concat_lead", b_concat_lead}, {"concat_many", b_concat_many}, {"split", b_split},
    {"gather", b_gather},       {"gather_1d", b_gather_1d}, {"rmsnorm", b_rmsnorm},
    {"rope", b_rope},           {"rope_ex_4d", b_rope_ex}, {"rope_llama3", b_rope_llama3}, {"attention_mha", b_attn_mha},
    {"attention_gqa2", b_attn_gqa2}, {"attention_mqa_full", b_attn_mqa}, {"attention_cross", b_attn_cross},
    {"attention_k_only", b_attn_k_only}, {"cast", b_cast}, {"tp_copy_sum", b_tp_copy_sum}, {"sp_trio", b_sp_trio},
    {"tp_xent_mean", b_tp_xent}, {"embed_vocab_parallel", b_embed_vp}, {"head_xent_mean", b_head_xent},
    {"tp_head_xent_mean", b_tp_head_xent}, {"attention_doc", b_attn_doc}, {"attention_doc_gqa", b_attn_doc_gqa},
    {"attention_doc_full", b_attn_doc_full}, {"attention_cp", b_attn_cp}, {"attention_cp_full", b_attn_cp_full},
    {"attention_cp_doc", b_attn_cp_doc}, {"attention_cp_doc_full", b_attn_cp_doc_full},
};
const int op_ncases = (int)(sizeof op_cases / sizeof op_cases[0]);


/* The graph's inputs (not '@' leaves): i32 indices in [0, 3), "ones_*"
 * ones, the rest uniform in [-1, 1) from `seed` (rounded to bf16 when
 * round_bf16, so an f32 and a bf16 program see the same values). */
void op_cases_fill_feeds(pipit_graph *g, uint64_t seed, int round_bf16, pipit_feed *feeds, int *nfeed, void **bufs) {
    *nfeed = 0;
    for (int32_t i = 0; i < g->n; i++) {
        const pipit__node *n = &g->nodes[i];
        if (n->op != PIPIT_OP_INPUT || n->name[0] == '@') continue;
        int64_t cnt = pipit__node_numel(n);
        void *b = malloc(8 * (size_t)(cnt ? cnt : 1));
        for (int64_t k = 0; k < cnt; k++) {
            if (n->dtype == PIPIT_I32 && strncmp(n->name, "doc", 3) == 0) { /* document ids: two per row */
                int64_t T = n->shape[n->ndim - 1];
                ((int32_t *)b)[k] = (int32_t)(k % T * 2 / T);
                continue;
            }
            if (n->dtype == PIPIT_I32) {
                ((int32_t *)b)[k] = (int32_t)((k * 7 + 3) % 3);
                continue;
            }
            double v = strncmp(n->name, "ones_", 5) == 0 ? 1.0 : gc_rand(&seed);
            if (round_bf16) v = pipit__bf16_to_f32(pipit__bf16_from_f64(v));
            if (n->dtype == PIPIT_F32) ((float *)b)[k] = (float)v;
            else ((double *)b)[k] = v;
        }
        bufs[*nfeed] = b;
        feeds[*nfeed] = (pipit_feed){n->name, b, pipit__node_bytes(n)};
        (*nfeed)++;
    }
}
