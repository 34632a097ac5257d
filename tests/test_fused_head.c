/*
 * test_fused_head.c — the fused LM head + cross-entropy
 * (pipit_head_xent_mean, pipit_tp_head_xent_mean; ops.def HEAD_XENT*)
 * against the unfused head (pipit_matmul + pipit_xent_mean, an
 * independent implementation) on the same weights: the loss and both
 * gradients, in f32 (1e-6) and bf16 (against f32, no farther than the
 * unfused bf16 head), at shapes where V is not a multiple of the chunk, d
 * is odd and the groups are uneven; bitwise the same for 1, 2 and 3
 * threads; vocab parallel at T = 2 against T = 1; the peak activation
 * memory without the [N, V] logits; the logits through oneDNN (f32, and
 * bf16 where the kind is oneDNN); bad inputs refused by name. Finite
 * differences in f64: tests/op_cases.c (head_xent_mean, tp_head_xent_mean).
 */
#include <math.h>

#include "backend/cpu/head_xent.h"
#include "backend/cpu/kernels.h"
#include "gradcheck.h"
#include "ir/head_xent.h"
#include "test.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

typedef struct {
    int64_t N, V, d;
} hx_shape;

typedef struct {
    int fused, T, threads;
    pipit_dtype dt;   /* options.dtype: PIPIT_BF16 runs the f32 graph in bf16 */
    pipit_dtype pdt;  /* the params' dtype */
} hx_cfg;

typedef struct {
    double loss;
    size_t peak;
    double *gh, *gw; /* N*d, V*d */
} hx_out;

static pipit_program *hx_program(hx_shape s, hx_cfg c, pipit_graph **gout) {
    pipit_graph *g = pipit_graph_new();
    pipit_graph_set_tensor_parallel(g, c.T);
    pipit_val h = pipit_param(g, "h", c.pdt, 2, SH(s.N, s.d));
    pipit_val w = c.T > 1 ? pipit_param_sharded(g, "w", c.pdt, 2, SH(s.V, s.d), 0, 1)
                          : pipit_param(g, "w", c.pdt, 2, SH(s.V, s.d));
    pipit_val y = pipit_input(g, "y", PIPIT_I32, 1, SH(s.N));
    pipit_val loss;
    if (!c.fused) loss = pipit_xent_mean(g, pipit_matmul(g, h, w, 0, 1), y);
    else if (c.T > 1) loss = pipit_tp_head_xent_mean(g, pipit_tp_copy(g, h), w, y);
    else loss = pipit_head_xent_mean(g, h, w, y);
    pipit_program *p = NULL;
    pipit_options o = {.threads = c.threads, .tensor_parallel = c.T, .dtype = c.dt};
    if (pipit_compile(g, loss, &o, &p)) fprintf(stderr, "compile: %s\n", pipit_errmsg());
    *gout = g;
    return p;
}

static int hx_set(pipit_program *p, const char *name, pipit_dtype dt, int64_t n, uint64_t *seed);
static int hx_grad(pipit_program *p, const char *name, pipit_dtype dt, int64_t n, double *out);

/* One step (no update) on weights drawn from `seed` (the same for every
 * configuration), targets spread over the vocabulary. */
static int hx_run(hx_shape s, hx_cfg c, uint64_t seed, hx_out *o) {
    pipit_graph *g;
    pipit_program *p = hx_program(s, c, &g);
    if (!p) {
        pipit_graph_free(g);
        return 1;
    }
    int bad = hx_set(p, "h", c.pdt, s.N * s.d, &seed) | hx_set(p, "w", c.pdt, s.V * s.d, &seed);
    int32_t *y = malloc(sizeof *y * (size_t)s.N);
    for (int64_t i = 0; i < s.N; i++) y[i] = (int32_t)((i * 7919 + 13) % s.V);
    if (s.N > 1) y[s.N - 1] = (int32_t)(s.V - 1); /* the last class, in the last (short) chunk */
    pipit_feed f = {"y", y, sizeof *y * (size_t)s.N};
    pipit_metrics m;
    bad |= pipit_step(p, &f, 1, 0, &m) != PIPIT_STATUS_OK;
    if (bad) fprintf(stderr, "step: %s\n", pipit_errmsg());
    o->loss = m.loss;
    o->peak = m.peak_bytes;
    o->gh = malloc(sizeof(double) * (size_t)(s.N * s.d));
    o->gw = malloc(sizeof(double) * (size_t)(s.V * s.d));
    bad |= hx_grad(p, "h", c.pdt, s.N * s.d, o->gh) | hx_grad(p, "w", c.pdt, s.V * s.d, o->gw);
    free(y);
    pipit_program_free(p);
    pipit_graph_free(g);
    return bad;
}

