/*
 * test_tp.c — tensor parallelism (the local mesh P x T x D) on threads:
 *   - GPT-2 and Llama (GQA) sharded over T in {2, 4} match the unsharded
 *     model (T = 1) to 1e-6 relative in losses, gradients and parameters
 *     (SGD, linear in the gradient, as the data-parallel test does): only
 *     the order of the row-parallel sums differs;
 *   - for a fixed T, every schedule kind x P in {1, 2} x D in {1, 2}, with
 *     and without remat and ZeRO-1, gives the bits of the sequential run on
 *     one pipeline rank with the same T and D; in bf16 too (the
 *     collectives on bf16 values add in fp32, in rank order), where T = 2
 *     follows T = 1 to bf16's rounding;
 *   - finite differences (f64) of the sharded GPT-2, Llama and the
 *     vocab-parallel cross-entropy, which also equals pipit_xent_mean;
 *   - the same full initial tensors and checkpoints whatever T;
 *   - params, gradients and moments per rank halve at T = 2 (plan JSON);
 *   - every refusal names its value, before any work.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "pipit_gpt2.h"
#include "pipit_inspect.h"
#include "pipit_io.h"
#include "pipit_llama.h"
#include "snapshot.h"
#include "test.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

enum { TV = 64, TT = 8, TL = 4, TB = 2, STEPS = 3 };

/* What to train: the model, its T, the pipeline (schedule NULL: one rank),
 * the replicas and the options that must not change a bit. */
typedef struct {
    int llama, T, stages, M, D, zero1, remat, sgd, f64, steps, bf16;
    pipit_schedule *sch;
    int kv; /* llama: key/value heads (0: 2) */
} tp_run;

static pipit_gpt2_config gpt2_cfg(const tp_run *r) {
    return (pipit_gpt2_config){TV, TT, TT, TL, 4, 16, TB, r->stages, r->f64 ? PIPIT_F64 : PIPIT_F32, 0};
}

/* GQA: 4 query heads on 2 key/value heads (T = 4 needs 4: kv heads are
 * split over the ranks, never replicated). */
static pipit_llama_config llama_cfg(const tp_run *r) {
    pipit_llama_config c = {.vocab = TV, .max_ctx = TT, .ctx = TT, .layers = TL, .heads = 4,
                            .kv_heads = r->kv ? r->kv : 2, .dim = 16, .ffn_hidden = 24, .norm_eps = 1e-5,
                            .rope_theta = 10000, .tied = 0, .batch = TB, .stages = r->stages,
                            .dtype = r->f64 ? PIPIT_F64 : PIPIT_F32};
    return c;
}

static void fill_feeds(const tp_run *r, int G, int step, int32_t *buf, int32_t *pos, pipit_feed *feeds) {
    int nf = r->llama ? 2 : 3;
    for (int m = 0; m < G; m++) {
        int32_t *tok = buf + (size_t)m * 2 * TB * TT, *tgt = tok + TB * TT;
        for (int i = 0; i < TB * TT; i++) {
            tok[i] = (step * 131 + m * 17 + i * 7 + (i * i) % 5) % TV;
            tgt[i] = (tok[i] * 3 + 1 + step) % TV;
            pos[i] = i % TT;
        }
        size_t nb = sizeof(int32_t) * (size_t)(TB * TT);
        feeds[nf * m] = (pipit_feed){"tokens", tok, nb};
        feeds[nf * m + 1] = (pipit_feed){"targets", tgt, nb};
        if (!r->llama) feeds[nf * m + 2] = (pipit_feed){PIPIT_GPT2_POSITIONS, pos, nb};
    }
}

static pipit_val build(pipit_graph *g, const tp_run *r) {
    if (pipit_graph_set_tensor_parallel(g, r->T)) return (pipit_val){g, -1};
    if (r->llama) {
        pipit_llama_config c = llama_cfg(r);
        return pipit_llama_build(g, &c);
    }
    pipit_gpt2_config c = gpt2_cfg(r);
    return pipit_gpt2_build(g, &c);
}

