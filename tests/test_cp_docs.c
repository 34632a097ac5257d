/*
 * test_cp_docs.c — packed documents under context parallelism at the
 * kernel level (ATTENTION_CP_DOC, ATTN_CP_DOC_D; backend/cpu/cp_doc.c):
 * for C = 2 and 3, the C ranks' outputs assembled (each rank's query rows
 * put back at their global positions, the key/value gradients summed
 * over the ranks as the reduce-scatter does) equal the one-rank packed
 * documents kernel (attention_doc, backend/cpu/attn_doc.c) on the whole
 * sequence, in f64 to 1e-12, forward and backward, causal and not, with
 * GQA, documents that span chunks, start at a chunk's first row, or hold
 * one token; thread count does not change the bits; one document per
 * sequence gives attention_cp's bits (f32); ids that decrease between
 * ranks' chunks fail the kernel with a message, and through a GPT-2
 * program the step (each rank's own ids are checked by pipit_step). And
 * the models: GPT-2 (positions restarted per document) and Llama with
 * packed documents at C = 2, 3 equal C = 1 in f64 (loss and gradients).
 */
#include <string.h>

#include "backend/cpu/attn_doc.h"
#include "backend/cpu/cp.h"
#include "backend/cpu/kernels.h"
#include "ir/cp.h"
#include "pipit_cp.h"
#include "pipit_gpt2.h"
#include "pipit_llama.h"
#include "test.h"

enum { B = 2, HQ = 4, HKV = 2, D = 3, MAXS = 36 };

static double rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2 - 1;
}

static pipit__node node3(pipit_dtype dt, int64_t a, int64_t b, int64_t c) {
    pipit__node n;
    memset(&n, 0, sizeof n);
    n.dtype = (uint8_t)dt, n.ndim = 3, n.shape[0] = a, n.shape[1] = b, n.shape[2] = c;
    return n;
}

/* Ids of sequence b, S tokens: boundaries inside chunks, at a chunk's
 * start, a one-token document, one document over several chunks. */
static void make_docs(int32_t *doc, int64_t S, int64_t L, int b) {
    for (int64_t t = 0; t < S; t++) {
        int32_t id = 0;
        if (b == 0) id = (int32_t)((t >= 2) + (t >= L) + (t >= L + 1) + (t >= 3 * L + 1) + (t >= S - 1));
        else id = (int32_t)(t >= S - L - 1);
        doc[b * S + t] = id;
    }
}

typedef struct {
    int C, causal;
    int64_t L, S;
    double q[B * MAXS * HQ * D], k[B * MAXS * HKV * D], v[B * MAXS * HKV * D], dout[B * MAXS * HQ * D];
    int32_t doc[B * MAXS];
    /* the oracle: attention_doc on the whole sequence */
    double ref[B * MAXS * HQ * D], rdq[B * MAXS * HQ * D], rdk[B * MAXS * HKV * D], rdv[B * MAXS * HKV * D];
} prob;

static void setup(prob *p, int C, int64_t L, int causal, uint64_t seed) {
    p->C = C, p->L = L, p->S = 2 * C * L, p->causal = causal;
    int64_t S = p->S, nq = B * S * HQ * D, nk = B * S * HKV * D;
    for (int64_t i = 0; i < nq; i++) p->q[i] = rnd(&seed), p->dout[i] = rnd(&seed);
    for (int64_t i = 0; i < nk; i++) p->k[i] = rnd(&seed), p->v[i] = rnd(&seed);
    for (int b = 0; b < B; b++) make_docs(p->doc, S, L, b);
    /* packed qkv rows q | k | v for the oracle */
    int64_t ld = (HQ + 2 * HKV) * D;
    static double qkv[B * MAXS * (HQ + 2 * HKV) * D], dqkv[B * MAXS * (HQ + 2 * HKV) * D];
    for (int64_t r = 0; r < B * S; r++) {
        memcpy(qkv + r * ld, p->q + r * HQ * D, sizeof(double) * HQ * D);
        memcpy(qkv + r * ld + HQ * D, p->k + r * HKV * D, sizeof(double) * HKV * D);
        memcpy(qkv + r * ld + (HQ + HKV) * D, p->v + r * HKV * D, sizeof(double) * HKV * D);
    }
    pipit__attn_doc a = {B, S, HQ, HKV, D, causal, 1.0 / sqrt((double)D)};
    pipit__attn_doc_fwd(PIPIT_F64, p->ref, qkv, p->doc, &a, 0, 1);
    pipit__attn_doc_bwd(PIPIT_F64, dqkv, qkv, p->dout, p->doc, &a, 0, 1);
    for (int64_t r = 0; r < B * S; r++) {
        memcpy(p->rdq + r * HQ * D, dqkv + r * ld, sizeof(double) * HQ * D);
        memcpy(p->rdk + r * HKV * D, dqkv + r * ld + HQ * D, sizeof(double) * HKV * D);
        memcpy(p->rdv + r * HKV * D, dqkv + r * ld + (HQ + HKV) * D, sizeof(double) * HKV * D);
    }
}

