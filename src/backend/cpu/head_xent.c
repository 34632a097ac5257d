/*
 * head_xent.c — the CPU kernels of the fused LM head + cross-entropy
 * (ops.def HEAD_XENT, HEAD_XENT_BWD, HEAD_XENT_DH; the chunking is
 * ir/head_xent.h): the bodies are head_xent_impl.h, once per type. Each
 * GEMM is a single-threaded pipit__gemm call on a shape-only piece, pieces
 * are dealt to threads, and every sum runs in one fixed order: the bits
 * never depend on the thread count. Scratch (a chunk of logits, and the
 * fp32 panels of bf16) is malloc'd per thread, as attention's; a thread
 * that cannot get it zeroes its part of the output and records why. Where
 * the bf16 GEMM kind is oneDNN, the bf16 logits GEMMs run through it
 * (head_xent_impl.h; untested on hardware with bf16 arithmetic).
 */
#if defined(__GNUC__) && !defined(__clang__) /* as kernels.c: vectorise the exp loops, same bits */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/fast_exp.h"
#include "backend/cpu/head_xent.h"
#include "backend/cpu/kernels.h"
#include "ir/head_xent.h"

/* n elements of `size` bytes, or NULL (its size overflowing included) */
static void *hx_scratch(size_t n, size_t size) {
    size_t b;
    if (__builtin_mul_overflow(n, size, &b)) return NULL;
    return malloc(b ? b : 1);
}

/* Tests: the f32 kernel's logits GEMMs through oneDNN in f32 (head_xent_impl.h) */
static _Atomic int f32_onednn;
void pipit__head_xent_f32_onednn(int on) { atomic_store(&f32_onednn, on != 0); }

#define T float
#define A float
#define S f32
#define LD(v) (v)
#define ST(v) (v)
#define EXPA fast_expf
#define GEMM_A pipit__gemm_f32
#define NARROW 0
#define HX_ONEDNN_F32 1
#define HX_DNN() atomic_load(&f32_onednn)
#include "backend/cpu/head_xent_impl.h"

#define T pipit__bf16
#define A float
#define S bf16
#define LD(v) pipit__bf16_to_f32(v)
#define ST(v) pipit__bf16_from_f32(v)
#define EXPA fast_expf
#define GEMM_A pipit__gemm_f32
#define NARROW 1
#define HX_ONEDNN_F32 0
#define HX_DNN() pipit__gemm_bf16_direct() /* the bf16 GEMM kind multiplies bf16 */
#include "backend/cpu/head_xent_impl.h"

#define T double
#define A double
#define S f64
#define LD(v) (v)
#define ST(v) (v)
#define EXPA exp
#define GEMM_A pipit__gemm_f64
#define NARROW 0
#define HX_ONEDNN_F32 0
#define HX_DNN() 0
#include "backend/cpu/head_xent_impl.h"
