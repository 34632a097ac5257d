/*
 * bench_compile.c — time from nothing to a program ready for its first
 * step, as a function of depth: a narrow GPT-2 (dim 8, 1 head, ctx 8) of
 * L layers in S pipeline stages (1F1B over S ranks, 2 microbatches), with
 * the graph build, pipit_compile (autodiff, stage inference, lowering, the
 * memory plan, the ranks' memory) and pipit_gpt2_init (every param set by
 * name) timed apart. Narrow layers make the bookkeeping, not the memory,
 * the cost: a planner that is quadratic in the op count shows at once.
 *
 * Usage: bench_compile [L ...]   (default 500 1000 2000 3000)
 * Prints one line per L: seconds per phase and the growth of the total
 * against the previous L (2x the layers: ~2x for near-linear, ~4x for
 * quadratic). docs/benchmarks.md §12.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pipit.h"
#include "pipit_gpt2.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void check(pipit_status s, const char *what) {
    if (s) {
        fprintf(stderr, "bench_compile: %s: %s\n", what, pipit_errmsg());
        exit(1);
    }
}

int main(int argc, char **argv) {
    int deflt[] = {500, 1000, 2000, 3000}, n = argc > 1 ? argc - 1 : 4;
    const int S = 2, M = 2;
    double prev = 0;
    int prev_L = 0;
    printf("%8s %10s %10s %10s %10s %8s\n", "layers", "graph_s", "compile_s", "init_s", "total_s", "growth");
    for (int k = 0; k < n; k++) {
        int L = argc > 1 ? atoi(argv[k + 1]) : deflt[k];
        if (L < S) {
            fprintf(stderr, "bench_compile: layers must be >= %d (got '%s')\n", S, argv[k + 1]);
            return 1;
        }
        pipit_gpt2_config c = {.vocab = 256, .max_ctx = 8, .ctx = 8, .layers = L, .heads = 1, .dim = 8,
                               .batch = 1, .stages = S, .dtype = PIPIT_F32};
        check(pipit_gpt2_check(&c), "config");
        double t0 = now();
        pipit_graph *g = pipit_graph_new();
        if (!g) check(PIPIT_STATUS_NOMEM, "graph");
        pipit_val loss = pipit_gpt2_build(g, &c);
        check(pipit_graph_status(g), "build");
        double t1 = now();
        pipit_schedule *sch = NULL;
        check(pipit_schedule_build(PIPIT_SCHED_1F1B, S, 1, M, &sch), "schedule");
        pipit_program *p = NULL;
        check(pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = M}, &p), "compile");
        double t2 = now();
        check(pipit_gpt2_init(p, &c, 1), "init");
        double t3 = now();
        double total = t3 - t0;
        char growth[32] = "-";
        if (prev > 0) snprintf(growth, sizeof growth, "%.2fx/%.1fx", total / prev, (double)L / prev_L);
        printf("%8d %10.3f %10.3f %10.3f %10.3f %8s\n", L, t1 - t0, t2 - t1, t3 - t2, total, growth);
        fflush(stdout);
        prev = total, prev_L = L;
        pipit_program_free(p);
        pipit_schedule_free(sch);
        pipit_graph_free(g);
    }
    return 0;
}
