/*
 * test_kernels.c — CPU kernels against naive double-precision references,
 * for f32 and f64, odd and larger shapes; and bitwise determinism: every
 * kernel gives the same bits for nth = 1, 2, 3, 4, 7 (slices run one after
 * another, and for GEMM also on real pthreads).
 */
#include <pthread.h>

#include "backend/cpu/fast_exp.h"
#include "kernel_check.h"

/* ------------------------------------------------------------ GEMM */

static void run_gemm(const kargs *a, int ith, int nth) {
    const int64_t *d = a->d; /* ta tb batch M N K acc sB? */
    int64_t M = d[3], N = d[4], K = d[5];
    int ta = (int)d[0], tb = (int)d[1];
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    int64_t sB = d[7] ? 0 : K * N;
    CALL(a->dt, gemm, ta, tb, d[2], M, N, K, a->in[0], lda, M * K, a->in[1], ldb, sB, a->out,
         N, M * N, (int)d[6], ith, nth);
}

/* ref C[b] (+)= op(A[b]) op(B[b]) */
static void ref_gemm(double *C, const double *A, const double *B, const int64_t *d) {
    int ta = (int)d[0], tb = (int)d[1];
    int64_t batch = d[2], M = d[3], N = d[4], K = d[5];
    for (int64_t b = 0; b < batch; b++) {
        const double *Ab = A + b * M * K, *Bb = B + (d[7] ? 0 : b * K * N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (ta ? Ab[k * M + i] : Ab[i * K + k]) *
                         (tb ? Bb[j * K + k] : Bb[k * N + j]);
                double *c = C + b * M * N + i * N + j;
                *c = d[6] ? *c + s : s;
            }
    }
}

static void gemm_case(int dt, int ta, int tb, int64_t batch, int64_t M, int64_t N, int64_t K,
                      int acc, int bcast) {
    double *rA, *rB, *rC;
    int64_t nB = bcast ? K * N : batch * K * N;
    void *A = rbuf(dt, batch * M * K, 1, &rA), *B = rbuf(dt, nB, 1, &rB);
    void *C = rbuf(dt, batch * M * N, 1, &rC);
    kargs a = {.dt = dt, .out = C, .in = {A, B}, .d = {ta, tb, batch, M, N, K, acc, bcast},
               .run = run_gemm, .nout = batch * M * N};
    ref_gemm(rC, rA, rB, a.d);
    int det = deterministic(&a);
    double e = maxerr(C, dt, rC, batch * M * N) / (K > 0 ? sqrt((double)K) : 1);
    if (!det || !(e <= tol_of(dt)))
        fprintf(stderr, "gemm dt=%d ta=%d tb=%d batch=%lld M=%lld N=%lld K=%lld acc=%d bcast=%d: err %g\n",
                dt, ta, tb, (long long)batch, (long long)M, (long long)N, (long long)K, acc,
                bcast, e);
    free(A), free(B), free(C), free(rA), free(rB), free(rC);
    if (!det || !(e <= tol_of(dt))) pipit_test_failed = 1;
}

PIPIT_TEST(kernel_gemm) {
    pipit__gemm_init();
    for (int dt = 0; dt < 2; dt++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                gemm_case(dt, ta, tb, 1, 7, 13, 5, 0, 0);
                gemm_case(dt, ta, tb, 1, 7, 13, 5, 1, 0);
                gemm_case(dt, ta, tb, 3, 9, 11, 4, 0, 1);
                gemm_case(dt, ta, tb, 3, 9, 11, 4, 1, 0);
                gemm_case(dt, ta, tb, 1, 64, 300, 128, 0, 0);
                gemm_case(dt, ta, tb, 2, 64, 300, 128, 1, 1);
                gemm_case(dt, ta, tb, 1, 1, 1, 1, 0, 0);
                gemm_case(dt, ta, tb, 1, 4, 5, 0, 0, 0);
            }
    /* shapes that split into several tiles (both axes) */
    gemm_case(0, 0, 0, 1, 300, 700, 96, 0, 0);
    gemm_case(0, 1, 0, 2, 520, 333, 64, 1, 0);
    gemm_case(1, 0, 1, 1, 300, 700, 96, 0, 0);
}

