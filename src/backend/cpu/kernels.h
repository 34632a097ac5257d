/*
 * kernels.h — raw CPU kernels: plain pointers, explicit sizes, row-major.
 *
 * Thread contract (as in ggml): every kernel is called once on each of the
 * nth threads of a pool with its index ith; it computes its own static slice
 * of the output. Slices never overlap, there are no atomics, and every
 * reduction runs in a fixed order that does not depend on nth, so results
 * are bitwise identical for any thread count. Callers put a barrier between
 * kernels. Each kernel exists for float (_f32), double (_f64) and bfloat16
 * (_bf16: stored bf16, computed in fp32, rounded once per output element).
 *
 * Backward kernels OVERWRITE their output (no +=): gradient accumulation is
 * explicit in the graph, so its order is visible and fixed.
 */
#ifndef PIPIT_KERNELS_H
#define PIPIT_KERNELS_H

#include <stdint.h>

#include "backend/rope_freq.h"
#include "util/bf16.h"
#include "util/common.h"

/* Must be called once before any gemm or attention kernel: makes BLAS
 * single-threaded, since pipit parallelises GEMMs itself by a shape-only
 * split (see gemm.c). */
void pipit__gemm_init(void);
/* 1 where that start chose OpenBLAS's kernels again (it had fallen back to
 * its generic ones for a CPU it does not know), else 0 (tests). */
int pipit__blas_chosen_again(void);

/* The GEMM tile rule, exposed for tests and benchmarks: C [M,N] is cut into
 * tiles of *mt rows by *nt columns (the last ones smaller), from (M,N,K) only. */
void pipit__gemm_tiles(int64_t M, int64_t N, int64_t K, int64_t *mt, int64_t *nt);

/* C[b] = op(A[b]) @ op(B[b]) (+ C[b] if accumulate) for b < batch, with
 * op(A) [M,K], op(B) [K,N], C [M,N]; lda/ldb/ldc are row strides of the
 * stored matrices; sA/sB/sC the strides between batch items (sB = 0
 * broadcasts B). The split of C into tiles depends only on (M,N,K), each
 * tile is one single-threaded BLAS call, and tiles are dealt to threads:
 * so the bits never depend on nth. */
/* One attention problem: q [B,Tq,Hq*D] (head h at column h*D), k and v
 * [B,Tk,Hkv*D]; q head h reads kv head h / (Hq/Hkv); causal masks key j > t
 * + (Tk - Tq): the diagonal at the bottom right, so Tk == Tq is plain causal
 * and Tk > Tq a block of queries at offset Tk - Tq (context parallelism). ldq/ldk/ldv/ldo are the row strides of q, k, v and the
 * output (the packed GPT-2 qkv [B,T,3C] is q = qkv, k = qkv + C, v = qkv +
 * 2C, each of stride 3C); gradients use the strides of their inputs. */
typedef struct {
    int64_t B, Tq, Tk, Hq, Hkv, D;
    int64_t ldq, ldk, ldv, ldo;
    int causal;
    double scale; /* rounded to the element type by the kernels */
} pipit__attn_dims;

