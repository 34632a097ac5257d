/*
 * bench_bf16.c — the bf16 GEMM against the fp32 one and against the CPU's
 * peaks, side by side in one run, on 1 and 2 threads.
 *
 *   fp32 peak   a register-only loop of 12 independent 8-lane FMAs
 *               (vfmadd231ps: 16 FLOP each), per thread, the best of many
 *               ~1 ms runs
 *   bf16 peak   a register-only loop of 12 independent vdpbf16ps (16 lanes
 *               x 2 products: 64 FLOP each) where the CPU has AVX512-BF16;
 *               without it no instruction multiplies bf16, bf16 runs on the
 *               fp32 units (pipit widens panels), and its peak IS the fp32
 *               FMA peak -- printed as such
 *   sgemm       pipit__gemm_f32 (shape-only tiles of single-threaded OpenBLAS)
 *   bf16 gemm   pipit__gemm_bf16 in the way this CPU gets (pipit__gemm_bf16_kind)
 * at GPT-2 124M's MLP shape (256 x 3072 x 768) and its head's weight
 * gradient (50257 x 768 x 256), and a 1024^3 square, the two GEMMs timed
 * alternately (best of each). The bf16 result is checked against the fp32
 * one of the same (bf16-exact) inputs, and 2 threads against 1 bitwise,
 * before anything is timed.
 * Usage: bench_bf16 [seconds per measurement, default 0.5]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "bench_kernel.h"
#include "util/common.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

/* ---- register-only peaks (FLOP per call, run by each thread) ---- */

#define PEAK_ITERS 200000 /* ~1 ms of FMAs: the best of many such runs (a shared machine lends the CPU in slices) */

/* 12 named accumulators, so they stay in registers: 12 independent chains
 * cover the FMA latency (4-5 cycles) on two ports. */
#define PEAK_BODY(T, STEP)                                                                                      \
    T a0 = init(0), a1 = init(1), a2 = init(2), a3 = init(3), a4 = init(4), a5 = init(5), a6 = init(6),        \
      a7 = init(7), a8 = init(8), a9 = init(9), a10 = init(10), a11 = init(11);                                \
    for (int i = 0; i < PEAK_ITERS; i++) {                                                                      \
        a0 = STEP(a0), a1 = STEP(a1), a2 = STEP(a2), a3 = STEP(a3), a4 = STEP(a4), a5 = STEP(a5);              \
        a6 = STEP(a6), a7 = STEP(a7), a8 = STEP(a8), a9 = STEP(a9), a10 = STEP(a10), a11 = STEP(a11);          \
    }                                                                                                           \
    T all[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};                                             \
    float sink = 0;                                                                                             \
    for (int k = 0; k < 12; k++) sink += first(all[k]);

#if HAVE_X86
__attribute__((target("avx2,fma"))) static inline __m256 init256(int k) { return _mm256_set1_ps((float)k); }
__attribute__((target("avx2,fma"))) static inline float first256(__m256 v) { return _mm256_cvtss_f32(v); }
__attribute__((target("avx2,fma"))) static double fma_loop(void) {
    const __m256 x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
#define init init256
#define first first256
#define STEP(a) _mm256_fmadd_ps(a, x, y)
    PEAK_BODY(__m256, STEP)
#undef STEP
#undef init
#undef first
    return sink == 12345.0f ? 0 : (double)PEAK_ITERS * 12 * 8 * 2; /* 8 lanes, 2 FLOP */
}

__attribute__((target("avx512f,avx512bf16"))) static inline __m512 init512(int k) { return _mm512_set1_ps((float)k); }
__attribute__((target("avx512f,avx512bf16"))) static inline float first512(__m512 v) { return _mm512_cvtss_f32(v); }
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_loop(void) {
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);
#define init init512
#define first first512
#define STEP(a) _mm512_dpbf16_ps(a, x, y)
    PEAK_BODY(__m512, STEP)
#undef STEP
#undef init
#undef first
    return sink == 12345.0f ? 0 : (double)PEAK_ITERS * 12 * 16 * 4; /* 16 lanes, 2 products, 2 FLOP each */
}
#endif