PIPIT_TEST(kernel_gemm_tiles) {
    /* the rule is a function of the shape; tiles respect the granularity */
    int64_t mt, nt;
    pipit__gemm_tiles(7, 13, 5, &mt, &nt);
    ASSERT_EQ_I64(mt, 7);
    ASSERT_EQ_I64(nt, 13);
    static const int64_t shapes[][3] = {{256, 2304, 768}, {256, 768, 768},  {256, 3072, 768},
                                        {256, 50257, 768}, {256, 768, 3072}, {768, 2304, 256},
                                        {4096, 768, 768},  {1, 50257, 768}};
    for (int i = 0; i < 8; i++) {
        int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
        pipit__gemm_tiles(M, N, K, &mt, &nt);
        int64_t tiles = ((M + mt - 1) / mt) * ((N + nt - 1) / nt);
        ASSERT_TRUE(tiles >= 1 && tiles <= 32);
        ASSERT_TRUE(nt == N || nt % 64 == 0);
        ASSERT_TRUE(mt == M || mt % 16 == 0);
        ASSERT_TRUE((mt >= 128 || mt == M) && (nt >= 128 || nt == N));
        if (M * N * K >= (int64_t)256 * 768 * 768) ASSERT_TRUE(tiles >= 4);
    }
}

typedef struct {
    const kargs *a;
    int ith, nth;
} thr_arg;
static void *thr_main(void *p) {
    thr_arg *t = p;
    t->a->run(t->a, t->ith, t->nth);
    return NULL;
}

PIPIT_TEST(kernel_gemm_pthreads) {
    pipit__gemm_init();
    for (int dt = 0; dt < 2; dt++) {
        int64_t M = 256, N = 1000, K = 384;
        double *rA, *rB, *rC;
        void *A = rbuf(dt, M * K, 1, &rA), *B = rbuf(dt, K * N, 1, &rB);
        void *C1 = rbuf(dt, M * N, 1, &rC);
        kargs a = {.dt = dt, .out = C1, .in = {A, B}, .d = {0, 1, 1, M, N, K, 0, 0},
                   .run = run_gemm, .nout = M * N};
        run_seq(&a, 1);
        for (int nth = 2; nth <= 8; nth += 3) {
            void *C2 = obuf(dt, M * N);
            kargs b = a;
            b.out = C2;
            pthread_t th[8];
            thr_arg ta[8];
            for (int i = 0; i < nth; i++) {
                ta[i] = (thr_arg){&b, i, nth};
                ASSERT_TRUE(pthread_create(&th[i], NULL, thr_main, &ta[i]) == 0);
            }
            for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
            int same = memcmp(C1, C2, (size_t)(M * N) * esz(dt)) == 0;
            free(C2);
            ASSERT_TRUE(same);
        }
        free(A), free(B), free(C1), free(rA), free(rB), free(rC);
    }
}

/* ------------------------------------------------------------ elementwise */

static void run_add(const kargs *a, int ith, int nth) {
    CALL(a->dt, add, a->out, a->in[0], a->in[1], a->d[0], ith, nth);
}
static void run_mul(const kargs *a, int ith, int nth) {
    CALL(a->dt, mul, a->out, a->in[0], a->in[1], a->d[0], ith, nth);
}
static void run_scale(const kargs *a, int ith, int nth) {
    CALL(a->dt, scale, a->out, a->in[0], a->x, a->d[0], ith, nth);
}
static void run_copy(const kargs *a, int ith, int nth) {
    CALL(a->dt, copy, a->out, a->in[0], a->d[0], ith, nth);
}
static void run_fill(const kargs *a, int ith, int nth) {
    CALL(a->dt, fill, a->out, a->in[0], a->x, a->d[0], ith, nth);
}
static void run_gelu(const kargs *a, int ith, int nth) {
    CALL(a->dt, gelu, a->out, a->in[0], a->d[0], ith, nth);
}
static void run_gelu_dx(const kargs *a, int ith, int nth) {
    CALL(a->dt, gelu_dx, a->out, a->in[0], a->in[1], a->d[0], ith, nth);
}
static void run_sum_all(const kargs *a, int ith, int nth) {
    CALL(a->dt, sum_all, a->out, a->in[0], a->d[0], a->x, ith, nth);
}