#define PIPIT_KERNEL_DECLS(T, AT, S)                                                   \
    void pipit__gemm_##S(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, \
                         int64_t K, const T *A, int64_t lda, int64_t sA, const T *B,    \
                         int64_t ldb, int64_t sB, T *C, int64_t ldc, int64_t sC,        \
                         int accumulate, int ith, int nth);                             \
    /* out[n] = a[n] + b[n]; a[n] - b[n]; a[n] * b[n]; a[n] / b[n]; alpha * a[n] */      \
    void pipit__add_##S(T *out, const T *a, const T *b, int64_t n, int ith, int nth);  \
    void pipit__sub_##S(T *out, const T *a, const T *b, int64_t n, int ith, int nth);  \
    void pipit__mul_##S(T *out, const T *a, const T *b, int64_t n, int ith, int nth);  \
    void pipit__div_##S(T *out, const T *a, const T *b, int64_t n, int ith, int nth);  \
    /* The same, broadcast (ir/graph.h pipit__bcast_plan): out is dims[0..4),             \
     * a and b walked with strides sa, sb (0 along a broadcast axis). */                  \
    void pipit__add_bcast_##S(T *out, const T *a, const T *b, const int64_t *dims,        \
                              const int64_t *sa, const int64_t *sb, int ith, int nth);    \
    void pipit__sub_bcast_##S(T *out, const T *a, const T *b, const int64_t *dims,        \
                              const int64_t *sa, const int64_t *sb, int ith, int nth);    \
    void pipit__mul_bcast_##S(T *out, const T *a, const T *b, const int64_t *dims,        \
                              const int64_t *sa, const int64_t *sb, int ith, int nth);    \
    void pipit__div_bcast_##S(T *out, const T *a, const T *b, const int64_t *dims,        \
                              const int64_t *sa, const int64_t *sb, int ith, int nth);    \
    /* out = x repeated over dims[0..4), x walked with strides sx */                      \
    void pipit__broadcast_##S(T *out, const T *x, const int64_t *dims, const int64_t *sx,  \
                              int ith, int nth);                                          \
    /* out = scale * x summed over the axes where so is 0: x is dims[0..4)            \
     * (contiguous), out holds the other axes in order; each element sums its         \
     * inputs in ascending index order in double (rows of the last axis in 8 lanes). */\
    void pipit__sum_to_##S(T *out, const T *x, const int64_t *dims, const int64_t *so,    \
                           double scale, int ith, int nth);                               \
    /* y = f(x) elementwise: -x, exp, log, sqrt, 1/sqrt, |x|, relu, silu, sigmoid,        \
     * tanh; and the fused gradients dx = d * f'(.) from x (abs, relu, silu) or          \
     * from y (sqrt, rsqrt, sigmoid, tanh) */                                             \
    void pipit__neg_##S(T *out, const T *x, int64_t n, int ith, int nth);              \
    void pipit__exp_##S(T *out, const T *x, int64_t n, int ith, int nth);              \
    void pipit__log_##S(T *out, const T *x, int64_t n, int ith, int nth);              \
    void pipit__sqrt_##S(T *out, const T *x, int64_t n, int ith, int nth);             \
    void pipit__rsqrt_##S(T *out, const T *x, int64_t n, int ith, int nth);            \
    void pipit__abs_##S(T *out, const T *x, int64_t n, int ith, int nth);              \
    void pipit__relu_##S(T *out, const T *x, int64_t n, int ith, int nth);             \
    void pipit__silu_##S(T *out, const T *x, int64_t n, int ith, int nth);             \
    void pipit__sigmoid_##S(T *out, const T *x, int64_t n, int ith, int nth);          \
    void pipit__tanh_##S(T *out, const T *x, int64_t n, int ith, int nth);             \
    void pipit__sqrt_dx_##S(T *dx, const T *y, const T *d, int64_t n, int ith, int nth);    \
    void pipit__rsqrt_dx_##S(T *dx, const T *y, const T *d, int64_t n, int ith, int nth);   \
    void pipit__abs_dx_##S(T *dx, const T *x, const T *d, int64_t n, int ith, int nth);     \
    void pipit__relu_dx_##S(T *dx, const T *x, const T *d, int64_t n, int ith, int nth);    \
    void pipit__silu_dx_##S(T *dx, const T *x, const T *d, int64_t n, int ith, int nth);    \
    void pipit__sigmoid_dx_##S(T *dx, const T *y, const T *d, int64_t n, int ith, int nth); \
    void pipit__tanh_dx_##S(T *dx, const T *y, const T *d, int64_t n, int ith, int nth);    \
    void pipit__scale_##S(T *out, const T *a, AT alpha, int64_t n, int ith, int nth);   \
    /* out[r,c] = x[r,c] + bias[c]; x is [rows, C] */                                   \
    void pipit__bias_add_##S(T *out, const T *x, const T *bias, int64_t rows,          \
                             int64_t C, int ith, int nth);                              \
    /* out[c] = sum_r x[r,c], r ascending (bias gradients) */                           \
    void pipit__sum_rows_##S(T *out, const T *x, int64_t rows, int64_t C, int ith,     \
                             int nth);                                                  \
    /* out[0] = sum of x[0..n) in index order, accumulated in double; scaled by       \
     * `scale` at the end (1 for sum, 1/n for mean), in AT. Thread 0 only. */            \
    void pipit__sum_all_##S(AT *out, const T *x, int64_t n, double scale, int ith,      \
                            int nth);                                                   \
    /* out[n] = dout[0] * scale (gradient of sum/mean: broadcast a scalar) */           \
    void pipit__fill_##S(T *out, const T *scalar, double scale, int64_t n, int ith,    \
                         int nth);                                                      \
    /* out = x; general copy (reshape, yield) */                                        \
    void pipit__copy_##S(T *out, const T *x, int64_t n, int ith, int nth);             \
    /* out = permute(x): x has dims[nd] (nd <= 4); out axis i = x axis perm[i] */       \
    void pipit__permute_##S(T *out, const T *x, int nd, const int64_t *dims,           \
                            const int *perm, int ith, int nth);                         \
    /* LayerNorm over the last axis: x [rows, C], w, b [C] */                           \
    void pipit__layernorm_##S(T *out, const T *x, const T *w, const T *b, int64_t rows, \
                              int64_t C, double eps, int ith, int nth);                 \
    /* dx of layernorm given dout (recomputes mean/rstd from x) */                      \
    void pipit__layernorm_dx_##S(T *dx, const T *x, const T *w, const T *dout,         \
                                 int64_t rows, int64_t C, double eps, int ith, int nth);\
    /* dw[c] = sum_r dout[r,c] * xhat[r,c], r ascending */                              \
    void pipit__layernorm_dw_##S(T *dw, const T *x, const T *dout, int64_t rows,       \
                                 int64_t C, double eps, int ith, int nth);              \
    /* RMSNorm over the last axis: out = w * (x * r), r = 1/sqrt(mean(x^2) + eps) */      \
    void pipit__rmsnorm_##S(T *out, const T *x, const T *w, int64_t rows, int64_t C,   \
                            double eps, int ith, int nth);                              \
    /* dx = r (g - x r^2 mean(g x)), g = dout * w */                                    \
    void pipit__rmsnorm_dx_##S(T *dx, const T *x, const T *w, const T *dout,           \
                               int64_t rows, int64_t C, double eps, int ith, int nth);  \
    /* dw[c] = sum_r dout[r,c] * (x[r,c] * r_r), r ascending, in double */             \
    void pipit__rmsnorm_dw_##S(T *dw, const T *x, const T *dout, int64_t rows,         \
                               int64_t C, double eps, int ith, int nth);                \
    /* RoPE, rotate-half: x, out [B,T,H*D]; position of row t: pos0 + t;               \
     * frequencies rf; inverse != 0 rotates by minus the angle (the gradient) */        \
    void pipit__rope_##S(T *out, const T *x, int64_t B, int64_t Tn, int64_t H,         \
                         int64_t D, int64_t pos0, pipit__rope_freqs rf, int inverse,    \
                         int ith, int nth);                                             \
    /* Along the last axis of [rows, C]: y = softmax(x); dx = y (d - sum(d y));        \
     * y = log_softmax(x); dx = d - exp(y) sum(d) (sums in double) */                   \
    void pipit__softmax_##S(T *y, const T *x, int64_t rows, int64_t C, int ith, int nth);  \
    void pipit__softmax_dx_##S(T *dx, const T *y, const T *d, int64_t rows, int64_t C,     \
                               int ith, int nth);                                         \
    void pipit__log_softmax_##S(T *y, const T *x, int64_t rows, int64_t C, int ith,        \
                                int nth);                                                 \
    void pipit__log_softmax_dx_##S(T *dx, const T *y, const T *d, int64_t rows,            \
                                   int64_t C, int ith, int nth);                          \
    /* x [outer, n, inner] -> out [outer, inner]: the max over n; max_dx puts              \
     * d [outer, inner] at the first maximal element of each run, 0 elsewhere */           \
    void pipit__max_axis_##S(T *out, const T *x, int64_t outer, int64_t n, int64_t inner, \
                             int ith, int nth);                                          \
    void pipit__max_dx_##S(T *dx, const T *x, const T *d, int64_t outer, int64_t n,       \
                           int64_t inner, int ith, int nth);                             \
    /* out [rows, ow] columns [oc, oc+w) = x [rows, xw] columns [xc, xc+w)                 \
     * (slices, concat); pad_cols also zeroes out's other columns (slice_dx) */           \
    void pipit__copy_cols_##S(T *out, int64_t ow, int64_t oc, const T *x, int64_t xw,     \
                              int64_t xc, int64_t rows, int64_t w, int ith, int nth);     \
    void pipit__pad_cols_##S(T *out, int64_t ow, int64_t oc, const T *x, int64_t rows,    \
                             int64_t w, int ith, int nth);                               \
    /* Attention of any layout (pipit__attn_dims): out = softmax(q k^T scale) v;         \
     * the backward writes dq, dk, dv (recomputing the probabilities). Threads          \
     * split (batch, kv head) pairs; a pair's query heads run in order, so dk            \
     * and dv sum them in a fixed order. _stream: the online-softmax fallback           \
     * without [T,S] scratch. */                                                         \
    void pipit__attn_fwd_##S(T *out, const T *q, const T *k, const T *v,                 \
                             const pipit__attn_dims *a, int ith, int nth);               \
    void pipit__attn_bwd_##S(T *dq, T *dk, T *dv, const T *q, const T *k, const T *v,    \
                             const T *dout, const pipit__attn_dims *a, int ith, int nth);\
    void pipit__attn_fwd_stream_##S(T *out, const T *q, const T *k, const T *v,          \
                                    const pipit__attn_dims *a, int ith, int nth);        \
    void pipit__attn_bwd_stream_##S(T *dq, T *dk, T *dv, const T *q, const T *k,         \
                                    const T *v, const T *dout, const pipit__attn_dims *a, \
                                    int ith, int nth);                                   \
    /* GELU, tanh approximation (GPT-2): 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) */     \
    void pipit__gelu_##S(T *out, const T *x, int64_t n, int ith, int nth);             \
    void pipit__gelu_dx_##S(T *dx, const T *x, const T *dout, int64_t n, int ith,      \
                            int nth);                                                   \
    /* out[i,:] = table[idx[i],:]; idx [n] int32 in [0,V) */                            \
    void pipit__embed_##S(T *out, const T *table, const int32_t *idx, int64_t n,       \
                          int64_t C, int ith, int nth);                                 \
    /* dtable [V,C] = scatter-add of dout rows by idx, i ascending */                   \
    void pipit__embed_dtable_##S(T *dtable, const int32_t *idx, const T *dout,         \
                                 int64_t n, int64_t V, int64_t C, int ith, int nth);    \
    /* Vocab parallel, the shard of rows (classes) [off, off + V): the same two     \
     * with another shard's index reading zeros / skipped; the target logit     \
     * out[r] = z[r, y[r] - off] (0 off the shard) and its gradient dz [rows,V]. */ \
    void pipit__embed_vp_##S(T *out, const T *table, const int32_t *idx, int64_t n,    \
                             int64_t C, int64_t off, int64_t V, int ith, int nth);      \
    void pipit__embed_dtable_vp_##S(T *dtable, const int32_t *idx, const T *dout,      \
                                    int64_t n, int64_t V, int64_t C, int64_t off,       \
                                    int ith, int nth);                                  \
    void pipit__tp_pick_##S(T *out, const T *z, const int32_t *y, int64_t rows,        \
                            int64_t V, int64_t off, int ith, int nth);                  \
    void pipit__tp_pick_dx_##S(T *dz, const int32_t *y, const T *d, int64_t rows,      \
                               int64_t V, int64_t off, int ith, int nth);               \
    /* Causal self-attention. qkv [B,Tq,3C] holds q|k|v; H heads of D=C/H;             \
     * out [B,T,C] = softmax(q k^T / sqrt(D), causal) v, heads concatenated. */        \
    void pipit__attention_##S(T *out, const T *qkv, int64_t B, int64_t Tq, int64_t C,  \
                              int64_t H, int ith, int nth);                             \
    /* The same two, streaming keys with an online softmax and no scratch:     \
     * the fallback when the blocked kernels cannot get their [T,T] scratch. */ \
    void pipit__attention_stream_##S(T *out, const T *qkv, int64_t B, int64_t Tq,       \
                                     int64_t C, int64_t H, int ith, int nth);            \
    void pipit__attention_dqkv_stream_##S(T *dqkv, const T *qkv, const T *dout,          \
                                          int64_t B, int64_t Tq, int64_t C, int64_t H,   \
                                          int ith, int nth);                              \
    /* dqkv [B,T,3C] from qkv and dout [B,T,C] (recomputes probabilities) */            \
    void pipit__attention_dqkv_##S(T *dqkv, const T *qkv, const T *dout, int64_t B,    \
                                   int64_t Tq, int64_t C, int64_t H, int ith, int nth); \
    /* Per-row softmax cross-entropy: loss[r] = logsumexp(x[r,:]) - x[r,t[r]], in AT */ \
    void pipit__xent_rows_##S(AT *loss, const T *logits, const int32_t *targets,        \
                              int64_t rows, int64_t V, int ith, int nth);               \
    /* dlogits[r,:] = dloss[r] * (softmax(x[r,:]) - onehot(t[r])) */                    \
    void pipit__xent_dlogits_##S(T *dlogits, const T *logits, const int32_t *targets,  \
                                 const AT *dloss, int64_t rows, int64_t V, int ith,      \
                                 int nth);