/* Rank c's forward and backward through the kernels, nth threads run in
 * turn: out [B, 2L, HQ D], grad [dq | dkv]. */
static void run_rank(const prob *p, int c, int nth, double *out, double *grad) {
    int64_t S = p->S, Lc = 2 * p->L, F = HQ * D, K2 = 2 * HKV * D;
    static double ql[B * MAXS * HQ * D], dl[B * MAXS * HQ * D], kv[B * MAXS * 2 * HKV * D];
    for (int b = 0; b < B; b++) {
        ASSERT_OK(pipit_cp_slice(ql + b * Lc * F, p->q + b * S * F, 1, S, sizeof(double) * F, p->C, c));
        ASSERT_OK(pipit_cp_slice(dl + b * Lc * F, p->dout + b * S * F, 1, S, sizeof(double) * F, p->C, c));
    }
    for (int64_t r = 0; r < B * S; r++) {
        memcpy(kv + r * K2, p->k + r * HKV * D, sizeof(double) * HKV * D);
        memcpy(kv + r * K2 + HKV * D, p->v + r * HKV * D, sizeof(double) * HKV * D);
    }
    pipit__node qn = node3(PIPIT_F64, B, Lc, F), kvn = node3(PIPIT_F64, B, S, K2), dn = qn, on = qn, gn;
    pipit__node docn = node3(PIPIT_I32, B, S, 1);
    docn.ndim = 2;
    on.op = PIPIT_OP_ATTENTION_CP_DOC;
    on.fattr[0] = 1.0 / sqrt((double)D);
    on.iattr[0] = HQ, on.iattr[1] = HKV, on.iattr[2] = p->causal, on.iattr[3] = p->C;
    gn = on;
    gn.op = PIPIT_OP_ATTN_CP_DOC_D, gn.ndim = 1, gn.shape[0] = B * Lc * F + B * S * K2;
    pipit__kctx f = {&on, {&qn, &kvn, &docn}, out, {ql, kv, p->doc}, 0, c, 0, 0};
    pipit__kctx g = {&gn, {&qn, &kvn, &dn, &docn}, grad, {ql, kv, dl, p->doc}, 0, c, 0, 0};
    for (int i = 0; i < nth; i++) pipit__cpu_ATTENTION_CP_DOC(&f, i, nth);
    for (int i = 0; i < nth; i++) pipit__cpu_ATTN_CP_DOC_D(&g, i, nth);
}

static void check_assembled(int C, int64_t L, int causal) {
    static prob p;
    setup(&p, C, L, causal, 11u + (uint64_t)C * 7 + (uint64_t)causal);
    int64_t S = p.S, Lc = 2 * L, F = HQ * D, K2 = 2 * HKV * D, nql = B * Lc * F;
    static double out[B * MAXS * HQ * D], out3[B * MAXS * HQ * D], grad[B * MAXS * (HQ + 2 * HKV) * D],
        grad3[B * MAXS * (HQ + 2 * HKV) * D], dk[B * MAXS * HKV * D], dv[B * MAXS * HKV * D];
    memset(dk, 0, sizeof dk);
    memset(dv, 0, sizeof dv);
    double worst = 0;
    for (int c = 0; c < C; c++) {
        run_rank(&p, c, 1, out, grad);
        run_rank(&p, c, 3, out3, grad3);
        ASSERT_TRUE(memcmp(out, out3, sizeof(double) * (size_t)nql) == 0); /* thread count: same bits */
        ASSERT_TRUE(memcmp(grad, grad3, sizeof(double) * (size_t)(nql + B * S * K2)) == 0);
        for (int b = 0; b < B; b++)
            for (int64_t i = 0; i < Lc; i++) {
                int64_t t = pipit__cp_row(i, L, C, c), lr = b * Lc + i, gr = b * S + t;
                for (int64_t j = 0; j < F; j++) {
                    worst = fmax(worst, fabs(out[lr * F + j] - p.ref[gr * F + j]));
                    worst = fmax(worst, fabs(grad[lr * F + j] - p.rdq[gr * F + j]));
                }
            }
        for (int64_t r = 0; r < B * S; r++) /* the reduce-scatter's sum over the group */
            for (int64_t j = 0; j < HKV * D; j++) {
                dk[r * HKV * D + j] += grad[nql + r * K2 + j];
                dv[r * HKV * D + j] += grad[nql + r * K2 + HKV * D + j];
            }
    }
    for (int64_t i = 0; i < B * S * HKV * D; i++)
        worst = fmax(worst, fmax(fabs(dk[i] - p.rdk[i]), fabs(dv[i] - p.rdv[i])));
    if (!(worst <= 1e-12)) PIPIT_FAIL_("C = %d causal %d: max |CP - one rank| = %g > 1e-12", C, causal, worst);
}

