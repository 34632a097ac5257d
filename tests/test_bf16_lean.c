/*
 * test_bf16_lean.c — the bf16 CPU path's conversions and its fp32-panels
 * GEMM, bit for bit:
 *   - pipit__bf16_widen_n / pipit__bf16_narrow_n (the array conversions
 *     the kernels use, vectorised by the compiler) against the scalar
 *     functions of util/bf16.h and against a reference written here
 *     (widen: the bits shifted; narrow: round to nearest even decided by
 *     comparing the dropped half with 0x8000, NaN quieted), over all 65536
 *     bf16 values and an fp32 sweep of every bf16 upper half with lower
 *     halves below, at, and above the tie (NaNs, infinities, subnormals,
 *     overflow to infinity), at lengths and offsets that leave vector tails;
 *   - the fp32-panels GEMM (PIPIT_BF16_GEMM=panels, the way of CPUs without
 *     AVX512-BF16) against a straightforward one written here: every
 *     operand widened whole, one cblas_sgemm per tile of gemm.c's rule on
 *     the widened matrices, C narrowed; the same bits for every transpose,
 *     accumulation, batch (B shared too), odd shapes and shapes of several
 *     row and column blocks, at 1, 2 and 3 threads. The kernel reuses a
 *     thread's panels across tiles and keeps its buffers between calls: the
 *     reference does neither;
 *   - the 16-lane AVX512-BF16 forms of GELU, SiLU, their backwards and the
 *     cross-entropy's passes (kernels_avx512.c) against the scalar loops
 *     and the stated summation order, lane sums compared in double.
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/fast_exp.h"
#include "backend/cpu/kernels.h"
#include "test.h"

/* ------------------------------------------------------------ conversions */

