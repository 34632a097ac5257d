/*
 * bench_partition.c — automatic stage balancing against the even split:
 * measured step time of GPT-2 cut by pipit_partition vs cut evenly by
 * layers (pipit_gpt2_build's yields), at P = 2 and P = 4 pipeline ranks
 * (threads, 1F1B, one compute thread per rank).
 *
 * Usage: bench_partition [V T L H C B M steps warmup [P]]   (P: 2 or 4 alone; default both)
 *        (default 8192 64 4 4 128 8 8 9 2: the `tiny` preset with an 8192-token
 *        vocabulary, so the tied head's logits GEMM and cross-entropy make the
 *        last stage of the even split the slowest)
 *
 * Per P, three programs of the same model and data: even (the builder's
 * split), auto-model (pipit_partition, modelled costs at the default
 * rates) and auto-measured (costs scaled by a profile of one sequential
 * step). Their steps are interleaved (even, model, measured, even, ...) so
 * load on a shared machine hits all three alike; each column is the median
 * step time (pipit_metrics.ms) over the timed steps. "pred" is the gain
 * the cost model predicts (the schedule simulated with each partition's
 * per-stage costs, pipit_partition_simulate: even / auto), "gain" the
 * measured one (even ms / auto ms). The second line
 * is the median over steps of the busiest rank's compute time
 * (pipit_rank_step.busy: its tasks minus receive waits, plus the
 * post-loop), the step's lower bound once every rank has a core of its
 * own. Every step's loss is checked bit for bit against the even split's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_partition.h"
#include "bench_stats.h"

enum { NPROG = 3, MAXSTEPS = 256 };

static pipit_gpt2_config cfg;
static int M = 8;

static void die(const char *what) {
    fprintf(stderr, "bench_partition: %s: %s\n", what, pipit_errmsg());
    exit(1);
}

static void feeds_for(int step, int32_t *buf, pipit_feed *f) {
    int n = cfg.batch * cfg.ctx;
    for (int m = 0; m < M; m++) {
        int32_t *tok = buf + (size_t)m * 3 * n, *tgt = tok + n, *pos = tgt + n;
        for (int i = 0; i < n; i++) {
            tok[i] = (int32_t)(((uint32_t)(step * 7919 + m * 104729 + i * 31337) * 2654435761u >> 7) % (uint32_t)cfg.vocab);
            tgt[i] = (tok[i] * 5 + 11) % cfg.vocab;
        }
        pipit_gpt2_feeds(&cfg, tok, tgt, pos, f + 3 * m);
    }
}

static pipit_program *compile(pipit_graph *g, pipit_val loss, pipit_schedule *sch) {
    pipit_options o = {.schedule = sch, .microbatches = M, .optimizer = pipit_adamw(1e-3, 0.9, 0.95, 1e-8, 0.1)};
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &o, &p)) die("compile");
    if (pipit_gpt2_init(p, &cfg, 1)) die("init");
    return p;
}

/* One sequential profiled step of the yield-free model. */
static pipit_program *profiled(pipit_graph **g, int32_t *buf, pipit_feed *f) {
    pipit_gpt2_config c1 = cfg;
    c1.stages = 1;
    *g = pipit_graph_new();
    pipit_program *p = compile(*g, pipit_gpt2_build(*g, &c1), NULL);
    feeds_for(0, buf, f);
    if (pipit_step(p, f, 3, 0, NULL) || pipit_program_set_profile(p, 1) || pipit_step(p, f, 3, 0, NULL)) die("profile");
    return p;
}

/* The partition of a GPT-2 graph built for `stages` (its yields are the
 * only cuts when hints != 0), with costs scaled by prof (NULL: modelled);
 * returns its simulated step time under sch and, unless hints, applies it. */
static double cut(int stages, int hints, const pipit_schedule *sch, const pipit_program *prof, pipit_graph *g,
                  pipit_val *loss) {
    pipit_gpt2_config c = cfg;
    c.stages = stages;
    *loss = pipit_gpt2_build(g, &c);
    pipit_partition_options po = {.schedule = sch, .profile = prof,
                                  .yields = hints ? PIPIT_PARTITION_YIELDS_AS_CUTS : PIPIT_PARTITION_REPLACE_YIELDS};
    pipit_partition_result *pt = NULL;
    if (pipit_partition(g, *loss, &po, &pt)) die("partition");
    double w = 0;
    if (pipit_partition_simulate(pt, sch, &w)) die("simulate");
    if (!hints && pipit_partition_apply(pt, g, loss, 1)) die("apply");
    pipit_partition_free(pt);
    return w;
}

/* The even split's simulated step time under prof's scale. */
static double even_worst(int P, const pipit_schedule *sch, const pipit_program *prof) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss;
    double w = cut(P, 1, sch, prof, g, &loss);
    pipit_graph_free(g);
    return w;
}

