/*
 * test_remat.c — pipit_options.remat = PIPIT_REMAT_POINTWISE: the backward
 * computes GELU/SiLU outputs, their products and their casts again instead
 * of keeping them. Checked against the run that keeps everything: the same
 * bits (losses, gradients, parameters after AdamW steps, f32 and bf16); each
 * recomputed op runs exactly once more per layer and microbatch, the others
 * never; the planned activation arena falls by at least the bytes of the
 * values no longer kept, counted by hand; a product whose factor needs no
 * gradient is kept (recomputing it would keep the other factor's input
 * too); remat values
 * outside 0..2 are refused by message. The schedule x P x V matrix of
 * test_pipeline.c runs every remat value too.
 */
#include <string.h>

#include "runtime/program.h"
#include "test.h"

enum { N = 32, D = 16, F = 64, L = 3 };

typedef enum { MLP_GELU, MLP_SWIGLU, MLP_MASKED } mlp_kind;

/* L residual MLP layers on an input x [N, D] (a value of the microbatch
 * loop: a graph of params alone runs once before the loop); loss = sum(x * x).
 * MLP_GELU: x += gelu(x W1) W2; MLP_SWIGLU: x += (silu(x Wg) * (x Wu)) Wd;
 * MLP_MASKED: x += (gelu(x W1) * mask) W2 with mask a constant input. */
static pipit_val build(pipit_graph *g, mlp_kind kind) {
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, (int64_t[]){N, D});
    pipit_val mask = kind == MLP_MASKED ? pipit_input(g, "mask", PIPIT_F32, 2, (int64_t[]){N, F}) : x;
    for (int l = 0; l < L; l++) {
        char n1[16], n2[16], n3[16];
        snprintf(n1, sizeof n1, "w1.%d", l);
        snprintf(n2, sizeof n2, "w2.%d", l);
        snprintf(n3, sizeof n3, "wu.%d", l);
        pipit_val w1 = pipit_param(g, n1, PIPIT_F32, 2, (int64_t[]){D, F});
        pipit_val w2 = pipit_param(g, n2, PIPIT_F32, 2, (int64_t[]){F, D});
        pipit_val h = pipit_matmul(g, x, w1, 0, 0);
        if (kind == MLP_SWIGLU) {
            pipit_val wu = pipit_param(g, n3, PIPIT_F32, 2, (int64_t[]){D, F});
            h = pipit_mul(g, pipit_silu(g, h), pipit_matmul(g, x, wu, 0, 0));
        } else {
            h = pipit_gelu(g, h);
            if (kind == MLP_MASKED) h = pipit_mul(g, h, mask);
        }
        x = pipit_add(g, x, pipit_matmul(g, h, w2, 0, 0));
    }
    return pipit_sum(g, pipit_mul(g, x, x));
}

static float fill_value(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

typedef struct {
    pipit_program *p;
    float losses[2];
    float params[3 * L * D * F];        /* every param after two steps, in name order */
    size_t arena;
    int runs[PIPIT_OP_COUNT];            /* kernel runs per op in rank 0's program */
} run_result;

/* Compiles with the remat value and dtype, sets the params from a fixed
 * seed and takes two AdamW steps; fills r. */
static pipit_status train(mlp_kind kind, int remat, pipit_dtype dt, run_result *r) {
    memset(r, 0, sizeof *r);
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = build(g, kind);
    pipit_options o = {.remat = remat, .dtype = dt, .optimizer = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8}};
    pipit_status s = pipit_compile(g, loss, &o, &r->p);
    if (s) {
        pipit_graph_free(g);
        return s;
    }
    uint32_t seed = 7;
    for (int i = 0; i < pipit_program_num_params(r->p); i++) {
        const char *name = pipit_program_param_name(r->p, i);
        int64_t n = 0;
        pipit_program_param_numel(r->p, name, &n);
        float *v = malloc((size_t)n * sizeof *v);
        for (int64_t k = 0; k < n; k++) v[k] = fill_value(&seed) * 0.5f;
        pipit_program_set_param(r->p, name, v, (size_t)n * sizeof *v);
        free(v);
    }
    static float x[N * D], mask[N * F];
    for (int k = 0; k < N * D; k++) x[k] = 2 * fill_value(&seed);
    for (int k = 0; k < N * F; k++) mask[k] = (float)(k % 3 != 0);
    pipit_feed feeds[2] = {{"x", x, sizeof x}, {"mask", mask, sizeof mask}};
    for (int step = 0; step < 2 && !s; step++) {
        pipit_metrics m;
        s = pipit_step(r->p, feeds, kind == MLP_MASKED ? 2 : 1, 1, &m);
        r->losses[step] = (float)m.loss;
    }
    size_t off = 0;
    for (int i = 0; !s && i < pipit_program_num_params(r->p); i++) {
        const char *name = pipit_program_param_name(r->p, i);
        int64_t n = 0;
        pipit_program_param_numel(r->p, name, &n);
        s = pipit_program_get_param(r->p, name, r->params + off, (size_t)n * sizeof(float));
        off += (size_t)n;
    }
    const pipit__rank_plan *rp = &r->p->plan.ranks[0];
    r->arena = rp->arena_bytes;
    for (int32_t i = 0; i < rp->n; i++)
        if (rp->ins[i].kind == INS_RUN) r->runs[r->p->plan.g->nodes[rp->ins[i].node].op]++;
    pipit_graph_free(g);
    return s;
}

