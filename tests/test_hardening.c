/*
 * test_hardening.c — inputs that used to be accepted but wrong, undefined
 * behaviour on non-finite values, and messages that misled: each case is
 * now a clear error naming the user's input, or correct.
 */
#include <math.h>
#include <string.h>

#include "pipit.h"
#include "pipit_inspect.h"
#include "test.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

/* loss = sum(w * x) over a [3] param and a [3] input. */
static pipit_val tiny(pipit_graph *g, pipit_val *w) {
    *w = pipit_param(g, "w", PIPIT_F32, 1, SH(3));
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 1, SH(3));
    return pipit_sum(g, pipit_mul(g, *w, x));
}

/* ---- class: options and graph states accepted but wrong ---- */

PIPIT_TEST(hard_options_nonfinite) {
    pipit_graph *g = pipit_graph_new();
    pipit_val w, l = tiny(g, &w);
    pipit_program *p = NULL;
    const struct {
        pipit_optimizer o;
        const char *field;
    } bad[] = {
        {pipit_adamw(NAN, 0.9, 0.95, 1e-8, 0), "optimizer.lr"},
        {pipit_adamw(INFINITY, 0.9, 0.95, 1e-8, 0), "optimizer.lr"},
        {pipit_adamw(-1, 0.9, 0.95, 1e-8, 0), "optimizer.lr"},
        {pipit_adamw(1e-3, NAN, 0.95, 1e-8, 0), "optimizer.beta1"},
        {pipit_adamw(1e-3, 0.9, NAN, 1e-8, 0), "optimizer.beta2"},
        {pipit_adamw(1e-3, 0.9, 1.0, 1e-8, 0), "optimizer.beta2"},
        {pipit_adamw(1e-3, 0.9, 0.95, NAN, 0), "optimizer.eps"},
        {pipit_adamw(1e-3, 0.9, 0.95, INFINITY, 0), "optimizer.eps"},
        {pipit_adamw(1e-3, 0.9, 0.95, 1e-8, NAN), "optimizer.weight_decay"},
        {pipit_adamw(1e-3, 0.9, 0.95, 1e-8, -INFINITY), "optimizer.weight_decay"},
        {pipit_sgd(NAN), "optimizer.lr"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.optimizer = bad[i].o}, &p), PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS(bad[i].field);
        ASSERT_TRUE(p == NULL);
    }
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.optimizer = pipit_adamw(1e-3, 0.9, 0.95, NAN, 0)}, &p),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("finite");
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.clip_norm = NAN}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("clip_norm");
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.clip_norm = INFINITY}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("clip_norm");
    pipit_optimizer k = pipit_sgd(1e-3);
    k.kind = (pipit_optimizer_kind)7;
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.optimizer = k}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("optimizer.kind");
    ASSERT_MSG_HAS("got 7");
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.threads = -2}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("1..256");
    /* still usable */
    ASSERT_OK(pipit_compile(g, l, &(pipit_options){.optimizer = pipit_sgd(0.1), .clip_norm = 1.0}, &p));
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(hard_loss_reads_grad_of) {
    pipit_graph *g = pipit_graph_new();
    pipit_val w, l = tiny(g, &w);
    l = pipit_add(g, l, pipit_sum(g, pipit_grad_of(g, w)));
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, l, NULL, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pipit_grad_of('w')");
    ASSERT_MSG_HAS("after the microbatch loop");
    ASSERT_TRUE(p == NULL);
    pipit_graph_free(g);
}

PIPIT_TEST(hard_loss_is_yield) {
    for (int P = 1; P <= 3; P++) {
        pipit_graph *g = pipit_graph_new();
        pipit_val w = pipit_param(g, "w", PIPIT_F32, 1, SH(3));
        pipit_val h = pipit_mul(g, w, pipit_input(g, "x", PIPIT_F32, 1, SH(3)));
        if (P == 3) h = pipit_yield(g, h);
        pipit_val l = pipit_yield(g, pipit_mean(g, h));
        if (P == 1) l = pipit_reshape(g, l, 0, NULL); /* through an alias too */
        pipit_schedule *sc = NULL;
        if (P > 1) ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, P, 1, 2, &sc));
        pipit_program *p = NULL;
        ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.schedule = sc, .microbatches = 2}, &p),
                      PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS("pipit_yield");
        ASSERT_MSG_HAS("before the yield");
        pipit_schedule_free(sc);
        pipit_graph_free(g);
    }
}

