/*
 * bench_zero.c — the step time of ZeRO-2 and ZeRO-3 against ZeRO-1 at
 * D = 2 (docs/benchmarks.md §19), the ranks as threads: one GPT-2 compiled
 * three times (P = 2 1F1B, D = 2, M = 4), the three programs stepped in
 * turn, so that a change of the machine's load hits all three alike; per
 * stage the minimum and the median over the steps after a warm-up. The
 * three programs keep the same bits (tests/test_zero.c): only where the
 * parameters and gradients live between steps differs (ZeRO-2: the full
 * gradient block zeroed each step and, at its end, the replica's shards
 * moved down and the other pages given back to the system; ZeRO-3: the
 * parameter block also reserved and released, and all-gathered before the
 * loop).
 * Usage: bench_zero [STEPS (default 30)] [LAYERS (4)] [DIM (256)]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pipit.h"
#include "pipit_gpt2.h"

enum { V = 256, T = 64, B = 4, M = 4, D = 2, WARM = 3 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 30, layers = argc > 2 ? atoi(argv[2]) : 4, dim = argc > 3 ? atoi(argv[3]) : 256;
    if (steps < 1 || layers < 2 || dim < 8 || dim % 4) {
        fprintf(stderr, "usage: bench_zero [STEPS >= 1] [LAYERS >= 2] [DIM, a multiple of 4]\n");
        return 2;
    }
    pipit_gpt2_config c = {.vocab = V, .max_ctx = T, .ctx = T, .layers = layers, .heads = 4, .dim = dim, .batch = B,
                           .stages = 2};
    pipit_graph *g[3];
    pipit_program *p[3];
    pipit_schedule *sch = NULL;
    if (pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, M, &sch)) return fprintf(stderr, "%s\n", pipit_errmsg()), 1;
    for (int z = 0; z < 3; z++) {
        g[z] = pipit_graph_new();
        pipit_val loss = pipit_gpt2_build(g[z], &c);
        pipit_options o = {.schedule = sch, .microbatches = M, .data_parallel = D, .zero = z + 1, .clip_norm = 1.0};
        if (pipit_compile(g[z], loss, &o, &p[z]) || pipit_gpt2_init(p[z], &c, 1))
            return fprintf(stderr, "ZeRO-%d: %s\n", z + 1, pipit_errmsg()), 1;
    }
    int32_t *buf = malloc(sizeof(int32_t) * 3 * B * T * M * D);
    pipit_feed feeds[3 * M * D];
    size_t nb = sizeof(int32_t) * B * T;
    for (int m = 0; m < M * D; m++) {
        int32_t *tok = buf + (size_t)m * 3 * B * T, *tgt = tok + B * T, *pos = tgt + B * T;
        for (int i = 0; i < B * T; i++) tok[i] = (m * 17 + i * 7) % V, tgt[i] = (tok[i] * 3 + 1) % V, pos[i] = i % T;
        feeds[3 * m] = (pipit_feed){PIPIT_GPT2_TOKENS, tok, nb};
        feeds[3 * m + 1] = (pipit_feed){PIPIT_GPT2_TARGETS, tgt, nb};
        feeds[3 * m + 2] = (pipit_feed){PIPIT_GPT2_POSITIONS, pos, nb};
    }
    double *t[3];
    for (int z = 0; z < 3; z++) t[z] = malloc(sizeof(double) * (size_t)steps);
    for (int s = 0; s < WARM + steps; s++)
        for (int z = 0; z < 3; z++) {
            pipit_metrics met;
            double t0 = now();
            if (pipit_step(p[z], feeds, 3, 1, &met)) return fprintf(stderr, "ZeRO-%d: %s\n", z + 1, pipit_errmsg()), 1;
            if (s >= WARM) t[z][s - WARM] = (now() - t0) * 1e3;
        }
    printf("GPT-2 L %d C %d V %d ctx %d B %d, P 2 (1F1B) x D 2 threads, M %d; %d steps each, interleaved\n", layers,
           dim, V, T, B, M, steps);
    for (int z = 0; z < 3; z++) {
        qsort(t[z], (size_t)steps, sizeof(double), cmp_d);
        printf("ZeRO-%d: min %.2f ms, median %.2f ms\n", z + 1, t[z][0], t[z][steps / 2]);
    }
    for (int z = 0; z < 3; z++) {
        free(t[z]);
        pipit_program_free(p[z]);
        pipit_graph_free(g[z]);
    }
    pipit_schedule_free(sch);
    free(buf);
    return 0;
}