/* Param `name` [n] of dtype dt: set from uniform [-1, 1) draws (seed), or
 * its gradient read into doubles. */
static int hx_set(pipit_program *p, const char *name, pipit_dtype dt, int64_t n, uint64_t *seed) {
    size_t es = dt == PIPIT_F64 ? 8 : 4;
    void *b = malloc(es * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        double v = gc_rand(seed);
        if (dt == PIPIT_F64) ((double *)b)[i] = v;
        else ((float *)b)[i] = (float)v;
    }
    int bad = pipit_program_set_param(p, name, b, es * (size_t)n) != PIPIT_STATUS_OK;
    free(b);
    return bad;
}
static int hx_grad(pipit_program *p, const char *name, pipit_dtype dt, int64_t n, double *out) {
    if (dt == PIPIT_F64) return pipit_program_get_grad(p, name, out, 8 * (size_t)n) != PIPIT_STATUS_OK;
    float *b = malloc(4 * (size_t)n);
    int bad = pipit_program_get_grad(p, name, b, 4 * (size_t)n) != PIPIT_STATUS_OK;
    for (int64_t i = 0; i < n; i++) out[i] = b[i];
    free(b);
    return bad;
}

static void hx_free(hx_out *o) { free(o->gh), free(o->gw); }

/* max |a - b| / max |b| */
static double normwise(const double *a, const double *b, int64_t n) {
    double dm = 0, bm = 0;
    for (int64_t i = 0; i < n; i++) {
        dm = fmax(dm, fabs(a[i] - b[i]));
        bm = fmax(bm, fabs(b[i]));
    }
    return dm / fmax(bm, 1e-30);
}

/* The largest |a - b| over one bf16 ulp of max(|a|, |b|) plus 1e-6 of
 * max|b|: two bf16 roundings of fp32 values that agree to fp32 rounding
 * are at most one ulp apart, so <= 1 when they do. */
static double bf16_ulps(const double *a, const double *b, int64_t n) {
    double bm = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) bm = fmax(bm, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) {
        int e;
        frexp(fmax(fabs(a[i]), fabs(b[i])), &e); /* |v| = m 2^e, m in [0.5, 1): 8 bits, ulp 2^(e-8) */
        worst = fmax(worst, fabs(a[i] - b[i]) / (ldexp(1.0, e - 8) + 1e-6 * bm));
    }
    return worst;
}

/* errors of x against the reference r: loss (relative), dh, dW */
static void hx_err(hx_shape s, const hx_out *x, const hx_out *r, double e[3]) {
    e[0] = fabs(x->loss - r->loss) / fabs(r->loss);
    e[1] = normwise(x->gh, r->gh, s.N * s.d);
    e[2] = normwise(x->gw, r->gw, s.V * s.d);
}

/* tiny; one chunk, V not a multiple of anything; three chunks of 2048
 * (the last short) over three groups; 21 chunks of 448 over 16 uneven
 * groups (two rows blocks of 256 and a short one... see head_xent.h) */
static const hx_shape shapes[] = {{5, 11, 3}, {300, 4133, 37}, {2100, 9001, 5}};

