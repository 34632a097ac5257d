/*
 * gemm.c — batched GEMM through single-threaded OpenBLAS calls.
 *
 * C is cut into tiles by a rule that looks only at (M,N,K); each tile is one
 * cblas call and tiles are dealt to threads round-robin. OpenBLAS's bits
 * depend on its own thread count and on the sub-matrix it is handed, so
 * fixing both (1 BLAS thread, shape-only tiles) makes results nth-invariant.
 */
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend/cpu/kernels.h"
#include "util/common.h"

/* Preferred smallest tile: row splits below 256 and column splits below
 * ~192 lose 5-15% to the packing each BLAS call redoes (bench/bench_gemm.c
 * on Zen 4). Columns are split in multiples of 64, rows of 16. */
#define GEMM_MIN_N 192
#define GEMM_MIN_M 256
/* Below this many tiles, sides may shrink to GEMM_MIN_HARD to find work
 * for a few threads. */
#define GEMM_MIN_HARD 128
#define GEMM_FEW_TILES 4
/* Up to this many tiles, for a fair round-robin deal over 2-8 threads ... */
#define GEMM_TILES_MAX 16
/* ... but none with less work than this (flops), so small GEMMs stay whole. */
#define GEMM_TILE_FLOPS (1 << 22)

static int cpu_has_avx512_skx(void);

/* OpenBLAS (built for many CPUs) picks its kernels by the CPU model when
 * it is loaded; a model newer than it knows gets its generic fallback
 * (Debian 12's 0.3.21 on a 5th-generation Xeon: Prescott, SSE3 only: a
 * sixth of the fp32 rate, and kernels whose sums for one row of C depend
 * on how many rows the call has, so a batched decode differed from a
 * single one). Where the user set no OPENBLAS_CORETYPE, that fallback is
 * replaced by the newest family this CPU runs, chosen again through
 * OpenBLAS's own start-up (gotoblas_dynamic_init reads the variable),
 * once, at the CPU backend's first start: before any thread of pipit's
 * exists or calls BLAS. */
static const char *const generic_cores[] = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom",
                                            "katmai", "coppermine", "northwood", "banias", "unknown"};

static const char *better_core(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (cpu_has_avx512_skx() && __builtin_cpu_supports("avx512bf16") && dlsym(RTLD_DEFAULT, "gotoblas_COOPERLAKE"))
        return "COOPERLAKE";
    if (cpu_has_avx512_skx() && dlsym(RTLD_DEFAULT, "gotoblas_SKYLAKEX")) return "SKYLAKEX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && dlsym(RTLD_DEFAULT, "gotoblas_HASWELL"))
        return "HASWELL";
#endif
    return NULL;
}

static int chosen_again;

static void choose_blas_kernels(void) {
    const char *now = openblas_get_corename(), *want = better_core();
    if (getenv("OPENBLAS_CORETYPE") || !now || !want) return;
    int generic = 0;
    for (size_t i = 0; i < sizeof generic_cores / sizeof generic_cores[0]; i++)
        generic |= strcasecmp(now, generic_cores[i]) == 0;
    void *quit = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"), *init = dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init");
    void *stop = dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
    if (!generic || !quit || !init || !stop) return;
    int (*stop_fn)(void);
    void (*quit_fn)(void), (*init_fn)(void);
    memcpy(&stop_fn, &stop, sizeof stop);
    memcpy(&quit_fn, &quit, sizeof quit);
    memcpy(&init_fn, &init, sizeof init);
    setenv("OPENBLAS_CORETYPE", want, 1);
    /* OpenBLAS's pool threads, started when it was loaded, run its
     * start-up themselves on their first buffer (gotoblas_dynamic_init
     * again): on a busy machine that is still under way now, and the two
     * start-ups racing on its core pointer crashed a CI run. Joining them
     * first leaves this thread alone in OpenBLAS (the pool that
     * openblas_set_num_threads starts again later finds it done, and
     * never gets work: pipit calls OpenBLAS with one thread). */
    stop_fn();
    quit_fn();
    init_fn();
    unsetenv("OPENBLAS_CORETYPE"); /* read; the process's environment is left as it was */
    chosen_again = 1;
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

int pipit__blas_chosen_again(void) {
    pthread_once(&blas_once, choose_blas_kernels);
    return chosen_again;
}

void pipit__gemm_init(void) {
    pthread_once(&blas_once, choose_blas_kernels);
    openblas_set_num_threads(1);
}

const char *pipit_cpu_blas_kernels(void) {
    const char *name = openblas_get_corename();
    return name && *name ? name : "unknown";
}

