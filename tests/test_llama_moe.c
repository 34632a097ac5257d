/*
 * test_llama_moe.c — the Llama builder's mixture-of-experts MLP
 * (pipit_llama.h's experts fields, src/models/llama_moe.c):
 *   - 1 expert, top-1, dropless: the same bits as the dense SwiGLU Llama
 *     with the same weights (losses and every parameter over AdamW steps
 *     with clipping);
 *   - a Mixtral-style MoE (4 experts, top-2, capacity 1.0 so tokens drop,
 *     a shared expert, the balance loss on) pipelined over 2 ranks at
 *     GPipe, 1F1B and ZB-H1: the bits of the one-rank run;
 *   - it learns (a repeated batch's loss falls);
 *   - the balance term by hand (1 expert: each MoE layer adds exactly 1);
 *   - the parameter count by hand, and the refusals by message.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "pipit_llama.h"
#include "test.h"

static pipit_llama_config dense(void) {
    return (pipit_llama_config){.vocab = 40, .max_ctx = 16, .ctx = 8, .layers = 2, .heads = 4, .kv_heads = 2,
                                .dim = 16, .ffn_hidden = 24, .norm_eps = 1e-5, .rope_theta = 1e4, .tied = 0,
                                .batch = 2, .stages = 1, .dtype = PIPIT_F32};
}

static pipit_llama_config mixtral_like(void) {
    pipit_llama_config c = dense();
    c.layers = 4, c.experts = 4, c.top_k = 2, c.capacity_factor = 1.0, c.shared_experts = 1, c.aux_loss = 0.01;
    return c;
}

typedef struct {
    pipit_graph *g;
    pipit_program *p;
} model;

static pipit_status make(model *m, const pipit_llama_config *c, int M, pipit_schedule *sch) {
    m->g = pipit_graph_new();
    pipit_val loss = pipit_llama_build(m->g, c);
    pipit_status s = pipit_compile(m->g, loss,
                                   &(pipit_options){.microbatches = M, .schedule = sch,
                                                    .optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1),
                                                    .clip_norm = 0.5},
                                   &m->p);
    if (!s) s = pipit_llama_init(m->p, c, 7);
    return s;
}

static void drop(model *m) {
    pipit_program_free(m->p);
    pipit_graph_free(m->g);
}

/* Tokens and targets of M microbatches of [B, T], from seed. */
typedef struct {
    int32_t tok[8][64], tgt[8][64];
    pipit_feed f[16];
} feeds;
static void make_feeds(feeds *fd, const pipit_llama_config *c, int M, unsigned seed) {
    int n = c->batch * c->ctx;
    for (int mb = 0; mb < M; mb++) {
        for (int i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            fd->tok[mb][i] = (int32_t)((seed >> 16) % (unsigned)c->vocab);
            seed = seed * 1103515245u + 12345u;
            fd->tgt[mb][i] = (int32_t)((seed >> 16) % (unsigned)c->vocab);
        }
        fd->f[2 * mb] = (pipit_feed){PIPIT_LLAMA_TOKENS, fd->tok[mb], sizeof(int32_t) * (size_t)n};
        fd->f[2 * mb + 1] = (pipit_feed){PIPIT_LLAMA_TARGETS, fd->tgt[mb], sizeof(int32_t) * (size_t)n};
    }
}

/* Whether param `name` of a and `bname` of b hold the same bits. */
static int same_param(pipit_program *a, const char *name, pipit_program *b, const char *bname) {
    int64_t n = 0, nb = 0;
    if (pipit_program_param_numel(a, name, &n) || pipit_program_param_numel(b, bname, &nb) || n != nb) return 0;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    int same = !pipit_program_get_param(a, name, x, sizeof(float) * (size_t)n) &&
               !pipit_program_get_param(b, bname, y, sizeof(float) * (size_t)n) &&
               memcmp(x, y, sizeof(float) * (size_t)n) == 0;
    free(x);
    free(y);
    return same;
}

/* The dense name's MoE name: mlp.X_proj -> mlp.experts.X_proj ([F, C] and [1, F, C]: the same bytes). */
static const char *moe_name(const char *name, char *buf, size_t n) {
    const char *at = strstr(name, ".mlp.");
    if (!at) return name;
    snprintf(buf, n, "%.*s.mlp.experts.%s", (int)(at - name), name, at + 5);
    return buf;
}

