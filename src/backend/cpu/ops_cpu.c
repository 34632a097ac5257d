/*
 * ops_cpu.c — the CPU backend's kernel for every op of ir/ops.def: each
 * reads its sizes off the node (shapes were fixed by the op's shape rule)
 * and calls a raw kernel of kernels.h on its thread's slice. The run table
 * at the end is generated from ops.def, so an op without a CPU kernel is a
 * compile error here (leaves and aliases have none: they run nothing).
 */
#include "backend/cpu/attn_doc.h"
#include "backend/cpu/cp.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/head_xent.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/moe.h"

#define KIN(i) (k->in_node[i])

/* Calls kernel fn_f32, fn_f64 or fn_bf16 by dtype dt (i32 data, which
 * only moves, takes the f32 kernels: elements of 4 bytes). */
#define DISPATCH_DT(dt, fn, ...)                                                  \
    do {                                                                          \
        if ((dt) == PIPIT_F64) fn##_f64(__VA_ARGS__);                              \
        else if ((dt) == PIPIT_BF16) fn##_bf16(__VA_ARGS__);                       \
        else fn##_f32(__VA_ARGS__);                                               \
    } while (0)
/* ... by the output's dtype */
#define DISPATCH(k, fn, ...) DISPATCH_DT((k)->node->dtype, fn, __VA_ARGS__)

/* Leaves are bound from outside; reshape, view and yield alias their input. */
#define cpu_INPUT NULL
#define cpu_PARAM NULL
#define cpu_RESHAPE NULL
#define cpu_VIEW NULL
#define cpu_YIELD NULL
/* The tensor-parallel collectives are the runtime's instructions (INS_TP). */
#define cpu_TP_COPY NULL
#define cpu_TP_SUM NULL
#define cpu_TP_MAX NULL
#define cpu_SP_GATHER NULL /* sequence parallelism (runtime/sp.c) */
#define cpu_SP_SCATTER NULL
#define cpu_SP_SPLIT NULL
#define cpu_CP_GATHER NULL /* context parallelism's gather/scatter pair (runtime/cp.c) */
#define cpu_CP_SCATTER NULL
#define cpu_ROPE_CP pipit__cpu_ROPE_CP /* context parallelism (cp.c) */
#define cpu_ATTENTION_CP pipit__cpu_ATTENTION_CP
#define cpu_ATTN_CP_D pipit__cpu_ATTN_CP_D
#define cpu_ATTENTION_CP_DOC pipit__cpu_ATTENTION_CP_DOC /* packed documents under CP (cp_doc.c) */
#define cpu_ATTN_CP_DOC_D pipit__cpu_ATTN_CP_DOC_D
#define cpu_EP_A2A NULL /* expert parallelism's all-to-all pair (runtime/ep.c) */
#define cpu_EP_A2A_REV NULL

/* A vocab-parallel embedding (iattr[1]) holds rows [shard V, shard V + V). */
static void cpu_EMBED(const pipit__kctx *k, int ith, int nth) {
    int64_t cnt = pipit__node_numel(KIN(1)), C = KIN(0)->shape[1], V = KIN(0)->shape[0];
    if (k->node->iattr[1])
        DISPATCH(k, pipit__embed_vp, k->out, k->in[0], k->in[1], cnt, C, k->shard * V, V, ith, nth);
    else
        DISPATCH(k, pipit__embed, k->out, k->in[0], k->in[1], cnt, C, ith, nth);
}

static void cpu_EMBED_DTABLE(const pipit__kctx *k, int ith, int nth) {
    int64_t V = k->node->shape[0];
    if (k->node->iattr[1])
        DISPATCH(k, pipit__embed_dtable_vp, k->out, k->in[0], k->in[1], pipit__node_numel(KIN(0)), V,
                 k->node->shape[1], k->shard * V, ith, nth);
    else
        DISPATCH(k, pipit__embed_dtable, k->out, k->in[0], k->in[1], pipit__node_numel(KIN(0)), V,
                 k->node->shape[1], ith, nth);
}