/* Ops built after the loss (here on a param created after it) are not part
 * of the loss: compile and step work, the gradient is the loss's. Used to
 * read past autodiff's arrays (ASan heap-buffer-overflow). */
PIPIT_TEST(hard_ops_after_loss) {
    pipit_graph *g = pipit_graph_new();
    pipit_val w, l = tiny(g, &w);
    pipit_val w2 = pipit_param(g, "w2", PIPIT_F32, 1, SH(3));
    (void)pipit_mul(g, pipit_add(g, w2, w), w);
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, l, &(pipit_options){.optimizer = pipit_sgd(0.5)}, &p));
    float x[3] = {1, 2, 3}, wv[3] = {1, 1, 1}, gw[3];
    ASSERT_OK(pipit_program_set_param(p, "w", wv, sizeof wv));
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, &(pipit_feed){"x", x, sizeof x}, 1, 0, &m));
    ASSERT_NEAR_F64(m.loss, 6.0, 0);
    ASSERT_OK(pipit_program_get_grad(p, "w", gw, sizeof gw));
    for (int i = 0; i < 3; i++) ASSERT_NEAR_F64(gw[i], x[i], 0);
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* A compile that fails after autodiff (here: a schedule for other M) leaves
 * the graph compilable: it used to say "already compiled" on the retry. */
PIPIT_TEST(hard_failed_compile_rolls_back) {
    pipit_graph *g = pipit_graph_new();
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 1, SH(3));
    pipit_val h = pipit_yield(g, pipit_mul(g, w, pipit_input(g, "x", PIPIT_F32, 1, SH(3))));
    pipit_val l = pipit_mean(g, h);
    pipit_schedule *s4 = NULL, *s2 = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 4, &s4));
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &s2));
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.schedule = s4, .microbatches = 2}, &p), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("4 microbatches");
    ASSERT_OK(pipit_graph_status(g));
    ASSERT_OK(pipit_compile(g, l, &(pipit_options){.schedule = s2, .microbatches = 2}, &p));
    pipit_program_free(p);
    /* once compiled, a second compile is still refused */
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.schedule = s2, .microbatches = 2}, &p), PIPIT_STATUS_MISUSE);
    pipit_schedule_free(s4);
    pipit_schedule_free(s2);
    pipit_graph_free(g);
}