PIPIT_KERNEL_DECLS(float, float, f32)
PIPIT_KERNEL_DECLS(double, double, f64)
/* The blocked attention's softmax on a [Tq,Tk] block of scores (keys past
 * the causal diagonal zeroed), and its backward dP -> dS = P (dP -
 * rowsum(P dP)) scale, as the kernels above run them. */
void pipit__attn_softmax_block_f32(float *P, const pipit__attn_dims *a);
void pipit__attn_dsoftmax_block_f32(float *dP, const float *P, const pipit__attn_dims *a);
void pipit__attn_softmax_block_f64(double *P, const pipit__attn_dims *a);
void pipit__attn_dsoftmax_block_f64(double *dP, const double *P, const pipit__attn_dims *a);
/* bf16 storage, fp32 arithmetic (kernels_impl.h; attention and GEMM on
 * fp32 panels: kernels_bf16.c, gemm_bf16.c) */
PIPIT_KERNEL_DECLS(pipit__bf16, float, bf16)

/* A kernel that cannot run (its scratch memory could not be had) zeroes
 * its output and records why for the world rank whose thread runs it
 * (pipit__kernel_bind: the cpu backend's bind); the rank's next sync
 * returns it as RUNTIME (pipit__kernel_take_error: NULL when none) -- the
 * CPU's counterpart of a device backend's sticky error. `why` must be a
 * static string. */
