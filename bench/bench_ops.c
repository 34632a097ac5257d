/*
 * bench_ops.c — the kernels of the general op set at the shapes of a
 * Llama-style layer, against ceilings measured side by side in the same
 * run: bandwidth-bound kernels as effective GB/s (bytes read + written per
 * call) over memcpy's GB/s moving as many bytes (half read, half written:
 * the same cache levels), on as many threads; attention as GFLOP/s over
 * the cblas_sgemm ceiling of its own head GEMM. Before timing, each kernel's
 * 2-thread result is checked bitwise against its 1-thread result.
 * Usage: bench_ops [seconds per measurement, default 0.3] [rows, default 1024]
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "bench_kernel.h"
#include "util/common.h"

/* A Llama layer's sizes: rows = B*T tokens of width C, Hq query / Hkv kv
 * heads of D, MLP width F; attention over sequences of T. */
static int64_t R = 1024, C = 768, Hq = 12, Hkv = 4, D = 64, F = 2048, T = 256;

typedef struct kjob {
    const char *name;
    void (*run)(const struct kjob *j, int ith, int nth);
    float *out;
    size_t out_bytes;
    const float *in[4];
    const int32_t *idx;
    double bytes;  /* moved per call (bandwidth-bound) */
    double flops;  /* per call (attention); 0: bandwidth-bound */
    pipit__attn_dims att;
} kjob;

static void k_rms(const kjob *j, int i, int n) { pipit__rmsnorm_f32(j->out, j->in[0], j->in[1], R, C, 1e-5, i, n); }
static void k_rms_dx(const kjob *j, int i, int n) {
    pipit__rmsnorm_dx_f32(j->out, j->in[0], j->in[1], j->in[2], R, C, 1e-5, i, n);
}
static void k_rms_dw(const kjob *j, int i, int n) {
    pipit__rmsnorm_dw_f32(j->out, j->in[0], j->in[2], R, C, 1e-5, i, n);
}
static void k_rope(const kjob *j, int i, int n) {
    pipit__rope_f32(j->out, j->in[0], R / T, T, Hq, D, 0, (pipit__rope_freqs){10000.0, 0, 0, 0, 0}, 0, i, n);
}
static void k_silu(const kjob *j, int i, int n) { pipit__silu_f32(j->out, j->in[0], R * F, i, n); }
static void k_silu_dx(const kjob *j, int i, int n) { pipit__silu_dx_f32(j->out, j->in[0], j->in[1], R * F, i, n); }
static void k_mul(const kjob *j, int i, int n) { pipit__mul_f32(j->out, j->in[0], j->in[1], R * F, i, n); }
/* [R,C] + [C] as pipit__bcast_plan lays it out; sum_to [R,C] -> [C] */
static int64_t row_dims[4], row_sa[4], row_sb[4] = {0, 0, 0, 1}, sum_so[4] = {0, 0, 0, 1};
static void k_add_row(const kjob *j, int i, int n) {
    pipit__add_bcast_f32(j->out, j->in[0], j->in[1], row_dims, row_sa, row_sb, i, n);
}
static void k_sum_to(const kjob *j, int i, int n) { pipit__sum_to_f32(j->out, j->in[0], row_dims, sum_so, 1, i, n); }
static void k_softmax(const kjob *j, int i, int n) { pipit__softmax_f32(j->out, j->in[0], R, T, i, n); }
static void k_gather(const kjob *j, int i, int n) { pipit__embed_f32(j->out, j->in[0], j->idx, R, C, i, n); }
static void k_att(const kjob *j, int i, int n) {
    pipit__attn_fwd_f32(j->out, j->in[0], j->in[1], j->in[2], &j->att, i, n);
}
static void k_att_d(const kjob *j, int i, int n) {
    int64_t nq = R * Hq * D, nk = R * Hkv * D;
    pipit__attn_bwd_f32(j->out, j->out + nq, j->out + nq + nk, j->in[0], j->in[1], j->in[2], j->in[3], &j->att, i, n);
}

