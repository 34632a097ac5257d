/*
 * test_cuda_ops.c — backend parity (the idea of ggml's test-backend-ops):
 * every op of the op table runs on the CUDA backend and on the CPU backend
 * from the same random inputs, and the results must agree.
 *
 * Each case builds a small graph of inputs and one or a few ops, in f32,
 * f64 and bf16, at several shapes (odd sizes, sizes that are not multiples of any
 * tile or of a warp, T and S not multiples of the attention tiles, head
 * sizes on every attention path, every broadcast and reduction path). The
 * harness then emits the VJP of every forward node (each with its own
 * random dout input), so every backward op runs too.
 * Nodes run in graph order: the CPU kernel computes the reference, and the
 * CUDA kernel gets the CPU's values of the node's inputs (uploaded through
 * pipit__backend_cuda), so each op is compared alone, without the errors of
 * the ops before it. Per node:
 *   - relative error max|cuda - cpu| / max|cpu| <= 1e-5 in f32 and 1e-11
 *     in f64 (GEMMs are fp32 unless TF32 is turned on; a TF32 GEMM is held
 *     to TOL_TF32 = 5e-3: 10 mantissa bits, unit roundoff 2^-11);
 *   - bf16 (the CPU backend's bf16 kernels as the reference; bf16 outputs,
 *     and the fp32 losses and sums of bf16 values): the CPU's bits exactly
 *     where both compute the same formula in the same order with one
 *     rounding (bf16_bitwise: copies, cast, max, + - * /, scale, bias,
 *     neg, abs, relu, sqrt); elsewhere every element within one bf16 ulp
 *     of the CPU's (at the larger of the two magnitudes) plus the fp32
 *     bound 1e-5 * max|cpu|: both compute in fp32 (or double), agree to
 *     that, and round once -- a difference of fp32 rounding can move the
 *     bf16 result by one ulp, no more (head_xent_bwd's output starts with
 *     fp32 partial gradients in bf16 slots: those are held to the fp32
 *     bound, its bf16 dW to this one);
 *   - thread ith = 1 of a 2-thread team launches nothing (the output keeps
 *     its 0xff fill), thread 0 writes every element (no NaN left);
 *   - a second run gives bitwise-identical output (determinism).
 * The coverage test needs no GPU: the CUDA run table has a kernel exactly
 * where the CPU table has one, and every op that runs is exercised here.
 * Without a CUDA device the parity tests report themselves skipped.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cuda/cuda_backend.h"
#include "ir/graph.h"
#include "pipit_cp.h"
#include "pipit_moe.h"
#include "test.h"
#include "util/bf16.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

#define TOL_F32 1e-5
#define TOL_F64 1e-11
#define TOL_TF32 5e-3 /* a GEMM with TF32 tensor-core math (--tf32) */

/* ------------------------------------------------------------ the cases */

/* A case builds its forward graph from inputs in dtype dt. I32 inputs are
 * named "idx<N>": random indices in [0, N). */
typedef struct {
    const char *name;
    void (*build)(pipit_graph *g, pipit_dtype dt);
} parity_case;

static pipit_val in_f(pipit_graph *g, pipit_dtype dt, const char *name, int nd, const int64_t *s) {
    return pipit_input(g, name, dt, nd, s);
}
static pipit_val in_idx(pipit_graph *g, int range, const char *tag, int nd, const int64_t *s) {
    char name[64];
    snprintf(name, sizeof name, "idx%d_%s", range, tag);
    return pipit_input(g, name, PIPIT_I32, nd, s);
}

static void c_embed(pipit_graph *g, pipit_dtype dt) {
    pipit_embed(g, in_f(g, dt, "t", 2, SH(37, 13)), in_idx(g, 37, "a", 2, SH(3, 7)));
    /* few rows, many lookups (long runs per index), C over one 128 block */
    pipit_embed(g, in_f(g, dt, "t2", 2, SH(5, 130)), in_idx(g, 5, "b", 2, SH(5, 41)));
}
static void c_add_mul_scale(pipit_graph *g, pipit_dtype dt) {
    pipit_val a = in_f(g, dt, "a", 3, SH(3, 5, 7)), b = in_f(g, dt, "b", 3, SH(3, 5, 7));
    pipit_add(g, a, b);
    pipit_mul(g, a, b);
    pipit_scale(g, in_f(g, dt, "c", 1, SH(1001)), 0.37);
    pipit_mul(g, in_f(g, dt, "d", 2, SH(129, 3)), in_f(g, dt, "e", 2, SH(129, 3)));
}
static void c_matmul(pipit_graph *g, pipit_dtype dt) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char na[32], nb[32];
            snprintf(na, sizeof na, "a%d%d", ta, tb);
            snprintf(nb, sizeof nb, "b%d%d", ta, tb);
            pipit_val a = in_f(g, dt, na, 2, ta ? SH(19, 13) : SH(13, 19));
            pipit_val b = in_f(g, dt, nb, 2, tb ? SH(17, 19) : SH(19, 17));
            pipit_matmul(g, a, b, ta, tb);
        }
    pipit_matmul(g, in_f(g, dt, "ab", 3, SH(2, 5, 7)), in_f(g, dt, "bb", 2, SH(7, 3)), 0, 0); /* broadcast */
    pipit_matmul(g, in_f(g, dt, "abt", 3, SH(2, 5, 7)), in_f(g, dt, "bbt", 2, SH(3, 7)), 0, 1);
    pipit_matmul(g, in_f(g, dt, "ac", 3, SH(3, 6, 5)), in_f(g, dt, "bc", 3, SH(3, 5, 9)), 0, 0); /* batched */
    pipit_matmul(g, in_f(g, dt, "ad", 3, SH(2, 5, 6)), in_f(g, dt, "bd", 3, SH(2, 9, 5)), 1, 1);
    pipit_matmul(g, in_f(g, dt, "ae", 2, SH(70, 130)), in_f(g, dt, "be", 2, SH(130, 67)), 0, 0);
}
static void c_bias_add(pipit_graph *g, pipit_dtype dt) {
    pipit_bias_add(g, in_f(g, dt, "x", 3, SH(4, 3, 33)), in_f(g, dt, "b", 1, SH(33)));
    /* 3000 rows: the column sums of its VJP use 12 row chunks */
    pipit_bias_add(g, in_f(g, dt, "x2", 2, SH(3000, 40)), in_f(g, dt, "b2", 1, SH(40)));
}
static void c_layernorm(pipit_graph *g, pipit_dtype dt) {
    pipit_layernorm(g, in_f(g, dt, "x", 3, SH(2, 7, 45)), in_f(g, dt, "w", 1, SH(45)), in_f(g, dt, "b", 1, SH(45)),
                    1e-5);
    pipit_layernorm(g, in_f(g, dt, "x2", 2, SH(1100, 70)), in_f(g, dt, "w2", 1, SH(70)),
                    in_f(g, dt, "b2", 1, SH(70)), 1e-5);
    pipit_layernorm(g, in_f(g, dt, "x3", 2, SH(5, 768)), in_f(g, dt, "w3", 1, SH(768)),
                    in_f(g, dt, "b3", 1, SH(768)), 1e-3);
    pipit_layernorm(g, in_f(g, dt, "x4", 2, SH(9, 1)), in_f(g, dt, "w4", 1, SH(1)), in_f(g, dt, "b4", 1, SH(1)),
                    1e-5);
}
static void c_gelu(pipit_graph *g, pipit_dtype dt) {
    pipit_gelu(g, pipit_scale(g, in_f(g, dt, "x", 2, SH(37, 41)), 4.0)); /* x in [-4, 4) */
}
/* (B, T, heads, D) covering every attention path: tiled with D padded to
 * 32 / 64 / 128, the simple kernels (f32 D > 128, f64 D > 64), T = 1, and
 * T around and across the tile sizes (16, 32, 64). */
