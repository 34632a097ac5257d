/*
 * test_kernels_ops.c — the CPU kernels of the general op set against naive
 * double-precision references, f32 and f64, odd shapes: broadcasting
 * binary ops and their reductions (sum_to), elementwise functions and
 * their fused gradients, softmax / log-softmax, axis max, slices and
 * padding, RMSNorm, RoPE and grouped-query attention of any layout. Every
 * kernel also gives the same bits for nth = 1, 2, 3, 4, 7.
 */
#include "ir/graph.h"
#include "kernel_check.h"

/* A node with just a shape, for pipit__bcast_plan. */
static pipit__node shaped(int nd, const int64_t *shape) {
    pipit__node n;
    memset(&n, 0, sizeof n);
    n.ndim = (uint8_t)nd;
    for (int i = 0; i < nd; i++) n.shape[i] = shape[i];
    return n;
}

static int64_t numel_of(const pipit__node *n) { return pipit__node_numel(n); }

/* Index into x (broadcast to out) of out's flat element i: NumPy's rule,
 * written out directly (no plan), as the references' oracle. */
static int64_t bcast_index(const pipit__node *out, const pipit__node *x, int64_t i) {
    int64_t xi = 0, stride = 1;
    for (int a = out->ndim - 1; a >= 0; a--) {
        int64_t c = i % out->shape[a];
        i /= out->shape[a];
        int j = a - (out->ndim - x->ndim);
        if (j < 0) continue;
        if (x->shape[j] != 1) xi += c * stride;
        stride *= x->shape[j];
    }
    return xi;
}

/* ------------------------------------------------------------ broadcasting */

static void run_bin(const kargs *a, int ith, int nth) {
    const int64_t *pl = a->aux; /* dims[4], sa[4], sb[4] */
    switch (a->d[0]) {
    case 0: CALL(a->dt, add_bcast, a->out, a->in[0], a->in[1], pl, pl + 4, pl + 8, ith, nth); break;
    case 1: CALL(a->dt, sub_bcast, a->out, a->in[0], a->in[1], pl, pl + 4, pl + 8, ith, nth); break;
    case 2: CALL(a->dt, mul_bcast, a->out, a->in[0], a->in[1], pl, pl + 4, pl + 8, ith, nth); break;
    default: CALL(a->dt, div_bcast, a->out, a->in[0], a->in[1], pl, pl + 4, pl + 8, ith, nth); break;
    }
}
static void run_bcast(const kargs *a, int ith, int nth) {
    const int64_t *pl = a->aux;
    CALL(a->dt, broadcast, a->out, a->in[0], pl, pl + 4, ith, nth);
}
static void run_sum_to(const kargs *a, int ith, int nth) {
    const int64_t *pl = a->aux;
    CALL(a->dt, sum_to, a->out, a->in[0], pl, pl + 4, a->x, ith, nth);
}

/* out = a OP b for the four ops; x broadcast to out; out-shaped data summed
 * back to a's and b's shapes (scaled by -0.5). */