static double gelu_ref(double x) {
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Checks one elementwise-style kernel: kind selects the reference. */
static void elem_case(int dt, int kind, int64_t n) {
    double *ra, *rb;
    void *A = rbuf(dt, n, 4, &ra), *B = rbuf(dt, n, 2, &rb);
    int64_t nout = kind == 7 ? 1 : n;
    void *out = obuf(dt, nout);
    double *ref = malloc(sizeof(double) * (size_t)(n + 1));
    static void (*const runs[])(const kargs *, int, int) = {
        run_add, run_mul, run_scale, run_copy, run_fill, run_gelu, run_gelu_dx, run_sum_all};
    kargs a = {.dt = dt, .out = out, .in = {A, B}, .d = {n}, .x = kind == 7 ? 0.25 : -1.5,
               .run = runs[kind], .nout = nout};
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = ra[i], h = 1e-6;
        switch (kind) {
        case 0: ref[i] = x + rb[i]; break;
        case 1: ref[i] = x * rb[i]; break;
        case 2: ref[i] = -1.5 * x; break;
        case 3: ref[i] = x; break;
        case 4: ref[i] = ra[0] * -1.5; break;
        case 5: ref[i] = gelu_ref(x); break;
        case 6: ref[i] = rb[i] * (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h); break;
        case 7: s += x; break;
        }
    }
    if (kind == 7) ref[0] = s * 0.25;
    ASSERT_TRUE(deterministic(&a));
    double tol = kind == 6 ? 1e-6 : tol_of(dt);
    if (dt == 0 && kind == 6) tol = 1e-5;
    double e = maxerr(out, dt, ref, nout);
    if (!(e <= tol)) fprintf(stderr, "elem kind %d dt %d n %lld err %g\n", kind, dt, (long long)n, e);
    ASSERT_TRUE(e <= tol);
    free(A), free(B), free(out), free(ra), free(rb), free(ref);
}

PIPIT_TEST(kernel_elementwise) {
    static const int64_t ns[] = {1, 7, 13, 1000, 4099};
    for (int dt = 0; dt < 2; dt++)
        for (int kind = 0; kind < 5; kind++)
            for (int i = 0; i < 5; i++) elem_case(dt, kind, ns[i]);
}

PIPIT_TEST(kernel_gelu) {
    static const int64_t ns[] = {1, 13, 4099};
    for (int dt = 0; dt < 2; dt++)
        for (int kind = 5; kind < 7; kind++)
            for (int i = 0; i < 3; i++) elem_case(dt, kind, ns[i]);
}

PIPIT_TEST(kernel_sum_all) {
    static const int64_t ns[] = {1, 13, 4099, 0};
    for (int dt = 0; dt < 2; dt++)
        for (int i = 0; i < 4; i++) elem_case(dt, 7, ns[i]);
}

/* ------------------------------------------------------------ row kernels */

static void run_bias_add(const kargs *a, int ith, int nth) {
    CALL(a->dt, bias_add, a->out, a->in[0], a->in[1], a->d[0], a->d[1], ith, nth);
}
static void run_sum_rows(const kargs *a, int ith, int nth) {
    CALL(a->dt, sum_rows, a->out, a->in[0], a->d[0], a->d[1], ith, nth);
}
static void run_ln(const kargs *a, int ith, int nth) {
    CALL(a->dt, layernorm, a->out, a->in[0], a->in[1], a->in[2], a->d[0], a->d[1], a->x, ith,
         nth);
}
static void run_ln_dx(const kargs *a, int ith, int nth) {
    CALL(a->dt, layernorm_dx, a->out, a->in[0], a->in[1], a->in[3], a->d[0], a->d[1], a->x,
         ith, nth);
}
static void run_ln_dw(const kargs *a, int ith, int nth) {
    CALL(a->dt, layernorm_dw, a->out, a->in[0], a->in[3], a->d[0], a->d[1], a->x, ith, nth);
}

