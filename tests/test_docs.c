/*
 * test_docs.c — packed documents (pipit_attention_docs, op attention_doc):
 * the masked attention against a direct evaluation written out here (each
 * query softmaxed over the keys of its own document, not later), one
 * document per sequence bit for bit pipit_attention, and a fed sequence of
 * document ids that decreases refused by pipit_step. The gradients are
 * checked against finite differences in test_ops.c (op cases
 * attention_doc*), CPU vs CUDA in tests/cuda/test_cuda_ops.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_llama.h"
#include "test.h"

enum { B = 2, T = 9, HQ = 4, HKV = 2, D = 3, W = (HQ + 2 * HKV) * D };

static const int32_t docs[B * T] = {0, 0, 0, 1, 1, 2, 2, 2, 2, /* */ 5, 5, 5, 5, 5, 5, 7, 7, 8};

/* loss = sum(attention_docs(qkv, doc) * R), qkv a param; *gp the graph
 * (the program borrows its names: freed after the program). */
static pipit_program *doc_program(int causal, pipit_graph **gp) {
    pipit_graph *g = *gp = pipit_graph_new();
    pipit_val qkv = pipit_param(g, "qkv", PIPIT_F64, 3, (int64_t[]){B, T, W});
    pipit_val doc = pipit_input(g, "doc", PIPIT_I32, 2, (int64_t[]){B, T});
    pipit_val y = pipit_attention_docs(g, qkv, doc, &(pipit_attention_opts){HQ, HKV, causal, 0});
    pipit_val r = pipit_input(g, "R", PIPIT_F64, 3, (int64_t[]){B, T, HQ * D});
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(g, pipit_sum(g, pipit_mul(g, y, r)), &(pipit_options){.microbatches = 1}, &p);
    return s ? NULL : p;
}

PIPIT_TEST(docs_attention_matches_direct) {
    static double x[B * T * W], rv[B * T * HQ * D];
    for (int i = 0; i < B * T * W; i++) x[i] = sin(0.37 * i + 0.1);
    for (int i = 0; i < B * T * HQ * D; i++) rv[i] = cos(0.23 * i);
    for (int causal = 0; causal < 2; causal++) {
        pipit_graph *g;
        pipit_program *p = doc_program(causal, &g);
        ASSERT_TRUE(p != NULL);
        ASSERT_OK(pipit_program_set_param(p, "qkv", x, sizeof x));
        pipit_metrics met;
        ASSERT_OK(pipit_step(p, (pipit_feed[]){{"doc", docs, sizeof docs}, {"R", rv, sizeof rv}}, 2, 0, &met));
        /* the direct evaluation: query (b,t,h) over keys s of its document
         * (s <= t when causal), kv head h / (HQ/HKV), scale 1/sqrt(D) */
        double want = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < HQ; h++) {
                    const double *q = x + (b * T + t) * W + h * D;
                    int gk = HQ * D + h / (HQ / HKV) * D, gv = (HQ + HKV) * D + h / (HQ / HKV) * D;
                    double sc[T], m = -INFINITY, l = 0;
                    for (int s = 0; s < T; s++) {
                        int vis = docs[b * T + s] == docs[b * T + t] && (!causal || s <= t);
                        sc[s] = -INFINITY;
                        if (!vis) continue;
                        double dot = 0;
                        for (int d = 0; d < D; d++) dot += q[d] * x[(b * T + s) * W + gk + d];
                        sc[s] = dot / sqrt((double)D);
                        if (sc[s] > m) m = sc[s];
                    }
                    for (int s = 0; s < T; s++) l += sc[s] == -INFINITY ? 0 : exp(sc[s] - m);
                    for (int d = 0; d < D; d++) {
                        double o = 0;
                        for (int s = 0; s < T; s++)
                            if (sc[s] != -INFINITY) o += exp(sc[s] - m) / l * x[(b * T + s) * W + gv + d];
                        want += o * rv[(b * T + t) * HQ * D + h * D + d];
                    }
                }
        ASSERT_NEAR_F64(met.loss, want, 1e-12 * (1 + fabs(want)));
        pipit_program_free(p);
        pipit_graph_free(g);
    }
}

/* One document per sequence is causal attention: pipit_attention's bits
 * (GPT-2's packed qkv, f32), loss and gradient. */