static const int64_t attn_shapes[][4] = {
    {2, 5, 3, 6}, {1, 70, 2, 64}, {2, 33, 3, 32}, {1, 40, 2, 100}, {1, 17, 2, 130},
    {1, 1, 1, 8}, {1, 129, 1, 64}, {3, 64, 2, 17},
};
static void c_attention(pipit_graph *g, pipit_dtype dt) {
    for (size_t i = 0; i < sizeof attn_shapes / sizeof attn_shapes[0]; i++) {
        const int64_t *s = attn_shapes[i];
        char name[16];
        snprintf(name, sizeof name, "qkv%zu", i);
        pipit_val qkv = in_f(g, dt, name, 3, SH(s[0], s[1], 3 * s[2] * s[3]));
        pipit_attention(g, pipit_scale(g, qkv, 2.0), (int)s[2]); /* scores of a few units */
    }
}
static void c_xent(pipit_graph *g, pipit_dtype dt) {
    pipit_xent_mean(g, pipit_scale(g, in_f(g, dt, "x", 3, SH(3, 5, 37)), 3.0), in_idx(g, 37, "t", 2, SH(3, 5)));
    pipit_xent_mean(g, pipit_scale(g, in_f(g, dt, "x2", 2, SH(2, 1000)), 3.0), in_idx(g, 1000, "t2", 1, SH(2)));
}
static void c_sum_fill(pipit_graph *g, pipit_dtype dt) {
    pipit_sum(g, in_f(g, dt, "x", 2, SH(7, 9)));
    pipit_mean(g, in_f(g, dt, "y", 1, SH(5000)));
    pipit_val s = pipit_sum(g, in_f(g, dt, "z", 2, SH(2, 3)));
    if (dt == PIPIT_BF16) s = pipit_cast(g, s, PIPIT_BF16); /* a sum of bf16 values is fp32: fill a bf16 scalar too */
    pipit__fill(g, s.id, 3, SH(3, 5, 2), 0.5);
}
static void c_permute(pipit_graph *g, pipit_dtype dt) {
    pipit_transpose(g, in_f(g, dt, "x", 3, SH(2, 3, 4)), 0, 2);
    pipit_transpose(g, in_f(g, dt, "y", 2, SH(33, 7)), 0, 1);
    pipit_val z = in_f(g, dt, "z", 4, SH(2, 3, 5, 7));
    pipit__node_add(g, PIPIT_OP_PERMUTE, 1, &z.id, NULL, SH(2, 0, 3, 1));
    pipit__node_add(g, PIPIT_OP_PERMUTE, 1, &z.id, NULL, SH(3, 2, 1, 0));
}
/* Tensor parallelism as rank t = 1 of 2 (case_shard): a vocab-parallel
 * embedding of its rows [37, 74) and the vocab-parallel cross-entropy of
 * its classes [37, 74) of 74, indices over the whole vocabulary (about half
 * another rank's). The collectives run as the identity of a one-rank
 * group (they are runtime instructions, no kernel). */
static int case_shard; /* kctx.shard of every kernel of the case */
static void c_tensor_parallel(pipit_graph *g, pipit_dtype dt) {
    case_shard = 1;
    pipit_val t = in_f(g, dt, "t", 2, SH(37, 13)), idx = in_idx(g, 74, "a", 2, SH(3, 7));
    pipit__node_add(g, PIPIT_OP_EMBED, 2, (int32_t[]){t.id, idx.id}, NULL, SH(0, 1, 0, 0));
    pipit_tp_xent_mean(g, pipit_scale(g, in_f(g, dt, "x", 3, SH(3, 5, 37)), 3.0), in_idx(g, 74, "y", 2, SH(3, 5)));
}
static void c_alias(pipit_graph *g, pipit_dtype dt) {
    /* reshape and yield run nothing: the op after them reads their root */
    pipit_val r = pipit_reshape(g, in_f(g, dt, "x", 2, SH(4, 6)), 3, SH(2, 3, 4));
    pipit_gelu(g, pipit_yield(g, r));
}

/* Same shapes (the flat kernels) and every broadcast path: a trailing
 * vector, size-1 axes on both sides, a [1,1] "scalar"; the gradients sum
 * over broadcast axes with the last axis kept (the column-sum tree, 600
 * rows: 3 row chunks) or summed (a warp per output, 100 inputs each). */
