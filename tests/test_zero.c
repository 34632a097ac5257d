/*
 * test_zero.c — ZeRO-2 and ZeRO-3 under the pipeline (options.zero):
 *   - the same bits as ZeRO-1 at the same D (losses, params, gradients and
 *     AdamW moments read back after a few steps) over schedules of every
 *     family, in bf16, with T = 2 tensor-parallel ranks per stage, and
 *     with a gradient transform (ZeRO-2 then keeps whole gradients);
 *   - what a rank keeps between steps: its 1/D shards of the params (3),
 *     gradients (2) and moments, in its real blocks (the full ones are
 *     released) and in the planner's report (resident_*_bytes);
 *   - the state is layout-free: saved at ZeRO-3 D = 2, it resumes at ZeRO-1
 *     D = 2 bit for bit with the uninterrupted run, at D = 1 with the same
 *     first loss, and back into ZeRO-3;
 *   - contradictory or out-of-range options are refused by name.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpt2_feeds.h"
#include "pipit_gpt2.h"
#include "pipit_inspect.h"
#include "runtime/program.h"
#include "snapshot.h"
#include "test.h"

enum { TV = 64, TT = 8, TL = 4, TH = 2, TC = 16, TB = 2, STEPS = 3 };

typedef struct {
    pipit_schedule *sch;
    int stages, M, D, zero, T, steps, transform;
    pipit_dtype dtype;
} zrun;

static pipit_gpt2_config cfg_of(const zrun *r) {
    return (pipit_gpt2_config){.vocab = TV, .max_ctx = TT, .ctx = TT, .layers = TL, .heads = TH, .dim = TC, .batch = TB,
                               .stages = r->stages};
}

/* The tied wte's gradient halved (kind 1), or plus 0.01 wte (kind 2: the
 * post-loop reads the param, so ZeRO-3 keeps the full block to the end of
 * the step): transforms, which read whole gradients. */
static void transform_wte_grad(pipit_graph *g, int kind) {
    for (int32_t id = 0; pipit_val_ndim((pipit_val){g, id}) > 0 || id < 8; id++) {
        pipit_val v = {g, id};
        if (pipit_val_ndim(v) == 2 && pipit_val_dim(v, 0) == TV && pipit_val_dim(v, 1) == TC) {
            pipit_val gr = pipit_grad_of(g, v);
            pipit_set_grad(g, v, kind == 1 ? pipit_scale(g, gr, 0.5) : pipit_add(g, gr, pipit_scale(g, v, 0.01)));
            return;
        }
    }
}

static pipit_status compile_run(const zrun *r, pipit_graph **gout, pipit_program **out) {
    pipit_gpt2_config c = cfg_of(r);
    pipit_graph *g = pipit_graph_new();
    if (r->T > 1) pipit_graph_set_tensor_parallel(g, r->T);
    pipit_val loss = pipit_gpt2_build(g, &c);
    if (r->transform) transform_wte_grad(g, r->transform);
    pipit_options o = {.schedule = r->sch, .microbatches = r->M, .optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1),
                       .clip_norm = 0.5, .data_parallel = r->D, .zero = r->zero, .tensor_parallel = r->T,
                       .dtype = r->dtype};
    pipit_status s = pipit_compile(g, loss, &o, out);
    if (s) {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
        pipit_graph_free(g);
        return s;
    }
    *gout = g;
    return PIPIT_STATUS_OK;
}

/* Steps [first, first + n) of the deterministic feeds. */
static pipit_status run_steps(pipit_program *p, const zrun *r, int first, int n, snapshot *snap) {
    int G = r->M * r->D;
    int32_t *buf = malloc(sizeof(int32_t) * 3 * TB * TT * (size_t)G);
    pipit_feed *feeds = malloc(sizeof(pipit_feed) * 3 * (size_t)G);
    pipit_status s = PIPIT_STATUS_OK;
    for (int k = 0; k < n && !s; k++) {
        test_gpt2_feeds(G, first + k, TB, TT, TV, buf, feeds);
        pipit_metrics met;
        s = pipit_step(p, feeds, 3, 1, &met);
        if (s) fprintf(stderr, "step %d: %s\n", first + k, pipit_errmsg());
        snap->losses[snap->nsteps++] = met.loss;
    }
    free(buf), free(feeds);
    return s;
}

