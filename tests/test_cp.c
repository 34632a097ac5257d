/*
 * test_cp.c — context parallelism (pipit_cp.h; docs/architecture.md
 * "Context parallelism"): tiny GPT-2 and Llama trained with the sequence
 * cut over C ranks (chunks c and 2C-1-c each) against the same model at
 * C = 1 on whole sequences (the oracle: the plain attention path, checked
 * by its own gradient and torch tests); bitwise across schedules, P, D and
 * T at a fixed C; finite differences in f64 through the gather/scatter
 * pair and the CP attention; pipit_cp_slice against a hand layout; the
 * refusals.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "pipit_cp.h"
#include "pipit_gpt2.h"
#include "pipit_llama.h"
#include "pipit_moe.h"
#include "test.h"

enum { V = 29, S = 16, NB = 2, MAXM = 2, MAXR = 8 }; /* S: the whole sequence; NB sequences per microbatch */

typedef struct {
    int llama, C, D, P, T, M;
    pipit_dtype dt;
    pipit_schedule_kind sched;
    int bf16; /* options.dtype bf16 (fp32 masters) */
} cfg;

static pipit_program *cp_program(const cfg *c, pipit_graph **gp) {
    pipit_graph *g = *gp = pipit_graph_new();
    if (pipit_graph_set_context_parallel(g, c->C) || pipit_graph_set_tensor_parallel(g, c->T)) return NULL;
    pipit_val loss;
    int P = c->P ? c->P : 1, ctx = S / c->C;
    if (c->llama) {
        pipit_llama_config lc = {.vocab = V + 1, .max_ctx = 64, .ctx = ctx, .layers = 2, .heads = 4, .kv_heads = 2,
                                 .dim = 16, .ffn_hidden = 24, .multiple_of = 1, .norm_eps = 1e-5,
                                 .rope_theta = 10000, .batch = NB, .stages = P, .dtype = c->dt};
        loss = pipit_llama_build(g, &lc);
    } else {
        pipit_gpt2_config gc = {.vocab = V + 3, .max_ctx = 64, .ctx = ctx, .layers = 2, .heads = 2, .dim = 16,
                                .batch = NB, .stages = P, .dtype = c->dt};
        loss = pipit_gpt2_build(g, &gc);
    }
    pipit_schedule *sch = NULL;
    if (P > 1 && pipit_schedule_build(c->sched, P, 1, c->M, &sch)) return NULL;
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(
        g, loss,
        &(pipit_options){.schedule = sch, .microbatches = c->M, .data_parallel = c->D * c->C, .tensor_parallel = c->T,
                         .dtype = c->bf16 ? PIPIT_BF16 : 0},
        &p);
    pipit_schedule_free(sch);
    if (s) fprintf(stderr, "cp_program: %s\n", pipit_errmsg());
    return s ? NULL : p;
}

/* Params and gradients as f64, whatever the program's dtype dt. */
static pipit_status io_f64(pipit_program *p, const char *name, pipit_dtype dt, double *v, int64_t n, int what) {
    if (dt == PIPIT_F64)
        return what == 0 ? pipit_program_set_param(p, name, v, sizeof(double) * (size_t)n)
               : what == 1 ? pipit_program_get_param(p, name, v, sizeof(double) * (size_t)n)
                           : pipit_program_get_grad(p, name, v, sizeof(double) * (size_t)n);
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t k = 0; what == 0 && k < n; k++) f[k] = (float)v[k];
    pipit_status s = what == 0 ? pipit_program_set_param(p, name, f, sizeof(float) * (size_t)n)
                     : what == 1 ? pipit_program_get_param(p, name, f, sizeof(float) * (size_t)n)
                                 : pipit_program_get_grad(p, name, f, sizeof(float) * (size_t)n);
    for (int64_t k = 0; what != 0 && k < n; k++) v[k] = f[k];
    free(f);
    return s;
}
#define pipit_program_set_param_f64(p, name, v, n) io_f64(p, name, cur_dt, v, n, 0)
#define pipit_program_get_param_f64(p, name, v, n) io_f64(p, name, cur_dt, v, n, 1)
#define pipit_program_get_grad_f64(p, name, v, n) io_f64(p, name, cur_dt, v, n, 2)
static pipit_dtype cur_dt; /* the dtype of the program under test */