/* The embedding generalised: rows of numel(table) / N elements. */
static void cpu_GATHER(const pipit__kctx *k, int ith, int nth) {
    int64_t C = pipit__node_numel(KIN(0)) / KIN(0)->shape[0];
    DISPATCH(k, pipit__embed, k->out, k->in[0], k->in[1], pipit__node_numel(KIN(1)), C, ith, nth);
}

static void cpu_GATHER_DTABLE(const pipit__kctx *k, int ith, int nth) {
    int64_t V = k->node->shape[0];
    DISPATCH(k, pipit__embed_dtable, k->out, k->in[0], k->in[1], pipit__node_numel(KIN(0)), V,
             pipit__node_numel(k->node) / V, ith, nth);
}

/* Binary ops: inputs laid out as the output (same shape, or leading 1s)
 * take the flat kernel, so same-shape results keep their bits; others
 * broadcast. */
#define CPU_BINARY(NAME, name)                                                                          \
    static void cpu_##NAME(const pipit__kctx *k, int ith, int nth) {                                    \
        int64_t n = pipit__node_numel(k->node);                                                         \
        if (pipit__node_numel(KIN(0)) == n && pipit__node_numel(KIN(1)) == n) {                         \
            DISPATCH(k, pipit__##name, k->out, k->in[0], k->in[1], n, ith, nth);                        \
            return;                                                                                     \
        }                                                                                               \
        int64_t dims[4], st[2][4];                                                                      \
        pipit__bcast_plan(k->node, 2, (const pipit__node *const[]){KIN(0), KIN(1)}, dims, st);          \
        DISPATCH(k, pipit__##name##_bcast, k->out, k->in[0], k->in[1], dims, st[0], st[1], ith, nth);   \
    }
CPU_BINARY(ADD, add)
CPU_BINARY(SUB, sub)
CPU_BINARY(MUL, mul)
CPU_BINARY(DIV, div)
#undef CPU_BINARY

/* x reduced to the output's shape: the plan walks x, with the output's
 * strides (0 along the summed axes). */
static void cpu_SUM_TO(const pipit__kctx *k, int ith, int nth) {
    int64_t dims[4], so[1][4];
    pipit__bcast_plan(KIN(0), 1, &k->node, dims, so);
    DISPATCH(k, pipit__sum_to, k->out, k->in[0], dims, so[0], k->node->fattr[1], ith, nth);
}

static void cpu_BROADCAST_TO(const pipit__kctx *k, int ith, int nth) {
    int64_t dims[4], sx[1][4];
    pipit__bcast_plan(k->node, 1, &KIN(0), dims, sx);
    DISPATCH(k, pipit__broadcast, k->out, k->in[0], dims, sx[0], ith, nth);
}

/* Elementwise y = f(x), and fused gradients dx = f'(x or y) * d. */
#define CPU_UNARY(NAME, name)                                                    \
    static void cpu_##NAME(const pipit__kctx *k, int ith, int nth) {             \
        DISPATCH(k, pipit__##name, k->out, k->in[0], pipit__node_numel(k->node), ith, nth); \
    }
#define CPU_UNARY_DX(NAME, name)                                                 \
    static void cpu_##NAME(const pipit__kctx *k, int ith, int nth) {             \
        DISPATCH(k, pipit__##name, k->out, k->in[0], k->in[1], pipit__node_numel(k->node), ith, nth); \
    }
CPU_UNARY(NEG, neg)
CPU_UNARY(EXP, exp)
CPU_UNARY(LOG, log)
CPU_UNARY(SQRT, sqrt)
CPU_UNARY(RSQRT, rsqrt)
CPU_UNARY(ABS, abs)
CPU_UNARY(RELU, relu)
CPU_UNARY(SILU, silu)
CPU_UNARY(SIGMOID, sigmoid)
CPU_UNARY(TANH, tanh)
CPU_UNARY_DX(SQRT_DX, sqrt_dx)
CPU_UNARY_DX(RSQRT_DX, rsqrt_dx)
CPU_UNARY_DX(ABS_DX, abs_dx)
CPU_UNARY_DX(RELU_DX, relu_dx)
CPU_UNARY_DX(SILU_DX, silu_dx)
CPU_UNARY_DX(SIGMOID_DX, sigmoid_dx)
CPU_UNARY_DX(TANH_DX, tanh_dx)
#undef CPU_UNARY

static void cpu_SCALE(const pipit__kctx *k, int ith, int nth) {
    int64_t cnt = pipit__node_numel(k->node);
    if (k->node->dtype == PIPIT_F64)
        pipit__scale_f64(k->out, k->in[0], k->node->fattr[0], cnt, ith, nth);
    else if (k->node->dtype == PIPIT_BF16)
        pipit__scale_bf16(k->out, k->in[0], (float)k->node->fattr[0], cnt, ith, nth);
    else
        pipit__scale_f32(k->out, k->in[0], (float)k->node->fattr[0], cnt, ith, nth);
}

static void cpu_CAST(const pipit__kctx *k, int ith, int nth) {
    pipit__convert(k->out, (pipit_dtype)k->node->dtype, k->in[0], (pipit_dtype)KIN(0)->dtype,
                   pipit__node_numel(k->node), ith, nth);
}

static void cpu_MATMUL(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *a = KIN(0), *b = KIN(1);
    pipit__mm_dims d = pipit__matmul_dims(a, b, k->node);
    int64_t lda = a->shape[a->ndim - 1], ldb = b->shape[b->ndim - 1];
    int64_t batch = d.batch, M = d.M;
    if (d.broadcast) { M *= batch; batch = 1; } /* rows of a flatten into M */
    int64_t sA = a->shape[a->ndim - 1] * a->shape[a->ndim - 2];
    int64_t sB = b->ndim == 2 ? 0 : b->shape[b->ndim - 1] * b->shape[b->ndim - 2];
    if (k->acc_f32) { /* the weight-gradient accumulation fusion (kernels.h) */
        pipit__gemm_bf16_f32(d.ta, d.tb, batch, M, d.N, d.K, k->in[0], lda, sA, k->in[1], ldb, sB, k->out, d.N,
                             d.M * d.N, k->acc_f32 == 2, ith, nth);
        return;
    }
    if (k->epi_bias) { /* the BIAS_ADD in the epilogue (kernels.h) */
        pipit__gemm_bf16_bias(d.ta, d.tb, batch, M, d.N, d.K, k->in[0], lda, sA, k->in[1], ldb, sB, k->in[2], k->out,
                              d.N, d.M * d.N, ith, nth);
        return;
    }
    DISPATCH(k, pipit__gemm, d.ta, d.tb, batch, M, d.N, d.K, k->in[0], lda, sA, k->in[1], ldb,
             sB, k->out, d.N, d.M * d.N, 0, ith, nth);
}

static void cpu_BIAS_ADD(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__bias_add, k->out, k->in[0], k->in[1], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), ith, nth);
}

