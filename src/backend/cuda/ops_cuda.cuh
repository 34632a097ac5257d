/*
 * ops_cuda.cuh — what the CUDA kernel files share (C++ only, never included
 * from C): stream-ordered scratch memory, launch helpers, small device
 * helpers (precise libm, fixed-order warp reductions), and the launchers of
 * the kernel files. ops_cuda.cu reads each op's sizes off its node (as
 * ops_cpu.c does) and calls these; each launcher takes plain pointers and
 * explicit sizes (as the CPU's kernels.h does), picks f32 or f64 by `dt`,
 * launches on the rank's stream and reports a failed launch under the op's
 * name. Launchers return at once for an empty output.
 */
#ifndef PIPIT_OPS_CUDA_CUH
#define PIPIT_OPS_CUDA_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"

#define PIPIT_ROPE_FREQ_CUDA 1 /* its frequencies as device functions */
#include "backend/rope_freq.h"

/* Scratch for one op (row statistics, partial sums, sort buffers): taken
 * from the device's stream-ordered pool on the current rank's stream and
 * given back on the same stream after the kernels that use it, so reuse is
 * ordered by the stream. NULL (error recorded under `what`) on failure;
 * free accepts NULL. The pool keeps freed memory (release threshold set
 * once per device), so after the first step this costs no allocation. */
void *pipit__cuda_scratch(size_t bytes, const char *what);
void pipit__cuda_scratch_free(void *p, const char *what);

/* ------------------------------------------------------------ launch helpers */

/* Threads per block of the elementwise kernels. */
#define PIPIT_CUDA_THREADS 256

/* Blocks for a grid-stride loop over n items (the loop covers any rest). */
static inline unsigned pipit_grid_for(int64_t n, int per_block) {
    int64_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b > (1 << 20) ? (1 << 20) : b);
}

#define PIPIT_GRID_STRIDE(i, n)                                                   \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

/* Rows of [rows, C] handled a warp each, PIPIT_WARP_ROWS warps a block, in
 * a grid-stride loop over rows (whole warps move together, so their
 * shuffles stay in step). */
#define PIPIT_WARP_ROWS 8
#define PIPIT_WARP_ROW_LOOP(r, rows)                                                               \
    for (int64_t r = (int64_t)blockIdx.x * PIPIT_WARP_ROWS + threadIdx.x / 32; r < (rows); \
         r += (int64_t)gridDim.x * PIPIT_WARP_ROWS)
#define PIPIT_WARP_ROWS_THREADS (32 * PIPIT_WARP_ROWS)
static inline unsigned pipit_warp_rows_grid(int64_t rows) { return pipit_grid_for(rows, PIPIT_WARP_ROWS); }

/* ------------------------------------------------------------ bf16 */

/* bfloat16 in device memory, with the CPU's conversions (util/bf16.h, bit
 * for bit): to float exact; from float round to nearest even, NaN kept
 * (quieted), overflow to infinity; from double correctly rounded (through
 * fp32 rounded to odd). A storage type only: it converts implicitly to
 * float and from float, double and int, so a kernel templated on its
 * element type T loads bf16 into fp32 and rounds once where it stores,
 * provided its intermediates are pipit_arith<T> (fp32), never T. */
struct pipit_cuda_bf16 {
    uint16_t bits;
    pipit_cuda_bf16() = default;
    __host__ __device__ pipit_cuda_bf16(float f) : bits(from_f32(f)) {}
    __host__ __device__ pipit_cuda_bf16(double d) : bits(from_f64(d)) {}
    __host__ __device__ pipit_cuda_bf16(int i) : bits(from_f32((float)i)) {}
    __host__ __device__ operator float() const {
        uint32_t u = (uint32_t)bits << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    static __host__ __device__ uint16_t from_f32(float f) {
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x40u;
        return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r);
    }
    static __host__ __device__ uint16_t from_f64(double d) {
        float f = (float)d;
        if ((double)f != d && isfinite(f)) { /* inexact: toward zero, lowest bit set */
            uint32_t u;
            memcpy(&u, &f, sizeof u);
            if (fabs((double)f) > fabs(d)) u -= 1; /* one step toward zero (|f| > 0 here) */
            u |= 1u;
            memcpy(&f, &u, sizeof f);
        }
        return from_f32(f);
    }
};

/* The arithmetic type of element type T: fp32 for bf16, T itself else. */
template <class T>
struct pipit_arith_of {
    typedef T type;
};
template <>
struct pipit_arith_of<pipit_cuda_bf16> {
    typedef float type;
};
template <class T>
using pipit_arith = typename pipit_arith_of<T>::type;

