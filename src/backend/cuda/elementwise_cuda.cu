/*
 * elementwise_cuda.cu — the elementwise kernels: add, sub, mul, div (flat
 * and NumPy-broadcast), broadcast_to, scale, bias_add, fill, the unary
 * functions (neg ... tanh, GELU) and their fused gradients. Each output
 * element is one thread's, computed by the CPU's expression
 * (backend/cpu/kernels_impl.h) in the arithmetic type (the element type;
 * fp32 for bf16, loaded exactly and rounded once on store) with the
 * precise libm functions; a grid-stride loop covers any size. Which thread computes an
 * element never changes its bits, so every kernel here is deterministic.
 */
#include <cmath>

#include "backend/cuda/ops_cuda.cuh"
#include "ir/graph.h"

#define NTH PIPIT_CUDA_THREADS

/* ------------------------------------------------------------ binary ops */

template <class T, int OP>
__device__ __forceinline__ T binop(T a, T b) {
    switch (OP) {
    case PIPIT_OP_ADD: return a + b;
    case PIPIT_OP_SUB: return a - b;
    case PIPIT_OP_MUL: return a * b;
    default: return a / b; /* PIPIT_OP_DIV */
    }
}

template <class T, int OP>
__global__ void binary_kernel(T *out, const T *a, const T *b, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) out[i] = binop<pipit_arith<T>, OP>(a[i], b[i]);
}

/* The loop nest of a broadcast: out's dims, the strides of a and b. */
struct bcast_args {
    int64_t d[4], sa[4], sb[4];
};

template <class T, int OP>
__global__ void binary_bcast_kernel(T *out, const T *a, const T *b, bcast_args g, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) {
        out[i] = binop<pipit_arith<T>, OP>(a[pipit_nest_at(g.d, g.sa, i)], b[pipit_nest_at(g.d, g.sb, i)]);
    }
}

/* out [d] = x walked with strides sa (sb unused) */
template <class T>
__global__ void broadcast_kernel(T *out, const T *x, bcast_args g, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) out[i] = x[pipit_nest_at(g.d, g.sa, i)];
}

static bcast_args nest(const int64_t dims[4], const int64_t sa[4], const int64_t *sb) {
    bcast_args g;
    for (int i = 0; i < 4; i++) {
        g.d[i] = dims[i];
        g.sa[i] = sa[i];
        g.sb[i] = sb ? sb[i] : 0;
    }
    return g;
}

static int64_t nest_count(const bcast_args &g) { return g.d[0] * g.d[1] * g.d[2] * g.d[3]; }

/* Instantiates launcher L<T, OP> for the op chosen at run time. */
#define BINARY_SWITCH(op, L, ...)                                 \
    switch (op) {                                                 \
    case PIPIT_OP_ADD: L<T, PIPIT_OP_ADD>(__VA_ARGS__); break;    \
    case PIPIT_OP_SUB: L<T, PIPIT_OP_SUB>(__VA_ARGS__); break;    \
    case PIPIT_OP_MUL: L<T, PIPIT_OP_MUL>(__VA_ARGS__); break;    \
    case PIPIT_OP_DIV: L<T, PIPIT_OP_DIV>(__VA_ARGS__); break;    \
    default: pipit__cuda_check(cudaErrorInvalidValue, "binary: not a binary op"); \
    }

template <class T, int OP>
static void launch_binary(void *out, const void *a, const void *b, int64_t n) {
    binary_kernel<T, OP><<<pipit_grid_for(n, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, (const T *)a,
                                                                                  (const T *)b, n);
}
template <class T>
static void binary(int op, void *out, const void *a, const void *b, int64_t n) {
    BINARY_SWITCH(op, launch_binary, out, a, b, n)
}

template <class T, int OP>
static void launch_binary_bcast(void *out, const void *a, const void *b, bcast_args g) {
    int64_t n = nest_count(g);
    binary_bcast_kernel<T, OP><<<pipit_grid_for(n, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, (const T *)a,
                                                                                         (const T *)b, g, n);
}
template <class T>
static void binary_bcast(int op, void *out, const void *a, const void *b, bcast_args g) {
    BINARY_SWITCH(op, launch_binary_bcast, out, a, b, g)
}
#undef BINARY_SWITCH

void pipit__cuda_binary(pipit_dtype dt, int op, void *out, const void *a, const void *b, int64_t n) {
    if (n <= 0) return;
    PIPIT_BY_DTYPE(dt, binary, op, out, a, b, n);
    PIPIT_CUDA_LAUNCHED(pipit__ops[op].name);
}

void pipit__cuda_binary_bcast(pipit_dtype dt, int op, void *out, const void *a, const void *b,
                              const int64_t dims[4], const int64_t sa[4], const int64_t sb[4]) {
    bcast_args g = nest(dims, sa, sb);
    if (nest_count(g) <= 0) return;
    PIPIT_BY_DTYPE(dt, binary_bcast, op, out, a, b, g);
    PIPIT_CUDA_LAUNCHED(pipit__ops[op].name);
}

