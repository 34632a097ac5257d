/*
 * bench_pipeline.c — measured vs simulated pipeline bubble, and runtime
 * overhead, for every built-in schedule on a small GPT-2.
 *
 * Usage: bench_pipeline [steps warmup [schedule]]   (default 7 timed steps, 2 warm-up, every schedule)
 *
 * Model: V=256 T=64 L=4 H=4 C=128, B=4 sequences per microbatch, split into
 * S = P*V stages, P = 2 ranks, 1 compute thread per rank (so 2 threads in
 * all, one per core on a 2-core machine). For M in {2, 8, 32} and each
 * schedule that accepts (P, V, M):
 *
 *   step ms   median over the timed steps of pipit_program_step_wall (thread start to
 *             join: the microbatch loop and the post-loop, AdamW included)
 *   post ms   the part of it after the last task of any rank ended (gradient
 *             exchange and sums, norm, AdamW); every column below is
 *             measured on the loop alone (wall = until the last task ends),
 *             which is what the simulator models
 *   seq ms    the same M microbatches on one rank, one thread, no pipeline
 *   speed     seq ms / step ms
 *   bound     the bubble bound (M*V + P - 1) / (M*V) at the machine's two-core
 *             rate: seq2 ms = the sequential program stepped on both cores at
 *             once (two copies), so bound = seq / (seq2 / P x that factor);
 *             of bd = speed / bound (what the pipeline itself delivers)
 *   bub meas  1 - mean_r compute_r / wall, compute_r = sum over the rank's
 *             tasks of their intervals minus the rank's blocking receives
 *             (pipit_program_last_step: recv_wait; every receive of the
 *             loop happens inside a task)
 *   bub sim   pipit_schedule_simulate's bubble with per-stage costs = the
 *             shortest measured interval per (stage, kind) over all timed
 *             steps, i.e. an instance that did not wait (F, B, W; stages
 *             with fused BW: b = BW, w = 0)
 *   diff      bub meas - bub sim, in points
 *   ovh       (wall - max_r busy_r) / wall, the definition; with
 *             waits excluded from busy it includes the busiest rank's idle
 *             time, so it is an upper bound on runtime overhead
 *   ovh rt    (wall - max_r (compute_r + receive waits_r)) / wall, i.e. the
 *             time the most active rank spends outside its tasks (thread
 *             start, gaps between tasks)
 *   sim ms    the simulated makespan; vs sim = (wall - sim) / wall
 * Every ratio is a median over the timed steps.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_inspect.h"
#include "bench_stats.h"

enum { P = 2 };

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

typedef struct {
    int32_t *tok, *tgt, *pos;
    pipit_feed *feeds;
    int M;
} feedset;

static feedset make_feeds(int M, int B, int T, int V) {
    feedset f = {.M = M};
    size_t n = (size_t)M * B * T;
    f.tok = malloc(n * sizeof(int32_t)), f.tgt = malloc(n * sizeof(int32_t)), f.pos = malloc(n * sizeof(int32_t));
    f.feeds = malloc((size_t)M * 3 * sizeof *f.feeds);
    uint64_t st = 7;
    for (size_t k = 0; k < n; k++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        f.tok[k] = (int32_t)((st >> 33) % (uint64_t)V);
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        f.tgt[k] = (int32_t)((st >> 33) % (uint64_t)V);
        f.pos[k] = (int32_t)(k % (size_t)T);
    }
    for (int m = 0; m < M; m++) {
        size_t o = (size_t)m * B * T;
        size_t nb = (size_t)B * T * sizeof(int32_t);
        f.feeds[3 * m + 0] = (pipit_feed){PIPIT_GPT2_TOKENS, f.tok + o, nb};
        f.feeds[3 * m + 1] = (pipit_feed){PIPIT_GPT2_TARGETS, f.tgt + o, nb};
        f.feeds[3 * m + 2] = (pipit_feed){PIPIT_GPT2_POSITIONS, f.pos + o, nb};
    }
    return f;
}
static void free_feeds(feedset *f) { free(f->tok), free(f->tgt), free(f->pos), free(f->feeds); }

static pipit_gpt2_config model(int S) {
    return (pipit_gpt2_config){.vocab = 256, .max_ctx = 64, .ctx = 64, .layers = 4, .heads = 4, .dim = 128,
                               .batch = 4, .stages = S, .dtype = PIPIT_F32};
}

static int fail(const char *what) {
    fprintf(stderr, "bench_pipeline: %s: %s\n", what, pipit_errmsg());
    exit(1);
}

/* Sequential baseline: one rank, one thread, M microbatches. */
static double seq_ms(int M, int steps, int warmup) {
    pipit_gpt2_config c = model(1);
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_options po = {.microbatches = M, .threads = 1};
    pipit_program *p = NULL;
    if (pipit_graph_status(g) || pipit_compile(g, loss, &po, &p) || pipit_gpt2_init(p, &c, 1)) fail("seq");
    feedset f = make_feeds(M, c.batch, c.ctx, c.vocab);
    double *w = calloc((size_t)steps, sizeof *w);
    for (int i = 0; i < warmup + steps; i++) {
        if (pipit_step(p, f.feeds, 3, 1, NULL)) fail("seq step");
        if (i >= warmup) w[i - warmup] = pipit_program_step_wall(p) * 1e3;
    }
    double r = bench_median(w, steps);
    free(w);
    free_feeds(&f);
    pipit_program_free(p);
    pipit_graph_free(g);
    return r;
}

