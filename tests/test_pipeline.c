/*
 * test_pipeline.c — the pipelined step equals the sequential one, bit for
 * bit: for every built-in schedule x P x M (x V) x remat, a tiny GPT-2 is
 * trained 3 AdamW steps and every parameter is compared with memcmp against
 * the single-rank run of the unstaged graph; the same in bf16 (mixed
 * precision). Plus rank-failure propagation and the schedule/graph
 * mismatch errors.
 */
#include <string.h>

#include "pipit_gpt2.h"
#include "pipit_llama.h"
#include "pipit_partition.h"
#include "runtime/program.h"
#include "schedule/schedule.h"
#include "gpt2_feeds.h"
#include "test.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

enum { TV = 64, TT = 8, TL = 8, TH = 2, TC = 16, TB = 2 };

typedef struct {
    int n;
    char **names;
    float **data;
    size_t *bytes;
    double losses[3];
} snapshot;

static void fill_feeds(int M, int step, int32_t *buf, pipit_feed *feeds) {
    test_gpt2_feeds(M, step, TB, TT, TV, buf, feeds);
}

/* A model the equivalence matrix trains: its graph for S stages, its
 * initial weights, and its feeds (nfeeds per microbatch, int32 buffers). */
typedef struct {
    pipit_val (*build)(pipit_graph *g, int stages);
    void (*init)(pipit_program *p);
    int nfeeds;
    void (*fill)(int M, int step, int32_t *buf, pipit_feed *feeds);
} model;

static pipit_val gpt2_build(pipit_graph *g, int stages) {
    pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, stages, PIPIT_F32};
    return pipit_gpt2_build(g, &c);
}
static void gpt2_init(pipit_program *p) {
    pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, 1, PIPIT_F32};
    pipit_gpt2_init(p, &c, 7);
}
static const model gpt2_model = {gpt2_build, gpt2_init, 3, fill_feeds};

/* The compute precision of the matrix's runs (pipit_options.dtype). */
static pipit_dtype matrix_dtype = PIPIT_F32;

/* Trains 3 steps; returns 0 and fills snap, or a status. */
static pipit_status train3(const model *md, int stages, pipit_schedule *sch, int M, int remat, snapshot *snap) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = md->build(g, stages);
    pipit_program *p = NULL;
    pipit_options o = {.schedule = sch, .microbatches = M, .remat = remat,
                       .optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1), .clip_norm = 0.5,
                       .dtype = matrix_dtype};
    pipit_status s = pipit_compile(g, loss, &o, &p);
    if (s) {
        pipit_graph_free(g);
        return s;
    }
    md->init(p);
    int32_t *buf = malloc(sizeof(int32_t) * 3 * TB * TT * (size_t)M);
    pipit_feed *feeds = malloc(sizeof(pipit_feed) * 3 * (size_t)M);
    for (int step = 0; step < 3 && !s; step++) {
        md->fill(M, step, buf, feeds);
        pipit_metrics met;
        s = pipit_step(p, feeds, md->nfeeds, 1, &met);
        snap->losses[step] = met.loss;
    }
    snap->n = pipit_program_num_params(p);
    snap->names = calloc((size_t)snap->n, sizeof(char *));
    snap->data = calloc((size_t)snap->n, sizeof(float *));
    snap->bytes = calloc((size_t)snap->n, sizeof(size_t));
    for (int i = 0; i < snap->n; i++) {
        const char *name = pipit_program_param_name(p, i);
        int nd;
        int64_t shape[4], cnt = 1;
        pipit_program_param_shape(p, name, &nd, shape);
        for (int k = 0; k < nd; k++) cnt *= shape[k];
        snap->names[i] = strdup(name);
        snap->bytes[i] = sizeof(float) * (size_t)cnt;
        snap->data[i] = malloc(snap->bytes[i]);
        pipit_program_get_param(p, name, snap->data[i], snap->bytes[i]);
    }
    free(buf);
    free(feeds);
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

