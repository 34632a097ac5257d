/*
 * bench_train.c — one-rank GPT-2 or Llama training-step time and GFLOP/s
 * against the OpenBLAS sgemm ceiling measured in the same process.
 *
 * Usage: bench_train [V T L H C B threads steps warmup [KV F TIED]]
 *   default: the small GPT-2 V=256 T=64 L=4 H=4 C=128 B=8, 1 thread, 10
 *   timed steps after 2 warm-up steps. With KV F TIED: the Llama of
 *   pipit_llama.h with KV key/value heads, MLP width F and the head tied to
 *   the embedding (TIED 1) or not (0); rope_theta 10000, eps 1e-5.
 *
 * Each step is a full pipit_step (forward, backward, AdamW update) on one
 * rank, M = 1, synthetic random tokens. Reported: median / min / mean step
 * ms over the timed steps (the machine may be shared: the median is the
 * number to quote), tokens/s, GFLOP/s with pipit_gpt2_flops_per_token or
 * pipit_llama_flops_per_token (the same counts as bench/torch_step.py), then cblas_sgemm GFLOP/s with
 * OpenBLAS on the same thread count at the GPT-2 MLP shape
 * (256 x 3072 x 768) and a 1024^3 square, and ours / the better of the two.
 * PIPIT_BENCH_DTYPE=bf16 runs the step in mixed precision
 * (pipit_options.dtype = PIPIT_BF16; bench/bf16.py sets it);
 * PIPIT_BENCH_FUSED_HEAD=1 builds the model with its fused LM head +
 * cross-entropy (the config's fused_head).
 * The last line is one JSON object with the same numbers for scripts, with
 * the thread check of the timed steps: cpu_per_wall = process CPU time / wall
 * time over them (the mean number of cores in use, at most `threads` when the
 * thread count holds) and the peak RSS (bench/peers.py prints both).
 */
#include <cblas.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_llama.h"

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float *rnd(int64_t n, uint64_t seed) {
    size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64; /* aligned_alloc: a multiple of the alignment */
    float *p = aligned_alloc(64, bytes);
    if (!p) {
        fprintf(stderr, "bench_train: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (float)((double)(seed >> 11) / 9007199254740992.0 - 0.5);
    }
    return p;
}

/* Best-of GFLOP/s of C = A @ B (row-major M x K times K x N) with OpenBLAS
 * on `threads` threads, over at least `secs` seconds. */
static double sgemm_gflops(int M, int N, int K, int threads, double secs) {
    float *A = rnd((int64_t)M * K, 1), *B = rnd((int64_t)K * N, 2), *C = rnd((int64_t)M * N, 3);
    openblas_set_num_threads(threads);
    double best = 1e30;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, A, K, B, N, 0, C, N);
    double t_end = now_s() + secs;
    for (int reps = 0; reps < 3 || now_s() < t_end; reps++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, A, K, B, N, 0, C, N);
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    free(A), free(B), free(C);
    return 2.0 * M * N * (double)K / best * 1e-9;
}

static void die(const char *what, pipit_status s) {
    fprintf(stderr, "bench_train: %s: %s: %s\n", what, pipit_status_name(s), pipit_errmsg());
    exit(1);
}

/* The model under test: GPT-2 or Llama, the calls that differ. */
typedef struct {
    int llama, nfeeds;
    pipit_gpt2_config gpt2;
    pipit_llama_config ll;
} model;

static pipit_val build(pipit_graph *g, const model *m) {
    return m->llama ? pipit_llama_build(g, &m->ll) : pipit_gpt2_build(g, &m->gpt2);
}