PIPIT_TEST(docs_one_document_is_attention_bitwise) {
    enum { C = 2 * 8, H = 2, TT = 37 };
    static float x[B * TT * 3 * C], rv[B * TT * C], g1[B * TT * 3 * C], g2[B * TT * 3 * C];
    static int32_t zero[B * TT];
    for (int i = 0; i < B * TT * 3 * C; i++) x[i] = (float)sin(0.11 * i);
    for (int i = 0; i < B * TT * C; i++) rv[i] = (float)cos(0.07 * i);
    float loss[2];
    for (int with_doc = 0; with_doc < 2; with_doc++) {
        pipit_graph *g = pipit_graph_new();
        pipit_val qkv = pipit_param(g, "qkv", PIPIT_F32, 3, (int64_t[]){B, TT, 3 * C});
        pipit_val y = with_doc ? pipit_attention_docs(g, qkv, pipit_input(g, "doc", PIPIT_I32, 2, (int64_t[]){B, TT}),
                                                      &(pipit_attention_opts){H, H, 1, 0})
                               : pipit_attention(g, qkv, H);
        pipit_val r = pipit_input(g, "R", PIPIT_F32, 3, (int64_t[]){B, TT, C});
        pipit_program *p = NULL;
        ASSERT_OK(pipit_compile(g, pipit_sum(g, pipit_mul(g, y, r)), &(pipit_options){.microbatches = 1}, &p));
        ASSERT_OK(pipit_program_set_param(p, "qkv", x, sizeof x));
        pipit_metrics met;
        pipit_feed f[2] = {{"R", rv, sizeof rv}, {"doc", zero, sizeof zero}};
        ASSERT_OK(pipit_step(p, f, 1 + with_doc, 0, &met));
        loss[with_doc] = (float)met.loss;
        ASSERT_OK(pipit_program_get_grad(p, "qkv", with_doc ? g2 : g1, sizeof g1));
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    ASSERT_TRUE(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0);
    ASSERT_TRUE(memcmp(g1, g2, sizeof g1) == 0);
}

PIPIT_TEST(docs_decreasing_ids_refused) {
    pipit_graph *g;
    pipit_program *p = doc_program(1, &g);
    ASSERT_TRUE(p != NULL);
    static double rv[B * T * HQ * D];
    int32_t bad[B * T];
    memcpy(bad, docs, sizeof bad);
    bad[T + 4] = 3; /* sequence 1: 5 5 5 5 3 ... */
    pipit_metrics met;
    ASSERT_STATUS(pipit_step(p, (pipit_feed[]){{"doc", bad, sizeof bad}, {"R", rv, sizeof rv}}, 2, 0, &met),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("input 'doc'");
    ASSERT_MSG_HAS("sequence 1, position 4 (3 after 5)");
    ASSERT_MSG_HAS("non-decreasing");
    /* a new sequence may start lower: row boundaries are not a decrease */
    ASSERT_OK(pipit_step(p, (pipit_feed[]){{"doc", docs, sizeof docs}, {"R", rv, sizeof rv}}, 2, 0, &met));
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* The shape rule's refusals. */
PIPIT_TEST(docs_bad_shapes_refused) {
    pipit_graph *g = pipit_graph_new();
    pipit_val qkv = pipit_param(g, "qkv", PIPIT_F32, 3, (int64_t[]){B, T, 4 * 3});
    pipit_attention_docs(g, qkv, pipit_input(g, "d", PIPIT_I32, 2, (int64_t[]){B, T + 1}),
                         &(pipit_attention_opts){2, 1, 1, 0});
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("document ids must be i32");
    pipit_graph_free(g);
    g = pipit_graph_new();
    qkv = pipit_param(g, "qkv", PIPIT_F32, 3, (int64_t[]){B, T, 10});
    pipit_attention_docs(g, qkv, pipit_input(g, "d", PIPIT_I32, 2, (int64_t[]){B, T}),
                         &(pipit_attention_opts){2, 1, 1, 0});
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("must divide qkv's last axis");
    pipit_graph_free(g);
    g = pipit_graph_new();
    pipit_attention_docs(g, pipit_param(g, "x", PIPIT_F32, 3, (int64_t[]){B, T, 12}),
                         pipit_input(g, "d", PIPIT_I32, 2, (int64_t[]){B, T}), NULL);
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options are NULL");
    pipit_graph_free(g);
}

/* ------------------------------------------------------------ the models */

/* Tiny GPT-2 and Llama in f64: V 13, 2 layers, 2 heads (Llama: 1 kv head)
 * of 4, batch 1. A packed sequence of T = 12 holds documents of 5, 4 and 3
 * tokens. */
enum { MV = 13, MT = 12, NDOC = 3 };
static const int doc_len[NDOC] = {5, 4, 3};

static pipit_program *model_program(int llama, int ctx, int packed, int stages, int M, pipit_graph **gp) {
    pipit_graph *g = *gp = pipit_graph_new();
    if (packed && pipit_graph_set_documents(g, 1)) return NULL;
    pipit_val loss;
    if (llama) {
        pipit_llama_config c = {.vocab = MV, .max_ctx = 16, .ctx = ctx, .layers = 2, .heads = 2, .kv_heads = 1,
                                .dim = 8, .ffn_hidden = 12, .multiple_of = 1, .norm_eps = 1e-5,
                                .rope_theta = 10000, .batch = 1, .stages = stages, .dtype = PIPIT_F64};
        loss = pipit_llama_build(g, &c);
    } else {
        pipit_gpt2_config c = {.vocab = MV, .max_ctx = 16, .ctx = ctx, .layers = 2, .heads = 2, .dim = 8,
                               .batch = 1, .stages = stages, .dtype = PIPIT_F64};
        loss = pipit_gpt2_build(g, &c);
    }
    pipit_program *p = NULL;
    pipit_schedule *sch = NULL; /* 2 stages: 1F1B on 2 ranks */
    if (stages > 1 && pipit_schedule_build(PIPIT_SCHED_1F1B, stages, 1, M, &sch)) return NULL;
    pipit_status s = pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = M}, &p);
    pipit_schedule_free(sch);
    return s ? NULL : p;
}

/* Sets p's params to q's (same names and sizes), or p's to a fixed pattern
 * when q is NULL. */
static int copy_params(pipit_program *p, const pipit_program *q) {
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = 0;
        if (pipit_program_param_numel(p, name, &n)) return 1;
        double *v = malloc(sizeof(double) * (size_t)n);
        if (q) pipit_program_get_param(q, name, v, sizeof(double) * (size_t)n);
        else
            for (int64_t k = 0; k < n; k++) v[k] = 0.3 * sin(1.7 * (double)k + 0.9 * i) + (strstr(name, "norm") ? 1 : 0);
        pipit_status s = pipit_program_set_param(p, name, v, sizeof(double) * (size_t)n);
        free(v);
        if (s) return 1;
    }
    return 0;
}

