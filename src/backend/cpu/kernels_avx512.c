/*
 * kernels_avx512.c — the bf16 GELU and its backward 16 lanes at a time on
 * CPUs with AVX512-BF16: the expressions of kernels_impl.h's gelu and
 * gelu_dx written again on vectors (GCC/Clang vector extensions), operation
 * for operation, with fast_exp.h's reduction and polynomial and the same
 * clamps; the input widened exactly, the output rounded by vcvtneps2bf16
 * (round to nearest even, NaN quieted: pipit__bf16_from_f32's rounding,
 * with the subnormal lanes it would read as zero rounded by integers).
 * So the bits are the scalar loop's (tests/test_bf16_lean.c). Where the
 * compiler vectorised the scalar loop itself (8 lanes of AVX2), the bf16
 * conversions, the clamps and spilled constants made it ~100 instructions
 * per 16 elements: 10 ms a step each way at GPT-2 124M.
 *
 * Each entry returns how many leading elements it did (a multiple of 16;
 * 0 without the instructions): the caller's scalar loop does the rest.
 */
#include <string.h>

#include "backend/cpu/fast_exp.h"
#include "backend/cpu/kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

static int has_avx512bf16(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

TGT static inline v16f select16(v16i mask, v16f a, v16f b) {
    v16i ai, bi, r;
    memcpy(&ai, &a, sizeof ai);
    memcpy(&bi, &b, sizeof bi);
    r = (mask & ai) | (~mask & bi);
    v16f out;
    memcpy(&out, &r, sizeof out);
    return out;
}

/* fast_expf8 on 16 lanes: the same operations, in the same order */
TGT static inline v16f exp16(v16f x) {
    const v16f zero = {0};
    FAST_EXPF_POLY(v16f, x, n, p);
    v16f nc = select16(n > -200.0f, n, zero - 200.0f);
    nc = select16(nc < 200.0f, nc, zero + 200.0f);
    v16i e = __builtin_convertvector(nc, v16i) + 127;
    v16i lo = e < 1, hi = e > 254;
    e = (lo & 1) | (~lo & e);
    e = (hi & 254) | (~hi & e);
    v16i bits = e << 23;
    v16f sc;
    memcpy(&sc, &bits, sizeof sc);
    v16f y = p * sc;
    y = select16(x < -87.33654f, zero, y);
    y = select16(x > 88.37626f, zero + INFINITY, y);
    return select16(x != x, x, y);
}

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
    __m256i h = (__m256i)_mm512_cvtneps_pbh(xv);
    __m512i u = _mm512_castps_si512(xv);
    __mmask16 sub = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff)) &
                    ~_mm512_test_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    if (sub) { /* vcvtneps2bf16 reads subnormals as zero; pipit__bf16_from_f32 rounds them */
        __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
        h = _mm256_mask_blend_epi16(sub, h, _mm512_cvtepi32_epi16(r));
    }
    _mm256_storeu_si256((__m256i *)p, h);
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

int64_t pipit__gelu_bf16_wide(pipit__bf16 *out, const pipit__bf16 *x, int64_t n) {
    return has_avx512bf16() ? gelu16(out, x, n) : 0;
}

int64_t pipit__gelu_dx_bf16_wide(pipit__bf16 *dx, const pipit__bf16 *x, const pipit__bf16 *dout, int64_t n) {
    return has_avx512bf16() ? gelu_dx16(dx, x, dout, n) : 0;
}
#else
int64_t pipit__gelu_bf16_wide(pipit__bf16 *out, const pipit__bf16 *x, int64_t n) {
    (void)out, (void)x, (void)n;
    return 0;
}

int64_t pipit__gelu_dx_bf16_wide(pipit__bf16 *dx, const pipit__bf16 *x, const pipit__bf16 *dout, int64_t n) {
    (void)dx, (void)x, (void)dout, (void)n;
    return 0;
}
#endif
