/*
 * kernels_bf16.c — the bf16 kernels the template (kernels_impl.h) does not
 * make, dtype conversion, and the CPU backend's record of a kernel that
 * could not run. Attention on bf16 converts each (batch, head) problem's
 * q, k, v (and dout) into fp32 panels, runs the fp32 kernels on them and
 * rounds each result once: the same math as the f32 op, one rounding per
 * output element, and every sum (dk, dv over a group's query heads
 * included) formed in fp32.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"

/* ------------------------------------------------------ failed kernels */

/* One slot per world rank (at most 64 pipeline ranks x 64 replicas) and
 * one for threads bound to none. Only static strings: a kernel fails here
 * for want of memory. */
#define FAIL_SLOTS (64 * 64 + 1)
static _Thread_local int kernel_rank = -1;
static _Atomic(const char *) kernel_error[FAIL_SLOTS];

static int fail_slot(int rank) { return rank >= 0 && rank < FAIL_SLOTS - 1 ? rank : FAIL_SLOTS - 1; }

void pipit__kernel_bind(int rank) { kernel_rank = rank; }

void pipit__kernel_fail(const char *why) {
    const char *none = NULL;
    atomic_compare_exchange_strong(&kernel_error[fail_slot(kernel_rank)], &none, why);
}

const char *pipit__kernel_take_error(int rank) { return atomic_exchange(&kernel_error[fail_slot(rank)], NULL); }

/* ------------------------------------------------------------ conversion */

static double load_as_f64(const void *x, pipit_dtype dt, int64_t i) {
    if (dt == PIPIT_F64) return ((const double *)x)[i];
    if (dt == PIPIT_BF16) return pipit__bf16_to_f32(((const pipit__bf16 *)x)[i]);
    return ((const float *)x)[i];
}

/* A conversion's output at least this large bypasses the caches: the bf16
 * copies of a model's parameters (GPT-2 124M: 248 MB, made at the start of
 * each step) are read back from memory whatever happens, and a stored line
 * not read first saves the read for ownership: 23 -> 16 ms a step (AMD EPYC,
 * one core). Smaller outputs stay in cache for their next reader. */
#define STREAM_BYTES ((int64_t)4 << 20)

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_STREAM_NARROW 1

/* 8 fp32 lanes rounded as pipit__bf16_from_f32 does, in the low halves */
__attribute__((target("avx2"))) static inline __m256i round8(__m256i u) {
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
    __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(r, nan, is_nan);
}

/* pipit__bf16_narrow_n with non-temporal stores (dst's 32-byte blocks);
 * the caller fences them */
__attribute__((target("avx2"))) static void narrow_stream(pipit__bf16 *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 31); i++) dst[i] = pipit__bf16_from_f32(src[i]);
    for (; i + 16 <= n; i += 16) {
        __m256i r0 = round8(_mm256_castps_si256(_mm256_loadu_ps(src + i)));
        __m256i r1 = round8(_mm256_castps_si256(_mm256_loadu_ps(src + i + 8)));
        /* packus works per 128-bit lane: lanes 0,2 then 1,3 back in order */
        _mm256_stream_si256((__m256i *)(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xd8));
    }
    pipit__bf16_narrow_n(dst + i, src + i, n - i);
}

static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

__attribute__((target("avx2"))) static void zero_stream(char *p, size_t bytes) {
    size_t head = PIPIT_MIN((size_t)(-(uintptr_t)p & 31), bytes), i = head;
    memset(p, 0, head);
    for (; i + 32 <= bytes; i += 32) _mm256_stream_si256((__m256i *)(p + i), _mm256_setzero_si256());
    memset(p + i, 0, bytes - i);
    _mm_sfence();
}
#else
#define HAVE_STREAM_NARROW 0
#endif

void pipit__bf16_narrow_large(pipit__bf16 *dst, const float *src, int64_t n) {
#if HAVE_STREAM_NARROW
    if (n * (int64_t)sizeof *dst >= STREAM_BYTES && cpu_has_avx2()) {
        narrow_stream(dst, src, n);
        _mm_sfence();
        return;
    }
#endif
    pipit__bf16_narrow_n(dst, src, n);
}