PIPIT_TEST(cp_docs_kernel_matches_one_rank) {
    for (int causal = 1; causal >= 0; causal--) {
        check_assembled(2, 4, causal); /* S = 16 */
        check_assembled(3, 3, causal); /* S = 18 */
        check_assembled(3, 6, causal); /* S = 36 */
    }
}

/* One document per sequence: attention_cp's kernels' bits (f32, GQA),
 * forward and backward, every rank. */
PIPIT_TEST(cp_docs_one_document_is_attention_cp) {
    enum { C = 2, L = 3, S = 2 * C * L, Lc = 2 * L, F = HQ * D, KW = HKV * D };
    uint64_t seed = 5;
    static float q[B * Lc * F], dout[B * Lc * F], k[B * S * KW], v[B * S * KW], kv[B * S * 2 * KW];
    static float o1[B * Lc * F], o2[B * Lc * F], g1[B * Lc * F + 2 * B * S * KW], g2[B * Lc * F + 2 * B * S * KW];
    static int32_t doc[B * S]; /* all 7: one document */
    for (int i = 0; i < B * Lc * F; i++) q[i] = (float)rnd(&seed), dout[i] = (float)rnd(&seed);
    for (int i = 0; i < B * S * KW; i++) k[i] = (float)rnd(&seed), v[i] = (float)rnd(&seed);
    for (int r = 0; r < B * S; r++) {
        memcpy(kv + r * 2 * KW, k + r * KW, sizeof(float) * KW);
        memcpy(kv + r * 2 * KW + KW, v + r * KW, sizeof(float) * KW);
        doc[r] = 7;
    }
    pipit__node qn = node3(PIPIT_F32, B, Lc, F), kn = node3(PIPIT_F32, B, S, KW), kvn = node3(PIPIT_F32, B, S, 2 * KW);
    pipit__node docn = node3(PIPIT_I32, B, S, 1), on = qn, gn, pn = qn, pg;
    docn.ndim = 2;
    on.fattr[0] = pn.fattr[0] = 0.37;
    on.iattr[0] = pn.iattr[0] = HQ, on.iattr[1] = pn.iattr[1] = HKV, on.iattr[2] = pn.iattr[2] = 1;
    on.iattr[3] = pn.iattr[3] = C;
    gn = on, pg = pn;
    gn.ndim = pg.ndim = 1, gn.shape[0] = pg.shape[0] = B * Lc * F + 2 * B * S * KW;
    for (int c = 0; c < C; c++) {
        pipit__kctx f = {&on, {&qn, &kvn, &docn}, o1, {q, kv, doc}, 0, c, 0, 0};
        pipit__kctx fp = {&pn, {&qn, &kn, &kn}, o2, {q, k, v}, 0, c, 0, 0};
        pipit__kctx g = {&gn, {&qn, &kvn, &qn, &docn}, g1, {q, kv, dout, doc}, 0, c, 0, 0};
        pipit__kctx gp = {&pg, {&qn, &kn, &kn, &qn}, g2, {q, k, v, dout}, 0, c, 0, 0};
        pipit__cpu_ATTENTION_CP_DOC(&f, 0, 1);
        pipit__cpu_ATTENTION_CP(&fp, 0, 1);
        pipit__cpu_ATTN_CP_DOC_D(&g, 0, 1);
        pipit__cpu_ATTN_CP_D(&gp, 0, 1);
        ASSERT_TRUE(memcmp(o1, o2, sizeof o1) == 0);
        ASSERT_TRUE(memcmp(g1, g2, sizeof(float) * B * Lc * F) == 0); /* dq */
        for (int r = 0; r < B * S; r++) { /* dk, dv: [B,S,2KW] vs [B,S,KW] then [B,S,KW] */
            ASSERT_TRUE(memcmp(g1 + B * Lc * F + r * 2 * KW, g2 + B * Lc * F + r * KW, sizeof(float) * KW) == 0);
            ASSERT_TRUE(memcmp(g1 + B * Lc * F + r * 2 * KW + KW, g2 + B * Lc * F + B * S * KW + r * KW,
                               sizeof(float) * KW) == 0);
        }
    }
}