/* ref layernorm of one row; also returns xhat */
static void ln_ref_row(const double *x, const double *w, const double *b, int64_t C, double eps,
                       double *out, double *xhat) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; c++) m += x[c];
    m /= (double)C;
    for (int64_t c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    double rs = 1 / sqrt(v / (double)C + eps);
    for (int64_t c = 0; c < C; c++) {
        xhat[c] = (x[c] - m) * rs;
        out[c] = xhat[c] * w[c] + b[c];
    }
}

static void rows_case(int dt, int64_t rows, int64_t C) {
    double *rx, *rw, *rb, *rd;
    double eps = 1e-5;
    void *x = rbuf(dt, rows * C, 3, &rx), *w = rbuf(dt, C, 1, &rw), *b = rbuf(dt, C, 1, &rb);
    void *dout = rbuf(dt, rows * C, 1, &rd);
    for (int64_t i = 0; i < rows * C; i += 3) { /* give rows an offset */
        set(x, dt, i, get(x, dt, i) + 2);
        rx[i] = get(x, dt, i);
    }
    int64_t n = rows * C;
    double *ref = calloc((size_t)n + 1, sizeof(double)), *xh = calloc((size_t)C + 1, sizeof(double));
    double *o = calloc((size_t)C + 1, sizeof(double));
    void *out = obuf(dt, n);
    kargs a = {.dt = dt, .out = out, .in = {x, w, b, dout}, .d = {rows, C}, .x = eps};
    double tol = tol_of(dt) * 5;

    /* bias_add */
    for (int64_t i = 0; i < n; i++) ref[i] = rx[i] + rb[i % C];
    a.run = run_bias_add, a.nout = n, a.in[1] = b;
    ASSERT_TRUE(deterministic(&a));
    ASSERT_TRUE(maxerr(out, dt, ref, n) <= tol);
    /* sum_rows */
    for (int64_t c = 0; c < C; c++) {
        ref[c] = 0;
        for (int64_t r = 0; r < rows; r++) ref[c] += rx[r * C + c];
    }
    a.run = run_sum_rows, a.nout = C;
    ASSERT_TRUE(deterministic(&a));
    ASSERT_TRUE(maxerr(out, dt, ref, C) <= tol);
    /* layernorm */
    for (int64_t r = 0; r < rows; r++) ln_ref_row(rx + r * C, rw, rb, C, eps, ref + r * C, xh);
    a.run = run_ln, a.nout = n, a.in[1] = w;
    ASSERT_TRUE(deterministic(&a));
    ASSERT_TRUE(maxerr(out, dt, ref, n) <= tol);
    /* layernorm_dx: numerically, d/dx_i of sum_c dout_c * ln(x)_c */
    for (int64_t r = 0; r < rows; r++) {
        double *xr = rx + r * C;
        for (int64_t i = 0; i < C; i++) {
            double h = 1e-5, sp = 0, sm = 0, keep = xr[i];
            xr[i] = keep + h;
            ln_ref_row(xr, rw, rb, C, eps, o, xh);
            for (int64_t c = 0; c < C; c++) sp += rd[r * C + c] * o[c];
            xr[i] = keep - h;
            ln_ref_row(xr, rw, rb, C, eps, o, xh);
            for (int64_t c = 0; c < C; c++) sm += rd[r * C + c] * o[c];
            xr[i] = keep;
            ref[r * C + i] = (sp - sm) / (2 * h);
        }
    }
    a.run = run_ln_dx;
    ASSERT_TRUE(deterministic(&a));
    double e = maxerr(out, dt, ref, n);
    if (!(e <= (dt ? 1e-6 : 1e-3))) fprintf(stderr, "ln_dx err %g\n", e);
    ASSERT_TRUE(e <= (dt ? 1e-6 : 1e-3));
    /* layernorm_dw */
    for (int64_t c = 0; c < C; c++) ref[c] = 0;
    for (int64_t r = 0; r < rows; r++) {
        ln_ref_row(rx + r * C, rw, rb, C, eps, o, xh);
        for (int64_t c = 0; c < C; c++) ref[c] += rd[r * C + c] * xh[c];
    }
    a.run = run_ln_dw, a.nout = C;
    ASSERT_TRUE(deterministic(&a));
    e = maxerr(out, dt, ref, C);
    if (!(e <= tol)) fprintf(stderr, "ln_dw err %g\n", e);
    ASSERT_TRUE(e <= tol);
    free(x), free(w), free(b), free(dout), free(rx), free(rw), free(rb), free(rd);
    free(ref), free(xh), free(o), free(out);
}

