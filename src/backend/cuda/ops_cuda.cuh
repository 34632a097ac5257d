/*
 * ops_cuda.cuh — what the CUDA kernel files share (C++ only, never included
 * from C): stream-ordered scratch memory, the attention launchers of
 * attention_cuda.cu, and small device helpers (precise exp, fixed-order
 * warp reductions). The op kernels themselves are in ops_cuda.cu.
 */
#ifndef PIPIT_OPS_CUDA_CUH
#define PIPIT_OPS_CUDA_CUH

#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_backend.h"

/* Scratch for one op (row statistics, partial sums, sort buffers): taken
 * from the device's stream-ordered pool on the current rank's stream and
 * given back on the same stream after the kernels that use it, so reuse is
 * ordered by the stream. NULL (error recorded under `what`) on failure;
 * free accepts NULL. The pool keeps freed memory (release threshold set
 * once per device), so after the first step this costs no allocation. */
void *pipit__cuda_scratch(size_t bytes, const char *what);
void pipit__cuda_scratch_free(void *p, const char *what);

/* Causal self-attention (kernels.h's pipit__attention_*): qkv [B,T,3C],
 * out [B,T,C], dout [B,T,C], dqkv [B,T,3C], H heads of D = C/H. */
void pipit__cuda_attention(pipit_dtype dt, void *out, const void *qkv, int64_t B, int64_t T, int64_t C,
                           int64_t H);
void pipit__cuda_attention_dqkv(pipit_dtype dt, void *dqkv, const void *qkv, const void *dout, int64_t B,
                                int64_t T, int64_t C, int64_t H);

/* The precise libdevice functions (never the __expf intrinsics: no fast
 * math anywhere), overloaded so templates pick float or double. */
__device__ __forceinline__ float pipit_dexp(float x) { return expf(x); }
__device__ __forceinline__ double pipit_dexp(double x) { return exp(x); }

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

/* Reports a failed launch (the sticky error of cuda_backend.h). */
#define PIPIT_CUDA_LAUNCHED(what) pipit__cuda_check(cudaGetLastError(), what)

#endif
