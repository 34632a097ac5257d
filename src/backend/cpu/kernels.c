/*
 * kernels.c — every non-GEMM CPU kernel, for float, double and bfloat16.
 *
 * The bodies live in kernels_impl.h, a template included once per type
 * (T = storage type, A = arithmetic type, S = name suffix): f32 and f64
 * compute in their own type, bf16 in fp32 with one rounding per stored
 * element. Reductions use fixed lane counts and fixed orders, and threads
 * split only the non-reduced axis, so bits never depend on the thread
 * count.
 */

/* GCC 12's -O2 only vectorises loops whose trip count is a multiple of the
 * vector width; the dynamic cost model lets it vectorise plain loops with
 * remainders, and no-trapping-math lets it turn the selects of fast_expf
 * into blends. Neither changes a computed value (no reassociation, no
 * contraction: that is what -ffast-math would add), so bits are unchanged. */
#if defined(__GNUC__) && !defined(__clang__) /* clang has no such pragma (and needs none) */
#pragma GCC optimize("vect-cost-model=dynamic", "no-trapping-math")
#endif

#include <math.h>
#include <string.h>

#include <cblas.h>
#include <stdlib.h>

#include "backend/cpu/kernels.h"
#include "util/common.h"

#include "backend/cpu/fast_exp.h" /* fast_expf */

/* The fp32 math, shared by f32 and bf16 (whose arithmetic is fp32). */
#define EXP fast_expf
#ifdef PIPIT_HAVE_EXPF8
#define EXP8 fast_expf8 /* 8 lanes of EXP (fast_exp.h; AVX builds) */
#endif
#define LOG logf
#define SQRT sqrtf
#define TANH tanhf
#define FABS fabsf
#define ROPE_FREQ pipit__rope_freq_f32 /* backend/rope_freq.h: as transformers forms them */

#define T float
#define A float
#define S f32
#define LD(v) (v)
#define ST(v) (v)
#define STD(d) ((float)(d))
#define KERNEL_NARROW 0
#define LD8 v8f_load /* 8 elements into fp32 lanes (fast_exp.h) */
#define BLAS_GEMM cblas_sgemm
#include "backend/cpu/kernels_impl.h" /* it undefines T, A, S, LD, ST, STD, KERNEL_NARROW */
#undef BLAS_GEMM

/* bf16: loaded into fp32, computed in fp32, rounded once when stored. */
#define T pipit__bf16
#define A float
#define S bf16
#define LD(v) pipit__bf16_to_f32(v)
#define ST(v) pipit__bf16_from_f32(v)
#define STD(d) pipit__bf16_from_f64(d)
#define KERNEL_NARROW 1
#define LD8 v8f_load_bf16
#define WIDE_GELU pipit__gelu_bf16_wide
#define WIDE_GELU_DX pipit__gelu_dx_bf16_wide
#define WIDE_SILU pipit__silu_bf16_wide
#define WIDE_SILU_DX pipit__silu_dx_bf16_wide
#define WIDE_SUM_EXP pipit__sum_exp_bf16_wide
#define WIDE_SCALE_NARROW pipit__scale_narrow_bf16_wide
#define WIDE_MAXV pipit__maxv_bf16_wide
#define WIDE_SUM_ROWS pipit__sum_rows_bf16_wide
#include "backend/cpu/kernels_impl.h"
#undef WIDE_SUM_EXP
#undef WIDE_SCALE_NARROW
#undef WIDE_MAXV
#undef WIDE_SUM_ROWS
#undef WIDE_GELU
#undef WIDE_GELU_DX
#undef WIDE_SILU
#undef WIDE_SILU_DX
#undef EXP
#undef EXP8
#undef LOG
#undef SQRT
#undef TANH
#undef FABS
#undef ROPE_FREQ

#define T double
#define A double
#define S f64
#define LD(v) (v)
#define ST(v) (v)
#define STD(d) (d)
#define KERNEL_NARROW 0
#define EXP exp
#define LOG log
#define SQRT sqrt
#define TANH tanh
#define FABS fabs
#define ROPE_FREQ pipit__rope_freq_f64
#define BLAS_GEMM cblas_dgemm
#include "backend/cpu/kernels_impl.h"
#undef EXP
#undef LOG
#undef SQRT
#undef TANH
#undef FABS
#undef ROPE_FREQ
#undef BLAS_GEMM