static void snap_free(snapshot *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->names[i]);
        free(s->data[i]);
    }
    free(s->names);
    free(s->data);
    free(s->bytes);
    memset(s, 0, sizeof *s);
}

/* Index of the first parameter that differs from ref (by name), or -1. */
static int first_diff(const snapshot *ref, const snapshot *got, const char *what) {
    for (int i = 0; i < got->n; i++) {
        int j = 0;
        while (j < ref->n && strcmp(ref->names[j], got->names[i])) j++;
        if (j == ref->n || memcmp(ref->data[j], got->data[i], got->bytes[i]) == 0) continue;
        size_t n = got->bytes[i] / 4;
        for (size_t k = 0; k < n; k++)
            if (memcmp(&ref->data[j][k], &got->data[i][k], 4)) {
                fprintf(stderr, "%s: param %s[%zu]: sequential %.9g, pipelined %.9g\n", what, got->names[i], k,
                        ref->data[j][k], got->data[i][k]);
                break;
            }
        return i;
    }
    return -1;
}

/* Every built-in schedule x P (x V) x remat for the microbatch counts Ms
 * (of P: M = P, 2P, 2P + 1): the same bits as the sequential run. */
static int equivalence_matrix(const model *md, const int *Ps, int nP, int nM) {
    int failures = 0, ran = 0;
    int ran_kind[PIPIT_SCHED_COUNT] = {0};
    for (int M0 = 0; M0 < nM; M0++) {
        for (int pi = 0; pi < nP; pi++) {
            int P = Ps[pi];
            /* 2P: several rounds of interleaved-zb (it refuses 2P+1) */
            int M = M0 == 0 ? 2 * P : M0 == 1 ? P : 2 * P + 1;
            snapshot ref = {0};
            if (train3(md, 1, NULL, M, 0, &ref)) {
                fprintf(stderr, "sequential M=%d failed: %s\n", M, pipit_errmsg());
                failures++;
                continue;
            }
            for (int kind = 0; kind < PIPIT_SCHED_COUNT; kind++) {
                for (int V = 1; V <= 2; V++) {
                    pipit_schedule *sch = NULL;
                    if (pipit_schedule_build((pipit_schedule_kind)kind, P, V, M, &sch)) continue;
                    if (sch->V != V) { /* the kind fixed its own V */
                        pipit_schedule_free(sch);
                        continue;
                    }
                    for (int remat = 0; remat < 2; remat++) {
                        snapshot got = {0};
                        char what[128];
                        snprintf(what, sizeof what, "%s P=%d V=%d M=%d remat=%d",
                                 pipit_schedule_kind_name((pipit_schedule_kind)kind), P, V, M, remat);
                        pipit_status s = train3(md, P * V, sch, M, remat, &got);
                        ran++;
                        ran_kind[kind]++;
                        if (s) {
                            fprintf(stderr, "%s: %s\n", what, pipit_errmsg());
                            failures++;
                        } else if (first_diff(&ref, &got, what) >= 0 ||
                                   memcmp(ref.losses, got.losses, sizeof ref.losses)) {
                            failures++;
                        }
                        snap_free(&got);
                    }
                    pipit_schedule_free(sch);
                }
            }
            snap_free(&ref);
        }
    }
    fprintf(stderr, "%d pipelined configurations compared\n", ran);
    for (int k = 0; k < PIPIT_SCHED_COUNT; k++)
        if (!ran_kind[k]) {
            fprintf(stderr, "schedule %s never ran\n", pipit_schedule_kind_name((pipit_schedule_kind)k));
            failures++;
        }
    return failures;
}

PIPIT_TEST(pipeline_equivalence_matrix) {
    static const int Ps[] = {1, 2, 3, 4};
    ASSERT_EQ_I64(equivalence_matrix(&gpt2_model, Ps, 4, 3), 0);
}

