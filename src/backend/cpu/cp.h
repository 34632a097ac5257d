/*
 * cp.h — context parallelism's kernels on the CPU (cp.c): ROPE_CP,
 * ATTENTION_CP and its backward ATTN_CP_D (ir/cp.h says what they are).
 * The CUDA backend runs the same functions on host copies.
 */
#ifndef PIPIT_CPU_CP_H
#define PIPIT_CPU_CP_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

void pipit__cpu_ROPE_CP(const pipit__kctx *k, int ith, int nth);
void pipit__cpu_ATTENTION_CP(const pipit__kctx *k, int ith, int nth);
void pipit__cpu_ATTN_CP_D(const pipit__kctx *k, int ith, int nth);
/* Packed documents (cp_doc.c): ATTENTION_CP_DOC and ATTN_CP_DOC_D. */
void pipit__cpu_ATTENTION_CP_DOC(const pipit__kctx *k, int ith, int nth);
void pipit__cpu_ATTN_CP_DOC_D(const pipit__kctx *k, int ith, int nth);
/* The CUDA backend's (cuda/cp_cuda.cu): the kernels above on host copies
 * of the device inputs, the output copied back (the CPU's bits). */
void pipit__cuda_ROPE_CP(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_ATTENTION_CP(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_ATTN_CP_D(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_ATTENTION_CP_DOC(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_ATTN_CP_DOC_D(const pipit__kctx *k, int ith, int nth);

#ifdef __cplusplus
}
#endif

#endif