static float ref_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t ref_narrow(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t hi = u >> 16, lo = u & 0xffffu;
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return (uint16_t)(hi | 0x40u); /* NaN */
    if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi++; /* past the tie, or at it with an odd kept bit */
    return (uint16_t)hi;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

PIPIT_TEST(bf16_lean_widen_all_values) {
    enum { N = 65536, PAD = 19 };
    pipit__bf16 *h = malloc(sizeof *h * (N + PAD));
    float *f = malloc(sizeof *f * (N + PAD));
    ASSERT_TRUE(h && f);
    for (int i = 0; i < N + PAD; i++) h[i].bits = (uint16_t)(i * 40503u); /* a permutation of the 65536 values */
    int bad = 0;
    /* whole, then from odd offsets with odd lengths: every vector tail */
    static const int offs[] = {0, 1, 3, 7, 15}, lens[] = {N, N - 1, 65521, 13, 1};
    for (int t = 0; t < 5; t++) {
        memset(f, 0xa5, sizeof *f * (N + PAD));
        pipit__bf16_widen_n(f + offs[t], h + offs[t], lens[t]);
        for (int i = 0; i < N + PAD && bad < 5; i++) {
            int in = i >= offs[t] && i < offs[t] + lens[t];
            uint32_t want = in ? f32_bits(ref_widen(h[i].bits)) : 0xa5a5a5a5u;
            if (f32_bits(f[i]) != want || (in && f32_bits(f[i]) != f32_bits(pipit__bf16_to_f32(h[i])))) {
                fprintf(stderr, "widen: bf16 0x%04x -> 0x%08x, expected 0x%08x (offset %d)\n", h[i].bits,
                        f32_bits(f[i]), want, offs[t]);
                bad++;
            }
        }
    }
    ASSERT_EQ_I64(bad, 0);
    free(h), free(f);
}

PIPIT_TEST(bf16_lean_narrow_sweep) {
    /* each bf16 upper half with these lower halves: exact, the smallest
     * and largest below the tie, the tie, just past it, the largest */
    static const uint16_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
    enum { NL = sizeof lows / sizeof lows[0], N = 65536 * NL, PAD = 21 };
    float *f = malloc(sizeof *f * (N + PAD));
    pipit__bf16 *h = malloc(sizeof *h * (N + PAD));
    ASSERT_TRUE(f && h);
    for (int i = 0; i < N + PAD; i++) {
        uint32_t u = (uint32_t)(i / NL % 65536) << 16 | lows[i % NL];
        memcpy(&f[i], &u, sizeof u);
    }
    int bad = 0, nans = 0, infs = 0, ties = 0, subn = 0;
    static const int offs[] = {0, 1, 5, 9}, lens[] = {N, N - 3, 300007, 7};
    for (int t = 0; t < 4; t++) {
        memset(h, 0x5a, sizeof *h * (N + PAD));
        pipit__bf16_narrow_n(h + offs[t], f + offs[t], lens[t]);
        for (int i = 0; i < N + PAD && bad < 5; i++) {
            int in = i >= offs[t] && i < offs[t] + lens[t];
            uint16_t want = in ? ref_narrow(f[i]) : 0x5a5a;
            if (h[i].bits != want || (in && h[i].bits != pipit__bf16_from_f32(f[i]).bits)) {
                fprintf(stderr, "narrow: fp32 0x%08x -> 0x%04x, expected 0x%04x (offset %d)\n", f32_bits(f[i]),
                        h[i].bits, want, offs[t]);
                bad++;
            }
            if (t == 0 && in) {
                nans += isnan(f[i]) && (h[i].bits & 0x7fc0) == 0x7fc0; /* quiet NaN */
                infs += isfinite(f[i]) && isinf(pipit__bf16_to_f32(h[i]));
                ties += (f32_bits(f[i]) & 0xffffu) == 0x8000u;
                subn += fpclassify(f[i]) == FP_SUBNORMAL;
            }
        }
    }
    ASSERT_EQ_I64(bad, 0);
    /* the sweep holds what it claims: every NaN pattern, finite values
     * that overflow (above the largest bf16's half step), ties, subnormals */
    ASSERT_EQ_I64(nans, 2 * 127 * NL + 2 * 6); /* 2 signs x 127 NaN bf16 mantissas x NL, + inf's NaN lows */
    ASSERT_TRUE(infs > 0 && ties == 65536 && subn > 2 * 127 * NL);
    free(f), free(h);
}

/* The large conversions' streaming path (non-temporal stores, from 4 MB of
 * output): the sweep above five times over, from a dst that is not 32-byte
 * aligned, against the reference rounding; its neighbours untouched. */
PIPIT_TEST(bf16_lean_narrow_large_streams_the_same_bits) {
    static const uint16_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
    enum { NL = sizeof lows / sizeof lows[0], N = 5 * 65536 * NL + 13, OFF = 3 };
    float *f = malloc(sizeof *f * N);
    pipit__bf16 *h = malloc(sizeof *h * (N + 2 * OFF));
    ASSERT_TRUE(f && h);
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)(i / NL % 65536) << 16 | lows[i % NL];
        memcpy(&f[i], &u, sizeof u);
    }
    ASSERT_TRUE((int64_t)sizeof *h * N >= 4 << 20); /* the streaming size */
    memset(h, 0x5a, sizeof *h * (N + 2 * OFF));
    pipit__bf16_narrow_large(h + OFF, f, N);
    int64_t bad = 0;
    for (int i = 0; i < N + 2 * OFF; i++) {
        int in = i >= OFF && i < OFF + N;
        bad += h[i].bits != (in ? ref_narrow(f[i - OFF]) : 0x5a5a);
    }
    ASSERT_EQ_I64(bad, 0);
    free(f), free(h);
}

/* pipit__zero_large: every byte of the range zero and none beside it
 * touched, at sizes below and above the streaming size, from starts and to
 * ends off a 32-byte block (memset's result, whichever way it is written). */
PIPIT_TEST(zero_large_zeroes_exactly_its_bytes) {
    enum { PAD = 64 };
    static const size_t sizes[] = {0, 1, 31, 33, 4096 + 7, ((size_t)8 << 20) - 1, ((size_t)8 << 20) + 45};
    static const size_t offs[] = {0, 1, 17, 32};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t oi = 0; oi < sizeof offs / sizeof offs[0]; oi++) {
            size_t n = sizes[si], off = offs[oi], total = n + off + 2 * PAD;
            unsigned char *buf = malloc(total);
            ASSERT_TRUE(buf != NULL);
            memset(buf, 0xa5, total);
            pipit__zero_large(buf + PAD + off, n);
            size_t bad = 0;
            for (size_t i = 0; i < total; i++) {
                int in = i >= PAD + off && i < PAD + off + n;
                bad += buf[i] != (in ? 0 : 0xa5);
            }
            if (bad) PIPIT_FAIL_("size %zu at offset %zu: %zu bytes wrong", n, off, bad);
            free(buf);
        }
}

