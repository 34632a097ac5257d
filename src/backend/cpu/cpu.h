/*
 * cpu.h — the CPU backend: host memory, deterministic kernels (kernels.h),
 * GEMM through single-threaded OpenBLAS calls on a shape-only tile split.
 */
#ifndef PIPIT_BACKEND_CPU_H
#define PIPIT_BACKEND_CPU_H

#include "backend/backend.h"
#include "util/bf16.h"

/* The run table (ops_cpu.c), one kernel per op of ir/ops.def. */
extern const pipit__op_kernel pipit__cpu_ops[PIPIT_OP_COUNT];

extern const pipit__backend pipit__backend_cpu;

/* AdamW of w[lo, hi) (adamw.c); the _bf16 forms also write shadow[lo, hi)
 * = the new w rounded as pipit__bf16_from_f32 (the same bits: the
 * AVX512-BF16 form where the CPU has it, else the portable one). */
void pipit__adamw_f32(const pipit__adamw_coef *c, float *w, const float *g, float *m, float *v, int64_t lo,
                      int64_t hi);
void pipit__adamw_f32_bf16(const pipit__adamw_coef *c, float *w, const float *g, float *m, float *v,
                           pipit__bf16 *shadow, int64_t lo, int64_t hi);
void pipit__adamw_f32_bf16_portable(const pipit__adamw_coef *c, float *w, const float *g, float *m, float *v,
                                    pipit__bf16 *shadow, int64_t lo, int64_t hi);

#endif