static void c_binary(pipit_graph *g, pipit_dtype dt) {
    pipit_val a = in_f(g, dt, "a", 3, SH(3, 5, 7)), b = in_f(g, dt, "b", 3, SH(3, 5, 7));
    pipit_sub(g, a, b);
    pipit_div(g, a, pipit_exp(g, b)); /* denominators in [1/e, e) */
    pipit_sub(g, a, in_f(g, dt, "v", 1, SH(7)));
    pipit_mul(g, in_f(g, dt, "c", 3, SH(4, 1, 6)), in_f(g, dt, "d", 2, SH(3, 1)));
    pipit_add(g, in_f(g, dt, "e", 2, SH(1, 1)), in_f(g, dt, "f", 2, SH(5, 9)));
    pipit_div(g, in_f(g, dt, "h", 2, SH(5, 9)), pipit_exp(g, in_f(g, dt, "i", 1, SH(9))));
    pipit_add(g, in_f(g, dt, "j", 2, SH(600, 40)), in_f(g, dt, "k", 1, SH(40)));
    pipit_mul(g, in_f(g, dt, "l", 2, SH(64, 100)), in_f(g, dt, "m", 2, SH(64, 1)));
}
/* Axis sums and means (sum_to), an explicit broadcast_to, and max along
 * every kind of axis (first, middle, last) with its argmax gradient. */
static void c_reduce(pipit_graph *g, pipit_dtype dt) {
    pipit_val x = in_f(g, dt, "x", 3, SH(4, 6, 35));
    pipit_reduce_sum(g, x, 1, 0);
    pipit_reduce_mean(g, x, -1, 1);
    pipit_reduce_sum(g, x, 0, 1);
    pipit_reduce_mean(g, in_f(g, dt, "y", 2, SH(700, 3)), 0, 0);
    pipit_broadcast_to(g, in_f(g, dt, "z", 3, SH(3, 1, 5)), 4, SH(2, 3, 4, 5));
    pipit_reduce_max(g, x, 1, 1);
    pipit_reduce_max(g, x, -1, 0);
    pipit_reduce_max(g, x, 0, 1);
}
/* Every unary function and its gradient; log, sqrt and rsqrt of exp(x) > 0. */
static void c_unary(pipit_graph *g, pipit_dtype dt) {
    pipit_val x = pipit_scale(g, in_f(g, dt, "x", 2, SH(37, 41)), 3.0); /* x in [-3, 3) */
    pipit_neg(g, x);
    pipit_abs(g, x);
    pipit_relu(g, x);
    pipit_silu(g, x);
    pipit_sigmoid(g, x);
    pipit_tanh(g, x);
    pipit_val e = pipit_exp(g, x);
    pipit_log(g, e);
    pipit_sqrt(g, e);
    pipit_rsqrt(g, e);
}
static void c_softmax(pipit_graph *g, pipit_dtype dt) {
    pipit_val x = pipit_scale(g, in_f(g, dt, "x", 3, SH(3, 5, 37)), 3.0);
    pipit_softmax(g, x);
    pipit_log_softmax(g, x);
    pipit_softmax(g, in_f(g, dt, "y", 2, SH(6, 1)));
    pipit_val z = pipit_scale(g, in_f(g, dt, "z", 2, SH(2, 1000)), 3.0);
    pipit_softmax(g, z);
    pipit_log_softmax(g, z);
    pipit_log_softmax(g, in_f(g, dt, "w", 2, SH(20, 7)));
}
static void c_rmsnorm(pipit_graph *g, pipit_dtype dt) {
    pipit_rmsnorm(g, in_f(g, dt, "x", 3, SH(2, 7, 45)), in_f(g, dt, "w", 1, SH(45)), 1e-6);
    pipit_rmsnorm(g, in_f(g, dt, "x2", 2, SH(600, 70)), in_f(g, dt, "w2", 1, SH(70)), 1e-5);
    pipit_rmsnorm(g, in_f(g, dt, "x3", 2, SH(5, 768)), in_f(g, dt, "w3", 1, SH(768)), 1e-6);
    pipit_rmsnorm(g, in_f(g, dt, "x4", 2, SH(9, 1)), in_f(g, dt, "w4", 1, SH(1)), 1e-6);
}
/* [B,T,H*D] and [B,T,H,D]; D = 2, 6, 8, 64, 128; a position offset; theta; llama3 scaling. */
static void c_rope(pipit_graph *g, pipit_dtype dt) {
    pipit_rope(g, in_f(g, dt, "x", 3, SH(2, 5, 3 * 8)), 3, 10000.0);
    pipit_rope_ex(g, in_f(g, dt, "y", 4, SH(1, 9, 2, 6)), 2, 500.0, 7);
    pipit_rope(g, in_f(g, dt, "z", 3, SH(1, 3, 4)), 2, 10000.0);
    pipit_rope_ex(g, in_f(g, dt, "w", 3, SH(2, 33, 2 * 64)), 2, 500000.0, 1000);
    /* llama3 scaling (backend/rope_freq.h on the device): Llama 3.1's at head size 128, every band */
    pipit_rope_scaled(g, in_f(g, dt, "s", 3, SH(1, 17, 2 * 128)), 2, 500000.0, 9000,
                      &(pipit_rope_scaling){8, 1, 4, 8192});
    pipit_rope_scaled(g, in_f(g, dt, "u", 4, SH(2, 5, 3, 6)), 3, 500.0, 2, &(pipit_rope_scaling){8, 1, 4, 128});
}
/* (B, T, S, heads, kv heads, D, causal, scale) over every attention path:
 * tiled with D padded to 32 / 64 / 128, the simple kernels (f32 D > 128,
 * f64 D > 64), grouped-query groups of 1, 2 and 4, S below, equal to and
 * above T (not causal), T = 1, T and S across the tile sizes. Scale 0 is
 * 1/sqrt(D). */
