/*
 * test_lr.c — the learning-rate schedule (pipit_options.lr_schedule,
 * pipit_lr_at): the formula at chosen steps for cosine and linear (warm-up
 * start and end, the middle of the decay, its end, after it), the same lr
 * in pipit_metrics step by step, SGD and AdamW updates that use lr(t)
 * exactly (f64 params on a known gradient), the zero schedule giving the
 * constant lr's bits, and check_options naming each bad field.
 */
#include <math.h>
#include <string.h>

#include "pipit.h"
#include "test.h"

#define LR 1e-3
#define MIN_LR 1e-4
enum { K = 10, N = 100 };

static double cosine_ref(int64_t t) { /* nanoGPT's get_lr(it), it = t - 1 */
    int64_t it = t - 1;
    if (it < K) return LR * (double)(it + 1) / K;
    if (it > N) return MIN_LR;
    double r = (double)(it - K) / (N - K);
    return MIN_LR + 0.5 * (1.0 + cos(M_PI * r)) * (LR - MIN_LR);
}

static double linear_ref(int64_t t) {
    int64_t it = t - 1;
    if (it < K) return LR * (double)(it + 1) / K;
    if (it > N) return MIN_LR;
    return MIN_LR + (1.0 - (double)(it - K) / (N - K)) * (LR - MIN_LR);
}

PIPIT_TEST(lr_schedule_formula) {
    pipit_lr_schedule cs = {PIPIT_LR_COSINE, K, N, MIN_LR}, ls = {PIPIT_LR_LINEAR, K, N, MIN_LR};
    /* warm-up start, end of warm-up, first decay step, middle, end, after */
    ASSERT_NEAR_F64(pipit_lr_at(&cs, LR, 1), LR / K, 1e-18);
    ASSERT_NEAR_F64(pipit_lr_at(&cs, LR, K), LR, 1e-18);
    ASSERT_NEAR_F64(pipit_lr_at(&cs, LR, K + 1), LR, 1e-18);
    ASSERT_NEAR_F64(pipit_lr_at(&cs, LR, (K + N) / 2 + 1), (LR + MIN_LR) / 2, 1e-15); /* r = 1/2 */
    ASSERT_NEAR_F64(pipit_lr_at(&ls, LR, (K + N) / 2 + 1), (LR + MIN_LR) / 2, 1e-15);
    ASSERT_NEAR_F64(pipit_lr_at(&cs, LR, N + 1), MIN_LR, 1e-18); /* it = N: r = 1 */
    ASSERT_NEAR_F64(pipit_lr_at(&ls, LR, N + 1), MIN_LR, 1e-18);
    ASSERT_TRUE(pipit_lr_at(&cs, LR, N + 2) == MIN_LR);
    ASSERT_TRUE(pipit_lr_at(&ls, LR, 1000000) == MIN_LR);
    for (int64_t t = 1; t <= N + 5; t++) {
        ASSERT_NEAR_F64(pipit_lr_at(&cs, LR, t), cosine_ref(t), 1e-17);
        ASSERT_NEAR_F64(pipit_lr_at(&ls, LR, t), linear_ref(t), 1e-17);
    }
    /* a quarter in: cosine above linear */
    ASSERT_TRUE(pipit_lr_at(&cs, LR, K + 1 + (N - K) / 4) > pipit_lr_at(&ls, LR, K + 1 + (N - K) / 4));
    /* constant: the lr itself, bit for bit; with warm-up a ramp first */
    pipit_lr_schedule zero = {0}, cw = {PIPIT_LR_CONSTANT, 4, 0, 0};
    ASSERT_TRUE(pipit_lr_at(&zero, 3e-4, 1) == 3e-4 && pipit_lr_at(&zero, 3e-4, 999) == 3e-4);
    ASSERT_NEAR_F64(pipit_lr_at(&cw, LR, 2), LR / 2, 1e-18);
    ASSERT_TRUE(pipit_lr_at(&cw, LR, 5) == LR);
    /* bad arguments: 0 and a message */
    ASSERT_TRUE(pipit_lr_at(NULL, LR, 1) == 0);
    ASSERT_MSG_HAS("pipit_lr_at");
    ASSERT_TRUE(pipit_lr_at(&cs, LR, 0) == 0);
    ASSERT_MSG_HAS("step");
    pipit_lr_schedule bad = {PIPIT_LR_COSINE, 10, 10, 0};
    ASSERT_TRUE(pipit_lr_at(&bad, LR, 1) == 0);
    ASSERT_MSG_HAS("decay_steps");
}