/* The same params in every program: a fixed pattern by name. */
static void set_params(pipit_program *p) {
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = 0;
        ASSERT_OK(pipit_program_param_numel(p, name, &n));
        double *v = malloc(sizeof(double) * (size_t)n);
        for (int64_t k = 0; k < n; k++)
            v[k] = 0.2 * sin(1.3 * (double)k + 0.7 * i) + (strstr(name, "norm") || strstr(name, "ln_") ? 1 : 0);
        ASSERT_OK(pipit_program_set_param_f64(p, name, v, n));
        free(v);
    }
}

/* Whole sequences: set d (of D), microbatch m: tokens, targets, positions
 * [NB, S]; a CP program's replica d C + c gets its chunks of them. */
typedef struct {
    int32_t full[MAXR][MAXM][3][NB * S];
    int32_t part[MAXR][MAXM][3][NB * S];
    pipit_feed f[MAXR * MAXM * 3];
    int nfeed, ntotal;
} feeds;

static void make_feeds(feeds *fd, const cfg *c) {
    static const char *names[3] = {"tokens", "targets", "positions"};
    int nin = c->llama ? 2 : 3; /* Llama has no positions input */
    fd->nfeed = nin;
    fd->ntotal = 0;
    for (int d = 0; d < c->D; d++)
        for (int m = 0; m < c->M; m++)
            for (int i = 0; i < NB * S; i++) {
                int gsq = (d * c->M + m) * NB + i / S;
                fd->full[d][m][0][i] = (int32_t)((i * 7 + gsq * 11 + 3) % V);
                fd->full[d][m][1][i] = (int32_t)((i * 5 + gsq * 13 + 1) % V);
                fd->full[d][m][2][i] = (int32_t)(i % S);
            }
    for (int r = 0; r < c->D * c->C; r++)
        for (int m = 0; m < c->M; m++)
            for (int k = 0; k < nin; k++) {
                int32_t *dst = fd->part[r][m][k];
                ASSERT_OK(pipit_cp_slice(dst, fd->full[r / c->C][m][k], NB, S, sizeof(int32_t), c->C, r % c->C));
                fd->f[fd->ntotal++] = (pipit_feed){names[k], dst, sizeof(int32_t) * (size_t)(NB * S / c->C)};
            }
}

/* The step's loss, every gradient (concatenated, f64) and, after one
 * update, the next step's loss. */
typedef struct {
    double loss, loss2;
    double *grad;
    int64_t n;
} result;

static void run_into(const cfg *c, result *out) {
    result r = {0};
    pipit_graph *g;
    pipit_program *p = cp_program(c, &g);
    ASSERT_TRUE(p != NULL);
    cur_dt = c->dt;
    set_params(p);
    feeds *fd = calloc(1, sizeof *fd);
    make_feeds(fd, c);
    pipit_metrics met;
    ASSERT_OK(pipit_step_feeds(p, fd->f, fd->ntotal, fd->nfeed, 0, &met));
    r.loss = met.loss;
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        int64_t n = 0;
        ASSERT_OK(pipit_program_param_numel(p, pipit_program_param_name(p, i), &n));
        r.n += n;
    }
    r.grad = malloc(sizeof(double) * (size_t)r.n);
    for (int i = 0, at = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = 0;
        ASSERT_OK(pipit_program_param_numel(p, name, &n));
        ASSERT_OK(pipit_program_get_grad_f64(p, name, r.grad + at, n));
        at += (int)n;
    }
    ASSERT_OK(pipit_step_feeds(p, fd->f, fd->ntotal, fd->nfeed, 1, &met));
    ASSERT_OK(pipit_step_feeds(p, fd->f, fd->ntotal, fd->nfeed, 0, &met));
    r.loss2 = met.loss;
    free(fd);
    pipit_program_free(p);
    pipit_graph_free(g);
    *out = r;
}
static result run(const cfg *c) {
    result r = {0};
    run_into(c, &r);
    return r;
}

