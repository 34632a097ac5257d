/*
 * test_bf16.c — mixed precision (pipit_options.dtype = PIPIT_BF16):
 *   - the conversions round to nearest even, by hand-computed cases;
 *   - every op of the table, in every case of op_cases.c, per microbatch
 *     and on params alone: the bf16 program's output and every parameter
 *     gradient against the f32 program's on the same (bf16-exact) values,
 *     within a bound stated per op below, the same bits at 1 and 3
 *     threads, and every kernel-running op of the table seen in bf16;
 *   - the bf16 GEMM in each of its ways (fp32 panels, the bf16-pair
 *     packing through an emulated vdpbf16ps, AVX512-BF16 where the CPU has
 *     it) against a double reference of the same bf16 inputs, for every
 *     transpose, batching, accumulation and odd shapes, and bitwise
 *     independent of the thread count;
 *   - what the program holds: fp32 params, gradients and moments, bf16
 *     activations and messages (half the bytes), the planner's activation
 *     peak at most 55% of fp32's, the user's graph untouched, outputs
 *     returned in f32, a forward-only program with the training loss bits;
 *   - checkpoints: bf16 weights hold the masters rounded to nearest even
 *     and load back widened exactly; a training checkpoint stays fp32;
 *   - refusals by name: another options.dtype, f64 params, a backend
 *     without bf16 (bf16 params and casts to non-float dtypes: in
 *     test_api_misuse.c).
 * Training curves against fp32 and PyTorch autocast: test_bf16_train.sh.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/kernels.h"
#include "ir/graph.h"
#include "kernel_check.h"
#include "op_cases.h"
#include "pipit_gpt2.h"
#include "pipit_io.h"
#include "runtime/program.h"
#include "gpt2_feeds.h"
#include "test.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

/* ------------------------------------------------------------ conversion */

static uint16_t bits_of(float f) { return pipit__bf16_from_f32(f).bits; }

PIPIT_TEST(bf16_round_to_nearest_even) {
    ASSERT_EQ_I64(bits_of(1.0f), 0x3f80);
    ASSERT_EQ_I64(bits_of(-2.0f), 0xc000);
    ASSERT_EQ_I64(bits_of(-0.0f), 0x8000);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even (1) */
    ASSERT_EQ_I64(bits_of(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to the even (up) */
    ASSERT_EQ_I64(bits_of(1.0f + 0x3p-8f), 0x3f82);
    /* just above halfway: up */
    ASSERT_EQ_I64(bits_of(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    ASSERT_EQ_I64(bits_of(3.4028235e38f), 0x7f80);  /* FLT_MAX rounds up to infinity */
    ASSERT_EQ_I64(bits_of(INFINITY), 0x7f80);
    ASSERT_EQ_I64(bits_of(0x1p-133f), 0x0001);      /* the smallest bf16 subnormal */
    uint16_t nan = bits_of(NAN);
    ASSERT_TRUE((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0); /* still a NaN */
    float back = pipit__bf16_to_f32((pipit__bf16){0x3f81});
    ASSERT_TRUE(back == 1.0f + 0x1p-7f);
    /* from double, one rounding: 1 + 2^-8 + 2^-30 is above the tie, but
     * rounding to fp32 first would land on the tie and then round down */
    ASSERT_EQ_I64(pipit__bf16_from_f64(1.0 + 0x1p-8 + 0x1p-30).bits, 0x3f81);
    ASSERT_EQ_I64(pipit__bf16_from_f64(1.0 + 0x1p-8).bits, 0x3f80);
    ASSERT_EQ_I64(pipit__bf16_from_f64(-(1.0 + 0x3p-8)).bits, 0xbf82);
    ASSERT_EQ_I64(pipit__bf16_from_f64(1e300).bits, 0x7f80);
}

/* ------------------------------------------------------------ per op */

/* max |got - want| / max |want| over a tensor: an error relative to the
 * tensor's scale (a rounding of one element is 2^-9 of its own size). */
static double scaled_err(const float *got, const float *want, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= d)) d = e; /* NaN wins */
        m = fmax(m, fabs((double)want[i]));
    }
    return m > 0 ? d / m : d;
}

/* u = 2^-8, bf16's unit roundoff (8 significant bits: one rounding to
 * nearest is within u of the value, half an ulp). An output is one
 * rounding of an fp32 result; a gradient adds the rounding of each bf16
 * value on its way (the output gradient, a saved activation, the op's
 * own): 2u bounds both, relative to the tensor's largest element (most
 * elements sit below it). Ops whose gradient cubes or divides by a bf16
 * value (rsqrt: y^3; log, div: 1/x, 1/b^2) triple a relative error on
 * its way: 4u. (Largest seen on this machine: 0.96u, and 2.84u for rsqrt;
 * PIPIT_BF16_VERBOSE=1 prints every case's.) */
static double bound_of(const char *name) {
    static const char *const amplified[] = {"rsqrt", "log", "div"};
    for (size_t i = 0; i < sizeof amplified / sizeof amplified[0]; i++)
        if (strncmp(name, amplified[i], strlen(amplified[i])) == 0 && strncmp(name, "log_softmax", 11) != 0)
            return 4 * 0x1p-8;
    return 2 * 0x1p-8;
}

/* One program of a case: y's values of microbatch 0 (per microbatch
 * only: a value of params alone is no output), and every param's
 * gradient, after setting every param to the same bf16-exact values. */
typedef struct {
    int n;
    float *y, **grad;
    int64_t ny, *ngrad;
    pipit_program *p;
    pipit_graph *g;
} case_run;

static void set_bf16_params(pipit_program *p, uint64_t seed) {
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = 0;
        pipit_program_param_numel(p, name, &n);
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++) v[k] = pipit__bf16_to_f32(pipit__bf16_from_f64(gc_rand(&seed)));
        pipit_program_set_param(p, name, v, sizeof(float) * (size_t)n);
        free(v);
    }
}