/* Ids that decrease between two ranks' chunks (each rank's own rows are
 * non-decreasing, so pipit_step's per-rank check passes them): the kernel
 * fails, zeroing its output, with a message naming the cause. */
PIPIT_TEST(cp_docs_decreasing_ids_fail) {
    enum { C = 2, L = 2, S = 8, F = HQ * D, KW = 2 * HKV * D };
    static double q[4 * F], kv[S * KW], out[4 * F];
    int32_t doc[S] = {0, 0, 5, 5, 1, 1, 6, 6}; /* rank 0 holds 0 0 | 6 6, rank 1 holds 5 5 | 1 1 */
    for (int i = 0; i < 4 * F; i++) out[i] = 1;
    pipit__node qn = node3(PIPIT_F64, 1, 4, F), kvn = node3(PIPIT_F64, 1, S, KW), docn = node3(PIPIT_I32, 1, S, 1);
    pipit__node on = qn;
    docn.ndim = 2;
    on.fattr[0] = 1, on.iattr[0] = HQ, on.iattr[1] = HKV, on.iattr[2] = 1, on.iattr[3] = C;
    pipit__kernel_bind(-1);
    (void)pipit__kernel_take_error(-1);
    pipit__kctx f = {&on, {&qn, &kvn, &docn}, out, {q, kv, doc}, 0, 0, 0, 0};
    pipit__cpu_ATTENTION_CP_DOC(&f, 0, 1);
    const char *why = pipit__kernel_take_error(-1);
    ASSERT_TRUE(why != NULL && strstr(why, "document ids decrease") != NULL);
    for (int i = 0; i < 4 * F; i++) ASSERT_TRUE(out[i] == 0);
}

/* Through a GPT-2 program at C = 2 (pipit_graph_set_documents): each
 * rank's fed ids are checked by pipit_step (INVALID, naming the input);
 * ids that are non-decreasing on every rank but decrease between the
 * ranks' chunks fail the step (RUNTIME, named); good ids step. */
static pipit_status step_with_docs(pipit_program *p, const int32_t docs[2][8]) {
    static int32_t tok[2][8], tgt[2][8], pos[2][8];
    pipit_feed f[8];
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 8; i++) tok[r][i] = (3 * i + r) % 29, tgt[r][i] = (5 * i + 1) % 29;
        for (int i = 0; i < 8; i++) pos[r][i] = (int32_t)pipit__cp_row(i, 4, 2, r);
        f[4 * r] = (pipit_feed){PIPIT_GPT2_TOKENS, tok[r], sizeof tok[r]};
        f[4 * r + 1] = (pipit_feed){PIPIT_GPT2_TARGETS, tgt[r], sizeof tgt[r]};
        f[4 * r + 2] = (pipit_feed){PIPIT_GPT2_POSITIONS, pos[r], sizeof pos[r]};
        f[4 * r + 3] = (pipit_feed){PIPIT_GPT2_DOCUMENTS, docs[r], sizeof docs[r]};
    }
    pipit_metrics met;
    return pipit_step_feeds(p, f, 8, 4, 0, &met);
}

