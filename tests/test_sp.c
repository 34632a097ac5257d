/*
 * test_sp.c — sequence parallelism (pipit_sp_gather / pipit_sp_scatter /
 * pipit_sp_split, pipit_graph_set_sequence_parallel) on threads:
 *   - finite differences (f64) of the gather / scatter / split trio over
 *     T = 2 and 3 ranks, along an inner axis (a permute around the
 *     transport's blocks) and the outermost one;
 *   - GPT-2 and Llama with the sequence cut over T in {2, 4} against the
 *     same T without it: the forward (the first loss) bit for bit, the
 *     gradients, params and later losses to 1e-6 relative (the norms'
 *     weight gradients add T partial sums over the sequence);
 *   - for a fixed T, P = 2 under two schedules (one with the B/W split) and
 *     bf16 give one pipeline rank's bits;
 *   - the planner's activation bytes per rank shrink and the stage
 *     messages carry 1/T of the activation;
 *   - refusals: a sequence T does not divide, a bad switch value.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "pipit_gpt2.h"
#include "pipit_inspect.h"
#include "pipit_llama.h"
#include "snapshot.h"
#include "test.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

/* ---- finite differences of the trio ---- */

/* Megatron's block on x [2, 6, 3] (a replicated param): split (this
 * rank's block of `axis`), a "norm" tanh(x) * a with a replicated a read
 * through tp_copy, gather, a column-sharded W1 [3, 6], gelu, a
 * row-sharded W2 [6, 3], scatter, the residual add, gather (by the
 * negative axis), a column-sharded W3 and sum of squares over the T ranks
 * (tp_sum): every gradient convention of the trio (after a gather the
 * readers' gradients are per-rank partials, the scatter's and split's
 * readers' are each rank's own). */
static double trio_gradcheck(int T, int axis, double *loss_out) {
    pipit_graph *g = pipit_graph_new();
    pipit_graph_set_tensor_parallel(g, T);
    pipit_val x = pipit_param(g, "x", PIPIT_F64, 3, SH(2, 6, 3));
    pipit_val a = pipit_param(g, "a", PIPIT_F64, 1, SH(3));
    pipit_val w1 = pipit_param_sharded(g, "w1", PIPIT_F64, 2, SH(3, 6), 1, 1);
    pipit_val w2 = pipit_param_sharded(g, "w2", PIPIT_F64, 2, SH(6, 3), 0, 1);
    pipit_val w3 = pipit_param_sharded(g, "w3", PIPIT_F64, 2, SH(3, 6), 1, 1);
    pipit_val r = pipit_sp_split(g, x, axis);
    pipit_val h = pipit_mul(g, pipit_tanh(g, r), pipit_tp_copy(g, a));
    h = pipit_gelu(g, pipit_matmul(g, pipit_sp_gather(g, h, axis), w1, 0, 0));
    r = pipit_add(g, r, pipit_sp_scatter(g, pipit_matmul(g, h, w2, 0, 0), axis));
    pipit_val z = pipit_matmul(g, pipit_sp_gather(g, r, axis - 3), w3, 0, 0);
    pipit_val loss = pipit_tp_sum(g, pipit_sum(g, pipit_mul(g, z, z)));
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.tensor_parallel = T}, &p)) {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
        pipit_graph_free(g);
        return 1e9;
    }
    gc_init_params(p, 11, 1.0); /* full tensors: the same values whatever T */
    pipit_metrics m;
    double err = pipit_step(p, NULL, 0, 0, &m) ? 1e9 : gc_max_rel_error(p, NULL, 0, 1e-6, 1);
    if (loss_out) *loss_out = m.loss;
    pipit_program_free(p);
    pipit_graph_free(g);
    return err;
}

PIPIT_TEST(sp_gather_scatter_gradcheck) {
    double one = 0; /* T = 1: the whole function on one rank, the value the others must give */
    for (int T = 1; T <= 3; T++)
        for (int axis = 0; axis <= 1; axis++) {
            if (axis == 0 && T == 3) continue; /* 2 does not split in 3 */
            double loss = 0, e = trio_gradcheck(T, axis, &loss);
            if (T == 1 && axis == 0) one = loss;
            fprintf(stderr, "sp trio T=%d axis %d: loss %.17g (T=1: %.17g), max relative error %.3g\n", T, axis, loss,
                    one, e);
            ASSERT_TRUE(e >= 0 && e < 1e-6);
            ASSERT_NEAR_F64(loss, one, 1e-12 * fabs(one));
        }
}

/* ---- the models ---- */

enum { TV = 64, TT = 8, TL = 4, TB = 2, STEPS = 3 };

typedef struct {
    int llama, T, sp, stages, M, bf16, sgd;
    pipit_schedule *sch;
} sp_run;

static pipit_gpt2_config gpt2_cfg(const sp_run *r) {
    return (pipit_gpt2_config){TV, TT, TT, TL, 4, 16, TB, r->stages, PIPIT_F32, 0};
}

