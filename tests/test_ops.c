/*
 * test_ops.c — every op of the op table is gradient-checked in f64 against
 * central finite differences, twice: as ops on params alone (run once before
 * the loop, differentiated once after it) and as per-microbatch ops. The
 * backward-only ops (OPF_NOVJP) are checked
 * through the forward op that emits them; the coverage test fails if any op
 * of ops.def appears in no checked graph.
 */
#include "op_cases.h"
#include "ir/graph.h"
#include "runtime/program.h"
#include "test.h"

static int preloop_cases; /* cases that really ran a pre-loop region */

/* Runs one case; marks every op present in its compiled graph in seen[]. */
static double run_case(const op_case *c, int *seen) {
    pipit_graph *g = pipit_graph_new();
    pipit_val y = c->build(g);
    int nd = pipit_val_ndim(y);
    int64_t shape[PIPIT_MAX_DIMS];
    for (int i = 0; i < nd; i++) shape[i] = pipit_val_dim(y, i);
    pipit_val r = pipit_input(g, "R", PIPIT_F64, nd, shape);
    pipit_val loss = pipit_sum(g, pipit_mul(g, y, r));
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.microbatches = 1}, &p)) {
        fprintf(stderr, "%s: compile failed: %s\n", c->name, pipit_errmsg());
        pipit_graph_free(g);
        return 1e9;
    }
    for (int32_t i = 0; i < g->n; i++) seen[g->nodes[i].op] = 1;
    int npre = 0; /* the mode really is what it claims */
    for (int32_t i = 0; i < p->plan.gr.fwd_end; i++) npre += p->plan.gr.preloop[i];
    if (!op_cases_loop_mode && npre > 0) preloop_cases++;
    if (op_cases_loop_mode && npre != 0) {
        fprintf(stderr, "%s: %d pre-loop nodes in %s mode\n", c->name, npre, op_cases_loop_mode ? "loop" : "pre-loop");
        pipit_program_free(p);
        pipit_graph_free(g);
        return 1e9;
    }
    pipit_feed feeds[16];
    void *bufs[16];
    int nfeed;
    op_cases_fill_feeds(g, 77, 0, feeds, &nfeed, bufs);
    gc_init_params(p, 1234, 1.0);
    double err = gc_max_rel_error(p, feeds, nfeed, 1e-6, 1);
    for (int i = 0; i < nfeed; i++) free(bufs[i]);
    pipit_program_free(p);
    pipit_graph_free(g);
    return err;
}

PIPIT_TEST(ops_gradcheck_all) {
    int seen[PIPIT_OP_COUNT] = {0};
    int bad = 0;
    for (op_cases_loop_mode = 0; op_cases_loop_mode < 2; op_cases_loop_mode++) {
        for (int i = 0; i < op_ncases; i++) {
            double err = run_case(&op_cases[i], seen);
            if (!(err >= 0 && err < 1e-6)) {
                fprintf(stderr, "gradcheck %s (%s): relative error %g\n", op_cases[i].name,
                        op_cases_loop_mode ? "per microbatch" : "pre-loop", err);
                bad++;
            }
        }
    }
    op_cases_loop_mode = 0;
    ASSERT_TRUE(preloop_cases >= op_ncases - 11); /* all but embed(_vocab_parallel), gather, xent, attention_k_only,
                                                     head_xent, attention_doc* (inputs) */
    ASSERT_EQ_I64(bad, 0);
    for (int op = 0; op < PIPIT_OP_COUNT; op++)
        if (!seen[op]) PIPIT_FAIL_("op %s is not covered by any gradcheck case", pipit__ops[op].name);
}

/* trans_a with a broadcast 2-D b (docs/ops.md): a [B,K,M], y[b] = a[b]^T @ b
 * (or @ b^T with trans_b), against the sum written out: loss = sum(y * R)
 * for set params and R. Before, pipit_matmul refused the combination. */
PIPIT_TEST(ops_matmul_trans_a_broadcast_b) {
    enum { NB = 2, K = 3, M = 2, N = 4 };
    for (int tb = 0; tb < 2; tb++) {
        pipit_graph *g = pipit_graph_new();
        pipit_val a = pipit_param(g, "a", PIPIT_F64, 3, (int64_t[]){NB, K, M});
        pipit_val b = tb ? pipit_param(g, "b", PIPIT_F64, 2, (int64_t[]){N, K})
                         : pipit_param(g, "b", PIPIT_F64, 2, (int64_t[]){K, N});
        pipit_val y = pipit_matmul(g, a, b, 1, tb);
        ASSERT_OK(pipit_graph_status(g));
        ASSERT_EQ_I64(pipit_val_ndim(y), 3);
        ASSERT_EQ_I64(pipit_val_dim(y, 0), NB);
        ASSERT_EQ_I64(pipit_val_dim(y, 1), M);
        ASSERT_EQ_I64(pipit_val_dim(y, 2), N);
        pipit_val r = pipit_input(g, "R", PIPIT_F64, 3, (int64_t[]){NB, M, N});
        pipit_val loss = pipit_sum(g, pipit_mul(g, y, r));
        pipit_program *p = NULL;
        ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.microbatches = 1}, &p));
        double av[NB * K * M], bv[K * N], rv[NB * M * N];
        for (int i = 0; i < NB * K * M; i++) av[i] = 0.25 * (i % 7) - 0.5;
        for (int i = 0; i < K * N; i++) bv[i] = 0.125 * (i % 5) + 0.1 * tb;
        for (int i = 0; i < NB * M * N; i++) rv[i] = (i % 3) - 1.0 + 0.01 * i;
        ASSERT_OK(pipit_program_set_param(p, "a", av, sizeof av));
        ASSERT_OK(pipit_program_set_param(p, "b", bv, sizeof bv));
        double want = 0;
        for (int q = 0; q < NB; q++)
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    double yv = 0;
                    for (int k = 0; k < K; k++) yv += av[(q * K + k) * M + m] * (tb ? bv[n * K + k] : bv[k * N + n]);
                    want += yv * rv[(q * M + m) * N + n];
                }
        pipit_metrics met;
        ASSERT_OK(pipit_step(p, (pipit_feed[]){{"R", rv, sizeof rv}}, 1, 0, &met));
        ASSERT_NEAR_F64(met.loss, want, 1e-12 * (1 + fabs(want)));
        pipit_program_free(p);
        pipit_graph_free(g);
    }
}