PIPIT_TEST(cp_docs_step_checks_ids) {
    pipit_graph *g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_context_parallel(g, 2));
    ASSERT_OK(pipit_graph_set_documents(g, 1));
    pipit_gpt2_config gc = {.vocab = 32, .max_ctx = 16, .ctx = 8, .layers = 1, .heads = 2, .dim = 8, .batch = 1,
                            .stages = 1, .dtype = PIPIT_F32};
    pipit_val loss = pipit_gpt2_build(g, &gc);
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2}, &p));
    /* the sequence 0 0 0 0 | 1 1 1 1 | 1 1 2 2 | 2 3 3 3 in chunks of 4: rank 0 holds chunks 0 and 3 */
    const int32_t good[2][8] = {{0, 0, 0, 0, 2, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 2, 2}};
    ASSERT_OK(step_with_docs(p, good));
    const int32_t local[2][8] = {{0, 0, 0, 0, 2, 3, 3, 3}, {1, 1, 0, 1, 1, 1, 2, 2}}; /* rank 1's rows decrease */
    ASSERT_STATUS(step_with_docs(p, local), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("input 'documents' of microbatch 1 holds document ids that decrease");
    const int32_t across[2][8] = {{0, 0, 0, 0, 2, 3, 3, 3}, {5, 5, 5, 5, 5, 5, 5, 5}}; /* 5 then 2 at chunk 3 */
    ASSERT_STATUS(step_with_docs(p, across), PIPIT_STATUS_RUNTIME);
    ASSERT_MSG_HAS("document ids decrease along the sequence gathered over the context group");
    ASSERT_OK(step_with_docs(p, good)); /* the program still steps */
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* Models: tiny GPT-2 (with its positions restarted per document, as
 * --doc-pos-reset) and Llama (GQA) in f64 with packed documents, at C = 2
 * and 3 (two sequences of S = 12 each, B = 2) against the same model at C
 * = 1 on the whole sequences: the loss and every gradient to 1e-12. */
enum { MS = 12, MB = 2, MV = 23 };

static int model_bf16; /* the models in f32 compiled with options.dtype bf16 (cp_docs_models_bf16_bound) */

static pipit_program *model_program(int llama, int C, pipit_graph **gp) {
    pipit_dtype dt = model_bf16 ? PIPIT_F32 : PIPIT_F64;
    pipit_graph *g = *gp = pipit_graph_new();
    if (pipit_graph_set_context_parallel(g, C) || pipit_graph_set_documents(g, 1)) return NULL;
    pipit_val loss;
    if (llama) {
        pipit_llama_config lc = {.vocab = MV, .max_ctx = 32, .ctx = MS / C, .layers = 2, .heads = 4, .kv_heads = 2,
                                 .dim = 16, .ffn_hidden = 24, .multiple_of = 1, .norm_eps = 1e-5,
                                 .rope_theta = 10000, .batch = MB, .stages = 1, .dtype = dt};
        loss = pipit_llama_build(g, &lc);
    } else {
        pipit_gpt2_config gc = {.vocab = MV, .max_ctx = 32, .ctx = MS / C, .layers = 2, .heads = 2, .dim = 16,
                                .batch = MB, .stages = 1, .dtype = dt};
        loss = pipit_gpt2_build(g, &gc);
    }
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.data_parallel = C, .dtype = model_bf16 ? PIPIT_BF16 : 0}, &p))
        return NULL;
    for (int i = 0; i < pipit_program_num_params(p); i++) { /* the same params in every program */
        const char *name = pipit_program_param_name(p, i);
        int64_t n = 0;
        if (pipit_program_param_numel(p, name, &n)) return NULL;
        double *v = malloc(sizeof(double) * (size_t)n);
        float *vf = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++) {
            v[k] = 0.3 * sin(1.7 * (double)k + 0.9 * i) + (strstr(name, "norm") || strstr(name, "ln_") ? 1 : 0);
            vf[k] = (float)v[k];
        }
        pipit_status s = model_bf16 ? pipit_program_set_param(p, name, vf, sizeof(float) * (size_t)n)
                                    : pipit_program_set_param(p, name, v, sizeof(double) * (size_t)n);
        free(v), free(vf);
        if (s) return NULL;
    }
    return p;
}

