/*
 * cuda_prims.h — the launchers of the CUDA backend's own kernels beyond the
 * op table (prims_cuda.cu): gradient accumulation, per-use sums, sums of
 * squares, AdamW and SGD. Each queues its kernel on `s` and returns the
 * launch's error; backend_cuda.c turns that into the sticky error. Plain C
 * types only, so the header is the same in C and in CUDA C++.
 *
 * Every kernel computes what the CPU loop of backend_cpu.c computes, in the
 * same order with the same roundings: adds, multiplies, divisions and square
 * roots are written as the round-to-nearest intrinsics (__fadd_rn, ...), so
 * nvcc cannot fuse them into FMAs, and the elementwise results are the CPU's
 * bits. Sums of squares are added in double, in a fixed tree that depends on
 * the element count only.
 */
#ifndef PIPIT_CUDA_PRIMS_H
#define PIPIT_CUDA_PRIMS_H

#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of every primitive kernel, and the segment one block
 * of a sum of squares reduces (the runtime's PIPIT_SUMSQ_CHUNK, so a chunk
 * is one block). */
#define PIPIT_CUDA_PRIM_THREADS 256
#define PIPIT_CUDA_SUMSQ_SEG 16384

/* acc[0, n) += x[0, n). */
cudaError_t pipit__cuda_launch_add(int f64, void *acc, const void *x, int64_t n, cudaStream_t s);

/* acc[0, n) (fp32) = x[0, n) (bf16) widened (first), or += it in fp32: a
 * bf16 gradient contribution into its fp32 accumulator. */
cudaError_t pipit__cuda_launch_add_bf16(float *acc, const void *x, int64_t n, int first, cudaStream_t s);

/* dst[a, b) = ((srcs[0] + srcs[1]) + srcs[2]) ... for nsrcs >= 1 (srcs is
 * a host array of device pointers; srcs[0] may be dst). */
cudaError_t pipit__cuda_launch_sum_uses(int f64, void *dst, void *const *srcs, int nsrcs, int64_t a, int64_t b,
                                        cudaStream_t s);

/* out[c - c0] (device) = sum of squares of x[c * chunk, min((c+1) * chunk,
 * n)) for c in [c0, c1); chunk <= PIPIT_CUDA_SUMSQ_SEG: one block each. */
cudaError_t pipit__cuda_launch_sumsq_chunks(int f64, const void *x, int64_t n, int64_t chunk, int64_t c0, int64_t c1,
                                            double *out, cudaStream_t s);

/* *out (device) = sum of squares of x[0, n): partial sums of whole
 * segments of PIPIT_CUDA_SUMSQ_SEG elements into `partials` (device, at
 * least pipit__cuda_sumsq_partials(n) doubles), then one block adds those
 * in a fixed tree. n <= PIPIT_CUDA_SUMSQ_SEG: one block, no partials. */
int64_t pipit__cuda_sumsq_partials(int64_t n);
cudaError_t pipit__cuda_launch_sumsq(int f64, const void *x, int64_t n, double *partials, double *out,
                                     cudaStream_t s);

/* AdamW of w[lo, hi) (torch.optim.AdamW, single tensor; see backend_cpu.c). */
typedef struct {
    double b1, b2, step_size, bc2_sqrt, eps, decay, clip;
} pipit__cuda_adamw_args;
cudaError_t pipit__cuda_launch_adamw(int f64, const pipit__cuda_adamw_args *c, void *w, const void *g, void *m,
                                     void *v, int64_t lo, int64_t hi, cudaStream_t s);

/* w[lo, hi) -= lr * (g * clip), in double, rounded once. */
cudaError_t pipit__cuda_launch_sgd(int f64, double lr, double clip, void *w, const void *g, int64_t lo, int64_t hi,
                                   cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