static pipit_options options(const tp_run *r) {
    pipit_optimizer opt = r->sgd ? pipit_sgd(0.05) : pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1);
    return (pipit_options){.schedule = r->sch, .microbatches = r->M, .optimizer = opt, .clip_norm = 0.5,
                           .data_parallel = r->D, .zero1 = r->zero1, .remat = r->remat, .tensor_parallel = r->T,
                           .dtype = r->bf16 ? PIPIT_BF16 : PIPIT_F32};
}

/* Builds, compiles, inits (the same full tensors whatever T) and trains. */
static pipit_status train(const tp_run *r, snapshot *snap) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = build(g, r);
    pipit_options o = options(r);
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(g, loss, &o, &p);
    if (s) {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
        pipit_graph_free(g);
        return s;
    }
    if (r->llama) {
        pipit_llama_config c = llama_cfg(r);
        s = pipit_llama_init(p, &c, 7);
    } else {
        pipit_gpt2_config c = gpt2_cfg(r);
        s = pipit_gpt2_init(p, &c, 7);
    }
    int G = r->M * r->D, steps = r->steps ? r->steps : STEPS;
    int32_t *buf = malloc(sizeof(int32_t) * 2 * TB * TT * (size_t)G), pos[TB * TT];
    pipit_feed *feeds = malloc(sizeof(pipit_feed) * 3 * (size_t)G);
    for (int step = 0; step < steps && !s; step++) {
        fill_feeds(r, G, step, buf, pos, feeds);
        pipit_metrics met;
        s = pipit_step(p, feeds, r->llama ? 2 : 3, 1, &met);
        if (s) fprintf(stderr, "step %d: %s\n", step, pipit_errmsg());
        snap->losses[step] = met.loss;
        snap->nsteps = step + 1;
    }
    if (!s) snap_take(p, snap);
    free(buf), free(feeds);
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

/* T > 1 against T = 1: the row-parallel products add T partial sums (and
 * the vocab-parallel loss T partial sums of exponentials) in rank order
 * instead of one BLAS dot product: rounding only. */
static void matches_unsharded(int llama) {
    for (int T = 2; T <= 4; T *= 2) {
        tp_run one = {.llama = llama, .T = 1, .stages = 1, .M = 2, .D = 1, .sgd = 1, .kv = T}, tp = one;
        tp.T = T;
        snapshot a = {0}, b = {0};
        ASSERT_OK(train(&one, &a));
        ASSERT_OK(train(&tp, &b));
        double dg = snap_rel_diff(&a, &b, 1), dp = snap_rel_diff(&a, &b, 0);
        fprintf(stderr, "%s T=%d vs T=1: gradients %.3g, params %.3g relative\n", llama ? "llama" : "gpt2", T, dg, dp);
        ASSERT_TRUE(dg < 1e-6);
        ASSERT_TRUE(dp < 1e-6);
        for (int s = 0; s < STEPS; s++) ASSERT_NEAR_F64(b.losses[s], a.losses[s], 1e-6 * fabs(a.losses[s]));
        snap_free(&a);
        snap_free(&b);
    }
}

PIPIT_TEST(tp_gpt2_matches_unsharded) { matches_unsharded(0); }
PIPIT_TEST(tp_llama_matches_unsharded) { matches_unsharded(1); }

static int schedule_v(pipit_schedule_kind k) {
    return k == PIPIT_SCHED_INTERLEAVED_1F1B || k == PIPIT_SCHED_INTERLEAVED_GPIPE || k == PIPIT_SCHED_DUALPIPEV ||
                   k == PIPIT_SCHED_ZB_V || k == PIPIT_SCHED_INTERLEAVED_ZB || k == PIPIT_SCHED_V_HALF ||
                   k == PIPIT_SCHED_V_MIN
               ? 2
               : 1;
}

/* For a fixed T (and D), every schedule kind on P = 2 pipeline ranks (with
 * remat none, full and pointwise in turn, ZeRO-1 on every other with D = 2) gives the
 * bits of one pipeline rank running the unstaged graph: the T ranks of a
 * stage run one program, and their all-reduce adds in rank order. */