static void done(run_result *r) { pipit_program_free(r->p); }

/* Bits equal to the run that keeps everything, every op run as often
 * except `extra` (run L more times each); *saved: the arena bytes saved. */
static void compare(mlp_kind kind, pipit_dtype dt, const int *extra, int nextra, size_t *saved) {
    *saved = 0;
    static run_result keep, pw;
    ASSERT_OK(train(kind, PIPIT_REMAT_NONE, dt, &keep));
    ASSERT_OK(train(kind, PIPIT_REMAT_POINTWISE, dt, &pw));
    ASSERT_TRUE(memcmp(keep.losses, pw.losses, sizeof keep.losses) == 0);
    ASSERT_TRUE(memcmp(keep.params, pw.params, sizeof keep.params) == 0);
    for (int op = 0; op < PIPIT_OP_COUNT; op++) {
        int more = 0;
        for (int k = 0; k < nextra; k++) more |= extra[k] == op;
        if (pw.runs[op] != keep.runs[op] + (more ? L : 0))
            fprintf(stderr, "op %s: %d runs kept-all, %d pointwise\n", pipit__ops[op].name, keep.runs[op], pw.runs[op]);
        ASSERT_EQ_I64(pw.runs[op], keep.runs[op] + (more ? L : 0));
    }
    fprintf(stderr, "kind %d %s: arena %zu bytes keeping all, %zu pointwise\n", (int)kind, dt == PIPIT_BF16 ? "bf16" : "f32",
            keep.arena, pw.arena);
    *saved = keep.arena > pw.arena ? keep.arena - pw.arena : 0;
    done(&keep);
    done(&pw);
}

/* GELU: each layer's gelu(h) [N, F] is no longer kept (h is, for the
 * GELU's own backward); one recomputed value is alive at a time. */
PIPIT_TEST(remat_pointwise_gelu) {
    const int gelu[] = {PIPIT_OP_GELU};
    size_t saved;
    compare(MLP_GELU, PIPIT_F32, gelu, 1, &saved);
    ASSERT_TRUE(saved >= (size_t)(L - 1) * N * F * 4);
}

/* SwiGLU: silu(gate) and the product [N, F] each are recomputed; gate and
 * up stay. */
PIPIT_TEST(remat_pointwise_swiglu) {
    const int swiglu[] = {PIPIT_OP_SILU, PIPIT_OP_MUL};
    size_t saved;
    compare(MLP_SWIGLU, PIPIT_F32, swiglu, 2, &saved);
    ASSERT_TRUE(saved >= (size_t)(2 * L - 2) * N * F * 4);
}

/* Under bf16 autocast the matmul reads a bf16 cast of the product: the
 * cast is recomputed with it, and the bits stay the kept run's. */
PIPIT_TEST(remat_pointwise_swiglu_bf16) {
    static run_result keep, pw;
    ASSERT_OK(train(MLP_SWIGLU, PIPIT_REMAT_NONE, PIPIT_BF16, &keep));
    ASSERT_OK(train(MLP_SWIGLU, PIPIT_REMAT_POINTWISE, PIPIT_BF16, &pw));
    ASSERT_TRUE(memcmp(keep.losses, pw.losses, sizeof keep.losses) == 0);
    ASSERT_TRUE(memcmp(keep.params, pw.params, sizeof keep.params) == 0);
    ASSERT_EQ_I64(pw.runs[PIPIT_OP_SILU], 2 * keep.runs[PIPIT_OP_SILU]);
    ASSERT_TRUE(pw.runs[PIPIT_OP_MUL] >= keep.runs[PIPIT_OP_MUL] + L);
    ASSERT_EQ_I64(pw.runs[PIPIT_OP_MATMUL], keep.runs[PIPIT_OP_MATMUL]); /* no matmul twice */
    fprintf(stderr, "bf16 swiglu: arena %zu bytes keeping all, %zu pointwise\n", keep.arena, pw.arena);
    ASSERT_TRUE(pw.arena + (size_t)(L - 1) * N * F * 2 <= keep.arena);
    done(&keep);
    done(&pw);
}

/* gelu(h) * mask with a mask that needs no gradient: the product's
 * backward reads only the mask, so recomputing the product would keep
 * gelu(h)'s input and the mask instead of it: it is kept (W2's gradient
 * reads it), and the GELU's output, which no backward reads, is not
 * recomputed either: the same program as keeping everything. */
PIPIT_TEST(remat_pointwise_keeps_a_masked_product) {
    size_t saved;
    compare(MLP_MASKED, PIPIT_F32, NULL, 0, &saved);
    ASSERT_EQ_I64(saved, 0);
}

PIPIT_TEST(remat_value_out_of_range_refused) {
    for (int bad = -1; bad <= 3; bad += 4) {
        pipit_graph *g = pipit_graph_new();
        pipit_val loss = build(g, MLP_GELU);
        pipit_options o = {.remat = bad};
        pipit_program *p = NULL;
        ASSERT_STATUS(pipit_compile(g, loss, &o, &p), PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS("options.remat must be");
        ASSERT_TRUE(p == NULL);
        pipit_graph_free(g);
    }
}
