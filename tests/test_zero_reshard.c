/*
 * test_zero_reshard.c — ZeRO-3's reshard_after_forward (runtime/zero_reshard.c):
 *   - the same bits as ZeRO-1 at the same D (losses, params, gradients,
 *     moments after 3 steps) over 1F1B, a B/W-split schedule (ZB-H1), an
 *     interleaved one, bf16 DualPipeV, T = 2, D = 3 without a schedule, and
 *     a gradient transform that reads a param (the post-loop regathers),
 *     and 2 compute threads per rank;
 *   - the windows, checked against the instruction lists independently:
 *     replaying each rank's gathers and releases, every instruction of the
 *     pre-loop and loop that reads a param finds it gathered, and nothing
 *     stays gathered past its task (between tasks no param is held);
 *   - the memory report: the params' count at the peak is the most
 *     gathered at once, below the stage's whole params;
 *   - refused without options.zero = 3, or a value other than 0 or 1.
 */
#include <stdlib.h>
#include <string.h>

#include "gpt2_feeds.h"
#include "inspect/memreport.h"
#include "pipit_gpt2.h"
#include "runtime/program.h"
#include "snapshot.h"
#include "test.h"

enum { RV = 64, RT = 8, RL = 4, RH = 2, RC = 16, RB = 2, RSTEPS = 3 };

typedef struct {
    pipit_schedule *sch;
    int stages, M, D, zero, reshard, T, transform;
    pipit_dtype dtype;
} rrun;

static int g_threads = 1; /* compute threads per rank of the next runs */

static pipit_gpt2_config rcfg(const rrun *r) {
    return (pipit_gpt2_config){.vocab = RV, .max_ctx = RT, .ctx = RT, .layers = RL, .heads = RH, .dim = RC, .batch = RB,
                               .stages = r->stages};
}

/* wte's gradient plus 0.01 wte: the post-loop reads the param */
static void transform_reads_wte(pipit_graph *g) {
    for (int32_t id = 0; id < 64; id++) {
        pipit_val v = {g, id};
        if (pipit_val_ndim(v) == 2 && pipit_val_dim(v, 0) == RV && pipit_val_dim(v, 1) == RC) {
            pipit_val gr = pipit_grad_of(g, v);
            pipit_set_grad(g, v, pipit_add(g, gr, pipit_scale(g, v, 0.01)));
            return;
        }
    }
}

static pipit_status rcompile(const rrun *r, pipit_graph **gout, pipit_program **out) {
    pipit_gpt2_config c = rcfg(r);
    pipit_graph *g = pipit_graph_new();
    if (r->T > 1) pipit_graph_set_tensor_parallel(g, r->T);
    pipit_val loss = pipit_gpt2_build(g, &c);
    if (r->transform) transform_reads_wte(g);
    pipit_options o = {.schedule = r->sch, .microbatches = r->M, .threads = g_threads, .optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1),
                       .clip_norm = 0.5, .data_parallel = r->D, .zero = r->zero, .reshard_after_forward = r->reshard,
                       .tensor_parallel = r->T, .dtype = r->dtype};
    pipit_status s = pipit_compile(g, loss, &o, out);
    if (s) {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
        pipit_graph_free(g);
        return s;
    }
    *gout = g;
    return PIPIT_STATUS_OK;
}

