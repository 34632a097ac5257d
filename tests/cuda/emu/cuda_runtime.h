/*
 * emu/cuda_runtime.h — a CPU stand-in for the part of the CUDA runtime the
 * kernel files use, so that the .cu files of src/backend/cuda can be compiled by
 * g++ and run on the host (tests/cuda/emulate.sh): a block's threads are
 * fibers on the launching thread (real threads under TSan), __syncthreads a barrier, a warp shuffle an exchange through
 * memory, __shared__ a static (blocks run one after another). It checks
 * indexing (under ASan: every global and shared access), barriers and
 * reductions on a machine without a GPU; it says nothing about speed.
 * Usable from C (the runtime calls) and C++ (the kernel language).
 */
#ifndef PIPIT_EMU_CUDA_RUNTIME_H
#define PIPIT_EMU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorLaunchFailure = 719
} cudaError_t;
typedef struct pipit_emu_stream *cudaStream_t;
typedef struct pipit_emu_pool *cudaMemPool_t;
typedef enum { cudaMemPoolAttrReleaseThreshold = 4 } cudaMemPoolAttr;
/* Device memory is host memory here, so every direction is a memcpy. */
typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

#ifdef __cplusplus
extern "C" {
#endif
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int dev);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void *value);
#ifdef __cplusplus
}

#include <cstring>
#include <functional>

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
extern thread_local uint3 threadIdx, blockIdx;
extern thread_local dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

/* Round-to-nearest arithmetic (prims_cuda.cu): the host's IEEE operations
 * (no FMA contraction: the x86-64 baseline has no FMA instruction). */
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return sqrt(a); }
inline float __double2float_rn(double a) { return (float)a; }

void __syncthreads(void);
/* Lane `lane` publishes bits; returns what lane src published (all lanes of
 * the warp take part, as in __shfl_xor_sync with a full mask). */
uint64_t pipit_emu_shfl(uint64_t bits, unsigned src_xor);

template <class V>
V __shfl_xor_sync(unsigned mask, V v, int o) {
    static_assert(sizeof(V) <= 8, "shuffle of at most 8 bytes");
    (void)mask;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    bits = pipit_emu_shfl(bits, (unsigned)o);
    V r;
    std::memcpy(&r, &bits, sizeof r);
    return r;
}

/* kernel<<<grid, block, smem, stream>>>(args) becomes this call (emulate.sh). */
void pipit_emu_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t s, const std::function<void()> &body);
inline void pipit_emu_launch(dim3 grid, dim3 block, const std::function<void()> &body) {
    pipit_emu_launch(grid, block, 0, nullptr, body);
}
#endif

#endif
