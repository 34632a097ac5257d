/*
 * bench_bf16.c — the bf16 GEMM against the fp32 one, oneDNN and the CPU's
 * peaks, side by side in one run, on 1 and 2 threads.
 *
 *   fp32 peak   register-only loops of independent FMAs per thread: 12
 *               ymm chains (vfmadd231ps: 16 FLOP each) and, where the CPU
 *               has AVX-512, 16 zmm chains (32 FLOP each); the better of
 *               the two, the best of many ~1 ms runs. (The ymm loop alone
 *               is half the peak of a CPU with 512-bit FMA pipes, Zen 5:
 *               it read 122-127 GFLOP/s where sgemm reaches 200.)
 *   bf16 peak   16 independent vdpbf16ps chains (16 lanes x 2 products:
 *               64 FLOP each) where the CPU has AVX512-BF16; without it
 *               no instruction multiplies bf16, bf16 runs on the fp32
 *               units (pipit widens panels), and its peak IS the fp32 FMA
 *               peak -- printed as such; where the CPU has AMX-BF16 (and the
 *               OS grants its tiles), four independent TDPBF16PS tiles
 *               (16384 FLOP each): the bf16 peak is then AMX's
 *   sgemm       pipit__gemm_f32 (shape-only tiles of single-threaded OpenBLAS)
 *   bf16        pipit__gemm_bf16 in the way this CPU gets (pipit__gemm_bf16_kind)
 *   dnnl-til    pipit__gemm_onednn: one single-threaded oneDNN matmul per
 *               tile (what the onednn kind runs), in bf16 where oneDNN has a
 *               bf16 matmul here, else in f32 for comparison
 *   dnnl-whl    one oneDNN matmul of the whole GEMM on oneDNN's own OpenMP
 *               threads (the same type): oneDNN's own rate, no tiles
 * at GPT-2 124M's shapes (T=64 B=4: 256 rows; C=768, V=50257) and a 1024^3
 * square; the first three timed alternately (best of each), with the bf16
 * peak loop run between them in windows as long as the bf16 GEMM's run
 * ("pk beside": bf16/pk and til/pk divide by it, two rates of the same
 * minutes and lengths of time). Every matrix is 64-byte aligned, as
 * pipit's own blocks are. The bf16 and
 * oneDNN results are checked against the fp32 one of the same (bf16-exact)
 * inputs, and 2 threads against 1 bitwise, before anything is timed.
 * Usage: bench_bf16 [seconds per measurement, default 0.5]
 */
#include <cblas.h>
#include <dlfcn.h>
#include <dnnl.h>
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

/* Independent accumulator chains, named so they stay in registers: enough
 * of them to cover the FMA latency (4-5 cycles) on two (or four) pipes, so
 * the loop measures throughput. 12 with 16 ymm registers (2 hold the
 * operands), 16 with 32 zmm registers. */
#define PEAK_BODY12(T, STEP)                                                                                    \
    T a0 = init(0), a1 = init(1), a2 = init(2), a3 = init(3), a4 = init(4), a5 = init(5), a6 = init(6),        \
      a7 = init(7), a8 = init(8), a9 = init(9), a10 = init(10), a11 = init(11);                                \
    for (int i = 0; i < PEAK_ITERS; i++) {                                                                      \
        a0 = STEP(a0), a1 = STEP(a1), a2 = STEP(a2), a3 = STEP(a3), a4 = STEP(a4), a5 = STEP(a5);              \
        a6 = STEP(a6), a7 = STEP(a7), a8 = STEP(a8), a9 = STEP(a9), a10 = STEP(a10), a11 = STEP(a11);          \
    }                                                                                                           \
    T all[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};                                             \
    float sink = 0;                                                                                             \
    for (int k = 0; k < 12; k++) sink += first(all[k]);
#define PEAK_BODY16(T, STEP)                                                                                    \
    T a0 = init(0), a1 = init(1), a2 = init(2), a3 = init(3), a4 = init(4), a5 = init(5), a6 = init(6),        \
      a7 = init(7), a8 = init(8), a9 = init(9), a10 = init(10), a11 = init(11), a12 = init(12),                \
      a13 = init(13), a14 = init(14), a15 = init(15);                                                          \
    for (int i = 0; i < PEAK_ITERS; i++) {                                                                      \
        a0 = STEP(a0), a1 = STEP(a1), a2 = STEP(a2), a3 = STEP(a3), a4 = STEP(a4), a5 = STEP(a5);              \
        a6 = STEP(a6), a7 = STEP(a7), a8 = STEP(a8), a9 = STEP(a9), a10 = STEP(a10), a11 = STEP(a11);          \
        a12 = STEP(a12), a13 = STEP(a13), a14 = STEP(a14), a15 = STEP(a15);                                    \
    }                                                                                                           \
    T all[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};                         \
    float sink = 0;                                                                                             \
    for (int k = 0; k < 16; k++) sink += first(all[k]);