/* The fused head against the unfused ops (matmul + xent_mean), both f32,
 * and both against the unfused ops in f64: the fused head is as accurate
 * as the ops it replaces (its error against f64 at most 1.5x theirs plus
 * 1e-7; their difference is printed). Each is ~1e-6 from f64 at 2100 rows (fp32 sums of 2100 products): on
 * OpenBLAS's Haswell kernels their errors happened to coincide (1.4e-7
 * apart), on its AVX-512 ones they do not (1.3e-6 apart). */
PIPIT_TEST(fused_head_matches_unfused_f32) {
    ASSERT_EQ_I64(pipit__hx_nchunks(2100, 9001), 21); /* the shapes cover what the comment says */
    ASSERT_EQ_I64(pipit__hx_groups(2100, 9001), 16);
    ASSERT_EQ_I64(pipit__hx_nchunks(300, 4133), 3);
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        hx_shape s = shapes[k];
        hx_out f, u, r;
        ASSERT_EQ_I64(hx_run(s, (hx_cfg){1, 1, 1, PIPIT_F32, PIPIT_F32}, 11 + k, &f), 0);
        ASSERT_EQ_I64(hx_run(s, (hx_cfg){0, 1, 1, PIPIT_F32, PIPIT_F32}, 11 + k, &u), 0);
        ASSERT_EQ_I64(hx_run(s, (hx_cfg){0, 1, 1, PIPIT_F32, PIPIT_F64}, 11 + k, &r), 0);
        double e[3], ef[3], eu[3];
        hx_err(s, &f, &u, e);
        hx_err(s, &f, &r, ef);
        hx_err(s, &u, &r, eu);
        fprintf(stderr, "N %lld V %lld d %lld: loss %.9g (unfused %.9g), rel. errors loss %.2g dh %.2g dW %.2g; against "
                        "f64 fused %.2g %.2g %.2g, unfused %.2g %.2g %.2g; peak %zu vs %zu bytes\n",
                (long long)s.N, (long long)s.V, (long long)s.d, f.loss, u.loss, e[0], e[1], e[2], ef[0], ef[1], ef[2],
                eu[0], eu[1], eu[2], f.peak, u.peak);
        for (int i = 0; i < 3; i++) ASSERT_TRUE(ef[i] <= 1.5 * eu[i] + 1e-7);
        /* the logits [N, V] and their gradient are not in the plan */
        if (s.V >= 1000) ASSERT_TRUE(f.peak + (size_t)(s.N * s.V) * 3 <= u.peak);
        hx_free(&f), hx_free(&u), hx_free(&r);
    }
}

/* bf16 (h and W rounded to bf16, logits and sums in fp32) against f32:
 * within a few bf16 units, and no farther than the unfused bf16 head
 * (whose logits are rounded to bf16 before its cross-entropy). */
PIPIT_TEST(fused_head_bf16_bound) {
    for (size_t k = 0; k < 2; k++) {
        hx_shape s = shapes[k];
        hx_out f32, fb, ub;
        ASSERT_EQ_I64(hx_run(s, (hx_cfg){0, 1, 1, PIPIT_F32, PIPIT_F32}, 21 + k, &f32), 0);
        ASSERT_EQ_I64(hx_run(s, (hx_cfg){1, 1, 1, PIPIT_BF16, PIPIT_F32}, 21 + k, &fb), 0);
        ASSERT_EQ_I64(hx_run(s, (hx_cfg){0, 1, 1, PIPIT_BF16, PIPIT_F32}, 21 + k, &ub), 0);
        double ef[3], eu[3];
        hx_err(s, &fb, &f32, ef);
        hx_err(s, &ub, &f32, eu);
        fprintf(stderr, "bf16 N %lld V %lld d %lld vs f32: fused loss %.2g dh %.2g dW %.2g; unfused %.2g %.2g %.2g\n",
                (long long)s.N, (long long)s.V, (long long)s.d, ef[0], ef[1], ef[2], eu[0], eu[1], eu[2]);
        for (int i = 0; i < 3; i++) ASSERT_TRUE(ef[i] < 4 * 0x1p-8 && ef[i] <= 1.5 * eu[i] + 0x1p-9);
        hx_free(&f32), hx_free(&fb), hx_free(&ub);
    }
}