static void layouts_bitwise(int llama, int nkinds) {
    int ran = 0;
    for (int T = 2; T <= 4; T *= 2)
        for (int D = 1; D <= 2; D++) {
            tp_run ref = {.llama = llama, .T = T, .stages = 1, .M = 4, .D = D, .kv = T};
            snapshot want = {0};
            ASSERT_OK(train(&ref, &want));
            for (int k = 0; k < nkinds; k++) {
                int V = schedule_v((pipit_schedule_kind)k);
                tp_run r = ref;
                r.stages = 2 * V, r.remat = k % 3, r.zero1 = D == 2 && k % 4 < 2;
                ASSERT_OK(pipit_schedule_build((pipit_schedule_kind)k, 2, V, r.M, &r.sch));
                snapshot got = {0};
                ASSERT_OK(train(&r, &got));
                char what[128];
                snprintf(what, sizeof what, "%s %s P=2 T=%d D=%d remat=%d zero1=%d", llama ? "llama" : "gpt2",
                         pipit_schedule_kind_name((pipit_schedule_kind)k), T, D, r.remat, r.zero1);
                ASSERT_TRUE(snap_same_bits(&want, &got, what));
                snap_free(&got);
                pipit_schedule_free(r.sch);
                ran++;
            }
            snap_free(&want);
        }
    ASSERT_EQ_I64(ran, 4 * nkinds);
}

PIPIT_TEST(tp_gpt2_layouts_bitwise) { layouts_bitwise(0, PIPIT_SCHED_COUNT); }
PIPIT_TEST(tp_llama_layouts_bitwise) { layouts_bitwise(1, 4); }

/* options.dtype bf16 x T = 2: a schedule of each family on P = 2 (remat,
 * ZeRO-1 with D = 2) gives one pipeline rank's bits; the losses follow the
 * fp32-reduced T = 1 run to bf16's rounding (the vocab-parallel
 * cross-entropy's row terms are bf16 values, the fused one's fp32). */
PIPIT_TEST(tp_bf16_layouts_bitwise) {
    static const pipit_schedule_kind kinds[] = {PIPIT_SCHED_1F1B, PIPIT_SCHED_INTERLEAVED_1F1B, PIPIT_SCHED_ZB_H1,
                                                PIPIT_SCHED_DUALPIPEV};
    for (int llama = 0; llama <= 1; llama++)
        for (int D = 1; D <= 2; D++) {
            tp_run ref = {.llama = llama, .T = 2, .stages = 1, .M = 4, .D = D, .kv = 2, .bf16 = 1}, one = ref;
            one.T = 1;
            snapshot want = {0}, t1 = {0};
            ASSERT_OK(train(&ref, &want));
            ASSERT_OK(train(&one, &t1));
            for (int i = 0; i < want.nsteps; i++) ASSERT_NEAR_F64(want.losses[i] / t1.losses[i], 1.0, 1e-2);
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                int V = schedule_v(kinds[k]);
                tp_run r = ref;
                r.stages = 2 * V, r.remat = k % 2, r.zero1 = D == 2 && k < 2;
                ASSERT_OK(pipit_schedule_build(kinds[k], 2, V, r.M, &r.sch));
                snapshot got = {0};
                ASSERT_OK(train(&r, &got));
                char what[128];
                snprintf(what, sizeof what, "bf16 %s %s P=2 T=2 D=%d remat=%d zero1=%d", llama ? "llama" : "gpt2",
                         pipit_schedule_kind_name(kinds[k]), D, r.remat, r.zero1);
                ASSERT_TRUE(snap_same_bits(&want, &got, what));
                snap_free(&got);
                pipit_schedule_free(r.sch);
            }
            snap_free(&want), snap_free(&t1);
        }
}

/* ---- finite differences (f64, T = 2 ranks as threads) ---- */

/* Feeds of one small microbatch: tokens, targets (and GPT-2's positions). */
static int small_feeds(int V, int B, int T, int llama, int32_t *buf, pipit_feed *f) {
    int32_t *tok = buf, *tgt = buf + B * T, *pos = buf + 2 * B * T;
    for (int i = 0; i < B * T; i++) tok[i] = (i * 5 + 1) % V, tgt[i] = (i * 3 + 2) % V, pos[i] = i % T;
    size_t nb = sizeof(int32_t) * (size_t)(B * T);
    f[0] = (pipit_feed){"tokens", tok, nb};
    f[1] = (pipit_feed){"targets", tgt, nb};
    f[2] = (pipit_feed){PIPIT_GPT2_POSITIONS, pos, nb};
    return llama ? 2 : 3;
}