static void bcast_case(int dt, const pipit__node *o, const pipit__node *an, const pipit__node *bn) {
    int64_t n = numel_of(o), na = numel_of(an), nb = numel_of(bn), pl[12];
    double *ra, *rb, *rx;
    void *A = rbuf(dt, na, 1, &ra), *B = rbuf(dt, nb, 1, &rb), *X = rbuf(dt, n, 1, &rx);
    for (int64_t i = 0; i < nb; i++) { /* divisors away from 0 */
        rb[i] = 1.5 + 0.5 * rb[i];
        set(B, dt, i, rb[i]);
        rb[i] = get(B, dt, i);
    }
    void *out = obuf(dt, n);
    double *ref = malloc(sizeof(double) * (size_t)n);
    pipit__bcast_plan(o, 2, (const pipit__node *const[]){an, bn}, pl, (int64_t(*)[4])(pl + 4));
    for (int op = 0; op < 4; op++) {
        kargs k = {.dt = dt, .out = out, .in = {A, B}, .d = {op}, .run = run_bin, .nout = n, .aux = pl};
        ASSERT_TRUE(deterministic(&k));
        for (int64_t i = 0; i < n; i++) {
            double x = ra[bcast_index(o, an, i)], y = rb[bcast_index(o, bn, i)];
            ref[i] = op == 0 ? x + y : op == 1 ? x - y : op == 2 ? x * y : x / y;
        }
        ASSERT_TRUE(maxerr(out, dt, ref, n) <= (dt ? 1e-15 : 1e-7));
    }
    /* broadcast_to and sum_to, for each input's shape */
    for (int side = 0; side < 2; side++) {
        const pipit__node *sn = side ? bn : an;
        const double *rs = side ? rb : ra;
        int64_t ns = side ? nb : na, p1[8];
        pipit__bcast_plan(o, 1, &sn, p1, (int64_t(*)[4])(p1 + 4));
        kargs k = {.dt = dt, .out = out, .in = {side ? B : A}, .run = run_bcast, .nout = n, .aux = p1};
        ASSERT_TRUE(deterministic(&k));
        for (int64_t i = 0; i < n; i++) ref[i] = rs[bcast_index(o, sn, i)];
        ASSERT_TRUE(maxerr(out, dt, ref, n) == 0);
        void *small = obuf(dt, ns);
        int64_t p2[8];
        pipit__bcast_plan(o, 1, &sn, p2, (int64_t(*)[4])(p2 + 4)); /* x walks out's shape */
        kargs s = {.dt = dt, .out = small, .in = {X}, .x = -0.5, .run = run_sum_to, .nout = ns, .aux = p2};
        ASSERT_TRUE(deterministic(&s));
        for (int64_t i = 0; i < ns; i++) ref[i] = 0;
        for (int64_t i = 0; i < n; i++) ref[bcast_index(o, sn, i)] += -0.5 * rx[i];
        double e = maxerr(small, dt, ref, ns);
        if (!(e <= (dt ? 1e-13 : 1e-6))) fprintf(stderr, "sum_to side %d err %g\n", side, e);
        ASSERT_TRUE(e <= (dt ? 1e-13 : 1e-6));
        free(small);
    }
    free(A), free(B), free(X), free(out), free(ref), free(ra), free(rb), free(rx);
}

PIPIT_TEST(kernel_broadcast_ops) {
    static const struct {
        int no, na, nb;
        int64_t o[4], a[4], b[4];
    } cases[] = {
        {3, 3, 2, {2, 3, 4}, {2, 1, 4}, {3, 1}},              /* both sides broadcast, rank extension */
        {2, 2, 1, {5, 7}, {5, 7}, {7}},                        /* a row vector */
        {2, 2, 1, {4, 1000}, {4, 1}, {1000}},                  /* a column against a row */
        {4, 2, 4, {3, 2, 5, 7}, {5, 1}, {3, 1, 1, 7}},         /* alternating axes */
        {1, 0, 1, {6}, {0}, {6}},                              /* a scalar */
        {3, 3, 3, {2, 3, 5}, {2, 3, 5}, {2, 3, 5}},            /* no broadcasting */
        {3, 3, 3, {1, 9, 1}, {1, 9, 1}, {1, 1, 1}},            /* size-1 axes everywhere */
    };
    for (int dt = 0; dt < 2; dt++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            pipit__node o = shaped(cases[c].no, cases[c].o), an = shaped(cases[c].na, cases[c].a),
                        bn = shaped(cases[c].nb, cases[c].b);
            bcast_case(dt, &o, &an, &bn);
        }
}

/* ------------------------------------------------------------ elementwise */

typedef void (*unary_f32)(float *, const float *, int64_t, int, int);
typedef void (*unary_f64)(double *, const double *, int64_t, int, int);
typedef void (*dx_f32)(float *, const float *, const float *, int64_t, int, int);
typedef void (*dx_f64)(double *, const double *, const double *, int64_t, int, int);

static const struct {
    const char *name;
    unary_f32 f32;
    unary_f64 f64;
    dx_f32 dx32;    /* NULL: the gradient is a composition (neg, exp, log) */
    dx_f64 dx64;
    int from_y;     /* the gradient reads y, not x */
    int positive;   /* defined for x > 0 only */
} unaries[] = {
    {"neg", pipit__neg_f32, pipit__neg_f64, NULL, NULL, 0, 0},
    {"exp", pipit__exp_f32, pipit__exp_f64, NULL, NULL, 0, 0},
    {"log", pipit__log_f32, pipit__log_f64, NULL, NULL, 0, 1},
    {"sqrt", pipit__sqrt_f32, pipit__sqrt_f64, pipit__sqrt_dx_f32, pipit__sqrt_dx_f64, 1, 1},
    {"rsqrt", pipit__rsqrt_f32, pipit__rsqrt_f64, pipit__rsqrt_dx_f32, pipit__rsqrt_dx_f64, 1, 1},
    {"abs", pipit__abs_f32, pipit__abs_f64, pipit__abs_dx_f32, pipit__abs_dx_f64, 0, 0},
    {"relu", pipit__relu_f32, pipit__relu_f64, pipit__relu_dx_f32, pipit__relu_dx_f64, 0, 0},
    {"silu", pipit__silu_f32, pipit__silu_f64, pipit__silu_dx_f32, pipit__silu_dx_f64, 0, 0},
    {"sigmoid", pipit__sigmoid_f32, pipit__sigmoid_f64, pipit__sigmoid_dx_f32, pipit__sigmoid_dx_f64, 1, 0},
    {"tanh", pipit__tanh_f32, pipit__tanh_f64, pipit__tanh_dx_f32, pipit__tanh_dx_f64, 1, 0},
};

