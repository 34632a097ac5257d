/*
 * kernels_avx512.c — the bf16 GELU, SiLU, their backwards and the
 * cross-entropy's two passes over a row (the sum of exponentials, the
 * gradient's rounding) 16 lanes at a time on CPUs with AVX512-BF16: the
 * expressions of kernels_impl.h written again on vectors (GCC/Clang vector
 * extensions), operation
 * for operation, with fast_exp.h's reduction and polynomial and the same
 * clamps; the input widened exactly, the output rounded by vcvtneps2bf16
 * (round to nearest even, NaN quieted: pipit__bf16_from_f32's rounding,
 * with the subnormal lanes it would read as zero rounded by integers).
 * So the bits are the scalar loop's (tests/test_bf16_lean.c). Where the
 * compiler vectorised the scalar loop itself (8 lanes of AVX2), the bf16
 * conversions, the clamps and spilled constants made it ~100 instructions
 * per 16 elements: 10 ms a step each way at GPT-2 124M (6 and 7 now), the
 * cross-entropy 26 (15 now).
 *
 * Each entry returns how many leading elements it did (a multiple of 16;
 * 0 without the instructions): the caller's scalar loop does the rest.
 */
#include <string.h>

#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/fast_exp.h"
#include "backend/cpu/kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define TGT PIPIT_AVX512BF16

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

FAST_EXPF_VEC_SELECT(TGT, select16, v16f, v16i)

/* fast_expf on 16 lanes: the same operations, in the same order */
TGT static inline v16f exp16(v16f x) { FAST_EXPF_VEC_BODY(v16f, v16i, select16, x); }

TGT static inline v16f load16(const pipit__bf16 *p) {
    v16h h;
    memcpy(&h, p, sizeof h);
    v16i w = __builtin_convertvector(h, v16i) << 16;
    v16f v;
    memcpy(&v, &w, sizeof v);
    return v;
}

TGT static inline void store16(pipit__bf16 *p, v16f x) {
    __m512 xv;
    memcpy(&xv, &x, sizeof xv);
    _mm256_storeu_si256((__m256i *)p, pipit__bf16_round16(xv));
}

/* kernels_impl.h's constants and expressions, for A = float */
#define GELU_S2PI ((float)0.79788456080286535588)
#define GELU_K ((float)0.044715)

TGT static int64_t gelu16(pipit__bf16 *out, const pipit__bf16 *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f v = load16(x + i);
        v16f u = GELU_S2PI * (v + GELU_K * v * v * v);
        store16(out + i, v / ((float)1 + exp16((float)-2 * u)));
    }
    return i;
}

TGT static int64_t gelu_dx16(pipit__bf16 *dx, const pipit__bf16 *x, const pipit__bf16 *dout, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f v = load16(x + i);
        v16f sg = (float)1 / ((float)1 + exp16((float)-2 * GELU_S2PI * (v + GELU_K * v * v * v)));
        v16f du = GELU_S2PI * ((float)1 + (float)3 * GELU_K * v * v);
        v16f d = sg + (float)2 * v * sg * ((float)1 - sg) * du;
        store16(dx + i, d * load16(dout + i));
    }
    return i;
}

/* kernels_impl.h's silu and silu_dx */
TGT static int64_t silu16(pipit__bf16 *out, const pipit__bf16 *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f v = load16(x + i);
        store16(out + i, v / ((float)1 + exp16(-v)));
    }
    return i;
}

TGT static int64_t silu_dx16(pipit__bf16 *dx, const pipit__bf16 *x, const pipit__bf16 *d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f v = load16(x + i), sg = (float)1 / ((float)1 + exp16(-v));
        store16(dx + i, load16(d + i) * (sg * ((float)1 + v * ((float)1 - sg))));
    }
    return i;
}

/* kernels_impl.h's sum_exp_kept: 16 exponentials, then the first 8 and
 * the next 8 added into the 8 lanes (each lane's terms in index order) */