static pipit_llama_config llama_cfg(const sp_run *r) {
    return (pipit_llama_config){.vocab = TV, .max_ctx = TT, .ctx = TT, .layers = TL, .heads = 4, .kv_heads = 4,
                                .dim = 16, .ffn_hidden = 24, .norm_eps = 1e-5, .rope_theta = 10000, .batch = TB,
                                .stages = r->stages, .dtype = PIPIT_F32};
}

static pipit_val build(pipit_graph *g, const sp_run *r) {
    if (pipit_graph_set_tensor_parallel(g, r->T) || pipit_graph_set_sequence_parallel(g, r->sp))
        return (pipit_val){g, -1};
    if (r->llama) {
        pipit_llama_config c = llama_cfg(r);
        return pipit_llama_build(g, &c);
    }
    pipit_gpt2_config c = gpt2_cfg(r);
    return pipit_gpt2_build(g, &c);
}

static pipit_options options(const sp_run *r) {
    pipit_optimizer opt = r->sgd ? pipit_sgd(0.05) : pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1);
    return (pipit_options){.schedule = r->sch, .microbatches = r->M, .optimizer = opt,
                           .clip_norm = 0.5, .tensor_parallel = r->T, .dtype = r->bf16 ? PIPIT_BF16 : PIPIT_F32};
}

static pipit_status train(const sp_run *r, snapshot *snap) {
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
    int nf = r->llama ? 2 : 3;
    int32_t *buf = malloc(sizeof(int32_t) * 3 * TB * TT * (size_t)r->M);
    pipit_feed *feeds = malloc(sizeof(pipit_feed) * 3 * (size_t)r->M);
    for (int step = 0; step < STEPS && !s; step++) {
        for (int m = 0; m < r->M; m++) {
            int32_t *tok = buf + (size_t)m * 3 * TB * TT, *tgt = tok + TB * TT, *pos = tgt + TB * TT;
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
        pipit_metrics met;
        s = pipit_step(p, feeds, nf, 1, &met);
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

/* --sp against the same T without it: the forward's every value is the
 * same computation (the reduce-scatter adds each element's T partials in
 * the all-reduce's rank order; norms and adds are row-wise), so the first
 * loss is the same bits; the replicated params read between the
 * collectives (norm weights and biases, GPT-2's row-parallel biases) sum
 * their gradient over each rank's S/T positions then over the T ranks,
 * instead of over S at once: rounding from there on (SGD, linear in the
 * gradient, as test_tp.c: AdamW's m / sqrt(v) turns a rounding of a
 * near-zero gradient into a full step). */
static void matches_tp(int llama) {
    for (int T = 2; T <= 4; T *= 2) {
        sp_run tp = {.llama = llama, .T = T, .stages = 1, .M = 2, .sgd = 1}, sp = tp;
        sp.sp = 1;
        snapshot a = {0}, b = {0};
        ASSERT_OK(train(&tp, &a));
        ASSERT_OK(train(&sp, &b));
        double dg = snap_rel_diff(&a, &b, 1), dp = snap_rel_diff(&a, &b, 0), dl = 0;
        for (int s = 1; s < STEPS; s++) dl = fmax(dl, fabs(b.losses[s] - a.losses[s]) / fabs(a.losses[s]));
        fprintf(stderr,
                "%s T=%d --sp vs --tp only: first loss %s (%.17g vs %.17g), later losses %.3g, gradients %.3g, "
                "params %.3g relative\n",
                llama ? "llama" : "gpt2", T, a.losses[0] == b.losses[0] ? "bitwise" : "DIFFERS", a.losses[0],
                b.losses[0], dl, dg, dp);
        ASSERT_TRUE(a.losses[0] == b.losses[0]);
        ASSERT_TRUE(dg < 1e-6);
        ASSERT_TRUE(dp < 1e-6);
        ASSERT_TRUE(dl < 1e-6);
        snap_free(&a);
        snap_free(&b);
    }
}

PIPIT_TEST(sp_gpt2_matches_tp) { matches_tp(0); }
PIPIT_TEST(sp_llama_matches_tp) { matches_tp(1); }

/* For a fixed T with --sp: P = 2 under 1F1B and ZB-H1 (the B/W split:
 * the norms' weight-gradient sums run in W), in f32 and bf16, give the
 * bits of one pipeline rank running the unstaged graph. */
PIPIT_TEST(sp_layouts_bitwise) {
    static const pipit_schedule_kind kinds[] = {PIPIT_SCHED_1F1B, PIPIT_SCHED_ZB_H1};
    for (int llama = 0; llama <= 1; llama++)
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            sp_run ref = {.llama = llama, .T = 2, .sp = 1, .stages = 1, .M = 4, .bf16 = bf16};
            snapshot want = {0};
            ASSERT_OK(train(&ref, &want));
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                if (bf16 && k) continue; /* bf16: one schedule */
                sp_run r = ref;
                r.stages = 2;
                ASSERT_OK(pipit_schedule_build(kinds[k], 2, 1, r.M, &r.sch));
                snapshot got = {0};
                ASSERT_OK(train(&r, &got));
                char what[128];
                snprintf(what, sizeof what, "%s%s --sp T=2 P=2 %s", bf16 ? "bf16 " : "", llama ? "llama" : "gpt2",
                         pipit_schedule_kind_name(kinds[k]));
                ASSERT_TRUE(snap_same_bits(&want, &got, what));
                snap_free(&got);
                pipit_schedule_free(r.sch);
            }
            snap_free(&want);
        }
}

/* ---- memory per rank ---- */

static cJSON *plan_json(int T, int sp) {
    sp_run r = {.T = T, .sp = sp, .stages = 2, .M = 2};
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
    } else {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
    }
    pipit_program_free(p);
    pipit_schedule_free(sch);
    pipit_graph_free(g);
    return j;
}

