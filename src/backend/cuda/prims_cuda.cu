/*
 * prims_cuda.cu — the CUDA backend's primitives beyond the op table: the
 * executor's gradient accumulation and per-use sums, the post-loop's sums
 * of squares and the AdamW / SGD updates (cuda_prims.h). Elementwise
 * kernels use a grid-stride loop (which thread does which element never
 * changes a bit); the sum of squares is a fixed tree per block, so its
 * bits depend on the element count and values only, never on timing, the
 * grid or the device. No atomics anywhere.
 */
#include <string.h>

#include "backend/cuda/cuda_prims.h"

namespace {

const int kThreads = PIPIT_CUDA_PRIM_THREADS;
const int kMaxBlocks = 65535; /* grid-stride beyond: plenty of blocks in flight on any GPU */

/* Round-to-nearest arithmetic that the compiler may not contract into an
 * FMA: the CPU backend is compiled with -ffp-contract=off, and these give
 * its bits. */
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }

int blocks_for(int64_t n) {
    int64_t b = (n + kThreads - 1) / kThreads;
    return (int)(b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : b);
}

template <typename T>
__global__ void add_kernel(T *__restrict__ acc, const T *__restrict__ x, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc[i] = add_rn(acc[i], x[i]);
}

/* acc (fp32) = or += x (bf16, the upper half of an fp32: widened exactly by
 * a shift), added in fp32: the CPU's accumulate_bf16. */
__global__ void add_bf16_kernel(float *__restrict__ acc, const uint16_t *__restrict__ x, int64_t n, int first) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t u = (uint32_t)x[i] << 16;
        float v;
        memcpy(&v, &u, sizeof v);
        acc[i] = first ? v : add_rn(acc[i], v);
    }
}

/* Up to kSrcs sources per launch; longer lists continue from dst, which
 * keeps the CPU's order ((s0 + s1) + s2) + ... exactly. */
const int kSrcs = 8;
template <typename T>
struct srcs_arg {
    const T *p[kSrcs];
    int n;
    int from_dst; /* start from dst's value (a continuation) instead of p[0] */
};

template <typename T>
__global__ void sum_uses_kernel(T *dst, srcs_arg<T> s, int64_t a, int64_t b) {
    for (int64_t i = a + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < b; i += (int64_t)gridDim.x * blockDim.x) {
        T acc = s.from_dst ? dst[i] : s.p[0][i];
#pragma unroll
        for (int k = 0; k < kSrcs; k++) /* unrolled: the pointers stay in registers, in order */
            if (k >= !s.from_dst && k < s.n) acc = add_rn(acc, s.p[k][i]);
        dst[i] = acc;
    }
}

/* The sum of v(x[i]) for i < n over one block of kThreads threads: thread
 * t adds elements t, t + kThreads, ... in order, then a fixed binary tree
 * in shared memory. Every thread returns the block's sum. */
template <typename T, bool kSquare>
__device__ double block_sum(const T *__restrict__ x, int64_t n) {
    __shared__ double sh[kThreads];
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
        double v = (double)x[i];
        acc = __dadd_rn(acc, kSquare ? __dmul_rn(v, v) : v);
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    return sh[0];
}

/* Block j: chunk c0 + j of x[0, n). */
template <typename T>
__global__ void __launch_bounds__(kThreads) sumsq_chunks_kernel(const T *__restrict__ x, int64_t n, int64_t chunk,
                                                                int64_t c0, double *__restrict__ out) {
    int64_t a = (c0 + (int64_t)blockIdx.x) * chunk;
    int64_t b = a + chunk < n ? a + chunk : n;
    double s = block_sum<T, true>(x + a, b > a ? b - a : 0);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}

/* One block: the partials added in the same fixed tree. */
__global__ void __launch_bounds__(kThreads) sum_partials_kernel(const double *__restrict__ p, int64_t n,
                                                                double *__restrict__ out) {
    double s = block_sum<double, false>(p, n);
    if (threadIdx.x == 0) *out = s;
}

template <typename T>
__global__ void adamw_kernel(pipit__cuda_adamw_args c, T *__restrict__ w, const T *__restrict__ gr, T *__restrict__ m,
                             T *__restrict__ v, int64_t n) {
    /* the CPU's constants, rounded to T as it rounds them */
    const T b1 = (T)c.b1, nb1 = (T)(1.0 - c.b1), b2 = (T)c.b2, nb2 = (T)(1.0 - c.b2);
    const T step = (T)c.step_size, bc2 = (T)c.bc2_sqrt, eps = (T)c.eps, decay = (T)c.decay, clip = (T)c.clip;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        T g = mul_rn(gr[i], clip);
        T mi = add_rn(mul_rn(b1, m[i]), mul_rn(nb1, g));
        T vi = add_rn(mul_rn(b2, v[i]), mul_rn(nb2, mul_rn(g, g)));
        m[i] = mi;
        v[i] = vi;
        T den = add_rn(div_rn(sqrt_rn(vi), bc2), eps);
        w[i] = sub_rn(mul_rn(w[i], decay), mul_rn(step, div_rn(mi, den)));
    }
}

__global__ void sgd_f32_kernel(double lr, double clip, float *__restrict__ w, const float *__restrict__ g, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        w[i] = __double2float_rn(__dsub_rn((double)w[i], __dmul_rn(lr, __dmul_rn((double)g[i], clip))));
}