#if HAVE_X86
__attribute__((target("avx2,fma"))) static inline __m256 init256(int k) { return _mm256_set1_ps((float)k); }
__attribute__((target("avx2,fma"))) static inline float first256(__m256 v) { return _mm256_cvtss_f32(v); }
__attribute__((target("avx2,fma"))) static double fma256_loop(void) {
    const __m256 x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
#define init init256
#define first first256
#define STEP(a) _mm256_fmadd_ps(a, x, y)
    PEAK_BODY12(__m256, STEP)
#undef STEP
#undef init
#undef first
    return sink == 12345.0f ? 0 : (double)PEAK_ITERS * 12 * 8 * 2; /* 8 lanes, 2 FLOP */
}

/* zmm FMAs: twice the ymm rate where the FMA pipes are 512 bits wide (Zen 5,
 * Intel server cores), the same where they split a zmm in two (Zen 4). */
__attribute__((target("avx512f"))) static inline __m512 init512f(int k) { return _mm512_set1_ps((float)k); }
__attribute__((target("avx512f"))) static inline float first512f(__m512 v) { return _mm512_cvtss_f32(v); }
__attribute__((target("avx512f"))) static double fma512_loop(void) {
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
#define init init512f
#define first first512f
#define STEP(a) _mm512_fmadd_ps(a, x, y)
    PEAK_BODY16(__m512, STEP)
#undef STEP
#undef init
#undef first
    return sink == 12345.0f ? 0 : (double)PEAK_ITERS * 16 * 16 * 2; /* 16 lanes, 2 FLOP */
}

__attribute__((target("avx512f,avx512bf16"))) static inline __m512 init512(int k) { return _mm512_set1_ps((float)k); }
__attribute__((target("avx512f,avx512bf16"))) static inline float first512(__m512 v) { return _mm512_cvtss_f32(v); }
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_loop(void) {
    const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);
#define init init512
#define first first512
#define STEP(a) _mm512_dpbf16_ps(a, x, y)
    PEAK_BODY16(__m512, STEP)
#undef STEP
#undef init
#undef first
    return sink == 12345.0f ? 0 : (double)PEAK_ITERS * 16 * 16 * 4; /* 16 lanes, 2 products, 2 FLOP each */
}

/* AMX: four independent accumulator tiles, each TDPBF16PS 16 x 16 x 32
 * products (16384 FLOP), the shape of pipit's micro-kernel without its
 * loads: PEAK_ITERS / 8 rounds of four, ~1 ms. */