PIPIT_TEST(kernel_rows_layernorm) {
    for (int dt = 0; dt < 2; dt++) {
        rows_case(dt, 7, 13);
        rows_case(dt, 1, 5);
        rows_case(dt, 33, 64);
        rows_case(dt, 9, 1100); /* more columns than one accumulator chunk */
    }
}

/* ------------------------------------------------------------ permute */

static void run_permute(const kargs *a, int ith, int nth) {
    CALL(a->dt, permute, a->out, a->in[0], (int)a->d[4], a->d, a->perm, ith, nth);
}

PIPIT_TEST(kernel_permute) {
    static const int perms[][4] = {{0, 2, 1, 3}, {3, 2, 1, 0}, {1, 0, 2, 3}, {0, 1, 3, 2}};
    for (int dt = 0; dt < 2; dt++)
        for (int nd = 1; nd <= 4; nd++)
            for (int p = 0; p < 4; p++) {
                int perm[4];
                /* restrict the 4-d permutation to nd axes (keep relative order) */
                int k = 0;
                for (int i = 0; i < 4; i++)
                    if (perms[p][i] < nd) perm[k++] = perms[p][i];
                int64_t dims[5] = {3, 5, 2, 7, nd}, n = 1;
                for (int i = 0; i < nd; i++) n *= dims[i];
                double *rx;
                void *x = rbuf(dt, n, 1, &rx), *out = obuf(dt, n);
                kargs a = {.dt = dt, .out = out, .in = {x}, .perm = perm, .run = run_permute,
                           .nout = n};
                memcpy(a.d, dims, sizeof dims);
                ASSERT_TRUE(deterministic(&a));
                /* walk x and check where each element landed */
                int64_t od[4], ostr[4], s = 1;
                for (int i = 0; i < nd; i++) od[i] = dims[perm[i]];
                for (int i = nd - 1; i >= 0; i--) ostr[i] = s, s *= od[i];
                int bad = 0;
                for (int64_t f = 0; f < n; f++) {
                    int64_t ix[4], rem = f, off = 0;
                    for (int i = nd - 1; i >= 0; i--) ix[i] = rem % dims[i], rem /= dims[i];
                    for (int i = 0; i < nd; i++) off += ix[perm[i]] * ostr[i];
                    if (get(out, dt, off) != rx[f]) bad = 1;
                }
                free(x), free(out), free(rx);
                ASSERT_TRUE(!bad);
            }
}

/* ------------------------------------------------------------ embedding */

static void run_embed(const kargs *a, int ith, int nth) {
    CALL(a->dt, embed, a->out, a->in[0], a->idx, a->d[0], a->d[2], ith, nth);
}
static void run_embed_dtable(const kargs *a, int ith, int nth) {
    CALL(a->dt, embed_dtable, a->out, a->idx, a->in[1], a->d[0], a->d[1], a->d[2], ith, nth);
}