static double unary_ref(int u, double x) {
    switch (u) {
    case 0: return -x;
    case 1: return exp(x);
    case 2: return log(x);
    case 3: return sqrt(x);
    case 4: return 1 / sqrt(x);
    case 5: return fabs(x);
    case 6: return x > 0 ? x : 0;
    case 7: return x / (1 + exp(-x));
    case 8: return 1 / (1 + exp(-x));
    default: return tanh(x);
    }
}

static void run_unary(const kargs *a, int ith, int nth) {
    int u = (int)a->d[1];
    if (a->dt) unaries[u].f64(a->out, a->in[0], a->d[0], ith, nth);
    else unaries[u].f32(a->out, a->in[0], a->d[0], ith, nth);
}
static void run_unary_dx(const kargs *a, int ith, int nth) {
    int u = (int)a->d[1];
    if (a->dt) unaries[u].dx64(a->out, a->in[0], a->in[1], a->d[0], ith, nth);
    else unaries[u].dx32(a->out, a->in[0], a->in[1], a->d[0], ith, nth);
}

/* f(x) against libm in double; the fused gradient against d * central
 * differences of f (at x; or given y = f(x), as the op passes it). */
static void unary_case(int dt, int u, int64_t n) {
    double *rx, *rd, *ry = malloc(sizeof(double) * (size_t)n), *ref = malloc(sizeof(double) * (size_t)n);
    void *x = rbuf(dt, n, 4, &rx), *d = rbuf(dt, n, 1, &rd), *y = obuf(dt, n), *dx = obuf(dt, n);
    for (int64_t i = 0; unaries[u].positive && i < n; i++) { /* (0.05, 4.05) */
        set(x, dt, i, fabs(rx[i]) + 0.05);
        rx[i] = get(x, dt, i);
    }
    kargs a = {.dt = dt, .out = y, .in = {x}, .d = {n, u}, .run = run_unary, .nout = n};
    ASSERT_TRUE(deterministic(&a));
    for (int64_t i = 0; i < n; i++) ref[i] = unary_ref(u, rx[i]);
    double e = maxerr(y, dt, ref, n);
    if (!(e <= (dt ? 1e-14 : 1e-6))) fprintf(stderr, "%s dt %d err %g\n", unaries[u].name, dt, e);
    ASSERT_TRUE(e <= (dt ? 1e-14 : 1e-6));
    if (unaries[u].dx32) {
        for (int64_t i = 0; i < n; i++) ry[i] = get(y, dt, i);
        kargs b = {.dt = dt, .out = dx, .in = {unaries[u].from_y ? y : x, d}, .d = {n, u}, .run = run_unary_dx,
                   .nout = n};
        ASSERT_TRUE(deterministic(&b));
        for (int64_t i = 0; i < n; i++) {
            double h = 1e-6 * fmax(1, fabs(rx[i]));
            ref[i] = rd[i] * (unary_ref(u, rx[i] + h) - unary_ref(u, rx[i] - h)) / (2 * h);
        }
        e = maxerr(dx, dt, ref, n);
        if (!(e <= (dt ? 1e-7 : 1e-5))) fprintf(stderr, "%s_dx dt %d err %g\n", unaries[u].name, dt, e);
        ASSERT_TRUE(e <= (dt ? 1e-7 : 1e-5));
    }
    free(x), free(d), free(y), free(dx), free(rx), free(rd), free(ry), free(ref);
}