/* |a - b| relative to the largest |b|, gradients; losses relative. */
static void assert_close(const result *a, const result *b, double tol) {
    ASSERT_EQ_I64(a->n, b->n);
    ASSERT_NEAR_F64(a->loss, b->loss, fmin(tol, 1e-6) * fabs(b->loss));
    ASSERT_NEAR_F64(a->loss2, b->loss2, fmin(tol, 1e-6) * fabs(b->loss2));
    double gmax = 0, emax = 0;
    for (int64_t k = 0; k < a->n; k++) {
        gmax = fmax(gmax, fabs(b->grad[k]));
        emax = fmax(emax, fabs(a->grad[k] - b->grad[k]));
    }
    fprintf(stderr, "  loss %.9g vs %.9g, next %.9g vs %.9g, grad max err %.3g of %.3g\n", a->loss, b->loss, a->loss2,
            b->loss2, emax, gmax);
    ASSERT_TRUE(gmax > 0 && emax <= tol * gmax);
}

static void assert_bitwise(const result *a, const result *b) {
    ASSERT_EQ_I64(a->n, b->n);
    ASSERT_TRUE(memcmp(&a->loss, &b->loss, sizeof a->loss) == 0);
    ASSERT_TRUE(memcmp(&a->loss2, &b->loss2, sizeof a->loss2) == 0);
    ASSERT_TRUE(memcmp(a->grad, b->grad, sizeof(double) * (size_t)a->n) == 0);
}

/* C = 2 and 4 against C = 1 (f32): the loss and the loss after one AdamW
 * update to 1e-6 relative, every gradient to tol of the largest (1e-6 for
 * Llama; GPT-2's worst is 1.0e-6 of it, 8.9e-7 on 0.89, so 2e-6). The sums
 * differ only in order (f64 agrees to 4e-16: cp_f64_finite_differences):
 * each key's gradient is the rank-order sum of C partial sums over query
 * chunks, the parameter gradients C replicas' sums, the loss the mean of
 * C means. */
static void matches_c1(int llama, double tol) {
    cfg one = {llama, 1, 1, 1, 1, 2, PIPIT_F32, PIPIT_SCHED_1F1B, 0};
    result r1 = run(&one);
    for (int C = 2; C <= 4; C *= 2) {
        cfg cc = one;
        cc.C = C;
        result rc = run(&cc);
        assert_close(&rc, &r1, tol);
        free(rc.grad);
    }
    free(r1.grad);
}
PIPIT_TEST(cp_gpt2_matches_c1) { matches_c1(0, 2e-6); }
PIPIT_TEST(cp_llama_matches_c1) { matches_c1(1, 1e-6); }

/* At a fixed C = 2: P = 2 under 1F1B and GPipe give P = 1's bits; with
 * D = 2 and T = 2 too (8 threads), and D = 2 against D = 1 to 1e-6. */
PIPIT_TEST(cp_layouts_bitwise) {
    for (int llama = 0; llama < 2; llama++) {
        cfg base = {llama, 2, 1, 1, 1, 2, PIPIT_F32, PIPIT_SCHED_1F1B, 0};
        result r0 = run(&base);
        cfg c1 = base;
        c1.P = 2;
        result r1 = run(&c1);
        assert_bitwise(&r1, &r0);
        c1.sched = PIPIT_SCHED_GPIPE;
        result r2 = run(&c1);
        assert_bitwise(&r2, &r0);
        cfg d2 = base;
        d2.D = 2, d2.M = 1;
        result r3 = run(&d2);
        d2.P = 2, d2.T = 2;
        result r4 = run(&d2);
        cfg t2 = d2;
        t2.P = 1;
        result r5 = run(&t2);
        assert_bitwise(&r4, &r5);
        cfg ref = d2;
        ref.C = 1, ref.P = 1, ref.T = 1;
        result r6 = run(&ref);
        assert_close(&r3, &r6, llama ? 1e-6 : 2e-6);
        assert_close(&r4, &r6, llama ? 1e-6 : 2e-6);
        free(r0.grad), free(r1.grad), free(r2.grad), free(r3.grad), free(r4.grad), free(r5.grad), free(r6.grad);
    }
}

