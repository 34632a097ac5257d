/*
 * cuda_impl.h — what backend_cuda.c and gemm_cuda.c share beyond
 * cuda_backend.h: the per-rank device context a thread is bound to (its
 * stream, its cuBLASLt handle and workspace, scratch for partial sums, its
 * sticky error) and the error recorder. C only.
 */
#ifndef PIPIT_CUDA_IMPL_H
#define PIPIT_CUDA_IMPL_H

#include <cublasLt.h>

#include "backend/cuda/cuda_backend.h"

/* Bytes of cuBLASLt workspace per stream: allocated once with the handle,
 * and always the size the heuristic is told, so the algorithm chosen for a
 * shape never depends on what memory happened to be free (NVIDIA's advice
 * for Hopper is 32 MiB). */
#define PIPIT_CUDA_LT_WORKSPACE ((size_t)32 << 20)

/* One rank's context on one device; created on the first bind of (rank,
 * device) and kept for the process's lifetime (streams are cheap, and
 * programs come and go). The unbound caller of a kernel gets rank -1's. */
typedef struct pipit__cuda_ctx {
    int rank, device;
    cudaStream_t stream;
    cublasLtHandle_t lt;  /* created by the first GEMM on this context */
    void *workspace;      /* PIPIT_CUDA_LT_WORKSPACE bytes of device memory, with lt */
    double *scratch;      /* device partial sums (sumsq), scratch_n doubles */
    size_t scratch_n;
    const char *last_op;  /* the last op that launched on this stream (named in asynchronous errors) */
    char err[512];        /* first error since the last sync, "" if none (under the backend's lock) */
} pipit__cuda_ctx;

/* The calling thread's bound context, binding rank -1 on the current
 * device when the thread was never bound; NULL only if even that failed
 * (the failure is then the sticky error). */
pipit__cuda_ctx *pipit__cuda_ctx_current(void);

/* The calling thread's TF32 setting (bind's tf32). */
int pipit__cuda_tf32(void);

/* Records "fmt ..." as the sticky error of the calling thread's context
 * (first one wins); returns -1. */
int pipit__cuda_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The thread's context's device scratch of at least n doubles (grown on
 * demand), or NULL with the sticky error set. */
double *pipit__cuda_scratch(pipit__cuda_ctx *c, size_t n);

#endif