typedef struct __attribute__((packed, aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

__attribute__((target("amx-tile,amx-bf16"))) static double amx_loop(void) {
    static const uint16_t ones[16 * 32] = {0}; /* zeros: the values do not change the rate */
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    for (int i = 0; i < PEAK_ITERS / 8; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_release();
    return (double)(PEAK_ITERS / 8) * 4 * 16 * 16 * 32 * 2;
}
#endif

static int have_avx512f(void) {
#if HAVE_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

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

/* GPT-2 124M at T=64, B=4 (256 rows), C=768, V=50257 */
static const shape shapes[] = {
    {256, 3072, 768, 0, 0, "fc fwd 256x3072x768"},   {256, 768, 3072, 0, 0, "proj fwd 256x768x3072"},
    {768, 3072, 256, 1, 0, "fc dW 768x3072x256"},    {256, 768, 3072, 0, 1, "fc dX 256x768x3072"},
    {1024, 1024, 1024, 0, 0, "square 1024^3"},
    {256, 50257, 768, 0, 1, "head fwd 256x50257x768"}, {50257, 768, 256, 1, 0, "head dW 50257x768x256"},
};

typedef struct {
    const shape *s;
    const float *A, *B;
    const pipit__bf16 *Ah, *Bh;
    float *C;
    pipit__bf16 *Ch;
    void *Cd;    /* pipit__gemm_onednn's result */
    int dnnl_dt; /* its type: PIPIT_BF16 where oneDNN has a bf16 matmul here, else PIPIT_F32 */
    int dnnl_rc;
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

/* pipit's oneDNN path (what the onednn kind runs): one single-threaded
 * oneDNN matmul per tile of gemm.c's rule. */
static void tiles_slice(const void *p, int ith, int nth) {
    job *j = (job *)p;
    const shape *s = j->s;
    int bf = j->dnnl_dt == PIPIT_BF16;
    int rc = pipit__gemm_onednn(j->dnnl_dt, j->dnnl_dt, s->ta, s->tb, 1, s->M, s->N, s->K,
                                bf ? (const void *)j->Ah : (const void *)j->A, s->ta ? s->M : s->K, 0,
                                bf ? (const void *)j->Bh : (const void *)j->B, s->tb ? s->K : s->N, 0, j->Cd, s->N, 0,
                                0, ith, nth);
    if (rc) j->dnnl_rc = rc;
}

/* GFLOP/s of each of fn[0..n), timed alternately (0, 1, ..., 0, 1, ...) so
 * that load which comes and goes on a shared machine falls on all alike:
 * the best run of each within `secs` (at least 5 each). *pk: the peak
 * loop pkf's GFLOP/s, run between them in windows as long as fn[1]'s best
 * run, the best window: the fractions of the peak then divide two rates
 * measured side by side over the same lengths of time (this machine's
 * clock moved the 1 ms peak between 525 and 578 GFLOP/s from one minute to
 * the next, and a 1 ms window catches a boost a 40 ms GEMM does not). */
static void time_all(const bench_slice_fn *fn, int n, const job *j, int nth, double secs, double *gf, peak_fn pkf,
                     double *pk) {
    double flops = 2.0 * (double)j->s->M * (double)j->s->N * (double)j->s->K, best[4] = {1e30, 1e30, 1e30, 1e30};
    double best_pk = 1e30;
    peak_job pj = {pkf, 0};
    for (int f = 0; f < n; f++) bench_pool_run(fn[f], j, nth);
    double end = pipit__now() + secs;
    for (int reps = 0; reps < 5 || pipit__now() < end; reps++) {
        for (int f = 0; f < n; f++) {
            double t0 = pipit__now();
            bench_pool_run(fn[f], j, nth);
            best[f] = fmin(best[f], pipit__now() - t0);
        }
        if (!pkf) continue;
        double t0 = pipit__now(), t = 0; /* as long a window as pipit's bf16 GEMM took, whole loops */
        int runs = 0;
        do bench_pool_run(peak_slice, &pj, nth), runs++;
        while ((t = pipit__now() - t0) < best[1]);
        best_pk = fmin(best_pk, t / runs);
    }
    for (int f = 0; f < n; f++) gf[f] = flops / best[f] * 1e-9;
    *pk = pkf ? pj.flops * nth / best_pk * 1e-9 : 0;
}

/* ---- oneDNN's own matmul of the whole GEMM, threaded by oneDNN ---- */

static dnnl_engine_t engine;
static void (*omp_threads)(int); /* omp_set_num_threads of the libgomp that libdnnl brought */

/* GFLOP/s of one oneDNN matmul of the whole GEMM (C of type dt, as its
 * inputs) on nth OpenMP threads: the best run within secs (at least 3).
 * *impl gets oneDNN's implementation; 0 where it has none. */
static double dnnl_whole(const job *j, int nth, double secs, char *impl, size_t impl_len) {
    const shape *s = j->s;
    int bf = j->dnnl_dt == PIPIT_BF16;
    dnnl_data_type_t dt = bf ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t da = {s->M, s->K}, db = {s->K, s->N}, dc = {s->M, s->N};
    dnnl_dims_t sa = {s->ta ? 1 : s->K, s->ta ? s->M : 1}, sb = {s->tb ? 1 : s->N, s->tb ? s->K : 1};
    dnnl_dims_t sc = {s->N, 1};
    dnnl_memory_desc_t ma, mb, mc;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    snprintf(impl, impl_len, "none");
    if (omp_threads) omp_threads(nth); /* before the primitive: oneDNN plans it for this many threads */
    if (dnnl_memory_desc_init_by_strides(&ma, 2, da, dt, sa) || dnnl_memory_desc_init_by_strides(&mb, 2, db, dt, sb) ||
        dnnl_memory_desc_init_by_strides(&mc, 2, dc, dt, sc) || dnnl_matmul_desc_init(&md, &ma, &mb, NULL, &mc) ||
        dnnl_primitive_desc_create(&pd, &md, NULL, engine, NULL))
        return 0;
    const char *name = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    snprintf(impl, impl_len, "%s", name ? name : "?");
    dnnl_status_t st = dnnl_primitive_create(&prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st) return 0;
    dnnl_memory_t m[3];
    dnnl_stream_t stream;
    dnnl_memory_create(&m[0], &ma, engine, bf ? (void *)j->Ah : (void *)j->A);
    dnnl_memory_create(&m[1], &mb, engine, bf ? (void *)j->Bh : (void *)j->B);
    dnnl_memory_create(&m[2], &mc, engine, j->Cd);
    dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
    double best = 1e30, end = pipit__now() + secs;
    for (int reps = -1; reps < 3 || pipit__now() < end; reps++) { /* rep -1: warm-up */
        double t0 = pipit__now();
        dnnl_primitive_execute(prim, stream, 3, args);
        dnnl_stream_wait(stream);
        if (reps >= 0) best = fmin(best, pipit__now() - t0);
    }
    dnnl_stream_destroy(stream);
    for (int i = 0; i < 3; i++) dnnl_memory_destroy(m[i]);
    dnnl_primitive_destroy(prim);
    if (omp_threads) omp_threads(1);
    return 2.0 * (double)s->M * (double)s->N * (double)s->K / best * 1e-9;
}

/* ---- checks before timing ---- */

/* bf16 inputs (exact in fp32 too), so every GEMM multiplies the same
 * values: each bf16 result within one rounding (2^-8) plus fp32
 * accumulation of sgemm's; the oneDNN tiles the same; 2 threads against 1
 * bitwise for pipit's bf16 GEMM and the oneDNN tiles. */
static double worst_vs(const job *j, int64_t nC, const void *x, int bf, double *scale) {
    double worst = 0;
    *scale = 0;
    for (int64_t i = 0; i < nC; i++) {
        double v = bf ? pipit__bf16_to_f32(((const pipit__bf16 *)x)[i]) : ((const float *)x)[i];
        worst = fmax(worst, fabs(v - j->C[i]));
        *scale = fmax(*scale, fabs((double)j->C[i]));
    }
    return worst;
}

static int check(const shape *s, job *j) {
    int64_t nC = s->M * s->N;
    size_t ed = j->dnnl_dt == PIPIT_BF16 ? 2 : 4;
    bench_pool_run(sgemm_slice, j, 1);
    int bad = 0;
    void *one = malloc(4 * (size_t)nC);
    for (int which = 0; which < 2; which++) { /* pipit's bf16 GEMM, then the oneDNN tiles */
        bench_slice_fn fn = which ? tiles_slice : bgemm_slice;
        void *out = which ? j->Cd : (void *)j->Ch;
        size_t es = which ? ed : 2;
        bench_pool_run(fn, j, 1);
        if (which && j->dnnl_rc) break; /* oneDNN has no such matmul here: nothing to check */
        memcpy(one, out, es * (size_t)nC);
        bench_pool_run(fn, j, 2);
        if (memcmp(one, out, es * (size_t)nC)) {
            fprintf(stderr, "%s: %s on 2 threads differs from 1\n", s->what, which ? "oneDNN tiles" : "bf16 GEMM");
            bad = 1;
        }
        double scale, worst = worst_vs(j, nC, out, es == 2, &scale);
        double bound = (es == 2 ? 0x1p-8 * scale : 0) + (double)s->K * 0x1p-22 * scale;
        if (!(worst <= bound)) {
            fprintf(stderr, "%s: %s off by %g (largest |C| %g)\n", s->what, which ? "oneDNN tiles" : "bf16 GEMM",
                    worst, scale);
            bad = 1;
        }
    }
    free(one);
    return bad;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.5;
    pipit__gemm_init();
    bench_pool_start();
    void *set = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    memcpy(&omp_threads, &set, sizeof set);
    if (dnnl_engine_create(&engine, dnnl_cpu, 0)) {
        fprintf(stderr, "bench_bf16: oneDNN made no CPU engine\n");
        return 1;
    }
    int bf = have_avx512bf16(), z = have_avx512f(), amx = HAVE_X86 && !pipit__cpu_amx_why_not();
    const char *why = pipit__onednn_bf16_why_not();
    int dnnl_dt = why ? PIPIT_F32 : PIPIT_BF16;
    printf("bf16 GEMM on this CPU: %s; OpenBLAS kernels: %s\n", pipit__gemm_bf16_kind(), openblas_get_corename());
    if (why) printf("oneDNN bf16 matmul: not here (%s); the oneDNN columns are its f32 matmul, for comparison\n", why);
    double pk32[3] = {0}, pk16[3] = {0}, pkdp[3] = {0};
    for (int nth = 1; nth <= 2; nth++) {
        double y = 0, zz = 0;
#if HAVE_X86
        y = peak(fma256_loop, nth, secs);
        zz = z ? peak(fma512_loop, nth, secs) : 0;
        pk32[nth] = fmax(y, zz);
        pkdp[nth] = bf ? peak(dpbf16_loop, nth, secs) : pk32[nth];
        pk16[nth] = amx ? peak(amx_loop, nth, secs) : pkdp[nth];
#endif
        printf("%d thread%s: fp32 FMA peak %.1f GFLOP/s (ymm %.1f%s); bf16 peak %.1f GFLOP/s%s", nth,
               nth == 1 ? "" : "s", pk32[nth], y, z ? "" : ", no AVX-512", pk16[nth],
               amx  ? " (AMX tdpbf16ps)"
               : bf ? " (vdpbf16ps)"
                    : " (no AVX512-BF16: no instruction multiplies bf16, so the bf16 peak is the fp32 FMA peak)");
        if (amx) printf("; vdpbf16ps %.1f", pkdp[nth]);
        printf("\n");
        if (z) printf("           zmm %.1f\n", zz);
    }
    const char *dn = dnnl_dt == PIPIT_BF16 ? "bf16" : "f32";
    printf("\nGFLOP/s; dnnl tiles = pipit__gemm_onednn (%s), dnnl whole = one oneDNN matmul (%s) on oneDNN's threads\n",
           dn, dn);
    printf("bf16/pk and til/pk: against the bf16 peak loop run between that shape's GEMMs (pk beside)\n");
    printf("%-24s %3s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "shape", "thr", "sgemm", "bf16", "dnnl-til", "dnnl-whl",
           "bf16/f32", "f32/peak", "bf16/pk", "til/pk", "pk beside");
    int bad = 0;
    char impl[64] = "";
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        int64_t nA = s->M * s->K, nB = s->K * s->N, nC = s->M * s->N;
        float *A = bench_rnd(nA), *B = bench_rnd(nB), *C = bench_rnd(nC);
        /* 64-byte aligned, as pipit's own blocks are (a malloc'd bf16 C, 16 bytes off a line, cost the head's dW
         * ~12 %: each row's stores split across lines) */
        pipit__bf16 *Ah = pipit__malloc_aligned(sizeof *Ah * (size_t)nA);
        pipit__bf16 *Bh = pipit__malloc_aligned(sizeof *Bh * (size_t)nB);
        pipit__bf16 *Ch = pipit__malloc_aligned(sizeof *Ch * (size_t)nC);
        void *Cd = pipit__malloc_aligned(4 * (size_t)nC);
        for (int64_t k = 0; k < nA; k++) A[k] = pipit__bf16_to_f32(Ah[k] = pipit__bf16_from_f32(A[k]));
        for (int64_t k = 0; k < nB; k++) B[k] = pipit__bf16_to_f32(Bh[k] = pipit__bf16_from_f32(B[k]));
        job j = {s, A, B, Ah, Bh, C, Ch, Cd, dnnl_dt, 0};
        bad += check(s, &j);
        for (int nth = 1; nth <= 2 && !bad; nth++) {
            double g[3] = {0, 0, 0};
            bench_slice_fn fns[3] = {sgemm_slice, bgemm_slice, tiles_slice};
            double pk = 0;
#if HAVE_X86
            time_all(fns, j.dnnl_rc ? 2 : 3, &j, nth, 2 * secs, g, amx ? amx_loop : bf ? dpbf16_loop : NULL, &pk);
#else
            time_all(fns, j.dnnl_rc ? 2 : 3, &j, nth, 2 * secs, g, NULL, &pk);
#endif
            if (!(pk > 0)) pk = pk16[nth];
            double w = dnnl_whole(&j, nth, 2 * secs, impl, sizeof impl);
            double pkd = dnnl_dt == PIPIT_BF16 ? pk : pk32[nth];
            printf("%-24s %3d %8.1f %8.1f %8.1f %8.1f %8.2f %8.2f %8.2f %8.2f %8.1f\n", s->what, nth, g[0], g[1], g[2],
                   w, g[1] / g[0], g[0] / pk32[nth], g[1] / pk, g[2] / pkd, pk);
        }
        pipit__free_aligned(A), pipit__free_aligned(B), pipit__free_aligned(C);
        pipit__free_aligned(Ah), pipit__free_aligned(Bh), pipit__free_aligned(Ch), pipit__free_aligned(Cd);
    }
    printf("oneDNN's implementation of the whole matmul (last shape): %s\n", impl);
    bench_pool_stop();
    return bad ? 1 : 0;
}