static void cpu_SUM_ROWS(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__sum_rows, k->out, k->in[0], pipit__node_rows(KIN(0)), pipit__node_last_dim(KIN(0)), ith, nth);
}

static void cpu_LAYERNORM(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__layernorm, k->out, k->in[0], k->in[1], k->in[2], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), k->node->fattr[0], ith, nth);
}

static void cpu_LN_DX(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__layernorm_dx, k->out, k->in[0], k->in[1], k->in[2], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), k->node->fattr[0], ith, nth);
}

static void cpu_LN_DW(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__layernorm_dw, k->out, k->in[0], k->in[1], pipit__node_rows(KIN(0)),
             pipit__node_last_dim(KIN(0)), k->node->fattr[0], ith, nth);
}

static void cpu_GELU(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__gelu, k->out, k->in[0], pipit__node_numel(k->node), ith, nth);
}

CPU_UNARY_DX(GELU_DX, gelu_dx)
#undef CPU_UNARY_DX

static void cpu_RMSNORM(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__rmsnorm, k->out, k->in[0], k->in[1], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), k->node->fattr[0], ith, nth);
}

static void cpu_RMS_DX(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__rmsnorm_dx, k->out, k->in[0], k->in[1], k->in[2], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), k->node->fattr[0], ith, nth);
}