PIPIT_TEST(llama_moe_one_expert_equals_dense) {
    pipit_llama_config dc = dense(), mc = dense();
    mc.experts = 1, mc.top_k = 1, mc.dropless = 1;
    model d, m;
    ASSERT_OK(make(&d, &dc, 2, NULL));
    ASSERT_OK(make(&m, &mc, 2, NULL));
    char buf[160];
    for (int i = 0; i < pipit_program_num_params(d.p); i++) { /* the dense weights into the MoE model */
        const char *name = pipit_program_param_name(d.p, i);
        int64_t n = 0;
        ASSERT_OK(pipit_program_param_numel(d.p, name, &n));
        float *w = malloc(sizeof(float) * (size_t)n);
        ASSERT_OK(pipit_program_get_param(d.p, name, w, sizeof(float) * (size_t)n));
        ASSERT_OK(pipit_program_set_param(m.p, moe_name(name, buf, sizeof buf), w, sizeof(float) * (size_t)n));
        free(w);
    }
    ASSERT_EQ_I64(pipit_program_num_params(m.p), pipit_program_num_params(d.p) + dc.layers); /* + the routers */
    feeds fd;
    for (int step = 0; step < 3; step++) {
        make_feeds(&fd, &dc, 2, 100u + (unsigned)step);
        pipit_metrics a, b;
        ASSERT_OK(pipit_step(d.p, fd.f, 2, 1, &a));
        ASSERT_OK(pipit_step(m.p, fd.f, 2, 1, &b));
        ASSERT_TRUE(memcmp(&a.loss, &b.loss, sizeof a.loss) == 0);
    }
    for (int i = 0; i < pipit_program_num_params(d.p); i++) {
        const char *name = pipit_program_param_name(d.p, i);
        if (!same_param(d.p, name, m.p, moe_name(name, buf, sizeof buf)))
            PIPIT_FAIL_("%s differs from the dense model's after 3 steps", name);
    }
    drop(&d);
    drop(&m);
}

/* One rank vs two at several schedules: losses and parameters bit for bit. */
PIPIT_TEST(llama_moe_pipeline_bitwise) {
    pipit_llama_config c = mixtral_like();
    const int M = 4;
    const pipit_schedule_kind kinds[] = {PIPIT_SCHED_GPIPE, PIPIT_SCHED_1F1B, PIPIT_SCHED_ZB_H1};
    model ref;
    ASSERT_OK(make(&ref, &c, M, NULL));
    double want[2];
    feeds fd;
    for (int step = 0; step < 2; step++) {
        make_feeds(&fd, &c, M, 7u + (unsigned)step);
        pipit_metrics m;
        ASSERT_OK(pipit_step(ref.p, fd.f, 2, 1, &m));
        want[step] = m.loss;
    }
    ASSERT_TRUE(isfinite(want[0]) && want[0] > 0);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        pipit_llama_config c2 = c;
        c2.stages = 2;
        pipit_schedule *sch = NULL;
        ASSERT_OK(pipit_schedule_build(kinds[k], 2, 1, M, &sch));
        model pp;
        ASSERT_OK(make(&pp, &c2, M, sch));
        for (int step = 0; step < 2; step++) {
            make_feeds(&fd, &c, M, 7u + (unsigned)step);
            pipit_metrics m;
            ASSERT_OK(pipit_step(pp.p, fd.f, 2, 1, &m));
            if (memcmp(&m.loss, &want[step], sizeof m.loss) != 0)
                PIPIT_FAIL_("%s step %d: loss %.17g, one rank %.17g", pipit_schedule_kind_name(kinds[k]), step, m.loss,
                            want[step]);
        }
        for (int i = 0; i < pipit_program_num_params(ref.p); i++) {
            const char *name = pipit_program_param_name(ref.p, i);
            if (!same_param(ref.p, name, pp.p, name))
                PIPIT_FAIL_("%s: %s differs from the one-rank run", pipit_schedule_kind_name(kinds[k]), name);
        }
        drop(&pp);
        pipit_schedule_free(sch);
    }
    drop(&ref);
}

