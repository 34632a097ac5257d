/*
 * test_moe.c — the mixture-of-experts ops (pipit_moe.h, ir/moe.h) against
 * hand-computed cases and independent oracles:
 *   - top-k: ties to the lower index, NaN last, values and indices;
 *   - the slots of fixed choices against a count written out here, and
 *     conservation: the rows dispatch fills per expert equal the kept
 *     choices, each holds its token's row, the rest are exactly zero, and
 *     a token every choice of which was dropped combines to exactly 0;
 *   - combine is dispatch's transpose: <dispatch(x), y> = <x, combine(y)>;
 *   - the router (softmax and sigmoid, normalised, with a routing bias)
 *     gradient-checked in f64 against central differences;
 *   - the capacity rule and the refusals (top_k > experts, capacity factor
 *     <= 0, experts <= 0) by message.
 * The op-table gradchecks of top-k, dispatch and combine are op_cases.c's
 * (test_ops.c, test_bf16.c); CPU vs CUDA parity is tests/cuda's "moe".
 */
#include <math.h>
#include <string.h>

#include "gradcheck.h"
#include "pipit.h"
#include "pipit_moe.h"
#include "test.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

/* A forward-only program of g with the given outputs; loss = sum(lossv). */
static pipit_program *fwd_program(pipit_graph *g, pipit_val lossv, const pipit_val *outs, int nout) {
    pipit_program *p = NULL;
    pipit_val loss = pipit_sum(g, lossv);
    if (pipit_compile(g, loss, &(pipit_options){.microbatches = 1, .forward_only = 1, .outputs = outs, .noutputs = nout},
                      &p) != PIPIT_STATUS_OK) {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
        return NULL;
    }
    return p;
}

PIPIT_TEST(moe_topk_ties_and_nan) {
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, SH(3, 5)), idx;
    pipit_val v = pipit_topk(g, x, 3, &idx);
    pipit_program *p = fwd_program(g, v, (pipit_val[]){v, idx}, 2);
    ASSERT_TRUE(p != NULL);
    float xs[15] = {1, 3, 3, 2, -INFINITY, /* a tie: index 1 before 2 */
                    NAN, 0, 5, 5, NAN,     /* NaN after every number */
                    -1, NAN, -2, NAN, -3}; /* NaNs among themselves by index */
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, (pipit_feed[]){{"x", xs, sizeof xs}}, 1, 0, &m));
    int32_t got[9];
    float vals[9];
    ASSERT_OK(pipit_program_get_output(p, idx, 0, got, sizeof got));
    ASSERT_OK(pipit_program_get_output(p, v, 0, vals, sizeof vals));
    const int32_t want[9] = {1, 2, 3, 2, 3, 1, 0, 2, 4};
    for (int i = 0; i < 9; i++) ASSERT_EQ_I64(got[i], want[i]);
    const float wantv[6] = {3, 3, 2, 5, 5, 0};
    for (int i = 0; i < 6; i++) ASSERT_TRUE(vals[i] == wantv[i]);
    ASSERT_TRUE(vals[6] == -1 && vals[7] == -2 && vals[8] == -3);
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* T = 7 tokens x k = 2 fixed choices over E = 3 experts of C = 3 slots. */
enum { T = 7, K = 2, E = 3, C = 3, D = 4 };
static const int32_t choice[T * K] = {0, 1, 1, 0, 0, 2, 0, 1, 1, 2, 0, 1, 1, 0};