/* The loss and the gradients (concatenated) of one step at C. */
static void model_step(int llama, int C, double *loss, double *grad, int64_t *ngrad) {
    static int32_t full[4][MB * MS], part[3][4][MB * MS];
    static const char *names[4] = {"tokens", "targets", "positions", "documents"};
    for (int b = 0; b < MB; b++) {
        int32_t doc = 0, start = 0;
        for (int t = 0; t < MS; t++) {
            int i = b * MS + t;
            full[0][i] = (7 * t + 5 * b + 2) % MV, full[1][i] = (3 * t + 11 * b + 1) % MV;
            full[3][i] = doc, full[2][i] = t - start;
            if (t == (b ? 1 : 4) || t == (b ? 6 : 5) || t == 9) doc++, start = t + 1; /* ends inside and across chunks */
        }
    }
    int nin = llama ? 3 : 4; /* Llama: no positions */
    pipit_feed f[3 * 4];
    int nf = 0;
    for (int c = 0; c < C; c++)
        for (int k = 0; k < 4; k++) {
            if (llama && k == 2) continue;
            ASSERT_OK(pipit_cp_slice(part[c][k], full[k], MB, MS, sizeof(int32_t), C, c));
            f[nf++] = (pipit_feed){names[k], part[c][k], sizeof(int32_t) * (size_t)(MB * MS / C)};
        }
    pipit_graph *g;
    pipit_program *p = model_program(llama, C, &g);
    if (!p) {
        pipit_graph_free(g);
        PIPIT_FAIL_("model_program: %s", pipit_errmsg());
    }
    pipit_metrics met;
    ASSERT_OK(pipit_step_feeds(p, f, nf, nin, 0, &met));
    int64_t at = 0;
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = 0;
        ASSERT_OK(pipit_program_param_numel(p, name, &n));
        if (model_bf16) {
            static float gf[1 << 14];
            ASSERT_TRUE(n <= (int64_t)(sizeof gf / sizeof gf[0]));
            ASSERT_OK(pipit_program_get_grad(p, name, gf, sizeof(float) * (size_t)n));
            for (int64_t k = 0; k < n; k++) grad[at + k] = gf[k];
        } else {
            ASSERT_OK(pipit_program_get_grad(p, name, grad + at, sizeof(double) * (size_t)n));
        }
        at += n;
    }
    *ngrad = at, *loss = met.loss;
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(cp_docs_models_match_c1_f64) {
    enum { MAXG = 1 << 14 };
    static double g1[MAXG], gc[MAXG];
    for (int llama = 0; llama < 2; llama++) {
        int64_t n1 = 0, nc = 0;
        double l1 = 0, lc = 0;
        model_step(llama, 1, &l1, g1, &n1);
        for (int C = 2; C <= 3; C++) {
            model_step(llama, C, &lc, gc, &nc);
            ASSERT_EQ_I64(nc, n1);
            double gmax = 0, emax = 0;
            for (int64_t k = 0; k < n1; k++) gmax = fmax(gmax, fabs(g1[k])), emax = fmax(emax, fabs(gc[k] - g1[k]));
            fprintf(stderr, "  %s C = %d: loss %.17g vs %.17g, grad max err %.3g of %.3g\n", llama ? "llama" : "gpt2",
                    C, lc, l1, emax, gmax);
            ASSERT_NEAR_F64(lc, l1, 1e-12 * fabs(l1));
            ASSERT_TRUE(gmax > 0 && emax <= 1e-12 * gmax);
        }
    }
}

/* bf16 (f32 models, options.dtype bf16: the attention's q, k, v in bf16):
 * C = 2 and 3 against C = 1 within the bf16 bounds of cp_bf16_bound (the
 * loss to 2u, every gradient to 8u of the largest, u = 2^-8); the
 * documents' mask is the same mask in every precision. */
PIPIT_TEST(cp_docs_models_bf16_bound) {
    enum { MAXG = 1 << 14 };
    static double g1[MAXG], gc[MAXG];
    const double u = 0x1p-8;
    model_bf16 = 1;
    for (int llama = 0; llama < 2; llama++) {
        int64_t n1 = 0, nc = 0;
        double l1 = 0, lc = 0;
        model_step(llama, 1, &l1, g1, &n1);
        for (int C = 2; C <= 3; C++) {
            model_step(llama, C, &lc, gc, &nc);
            double gmax = 0, emax = 0;
            for (int64_t k = 0; k < n1; k++) gmax = fmax(gmax, fabs(g1[k])), emax = fmax(emax, fabs(gc[k] - g1[k]));
            fprintf(stderr, "  %s bf16 C = %d: loss %.9g vs %.9g, grad max err %.3g of %.3g\n", llama ? "llama" : "gpt2",
                    C, lc, l1, emax, gmax);
            if (nc != n1 || !(fabs(lc - l1) <= 2 * u * fabs(l1)) || !(gmax > 0 && emax <= 8 * u * gmax)) {
                model_bf16 = 0;
                PIPIT_FAIL_("%s bf16 C = %d outside the bf16 bounds", llama ? "llama" : "gpt2", C);
            }
        }
    }
    model_bf16 = 0;
}