static pipit_status run_one(const op_case *c, pipit_dtype dt, int threads, case_run *r) {
    memset(r, 0, sizeof *r);
    pipit_graph *g = r->g = pipit_graph_new();
    pipit_val y = c->build(g);
    int nd = pipit_val_ndim(y);
    int64_t shape[PIPIT_MAX_DIMS];
    for (int i = 0; i < nd; i++) shape[i] = pipit_val_dim(y, i);
    pipit_val loss = pipit_sum(g, pipit_mul(g, y, pipit_input(g, "R", PIPIT_F32, nd, shape)));
    int32_t n0 = g->n;
    int out = op_cases_loop_mode; /* a value of params alone is no per-microbatch output: then y is the loss */
    pipit_status s = pipit_compile(
        g, loss,
        &(pipit_options){.microbatches = 1, .threads = threads, .dtype = dt, .bf16_policy = PIPIT_BF16_ALL, /* every op on bf16 */
                         .outputs = &y, .noutputs = out},
        &r->p);
    if (s) return s;
    if (dt == PIPIT_BF16 && g->n != n0) { /* the user's graph is left as it was */
        fprintf(stderr, "%s: the bf16 compile appended %d nodes to the user's graph\n", c->name, (int)(g->n - n0));
        s = PIPIT_STATUS_INTERNAL;
    }
    pipit_feed feeds[16];
    void *bufs[16];
    int nfeed;
    op_cases_fill_feeds(g, 91, 1, feeds, &nfeed, bufs);
    set_bf16_params(r->p, 1234);
    pipit_metrics m;
    if (!s) s = pipit_step(r->p, feeds, nfeed, 0, &m);
    r->ny = 0; /* the loss of a value of params alone is a sum that cancels: compared through the gradients */
    for (int i = 0; out && i < nd; i++) r->ny = (r->ny ? r->ny : 1) * shape[i];
    if (out && !nd) r->ny = 1;
    r->y = malloc(sizeof(float) * (size_t)PIPIT_MAX(r->ny, 1));
    if (!s && out) s = pipit_program_get_output(r->p, y, 0, r->y, sizeof(float) * (size_t)r->ny);
    r->n = pipit_program_num_params(r->p);
    r->grad = calloc((size_t)r->n, sizeof *r->grad);
    r->ngrad = calloc((size_t)r->n, sizeof *r->ngrad);
    for (int i = 0; !s && i < r->n; i++) {
        const char *name = pipit_program_param_name(r->p, i);
        pipit_program_param_numel(r->p, name, &r->ngrad[i]);
        r->grad[i] = malloc(sizeof(float) * (size_t)r->ngrad[i]);
        s = pipit_program_get_grad(r->p, name, r->grad[i], sizeof(float) * (size_t)r->ngrad[i]);
    }
    for (int i = 0; i < nfeed; i++) free(bufs[i]);
    return s;
}

static void run_free(case_run *r) {
    for (int i = 0; i < r->n; i++) free(r->grad[i]);
    free(r->grad), free(r->ngrad), free(r->y);
    pipit_program_free(r->p);
    pipit_graph_free(r->g);
    memset(r, 0, sizeof *r);
}

/* Marks the ops the bf16 program runs on bf16 values (a bf16 output or a
 * bf16 input: per-row losses and sums are fp32 from bf16). */
static void mark_bf16_ops(const pipit_program *p, int *seen) {
    const pipit_graph *g = p->plan.g;
    for (int32_t i = 0; i < g->n; i++) {
        const pipit__node *n = &g->nodes[i];
        int bf = n->dtype == PIPIT_BF16;
        for (int k = 0; k < n->nin; k++) bf |= g->nodes[n->in[k]].dtype == PIPIT_BF16;
        if (bf) seen[n->op] = 1;
    }
}

static int same_bits(const case_run *a, const case_run *b) {
    int same = a->n == b->n && memcmp(a->y, b->y, sizeof(float) * (size_t)a->ny) == 0;
    for (int i = 0; same && i < a->n; i++) same = memcmp(a->grad[i], b->grad[i], sizeof(float) * (size_t)a->ngrad[i]) == 0;
    return same;
}

/* Compares one case's bf16 program with its f32 program; returns 1 if it
 * fails (and says why). */
static int check_case(const op_case *c, int *seen, double *worst) {
    case_run f = {0}, b = {0}, b3 = {0};
    pipit_status s = run_one(c, PIPIT_F32, 1, &f);
    if (!s) s = run_one(c, PIPIT_BF16, 1, &b);
    if (!s) s = run_one(c, PIPIT_BF16, 3, &b3);
    int bad = 0;
    const char *mode = op_cases_loop_mode ? "per microbatch" : "params alone";
    if (s) {
        fprintf(stderr, "%s (%s): %s\n", c->name, mode, pipit_errmsg());
        bad = 1;
    } else {
        mark_bf16_ops(b.p, seen);
        double e = f.ny ? scaled_err(b.y, f.y, f.ny) : 0, bound = bound_of(c->name);
        for (int i = 0; i < f.n; i++) e = fmax(e, scaled_err(b.grad[i], f.grad[i], f.ngrad[i]));
        *worst = fmax(*worst, e);
        if (getenv("PIPIT_BF16_VERBOSE")) fprintf(stderr, "  %-24s %-13s %.3g u\n", c->name, mode, e / 0x1p-8);
        if (!(e <= bound)) {
            fprintf(stderr, "%s (%s): bf16 vs f32 error %.3g > bound %.3g\n", c->name, mode, e, bound);
            bad = 1;
        }
        if (!same_bits(&b, &b3)) {
            fprintf(stderr, "%s (%s): bf16 results differ between 1 and 3 threads\n", c->name, mode);
            bad = 1;
        }
    }
    run_free(&f), run_free(&b), run_free(&b3);
    return bad;
}

PIPIT_TEST(bf16_ops_match_f32) {
    int seen[PIPIT_OP_COUNT] = {0}, bad = 0;
    double worst = 0;
    op_cases_dtype = PIPIT_F32;
    for (op_cases_loop_mode = 0; op_cases_loop_mode < 2; op_cases_loop_mode++)
        for (int i = 0; i < op_ncases; i++) bad += check_case(&op_cases[i], seen, &worst);
    op_cases_loop_mode = 0;
    op_cases_dtype = PIPIT_F64;
    fprintf(stderr, "%d cases x 2 modes: largest bf16-vs-f32 error %.3g (u = 2^-8 = %.3g)\n", op_ncases, worst, 0x1p-8);
    ASSERT_EQ_I64(bad, 0);
    ASSERT_TRUE(worst > 0); /* the bf16 programs really rounded */
    /* every op with a kernel, but fill: it broadcasts the gradient of a sum,
     * which is fp32 (a bf16 copy of it is a cast afterwards); and moe_slots,
     * i32 in and out */
    for (int op = 0; op < PIPIT_OP_COUNT; op++)
        if (pipit__cpu_ops[op] && !seen[op] && op != PIPIT_OP_FILL && op != PIPIT_OP_MOE_SLOTS)
            PIPIT_FAIL_("op %s never ran on bf16 values", pipit__ops[op].name);
}

/* ------------------------------------------------------------ GEMM */

typedef struct {
    int ta, tb, acc;
    int64_t batch, M, N, K, sB; /* sB = 0: B broadcast over the batch */
} gemm_case;

static float bf16_rand(void) { return pipit__bf16_to_f32(pipit__bf16_from_f64(urand())); }

/* C = op(A) op(B) (+ C) of bf16 data in the current way, against the
 * double product of the same bf16 values: each element within one
 * rounding (u = 2^-8 of itself) plus fp32 accumulation (K 2^-24 of the
 * sum of the absolute products); and the same bits for every thread
 * count. */
