/*
 * test_moe_tp.c — mixture of experts under tensor parallelism (expert
 * tensor parallelism = TP, src/models/llama_moe.c): each expert's and the
 * shared experts' hidden width split over the T ranks of a stage, the
 * router replicated. A small MoE Llama trained with SGD (linear in the
 * gradient, so rounding stays rounding):
 *   - T = 2 and 4 (and T = 2 with sequence parallelism) vs T = 1: the
 *     losses, every gradient of the last step and every parameter within
 *     1e-6 relative, for the softmax router with a shared expert, the
 *     balance loss and capacity drops, and the sigmoid router dropless
 *     with two gated shared experts, a routing bias and every other layer
 *     MoE (the router, routing-bias and shared-gate gradients are the
 *     ones a missing sum over T would halve or double);
 *   - at T = 2, P = 2 at GPipe and 1F1B: the same bits as each other;
 *   - params and moments read whole at T = 2 and set into T = 1 (AdamW)
 *     continue to the same losses: the layout is free;
 *   - expert and tensor parallelism together: refused by message.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "pipit_llama.h"
#include "pipit_moe.h"
#include "test.h"

static pipit_llama_config cfg(int variant) {
    pipit_llama_config c = {.vocab = 40, .max_ctx = 16, .ctx = 8, .layers = 2, .heads = 4, .kv_heads = 4,
                            .dim = 16, .ffn_hidden = 24, .norm_eps = 1e-5, .rope_theta = 1e4, .tied = 0,
                            .batch = 2, .stages = 1, .dtype = PIPIT_F32, .experts = 4, .top_k = 2};
    if (variant == 0) c.capacity_factor = 1.0, c.shared_experts = 1, c.aux_loss = 0.01; /* Mixtral-like, drops */
    else
        c.dropless = 1, c.router = PIPIT_ROUTER_SIGMOID, c.shared_experts = 2, c.shared_gate = 1, c.route_bias = 1,
        c.aux_loss = 0.02, c.moe_every = 2, c.layers = 3; /* DeepSeek/Qwen-like */
    return c;
}

typedef struct {
    pipit_graph *g;
    pipit_program *p;
} model;

static pipit_status make(model *m, const pipit_llama_config *c, int M, int T, int sp, int sgd, pipit_schedule *sch) {
    m->g = pipit_graph_new();
    m->p = NULL;
    pipit_status s = pipit_graph_set_tensor_parallel(m->g, T);
    if (!s && sp) s = pipit_graph_set_sequence_parallel(m->g, 1);
    if (s) return s;
    pipit_val loss = pipit_llama_build(m->g, c);
    if (loss.id < 0) return pipit_graph_status(m->g) ? pipit_graph_status(m->g) : PIPIT_STATUS_INVALID;
    s = pipit_compile(m->g, loss,
                      &(pipit_options){.microbatches = M, .schedule = sch, .tensor_parallel = T,
                                       .optimizer = sgd ? pipit_sgd(0.05) : pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1),
                                       .clip_norm = 0.5},
                      &m->p);
    if (!s) s = pipit_llama_init(m->p, c, 7);
    return s;
}

static void drop(model *m) {
    pipit_program_free(m->p);
    pipit_graph_free(m->g);
}

typedef struct {
    int32_t tok[4][16], tgt[4][16];
    pipit_feed f[8];
} feeds;
static void make_feeds(feeds *fd, const pipit_llama_config *c, int n, unsigned seed) {
    int k = c->batch * c->ctx;
    for (int mb = 0; mb < n; mb++) {
        for (int i = 0; i < k; i++) {
            seed = seed * 1103515245u + 12345u;
            fd->tok[mb][i] = (int32_t)((seed >> 16) % (unsigned)c->vocab);
            seed = seed * 1103515245u + 12345u;
            fd->tgt[mb][i] = (int32_t)((seed >> 16) % (unsigned)c->vocab);
        }
        fd->f[2 * mb] = (pipit_feed){PIPIT_LLAMA_TOKENS, fd->tok[mb], sizeof(int32_t) * (size_t)k};
        fd->f[2 * mb + 1] = (pipit_feed){PIPIT_LLAMA_TARGETS, fd->tgt[mb], sizeof(int32_t) * (size_t)k};
    }
}