PIPIT_TEST(moe_slots_dispatch_combine_conserve) {
    pipit_graph *g = pipit_graph_new();
    pipit_val ids = pipit_input(g, "ids", PIPIT_I32, 2, SH(T, K));
    pipit_val x = pipit_input(g, "x", PIPIT_F64, 2, SH(T, D)), w = pipit_input(g, "w", PIPIT_F64, 2, SH(T, K));
    pipit_val slots = pipit_moe_slots(g, ids, E, C);
    pipit_val xe = pipit_moe_dispatch(g, x, slots, E, C, NULL);
    pipit_val y = pipit_moe_combine(g, xe, slots, &w);
    pipit_program *p = fwd_program(g, y, (pipit_val[]){slots, xe, y}, 3);
    ASSERT_TRUE(p != NULL);
    double xs[T * D], ws[T * K];
    for (int i = 0; i < T * D; i++) xs[i] = 1 + i; /* no zero anywhere */
    for (int i = 0; i < T * K; i++) ws[i] = 0.25 * (i % 3 + 1);
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, (pipit_feed[]){{"ids", (void *)choice, sizeof choice}, {"x", xs, sizeof xs},
                                           {"w", ws, sizeof ws}},
                         3, 0, &m));
    int32_t s[T * K];
    double grid[E * C * D], out[T * D];
    ASSERT_OK(pipit_program_get_output(p, slots, 0, s, sizeof s));
    ASSERT_OK(pipit_program_get_output(p, xe, 0, grid, sizeof grid));
    ASSERT_OK(pipit_program_get_output(p, y, 0, out, sizeof out));
    /* the oracle: each expert's first C choices in (token, choice) order */
    int used[E] = {0}, kept[E] = {0};
    for (int q = 0; q < T * K; q++) {
        int e = choice[q];
        int want = used[e] < C ? e * C + used[e] : -1;
        used[e]++;
        ASSERT_EQ_I64(s[q], want);
        if (want >= 0) kept[e]++;
    }
    /* expert 0 is chosen by 6, expert 1 by 6, expert 2 by 2: 6 choices dropped */
    ASSERT_EQ_I64(kept[0], 3);
    ASSERT_EQ_I64(kept[1], 3);
    ASSERT_EQ_I64(kept[2], 2);
    /* conservation: the filled rows per expert are the kept choices, each its token's row */
    for (int e = 0; e < E; e++) {
        int filled = 0;
        for (int c = 0; c < C; c++) {
            const double *row = grid + (e * C + c) * D;
            int nz = 0;
            for (int j = 0; j < D; j++) nz |= row[j] != 0;
            filled += nz;
            int src = -1;
            for (int q = 0; q < T * K; q++)
                if (s[q] == e * C + c) src = q / K;
            for (int j = 0; j < D; j++) ASSERT_TRUE(row[j] == (src >= 0 ? xs[src * D + j] : 0.0));
        }
        ASSERT_EQ_I64(filled, kept[e]);
    }
    /* combine: the weighted sum of the kept choices; token 6 (choices 1, 0)
     * came after both experts were full: exactly zero */
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < D; j++) {
            double want = 0;
            for (int c = 0; c < K; c++)
                if (s[t * K + c] >= 0) want += ws[t * K + c] * xs[t * D + j];
            ASSERT_TRUE(out[t * D + j] == want);
        }
    }
    ASSERT_TRUE(s[6 * K] == -1 && s[6 * K + 1] == -1);
    for (int j = 0; j < D; j++) ASSERT_TRUE(out[6 * D + j] == 0.0 && !signbit(out[6 * D + j]));
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* <dispatch(x, w), Y> = <x, combine(Y, w)> for any x, Y: the pair are each
 * other's transposes (f64, the same slots and weights). */
PIPIT_TEST(moe_dispatch_combine_transpose) {
    pipit_graph *g = pipit_graph_new();
    pipit_val ids = pipit_input(g, "ids", PIPIT_I32, 2, SH(T, K));
    pipit_val x = pipit_input(g, "x", PIPIT_F64, 2, SH(T, D)), w = pipit_input(g, "w", PIPIT_F64, 2, SH(T, K));
    pipit_val Y = pipit_input(g, "Y", PIPIT_F64, 3, SH(E, C, D));
    pipit_val slots = pipit_moe_slots(g, ids, E, C);
    pipit_val lhs = pipit_sum(g, pipit_mul(g, pipit_moe_dispatch(g, x, slots, E, C, &w), Y));
    pipit_val rhs = pipit_sum(g, pipit_mul(g, x, pipit_moe_combine(g, Y, slots, &w)));
    pipit_program *p = fwd_program(g, pipit_sub(g, lhs, rhs), (pipit_val[]){lhs, rhs}, 2);
    ASSERT_TRUE(p != NULL);
    uint64_t seed = 5;
    double xs[T * D], ws[T * K], Ys[E * C * D];
    for (int i = 0; i < T * D; i++) xs[i] = gc_rand(&seed);
    for (int i = 0; i < T * K; i++) ws[i] = gc_rand(&seed);
    for (int i = 0; i < E * C * D; i++) Ys[i] = gc_rand(&seed);
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, (pipit_feed[]){{"ids", (void *)choice, sizeof choice}, {"x", xs, sizeof xs},
                                           {"w", ws, sizeof ws}, {"Y", Ys, sizeof Ys}},
                         4, 0, &m));
    double a, b;
    ASSERT_OK(pipit_program_get_output(p, lhs, 0, &a, sizeof a));
    ASSERT_OK(pipit_program_get_output(p, rhs, 0, &b, sizeof b));
    ASSERT_TRUE(a != 0);
    ASSERT_NEAR_F64(a, b, 1e-12 * fabs(a));
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* Slots fed straight to dispatch and combine (no moe_slots in the graph):
 * pipit_step refuses one outside the [E, C] grid and one used twice by
 * name, and takes -1 (dropped) and a valid permutation. */