/* loss = sum(w * x), w and x f64 [2,2]: the gradient of w is x. */
static pipit_graph *lin_graph(pipit_val *loss) {
    pipit_graph *g = pipit_graph_new();
    int64_t sh[2] = {2, 2};
    pipit_val w = pipit_param(g, "w", PIPIT_F64, 2, sh), x = pipit_input(g, "x", PIPIT_F64, 2, sh);
    *loss = pipit_sum(g, pipit_mul(g, w, x));
    return g;
}

static const double X[4] = {0.5, -1.25, 2.0, 0.75}, W0[4] = {1.0, -2.0, 0.25, 3.0};

/* Runs `steps` updates of the linear model with optimizer o and schedule
 * ls, checking after each that metrics.lr == pipit_lr_at and the param
 * moved as SGD / AdamW (PyTorch's formulas) with lr(t) say. */
static void check_updates(pipit_optimizer o, pipit_lr_schedule ls, int steps) {
    pipit_val loss;
    pipit_graph *g = lin_graph(&loss);
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.optimizer = o, .lr_schedule = ls}, &p));
    ASSERT_OK(pipit_program_set_param(p, "w", W0, sizeof W0));
    double w[4], m[4] = {0}, v[4] = {0}, got[4];
    memcpy(w, W0, sizeof w);
    pipit_feed f = {"x", X, sizeof X};
    for (int t = 1; t <= steps; t++) {
        pipit_metrics met;
        ASSERT_OK(pipit_step(p, &f, 1, 1, &met));
        double lr = pipit_lr_at(&ls, o.lr, t);
        ASSERT_TRUE(met.lr == lr);
        for (int i = 0; i < 4; i++) {
            if (o.kind == PIPIT_OPT_SGD) {
                w[i] = w[i] - lr * (X[i] * 1.0);
                continue;
            }
            m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * X[i];
            v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * (X[i] * X[i]);
            double step = lr / (1.0 - pow(o.beta1, t)), bc2 = sqrt(1.0 - pow(o.beta2, t));
            w[i] = w[i] * (1.0 - lr * o.weight_decay) - step * (m[i] / (sqrt(v[i]) / bc2 + o.eps));
        }
        ASSERT_OK(pipit_program_get_param(p, "w", got, sizeof got));
        for (int i = 0; i < 4; i++)
            if (got[i] != w[i]) PIPIT_FAIL_("step %d, w[%d]: %.17g, expected %.17g (lr %g)", t, i, got[i], w[i], lr);
    }
    /* an evaluation (update = 0) reports the lr the next update would use */
    pipit_metrics met;
    ASSERT_OK(pipit_step(p, &f, 1, 0, &met));
    ASSERT_TRUE(met.lr == pipit_lr_at(&ls, o.lr, steps + 1));
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(lr_schedule_sgd_follows) {
    check_updates(pipit_sgd(0.1), (pipit_lr_schedule){PIPIT_LR_COSINE, 3, 8, 0.01}, 11);
    check_updates(pipit_sgd(0.1), (pipit_lr_schedule){PIPIT_LR_LINEAR, 2, 6, 0}, 9);
    check_updates(pipit_sgd(0.1), (pipit_lr_schedule){PIPIT_LR_CONSTANT, 3, 0, 0}, 5);
    check_updates(pipit_sgd(0.1), (pipit_lr_schedule){0}, 3);
}

