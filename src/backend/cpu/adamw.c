/*
 * adamw.c — AdamW of an fp32 param, as torch.optim.AdamW computes it
 * (single tensor, no foreach): m, v in fp32, bias corrections folded into
 * the step size and the denominator. One element's arithmetic is
 * adamw_one; every loop here computes exactly it, lane by lane (IEEE
 * multiplies, adds, divisions and square roots, no FMA), so the bits do
 * not depend on the vector width or the thread split.
 *
 * The second form also writes the new param rounded to bf16 into its
 * shadow (lower.c mark_shadows): the bf16 copy the next step's matmuls
 * read, which the step would otherwise make with a cast of the whole param
 * (124M params: 744 MB of traffic). On a CPU with AVX512-BF16 one
 * vcvtneps2bf16 rounds 16 lanes, so the update costs 4 ms more instead of
 * the cast's 23 (AMD EPYC, one core; docs/benchmarks.md §14).
 */
#include <math.h>

#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/kernels.h"

typedef struct {
    float b1, nb1, b2, nb2, step, bc2, eps, decay, clip;
} coef;

static coef coefs(const pipit__adamw_coef *c) {
    return (coef){(float)c->b1,        (float)(1.0 - c->b1), (float)c->b2,    (float)(1.0 - c->b2), (float)c->step_size,
                  (float)c->bc2_sqrt, (float)c->eps,        (float)c->decay, (float)c->clip};
}

/* Element i's update; returns the new w[i]. */
static inline float adamw_one(const coef *k, float *restrict w, const float *restrict gr, float *restrict m,
                              float *restrict v, int64_t i) {
    float g = gr[i] * k->clip;
    float mi = k->b1 * m[i] + k->nb1 * g;
    float vi = k->b2 * v[i] + k->nb2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    return w[i] = w[i] * k->decay - k->step * (mi / (sqrtf(vi) / k->bc2 + k->eps));
}

static void adamw_range(const coef *k, float *restrict w, const float *restrict gr, float *restrict m,
                        float *restrict v, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) adamw_one(k, w, gr, m, v, i);
}

void pipit__adamw_f32(const pipit__adamw_coef *c, float *w, const float *g, float *m, float *v, int64_t lo,
                      int64_t hi) {
    const coef k = coefs(c);
    adamw_range(&k, w, g, m, v, lo, hi);
}

/* Without AVX512-BF16: block by block, each block's new w rounded while it
 * is in L1 and streamed past the caches (the next step reads it back from
 * memory anyway; a plain store would first read each line for ownership). */
#define BLOCK 4096
void pipit__adamw_f32_bf16_portable(const pipit__adamw_coef *c, float *w, const float *g, float *m, float *v,
                                    pipit__bf16 *shadow, int64_t lo, int64_t hi) {
    const coef k = coefs(c);
    for (int64_t a = lo; a < hi; a += BLOCK) {
        int64_t b = PIPIT_MIN(a + BLOCK, hi);
        adamw_range(&k, w, g, m, v, a, b);
        pipit__bf16_narrow_streamed(shadow + a, w + a, b - a);
    }
    pipit__bf16_stream_fence();
}

#if defined(__x86_64__) && defined(__GNUC__)
#define TGT PIPIT_AVX512BF16

/* adamw_one on 16 lanes, operation for operation, and the shadow's 32
 * bytes streamed (dst aligned to 32 bytes). */
TGT static void adamw_bf16_avx512(const coef *k, float *restrict w, const float *restrict gr, float *restrict m,
                                  float *restrict v, pipit__bf16 *restrict s, int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i < hi && ((uintptr_t)(s + i) & 31); i++) s[i] = pipit__bf16_from_f32(adamw_one(k, w, gr, m, v, i));
    const __m512 b1 = _mm512_set1_ps(k->b1), nb1 = _mm512_set1_ps(k->nb1), b2 = _mm512_set1_ps(k->b2),
                 nb2 = _mm512_set1_ps(k->nb2), step = _mm512_set1_ps(k->step), bc2 = _mm512_set1_ps(k->bc2),
                 eps = _mm512_set1_ps(k->eps), decay = _mm512_set1_ps(k->decay), clip = _mm512_set1_ps(k->clip);
    for (; i + 16 <= hi; i += 16) {
        __m512 g = _mm512_mul_ps(_mm512_loadu_ps(gr + i), clip);
        __m512 mi = _mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(nb1, g));
        __m512 vi = _mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(v + i)), _mm512_mul_ps(nb2, _mm512_mul_ps(g, g)));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        __m512 den = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2), eps);
        __m512 wi = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(w + i), decay), _mm512_mul_ps(step, _mm512_div_ps(mi, den)));
        _mm512_storeu_ps(w + i, wi);
        _mm256_stream_si256((__m256i *)(s + i), pipit__bf16_round16(wi));
    }
    _mm_sfence();
    for (; i < hi; i++) s[i] = pipit__bf16_from_f32(adamw_one(k, w, gr, m, v, i));
}
#endif

void pipit__adamw_f32_bf16(const pipit__adamw_coef *c, float *w, const float *g, float *m, float *v,
                           pipit__bf16 *shadow, int64_t lo, int64_t hi) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (pipit__cpu_has_avx512bf16()) {
        const coef k = coefs(c);
        adamw_bf16_avx512(&k, w, g, m, v, shadow, lo, hi);
        return;
    }
#endif
    pipit__adamw_f32_bf16_portable(c, w, g, m, v, shadow, lo, hi);
}