/* A zeroed buffer this large is not read again soon from the caches: the
 * tied embedding's table gradient (154 MB at GPT-2 124M), zeroed before its
 * few rows are added, took 14 ms a step with memset (each line read for
 * ownership first) and 6 streamed (llama-100m, one core of a Xeon). */
#define ZERO_STREAM_BYTES ((size_t)8 << 20)

void pipit__zero_large(void *p, size_t bytes) {
#if HAVE_STREAM_NARROW
    if (bytes >= ZERO_STREAM_BYTES && cpu_has_avx2()) {
        zero_stream(p, bytes);
        return;
    }
#endif
    memset(p, 0, bytes);
}

void pipit__bf16_narrow_streamed(pipit__bf16 *dst, const float *src, int64_t n) {
#if HAVE_STREAM_NARROW
    if (cpu_has_avx2()) {
        narrow_stream(dst, src, n);
        return;
    }
#endif
    pipit__bf16_narrow_n(dst, src, n);
}

void pipit__bf16_stream_fence(void) {
#if HAVE_STREAM_NARROW
    _mm_sfence();
#endif
}

void pipit__convert(void *out, pipit_dtype odt, const void *x, pipit_dtype xdt, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    if (odt == xdt) {
        size_t es = pipit__dtype_size(odt);
        if (hi > lo && out != x) memcpy((char *)out + lo * es, (const char *)x + lo * es, (size_t)(hi - lo) * es);
    } else if (odt == PIPIT_BF16 && xdt == PIPIT_F32) { /* the common cases vectorise */
        pipit__bf16_narrow_large((pipit__bf16 *)out + lo, (const float *)x + lo, hi - lo);
    } else if (odt == PIPIT_F32 && xdt == PIPIT_BF16) {
        pipit__bf16_widen_n((float *)out + lo, (const pipit__bf16 *)x + lo, hi - lo);
    } else if (odt == PIPIT_BF16) {
        for (int64_t i = lo; i < hi; i++) ((pipit__bf16 *)out)[i] = pipit__bf16_from_f64(load_as_f64(x, xdt, i));
    } else if (odt == PIPIT_F32) {
        for (int64_t i = lo; i < hi; i++) ((float *)out)[i] = (float)load_as_f64(x, xdt, i);
    } else {
        for (int64_t i = lo; i < hi; i++) ((double *)out)[i] = load_as_f64(x, xdt, i);
    }
}

/* ------------------------------------------------------------ attention */

/* dst [rows, cols] (packed) = src rows of row stride ld, in fp32 */
static void load_panel(float *dst, const pipit__bf16 *src, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; r++) pipit__bf16_widen_n(dst + r * cols, src + r * ld, cols);
}

static void store_panel(pipit__bf16 *dst, int64_t ld, const float *src, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) pipit__bf16_narrow_n(dst + r * ld, src + r * cols, cols);
}

static void zero_panel(pipit__bf16 *dst, int64_t ld, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) memset(dst + r * ld, 0, (size_t)cols * sizeof *dst);
}

typedef void (*attn_fwd_f32)(float *out, const float *q, const float *k, const float *v, const pipit__attn_dims *a,
                             int ith, int nth);
typedef void (*attn_bwd_f32)(float *dq, float *dk, float *dv, const float *q, const float *k, const float *v,
                             const float *dout, const pipit__attn_dims *a, int ith, int nth);

/* Threads split (batch, head) pairs as the f32 kernel does; each pair is
 * one fp32 problem of one head (k and v loaded once per kv head). */