void pipit__kernel_bind(int rank);
void pipit__kernel_fail(const char *why);
const char *pipit__kernel_take_error(int rank);

/* pipit__bf16_narrow_n's bits; an output of 4 MB or more is written past
 * the caches (non-temporal stores) where the CPU has AVX2. */
void pipit__bf16_narrow_large(pipit__bf16 *dst, const float *src, int64_t n);
/* The same rounding, stored past the caches (where the CPU has AVX2: a
 * buffer nothing reads soon), unfenced: call pipit__bf16_stream_fence once
 * after the last of a run of them. */
void pipit__bf16_narrow_streamed(pipit__bf16 *dst, const float *src, int64_t n);
/* The bf16 GELU, SiLU and their backwards on the leading elements, 16
 * lanes at a time where the CPU has AVX512-BF16, with the scalar kernels'
 * bits; return how many they did (0 without it). kernels_avx512.c */
int64_t pipit__gelu_bf16_wide(pipit__bf16 *out, const pipit__bf16 *x, int64_t n);
int64_t pipit__gelu_dx_bf16_wide(pipit__bf16 *dx, const pipit__bf16 *x, const pipit__bf16 *dout, int64_t n);
int64_t pipit__silu_bf16_wide(pipit__bf16 *out, const pipit__bf16 *x, int64_t n);
int64_t pipit__silu_dx_bf16_wide(pipit__bf16 *dx, const pipit__bf16 *x, const pipit__bf16 *dout, int64_t n);
/* The cross-entropy's passes the same way: acc[l] += exp(x[i] - m) for
 * i = l mod 8, in order, the exponentials also into kept (unless NULL);
 * out = kept * f rounded. */
