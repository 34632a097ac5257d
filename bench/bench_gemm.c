/*
 * bench_gemm.c — pipit__gemm_f32 against the BLAS ceiling at GPT-2 shapes.
 *
 * For each shape: raw cblas_sgemm with OpenBLAS's own 1 and 2 threads (the
 * ceiling), and pipit's tiled GEMM on 1 and 2 of our threads. Results are
 * checked against each other (and 2 threads against 1 bitwise) before any
 * timing. Usage: bench_gemm [reps-seconds, default 0.5]
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "bench_kernel.h"
#include "util/common.h"

typedef struct {
    int ta, tb;
    int64_t M, N, K;
    const char *what;
    int count; /* how many of it one step runs (12: one per layer) */
} shape;

/* Every GEMM of a GPT-2 124M step at B*T = 256 rows (a linear's weight is
 * [in, out]; the tied head's is wte [V, C]): forward, input gradient
 * (NT) and weight gradient (TN) of each. */
static const shape shapes[] = {
    {0, 0, 256, 2304, 768, "qkv fwd", 12},       {0, 0, 256, 768, 768, "attn proj fwd", 12},
    {0, 0, 256, 3072, 768, "fc fwd", 12},        {0, 0, 256, 768, 3072, "fc proj fwd", 12},
    {0, 1, 256, 768, 2304, "qkv dx", 12},        {0, 1, 256, 768, 768, "attn proj dx", 12},
    {0, 1, 256, 768, 3072, "fc dx", 12},         {0, 1, 256, 3072, 768, "fc proj dx", 12},
    {1, 0, 768, 2304, 256, "qkv dW", 12},        {1, 0, 768, 768, 256, "attn proj dW", 12},
    {1, 0, 768, 3072, 256, "fc dW", 12},         {1, 0, 3072, 768, 256, "fc proj dW", 12},
    {0, 1, 256, 50257, 768, "lm head fwd", 1},  {0, 0, 256, 768, 50257, "lm head dx", 1},
    {1, 0, 50257, 768, 256, "lm head dW", 1},
};

/* The operands of one run. */
typedef struct {
    const shape *s;
    const float *A, *B;
    float *C;
} job;

static void ours(const job *j, int ith, int nth) {
    const shape *s = j->s;
    pipit__gemm_f32(s->ta, s->tb, 1, s->M, s->N, s->K, j->A, s->ta ? s->M : s->K, 0, j->B,
                    s->tb ? s->K : s->N, 0, j->C, s->N, 0, 0, ith, nth);
}

static void blas(const job *j) {
    const shape *s = j->s;
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                s->tb ? CblasTrans : CblasNoTrans, (blasint)s->M, (blasint)s->N, (blasint)s->K,
                1, j->A, (blasint)(s->ta ? s->M : s->K), j->B, (blasint)(s->tb ? s->K : s->N),
                0, j->C, (blasint)s->N);
}

static void ours_slice(const void *j, int ith, int nth) { ours(j, ith, nth); }
static void ours2(const job *j) { bench_pool_run(ours_slice, j, 2); }
static void ours1(const job *j) { ours(j, 0, 1); }

/* GFLOP/s of fn over at least `secs` seconds (best of the timed runs). */
static double timeit(void (*fn)(const job *), const job *j, double secs) {
    double flops = 2.0 * (double)j->s->M * (double)j->s->N * (double)j->s->K, best = 1e30;
    fn(j); /* warm-up */
    double t_end = pipit__now() + secs;
    int reps = 0;
    while (reps < 3 || pipit__now() < t_end) {
        double t0 = pipit__now();
        fn(j);
        double dt = pipit__now() - t0;
        if (dt < best) best = dt;
        reps++;
    }
    return flops / best * 1e-9;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.5;
    bench_pool_start();
    int ok = 1;
    double step_s[4] = {0}; /* one step's GEMM seconds: blas1, ours1, blas2, ours2 */
    printf("%-14s %5s %6s %5s %9s | %8s %8s | %8s %8s | %6s %6s\n", "shape", "M", "N", "K",
           "tiles", "blas1", "ours1", "blas2", "ours2", "r1", "r2");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        float *A = bench_rnd(s->M * s->K), *B = bench_rnd(s->K * s->N);
        size_t cb = (size_t)(s->M * s->N) * sizeof(float);
        float *C0 = pipit__malloc_aligned(cb), *C1 = pipit__malloc_aligned(cb),
              *C2 = pipit__malloc_aligned(cb);
        job j0 = {s, A, B, C0}, j1 = {s, A, B, C1}, j2 = {s, A, B, C2};
        /* check first: ours (1 and 2 threads) against plain BLAS */
        pipit__gemm_init();
        blas(&j0);
        ours1(&j1);
        ours2(&j2);
        double md = 0;
        for (int64_t k = 0; k < s->M * s->N; k++) md = fmax(md, fabs((double)C0[k] - C1[k]));
        int same = memcmp(C1, C2, cb) == 0;
        if (md > 1e-3 * sqrt((double)s->K) || !same) {
            printf("%s: CHECK FAILED (max diff %g, 2-thread bits %s)\n", s->what, md,
                   same ? "equal" : "DIFFER");
            ok = 0;
        }
        int64_t mt, nt;
        pipit__gemm_tiles(s->M, s->N, s->K, &mt, &nt);
        char tiles[32];
        snprintf(tiles, sizeof tiles, "%lldx%lld", (long long)mt, (long long)nt);
        openblas_set_num_threads(1);
        double b1 = timeit(blas, &j0, secs), o1 = timeit(ours1, &j1, secs);
        openblas_set_num_threads(2);
        double b2 = timeit(blas, &j0, secs);
        openblas_set_num_threads(1);
        double o2 = timeit(ours2, &j2, secs);
        double gf = 2e-9 * (double)s->M * (double)s->N * (double)s->K * s->count;
        step_s[0] += gf / b1, step_s[1] += gf / o1, step_s[2] += gf / b2, step_s[3] += gf / o2;
        printf("%-14s %5lld %6lld %5lld %9s | %8.1f %8.1f | %8.1f %8.1f | %6.3f %6.3f\n",
               s->what, (long long)s->M, (long long)s->N, (long long)s->K, tiles, b1, o1, b2,
               o2, o1 / b1, o2 / b2);
        fflush(stdout);
        pipit__free_aligned(A), pipit__free_aligned(B), pipit__free_aligned(C0),
            pipit__free_aligned(C1), pipit__free_aligned(C2);
    }
    printf("%-40s | %8.1f %8.1f | %8.1f %8.1f | %6.3f %6.3f\n", "one GPT-2 124M step (ms of GEMM)",
           1e3 * step_s[0], 1e3 * step_s[1], 1e3 * step_s[2], 1e3 * step_s[3], step_s[0] / step_s[1],
           step_s[2] / step_s[3]);
    printf("(GFLOP/s, best of runs; r = ours / BLAS at the same thread count)\n");
    bench_pool_stop();
    return ok ? 0 : 1;
}
