/*
 * bench_pipeline.c — measured vs simulated pipeline bubble, and runtime
 * overhead, for every built-in schedule on a small GPT-2.
 *
 * Usage: bench_pipeline [steps warmup]   (default 7 timed steps, 2 warm-up)
 *
 * Model: V=256 T=64 L=4 H=4 C=128, B=4 sequences per microbatch, split into
 * S = P*V stages, P = 2 ranks, 1 compute thread per rank (so 2 threads in
 * all, one per core on a 2-core machine). For M in {2, 8, 32} and each
 * schedule that accepts (P, V, M):
 *
 *   step ms   median over the timed steps of p->step_wall (thread start to
 *             join: the microbatch loop and the post-loop, AdamW included)
 *   post ms   the part of it after the last task of any rank ended (gradient
 *             exchange and sums, norm, AdamW); every column below is
 *             measured on the loop alone (wall = until the last task ends),
 *             which is what the simulator models
 *   seq ms    the same M microbatches on one rank, one thread, no pipeline
 *   speed     seq ms / step ms
 *   bub meas  1 - mean_r compute_r / wall, compute_r = sum over the rank's
 *             tasks of (mark interval - blocking receives that started in
 *             it); receives are timed by wrapping the transport's vtable
 *   bub sim   pipit__schedule_simulate's bubble with per-stage costs = the
 *             mean measured compute per (stage, kind) over all timed steps
 *             (F, B, W; stages with fused BW: b = BW, w = 0)
 *   diff      bub meas - bub sim, in points
 *   ovh       (wall - max_r busy_r) / wall, the definition; with
 *             waits excluded from busy it includes the busiest rank's idle
 *             time, so it is an upper bound on runtime overhead
 *   ovh rt    (wall - max_r (compute_r + receive waits_r)) / wall: time the
 *             most active rank spends neither computing nor waiting for a
 *             message (thread start/join, sends, marks, gaps)
 *   sim ms    the simulated makespan; vs sim = (wall - sim) / wall
 * Every ratio is a median over the timed steps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "runtime/program.h"
#include "schedule/schedule.h"
#include "runtime/transport.h"
#include "util/common.h"

enum { P = 2, MAXRECV = 1 << 14 };

/* Receive timing: the transport's vtable is wrapped so each blocking recv
 * is logged per rank (start, duration, seconds from step start); reset (run
 * at the start of every step) clears the logs. A task's compute time is its
 * mark interval minus the receives that started inside it. */
static const pipit__transport_i *orig_vt;
static pipit__transport_i wrap_vt;
static pipit_program *cur_prog;
static double recv_t[P][MAXRECV], recv_d[P][MAXRECV];
static int nrecv[P];

static pipit_status wrap_recv(pipit__transport *t, int dst, int src, uint64_t tag, void *data, size_t n) {
    double t0 = pipit__now();
    pipit_status s = orig_vt->recv(t, dst, src, tag, data, n);
    double t1 = pipit__now();
    if (dst >= 0 && dst < P && nrecv[dst] < MAXRECV) {
        recv_t[dst][nrecv[dst]] = t0 - cur_prog->step_t0;
        recv_d[dst][nrecv[dst]++] = t1 - t0;
    }
    return s;
}
static void wrap_reset(pipit__transport *t) {
    memset(nrecv, 0, sizeof nrecv);
    orig_vt->reset(t);
}
static void wrap_transport(pipit_program *p) {
    cur_prog = p;
    orig_vt = p->transport->vt;
    wrap_vt = *orig_vt;
    wrap_vt.recv = wrap_recv;
    wrap_vt.reset = wrap_reset;
    p->transport->vt = &wrap_vt;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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
        f.feeds[3 * m + 0] = (pipit_feed){PIPIT_GPT2_TOKENS, f.tok + o};
        f.feeds[3 * m + 1] = (pipit_feed){PIPIT_GPT2_TARGETS, f.tgt + o};
        f.feeds[3 * m + 2] = (pipit_feed){PIPIT_GPT2_POSITIONS, f.pos + o};
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
        if (i >= warmup) w[i - warmup] = p->step_wall * 1e3;
    }
    double r = median(w, steps);
    free(w);
    free_feeds(&f);
    pipit_program_free(p);
    pipit_graph_free(g);
    return r;
}