PIPIT_TEST(kernel_unary_ops) {
    static const int64_t ns[] = {1, 13, 4099};
    for (int dt = 0; dt < 2; dt++)
        for (int u = 0; u < (int)(sizeof unaries / sizeof unaries[0]); u++)
            for (int i = 0; i < 3; i++) unary_case(dt, u, ns[i]);
}

/* ------------------------------------------------------------ softmax */

static void run_sm(const kargs *a, int ith, int nth) {
    if (a->d[2]) CALL(a->dt, log_softmax, a->out, a->in[0], a->d[0], a->d[1], ith, nth);
    else CALL(a->dt, softmax, a->out, a->in[0], a->d[0], a->d[1], ith, nth);
}
static void run_sm_dx(const kargs *a, int ith, int nth) {
    if (a->d[2]) CALL(a->dt, log_softmax_dx, a->out, a->in[0], a->in[1], a->d[0], a->d[1], ith, nth);
    else CALL(a->dt, softmax_dx, a->out, a->in[0], a->in[1], a->d[0], a->d[1], ith, nth);
}

PIPIT_TEST(kernel_softmax) {
    static const int64_t shapes[][2] = {{7, 13}, {1, 1}, {3, 1000}, {2, 9}};
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 4; s++)
            for (int lg = 0; lg < 2; lg++) {
                int64_t rows = shapes[s][0], C = shapes[s][1];
                double *rx, *rd, *ref = malloc(sizeof(double) * (size_t)(rows * C));
                void *x = rbuf(dt, rows * C, 8, &rx), *d = rbuf(dt, rows * C, 1, &rd);
                void *y = obuf(dt, rows * C), *dx = obuf(dt, rows * C);
                set(x, dt, C - 1, 80); /* a large logit must not overflow */
                rx[C - 1] = 80;
                kargs a = {.dt = dt, .out = y, .in = {x}, .d = {rows, C, lg}, .run = run_sm, .nout = rows * C};
                ASSERT_TRUE(deterministic(&a));
                for (int64_t r = 0; r < rows; r++) {
                    const double *xr = rx + r * C;
                    double m = -INFINITY, sum = 0;
                    for (int64_t j = 0; j < C; j++) m = fmax(m, xr[j]);
                    for (int64_t j = 0; j < C; j++) sum += exp(xr[j] - m);
                    for (int64_t j = 0; j < C; j++)
                        ref[r * C + j] = lg ? xr[j] - m - log(sum) : exp(xr[j] - m) / sum;
                }
                ASSERT_TRUE(maxerr(y, dt, ref, rows * C) <= (dt ? 1e-13 : 1e-5));
                /* dx from the kernel's own y: softmax y (d - sum(d y)); log-softmax d - e^y sum(d) */
                kargs b = {.dt = dt, .out = dx, .in = {y, d}, .d = {rows, C, lg}, .run = run_sm_dx, .nout = rows * C};
                ASSERT_TRUE(deterministic(&b));
                for (int64_t r = 0; r < rows; r++) {
                    double sdy = 0, sd = 0;
                    for (int64_t j = 0; j < C; j++) {
                        double yj = get(y, dt, r * C + j);
                        sdy += rd[r * C + j] * yj;
                        sd += rd[r * C + j];
                    }
                    for (int64_t j = 0; j < C; j++) {
                        double yj = get(y, dt, r * C + j), dj = rd[r * C + j];
                        ref[r * C + j] = lg ? dj - exp(yj) * sd : yj * (dj - sdy);
                    }
                }
                ASSERT_TRUE(maxerr(dx, dt, ref, rows * C) <= (dt ? 1e-13 : 1e-5));
                free(x), free(d), free(y), free(dx), free(rx), free(rd), free(ref);
            }
}

/* ------------------------------------------------------------ axis max */

static void run_max(const kargs *a, int ith, int nth) {
    CALL(a->dt, max_axis, a->out, a->in[0], a->d[0], a->d[1], a->d[2], ith, nth);
}
static void run_max_dx(const kargs *a, int ith, int nth) {
    CALL(a->dt, max_dx, a->out, a->in[0], a->in[1], a->d[0], a->d[1], a->d[2], ith, nth);
}