PIPIT_TEST(moe_fed_slots_checked) {
    pipit_graph *g = pipit_graph_new();
    pipit_val slots = pipit_input(g, "slots", PIPIT_I32, 2, SH(2, 2));
    pipit_val x = pipit_input(g, "x", PIPIT_F64, 2, SH(2, 3));
    pipit_val y = pipit_moe_combine(g, pipit_tanh(g, pipit_moe_dispatch(g, x, slots, 2, 2, NULL)), slots, NULL);
    pipit_val total = pipit_sum(g, y);
    pipit_program *p = fwd_program(g, y, &total, 1);
    ASSERT_TRUE(p != NULL);
    double xs[6] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
    pipit_metrics m;
    int32_t good[4] = {3, -1, 0, 1}, outside[4] = {0, 1, 4, 2}, below[4] = {0, -2, 1, 2}, twice[4] = {0, 2, 1, 2};
#define RUN(sl) pipit_step(p, (pipit_feed[]){{"slots", sl, sizeof sl}, {"x", xs, sizeof xs}}, 2, 0, &m)
    ASSERT_OK(RUN(good));
    double got;
    ASSERT_OK(pipit_program_get_output(p, total, 0, &got, sizeof got));
    /* token 0: tanh(x0) once (slot 3; -1 dropped); token 1: twice (slots 0, 1) */
    double want = 0;
    for (int d = 0; d < 3; d++) want += tanh(xs[d]) + 2 * tanh(xs[3 + d]);
    ASSERT_NEAR_F64(got, want, 1e-12);
    ASSERT_STATUS(RUN(outside), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("input 'slots' of microbatch 0 holds slot 4 at index 2, outside [0, 4)");
    ASSERT_STATUS(RUN(below), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("holds slot -2 at index 1");
    ASSERT_STATUS(RUN(twice), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("holds slot 2 twice (again at index 3)");
#undef RUN
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* The router in f64: loss = sum(combine(expert(dispatch(x)), w) * R), the
 * weights from pipit_moe_route, against central differences (softmax with
 * a routing bias, sigmoid normalised; capacity 3 of 8 tokens x 2 over 4
 * experts: some choices dropped). */
static double route_case(pipit_router_kind kind, int with_bias) {
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_param(g, "x", PIPIT_F64, 2, SH(8, 3)), router = pipit_param(g, "router", PIPIT_F64, 2, SH(4, 3));
    pipit_val bias = pipit_param(g, "bias", PIPIT_F64, 1, SH(4));
    pipit_val w1 = pipit_param(g, "w1", PIPIT_F64, 3, SH(4, 3, 5)), idx;
    pipit_route_opts ro = {2, kind, 1, with_bias ? &bias : NULL};
    pipit_val wts = pipit_moe_route(g, pipit_matmul_nt(g, x, router), &ro, &idx);
    pipit_val slots = pipit_moe_slots(g, idx, 4, 3);
    pipit_val h = pipit_matmul(g, pipit_moe_dispatch(g, x, slots, 4, 3, NULL), w1, 0, 0); /* [4,3,5] */
    pipit_val y = pipit_moe_combine(g, pipit_tanh(g, h), slots, &wts);
    pipit_val loss = pipit_sum(g, pipit_mul(g, y, pipit_input(g, "R", PIPIT_F64, 2, SH(8, 5))));
    if (!with_bias) loss = pipit_add(g, loss, pipit_sum(g, pipit_mul(g, bias, bias))); /* bias used */
    pipit_program *p = NULL;
    double err = 1e9;
    if (pipit_compile(g, loss, &(pipit_options){.microbatches = 1}, &p) == PIPIT_STATUS_OK) {
        uint64_t seed = 11;
        double R[40];
        for (int i = 0; i < 40; i++) R[i] = gc_rand(&seed);
        gc_init_params(p, 99, 1.0);
        err = gc_max_rel_error(p, (pipit_feed[]){{"R", R, sizeof R}}, 1, 1e-6, 1);
        pipit_program_free(p);
    } else {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
    }
    pipit_graph_free(g);
    return err;
}

PIPIT_TEST(moe_route_gradcheck) {
    double e1 = route_case(PIPIT_ROUTER_SOFTMAX, 1), e2 = route_case(PIPIT_ROUTER_SIGMOID, 0),
           e3 = route_case(PIPIT_ROUTER_SOFTMAX, 0);
    fprintf(stderr, "relative errors: softmax+bias %.3g, sigmoid %.3g, softmax %.3g\n", e1, e2, e3);
    ASSERT_TRUE(e1 >= 0 && e1 < 1e-6);
    ASSERT_TRUE(e2 >= 0 && e2 < 1e-6);
    ASSERT_TRUE(e3 >= 0 && e3 < 1e-6);
}

PIPIT_TEST(moe_capacity_and_refusals) {
    ASSERT_EQ_I64(pipit_moe_capacity(10, 2, 4, 1.0, 0), 5);
    ASSERT_EQ_I64(pipit_moe_capacity(10, 2, 4, 1.25, 0), 7); /* ceil(6.25) */
    ASSERT_EQ_I64(pipit_moe_capacity(10, 2, 4, 100.0, 0), 10); /* at most T */
    ASSERT_EQ_I64(pipit_moe_capacity(10, 2, 4, 0.01, 0), 1);
    ASSERT_EQ_I64(pipit_moe_capacity(10, 2, 4, 0, 1), 10);
    ASSERT_EQ_I64(pipit_moe_capacity(10, 2, 4, 0.0, 0), -1);
    ASSERT_MSG_HAS("capacity factor 0 must be > 0");
    ASSERT_EQ_I64(pipit_moe_capacity(10, 5, 4, 1.0, 0), -1);
    ASSERT_MSG_HAS("top_k = 5 exceeds the experts (4)");
    ASSERT_EQ_I64(pipit_moe_capacity(10, 1, 0, 1.0, 1), -1);
    ASSERT_MSG_HAS("must be >= 1");
    pipit_graph *g = pipit_graph_new();
    pipit_val logits = pipit_input(g, "l", PIPIT_F32, 2, SH(6, 4)), idx;
    pipit_val w = pipit_moe_route(g, logits, &(pipit_route_opts){5, PIPIT_ROUTER_SOFTMAX, 1, NULL}, &idx);
    ASSERT_TRUE(w.id < 0 && idx.id < 0);
    ASSERT_EQ_I64(pipit_graph_status(g), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_graph_errmsg(g), "pipit_moe_route: top_k = 5 is not in 1..4") != NULL);
    pipit_graph_free(g);
    g = pipit_graph_new();
    logits = pipit_input(g, "l", PIPIT_F32, 2, SH(6, 4));
    ASSERT_TRUE(pipit_topk(g, logits, 0, NULL).id < 0);
    ASSERT_TRUE(strstr(pipit_graph_errmsg(g), "k = 0 is not in 1..4") != NULL);
    pipit_graph_free(g);
    g = pipit_graph_new();
    idx = pipit_input(g, "i", PIPIT_I32, 2, SH(6, 2));
    ASSERT_TRUE(pipit_moe_slots(g, idx, 0, 3).id < 0);
    ASSERT_TRUE(strstr(pipit_graph_errmsg(g), "experts = 0 must be >= 1") != NULL);
    pipit_graph_free(g);
}