static const struct {
    int64_t B, T, S, H, Hkv, D;
    int causal;
    double scale;
} qkv_shapes[] = {
    {2, 5, 5, 4, 2, 6, 1, 0},     {1, 33, 70, 4, 1, 32, 0, 0}, {2, 40, 17, 2, 2, 64, 0, 0.1},
    {1, 20, 20, 2, 1, 100, 1, 0}, {1, 9, 13, 2, 2, 130, 0, 0}, {1, 1, 1, 1, 1, 8, 1, 0},
    {1, 65, 65, 3, 3, 17, 1, 0.3}, {1, 1, 40, 2, 1, 16, 0, 0},  {2, 17, 17, 4, 2, 40, 1, 0},
};
static void c_attention_qkv(pipit_graph *g, pipit_dtype dt) {
    for (size_t i = 0; i < sizeof qkv_shapes / sizeof qkv_shapes[0]; i++) {
        char nq[16], nk[16], nv[16];
        snprintf(nq, sizeof nq, "q%zu", i);
        snprintf(nk, sizeof nk, "k%zu", i);
        snprintf(nv, sizeof nv, "v%zu", i);
        int64_t B = qkv_shapes[i].B, D = qkv_shapes[i].D, Hkv = qkv_shapes[i].Hkv;
        pipit_val q = pipit_scale(g, in_f(g, dt, nq, 3, SH(B, qkv_shapes[i].T, qkv_shapes[i].H * D)), 2.0);
        pipit_val k = pipit_scale(g, in_f(g, dt, nk, 3, SH(B, qkv_shapes[i].S, Hkv * D)), 2.0);
        pipit_val v = in_f(g, dt, nv, 3, SH(B, qkv_shapes[i].S, Hkv * D));
        pipit_attention_opts o = {(int)qkv_shapes[i].H, (int)Hkv, qkv_shapes[i].causal, qkv_shapes[i].scale};
        pipit_attention_qkv(g, q, k, v, &o);
    }
}
/* Packed documents (attention_doc): (B, T, heads, kv heads, D, causal,
 * percent chance that a token starts a new document) over the tiled
 * paths (D padded to 32 and 64, documents across and inside tiles, tiles
 * wholly masked and skipped), the simple kernels (D > 128) and the
 * non-causal form. Ids "doc<P>_*" are filled non-decreasing (fill_input). */
static const struct {
    int64_t B, T, H, Hkv, D;
    int causal, pct;
} doc_shapes[] = {
    {2, 100, 2, 1, 32, 1, 4}, {1, 70, 4, 2, 64, 1, 30}, {1, 23, 2, 2, 130, 1, 20}, {2, 37, 3, 3, 17, 0, 8},
    {1, 9, 1, 1, 8, 1, 100},
};
static void c_attention_doc(pipit_graph *g, pipit_dtype dt) {
    for (size_t i = 0; i < sizeof doc_shapes / sizeof doc_shapes[0]; i++) {
        char nx[16], nd[32];
        snprintf(nx, sizeof nx, "qkv%zu", i);
        snprintf(nd, sizeof nd, "doc%d_%zu", doc_shapes[i].pct, i);
        int64_t B = doc_shapes[i].B, T = doc_shapes[i].T, H = doc_shapes[i].H, Hkv = doc_shapes[i].Hkv;
        pipit_val x = pipit_scale(g, in_f(g, dt, nx, 3, SH(B, T, (H + 2 * Hkv) * doc_shapes[i].D)), 2.0);
        pipit_attention_opts o = {(int)H, (int)Hkv, doc_shapes[i].causal, 0};
        pipit_attention_docs(g, x, pipit_input(g, nd, PIPIT_I32, 2, SH(B, T)), &o);
    }
}
/* slice (a copy, and a view when contiguous), split, concat of 2..5
 * inputs along the first, a middle and the last axis, in the case's dtype
 * and in i32. */
static void c_slice_concat(pipit_graph *g, pipit_dtype dt) {
    pipit_val x = in_f(g, dt, "x", 3, SH(4, 9, 5));
    pipit_gelu(g, pipit_slice(g, x, 1, 2, 5));
    pipit_gelu(g, pipit_slice(g, x, -1, 1, 3));
    pipit_gelu(g, pipit_slice(g, x, 0, 1, 2)); /* a view */
    pipit_val parts[3];
    pipit_split(g, in_f(g, dt, "y", 2, SH(3, 11)), 1, 3, SH(2, 4, 5), parts);
    for (int i = 0; i < 3; i++) pipit_tanh(g, parts[i]);
    pipit_val c[5] = {in_f(g, dt, "c0", 3, SH(2, 3, 4)), in_f(g, dt, "c1", 3, SH(2, 1, 4)),
                      in_f(g, dt, "c2", 3, SH(2, 5, 4)), in_f(g, dt, "c3", 3, SH(2, 2, 4)),
                      in_f(g, dt, "c4", 3, SH(2, 7, 4))};
    pipit_concat(g, 5, c, 1);
    pipit_concat(g, 2, (pipit_val[]){c[0], in_f(g, dt, "d", 3, SH(2, 3, 9))}, -1);
    pipit_concat(g, 3, (pipit_val[]){c[0], c[0], in_f(g, dt, "e", 3, SH(1, 3, 4))}, 0);
    /* i32 (token ids) moves through the same kernels */
    pipit_val t = in_idx(g, 50, "s", 3, SH(2, 7, 3));
    pipit_slice(g, t, 1, 1, 4);
    pipit_concat(g, 2, (pipit_val[]){t, in_idx(g, 50, "u", 3, SH(2, 7, 2))}, -1);
}
/* Rows of any rank by index; the gradient scatter-adds (repeated indices). */
static void c_gather(pipit_graph *g, pipit_dtype dt) {
    pipit_gather(g, in_f(g, dt, "t", 3, SH(11, 3, 5)), in_idx(g, 11, "a", 2, SH(2, 7)));
    pipit_gather(g, in_f(g, dt, "u", 1, SH(6)), in_idx(g, 6, "b", 1, SH(9)));
}
/* The case's dtype into each float dtype and back (the VJPs cast back);
 * values of up to 2^20 and down to 2^-20, so rounding and ties occur. */
static void c_cast(pipit_graph *g, pipit_dtype dt) {
    pipit_val x = pipit_exp(g, pipit_scale(g, in_f(g, dt, "x", 2, SH(33, 17)), 14.0));
    const pipit_dtype to[] = {PIPIT_F32, PIPIT_F64, PIPIT_BF16};
    for (int i = 0; i < 3; i++)
        if (to[i] != dt) pipit_cast(g, x, to[i]);
}

/* The fused head + cross-entropy over ir/head_xent.h's chunking (chunks
 * of 2048 classes at these row counts; few elements: the emulation runs a
 * thread per logit): one chunk; 100 rows over two chunks (the last of 52)
 * in 2 groups; 17 chunks in 16 groups, the last group of two (its partial
 * accumulated), the last chunk of 233. */