/* The sharded model's gradients (assembled from the shards) against
 * central differences of its loss, each param perturbed as a whole tensor
 * (every rank takes its shard of the perturbed one). */
static double sharded_gradcheck(int llama, int T) {
    pipit_graph *g = pipit_graph_new();
    pipit_graph_set_tensor_parallel(g, T);
    pipit_val loss;
    if (llama) {
        pipit_llama_config c = {.vocab = 8, .max_ctx = 4, .ctx = 4, .layers = 1, .heads = 2, .kv_heads = 2, .dim = 8,
                                .ffn_hidden = 4, .norm_eps = 1e-5, .rope_theta = 10000, .batch = 1, .stages = 1,
                                .dtype = PIPIT_F64};
        loss = pipit_llama_build(g, &c);
    } else {
        pipit_gpt2_config c = {8, 4, 4, 1, 2, 4, 1, 1, PIPIT_F64, 0};
        loss = pipit_gpt2_build(g, &c);
    }
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.tensor_parallel = T}, &p)) {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
        pipit_graph_free(g);
        return 1e9;
    }
    gc_init_params(p, 99, 1.0);
    int32_t buf[3 * 4];
    pipit_feed f[3];
    int nf = small_feeds(8, 1, 4, llama, buf, f);
    double err = gc_max_rel_error(p, f, nf, 1e-6, 1);
    pipit_program_free(p);
    pipit_graph_free(g);
    return err;
}

PIPIT_TEST(tp_gpt2_gradcheck) {
    double e = sharded_gradcheck(0, 2);
    fprintf(stderr, "gpt2 T=2: max relative error %.3g\n", e);
    ASSERT_TRUE(e >= 0 && e < 1e-6);
}

PIPIT_TEST(tp_llama_gradcheck) {
    double e = sharded_gradcheck(1, 2);
    fprintf(stderr, "llama T=2: max relative error %.3g\n", e);
    ASSERT_TRUE(e >= 0 && e < 1e-6);
}

/* A vocab-parallel head: logits = tp_copy(h) @ W_t with W [C, V] split
 * along V; loss = pipit_tp_xent_mean. Against finite differences, and
 * against pipit_xent_mean of the unsharded head on the same weights (the
 * loss and every gradient to 1e-12 in f64). */
static pipit_program *xent_head(int T, int sharded_loss, pipit_graph **gout) {
    enum { R = 6, C = 3, V = 8 };
    pipit_graph *g = pipit_graph_new();
    pipit_graph_set_tensor_parallel(g, T);
    pipit_val h = pipit_param(g, "h", PIPIT_F64, 2, SH(R, C));
    pipit_val w = pipit_param_sharded(g, "w", PIPIT_F64, 2, SH(C, V), 1, 1);
    pipit_val y = pipit_input(g, "targets", PIPIT_I32, 1, SH(R));
    pipit_val z = pipit_matmul(g, pipit_tp_copy(g, h), w, 0, 0);
    pipit_val loss = sharded_loss ? pipit_tp_xent_mean(g, z, y) : pipit_xent_mean(g, z, y);
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.tensor_parallel = T}, &p)) fprintf(stderr, "%s\n", pipit_errmsg());
    *gout = g;
    if (p) gc_init_params(p, 5, 2.0);
    return p;
}