static pipit_status rtrain(const rrun *r, snapshot *snap) {
    pipit_graph *g = NULL;
    pipit_program *p = NULL;
    pipit_status s = rcompile(r, &g, &p);
    if (s) return s;
    pipit_gpt2_config c = rcfg(r);
    s = pipit_gpt2_init(p, &c, 7);
    int G = r->M * r->D;
    int32_t *buf = malloc(sizeof(int32_t) * 3 * RB * RT * (size_t)G);
    pipit_feed *feeds = malloc(sizeof(pipit_feed) * 3 * (size_t)G);
    for (int k = 0; k < RSTEPS && !s; k++) {
        test_gpt2_feeds(G, k, RB, RT, RV, buf, feeds);
        pipit_metrics met;
        s = pipit_step(p, feeds, 3, 1, &met);
        if (s) fprintf(stderr, "step %d: %s\n", k, pipit_errmsg());
        snap->losses[snap->nsteps++] = met.loss;
    }
    free(buf), free(feeds);
    /* the runtime built its windows (the first step) exactly when the option is in effect */
    if (!s && (p->rs[0].reshard != NULL) != (r->reshard && r->D > 1)) {
        fprintf(stderr, "the runtime's windows: built %d, expected %d\n", p->rs[0].reshard != NULL, r->reshard && r->D > 1);
        s = PIPIT_STATUS_RUNTIME;
    }
    if (!s) snap_take(p, snap);
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

static void reshard_same_as_zero1(rrun r, const char *what) {
    snapshot ref = {0}, got = {0};
    r.zero = 1, r.reshard = 0;
    ASSERT_OK(rtrain(&r, &ref));
    r.zero = 3, r.reshard = 1;
    ASSERT_OK(rtrain(&r, &got));
    char msg[160];
    snprintf(msg, sizeof msg, "ZeRO-3 reshard_after_forward vs ZeRO-1: %s", what);
    ASSERT_TRUE(snap_same_bits(&ref, &got, msg));
    snap_free(&ref), snap_free(&got);
}

PIPIT_TEST(zero3_reshard_equal_zero1) {
    static const struct {
        pipit_schedule_kind k;
        int V;
    } sch[] = {{PIPIT_SCHED_1F1B, 1}, {PIPIT_SCHED_ZB_H1, 1}, {PIPIT_SCHED_INTERLEAVED_1F1B, 2}};
    for (size_t i = 0; i < sizeof sch / sizeof sch[0]; i++) {
        pipit_schedule *s = NULL;
        ASSERT_OK(pipit_schedule_build(sch[i].k, 2, sch[i].V, 4, &s));
        reshard_same_as_zero1((rrun){s, 2 * sch[i].V, 4, 2, 0, 0, 1, 0, PIPIT_F32}, pipit_schedule_kind_name(sch[i].k));
        pipit_schedule_free(s);
    }
    reshard_same_as_zero1((rrun){NULL, 1, 2, 3, 0, 0, 1, 0, PIPIT_F32}, "P=1 D=3");
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_DUALPIPEV, 2, 2, 4, &s));
    reshard_same_as_zero1((rrun){s, 4, 4, 2, 0, 0, 1, 0, PIPIT_BF16}, "bf16 dualpipev P=2 V=2 D=2");
    pipit_schedule_free(s);
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &s));
    reshard_same_as_zero1((rrun){s, 2, 2, 2, 0, 0, 2, 0, PIPIT_F32}, "1f1b P=2 T=2 D=2");
    reshard_same_as_zero1((rrun){s, 2, 2, 2, 0, 0, 1, 1, PIPIT_F32}, "1f1b P=2 D=2, a transform reading wte");
    /* 2 threads per rank: thread 0 gathers (the others wait) and releases (the others run on) */
    g_threads = 2;
    reshard_same_as_zero1((rrun){s, 2, 2, 2, 0, 0, 1, 0, PIPIT_F32}, "1f1b P=2 D=2, 2 threads per rank");
    g_threads = 1;
    pipit_schedule_free(s);
}

/* Whether instruction `in` reads or writes param q. */
static int touches(const pipit__instr *in, int q) {
    if (in->out.kind == LOC_PARAM && in->out.idx == q) return 1;
    for (int j = 0; j < PIPIT_MAX_IN; j++)
        if (in->in[j].kind == LOC_PARAM && in->in[j].idx == q) return 1;
    return 0;
}