PIPIT_TEST(kernel_embed) {
    static const int64_t shapes[][3] = {{7, 5, 13}, {64, 50, 96}, {1, 1, 1}};
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 3; s++) {
            int64_t n = shapes[s][0], V = shapes[s][1], C = shapes[s][2];
            int32_t *idx = malloc(sizeof(int32_t) * (size_t)n);
            for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)((i * 7 + (i % 3)) % V);
            double *rt, *rd;
            void *table = rbuf(dt, V * C, 1, &rt), *dout = rbuf(dt, n * C, 1, &rd);
            void *out = obuf(dt, n * C), *dtab = obuf(dt, V * C);
            double *ref = calloc((size_t)(V * C + n * C), sizeof(double));
            kargs a = {.dt = dt, .out = out, .in = {table, dout}, .idx = idx, .d = {n, V, C},
                       .run = run_embed, .nout = n * C};
            ASSERT_TRUE(deterministic(&a));
            for (int64_t i = 0; i < n; i++)
                for (int64_t c = 0; c < C; c++) ref[i * C + c] = rt[idx[i] * C + c];
            ASSERT_TRUE(maxerr(out, dt, ref, n * C) == 0);
            a.out = dtab, a.run = run_embed_dtable, a.nout = V * C;
            ASSERT_TRUE(deterministic(&a));
            memset(ref, 0, sizeof(double) * (size_t)(V * C));
            for (int64_t i = 0; i < n; i++)
                for (int64_t c = 0; c < C; c++) ref[idx[i] * C + c] += rd[i * C + c];
            ASSERT_TRUE(maxerr(dtab, dt, ref, V * C) <= tol_of(dt));
            free(idx), free(table), free(dout), free(out), free(dtab), free(ref), free(rt),
                free(rd);
        }
}

/* ------------------------------------------------------------ attention */

/* The attention kernels call BLAS directly, under the kernels' contract
 * that pipit__gemm_init made BLAS single-threaded (pipit_compile does). */
__attribute__((constructor)) static void single_threaded_blas(void) { pipit__gemm_init(); }

/* 1: exercise the streaming fallbacks instead of the blocked kernels. */
static int att_stream;

static void run_att(const kargs *a, int ith, int nth) {
    if (att_stream) {
        CALL(a->dt, attention_stream, a->out, a->in[0], a->d[0], a->d[1], a->d[2], a->d[3], ith, nth);
        return;
    }
    CALL(a->dt, attention, a->out, a->in[0], a->d[0], a->d[1], a->d[2], a->d[3], ith, nth);
}
static void run_att_d(const kargs *a, int ith, int nth) {
    if (att_stream) {
        CALL(a->dt, attention_dqkv_stream, a->out, a->in[0], a->in[1], a->d[0], a->d[1], a->d[2], a->d[3], ith,
             nth);
        return;
    }
    CALL(a->dt, attention_dqkv, a->out, a->in[0], a->in[1], a->d[0], a->d[1], a->d[2], a->d[3],
         ith, nth);
}

/* ref causal attention out [B,T,C] from qkv [B,T,3C] */
static void att_ref(double *out, const double *qkv, int64_t B, int64_t Tq, int64_t C, int64_t H) {
    int64_t D = C / H;
    double *p = malloc(sizeof(double) * (size_t)Tq);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < Tq; t++) {
                const double *q = qkv + (b * Tq + t) * 3 * C + h * D;
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j <= t; j++) {
                    const double *k = qkv + (b * Tq + j) * 3 * C + C + h * D;
                    double s = 0;
                    for (int64_t d = 0; d < D; d++) s += q[d] * k[d];
                    p[j] = s / sqrt((double)D);
                    if (p[j] > m) m = p[j];
                }
                for (int64_t j = 0; j <= t; j++) l += p[j] = exp(p[j] - m);
                double *o = out + (b * Tq + t) * C + h * D;
                for (int64_t d = 0; d < D; d++) {
                    double s = 0;
                    for (int64_t j = 0; j <= t; j++)
                        s += p[j] / l * qkv[(b * Tq + j) * 3 * C + 2 * C + h * D + d];
                    o[d] = s;
                }
            }
    free(p);
}