int64_t pipit__sum_exp_bf16_wide(const pipit__bf16 *x, int64_t n, float m, float *kept, double acc[8]);
int64_t pipit__scale_narrow_bf16_wide(pipit__bf16 *out, const float *kept, float f, int64_t n);
/* acc[l] = max(acc[l], x[i]) for i = l mod 8 in order (kernels_impl.h's
 * maxv lanes); acc[j] += x[r * C + j] over the rows for the leading
 * columns j < w (returns how many: a multiple of 16). */
int64_t pipit__maxv_bf16_wide(const pipit__bf16 *x, int64_t n, float acc[8]);
int64_t pipit__sum_rows_bf16_wide(const pipit__bf16 *x, int64_t rows, int64_t C, int64_t w, double *acc);
void pipit__bf16_stream_fence(void);
/* memset(p, 0, bytes); 8 MB or more written past the caches where the CPU
 * has AVX2 (kernels_bf16.c, beside the other streaming stores). */
void pipit__zero_large(void *p, size_t bytes);
/* out [n] = x [n] converted from dtype xdt to dtype odt (f32, f64, bf16),
 * rounded to nearest even (from f64 to bf16 correctly, in one rounding). */
void pipit__convert(void *out, pipit_dtype odt, const void *x, pipit_dtype xdt, int64_t n, int ith, int nth);
/* The bf16 GEMM (pipit__gemm_bf16's arguments) into an fp32 C: each
 * element the fp32 sum of its products (plus the old C when accumulating),
 * never rounded to bf16. The weight-gradient accumulation fusion
 * (kctx.acc_f32): a bf16 matmul writes its product straight into its
 * fp32 accumulator. The same tiles and ways as pipit__gemm_bf16. */
