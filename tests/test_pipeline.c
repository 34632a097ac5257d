/*
 * test_pipeline.c — the pipelined step equals the sequential one, bit for
 * bit: for every built-in schedule x P x M (x V) x remat (none, full,
 * pointwise), a tiny GPT-2 is trained 3 AdamW steps and every gradient of the first step and every
 * parameter after the last are compared with memcmp against the
 * single-rank run of the unstaged graph; the same in bf16 (mixed
 * precision), for the general op set, for graphs whose values are read
 * across several stages, and for random graphs with yields anywhere. Plus
 * rank-failure propagation and the schedule/graph mismatch errors.
 */
#include <string.h>

#include "pipit_gpt2.h"
#include "pipit_llama.h"
#include "pipit_partition.h"
#include "backend/cpu/kernels.h"
#include "runtime/program.h"
#include "schedule/schedule.h"
#include "gpt2_feeds.h"
#include "test.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

enum { TV = 64, TT = 8, TL = 8, TH = 2, TC = 16, TB = 2 };

typedef struct {
    int n;
    char **names;
    float **data; /* the params after the last step */
    float **grad; /* the gradients of the first step */
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
    pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, stages, PIPIT_F32, 0};
    return pipit_gpt2_build(g, &c);
}
static void gpt2_init(pipit_program *p) {
    pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, 1, PIPIT_F32, 0};
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
    snap->n = pipit_program_num_params(p);
    snap->names = calloc((size_t)snap->n, sizeof(char *));
    snap->data = calloc((size_t)snap->n, sizeof(float *));
    snap->grad = calloc((size_t)snap->n, sizeof(float *));
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
        snap->grad[i] = malloc(snap->bytes[i]);
    }
    int32_t *buf = malloc(sizeof(int32_t) * 3 * TB * TT * (size_t)M);
    pipit_feed *feeds = malloc(sizeof(pipit_feed) * 3 * (size_t)M);
    for (int step = 0; step < 3 && !s; step++) {
        md->fill(M, step, buf, feeds);
        pipit_metrics met;
        s = pipit_step(p, feeds, md->nfeeds, 1, &met);
        snap->losses[step] = met.loss;
        for (int i = 0; i < snap->n && step == 0 && !s; i++)
            s = pipit_program_get_grad(p, snap->names[i], snap->grad[i], snap->bytes[i]);
    }
    for (int i = 0; i < snap->n && !s; i++) s = pipit_program_get_param(p, snap->names[i], snap->data[i], snap->bytes[i]);
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
        free(s->grad[i]);
    }
    free(s->names);
    free(s->data);
    free(s->grad);
    free(s->bytes);
    memset(s, 0, sizeof *s);
}

/* Index of the first parameter whose first-step gradient or final value
 * differs from ref's (by name), or -1. A gradient may differ in bits the
 * update then rounds away: both are compared. */
static int first_diff(const snapshot *ref, const snapshot *got, const char *what) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < got->n; i++) {
            int j = 0;
            while (j < ref->n && strcmp(ref->names[j], got->names[i])) j++;
            const float *a = j == ref->n ? NULL : pass ? ref->data[j] : ref->grad[j];
            const float *b = pass ? got->data[i] : got->grad[i];
            if (!a || memcmp(a, b, got->bytes[i]) == 0) continue;
            size_t n = got->bytes[i] / 4;
            for (size_t k = 0; k < n; k++)
                if (memcmp(&a[k], &b[k], 4)) {
                    fprintf(stderr, "%s: %s %s[%zu]: sequential %.9g, pipelined %.9g\n", what,
                            pass ? "param" : "gradient of", got->names[i], k, a[k], b[k]);
                    break;
                }
            return i;
        }
    return -1;
}

/* Every built-in schedule x V x remat at P ranks and M microbatches: the
 * same bits as the sequential run. Returns the failures; counts the runs
 * per kind in ran_kind. */
