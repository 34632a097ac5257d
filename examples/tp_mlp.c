/*
 * tp_mlp.c — tensor parallelism as a library user writes it: the two-layer
 * MLP of pipit.h, column-parallel then row-parallel (Megatron's MLP), the
 * graph describing ONE of the T ranks that share the layer. It trains the
 * same regression on T = 1 and on T = 2 and T = 4 ranks (threads) from the
 * same initial weights and prints the losses side by side.
 *
 *   build/tp_mlp [steps]
 *
 * The sharded runs differ from T = 1 only where the row-parallel product's
 * partial sums are added across ranks (docs/architecture.md, "The local
 * mesh"): it exits non-zero unless every loss agrees to 1e-5 relative and
 * the loss falls, so ctest runs it too.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pipit.h"

enum { B = 16, C = 8, F = 32, M = 2, MAXSTEPS = 1000 };

static void check(pipit_status s, const char *what) {
    if (s != PIPIT_STATUS_OK) {
        fprintf(stderr, "%s: %s\n", what, pipit_errmsg());
        exit(1);
    }
}

/* A 32-bit xorshift in [0, 1): plain C11, the same numbers everywhere. */
static float uniform(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)(*s >> 8) * 0x1.0p-24f;
}

/* y = sin(2 x0) + 0.5 x1 x2, replicated into C columns */
static void make_batch(uint32_t *seed, float *x, float *y) {
    for (int i = 0; i < B; i++) {
        for (int j = 0; j < C; j++) x[i * C + j] = uniform(seed) * 2.0f - 1.0f;
        for (int j = 0; j < C; j++) y[i * C + j] = sinf(2.0f * x[i * C]) + 0.5f * x[i * C + 1] * x[i * C + 2];
    }
}

/* The per-rank graph: h = gelu(x W1_t + b1_t), y = sum_t h_t W2_t + b2. */
static pipit_program *build(int T, pipit_graph **gout) {
    pipit_graph *g = pipit_graph_new();
    check(pipit_graph_set_tensor_parallel(g, T), "pipit_graph_set_tensor_parallel");
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, (int64_t[]){B, C});
    pipit_val tgt = pipit_input(g, "y", PIPIT_F32, 2, (int64_t[]){B, C});
    pipit_val w1 = pipit_param_sharded(g, "w1", PIPIT_F32, 2, (int64_t[]){C, F}, 1, 1); /* columns */
    pipit_val b1 = pipit_param_sharded(g, "b1", PIPIT_F32, 1, (int64_t[]){F}, 0, 1);
    pipit_val w2 = pipit_param_sharded(g, "w2", PIPIT_F32, 2, (int64_t[]){F, C}, 0, 1); /* rows */
    pipit_val b2 = pipit_param(g, "b2", PIPIT_F32, 1, (int64_t[]){C});                  /* replicated */
    pipit_val h = pipit_gelu(g, pipit_bias_add(g, pipit_matmul(g, pipit_tp_copy(g, x), w1, 0, 0), b1));
    pipit_val y = pipit_bias_add(g, pipit_tp_sum(g, pipit_matmul(g, h, w2, 0, 0)), b2);
    pipit_val d = pipit_sub(g, y, tgt);
    pipit_val loss = pipit_mean(g, pipit_mul(g, d, d));
    pipit_program *p = NULL;
    check(pipit_compile(g, loss, &(pipit_options){.microbatches = M, .tensor_parallel = T,
                                                  .optimizer = pipit_adamw(1e-2, 0.9, 0.99, 1e-8, 0)}, &p),
          "pipit_compile");
    *gout = g;
    return p;
}

/* The same full weights whatever T: each rank takes its shard of them. */
static void init(pipit_program *p) {
    static float w1[C * F], b1[F], w2[F * C], b2[C];
    uint32_t s = 7;
    for (int i = 0; i < C * F; i++) w1[i] = (uniform(&s) - 0.5f) * 0.7f, w2[i] = (uniform(&s) - 0.5f) * 0.35f;
    for (int i = 0; i < F; i++) b1[i] = (uniform(&s) - 0.5f) * 0.1f;
    for (int i = 0; i < C; i++) b2[i] = 0;
    check(pipit_program_set_param(p, "w1", w1, sizeof w1), "set w1");
    check(pipit_program_set_param(p, "b1", b1, sizeof b1), "set b1");
    check(pipit_program_set_param(p, "w2", w2, sizeof w2), "set w2");
    check(pipit_program_set_param(p, "b2", b2, sizeof b2), "set b2");
}

static void train(int T, int steps, double *losses) {
    pipit_graph *g = NULL;
    pipit_program *p = build(T, &g);
    init(p);
    uint32_t seed = 42;
    static float x[M][B * C], y[M][B * C];
    for (int s = 0; s < steps; s++) {
        pipit_feed feeds[2 * M];
        for (int m = 0; m < M; m++) {
            make_batch(&seed, x[m], y[m]);
            feeds[2 * m] = (pipit_feed){"x", x[m], sizeof x[m]};
            feeds[2 * m + 1] = (pipit_feed){"y", y[m], sizeof y[m]};
        }
        pipit_metrics met;
        check(pipit_step(p, feeds, 2, 1, &met), "pipit_step");
        losses[s] = met.loss;
    }
    pipit_program_free(p);
    pipit_graph_free(g);
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 200;
    if (steps < 2 || steps > MAXSTEPS) steps = 200;
    static double loss[3][MAXSTEPS];
    int Ts[3] = {1, 2, 4};
    for (int k = 0; k < 3; k++) train(Ts[k], steps, loss[k]);
    double worst = 0;
    for (int s = 0; s < steps; s++) {
        for (int k = 1; k < 3; k++) worst = fmax(worst, fabs(loss[k][s] - loss[0][s]) / fabs(loss[0][s]));
        if (s % (steps / 10) == 0 || s == steps - 1)
            printf("step %4d  loss T=1 %.7f  T=2 %.7f  T=4 %.7f\n", s, loss[0][s], loss[1][s], loss[2][s]);
    }
    printf("largest relative difference to T=1: %.3g\n", worst);
    if (!(worst < 1e-5) || !(loss[0][steps - 1] < 0.5 * loss[0][0])) {
        fprintf(stderr, "tp_mlp: the sharded runs do not match T=1, or the loss did not fall\n");
        return 1;
    }
    pipit_finalize();
    return 0;
}