static int check_gemm(const gemm_case *c) {
    int64_t rowsA = c->ta ? c->K : c->M, colsA = c->ta ? c->M : c->K;
    int64_t rowsB = c->tb ? c->N : c->K, colsB = c->tb ? c->K : c->N;
    int64_t sA = rowsA * colsA, sB = c->sB ? rowsB * colsB : 0, sC = c->M * c->N;
    int64_t nA = c->batch * sA, nB = c->sB ? c->batch * sB : rowsB * colsB, nC = c->batch * sC;
    pipit__bf16 *A = malloc(sizeof *A * (size_t)nA), *B = malloc(sizeof *B * (size_t)nB);
    pipit__bf16 *C = malloc(sizeof *C * (size_t)nC), *C0 = malloc(sizeof *C0 * (size_t)nC);
    pipit__bf16 *C2 = malloc(sizeof *C2 * (size_t)nC);
    for (int64_t i = 0; i < nA; i++) A[i] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t i = 0; i < nB; i++) B[i] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t i = 0; i < nC; i++) C0[i] = pipit__bf16_from_f32(bf16_rand());
    memcpy(C, C0, sizeof *C * (size_t)nC);
    pipit__gemm_bf16(c->ta, c->tb, c->batch, c->M, c->N, c->K, A, colsA, sA, B, colsB, sB, C, c->N, sC, c->acc, 0, 1);
    int bad = 0;
    for (int64_t b = 0; b < c->batch && !bad; b++)
        for (int64_t i = 0; i < c->M && !bad; i++)
            for (int64_t j = 0; j < c->N && !bad; j++) {
                double ref = c->acc ? pipit__bf16_to_f32(C0[b * sC + i * c->N + j]) : 0, mag = fabs(ref);
                for (int64_t k = 0; k < c->K; k++) {
                    double a = pipit__bf16_to_f32(A[b * sA + (c->ta ? k * colsA + i : i * colsA + k)]);
                    double x = pipit__bf16_to_f32(B[b * sB + (c->tb ? j * colsB + k : k * colsB + j)]);
                    ref += a * x, mag += fabs(a * x);
                }
                double got = pipit__bf16_to_f32(C[b * sC + i * c->N + j]);
                if (!(fabs(got - ref) <= 0x1p-8 * fabs(ref) + (c->K + 2) * 0x1p-24 * mag + 1e-30)) {
                    fprintf(stderr, "gemm %s ta=%d tb=%d acc=%d %lldx%lldx%lld: C[%lld][%lld][%lld] = %.9g, expected %.9g\n",
                            pipit__gemm_bf16_kind(), c->ta, c->tb, c->acc, (long long)c->M, (long long)c->N,
                            (long long)c->K, (long long)b, (long long)i, (long long)j, got, ref);
                    bad = 1;
                }
            }
    for (int nth = 2; nth <= 5 && !bad; nth += 3) { /* 2 and 5 threads: the same bits */
        memcpy(C2, C0, sizeof *C2 * (size_t)nC);
        for (int t = 0; t < nth; t++)
            pipit__gemm_bf16(c->ta, c->tb, c->batch, c->M, c->N, c->K, A, colsA, sA, B, colsB, sB, C2, c->N, sC,
                             c->acc, t, nth);
        if (memcmp(C, C2, sizeof *C * (size_t)nC)) {
            fprintf(stderr, "gemm %s: %d threads differ from one\n", pipit__gemm_bf16_kind(), nth);
            bad = 1;
        }
    }
    free(A), free(B), free(C), free(C0), free(C2);
    return bad;
}

static int gemm_cases(void) {
    static const gemm_case cases[] = {
        {0, 0, 0, 1, 5, 7, 3, 1},     {1, 0, 0, 1, 17, 33, 9, 1},  {0, 1, 1, 1, 64, 40, 31, 1},
        {1, 1, 0, 1, 33, 65, 2, 1},   {0, 0, 1, 3, 7, 9, 5, 1},    {0, 1, 0, 2, 9, 70, 12, 0},
        {0, 0, 0, 1, 300, 260, 130, 1}, /* several tiles (gemm.c's rule) */
        {0, 1, 0, 1, 1, 1, 1, 1},     {0, 0, 0, 1, 4, 3, 0, 1}, /* K = 0: C = 0 */
        /* the pairs' vector packing (16 x 16 blocks, 16-column runs) beside
         * its scalar edges; rows past a multiple of 6, columns past 64 */
        {0, 1, 0, 1, 50, 70, 100, 1}, {1, 1, 1, 1, 37, 90, 67, 1}, {1, 0, 0, 1, 45, 130, 66, 1},
        {0, 0, 1, 2, 13, 200, 97, 1}, {1, 1, 1, 1, 13, 70, 4133, 1}, /* K in chunks */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) bad += check_gemm(&cases[i]);
    return bad;
}

/* 1, with a line saying what is not checked, where this CPU has no
 * AVX512-BF16 (the pairs kernel's way is not the one it gets) */
static int no_pairs_kernel(const char *unchecked) {
    if (pipit__cpu_has_avx512bf16()) return 0;
    printf("this CPU has no AVX512-BF16: %s\n", unchecked);
    return 1;
}

/* kinds of pipit__gemm_bf16_set_kind: 1 fp32 panels, 2 avx512bf16, 3 emulated pairs, 5 amx, 6 emulated amx */
PIPIT_TEST(bf16_gemm_every_way) {
    pipit__gemm_init();
    pipit__gemm_bf16_set_kind(1);
    ASSERT_EQ_I64(gemm_cases(), 0);
    pipit__gemm_bf16_set_kind(3); /* the pair packing of the AVX512-BF16 way, its instruction emulated */
    ASSERT_EQ_I64(gemm_cases(), 0);
    pipit__gemm_bf16_set_kind(6); /* the AMX way's tiles and edges, its instruction emulated */
    ASSERT_EQ_I64(gemm_cases(), 0);
    if (pipit__cpu_has_avx512bf16()) {
        pipit__gemm_bf16_set_kind(2);
        ASSERT_EQ_I64(gemm_cases(), 0);
    } else {
        printf("this CPU has no AVX512-BF16: its kernel was not run (the packing was, emulated)\n");
    }
    if (!pipit__cpu_amx_why_not()) {
        pipit__gemm_bf16_set_kind(5);
        ASSERT_EQ_I64(gemm_cases(), 0);
    } else {
        printf("AMX not run: %s (its tiles were, emulated)\n", pipit__cpu_amx_why_not());
    }
    pipit__gemm_bf16_set_kind(0);
}

/* The AMX way with its instruction emulated gives the emulated pairs
 * kernel's bits (each element K's pairs in order from zero) on every layout
 * and edge: rows past a multiple of 16 and 32, fewer than 16, K's last
 * step partial or odd, K in chunks, columns past 32 and 64; fp32 results
 * added into, bf16 ones with a bias. */
