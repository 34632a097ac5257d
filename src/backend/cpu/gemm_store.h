/*
 * gemm_store.h — how the bf16 GEMM's kernels (gemm_pairs.c, gemm_amx.c)
 * put an fp32 sum into C, one element or 16 at a time: an fp32 C takes
 * the sum plus its old value when accumulating; a bf16 C takes the sum
 * plus the bias (fp32, NULL: none) plus its old value, rounded once to
 * nearest even (util/bf16.h's rounding). The same bits either way.
 */
#ifndef PIPIT_GEMM_STORE_H
#define PIPIT_GEMM_STORE_H

#include <stdint.h>

#include "backend/cpu/bf16_avx512.h"
#include "util/bf16.h"

/* Element (r, j) of C at c (row stride ldc); bias[j] is its column's. */
static inline void pipit__gemm_store1(void *c, int64_t ldc, int c32, const float *bias, int accumulate, int64_t r,
                                      int64_t j, float v) {
    if (c32) {
        float *e = (float *)c + r * ldc + j;
        *e = v + (accumulate ? *e : 0.0f);
        return;
    }
    pipit__bf16 *e = (pipit__bf16 *)c + r * ldc + j;
    if (bias) v += bias[j];
    if (accumulate) v += pipit__bf16_to_f32(*e);
    *e = pipit__bf16_from_f32(v);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* Columns j .. j + w (w <= 16) of row r, from the lanes of v; with stream
 * (not accumulating), a whole 16 written around the caches (an fp32 row's
 * whole line, or half a bf16 one: the other half next). */
PIPIT_AVX512BF16 static inline __attribute__((always_inline)) void
pipit__gemm_store16(void *c, int64_t ldc, int c32, const float *bias, int accumulate, int stream, int64_t r,
                    int64_t j, int w, __m512 v) {
    __mmask16 m = w >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << w) - 1);
    int64_t off = r * ldc + j;
    if (c32) {
        float *e = (float *)c + off;
        if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, e));
        if (stream && w >= 16) _mm512_stream_ps(e, v);
        else _mm512_mask_storeu_ps(e, m, v);
        return;
    }
    uint16_t *e = (uint16_t *)c + off;
    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
    if (accumulate)
        v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, e)), 16)));
    __m256i h = pipit__bf16_round16(v);
    if (stream && w >= 16) _mm256_stream_si256((__m256i *)e, h);
    else _mm256_mask_storeu_epi16(e, m, h);
}
#endif

#endif