static void c_head_xent(pipit_graph *g, pipit_dtype dt) {
    pipit_head_xent_mean(g, pipit_scale(g, in_f(g, dt, "h", 3, SH(2, 3, 5)), 2.0), in_f(g, dt, "w", 2, SH(37, 5)),
                         in_idx(g, 37, "t", 2, SH(2, 3)));
    pipit_head_xent_mean(g, in_f(g, dt, "h2", 3, SH(4, 25, 7)), in_f(g, dt, "w2", 2, SH(2100, 7)),
                         in_idx(g, 2100, "t2", 2, SH(4, 25)));
    pipit_head_xent_mean(g, in_f(g, dt, "h3", 2, SH(5, 9)), in_f(g, dt, "w3", 2, SH(33001, 9)),
                         in_idx(g, 33001, "t3", 1, SH(5)));
}
/* Vocab parallel as rank 1 of 2 (case_shard): W holds classes [2100,
 * 4200) of 4200, two chunks; targets over the whole vocabulary. */
static void c_tp_head_xent(pipit_graph *g, pipit_dtype dt) {
    case_shard = 1;
    pipit_val h = pipit_tp_copy(g, pipit_scale(g, in_f(g, dt, "h", 2, SH(35, 11)), 0.5));
    pipit_tp_head_xent_mean(g, h, in_f(g, dt, "w", 2, SH(2100, 11)), in_idx(g, 4200, "t", 1, SH(35)));
}

/* Mixture of experts: top-k over 37 (bf16 inputs tie), take; the slots of
 * random choices of 6 experts for 41 tokens x 2 with 9 slots each (some
 * dropped); dispatch and combine with and without weights (their VJPs run
 * combine, dispatch, take_dx and moe_dw). */
static void c_moe(pipit_graph *g, pipit_dtype dt) {
    pipit_val idx;
    pipit_topk(g, in_f(g, dt, "x", 3, SH(3, 7, 37)), 5, &idx);
    pipit_val s = pipit_moe_slots(g, in_idx(g, 6, "e", 2, SH(41, 2)), 6, 9);
    pipit_val x = in_f(g, dt, "t", 2, SH(41, 19)), w = in_f(g, dt, "w", 2, SH(41, 2));
    pipit_val y = in_f(g, dt, "y", 3, SH(6, 9, 19));
    pipit_moe_dispatch(g, x, s, 6, 9, NULL);
    pipit_moe_dispatch(g, x, s, 6, 9, &w);
    pipit_moe_combine(g, y, s, &w);
    pipit_moe_combine(g, y, s, NULL);
}

/* Context parallelism as rank c = 1 of C = 2 (case_cp): RoPE at the
 * rank's global positions (chunks 1 and 2 of 4), and attention of its
 * queries against the whole sequence, causal and not, GQA; the keys and
 * values of the other member stand in as random rows (run_case). The
 * backward (attn_cp_d) runs through the VJPs. */
static int case_cp; /* kctx.cp of every kernel of the case */
static void c_context_parallel(pipit_graph *g, pipit_dtype dt) {
    case_cp = 1;
    pipit_graph_set_context_parallel(g, 2);
    pipit_val q = pipit_rope_cp(g, in_f(g, dt, "q", 3, SH(2, 6, 4 * 8)), 4, 10000.0, NULL);
    pipit_val k = pipit_rope_cp(g, in_f(g, dt, "k", 3, SH(2, 6, 2 * 8)), 2, 10000.0, NULL);
    pipit_val v = in_f(g, dt, "v", 3, SH(2, 6, 2 * 8));
    pipit_attention_cp(g, q, k, v, &(pipit_attention_opts){4, 2, 1, 0});
    pipit_val x = in_f(g, dt, "x", 3, SH(1, 10, 3 * 5));
    pipit_attention_cp(g, x, x, in_f(g, dt, "y", 3, SH(1, 10, 3 * 5)), &(pipit_attention_opts){3, 3, 0, 0});
}

/* Packed documents under context parallelism as rank c = 1 of C = 2
 * (case_cp): attention_cp_doc built on its gathered inputs directly (the
 * gathers are the runtime's), the whole sequence's k | v rows and
 * document ids "doc<P>_*" (non-decreasing, a new document at a token with
 * chance P%: documents across the chunks and inside them), causal with
 * GQA and not; the backward (attn_cp_doc_d) runs through the VJPs. */
static void c_context_parallel_docs(pipit_graph *g, pipit_dtype dt) {
    case_cp = 1;
    pipit_graph_set_context_parallel(g, 2);
    pipit_val q = in_f(g, dt, "q", 3, SH(2, 6, 4 * 8)), kv = in_f(g, dt, "kv", 3, SH(2, 12, 2 * 2 * 8));
    pipit__build(g, "c_context_parallel_docs", PIPIT_OP_ATTENTION_CP_DOC, 3,
                 (pipit_val[]){q, kv, pipit_input(g, "doc30_cp", PIPIT_I32, 2, SH(2, 12))}, (double[4]){0.35, 0},
                 (int64_t[4]){4, 2, 1, 2});
    pipit_val x = in_f(g, dt, "x", 3, SH(1, 10, 3 * 5)), y = in_f(g, dt, "y", 3, SH(1, 20, 2 * 3 * 5));
    pipit__build(g, "c_context_parallel_docs", PIPIT_OP_ATTENTION_CP_DOC, 3,
                 (pipit_val[]){x, y, pipit_input(g, "doc20_cp", PIPIT_I32, 2, SH(1, 20))}, (double[4]){0.5, 0},
                 (int64_t[4]){3, 3, 0, 2});
}

static const parity_case cases[] = {
    {"moe", c_moe},
    {"embed", c_embed},
    {"add_mul_scale", c_add_mul_scale},
    {"matmul", c_matmul},
    {"bias_add", c_bias_add},
    {"layernorm", c_layernorm},
    {"gelu", c_gelu},
    {"attention", c_attention},
    {"xent", c_xent},
    {"sum_fill", c_sum_fill},
    {"permute", c_permute},
    {"alias", c_alias},
    {"binary", c_binary},
    {"reduce", c_reduce},
    {"unary", c_unary},
    {"softmax", c_softmax},
    {"rmsnorm", c_rmsnorm},
    {"rope", c_rope},
    {"attention_qkv", c_attention_qkv},
    {"attention_doc", c_attention_doc},
    {"slice_concat", c_slice_concat},
    {"gather", c_gather},
    {"tensor_parallel", c_tensor_parallel},
    {"cast", c_cast},
    {"head_xent", c_head_xent},
    {"tp_head_xent", c_tp_head_xent},
    {"context_parallel", c_context_parallel},
    {"context_parallel_docs", c_context_parallel_docs},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ------------------------------------------------------------ the harness */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static double urand(void) { /* [-1, 1) */
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) / 9007199254740992.0 * 2 - 1;
}