/* The same sequential program stepped on both cores at once (two copies,
 * one thread each): what one core delivers while the other also computes.
 * A P = 2 pipeline can do no better than this per rank, so the machine's
 * own loss (shared caches, memory bandwidth, a vCPU's sibling, clock) is
 * told apart from the pipeline's: bound = the bubble bound at this rate. */
typedef struct {
    pipit_program *p;
    feedset *f;
    int steps, warmup;
    double *w;
} pair_arg;

static void *pair_worker(void *arg) {
    pair_arg *a = arg;
    for (int i = 0; i < a->warmup + a->steps; i++) {
        if (pipit_step(a->p, a->f->feeds, 3, 1, NULL)) fail("pair step");
        if (i >= a->warmup) a->w[i - a->warmup] = pipit_program_step_wall(a->p) * 1e3;
    }
    return NULL;
}

static double seq_pair_ms(int M, int steps, int warmup) {
    pipit_gpt2_config c = model(1);
    pipit_graph *g[2];
    pipit_options po = {.microbatches = M, .threads = 1};
    pipit_program *p[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        g[k] = pipit_graph_new();
        pipit_val loss = pipit_gpt2_build(g[k], &c);
        if (pipit_graph_status(g[k]) || pipit_compile(g[k], loss, &po, &p[k]) || pipit_gpt2_init(p[k], &c, 1))
            fail("pair");
    }
    feedset f = make_feeds(M, c.batch, c.ctx, c.vocab);
    pair_arg a[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        a[k] = (pair_arg){.p = p[k], .f = &f, .steps = steps, .warmup = warmup};
        a[k].w = calloc((size_t)steps, sizeof(double));
        if (!a[k].w || pthread_create(&th[k], NULL, pair_worker, &a[k])) fail("pair thread");
    }
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    for (int i = 0; i < steps; i++) a[0].w[i] = MAX(a[0].w[i], a[1].w[i]);
    double r = bench_median(a[0].w, steps);
    for (int k = 0; k < 2; k++) free(a[k].w), pipit_program_free(p[k]), pipit_graph_free(g[k]);
    free_feeds(&f);
    return r;
}

/* Runs one (schedule, V, M) case and prints its row. Returns 0 if the
 * schedule rejected (P, V, M). */
