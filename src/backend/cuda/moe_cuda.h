/*
 * moe_cuda.h — the CUDA kernels of the mixture-of-experts ops (moe_cuda.cu;
 * C++ only), bound into ops_cuda.cu's run table by the names it expects.
 */
#ifndef PIPIT_MOE_CUDA_H
#define PIPIT_MOE_CUDA_H

#include "backend/backend.h"

void pipit__cuda_op_topk(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_op_take(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_op_take_dx(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_op_moe_slots(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_op_moe_dispatch(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_op_moe_combine(const pipit__kctx *k, int ith, int nth);
void pipit__cuda_op_moe_dw(const pipit__kctx *k, int ith, int nth);

#define cuda_TOPK pipit__cuda_op_topk
#define cuda_TAKE pipit__cuda_op_take
#define cuda_TAKE_DX pipit__cuda_op_take_dx
#define cuda_MOE_SLOTS pipit__cuda_op_moe_slots
#define cuda_MOE_DISPATCH pipit__cuda_op_moe_dispatch
#define cuda_MOE_COMBINE pipit__cuda_op_moe_combine
#define cuda_MOE_DW pipit__cuda_op_moe_dw

#endif
