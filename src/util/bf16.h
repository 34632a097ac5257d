/*
 * bf16.h — bfloat16 as pipit stores it: the upper half of an IEEE fp32,
 * wrapped in a struct so that arithmetic on the storage type is a compile
 * error (every computation goes through fp32). Conversions: to fp32 is
 * exact (a shift); from fp32 and from fp64 round to nearest, ties to even,
 * correctly (f64 through fp32 rounded to odd, so no double rounding); NaN
 * stays NaN (quieted, sign kept), overflow gives infinity. Branch-free, so
 * loops over them vectorise. Shared by the CPU kernels, the runtime's
 * accumulation and the checkpoint writer.
 */
#ifndef PIPIT_BF16_H
#define PIPIT_BF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint16_t bits;
} pipit__bf16;

static inline float pipit__bf16_to_f32(pipit__bf16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even: add 0x7fff plus the lowest kept bit, truncate. */
static inline pipit__bf16 pipit__bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;
    pipit__bf16 h = {(uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : r)};
    return h;
}

/* n elements, contiguous: dst = src widened (exact) / rounded as above.
 * Plain loops of the branch-free scalar conversions, so they vectorise
 * (with -march=x86-64-v3: vpmovzxwd + vpslld, and vpaddd/vpblendvb/
 * vpackusdw) and give the scalar functions' bits (tests/test_bf16_lean.c checks
 * all 65536 bf16 values and an fp32 sweep). dst and src do not overlap. */
static inline void pipit__bf16_widen_n(float *dst, const pipit__bf16 *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = pipit__bf16_to_f32(src[i]);
}

static inline void pipit__bf16_narrow_n(pipit__bf16 *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = pipit__bf16_from_f32(src[i]);
}

/* Correct rounding from double: round to fp32 toward zero with the
 * lowest bit set when inexact ("round to odd"), then to bf16 as above;
 * fp32 keeps 16 more bits than bf16, so the second rounding sees every
 * tie exactly as the exact value would. */
static inline pipit__bf16 pipit__bf16_from_f64(double d) {
    float f = (float)d;
    if ((double)f != d && isfinite(f)) {
        if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        u |= 1u;
        memcpy(&f, &u, sizeof f);
    }
    return pipit__bf16_from_f32(f);
}

#endif