/* bf16 compute (fp32 masters): C = 2 against C = 1 within the bf16 bound
 * (u = 2^-8: the loss to 2u relative, every gradient to 8u of the
 * largest; the runs differ in summation order only, each sum rounded to
 * bf16), and P = 2 (1F1B) = P = 1 bitwise at C = 2. */
PIPIT_TEST(cp_bf16_bound) {
    for (int llama = 0; llama < 2; llama++) {
        cfg one = {llama, 1, 1, 1, 1, 2, PIPIT_F32, PIPIT_SCHED_1F1B, 1};
        cfg two = one;
        two.C = 2;
        result r1 = run(&one), r2 = run(&two);
        double u = 0x1p-8, gmax = 0, emax = 0;
        for (int64_t k = 0; k < r1.n; k++) {
            gmax = fmax(gmax, fabs(r1.grad[k]));
            emax = fmax(emax, fabs(r2.grad[k] - r1.grad[k]));
        }
        fprintf(stderr, "  %s bf16: loss %.6g vs %.6g, next %.6g vs %.6g, grad max err %.3g of %.3g\n",
                llama ? "llama" : "gpt2", r2.loss, r1.loss, r2.loss2, r1.loss2, emax, gmax);
        ASSERT_NEAR_F64(r2.loss, r1.loss, 2 * u * fabs(r1.loss));
        ASSERT_NEAR_F64(r2.loss2, r1.loss2, 2 * u * fabs(r1.loss2));
        ASSERT_TRUE(gmax > 0 && emax <= 8 * u * gmax);
        cfg p2 = two;
        p2.P = 2;
        result r3 = run(&p2);
        assert_bitwise(&r3, &r2);
        free(r1.grad), free(r2.grad), free(r3.grad);
    }
}

/* f64, C = 2: the gradient of a few elements of the weights that reach
 * the gathered keys and values (and through RoPE at global positions)
 * against central differences of the loss; and C = 2 against C = 1 to
 * 1e-12. */
PIPIT_TEST(cp_f64_finite_differences) {
    for (int llama = 0; llama < 2; llama++) {
        cfg c = {llama, 2, 1, 1, 1, 1, PIPIT_F64, PIPIT_SCHED_1F1B, 0};
        cfg one = c;
        one.C = 1;
        result r2 = run(&c), r1 = run(&one);
        assert_close(&r2, &r1, 1e-12);
        free(r2.grad), free(r1.grad);
        pipit_graph *g;
        pipit_program *p = cp_program(&c, &g);
        ASSERT_TRUE(p != NULL);
        cur_dt = c.dt;
        set_params(p);
        feeds *fd = calloc(1, sizeof *fd);
        make_feeds(fd, &c);
        const char *name = llama ? "model.layers.0.self_attn.k_proj.weight" : "h.0.attn.c_attn.weight";
        int64_t n = 0;
        ASSERT_OK(pipit_program_param_numel(p, name, &n));
        double *w = malloc(sizeof(double) * (size_t)n), *gr = malloc(sizeof(double) * (size_t)n);
        pipit_metrics met;
        ASSERT_OK(pipit_step_feeds(p, fd->f, fd->ntotal, fd->nfeed, 0, &met));
        ASSERT_OK(pipit_program_get_grad_f64(p, name, gr, n));
        ASSERT_OK(pipit_program_get_param_f64(p, name, w, n));
        double worst = 0;
        for (int64_t k = 1; k < n; k += n / 7) { /* a few elements, k and v columns among them */
            double keep = w[k], h = 1e-5, lp, lm;
            w[k] = keep + h;
            ASSERT_OK(pipit_program_set_param_f64(p, name, w, n));
            ASSERT_OK(pipit_step_feeds(p, fd->f, fd->ntotal, fd->nfeed, 0, &met));
            lp = met.loss;
            w[k] = keep - h;
            ASSERT_OK(pipit_program_set_param_f64(p, name, w, n));
            ASSERT_OK(pipit_step_feeds(p, fd->f, fd->ntotal, fd->nfeed, 0, &met));
            lm = met.loss;
            w[k] = keep;
            double fdv = (lp - lm) / (2 * h), e = fabs(fdv - gr[k]) / fmax(1e-3, fabs(gr[k]));
            worst = fmax(worst, e);
        }
        fprintf(stderr, "  %s: worst finite-difference relative error %.3g\n", llama ? "llama" : "gpt2", worst);
        ASSERT_TRUE(worst < 1e-6);
        free(w), free(gr), free(fd);
        pipit_program_free(p);
        pipit_graph_free(g);
    }
}