static pipit_status train(const zrun *r, snapshot *snap) {
    pipit_graph *g = NULL;
    pipit_program *p = NULL;
    pipit_status s = compile_run(r, &g, &p);
    if (s) return s;
    pipit_gpt2_config c = cfg_of(r);
    s = pipit_gpt2_init(p, &c, 7);
    if (!s) s = run_steps(p, r, 0, r->steps ? r->steps : STEPS, snap);
    if (!s) snap_take(p, snap);
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

static int schedule_v(pipit_schedule_kind k) {
    return k == PIPIT_SCHED_INTERLEAVED_1F1B || k == PIPIT_SCHED_DUALPIPEV || k == PIPIT_SCHED_ZB_V ||
                   k == PIPIT_SCHED_INTERLEAVED_ZB
               ? 2
               : 1;
}

/* ZeRO-2 and ZeRO-3 against ZeRO-1 for one configuration. */
static void same_as_zero1(zrun r, const char *what) {
    snapshot ref = {0};
    r.zero = 1;
    ASSERT_OK(train(&r, &ref));
    for (int z = 2; z <= 3; z++) {
        snapshot got = {0};
        r.zero = z;
        ASSERT_OK(train(&r, &got));
        char msg[160];
        snprintf(msg, sizeof msg, "ZeRO-%d vs ZeRO-1: %s", z, what);
        ASSERT_TRUE(snap_same_bits(&ref, &got, msg));
        snap_free(&got);
    }
    snap_free(&ref);
}

PIPIT_TEST(zero23_equal_zero1_schedules) {
    static const pipit_schedule_kind kinds[] = {PIPIT_SCHED_1F1B, PIPIT_SCHED_INTERLEAVED_1F1B, PIPIT_SCHED_ZB_H1,
                                                PIPIT_SCHED_ZB_V};
    int P = 2, M = 4;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int V = schedule_v(kinds[k]);
        pipit_schedule *sch = NULL;
        ASSERT_OK(pipit_schedule_build(kinds[k], P, V, M, &sch));
        char what[96];
        snprintf(what, sizeof what, "%s P=%d V=%d D=2 M=%d", pipit_schedule_kind_name(kinds[k]), P, V, M);
        same_as_zero1((zrun){sch, P * V, M, 2, 0, 1, 0, 0, PIPIT_F32}, what);
        pipit_schedule_free(sch);
    }
    /* no schedule (P = 1), D = 3 (uneven shards) */
    same_as_zero1((zrun){NULL, 1, 2, 3, 0, 1, 0, 0, PIPIT_F32}, "P=1 D=3");
}

PIPIT_TEST(zero23_equal_zero1_bf16_tp) {
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_DUALPIPEV, 2, 2, 4, &sch));
    same_as_zero1((zrun){sch, 4, 4, 2, 0, 1, 0, 0, PIPIT_BF16}, "bf16 dualpipev P=2 V=2 D=2");
    pipit_schedule_free(sch);
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch));
    same_as_zero1((zrun){sch, 2, 2, 2, 0, 2, 0, 0, PIPIT_F32}, "1f1b P=2 T=2 D=2");
    same_as_zero1((zrun){sch, 2, 2, 2, 0, 2, 0, 0, PIPIT_BF16}, "bf16 1f1b P=2 T=2 D=2");
    /* a gradient transform: the gradients are gathered (whole), the params still sharded */
    same_as_zero1((zrun){sch, 2, 2, 2, 0, 1, 0, 1, PIPIT_F32}, "1f1b P=2 D=2 with a gradient transform");
    same_as_zero1((zrun){sch, 2, 2, 2, 0, 1, 0, 2, PIPIT_F32}, "1f1b P=2 D=2 with a transform that reads the param");
    pipit_schedule_free(sch);
}