/* A small Llama-style decoder built from the general op set: gathered
 * embeddings, RMSNorm, RoPE, grouped-query attention, a SwiGLU MLP whose
 * gate has a broadcast bias and per-channel scale (a pre-loop product of
 * params), channel halves sliced (copies) and concatenated, and at every
 * unit boundary the batch split into views and joined again, so where a
 * stage boundary falls the views read a received buffer. Tied head, a
 * cross-entropy plus a small max-logit term. */
enum { LV = 40, LT = 6, LB = 2, LC = 16, LHQ = 4, LHKV = 2, LD = 4, LF = 24, LL = 4 };

static pipit_val lparam(pipit_graph *g, const char *what, int l, int nd, const int64_t *shape) {
    char name[64];
    snprintf(name, sizeof name, "l%d.%s", l, what);
    return pipit_param(g, name, PIPIT_F32, nd, shape);
}

static pipit_val llama_attn(pipit_graph *g, pipit_val x, int l) {
    pipit_val h = pipit_rmsnorm(g, x, lparam(g, "ln1", l, 1, SH(LC)), 1e-5);
    pipit_val q = pipit_matmul(g, h, lparam(g, "wq", l, 2, SH(LC, LHQ * LD)), 0, 0);
    pipit_val k = pipit_matmul(g, h, lparam(g, "wk", l, 2, SH(LC, LHKV * LD)), 0, 0);
    pipit_val v = pipit_matmul(g, h, lparam(g, "wv", l, 2, SH(LC, LHKV * LD)), 0, 0);
    q = pipit_rope(g, q, LHQ, 10000.0);
    k = pipit_rope(g, k, LHKV, 10000.0);
    pipit_val a = pipit_attention_qkv(g, q, k, v, &(pipit_attention_opts){LHQ, LHKV, 1, 0});
    return pipit_add(g, x, pipit_matmul(g, a, lparam(g, "wo", l, 2, SH(LHQ * LD, LC)), 0, 0));
}

static pipit_val llama_mlp(pipit_graph *g, pipit_val x, int l) {
    pipit_val h = pipit_rmsnorm(g, x, lparam(g, "ln2", l, 1, SH(LC)), 1e-5);
    pipit_val wg = pipit_mul(g, lparam(g, "wg", l, 2, SH(LC, LF)), lparam(g, "gs", l, 1, SH(LF)));
    pipit_val gate = pipit_silu(g, pipit_add(g, pipit_matmul(g, h, wg, 0, 0), lparam(g, "bg", l, 1, SH(LF))));
    pipit_val up = pipit_matmul(g, h, lparam(g, "wu", l, 2, SH(LC, LF)), 0, 0);
    pipit_val m = pipit_matmul(g, pipit_mul(g, gate, up), lparam(g, "wd", l, 2, SH(LF, LC)), 0, 0);
    pipit_val halves[2] = {pipit_slice(g, m, -1, LC / 2, LC / 2), pipit_slice(g, m, -1, 0, LC / 2)};
    return pipit_add(g, x, pipit_concat(g, 2, halves, -1));
}

static pipit_val llama_build(pipit_graph *g, int stages) {
    pipit_val tok = pipit_input(g, "tokens", PIPIT_I32, 2, SH(LB, LT));
    pipit_val tgt = pipit_input(g, "targets", PIPIT_I32, 2, SH(LB, LT));
    pipit_val wte = pipit_param(g, "wte", PIPIT_F32, 2, SH(LV, LC));
    pipit_val x = pipit_gather(g, wte, tok);
    for (int u = 0; u < 2 * LL; u++) { /* units: attention, MLP, attention, ... */
        x = u % 2 ? llama_mlp(g, x, u / 2) : llama_attn(g, x, u / 2);
        if (u + 1 == 2 * LL) break;
        if ((u + 1) * stages % (2 * LL) < stages) x = pipit_yield(g, x); /* even cuts */
        pipit_val rows[2];
        pipit_split(g, x, 0, 2, SH(1, 1), rows);
        pipit_val swapped[2] = {rows[1], rows[0]};
        x = pipit_concat(g, 2, swapped, 0);
    }
    pipit_val logits = pipit_matmul_nt(g, pipit_rmsnorm(g, x, pipit_param(g, "lnf", PIPIT_F32, 1, SH(LC)), 1e-5), wte);
    pipit_val zmax = pipit_mean(g, pipit_reduce_max(g, logits, -1, 0));
    return pipit_add(g, pipit_xent_mean(g, logits, tgt), pipit_scale(g, zmax, 1e-2));
}