PIPIT_TEST(fused_head_threads_bitwise) {
    hx_shape s = shapes[2];
    for (int b = 0; b < 2; b++) {
        pipit_dtype dt = b ? PIPIT_BF16 : PIPIT_F32;
        hx_out one, more;
        ASSERT_EQ_I64(hx_run(s, (hx_cfg){1, 1, 1, dt, PIPIT_F32}, 5, &one), 0);
        for (int th = 2; th <= 3; th++) {
            ASSERT_EQ_I64(hx_run(s, (hx_cfg){1, 1, th, dt, PIPIT_F32}, 5, &more), 0);
            ASSERT_TRUE(memcmp(&one.loss, &more.loss, sizeof one.loss) == 0);
            ASSERT_TRUE(memcmp(one.gh, more.gh, sizeof(double) * (size_t)(s.N * s.d)) == 0);
            ASSERT_TRUE(memcmp(one.gw, more.gw, sizeof(double) * (size_t)(s.V * s.d)) == 0);
            hx_free(&more);
        }
        hx_free(&one);
    }
}

/* The logits GEMMs through oneDNN (head_xent_impl.h). The bf16 kernels
 * take that path where the bf16 GEMM kind is oneDNN; no CPU here has a
 * bf16 matmul in oneDNN, so it is run (1) as the very same code in f32
 * (the test hook pipit__head_xent_f32_onednn): oneDNN really runs
 * (primitives made or reused), the loss and both gradients within 1e-6 of
 * the sgemm path and of the unfused head, bitwise the same for 1 and 3
 * threads; and (2) in bf16 with the kind forced to oneDNN: where oneDNN
 * refuses bf16 (pipit__onednn_bf16_why_not) every call falls back to the
 * fp32 panels, the bits of the panels kind; where it has one, the loss
 * within 1e-6 and every dh and dW element within one bf16 ulp of them
 * (another summation order of the same fp32 products, rounded once: on
 * an AVX512-BF16 EPYC one dW element of 153k sat one ulp apart). */