/* A model whose params span several 16384-element chunks, so that their
 * shards really split: C = 128, V = 256 (wte 2 chunks, the MLP 4 each). */
static pipit_status big_program(int zero, pipit_graph **g, pipit_program **p) {
    pipit_gpt2_config c = {.vocab = 256, .max_ctx = 8, .ctx = 8, .layers = 2, .heads = 2, .dim = 128, .batch = 1, .stages = 2};
    *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(*g, &c);
    pipit_schedule *sch = NULL;
    pipit_status s = pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch);
    pipit_options o = {.schedule = sch, .microbatches = 2, .data_parallel = 2, .zero = zero};
    if (!s) s = pipit_compile(*g, loss, &o, p);
    pipit_schedule_free(sch);
    if (!s) s = pipit_gpt2_init(*p, &c, 3);
    return s;
}

static cJSON *plan_json(const pipit_program *p) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    pipit_program_write_plan_json(f, p);
    fclose(f);
    cJSON *j = cJSON_Parse(text);
    free(text);
    return j;
}

static double field(const cJSON *rank, const char *name) { return cJSON_GetObjectItem(rank, name)->valuedouble; }

/* Bytes of each held param's shard of replica d (whole 16384-element
 * chunks), 64-byte aligned each, and of the whole params. */
static void shard_bytes(const pipit_program *p, int prank, int d, double *shard, double *whole) {
    *shard = *whole = 0;
    for (int i = 0; i < p->plan.nparams; i++) {
        if (p->plan.ranks[prank].param_off[i] == SIZE_MAX) continue;
        int64_t n = p->plan.params[i].numel, lo, hi;
        pipit__dp_shard(n, p->plan.D, d, &lo, &hi);
        *shard += (double)(((size_t)(hi - lo) * 4 + 63) / 64 * 64);
        *whole += (double)n * 4;
    }
}

PIPIT_TEST(zero23_resident_bytes) {
    for (int zero = 1; zero <= 3; zero++) {
        pipit_graph *g = NULL;
        pipit_program *p = NULL;
        ASSERT_OK(big_program(zero, &g, &p));
        int32_t buf[3 * 8 * 4]; /* 3 inputs x B 1 x T 8, 4 microbatches */
        pipit_feed feeds[3 * 4];
        test_gpt2_feeds(4, 0, 1, 8, 256, buf, feeds); /* 2 microbatches x 2 replicas */
        pipit_metrics met;
        ASSERT_OK(pipit_step(p, feeds, 3, 1, &met));
        cJSON *j = plan_json(p);
        ASSERT_TRUE(j != NULL);
        for (int w = 0; w < p->W; w++) {
            const pipit__rank_state *rs = &p->rs[w];
            int prank = rs->prank, d = rs->replica;
            const cJSON *rj = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "ranks"), prank);
            double shard, whole, shard0, unused;
            shard_bytes(p, prank, d, &shard, &whole);
            shard_bytes(p, prank, 0, &shard0, &unused);
            /* the real blocks between steps: the full ones are gone where the stage shards them */
            ASSERT_TRUE((rs->grad_block == NULL) == (zero >= 2));
            ASSERT_TRUE((rs->param_block == NULL) == (zero >= 3));
            ASSERT_NEAR_F64((double)pipit__moment_bytes(p, prank, d, NULL), shard, 0);
            /* the stage's params are split: each replica keeps about half (whole chunks) */
            ASSERT_TRUE(shard < 0.6 * whole && shard > 0.4 * whole);
            /* the planner's report (replica 0) */
            double par = field(rj, "resident_param_bytes"), gr = field(rj, "resident_grad_bytes");
            double mom = field(rj, "moment_bytes"), full = field(rj, "param_bytes");
            ASSERT_NEAR_F64(mom, 2 * shard0, 0);
            ASSERT_NEAR_F64(gr, zero >= 2 ? shard0 : full, 0);
            ASSERT_NEAR_F64(par, zero >= 3 ? shard0 : full, 0);
            if (w == 0)
                fprintf(stderr, "ZeRO-%d rank 0: between steps params %.0f, grads %.0f, moments %.0f bytes (stage: %.0f "
                                "each, moments 2x)\n", zero, par, gr, mom, full);
        }
        cJSON_Delete(j);
        pipit_program_free(p);
        pipit_graph_free(g);
    }
}