static double elem(const void *p, pipit_dtype dt, int64_t i) {
    if (dt == PIPIT_BF16) return pipit__bf16_to_f32(((const pipit__bf16 *)p)[i]);
    return dt == PIPIT_F64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

/* One bf16 ulp at magnitude |x| (8 significant bits; subnormals 2^-133). */
static double bf16_ulp(double x) {
    int e;
    frexp(fabs(x), &e);
    return ldexp(1.0, (e - 8 < -133 ? -133 : e - 8));
}

/* bf16 ops whose CUDA and CPU kernels compute the same formula in the
 * same order with one rounding: bit for bit. */
static int bf16_bitwise(int op) {
    static const int ops[] = {PIPIT_OP_EMBED,   PIPIT_OP_GATHER, PIPIT_OP_ADD,      PIPIT_OP_SUB,
                              PIPIT_OP_MUL,     PIPIT_OP_DIV,    PIPIT_OP_BROADCAST_TO, PIPIT_OP_NEG,
                              PIPIT_OP_SQRT,    PIPIT_OP_ABS,    PIPIT_OP_ABS_DX,   PIPIT_OP_RELU,
                              PIPIT_OP_RELU_DX, PIPIT_OP_SCALE,  PIPIT_OP_CAST,     PIPIT_OP_BIAS_ADD,
                              PIPIT_OP_FILL,    PIPIT_OP_MAX,    PIPIT_OP_MAX_DX,   PIPIT_OP_PERMUTE,
                              PIPIT_OP_SLICE,   PIPIT_OP_SLICE_DX, PIPIT_OP_CONCAT};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (ops[i] == op) return 1;
    return 0;
}

/* The worst element of a bf16-mode node (bf16 output, or an fp32 loss or
 * sum of bf16 values) against the bound of the file comment: its excess
 * |cuda - cpu| / bound (<= 1 passes; any difference fails a bitwise op). */
static double bf16_excess(const void *a, const void *ref, pipit_dtype dt, int64_t n, int bitwise, int64_t *at) {
    double rmax = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) rmax = fmax(rmax, fabs(elem(ref, dt, i)));
    *at = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = elem(a, dt, i), r = elem(ref, dt, i), d = fabs(x - r);
        if (d == 0 || (isnan(x) && isnan(r))) continue;
        double bound = bitwise ? 0 : bf16_ulp(fmax(fabs(x), fabs(r))) + TOL_F32 * rmax;
        double ex = bound > 0 ? d / bound : (double)INFINITY;
        if (!(ex <= worst)) { /* NaN wins */
            worst = ex;
            *at = i;
        }
    }
    return worst;
}

/* Random contents for an input leaf. */
static void fill_input(const pipit__node *n, void *buf) {
    int64_t cnt = pipit__node_numel(n);
    if (n->dtype == PIPIT_I32 && strncmp(n->name, "doc", 3) == 0) { /* "doc<P>_...": document ids */
        int pct = atoi(n->name + 3);
        int64_t T = n->shape[n->ndim - 1];
        for (int64_t i = 0, v = 0; i < cnt; i++) {
            if (i % T == 0) v = 0;
            else if ((urand() + 1) * 50 < pct) v++;
            ((int32_t *)buf)[i] = (int32_t)v;
        }
    } else if (n->dtype == PIPIT_I32) {
        int range = atoi(n->name + 3); /* "idx<N>_..." */
        for (int64_t i = 0; i < cnt; i++) {
            int v = (int)((urand() + 1) * 0.5 * range);
            ((int32_t *)buf)[i] = v < range ? v : range - 1;
        }
    } else {
        for (int64_t i = 0; i < cnt; i++) {
            if (n->dtype == PIPIT_F64) ((double *)buf)[i] = urand();
            else if (n->dtype == PIPIT_BF16) ((pipit__bf16 *)buf)[i] = pipit__bf16_from_f64(urand());
            else ((float *)buf)[i] = (float)urand();
        }
    }
}

/* Emits the VJP of every forward node that has one, each from its own
 * random dout, so every backward op of the table runs. */
static void add_vjps(pipit_graph *g) {
    int32_t nfwd = g->n;
    for (int32_t i = 0; i < nfwd; i++) {
        const pipit__op_info *info = &pipit__ops[g->nodes[i].op];
        if (!info->vjp || (info->flags & OPF_LEAF) || g->nodes[i].dtype == PIPIT_I32) continue; /* ids: no gradient */
        char name[32];
        snprintf(name, sizeof name, "dout%d", (int)i);
        int64_t shape[PIPIT_MAX_DIMS];
        memcpy(shape, g->nodes[i].shape, sizeof shape);
        pipit_val d = pipit_input(g, name, (pipit_dtype)g->nodes[i].dtype, g->nodes[i].ndim, shape);
        int32_t din[PIPIT_MAX_IN];
        for (int j = 0; j < PIPIT_MAX_IN; j++) din[j] = -1;
        info->vjp(g, i, d.id, din);
    }
}

/* Where value id's bytes start in the host copies (its alias root's
 * buffer, plus the offset of any view on the way). */
static const void *host_at(const pipit_graph *g, void *const *host, int32_t id) {
    return (const char *)host[pipit__alias_root(g, id)] + pipit__alias_offset(g, id);
}

static void *dev_upload(const void *host, size_t n) {
    void *d = pipit__backend_cuda.alloc(n ? n : 1);
    if (d && n) pipit__backend_cuda.upload(d, host, n);
    return d;
}

/* Waits for the rank's stream; 0 when every launch and the kernels worked. */
static int dev_sync(const char *what) {
    cudaError_t e = cudaStreamSynchronize(pipit__cuda_stream());
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : -1;
}

/* Relative error max|a - ref| / max|ref| (0 when equal; NaN anywhere or a
 * nonzero difference from an all-zero reference fails). *at: worst index. */