PIPIT_TEST(llama_moe_learns) {
    pipit_llama_config c = mixtral_like();
    model m;
    ASSERT_OK(make(&m, &c, 2, NULL));
    feeds fd;
    make_feeds(&fd, &c, 2, 3u);
    double first = 0, last = 0;
    for (int step = 0; step < 30; step++) {
        pipit_metrics met;
        ASSERT_OK(pipit_step(m.p, fd.f, 2, 1, &met));
        if (step == 0) first = met.loss;
        last = met.loss;
    }
    fprintf(stderr, "loss %.4f -> %.4f over 30 steps of one batch\n", first, last);
    ASSERT_TRUE(last < 0.7 * first);
    drop(&m);
}

PIPIT_TEST(llama_moe_params_and_refusals) {
    pipit_llama_config c = dense();
    int64_t n0 = pipit_llama_num_params(&c);
    c.experts = 4, c.top_k = 2, c.dropless = 1, c.moe_every = 2, c.shared_experts = 1;
    /* layer 1 (of 0, 1) is MoE: its MLP 3 C F becomes E (3 C F) + E C + 3 C F (the shared expert) */
    int64_t C = 16, F = 24;
    ASSERT_EQ_I64(pipit_llama_num_params(&c), n0 + 3 * 3 * C * F + 4 * C + 3 * C * F);
    ASSERT_OK(pipit_llama_check(&c));
    /* model FLOPs per token: 6 x the params a token's matmuls use, so the
     * MoE layer counts its router, top_k = 2 of the 4 experts and the
     * shared one: 6 (2 (3 C F) + 4 C + 3 C F) more than the dense layer's
     * 6 (3 C F) (the attention term is the same) */
    pipit_llama_config d = dense();
    ASSERT_NEAR_F64(pipit_llama_flops_per_token(&c) - pipit_llama_flops_per_token(&d),
                    6.0 * (double)(2 * 3 * C * F + 4 * C + 3 * C * F - 3 * C * F), 1e-6);
#define REFUSED(assign, needle)                                       \
    do {                                                              \
        pipit_llama_config c_ = dense();                              \
        c_.experts = 4, c_.top_k = 2, c_.capacity_factor = 1.25;      \
        assign;                                                       \
        ASSERT_STATUS(pipit_llama_check(&c_), PIPIT_STATUS_INVALID);  \
        ASSERT_MSG_HAS(needle);                                       \
    } while (0)
    REFUSED(c_.top_k = 5, "top_k 5 must be in 1..experts (4)");
    REFUSED(c_.top_k = 0, "top_k 0 must be in 1..experts (4)");
    REFUSED(c_.capacity_factor = 0, "capacity_factor 0 must be > 0");
    REFUSED(c_.capacity_factor = -1, "capacity_factor -1 must be > 0");
    REFUSED(c_.experts = -2, "experts -2 must be >= 1");
    REFUSED((c_.experts = 0, c_.capacity_factor = 0), "given without experts");
    REFUSED(c_.router = 2, "router 2 is not 0 (softmax) or 1 (sigmoid)");
    REFUSED(c_.aux_loss = -0.5, "aux_loss -0.5 must be a number >= 0");
    REFUSED(c_.aux_loss = NAN, "aux_loss nan must be a number >= 0");
    REFUSED(c_.shared_experts = -1, "shared_experts -1 and moe_every 0 must be >= 0");
#undef REFUSED
    /* tensor parallelism (test_moe_tp.c): built for the stacked experts; Hugging Face's per-expert params refused */
    c.capacity_factor = 1.0;
    pipit_graph *g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    ASSERT_TRUE(pipit_llama_build(g, &c).id >= 0);
    pipit_graph_free(g);
    c.moe_layout = PIPIT_LLAMA_MOE_QWEN2;
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    ASSERT_TRUE(pipit_llama_build(g, &c).id < 0);
    ASSERT_MSG_HAS("tensor parallelism (T = 2) with Hugging Face's per-expert weights (moe_layout 2) is not built");
    pipit_graph_free(g);
}

/* The balance term by hand: with 1 expert every token's one choice is it
 * (f = 1) with probability 1 (P = 1), so each MoE layer adds E f P = 1:
 * the loss grows by aux_loss x layers exactly (up to the sum's rounding). */