PIPIT_TEST(kernel_max_axis) {
    static const int64_t shapes[][3] = {{3, 5, 1}, {2, 4, 7}, {1, 1, 9}, {5, 3, 600}, {1, 33, 2}};
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 5; s++) {
            int64_t O = shapes[s][0], n = shapes[s][1], I = shapes[s][2];
            double *rx, *rd, *ref = malloc(sizeof(double) * (size_t)(O * n * I));
            void *x = rbuf(dt, O * n * I, 1, &rx), *d = rbuf(dt, O * I, 1, &rd);
            for (int64_t i = 0; i < O * n * I; i += 3) { /* quantised: ties, the first must win */
                rx[i] = floor(rx[i] * 2) / 2;
                set(x, dt, i, rx[i]);
            }
            void *m = obuf(dt, O * I), *dx = obuf(dt, O * n * I);
            kargs a = {.dt = dt, .out = m, .in = {x, d}, .d = {O, n, I}, .run = run_max, .nout = O * I};
            ASSERT_TRUE(deterministic(&a));
            a.out = dx, a.run = run_max_dx, a.nout = O * n * I;
            ASSERT_TRUE(deterministic(&a));
            memset(ref, 0, sizeof(double) * (size_t)(O * n * I));
            for (int64_t o = 0; o < O; o++)
                for (int64_t c = 0; c < I; c++) {
                    int64_t arg = 0;
                    for (int64_t j = 1; j < n; j++)
                        if (rx[(o * n + j) * I + c] > rx[(o * n + arg) * I + c]) arg = j;
                    ASSERT_TRUE(get(m, dt, o * I + c) == rx[(o * n + arg) * I + c]);
                    ref[(o * n + arg) * I + c] = rd[o * I + c];
                }
            ASSERT_TRUE(maxerr(dx, dt, ref, O * n * I) == 0);
            free(x), free(d), free(m), free(dx), free(rx), free(rd), free(ref);
        }
}

/* ------------------------------------------------------------ slices */

static void run_copy_cols(const kargs *a, int ith, int nth) {
    const int64_t *d = a->d; /* ow oc xw xc rows w */
    CALL(a->dt, copy_cols, a->out, d[0], d[1], a->in[0], d[2], d[3], d[4], d[5], ith, nth);
}
static void run_pad_cols(const kargs *a, int ith, int nth) {
    const int64_t *d = a->d;
    CALL(a->dt, pad_cols, a->out, d[0], d[1], a->in[0], d[4], d[5], ith, nth);
}

PIPIT_TEST(kernel_slice_pad) {
    /* ow, oc, xw, xc, rows, w */
    static const int64_t cases[][6] = {{3, 0, 7, 2, 5, 3}, {10, 4, 6, 0, 3, 6}, {1, 0, 1, 0, 1, 1},
                                       {4099, 1000, 2000, 0, 2, 2000}, {5, 0, 5, 0, 4, 5}};
    for (int dt = 0; dt < 2; dt++)
        for (int c = 0; c < 5; c++) {
            const int64_t *d = cases[c];
            int64_t rows = d[4], w = d[5];
            double *rx, *ro;
            void *x = rbuf(dt, rows * d[2], 1, &rx), *out = rbuf(dt, rows * d[0], 1, &ro);
            double *ref = malloc(sizeof(double) * (size_t)(rows * d[0]));
            /* copy: the other columns keep what was there */
            kargs a = {.dt = dt, .out = out, .in = {x}, .d = {d[0], d[1], d[2], d[3], rows, w}, .run = run_copy_cols,
                       .nout = rows * d[0]};
            ASSERT_TRUE(deterministic(&a));
            memcpy(ref, ro, sizeof(double) * (size_t)(rows * d[0]));
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < w; j++) ref[r * d[0] + d[1] + j] = rx[r * d[2] + d[3] + j];
            ASSERT_TRUE(maxerr(out, dt, ref, rows * d[0]) == 0);
            /* pad: x [rows, w] at column oc, zeros elsewhere */
            a.run = run_pad_cols;
            ASSERT_TRUE(deterministic(&a));
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < d[0]; j++)
                    ref[r * d[0] + j] = j >= d[1] && j < d[1] + w ? rx[r * w + j - d[1]] : 0;
            ASSERT_TRUE(maxerr(out, dt, ref, rows * d[0]) == 0);
            free(x), free(out), free(rx), free(ro), free(ref);
        }
}

/* ------------------------------------------------------------ RMSNorm */

static void run_rms(const kargs *a, int ith, int nth) {
    CALL(a->dt, rmsnorm, a->out, a->in[0], a->in[1], a->d[0], a->d[1], a->x, ith, nth);
}
static void run_rms_dx(const kargs *a, int ith, int nth) {
    CALL(a->dt, rmsnorm_dx, a->out, a->in[0], a->in[1], a->in[2], a->d[0], a->d[1], a->x, ith, nth);
}
static void run_rms_dw(const kargs *a, int ith, int nth) {
    CALL(a->dt, rmsnorm_dw, a->out, a->in[0], a->in[2], a->d[0], a->d[1], a->x, ith, nth);
}