/* Runs launcher fn<double>, fn<pipit_cuda_bf16> or fn<float> by dtype dt. */
#define PIPIT_BY_DTYPE(dt, fn, ...)                                       \
    do {                                                                  \
        if ((dt) == PIPIT_F64) fn<double>(__VA_ARGS__);                   \
        else if ((dt) == PIPIT_BF16) fn<pipit_cuda_bf16>(__VA_ARGS__);    \
        else fn<float>(__VA_ARGS__);                                      \
    } while (0)

/* Launches kernel K<T> on the rank's stream, T the element type of dtype
 * dt (double for f64, pipit_cuda_bf16 for bf16, else float); the arguments
 * may name T, as in (const T *)x, and A (pipit_arith<T>), so one line
 * serves every type. */
#define PIPIT_LAUNCH_T(dt, K, grid, block, ...)                                  \
    do {                                                                         \
        if ((dt) == PIPIT_F64) {                                                 \
            PIPIT_LAUNCH_AS(double, K, grid, block, __VA_ARGS__);                \
        } else if ((dt) == PIPIT_BF16) {                                         \
            PIPIT_LAUNCH_AS(pipit_cuda_bf16, K, grid, block, __VA_ARGS__);       \
        } else {                                                                 \
            PIPIT_LAUNCH_AS(float, K, grid, block, __VA_ARGS__);                 \
        }                                                                        \
    } while (0)
#define PIPIT_LAUNCH_AS(type, K, grid, block, ...)                           \
    do {                                                                     \
        typedef type T;                                                      \
        typedef pipit_arith<T> A;                                            \
        (void)sizeof(A);                                                     \
        K<T><<<(grid), (block), 0, pipit__cuda_stream()>>>(__VA_ARGS__);     \
    } while (0)

/* The same for the kernels that take f32 and f64 only (reductions, norms,
 * softmax, cross-entropy, RoPE, attention, the embedding's backward): their
 * bf16 ops run them on fp32 copies (ops_cuda.cu's run_widened), so bf16
 * never reaches them; if it did, the launch is refused, not run on memory
 * of another type. */
#define PIPIT_WIDE_ONLY(dt, what) \
    ((dt) == PIPIT_BF16 ? (pipit__cuda_check(cudaErrorInvalidValue, what ": bf16 reached an fp32-only kernel"), 1) : 0)
