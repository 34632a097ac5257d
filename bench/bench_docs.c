/*
 * bench_docs.c — packed documents: the step (forward + backward) of one
 * causal attention layer over a sequence of T tokens, as plain attention
 * (pipit_attention) and as attention_doc (pipit_attention_docs) with the
 * sequence cut into 1, 4, 16 and 64 equal documents. The CPU kernels run
 * each document as its own problem, so the work falls from T^2 to
 * T^2 / n_docs; this measures how much of that reaches the step.
 *
 *   bench_docs [T [C [H [threads]]]]     (default 2048 512 8 1)
 *
 * Prints per case the minimum over 5 steps (after one warm-up) in ms.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pipit.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void die(const char *what) {
    fprintf(stderr, "bench_docs: %s: %s\n", what, pipit_errmsg());
    exit(1);
}

/* ms of the best of 5 steps; ndocs 0: plain pipit_attention. */
static double run(int T, int C, int H, int threads, int ndocs) {
    pipit_graph *g = pipit_graph_new();
    pipit_val qkv = pipit_param(g, "qkv", PIPIT_F32, 3, (int64_t[]){1, T, 3 * C});
    pipit_val doc = {0};
    if (ndocs) doc = pipit_input(g, "doc", PIPIT_I32, 2, (int64_t[]){1, T});
    pipit_val y = ndocs ? pipit_attention_docs(g, qkv, doc, &(pipit_attention_opts){H, H, 1, 0})
                        : pipit_attention(g, qkv, H);
    pipit_val r = pipit_input(g, "R", PIPIT_F32, 3, (int64_t[]){1, T, C});
    pipit_program *p = NULL;
    if (pipit_compile(g, pipit_sum(g, pipit_mul(g, y, r)), &(pipit_options){.microbatches = 1, .threads = threads},
                      &p))
        die("compile");
    float *x = malloc(sizeof(float) * (size_t)T * 3 * C), *rv = malloc(sizeof(float) * (size_t)T * C);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T);
    if (!x || !rv || !ids) die("out of memory");
    for (long i = 0; i < (long)T * 3 * C; i++) x[i] = (float)sin(0.001 * (double)i);
    for (long i = 0; i < (long)T * C; i++) rv[i] = (float)cos(0.003 * (double)i);
    for (int t = 0; t < T; t++) ids[t] = ndocs ? (int32_t)((long)t * ndocs / T) : 0;
    if (pipit_program_set_param(p, "qkv", x, sizeof(float) * (size_t)T * 3 * C)) die("set_param");
    pipit_feed f[2] = {{"R", rv, sizeof(float) * (size_t)T * C}, {"doc", ids, sizeof(int32_t) * (size_t)T}};
    double best = 1e30;
    for (int i = 0; i < 6; i++) {
        double t0 = now_ms();
        pipit_metrics m;
        if (pipit_step(p, f, ndocs ? 2 : 1, 0, &m)) die("step");
        double dt = now_ms() - t0;
        if (i > 0 && dt < best) best = dt;
    }
    pipit_program_free(p);
    pipit_graph_free(g);
    free(x);
    free(rv);
    free(ids);
    return best;
}

int main(int argc, char **argv) {
    int T = argc > 1 ? atoi(argv[1]) : 2048, C = argc > 2 ? atoi(argv[2]) : 512;
    int H = argc > 3 ? atoi(argv[3]) : 8, threads = argc > 4 ? atoi(argv[4]) : 1;
    if (T < 64 || C < 1 || H < 1 || C % H || threads < 1) {
        fprintf(stderr, "usage: bench_docs [T >= 64 [C [H [threads]]]]\n");
        return 2;
    }
    printf("causal attention step (fwd + bwd), T %d, C %d, H %d, f32, %d thread(s)\n", T, C, H, threads);
    double base = run(T, C, H, threads, 0);
    printf("  %-28s %9.2f ms\n", "pipit_attention", base);
    const int nd[] = {1, 4, 16, 64};
    for (int i = 0; i < 4; i++) {
        double ms = run(T, C, H, threads, nd[i]);
        char name[64];
        snprintf(name, sizeof name, "attention_docs, %d doc%s", nd[i], nd[i] > 1 ? "s" : "");
        printf("  %-28s %9.2f ms  (%.2fx)\n", name, ms, base / ms);
    }
    return 0;
}