/* ------------------------------------------------------------ the panels GEMM */

typedef struct {
    int ta, tb, acc;
    int64_t batch, M, N, K;
    int shared_b; /* sB = 0: one B for every batch */
} lean_case;

static uint64_t lean_state = 12345;
static pipit__bf16 lean_rand(void) {
    lean_state = lean_state * 6364136223846793005ULL + 1442695040888963407ULL;
    float x = (float)((int64_t)(lean_state >> 40) - (1 << 23)) * 0x1p-21f; /* [-4, 4) */
    return pipit__bf16_from_f32(x);
}

/* The reference: widen A, B and C whole; per tile of gemm.c's rule one
 * cblas_sgemm on the widened matrices (their own leading dimensions);
 * narrow C whole. */
static void ref_gemm(const lean_case *c, const pipit__bf16 *A, int64_t lda, int64_t sA, const pipit__bf16 *B,
                     int64_t ldb, int64_t sB, pipit__bf16 *C, int64_t ldc, int64_t sC, int64_t nA, int64_t nB,
                     int64_t nC) {
    float *a = malloc(sizeof *a * (size_t)nA), *b = malloc(sizeof *b * (size_t)nB), *cf = malloc(sizeof *cf * (size_t)nC);
    for (int64_t i = 0; i < nA; i++) a[i] = pipit__bf16_to_f32(A[i]);
    for (int64_t i = 0; i < nB; i++) b[i] = pipit__bf16_to_f32(B[i]);
    for (int64_t i = 0; i < nC; i++) cf[i] = pipit__bf16_to_f32(C[i]);
    int64_t mt, nt;
    pipit__gemm_tiles(c->M, c->N, c->K, &mt, &nt);
    for (int64_t bt = 0; bt < c->batch; bt++)
        for (int64_t i0 = 0; i0 < c->M; i0 += mt)
            for (int64_t j0 = 0; j0 < c->N; j0 += nt) {
                int64_t m = PIPIT_MIN(mt, c->M - i0), n = PIPIT_MIN(nt, c->N - j0);
                cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans,
                            (blasint)m, (blasint)n, (blasint)c->K, 1.0f, a + bt * sA + (c->ta ? i0 : i0 * lda),
                            (blasint)lda, b + bt * sB + (c->tb ? j0 * ldb : j0), (blasint)ldb, c->acc ? 1.0f : 0.0f,
                            cf + bt * sC + i0 * ldc + j0, (blasint)ldc);
            }
    for (int64_t bt = 0; bt < c->batch; bt++) /* only C's elements: the gaps past N keep their bits */
        for (int64_t i = 0; i < c->M; i++)
            for (int64_t j = 0; j < c->N; j++) C[bt * sC + i * ldc + j] = pipit__bf16_from_f32(cf[bt * sC + i * ldc + j]);
    free(a), free(b), free(cf);
}

/* pipit__gemm_bf16 (panels) at 1, 2 and 3 threads against ref_gemm; the
 * operands have leading dimensions past their widths (gaps). */
