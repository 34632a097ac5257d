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

/* exp(x) in float, branch-free so loops calling it vectorise (libm's expf
 * does not, and costs ~4x more). Cephes expf: x = n ln2 + r, a degree-6
 * polynomial for exp(r), 2^n from exponent bits; <= 1 ulp on normal
 * results. Results below FLT_MIN flush to 0; x > 88.376 gives inf (a
 * little early: softmax only ever calls it with x <= 0); NaN stays NaN,
 * without undefined behaviour on the way.
 * Plain IEEE arithmetic, so the bits are the same on every x86-64. */
static inline float fast_expf(float x) {
    float t = x * 1.44269504088896341f + 12582912.0f; /* 1.5*2^23: rounds x/ln2 */
    float n = t - 12582912.0f;
    float r = x - n * 0.693359375f - n * -2.12194440e-4f; /* ln2 in two parts */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    /* n is out of int32 range for |x| > 1.5e9 and NaN for x = NaN or inf:
     * converting that is undefined behaviour. Clamp first (NaN goes to the
     * low side, the result is NaN anyway): any |n| >= 200 ends at the same
     * clamped exponent below, so every other result keeps its bits. */
    float nc = n > -200.0f ? n : -200.0f;
    nc = nc < 200.0f ? nc : 200.0f;
    int32_t e = (int32_t)nc + 127;
    e = e < 1 ? 1 : e;
    e = e > 254 ? 254 : e;
    uint32_t bits = (uint32_t)e << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    float y = p * s;
    y = x < -87.33654f ? 0.0f : y;
    y = x > 88.37626f ? INFINITY : y;
    return x != x ? x : y;
}

/* The fp32 math, shared by f32 and bf16 (whose arithmetic is fp32). */
#define EXP fast_expf
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
#include "backend/cpu/kernels_impl.h"
#undef EXP
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