static int64_t amx_vs_pairs_emulated(int64_t M, int64_t N, int64_t K, int ta, int tb, int bf16_out) {
    pipit__bf16 *A = malloc(sizeof *A * (size_t)(M * K)), *B = malloc(sizeof *B * (size_t)(K * N));
    pipit__bf16 *bias = malloc(sizeof *bias * (size_t)N);
    float *C[2] = {malloc(sizeof(float) * (size_t)(M * N)), malloc(sizeof(float) * (size_t)(M * N))};
    pipit__bf16 *D[2] = {calloc((size_t)(M * N), sizeof(pipit__bf16)), calloc((size_t)(M * N), sizeof(pipit__bf16))};
    if (!A || !B || !bias || !C[0] || !C[1] || !D[0] || !D[1]) return -1;
    for (int64_t i = 0; i < M * K; i++) A[i] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t i = 0; i < K * N; i++) B[i] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t j = 0; j < N; j++) bias[j] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t i = 0; i < M * N; i++) C[0][i] = C[1][i] = bf16_rand();
    int64_t lda = ta ? M : K, ldb = tb ? K : N, diff = 0;
    for (int w = 0; w < 2; w++) {
        pipit__gemm_bf16_set_kind(w ? 6 : 3);
        if (bf16_out) pipit__gemm_bf16_bias(ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, bias, D[w], N, 0, 0, 1);
        else pipit__gemm_bf16_f32(ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, C[w], N, 0, 1, 0, 1);
    }
    for (int64_t i = 0; i < M * N; i++)
        diff += bf16_out ? D[0][i].bits != D[1][i].bits : memcmp(&C[0][i], &C[1][i], sizeof(float)) != 0;
    if (diff) fprintf(stderr, "amx %lldx%lldx%lld ta=%d tb=%d bf16=%d: %lld elements differ\n", (long long)M,
                      (long long)N, (long long)K, ta, tb, bf16_out, (long long)diff);
    free(A), free(B), free(bias), free(C[0]), free(C[1]), free(D[0]), free(D[1]);
    return diff;
}

PIPIT_TEST(bf16_amx_tiles_are_the_emulation_bit_for_bit) {
    pipit__gemm_init();
    static const int64_t shapes[][3] = {{5, 7, 3},     {16, 32, 32},  {17, 33, 33},   {40, 70, 100},
                                        {64, 130, 64}, {33, 96, 31},  {13, 65, 2081}, {48, 40, 4100}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int l = 0; l < 8; l++)
            ASSERT_EQ_I64(amx_vs_pairs_emulated(shapes[s][0], shapes[s][1], shapes[s][2], l & 1, (l >> 1) & 1, l >> 2),
                          0);
    pipit__gemm_bf16_set_kind(0);
}

/* The vdpbf16ps micro-kernel with its vector packing gives the bits of the
 * emulated instruction with the scalar packing, on every layout and edge. */
PIPIT_TEST(bf16_pairs_kernel_is_the_emulation_bit_for_bit) {
    if (no_pairs_kernel("nothing to compare")) return;
    static const int64_t shapes[][3] = {{50, 70, 100}, {37, 90, 67}, {6, 64, 32}, {13, 200, 97}, {64, 192, 96},
                                        {13, 70, 4133}, {7, 20, 4096}}; /* K summed in chunks (odd, even) */
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int l = 0; l < 4; l++) {
            int ta = l & 1, tb = l >> 1;
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            pipit__bf16 *A = malloc(sizeof *A * (size_t)(M * K)), *B = malloc(sizeof *B * (size_t)(K * N));
            float *C2 = calloc((size_t)(M * N), sizeof *C2), *C3 = calloc((size_t)(M * N), sizeof *C3);
            ASSERT_TRUE(A && B && C2 && C3);
            for (int64_t i = 0; i < M * K; i++) A[i] = pipit__bf16_from_f32(bf16_rand());
            for (int64_t i = 0; i < K * N; i++) B[i] = pipit__bf16_from_f32(bf16_rand());
            int64_t lda = ta ? M : K, ldb = tb ? K : N;
            pipit__gemm_bf16_set_kind(3);
            pipit__gemm_bf16_f32(ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, C3, N, 0, 0, 0, 1);
            pipit__gemm_bf16_set_kind(2);
            pipit__gemm_bf16_f32(ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, C2, N, 0, 0, 0, 1);
            int64_t diff = 0;
            for (int64_t i = 0; i < M * N; i++) diff += memcmp(&C2[i], &C3[i], sizeof(float)) != 0;
            if (diff) fprintf(stderr, "%lldx%lldx%lld ta=%d tb=%d: %lld elements differ\n", (long long)M, (long long)N,
                              (long long)K, ta, tb, (long long)diff);
            ASSERT_EQ_I64(diff, 0);
            free(A), free(B), free(C2), free(C3);
        }
    pipit__gemm_bf16_set_kind(0);
}

/* The bf16 results too (the epilogue's rounding, with and without a bias)
 * give the emulation's bits: gemm_pairs.c rounds a whole block's row by
 * vcvtneps2bf16 unless a sum is subnormal, which that instruction reads
 * as zero. Row 0 is made so that its first block's sums plus the bias are
 * subnormal (2^-125 - 1.5 * 2^-126 = 2^-127, a bf16 value): exact there,
 * and equal to the emulation's. */
static int64_t bf16_results_vs_emulation(int64_t M, int64_t N, int64_t K, int ta, int tb, int with_bias) {
    pipit__bf16 *A = malloc(sizeof *A * (size_t)(M * K)), *B = malloc(sizeof *B * (size_t)(K * N));
    pipit__bf16 *bias = malloc(sizeof *bias * (size_t)N);
    pipit__bf16 *C2 = calloc((size_t)(M * N), sizeof *C2), *C3 = calloc((size_t)(M * N), sizeof *C3);
    if (!A || !B || !bias || !C2 || !C3) return -1;
    for (int64_t i = 0; i < M * K; i++) A[i] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t i = 0; i < K * N; i++) B[i] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t j = 0; j < N; j++) bias[j] = pipit__bf16_from_f32(bf16_rand());
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    for (int64_t k = 0; with_bias && k < K; k++) { /* row 0 = (2^-60, 0, ...); op(B)[0][j] = 2^-65 for j < 64 */
        A[ta ? k * lda : k] = pipit__bf16_from_f32(k ? 0.0f : 0x1p-60f);
        for (int64_t j = 0; j < PIPIT_MIN(N, 64) && k == 0; j++) {
            B[tb ? j * ldb : j] = pipit__bf16_from_f32(0x1p-65f);
            bias[j] = pipit__bf16_from_f32(-0x1.8p-126f);
        }
    }
    pipit__gemm_bf16_set_kind(3);
    if (with_bias) pipit__gemm_bf16_bias(ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, bias, C3, N, 0, 0, 1);
    else pipit__gemm_bf16(ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, C3, N, 0, 0, 0, 1);
    pipit__gemm_bf16_set_kind(2);
    if (with_bias) pipit__gemm_bf16_bias(ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, bias, C2, N, 0, 0, 1);
    else pipit__gemm_bf16(ta, tb, 1, M, N, K, A, lda, 0, B, ldb, 0, C2, N, 0, 0, 0, 1);
    int64_t diff = 0;
    for (int64_t i = 0; i < M * N; i++) diff += C2[i].bits != C3[i].bits;
    if (with_bias && N >= 64 && C2[0].bits != 0x0040) diff++; /* 2^-127 exactly */
    if (diff) fprintf(stderr, "bf16 C %lldx%lldx%lld ta=%d tb=%d bias=%d: %lld elements differ\n", (long long)M,
                      (long long)N, (long long)K, ta, tb, with_bias, (long long)diff);
    free(A), free(B), free(bias), free(C2), free(C3);
    return diff;
}