/* Weights from each param's name, so every layout gets the same ones:
 * norm weights near 1, the rest small. */
static void llama_init(pipit_program *p) {
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = 0;
        pipit_program_param_numel(p, name, &n);
        uint32_t h = 2166136261u;
        for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
        float *w = malloc(sizeof(float) * (size_t)n);
        int norm = strstr(name, "ln") != NULL || strstr(name, ".gs") != NULL;
        for (int64_t k = 0; k < n; k++) {
            h = h * 1664525u + 1013904223u;
            float r = (float)(h >> 8) / 16777216.0f - 0.5f;
            w[k] = norm ? 1.0f + 0.2f * r : 0.6f * r;
        }
        pipit_program_set_param(p, name, w, sizeof(float) * (size_t)n);
        free(w);
    }
}

static void llama_feeds(int M, int step, int32_t *buf, pipit_feed *feeds) {
    for (int m = 0; m < M; m++) {
        int32_t *tok = buf + (size_t)m * 2 * LB * LT, *tgt = tok + LB * LT;
        for (int i = 0; i < LB * LT; i++) {
            tok[i] = (step * 131 + m * 17 + i * 7 + (i * i) % 5) % LV;
            tgt[i] = (tok[i] * 3 + 1) % LV;
        }
        size_t nb = sizeof(int32_t) * (size_t)(LB * LT);
        feeds[2 * m] = (pipit_feed){"tokens", tok, nb};
        feeds[2 * m + 1] = (pipit_feed){"targets", tgt, nb};
    }
}
static const model llama_model = {llama_build, llama_init, 2, llama_feeds};

/* The same model built without yields and cut by pipit_partition (the
 * CLI's --auto-stages) into the schedule's stage count. */
static pipit_val llama_auto_build(pipit_graph *g, int stages) {
    pipit_val loss = llama_build(g, 1);
    pipit_partition_result *pt = NULL;
    if (stages > 1 && (pipit_partition(g, loss, &(pipit_partition_options){.stages = stages}, &pt) ||
                       pipit_partition_apply(pt, g, &loss, 1)))
        fprintf(stderr, "partition into %d stages: %s\n", stages, pipit_errmsg());
    pipit_partition_free(pt);
    return loss;
}
static const model llama_auto_model = {llama_auto_build, llama_init, 2, llama_feeds};

/* The general op set pipelined: every schedule x P in {2, 4} x V x remat,
 * M = 2P, bit for bit the sequential run, with stages cut by hand and by
 * pipit_partition; and a forward-only program gives the training step's
 * loss bits. */
