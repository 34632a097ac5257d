/*
 * fast_exp.h — the vectorisable exp of the fp32 kernels (kernels.c, and
 * the fused head's head_xent.c). Static inline so each loop calling it
 * inlines and vectorises it; plain IEEE arithmetic, the same bits
 * everywhere.
 */
#ifndef PIPIT_FAST_EXP_H
#define PIPIT_FAST_EXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

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

#endif