static double rel_err(const void *a, const void *ref, pipit_dtype dt, int64_t n, int64_t *at) {
    double dmax = 0, rmax = 0;
    *at = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = elem(a, dt, i), r = elem(ref, dt, i), d = fabs(x - r);
        if (!(d <= dmax)) { /* NaN wins */
            dmax = d;
            *at = i;
        }
        if (fabs(r) > rmax) rmax = fabs(r);
    }
    if (dmax == 0) return 0;
    return rmax > 0 ? dmax / rmax : (double)INFINITY;
}

typedef struct {
    int *seen;   /* [PIPIT_OP_COUNT]: ops that ran and matched */
    int *seen_bf16; /* [PIPIT_OP_COUNT]: ... with a bf16 input or output */
    int nbad;
    const char *cname;
    pipit_dtype dt;
} run_ctx;

static void report(run_ctx *rc, const pipit__node *n, int32_t id, const char *what) {
    fprintf(stderr, "cuda parity %s (%s) node %d %s: %s\n", rc->cname, pipit__dtype_name(rc->dt), (int)id,
            pipit__ops[n->op].name, what);
    rc->nbad++;
}

static int node_has_bf16(const pipit_graph *g, const pipit__node *n) {
    int any = n->dtype == PIPIT_BF16;
    for (int j = 0; j < n->nin; j++) any |= g->nodes[n->in[j]].dtype == PIPIT_BF16;
    return any;
}

/* An op on integers alone (moe_slots: expert ids in, slots out) has no
 * float dtype to vary: its bf16 run is the same run. */
static int node_all_i32(const pipit_graph *g, const pipit__node *n) {
    int all = n->dtype == PIPIT_I32;
    for (int j = 0; j < n->nin; j++) all &= g->nodes[n->in[j]].dtype == PIPIT_I32;
    return all;
}

/* Runs node id on the CUDA backend from the CPU values of its inputs and
 * checks it against the CPU's output `ref` (see the file comment). */
static void check_node(run_ctx *rc, const pipit_graph *g, int32_t id, void *const *host, const void *ref) {
    const pipit__node *n = &g->nodes[id];
    size_t bytes = pipit__node_bytes(n);
    int64_t cnt = pipit__node_numel(n);
    pipit__kctx k = {0};
    k.node = n;
    k.shard = case_shard;
    k.cp = case_cp;
    void *din[PIPIT_MAX_IN] = {NULL};
    for (int j = 0; j < n->nin; j++) {
        const pipit__node *x = &g->nodes[n->in[j]];
        k.in_node[j] = x;
        din[j] = dev_upload(host_at(g, host, n->in[j]), pipit__node_bytes(x));
        k.in[j] = din[j];
    }
    unsigned char *ff = malloc(bytes ? bytes : 1), *got = malloc(bytes ? bytes : 1), *again = malloc(bytes ? bytes : 1);
    memset(ff, 0xff, bytes ? bytes : 1);
    void *out = dev_upload(ff, bytes), *out2 = dev_upload(ff, bytes);
    const pipit__op_kernel kern = pipit__backend_cuda.ops[n->op];
    char msg[256];
    int64_t at = 0, skip = 0; /* skip: leading elements compared apart (HEAD_XENT_BWD's fp32 partials) */
    double err, tol = n->dtype == PIPIT_F64 ? TOL_F64 : TOL_F32;
    /* the uploads may run on another stream than the kernels */
    if (cudaDeviceSynchronize() != cudaSuccess || !out || !out2) { report(rc, n, id, "upload failed"); goto done; }
    k.out = out;
    kern(&k, 1, 2); /* thread 1 of a team of 2: nothing */
    if (dev_sync("thread 1")) { report(rc, n, id, "a CUDA error after thread 1's call"); goto done; }
    pipit__backend_cuda.download(got, out, bytes);
    if (memcmp(got, ff, bytes) != 0) { report(rc, n, id, "thread 1 of 2 wrote the output"); goto done; }
    kern(&k, 0, 2); /* thread 0 launches the op */
    if (dev_sync(pipit__ops[n->op].name)) { report(rc, n, id, "a CUDA error"); goto done; }
    pipit__backend_cuda.download(got, out, bytes);
    k.out = out2;
    kern(&k, 0, 1);
    if (dev_sync(pipit__ops[n->op].name)) { report(rc, n, id, "a CUDA error on the second run"); goto done; }
    pipit__backend_cuda.download(again, out2, bytes);
    if (memcmp(got, again, bytes) != 0) { report(rc, n, id, "two runs differ in their bits"); goto done; }
    if (n->dtype == PIPIT_I32) { /* a copy (slice, concat of token ids): the CPU's bytes */
        if (memcmp(got, ref, bytes) != 0) {
            report(rc, n, id, "i32 output differs from the cpu's");
            goto done;
        }
        rc->seen[n->op] = 1;
        /* top-k of bf16 scores counts for bf16; an all-integer op in the bf16 pass too */
        if (rc->dt == PIPIT_BF16 && (node_has_bf16(g, n) || node_all_i32(g, n))) rc->seen_bf16[n->op] = 1;
        goto done;
    }
    if (rc->dt == PIPIT_BF16 && n->op == PIPIT_OP_HEAD_XENT_BWD && n->dtype == PIPIT_BF16) {
        /* [G partial dh of fp32 (two bf16 slots each) | dW of bf16]: the
         * partials are fp32 sums, held to the fp32 bound; dW as bf16 */
        int64_t lead = n->iattr[1] * pipit__node_numel(&g->nodes[n->in[0]]);
        err = rel_err(got, ref, PIPIT_F32, lead, &at);
        if (!(err <= TOL_F32)) {
            snprintf(msg, sizeof msg, "fp32 partial dh: relative error %.3g > %.1g (element %lld: cuda %.9g, cpu %.9g)",
                     err, TOL_F32, (long long)at, elem(got, PIPIT_F32, at), elem(ref, PIPIT_F32, at));
            report(rc, n, id, msg);
            goto done;
        }
        skip = 2 * lead; /* bf16 slots */
    }
    if (rc->dt == PIPIT_BF16) {
        size_t sb = (size_t)skip * pipit__dtype_size((pipit_dtype)n->dtype);
        err = bf16_excess(got + sb, (const char *)ref + sb, (pipit_dtype)n->dtype, cnt - skip, bf16_bitwise(n->op),
                          &at);
        at += skip;
        if (!(err <= 1)) {
            snprintf(msg, sizeof msg, "%s (element %lld: cuda %.9g, cpu %.9g, %.3g x the bound)",
                     bf16_bitwise(n->op) ? "bits differ from the cpu's bf16" : "beyond 1 bf16 ulp + 1e-5 max|cpu|",
                     (long long)at, elem(got, (pipit_dtype)n->dtype, at), elem(ref, (pipit_dtype)n->dtype, at), err);
            report(rc, n, id, msg);
            goto done;
        }
        rc->seen[n->op] = 1;
        if (node_has_bf16(g, n)) rc->seen_bf16[n->op] = 1;
        goto done;
    }
    err = rel_err(got, ref, (pipit_dtype)n->dtype, cnt, &at);
    if (!(err <= tol)) {
        snprintf(msg, sizeof msg, "relative error %.3g > %.1g (element %lld: cuda %.9g, cpu %.9g)", err, tol,
                 (long long)at, elem(got, (pipit_dtype)n->dtype, at), elem(ref, (pipit_dtype)n->dtype, at));
        report(rc, n, id, msg);
        goto done;
    }
    rc->seen[n->op] = 1;
done:
    for (int j = 0; j < n->nin; j++) pipit__backend_cuda.free(din[j]);
    pipit__backend_cuda.free(out);
    pipit__backend_cuda.free(out2);
    free(ff), free(got), free(again);
}