static int have_avx512bf16(void) {
#if HAVE_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

typedef double (*peak_fn)(void);
typedef struct {
    peak_fn fn;
    double flops;
} peak_job;

static void peak_slice(const void *j, int ith, int nth) {
    (void)nth;
    double f = ((const peak_job *)j)->fn();
    if (ith == 0) ((peak_job *)j)->flops = f;
}

/* GFLOP/s of fn on nth threads at once (each runs the loop): the best of
 * the runs that fit in `secs`. */
static double peak(peak_fn fn, int nth, double secs) {
    peak_job j = {fn, 0};
    bench_pool_run(peak_slice, &j, nth); /* warm-up: clocks up */
    double best = 1e30, end = pipit__now() + secs;
    for (int reps = 0; reps < 10 || pipit__now() < end; reps++) {
        double t0 = pipit__now();
        bench_pool_run(peak_slice, &j, nth);
        best = fmin(best, pipit__now() - t0);
    }
    return j.flops * nth / best * 1e-9;
}

/* ---- GEMMs ---- */

typedef struct {
    int64_t M, N, K;
    int ta, tb;
    const char *what;
} shape;

static const shape shapes[] = {
    {256, 3072, 768, 0, 0, "GPT-2 124M fc fwd (256x3072x768)"},
    {50257, 768, 256, 1, 0, "GPT-2 124M head dW (50257x768x256)"},
    {1024, 1024, 1024, 0, 0, "square 1024^3"},
};

typedef struct {
    const shape *s;
    const float *A, *B;
    const pipit__bf16 *Ah, *Bh;
    float *C;
    pipit__bf16 *Ch;
} job;

static void sgemm_slice(const void *p, int ith, int nth) {
    const job *j = p;
    const shape *s = j->s;
    pipit__gemm_f32(s->ta, s->tb, 1, s->M, s->N, s->K, j->A, s->ta ? s->M : s->K, 0, j->B, s->tb ? s->K : s->N, 0,
                    j->C, s->N, 0, 0, ith, nth);
}

static void bgemm_slice(const void *p, int ith, int nth) {
    const job *j = p;
    const shape *s = j->s;
    pipit__gemm_bf16(s->ta, s->tb, 1, s->M, s->N, s->K, j->Ah, s->ta ? s->M : s->K, 0, j->Bh, s->tb ? s->K : s->N, 0,
                     j->Ch, s->N, 0, 0, ith, nth);
}

/* GFLOP/s of fa and fb, timed alternately (a, b, a, b, ...) so that load
 * which comes and goes on a shared machine falls on both alike: the best
 * run of each within `secs` (at least 5 each). */
static void time_pair(bench_slice_fn fa, bench_slice_fn fb, const job *j, int nth, double secs, double *ga,
                      double *gb) {
    double flops = 2.0 * (double)j->s->M * (double)j->s->N * (double)j->s->K, ba = 1e30, bb = 1e30;
    bench_pool_run(fa, j, nth);
    bench_pool_run(fb, j, nth);
    double end = pipit__now() + secs;
    for (int reps = 0; reps < 5 || pipit__now() < end; reps++) {
        double t0 = pipit__now();
        bench_pool_run(fa, j, nth);
        double t1 = pipit__now();
        bench_pool_run(fb, j, nth);
        ba = fmin(ba, t1 - t0);
        bb = fmin(bb, pipit__now() - t1);
    }
    *ga = flops / ba * 1e-9;
    *gb = flops / bb * 1e-9;
}

/* bf16 inputs (exact in fp32 too), so both GEMMs multiply the same values:
 * each bf16 result within one rounding (2^-8) plus fp32 accumulation. */
static int check(const shape *s, job *j) {
    int64_t nC = s->M * s->N;
    bench_pool_run(sgemm_slice, j, 1);
    bench_pool_run(bgemm_slice, j, 1);
    pipit__bf16 *one = malloc(sizeof *one * (size_t)nC);
    memcpy(one, j->Ch, sizeof *one * (size_t)nC);
    bench_pool_run(bgemm_slice, j, 2);
    int bad = memcmp(one, j->Ch, sizeof *one * (size_t)nC) != 0;
    if (bad) fprintf(stderr, "%s: bf16 GEMM on 2 threads differs from 1\n", s->what);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < nC; i++) {
        worst = fmax(worst, fabs((double)pipit__bf16_to_f32(j->Ch[i]) - j->C[i]));
        scale = fmax(scale, fabs((double)j->C[i]));
    }
    if (!(worst <= 0x1p-8 * scale + (double)s->K * 0x1p-22 * scale)) {
        fprintf(stderr, "%s: bf16 GEMM off by %g (largest |C| %g)\n", s->what, worst, scale);
        bad = 1;
    }
    free(one);
    return bad;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.5;
    pipit__gemm_init();
    bench_pool_start();
    int bf = have_avx512bf16();
    printf("bf16 GEMM on this CPU: %s\n", pipit__gemm_bf16_kind());
    double pk32[3] = {0}, pk16[3] = {0};
    for (int nth = 1; nth <= 2; nth++) {
#if HAVE_X86
        pk32[nth] = peak(fma_loop, nth, secs);
        pk16[nth] = bf ? peak(dpbf16_loop, nth, secs) : pk32[nth];
#endif
        printf("%d thread%s: fp32 FMA peak %.1f GFLOP/s; bf16 peak %.1f GFLOP/s%s\n", nth, nth == 1 ? "" : "s",
               pk32[nth], pk16[nth],
               bf ? " (vdpbf16ps)" : " (no AVX512-BF16: no instruction multiplies bf16, so the bf16 peak is the fp32 "
                                     "FMA peak)");
    }
    int bad = 0;
    printf("\n%-36s %3s %10s %10s %8s %8s %8s\n", "shape", "thr", "sgemm", "bf16", "bf16/f32", "f32/peak",
           "bf16/pk");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        int64_t nA = s->M * s->K, nB = s->K * s->N, nC = s->M * s->N;
        float *A = bench_rnd(nA), *B = bench_rnd(nB), *C = bench_rnd(nC);
        pipit__bf16 *Ah = malloc(sizeof *Ah * (size_t)nA), *Bh = malloc(sizeof *Bh * (size_t)nB);
        pipit__bf16 *Ch = malloc(sizeof *Ch * (size_t)nC);
        for (int64_t k = 0; k < nA; k++) A[k] = pipit__bf16_to_f32(Ah[k] = pipit__bf16_from_f32(A[k]));
        for (int64_t k = 0; k < nB; k++) B[k] = pipit__bf16_to_f32(Bh[k] = pipit__bf16_from_f32(B[k]));
        job j = {s, A, B, Ah, Bh, C, Ch};
        bad += check(s, &j);
        for (int nth = 1; nth <= 2 && !bad; nth++) {
            double f, b;
            time_pair(sgemm_slice, bgemm_slice, &j, nth, 2 * secs, &f, &b);
            printf("%-36s %3d %10.1f %10.1f %8.2f %8.2f %8.2f\n", s->what, nth, f, b, b / f, f / pk32[nth],
                   b / pk16[nth]);
        }
        pipit__free_aligned(A), pipit__free_aligned(B), pipit__free_aligned(C);
        free(Ah), free(Bh), free(Ch);
    }
    bench_pool_stop();
    return bad ? 1 : 0;
}