/* sum of d * rmsnorm(x, w) over one row, in double */
static double rms_loss(const double *x, const double *w, const double *d, int64_t C, double eps) {
    double s = 0, ss = 0;
    for (int64_t c = 0; c < C; c++) ss += x[c] * x[c];
    double rs = 1 / sqrt(ss / (double)C + eps);
    for (int64_t c = 0; c < C; c++) s += d[c] * w[c] * x[c] * rs;
    return s;
}

PIPIT_TEST(kernel_rmsnorm) {
    static const int64_t shapes[][2] = {{5, 7}, {1, 1}, {3, 1000}, {4, 16}};
    double eps = 1e-5;
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 4; s++) {
            int64_t rows = shapes[s][0], C = shapes[s][1], n = rows * C;
            double *rx, *rw, *rd, *ref = malloc(sizeof(double) * (size_t)n);
            void *x = rbuf(dt, n, 2, &rx), *w = rbuf(dt, C, 1, &rw), *d = rbuf(dt, n, 1, &rd);
            void *y = obuf(dt, n), *dx = obuf(dt, n), *dw = obuf(dt, C);
            kargs a = {.dt = dt, .out = y, .in = {x, w, d}, .d = {rows, C}, .x = eps, .run = run_rms, .nout = n};
            ASSERT_TRUE(deterministic(&a));
            for (int64_t r = 0; r < rows; r++) {
                double ss = 0;
                for (int64_t c = 0; c < C; c++) ss += rx[r * C + c] * rx[r * C + c];
                double rs = 1 / sqrt(ss / (double)C + eps);
                for (int64_t c = 0; c < C; c++) ref[r * C + c] = rw[c] * rx[r * C + c] * rs;
            }
            ASSERT_TRUE(maxerr(y, dt, ref, n) <= (dt ? 1e-14 : 2e-6));
            a.out = dx, a.run = run_rms_dx;
            ASSERT_TRUE(deterministic(&a));
            for (int64_t i = 0; i < n; i++) { /* central differences of its row's loss */
                double h = 1e-5, keep = rx[i], *xr = rx + i / C * C, *dr = rd + i / C * C;
                rx[i] = keep + h;
                double lp = rms_loss(xr, rw, dr, C, eps);
                rx[i] = keep - h;
                double lm = rms_loss(xr, rw, dr, C, eps);
                rx[i] = keep;
                ref[i] = (lp - lm) / (2 * h);
            }
            ASSERT_TRUE(maxerr(dx, dt, ref, n) <= (dt ? 1e-8 : 2e-5));
            a.out = dw, a.run = run_rms_dw, a.nout = C;
            ASSERT_TRUE(deterministic(&a));
            for (int64_t c = 0; c < C; c++) {
                ref[c] = 0;
                for (int64_t r = 0; r < rows; r++) {
                    double ss = 0;
                    for (int64_t k = 0; k < C; k++) ss += rx[r * C + k] * rx[r * C + k];
                    ref[c] += rd[r * C + c] * rx[r * C + c] / sqrt(ss / (double)C + eps);
                }
            }
            ASSERT_TRUE(maxerr(dw, dt, ref, C) <= (dt ? 1e-13 : 2e-5));
            free(x), free(w), free(d), free(y), free(dx), free(dw), free(rx), free(rw), free(rd), free(ref);
        }
}

/* ------------------------------------------------------------ RoPE */

static void run_rope(const kargs *a, int ith, int nth) {
    const int64_t *d = a->d; /* B T H D pos0 inverse */
    pipit__rope_freqs rf = {a->x, 0, 0, 0, 0}; /* theta alone */
    CALL(a->dt, rope, a->out, a->in[0], d[0], d[1], d[2], d[3], d[4], rf, (int)d[5], ith, nth);
}

/* Hugging Face's formula in double: out = x cos + rotate_half(x) sin. */
static void rope_ref(double *out, const double *x, const int64_t *d, double theta, int inverse) {
    int64_t B = d[0], T = d[1], H = d[2], D = d[3], half = D / 2;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                const double *xr = x + ((b * T + t) * H + h) * D;
                double *o = out + ((b * T + t) * H + h) * D;
                for (int64_t i = 0; i < half; i++) {
                    double a = (double)(d[4] + t) * pow(theta, -2.0 * (double)i / (double)D);
                    double c = cos(a), s = inverse ? -sin(a) : sin(a);
                    o[i] = xr[i] * c - xr[i + half] * s;
                    o[i + half] = xr[i + half] * c + xr[i] * s;
                }
            }
}