TGT static int64_t sum_exp16(const pipit__bf16 *x, int64_t n, float m, float *kept, double acc[8]) {
    __m512d a = _mm512_loadu_pd(acc);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f e = exp16(load16(x + i) - m);
        if (kept) memcpy(kept + i, &e, sizeof e);
        __m512 ev;
        memcpy(&ev, &e, sizeof ev);
        a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm512_castps512_ps256(ev)));
        a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(ev), 1))));
    }
    _mm512_storeu_pd(acc, a);
    return i;
}

TGT static int64_t scale_narrow16(pipit__bf16 *out, const float *kept, float f, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f k;
        memcpy(&k, kept + i, sizeof k);
        store16(out + i, k * f);
    }
    return i;
}

/* kernels_impl.h's maxv lanes: x > acc ? x : acc, the first 8 then the
 * next 8 (the order decides which NaN or signed zero stays) */
TGT static int64_t maxv16(const pipit__bf16 *x, int64_t n, float acc[8]) {
    __m256 a = _mm256_loadu_ps(acc);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f v = load16(x + i);
        __m512 xv;
        memcpy(&xv, &v, sizeof xv);
        __m256 lo = _mm512_castps512_ps256(xv), hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xv), 1));
        a = _mm256_blendv_ps(a, lo, _mm256_cmp_ps(lo, a, _CMP_GT_OQ));
        a = _mm256_blendv_ps(a, hi, _mm256_cmp_ps(hi, a, _CMP_GT_OQ));
    }
    _mm256_storeu_ps(acc, a);
    return i;
}

/* kernels_impl.h's sum_rows on 16 columns at a time: each column's rows
 * added in order, in double */
TGT static int64_t sum_rows16(const pipit__bf16 *x, int64_t rows, int64_t C, int64_t w, double *acc) {
    int64_t j = 0;
    for (; j + 16 <= w; j += 16) {
        __m512d lo = _mm512_loadu_pd(acc + j), hi = _mm512_loadu_pd(acc + j + 8);
        for (int64_t r = 0; r < rows; r++) {
            v16f v = load16(x + r * C + j);
            __m512 xv;
            memcpy(&xv, &v, sizeof xv);
            lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(xv)));
            hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xv), 1))));
        }
        _mm512_storeu_pd(acc + j, lo);
        _mm512_storeu_pd(acc + j + 8, hi);
    }
    return j;
}

/* the entries: the wide form where the CPU has the instructions */
#define WIDE(name, params, args) \
    int64_t pipit__##name##_bf16_wide params { return pipit__cpu_has_avx512bf16() ? name##16 args : 0; }
#else
static int64_t none(const void *first, ...) { /* no such instructions: the scalar loop does all */
    (void)first;
    return 0;
}
#define WIDE(name, params, args) \
    int64_t pipit__##name##_bf16_wide params { return none args; }
#endif

WIDE(gelu, (pipit__bf16 *out, const pipit__bf16 *x, int64_t n), (out, x, n))
WIDE(gelu_dx, (pipit__bf16 *dx, const pipit__bf16 *x, const pipit__bf16 *dout, int64_t n), (dx, x, dout, n))
WIDE(silu, (pipit__bf16 *out, const pipit__bf16 *x, int64_t n), (out, x, n))
WIDE(silu_dx, (pipit__bf16 *dx, const pipit__bf16 *x, const pipit__bf16 *dout, int64_t n), (dx, x, dout, n))
WIDE(sum_exp, (const pipit__bf16 *x, int64_t n, float m, float *kept, double acc[8]), (x, n, m, kept, acc))
WIDE(scale_narrow, (pipit__bf16 *out, const float *kept, float f, int64_t n), (out, kept, f, n))
WIDE(maxv, (const pipit__bf16 *x, int64_t n, float acc[8]), (x, n, acc))
WIDE(sum_rows, (const pipit__bf16 *x, int64_t rows, int64_t C, int64_t w, double *acc), (x, rows, C, w, acc))