PIPIT_TEST(bf16_pairs_rounding_is_the_emulation_bit_for_bit) {
    if (no_pairs_kernel("nothing to compare")) return;
    static const int64_t shapes[][3] = {{50, 70, 100}, {7, 130, 34}, {13, 200, 97}, {64, 192, 96}, {13, 70, 2070}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int l = 0; l < 8; l++)
            ASSERT_EQ_I64(bf16_results_vs_emulation(shapes[s][0], shapes[s][1], shapes[s][2], l & 1, (l >> 1) & 1, l >> 2),
                          0);
    pipit__gemm_bf16_set_kind(0);
}

/* A large result is written with streaming stores (around the caches;
 * gemm_bf16.c: a bf16 C from 32 MiB, an fp32 C from 2 MiB): the same bits
 * as the same rows computed 64 at a time (small results, ordinary stores),
 * bf16 and fp32, on one and two threads (each tile ends with a store fence
 * before the pool's barrier); a row stride that is not whole lines takes
 * the ordinary stores, and a row past the result stays untouched. */
static int64_t streamed_vs_blocks(int64_t M, int64_t N, int c32, int64_t ldc, int nth) {
    const int64_t K = 6;
    pipit__bf16 *A = malloc(sizeof *A * (size_t)(M * K)), *B = malloc(sizeof *B * (size_t)(K * N));
    size_t es = c32 ? 4 : 2, bytes = (size_t)((M + 1) * ldc) * es;
    char *big = pipit__malloc_aligned(bytes), *blk = pipit__malloc_aligned(bytes);
    if (!A || !B || !big || !blk) return -1;
    for (int64_t i = 0; i < M * K; i++) A[i] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t i = 0; i < K * N; i++) B[i] = pipit__bf16_from_f32(bf16_rand());
    memset(big, 0x5a, bytes), memset(blk, 0x5a, bytes);
    for (int t = 0; t < nth; t++) /* the thread pool's slices, one after another */
        if (c32) pipit__gemm_bf16_f32(0, 1, 1, M, N, K, A, K, 0, B, K, 0, (float *)big, ldc, 0, 0, t, nth);
        else pipit__gemm_bf16(0, 1, 1, M, N, K, A, K, 0, B, K, 0, (pipit__bf16 *)big, ldc, 0, 0, t, nth);
    for (int64_t i0 = 0; i0 < M; i0 += 64) {
        char *c = blk + (size_t)(i0 * ldc) * es;
        if (c32) pipit__gemm_bf16_f32(0, 1, 1, 64, N, K, A + i0 * K, K, 0, B, K, 0, (float *)c, ldc, 0, 0, 0, 1);
        else pipit__gemm_bf16(0, 1, 1, 64, N, K, A + i0 * K, K, 0, B, K, 0, (pipit__bf16 *)c, ldc, 0, 0, 0, 1);
    }
    int64_t diff = 0;
    for (size_t i = 0; i < bytes; i++) diff += big[i] != blk[i];
    free(A), free(B), pipit__free_aligned(big), pipit__free_aligned(blk);
    return diff;
}

/* kind: 2 the pairs kernel, 5 the AMX one (the ways that stream) */
static void check_streams(int kind) {
    pipit__gemm_bf16_set_kind(kind);
    ASSERT_EQ_I64(streamed_vs_blocks(2048, 8192, 0, 8192, 1), 0); /* bf16, 32 MiB */
    ASSERT_EQ_I64(streamed_vs_blocks(2048, 8192, 0, 8192, 2), 0);
    ASSERT_EQ_I64(streamed_vs_blocks(2048, 4096, 1, 4096, 2), 0); /* fp32, 32 MiB */
    ASSERT_EQ_I64(streamed_vs_blocks(512, 1056, 1, 1056, 1), 0); /* fp32, 2.1 MiB: a weight gradient's size */
    ASSERT_EQ_I64(streamed_vs_blocks(512, 1056, 1, 1056, 2), 0);
    ASSERT_EQ_I64(streamed_vs_blocks(512, 1050, 1, 1051, 1), 0); /* rows not whole lines: ordinary stores */
    ASSERT_EQ_I64(streamed_vs_blocks(2048, 8192, 0, 8195, 1), 0);
    pipit__gemm_bf16_set_kind(0);
}

PIPIT_TEST(bf16_gemm_streams_large_results) {
    if (no_pairs_kernel("no streaming stores to check")) return;
    check_streams(2);
    if (pipit__cpu_amx_why_not()) printf("AMX's streaming stores not checked: %s\n", pipit__cpu_amx_why_not());
    else check_streams(5);
}

/* ------------------------------------------------------------ a model */

enum { TV = 64, TT = 8, TL = 4, TH = 2, TC = 16, TB = 2 };


/* A tiny GPT-2 in S stages, compiled with o (o->dtype, schedule, ...). */
static pipit_status gpt2_program(int stages, pipit_options o, pipit_graph **g, pipit_program **p) {
    pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, stages, PIPIT_F32, 0};
    *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(*g, &c);
    pipit_status s = pipit_compile(*g, loss, &o, p);
    if (!s) s = pipit_gpt2_init(*p, &c, 7);
    return s;
}

/* Bytes of every SEND of rank r's program, and how many. */
static size_t send_bytes(const pipit_program *p, int r, int *count) {
    size_t b = 0;
    *count = 0;
    for (int32_t i = 0; i < p->plan.ranks[r].n; i++)
        if (p->plan.ranks[r].ins[i].kind == INS_SEND) b += p->plan.ranks[r].ins[i].bytes, (*count)++;
    return b;
}

/* The planner's report against a count by hand. Per row (token) a GPT-2
 * block keeps for its backward 16C values: the residual at its two norms
 * (2C), the norms' outputs as the matmuls read them (2C), qkv (3C, the
 * attention's input), the attention's output (C), the MLP's GELU input and
 * output (8C); a stage adds its message (the block input, counted as the
 * first block's residual), the last stage the final norm's input and
 * output (2C) and the logits (V). fp32 keeps all of them in 4 bytes.
 * --bf16-policy all (PIPIT_BF16_ALL) keeps all in 2 bytes: at most 55% of
 * fp32 (the first cut's bound), messages half the bytes. The autocast
 * policy keeps the residual in 4 bytes and the rest in 2: (2C*4 + 14C*2)
 * / (16C*4) = 36/64 = 56.25% per block; rank 1 (2 blocks, C = 16, V = 64):
 * (2*36C + 4C + 2C + 2V) / (2*64C + 8C + 4V) = 1376/2432 = 56.6%. The
 * planner's peak must be within 1 point above these, 3 below (below: the
 * backward's transients that the weight-gradient fusion removed); the messages carry the
 * fp32 residual, so they keep fp32's bytes. */
