/*
 * cpu.h — the CPU backend: host memory, deterministic kernels (kernels.h),
 * GEMM through single-threaded OpenBLAS calls on a shape-only tile split.
 */
#ifndef PIPIT_BACKEND_CPU_H
#define PIPIT_BACKEND_CPU_H

#include "backend/backend.h"

/* The run table (ops_cpu.c), one kernel per op of ir/ops.def. */
extern const pipit__op_kernel pipit__cpu_ops[PIPIT_OP_COUNT];

extern const pipit__backend pipit__backend_cpu;

#endif