enum { STEPS = 3 };

static pipit_status run(model *m, const pipit_llama_config *c, int M, double *out) {
    feeds fd;
    for (int step = 0; step < STEPS; step++) {
        make_feeds(&fd, c, M, 11u); /* one batch: the loss falls */
        pipit_metrics met;
        pipit_status s = pipit_step(m->p, fd.f, 2, 1, &met);
        if (s) return s;
        out[step] = met.loss;
    }
    return PIPIT_STATUS_OK;
}

/* The whole tensor `name` of p: the param (which -1), a moment (0, 1) or
 * the last step's gradient (2); malloc'd, numel in *n; NULL if unreadable. */
static float *read_all(pipit_program *p, const char *name, int which, int64_t *n) {
    if (pipit_program_param_numel(p, name, n)) return NULL;
    float *x = malloc(sizeof(float) * (size_t)*n);
    size_t nb = sizeof(float) * (size_t)*n;
    pipit_status s = which < 0    ? pipit_program_get_param(p, name, x, nb)
                     : which == 2 ? pipit_program_get_grad(p, name, x, nb)
                                  : pipit_program_get_opt_state(p, name, which, x, nb);
    if (s) {
        free(x);
        return NULL;
    }
    return x;
}

/* max |x - y| / max |x| of tensor `name` of a and b; -1 if unreadable;
 * *same: the bits are equal. */
static double diff(pipit_program *a, pipit_program *b, const char *name, int which, int *same) {
    int64_t n = 0, nb = 0;
    float *x = read_all(a, name, which, &n), *y = read_all(b, name, which, &nb);
    double worst = -1, scale = 0;
    if (x && y && n == nb) {
        worst = 0;
        for (int64_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs((double)x[i] - (double)y[i]));
            scale = fmax(scale, fabs((double)x[i]));
        }
        worst /= scale > 0 ? scale : 1;
        *same = memcmp(x, y, sizeof(float) * (size_t)n) == 0;
    }
    free(x);
    free(y);
    return worst;
}

PIPIT_TEST(moe_tp_matches_tp1) {
    const struct { int T, sp; } cases[] = {{2, 0}, {4, 0}, {2, 1}};
    for (int variant = 0; variant < 2; variant++) {
        const pipit_llama_config c = cfg(variant);
        const int M = 2;
        model ref;
        double want[STEPS];
        ASSERT_OK(make(&ref, &c, M, 1, 0, 1, NULL));
        ASSERT_OK(run(&ref, &c, M, want));
        if (!(isfinite(want[STEPS - 1]) && want[STEPS - 1] < want[0])) PIPIT_FAIL_("loss %g -> %g", want[0], want[STEPS - 1]);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            int T = cases[k].T, sp = cases[k].sp;
            model tp;
            double got[STEPS], worst_loss = 0, worst = 0, worst_g = 0;
            ASSERT_OK(make(&tp, &c, M, T, sp, 1, NULL));
            ASSERT_OK(run(&tp, &c, M, got));
            for (int s = 0; s < STEPS; s++) worst_loss = fmax(worst_loss, fabs(got[s] - want[s]) / fabs(want[s]));
            int nmoe = 0;
            for (int i = 0; i < pipit_program_num_params(ref.p); i++) {
                const char *name = pipit_program_param_name(ref.p, i);
                int same = 0;
                double d = diff(ref.p, tp.p, name, -1, &same), dg = diff(ref.p, tp.p, name, 2, &same);
                if (d < 0 || dg < 0) PIPIT_FAIL_("T %d: %s unreadable", T, name);
                if (d > 1e-6 || dg > 1e-6)
                    PIPIT_FAIL_("variant %d T %d%s: %s differs from T = 1 by %.3g (param), %.3g (gradient)", variant, T,
                                sp ? " sp" : "", name, d, dg);
                worst = fmax(worst, d);
                worst_g = fmax(worst_g, dg);
                nmoe += strstr(name, ".mlp.router.") || strstr(name, ".route_bias") || strstr(name, "shared_expert_gate");
            }
            fprintf(stderr, "variant %d T %d%s vs T 1 over %d SGD steps: losses within %.3g, last gradients %.3g, params %.3g (relative)\n",
                    variant, T, sp ? " sp" : "", STEPS, worst_loss, worst_g, worst);
            ASSERT_EQ_I64(nmoe, variant ? 3 : 2); /* routers (+ bias and shared gate) of the MoE layers were compared */
            ASSERT_TRUE(worst_loss <= 1e-6);
            drop(&tp);
        }
        drop(&ref);
    }
}