__global__ void sgd_f64_kernel(double lr, double clip, double *__restrict__ w, const double *__restrict__ g, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        w[i] = __dsub_rn(w[i], __dmul_rn(lr, __dmul_rn(g[i], clip)));
}

template <typename T>
cudaError_t sum_uses(T *dst, void *const *srcs, int nsrcs, int64_t a, int64_t b, cudaStream_t st) {
    for (int done = 0; done < nsrcs;) {
        srcs_arg<T> s = {};
        s.from_dst = done > 0;
        while (s.n < kSrcs && done < nsrcs) s.p[s.n++] = (const T *)srcs[done++];
        sum_uses_kernel<T><<<blocks_for(b - a), kThreads, 0, st>>>(dst, s, a, b);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

template <typename T>
cudaError_t sumsq_chunks(const T *x, int64_t n, int64_t chunk, int64_t c0, int64_t c1, double *out, cudaStream_t st) {
    if (c1 <= c0) return cudaSuccess;
    sumsq_chunks_kernel<T><<<(unsigned)(c1 - c0), kThreads, 0, st>>>(x, n, chunk, c0, out);
    return cudaGetLastError();
}

} /* namespace */

extern "C" {

cudaError_t pipit__cuda_launch_add(int f64, void *acc, const void *x, int64_t n, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    if (f64) add_kernel<double><<<blocks_for(n), kThreads, 0, s>>>((double *)acc, (const double *)x, n);
    else add_kernel<float><<<blocks_for(n), kThreads, 0, s>>>((float *)acc, (const float *)x, n);
    return cudaGetLastError();
}

cudaError_t pipit__cuda_launch_add_bf16(float *acc, const void *x, int64_t n, int first, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    add_bf16_kernel<<<blocks_for(n), kThreads, 0, s>>>(acc, (const uint16_t *)x, n, first);
    return cudaGetLastError();
}

cudaError_t pipit__cuda_launch_sum_uses(int f64, void *dst, void *const *srcs, int nsrcs, int64_t a, int64_t b,
                                        cudaStream_t s) {
    if (b <= a || nsrcs < 1) return cudaSuccess;
    return f64 ? sum_uses<double>((double *)dst, srcs, nsrcs, a, b, s)
               : sum_uses<float>((float *)dst, srcs, nsrcs, a, b, s);
}

cudaError_t pipit__cuda_launch_sumsq_chunks(int f64, const void *x, int64_t n, int64_t chunk, int64_t c0, int64_t c1,
                                            double *out, cudaStream_t s) {
    if (chunk < 1 || chunk > PIPIT_CUDA_SUMSQ_SEG || c1 - c0 > 0x7fffffff) return cudaErrorInvalidValue;
    return f64 ? sumsq_chunks<double>((const double *)x, n, chunk, c0, c1, out, s)
               : sumsq_chunks<float>((const float *)x, n, chunk, c0, c1, out, s);
}

int64_t pipit__cuda_sumsq_partials(int64_t n) {
    return n <= PIPIT_CUDA_SUMSQ_SEG ? 0 : (n + PIPIT_CUDA_SUMSQ_SEG - 1) / PIPIT_CUDA_SUMSQ_SEG;
}

cudaError_t pipit__cuda_launch_sumsq(int f64, const void *x, int64_t n, double *partials, double *out,
                                     cudaStream_t s) {
    int64_t np = pipit__cuda_sumsq_partials(n);
    if (np == 0) return pipit__cuda_launch_sumsq_chunks(f64, x, n, PIPIT_CUDA_SUMSQ_SEG, 0, 1, out, s);
    cudaError_t e = pipit__cuda_launch_sumsq_chunks(f64, x, n, PIPIT_CUDA_SUMSQ_SEG, 0, np, partials, s);
    if (e != cudaSuccess) return e;
    sum_partials_kernel<<<1, kThreads, 0, s>>>(partials, np, out);
    return cudaGetLastError();
}

cudaError_t pipit__cuda_launch_adamw(int f64, const pipit__cuda_adamw_args *c, void *w, const void *g, void *m,
                                     void *v, int64_t lo, int64_t hi, cudaStream_t s) {
    int64_t n = hi - lo;
    if (n <= 0) return cudaSuccess;
    if (f64)
        adamw_kernel<double><<<blocks_for(n), kThreads, 0, s>>>(*c, (double *)w + lo, (const double *)g + lo,
                                                                (double *)m + lo, (double *)v + lo, n);
    else
        adamw_kernel<float><<<blocks_for(n), kThreads, 0, s>>>(*c, (float *)w + lo, (const float *)g + lo,
                                                               (float *)m + lo, (float *)v + lo, n);
    return cudaGetLastError();
}

cudaError_t pipit__cuda_launch_sgd(int f64, double lr, double clip, void *w, const void *g, int64_t lo, int64_t hi,
                                   cudaStream_t s) {
    int64_t n = hi - lo;
    if (n <= 0) return cudaSuccess;
    if (f64) sgd_f64_kernel<<<blocks_for(n), kThreads, 0, s>>>(lr, clip, (double *)w + lo, (const double *)g + lo, n);
    else sgd_f32_kernel<<<blocks_for(n), kThreads, 0, s>>>(lr, clip, (float *)w + lo, (const float *)g + lo, n);
    return cudaGetLastError();
}

} /* extern "C" */