/* The ceilings, as jobs on the same threads: memcpy of out_bytes split
 * between the threads, and one head's score GEMM [T,D] x [D,T] per thread. */
static void k_memcpy(const kjob *j, int i, int n) {
    int64_t lo, hi;
    pipit__range((int64_t)j->out_bytes, i, n, &lo, &hi);
    memcpy((char *)j->out + lo, (const char *)j->in[0] + lo, (size_t)(hi - lo));
}
static void k_sgemm(const kjob *j, int i, int n) {
    (void)n;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)T, (blasint)T, (blasint)D, 1, j->in[0], (blasint)D,
                j->in[1], (blasint)D, 0, j->out + (int64_t)i * T * T, (blasint)T);
}

static void run_slice(const void *j, int ith, int nth) { ((const kjob *)j)->run(j, ith, nth); }
static void run_on(const kjob *j, int nth) { bench_pool_run(run_slice, j, nth); }

/* Best seconds of one call over at least `secs`. */
static double best_of(void (*fn)(const void *), const void *arg, double secs) {
    double best = 1e30, t_end;
    fn(arg); /* warm-up */
    t_end = pipit__now() + secs;
    for (int reps = 0; reps < 3 || pipit__now() < t_end; reps++) {
        double t0 = pipit__now();
        fn(arg);
        best = fmin(best, pipit__now() - t0);
    }
    return best;
}
static int cur_nth;
static void call_job(const void *j) { run_on(j, cur_nth); }

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.3;
    if (argc > 2) R = atoll(argv[2]) / T * T;
    if (R < T) R = T;
    pipit__gemm_init();
    bench_pool_start();
    int64_t big = R * F > 3 * R * C ? R * F : 3 * R * C;
    float *x = bench_rnd(big), *y = bench_rnd(big), *d = bench_rnd(big), *w = bench_rnd(F);
    float *o1 = bench_rnd(3 * big), *o2 = bench_rnd(3 * big);
    float *q = bench_rnd(R * Hq * D), *kk = bench_rnd(R * Hkv * D), *v = bench_rnd(R * Hkv * D);
    float *dO = bench_rnd(R * Hq * D);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)R);
    for (int64_t i = 0; i < R; i++) idx[i] = (int32_t)((i * 7919) % 32000);
    float *table = bench_rnd(32000 * C);
    double fb = sizeof(float), nx = (double)(R * C), nf = (double)(R * F), nq = (double)(R * Hq * D),
           nk = (double)(R * Hkv * D);
    pipit__attn_dims att = {R / T, T, T, Hq, Hkv, D, Hq * D, Hkv * D, Hkv * D, Hq * D, 1, 1 / sqrt((double)D)};
    double att_flops = 4.0 * (double)(R / T) * Hq * (double)T * T * D / 2; /* causal: half the scores */
    kjob jobs[] = {
        {"rmsnorm", k_rms, NULL, (size_t)nx * 4, {x, w}, NULL, fb * 2 * nx, 0, att},
        {"rmsnorm dx", k_rms_dx, NULL, (size_t)nx * 4, {x, w, d}, NULL, fb * 3 * nx, 0, att},
        {"rmsnorm dw", k_rms_dw, NULL, (size_t)C * 4, {x, w, d}, NULL, fb * 2 * nx, 0, att},
        {"rope (q)", k_rope, NULL, (size_t)nq * 4, {q}, NULL, fb * 2 * nq, 0, att},
        {"silu", k_silu, NULL, (size_t)nf * 4, {x}, NULL, fb * 2 * nf, 0, att},
        {"silu dx", k_silu_dx, NULL, (size_t)nf * 4, {x, d}, NULL, fb * 3 * nf, 0, att},
        {"mul (swiglu)", k_mul, NULL, (size_t)nf * 4, {x, y}, NULL, fb * 3 * nf, 0, att},
        {"add [R,C]+[C]", k_add_row, NULL, (size_t)nx * 4, {x, w}, NULL, fb * 2 * nx, 0, att},
        {"sum_to [R,C]->[C]", k_sum_to, NULL, (size_t)C * 4, {x}, NULL, fb * nx, 0, att},
        {"softmax [R,T]", k_softmax, NULL, (size_t)(R * T) * 4, {x}, NULL, fb * 2 * (double)(R * T), 0, att},
        {"gather rows", k_gather, NULL, (size_t)nx * 4, {table}, idx, fb * 2 * nx, 0, att},
        {"attention gqa fwd", k_att, NULL, (size_t)nq * 4, {q, kk, v}, NULL, 0, att_flops, att},
        {"attention gqa bwd", k_att_d, NULL, (size_t)(nq + 2 * nk) * 4, {q, kk, v, dO}, NULL, 0, 2.5 * att_flops, att},
    };
    row_dims[0] = row_dims[1] = 1, row_dims[2] = R, row_dims[3] = C;
    row_sa[2] = C, row_sa[3] = 1;
    printf("bench_ops: rows %lld, C %lld, heads %lld/%lld of %lld, F %lld, T %lld\n", (long long)R, (long long)C,
           (long long)Hq, (long long)Hkv, (long long)D, (long long)F, (long long)T);
    kjob mm = {"sgemm", k_sgemm, o1, 0, {q, kk}, NULL, 0, 0, att};
    double ceil_gf[2];
    for (int t = 0; t < 2; t++) {
        cur_nth = t + 1;
        ceil_gf[t] = (t + 1) * 2.0 * (double)(T * T * D) / best_of(call_job, &mm, secs) * 1e-9;
    }
    printf("attention's ceiling (measured here): one head's sgemm [%lld,%lld]x[%lld,%lld] on each thread, %.1f / %.1f "
           "GFLOP/s on 1 / 2 threads; the others' is memcpy of their bytes on as many threads\n",
           (long long)T, (long long)D, (long long)D, (long long)T, ceil_gf[0], ceil_gf[1]);
    printf("%-20s %10s %10s %8s | %10s %10s %8s | check\n", "kernel", "1t ms", "rate", "/ceil", "2t ms", "rate",
           "/ceil");
    int ok = 1;
    double most = 0; /* the memcpy ceiling's buffers: half of the most bytes a kernel moves */
    for (size_t i = 0; i < sizeof jobs / sizeof jobs[0]; i++) most = fmax(most, jobs[i].bytes / 2);
    float *cp_src = bench_rnd((int64_t)(most / 4) + 1), *cp_dst = bench_rnd((int64_t)(most / 4) + 1);
    for (size_t i = 0; i < sizeof jobs / sizeof jobs[0]; i++) {
        kjob *j = &jobs[i];
        if (!j->run) continue;
        j->out = o1;
        run_on(j, 1);
        j->out = o2;
        run_on(j, 2);
        int same = memcmp(o1, o2, j->out_bytes) == 0;
        ok &= same;
        double ms[2], rate[2];
        for (int t = 0; t < 2; t++) {
            cur_nth = t + 1;
            double s = best_of(call_job, j, secs);
            ms[t] = s * 1e3;
            rate[t] = (j->flops ? j->flops : j->bytes) / s * 1e-9;
        }
        double ceil[2] = {ceil_gf[0], ceil_gf[1]};
        kjob cp = {"memcpy", k_memcpy, cp_dst, (size_t)(j->bytes / 2), {cp_src}, NULL, 0, 0, att};
        for (int t = 0; !j->flops && t < 2; t++) {
            cur_nth = t + 1;
            ceil[t] = j->bytes / best_of(call_job, &cp, secs) * 1e-9;
        }
        printf("%-20s %10.3f %7.1f %s %8.2f | %10.3f %7.1f %s %8.2f | %s\n", j->name, ms[0], rate[0],
               j->flops ? "GF/s" : "GB/s", rate[0] / ceil[0], ms[1], rate[1], j->flops ? "GF/s" : "GB/s",
               rate[1] / ceil[1], same ? "2t bits = 1t" : "2t BITS DIFFER");
    }
    bench_pool_stop();
    return ok ? 0 : 1;
}