/* Whole pages of [a, a + n) resident in memory (mincore). */
static size_t resident_pages(const uint8_t *a, size_t n, size_t *pages) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), lo = ((uintptr_t)a + page - 1) / page * page,
           hi = ((uintptr_t)a + n) / page * page, in = 0;
    *pages = hi > lo ? (hi - lo) / page : 0;
    if (!*pages) return 0;
    unsigned char *v = malloc(*pages);
    if (v && mincore((void *)lo, hi - lo, v) == 0)
        for (size_t k = 0; k < *pages; k++) in += v[k] & 1;
    free(v);
    return in;
}

/* What a world rank holds between steps, measured through the public API
 * (pipit_program_held_bytes) at ZeRO 0..3, D = 2: gradients of each
 * replica = its chunk shards (64-byte aligned each), about half of the
 * stage's (the planner's ceil(stage / D) up to whole chunks) under ZeRO-2
 * and 3, the full block under 0 and 1; the planner's report (replica 0)
 * says the same, and its peak counts ZeRO-1's gradient bytes for ZeRO-2
 * (the shards lie in the full block). On host memory the gradient block's
 * pages past the shards are really given back (mincore). */
PIPIT_TEST(zero_held_grad_bytes) {
    double grads_peak[4] = {0};
    for (int zero = 0; zero <= 3; zero++) {
        pipit_graph *g = NULL;
        pipit_program *p = NULL;
        ASSERT_OK(big_program(zero, &g, &p));
        int32_t buf[3 * 8 * 4];
        pipit_feed feeds[3 * 4];
        for (int step = 0; step < 2; step++) { /* the second step reuses the block */
            test_gpt2_feeds(4, step, 1, 8, 256, buf, feeds);
            ASSERT_OK(pipit_step(p, feeds, 3, 1, NULL));
        }
        cJSON *j = plan_json(p);
        ASSERT_TRUE(j != NULL);
        for (int w = 0; w < pipit_program_num_ranks(p); w++) {
            int prank = p->rs[w].prank, d = p->rs[w].replica;
            const cJSON *rj = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "ranks"), prank);
            double shard, whole, stage = field(rj, "grad_bytes"); /* the stage's gradient block (64-aligned params) */
            shard_bytes(p, prank, d, &shard, &whole);
            size_t grads = 0, params = 0, moments = 0;
            ASSERT_OK(pipit_program_held_bytes(p, w, PIPIT_HELD_GRADS, &grads));
            ASSERT_OK(pipit_program_held_bytes(p, w, PIPIT_HELD_PARAMS, &params));
            ASSERT_OK(pipit_program_held_bytes(p, w, PIPIT_HELD_MOMENTS, &moments));
            ASSERT_NEAR_F64((double)grads, zero >= 2 ? shard : stage, 0);
            ASSERT_NEAR_F64((double)params, zero >= 3 ? shard : stage, 0);
            double unsharded = 0; /* every held param whole, 64-byte aligned */
            for (int i = 0; i < p->plan.nparams; i++)
                if (p->plan.ranks[prank].param_off[i] != SIZE_MAX)
                    unsharded += (double)(((size_t)p->plan.params[i].numel * 4 + 63) / 64 * 64);
            ASSERT_NEAR_F64((double)moments, 2 * (zero >= 1 ? shard : unsharded), 0);
            if (zero >= 2) { /* 1/D of the stage, up to whole chunks: within 20% of ceil(stage / D) */
                double ceil_half = (double)(((size_t)stage + 1) / 2);
                ASSERT_TRUE(grads > 0.8 * ceil_half && grads < 1.2 * ceil_half);
            }
            if (d == 0) { /* the planner's report is replica 0's */
                ASSERT_NEAR_F64(field(rj, "resident_grad_bytes"), (double)grads, 0);
                ASSERT_NEAR_F64(field(rj, "resident_param_bytes"), (double)params, 0);
                ASSERT_NEAR_F64(field(rj, "moment_bytes"), (double)moments, 0); /* both */
                if (w == 0) grads_peak[zero] = cJSON_GetObjectItem(cJSON_GetObjectItem(rj, "memory"), "grads")->valuedouble;
            }
            if (w == 0)
                fprintf(stderr, "ZeRO-%d world rank 0 between steps: grads %zu, params %zu, moments %zu bytes (stage's "
                                "gradient block %.0f)\n", zero, grads, params, moments, stage);
            if (zero == 2 && p->be->host_memory) { /* the gradient allocation's pages past the shards are gone */
                size_t pages = 0, in = resident_pages(p->rs[w].gshard_block + (size_t)shard, (size_t)(stage - shard), &pages);
                ASSERT_TRUE(pages > 0);
                ASSERT_EQ_I64((int64_t)in, 0);
            }
        }
        cJSON_Delete(j);
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    /* the step's peak: ZeRO-2 and 3 hold ZeRO-1's full gradient block, no more on host memory */
    ASSERT_NEAR_F64(grads_peak[2], grads_peak[1], 0);
    ASSERT_NEAR_F64(grads_peak[3], grads_peak[1], 0);
}