#define PIPIT_BY_WIDE(dt, fn, ...)                              \
    do {                                                        \
        if (PIPIT_WIDE_ONLY(dt, #fn)) break;                    \
        if ((dt) == PIPIT_F64) fn<double>(__VA_ARGS__);         \
        else fn<float>(__VA_ARGS__);                            \
    } while (0)
#define PIPIT_LAUNCH_WIDE(dt, K, grid, block, ...)                   \
    do {                                                             \
        if (PIPIT_WIDE_ONLY(dt, #K)) break;                          \
        if ((dt) == PIPIT_F64) {                                     \
            PIPIT_LAUNCH_AS(double, K, grid, block, __VA_ARGS__);    \
        } else {                                                     \
            PIPIT_LAUNCH_AS(float, K, grid, block, __VA_ARGS__);     \
        }                                                            \
    } while (0)

/* Reports a failed launch (the sticky error of cuda_backend.h). */
#define PIPIT_CUDA_LAUNCHED(what) pipit__cuda_check(cudaGetLastError(), what)

/* ------------------------------------------------------------ device helpers */

/* The precise libdevice functions (never the __expf intrinsics: no fast
 * math anywhere), overloaded so templates pick float or double. */
__device__ __forceinline__ float pipit_dexp(float x) { return expf(x); }
__device__ __forceinline__ double pipit_dexp(double x) { return exp(x); }
__device__ __forceinline__ float pipit_dlog(float x) { return logf(x); }
__device__ __forceinline__ double pipit_dlog(double x) { return log(x); }
__device__ __forceinline__ float pipit_dsqrt(float x) { return sqrtf(x); } /* IEEE: no fast math */
__device__ __forceinline__ double pipit_dsqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float pipit_dtanh(float x) { return tanhf(x); }
__device__ __forceinline__ double pipit_dtanh(double x) { return tanh(x); }
__device__ __forceinline__ float pipit_dabs(float x) { return fabsf(x); }
__device__ __forceinline__ double pipit_dabs(double x) { return fabs(x); }

/* Sum / max over the `width` lanes of an aligned group of a warp by an xor
 * butterfly: the order is fixed by the lane layout and every lane ends with
 * the same bits (each step adds the same two values, commuted). */
template <class V>
__device__ __forceinline__ V pipit_group_sum(V v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <class V>
__device__ __forceinline__ V pipit_group_max(V v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) {
        V u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return v;
}

/* A loop nest of up to 4 axes (ir/graph.h's pipit__bcast_plan): the offset
 * of flat index e of dims d in an operand walked with strides s (0 along an
 * axis it is broadcast along). */
__device__ __forceinline__ int64_t pipit_nest_at(const int64_t *d, const int64_t *s, int64_t e) {
    int64_t i3 = e % d[3], r = e / d[3];
    int64_t i2 = r % d[2], i1 = r / d[2] % d[1], i0 = r / d[2] / d[1];
    return i0 * s[0] + i1 * s[1] + i2 * s[2] + i3 * s[3];
}

/* ------------------------------------------------------------ elementwise_cuda.cu */

/* out[n] = a OP b for op PIPIT_OP_ADD, SUB, MUL or DIV: flat (both inputs
 * laid out as the output), or broadcast over dims with strides sa, sb. */
void pipit__cuda_binary(pipit_dtype dt, int op, void *out, const void *a, const void *b, int64_t n);
void pipit__cuda_binary_bcast(pipit_dtype dt, int op, void *out, const void *a, const void *b,
                              const int64_t dims[4], const int64_t sa[4], const int64_t sb[4]);
/* out [dims] = x walked with strides sx (broadcast_to). */
void pipit__cuda_broadcast(pipit_dtype dt, void *out, const void *x, const int64_t dims[4], const int64_t sx[4]);
/* y[n] = f(x[n]) for op NEG, EXP, LOG, SQRT, RSQRT, ABS, RELU, SILU, SIGMOID,
 * TANH or GELU; dx[n] = d * f'(.) from t = x or y (as the CPU's) for op
 * SQRT_DX, RSQRT_DX, ABS_DX, RELU_DX, SILU_DX, SIGMOID_DX, TANH_DX or GELU_DX. */
void pipit__cuda_unary(pipit_dtype dt, int op, void *out, const void *x, int64_t n);
void pipit__cuda_unary_dx(pipit_dtype dt, int op, void *dx, const void *t, const void *d, int64_t n);
/* out[n] = alpha * x (alpha rounded to the dtype first, as cpu_SCALE). */
void pipit__cuda_scale(pipit_dtype dt, void *out, const void *x, double alpha, int64_t n);
/* out, x [rows, C]; bias [C] */
void pipit__cuda_bias_add(pipit_dtype dt, void *out, const void *x, const void *bias, int64_t rows, int64_t C);
/* out[n] = scalar[0] * scale */
void pipit__cuda_fill(pipit_dtype dt, void *out, const void *scalar, double scale, int64_t n);

/* ------------------------------------------------------------ reduce_cuda.cu */

/* out [C] = column sums of x [rows, C] (bias gradients). */
void pipit__cuda_sum_rows(pipit_dtype dt, void *out, const void *x, int64_t rows, int64_t C);
/* out [1] = scale * sum of x [n]. */
void pipit__cuda_sum_all(pipit_dtype dt, void *out, const void *x, int64_t n, double scale);
/* out = scale * x [dims] summed over the axes where so (out's strides) is 0. */
void pipit__cuda_sum_to(pipit_dtype dt, void *out, const void *x, const int64_t dims[4], const int64_t so[4],
                        double scale);
/* out [outer, inner] = max over n of x [outer, n, inner]; max_dx puts d at
 * the first maximal element of each run and zeros elsewhere. */
void pipit__cuda_max_axis(pipit_dtype dt, void *out, const void *x, int64_t outer, int64_t n, int64_t inner);
void pipit__cuda_max_dx(pipit_dtype dt, void *dx, const void *x, const void *d, int64_t outer, int64_t n,
                        int64_t inner);
/* Along the last axis of [rows, C], op SOFTMAX / LOG_SOFTMAX: y from x (d
 * unused); SOFTMAX_DX / LOG_SOFTMAX_DX: dx from y = x and d. */
void pipit__cuda_softmax(pipit_dtype dt, int op, void *out, const void *x, const void *d, int64_t rows, int64_t C);
/* Cross-entropy rows: loss [rows]; dlogits [rows, V]. */
void pipit__cuda_xent_rows(pipit_dtype dt, void *loss, const void *logits, const int32_t *targets, int64_t rows,
                           int64_t V);
void pipit__cuda_xent_dlogits(pipit_dtype dt, void *dlogits, const void *logits, const int32_t *targets,
                              const void *dloss, int64_t rows, int64_t V);

/* ------------------------------------------------------------ norms_cuda.cu */

/* LayerNorm over the last axis of [rows, C] (w, b [C]) and its dx, dw. */
void pipit__cuda_layernorm(pipit_dtype dt, void *out, const void *x, const void *w, const void *b, int64_t rows,
                           int64_t C, double eps);
void pipit__cuda_layernorm_dx(pipit_dtype dt, void *dx, const void *x, const void *w, const void *dout,
                              int64_t rows, int64_t C, double eps);
void pipit__cuda_layernorm_dw(pipit_dtype dt, void *dw, const void *x, const void *dout, int64_t rows, int64_t C,
                              double eps);
/* RMSNorm over the last axis of [rows, C] (w [C]) and its dx, dw. */
void pipit__cuda_rmsnorm(pipit_dtype dt, void *out, const void *x, const void *w, int64_t rows, int64_t C,
                         double eps);
void pipit__cuda_rmsnorm_dx(pipit_dtype dt, void *dx, const void *x, const void *w, const void *dout, int64_t rows,
                            int64_t C, double eps);
void pipit__cuda_rmsnorm_dw(pipit_dtype dt, void *dw, const void *x, const void *dout, int64_t rows, int64_t C,
                            double eps);

/* ------------------------------------------------------------ rope_cuda.cu */

/* RoPE, rotate-half (the CPU's pipit__rope): x, out [B,T,H*D], positions
 * pos0 + t, frequencies rf; inverse != 0 rotates back. */
void pipit__cuda_rope(pipit_dtype dt, void *out, const void *x, int64_t B, int64_t T, int64_t H, int64_t D,
                      int64_t pos0, pipit__rope_freqs rf, int inverse);

/* ------------------------------------------------------------ attention_cuda.cu */

/* One attention problem (the CPU's pipit__attn_dims): q [B,Tq,*] with query
 * head h at column h*D, k and v [B,Tk,*] with kv head g at g*D; q head h
 * reads kv head h / (Hq/Hkv); causal masks key j > t (then Tk == Tq);
 * ldq/ldk/ldv/ldo are the row strides of q, k, v and the output (GPT-2's
 * packed qkv [B,T,3C]: q = qkv, k = qkv + C, v = qkv + 2C, each of stride
 * 3C). Gradients have the strides of their inputs. */
struct pipit_cuda_attn {
    int64_t B, Tq, Tk, Hq, Hkv, D;
    int64_t ldq, ldk, ldv, ldo;
    int causal;
    double scale; /* rounded to the element type by the kernels */
    /* packed documents (op attention_doc): doc [B,T] i32 on the device,
     * non-decreasing per sequence (Tq == Tk); a query sees only the keys of
     * its own document, and tiles wholly outside it are skipped. NULL: none
     * (the plain kernels' work and bits). */
    const int32_t *doc;
};
void pipit__cuda_attn_fwd(pipit_dtype dt, void *out, const void *q, const void *k, const void *v,
                          const pipit_cuda_attn *a);
void pipit__cuda_attn_bwd(pipit_dtype dt, void *dq, void *dk, void *dv, const void *q, const void *k, const void *v,
                          const void *dout, const pipit_cuda_attn *a);

/* ------------------------------------------------------------ head_xent_cuda.cu */

/* The fused LM head + cross-entropy (the CPU's head_xent.c contract; T =
 * dt, A its arithmetic type): st [3, N] of A from h [N, d], W [V, d],
 * targets t [N] (classes [off, off + V): a vocab-parallel shard); the
 * backward's [G partial dh [N, d] of A | dW [V, d] of T] from sd [6, N] of
 * A; dh [n] = the G partials [G, n] of A added in group order. */
void pipit__cuda_head_xent(pipit_dtype dt, void *st, const void *h, const void *W, const int32_t *t, int64_t N,
                           int64_t V, int64_t d, int64_t off);
void pipit__cuda_head_xent_bwd(pipit_dtype dt, void *out, const void *h, const void *W, const int32_t *t,
                               const void *sd, int64_t N, int64_t V, int64_t d, int64_t off, int64_t G);
void pipit__cuda_head_xent_dh(pipit_dtype dt, void *dh, const void *bwd, int64_t G, int64_t n);

#endif
