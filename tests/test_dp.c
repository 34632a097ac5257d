/*
 * test_dp.c — data parallelism (P x D world ranks on threads):
 *   - for every schedule the mesh P x D gives the same bits as P = 1 with the
 *     same D (the pipeline never changes a bit, and the replicas' sum has a
 *     fixed order);
 *   - D replicas of M microbatches match one rank running all M * D: the
 *     gradients differ only by the order of one sum, to 1e-6 relative, and
 *     the losses of the first step are equal;
 *   - ZeRO-1 equals the unsharded run bit for bit (params, gradients and
 *     the AdamW moments gathered from the shards), also with a gradient
 *     transform, and its moments load back into any layout;
 *   - the same in bf16 (mixed precision);
 *   - bad meshes are refused by name.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipit_gpt2.h"
#include "gpt2_feeds.h"
#include "snapshot.h"
#include "test.h"

enum { TV = 64, TT = 8, TL = 8, TH = 2, TC = 16, TB = 2, STEPS = 3 };

typedef struct {
    pipit_schedule *sch;
    int stages, M, D, zero1, sgd, transform;
    pipit_dtype dtype; /* options.dtype (0: f32) */
} run_cfg;

/* Microbatch j of step `step` of the global batch (M * D of them). */
static void fill_feeds(int G, int step, int32_t *buf, pipit_feed *feeds) {
    test_gpt2_feeds(G, step, TB, TT, TV, buf, feeds);
}

/* A gradient transform, to run the ZeRO-1 path that gathers gradients
 * before the transforms: the tied wte (the first [V, C] value the builder
 * makes, held by the first and the last stage) gets half its gradient. */
static void halve_wte_grad(pipit_graph *g) {
    for (int32_t id = 0; pipit_val_ndim((pipit_val){g, id}) > 0 || id < 8; id++) {
        pipit_val v = {g, id};
        if (pipit_val_ndim(v) == 2 && pipit_val_dim(v, 0) == TV && pipit_val_dim(v, 1) == TC) {
            pipit_set_grad(g, v, pipit_scale(g, pipit_grad_of(g, v), 0.5));
            return;
        }
    }
}

/* Builds, compiles and trains STEPS steps; *out keeps the program when
 * non-NULL (the caller frees it and *gout). */
static pipit_status train(const run_cfg *rc, snapshot *snap, pipit_program **out, pipit_graph **gout) {
    pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, rc->stages, PIPIT_F32, 0};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    if (rc->transform) halve_wte_grad(g);
    pipit_optimizer opt = rc->sgd ? pipit_sgd(0.05) : pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1);
    pipit_options o = {.schedule = rc->sch, .microbatches = rc->M, .optimizer = opt, .clip_norm = 0.5,
                       .data_parallel = rc->D, .zero1 = rc->zero1, .dtype = rc->dtype};
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(g, loss, &o, &p);
    if (s) {
        pipit_graph_free(g);
        return s;
    }
    pipit_gpt2_init(p, &c, 7);
    int G = rc->M * rc->D;
    int32_t *buf = malloc(sizeof(int32_t) * 3 * TB * TT * (size_t)G);
    pipit_feed *feeds = malloc(sizeof(pipit_feed) * 3 * (size_t)G);
    for (int step = 0; step < STEPS && !s; step++) {
        fill_feeds(G, step, buf, feeds);
        pipit_metrics met;
        s = pipit_step(p, feeds, 3, 1, &met);
        snap->losses[step] = met.loss;
        snap->nsteps = step + 1;
    }
    if (!s) snap_take(p, snap);
    free(buf);
    free(feeds);
    if (out && !s) {
        *out = p;
        *gout = g;
    } else {
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    return s;
}

static int schedule_v(pipit_schedule_kind k) {
    return k == PIPIT_SCHED_INTERLEAVED_1F1B || k == PIPIT_SCHED_DUALPIPEV || k == PIPIT_SCHED_ZB_V ||
                   k == PIPIT_SCHED_INTERLEAVED_ZB || k == PIPIT_SCHED_V_HALF || k == PIPIT_SCHED_V_MIN
               ? 2
               : 1;
}