PIPIT_TEST(fused_head_onednn_path) {
    hx_shape s = shapes[1];
    hx_out ref, un, dnn, dnn3;
    ASSERT_EQ_I64(hx_run(s, (hx_cfg){1, 1, 1, PIPIT_F32, PIPIT_F32}, 31, &ref), 0);
    ASSERT_EQ_I64(hx_run(s, (hx_cfg){0, 1, 1, PIPIT_F32, PIPIT_F32}, 31, &un), 0);
    int64_t made0, reused0, made1, reused1;
    pipit__onednn_stats(&made0, &reused0);
    pipit__head_xent_f32_onednn(1);
    int bad = hx_run(s, (hx_cfg){1, 1, 1, PIPIT_F32, PIPIT_F32}, 31, &dnn);
    bad |= hx_run(s, (hx_cfg){1, 1, 3, PIPIT_F32, PIPIT_F32}, 31, &dnn3);
    pipit__head_xent_f32_onednn(0);
    pipit__onednn_stats(&made1, &reused1);
    ASSERT_EQ_I64(bad, 0);
    ASSERT_TRUE(made1 + reused1 > made0 + reused0); /* oneDNN ran the logits */
    double e[3], eu[3];
    hx_err(s, &dnn, &ref, e);
    hx_err(s, &dnn, &un, eu);
    fprintf(stderr, "f32 logits through oneDNN vs sgemm: loss %.2g dh %.2g dW %.2g; vs unfused %.2g %.2g %.2g\n", e[0],
            e[1], e[2], eu[0], eu[1], eu[2]);
    for (int i = 0; i < 3; i++) ASSERT_TRUE(e[i] < 1e-6 && eu[i] < 1e-6);
    ASSERT_TRUE(memcmp(&dnn.loss, &dnn3.loss, sizeof dnn.loss) == 0);
    ASSERT_TRUE(memcmp(dnn.gh, dnn3.gh, sizeof(double) * (size_t)(s.N * s.d)) == 0);
    ASSERT_TRUE(memcmp(dnn.gw, dnn3.gw, sizeof(double) * (size_t)(s.V * s.d)) == 0);
    hx_free(&ref), hx_free(&un), hx_free(&dnn), hx_free(&dnn3);

    hx_out panels, kind4;
    pipit__gemm_bf16_set_kind(1);
    bad = hx_run(s, (hx_cfg){1, 1, 2, PIPIT_BF16, PIPIT_F32}, 32, &panels);
    pipit__gemm_bf16_set_kind(4);
    int direct = pipit__gemm_bf16_onednn();
    bad |= hx_run(s, (hx_cfg){1, 1, 2, PIPIT_BF16, PIPIT_F32}, 32, &kind4);
    pipit__gemm_bf16_set_kind(0);
    ASSERT_EQ_I64(bad, 0);
    ASSERT_EQ_I64(direct, 1);
    if (pipit__onednn_bf16_why_not()) { /* the fallback only: the panels' bits */
        printf("fused head, bf16 logits through oneDNN: not run here (%s); the fallback checked\n",
               pipit__onednn_bf16_why_not());
        ASSERT_TRUE(memcmp(&kind4.loss, &panels.loss, sizeof kind4.loss) == 0);
        ASSERT_TRUE(memcmp(kind4.gh, panels.gh, sizeof(double) * (size_t)(s.N * s.d)) == 0);
        ASSERT_TRUE(memcmp(kind4.gw, panels.gw, sizeof(double) * (size_t)(s.V * s.d)) == 0);
    } else { /* the same fp32 products summed in another order, dh and dW rounded once to bf16 */
        hx_err(s, &kind4, &panels, e);
        double uh = bf16_ulps(kind4.gh, panels.gh, s.N * s.d), uw = bf16_ulps(kind4.gw, panels.gw, s.V * s.d);
        printf("fused head, bf16 logits through oneDNN vs fp32 panels: loss %.2g dh %.2g dW %.2g; at most %.2g, %.2g "
               "bf16 ulps apart\n",
               e[0], e[1], e[2], uh, uw);
        ASSERT_TRUE(e[0] < 1e-6 && uh <= 1 && uw <= 1);
    }
    hx_free(&panels), hx_free(&kind4);
}

/* Vocab parallel: T = 2 (each rank half of W's rows) against T = 1, f32
 * to 1e-6 (the rows' sums of exponentials are split in two, added in rank
 * order); f64 against the unfused unsharded head to 1e-12. */
PIPIT_TEST(fused_head_vocab_parallel) {
    hx_shape s = {300, 4134, 37}, t = {6, 10, 3};
    hx_out one, two;
    ASSERT_EQ_I64(hx_run(s, (hx_cfg){1, 1, 1, PIPIT_F32, PIPIT_F32}, 3, &one), 0);
    ASSERT_EQ_I64(hx_run(s, (hx_cfg){1, 2, 1, PIPIT_F32, PIPIT_F32}, 3, &two), 0);
    double e[3];
    hx_err(s, &two, &one, e);
    fprintf(stderr, "T = 2 vs T = 1: loss %.2g dh %.2g dW %.2g\n", e[0], e[1], e[2]);
    ASSERT_TRUE(e[0] < 1e-6 && e[1] < 1e-6 && e[2] < 1e-6);
    hx_free(&one), hx_free(&two);
    for (int T = 1; T <= 2; T++) {
        hx_out u, f;
        ASSERT_EQ_I64(hx_run(t, (hx_cfg){0, 1, 1, PIPIT_F32, PIPIT_F64}, 9, &u), 0);
        ASSERT_EQ_I64(hx_run(t, (hx_cfg){1, T, 1, PIPIT_F32, PIPIT_F64}, 9, &f), 0);
        hx_err(t, &f, &u, e);
        ASSERT_TRUE(e[0] < 1e-12 && e[1] < 1e-12 && e[2] < 1e-12);
        hx_free(&u), hx_free(&f);
    }
}