PIPIT_TEST(kernel_rope) {
    /* B T H D pos0 */
    static const int64_t cases[][5] = {{2, 3, 2, 4, 0}, {1, 300, 3, 8, 0}, {3, 5, 1, 2, 7}, {1, 2, 2, 130, 4000}};
    double theta = 10000.0;
    for (int dt = 0; dt < 2; dt++)
        for (int c = 0; c < 4; c++) {
            int64_t d[6] = {cases[c][0], cases[c][1], cases[c][2], cases[c][3], cases[c][4], 0};
            int64_t n = d[0] * d[1] * d[2] * d[3];
            double *rx, *ref = malloc(sizeof(double) * (size_t)n);
            void *x = rbuf(dt, n, 1, &rx), *y = obuf(dt, n), *back = obuf(dt, n);
            for (int inv = 0; inv < 2; inv++) {
                d[5] = inv;
                kargs a = {.dt = dt, .out = y, .in = {x}, .x = theta, .run = run_rope, .nout = n};
                memcpy(a.d, d, sizeof d);
                ASSERT_TRUE(deterministic(&a));
                rope_ref(ref, rx, d, theta, inv);
                /* f32 forms the angle (pos * f) in float: ~6e-8 relative, times pos */
                double tol = dt ? 1e-12 : 2e-7 * (double)(d[4] + d[1]) + 1e-6;
                double e = maxerr(y, dt, ref, n);
                if (!(e <= tol)) fprintf(stderr, "rope case %d dt %d inv %d err %g\n", c, dt, inv, e);
                ASSERT_TRUE(e <= tol);
            }
            /* the inverse rotation undoes the rotation */
            kargs f = {.dt = dt, .out = y, .in = {x}, .x = theta, .run = run_rope, .nout = n};
            memcpy(f.d, d, sizeof d);
            f.d[5] = 0;
            run_seq(&f, 1);
            f.out = back, f.in[0] = y, f.d[5] = 1;
            run_seq(&f, 1);
            ASSERT_TRUE(maxerr(back, dt, rx, n) <= (dt ? 1e-14 : 1e-6));
            free(x), free(y), free(back), free(rx), free(ref);
        }
}

/* ------------------------------------------------------------ attention */

/* 1: the streaming fallbacks instead of the blocked kernels. */
static int att_stream;

static void run_attn(const kargs *a, int ith, int nth) {
    const pipit__attn_dims *p = a->aux;
    if (att_stream) CALL(a->dt, attn_fwd_stream, a->out, a->in[0], a->in[1], a->in[2], p, ith, nth);
    else CALL(a->dt, attn_fwd, a->out, a->in[0], a->in[1], a->in[2], p, ith, nth);
}
/* out is [dq | dk | dv] */
static void run_attn_d(const kargs *a, int ith, int nth) {
    const pipit__attn_dims *p = a->aux;
    int64_t nq = p->B * p->Tq * p->ldq, nk = p->B * p->Tk * p->ldk;
    if (a->dt) {
        double *o = a->out;
        (att_stream ? pipit__attn_bwd_stream_f64 : pipit__attn_bwd_f64)(o, o + nq, o + nq + nk, a->in[0], a->in[1],
                                                                        a->in[2], a->in[3], p, ith, nth);
    } else {
        float *o = a->out;
        (att_stream ? pipit__attn_bwd_stream_f32 : pipit__attn_bwd_f32)(o, o + nq, o + nq + nk, a->in[0], a->in[1],
                                                                        a->in[2], a->in[3], p, ith, nth);
    }
}

