/*
 * bf16_avx512.h — what the CPU kernels written for AVX512-BF16 share: the
 * run-time check for the instructions, and 16 fp32 lanes rounded to bf16
 * exactly as pipit__bf16_from_f32 rounds them (util/bf16.h).
 */
#ifndef PIPIT_BF16_AVX512_H
#define PIPIT_BF16_AVX512_H

/* 1 where the CPU has AVX512-F, BW, VL, DQ and BF16 (every CPU with BF16
 * has the other four) */
static inline int pipit__cpu_has_avx512bf16(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define PIPIT_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* vcvtneps2bf16 rounds to nearest even and quiets NaNs as
 * pipit__bf16_from_f32 does, but reads a subnormal input as zero; such
 * lanes (rare) take the integer rounding instead. */
PIPIT_AVX512BF16 static inline __m256i pipit__bf16_round16(__m512 x) {
    __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
    __m512i u = _mm512_castps_si512(x);
    __mmask16 sub = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x007fffff)) &
                    ~_mm512_test_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
    if (!sub) return h;
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
    return _mm256_mask_blend_epi16(sub, h, _mm512_cvtepi32_epi16(r));
}
#endif

#endif
