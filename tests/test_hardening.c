/*
 * test_hardening.c — inputs that used to be accepted but wrong, undefined
 * behaviour on non-finite values, and messages that misled: each case is
 * now a clear error naming the user's input, or correct.
 */
#include <math.h>
#include <string.h>

#include "pipit.h"
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
    ASSERT_OK(pipit_step(p, &(pipit_feed){"x", x}, 1, 0, &m));
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
