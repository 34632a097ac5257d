/*
 * moe.h — the CPU kernels of the mixture-of-experts ops (ir/moe.h), bound
 * into ops_cpu.c's run table by the names it expects (cpu_NAME).
 */
#ifndef PIPIT_BACKEND_CPU_MOE_H
#define PIPIT_BACKEND_CPU_MOE_H

#include "backend/backend.h"

void pipit__cpu_topk(const pipit__kctx *k, int ith, int nth);
void pipit__cpu_take(const pipit__kctx *k, int ith, int nth);
void pipit__cpu_take_dx(const pipit__kctx *k, int ith, int nth);
void pipit__cpu_moe_slots(const pipit__kctx *k, int ith, int nth);
void pipit__cpu_moe_dispatch(const pipit__kctx *k, int ith, int nth);
void pipit__cpu_moe_combine(const pipit__kctx *k, int ith, int nth);
void pipit__cpu_moe_dw(const pipit__kctx *k, int ith, int nth);

#define cpu_TOPK pipit__cpu_topk
#define cpu_TAKE pipit__cpu_take
#define cpu_TAKE_DX pipit__cpu_take_dx
#define cpu_MOE_SLOTS pipit__cpu_moe_slots
#define cpu_MOE_DISPATCH pipit__cpu_moe_dispatch
#define cpu_MOE_COMBINE pipit__cpu_moe_combine
#define cpu_MOE_DW pipit__cpu_moe_dw

#endif