PIPIT_TEST(zero3_reshard_windows) {
    static const struct {
        pipit_schedule_kind k;
        int V;
    } sch[] = {{PIPIT_SCHED_1F1B, 1}, {PIPIT_SCHED_ZB_H1, 1}, {PIPIT_SCHED_ZB_V, 2}};
    for (size_t c = 0; c < sizeof sch / sizeof sch[0]; c++) {
        pipit_schedule *s = NULL;
        ASSERT_OK(pipit_schedule_build(sch[c].k, 2, sch[c].V, 4, &s));
        rrun r = {s, 2 * sch[c].V, 4, 2, 3, 1, 1, 0, PIPIT_F32};
        pipit_graph *g = NULL;
        pipit_program *p = NULL;
        ASSERT_OK(rcompile(&r, &g, &p));
        for (int prank = 0; prank < p->plan.nranks; prank++) {
            const pipit__rank_plan *rp = &p->plan.ranks[prank];
            pipit__reshard *z = pipit__reshard_build(rp, p->plan.nparams);
            ASSERT_TRUE(z != NULL);
            /* replay the lists: the params gathered at each instruction */
            char *held = calloc((size_t)p->plan.nparams + 1, 1);
            double live = 0, peak = 0;
            int gathers = 0, tasks_reading = 0, reads_in_task = 0;
            ASSERT_EQ_I64(z->n, rp->post_at);
            for (int32_t i = 0; i < z->n; i++) {
                const pipit__instr *in = &rp->ins[i];
                for (int32_t k = z->gat_off[i]; k < z->gat_off[i + 1]; k++) {
                    int q = z->gat[k];
                    ASSERT_TRUE(!held[q]);
                    held[q] = 1, live += (double)p->plan.params[q].numel * 4, gathers++;
                }
                if (in->kind == INS_MARK) { /* a task boundary: nothing is held across it */
                    ASSERT_NEAR_F64(live, 0, 0);
                    tasks_reading += reads_in_task > 0, reads_in_task = 0;
                }
                for (int q = 0; q < p->plan.nparams; q++)
                    if (touches(in, q)) {
                        ASSERT_TRUE(held[q]); /* every read finds its param gathered */
                        reads_in_task++;
                    }
                if (live > peak) peak = live;
                for (int32_t k = z->rel_off[i]; k < z->rel_off[i + 1]; k++) {
                    int q = z->rel[k];
                    ASSERT_TRUE(held[q]);
                    held[q] = 0, live -= (double)p->plan.params[q].numel * 4;
                }
            }
            tasks_reading += reads_in_task > 0;
            ASSERT_NEAR_F64(live, 0, 0); /* all released before the post-loop */
            ASSERT_TRUE(gathers >= tasks_reading && tasks_reading >= 2 * 4 * sch[c].V); /* F and B of each mb */
            /* the report counts the most gathered at once, well below the stage's params */
            ASSERT_NEAR_F64((double)pipit__reshard_peak(p, prank), peak, 0);
            ASSERT_TRUE(peak > 0 && peak < 0.75 * (double)rp->param_bytes);
            pipit__rank_mem m;
            pipit__rank_memory(p, prank, &m);
            double shard = (double)pipit__moment_bytes(p, prank, 0, NULL);
            ASSERT_NEAR_F64(m.params, peak + shard, 0);
            if (prank == 0)
                fprintf(stderr, "%s rank 0: %d gathers over %d tasks reading params; at most %.0f of %zu param bytes "
                                "gathered at once\n",
                        pipit_schedule_kind_name(sch[c].k), gathers, tasks_reading, peak, rp->param_bytes);
            free(held);
            pipit__reshard_free(z);
        }
        pipit_program_free(p);
        pipit_graph_free(g);
        pipit_schedule_free(s);
    }
}

PIPIT_TEST(zero3_reshard_bad_options) {
    pipit_gpt2_config c = {.vocab = RV, .max_ctx = RT, .ctx = RT, .layers = RL, .heads = RH, .dim = RC, .batch = RB, .stages = 1};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_program *p = NULL;
    for (int zero = 0; zero <= 2; zero++) {
        ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2, .zero = zero, .reshard_after_forward = 1}, &p),
                      PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS("options.reshard_after_forward");
        ASSERT_MSG_HAS("needs options.zero = 3");
    }
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2, .zero1 = 1, .reshard_after_forward = 1}, &p),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("needs options.zero = 3");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2, .zero = 3, .reshard_after_forward = 2}, &p),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.reshard_after_forward must be 0 or 1, got 2");
    /* D = 1: nothing is sharded, so nothing to regather (as options.zero there) */
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.zero = 3, .reshard_after_forward = 1}, &p));
    ASSERT_TRUE(!pipit__zero_reshard(p) && p->rs[0].param_block != NULL);
    pipit_program_free(p);
    pipit_graph_free(g);
}