PIPIT_TEST(pipeline_equivalence_general_ops) {
    static const int Ps[] = {2, 4};
    ASSERT_EQ_I64(equivalence_matrix(&llama_model, Ps, 2, 1), 0);
    ASSERT_EQ_I64(equivalence_matrix(&llama_auto_model, Ps, 2, 1), 0); /* cut by pipit_partition */
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch));
    double loss[2];
    for (int fwd = 0; fwd < 2; fwd++) {
        pipit_graph *g = pipit_graph_new();
        pipit_val l = llama_build(g, 2);
        pipit_program *p = NULL;
        ASSERT_OK(pipit_compile(g, l, &(pipit_options){.schedule = sch, .microbatches = 2, .forward_only = fwd}, &p));
        llama_init(p);
        int32_t buf[4 * LB * LT];
        pipit_feed feeds[4];
        llama_feeds(2, 0, buf, feeds);
        pipit_metrics met;
        ASSERT_OK(pipit_step(p, feeds, 2, 0, &met));
        loss[fwd] = met.loss;
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    ASSERT_TRUE(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0);
    ASSERT_TRUE(isfinite(loss[0]) && loss[0] > 0);
    pipit_schedule_free(sch);
}

/* The Llama family as pipit_llama.h builds it: 8 layers, so that P x V = 8
 * stages hold whole blocks; GQA (4 query heads, 2 key/value heads), RoPE,
 * the lm head tied to the embedding (a weight the first and the last stage
 * share) or not. Feeds: llama_feeds (the same input names and sizes). */
static pipit_llama_config hf_llama_cfg(int stages, int tied) {
    return (pipit_llama_config){.vocab = LV, .max_ctx = LT, .ctx = LT, .layers = 8, .heads = 4, .kv_heads = 2,
                                .dim = LC, .ffn_hidden = LF, .norm_eps = 1e-5, .rope_theta = 500, .tied = tied,
                                .batch = LB, .stages = stages, .dtype = PIPIT_F32};
}
static pipit_val hf_llama_tied_build(pipit_graph *g, int stages) {
    pipit_llama_config c = hf_llama_cfg(stages, 1);
    return pipit_llama_build(g, &c);
}
static pipit_val hf_llama_untied_build(pipit_graph *g, int stages) {
    pipit_llama_config c = hf_llama_cfg(stages, 0);
    return pipit_llama_build(g, &c);
}
static void hf_llama_init(pipit_program *p) {
    pipit_llama_config c = hf_llama_cfg(1, 0); /* the init reads names and shapes off the program */
    pipit_llama_init(p, &c, 11);
}
static const model hf_llama_tied = {hf_llama_tied_build, hf_llama_init, 2, llama_feeds};
static const model hf_llama_untied = {hf_llama_untied_build, hf_llama_init, 2, llama_feeds};

/* pipit_llama_build: every schedule x P in {1, 2, 4} x V x remat (M = 2P)
 * with the tied head, P = 2 untied: bit for bit the sequential run. */
PIPIT_TEST(pipeline_equivalence_llama) {
    static const int Ps[] = {1, 2, 4}, P2[] = {2};
    ASSERT_EQ_I64(equivalence_matrix(&hf_llama_tied, Ps, 3, 1), 0);
    ASSERT_EQ_I64(equivalence_matrix(&hf_llama_untied, P2, 1, 1), 0);
}

/* Mixed precision keeps the guarantee: in bf16, every schedule x P in
 * {2, 4} x V x remat gives the sequential bf16 run's bits, for GPT-2, for
 * the general op set and for pipit_llama_build's Llama with its tied head
 * (bf16 activations and messages, fp32 gradients accumulated in the same
 * order). */
PIPIT_TEST(pipeline_equivalence_bf16) {
    static const int Ps[] = {2, 4};
    matrix_dtype = PIPIT_BF16;
    int gpt2 = equivalence_matrix(&gpt2_model, Ps, 2, 1), ops = equivalence_matrix(&llama_model, Ps, 2, 1);
    int llama = equivalence_matrix(&hf_llama_tied, Ps, 2, 1);
    matrix_dtype = PIPIT_F32;
    ASSERT_EQ_I64(gpt2, 0);
    ASSERT_EQ_I64(ops, 0);
    ASSERT_EQ_I64(llama, 0);
}