PIPIT_TEST(tp_vocab_parallel_xent) {
    int32_t y[6] = {0, 7, 3, 4, 5, 1}; /* targets in every rank's shard, at T = 4 too */
    pipit_feed f[1] = {{"targets", y, sizeof y}};
    pipit_graph *g1, *g;
    pipit_program *ref = xent_head(1, 0, &g1);
    ASSERT_TRUE(ref != NULL);
    pipit_metrics m1, mt;
    ASSERT_OK(pipit_step(ref, f, 1, 0, &m1));
    double gh1[18], gw1[24], gh[18], gw[24];
    ASSERT_OK(pipit_program_get_grad(ref, "h", gh1, sizeof gh1));
    ASSERT_OK(pipit_program_get_grad(ref, "w", gw1, sizeof gw1));
    for (int T = 1; T <= 4; T *= 2) {
        pipit_program *p = xent_head(T, 1, &g);
        ASSERT_TRUE(p != NULL);
        ASSERT_OK(pipit_step(p, f, 1, 0, &mt));
        ASSERT_NEAR_F64(mt.loss, m1.loss, 1e-12 * fabs(m1.loss));
        ASSERT_OK(pipit_program_get_grad(p, "h", gh, sizeof gh));
        ASSERT_OK(pipit_program_get_grad(p, "w", gw, sizeof gw));
        for (int i = 0; i < 18; i++) ASSERT_NEAR_F64(gh[i], gh1[i], 1e-12);
        for (int i = 0; i < 24; i++) ASSERT_NEAR_F64(gw[i], gw1[i], 1e-12);
        double e = gc_max_rel_error(p, f, 1, 1e-6, 1);
        fprintf(stderr, "vocab-parallel cross-entropy T=%d: loss %.12g (unsharded %.12g), gradcheck %.3g\n", T, mt.loss,
                m1.loss, e);
        ASSERT_TRUE(e >= 0 && e < 1e-7);
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    pipit_program_free(ref);
    pipit_graph_free(g1);
}

/* ---- the same tensors whatever T: init, checkpoints ---- */

static pipit_program *compiled(int llama, int T, int D, pipit_graph **gout) {
    tp_run r = {.llama = llama, .T = T, .stages = 1, .M = 1, .D = D, .kv = 2};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = build(g, &r);
    pipit_options o = options(&r);
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &o, &p)) fprintf(stderr, "compile: %s\n", pipit_errmsg());
    *gout = g;
    return p;
}

PIPIT_TEST(tp_init_and_checkpoint_are_layout_free) {
    for (int llama = 0; llama < 2; llama++) {
        pipit_graph *g1, *g2, *g4;
        /* Llama's 2 kv heads split over 2 ranks at most */
        pipit_program *p1 = compiled(llama, 1, 1, &g1), *p2 = compiled(llama, 2, 1, &g2);
        pipit_program *p4 = compiled(llama, llama ? 2 : 4, 2, &g4);
        ASSERT_TRUE(p1 && p2 && p4);
        tp_run r = {.stages = 1};
        if (llama) {
            pipit_llama_config c = llama_cfg(&r);
            ASSERT_OK(pipit_llama_init(p1, &c, 3));
            ASSERT_OK(pipit_llama_init(p2, &c, 3));
        } else {
            pipit_gpt2_config c = gpt2_cfg(&r);
            ASSERT_OK(pipit_gpt2_init(p1, &c, 3));
            ASSERT_OK(pipit_gpt2_init(p2, &c, 3));
        }
        snapshot a = {0}, b = {0}, c4 = {0};
        snap_take(p1, &a);
        snap_take(p2, &b);
        ASSERT_TRUE(snap_same_bits(&a, &b, "init T=1 vs T=2"));
        /* train the T = 2 program a step, save it; T = 1 and T = 4 x D = 2 load it */
        int32_t buf[2 * TB * TT], pos[TB * TT];
        pipit_feed feeds[3];
        tp_run fr = {.llama = llama};
        fill_feeds(&fr, 1, 0, buf, pos, feeds);
        ASSERT_OK(pipit_step(p2, feeds, llama ? 2 : 3, 1, NULL));
        const char *path = pipit_test_path("tp_train.safetensors");
        ASSERT_OK(pipit_checkpoint_save_train(p2, path, 1, NULL));
        pipit_checkpoint *ck = NULL;
        ASSERT_OK(pipit_checkpoint_open(path, &ck));
        int64_t next = 0;
        ASSERT_OK(pipit_checkpoint_load_train(p1, ck, &next));
        ASSERT_OK(pipit_checkpoint_load_train(p4, ck, &next));
        pipit_checkpoint_free(ck);
        snap_free(&a), snap_free(&b);
        snap_take(p2, &b);
        snap_take(p1, &a);
        snap_take(p4, &c4);
        for (int i = 0; i < b.n; i++) memset(b.grad[i], 0, b.bytes[i]); /* a fresh program has none yet */
        ASSERT_TRUE(snap_same_bits(&b, &a, "saved at T=2, loaded at T=1"));
        ASSERT_TRUE(snap_same_bits(&b, &c4, "saved at T=2, loaded at T=4 (Llama: 2) x D=2"));
        snap_free(&a), snap_free(&b), snap_free(&c4);
        pipit_program_free(p1), pipit_program_free(p2), pipit_program_free(p4);
        pipit_graph_free(g1), pipit_graph_free(g2), pipit_graph_free(g4);
    }
}