/* Feeds of M microbatches of one sequence [s0, s0 + ctx) of the packed
 * data: tokens, targets, positions (restarting per document when reset)
 * and document ids (when docs). */
typedef struct {
    int32_t tok[4][MT], tgt[4][MT], pos[4][MT], doc[4][MT];
    pipit_feed f[4 * 4];
    int nfeed; /* per microbatch */
} feeds;
static void make_feeds(feeds *fd, int M, int s0, int ctx, int packed, int reset) {
    fd->nfeed = 0;
    for (int m = 0; m < M; m++) {
        for (int t = 0, d = 0, start = 0; t < MT; t++) {
            if (t - start == doc_len[d]) start = t, d++;
            int g = (s0 + t) % MT;
            fd->tok[m][t] = (int32_t)((g * 7 + 3 + 5 * m) % MV);
            fd->tgt[m][t] = (int32_t)((g * 5 + 1 + 3 * m) % MV);
            fd->pos[m][t] = reset ? t - start : t;
            fd->doc[m][t] = d;
        }
        int k = 0;
        pipit_feed *f = fd->f + m * 4;
        f[k++] = (pipit_feed){"tokens", fd->tok[m], sizeof(int32_t) * (size_t)ctx};
        f[k++] = (pipit_feed){"targets", fd->tgt[m], sizeof(int32_t) * (size_t)ctx};
        f[k++] = (pipit_feed){"positions", fd->pos[m], sizeof(int32_t) * (size_t)ctx};
        if (packed) f[k++] = (pipit_feed){"documents", fd->doc[m], sizeof(int32_t) * (size_t)ctx};
        fd->nfeed = k;
    }
}

/* The loss of a packed sequence is the mean over its T tokens of the
 * per-token losses; with attention masked by document (and, for GPT-2's
 * learned positions, positions restarting per document) each token's loss
 * is the one it has in its document run alone, so
 *     loss(packed) = sum_i (L_i / T) loss(document i alone),
 * each document's loss the mean over its L_i tokens: the token-weighted
 * mean of the documents' losses. The gradients likewise. */