static void fwd_panels(pipit__bf16 *out, const pipit__bf16 *q, const pipit__bf16 *k, const pipit__bf16 *v,
                       const pipit__attn_dims *a, int ith, int nth, attn_fwd_f32 run) {
    int64_t D = a->D, rep = a->Hq / a->Hkv, lo, hi;
    pipit__range(a->B * a->Hq, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    size_t nq = (size_t)(a->Tq * D), nk = (size_t)(a->Tk * D);
    float *qf = malloc(sizeof(float) * (2 * nq + 2 * nk)), *of = qf + nq, *kf = of + nq, *vf = kf + nk;
    int64_t have = -1; /* the (b, kv head) in kf, vf */
    pipit__attn_dims one = {1, a->Tq, a->Tk, 1, 1, D, D, D, D, D, a->causal, a->scale};
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / a->Hq, h = bh % a->Hq, g = h / rep;
        pipit__bf16 *o = out + b * a->Tq * a->ldo + h * D;
        if (!qf) {
            zero_panel(o, a->ldo, a->Tq, D);
            continue;
        }
        if (b * a->Hkv + g != have) {
            load_panel(kf, k + b * a->Tk * a->ldk + g * D, a->Tk, D, a->ldk);
            load_panel(vf, v + b * a->Tk * a->ldv + g * D, a->Tk, D, a->ldv);
            have = b * a->Hkv + g;
        }
        load_panel(qf, q + b * a->Tq * a->ldq + h * D, a->Tq, D, a->ldq);
        run(of, qf, kf, vf, &one, 0, 1);
        store_panel(o, a->ldo, of, a->Tq, D);
    }
    if (!qf) pipit__kernel_fail("attention (bf16): out of memory for its fp32 panels");
    free(qf);
}

/* Threads split (batch, kv head) pairs as the f32 kernel does; a pair's
 * query heads sit side by side in q and dout, so the group is one fp32
 * problem whose dk and dv sum its heads in head order, in fp32. */
