/*
 * test_postloop.c — user ops on accumulated gradients (pipit_grad_of /
 * pipit_set_grad): they change the update exactly as the math says, see
 * untransformed gradients, run on the ranks that hold the params (a
 * transform on a rank-0 param reading a last-rank gradient), give the
 * sequential run's bits when pipelined, and reject bad uses clearly.
 */
#include <string.h>

#include "pipit_gpt2.h"
#include "runtime/program.h"
#include "test.h"

enum { V = 64, T = 8, L = 4, H = 2, C = 16, B = 2, M = 2 };

typedef void (*transform_fn)(pipit_graph *g);

static pipit_val param_by_name(pipit_graph *g, const char *name) {
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].op == PIPIT_OP_PARAM && strcmp(g->nodes[i].name, name) == 0) return (pipit_val){g, i};
    return (pipit_val){g, -1};
}

static void feeds_for(int step, int32_t *buf, pipit_feed *feeds) {
    for (int m = 0; m < M; m++) {
        int32_t *tok = buf + m * 3 * B * T, *tgt = tok + B * T, *pos = tgt + B * T;
        for (int i = 0; i < B * T; i++) {
            tok[i] = (step * 31 + m * 7 + i * 5) % V;
            tgt[i] = (tok[i] * 3 + 2) % V;
            pos[i] = i % T;
        }
        size_t nb = sizeof(int32_t) * (size_t)(B * T);
        feeds[3 * m] = (pipit_feed){PIPIT_GPT2_TOKENS, tok, nb};
        feeds[3 * m + 1] = (pipit_feed){PIPIT_GPT2_TARGETS, tgt, nb};
        feeds[3 * m + 2] = (pipit_feed){PIPIT_GPT2_POSITIONS, pos, nb};
    }
}

/* Trains 2 SGD steps; fills params (all, concatenated) and returns count. */
static size_t run(int P, double lr, transform_fn tf, float *out, int update) {
    pipit_gpt2_config c = {V, T, T, L, H, C, B, P, PIPIT_F32, 0};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    if (tf) tf(g);
    pipit_schedule *sch = NULL;
    if (P > 1 && pipit_schedule_build(PIPIT_SCHED_1F1B, P, 1, M, &sch)) return 0;
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = M, .optimizer = pipit_sgd(lr)}, &p)) {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
        return 0;
    }
    pipit_gpt2_init(p, &c, 3);
    int32_t buf[3 * B * T * M];
    pipit_feed feeds[3 * M];
    for (int step = 0; step < 2; step++) {
        feeds_for(step, buf, feeds);
        if (pipit_step(p, feeds, 3, update, NULL)) return 0;
    }
    size_t n = 0;
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int nd;
        int64_t shape[4], cnt = 1;
        pipit_program_param_shape(p, name, &nd, shape);
        for (int k = 0; k < nd; k++) cnt *= shape[k];
        if (update) pipit_program_get_param(p, name, out + n, sizeof(float) * (size_t)cnt);
        else pipit_program_get_grad(p, name, out + n, sizeof(float) * (size_t)cnt);
        n += (size_t)cnt;
    }
    pipit_program_free(p);
    pipit_schedule_free(sch);
    pipit_graph_free(g);
    return n;
}

static void halve_all(pipit_graph *g) {
    int32_t n = g->n;
    for (int32_t i = 0; i < n; i++)
        if (g->nodes[i].op == PIPIT_OP_PARAM) {
            pipit_val p = {g, i};
            pipit_set_grad(g, p, pipit_scale(g, pipit_grad_of(g, p), 0.5));
        }
}

static float a[200000], b[200000];

PIPIT_TEST(postloop_halving_equals_half_lr) {
    size_t n1 = run(1, 0.2, halve_all, a, 1), n2 = run(1, 0.1, NULL, b, 1);
    ASSERT_TRUE(n1 > 0 && n1 == n2);
    ASSERT_TRUE(memcmp(a, b, n1 * sizeof(float)) == 0); /* 0.2 * (g / 2) == 0.1 * g exactly */
    size_t n3 = run(2, 0.2, halve_all, a, 1);           /* and the same when pipelined */
    ASSERT_TRUE(n3 == n1 && memcmp(a, b, n1 * sizeof(float)) == 0);
}

/* ln_f is on the last rank, h.0.ln_1 on the first: the transform of one
 * reads the other's accumulated gradient, so both ranks must hold both. */
static void cross_rank(pipit_graph *g) {
    pipit_val w0 = param_by_name(g, "h.0.ln_1.weight"), wf = param_by_name(g, "ln_f.weight");
    pipit_set_grad(g, w0, pipit_add(g, pipit_grad_of(g, w0), pipit_scale(g, pipit_grad_of(g, wf), 3.0)));
    pipit_set_grad(g, wf, pipit_grad_of(g, w0)); /* sees w0's untransformed gradient */
}

PIPIT_TEST(postloop_cross_rank_transform) {
    static float plain[200000];
    size_t n = run(1, 0.1, NULL, plain, 0); /* untransformed gradients */
    ASSERT_TRUE(n > 0);
    size_t n1 = run(1, 0.1, cross_rank, a, 0), n2 = run(2, 0.1, cross_rank, b, 0);
    ASSERT_TRUE(n1 == n && n2 == n);
    ASSERT_TRUE(memcmp(a, b, n * sizeof(float)) == 0); /* pipelined == sequential */
    /* locate the two params (HF order: wte, wpe, h.0.ln_1.weight, ...) */
    size_t off0 = (size_t)V * C + (size_t)T * C, offf = n - 2 * C; /* ln_f.weight, ln_f.bias last */
    for (int k = 0; k < C; k++) {
        ASSERT_TRUE(a[offf + k] == plain[off0 + k]);
        ASSERT_TRUE(a[off0 + k] == plain[off0 + k] + (float)(3.0 * plain[offf + k]) ||
                    a[off0 + k] == plain[off0 + k] + 3.0f * plain[offf + k]);
    }
}

PIPIT_TEST(postloop_errors) {
    pipit_graph *g = pipit_graph_new();
    int64_t s[2] = {2, 2};
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 2, s), x = pipit_input(g, "x", PIPIT_F32, 2, s);
    pipit_val loss = pipit_sum(g, pipit_mul(g, w, x));
    pipit_val bad = pipit_grad_of(g, x);
    ASSERT_TRUE(bad.id < 0);
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_graph_errmsg(g), "pipit_param") != NULL);
    pipit_graph_free(g);

    g = pipit_graph_new();
    w = pipit_param(g, "w", PIPIT_F32, 2, s);
    x = pipit_input(g, "x", PIPIT_F32, 2, s);
    loss = pipit_sum(g, pipit_mul(g, w, x));
    ASSERT_STATUS(pipit_set_grad(g, w, pipit_sum(g, pipit_grad_of(g, w))), PIPIT_STATUS_SHAPE);
    pipit_graph_free(g);

    g = pipit_graph_new();
    w = pipit_param(g, "w", PIPIT_F32, 2, s);
    x = pipit_input(g, "x", PIPIT_F32, 2, s);
    loss = pipit_sum(g, pipit_mul(g, w, x));
    ASSERT_OK(pipit_set_grad(g, w, pipit_mul(g, pipit_grad_of(g, w), x))); /* reads an input */
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, NULL, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("input 'x'");
    pipit_graph_free(g);
}