static int cpu_has_avx512_skx(void) { /* what OpenBLAS's SkylakeX kernels need */
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

const char *pipit_cpu_blas_advice(void) {
    const char *k = pipit_cpu_blas_kernels();
    int narrow = strcasecmp(k, "haswell") == 0 || strcasecmp(k, "zen") == 0;
    return narrow && cpu_has_avx512_skx()
               ? "OpenBLAS runs its 256-bit kernels on this AVX-512 CPU: OPENBLAS_CORETYPE=SKYLAKEX picks faster ones "
                 "(README, 'Performance on the CPU')"
               : NULL;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t cdiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

void pipit__gemm_tiles(int64_t M, int64_t N, int64_t K, int64_t *mt, int64_t *nt) {
    double flops = 2.0 * (double)M * (double)N * (double)(K > 0 ? K : 1);
    int64_t want = (int64_t)(flops / GEMM_TILE_FLOPS);
    want = PIPIT_MAX(1, PIPIT_MIN(want, GEMM_TILES_MAX));
    int64_t m = PIPIT_MAX(M, 1), n = PIPIT_MAX(N, 1);
    /* Halve the side that is longer relative to its preferred minimum, while
     * it stays above that minimum; then, if there are still very few tiles,
     * go down to the hard minimum. */
    for (int phase = 0; phase < 2; phase++) {
        int64_t min_n = phase ? GEMM_MIN_HARD : GEMM_MIN_N;
        int64_t min_m = phase ? GEMM_MIN_HARD : GEMM_MIN_M;
        int64_t goal = phase ? PIPIT_MIN(want, GEMM_FEW_TILES) : want;
        while (cdiv(M, m) * cdiv(N, n) < goal) {
            int can_n = n >= 2 * min_n, can_m = m >= 2 * min_m;
            if (can_n && (!can_m || n * min_m >= m * min_n))
                n = round_up(cdiv(n, 2), 64);
            else if (can_m)
                m = round_up(cdiv(m, 2), 16);
            else
                break;
        }
    }
    *mt = m;
    *nt = n;
}

/* One implementation per type; BLAS is cblas_sgemm or cblas_dgemm. */
#define PIPIT_GEMM_IMPL(T, S, BLAS)                                                       \
    void pipit__gemm_##S(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N,  \
                         int64_t K, const T *A, int64_t lda, int64_t sA, const T *B,     \
                         int64_t ldb, int64_t sB, T *C, int64_t ldc, int64_t sC,         \
                         int accumulate, int ith, int nth) {                             \
        if (batch <= 0 || M <= 0 || N <= 0) return;                                      \
        PIPIT_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX);                \
        PIPIT_ASSERT(lda <= INT32_MAX && ldb <= INT32_MAX && ldc <= INT32_MAX);          \
        int64_t mt, nt;                                                                  \
        pipit__gemm_tiles(M, N, K, &mt, &nt);                                            \
        int64_t tn = cdiv(N, nt), tiles = cdiv(M, mt) * tn;                              \
        for (int64_t u = ith; u < batch * tiles; u += nth) {                             \
            int64_t b = u / tiles, t = u % tiles;                                        \
            int64_t i0 = t / tn * mt, j0 = t % tn * nt;                                  \
            int64_t m = PIPIT_MIN(mt, M - i0), n = PIPIT_MIN(nt, N - j0);               \
            T *c = C + b * sC + i0 * ldc + j0; /* tile [m,n] of C[b] */                  \
            if (K <= 0) {                                                                \
                if (!accumulate)                                                         \
                    for (int64_t i = 0; i < m; i++) memset(c + i * ldc, 0, n * sizeof(T)); \
                continue;                                                                \
            }                                                                            \
            /* rows i0.. of op(A): stored A is [M,K] (row i0) or [K,M] (column i0) */     \
            const T *a = A + b * sA + (trans_a ? i0 : i0 * lda);                         \
            /* columns j0.. of op(B): stored B is [K,N] or [N,K] */                      \
            const T *bb = B + b * sB + (trans_b ? j0 * ldb : j0);                        \
            BLAS(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,                     \
                 trans_b ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, (blasint)K, \
                 (T)1, a, (blasint)lda, bb, (blasint)ldb, accumulate ? (T)1 : (T)0, c,   \
                 (blasint)ldc);                                                          \
        }                                                                                \
    }

PIPIT_GEMM_IMPL(float, f32, cblas_sgemm)
PIPIT_GEMM_IMPL(double, f64, cblas_dgemm)