PIPIT_TEST(pipeline_rank_failure_stops_all) {
    pipit_gpt2_config c = {TV, TT, TT, 4, TH, TC, TB, 4, PIPIT_F32};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 4, 1, 4, &sch));
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = 4}, &p));
    pipit_gpt2_init(p, &c, 1);
    int32_t buf[3 * TB * TT * 4];
    pipit_feed feeds[12];
    fill_feeds(4, 0, buf, feeds);
    p->fail_rank = 2;
    p->fail_instr = 40;
    ASSERT_STATUS(pipit_step(p, feeds, 3, 1, NULL), PIPIT_STATUS_RUNTIME);
    ASSERT_TRUE(strstr(pipit_program_errmsg(p), "rank 2") != NULL);
    ASSERT_TRUE(strstr(pipit_program_errmsg(p), "injected failure") != NULL);
    /* the program stays usable: the next step runs normally */
    p->fail_rank = -1;
    ASSERT_OK(pipit_step(p, feeds, 3, 1, NULL));
    pipit_program_free(p);
    pipit_schedule_free(sch);
    pipit_graph_free(g);
}

PIPIT_TEST(pipeline_stage_count_mismatch) {
    pipit_gpt2_config c = {TV, TT, TT, 4, TH, TC, TB, 3, PIPIT_F32};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch));
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = 2}, &p),
                  PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("3 stages");
    pipit_schedule_free(sch);
    pipit_graph_free(g);
    /* no yields but P > 1 */
    c.stages = 1;
    g = pipit_graph_new();
    loss = pipit_gpt2_build(g, &c);
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_GPIPE, 2, 1, 2, &sch));
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = 2}, &p),
                  PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("no pipit_yield");
    pipit_schedule_free(sch);
    pipit_graph_free(g);
}

static int same_loc(pipit__loc a, pipit__loc b) { return a.kind == b.kind && a.idx == b.idx && a.off == b.off; }

static int same_instr(const pipit__instr *a, const pipit__instr *b, int nuses) {
    int same = a->kind == b->kind && a->first == b->first && a->node == b->node && a->mb == b->mb &&
               a->numel == b->numel && a->peer == b->peer && a->task == b->task && a->bytes == b->bytes &&
               a->param == b->param && a->use == b->use && same_loc(a->out, b->out);
    for (int k = 0; k < PIPIT_MAX_IN; k++) same = same && same_loc(a->in[k], b->in[k]);
    for (int u = 0; a->srcs && u < nuses; u++) same = same && same_loc(a->srcs[u], b->srcs[u]);
    return same && !a->srcs == !b->srcs;
}

/* Every rank derives the same plan from the same inputs: two compiles of
 * the same model and schedule give identical instruction streams. */
PIPIT_TEST(pipeline_plan_deterministic) {
    pipit_program *p[2] = {NULL, NULL};
    pipit_graph *g[2];
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_ZB_H1, 4, 1, 5, &sch));
    for (int k = 0; k < 2; k++) {
        pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, 4, PIPIT_F32};
        g[k] = pipit_graph_new();
        pipit_val loss = pipit_gpt2_build(g[k], &c);
        ASSERT_OK(pipit_compile(g[k], loss, &(pipit_options){.schedule = sch, .microbatches = 5}, &p[k]));
    }
    for (int r = 0; r < 4; r++) {
        const pipit__rank_plan *a = &p[0]->plan.ranks[r], *b = &p[1]->plan.ranks[r];
        ASSERT_EQ_I64(a->n, b->n);
        ASSERT_EQ_I64(a->arena_bytes, b->arena_bytes);
        for (int32_t i = 0; i < a->n; i++) {
            int nuses = a->ins[i].srcs ? p[0]->plan.params[a->ins[i].param].nuses : 0;
            ASSERT_TRUE(same_instr(&a->ins[i], &b->ins[i], nuses));
        }
    }
    for (int k = 0; k < 2; k++) {
        pipit_program_free(p[k]);
        pipit_graph_free(g[k]);
    }
    pipit_schedule_free(sch);
}