/* Naive attention in double: out [B,Tq,Hq*D] from q, k, v. */
static void attn_ref(double *out, const double *q, const double *k, const double *v, const pipit__attn_dims *p) {
    int64_t D = p->D, rep = p->Hq / p->Hkv;
    double *s = malloc(sizeof(double) * (size_t)p->Tk);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->Hq; h++)
            for (int64_t t = 0; t < p->Tq; t++) {
                int64_t nk = p->causal ? t + 1 : p->Tk, g = h / rep;
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j < nk; j++) {
                    double dot = 0;
                    for (int64_t e = 0; e < D; e++)
                        dot += q[(b * p->Tq + t) * p->ldq + h * D + e] * k[(b * p->Tk + j) * p->ldk + g * D + e];
                    s[j] = dot * p->scale;
                    m = fmax(m, s[j]);
                }
                for (int64_t j = 0; j < nk; j++) l += s[j] = exp(s[j] - m);
                for (int64_t e = 0; e < D; e++) {
                    double acc = 0;
                    for (int64_t j = 0; j < nk; j++) acc += s[j] / l * v[(b * p->Tk + j) * p->ldv + g * D + e];
                    out[(b * p->Tq + t) * p->ldo + h * D + e] = acc;
                }
            }
    free(s);
}

static void attn_case(int dt, int64_t B, int64_t Tq, int64_t Tk, int64_t Hq, int64_t Hkv, int64_t D, int causal) {
    pipit__attn_dims p = {B, Tq, Tk, Hq, Hkv, D, Hq * D, Hkv * D, Hkv * D, Hq * D, causal, 0.7 / sqrt((double)D)};
    int64_t nq = B * Tq * Hq * D, nk = B * Tk * Hkv * D;
    double *rqkv, *rd;
    void *qkv = rbuf(dt, nq + 2 * nk, 2, &rqkv), *dout = rbuf(dt, nq, 1, &rd);
    void *out = obuf(dt, nq), *grad = obuf(dt, nq + 2 * nk);
    double *ref = malloc(sizeof(double) * (size_t)(nq + 2 * nk)), *o = malloc(sizeof(double) * (size_t)nq);
    char *base = qkv;
    const void *q = base, *k = base + (size_t)nq * esz(dt), *v = base + (size_t)(nq + nk) * esz(dt);
    kargs a = {.dt = dt, .out = out, .in = {q, k, v, dout}, .run = run_attn, .nout = nq, .aux = &p};
    ASSERT_TRUE(deterministic(&a));
    attn_ref(ref, rqkv, rqkv + nq, rqkv + nq + nk, &p);
    double e = maxerr(out, dt, ref, nq);
    if (!(e <= tol_of(dt))) fprintf(stderr, "attn fwd err %g\n", e);
    ASSERT_TRUE(e <= tol_of(dt));
    /* backward against central differences of sum(dout * attn(q, k, v)) */
    a.out = grad, a.run = run_attn_d, a.nout = nq + 2 * nk;
    ASSERT_TRUE(deterministic(&a));
    for (int64_t i = 0; i < nq + 2 * nk; i++) {
        double h = 1e-5, keep = rqkv[i], sp = 0, sm = 0;
        rqkv[i] = keep + h;
        attn_ref(o, rqkv, rqkv + nq, rqkv + nq + nk, &p);
        for (int64_t j = 0; j < nq; j++) sp += rd[j] * o[j];
        rqkv[i] = keep - h;
        attn_ref(o, rqkv, rqkv + nq, rqkv + nq + nk, &p);
        for (int64_t j = 0; j < nq; j++) sm += rd[j] * o[j];
        rqkv[i] = keep;
        ref[i] = (sp - sm) / (2 * h);
    }
    e = maxerr(grad, dt, ref, nq + 2 * nk);
    if (!(e <= (dt ? 1e-7 : 1e-3))) fprintf(stderr, "attn bwd err %g\n", e);
    ASSERT_TRUE(e <= (dt ? 1e-7 : 1e-3));
    free(qkv), free(dout), free(out), free(grad), free(ref), free(o), free(rqkv), free(rd);
}

PIPIT_TEST(kernel_attention_gqa) {
    pipit__gemm_init(); /* BLAS single-threaded, as pipit_compile makes it */
    for (att_stream = 0; att_stream < 2; att_stream++)
        for (int dt = 0; dt < 2; dt++) {
            attn_case(dt, 2, 5, 5, 2, 2, 3, 1);   /* multi-head, causal */
            attn_case(dt, 1, 7, 7, 4, 2, 4, 1);   /* 2 query heads per kv head */
            attn_case(dt, 2, 3, 3, 4, 1, 2, 0);   /* multi-query, not causal */
            attn_case(dt, 1, 3, 6, 4, 2, 5, 0);   /* keys != queries */
            attn_case(dt, 1, 2, 140, 2, 1, 3, 0); /* keys beyond one chunk (online softmax) */
        }
    att_stream = 0;
}