/* ---- memory per rank (the planner's report) ---- */

/* `pipit_program_write_plan_json` of a GPT-2 on P = 2 ranks at T. */
static cJSON *plan_json(int T) {
    tp_run r = {.T = T, .stages = 2, .M = 2, .D = 1};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = build(g, &r);
    pipit_schedule *sch = NULL;
    pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch);
    r.sch = sch;
    pipit_options o = options(&r);
    pipit_program *p = NULL;
    cJSON *j = NULL;
    if (pipit_compile(g, loss, &o, &p) == PIPIT_STATUS_OK) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        pipit_program_write_plan_json(f, p);
        fclose(f);
        j = cJSON_Parse(text);
        free(text);
    }
    pipit_program_free(p);
    pipit_schedule_free(sch);
    pipit_graph_free(g);
    return j;
}

/* Bytes of the params rank r holds, replicated ones or split ones (64-byte aligned each). */
static double held_bytes(const cJSON *plan, int r, int split) {
    double b = 0;
    const cJSON *pp;
    cJSON_ArrayForEach(pp, cJSON_GetObjectItem(plan, "params")) {
        const cJSON *h;
        int held = 0;
        cJSON_ArrayForEach(h, cJSON_GetObjectItem(pp, "holders")) held |= (int)h->valuedouble == r;
        if (held && (cJSON_GetObjectItem(pp, "shard_axis") != NULL) == split)
            b += ceil(cJSON_GetObjectItem(pp, "numel")->valuedouble * 4 / 64) * 64;
    }
    return b;
}

PIPIT_TEST(tp_memory_per_rank_halves) {
    cJSON *one = plan_json(1), *two = plan_json(2);
    ASSERT_TRUE(one && two);
    ASSERT_EQ_I64(cJSON_GetObjectItem(two, "tensor_parallel")->valueint, 2);
    for (int r = 0; r < 2; r++) {
        const cJSON *r1 = cJSON_GetArrayItem(cJSON_GetObjectItem(one, "ranks"), r);
        const cJSON *r2 = cJSON_GetArrayItem(cJSON_GetObjectItem(two, "ranks"), r);
        double rep = held_bytes(two, r, 0), split = held_bytes(two, r, 1);
        ASSERT_TRUE(split > 2 * rep); /* the check below is about the weights, not the norms */
        ASSERT_NEAR_F64(held_bytes(one, r, 1), 0, 0); /* T = 1 shards nothing */
        const char *what[3] = {"param_bytes", "grad_bytes", "moment_bytes"};
        for (int k = 0; k < 3; k++) {
            double b1 = cJSON_GetObjectItem(r1, what[k])->valuedouble, b2 = cJSON_GetObjectItem(r2, what[k])->valuedouble;
            double per = k == 2 ? 2 : 1; /* two moments */
            fprintf(stderr, "rank %d %s: T=1 %.0f, T=2 %.0f (x%.3f; replicated %.0f)\n", r, what[k], b1, b2, b2 / b1,
                    per * rep);
            /* the planner's bytes are exactly the held tensors: replicated ones whole, the rest one shard */
            ASSERT_NEAR_F64(b2, per * (rep + split), 0);
            ASSERT_NEAR_F64(b1, per * held_bytes(one, r, 0), 0);
            /* and the split half is half of T = 1's (to 64-byte alignment per tensor) */
            ASSERT_NEAR_F64(2 * (b2 - per * rep), b1 - per * rep, per * 64 * 64);
        }
    }
    cJSON_Delete(one);
    cJSON_Delete(two);
}

/* ---- refusals, each naming its value, before any work ---- */