/* Runs one (schedule, V, M) case and prints its row. Returns 0 if the
 * schedule rejected (P, V, M). */
static int run_case(pipit_schedule_kind kind, int V, int M, int steps, int warmup, double seq) {
    pipit_schedule *sch = NULL;
    if (pipit_schedule_build(kind, P, V, M, &sch)) {
        printf("%-17s %2d %3d  (rejected: %s)\n", pipit_schedule_kind_name(kind), V, M, pipit_errmsg());
        return 0;
    }
    int S = sch->S;
    pipit_gpt2_config c = model(S);
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_options po = {.schedule = sch, .microbatches = M, .threads = 1};
    pipit_program *p = NULL;
    if (pipit_graph_status(g) || pipit_compile(g, loss, &po, &p) || pipit_gpt2_init(p, &c, 1)) fail("compile");
    if (p->plan.nranks != P) fail("unexpected rank count");
    wrap_transport(p);
    feedset f = make_feeds(M, c.batch, c.ctx, c.vocab);

    /* compute-time sums per (stage, kind), pooled over timed steps */
    double *csum = calloc((size_t)S * 4, sizeof *csum);
    int *cnt = calloc((size_t)S * 4, sizeof *cnt);
    double *wall = calloc((size_t)steps, sizeof *wall), *bmark = calloc((size_t)steps, sizeof *bmark),
           *bcomp = calloc((size_t)steps, sizeof *bcomp), *ovh = calloc((size_t)steps, sizeof *ovh),
           *ovrt = calloc((size_t)steps, sizeof *ovrt), *post = calloc((size_t)steps, sizeof *post),
           *loopw = calloc((size_t)steps, sizeof *loopw);
    for (int it = 0; it < warmup + steps; it++) {
        if (pipit_step(p, f.feeds, 3, 1, NULL)) fail("step");
        if (it < warmup) continue;
        int k = it - warmup;
        double wl = 0, sum_mark = 0, sum_comp = 0, mx = 0, mx_active = 0;
        for (int r = 0; r < P; r++) /* the loop's wall: until the last task ends */
            for (int i = 0; i < p->plan.ranks[r].ntasks; i++) wl = PIPIT_MAX(wl, p->rs[r].t_end[i]);
        for (int r = 0; r < P; r++) {
            const pipit__rank_plan *rp = &p->plan.ranks[r];
            const pipit__rank_state *rst = &p->rs[r];
            double active = 0, busy = 0; /* compute + blocking receives; compute */
            for (int j = 0; j < nrecv[r]; j++)
                if (recv_t[r][j] < wl) active += recv_d[r][j];
            for (int i = 0; i < rp->ntasks; i++) {
                double t0 = rst->t_start[i], t1 = rst->t_end[i], w = 0;
                for (int j = 0; j < nrecv[r]; j++)
                    if (recv_t[r][j] >= t0 && recv_t[r][j] < t1) w += recv_d[r][j];
                int key = rp->tasks[i].stage * 4 + rp->tasks[i].kind;
                csum[key] += t1 - t0 - w;
                cnt[key]++;
                sum_comp += t1 - t0 - w;
                active += t1 - t0 - w;
                busy += t1 - t0 - w;
            }
            sum_mark += busy;
            if (busy > mx) mx = busy;
            if (active > mx_active) mx_active = active;
        }
        wall[k] = p->step_wall * 1e3;
        loopw[k] = wl * 1e3;
        post[k] = (p->step_wall - wl) * 1e3;
        bmark[k] = 1.0 - sum_mark / P / wl;
        bcomp[k] = 1.0 - sum_comp / P / wl;
        ovh[k] = (wl - mx) / wl;
        ovrt[k] = (wl - mx_active) / wl;
    }
    /* simulator costs: mean compute time per (stage, kind); BW-only stages
     * get b = BW, w = 0 */
    double *fc = calloc((size_t)S, sizeof(double)), *bc = calloc((size_t)S, sizeof(double)),
           *wc = calloc((size_t)S, sizeof(double));
    for (int st = 0; st < S; st++) {
        double mean[4];
        for (int kd = 0; kd < 4; kd++) mean[kd] = cnt[st * 4 + kd] ? csum[st * 4 + kd] / cnt[st * 4 + kd] : 0;
        int split = cnt[st * 4 + PIPIT_TASK_B] > 0;
        fc[st] = mean[PIPIT_TASK_F];
        bc[st] = split ? mean[PIPIT_TASK_B] : mean[PIPIT_TASK_BW];
        wc[st] = split ? mean[PIPIT_TASK_W] : 0;
    }
    pipit__sim_costs cm = {.f = fc, .b = bc, .w = wc};
    pipit__sim_result rm = {0};
    if (pipit__schedule_simulate(sch, &cm, &rm)) fail("simulate");
    double wmed = median(wall, steps);
    double sim_ms = rm.step_time * 1e3;
    double lmed = median(loopw, steps);
    printf("%-17s %2d %3d %2d | %8.2f %6.2f %8.2f %5.2fx | %7.1f%% %7.1f%% %+6.1f | %6.1f%% %6.2f%% | %8.2f "
           "%+6.1f%%\n",
           pipit_schedule_kind_name(kind), V, M, S, wmed, median(post, steps), seq, seq / wmed,
           100 * median(bcomp, steps), 100 * rm.bubble, 100 * (median(bcomp, steps) - rm.bubble),
           100 * median(ovh, steps), 100 * median(ovrt, steps), sim_ms, 100 * (lmed - sim_ms) / lmed);
    fflush(stdout);
    p->transport->vt = orig_vt;
    pipit__sim_result_free(&rm);
    free(fc), free(bc), free(wc);
    free(csum), free(cnt), free(wall), free(bmark), free(bcomp), free(ovh), free(ovrt), free(post), free(loopw);
    free_feeds(&f);
    pipit_program_free(p);
    pipit_graph_free(g);
    pipit_schedule_free(sch);
    return 1;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 7, warmup = argc > 2 ? atoi(argv[2]) : 2;
    if (steps < 1) steps = 1;
    static const struct {
        pipit_schedule_kind kind;
        int V;
    } cases[] = {
        {PIPIT_SCHED_GPIPE, 1},           {PIPIT_SCHED_1F1B, 1},  {PIPIT_SCHED_EAGER_1F1B, 1},
        {PIPIT_SCHED_INTERLEAVED_1F1B, 2}, {PIPIT_SCHED_INTERLEAVED_GPIPE, 2},
        {PIPIT_SCHED_ZB_H1, 1},           {PIPIT_SCHED_DUALPIPEV, 2},
    };
    static const int Ms[] = {2, 8, 32};
    printf("GPT-2 V=256 T=64 L=4 H=4 C=128, B=4 per microbatch; P=%d ranks x 1 thread; median of %d steps"
           " after %d warm-up\n",
           P, steps, warmup);
    printf("%-17s %2s %3s %2s | %8s %6s %8s %6s | %8s %8s %6s | %7s %7s | %8s %7s\n", "schedule", "V", "M",
           "S", "step ms", "post", "seq ms", "speed", "bub meas", "bub sim", "diff", "ovh", "ovh rt", "sim ms",
           "vs sim");
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
        double seq = seq_ms(Ms[mi], steps, warmup);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            run_case(cases[i].kind, cases[i].V, Ms[mi], steps, warmup, seq);
    }
    printf("(step: the whole step, post: its post-loop part (gradient exchange, norm, AdamW); the rest\n"
           " is on the loop alone, wall = until the last task ends: bub meas: 1 - mean over ranks of\n"
           " compute/wall, compute = task intervals minus blocking receives; bub sim: simulator with the\n"
           " mean measured compute per (stage, kind); diff = meas - sim in points; ovh: (wall - busiest\n"
           " rank's compute) / wall (includes that rank's idle waits); ovh rt: (wall - max over ranks of\n"
           " compute + blocking-receive time) / wall, i.e. neither computing nor waiting for data;\n"
           " vs sim: (wall - simulated makespan) / wall;\n"
           " speed: seq / step, 1 rank x 1 thread vs 2 ranks x 1 thread; all medians over steps)\n");
    return 0;
}