static int lean_check(const lean_case *c) {
    int64_t rA = c->ta ? c->K : c->M, cA = c->ta ? c->M : c->K, rB = c->tb ? c->N : c->K, cB = c->tb ? c->K : c->N;
    int64_t lda = cA + 3, ldb = cB + 1, ldc = c->N + 2;
    int64_t sA = rA * lda, sB = c->shared_b ? 0 : rB * ldb, sC = c->M * ldc;
    int64_t nA = PIPIT_MAX(c->batch * sA, 1), nB = PIPIT_MAX(c->shared_b ? rB * ldb : c->batch * sB, 1);
    int64_t nC = c->batch * sC;
    pipit__bf16 *A = malloc(sizeof *A * (size_t)nA), *B = malloc(sizeof *B * (size_t)nB);
    pipit__bf16 *C0 = malloc(sizeof *C0 * (size_t)nC), *R = malloc(sizeof *R * (size_t)nC);
    pipit__bf16 *C = malloc(sizeof *C * (size_t)nC);
    for (int64_t i = 0; i < nA; i++) A[i] = lean_rand();
    for (int64_t i = 0; i < nB; i++) B[i] = lean_rand();
    for (int64_t i = 0; i < nC; i++) C0[i] = lean_rand();
    memcpy(R, C0, sizeof *R * (size_t)nC);
    ref_gemm(c, A, lda, sA, B, ldb, sB, R, ldc, sC, nA, nB, nC);
    int bad = 0;
    for (int nth = 1; nth <= 3 && !bad; nth++) {
        memcpy(C, C0, sizeof *C * (size_t)nC);
        for (int t = 0; t < nth; t++)
            pipit__gemm_bf16(c->ta, c->tb, c->batch, c->M, c->N, c->K, A, lda, sA, B, ldb, sB, C, ldc, sC, c->acc, t,
                             nth);
        for (int64_t i = 0; i < nC && !bad; i++)
            if (C[i].bits != R[i].bits) {
                fprintf(stderr, "panels gemm ta=%d tb=%d acc=%d batch=%lld%s %lldx%lldx%lld, %d threads: element %lld "
                        "is 0x%04x, the reference 0x%04x\n", c->ta, c->tb, c->acc, (long long)c->batch,
                        c->shared_b ? " (B shared)" : "", (long long)c->M, (long long)c->N, (long long)c->K, nth,
                        (long long)i, C[i].bits, R[i].bits);
                bad = 1;
            }
    }
    free(A), free(B), free(C0), free(R), free(C);
    return bad;
}

PIPIT_TEST(bf16_lean_panels_gemm_matches_reference) {
    pipit__gemm_init();
    pipit__gemm_bf16_set_kind(1); /* fp32 panels */
    static const lean_case shapes[] = {
        {0, 0, 0, 1, 1, 1, 1, 0},       {0, 0, 0, 1, 7, 5, 3, 0},      {0, 0, 0, 3, 33, 65, 17, 0},
        {0, 0, 0, 2, 130, 70, 300, 0},  {0, 0, 0, 4, 19, 23, 11, 1},   {0, 0, 0, 1, 4, 3, 0, 0},
        {0, 0, 0, 1, 700, 900, 40, 0},  /* several row and column blocks */
        {0, 0, 0, 1, 1100, 200, 70, 0}, /* tall: row blocks over one column block */
        {0, 0, 0, 1, 150, 2000, 90, 0}, /* wide: column blocks over one row block */
        {0, 0, 0, 2, 520, 450, 33, 1},  /* batched blocks, B shared */
    };
    int64_t mt, nt, several = 0;
    int bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        pipit__gemm_tiles(shapes[s].M, shapes[s].N, shapes[s].K, &mt, &nt);
        several += mt < shapes[s].M && nt < shapes[s].N;
        for (int v = 0; v < 8; v++) { /* every transpose, with and without accumulation */
            lean_case c = shapes[s];
            c.ta = v & 1, c.tb = v >> 1 & 1, c.acc = v >> 2;
            bad += lean_check(&c);
        }
    }
    pipit__gemm_bf16_set_kind(0);
    ASSERT_EQ_I64(bad, 0);
    ASSERT_TRUE(several >= 2); /* the cases exercise panel reuse across both kinds of block */
}

/* ------------------------------------------------------------ GELU 16 lanes wide */

/* The bf16 GELU, SiLU and their backwards, whose bulk runs 16 lanes at a
 * time on AVX512-BF16 (kernels_avx512.c), give the scalar loop's bits: each
 * element against the same kernel called on that element alone (below 16
 * elements the scalar loop does all), over every bf16 value (NaNs,
 * infinities, subnormals, values whose exponential overflows) at an odd
 * offset, with a tail. */