/* Builds case c in dtype dt with its VJPs and checks every node that runs. */
static void run_case(run_ctx *rc, const parity_case *c, pipit_dtype dt) {
    pipit_graph *g = pipit_graph_new();
    case_shard = 0;
    case_cp = 0;
    c->build(g, dt);
    add_vjps(g);
    rc->cname = c->name;
    rc->dt = dt;
    if (pipit_graph_status(g) != PIPIT_STATUS_OK) {
        fprintf(stderr, "cuda parity %s: building failed: %s\n", c->name, pipit_graph_errmsg(g));
        rc->nbad++;
        pipit_graph_free(g);
        return;
    }
    void **host = calloc((size_t)g->n, sizeof *host);
    for (int32_t i = 0; i < g->n; i++) {
        const pipit__node *n = &g->nodes[i];
        if (!pipit__node_runs(n) && !(pipit__ops[n->op].flags & OPF_LEAF)) continue; /* an alias */
        host[i] = pipit__backend_cpu.alloc(pipit__node_bytes(n) ? pipit__node_bytes(n) : 1);
        if (!pipit__node_runs(n)) {
            fill_input(n, host[i]);
            continue;
        }
        if (!pipit__node_has_kernel(n)) { /* a collective: one rank's group is the identity */
            if (pipit__node_bytes(n) > pipit__node_bytes(&g->nodes[n->in[0]]))
                fill_input(n, host[i]); /* a gather: the other members' rows, random */
            else
                memcpy(host[i], host[pipit__alias_root(g, n->in[0])], pipit__node_bytes(n));
            continue;
        }
        pipit__kctx k = {0};
        k.node = n;
        k.shard = case_shard;
    k.cp = case_cp;
        k.out = host[i];
        for (int j = 0; j < n->nin; j++) {
            k.in_node[j] = &g->nodes[n->in[j]];
            k.in[j] = host_at(g, host, n->in[j]);
        }
        pipit__backend_cpu.ops[n->op](&k, 0, 1);
        check_node(rc, g, i, host, host[i]);
    }
    for (int32_t i = 0; i < g->n; i++) pipit__backend_cpu.free(host[i]);
    free(host);
    pipit_graph_free(g);
}

static int have_gpu(char *why, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, len, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ the tests */

PIPIT_TEST(cuda_ops_cover_op_table) {
    for (int op = 0; op < PIPIT_OP_COUNT; op++) {
        int cpu = pipit__cpu_ops[op] != NULL, cuda = pipit__cuda_ops[op] != NULL;
        if (cpu != cuda)
            PIPIT_FAIL_("op %s: the CPU table %s a kernel, the CUDA table %s", pipit__ops[op].name,
                        cpu ? "has" : "has no", cuda ? "has" : "has none");
        pipit__node n = {0};
        n.op = (uint16_t)op;
        ASSERT_EQ_I64(pipit__node_has_kernel(&n), cuda);
    }
    ASSERT_TRUE(pipit__backend_cuda.ops == pipit__cuda_ops);
}

PIPIT_TEST(cuda_ops_parity) {
    char why[256];
    if (!have_gpu(why, sizeof why)) PIPIT_SKIP("%s", why);
    pipit__backend_cpu.init();
    pipit__backend_cuda.init();
    int seen[PIPIT_OP_COUNT] = {0}, seen_bf16[PIPIT_OP_COUNT] = {0};
    run_ctx rc = {seen, seen_bf16, 0, "", PIPIT_F32};
    /* PIPIT_CUDA_CASE=name runs one case (debugging; no coverage check) */
    const char *only = getenv("PIPIT_CUDA_CASE");
    for (int i = 0; i < NCASES; i++) {
        if (only && *only && strcmp(only, cases[i].name) != 0) continue;
        run_case(&rc, &cases[i], PIPIT_F32);
        run_case(&rc, &cases[i], PIPIT_F64);
        run_case(&rc, &cases[i], PIPIT_BF16);
    }
    ASSERT_EQ_I64(rc.nbad, 0);
    if (only && *only) return;
    /* every op that runs was run (and matched) by some case, in bf16 too;
     * every gap is listed before the test fails */
    int gaps = 0;
    for (int op = 0; op < PIPIT_OP_COUNT; op++) {
        pipit__node n = {0};
        n.op = (uint16_t)op;
        if (!pipit__node_has_kernel(&n)) continue;
        if (!seen[op] || !seen_bf16[op])
            fprintf(stderr, "cuda parity: op %s %s\n", pipit__ops[op].name,
                    !seen[op] ? "is in no case" : "never ran on bf16 values");
        gaps += !seen[op] || !seen_bf16[op];
    }
    ASSERT_EQ_I64(gaps, 0);
}