PIPIT_TEST(bf16_memory_and_messages_halve) {
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 4, &sch));
    pipit_graph *g[3];
    pipit_program *p[3]; /* fp32, bf16 autocast, bf16 all */
    for (int k = 0; k < 3; k++)
        ASSERT_OK(gpt2_program(2, (pipit_options){.schedule = sch, .microbatches = 4, .dtype = k ? PIPIT_BF16 : PIPIT_F32,
                                                  .bf16_policy = k == 2 ? PIPIT_BF16_ALL : PIPIT_BF16_AUTOCAST},
                               &g[k], &p[k]));
    const double C = TC, V = TV, blocks = TL / 2;
    const double want[2] = {36.0 / 64.0, (blocks * 36 * C + 6 * C + 2 * V) / (blocks * 64 * C + 8 * C + 4 * V)};
    for (int r = 0; r < 2; r++) {
        const pipit__rank_plan *f = &p[0]->plan.ranks[r], *b = &p[1]->plan.ranks[r], *a = &p[2]->plan.ranks[r];
        ASSERT_EQ_I64(pipit__preloop_bytes(f), 0); /* fp32: nothing before the loop */
        size_t act32 = pipit__activation_peak(f), act = pipit__activation_peak(b), all = pipit__activation_peak(a);
        size_t copies = pipit__preloop_bytes(b);
        fprintf(stderr,
                "rank %d: fp32 activations %zu bytes; bf16 autocast %zu (%.1f%%, by hand %.1f%%) + bf16 param copies "
                "%zu; bf16 all %zu (%.1f%%)\n",
                r, act32, act, 100.0 * (double)act / (double)act32, 100 * want[r], copies, all,
                100.0 * (double)all / (double)act32);
        ASSERT_TRUE(act32 > 0 && all <= 0.55 * (double)act32);
        /* at most 1 point above the hand count; up to 3 below: the peak
         * falls in the backward, where a weight's gradient once sat in a bf16
         * buffer beside the kept values (2 points on rank 0) and now goes
         * straight into its fp32 accumulator (lower.c fuses_wgrad) */
        ASSERT_TRUE((double)act / (double)act32 <= want[r] + 0.01);
        ASSERT_TRUE((double)act / (double)act32 >= want[r] - 0.03);
        ASSERT_TRUE(copies > 0 && pipit__preloop_bytes(a) > 0); /* the bf16 copies of the rank's params */
        int nf, nb, na;
        size_t sf = send_bytes(p[0], r, &nf), sb = send_bytes(p[1], r, &nb), sa = send_bytes(p[2], r, &na);
        ASSERT_TRUE(nf > 0 && nb == nf && na == nf);
        ASSERT_EQ_I64(sb, sf); /* the fp32 residual and its fp32 gradient */
        ASSERT_EQ_I64(2 * sa, sf);
    }
    for (int k = 0; k < 3; k++) pipit_program_free(p[k]), pipit_graph_free(g[k]);
    pipit_schedule_free(sch);
}

/* The precision policy on a small graph, node by node (hand-listed: the
 * table in docs/architecture.md "Precision"). Two stages: embeddings, a
 * norm, a linear with GELU, a residual add, a yield, then a softmax of a
 * matmul and a tied head with its cross-entropy. */
enum { PV = 12, PT = 4, PC = 8 };
static pipit_val pol_param(pipit_graph *g, const char *name, int nd, const int64_t *shape) {
    return pipit_param(g, name, PIPIT_F32, nd, shape);
}
static const pipit__node *pol_node(const pipit_program *p, int32_t id) { return &p->plan.g->nodes[id]; }
/* The node input k of id reads, through one cast of it if there is one;
 * *cast gets the cast's dtype (-1: no cast). */
static int32_t pol_through_cast(const pipit_program *p, int32_t id, int k, int *cast) {
    int32_t x = pol_node(p, id)->in[k];
    *cast = -1;
    if (pol_node(p, x)->op == PIPIT_OP_CAST) *cast = pol_node(p, x)->dtype, x = pol_node(p, x)->in[0];
    return x;
}