static void bench_p(int P, int steps, int warmup, int32_t *buf, pipit_feed *f) {
    pipit_schedule *sch = NULL;
    if (pipit_schedule_build(PIPIT_SCHED_1F1B, P, 1, M, &sch)) die("schedule");
    pipit_graph *pg;
    pipit_program *prof = profiled(&pg, buf, f);
    pipit_graph *g[NPROG];
    pipit_val loss[NPROG];
    g[0] = pipit_graph_new();
    pipit_gpt2_config ce = cfg;
    ce.stages = P;
    loss[0] = pipit_gpt2_build(g[0], &ce); /* even: the builder's yields as they are */
    double pred[NPROG] = {1, 0, 0};
    for (int k = 1; k < NPROG; k++) {
        const pipit_program *pk = k == 2 ? prof : NULL;
        g[k] = pipit_graph_new();
        pred[k] = even_worst(P, sch, pk) / cut(1, 0, sch, pk, g[k], &loss[k]);
    }
    pipit_program *p[NPROG];
    for (int k = 0; k < NPROG; k++) p[k] = compile(g[k], loss[k], sch);
    double ms[NPROG][MAXSTEPS], busy[NPROG][MAXSTEPS];
    int same = 1;
    for (int step = 0; step < warmup + steps; step++) {
        feeds_for(step, buf, f);
        double l0 = 0;
        for (int k = 0; k < NPROG; k++) {
            pipit_metrics met;
            if (pipit_step(p[k], f, 3, 1, &met)) die("step");
            if (k == 0) l0 = met.loss;
            else same &= memcmp(&l0, &met.loss, sizeof l0) == 0;
            if (step < warmup) continue;
            ms[k][step - warmup] = met.ms;
            busy[k][step - warmup] = 0;
            for (int r = 0; r < P; r++) {
                pipit_rank_step rs;
                if (pipit_program_last_step(p[k], r, &rs)) die("last step");
                if (1e3 * rs.busy > busy[k][step - warmup]) busy[k][step - warmup] = 1e3 * rs.busy;
            }
        }
    }
    double med[NPROG], bmed[NPROG];
    for (int k = 0; k < NPROG; k++) med[k] = bench_median(ms[k], steps), bmed[k] = bench_median(busy[k], steps);
    printf("P=%d  even %7.1f ms | auto-model %7.1f ms  gain %.3fx (pred %.3fx) | auto-measured %7.1f ms  gain %.3fx "
           "(pred %.3fx) | losses %s\n",
           P, med[0], med[1], med[0] / med[1], pred[1], med[2], med[0] / med[2], pred[2],
           same ? "bitwise equal" : "DIFFER");
    printf("     busiest rank's compute: even %7.1f ms | auto-model %7.1f ms (%.3fx) | auto-measured %7.1f ms (%.3fx)\n",
           bmed[0], bmed[1], bmed[0] / bmed[1], bmed[2], bmed[0] / bmed[2]);
    fflush(stdout);
    for (int k = 0; k < NPROG; k++) {
        pipit_program_free(p[k]);
        pipit_graph_free(g[k]);
    }
    pipit_program_free(prof);
    pipit_graph_free(pg);
    pipit_schedule_free(sch);
    if (!same) exit(1);
}

int main(int argc, char **argv) {
    int a[10] = {8192, 64, 4, 4, 128, 8, 8, 9, 2, 0};
    if (argc != 1 && argc != 10 && argc != 11) {
        fprintf(stderr, "usage: bench_partition [V T L H C B M steps warmup [P]]\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) a[i - 1] = atoi(argv[i]);
    cfg = (pipit_gpt2_config){a[0], a[1], a[1], a[2], a[3], a[4], a[5], 1, PIPIT_F32, 0};
    M = a[6];
    int steps = a[7], warmup = a[8];
    if (pipit_gpt2_check(&cfg) || M < 4 || steps < 1 || steps > MAXSTEPS || warmup < 0 || cfg.layers < 4) {
        fprintf(stderr, "bench_partition: bad sizes (need L >= 4, M >= 4, 1 <= steps <= %d): %s\n", MAXSTEPS, pipit_errmsg());
        return 2;
    }
    int32_t *buf = malloc(sizeof(int32_t) * 3 * (size_t)cfg.batch * cfg.ctx * M);
    pipit_feed *f = malloc(sizeof(pipit_feed) * 3 * (size_t)M);
    if (!buf || !f) return 1;
    printf("GPT-2 V=%d T=%d L=%d H=%d C=%d B=%d, M=%d, 1F1B, 1 thread per rank; median of %d steps after %d warm-up\n",
           cfg.vocab, cfg.ctx, cfg.layers, cfg.heads, cfg.dim, cfg.batch, M, steps, warmup);
    for (int P = 2; P <= 4; P += 2)
        if (!a[9] || a[9] == P) bench_p(P, steps, warmup, buf, f);
    free(buf);
    free(f);
    return 0;
}