static pipit_status build_status(int llama, int T, int heads, int kv, int ffn, int vocab) {
    pipit_graph *g = pipit_graph_new();
    pipit_graph_set_tensor_parallel(g, T);
    pipit_val loss;
    if (llama) {
        pipit_llama_config c = {.vocab = vocab, .max_ctx = 8, .ctx = 8, .layers = 2, .heads = heads, .kv_heads = kv,
                                .dim = 8 * heads, .ffn_hidden = ffn, .norm_eps = 1e-5, .rope_theta = 1e4, .batch = 1,
                                .stages = 1, .dtype = PIPIT_F32};
        loss = pipit_llama_build(g, &c);
    } else {
        pipit_gpt2_config c = {vocab, 8, 8, 2, heads, 4 * heads, 1, 1, PIPIT_F32, 0};
        loss = pipit_gpt2_build(g, &c);
    }
    pipit_status s = loss.id >= 0 ? PIPIT_STATUS_OK : PIPIT_STATUS_INVALID;
    pipit_graph_free(g);
    return s;
}

PIPIT_TEST(tp_refuses_sizes_by_name) {
    ASSERT_STATUS(build_status(0, 3, 4, 0, 0, 64), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pipit_gpt2_build: gpt2: tensor parallelism 3 does not divide heads 4");
    ASSERT_MSG_HAS("2 divides every split size");
    ASSERT_STATUS(build_status(0, 4, 4, 0, 0, 50), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("does not divide vocab 50");
    ASSERT_STATUS(build_status(1, 4, 4, 2, 16, 64), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pipit_llama_build: llama: tensor parallelism 4 does not divide kv_heads 2");
    ASSERT_STATUS(build_status(1, 4, 4, 4, 6, 64), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("does not divide ffn_hidden 6");
    ASSERT_STATUS(build_status(1, 2, 4, 2, 6, 63), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("does not divide vocab 63");
    ASSERT_OK(build_status(1, 2, 4, 2, 6, 64));
}

PIPIT_TEST(tp_refuses_bad_graphs_and_options) {
    pipit_graph *g = pipit_graph_new();
    ASSERT_STATUS(pipit_graph_set_tensor_parallel(g, 0), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("T = 0 tensor-parallel ranks per stage (1 to 64)");
    ASSERT_STATUS(pipit_graph_set_tensor_parallel(g, 65), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_graph_set_tensor_parallel(NULL, 2), PIPIT_STATUS_MISUSE);
    ASSERT_EQ_I64(pipit_graph_tensor_parallel(g), 1);
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    pipit_val w = pipit_param_sharded(g, "w", PIPIT_F32, 1, SH(4), 0, 1);
    ASSERT_TRUE(w.id >= 0);
    ASSERT_STATUS(pipit_graph_set_tensor_parallel(g, 4), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("already holds sharded params or collectives for T = 2");
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2)); /* the same T again is fine */
    pipit_graph_free(g);

    /* a sharded norm weight: no sharded rule */

    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, SH(2, 4));
    w = pipit_param_sharded(g, "norm.weight", PIPIT_F32, 1, SH(4), 0, 1);
    pipit_val b = pipit_param(g, "norm.bias", PIPIT_F32, 1, SH(2));
    pipit_val loss = pipit_mean(g, pipit_layernorm(g, pipit_slice(g, x, 1, 0, 2), w, b, 1e-5));
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.tensor_parallel = 2}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("parameter 'norm.weight' is sharded along axis 0 over the stage's 2 tensor-parallel ranks, but "
                   "pipit_layernorm (node 4, op layernorm)");
    ASSERT_MSG_HAS("a sharded param may feed pipit_matmul, pipit_bias_add, pipit_embed and pipit_tp_head_xent_mean only");
    /* options.tensor_parallel must be the graph's T */
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.tensor_parallel = 4}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.tensor_parallel is 4 but the graph describes one of 2 tensor-parallel ranks");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.tensor_parallel = 65}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.tensor_parallel must be in 1..64");
    pipit_graph_free(g);

    /* an axis that does not split */
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 4));
    w = pipit_param_sharded(g, "c_attn.weight", PIPIT_F32, 2, SH(4, 6), 1, 3);
    ASSERT_TRUE(w.id < 0);
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("pipit_param_sharded 'c_attn.weight': axis 1 of 6 elements does not split into 3 parts x 4 "
                   "tensor-parallel ranks");
    pipit_graph_free(g);

    /* a gradient transform of a sharded param */
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    x = pipit_input(g, "x", PIPIT_F32, 2, SH(2, 4));
    w = pipit_param_sharded(g, "w", PIPIT_F32, 2, SH(4, 4), 1, 1);
    loss = pipit_mean(g, pipit_matmul(g, pipit_tp_copy(g, x), w, 0, 0));
    ASSERT_OK(pipit_set_grad(g, w, pipit_scale(g, pipit_grad_of(g, w), 0.5)));
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.tensor_parallel = 2}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("parameter 'w' is sharded along axis 1");
    ASSERT_MSG_HAS("pipit_scale (node 6, op scale) of its accumulated gradient (pipit_grad_of)");
    pipit_graph_free(g);
}