static void packed_equals_documents(int llama) {
    pipit_graph *gp, *gd;
    pipit_program *pk = model_program(llama, MT, 1, 1, 1, &gp);
    ASSERT_TRUE(pk != NULL);
    ASSERT_TRUE(copy_params(pk, NULL) == 0);
    feeds fd;
    make_feeds(&fd, 1, 0, MT, 1, 1);
    pipit_metrics met;
    /* Llama feeds no positions (RoPE): its graph has no such input */
    pipit_feed f[4];
    int nf = 0;
    for (int k = 0; k < fd.nfeed; k++)
        if (!llama || strcmp(fd.f[k].name, "positions")) f[nf++] = fd.f[k];
    ASSERT_OK(pipit_step(pk, f, nf, 0, &met));
    double packed = met.loss, want = 0;
    const char *pname = llama ? "model.layers.0.self_attn.k_proj.weight" : "h.0.attn.c_attn.weight";
    int64_t np = 0;
    ASSERT_OK(pipit_program_param_numel(pk, pname, &np));
    double *gpk = calloc((size_t)np, sizeof(double)), *gw = calloc((size_t)np, sizeof(double)),
           *gi = calloc((size_t)np, sizeof(double));
    ASSERT_OK(pipit_program_get_grad(pk, pname, gpk, sizeof(double) * (size_t)np));
    for (int d = 0, s0 = 0; d < NDOC; s0 += doc_len[d], d++) {
        pipit_program *p1 = model_program(llama, doc_len[d], 0, 1, 1, &gd);
        ASSERT_TRUE(p1 != NULL);
        ASSERT_TRUE(copy_params(p1, pk) == 0);
        feeds f1;
        make_feeds(&f1, 1, s0, doc_len[d], 0, 0);
        nf = 0;
        for (int k = 0; k < f1.nfeed; k++)
            if (!llama || strcmp(f1.f[k].name, "positions")) f[nf++] = f1.f[k];
        ASSERT_OK(pipit_step(p1, f, nf, 0, &met));
        want += (double)doc_len[d] / MT * met.loss;
        ASSERT_OK(pipit_program_get_grad(p1, pname, gi, sizeof(double) * (size_t)np));
        for (int64_t k = 0; k < np; k++) gw[k] += (double)doc_len[d] / MT * gi[k];
        pipit_program_free(p1);
        pipit_graph_free(gd);
    }
    ASSERT_NEAR_F64(packed, want, 1e-12 * (1 + fabs(want)));
    double gmax = 0, emax = 0;
    for (int64_t k = 0; k < np; k++) {
        gmax = fmax(gmax, fabs(gw[k]));
        emax = fmax(emax, fabs(gpk[k] - gw[k]));
    }
    ASSERT_TRUE(gmax > 0 && emax <= 1e-10 * gmax);
    free(gpk);
    free(gw);
    free(gi);
    pipit_program_free(pk);
    pipit_graph_free(gp);
}
PIPIT_TEST(docs_gpt2_packed_equals_documents) { packed_equals_documents(0); }
PIPIT_TEST(docs_llama_packed_equals_documents) { packed_equals_documents(1); }

/* Pipelined (2 stages, 1F1B, 4 microbatches of shifted data) with
 * documents: the loss and every gradient bit for bit the one-rank run's. */
PIPIT_TEST(docs_pipelined_bitwise_one_rank) {
    for (int llama = 0; llama < 2; llama++) {
        pipit_graph *g1, *g2;
        pipit_program *p1 = model_program(llama, MT, 1, 1, 4, &g1);
        pipit_program *p2 = model_program(llama, MT, 1, 2, 4, &g2);
        ASSERT_TRUE(p1 && p2);
        ASSERT_TRUE(copy_params(p1, NULL) == 0 && copy_params(p2, p1) == 0);
        feeds fd;
        make_feeds(&fd, 4, 0, MT, 1, 1);
        for (int m = 0; m < 4; m++) /* other documents per microbatch: shift the ids' boundaries */
            for (int t = 0; t < MT; t++) fd.doc[m][t] = (t + m) / 4;
        pipit_feed f[16];
        int nf = 0;
        for (int m = 0; m < 4; m++)
            for (int k = 0; k < fd.nfeed; k++)
                if (!llama || strcmp(fd.f[m * 4 + k].name, "positions")) f[nf++] = fd.f[m * 4 + k];
        pipit_metrics a, b;
        ASSERT_OK(pipit_step(p1, f, nf / 4, 0, &a));
        ASSERT_OK(pipit_step(p2, f, nf / 4, 0, &b));
        ASSERT_TRUE(memcmp(&a.loss, &b.loss, sizeof a.loss) == 0);
        for (int i = 0; i < pipit_program_num_params(p1); i++) {
            const char *name = pipit_program_param_name(p1, i);
            int64_t n = 0;
            ASSERT_OK(pipit_program_param_numel(p1, name, &n));
            double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
            ASSERT_OK(pipit_program_get_grad(p1, name, x, sizeof(double) * (size_t)n));
            ASSERT_OK(pipit_program_get_grad(p2, name, y, sizeof(double) * (size_t)n));
            int same = memcmp(x, y, sizeof(double) * (size_t)n) == 0;
            free(x);
            free(y);
            if (!same) PIPIT_FAIL_("%s: gradient of '%s' differs between 1 and 2 stages", llama ? "llama" : "gpt2",
                                   name);
        }
        pipit_program_free(p1);
        pipit_program_free(p2);
        pipit_graph_free(g1);
        pipit_graph_free(g2);
    }
}