void pipit__cuda_broadcast(pipit_dtype dt, void *out, const void *x, const int64_t dims[4], const int64_t sx[4]) {
    bcast_args g = nest(dims, sx, NULL);
    if (nest_count(g) <= 0) return;
    PIPIT_LAUNCH_T(dt, broadcast_kernel, pipit_grid_for(nest_count(g), NTH), NTH, (T *)out, (const T *)x, g,
                   nest_count(g));
    PIPIT_CUDA_LAUNCHED("broadcast_to");
}

/* ------------------------------------------------------------ scale, bias, fill */

template <class T>
__global__ void scale_kernel(T *out, const T *a, pipit_arith<T> alpha, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) out[i] = alpha * (pipit_arith<T>)a[i];
}
/* out, x [rows, C]; bias [C] */
template <class T>
__global__ void bias_add_kernel(T *out, const T *x, const T *bias, int64_t n, int64_t C) {
    PIPIT_GRID_STRIDE(i, n) out[i] = (pipit_arith<T>)x[i] + (pipit_arith<T>)bias[i % C];
}
/* out [n] = scalar[0] * scale, rounded once as on the CPU (bf16: from
 * double, correctly) */
template <class T>
__global__ void fill_kernel(T *out, const T *scalar, double scale, int64_t n) {
    T v = (T)((double)(pipit_arith<T>)scalar[0] * scale);
    PIPIT_GRID_STRIDE(i, n) out[i] = v;
}

void pipit__cuda_scale(pipit_dtype dt, void *out, const void *x, double alpha, int64_t n) {
    if (n <= 0) return;
    PIPIT_LAUNCH_T(dt, scale_kernel, pipit_grid_for(n, NTH), NTH, (T *)out, (const T *)x, (A)alpha, n);
    PIPIT_CUDA_LAUNCHED("scale");
}

void pipit__cuda_bias_add(pipit_dtype dt, void *out, const void *x, const void *bias, int64_t rows, int64_t C) {
    if (rows <= 0 || C <= 0) return;
    PIPIT_LAUNCH_T(dt, bias_add_kernel, pipit_grid_for(rows * C, NTH), NTH, (T *)out, (const T *)x, (const T *)bias,
                   rows * C, C);
    PIPIT_CUDA_LAUNCHED("bias_add");
}

void pipit__cuda_fill(pipit_dtype dt, void *out, const void *scalar, double scale, int64_t n) {
    if (n <= 0) return;
    PIPIT_LAUNCH_T(dt, fill_kernel, pipit_grid_for(n, NTH), NTH, (T *)out, (const T *)scalar, scale, n);
    PIPIT_CUDA_LAUNCHED("fill");
}

/* ------------------------------------------------------------ unary functions */

/* GPT-2's tanh GELU in the CPU's form: 0.5x(1 + tanh(u)) = x / (1 + exp(-2u)),
 * u = sqrt(2/pi)(x + 0.044715x^3), the same expressions in T. */
#define GELU_S2PI ((T)0.79788456080286535588) /* sqrt(2/pi) */
#define GELU_K ((T)0.044715)

/* y = f(v), the CPU's UNARY expressions */
template <class T, int OP>
__device__ __forceinline__ T unary_f(T v) {
    switch (OP) {
    case PIPIT_OP_NEG: return -v;
    case PIPIT_OP_EXP: return pipit_dexp(v);
    case PIPIT_OP_LOG: return pipit_dlog(v);
    case PIPIT_OP_SQRT: return pipit_dsqrt(v);
    case PIPIT_OP_RSQRT: return (T)1 / pipit_dsqrt(v); /* not rsqrt(): that is not correctly rounded */
    case PIPIT_OP_ABS: return pipit_dabs(v);
    case PIPIT_OP_RELU: return v < 0 ? (T)0 : v; /* NaN stays NaN */
    case PIPIT_OP_SILU: return v / ((T)1 + pipit_dexp(-v));
    case PIPIT_OP_SIGMOID: return (T)1 / ((T)1 + pipit_dexp(-v));
    case PIPIT_OP_TANH: return pipit_dtanh(v);
    default: { /* PIPIT_OP_GELU */
        T u = GELU_S2PI * (v + GELU_K * v * v * v);
        return v / ((T)1 + pipit_dexp((T)-2 * u));
    }
    }
}