static void cpu_RMS_DW(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__rmsnorm_dw, k->out, k->in[0], k->in[1], pipit__node_rows(KIN(0)),
             pipit__node_last_dim(KIN(0)), k->node->fattr[0], ith, nth);
}

/* x [B,T,H*D] or [B,T,H,D]: the same memory. */
static void cpu_ROPE(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *n = k->node;
    int64_t B = n->shape[0], T = n->shape[1], H = n->iattr[0], D = pipit__node_numel(n) / (B * T) / H;
    DISPATCH(k, pipit__rope, k->out, k->in[0], B, T, H, D, n->iattr[1], pipit__rope_freqs_of(n->fattr, n->iattr[3]),
             (int)n->iattr[2], ith, nth);
}

static void cpu_ATTENTION(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *n = k->node;
    DISPATCH(k, pipit__attention, k->out, k->in[0], n->shape[0], n->shape[1], n->shape[2],
             n->iattr[0], ith, nth);
}

static void cpu_ATTN_DQKV(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *d = KIN(1);
    DISPATCH(k, pipit__attention_dqkv, k->out, k->in[0], k->in[1], d->shape[0], d->shape[1],
             d->shape[2], k->node->iattr[0], ith, nth);
}

/* The problem of an attention_qkv node (or of its backward, which reads
 * the same q, k, v as inputs 0..2). */
static pipit__attn_dims qkv_dims(const pipit__kctx *k) {
    const pipit__node *q = KIN(0), *kv = KIN(1);
    int64_t Hq = k->node->iattr[0], Hkv = k->node->iattr[1], D = q->shape[2] / Hq;
    return (pipit__attn_dims){q->shape[0], q->shape[1], kv->shape[1], Hq, Hkv, D, Hq * D, Hkv * D, Hkv * D,
                              Hq * D, (int)k->node->iattr[2], k->node->fattr[0]};
}

static void cpu_ATTENTION_QKV(const pipit__kctx *k, int ith, int nth) {
    pipit__attn_dims a = qkv_dims(k);
    DISPATCH(k, pipit__attn_fwd, k->out, k->in[0], k->in[1], k->in[2], &a, ith, nth);
}

/* The output is [dq | dk | dv], flat. */
static void cpu_ATTN_QKV_D(const pipit__kctx *k, int ith, int nth) {
    pipit__attn_dims a = qkv_dims(k);
    int64_t nq = pipit__node_numel(KIN(0)), nk = pipit__node_numel(KIN(1));
    if (k->node->dtype == PIPIT_F64) {
        double *d = k->out;
        pipit__attn_bwd_f64(d, d + nq, d + nq + nk, k->in[0], k->in[1], k->in[2], k->in[3], &a, ith, nth);
    } else if (k->node->dtype == PIPIT_BF16) {
        pipit__bf16 *d = k->out;
        pipit__attn_bwd_bf16(d, d + nq, d + nq + nk, k->in[0], k->in[1], k->in[2], k->in[3], &a, ith, nth);
    } else {
        float *d = k->out;
        pipit__attn_bwd_f32(d, d + nq, d + nq + nk, k->in[0], k->in[1], k->in[2], k->in[3], &a, ith, nth);
    }
}

