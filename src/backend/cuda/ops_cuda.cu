/*
 * ops_cuda.cu — placeholder: replaced by the kernels (the op table of the
 * cuda backend, one kernel per op of ir/ops.def, written by the ops side of
 * issue 10). Every entry is NULL here, so the backend links; a program that
 * reaches an op finds no kernel (tests/cuda skip without a GPU anyway).
 */
#include "backend/cuda/cuda_backend.h"

const pipit__op_kernel pipit__cuda_ops[PIPIT_OP_COUNT] = {0};
