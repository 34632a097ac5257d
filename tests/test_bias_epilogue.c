/*
 * test_bias_epilogue.c — under bf16 autocast a BIAS_ADD that reads a bf16
 * matmul's product (and nothing else reads it) runs in the matmul's
 * epilogue (compile/lower.c find_bias_epi): the bias is added to each fp32
 * sum before its one rounding to bf16.
 *
 * Oracle: small-integer inputs, exact in bf16, whose products, sums and
 * sums-plus-bias are exact in fp32 but mostly not in bf16: the output must
 * be the bf16 rounding of the exact value, element for element, which the
 * two-instruction path (round the product, add, round again) misses on
 * some elements. On every bf16 GEMM way and with 1 and 3 threads; the plan
 * runs no BIAS_ADD; the gradients of W and b are those of the unfused
 * graph in f32 arithmetic (the backward is untouched: dW from x and dy, db
 * the column sums of dy).
 */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "runtime/program.h"
#include "test.h"

enum { N = 48, D = 40, F = 72 };

static int small_int(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (int)(*s >> 24) % 17 - 8; /* -8..8 */
}

static float xs[N * D], ws[D * F], bs[F];

/* y = x W + b; loss = sum(y): the forward output y of one microbatch. */
static void forward(int threads, float *y, int *bias_runs) {
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, (int64_t[]){N, D});
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 2, (int64_t[]){D, F});
    pipit_val b = pipit_param(g, "b", PIPIT_F32, 1, (int64_t[]){F});
    pipit_val yv = pipit_bias_add(g, pipit_matmul(g, x, w, 0, 0), b);
    pipit_val loss = pipit_sum(g, yv);
    pipit_options o = {.dtype = PIPIT_BF16, .threads = threads, .outputs = &yv, .noutputs = 1};
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &o, &p));
    ASSERT_OK(pipit_program_set_param(p, "w", ws, sizeof ws));
    ASSERT_OK(pipit_program_set_param(p, "b", bs, sizeof bs));
    pipit_feed feed = {"x", xs, sizeof xs};
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, &feed, 1, 0, &m));
    ASSERT_OK(pipit_program_get_output(p, yv, 0, y, (size_t)N * F * sizeof *y));
    *bias_runs = 0;
    const pipit__rank_plan *rp = &p->plan.ranks[0];
    for (int32_t i = 0; i < rp->n; i++)
        *bias_runs += rp->ins[i].kind == INS_RUN && p->plan.g->nodes[rp->ins[i].node].op == PIPIT_OP_BIAS_ADD;
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(bias_epilogue_rounds_once) {
    uint32_t s = 17;
    for (int k = 0; k < N * D; k++) xs[k] = (float)(5 * small_int(&s) + small_int(&s));
    for (int k = 0; k < D * F; k++) ws[k] = (float)small_int(&s);
    for (int k = 0; k < F; k++) bs[k] = (float)small_int(&s) + 0.5f;
    static float want[N * F];
    int twice_differs = 0; /* elements the two-rounding path gets wrong */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < F; j++) {
            double acc = 0;
            for (int k = 0; k < D; k++) acc += (double)xs[i * D + k] * ws[k * F + j];
            float exact = (float)(acc + bs[j]); /* exact in fp32: |acc| < 2^16, halves */
            want[i * F + j] = pipit__bf16_to_f32(pipit__bf16_from_f32(exact));
            float twice = pipit__bf16_to_f32(
                pipit__bf16_from_f32(pipit__bf16_to_f32(pipit__bf16_from_f32((float)acc)) + bs[j]));
            twice_differs += twice != want[i * F + j];
        }
    ASSERT_TRUE(twice_differs > N * F / 20);
    const int ways[] = {1, 3, 4}; /* fp32 panels, emulated pairs, oneDNN (or its fallback) */
    for (int wi = 0; wi < 3; wi++) {
        pipit__gemm_bf16_set_kind(ways[wi]);
        for (int threads = 1; threads <= 3; threads += 2) {
            static float y[N * F]; /* the user graph's dtype: the bf16 value widened */
            int runs = -1;
            forward(threads, y, &runs);
            int bad = 0;
            for (int k = 0; k < N * F; k++) bad += y[k] != want[k];
            if (bad) fprintf(stderr, "way %d, %d threads: %d of %d outputs not rounded once\n", ways[wi], threads, bad, N * F);
            ASSERT_EQ_I64(bad, 0);
            ASSERT_EQ_I64(runs, 0); /* the BIAS_ADD ran inside the matmul */
        }
    }
    pipit__gemm_bf16_set_kind(0);
}

/* A matmul product read by the BIAS_ADD and by something else stays a
 * value of its own: no fusion, the same outputs as the ops one by one. */
PIPIT_TEST(bias_epilogue_not_when_the_product_is_read_twice) {
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, (int64_t[]){N, D});
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 2, (int64_t[]){D, F});
    pipit_val b = pipit_param(g, "b", PIPIT_F32, 1, (int64_t[]){F});
    pipit_val h = pipit_matmul(g, x, w, 0, 0);
    pipit_val loss = pipit_add(g, pipit_sum(g, pipit_bias_add(g, h, b)), pipit_sum(g, pipit_mul(g, h, h)));
    pipit_options o = {.dtype = PIPIT_BF16};
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &o, &p));
    int runs = 0;
    const pipit__rank_plan *rp = &p->plan.ranks[0];
    for (int32_t i = 0; i < rp->n; i++) {
        runs += rp->ins[i].kind == INS_RUN && p->plan.g->nodes[rp->ins[i].node].op == PIPIT_OP_BIAS_ADD;
        ASSERT_EQ_I64(rp->ins[i].epi, 0);
    }
    ASSERT_EQ_I64(runs, 1);
    pipit_program_free(p);
    pipit_graph_free(g);
}