/* Packed documents (attn_doc.c): qkv [B,T,(Hq+2Hkv)*D], doc [B,T]. */
static pipit__attn_doc doc_dims(const pipit__kctx *k) {
    const pipit__node *x = KIN(0), *n = k->node;
    int64_t Hq = n->iattr[0], Hkv = n->iattr[1];
    return (pipit__attn_doc){x->shape[0], x->shape[1], Hq, Hkv, x->shape[2] / (Hq + 2 * Hkv), (int)n->iattr[2],
                             n->fattr[0]};
}
static void cpu_ATTENTION_DOC(const pipit__kctx *k, int ith, int nth) {
    pipit__attn_doc p = doc_dims(k);
    pipit__attn_doc_fwd((pipit_dtype)k->node->dtype, k->out, k->in[0], k->in[1], &p, ith, nth);
}
static void cpu_ATTN_DOC_D(const pipit__kctx *k, int ith, int nth) {
    pipit__attn_doc p = doc_dims(k);
    pipit__attn_doc_bwd((pipit_dtype)k->node->dtype, k->out, k->in[0], k->in[1], k->in[2], &p, ith, nth);
}

/* Row-wise along the last axis. */
#define CPU_ROWS(NAME, name, ...)                                                                    \
    static void cpu_##NAME(const pipit__kctx *k, int ith, int nth) {                                 \
        DISPATCH(k, pipit__##name, k->out, __VA_ARGS__, pipit__node_rows(k->node),                    \
                 pipit__node_last_dim(k->node), ith, nth);                                           \
    }
CPU_ROWS(SOFTMAX, softmax, k->in[0])
CPU_ROWS(SOFTMAX_DX, softmax_dx, k->in[0], k->in[1])
CPU_ROWS(LOG_SOFTMAX, log_softmax, k->in[0])
CPU_ROWS(LOG_SOFTMAX_DX, log_softmax_dx, k->in[0], k->in[1])
#undef CPU_ROWS

/* By the logits' dtype: bf16 logits give fp32 losses. */
static void cpu_XENT_ROWS(const pipit__kctx *k, int ith, int nth) {
    DISPATCH_DT(KIN(0)->dtype, pipit__xent_rows, k->out, k->in[0], k->in[1], pipit__node_rows(KIN(0)), pipit__node_last_dim(KIN(0)),
             ith, nth);
}

static void cpu_XENT_DLOGITS(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__xent_dlogits, k->out, k->in[0], k->in[1], k->in[2], pipit__node_rows(KIN(0)),
             pipit__node_last_dim(KIN(0)), ith, nth);
}

/* The fused head (head_xent.c): h [N, d], W [V, d]; vocab parallel
 * (iattr[0]): this rank's classes are [shard V, shard V + V). */
static void cpu_HEAD_XENT(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *w = KIN(1);
    int64_t V = w->shape[0], d = w->shape[1], off = k->node->iattr[0] ? k->shard * V : 0;
    DISPATCH_DT(w->dtype, pipit__head_xent, k->out, k->in[0], k->in[1], k->in[2], pipit__node_numel(KIN(2)), V, d,
                off, ith, nth);
}

static void cpu_HEAD_XENT_BWD(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *w = KIN(1);
    int64_t V = w->shape[0], d = w->shape[1], off = k->node->iattr[0] ? k->shard * V : 0;
    DISPATCH(k, pipit__head_xent_bwd, k->out, k->in[0], k->in[1], k->in[2], k->in[3], pipit__node_numel(KIN(2)), V,
             d, off, k->node->iattr[1], ith, nth);
}

static void cpu_HEAD_XENT_DH(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__head_xent_dh, k->out, k->in[0], k->node->iattr[0], pipit__node_numel(k->node), ith, nth);
}

/* This rank's classes are [shard V, shard V + V) of the vocabulary. */
static void cpu_TP_PICK(const pipit__kctx *k, int ith, int nth) {
    int64_t V = pipit__node_last_dim(KIN(0));
    DISPATCH(k, pipit__tp_pick, k->out, k->in[0], k->in[1], pipit__node_rows(KIN(0)), V, k->shard * V, ith, nth);
}