static void att_case(int dt, int64_t B, int64_t Tq, int64_t C, int64_t H) {
    double *rq, *rd;
    void *qkv = rbuf(dt, B * Tq * 3 * C, 2, &rq), *dout = rbuf(dt, B * Tq * C, 1, &rd);
    void *out = obuf(dt, B * Tq * C), *dqkv = obuf(dt, B * Tq * 3 * C);
    double *ref = malloc(sizeof(double) * (size_t)(B * Tq * 3 * C));
    double *o = malloc(sizeof(double) * (size_t)(B * Tq * C));
    kargs a = {.dt = dt, .out = out, .in = {qkv, dout}, .d = {B, Tq, C, H}, .run = run_att,
               .nout = B * Tq * C};
    ASSERT_TRUE(deterministic(&a));
    att_ref(ref, rq, B, Tq, C, H);
    double e = maxerr(out, dt, ref, B * Tq * C);
    if (!(e <= tol_of(dt))) fprintf(stderr, "attention err %g\n", e);
    ASSERT_TRUE(e <= tol_of(dt));
    /* backward against central differences of sum(dout * att(qkv)) */
    a.out = dqkv, a.run = run_att_d, a.nout = B * Tq * 3 * C;
    ASSERT_TRUE(deterministic(&a));
    for (int64_t i = 0; i < B * Tq * 3 * C; i++) {
        double h = 1e-5, keep = rq[i], sp = 0, sm = 0;
        rq[i] = keep + h;
        att_ref(o, rq, B, Tq, C, H);
        for (int64_t k = 0; k < B * Tq * C; k++) sp += rd[k] * o[k];
        rq[i] = keep - h;
        att_ref(o, rq, B, Tq, C, H);
        for (int64_t k = 0; k < B * Tq * C; k++) sm += rd[k] * o[k];
        rq[i] = keep;
        ref[i] = (sp - sm) / (2 * h);
    }
    e = maxerr(dqkv, dt, ref, B * Tq * 3 * C);
    if (!(e <= (dt ? 1e-7 : 1e-3))) fprintf(stderr, "attention_dqkv err %g\n", e);
    ASSERT_TRUE(e <= (dt ? 1e-7 : 1e-3));
    free(qkv), free(dout), free(out), free(dqkv), free(ref), free(o), free(rq), free(rd);
}

PIPIT_TEST(kernel_attention) {
    for (att_stream = 0; att_stream < 2; att_stream++) /* blocked, then the streaming fallback */
        for (int dt = 0; dt < 2; dt++) {
            att_case(dt, 1, 1, 4, 1);
            att_case(dt, 2, 5, 6, 2);  /* D = 3 */
            att_case(dt, 3, 7, 16, 2); /* D = 8, odd T */
            att_case(dt, 1, 135, 4, 1); /* T beyond one key chunk (online softmax) */
        }
    att_stream = 0;
}

PIPIT_TEST(kernel_attention_long) {
    /* forward only at a GPT-2-like head size, T spanning several chunks */
    for (int dt = 0; dt < 2; dt++) {
        int64_t B = 1, Tq = 300, C = 128, H = 2;
        double *rq;
        void *qkv = rbuf(dt, B * Tq * 3 * C, 3, &rq), *out = obuf(dt, B * Tq * C);
        double *ref = malloc(sizeof(double) * (size_t)(B * Tq * C));
        kargs a = {.dt = dt, .out = out, .in = {qkv}, .d = {B, Tq, C, H}, .run = run_att,
                   .nout = B * Tq * C};
        ASSERT_TRUE(deterministic(&a));
        att_ref(ref, rq, B, Tq, C, H);
        ASSERT_TRUE(maxerr(out, dt, ref, B * Tq * C) <= tol_of(dt));
        free(qkv), free(out), free(ref), free(rq);
    }
}

/* ------------------------------------------------------------ cross-entropy */

static void run_xent(const kargs *a, int ith, int nth) {
    CALL(a->dt, xent_rows, a->out, a->in[0], a->idx, a->d[0], a->d[1], ith, nth);
}
static void run_xent_d(const kargs *a, int ith, int nth) {
    CALL(a->dt, xent_dlogits, a->out, a->in[0], a->idx, a->in[1], a->d[0], a->d[1], ith, nth);
}