PIPIT_TEST(lr_schedule_adamw_follows) {
    check_updates(pipit_adamw(0.05, 0.9, 0.95, 1e-8, 0.1), (pipit_lr_schedule){PIPIT_LR_COSINE, 3, 8, 0.005}, 11);
    check_updates(pipit_adamw(0.05, 0.9, 0.95, 1e-8, 0.1), (pipit_lr_schedule){PIPIT_LR_LINEAR, 0, 5, 0}, 7);
    check_updates(pipit_adamw(0.05, 0.9, 0.95, 1e-8, 0.1), (pipit_lr_schedule){0}, 3);
}

/* The zero schedule and an explicit constant one give the bits of the
 * optimizer's lr (what every run computed before schedules existed). */
PIPIT_TEST(lr_schedule_constant_is_bitwise) {
    double out[2][4];
    pipit_lr_schedule s[2] = {{0}, {PIPIT_LR_CONSTANT, 0, 0, 0}};
    for (int k = 0; k < 2; k++) {
        pipit_val loss;
        pipit_graph *g = lin_graph(&loss);
        pipit_program *p = NULL;
        ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.optimizer = pipit_adamw(3e-4, 0.9, 0.95, 1e-8, 0.1),
                                                          .lr_schedule = s[k]}, &p));
        ASSERT_OK(pipit_program_set_param(p, "w", W0, sizeof W0));
        pipit_feed f = {"x", X, sizeof X};
        pipit_metrics met;
        for (int t = 0; t < 4; t++) {
            ASSERT_OK(pipit_step(p, &f, 1, 1, &met));
            ASSERT_TRUE(met.lr == 3e-4);
        }
        ASSERT_OK(pipit_program_get_param(p, "w", out[k], sizeof out[k]));
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    ASSERT_TRUE(memcmp(out[0], out[1], sizeof out[0]) == 0);
    /* the default optimizer (all zero) with the zero schedule: 3e-4 */
    pipit_val loss;
    pipit_graph *g = lin_graph(&loss);
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){0}, &p));
    pipit_feed f = {"x", X, sizeof X};
    pipit_metrics met;
    ASSERT_OK(pipit_step(p, &f, 1, 1, &met));
    ASSERT_TRUE(met.lr == 3e-4);
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(lr_schedule_options_checked) {
    const struct {
        pipit_lr_schedule s;
        const char *field;
    } bad[] = {
        {{(pipit_lr_kind)3, 0, 0, 0}, "lr_schedule.kind"},
        {{(pipit_lr_kind)-1, 0, 0, 0}, "lr_schedule.kind"},
        {{PIPIT_LR_CONSTANT, -1, 0, 0}, "lr_schedule.warmup"},
        {{PIPIT_LR_CONSTANT, 0, 5, 0}, "lr_schedule.decay_steps"},
        {{PIPIT_LR_CONSTANT, 0, 0, 1e-5}, "lr_schedule.min_lr"},
        {{PIPIT_LR_COSINE, 10, 10, 0}, "lr_schedule.decay_steps"},
        {{PIPIT_LR_LINEAR, 0, 0, 0}, "lr_schedule.decay_steps"},
        {{PIPIT_LR_COSINE, 0, 10, NAN}, "lr_schedule.min_lr"},
        {{PIPIT_LR_COSINE, 0, 10, INFINITY}, "lr_schedule.min_lr"},
        {{PIPIT_LR_LINEAR, 0, 10, -1e-4}, "lr_schedule.min_lr"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pipit_val loss;
        pipit_graph *g = lin_graph(&loss);
        pipit_program *p = NULL;
        ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.lr_schedule = bad[i].s}, &p), PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS(bad[i].field);
        ASSERT_TRUE(p == NULL);
        pipit_graph_free(g);
    }
}