static void cpu_TP_PICK_DX(const pipit__kctx *k, int ith, int nth) {
    int64_t V = k->node->iattr[0];
    DISPATCH(k, pipit__tp_pick_dx, k->out, k->in[0], k->in[1], pipit__node_numel(KIN(0)), V, k->shard * V, ith, nth);
}

/* By the input's dtype: a sum of bf16 values is fp32. */
static void cpu_SUM(const pipit__kctx *k, int ith, int nth) {
    DISPATCH_DT(KIN(0)->dtype, pipit__sum_all, k->out, k->in[0], pipit__node_numel(KIN(0)), k->node->fattr[0],
             ith, nth);
}

static void cpu_FILL(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__fill, k->out, k->in[0], k->node->fattr[0], pipit__node_numel(k->node), ith,
             nth);
}

static void cpu_PERMUTE(const pipit__kctx *k, int ith, int nth) {
    int perm[PIPIT_MAX_DIMS];
    for (int i = 0; i < PIPIT_MAX_DIMS; i++) perm[i] = (int)k->node->iattr[i];
    DISPATCH(k, pipit__permute, k->out, k->in[0], KIN(0)->ndim, KIN(0)->shape, perm, ith, nth);
}

/* x [outer, n, inner] around the axis; the max keeps it as 1. */
static void cpu_MAX(const pipit__kctx *k, int ith, int nth) {
    int64_t outer, n, inner;
    pipit__axis_split(KIN(0), (int)k->node->iattr[0], &outer, &n, &inner);
    DISPATCH(k, pipit__max_axis, k->out, k->in[0], outer, n, inner, ith, nth);
}

static void cpu_MAX_DX(const pipit__kctx *k, int ith, int nth) {
    int64_t outer, n, inner;
    pipit__axis_split(k->node, (int)k->node->iattr[0], &outer, &n, &inner);
    DISPATCH(k, pipit__max_dx, k->out, k->in[0], k->in[1], outer, n, inner, ith, nth);
}

/* Around the axis every tensor is [outer, axis * inner]: slices, padding
 * and concatenation copy column ranges of those rows. i32 (token ids)
 * takes the f32 kernels: they only move 4-byte elements. */
static void cpu_SLICE(const pipit__kctx *k, int ith, int nth) {
    int64_t outer, n, inner, len = k->node->iattr[2];
    pipit__axis_split(KIN(0), (int)k->node->iattr[0], &outer, &n, &inner);
    DISPATCH(k, pipit__copy_cols, k->out, len * inner, 0, k->in[0], n * inner, k->node->iattr[1] * inner, outer,
             len * inner, ith, nth);
}

static void cpu_SLICE_DX(const pipit__kctx *k, int ith, int nth) {
    int64_t outer, full, inner, len = KIN(0)->shape[k->node->iattr[0]];
    pipit__axis_split(k->node, (int)k->node->iattr[0], &outer, &full, &inner);
    DISPATCH(k, pipit__pad_cols, k->out, full * inner, k->node->iattr[1] * inner, k->in[0], outer, len * inner,
             ith, nth);
}

static void cpu_CONCAT(const pipit__kctx *k, int ith, int nth) {
    int ax = (int)k->node->iattr[0];
    int64_t outer, all, inner, at = 0;
    pipit__axis_split(k->node, ax, &outer, &all, &inner);
    for (int j = 0; j < k->node->nin; j++) {
        int64_t n = KIN(j)->shape[ax];
        DISPATCH(k, pipit__copy_cols, k->out, all * inner, at * inner, k->in[j], n * inner, 0, outer, n * inner,
                 ith, nth);
        at += n;
    }
}

const pipit__op_kernel pipit__cpu_ops[PIPIT_OP_COUNT] = {
#define X(NAME, str, arity, nondiff, alias, flags) [PIPIT_OP_##NAME] = cpu_##NAME,
#include "ir/ops.def"
#undef X
};