/* dx = g * f'(.) with v = x or y (the CPU's UNARY_DX and fused kernels) */
template <class T, int OP>
__device__ __forceinline__ T unary_dx(T v, T g) {
    switch (OP) {
    case PIPIT_OP_SQRT_DX: return g / ((T)2 * v);             /* y = sqrt x: 1/(2y) */
    case PIPIT_OP_RSQRT_DX: return (T)-0.5 * g * (v * v * v); /* y = x^-1/2: -y^3/2 */
    case PIPIT_OP_ABS_DX: return v > 0 ? g : v < 0 ? -g : (T)0;
    case PIPIT_OP_RELU_DX: return v > 0 ? g : (T)0;
    case PIPIT_OP_SIGMOID_DX: return g * (v * ((T)1 - v));
    case PIPIT_OP_TANH_DX: return g * ((T)1 - v * v);
    case PIPIT_OP_SILU_DX: { /* silu' = s (1 + x (1 - s)), s = sigmoid(x) */
        T sg = (T)1 / ((T)1 + pipit_dexp(-v));
        return g * (sg * ((T)1 + v * ((T)1 - sg)));
    }
    default: { /* PIPIT_OP_GELU_DX: gelu' = sg + 2x sg(1 - sg) du/dx, sg = sigmoid(2u) */
        T sg = (T)1 / ((T)1 + pipit_dexp((T)-2 * GELU_S2PI * (v + GELU_K * v * v * v)));
        T du = GELU_S2PI * ((T)1 + (T)3 * GELU_K * v * v);
        T d = sg + (T)2 * v * sg * ((T)1 - sg) * du;
        return d * g;
    }
    }
}
#undef GELU_S2PI
#undef GELU_K

template <class T, int OP>
__global__ void unary_kernel(T *out, const T *x, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) out[i] = unary_f<pipit_arith<T>, OP>(x[i]);
}
template <class T, int OP>
__global__ void unary_dx_kernel(T *dx, const T *t, const T *d, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) dx[i] = unary_dx<pipit_arith<T>, OP>(t[i], d[i]);
}

template <class T, int OP>
static void launch_unary(void *out, const void *x, int64_t n) {
    unary_kernel<T, OP><<<pipit_grid_for(n, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, (const T *)x, n);
}
template <class T, int OP>
static void launch_unary_dx(void *dx, const void *t, const void *d, int64_t n) {
    unary_dx_kernel<T, OP><<<pipit_grid_for(n, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)dx, (const T *)t,
                                                                                    (const T *)d, n);
}

#define CASE(NAME, L, ...) \
    case PIPIT_OP_##NAME: L<T, PIPIT_OP_##NAME>(__VA_ARGS__); break;

template <class T>
static void unary(int op, void *out, const void *x, int64_t n) {
    switch (op) {
        CASE(NEG, launch_unary, out, x, n)
        CASE(EXP, launch_unary, out, x, n)
        CASE(LOG, launch_unary, out, x, n)
        CASE(SQRT, launch_unary, out, x, n)
        CASE(RSQRT, launch_unary, out, x, n)
        CASE(ABS, launch_unary, out, x, n)
        CASE(RELU, launch_unary, out, x, n)
        CASE(SILU, launch_unary, out, x, n)
        CASE(SIGMOID, launch_unary, out, x, n)
        CASE(TANH, launch_unary, out, x, n)
        CASE(GELU, launch_unary, out, x, n)
    default: pipit__cuda_check(cudaErrorInvalidValue, "unary: not a unary op");
    }
}

template <class T>
static void unary_dx_op(int op, void *dx, const void *t, const void *d, int64_t n) {
    switch (op) {
        CASE(SQRT_DX, launch_unary_dx, dx, t, d, n)
        CASE(RSQRT_DX, launch_unary_dx, dx, t, d, n)
        CASE(ABS_DX, launch_unary_dx, dx, t, d, n)
        CASE(RELU_DX, launch_unary_dx, dx, t, d, n)
        CASE(SILU_DX, launch_unary_dx, dx, t, d, n)
        CASE(SIGMOID_DX, launch_unary_dx, dx, t, d, n)
        CASE(TANH_DX, launch_unary_dx, dx, t, d, n)
        CASE(GELU_DX, launch_unary_dx, dx, t, d, n)
    default: pipit__cuda_check(cudaErrorInvalidValue, "unary_dx: not a fused gradient op");
    }
}
#undef CASE

void pipit__cuda_unary(pipit_dtype dt, int op, void *out, const void *x, int64_t n) {
    if (n <= 0) return;
    PIPIT_BY_DTYPE(dt, unary, op, out, x, n);
    PIPIT_CUDA_LAUNCHED(pipit__ops[op].name);
}

void pipit__cuda_unary_dx(pipit_dtype dt, int op, void *dx, const void *t, const void *d, int64_t n) {
    if (n <= 0) return;
    PIPIT_BY_DTYPE(dt, unary_dx_op, op, dx, t, d, n);
    PIPIT_CUDA_LAUNCHED(pipit__ops[op].name);
}