/* Params, moments and the step count of a snapshot into program p. */
static void load_state(pipit_program *p, const snapshot *a, int64_t steps) {
    for (int i = 0; i < a->n; i++) {
        ASSERT_OK(pipit_program_set_param(p, a->names[i], a->param[i], a->bytes[i]));
        ASSERT_OK(pipit_program_set_opt_state(p, a->names[i], 0, a->m[i], a->bytes[i]));
        ASSERT_OK(pipit_program_set_opt_state(p, a->names[i], 1, a->v[i], a->bytes[i]));
    }
    ASSERT_OK(pipit_program_set_opt_steps(p, steps));
}

/* Saved after 2 steps at ZeRO-3 D = 2; resumed for a third step at ZeRO-1
 * D = 2 (bitwise the uninterrupted ZeRO-1 run), at D = 1 with M doubled
 * (the same global batch: its loss is the uninterrupted one bit for bit;
 * the later bits differ by the replicas' summation order, §9), and at
 * ZeRO-3 D = 2 from a ZeRO-1 state. */
PIPIT_TEST(zero23_state_is_layout_free) {
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch));
    zrun z1 = {sch, 2, 2, 2, 1, 1, 0, 0, PIPIT_F32}, z3 = z1;
    z3.zero = 3;
    snapshot full = {0};
    ASSERT_OK(train(&z1, &full)); /* 3 uninterrupted steps at ZeRO-1 */

    pipit_graph *g3 = NULL;
    pipit_program *p3 = NULL;
    ASSERT_OK(compile_run(&z3, &g3, &p3));
    pipit_gpt2_config c = cfg_of(&z3);
    ASSERT_OK(pipit_gpt2_init(p3, &c, 7));
    snapshot saved = {0};
    ASSERT_OK(run_steps(p3, &z3, 0, 2, &saved));
    snap_take(p3, &saved);
    int64_t steps = pipit_program_opt_steps(p3);
    ASSERT_EQ_I64(steps, 2);

    pipit_schedule *sch4 = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 4, &sch4));
    for (int D = 2; D >= 1; D--) {
        zrun r = z1;
        r.D = D, r.M = 4 / D, r.zero = D > 1, r.sch = D > 1 ? sch : sch4;
        pipit_graph *g = NULL;
        pipit_program *p = NULL;
        ASSERT_OK(compile_run(&r, &g, &p));
        load_state(p, &saved, steps);
        snapshot got = {0};
        memcpy(got.losses, full.losses, sizeof got.losses);
        got.nsteps = 2;
        ASSERT_OK(run_steps(p, &r, 2, 1, &got));
        ASSERT_TRUE(got.losses[2] == full.losses[2]);
        if (D == 2) {
            snap_take(p, &got);
            ASSERT_TRUE(snap_same_bits(&full, &got, "resumed at ZeRO-1 D=2 from ZeRO-3 D=2"));
        }
        snap_free(&got);
        pipit_program_free(p);
        pipit_graph_free(g);
    }

    /* and back: a ZeRO-1 state into a fresh ZeRO-3 program continues as the ZeRO-3 one did */
    pipit_graph *g = NULL;
    pipit_program *p = NULL;
    ASSERT_OK(compile_run(&z3, &g, &p));
    load_state(p, &saved, steps);
    snapshot a = {0}, b = {0};
    ASSERT_OK(run_steps(p, &z3, 2, 1, &a));
    ASSERT_OK(run_steps(p3, &z3, 2, 1, &b));
    snap_take(p, &a), snap_take(p3, &b);
    ASSERT_TRUE(snap_same_bits(&a, &b, "ZeRO-3 reloaded vs ZeRO-3 continued"));
    snap_free(&a), snap_free(&b), snap_free(&saved), snap_free(&full);
    pipit_program_free(p), pipit_program_free(p3);
    pipit_graph_free(g), pipit_graph_free(g3);
    pipit_schedule_free(sch), pipit_schedule_free(sch4);
}