/* The refusals name the public call the user made: pipit_param_sharded's
 * own (not pipit_param, which it is built on), and a sharded param read by
 * pipit_slice or pipit_transpose (not their internal ops view and
 * permute). */
PIPIT_TEST(tp_refusals_name_the_public_call) {
    pipit_graph *g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    ASSERT_TRUE(pipit_param_sharded(g, NULL, PIPIT_F32, 1, SH(4), 0, 1).id < 0);
    ASSERT_MSG_HAS("pipit_param_sharded: name is NULL");
    ASSERT_TRUE(strstr(pipit_errmsg(), "pipit_param:") == NULL);
    pipit_graph_free(g);
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    ASSERT_TRUE(pipit_param_sharded(g, "w", PIPIT_BF16, 1, SH(4), 0, 1).id < 0);
    ASSERT_MSG_HAS("pipit_param_sharded 'w': params are fp32 masters");
    /* the graph has failed: a later call names itself and the first error */
    ASSERT_TRUE(pipit_param_sharded(g, "v", PIPIT_F32, 1, SH(4), 0, 1).id < 0);
    ASSERT_MSG_HAS("pipit_param_sharded: the graph already failed: pipit_param_sharded 'w'");
    pipit_graph_free(g);
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    ASSERT_TRUE(pipit_param_sharded(g, "w", PIPIT_F32, 1, SH(4), 0, 1).id >= 0);
    ASSERT_TRUE(pipit_param_sharded(g, "w", PIPIT_F32, 1, SH(4), 0, 1).id < 0);
    ASSERT_MSG_HAS("pipit_param_sharded: name 'w' is already used");
    pipit_graph_free(g);

    const char *const calls[] = {"pipit_slice (node 2, op view)", "pipit_transpose (node 2, op permute)"};
    for (int k = 0; k < 2; k++) {
        g = pipit_graph_new();
        ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
        pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, SH(3, 4));
        pipit_val w = pipit_param_sharded(g, "w", PIPIT_F32, 2, SH(4, 4), 1, 1); /* local [4, 2] */
        pipit_val r = k == 0 ? pipit_slice(g, w, 0, 0, 2) : pipit_transpose(g, w, 0, 1);
        pipit_val loss = pipit_mean(g, pipit_matmul(g, pipit_tp_copy(g, k == 0 ? pipit_slice(g, x, 1, 0, 2) : x),
                                                    k == 0 ? pipit_transpose(g, r, 0, 1) : r, 0, 1));
        ASSERT_OK(pipit_graph_status(g));
        pipit_program *p = NULL;
        ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.tensor_parallel = 2}, &p), PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS("parameter 'w' is sharded along axis 1 over the stage's 2 tensor-parallel ranks, but");
        ASSERT_MSG_HAS(calls[k]);
        ASSERT_TRUE(strstr(pipit_errmsg(), "but op ") == NULL);
        pipit_graph_free(g);
    }
}

/* Token ids are checked against the whole vocabulary (the T shards
 * together), not one rank's rows. */
PIPIT_TEST(tp_token_range_is_the_whole_vocabulary) {
    pipit_graph *g;
    pipit_program *p = compiled(0, 2, 1, &g);
    ASSERT_TRUE(p != NULL);
    int32_t buf[2 * TB * TT], pos[TB * TT];
    pipit_feed feeds[3];
    tp_run r = {0};
    fill_feeds(&r, 1, 0, buf, pos, feeds);
    buf[0] = TV - 1; /* another rank's row: fine */
    ASSERT_OK(pipit_step(p, feeds, 3, 0, NULL));
    buf[0] = TV;
    ASSERT_STATUS(pipit_step(p, feeds, 3, 0, NULL), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("holds 64 at index 0, outside [0, 64)");
    pipit_program_free(p);
    pipit_graph_free(g);
}
