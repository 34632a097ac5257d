/*
 * bench_zero_memory.c — what a ZeRO stage keeps, measured (docs/benchmarks.md
 * §19): one GPT-2 (the 124M preset's shape by default, at a short context)
 * compiled at ZeRO stage Z with P = 2 (1F1B) x D = 2 replicas as threads,
 * M = 2 microbatches of 1 sequence, stepped STEPS times. Prints, after
 * compiling and after each step, the bytes the 4 world ranks hold by kind
 * (pipit_program_held_bytes, summed) and the process's resident set
 * (VmRSS), and at the end its peak resident set (VmHWM); with a JSON path,
 * writes the plan (pipit_program_write_plan_json: the planner's per-rank
 * memory at a step's peak and between steps) there. One stage per process,
 * so that each peak is its own (bench/zero_memory.sh runs 1, 2 and 3).
 * Usage: bench_zero_memory ZERO [STEPS (2)] [LAYERS (12)] [DIM (768)]
 *        [VOCAB (50257)] [CTX (128)] [PLAN.json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_inspect.h"

enum { M = 2, D = 2, B = 1 };

/* A /proc/self/status field in KiB (-1 if absent). */
static long status_kib(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') v = atol(line + n + 1);
    if (f) fclose(f);
    return v;
}

static void report(const pipit_program *p, const char *when) {
    double held[3] = {0};
    for (int w = 0; w < pipit_program_num_ranks(p); w++)
        for (int k = 0; k < 3; k++) {
            size_t b = 0;
            if (pipit_program_held_bytes(p, w, (pipit_held_kind)k, &b)) fprintf(stderr, "%s\n", pipit_errmsg()), exit(1);
            held[k] += (double)b;
        }
    printf("%-16s held (4 ranks): params %8.1f MiB, grads %8.1f MiB, moments %8.1f MiB; VmRSS %8.1f MiB\n", when,
           held[0] / 1048576, held[1] / 1048576, held[2] / 1048576, (double)status_kib("VmRSS") / 1024);
}

int main(int argc, char **argv) {
    int zero = argc > 1 ? atoi(argv[1]) : -1, steps = argc > 2 ? atoi(argv[2]) : 2;
    int layers = argc > 3 ? atoi(argv[3]) : 12, dim = argc > 4 ? atoi(argv[4]) : 768;
    int vocab = argc > 5 ? atoi(argv[5]) : 50257, ctx = argc > 6 ? atoi(argv[6]) : 128;
    const char *plan = argc > 7 ? argv[7] : NULL;
    if (zero < 0 || zero > 3 || steps < 1 || layers < 2 || dim < 8 || dim % 12 || vocab < 2 || ctx < 1) {
        fprintf(stderr, "usage: bench_zero_memory ZERO (0-3) [STEPS >= 1] [LAYERS >= 2] [DIM, a multiple of 12] "
                        "[VOCAB] [CTX] [PLAN.json]\n");
        return 2;
    }
    pipit_gpt2_config c = {.vocab = vocab, .max_ctx = ctx, .ctx = ctx, .layers = layers, .heads = 12, .dim = dim,
                           .batch = B, .stages = 2};
    pipit_schedule *sch = NULL;
    pipit_graph *g = pipit_graph_new();
    pipit_program *p = NULL;
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_options o = {.microbatches = M, .data_parallel = D, .zero = zero, .clip_norm = 1.0};
    if (pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, M, &sch) || ((o.schedule = sch), pipit_compile(g, loss, &o, &p)) ||
        pipit_gpt2_init(p, &c, 1))
        return fprintf(stderr, "ZeRO-%d: %s\n", zero, pipit_errmsg()), 1;
    if (plan) {
        FILE *f = fopen(plan, "w");
        if (!f || pipit_program_write_plan_json(f, p)) return fprintf(stderr, "%s: cannot write the plan\n", plan), 1;
        fclose(f);
    }
    printf("GPT-2 L %d C %d V %d ctx %d B %d, P 2 (1F1B) x D 2 threads, M %d, ZeRO-%d\n", layers, dim, vocab, ctx, B, M,
           zero);
    report(p, "compiled");
    int32_t *buf = malloc(sizeof(int32_t) * 3 * B * (size_t)ctx * M * D);
    pipit_feed feeds[3 * M * D];
    size_t nb = sizeof(int32_t) * B * (size_t)ctx;
    for (int m = 0; m < M * D; m++) {
        int32_t *tok = buf + (size_t)m * 3 * B * ctx, *tgt = tok + B * ctx, *pos = tgt + B * ctx;
        for (int i = 0; i < B * ctx; i++) tok[i] = (m * 17 + i * 7) % vocab, tgt[i] = (tok[i] * 3 + 1) % vocab, pos[i] = i % ctx;
        feeds[3 * m] = (pipit_feed){PIPIT_GPT2_TOKENS, tok, nb};
        feeds[3 * m + 1] = (pipit_feed){PIPIT_GPT2_TARGETS, tgt, nb};
        feeds[3 * m + 2] = (pipit_feed){PIPIT_GPT2_POSITIONS, pos, nb};
    }
    for (int s = 0; s < steps; s++) {
        pipit_metrics met;
        if (pipit_step(p, feeds, 3, 1, &met)) return fprintf(stderr, "ZeRO-%d: %s\n", zero, pipit_errmsg()), 1;
        char when[32];
        snprintf(when, sizeof when, "after step %d", s + 1);
        report(p, when);
    }
    for (int w = 0; w < pipit_program_num_ranks(p); w++) { /* w = (replica * 2 + pipeline rank) */
        size_t h[3] = {0};
        for (int k = 0; k < 3; k++) pipit_program_held_bytes(p, w, (pipit_held_kind)k, &h[k]);
        printf("world rank %d (replica %d, stage %d) between steps: params %zu, grads %zu, moments %zu bytes\n", w,
               w / 2, w % 2, h[0], h[1], h[2]);
    }
    printf("peak VmHWM %.1f MiB\n", (double)status_kib("VmHWM") / 1024);
    pipit_program_free(p);
    pipit_graph_free(g);
    pipit_schedule_free(sch);
    free(buf);
    return 0;
}