PIPIT_TEST(bf16_lean_gelu_silu_wide_are_the_scalar_bits) {
    enum { N = 65536 + 21, OFF = 3 };
    pipit__bf16 *x = malloc(sizeof *x * (N + OFF)), *d = malloc(sizeof *d * (N + OFF)),
                *y = malloc(sizeof *y * (N + OFF)), *dx = malloc(sizeof *dx * (N + OFF));
    ASSERT_TRUE(x && d && y && dx);
    for (int i = 0; i < N; i++) {
        x[OFF + i].bits = (uint16_t)(i * 40503u); /* every value once (40503 is odd), then a few again */
        d[OFF + i] = lean_rand();
    }
    typedef void (*fwd_fn)(pipit__bf16 *, const pipit__bf16 *, int64_t, int, int);
    typedef void (*bwd_fn)(pipit__bf16 *, const pipit__bf16 *, const pipit__bf16 *, int64_t, int, int);
    fwd_fn fwd[2] = {pipit__gelu_bf16, pipit__silu_bf16};
    bwd_fn bwd[2] = {pipit__gelu_dx_bf16, pipit__silu_dx_bf16};
    for (int op = 0; op < 2; op++) {
        fwd[op](y + OFF, x + OFF, N, 0, 1);
        bwd[op](dx + OFF, x + OFF, d + OFF, N, 0, 1);
        int64_t bad = 0;
        for (int i = 0; i < N; i++) {
            pipit__bf16 y1, dx1;
            fwd[op](&y1, x + OFF + i, 1, 0, 1);
            bwd[op](&dx1, x + OFF + i, d + OFF + i, 1, 0, 1);
            bad += y1.bits != y[OFF + i].bits;
            bad += dx1.bits != dx[OFF + i].bits;
        }
        ASSERT_EQ_I64(bad, 0);
    }
    free(x), free(d), free(y), free(dx);
}

/* The bf16 cross-entropy's sums and its gradient's rounding, whose bulk
 * runs 16 lanes at a time on AVX512-BF16, against the order the kernels
 * state, written here: m the row's max; exp(x - m) by fast_expf, summed in
 * double in 8 lanes (element j into lane j mod 8, in order; the tail into
 * lane-sum order after); loss = m + log(sum) - x[t]; the gradient
 * exp(x - m) * (dloss / sum) rounded, the target's minus dloss. Rows of
 * lengths around the 16-lane blocks. */
PIPIT_TEST(bf16_lean_xent_wide_is_the_stated_order) {
    static const int64_t Vs[] = {5, 16, 17, 40, 1007};
    for (int k = 0; k < 5; k++) {
        int64_t V = Vs[k], rows = 3;
        pipit__bf16 *x = malloc(sizeof *x * (size_t)(rows * V)), *g = malloc(sizeof *g * (size_t)(rows * V));
        int32_t t[3] = {0, (int32_t)(V / 2), (int32_t)(V - 1)};
        float loss[3], dloss[3] = {0.25f, 1.0f / 3, 2.0f};
        ASSERT_TRUE(x && g);
        for (int64_t i = 0; i < rows * V; i++) x[i] = pipit__bf16_from_f32(2.0f * ref_widen(lean_rand().bits));
        pipit__xent_rows_bf16(loss, x, t, rows, V, 0, 1);
        pipit__xent_dlogits_bf16(g, x, t, dloss, rows, V, 0, 1);
        for (int64_t r = 0; r < rows; r++) {
            const pipit__bf16 *xr = x + r * V;
            float m = ref_widen(xr[0].bits);
            for (int64_t j = 1; j < V; j++) m = ref_widen(xr[j].bits) > m ? ref_widen(xr[j].bits) : m;
            double lane[8] = {0};
            int64_t j = 0;
            for (; j + 8 <= V; j++) lane[j % 8] += (double)fast_expf(ref_widen(xr[j].bits) - m);
            double sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
            for (; j < V; j++) sum += (double)fast_expf(ref_widen(xr[j].bits) - m);
            float want = (float)((double)m + log(sum) - (double)ref_widen(xr[t[r]].bits));
            ASSERT_TRUE(memcmp(&want, &loss[r], sizeof want) == 0);
            float f = (float)((double)dloss[r] / sum);
            int64_t bad = 0;
            for (j = 0; j < V; j++) {
                float e = fast_expf(ref_widen(xr[j].bits) - m) * f;
                if (j == t[r]) e -= dloss[r];
                bad += g[r * V + j].bits != ref_narrow(e);
            }
            ASSERT_EQ_I64(bad, 0);
        }
        free(x), free(g);
    }
    /* the lanes themselves, in double (the outputs above are rounded to
     * float, which hides most orders): exponentials over 100 binades, so
     * the lane sums round and their order shows */
    enum { N = 4096 + 16 };
    pipit__bf16 *x = malloc(sizeof *x * N);
    float *kept = malloc(sizeof *kept * N);
    ASSERT_TRUE(x && kept);
    for (int i = 0; i < N; i++) x[i] = pipit__bf16_from_f32(-70.0f * fabsf(ref_widen(lean_rand().bits)) / 4);
    double acc[8] = {1e-3, 0, 2, 0, 0, 0, 0, 5e-17}, want[8];
    memcpy(want, acc, sizeof acc);
    int64_t done = pipit__sum_exp_bf16_wide(x, N, 0.5f, kept, acc);
    ASSERT_TRUE(done == 0 || done == N); /* 0: a CPU without AVX512-BF16 */
    for (int64_t i = 0; i < done; i++) {
        float e = fast_expf(ref_widen(x[i].bits) - 0.5f);
        want[i % 8] += (double)e;
        ASSERT_TRUE(memcmp(&e, &kept[i], sizeof e) == 0);
    }
    ASSERT_TRUE(memcmp(want, acc, sizeof acc) == 0);
    free(x), free(kept);
}