/* pipit_set_grad with a value of the wrong shape, dtype or graph. */
PIPIT_TEST(hard_set_grad_mismatch) {
    pipit_graph *g = pipit_graph_new(), *o = pipit_graph_new();
    pipit_val w, l = tiny(g, &w);
    (void)l;
    ASSERT_STATUS(pipit_set_grad(g, w, pipit_param(o, "o", PIPIT_F32, 1, SH(3))), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("another graph");
    pipit_graph_free(g);
    g = pipit_graph_new();
    l = tiny(g, &w);
    ASSERT_STATUS(pipit_set_grad(g, w, pipit_param(g, "d", PIPIT_F64, 1, SH(3))), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("f64");
    pipit_graph_free(g);
    pipit_graph_free(o);
}

/* ---- class: undefined behaviour on non-finite values ---- */

/* A NaN weight flows through attention's softmax (fast_expf's float-to-int
 * step was UB on NaN) to a NaN loss: no sanitizer report, "loss is nan",
 * and the update is skipped (a NaN gradient norm), parameters unchanged. */
PIPIT_TEST(hard_nan_through_attention) {
    enum { B = 1, T = 4, C = 4, V = 5 };
    for (int dt = 0; dt < 2; dt++) {
        pipit_dtype f = dt ? PIPIT_F64 : PIPIT_F32;
        pipit_graph *g = pipit_graph_new();
        pipit_val tok = pipit_input(g, "tok", PIPIT_I32, 2, SH(B, T));
        pipit_val tgt = pipit_input(g, "tgt", PIPIT_I32, 2, SH(B, T));
        pipit_val wte = pipit_param(g, "wte", f, 2, SH(V, 3 * C));
        pipit_val w = pipit_param(g, "w", f, 2, SH(C, V));
        pipit_val h = pipit_attention(g, pipit_embed(g, wte, tok), 2);
        pipit_val l = pipit_xent_mean(g, pipit_gelu(g, pipit_matmul(g, h, w, 0, 0)), tgt);
        pipit_program *p = NULL;
        ASSERT_OK(pipit_compile(g, l, &(pipit_options){.optimizer = pipit_sgd(0.1)}, &p));
        double e[V * 3 * C], wv[C * V];
        float ef[V * 3 * C], wf[C * V];
        for (int i = 0; i < V * 3 * C; i++) e[i] = ef[i] = (float)((i % 7) - 3) * 0.25f;
        for (int i = 0; i < C * V; i++) wv[i] = wf[i] = (float)((i % 5) - 2) * 0.5f;
        e[3] = ef[3] = NAN;     /* a q of token 0 */
        e[2 * C] = ef[2 * C] = INFINITY; /* a v of token 0 */
        size_t es = dt ? sizeof(double) : sizeof(float);
        ASSERT_OK(pipit_program_set_param(p, "wte", dt ? (void *)e : (void *)ef, es * V * 3 * C));
        ASSERT_OK(pipit_program_set_param(p, "w", dt ? (void *)wv : (void *)wf, es * C * V));
        int32_t tk[B * T] = {0, 1, 2, 3}, tg[B * T] = {1, 2, 3, 4};
        pipit_feed feeds[2] = {{"tok", tk, sizeof tk}, {"tgt", tg, sizeof tg}};
        pipit_metrics m;
        ASSERT_STATUS(pipit_step(p, feeds, 2, 1, &m), PIPIT_STATUS_RUNTIME);
        ASSERT_MSG_HAS("loss is nan");
        ASSERT_MSG_HAS("update was skipped");
        ASSERT_TRUE(isnan(m.loss));
        ASSERT_TRUE(!isfinite(m.grad_norm));
        ASSERT_EQ_I64(pipit_program_opt_steps(p), 0);
        double back[C * V];
        float backf[C * V];
        ASSERT_OK(pipit_program_get_param(p, "w", dt ? (void *)back : (void *)backf, es * C * V));
        ASSERT_TRUE(memcmp(dt ? (void *)back : (void *)backf, dt ? (void *)wv : (void *)wf, es * C * V) == 0);
        pipit_program_free(p);
        pipit_graph_free(g);
    }
}

/* A finite loss with a gradient whose norm overflows stops the step too. */
PIPIT_TEST(hard_nonfinite_grad_norm) {
    pipit_graph *g = pipit_graph_new();
    pipit_val w = pipit_param(g, "w", PIPIT_F64, 1, SH(2));
    pipit_val x = pipit_input(g, "x", PIPIT_F64, 1, SH(2));
    pipit_val l = pipit_sum(g, pipit_mul(g, w, x));
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, l, &(pipit_options){.optimizer = pipit_adamw(1e-3, 0.9, 0.95, 1e-8, 0)}, &p));
    double xv[2] = {1e300, -1e300}, wv[2];
    pipit_metrics m;
    ASSERT_STATUS(pipit_step(p, &(pipit_feed){"x", xv, sizeof xv}, 1, 1, &m), PIPIT_STATUS_RUNTIME);
    ASSERT_MSG_HAS("gradient norm is inf");
    ASSERT_MSG_HAS("parameters are unchanged");
    ASSERT_NEAR_F64(m.loss, 0, 0);
    ASSERT_OK(pipit_program_get_param(p, "w", wv, sizeof wv));
    ASSERT_TRUE(wv[0] == 0 && wv[1] == 0);
    ASSERT_EQ_I64(pipit_program_opt_steps(p), 0);
    /* a finite step afterwards trains normally */
    xv[0] = 1, xv[1] = 2;
    ASSERT_OK(pipit_step(p, &(pipit_feed){"x", xv, sizeof xv}, 1, 1, &m));
    ASSERT_EQ_I64(pipit_program_opt_steps(p), 1);
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* Finite costs whose simulated sums overflow: a clear error, not a NaN
 * grid column count converted to int (UB). */
PIPIT_TEST(hard_sim_costs_overflow) {
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &s));
    double f[2] = {1e308, 1e308};
    pipit_sim_costs c = {.f = f, .b = f, .w = f};
    pipit_sim_result *r = NULL;
    ASSERT_STATUS(pipit_schedule_simulate(s, &c, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("too large");
    ASSERT_TRUE(r == NULL);
    pipit_schedule_free(s);
}