/* Bytes of the stage messages rank r sends (its program's SEND lines). */
static double send_bytes(const cJSON *plan, int r) {
    const cJSON *prog = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(plan, "ranks"), r), "program"), *l;
    double b = 0;
    cJSON_ArrayForEach(l, prog) {
        int node, mb, peer;
        size_t bytes;
        if (cJSON_IsString(l) && sscanf(l->valuestring, "SEND  node %d mb %d -> rank %d (%zu bytes", &node, &mb, &peer,
                                        &bytes) == 4)
            b += (double)bytes;
    }
    return b;
}

static double rank_num(const cJSON *plan, int r, const char *obj, const char *key) {
    const cJSON *o = cJSON_GetArrayItem(cJSON_GetObjectItem(plan, "ranks"), r);
    if (obj) o = cJSON_GetObjectItem(o, obj);
    const cJSON *v = cJSON_GetObjectItem(o, key);
    return v ? v->valuedouble : -1;
}

PIPIT_TEST(sp_activation_bytes_shrink) {
    cJSON *tp = plan_json(2, 0), *sp = plan_json(2, 1);
    ASSERT_TRUE(tp && sp);
    for (int r = 0; r < 2; r++) {
        double a0 = rank_num(tp, r, "memory", "activations"), a1 = rank_num(sp, r, "memory", "activations");
        double p0 = rank_num(tp, r, "memory", "params"), p1 = rank_num(sp, r, "memory", "params");
        fprintf(stderr, "rank %d activations: --tp 2 %.0f, --tp 2 --sp %.0f bytes (x%.3f)\n", r, a0, a1, a1 / a0);
        ASSERT_TRUE(a0 > 0 && a1 > 0 && a1 < a0);
        ASSERT_NEAR_F64(p1, p0, 0); /* the same shards */
    }
    /* the stage messages: [B, S/T, d] instead of [B, S, d] */
    double s0 = send_bytes(tp, 0), s1 = send_bytes(sp, 0);
    fprintf(stderr, "rank 0 sends %.0f bytes with --tp 2, %.0f with --sp\n", s0, s1);
    ASSERT_TRUE(s0 > 0);
    ASSERT_NEAR_F64(s1, s0 / 2, 0);
    cJSON_Delete(tp);
    cJSON_Delete(sp);
}

/* ---- refusals ---- */

PIPIT_TEST(sp_refusals_name_their_values) {
    pipit_graph *g = pipit_graph_new();
    ASSERT_STATUS(pipit_graph_set_sequence_parallel(g, 2), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("on = 2");
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 3));
    ASSERT_OK(pipit_graph_set_sequence_parallel(g, 1));
    ASSERT_EQ_I64(pipit_graph_sequence_parallel(g), 1);
    pipit_llama_config c = {.vocab = 12, .max_ctx = 8, .ctx = 8, .layers = 1, .heads = 3, .kv_heads = 3, .dim = 6,
                            .ffn_hidden = 6, .norm_eps = 1e-5, .rope_theta = 10000, .batch = 1, .stages = 1,
                            .dtype = PIPIT_F32};
    pipit_val loss = pipit_llama_build(g, &c);
    ASSERT_TRUE(loss.id < 0);
    ASSERT_MSG_HAS("does not divide the sequence (ctx 8)");
    pipit_graph_free(g);
    /* the ops: an axis that does not split, one out of range */
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    pipit_val x = pipit_param(g, "x", PIPIT_F32, 2, SH(3, 4));
    ASSERT_TRUE(pipit_sp_scatter(g, x, 0).id < 0);
    ASSERT_MSG_HAS("does not split over 2");
    pipit_graph_free(g);
    g = pipit_graph_new();
    x = pipit_param(g, "x", PIPIT_F32, 2, SH(3, 4));
    ASSERT_TRUE(pipit_sp_gather(g, x, 2).id < 0);
    ASSERT_MSG_HAS("out of range");
    pipit_graph_free(g);
}