int main(int argc, char **argv) {
    int a[12] = {256, 64, 4, 4, 128, 8, 1, 10, 2, 0, 0, 0};
    if (argc > 1 && argc != 10 && argc != 13) {
        fprintf(stderr, "usage: bench_train [V T L H C B threads steps warmup [KV F TIED]]\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) a[i - 1] = atoi(argv[i]);
    model md = {.llama = argc == 13};
    md.gpt2 = (pipit_gpt2_config){.vocab = a[0], .max_ctx = a[1], .ctx = a[1], .layers = a[2], .heads = a[3],
                                  .dim = a[4], .batch = a[5], .stages = 1, .dtype = PIPIT_F32};
    md.ll = (pipit_llama_config){.vocab = a[0], .max_ctx = a[1], .ctx = a[1], .layers = a[2], .heads = a[3],
                                 .kv_heads = a[9], .dim = a[4], .ffn_hidden = a[10], .norm_eps = 1e-5,
                                 .rope_theta = 1e4, .tied = a[11], .batch = a[5], .stages = 1, .dtype = PIPIT_F32};
    md.nfeeds = md.llama ? 2 : 3;
    const char *fused = getenv("PIPIT_BENCH_FUSED_HEAD"); /* 1: the models' fused_head */
    if (fused && strcmp(fused, "1") == 0) md.gpt2.fused_head = md.ll.fused_head = 1;
    const pipit_gpt2_config cfg = md.gpt2; /* the sizes both kinds share */
    int threads = a[6], steps = a[7], warmup = a[8], B = cfg.batch, T = cfg.ctx;
    if (steps < 1) steps = 1;
    pipit_status s = md.llama ? pipit_llama_check(&md.ll) : pipit_gpt2_check(&cfg);
    if (s) die("config", s);

    pipit_graph *g = pipit_graph_new();
    pipit_val loss = build(g, &md);
    if ((s = pipit_graph_status(g))) die("build", s);
    const char *dt = getenv("PIPIT_BENCH_DTYPE");
    int bf16 = dt && strcmp(dt, "bf16") == 0;
    pipit_options po = {.microbatches = 1, .threads = threads, .dtype = bf16 ? PIPIT_BF16 : PIPIT_F32};
    pipit_program *p = NULL;
    if ((s = pipit_compile(g, loss, &po, &p))) die("compile", s);
    if ((s = md.llama ? pipit_llama_init(p, &md.ll, 1) : pipit_gpt2_init(p, &cfg, 1))) die("init", s);

    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B * T), *tgt = malloc(sizeof(int32_t) * (size_t)B * T),
            *pos = malloc(sizeof(int32_t) * (size_t)B * T);
    uint64_t st = 42;
    size_t nb = sizeof(int32_t) * (size_t)B * T;
    pipit_feed feeds[3] = {{PIPIT_GPT2_TOKENS, tok, nb}, {PIPIT_GPT2_TARGETS, tgt, nb}, {PIPIT_GPT2_POSITIONS, pos, nb}};
    double *ms = calloc((size_t)steps, sizeof *ms), sum = 0, mn = 1e30;
    double last_loss = 0, wall0 = 0, cpu0 = 0;
    size_t arena = 0; /* the planned activation arena (with bf16: the params' bf16 copies too) */
    struct rusage ru0, ru;
    for (int i = 0; i < warmup + steps; i++) {
        if (i == warmup) wall0 = now_s(), cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), getrusage(RUSAGE_SELF, &ru0);
        for (int k = 0; k < B * T; k++) {
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            tok[k] = (int32_t)((st >> 33) % (uint64_t)cfg.vocab);
            st = st * 6364136223846793005ULL + 1442695040888963407ULL;
            tgt[k] = (int32_t)((st >> 33) % (uint64_t)cfg.vocab);
            pos[k] = k % T;
        }
        pipit_metrics m;
        if ((s = pipit_step(p, feeds, md.nfeeds, 1, &m))) die("step", s);
        last_loss = m.loss;
        arena = m.peak_bytes;
        if (i >= warmup) {
            ms[i - warmup] = m.ms;
            sum += m.ms;
            if (m.ms < mn) mn = m.ms;
        }
    }
    double wall = now_s() - wall0, cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0, cpu_per_wall = cpu / wall;
    getrusage(RUSAGE_SELF, &ru);
    double sys_per_wall = ((double)(ru.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                           1e-6 * (double)(ru.ru_stime.tv_usec - ru0.ru_stime.tv_usec)) / wall;
    long faults = (ru.ru_minflt - ru0.ru_minflt) / steps;
    double mean = sum / steps, med = median(ms, steps);
    double tokens = (double)B * T;
    double fpt = md.llama ? pipit_llama_flops_per_token(&md.ll) : pipit_gpt2_flops_per_token(&cfg);
    long long nparams = md.llama ? pipit_llama_num_params(&md.ll) : pipit_gpt2_num_params(&cfg);
    double gf = fpt * tokens / (med / 1e3) * 1e-9;
    double ceil_mlp = sgemm_gflops(256, 3072, 768, threads, 0.5);
    double ceil_sq = sgemm_gflops(1024, 1024, 1024, threads, 0.5);
    double ceil = ceil_mlp > ceil_sq ? ceil_mlp : ceil_sq;

    printf("pipit %s V=%d T=%d L=%d H=%d C=%d B=%d threads=%d (%lld params, %.3f GFLOP/step)\n",
           md.llama ? "Llama" : "GPT-2", cfg.vocab, T, cfg.layers, cfg.heads, cfg.dim, B, threads, nparams,
           fpt * tokens * 1e-9);
    if (bf16) printf("  bf16 GEMM: %s\n", pipit_cpu_bf16_gemm());
    /* OpenBLAS picks its kernels by the CPU it knows: on a CPU newer than
     * the library, OPENBLAS_CORETYPE can pick better ones (docs/benchmarks.md 14) */
    printf("  OpenBLAS kernels: %s%s\n", openblas_get_corename(), getenv("OPENBLAS_CORETYPE") ? " (OPENBLAS_CORETYPE)" : "");
    printf("  step ms: median %.2f  min %.2f  mean %.2f  (%d steps after %d warm-up; loss %.4f)\n", med, mn,
           mean, steps, warmup, last_loss);
    printf("  %.0f tokens/s  %.2f GFLOP/s | sgemm ceiling (%d thr): 256x3072x768 %.1f, 1024^3 %.1f GFLOP/s"
           " | ours/ceiling %.3f\n",
           tokens / (med / 1e3), gf, threads, ceil_mlp, ceil_sq, gf / ceil);
    printf("{\"vocab\":%d,\"ctx\":%d,\"layers\":%d,\"heads\":%d,\"dim\":%d,\"batch\":%d,\"threads\":%d,"
           "\"steps\":%d,\"ms_median\":%.3f,\"ms_min\":%.3f,\"ms_mean\":%.3f,\"tokens_per_s\":%.1f,"
           "\"gflops\":%.3f,\"sgemm_mlp_gflops\":%.2f,\"sgemm_square_gflops\":%.2f,\"ratio_ceiling\":%.4f,"
           "\"cpu_per_wall\":%.3f,\"cpu_ms_per_step\":%.1f,\"sys_per_wall\":%.3f,\"minor_faults_per_step\":%ld,\"peak_rss_mb\":%.1f,"
           "\"dtype\":\"%s\",\"arena_mb\":%.1f,\"bf16_gemm\":\"%s\",\"blas_core\":\"%s\"}\n",
           cfg.vocab, T, cfg.layers, cfg.heads, cfg.dim, B, threads, steps, med, mn, mean,
           tokens / (med / 1e3), gf, ceil_mlp, ceil_sq, gf / ceil, cpu_per_wall, cpu * 1e3 / steps, sys_per_wall, faults, (double)ru.ru_maxrss / 1024.0,
           bf16 ? "bf16" : "f32", (double)arena / 1048576.0, pipit_cpu_bf16_gemm(), openblas_get_corename());
    free(ms), free(tok), free(tgt), free(pos);
    pipit_program_free(p);
    pipit_graph_free(g);
    return 0;
}