void pipit__gemm_bf16_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                          const pipit__bf16 *A, int64_t lda, int64_t sA, const pipit__bf16 *B, int64_t ldb, int64_t sB,
                          float *C, int64_t ldc, int64_t sC, int accumulate, int ith, int nth);
/* The bf16 GEMM (not accumulating) with bias [N] added to every row of each
 * product in fp32 before the one rounding to bf16: a matmul with the
 * BIAS_ADD that reads it in its epilogue (kctx.epi_bias). */
void pipit__gemm_bf16_bias(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                           const pipit__bf16 *A, int64_t lda, int64_t sA, const pipit__bf16 *B, int64_t ldb, int64_t sB,
                           const pipit__bf16 *bias, pipit__bf16 *C, int64_t ldc, int64_t sC, int ith, int nth);
/* One tile [m, n] of the bf16 GEMM by pairs (gemm_pairs.c): op(A) rows a,
 * op(B) columns b (stored as pipit__gemm_bf16 takes them), into a bf16 C
 * (bias added, may be NULL) or an fp32 C (c32); scratch holds
 * pipit__pairs_scratch_bytes(ta, tb, m or more, n or more, K). avx512: the
 * vdpbf16ps micro-kernel (only where the CPU has it), else the same sums
 * through an emulated instruction. */