/* ZeRO-3 releases the full parameter block when the loop ends, unless the
 * post-loop reads a param (kind 2's transform): then at the step's end. */
PIPIT_TEST(zero3_release_point) {
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch));
    for (int kind = 0; kind <= 2; kind++) {
        zrun r = {sch, 2, 2, 2, 3, 1, 0, kind, PIPIT_F32};
        pipit_graph *g = NULL;
        pipit_program *p = NULL;
        ASSERT_OK(compile_run(&r, &g, &p));
        int early = 0;
        for (int w = 0; w < p->W; w++) {
            p->rs[w].param_block = (uint8_t *)1; /* as during a step (only tested for NULL) */
            early += pipit__zero_release_at_loop_end(p, w);
            p->rs[w].param_block = NULL;
        }
        /* kind 2: the rank holding the tied wte in its post-loop (both ranks do) keeps it */
        ASSERT_EQ_I64(early, kind == 2 ? 0 : p->W);
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    pipit_schedule_free(sch);
}

PIPIT_TEST(zero23_bad_options) {
    pipit_gpt2_config c = {.vocab = TV, .max_ctx = TT, .ctx = TT, .layers = TL, .heads = TH, .dim = TC, .batch = TB, .stages = 1};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2, .zero = 4}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.zero must be a ZeRO stage in 0..3, got 4");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2, .zero = -1}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("got -1");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2, .zero1 = 1, .zero = 3}, &p),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("contradictory");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2, .zero1 = 2}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.zero1 must be 0 or 1");
    /* D = 1: nothing to shard, as zero1 there (the run is the plain one) */
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.zero = 3}, &p));
    ASSERT_TRUE(p->rs[0].param_block != NULL && p->rs[0].grad_block != NULL);
    pipit_program_free(p);
    pipit_graph_free(g);
}