PIPIT_TEST(fused_head_refusals) {
    pipit_graph *g = pipit_graph_new();
    pipit_val h = pipit_param(g, "h", PIPIT_F32, 3, SH(2, 3, 5));
    pipit_val y = pipit_input(g, "y", PIPIT_I32, 2, SH(2, 3));
    pipit_val bad;
    /* W of another d */
    bad = pipit_head_xent_mean(g, h, pipit_param(g, "w6", PIPIT_F32, 2, SH(7, 6)), y);
    ASSERT_TRUE(bad.id < 0);
    ASSERT_MSG_HAS("pipit_head_xent_mean");
    ASSERT_MSG_HAS("h's last axis (5) must be W's d = shape[1] (6)");
    pipit_graph_free(g);

    g = pipit_graph_new();
    h = pipit_param(g, "h", PIPIT_F32, 3, SH(2, 3, 5));
    y = pipit_input(g, "y", PIPIT_I32, 2, SH(2, 3));
    bad = pipit_head_xent_mean(g, h, pipit_param(g, "w3", PIPIT_F32, 3, SH(7, 5, 1)), y);
    ASSERT_TRUE(bad.id < 0);
    ASSERT_MSG_HAS("W must be 2-D [V, d]");
    pipit_graph_free(g);

    g = pipit_graph_new();
    h = pipit_param(g, "h", PIPIT_F32, 3, SH(2, 3, 5));
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 2, SH(7, 5));
    bad = pipit_head_xent_mean(g, h, w, pipit_input(g, "y4", PIPIT_I32, 2, SH(2, 4)));
    ASSERT_TRUE(bad.id < 0);
    ASSERT_MSG_HAS("targets must be h's shape without the last axis");
    pipit_graph_free(g);

    g = pipit_graph_new();
    h = pipit_param(g, "h", PIPIT_F32, 3, SH(2, 3, 5));
    w = pipit_param(g, "w", PIPIT_F32, 2, SH(7, 5));
    bad = pipit_head_xent_mean(g, h, w, pipit_input(g, "yf", PIPIT_F32, 2, SH(2, 3)));
    ASSERT_TRUE(bad.id < 0);
    ASSERT_MSG_HAS("targets must be i32");
    pipit_graph_free(g);

    g = pipit_graph_new();
    h = pipit_param(g, "h", PIPIT_F32, 3, SH(2, 3, 5));
    bad = pipit_head_xent_mean(g, h, pipit_param(g, "w64", PIPIT_F64, 2, SH(7, 5)), pipit_input(g, "y", PIPIT_I32, 2, SH(2, 3)));
    ASSERT_TRUE(bad.id < 0);
    ASSERT_MSG_HAS("h and W must share one float dtype (h is f32, W f64)");
    pipit_graph_free(g);

    bad = pipit_head_xent_mean(NULL, h, h, h);
    ASSERT_TRUE(bad.id < 0);
    ASSERT_MSG_HAS("pipit_head_xent_mean");
    bad = pipit_tp_head_xent_mean(NULL, h, h, h);
    ASSERT_TRUE(bad.id < 0);
    ASSERT_MSG_HAS("pipit_tp_head_xent_mean");

    /* a target outside [0, V): the step refuses it as pipit_xent_mean's */
    hx_shape s = {4, 9, 3};
    pipit_program *p = hx_program(s, (hx_cfg){1, 1, 1, PIPIT_F32, PIPIT_F32}, &g);
    ASSERT_TRUE(p != NULL);
    int32_t t[4] = {0, 8, 9, 1};
    pipit_feed f = {"y", t, sizeof t};
    pipit_metrics m;
    ASSERT_STATUS(pipit_step(p, &f, 1, 0, &m), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("input 'y' of microbatch 0 holds 9 at index 2, outside [0, 9)");
    t[2] = -1;
    ASSERT_STATUS(pipit_step(p, &f, 1, 0, &m), PIPIT_STATUS_INVALID);
    t[2] = 2;
    ASSERT_OK(pipit_step(p, &f, 1, 0, &m));
    pipit_program_free(p);
    pipit_graph_free(g);
}