PIPIT_TEST(bf16_policy_per_node) {
    for (int all = 0; all < 2; all++) {
        pipit_graph *g = pipit_graph_new();
        pipit_val tok = pipit_input(g, "tok", PIPIT_I32, 1, SH(PT)), tgt = pipit_input(g, "tgt", PIPIT_I32, 1, SH(PT));
        pipit_val pos = pipit_input(g, "pos", PIPIT_I32, 1, SH(PT));
        pipit_val wte = pol_param(g, "wte", 2, SH(PV, PC));
        pipit_val x0 = pipit_add(g, pipit_embed(g, wte, tok), pipit_embed(g, pol_param(g, "wpe", 2, SH(PT, PC)), pos));
        pipit_val h = pipit_layernorm(g, x0, pol_param(g, "lw", 1, SH(PC)), pol_param(g, "lb", 1, SH(PC)), 1e-5);
        pipit_val mm = pipit_matmul(g, h, pol_param(g, "w1", 2, SH(PC, 2 * PC)), 0, 0);
        pipit_val fc = pipit_bias_add(g, mm, pol_param(g, "b1", 1, SH(2 * PC)));
        pipit_val ge = pipit_gelu(g, fc);
        pipit_val pr = pipit_matmul(g, ge, pol_param(g, "w2", 2, SH(2 * PC, PC)), 0, 0);
        pipit_val x1 = pipit_add(g, x0, pr);
        pipit_val y = pipit_yield(g, x1);
        pipit_val sm = pipit_softmax(g, pipit_matmul(g, y, pol_param(g, "w3", 2, SH(PC, PC)), 0, 0));
        pipit_val x2 = pipit_add(g, y, sm);
        pipit_val hf = pipit_layernorm(g, x2, pol_param(g, "fw", 1, SH(PC)), pol_param(g, "fb", 1, SH(PC)), 1e-5);
        pipit_val logits = pipit_matmul_nt(g, hf, wte);
        pipit_val loss = pipit_xent_mean(g, logits, tgt);
        pipit_val outs[] = {x0, h, mm, fc, ge, pr, x1, y, sm, x2, logits};
        enum { X0, H, MM, FC, GE, PR, X1, Y, SM, X2, LOGITS, NOUT };
        pipit_schedule *sch = NULL;
        ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch));
        pipit_program *p = NULL;
        ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = 2, .dtype = PIPIT_BF16,
                                                          .bf16_policy = all ? PIPIT_BF16_ALL : PIPIT_BF16_AUTOCAST,
                                                          .outputs = outs, .noutputs = NOUT},
                                  &p));
        const int32_t *o = p->plan.outputs;
        int F = PIPIT_F32, B = PIPIT_BF16, cast;
        /* autocast: the residual stream, the norms and softmax fp32; the matmuls, the linear's bias and GELU bf16 */
        const int want[NOUT] = {F, F, B, B, B, B, F, F, F, F, B};
        for (int i = 0; i < NOUT; i++) {
            int dt = pol_node(p, o[i])->dtype;
            if (dt != (all ? B : want[i])) fprintf(stderr, "policy %s: output %d is %s\n", all ? "all" : "autocast", i,
                                                   pipit__dtype_name((pipit_dtype)dt));
            ASSERT_EQ_I64(dt, all ? B : want[i]);
        }
        ASSERT_EQ_I64(pol_node(p, o[Y])->op, PIPIT_OP_YIELD); /* the message is the value itself, in its dtype */
        ASSERT_EQ_I64(pol_node(p, o[Y])->in[0], o[X1]);
        /* the matmul reads bf16 copies of the norm's output and of the param */
        ASSERT_EQ_I64(pol_through_cast(p, o[MM], 0, &cast), o[H]);
        ASSERT_EQ_I64(cast, all ? -1 : B);
        int32_t w1 = pol_through_cast(p, o[MM], 1, &cast);
        ASSERT_EQ_I64(pol_node(p, w1)->op, PIPIT_OP_PARAM);
        ASSERT_EQ_I64(cast, B);
        if (!all) {
            /* the norm reads the fp32 residual and fp32 weights, no cast */
            ASSERT_EQ_I64(pol_through_cast(p, o[H], 0, &cast), o[X0]);
            ASSERT_EQ_I64(cast, -1);
            ASSERT_EQ_I64(pol_node(p, pol_node(p, o[H])->in[1])->op, PIPIT_OP_PARAM);
            /* the residual add widens the bf16 branch: add(x0, cast(pr, f32)) */
            ASSERT_EQ_I64(pol_through_cast(p, o[X1], 1, &cast), o[PR]);
            ASSERT_EQ_I64(cast, F);
            /* the embedding reads the fp32 table; the head a bf16 copy of it, made once */
            int32_t e = pol_node(p, o[X0])->in[0];
            ASSERT_EQ_I64(pol_node(p, e)->op, PIPIT_OP_EMBED);
            ASSERT_EQ_I64(pol_node(p, pol_node(p, e)->in[0])->op, PIPIT_OP_PARAM);
            ASSERT_EQ_I64(pol_through_cast(p, o[LOGITS], 1, &cast), pol_node(p, e)->in[0]);
            ASSERT_EQ_I64(cast, B);
            /* the bias follows the bf16 matmul: a bf16 copy */
            ASSERT_EQ_I64(pol_node(p, pol_through_cast(p, o[FC], 1, &cast))->op, PIPIT_OP_PARAM);
            ASSERT_EQ_I64(cast, B);
            /* the cross-entropy reads the bf16 logits as they are; its rows and the loss are fp32 */
            ASSERT_EQ_I64(pol_node(p, p->plan.loss)->dtype, F);
        }
        /* a training step runs and its loss is near the fp32 graph's */
        set_bf16_params(p, 3);
        pipit_metrics m;
        int32_t ids[2][3][PT];
        pipit_feed feeds[6];
        for (int mb = 0; mb < 2; mb++) {
            for (int i = 0; i < PT; i++)
                ids[mb][0][i] = (i * 5 + mb) % PV, ids[mb][1][i] = (i * 7 + 1) % PV, ids[mb][2][i] = i;
            feeds[3 * mb] = (pipit_feed){"tok", ids[mb][0], sizeof ids[mb][0]};
            feeds[3 * mb + 1] = (pipit_feed){"tgt", ids[mb][1], sizeof ids[mb][1]};
            feeds[3 * mb + 2] = (pipit_feed){"pos", ids[mb][2], sizeof ids[mb][2]};
        }
        ASSERT_OK(pipit_step(p, feeds, 3, 1, &m));
        ASSERT_TRUE(isfinite(m.loss) && m.loss > 0);
        pipit_program_free(p);
        pipit_schedule_free(sch);
        pipit_graph_free(g);
    }
    pipit_options o = {.dtype = PIPIT_BF16, .bf16_policy = (pipit_bf16_policy)7};
    pipit_graph *g = pipit_graph_new();
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 1, SH(3));
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, pipit_sum(g, pipit_mul(g, w, w)), &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.bf16_policy must be PIPIT_BF16_AUTOCAST");
    pipit_graph_free(g);
}

/* What stays fp32: params, gradients, moments (their dtype and bytes); a
 * step gives a loss near fp32's; a forward-only bf16 program on the same
 * graph gives the training step's loss bits; threads change no bit. */
PIPIT_TEST(bf16_program_keeps_fp32_state) {
    double loss[3];
    float *w[3];
    int64_t n = 0;
    for (int k = 0; k < 3; k++) { /* fp32; bf16 on 1 thread; bf16 on 3 threads */
        pipit_graph *g;
        pipit_program *p;
        ASSERT_OK(gpt2_program(1, (pipit_options){.microbatches = 2, .threads = k == 2 ? 3 : 1,
                                                  .dtype = k ? PIPIT_BF16 : PIPIT_F32},
                               &g, &p));
        pipit_dtype dt = PIPIT_BF16;
        ASSERT_OK(pipit_program_param_dtype(p, "h.0.mlp.c_fc.weight", &dt));
        ASSERT_EQ_I64(dt, PIPIT_F32);
        int32_t buf[6 * TB * TT];
        pipit_feed feeds[6];
        test_gpt2_feeds(2, 0, TB, TT, TV, buf, feeds);
        pipit_metrics m;
        ASSERT_OK(pipit_step(p, feeds, 3, 1, &m));
        loss[k] = m.loss;
        ASSERT_OK(pipit_program_param_numel(p, "wte.weight", &n));
        w[k] = malloc(sizeof(float) * (size_t)n);
        float *mom = malloc(sizeof(float) * (size_t)n);
        ASSERT_OK(pipit_program_get_param(p, "wte.weight", w[k], sizeof(float) * (size_t)n));
        ASSERT_OK(pipit_program_get_opt_state(p, "wte.weight", 1, mom, sizeof(float) * (size_t)n));
        ASSERT_TRUE(mom[0] > 0); /* an fp32 second moment of an fp32 gradient */
        free(mom);
        if (k == 1) { /* forward only, on the same (untouched) graph: the same loss bits before the update */
            pipit_graph *g2;
            pipit_program *f;
            ASSERT_OK(gpt2_program(1, (pipit_options){.microbatches = 2, .dtype = PIPIT_BF16, .forward_only = 1}, &g2, &f));
            pipit_metrics fm;
            ASSERT_OK(pipit_step(f, feeds, 3, 0, &fm));
            ASSERT_TRUE(memcmp(&fm.loss, &loss[1], sizeof fm.loss) == 0);
            pipit_program_free(f), pipit_graph_free(g2);
        }
        pipit_program_free(p), pipit_graph_free(g);
    }
    fprintf(stderr, "first step loss: fp32 %.9g, bf16 %.9g\n", loss[0], loss[1]);
    ASSERT_NEAR_F64(loss[1], loss[0], 0x1p-6 * loss[0]);
    ASSERT_TRUE(loss[1] != loss[0]); /* it did compute in bf16 */
    ASSERT_TRUE(memcmp(&loss[1], &loss[2], sizeof loss[1]) == 0 && memcmp(w[1], w[2], sizeof(float) * (size_t)n) == 0);
    for (int k = 0; k < 3; k++) free(w[k]);
}

