/*
 * test_wgrad_fusion.c — the weight-gradient accumulation fusion under bf16
 * autocast (compile/lower.c fuses_wgrad): a weight's bf16 matmul writes its
 * product straight into the weight's fp32 accumulator (the first
 * microbatch) or adds it there (the others), never rounding it to bf16.
 *
 * Oracle: inputs of small integers, exact in bf16, whose products and sums
 * are exact in fp32 as well: the gradient must then equal the f64 sum over
 * microbatches bit for bit, which a bf16 rounding of any microbatch's
 * product (the path before the fusion) would break — the sums need more
 * than bf16's 8 significant bits. Checked on every bf16 GEMM way this CPU
 * can run (oneDNN where it has bf16, fp32 panels, the emulated pairs), with
 * 1 and 3 threads, and the plan: no INS_ACC for the weight, a smaller arena
 * than the same graph's f32 program would not show, so the count is what
 * is asserted.
 */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "runtime/program.h"
#include "test.h"

enum { N = 64, D = 24, F = 40, M = 4 };

/* loss = sum((x W) * c): dL/dW = x^T c, a step's loss the mean over its M
 * microbatches (M = 4: an exact scaling). */
static pipit_val build(pipit_graph *g) {
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, (int64_t[]){N, D});
    pipit_val c = pipit_input(g, "c", PIPIT_F32, 2, (int64_t[]){N, F});
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 2, (int64_t[]){D, F});
    return pipit_sum(g, pipit_mul(g, pipit_matmul(g, x, w, 0, 0), c));
}

static int small_int(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (int)(*s >> 24) % 17 - 8; /* -8..8 */
}

static float xs[M][N * D], cs[M][N * F];

static void fill_inputs(void) {
    uint32_t s = 11;
    for (int mb = 0; mb < M; mb++) {
        for (int k = 0; k < N * D; k++) xs[mb][k] = (float)(5 * small_int(&s) + small_int(&s)); /* sums need ~12 bits */
        for (int k = 0; k < N * F; k++) cs[mb][k] = (float)small_int(&s);
    }
}

/* The gradient of w after one step (no update) with nth threads. */
static void grad_of_step(int threads, float *grad, int *accs) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = build(g);
    pipit_options o = {.dtype = PIPIT_BF16, .microbatches = M, .threads = threads};
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &o, &p));
    static float w[D * F];
    uint32_t s = 5;
    for (int k = 0; k < D * F; k++) w[k] = (float)small_int(&s) / 4;
    ASSERT_OK(pipit_program_set_param(p, "w", w, sizeof w));
    pipit_feed feeds[2 * M];
    for (int mb = 0; mb < M; mb++) {
        feeds[2 * mb] = (pipit_feed){"x", xs[mb], sizeof xs[mb]};
        feeds[2 * mb + 1] = (pipit_feed){"c", cs[mb], sizeof cs[mb]};
    }
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, feeds, 2, 0, &m));
    ASSERT_OK(pipit_program_get_grad(p, "w", grad, (size_t)D * F * sizeof *grad));
    *accs = 0;
    const pipit__rank_plan *rp = &p->plan.ranks[0];
    for (int32_t i = 0; i < rp->n; i++) *accs += rp->ins[i].kind == INS_ACC;
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* ways: 1 fp32 panels, 3 emulated pairs, 4 oneDNN (falls back where the CPU lacks bf16) */
PIPIT_TEST(wgrad_fusion_exact_in_fp32) {
    fill_inputs();
    static double want[D * F];
    memset(want, 0, sizeof want);
    for (int mb = 0; mb < M; mb++)
        for (int n = 0; n < N; n++)
            for (int d = 0; d < D; d++)
                for (int f = 0; f < F; f++) want[d * F + f] += (double)xs[mb][n * D + d] * cs[mb][n * F + f] / M;
    int beyond_bf16 = 0; /* sums a bf16 rounding would change */
    for (int k = 0; k < D * F; k++) beyond_bf16 += (float)want[k] != pipit__bf16_to_f32(pipit__bf16_from_f32((float)want[k]));
    ASSERT_TRUE(beyond_bf16 > D * F / 2);
    const int ways[] = {1, 3, 4};
    for (int wi = 0; wi < 3; wi++) {
        pipit__gemm_bf16_set_kind(ways[wi]);
        for (int threads = 1; threads <= 3; threads += 2) {
            static float grad[D * F];
            int accs = -1;
            grad_of_step(threads, grad, &accs);
            int bad = 0;
            for (int k = 0; k < D * F; k++) bad += (double)grad[k] != want[k];
            if (bad)
                fprintf(stderr, "way %d, %d threads: %d of %d gradient elements differ from the exact sum (first: %g vs %g)\n",
                        ways[wi], threads, bad, D * F, grad[0], want[0]);
            ASSERT_EQ_I64(bad, 0);
            ASSERT_EQ_I64(accs, 0); /* every microbatch's product went straight into the gradient */
        }
    }
    pipit__gemm_bf16_set_kind(0);
}

/* The kernel itself, on a shape with partial tiles and a transposed A (a
 * weight gradient's X^T dY), accumulating: C = C0 + A^T B in fp32 without a
 * bf16 rounding, against a double reference; every way, 1 and 2 threads. */
PIPIT_TEST(wgrad_fusion_gemm_f32_out) {
    enum { K = 300, MM = 70, NN = 330 };
    static pipit__bf16 a[K * MM], b[K * NN];
    static float c0[MM * NN], c[MM * NN];
    static double want[MM * NN];
    uint32_t s = 3;
    for (int k = 0; k < K * MM; k++) a[k] = pipit__bf16_from_f32((float)small_int(&s));
    for (int k = 0; k < K * NN; k++) b[k] = pipit__bf16_from_f32((float)small_int(&s) / 8);
    for (int k = 0; k < MM * NN; k++) c0[k] = (float)small_int(&s) * 1000.5f;
    for (int i = 0; i < MM; i++)
        for (int j = 0; j < NN; j++) {
            double acc = c0[i * NN + j];
            for (int k = 0; k < K; k++)
                acc += (double)pipit__bf16_to_f32(a[k * MM + i]) * pipit__bf16_to_f32(b[k * NN + j]);
            want[i * NN + j] = acc;
        }
    const int ways[] = {1, 3, 4};
    for (int wi = 0; wi < 3; wi++) {
        pipit__gemm_bf16_set_kind(ways[wi]);
        for (int nth = 1; nth <= 2; nth++) {
            memcpy(c, c0, sizeof c);
            for (int ith = 0; ith < nth; ith++)
                pipit__gemm_bf16_f32(1, 0, 1, MM, NN, K, a, MM, 0, b, NN, 0, c, NN, 0, 1, ith, nth);
            int bad = 0;
            for (int k = 0; k < MM * NN; k++) bad += (double)c[k] != want[k];
            ASSERT_EQ_I64(bad, 0);
        }
    }
    pipit__gemm_bf16_set_kind(0);
}
