/*
 * cuda_backend.h — what the parts of the CUDA backend share. Included from
 * C (backend_cuda.c, the runtime's registry) and from CUDA C++ (the .cu
 * kernel files), hence the extern "C" block.
 *
 * Every launch goes on the stream of the calling thread's rank
 * (pipit__cuda_stream), so the ops of one rank run in program order and
 * ranks sharing a GPU overlap. Kernels cannot return a status: they report
 * a failed launch through pipit__cuda_check, which keeps the first error;
 * the runtime reads it at the end of each step through the backend's sync.
 */
#ifndef PIPIT_CUDA_BACKEND_H
#define PIPIT_CUDA_BACKEND_H

#include <cuda_runtime.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const pipit__backend pipit__backend_cuda;

/* [PIPIT_OP_COUNT] one kernel per op (ops_cuda.cu); NULL exactly where the
 * CPU table has NULL (ops that run nothing). */
extern const pipit__op_kernel pipit__cuda_ops[];

/* The stream of the calling thread's rank. */
cudaStream_t pipit__cuda_stream(void);

/* 0 when e is cudaSuccess; otherwise records "what: <CUDA error>" as the
 * backend's sticky error (first one wins) and returns -1. */
int pipit__cuda_check(cudaError_t e, const char *what);

/* The backend's GEMM (same contract as pipit__backend.gemm, without the
 * thread slice: one call launches the whole product on the current stream). */
void pipit__cuda_gemm(pipit_dtype dt, int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                      const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, void *C,
                      int64_t ldc, int64_t sC, int accumulate);

#ifdef __cplusplus
}
#endif

#endif