PIPIT_TEST(dp_mesh_equals_one_rank_per_replica) {
    static const pipit_schedule_kind kinds[] = {PIPIT_SCHED_GPIPE, PIPIT_SCHED_1F1B, PIPIT_SCHED_INTERLEAVED_1F1B,
                                                PIPIT_SCHED_ZB_H1, PIPIT_SCHED_DUALPIPEV, PIPIT_SCHED_ZB_H2,
                                                PIPIT_SCHED_ZB_V, PIPIT_SCHED_INTERLEAVED_ZB, PIPIT_SCHED_V_HALF,
                                                PIPIT_SCHED_V_MIN};
    int ran = 0;
    for (int D = 1; D <= 2; D++) {
        for (int P = 2; P <= 4; P += 2) {
            int M = 2 * P;
            snapshot ref = {0};
            ASSERT_OK(train(&(run_cfg){NULL, 1, M, D, 0, 0, 0, PIPIT_F32}, &ref, NULL, NULL));
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                int V = schedule_v(kinds[k]);
                pipit_schedule *sch = NULL;
                ASSERT_OK(pipit_schedule_build(kinds[k], P, V, M, &sch));
                snapshot got = {0};
                ASSERT_OK(train(&(run_cfg){sch, P * V, M, D, 0, 0, 0, PIPIT_F32}, &got, NULL, NULL));
                char what[96];
                snprintf(what, sizeof what, "%s P=%d D=%d M=%d", pipit_schedule_kind_name(kinds[k]), P, D, M);
                ASSERT_TRUE(snap_same_bits(&ref, &got, what));
                snap_free(&got);
                pipit_schedule_free(sch);
                ran++;
            }
            snap_free(&ref);
        }
    }
    ASSERT_EQ_I64(ran, 4 * (int)(sizeof kinds / sizeof kinds[0]));
}

/* bf16: P x D gives P = 1's bits for the same D, over the schedule kinds
 * of every family (plain, interleaved, B/W split, V), and ZeRO-1 the
 * unsharded bits (the exchange, norm and update run on fp32 gradients). */
PIPIT_TEST(dp_mesh_bf16) {
    static const pipit_schedule_kind kinds[] = {PIPIT_SCHED_1F1B, PIPIT_SCHED_INTERLEAVED_1F1B, PIPIT_SCHED_ZB_H1,
                                                PIPIT_SCHED_DUALPIPEV, PIPIT_SCHED_V_MIN};
    for (int D = 1; D <= 2; D++) {
        int P = 2, M = 4;
        snapshot ref = {0};
        ASSERT_OK(train(&(run_cfg){NULL, 1, M, D, 0, 0, 0, PIPIT_BF16}, &ref, NULL, NULL));
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            int V = schedule_v(kinds[k]);
            pipit_schedule *sch = NULL;
            ASSERT_OK(pipit_schedule_build(kinds[k], P, V, M, &sch));
            for (int zero1 = 0; zero1 <= (D > 1); zero1++) {
                snapshot got = {0};
                ASSERT_OK(train(&(run_cfg){sch, P * V, M, D, zero1, 0, 0, PIPIT_BF16}, &got, NULL, NULL));
                char what[96];
                snprintf(what, sizeof what, "bf16 %s P=%d D=%d zero1=%d", pipit_schedule_kind_name(kinds[k]), P, D,
                         zero1);
                ASSERT_TRUE(snap_same_bits(&ref, &got, what));
                snap_free(&got);
            }
            pipit_schedule_free(sch);
        }
        snap_free(&ref);
    }
}

/* D replicas vs one rank over the same global batch: only the order of the
 * microbatch sum differs ((m0 + m1) + (m2 + m3) vs ((m0 + m1) + m2) + m3). */
PIPIT_TEST(dp_matches_single_rank_to_rounding) {
    for (int D = 2; D <= 4; D += 2) {
        snapshot one = {0}, dp = {0};
        ASSERT_OK(train(&(run_cfg){NULL, 1, 2 * D, 1, 0, 1, 0, PIPIT_F32}, &one, NULL, NULL)); /* SGD: linear in the gradient */
        ASSERT_OK(train(&(run_cfg){NULL, 1, 2, D, 0, 1, 0, PIPIT_F32}, &dp, NULL, NULL));
        double dg = snap_rel_diff(&one, &dp, 1), dparam = snap_rel_diff(&one, &dp, 0);
        fprintf(stderr, "D=%d: gradients %.3g, params %.3g relative\n", D, dg, dparam);
        ASSERT_TRUE(dg < 1e-6);
        ASSERT_TRUE(dparam < 1e-6);
        ASSERT_NEAR_F64(dp.losses[0], one.losses[0], 1e-6 * fabs(one.losses[0]));
        snap_free(&one);
        snap_free(&dp);
    }
}