/* pipit_cp_slice: C = 2, S = 8 (chunks of 2): rank 0 holds rows 0 1 6 7,
 * rank 1 rows 2 3 4 5, per sequence. */
PIPIT_TEST(cp_slice_layout) {
    int16_t src[2 * 8], dst[2 * 4];
    for (int i = 0; i < 16; i++) src[i] = (int16_t)i;
    static const int16_t want0[8] = {0, 1, 6, 7, 8, 9, 14, 15}, want1[8] = {2, 3, 4, 5, 10, 11, 12, 13};
    ASSERT_OK(pipit_cp_slice(dst, src, 2, 8, sizeof(int16_t), 2, 0));
    ASSERT_TRUE(memcmp(dst, want0, sizeof dst) == 0);
    ASSERT_OK(pipit_cp_slice(dst, src, 2, 8, sizeof(int16_t), 2, 1));
    ASSERT_TRUE(memcmp(dst, want1, sizeof dst) == 0);
    ASSERT_STATUS(pipit_cp_slice(dst, src, 2, 6, sizeof(int16_t), 2, 0), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("does not cut into 2C = 4 equal chunks");
}

/* The refusals, each naming the problem. */
PIPIT_TEST(cp_refusals) {
    /* a local sequence that is not two chunks: ctx 7 */
    pipit_graph *g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_context_parallel(g, 2));
    pipit_gpt2_config gc = {.vocab = V, .max_ctx = 64, .ctx = 7, .layers = 1, .heads = 2, .dim = 8, .batch = 1,
                            .stages = 1, .dtype = PIPIT_F32};
    pipit_gpt2_build(g, &gc);
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("this rank's two chunks");
    pipit_graph_free(g);
    /* C not dividing the replicas */
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_context_parallel(g, 2));
    gc.ctx = 8;
    pipit_val loss = pipit_gpt2_build(g, &gc);
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 3}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("must divide options.data_parallel (3)");
    pipit_graph_free(g);
    /* the one-rank document mask (attention_doc) in a CP graph: named, with the CP one to use */
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_context_parallel(g, 2));
    loss = pipit_sum(g, pipit_attention_docs(g, pipit_param(g, "qkv", PIPIT_F32, 3, (int64_t[]){1, 4, 6}),
                                             pipit_input(g, "doc", PIPIT_I32, 2, (int64_t[]){1, 4}),
                                             &(pipit_attention_opts){1, 1, 1, 0}));
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("use pipit_attention_cp_docs");
    pipit_graph_free(g);
    /* with expert parallelism: not built, named */
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_context_parallel(g, 2));
    ASSERT_OK(pipit_graph_set_expert_parallel(g, 2));
    loss = pipit_gpt2_build(g, &gc);
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("with expert parallelism (E = 2) is not built");
    pipit_graph_free(g);
    /* C out of range; a change after CP ops */
    g = pipit_graph_new();
    ASSERT_STATUS(pipit_graph_set_context_parallel(g, 0), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_graph_set_context_parallel(g, 65), PIPIT_STATUS_INVALID);
    pipit_val x = pipit_param(g, "x", PIPIT_F32, 3, (int64_t[]){1, 4, 2});
    pipit_cp_gather(g, x);
    ASSERT_STATUS(pipit_graph_set_context_parallel(g, 2), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("already holds context-parallel ops");
    ASSERT_OK(pipit_graph_set_context_parallel(g, 1));
    pipit_graph_free(g);
}