static int run_case(pipit_schedule_kind kind, int V, int M, int steps, int warmup, double seq, double seq2) {
    pipit_schedule *sch = NULL;
    if (pipit_schedule_build(kind, P, V, M, &sch)) {
        printf("%-17s %2d %3d  (rejected: %s)\n", pipit_schedule_kind_name(kind), V, M, pipit_errmsg());
        return 0;
    }
    int S = pipit_schedule_stages(sch);
    pipit_gpt2_config c = model(S);
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_options po = {.schedule = sch, .microbatches = M, .threads = 1};
    pipit_program *p = NULL;
    if (pipit_graph_status(g) || pipit_compile(g, loss, &po, &p) || pipit_gpt2_init(p, &c, 1)) fail("compile");
    if (pipit_program_num_ranks(p) != P) fail("unexpected rank count");
    feedset f = make_feeds(M, c.batch, c.ctx, c.vocab);

    /* shortest task interval per (stage, kind), over timed steps: an
     * instance that did not wait for a message is pure compute */
    double *cmin = malloc((size_t)S * 4 * sizeof *cmin);
    for (int i = 0; i < S * 4; i++) cmin[i] = -1;
    double *wall = calloc((size_t)steps, sizeof *wall), *bcomp = calloc((size_t)steps, sizeof *bcomp),
           *ovh = calloc((size_t)steps, sizeof *ovh), *ovrt = calloc((size_t)steps, sizeof *ovrt),
           *post = calloc((size_t)steps, sizeof *post), *loopw = calloc((size_t)steps, sizeof *loopw);
    for (int it = 0; it < warmup + steps; it++) {
        if (pipit_step(p, f.feeds, 3, 1, NULL)) fail("step");
        if (it < warmup) continue;
        int k = it - warmup;
        pipit_rank_step rs[P];
        for (int r = 0; r < P; r++)
            if (pipit_program_last_step(p, r, &rs[r])) fail("last step");
        double wl = 0, sum_comp = 0, mx = 0, mx_active = 0;
        for (int r = 0; r < P; r++) /* the loop's wall: until the last task ends */
            for (int i = 0; i < rs[r].ntasks; i++) wl = MAX(wl, rs[r].end[i]);
        for (int r = 0; r < P; r++) {
            double active = 0; /* sum of task intervals: compute + blocking receives */
            for (int i = 0; i < rs[r].ntasks; i++) {
                double d = rs[r].end[i] - rs[r].start[i];
                int key = rs[r].tasks[i].stage * 4 + rs[r].tasks[i].kind;
                cmin[key] = cmin[key] < 0 ? d : MIN(cmin[key], d);
                active += d;
            }
            double busy = active - rs[r].recv_wait; /* compute */
            sum_comp += busy;
            if (busy > mx) mx = busy;
            if (active > mx_active) mx_active = active;
        }
        double sw = pipit_program_step_wall(p);
        wall[k] = sw * 1e3;
        loopw[k] = wl * 1e3;
        post[k] = (sw - wl) * 1e3;
        bcomp[k] = 1.0 - sum_comp / P / wl;
        ovh[k] = (wl - mx) / wl;
        ovrt[k] = (wl - mx_active) / wl;
    }
    /* simulator costs per (stage, kind); BW-only stages get b = BW, w = 0 */
    double *fc = calloc((size_t)S, sizeof(double)), *bc = calloc((size_t)S, sizeof(double)),
           *wc = calloc((size_t)S, sizeof(double));
    for (int st = 0; st < S; st++) {
        double best[4];
        for (int kd = 0; kd < 4; kd++) best[kd] = cmin[st * 4 + kd] > 0 ? cmin[st * 4 + kd] : 0;
        int split = cmin[st * 4 + PIPIT_TASK_B] >= 0;
        fc[st] = best[PIPIT_TASK_F];
        bc[st] = split ? best[PIPIT_TASK_B] : best[PIPIT_TASK_BW];
        wc[st] = split ? best[PIPIT_TASK_W] : 0;
    }
    pipit_sim_costs cm = {.f = fc, .b = bc, .w = wc};
    pipit_sim_result *rm = NULL;
    if (pipit_schedule_simulate(sch, &cm, &rm)) fail("simulate");
    double sim_bubble = pipit_sim_result_bubble(rm);
    double wmed = bench_median(wall, steps);
    double sim_ms = pipit_sim_result_step_time(rm) * 1e3;
    double lmed = bench_median(loopw, steps);
    /* the bubble bound of P ranks on S = P*V stages, each rank at the
     * two-core rate: (M*V + P - 1) / (M*V) of seq2 / P (even stages) */
    double bound = seq / (seq2 / P * (double)(M * V + P - 1) / (M * V));
    printf("%-17s %2d %3d %2d | %8.2f %6.2f %8.2f %5.2fx %5.2fx %4.0f%% | %7.1f%% %7.1f%% %+6.1f | %6.1f%% %6.2f%% | "
           "%8.2f %+6.1f%%\n",
           pipit_schedule_kind_name(kind), V, M, S, wmed, bench_median(post, steps), seq, seq / wmed, bound,
           100 * seq / wmed / bound,
           100 * bench_median(bcomp, steps), 100 * sim_bubble, 100 * (bench_median(bcomp, steps) - sim_bubble),
           100 * bench_median(ovh, steps), 100 * bench_median(ovrt, steps), sim_ms, 100 * (lmed - sim_ms) / lmed);
    fflush(stdout);
    pipit_sim_result_free(rm);
    free(fc), free(bc), free(wc);
    free(cmin), free(wall), free(bcomp), free(ovh), free(ovrt), free(post), free(loopw);
    free_feeds(&f);
    pipit_program_free(p);
    pipit_graph_free(g);
    pipit_schedule_free(sch);
    return 1;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 7, warmup = argc > 2 ? atoi(argv[2]) : 2;
    const char *only = argc > 3 ? argv[3] : NULL; /* one schedule by name */
    if (steps < 1) steps = 1;
    static const struct {
        pipit_schedule_kind kind;
        int V;
    } cases[] = {
        {PIPIT_SCHED_GPIPE, 1},           {PIPIT_SCHED_1F1B, 1},  {PIPIT_SCHED_EAGER_1F1B, 1},
        {PIPIT_SCHED_INTERLEAVED_1F1B, 2}, {PIPIT_SCHED_INTERLEAVED_GPIPE, 2},
        {PIPIT_SCHED_ZB_H1, 1},           {PIPIT_SCHED_DUALPIPEV, 2},
        {PIPIT_SCHED_ZB_H2, 1},           {PIPIT_SCHED_ZB_V, 2},  {PIPIT_SCHED_INTERLEAVED_ZB, 2},
        {PIPIT_SCHED_V_HALF, 2},          {PIPIT_SCHED_V_MIN, 2},
    };
    static const int Ms[] = {2, 8, 32};
    printf("GPT-2 V=256 T=64 L=4 H=4 C=128, B=4 per microbatch; P=%d ranks x 1 thread; median of %d steps"
           " after %d warm-up\n",
           P, steps, warmup);
    printf("%-17s %2s %3s %2s | %8s %6s %8s %6s %6s %5s | %8s %8s %6s | %7s %7s | %8s %7s\n", "schedule", "V",
           "M", "S", "step ms", "post", "seq ms", "speed", "bound", "of bd", "bub meas", "bub sim", "diff", "ovh",
           "ovh rt", "sim ms", "vs sim");
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
        double seq = seq_ms(Ms[mi], steps, warmup), seq2 = seq_pair_ms(Ms[mi], steps, warmup);
        printf("M=%d: one rank alone %.2f ms; two copies at once %.2f ms each (%.2fx: the machine's two-core "
               "rate)\n",
               Ms[mi], seq, seq2, seq2 / seq);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            if (!only || strcmp(only, pipit_schedule_kind_name(cases[i].kind)) == 0)
                run_case(cases[i].kind, cases[i].V, Ms[mi], steps, warmup, seq, seq2);
    }
    printf("(step: the whole step, post: its post-loop part (gradient exchange, norm, AdamW); the rest\n"
           " is on the loop alone, wall = until the last task ends: bub meas: 1 - mean over ranks of\n"
           " compute/wall, compute = task intervals minus blocking receives; bub sim: simulator with the\n"
           " shortest measured task per (stage, kind); diff = meas - sim in points; ovh: (wall - busiest\n"
           " rank's compute) / wall (includes that rank's idle waits); ovh rt: (wall - max over ranks of\n"
           " compute + blocking-receive time) / wall, i.e. time outside any task;\n"
           " vs sim: (wall - simulated makespan) / wall;\n"
           " speed: seq / step, 1 rank x 1 thread vs 2 ranks x 1 thread; bound: the bubble bound of 1F1B/GPipe\n"
           " (interleaved: (MV+P-1)/(MV)) at the two-core rate, of bd = speed / bound (a zero-bubble schedule\n"
           " may pass 100%%); all medians over steps)\n");
    return 0;
}