PIPIT_TEST(dp_zero1_equals_unsharded) {
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 4, &sch));
    snapshot plain = {0}, halved = {0}; /* the transform is really there */
    ASSERT_OK(train(&(run_cfg){sch, 2, 4, 2, 0, 0, 0, PIPIT_F32}, &plain, NULL, NULL));
    ASSERT_OK(train(&(run_cfg){sch, 2, 4, 2, 0, 0, 1, PIPIT_F32}, &halved, NULL, NULL));
    ASSERT_TRUE(plain.losses[STEPS - 1] != halved.losses[STEPS - 1]);
    snap_free(&plain), snap_free(&halved);
    for (int transform = 0; transform < 2; transform++)
        for (int D = 2; D <= 3; D++) {
            snapshot full = {0}, z = {0};
            ASSERT_OK(train(&(run_cfg){sch, 2, 4, D, 0, 0, transform, PIPIT_F32}, &full, NULL, NULL));
            ASSERT_OK(train(&(run_cfg){sch, 2, 4, D, 1, 0, transform, PIPIT_F32}, &z, NULL, NULL));
            char what[64];
            snprintf(what, sizeof what, "zero1 D=%d transform=%d", D, transform);
            ASSERT_TRUE(snap_same_bits(&full, &z, what));
            snap_free(&full);
            snap_free(&z);
        }
    pipit_schedule_free(sch);
}

/* Moments read from a ZeRO-1 program (gathered from the shards) load into
 * an unsharded one and back, and both continue with the same bits. */
PIPIT_TEST(dp_zero1_state_moves_between_layouts) {
    snapshot a = {0}, b = {0};
    pipit_program *pz = NULL, *pf = NULL;
    pipit_graph *gz = NULL, *gf = NULL;
    ASSERT_OK(train(&(run_cfg){NULL, 1, 2, 2, 1, 0, 0, PIPIT_F32}, &a, &pz, &gz));
    /* a fresh unsharded D=2 program takes pz's params, moments and step */
    ASSERT_OK(train(&(run_cfg){NULL, 1, 2, 2, 0, 0, 0, PIPIT_F32}, &b, &pf, &gf));
    for (int i = 0; i < a.n; i++) {
        ASSERT_OK(pipit_program_set_param(pf, a.names[i], a.param[i], a.bytes[i]));
        ASSERT_OK(pipit_program_set_opt_state(pf, a.names[i], 0, a.m[i], a.bytes[i]));
        ASSERT_OK(pipit_program_set_opt_state(pf, a.names[i], 1, a.v[i], a.bytes[i]));
    }
    ASSERT_OK(pipit_program_set_opt_steps(pf, pipit_program_opt_steps(pz)));
    int32_t buf[3 * TB * TT * 4];
    pipit_feed feeds[3 * 4];
    fill_feeds(4, 99, buf, feeds);
    pipit_metrics mz, mf;
    ASSERT_OK(pipit_step(pz, feeds, 3, 1, &mz));
    ASSERT_OK(pipit_step(pf, feeds, 3, 1, &mf));
    ASSERT_TRUE(mz.loss == mf.loss);
    snapshot az = {0}, af = {0};
    snap_take(pz, &az);
    snap_take(pf, &af);
    memcpy(az.losses, af.losses, sizeof az.losses);
    ASSERT_TRUE(snap_same_bits(&az, &af, "after moving the state"));
    snap_free(&a), snap_free(&b), snap_free(&az), snap_free(&af);
    pipit_program_free(pz), pipit_program_free(pf);
    pipit_graph_free(gz), pipit_graph_free(gf);
}

PIPIT_TEST(dp_bad_options) {
    pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, 1, PIPIT_F32, 0};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = -1}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("data_parallel");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 65}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("1..64");
    pipit_graph_free(g);
}

/* A rank that stops without a word (alive, silent) is reported after the
 * timeout with its rank, on threads too, and the program refuses to run
 * again; it is kept (a hung thread may still touch it), so the test keeps
 * it reachable. */
static pipit_program *hung_program;
static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
static pipit_graph *hung_graph;

PIPIT_TEST(runtime_hung_rank_is_reported) {
    setenv("PIPIT_TIMEOUT", "1", 1);
    setenv("PIPIT_INJECT_HANG", "1:30", 1);
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch));
    pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, 2, PIPIT_F32, 0};
    hung_graph = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(hung_graph, &c);
    ASSERT_OK(pipit_compile(hung_graph, loss, &(pipit_options){.schedule = sch, .microbatches = 2}, &hung_program));
    unsetenv("PIPIT_INJECT_HANG");
    int32_t buf[3 * TB * TT * 2];
    pipit_feed feeds[3 * 2];
    fill_feeds(2, 0, buf, feeds);
    double t0 = wall_seconds();
    ASSERT_STATUS(pipit_step(hung_program, feeds, 3, 1, NULL), PIPIT_STATUS_RUNTIME);
    ASSERT_MSG_HAS("rank 1 failed: no progress for 1 s");
    ASSERT_TRUE(wall_seconds() - t0 < 10);
    ASSERT_STATUS(pipit_step(hung_program, feeds, 3, 1, NULL), PIPIT_STATUS_RUNTIME);
    ASSERT_MSG_HAS("can no longer run");
    pipit_program_free(hung_program); /* does not free under the hung thread */
    unsetenv("PIPIT_TIMEOUT");
    pipit_schedule_free(sch);
}