PIPIT_TEST(kernel_xent) {
    static const int64_t shapes[][2] = {{7, 13}, {1, 1}, {5, 50257}, {3, 1000}};
    for (int dt = 0; dt < 2; dt++)
        for (int s = 0; s < 4; s++) {
            int64_t rows = shapes[s][0], V = shapes[s][1];
            double *rx, *rl;
            void *x = rbuf(dt, rows * V, 8, &rx), *dl = rbuf(dt, rows, 1, &rl);
            void *loss = obuf(dt, rows), *g = obuf(dt, rows * V);
            int32_t *t = malloc(sizeof(int32_t) * (size_t)rows);
            for (int64_t r = 0; r < rows; r++) t[r] = (int32_t)((r * 31 + 5) % V);
            set(x, dt, V - 1, 80); /* a large logit: must not overflow */
            rx[V - 1] = 80;
            double *ref = malloc(sizeof(double) * (size_t)(rows * V));
            kargs a = {.dt = dt, .out = loss, .in = {x, dl}, .idx = t, .d = {rows, V},
                       .run = run_xent, .nout = rows};
            ASSERT_TRUE(deterministic(&a));
            for (int64_t r = 0; r < rows; r++) {
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < V; j++) m = fmax(m, rx[r * V + j]);
                for (int64_t j = 0; j < V; j++) sum += exp(rx[r * V + j] - m);
                ref[r] = m + log(sum) - rx[r * V + t[r]];
            }
            ASSERT_TRUE(maxerr(loss, dt, ref, rows) <= tol_of(dt));
            a.out = g, a.run = run_xent_d, a.nout = rows * V;
            ASSERT_TRUE(deterministic(&a));
            for (int64_t r = 0; r < rows; r++) {
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < V; j++) m = fmax(m, rx[r * V + j]);
                for (int64_t j = 0; j < V; j++) sum += exp(rx[r * V + j] - m);
                for (int64_t j = 0; j < V; j++)
                    ref[r * V + j] = rl[r] * (exp(rx[r * V + j] - m) / sum - (j == t[r]));
            }
            ASSERT_TRUE(maxerr(g, dt, ref, rows * V) <= tol_of(dt) * 1e-2);
            free(x), free(dl), free(loss), free(g), free(t), free(ref), free(rx), free(rl);
        }
}

/* fast_expf8 (8 lanes, the sums of softmax and cross-entropy) is fast_expf
 * lane for lane, bit for bit: every 97th fp32 bit pattern (NaNs, infinities,
 * subnormals, both signs), each at a different lane, plus the edges. */
PIPIT_TEST(fast_expf8_is_fast_expf_lane_by_lane) {
#ifndef PIPIT_HAVE_EXPF8
    PIPIT_SKIP("built without AVX: the kernels use the scalar fast_expf only");
#else
    float xs[8], ys[8];
    int64_t bad = 0, n = 0;
    const float edge[8] = {-87.33654f, 88.37626f, -0.0f, 0.0f, INFINITY, -INFINITY, NAN, 1e-45f};
    for (uint64_t u = 0; u <= 0xffffffffull + 8 * 97; u += 8 * 97) {
        for (int j = 0; j < 8; j++) {
            uint32_t b = (uint32_t)(u + (uint64_t)j * 97);
            memcpy(&xs[j], &b, sizeof b);
        }
        if (u == 0) memcpy(xs, edge, sizeof xs);
        pipit__v8f v = fast_expf8(v8f_load(xs));
        memcpy(ys, &v, sizeof ys);
        for (int j = 0; j < 8; j++, n++) {
            float want = fast_expf(xs[j]);
            bad += memcmp(&want, &ys[j], sizeof want) != 0;
        }
    }
    ASSERT_TRUE(n > 40000000);
    ASSERT_EQ_I64(bad, 0);
    for (uint32_t h = 0; h < 65536; h += 8) { /* v8f_load_bf16: every bf16 value widened exactly */
        pipit__bf16 in[8];
        for (int j = 0; j < 8; j++) in[j].bits = (uint16_t)(h + (uint32_t)j);
        pipit__v8f v = v8f_load_bf16(in);
        memcpy(ys, &v, sizeof ys);
        for (int j = 0; j < 8; j++) {
            float want = pipit__bf16_to_f32(in[j]);
            bad += memcmp(&want, &ys[j], sizeof want) != 0;
        }
    }
    ASSERT_EQ_I64(bad, 0);
#endif
}