PIPIT_TEST(llama_moe_aux_loss_by_hand) {
    pipit_llama_config c = dense();
    c.experts = 1, c.top_k = 1, c.dropless = 1;
    model a, b;
    ASSERT_OK(make(&a, &c, 1, NULL));
    c.aux_loss = 0.25;
    ASSERT_OK(make(&b, &c, 1, NULL));
    feeds fd;
    make_feeds(&fd, &c, 1, 5u);
    pipit_metrics ma, mb;
    ASSERT_OK(pipit_step(a.p, fd.f, 2, 0, &ma));
    ASSERT_OK(pipit_step(b.p, fd.f, 2, 0, &mb));
    ASSERT_NEAR_F64(mb.loss - ma.loss, 0.25 * c.layers, 1e-6);
    drop(&a);
    drop(&b);
}

/* The routing bias (route_bias 1): a param initialised to 0 that leaves
 * the loss's bits alone, takes no gradient, and steers the choices only:
 * +5 on one expert (softmax scores are in [0, 1]) sends every token of
 * that layer to it (top-1), read back through pipit_llama_build_moe's
 * choices; the other layer's choices are those of the run without. */
PIPIT_TEST(llama_moe_route_bias_steers) {
    pipit_llama_config c = dense();
    c.experts = 4, c.top_k = 1, c.dropless = 1;
    model a, b;
    ASSERT_OK(make(&a, &c, 1, NULL));
    int64_t n0 = pipit_llama_num_params(&c);
    c.route_bias = 1;
    ASSERT_EQ_I64(pipit_llama_num_params(&c) - n0, (int64_t)c.layers * c.experts); /* E per MoE layer */
    pipit_llama_config r = dense();
    r.route_bias = 1; /* without experts */
    ASSERT_TRUE(pipit_llama_check(&r) == PIPIT_STATUS_INVALID && strstr(pipit_errmsg(), "route_bias"));
    r = c, r.route_bias = 2;
    ASSERT_TRUE(pipit_llama_check(&r) == PIPIT_STATUS_INVALID && strstr(pipit_errmsg(), "route_bias 2"));
    b.g = pipit_graph_new();
    pipit_val ch[2];
    pipit_val loss = pipit_llama_build_moe(b.g, &c, NULL, ch);
    ASSERT_OK(pipit_graph_status(b.g));
    ASSERT_OK(pipit_compile(b.g, loss, &(pipit_options){.microbatches = 1, .outputs = ch, .noutputs = 2}, &b.p));
    ASSERT_OK(pipit_llama_init(b.p, &c, 7));
    float bias[4] = {1, 1, 1, 1};
    ASSERT_OK(pipit_program_get_param(b.p, "model.layers.1.mlp.route_bias", bias, sizeof bias));
    for (int e = 0; e < 4; e++) ASSERT_TRUE(bias[e] == 0.0f);
    feeds fd;
    make_feeds(&fd, &c, 1, 9u);
    pipit_metrics ma, mb;
    ASSERT_OK(pipit_step(a.p, fd.f, 2, 0, &ma));
    ASSERT_OK(pipit_step(b.p, fd.f, 2, 0, &mb));
    ASSERT_TRUE(ma.loss == mb.loss); /* bias 0: the same bits */
    float grad[4] = {1, 1, 1, 1};
    ASSERT_OK(pipit_program_get_grad(b.p, "model.layers.1.mlp.route_bias", grad, sizeof grad));
    for (int e = 0; e < 4; e++) ASSERT_TRUE(grad[e] == 0.0f);
    int32_t before[2][16], after[2][16];
    for (int l = 0; l < 2; l++) ASSERT_OK(pipit_program_get_output(b.p, ch[l], 0, before[l], sizeof before[l]));
    float steer[4] = {0, 0, 5, 0};
    ASSERT_OK(pipit_program_set_param(b.p, "model.layers.1.mlp.route_bias", steer, sizeof steer));
    ASSERT_OK(pipit_step(b.p, fd.f, 2, 0, &mb));
    for (int l = 0; l < 2; l++) ASSERT_OK(pipit_program_get_output(b.p, ch[l], 0, after[l], sizeof after[l]));
    int moved = 0;
    for (int i = 0; i < 16; i++) {
        ASSERT_TRUE(after[0][i] == before[0][i]);
        ASSERT_TRUE(after[1][i] == 2);
        moved += before[1][i] != 2;
    }
    ASSERT_TRUE(moved > 0); /* the bias changed something */
    drop(&a);
    drop(&b);
}