/* Every refusal names what to change. */
PIPIT_TEST(bf16_refusals) {
    pipit_graph *g = pipit_graph_new();
    pipit_val w = pipit_param(g, "w", PIPIT_F64, 1, SH(3));
    pipit_val loss = pipit_sum(g, pipit_mul(g, w, w));
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.dtype = PIPIT_F64}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.dtype must be PIPIT_F32");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.dtype = (pipit_dtype)9}, &p), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.dtype = PIPIT_BF16}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("param 'w' is f64");
    ASSERT_TRUE(p == NULL);
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){0}, &p)); /* the refusals left the graph usable */
    pipit_program_free(p);
    pipit_graph_free(g);
    /* a backend without bf16 kernels */
    static pipit__backend nobf16;
    nobf16 = pipit__backend_cpu;
    nobf16.name = "nobf16";
    nobf16.bf16 = 0;
    pipit__backend_register(&nobf16);
    g = pipit_graph_new();
    w = pipit_param(g, "w", PIPIT_F32, 1, SH(3));
    loss = pipit_sum(g, pipit_mul(g, w, w));
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.device = "nobf16", .dtype = PIPIT_BF16}, &p),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("the nobf16 backend has no bf16 kernels");
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.device = "nobf16"}, &p));
    pipit_program_free(p);
    pipit__backend_register(NULL);
    pipit_graph_free(g);
}

/* Weights exported as bf16 hold each fp32 master rounded to nearest even;
 * loaded into a program they widen exactly (fp32 masters of those values);
 * a training checkpoint of a bf16 program stays fp32. */
PIPIT_TEST(bf16_checkpoints) {
    pipit_graph *g;
    pipit_program *p, *q;
    ASSERT_OK(gpt2_program(1, (pipit_options){.dtype = PIPIT_BF16}, &g, &p));
    char path[512], tpath[512];
    snprintf(path, sizeof path, "%s/w16.safetensors", pipit_test_tmpdir());
    snprintf(tpath, sizeof tpath, "%s/train.safetensors", pipit_test_tmpdir());
    ASSERT_OK(pipit_checkpoint_save_as(p, path, NULL, PIPIT_BF16));
    ASSERT_OK(pipit_checkpoint_save_train(p, tpath, 0, NULL));
    pipit_checkpoint *ck = NULL, *tk = NULL;
    ASSERT_OK(pipit_checkpoint_open(path, &ck));
    ASSERT_OK(pipit_checkpoint_open(tpath, &tk));
    pipit_graph *g2;
    ASSERT_OK(gpt2_program(1, (pipit_options){0}, &g2, &q));
    ASSERT_OK(pipit_checkpoint_load_into(q, ck));
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        pipit_dtype dt = PIPIT_F32, tdt = PIPIT_BF16;
        ASSERT_OK(pipit_checkpoint_tensor_dtype(ck, name, &dt));
        ASSERT_OK(pipit_checkpoint_tensor_dtype(tk, name, &tdt));
        ASSERT_EQ_I64(dt, PIPIT_BF16);
        ASSERT_EQ_I64(tdt, PIPIT_F32);
        int64_t n = 0;
        pipit_program_param_numel(p, name, &n);
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        pipit_program_get_param(p, name, a, sizeof(float) * (size_t)n);
        pipit_program_get_param(q, name, b, sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++)
            if (b[k] != pipit__bf16_to_f32(pipit__bf16_from_f32(a[k])))
                PIPIT_FAIL_("%s[%lld]: loaded %.9g, the master %.9g rounds to %.9g", name, (long long)k, b[k], a[k],
                            pipit__bf16_to_f32(pipit__bf16_from_f32(a[k])));
        free(a), free(b);
    }
    pipit_checkpoint_free(ck), pipit_checkpoint_free(tk);
    pipit_program_free(p), pipit_program_free(q);
    pipit_graph_free(g), pipit_graph_free(g2);
}

/* A gradient transform (pipit_set_grad) reads the fp32 accumulated
 * gradient of an fp32 master: halving wte's gives exactly half the bf16
 * program's untransformed gradient, pipelined too (the tied wte's uses on
 * both ranks summed first). */
PIPIT_TEST(bf16_gradient_transform) {
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch));
    float *grad[2];
    int64_t n = 0;
    for (int halve = 0; halve < 2; halve++) {
        pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, 2, PIPIT_F32, 0};
        pipit_graph *g = pipit_graph_new();
        pipit_val loss = pipit_gpt2_build(g, &c);
        if (halve) {
            pipit_val wte = {g, -1};
            for (int32_t i = 0; i < g->n && wte.id < 0; i++)
                if (g->nodes[i].op == PIPIT_OP_PARAM && strcmp(g->nodes[i].name, "wte.weight") == 0) wte.id = i;
            ASSERT_OK(pipit_set_grad(g, wte, pipit_scale(g, pipit_grad_of(g, wte), 0.5)));
        }
        pipit_program *p;
        ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = 2, .dtype = PIPIT_BF16}, &p));
        ASSERT_OK(pipit_gpt2_init(p, &c, 7));
        int32_t buf[6 * TB * TT];
        pipit_feed feeds[6];
        test_gpt2_feeds(2, 0, TB, TT, TV, buf, feeds);
        ASSERT_OK(pipit_step(p, feeds, 3, 0, NULL));
        ASSERT_OK(pipit_program_param_numel(p, "wte.weight", &n));
        grad[halve] = malloc(sizeof(float) * (size_t)n);
        ASSERT_OK(pipit_program_get_grad(p, "wte.weight", grad[halve], sizeof(float) * (size_t)n));
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    int64_t nonzero = 0;
    for (int64_t k = 0; k < n; k++) {
        if (grad[1][k] != 0.5f * grad[0][k]) PIPIT_FAIL_("wte grad[%lld]: %.9g, half of %.9g", (long long)k, grad[1][k], grad[0][k]);
        nonzero += grad[0][k] != 0;
    }
    ASSERT_TRUE(nonzero > 0);
    free(grad[0]), free(grad[1]);
    pipit_schedule_free(sch);
}