static void bwd_panels(pipit__bf16 *dq, pipit__bf16 *dk, pipit__bf16 *dv, const pipit__bf16 *q, const pipit__bf16 *k,
                       const pipit__bf16 *v, const pipit__bf16 *dout, const pipit__attn_dims *a, int ith, int nth,
                       attn_bwd_f32 run) {
    int64_t D = a->D, rep = a->Hq / a->Hkv, G = rep * D, lo, hi;
    pipit__range(a->B * a->Hkv, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    size_t nq = (size_t)(a->Tq * G), nk = (size_t)(a->Tk * D);
    float *qf = malloc(sizeof(float) * (3 * nq + 4 * nk)), *of = qf + nq, *dqf = of + nq;
    float *kf = dqf + nq, *vf = kf + nk, *dkf = vf + nk, *dvf = dkf + nk;
    pipit__attn_dims grp = {1, a->Tq, a->Tk, rep, 1, D, G, D, D, G, a->causal, a->scale};
    for (int64_t bg = lo; bg < hi; bg++) {
        int64_t b = bg / a->Hkv, g = bg % a->Hkv;
        pipit__bf16 *dqg = dq + b * a->Tq * a->ldq + g * G, *dkg = dk + b * a->Tk * a->ldk + g * D;
        pipit__bf16 *dvg = dv + b * a->Tk * a->ldv + g * D;
        if (!qf) {
            zero_panel(dqg, a->ldq, a->Tq, G);
            zero_panel(dkg, a->ldk, a->Tk, D);
            zero_panel(dvg, a->ldv, a->Tk, D);
            continue;
        }
        load_panel(qf, q + b * a->Tq * a->ldq + g * G, a->Tq, G, a->ldq);
        load_panel(of, dout + b * a->Tq * a->ldo + g * G, a->Tq, G, a->ldo);
        load_panel(kf, k + b * a->Tk * a->ldk + g * D, a->Tk, D, a->ldk);
        load_panel(vf, v + b * a->Tk * a->ldv + g * D, a->Tk, D, a->ldv);
        run(dqf, dkf, dvf, qf, kf, vf, of, &grp, 0, 1);
        store_panel(dqg, a->ldq, dqf, a->Tq, G);
        store_panel(dkg, a->ldk, dkf, a->Tk, D);
        store_panel(dvg, a->ldv, dvf, a->Tk, D);
    }
    if (!qf) pipit__kernel_fail("attention backward (bf16): out of memory for its fp32 panels");
    free(qf);
}

/* The blocked kernels: their products on pairs tiles where that kernel
 * runs (attn_pairs.c), else on fp32 panels. */
void pipit__attn_fwd_bf16(pipit__bf16 *out, const pipit__bf16 *q, const pipit__bf16 *k, const pipit__bf16 *v,
                          const pipit__attn_dims *a, int ith, int nth) {
    if (!pipit__attn_pairs_fwd(out, q, k, v, a, ith, nth)) fwd_panels(out, q, k, v, a, ith, nth, pipit__attn_fwd_f32);
}
void pipit__attn_fwd_stream_bf16(pipit__bf16 *out, const pipit__bf16 *q, const pipit__bf16 *k, const pipit__bf16 *v,
                                 const pipit__attn_dims *a, int ith, int nth) {
    fwd_panels(out, q, k, v, a, ith, nth, pipit__attn_fwd_stream_f32);
}
void pipit__attn_bwd_bf16(pipit__bf16 *dq, pipit__bf16 *dk, pipit__bf16 *dv, const pipit__bf16 *q, const pipit__bf16 *k,
                          const pipit__bf16 *v, const pipit__bf16 *dout, const pipit__attn_dims *a, int ith, int nth) {
    if (!pipit__attn_pairs_bwd(dq, dk, dv, q, k, v, dout, a, ith, nth))
        bwd_panels(dq, dk, dv, q, k, v, dout, a, ith, nth, pipit__attn_bwd_f32);
}
void pipit__attn_bwd_stream_bf16(pipit__bf16 *dq, pipit__bf16 *dk, pipit__bf16 *dv, const pipit__bf16 *q,
                                 const pipit__bf16 *k, const pipit__bf16 *v, const pipit__bf16 *dout,
                                 const pipit__attn_dims *a, int ith, int nth) {
    bwd_panels(dq, dk, dv, q, k, v, dout, a, ith, nth, pipit__attn_bwd_stream_f32);
}

/* GPT-2's packed layout: qkv [B,T,3C] = q | k | v, H heads of C/H, causal. */
static pipit__attn_dims packed(int64_t B, int64_t Tq, int64_t C, int64_t H) {
    int64_t D = C / H;
    return (pipit__attn_dims){B, Tq, Tq, H, H, D, 3 * C, 3 * C, 3 * C, C, 1, 1.0 / sqrt((double)D)};
}
void pipit__attention_bf16(pipit__bf16 *out, const pipit__bf16 *qkv, int64_t B, int64_t Tq, int64_t C, int64_t H,
                           int ith, int nth) {
    pipit__attn_dims a = packed(B, Tq, C, H);
    pipit__attn_fwd_bf16(out, qkv, qkv + C, qkv + 2 * C, &a, ith, nth);
}
void pipit__attention_stream_bf16(pipit__bf16 *out, const pipit__bf16 *qkv, int64_t B, int64_t Tq, int64_t C,
                                  int64_t H, int ith, int nth) {
    pipit__attn_dims a = packed(B, Tq, C, H);
    pipit__attn_fwd_stream_bf16(out, qkv, qkv + C, qkv + 2 * C, &a, ith, nth);
}
void pipit__attention_dqkv_bf16(pipit__bf16 *dqkv, const pipit__bf16 *qkv, const pipit__bf16 *dout, int64_t B,
                                int64_t Tq, int64_t C, int64_t H, int ith, int nth) {
    pipit__attn_dims a = packed(B, Tq, C, H);
    pipit__attn_bwd_bf16(dqkv, dqkv + C, dqkv + 2 * C, qkv, qkv + C, qkv + 2 * C, dout, &a, ith, nth);
}
void pipit__attention_dqkv_stream_bf16(pipit__bf16 *dqkv, const pipit__bf16 *qkv, const pipit__bf16 *dout, int64_t B,
                                       int64_t Tq, int64_t C, int64_t H, int ith, int nth) {
    pipit__attn_dims a = packed(B, Tq, C, H);
    pipit__attn_bwd_stream_bf16(dqkv, dqkv + C, dqkv + 2 * C, qkv, qkv + C, qkv + 2 * C, dout, &a, ith, nth);
}