size_t pipit__pairs_scratch_bytes(int ta, int tb, int64_t mt, int64_t nt, int64_t K);
/* The rows of a pairs tile with op(A) = A^T, at most mt: few enough that
 * their packed pairs (rows x K/2 x 4 bytes) stay in L2. */
int64_t pipit__pairs_rows(int64_t mt, int64_t K);
/* The columns of a pairs tile, at most nt: few enough that op(B) = B's
 * packed chunk (K's pairs per pass x columns x 4 bytes) stays in L2. */
int64_t pipit__pairs_cols(int64_t nt, int64_t K);
/* stream (not accumulating): C's whole 64-byte lines written around the
 * caches (a C too large to be there for its next reader; the tile ends
 * with a store fence, so whoever the thread pool lets read C next sees it). */
void pipit__pairs_tile(int ta, int tb, int64_t m, int64_t n, int64_t K, const pipit__bf16 *a, int64_t lda,
                       const pipit__bf16 *b, int64_t ldb, const pipit__bf16 *bias, void *c, int c32, int64_t ldc,
                       int accumulate, int stream, void *scratch, int avx512);
/* gemm_pairs.c's packings, for gemm_amx.c: dst [ceil(K/2)][ldp] = the pairs
 * (x[2k][j], x[2k+1][j]) for j < w, x [K, w] of row stride ld (zero for
 * w <= j < wp and for an odd K's missing row); and bp [ceil(K/2)][ldp] =
 * the pairs (x[j][2k], x[j][2k+1]) for j < n, x [n, K] of row stride ld
 * (zero for n <= j < ldp and past an odd K), x's rows from n up to ahead
 * prefetched. vector: AVX-512 (only where the CPU has AVX512-BF16). */
void pipit__pairs_interleave(const uint16_t *x, int64_t ld, int64_t K, int64_t w, int64_t wp, uint32_t *dst,
                             int64_t ldp, int vector);
void pipit__pairs_transpose(const uint16_t *x, int64_t ld, int64_t n, int64_t K, uint32_t *bp, int64_t ldp,
                            int vector, int64_t ahead);
/* gemm_amx.c: one tile of the bf16 GEMM as pipit__pairs_tile forms it, by
 * AMX's tile matrix multiply (amx: only where pipit__cpu_amx_why_not() is
 * NULL), else the same data movement through an emulated TDPBF16PS whose
 * sums are the emulated vdpbf16ps's (tests); scratch holds
 * pipit__amx_scratch_bytes(ta, tb, m or more, n or more, K). */
size_t pipit__amx_scratch_bytes(int ta, int tb, int64_t mt, int64_t nt, int64_t K);
void pipit__amx_tile(int ta, int tb, int64_t m, int64_t n, int64_t K, const pipit__bf16 *a, int64_t lda,
                     const pipit__bf16 *b, int64_t ldb, const pipit__bf16 *bias, void *c, int c32, int64_t ldc,
                     int accumulate, int stream, void *scratch, int amx);
/* NULL where this CPU and OS run AMX-BF16 (the process was granted the
 * tile state), else why not. */
const char *pipit__cpu_amx_why_not(void);
/* Which bf16 GEMM runs on this CPU (pipit_cpu_bf16_gemm): "amx",
 * "avx512bf16", "onednn (...)" or "fp32 panels", chosen at run time by what
 * the CPU has (gemm_bf16.c). Results differ in the last bits between them,
 * never between thread counts. */
const char *pipit__gemm_bf16_kind(void);
/* Tests: 1 fp32 panels, 2 avx512bf16 (only where the CPU has it), 3 the
 * pair packing with an emulated vdpbf16ps, 4 oneDNN (falls back where
 * pipit__onednn_bf16_why_not() says why), 5 amx (only where
 * pipit__cpu_amx_why_not() is NULL), 6 the AMX tiles with an emulated
 * TDPBF16PS; 0 chooses by the CPU again. */