static int equivalence_at(const model *md, int P, int M, int *ran_kind) {
    int failures = 0;
    snapshot ref = {0};
    if (train3(md, 1, NULL, M, 0, &ref)) {
        fprintf(stderr, "sequential M=%d failed: %s\n", M, pipit_errmsg());
        snap_free(&ref);
        return 1;
    }
    for (int kind = 0; kind < PIPIT_SCHED_COUNT; kind++) {
        for (int V = 1; V <= 2; V++) {
            pipit_schedule *sch = NULL;
            if (pipit_schedule_build((pipit_schedule_kind)kind, P, V, M, &sch)) continue;
            if (sch->V != V) { /* the kind fixed its own V */
                pipit_schedule_free(sch);
                continue;
            }
            for (int remat = 0; remat <= PIPIT_REMAT_POINTWISE; remat++) {
                snapshot got = {0};
                char what[128];
                snprintf(what, sizeof what, "%s P=%d V=%d M=%d remat=%d",
                         pipit_schedule_kind_name((pipit_schedule_kind)kind), P, V, M, remat);
                pipit_status s = train3(md, P * V, sch, M, remat, &got);
                ran_kind[kind]++;
                if (s) {
                    fprintf(stderr, "%s: %s\n", what, pipit_errmsg());
                    failures++;
                } else if (first_diff(&ref, &got, what) >= 0 || memcmp(ref.losses, got.losses, sizeof ref.losses)) {
                    failures++;
                }
                snap_free(&got);
            }
            pipit_schedule_free(sch);
        }
    }
    snap_free(&ref);
    return failures;
}

/* The runs of every kind, and a failure for each kind that never ran. */
static int report_kinds(const int *ran_kind) {
    int ran = 0, failures = 0;
    for (int k = 0; k < PIPIT_SCHED_COUNT; k++) {
        ran += ran_kind[k];
        if (!ran_kind[k]) {
            fprintf(stderr, "schedule %s never ran\n", pipit_schedule_kind_name((pipit_schedule_kind)k));
            failures++;
        }
    }
    fprintf(stderr, "%d pipelined configurations compared\n", ran);
    return failures;
}

/* Every built-in schedule x P (x V) x remat for the microbatch counts Ms
 * (of P: M = P, 2P, 2P + 1): the same bits as the sequential run. */
