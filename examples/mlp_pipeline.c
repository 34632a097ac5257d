/*
 * mlp_pipeline.c — pipit as a library, end to end: a small MLP regression
 * written as the loss of ONE microbatch, split into two pipeline stages
 * with pipit_yield, trained with 1F1B on two ranks (threads).
 *
 *   build/mlp_pipeline [steps]
 *
 * It also shows the two regions outside the microbatch loop: `w_eff` is an
 * op on a param alone (computed once per step, before the loop), and a
 * gradient transform on the last layer (runs once per step, after it).
 * Exits non-zero unless the loss falls by 10x, so ctest runs it too.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pipit.h"

enum { B = 16, IN = 8, HID = 32, OUT = 1, M = 4 };

static void check(pipit_status s, const char *what) {
    if (s != PIPIT_STATUS_OK) {
        fprintf(stderr, "%s: %s\n", what, pipit_errmsg());
        exit(1);
    }
}

/* Uniform in [0, 1): a 32-bit xorshift, so the program is plain C11
 * (rand_r is POSIX) and gives the same numbers everywhere. */
static float uniform(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)(*s >> 8) * 0x1.0p-24f;
}

/* y = sin(x0) + 0.5 * x1 * x2: a smooth target the MLP can learn. */
static void make_batch(uint32_t *seed, float *x, float *y) {
    for (int i = 0; i < B; i++) {
        for (int j = 0; j < IN; j++) x[i * IN + j] = uniform(seed) * 2.0f - 1.0f;
        y[i] = sinf(2.0f * x[i * IN]) + 0.5f * x[i * IN + 1] * x[i * IN + 2];
    }
}

static pipit_val dense(pipit_graph *g, pipit_val h, const char *name, int in, int out, int act) {
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    pipit_val w = pipit_param(g, wn, PIPIT_F32, 2, (int64_t[]){in, out});
    pipit_val b = pipit_param(g, bn, PIPIT_F32, 1, (int64_t[]){out});
    h = pipit_bias_add(g, pipit_matmul(g, h, w, 0, 0), b);
    return act ? pipit_gelu(g, h) : h;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 200;
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, (int64_t[]){B, IN});
    pipit_val y = pipit_input(g, "y", PIPIT_F32, 2, (int64_t[]){B, OUT});

    /* stage 0 */
    pipit_val h = dense(g, x, "l0", IN, HID, 1);
    h = dense(g, h, "l1", HID, HID, 1);
    h = pipit_yield(g, h); /* everything after this runs on the next stage */
    /* stage 1: the last layer's weight is used through an op on the param
     * alone, which pipit runs once per step before the microbatch loop */
    pipit_val w2 = pipit_param(g, "l2.weight", PIPIT_F32, 2, (int64_t[]){HID, OUT});
    pipit_val w_eff = pipit_scale(g, w2, 0.5);
    pipit_val pred = pipit_matmul(g, dense(g, h, "l1b", HID, HID, 1), w_eff, 0, 0);
    pipit_val err = pipit_add(g, pred, pipit_scale(g, y, -1.0));
    pipit_val loss = pipit_mean(g, pipit_mul(g, err, err));

    /* after the loop: damp the last layer's gradient (a gradient transform) */
    check(pipit_set_grad(g, w2, pipit_scale(g, pipit_grad_of(g, w2), 0.5)), "set_grad");

    pipit_schedule *sched = NULL;
    check(pipit_schedule_build(PIPIT_SCHED_1F1B, /*P*/ 2, /*V*/ 1, M, &sched), "schedule");
    pipit_program *p = NULL;
    check(pipit_compile(g, loss,
                        &(pipit_options){.schedule = sched, .microbatches = M,
                                         .optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.0), .clip_norm = 1.0},
                        &p),
          "compile");

    /* small random init, by name */
    uint32_t seed = 1;
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int nd;
        int64_t shape[4], n = 1;
        check(pipit_program_param_shape(p, name, &nd, shape), "shape");
        for (int k = 0; k < nd; k++) n *= shape[k];
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++) v[k] = nd == 2 ? (uniform(&seed) - 0.5f) * 0.6f : 0.0f;
        check(pipit_program_set_param(p, name, v, sizeof(float) * (size_t)n), "set_param");
        free(v);
    }

    float xs[M][B * IN], ys[M][B];
    pipit_feed feeds[2 * M];
    double first = 0, last = 0;
    for (int step = 0; step < steps; step++) {
        for (int m = 0; m < M; m++) {
            make_batch(&seed, xs[m], ys[m]);
            feeds[2 * m] = (pipit_feed){"x", xs[m], sizeof xs[m]};
            feeds[2 * m + 1] = (pipit_feed){"y", ys[m], sizeof ys[m]};
        }
        pipit_metrics met;
        check(pipit_step(p, feeds, 2, 1, &met), "step");
        if (step == 0) first = met.loss;
        last = met.loss;
        if (step % 25 == 0 || step == steps - 1)
            printf("step %4d  loss %.6f  grad norm %.4f  bubble %.1f%%\n", step, met.loss, met.grad_norm,
                   100 * met.bubble);
    }
    pipit_program_free(p);
    pipit_schedule_free(sched);
    pipit_graph_free(g);
    printf("loss %.4f -> %.4f\n", first, last);
    return last < first / 10 ? 0 : 1;
}