void pipit__gemm_bf16_set_kind(int kind);
/* 1 where that kind is oneDNN (pipit__gemm_bf16 tries pipit__gemm_onednn
 * first), else 0. */
int pipit__gemm_bf16_onednn(void);
/* 1 where that kind multiplies bf16 itself (AMX, oneDNN, or the pairs
 * kernel on AVX512-BF16), 0 for the fp32 panels and the tests' emulation: the fused
 * head's bf16 logits GEMMs ask (head_xent.c). */
int pipit__gemm_bf16_direct(void);
/* How pipit__pairs_tile may run here: 1 its vdpbf16ps kernel (the kind is
 * the pairs kernel, AMX, or oneDNN on a CPU with AVX512-BF16), 2 its emulated
 * instruction (the tests' kind 3), 0 not at all (fp32 panels): bf16
 * attention's products ask (attn_pairs.c). */
int pipit__gemm_bf16_pairs(void);
/* attn_pairs.c: bf16 attention (pipit__attn_fwd_bf16's arguments) with
 * its products on pairs tiles; 0 when it did nothing (the pairs kernel
 * does not run here, or the shapes are past its limits: the same on every
 * thread): the caller runs the fp32 panels. Out of memory for its buffers:
 * pipit__kernel_fail, 1. */
int pipit__attn_pairs_fwd(pipit__bf16 *out, const pipit__bf16 *q, const pipit__bf16 *k, const pipit__bf16 *v,
                          const pipit__attn_dims *a, int ith, int nth);
int pipit__attn_pairs_bwd(pipit__bf16 *dq, pipit__bf16 *dk, pipit__bf16 *dv, const pipit__bf16 *q, const pipit__bf16 *k,
                          const pipit__bf16 *v, const pipit__bf16 *dout, const pipit__attn_dims *a, int ith, int nth);

/* gemm_onednn.c: the GEMM above (pipit__gemm_##S's arguments) as one
 * single-threaded oneDNN matmul per tile of gemm.c's rule, A and B of type
 * dab, C of type dc (f32 or bf16), primitives cached per tile shape.
 * Returns 0 when done (on out of memory: pipit__kernel_fail, C zeroed
 * unless accumulating), 1 when oneDNN has no non-reference implementation
 * for one of this GEMM's tile shapes, or K <= 0: nothing was written and
 * the caller runs another way (the choice is the same on every thread).
 * pipit runs it in bf16; tests run the same path in f32 on any CPU. */
int pipit__gemm_onednn(pipit_dtype dab, pipit_dtype dc, int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N,
                       int64_t K, const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB,
                       void *C, int64_t ldc, int64_t sC, int accumulate, int ith, int nth);
/* The same with a bias row (bias [N] of type dab, or NULL) added to each
 * row of each op(A) op(B) in fp32 before C's one rounding: oneDNN's bias. */
int pipit__gemm_onednn_bias(pipit_dtype dab, pipit_dtype dc, int trans_a, int trans_b, int64_t batch, int64_t M,
                            int64_t N, int64_t K, const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb,
                            int64_t sB, const void *bias, void *C, int64_t ldc, int64_t sC, int accumulate, int ith,
                            int nth);
/* NULL where oneDNN has a bf16 matmul that is not a reference one on an ISA
 * with bf16 arithmetic (ONEDNN_MAX_CPU_ISA can cap it), else why not. */
const char *pipit__onednn_bf16_why_not(void);
/* Its implementation ("brg:avx512_core_bf16"), NULL where there is none;
 * the kind's name, "onednn (<implementation>)". */
const char *pipit__onednn_bf16_impl(void);
const char *pipit__onednn_bf16_name(void);
/* Primitives made (tile keys met first) and reused (cache hits) so far. */
void pipit__onednn_stats(int64_t *created, int64_t *reused);

#endif