static int equivalence_matrix(const model *md, const int *Ps, int nP, int nM) {
    int failures = 0;
    int ran_kind[PIPIT_SCHED_COUNT] = {0};
    for (int M0 = 0; M0 < nM; M0++)
        for (int pi = 0; pi < nP; pi++) {
            int P = Ps[pi];
            /* 2P: several rounds of interleaved-zb (it refuses 2P+1) */
            int M = M0 == 0 ? 2 * P : M0 == 1 ? P : 2 * P + 1;
            failures += equivalence_at(md, P, M, ran_kind);
        }
    return failures + report_kinds(ran_kind);
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
static int hf_fused_head; /* pipeline_equivalence_fused_head: the models' fused head */
static pipit_llama_config hf_llama_cfg(int stages, int tied) {
    return (pipit_llama_config){.vocab = LV, .max_ctx = LT, .ctx = LT, .layers = 8, .heads = 4, .kv_heads = 2,
                                .dim = LC, .ffn_hidden = LF, .norm_eps = 1e-5, .rope_theta = 500, .tied = tied,
                                .batch = LB, .stages = stages, .dtype = PIPIT_F32, .fused_head = hf_fused_head};
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

/* The fused LM head (fused_head 1) keeps the guarantee: its microbatch-0
 * dW written straight into the accumulator (tied) or the gradient block
 * (untied) and the partials in the bytes before it give the sequential
 * run's bits at every schedule x P x V x remat, in f32 and in bf16. */
PIPIT_TEST(pipeline_equivalence_fused_head) {
    static const int Ps[] = {2, 4}, P2[] = {2};
    hf_fused_head = 1;
    int tied = equivalence_matrix(&hf_llama_tied, Ps, 2, 1), untied = equivalence_matrix(&hf_llama_untied, P2, 1, 1);
    matrix_dtype = PIPIT_BF16;
    int bf16 = equivalence_matrix(&hf_llama_untied, P2, 1, 1);
    matrix_dtype = PIPIT_F32;
    hf_fused_head = 0;
    ASSERT_EQ_I64(tied, 0);
    ASSERT_EQ_I64(untied, 0);
    ASSERT_EQ_I64(bf16, 0);
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

/* The same matrix with the bf16 GEMMs through oneDNN, where this CPU's
 * default is another kind (pipit's pairs kernel on AVX512-BF16 without
 * AMX): every way a bf16 GEMM can run keeps the guarantee. */
PIPIT_TEST(pipeline_equivalence_bf16_onednn) {
    if (pipit__onednn_bf16_why_not()) {
        printf("oneDNN has no bf16 matmul here (%s): the default kind ran the matrix\n", pipit__onednn_bf16_why_not());
        return;
    }
    static const int Ps[] = {2, 4};
    pipit__gemm_bf16_set_kind(4);
    matrix_dtype = PIPIT_BF16;
    int gpt2 = equivalence_matrix(&gpt2_model, Ps, 2, 1), llama = equivalence_matrix(&hf_llama_tied, Ps, 2, 1);
    matrix_dtype = PIPIT_F32;
    pipit__gemm_bf16_set_kind(0);
    ASSERT_EQ_I64(gpt2, 0);
    ASSERT_EQ_I64(llama, 0);
}

/* Values read across several stages, from the general op set: a slice of a
 * parameter (a view) read by the first and the last stage, a softmax of a
 * value made two stages before its reader, a concat of values from three
 * stages, built where the last of them has just been yielded on (so that
 * value has readers on both sides of its yield, in graph order: a direct
 * one before the yield's), a gather whose index (the tokens) is read in
 * stage 0 and in the last stage, attention_qkv and RoPE. Eight units; the
 * yields split them evenly into any S of 1, 2, 3, 4, 6, 8 stages. */
enum { XV = 24, XT = 4, XB = 2, XC = 8, XH = 2, XD = 4, XU = 8 };

static pipit_val xparam(pipit_graph *g, const char *what, int u, int nd, const int64_t *shape) {
    char name[64];
    snprintf(name, sizeof name, "u%d.%s", u, what);
    return pipit_param(g, name, PIPIT_F32, nd, shape);
}

static pipit_val xattn(pipit_graph *g, pipit_val x, int u) {
    pipit_val h = pipit_rmsnorm(g, x, xparam(g, "ln", u, 1, SH(XC)), 1e-5);
    pipit_val q = pipit_rope(g, pipit_matmul(g, h, xparam(g, "wq", u, 2, SH(XC, XH * XD)), 0, 0), XH, 100.0);
    pipit_val k = pipit_rope(g, pipit_matmul(g, h, xparam(g, "wk", u, 2, SH(XC, XH * XD)), 0, 0), XH, 100.0);
    pipit_val v = pipit_matmul(g, h, xparam(g, "wv", u, 2, SH(XC, XH * XD)), 0, 0);
    pipit_val a = pipit_attention_qkv(g, q, k, v, &(pipit_attention_opts){XH, XH, 1, 0});
    return pipit_add(g, x, pipit_matmul(g, a, xparam(g, "wo", u, 2, SH(XH * XD, XC)), 0, 0));
}

static pipit_val xmlp(pipit_graph *g, pipit_val x, int u) {
    pipit_val h = pipit_tanh(g, pipit_matmul(g, x, xparam(g, "w1", u, 2, SH(XC, 2 * XC)), 0, 0));
    return pipit_add(g, x, pipit_matmul(g, h, xparam(g, "w2", u, 2, SH(2 * XC, XC)), 0, 0));
}

static pipit_val mixed_build(pipit_graph *g, int stages) {
    pipit_val tok = pipit_input(g, "tokens", PIPIT_I32, 2, SH(XB, XT));
    pipit_val tgt = pipit_input(g, "targets", PIPIT_I32, 2, SH(XB, XT));
    pipit_val wte = pipit_param(g, "wte", PIPIT_F32, 2, SH(XV, XC));
    pipit_val big = pipit_param(g, "big", PIPIT_F32, 2, SH(2 * XC, XC));
    pipit_val ws = pipit_slice(g, big, 0, XC, XC); /* rows XC..2XC: a view */
    pipit_val x = pipit_gather(g, wte, tok), hs[XU];
    for (int u = 0; u < XU; u++) {
        pipit_val cat = {0};
        if (u == 6) { /* values of three stages, read before the yielded one's readers */
            pipit_val three[3] = {hs[1], hs[3], hs[5]};
            cat = pipit_concat(g, 3, three, -1);
        }
        x = u % 2 ? xmlp(g, x, u) : xattn(g, x, u);
        if (u == 0 || u == 7) x = pipit_add(g, x, pipit_matmul(g, x, ws, 0, 0));
        if (u == 4) x = pipit_add(g, x, pipit_mul(g, x, pipit_softmax(g, hs[1])));
        if (u == 6) x = pipit_add(g, x, pipit_matmul(g, cat, xparam(g, "wc", u, 2, SH(3 * XC, XC)), 0, 0));
        hs[u] = x;
        if (u + 1 < XU && (u + 1) * stages % XU < stages) x = pipit_yield(g, x); /* even cuts */
    }
    pipit_val logits = pipit_matmul_nt(g, pipit_rmsnorm(g, x, pipit_param(g, "lnf", PIPIT_F32, 1, SH(XC)), 1e-5), wte);
    logits = pipit_add(g, logits, pipit_gather(g, pipit_param(g, "tab", PIPIT_F32, 2, SH(XV, XV)), tok));
    return pipit_xent_mean(g, logits, tgt);
}

static void mixed_feeds(int M, int step, int32_t *buf, pipit_feed *feeds) {
    for (int m = 0; m < M; m++) {
        int32_t *tok = buf + (size_t)m * 2 * XB * XT, *tgt = tok + XB * XT;
        for (int i = 0; i < XB * XT; i++) {
            tok[i] = (step * 131 + m * 17 + i * 7 + (i * i) % 5) % XV;
            tgt[i] = (tok[i] * 5 + 3) % XV;
        }
        size_t nb = sizeof(int32_t) * (size_t)(XB * XT);
        feeds[2 * m] = (pipit_feed){"tokens", tok, nb};
        feeds[2 * m + 1] = (pipit_feed){"targets", tgt, nb};
    }
}
static const model mixed_model = {mixed_build, llama_init, 2, mixed_feeds};

/* 4 to 8 stages (P x V = 4, 6, 8) and M >= 4 microbatches, every schedule
 * x remat: gradients and parameters bit for bit the one-rank run's. Before
 * autodiff kept a yield out of the summation order, the residual hs[5]'s
 * gradient was (its yield's readers, summed in the next stage) + the
 * concat's, where one rank adds concat + readers: the stage-0 gradients
 * differed in the last bits at 4+ stages. */
PIPIT_TEST(pipeline_equivalence_cross_stage_reads) {
    static const int PM[][2] = {{2, 4}, {4, 4}, {3, 6}, {4, 5}};
    int failures = 0, ran_kind[PIPIT_SCHED_COUNT] = {0};
    for (int i = 0; i < 4; i++) failures += equivalence_at(&mixed_model, PM[i][0], PM[i][1], ran_kind);
    ASSERT_EQ_I64(failures + report_kinds(ran_kind), 0);
}

/* Random graphs of the general op set, the same ops in the same order for
 * every stage count; a staged build adds the yields: the even cuts of the
 * residual stream, and, at random, chains of yields carrying a value read
 * in a later stage (where the unstaged build reads it directly). So values
 * are read directly and through yields, by readers interleaved in any
 * order, across up to all stages. */
enum { RV = 16, RT = 4, RB = 2, RC = 8, RH = 2, RU = 8, RPOOL = 40 };

typedef struct {
    pipit_graph *g;
    uint32_t rng;
    int stages, nparams, np;
    pipit_val pool[RPOOL];
    int pool_stage[RPOOL]; /* its stage by data flow; -1: not staged (placed at its first use) */
} rgraph;

static int rg_next(rgraph *r, int n) {
    r->rng = r->rng * 1664525u + 1013904223u;
    return (int)((r->rng >> 8) % (uint32_t)n);
}

static pipit_val rg_param(rgraph *r, int nd, const int64_t *shape) {
    char name[32];
    snprintf(name, sizeof name, "r%03d", r->nparams++);
    return pipit_param(r->g, name, PIPIT_F32, nd, shape);
}

/* A value of the pool for a reader in stage cur; *st: the max of its stage
 * and *st. In a staged graph, a value of an earlier stage is sometimes
 * carried by 1 or 2 yields (the same draws in every build). */
static pipit_val rg_pick(rgraph *r, int cur, int *st) {
    int k = rg_next(r, r->np), hops = rg_next(r, 4) - 1;
    pipit_val v = r->pool[k];
    int s = r->pool_stage[k];
    for (int h = 0; r->stages > 1 && h < hops && PIPIT_MAX(s, 0) < cur; h++) {
        v = pipit_yield(r->g, v);
        s = PIPIT_MAX(s, 0) + 1;
    }
    *st = PIPIT_MAX(*st, s);
    return v;
}

/* A slice of the shared param for a reader in stage cur: in a staged
 * graph, sometimes carried there by yields (a yield of a pre-loop value). */
static pipit_val rg_shared(rgraph *r, const pipit_val *shared, int k, int cur, int *st) {
    pipit_val v = shared[k];
    int hops = rg_next(r, 4) - 1, s = -1;
    for (int h = 0; r->stages > 1 && h < hops && PIPIT_MAX(s, 0) < cur; h++) {
        v = pipit_yield(r->g, v);
        s = PIPIT_MAX(s, 0) + 1;
    }
    *st = PIPIT_MAX(*st, s);
    return v;
}

static void rg_keep(rgraph *r, pipit_val v, int st) {
    if (r->np == RPOOL) r->np = RPOOL / 2; /* the older half stays */
    r->pool[r->np] = v;
    r->pool_stage[r->np++] = st;
}

static uint32_t rgraph_seed;

static pipit_val rgraph_build(pipit_graph *g, int stages) {
    rgraph r = {.g = g, .rng = rgraph_seed, .stages = stages};
    pipit_val tok = pipit_input(g, "tokens", PIPIT_I32, 2, SH(RB, RT));
    pipit_val tgt = pipit_input(g, "targets", PIPIT_I32, 2, SH(RB, RT));
    pipit_val wte = pipit_param(g, "wte", PIPIT_F32, 2, SH(RV, RC));
    pipit_val big = pipit_param(g, "big", PIPIT_F32, 2, SH(2 * RC, 2 * RC));
    pipit_val shared[3] = {
        pipit_slice(g, big, 0, RC, RC),                           /* [C, 2C], a view */
        pipit_slice(g, pipit_slice(g, big, 0, 0, RC), 1, 3, RC),  /* [C, C], a copy */
        pipit_slice(g, big, 1, 1, RC),                            /* [2C, C], a copy */
    };
    pipit_val x = pipit_gather(g, wte, tok);
    int xs = -1, cur = 0; /* x's stage; the stage being built */
    rg_keep(&r, x, xs);
    for (int u = 0; u < RU; u++) {
        for (int o = 1 + rg_next(&r, 3); o > 0; o--) {
            int st = -1;
            pipit_val a = rg_pick(&r, cur, &st), y;
            switch (rg_next(&r, 8)) {
            case 0: y = pipit_matmul(g, a, rg_shared(&r, shared, 1, cur, &st), 0, 0); break;
            case 1: {
                pipit_val h = pipit_matmul(g, a, rg_shared(&r, shared, 0, cur, &st), 0, 0);
                y = pipit_matmul(g, h, rg_shared(&r, shared, 2, cur, &st), 0, 0);
                break;
            }
            case 2: y = pipit_softmax(g, a); break;
            case 3: {
                pipit_val three[3] = {a, rg_pick(&r, cur, &st), rg_pick(&r, cur, &st)};
                y = pipit_matmul(g, pipit_concat(g, 3, three, -1), rg_param(&r, 2, SH(3 * RC, RC)), 0, 0);
                break;
            }
            case 4: {
                pipit_val q = pipit_rope(g, pipit_matmul(g, a, rg_param(&r, 2, SH(RC, RC)), 0, 0), RH, 100.0);
                pipit_val k = pipit_rope(g, pipit_matmul(g, rg_pick(&r, cur, &st), shared[1], 0, 0), RH, 100.0);
                pipit_val v = pipit_matmul(g, rg_pick(&r, cur, &st), rg_param(&r, 2, SH(RC, RC)), 0, 0);
                y = pipit_attention_qkv(g, q, k, v, &(pipit_attention_opts){RH, RH, 1, 0});
                break;
            }
            case 5: y = pipit_mul(g, pipit_gather(g, rg_next(&r, 2) ? wte : rg_param(&r, 2, SH(RV, RC)), tok), a); break;
            case 6: y = pipit_tanh(g, pipit_matmul(g, a, rg_param(&r, 2, SH(RC, RC)), 0, 0)); break;
            default: y = pipit_mul(g, a, rg_pick(&r, cur, &st)); break;
            }
            x = pipit_add(g, x, y);
            xs = PIPIT_MAX(xs, st);
            rg_keep(&r, y, st);
        }
        rg_keep(&r, x, xs);
        if (u + 1 < RU && (u + 1) * stages % RU < stages) {
            x = pipit_yield(g, x);
            xs = cur = PIPIT_MAX(xs, 0) + 1;
        }
    }
    pipit_val logits = pipit_matmul_nt(g, pipit_rmsnorm(g, x, pipit_param(g, "lnf", PIPIT_F32, 1, SH(RC)), 1e-5), wte);
    return pipit_xent_mean(g, logits, tgt);
}

static void rgraph_feeds(int M, int step, int32_t *buf, pipit_feed *feeds) {
    for (int m = 0; m < M; m++) {
        int32_t *tok = buf + (size_t)m * 2 * RB * RT, *tgt = tok + RB * RT;
        for (int i = 0; i < RB * RT; i++) {
            tok[i] = (step * 131 + m * 17 + i * 7 + (i * i) % 5) % RV;
            tgt[i] = (tok[i] * 3 + 1) % RV;
        }
        size_t nb = sizeof(int32_t) * (size_t)(RB * RT);
        feeds[2 * m] = (pipit_feed){"tokens", tok, nb};
        feeds[2 * m + 1] = (pipit_feed){"targets", tgt, nb};
    }
}

/* One step (no update) of the random graph of rgraph_seed: 0 and the
 * loss and every gradient in snap, or a status. */
static pipit_status rgraph_grads(int stages, pipit_schedule *sch, int M, snapshot *snap) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = rgraph_build(g, stages);
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = M}, &p);
    if (s) {
        pipit_graph_free(g);
        return s;
    }
    llama_init(p);
    snap->n = pipit_program_num_params(p);
    snap->names = calloc((size_t)snap->n, sizeof(char *));
    snap->data = calloc((size_t)snap->n, sizeof(float *));
    snap->grad = calloc((size_t)snap->n, sizeof(float *));
    snap->bytes = calloc((size_t)snap->n, sizeof(size_t));
    int32_t *buf = malloc(sizeof(int32_t) * 2 * RB * RT * (size_t)M);
    pipit_feed *feeds = malloc(sizeof(pipit_feed) * 2 * (size_t)M);
    rgraph_feeds(M, 0, buf, feeds);
    pipit_metrics met;
    s = pipit_step(p, feeds, 2, 0, &met);
    snap->losses[0] = met.loss;
    for (int i = 0; i < snap->n && !s; i++) {
        int64_t n = 0;
        snap->names[i] = strdup(pipit_program_param_name(p, i));
        pipit_program_param_numel(p, snap->names[i], &n);
        snap->bytes[i] = sizeof(float) * (size_t)n;
        snap->data[i] = calloc(1, snap->bytes[i]);
        snap->grad[i] = malloc(snap->bytes[i]);
        s = pipit_program_get_grad(p, snap->names[i], snap->grad[i], snap->bytes[i]);
    }
    free(buf);
    free(feeds);
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

/* 24 random graphs x every schedule at 4 stages (P x V = 4 x 1 and 2 x 2),
 * M = 4 or 5: every gradient of one step bit for bit the one-rank run's of
 * the graph without yields. */
PIPIT_TEST(pipeline_equivalence_random_yields) {
    int failures = 0, ran_kind[PIPIT_SCHED_COUNT] = {0};
    for (uint32_t seed = 1; seed <= 24; seed++) {
        rgraph_seed = seed;
        int M = 4 + (int)(seed % 2);
        snapshot ref = {0};
        if (rgraph_grads(1, NULL, M, &ref)) {
            fprintf(stderr, "graph %u, one rank: %s\n", seed, pipit_errmsg());
            failures++;
            snap_free(&ref);
            continue;
        }
        for (int kind = 0; kind < PIPIT_SCHED_COUNT; kind++)
            for (int P = 2; P <= 4; P += 2) {
                pipit_schedule *sch = NULL;
                if (pipit_schedule_build((pipit_schedule_kind)kind, P, 4 / P, M, &sch)) continue;
                if (sch->V != 4 / P) {
                    pipit_schedule_free(sch);
                    continue;
                }
                char what[128];
                snprintf(what, sizeof what, "graph %u, %s P=%d V=%d M=%d", seed,
                         pipit_schedule_kind_name((pipit_schedule_kind)kind), P, 4 / P, M);
                snapshot got = {0};
                pipit_status s = rgraph_grads(4, sch, M, &got);
                ran_kind[kind]++;
                if (s) {
                    fprintf(stderr, "%s: %s\n", what, pipit_errmsg());
                    failures++;
                } else if (first_diff(&ref, &got, what) >= 0 || memcmp(&ref.losses[0], &got.losses[0], sizeof(double))) {
                    failures++;
                }
                snap_free(&got);
                pipit_schedule_free(sch);
            }
        snap_free(&ref);
    }
    ASSERT_EQ_I64(failures + report_kinds(ran_kind), 0);
}

PIPIT_TEST(pipeline_rank_failure_stops_all) {
    pipit_gpt2_config c = {TV, TT, TT, 4, TH, TC, TB, 4, PIPIT_F32, 0};
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
    pipit_gpt2_config c = {TV, TT, TT, 4, TH, TC, TB, 3, PIPIT_F32, 0};
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
        pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, 4, PIPIT_F32, 0};
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