PIPIT_TEST(moe_tp_bitwise_schedules) {
    pipit_llama_config c = cfg(0);
    c.stages = 2;
    const int M = 4;
    const pipit_schedule_kind kinds[] = {PIPIT_SCHED_GPIPE, PIPIT_SCHED_1F1B};
    model m[2];
    double l[2][STEPS];
    for (int k = 0; k < 2; k++) {
        pipit_schedule *sch = NULL;
        ASSERT_OK(pipit_schedule_build(kinds[k], 2, 1, M, &sch));
        ASSERT_OK(make(&m[k], &c, M, 2, 0, 0, sch));
        ASSERT_OK(run(&m[k], &c, M, l[k]));
        pipit_schedule_free(sch);
    }
    ASSERT_TRUE(memcmp(l[0], l[1], sizeof l[0]) == 0);
    for (int i = 0; i < pipit_program_num_params(m[0].p); i++) {
        const char *name = pipit_program_param_name(m[0].p, i);
        for (int which = -1; which < 3; which++) {
            int same = 0;
            ASSERT_TRUE(diff(m[0].p, m[1].p, name, which, &same) >= 0);
            if (!same) PIPIT_FAIL_("%s (%d) differs between GPipe and 1F1B at T = 2", name, which);
        }
    }
    drop(&m[0]);
    drop(&m[1]);
}

/* Params and moments read whole at T = 2 and set into T = 1: the next
 * steps' losses are the T = 2 run's within 1e-6. */
PIPIT_TEST(moe_tp_layout_free_state) {
    const pipit_llama_config c = cfg(1);
    const int M = 2;
    model a, b;
    double la[STEPS], lb[STEPS];
    ASSERT_OK(make(&a, &c, M, 2, 0, 0, NULL));
    ASSERT_OK(make(&b, &c, M, 1, 0, 0, NULL));
    ASSERT_OK(run(&a, &c, M, la));
    for (int i = 0; i < pipit_program_num_params(a.p); i++) {
        const char *name = pipit_program_param_name(a.p, i);
        for (int which = -1; which < 2; which++) {
            int64_t n = 0;
            float *x = read_all(a.p, name, which, &n);
            ASSERT_TRUE(x != NULL);
            size_t nb = sizeof(float) * (size_t)n;
            ASSERT_OK(which < 0 ? pipit_program_set_param(b.p, name, x, nb) : pipit_program_set_opt_state(b.p, name, which, x, nb));
            free(x);
        }
    }
    ASSERT_OK(pipit_program_set_opt_steps(b.p, pipit_program_opt_steps(a.p)));
    ASSERT_OK(run(&a, &c, M, la));
    ASSERT_OK(run(&b, &c, M, lb));
    for (int s = 0; s < STEPS; s++) ASSERT_TRUE(fabs(la[s] - lb[s]) <= 1e-6 * fabs(la[s]));
    drop(&a);
    drop(&b);
}

PIPIT_TEST(moe_tp_refusals) {
    pipit_llama_config c = cfg(0);
    pipit_graph *g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    ASSERT_OK(pipit_graph_set_expert_parallel(g, 2));
    ASSERT_TRUE(pipit_llama_build(g, &c).id < 0);
    ASSERT_MSG_HAS("expert parallelism (E = 2) with tensor parallelism (T = 2) is not built");
    pipit_graph_free(g);
    c.ffn_hidden = 26; /* 26 / 4 */
    model m;
    ASSERT_TRUE(make(&m, &c, 1, 4, 0, 1, NULL) != PIPIT_STATUS_OK);
    ASSERT_MSG_HAS("tensor parallelism 4 does not divide ffn_hidden 26");
    drop(&m);
}