/* The max's lanes and the column sums (bias gradients) 16 at a time: the
 * lanes against the stated order written here, with NaNs and signed zeros
 * (whose winner depends on the order) and sums over 60 binades (whose
 * rounding does); sum_rows_bf16 against the column sums rounded once. */
PIPIT_TEST(bf16_lean_maxv_sum_rows_wide_are_the_stated_order) {
    enum { N = 1024 + 16, ROWS = 37, C = 16 * 5 + 3 };
    pipit__bf16 *x = malloc(sizeof *x * N), *y = malloc(sizeof *y * ROWS * C), out[C];
    ASSERT_TRUE(x && y);
    for (int i = 0; i < N; i++) x[i] = lean_rand();
    for (int i = 2; i < N; i += 8) x[i].bits |= 0x8000; /* lane 2 all negative but for ... */
    x[50].bits = 0x8000, x[58].bits = 0x0000;          /* -0 then +0 in one 16-block: the first stays */
    x[40].bits = 0x7fc0, x[500].bits = 0xffc1;         /* NaNs never win */
    float acc[8], want[8];
    for (int j = 0; j < 8; j++) acc[j] = want[j] = j == 2 ? -1e30f : j == 3 ? -0.0f : 0.0f;
    int64_t done = pipit__maxv_bf16_wide(x, N, acc);
    ASSERT_TRUE(done == 0 || done == N);
    for (int64_t i = 0; i < done; i++) {
        float v = ref_widen(x[i].bits);
        want[i % 8] = v > want[i % 8] ? v : want[i % 8];
    }
    ASSERT_TRUE(memcmp(acc, want, sizeof acc) == 0);
    ASSERT_TRUE(done == 0 || signbit(acc[2])); /* -0 came first */

    for (int i = 0; i < ROWS * C; i++) y[i] = pipit__bf16_from_f32(ref_widen(lean_rand().bits) * ldexpf(1.0f, i % 60 - 30));
    double sums[C] = {0}, wsums[C] = {0};
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < C; j++) sums[j] += (double)ref_widen(y[r * C + j].bits);
    int64_t cols = pipit__sum_rows_bf16_wide(y, ROWS, C, C, wsums);
    ASSERT_TRUE(cols == 0 || cols == C / 16 * 16);
    ASSERT_TRUE(memcmp(wsums, sums, sizeof(double) * (size_t)cols) == 0);
    pipit__sum_rows_bf16(out, y, ROWS, C, 0, 1);
    int64_t bad = 0;
    for (int j = 0; j < C; j++) bad += out[j].bits != pipit__bf16_from_f64(sums[j]).bits;
    ASSERT_EQ_I64(bad, 0);
    free(x), free(y);
}
