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

/* The reduction and polynomial of fast_expf, for a float or a vector of
 * floats of type TY (the same operators on either): leaves n (x / ln2
 * rounded) and p (exp of the remainder). */
#define FAST_EXPF_POLY(TY, x, n, p)                                                     \
    TY t_ = x * 1.44269504088896341f + 12582912.0f; /* 1.5*2^23: rounds x/ln2 */        \
    TY n = t_ - 12582912.0f;                                                             \
    TY r_ = x - n * 0.693359375f - n * -2.12194440e-4f; /* ln2 in two parts */           \
    TY p = r_ * 1.9875691500e-4f + 1.3981999507e-3f;                                     \
    p = p * r_ + 8.3334519073e-3f;                                                       \
    p = p * r_ + 4.1665795894e-2f;                                                       \
    p = p * r_ + 1.6666665459e-1f;                                                       \
    p = p * r_ + 5.0000001201e-1f;                                                       \
    p = p * (r_ * r_) + r_ + 1.0f

/* exp(x) in float, branch-free so loops calling it vectorise (libm's expf
 * does not, and costs ~4x more). Cephes expf: x = n ln2 + r, a degree-6
 * polynomial for exp(r), 2^n from exponent bits; <= 1 ulp on normal
 * results. Results below FLT_MIN flush to 0; x > 88.376 gives inf (a
 * little early: softmax only ever calls it with x <= 0); NaN stays NaN,
 * without undefined behaviour on the way.
 * Plain IEEE arithmetic, so the bits are the same on every x86-64. */
static inline float fast_expf(float x) {
    FAST_EXPF_POLY(float, x, n, p);
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

/* For vectors VF of floats and VI of int32 lanes (GCC/Clang vector
 * extensions): SEL_FN, a lane select, and the body of fast_expf on them,
 * lane for lane its operations in its order (so its bits). fast_expf8
 * below and kernels_avx512.c's 16-lane form expand them. */
#define FAST_EXPF_VEC_SELECT(ATTR, SEL_FN, VF, VI)                                        \
    ATTR static inline VF SEL_FN(VI mask, VF a, VF b) {                                    \
        VI ai, bi, r;                                                                      \
        memcpy(&ai, &a, sizeof ai);                                                        \
        memcpy(&bi, &b, sizeof bi);                                                        \
        r = (mask & ai) | (~mask & bi);                                                    \
        VF out;                                                                            \
        memcpy(&out, &r, sizeof out);                                                      \
        return out;                                                                        \
    }
#define FAST_EXPF_VEC_BODY(VF, VI, SEL_FN, x)                                             \
    const VF zero = {0};                                                                   \
    FAST_EXPF_POLY(VF, x, n, p);                                                           \
    VF nc = SEL_FN(n > -200.0f, n, zero - 200.0f);                                         \
    nc = SEL_FN(nc < 200.0f, nc, zero + 200.0f);                                           \
    VI e = __builtin_convertvector(nc, VI) + 127;                                          \
    VI lo = e < 1, hi = e > 254; /* lanes: -1 where true */                                \
    e = (lo & 1) | (~lo & e);                                                              \
    e = (hi & 254) | (~hi & e);                                                            \
    VI bits = e << 23;                                                                     \
    VF sc;                                                                                 \
    memcpy(&sc, &bits, sizeof sc);                                                         \
    VF y = p * sc;                                                                         \
    y = SEL_FN(x < -87.33654f, zero, y);                                                   \
    y = SEL_FN(x > 88.37626f, zero + INFINITY, y);                                         \
    return SEL_FN(x != x, x, y)

/* fast_expf on 8 lanes at once (GCC/Clang vector extensions: one ymm
 * register under AVX2), lane for lane the same operations in the same
 * order as fast_expf, so the same bits. Loops whose exponentials feed a
 * sum in several lanes (the softmax and cross-entropy sums) call it: the
 * compiler vectorised fast_expf there 4 wide, with the sums spilled. Only
 * where the build has AVX (-march=x86-64-v3, the Release default on such
 * hosts): without it the compilers refuse 32-byte vectors passed by value,
 * and the kernels take the scalar form, which gives the same bits. */
#if defined(__AVX__)
#define PIPIT_HAVE_EXPF8 1
typedef float pipit__v8f __attribute__((vector_size(32)));
typedef int32_t pipit__v8i __attribute__((vector_size(32)));

FAST_EXPF_VEC_SELECT(, v8f_select, pipit__v8f, pipit__v8i)

/* 8 fp32 values from p; 8 bf16 values (their bit patterns) from p,
 * widened exactly. One vector load each: building the vector from two
 * halves stored to memory costs a failed store forwarding per use. */
static inline pipit__v8f v8f_load(const float *p) {
    pipit__v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline pipit__v8f v8f_load_bf16(const void *p) {
    typedef uint16_t v8u16 __attribute__((vector_size(16)));
    v8u16 h;
    memcpy(&h, p, sizeof h);
    pipit__v8i w = __builtin_convertvector(h, pipit__v8i) << 16;
    pipit__v8f v;
    memcpy(&v, &w, sizeof v);
    return v;
}

static inline pipit__v8f fast_expf8(pipit__v8f x) { FAST_EXPF_VEC_BODY(pipit__v8f, pipit__v8i, v8f_select, x); }
#endif /* __AVX__ */

#endif
