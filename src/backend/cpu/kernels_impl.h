/*
 * kernels_impl.h — template for the non-GEMM kernels; included by kernels.c
 * once per type with T (the storage type), A (the arithmetic type), S
 * (suffix: f32/f64/bf16), LD(v) / ST(v) / STD(d) (T to A, A to T, double to
 * T, each rounding to nearest even), KERNEL_NARROW (1 when T is narrower
 * than A: bf16 stored, fp32 computed), BLAS_GEMM and the math of A defined:
 * EXP, LOG, SQRT, TANH, FABS and ROPE_FREQ (RoPE's inverse frequencies).
 * For f32 and f64, A is T and LD / ST are the identity, so those kernels
 * compute exactly what they always did. For bf16 every value is loaded into
 * fp32, every intermediate stays fp32 (nothing is rounded to bf16 on the
 * way: where the f32 kernels keep an intermediate in the output, the
 * narrow ones recompute it) and every output element is rounded once.
 * Not a header to include elsewhere. Layouts are row-major; [a,b] in
 * comments are shapes.
 */
#define KCAT_(a, b) a##_##b
#define KCAT(a, b) KCAT_(a, b)
#define FN(name) KCAT(pipit__##name, S) /* public kernel pipit__<name>_<S> */
#define LOC(name) KCAT(name, S)         /* file-local helper <name>_<S> */

/* Column chunk for double accumulators on the stack (sum_rows, layernorm_dw). */
#ifndef KERNEL_COL_CHUNK
#define KERNEL_COL_CHUNK 512
/* Keys scored at once in attention (online softmax across chunks). */
#define KERNEL_ATT_CHUNK 128
/* RoPE frequencies whose cos and sin are formed at once. */
#define KERNEL_ROPE_CHUNK 64
#endif

/* ------------------------------------------------------------ reductions */

/* sum of x[0..n) in double: 8 fixed lanes, then a fixed tree, then the tail.
 * The order depends only on n, and the lanes let the compiler vectorise. */
static double LOC(sum_d)(const T *restrict x, int64_t n) {
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += (double)LD(x[i + j]);
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += (double)LD(x[i]);
    return s;
}

/* max of x[0..n), n >= 1, in 8 lanes (max is exact: the order only
 * matters for which NaN wins). */
static A LOC(maxv)(const T *restrict x, int64_t n) {
    A acc[8];
    for (int j = 0; j < 8; j++) acc[j] = LD(x[0]);
    int64_t i = 0;
#ifdef WIDE_MAXV /* the same lanes in the same order, 16 elements a step (kernels_avx512.c) */
    i = WIDE_MAXV(x, n, acc);
#endif
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] = LD(x[i + j]) > acc[j] ? LD(x[i + j]) : acc[j];
    A m = acc[0];
    for (int j = 1; j < 8; j++) m = acc[j] > m ? acc[j] : m;
    for (; i < n; i++) m = LD(x[i]) > m ? LD(x[i]) : m;
    return m;
}

/* sum of exp(x[i] - m) over x [n] in double, in 8 fixed lanes (sum_d's
 * order), the exponentials formed in the arithmetic type; kept (when not
 * NULL) [n] receives them unrounded (a narrow row's own buffer could not
 * hold them without rounding). Where the includer gives EXP8 (EXP on 8 lanes, fp32), the 8
 * exponentials of a step are one vector: the same operations in the same
 * order as EXP lane by lane, so the same bits, at twice the width the
 * compiler found for the scalar form (which also spilled the sums). */
static double LOC(sum_exp_kept)(const T *restrict x, int64_t n, A m, A *restrict kept) {
    double acc[8] = {0};
    int64_t i = 0;
#ifdef WIDE_SUM_EXP /* the same bits, 16 at a time into the same 8 lanes, where the CPU can (kernels_avx512.c) */
    i = WIDE_SUM_EXP(x, n, m, kept, acc);
#endif
    for (; i + 8 <= n; i += 8) {
        A e[8];
#ifdef EXP8
        pipit__v8f v = EXP8(LD8(x + i) - m);
        memcpy(e, &v, sizeof v);
#else
        for (int j = 0; j < 8; j++) e[j] = EXP(LD(x[i + j]) - m);
#endif
        if (kept) memcpy(kept + i, e, sizeof e);
        for (int j = 0; j < 8; j++) acc[j] += (double)e[j];
    }
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) {
        A e = EXP(LD(x[i]) - m);
        if (kept) kept[i] = e;
        s += (double)e;
    }
    return s;
}

/* the sum alone */
static double LOC(sum_exp)(const T *restrict x, int64_t n, A m) { return LOC(sum_exp_kept)(x, n, m, NULL); }

/* ------------------------------------------------------------ elementwise */

void FN(add)(T *out, const T *a, const T *b, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) out[i] = ST(LD(a[i]) + LD(b[i]));
}

void FN(mul)(T *out, const T *a, const T *b, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) out[i] = ST(LD(a[i]) * LD(b[i]));
}

void FN(scale)(T *out, const T *a, A alpha, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) out[i] = ST(alpha * LD(a[i]));
}

/* out, x [rows, C]; bias [C]; threads split rows. */
void FN(bias_add)(T *out, const T *x, const T *bias, int64_t rows, int64_t C, int ith,
                  int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        T *o = out + r * C;
        const T *xr = x + r * C;
        for (int64_t c = 0; c < C; c++) o[c] = ST(LD(xr[c]) + LD(bias[c]));
    }
}

/* out [C] = column sums of x [rows, C], r ascending, in double; threads
 * split columns, so every column is summed in the same order for any nth. */
void FN(sum_rows)(T *out, const T *x, int64_t rows, int64_t C, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(C, ith, nth, &lo, &hi);
    double acc[KERNEL_COL_CHUNK];
    for (int64_t c0 = lo; c0 < hi; c0 += KERNEL_COL_CHUNK) {
        int64_t w = PIPIT_MIN(KERNEL_COL_CHUNK, hi - c0);
        for (int64_t j = 0; j < w; j++) acc[j] = 0;
        int64_t j0 = 0;
#ifdef WIDE_SUM_ROWS /* the same sums, 16 columns a step (kernels_avx512.c) */
        j0 = WIDE_SUM_ROWS(x + c0, rows, C, w, acc);
#endif
        for (int64_t r = 0; r < rows; r++) {
            const T *xr = x + r * C + c0;
            for (int64_t j = j0; j < w; j++) acc[j] += (double)LD(xr[j]);
        }
        for (int64_t j = 0; j < w; j++) out[c0 + j] = STD(acc[j]);
    }
}

/* out [1] = scale * sum(x [n]), sequential in double, thread 0 only; in
 * the arithmetic type (a sum of bf16 values is fp32). */
void FN(sum_all)(A *out, const T *x, int64_t n, double scale, int ith, int nth) {
    (void)nth;
    if (ith != 0) return;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)LD(x[i]);
    out[0] = (A)(s * scale);
}

/* out [n] = scalar[0] * scale */
void FN(fill)(T *out, const T *scalar, double scale, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    T v = STD((double)LD(scalar[0]) * scale);
    for (int64_t i = lo; i < hi; i++) out[i] = v;
}

void FN(copy)(T *out, const T *x, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    if (hi > lo && out != x) memcpy(out + lo, x + lo, (size_t)(hi - lo) * sizeof(T));
}

/* out = permute(x): x [dims[0..nd)], out axis i is x axis perm[i]. Threads
 * split the rows of out's last axis. */
void FN(permute)(T *out, const T *x, int nd, const int64_t *dims, const int *perm, int ith,
                 int nth) {
    PIPIT_ASSERT(nd >= 1 && nd <= 4);
    int64_t xstride[4], od[4] = {1, 1, 1, 1}, os[4] = {0, 0, 0, 0};
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; i--) {
        xstride[i] = st;
        st *= dims[i];
    }
    /* out dims and the x strides that walk them, right-aligned in 4 slots */
    for (int i = 0; i < nd; i++) {
        od[4 - nd + i] = dims[perm[i]];
        os[4 - nd + i] = xstride[perm[i]];
    }
    int64_t rows = od[0] * od[1] * od[2], lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t i2 = r % od[2], i1 = r / od[2] % od[1], i0 = r / od[2] / od[1];
        const T *src = x + i0 * os[0] + i1 * os[1] + i2 * os[2];
        T *dst = out + r * od[3];
        int64_t s3 = os[3];
        if (s3 == 1)
            memcpy(dst, src, (size_t)od[3] * sizeof(T));
        else
            for (int64_t i = 0; i < od[3]; i++) dst[i] = src[i * s3];
    }
}

/* ------------------------------------------------- more elementwise ops */

void FN(sub)(T *out, const T *a, const T *b, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) out[i] = ST(LD(a[i]) - LD(b[i]));
}

void FN(div)(T *out, const T *a, const T *b, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) out[i] = ST(LD(a[i]) / LD(b[i]));
}

/* y = f(v) for v = x[i]; one loop each, branch-free where the compiler can
 * make it so (selects), with the type's EXP / LOG / SQRT / TANH. */
#define UNARY(name, expr)                                                  \
    void FN(name)(T *out, const T *x, int64_t n, int ith, int nth) {       \
        int64_t lo, hi;                                                    \
        pipit__range(n, ith, nth, &lo, &hi);                               \
        for (int64_t i = lo; i < hi; i++) {                                \
            A v = LD(x[i]);                                                \
            out[i] = ST(expr);                                             \
        }                                                                  \
    }
UNARY(neg, -v)
UNARY(exp, EXP(v))
UNARY(log, LOG(v))
UNARY(sqrt, SQRT(v))
UNARY(rsqrt, (A)1 / SQRT(v))
UNARY(abs, FABS(v))
UNARY(relu, v < 0 ? (A)0 : v) /* NaN stays NaN */
UNARY(sigmoid, (A)1 / ((A)1 + EXP(-v)))
UNARY(tanh, TANH(v))
#undef UNARY

/* dx = d * f'(.) with v = x[i] or y[i] (as declared) and g = d[i]. */
#define UNARY_DX(name, expr)                                                         \
    void FN(name)(T *dx, const T *t, const T *d, int64_t n, int ith, int nth) {      \
        int64_t lo, hi;                                                              \
        pipit__range(n, ith, nth, &lo, &hi);                                         \
        for (int64_t i = lo; i < hi; i++) {                                          \
            A v = LD(t[i]), g = LD(d[i]);                                            \
            dx[i] = ST(expr);                                                        \
        }                                                                            \
    }
UNARY_DX(sqrt_dx, g / ((A)2 * v))              /* y = sqrt x: 1/(2y) */
UNARY_DX(rsqrt_dx, (A)-0.5 * g * (v * v * v))  /* y = x^-1/2: -y^3/2 */
UNARY_DX(abs_dx, v > 0 ? g : v < 0 ? -g : (A)0)
UNARY_DX(relu_dx, v > 0 ? g : (A)0)
UNARY_DX(sigmoid_dx, g * (v * ((A)1 - v)))
UNARY_DX(tanh_dx, g * ((A)1 - v * v))
#undef UNARY_DX

void FN(silu)(T *out, const T *x, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
#ifdef WIDE_SILU /* the same bits, 16 lanes at a time where the CPU can (kernels_avx512.c) */
    lo += WIDE_SILU(out + lo, x + lo, hi - lo);
#endif
    for (int64_t i = lo; i < hi; i++) {
        A v = LD(x[i]);
        out[i] = ST(v / ((A)1 + EXP(-v)));
    }
}

/* silu' = s (1 + x (1 - s)), s = sigmoid(x) */
void FN(silu_dx)(T *dx, const T *x, const T *d, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
#ifdef WIDE_SILU
    lo += WIDE_SILU_DX(dx + lo, x + lo, d + lo, hi - lo);
#endif
    for (int64_t i = lo; i < hi; i++) {
        A v = LD(x[i]), sg = (A)1 / ((A)1 + EXP(-v));
        dx[i] = ST(LD(d[i]) * (sg * ((A)1 + v * ((A)1 - sg))));
    }
}

/* ------------------------------------------------------------ broadcasting */

/* Start of row r (an index over dims[0..3)) of an operand with strides st. */
static inline int64_t LOC(row_at)(const int64_t *dims, const int64_t *st, int64_t r) {
    int64_t i2 = r % dims[2], i1 = r / dims[2] % dims[1], i0 = r / dims[2] / dims[1];
    return i0 * st[0] + i1 * st[1] + i2 * st[2];
}

/* out [dims] = a OP b with a, b walked by their strides. Threads split the
 * flat output; each run of the last axis is one loop whose operands step by
 * 1 or stay (stride 0), so it vectorises. */
#define BINARY_BCAST(name, OP)                                                                  \
    void FN(name)(T *out, const T *a, const T *b, const int64_t *dims, const int64_t *sa,       \
                  const int64_t *sb, int ith, int nth) {                                        \
        int64_t W = dims[3], lo, hi;                                                            \
        pipit__range(dims[0] * dims[1] * dims[2] * W, ith, nth, &lo, &hi);                      \
        for (int64_t i = lo; i < hi;) {                                                         \
            int64_t r = i / W, c = i % W, len = PIPIT_MIN(W - c, hi - i);                        \
            const T *pa = a + LOC(row_at)(dims, sa, r) + c * sa[3];                             \
            const T *pb = b + LOC(row_at)(dims, sb, r) + c * sb[3];                             \
            T *o = out + i;                                                                     \
            if (sa[3] && sb[3])                                                                 \
                for (int64_t j = 0; j < len; j++) o[j] = ST(LD(pa[j]) OP LD(pb[j]));            \
            else if (sa[3])                                                                     \
                for (int64_t j = 0; j < len; j++) o[j] = ST(LD(pa[j]) OP LD(pb[0]));            \
            else if (sb[3])                                                                     \
                for (int64_t j = 0; j < len; j++) o[j] = ST(LD(pa[0]) OP LD(pb[j]));            \
            else                                                                                \
                for (int64_t j = 0; j < len; j++) o[j] = ST(LD(pa[0]) OP LD(pb[0]));            \
            i += len;                                                                           \
        }                                                                                       \
    }
BINARY_BCAST(add_bcast, +)
BINARY_BCAST(sub_bcast, -)
BINARY_BCAST(mul_bcast, *)
BINARY_BCAST(div_bcast, /)
#undef BINARY_BCAST

void FN(broadcast)(T *out, const T *x, const int64_t *dims, const int64_t *sx, int ith, int nth) {
    int64_t W = dims[3], lo, hi;
    pipit__range(dims[0] * dims[1] * dims[2] * W, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi;) {
        int64_t r = i / W, c = i % W, len = PIPIT_MIN(W - c, hi - i);
        const T *px = x + LOC(row_at)(dims, sx, r) + c * sx[3];
        if (sx[3])
            memcpy(out + i, px, (size_t)len * sizeof(T));
        else
            for (int64_t j = 0; j < len; j++) out[i + j] = px[0];
        i += len;
    }
}

/* out = scale * (x summed over the axes where so is 0). x is contiguous
 * over dims[0..4); out holds the kept axes in order. Threads split the
 * output; every element sums the x rows (over axes 0..2) it covers in
 * ascending order, in double. With the last axis kept, a chunk of up to
 * KERNEL_COL_CHUNK columns adds whole rows at once (vectorised); with it
 * summed, each row is one 8-lane sum. The order depends only on the shape. */
void FN(sum_to)(T *out, const T *x, const int64_t *dims, const int64_t *so, double scale, int ith, int nth) {
    int64_t od[4], xs[4], n = 1, lo, hi;
    for (int i = 3; i >= 0; i--) {
        od[i] = so[i] ? dims[i] : 1;
        n *= od[i];
    }
    xs[3] = 1;
    for (int i = 2; i >= 0; i--) xs[i] = xs[i + 1] * dims[i + 1];
    int keep_last = so[3] != 0;
    int64_t W = keep_last ? dims[3] : 1; /* output columns per output row */
    double acc[KERNEL_COL_CHUNK];
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi;) {
        int64_t r = i / W, c = i % W, w = PIPIT_MIN(PIPIT_MIN(W - c, hi - i), KERNEL_COL_CHUNK);
        int64_t k[3] = {r / od[2] / od[1], r / od[2] % od[1], r % od[2]}, b[3], e[3];
        for (int a = 0; a < 3; a++) {
            b[a] = so[a] ? k[a] : 0;
            e[a] = so[a] ? k[a] + 1 : dims[a];
        }
        for (int64_t j = 0; j < w; j++) acc[j] = 0;
        for (int64_t i0 = b[0]; i0 < e[0]; i0++)
            for (int64_t i1 = b[1]; i1 < e[1]; i1++)
                for (int64_t i2 = b[2]; i2 < e[2]; i2++) {
                    const T *row = x + i0 * xs[0] + i1 * xs[1] + i2 * xs[2];
                    if (keep_last)
                        for (int64_t j = 0; j < w; j++) acc[j] += (double)LD(row[c + j]);
                    else
                        acc[0] += LOC(sum_d)(row, dims[3]);
                }
        for (int64_t j = 0; j < w; j++) out[i + j] = STD(acc[j] * scale);
        i += w;
    }
}

/* ------------------------------------------------- axis max, softmax */

/* out [outer, inner] = max over n of x [outer, n, inner] (the first
 * maximal value; exact, so the order only matters for NaN). Threads split
 * the output; each run along inner is one vectorisable loop per j. */
void FN(max_axis)(T *out, const T *x, int64_t outer, int64_t n, int64_t inner, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(outer * inner, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi;) {
        int64_t o = i / inner, c = i % inner, len = PIPIT_MIN(inner - c, hi - i);
        const T *base = x + o * n * inner + c;
        T *m = out + i;
        memcpy(m, base, (size_t)len * sizeof(T));
        for (int64_t j = 1; j < n; j++)
            for (int64_t t = 0; t < len; t++)
                m[t] = LD(base[j * inner + t]) > LD(m[t]) ? base[j * inner + t] : m[t];
        i += len;
    }
}

/* dx [outer, n, inner]: d [outer, inner] at the first maximal element of
 * each run along n, zero elsewhere. Threads split (outer, inner) runs; a
 * run's column belongs to one thread. */
void FN(max_dx)(T *dx, const T *x, const T *d, int64_t outer, int64_t n, int64_t inner, int ith, int nth) {
    int64_t lo, hi, arg[KERNEL_COL_CHUNK];
    A m[KERNEL_COL_CHUNK];
    pipit__range(outer * inner, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi;) {
        int64_t o = i / inner, c = i % inner, len = PIPIT_MIN(PIPIT_MIN(inner - c, hi - i), KERNEL_COL_CHUNK);
        const T *base = x + o * n * inner + c;
        T *dbase = dx + o * n * inner + c;
        for (int64_t t = 0; t < len; t++) m[t] = LD(base[t]), arg[t] = 0;
        for (int64_t j = 1; j < n; j++)
            for (int64_t t = 0; t < len; t++)
                if (LD(base[j * inner + t]) > m[t]) m[t] = LD(base[j * inner + t]), arg[t] = j;
        for (int64_t j = 0; j < n; j++) memset(dbase + j * inner, 0, (size_t)len * sizeof(T));
        for (int64_t t = 0; t < len; t++) dbase[arg[t] * inner + t] = d[i + t];
        i += len;
    }
}

#if KERNEL_NARROW

/* y [rows, C] = softmax of each row of x: exp(x - max) / sum, the sum in
 * double over unrounded exponentials, each output rounded once. */
void FN(softmax)(T *y, const T *x, int64_t rows, int64_t C, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = x + r * C;
        T *yr = y + r * C;
        A m = LOC(maxv)(xr, C);
        A inv = (A)(1.0 / LOC(sum_exp)(xr, C, m));
        for (int64_t j = 0; j < C; j++) yr[j] = ST(EXP(LD(xr[j]) - m) * inv);
    }
}
#else
/* y [C] = exp(x - max(x)); returns sum(y) and the max. The sum is formed
 * in the same pass, in double, in sum_d's 8 lanes and order. */
static double LOC(exp_shifted)(T *restrict y, const T *restrict x, int64_t C, T *max) {
    T m = LOC(maxv)(x, C);
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= C; i += 8)
        for (int j = 0; j < 8; j++) {
            y[i + j] = EXP(x[i + j] - m);
            acc[j] += (double)y[i + j];
        }
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < C; i++) {
        y[i] = EXP(x[i] - m);
        s += (double)y[i];
    }
    *max = m;
    return s;
}

/* y [rows, C] = softmax of each row of x: exp(x - max) / sum, the sum in
 * double; threads split rows. */
void FN(softmax)(T *y, const T *x, int64_t rows, int64_t C, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        T *yr = y + r * C, m;
        T inv = (T)(1.0 / LOC(exp_shifted)(yr, x + r * C, C, &m));
        for (int64_t j = 0; j < C; j++) yr[j] *= inv;
    }
}
#endif

/* sum of a[j] * b[j] over a row, in double, 8 fixed lanes */
static double LOC(dot_d)(const T *restrict a, const T *restrict b, int64_t n) {
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += (double)LD(a[i + j]) * (double)LD(b[i + j]);
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += (double)LD(a[i]) * (double)LD(b[i]);
    return s;
}

/* dx = y * (d - sum(d * y)) per row */
void FN(softmax_dx)(T *dx, const T *y, const T *d, int64_t rows, int64_t C, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *yr = y + r * C, *dr = d + r * C;
        A s = (A)LOC(dot_d)(yr, dr, C);
        T *o = dx + r * C;
        for (int64_t j = 0; j < C; j++) o[j] = ST(LD(yr[j]) * (LD(dr[j]) - s));
    }
}

/* y = x - (max + log(sum exp(x - max))) per row, the sum in double */
void FN(log_softmax)(T *y, const T *x, int64_t rows, int64_t C, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = x + r * C;
        T *yr = y + r * C;
#if KERNEL_NARROW
        A m = LOC(maxv)(xr, C);
        double sum = LOC(sum_exp)(xr, C, m);
#else
        T m;
        double sum = LOC(exp_shifted)(yr, xr, C, &m);
#endif
        A lse = (A)((double)m + log(sum));
        for (int64_t j = 0; j < C; j++) yr[j] = ST(LD(xr[j]) - lse);
    }
}

/* dx = d - exp(y) * sum(d) per row */
void FN(log_softmax_dx)(T *dx, const T *y, const T *d, int64_t rows, int64_t C, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *yr = y + r * C, *dr = d + r * C;
        A s = (A)LOC(sum_d)(dr, C);
        T *o = dx + r * C;
        for (int64_t j = 0; j < C; j++) o[j] = ST(LD(dr[j]) - EXP(LD(yr[j])) * s);
    }
}

/* ------------------------------------------------- slices and concat */

/* out [rows, ow] columns [oc, oc+w) = x [rows, xw] columns [xc, xc+w).
 * Threads split the rows * w elements copied. */
void FN(copy_cols)(T *out, int64_t ow, int64_t oc, const T *x, int64_t xw, int64_t xc, int64_t rows, int64_t w,
                   int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows * w, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi;) {
        int64_t r = i / w, c = i % w, len = PIPIT_MIN(w - c, hi - i);
        memcpy(out + r * ow + oc + c, x + r * xw + xc + c, (size_t)len * sizeof(T));
        i += len;
    }
}

/* out [rows, ow]: x [rows, w] at columns [oc, oc+w), zeros elsewhere.
 * Threads split the rows * ow elements written. */
void FN(pad_cols)(T *out, int64_t ow, int64_t oc, const T *x, int64_t rows, int64_t w, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows * ow, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi;) {
        int64_t r = i / ow, c = i % ow, end = PIPIT_MIN(ow, c + hi - i);
        T *o = out + r * ow;
        int64_t a = PIPIT_MIN(PIPIT_MAX(c, oc), end), b = PIPIT_MAX(PIPIT_MIN(end, oc + w), a);
        if (a > c) memset(o + c, 0, (size_t)(a - c) * sizeof(T));
        if (b > a) memcpy(o + a, x + r * w + (a - oc), (size_t)(b - a) * sizeof(T));
        if (end > b) memset(o + b, 0, (size_t)(end - b) * sizeof(T));
        i += end - c;
    }
}

/* ------------------------------------------------------------ layernorm */

/* Mean and 1/sqrt(var + eps) of one row x [C], accumulated in double with a
 * fixed order, rounded to A (all three layernorm kernels share this). */
static void LOC(ln_stats)(const T *restrict x, int64_t C, double eps, A *mean, A *rstd) {
    double m = LOC(sum_d)(x, C) / (double)C;
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= C; i += 8)
        for (int j = 0; j < 8; j++) {
            double d = (double)LD(x[i + j]) - m;
            acc[j] += d * d;
        }
    double v = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < C; i++) v += ((double)LD(x[i]) - m) * ((double)LD(x[i]) - m);
    *mean = (A)m;
    *rstd = (A)(1.0 / sqrt(v / (double)C + eps));
}

/* out, x [rows, C]; w, b [C]; threads split rows. */
void FN(layernorm)(T *out, const T *x, const T *w, const T *b, int64_t rows, int64_t C,
                   double eps, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = x + r * C;
        T *o = out + r * C;
        A m, rs;
        LOC(ln_stats)(xr, C, eps, &m, &rs);
        for (int64_t c = 0; c < C; c++) o[c] = ST((LD(xr[c]) - m) * rs * LD(w[c]) + LD(b[c]));
    }
}

/* dx, x, dout [rows, C]; w [C]. With g = dout*w and xhat = (x-mean)*rstd:
 * dx = rstd * (g - mean(g) - xhat * mean(g*xhat)). Threads split rows. */
void FN(layernorm_dx)(T *dx, const T *x, const T *w, const T *dout, int64_t rows, int64_t C,
                      double eps, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = x + r * C, *dr = dout + r * C;
        T *o = dx + r * C;
        A m, rs;
        LOC(ln_stats)(xr, C, eps, &m, &rs);
        double a1[8] = {0}, a2[8] = {0};
        int64_t c = 0;
        for (; c + 8 <= C; c += 8)
            for (int j = 0; j < 8; j++) {
                A xh = (LD(xr[c + j]) - m) * rs, g = LD(dr[c + j]) * LD(w[c + j]);
                a1[j] += (double)g;
                a2[j] += (double)g * (double)xh;
            }
        double sg = ((a1[0] + a1[1]) + (a1[2] + a1[3])) + ((a1[4] + a1[5]) + (a1[6] + a1[7]));
        double sgx = ((a2[0] + a2[1]) + (a2[2] + a2[3])) + ((a2[4] + a2[5]) + (a2[6] + a2[7]));
        for (; c < C; c++) {
            A xh = (LD(xr[c]) - m) * rs, g = LD(dr[c]) * LD(w[c]);
            sg += (double)g;
            sgx += (double)g * (double)xh;
        }
        A mg = (A)(sg / (double)C), mgx = (A)(sgx / (double)C);
        for (c = 0; c < C; c++) {
            A xh = (LD(xr[c]) - m) * rs, g = LD(dr[c]) * LD(w[c]);
            o[c] = ST(rs * (g - mg - xh * mgx));
        }
    }
}

/* dw [C] = sum_r dout[r,c] * xhat[r,c] (r ascending, double); x, dout
 * [rows, C]. Threads split columns; each recomputes the row statistics. */
void FN(layernorm_dw)(T *dw, const T *x, const T *dout, int64_t rows, int64_t C, double eps,
                      int ith, int nth) {
    int64_t lo, hi;
    pipit__range(C, ith, nth, &lo, &hi);
    double acc[KERNEL_COL_CHUNK];
    for (int64_t c0 = lo; c0 < hi; c0 += KERNEL_COL_CHUNK) {
        int64_t w = PIPIT_MIN(KERNEL_COL_CHUNK, hi - c0);
        for (int64_t j = 0; j < w; j++) acc[j] = 0;
        for (int64_t r = 0; r < rows; r++) {
            const T *xr = x + r * C, *dr = dout + r * C + c0;
            A m, rs;
            LOC(ln_stats)(xr, C, eps, &m, &rs);
            xr += c0;
            for (int64_t j = 0; j < w; j++) acc[j] += (double)(LD(dr[j]) * ((LD(xr[j]) - m) * rs));
        }
        for (int64_t j = 0; j < w; j++) dw[c0 + j] = STD(acc[j]);
    }
}

/* ------------------------------------------------------------ GELU */

/* With u = sqrt(2/pi)(x + 0.044715x^3), GPT-2's 0.5x(1 + tanh(u)) equals
 * x * sigmoid(2u) = x / (1 + exp(-2u)): one exp, which vectorises. */
#define GELU_S2PI ((A)0.79788456080286535588) /* sqrt(2/pi) */
#define GELU_K ((A)0.044715)

void FN(gelu)(T *out, const T *x, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
#ifdef WIDE_GELU /* the same bits, 16 lanes at a time where the CPU can (kernels_avx512.c) */
    lo += WIDE_GELU(out + lo, x + lo, hi - lo);
#endif
    for (int64_t i = lo; i < hi; i++) {
        A v = LD(x[i]);
        A u = GELU_S2PI * (v + GELU_K * v * v * v);
        out[i] = ST(v / ((A)1 + EXP((A)-2 * u)));
    }
}

/* dx = dout * gelu'(x); with sg = sigmoid(2u) = (1 + tanh u)/2:
 * gelu' = sg + 2x sg(1 - sg) du/dx. */
void FN(gelu_dx)(T *dx, const T *x, const T *dout, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
#ifdef WIDE_GELU
    lo += WIDE_GELU_DX(dx + lo, x + lo, dout + lo, hi - lo);
#endif
    for (int64_t i = lo; i < hi; i++) {
        A v = LD(x[i]);
        A sg = (A)1 / ((A)1 + EXP((A)-2 * GELU_S2PI * (v + GELU_K * v * v * v)));
        A du = GELU_S2PI * ((A)1 + (A)3 * GELU_K * v * v);
        A d = sg + (A)2 * v * sg * ((A)1 - sg) * du;
        dx[i] = ST(d * LD(dout[i]));
    }
}
#undef GELU_S2PI
#undef GELU_K

/* ------------------------------------------------------------ RMSNorm */

/* 1/sqrt(mean(x^2) + eps) of one row x [C]: the squares summed in double
 * in 8 fixed lanes, the root in double, rounded once to A. */
static A LOC(rms_rstd)(const T *restrict x, int64_t C, double eps) {
    return (A)(1.0 / sqrt(LOC(dot_d)(x, x, C) / (double)C + eps));
}

/* out, x [rows, C]; w [C]: out = w * (x * r) (Hugging Face's order); threads split rows. */
void FN(rmsnorm)(T *out, const T *x, const T *w, int64_t rows, int64_t C, double eps, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = x + r * C;
        T *o = out + r * C;
        A rs = LOC(rms_rstd)(xr, C, eps);
        for (int64_t c = 0; c < C; c++) o[c] = ST(LD(w[c]) * (LD(xr[c]) * rs));
    }
}

/* dx = r (g - x * r^2 mean(g x)), g = dout * w; threads split rows. */
void FN(rmsnorm_dx)(T *dx, const T *x, const T *w, const T *dout, int64_t rows, int64_t C, double eps, int ith,
                    int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = x + r * C, *dr = dout + r * C;
        T *o = dx + r * C;
        /* one pass for both sums: x.x (as rms_rstd forms it) and g.x */
        double a[8] = {0}, q[8] = {0};
        int64_t c = 0;
        for (; c + 8 <= C; c += 8)
            for (int j = 0; j < 8; j++) {
                q[j] += (double)LD(xr[c + j]) * (double)LD(xr[c + j]);
                a[j] += (double)(LD(dr[c + j]) * LD(w[c + j])) * (double)LD(xr[c + j]);
            }
        double sgx = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        double ss = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
        for (; c < C; c++) {
            ss += (double)LD(xr[c]) * (double)LD(xr[c]);
            sgx += (double)(LD(dr[c]) * LD(w[c])) * (double)LD(xr[c]);
        }
        A rs = (A)(1.0 / sqrt(ss / (double)C + eps));
        A k = (A)((double)rs * (double)rs * sgx / (double)C);
        for (c = 0; c < C; c++) o[c] = ST(rs * (LD(dr[c]) * LD(w[c]) - LD(xr[c]) * k));
    }
}

/* dw [C] = sum_r dout[r,c] * (x[r,c] * r_r), r ascending, in double. Threads
 * split columns. The row factors are computed once per thread into a
 * scratch (each thread needs all of them); without one, once per chunk. */
void FN(rmsnorm_dw)(T *dw, const T *x, const T *dout, int64_t rows, int64_t C, double eps, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(C, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    A *rstd = malloc(sizeof(A) * (size_t)PIPIT_MAX(rows, 1));
    for (int64_t r = 0; rstd && r < rows; r++) rstd[r] = LOC(rms_rstd)(x + r * C, C, eps);
    double acc[KERNEL_COL_CHUNK];
    for (int64_t c0 = lo; c0 < hi; c0 += KERNEL_COL_CHUNK) {
        int64_t w = PIPIT_MIN(KERNEL_COL_CHUNK, hi - c0);
        for (int64_t j = 0; j < w; j++) acc[j] = 0;
        for (int64_t r = 0; r < rows; r++) {
            const T *xr = x + r * C + c0, *dr = dout + r * C + c0;
            A rs = rstd ? rstd[r] : LOC(rms_rstd)(x + r * C, C, eps);
            for (int64_t j = 0; j < w; j++) acc[j] += (double)(LD(dr[j]) * (LD(xr[j]) * rs));
        }
        for (int64_t j = 0; j < w; j++) dw[c0 + j] = STD(acc[j]);
    }
    free(rstd);
}

/* ------------------------------------------------------------ RoPE */

/* out, x [B,T,H*D]: for each head, with i < D/2, a = (pos0 + t) * f_i,
 * f_i = theta^(-2i/D), llama3-scaled if rf says so (ROPE_FREQ,
 * backend/rope_freq.h: as transformers forms it in the type; in fp32 for
 * bf16):
 *   out[i]       = x[i] cos a - x[i + D/2] sin a
 *   out[i + D/2] = x[i + D/2] cos a + x[i] sin a
 * (sin negated when inverse). Threads split positions t; cos and sin are
 * formed for KERNEL_ROPE_CHUNK frequencies at a time and applied to every
 * batch row and head of that position. */
void FN(rope)(T *out, const T *x, int64_t B, int64_t Tn, int64_t H, int64_t D, int64_t pos0, pipit__rope_freqs rf,
              int inverse, int ith, int nth) {
    int64_t half = D / 2, C = H * D, lo, hi;
    A f[KERNEL_ROPE_CHUNK], cs[KERNEL_ROPE_CHUNK], sn[KERNEL_ROPE_CHUNK];
    pipit__range(Tn, ith, nth, &lo, &hi);
    for (int64_t i0 = 0; i0 < half && lo < hi; i0 += KERNEL_ROPE_CHUNK) {
        int64_t w = PIPIT_MIN(KERNEL_ROPE_CHUNK, half - i0);
        for (int64_t i = 0; i < w; i++) f[i] = ROPE_FREQ(i0 + i, D, rf);
        for (int64_t t = lo; t < hi; t++) {
            A pos = (A)(pos0 + t);
            for (int64_t i = 0; i < w; i++) {
                double c, sd;
                sincos((double)(pos * f[i]), &sd, &c); /* of the angle in A, rounded to A */
                cs[i] = (A)c;
                sn[i] = inverse ? -(A)sd : (A)sd;
            }
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < H; h++) {
                    const T *x1 = x + (b * Tn + t) * C + h * D + i0, *x2 = x1 + half;
                    T *o1 = out + (b * Tn + t) * C + h * D + i0, *o2 = o1 + half;
                    for (int64_t i = 0; i < w; i++) {
                        A u = LD(x1[i]), v = LD(x2[i]);
                        o1[i] = ST(u * cs[i] - v * sn[i]);
                        o2[i] = ST(v * cs[i] + u * sn[i]);
                    }
                }
        }
    }
}

/* ------------------------------------------------------------ embedding */

/* out [n, C] = rows idx[n] of table [V, C]; threads split n. */
void FN(embed)(T *out, const T *table, const int32_t *idx, int64_t n, int64_t C, int ith,
               int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        memcpy(out + i * C, table + (int64_t)idx[i] * C, (size_t)C * sizeof(T));
}

#if KERNEL_NARROW
/* dtable [V, C] = sum over i (ascending) of dout[i,:] into row idx[i] - off
 * (indices outside [off, off + V) are another shard's: skipped), each row
 * summed in fp32 and rounded once. Threads split the V rows; each sorts the
 * positions of its own rows by row (a counting sort, stable: ascending
 * positions per row), then sums a row's positions in order,
 * KERNEL_COL_CHUNK columns at a time. Without memory for the sort a row's
 * positions are found by scanning idx for each row (slow, same bits). */
static void LOC(embed_dtable_off)(T *dtable, const int32_t *idx, const T *dout, int64_t n, int64_t V, int64_t C,
                                  int64_t off, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(V, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    int64_t *first = malloc(sizeof *first * (size_t)(hi - lo + 1)), *pos = malloc(sizeof *pos * (size_t)PIPIT_MAX(n, 1));
    if (first && pos) {
        memset(first, 0, sizeof *first * (size_t)(hi - lo + 1));
        for (int64_t i = 0; i < n; i++) {
            int64_t v = (int64_t)idx[i] - off;
            if (v >= lo && v < hi) first[v - lo + 1]++;
        }
        for (int64_t v = lo; v < hi; v++) first[v - lo + 1] += first[v - lo];
        for (int64_t i = 0; i < n; i++) {
            int64_t v = (int64_t)idx[i] - off;
            if (v >= lo && v < hi) pos[first[v - lo]++] = i; /* first[v] ends at v+1's start */
        }
        for (int64_t v = hi - 1; v > lo; v--) first[v - lo] = first[v - lo - 1];
        first[0] = 0;
    }
    A acc[KERNEL_COL_CHUNK];
    for (int64_t v = lo; v < hi; v++) {
        T *row = dtable + v * C;
        for (int64_t c0 = 0; c0 < C; c0 += KERNEL_COL_CHUNK) {
            int64_t w = PIPIT_MIN(KERNEL_COL_CHUNK, C - c0);
            for (int64_t j = 0; j < w; j++) acc[j] = 0;
            if (first && pos) {
                for (int64_t k = first[v - lo]; k < first[v - lo + 1]; k++) {
                    const T *d = dout + pos[k] * C + c0;
                    for (int64_t j = 0; j < w; j++) acc[j] += LD(d[j]);
                }
            } else {
                for (int64_t i = 0; i < n; i++) {
                    if ((int64_t)idx[i] - off != v) continue;
                    const T *d = dout + i * C + c0;
                    for (int64_t j = 0; j < w; j++) acc[j] += LD(d[j]);
                }
            }
            for (int64_t j = 0; j < w; j++) row[c0 + j] = ST(acc[j]);
        }
    }
    free(first);
    free(pos);
}
#else
/* dtable [V, C] = sum over i (ascending) of dout[i,:] into row idx[i] - off
 * (indices outside [off, off + V) are another shard's: skipped). Threads
 * split the V rows; each scans all of idx and takes its own rows. */
static void LOC(embed_dtable_off)(T *dtable, const int32_t *idx, const T *dout, int64_t n, int64_t V, int64_t C,
                                  int64_t off, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(V, ith, nth, &lo, &hi);
    if (hi > lo) pipit__zero_large(dtable + lo * C, (size_t)((hi - lo) * C) * sizeof(T)); /* 154 MB at GPT-2 */
    for (int64_t i = 0; i < n; i++) {
        int64_t v = (int64_t)idx[i] - off;
        if (v < lo || v >= hi) continue;
        T *row = dtable + v * C;
        const T *d = dout + i * C;
        for (int64_t c = 0; c < C; c++) row[c] += d[c];
    }
}
#endif

void FN(embed_dtable)(T *dtable, const int32_t *idx, const T *dout, int64_t n, int64_t V,
                      int64_t C, int ith, int nth) {
    LOC(embed_dtable_off)(dtable, idx, dout, n, V, C, 0, ith, nth);
}

/* --------------------------------------------- vocab parallel (one shard) */

/* The shard of rows [off, off + V) of a table split over ranks: out [n, C]
 * = row idx[i] - off, or zeros for another shard's index. */
void FN(embed_vp)(T *out, const T *table, const int32_t *idx, int64_t n, int64_t C, int64_t off, int64_t V, int ith,
                  int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int64_t v = (int64_t)idx[i] - off;
        if (v >= 0 && v < V) memcpy(out + i * C, table + v * C, (size_t)C * sizeof(T));
        else memset(out + i * C, 0, (size_t)C * sizeof(T));
    }
}

void FN(embed_dtable_vp)(T *dtable, const int32_t *idx, const T *dout, int64_t n, int64_t V, int64_t C, int64_t off,
                         int ith, int nth) {
    LOC(embed_dtable_off)(dtable, idx, dout, n, V, C, off, ith, nth);
}

/* out[r] = z[r, y[r] - off] for the classes [off, off + V) of this shard,
 * 0 for another shard's target; threads split the rows. */
void FN(tp_pick)(T *out, const T *z, const int32_t *y, int64_t rows, int64_t V, int64_t off, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t v = (int64_t)y[r] - off;
        out[r] = v >= 0 && v < V ? z[r * V + v] : ST((A)0);
    }
}

/* dz [rows, V] = d[r] at class y[r] - off of this shard, 0 elsewhere. */
void FN(tp_pick_dx)(T *dz, const int32_t *y, const T *d, int64_t rows, int64_t V, int64_t off, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        int64_t v = (int64_t)y[r] - off;
        memset(dz + r * V, 0, (size_t)V * sizeof(T));
        if (v >= 0 && v < V) dz[r * V + v] = d[r];
    }
}

/* ------------------------------------------------------------ attention */

#if !KERNEL_NARROW /* bf16 attention runs these kernels on fp32 panels (kernels_bf16.c) */

/* dot(a[n], b[n]) in T, same fixed 8-lane order. */
static T LOC(dot)(const T *restrict a, const T *restrict b, int64_t n) {
    T acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    T s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* x[n] = exp(x[n] - m) */
static void LOC(exp_shift)(T *restrict x, T m, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = EXP(x[i] - m);
}

/* y[n] += a * x[n] */
static void LOC(axpy)(T *restrict y, T a, const T *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* One kernel family serves every layout (pipit__attn_dims): GPT-2's packed
 * qkv and separate q, k, v with grouped-query heads. Query t attends to
 * keys [0, t] (causal) or [0, S). */
static int64_t LOC(att_keys)(const pipit__attn_dims *a, int64_t t) {
    return a->causal ? t + 1 + (a->Tk - a->Tq) : a->Tk;
}

/* q, k, v [B,*,*] heads of D; out [B,T,Hq*D] (row stride ldo). Threads split
 * the (b,h) pairs. Per query, keys are scored KERNEL_ATT_CHUNK at a time
 * with an online softmax (running max m, running sum l), so no scratch
 * beyond the stack is needed; the order is fixed by the shapes. */
void FN(attn_fwd_stream)(T *out, const T *q, const T *k, const T *v, const pipit__attn_dims *a, int ith,
                         int nth) {
    int64_t D = a->D, rep = a->Hq / a->Hkv, lo, hi;
    T scale = (T)a->scale;
    T s[KERNEL_ATT_CHUNK];
    pipit__range(a->B * a->Hq, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / a->Hq, h = bh % a->Hq, g = h / rep;
        const T *qb = q + b * a->Tq * a->ldq + h * D;
        const T *kb = k + b * a->Tk * a->ldk + g * D, *vb = v + b * a->Tk * a->ldv + g * D;
        for (int64_t t = 0; t < a->Tq; t++) {
            const T *qt = qb + t * a->ldq;
            T *o = out + (b * a->Tq + t) * a->ldo + h * D; /* [D], accumulates p @ v */
            for (int64_t d = 0; d < D; d++) o[d] = 0;
            T m = -(T)INFINITY, l = 0;
            int64_t nk = LOC(att_keys)(a, t);
            for (int64_t j0 = 0; j0 < nk; j0 += KERNEL_ATT_CHUNK) {
                int64_t n = PIPIT_MIN(KERNEL_ATT_CHUNK, nk - j0);
                for (int64_t j = 0; j < n; j++) s[j] = LOC(dot)(qt, kb + (j0 + j) * a->ldk, D) * scale;
                T cm = LOC(maxv)(s, n);
                if (cm > m) { /* rescale what was accumulated under the old max */
                    T f = EXP(m - cm);
                    for (int64_t d = 0; d < D; d++) o[d] *= f;
                    l *= f;
                    m = cm;
                }
                LOC(exp_shift)(s, m, n);
                for (int64_t j = 0; j < n; j++) {
                    l += s[j];
                    LOC(axpy)(o, s[j], vb + (j0 + j) * a->ldv, D);
                }
            }
            T inv = (T)1 / l;
            for (int64_t d = 0; d < D; d++) o[d] *= inv;
        }
    }
}

/* dq, dk, dv (strides of q, k, v) from dout [B,T,Hq*D] (stride ldo). Threads
 * split the (b, kv head) pairs; a pair's query heads run in order. Per
 * query t: pass 1 recomputes the softmax statistics (m, l) and delta =
 * sum_j p_j (dout.v_j); pass 2 forms dS_j = p_j (dout.v_j - delta) and
 * accumulates dq_t, dk_j, dv_j, summed in (head, t) order. */
void FN(attn_bwd_stream)(T *dq, T *dk, T *dv, const T *q, const T *k, const T *v, const T *dout,
                         const pipit__attn_dims *a, int ith, int nth) {
    int64_t D = a->D, rep = a->Hq / a->Hkv, lo, hi;
    T scale = (T)a->scale;
    T s[KERNEL_ATT_CHUNK], dp[KERNEL_ATT_CHUNK];
    pipit__range(a->B * a->Hkv, ith, nth, &lo, &hi);
    for (int64_t bg = lo; bg < hi; bg++) {
        int64_t b = bg / a->Hkv, g = bg % a->Hkv;
        const T *kb = k + b * a->Tk * a->ldk + g * D, *vb = v + b * a->Tk * a->ldv + g * D;
        T *dkb = dk + b * a->Tk * a->ldk + g * D, *dvb = dv + b * a->Tk * a->ldv + g * D;
        for (int64_t j = 0; j < a->Tk; j++) {
            memset(dkb + j * a->ldk, 0, (size_t)D * sizeof(T));
            memset(dvb + j * a->ldv, 0, (size_t)D * sizeof(T));
        }
        for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
            const T *qb = q + b * a->Tq * a->ldq + h * D;
            T *dqb = dq + b * a->Tq * a->ldq + h * D;
            for (int64_t t = 0; t < a->Tq; t++) memset(dqb + t * a->ldq, 0, (size_t)D * sizeof(T));
            for (int64_t t = 0; t < a->Tq; t++) {
                const T *qt = qb + t * a->ldq, *dout_t = dout + (b * a->Tq + t) * a->ldo + h * D;
                T *dqt = dqb + t * a->ldq;
                T m = -(T)INFINITY, l = 0, dl = 0; /* dl: sum_j exp(s_j - m) dp_j */
                int64_t nk = LOC(att_keys)(a, t);
                for (int64_t j0 = 0; j0 < nk; j0 += KERNEL_ATT_CHUNK) {
                    int64_t n = PIPIT_MIN(KERNEL_ATT_CHUNK, nk - j0);
                    for (int64_t j = 0; j < n; j++) {
                        s[j] = LOC(dot)(qt, kb + (j0 + j) * a->ldk, D) * scale;
                        dp[j] = LOC(dot)(dout_t, vb + (j0 + j) * a->ldv, D);
                    }
                    T cm = LOC(maxv)(s, n);
                    if (cm > m) {
                        T f = EXP(m - cm);
                        l *= f;
                        dl *= f;
                        m = cm;
                    }
                    LOC(exp_shift)(s, m, n);
                    for (int64_t j = 0; j < n; j++) {
                        l += s[j];
                        dl += s[j] * dp[j];
                    }
                }
                T inv = (T)1 / l, delta = dl * inv;
                for (int64_t j0 = 0; j0 < nk; j0 += KERNEL_ATT_CHUNK) {
                    int64_t n = PIPIT_MIN(KERNEL_ATT_CHUNK, nk - j0);
                    for (int64_t j = 0; j < n; j++) {
                        s[j] = LOC(dot)(qt, kb + (j0 + j) * a->ldk, D) * scale;
                        dp[j] = LOC(dot)(dout_t, vb + (j0 + j) * a->ldv, D);
                    }
                    LOC(exp_shift)(s, m, n);
                    for (int64_t j = 0; j < n; j++) {
                        const T *kj = kb + (j0 + j) * a->ldk;
                        T p = s[j] * inv;
                        T ds = p * (dp[j] - delta) * scale;
                        LOC(axpy)(dqt, ds, kj, D);
                        LOC(axpy)(dkb + (j0 + j) * a->ldk, ds, qt, D);
                        LOC(axpy)(dvb + (j0 + j) * a->ldv, p, dout_t, D);
                    }
                }
            }
        }
    }
}

/* The blocked kernels: per (b, head) the score matrix S = q k^T is one
 * small BLAS product into a [Tq,Tk] scratch, then a softmax row by row, then
 * products for the output (forward) or dv, dp, dq, dk (backward; the
 * query heads of a kv head add into its dk and dv in head order). With a
 * causal mask the masked part of S is computed and thrown away (BLAS is
 * far faster than the scalar loops it replaces). Each pair is one thread's,
 * its calls are fixed by the shapes: the bits do not depend on nth.
 * Without scratch memory they fall back to the streaming kernels above. */

/* P[t, :] = softmax(P[t, keys]) for a [Tq,Tk] block, zero past the keys. */
static void LOC(softmax_block)(T *P, const pipit__attn_dims *a) {
    for (int64_t t = 0; t < a->Tq; t++) {
        T *row = P + t * a->Tk;
        int64_t n = LOC(att_keys)(a, t);
        T m = LOC(maxv)(row, n);
        LOC(exp_shift)(row, m, n);
        T inv = (T)(1.0 / LOC(sum_d)(row, n));
        for (int64_t j = 0; j < n; j++) row[j] *= inv;
        for (int64_t j = n; j < a->Tk; j++) row[j] = 0;
    }
}

/* dP = dS = P * (dP - rowsum(P * dP)) * scale, zero past the keys: the
 * softmax's backward on a [Tq,Tk] block (P the probabilities). */
static void LOC(dsoftmax_block)(T *dP, const T *P, const pipit__attn_dims *a) {
    T scale = (T)a->scale;
    for (int64_t t = 0; t < a->Tq; t++) {
        const T *p = P + t * a->Tk;
        T *d = dP + t * a->Tk;
        int64_t n = LOC(att_keys)(a, t);
        T delta = LOC(dot)(p, d, n);
        for (int64_t j = 0; j < n; j++) d[j] = p[j] * (d[j] - delta) * scale;
        for (int64_t j = n; j < a->Tk; j++) d[j] = 0;
    }
}

/* The two above for bf16 attention's own products (attn_pairs.c) */
void FN(attn_softmax_block)(T *P, const pipit__attn_dims *a) { LOC(softmax_block)(P, a); }
void FN(attn_dsoftmax_block)(T *dP, const T *P, const pipit__attn_dims *a) { LOC(dsoftmax_block)(dP, P, a); }

/* k blocks of [Tq,Tk] scratch, or NULL (then the streaming kernels run)
 * when it cannot be had, its size overflowing included. */
static T *LOC(att_scratch)(const pipit__attn_dims *a, size_t k) {
    size_t n;
    if (__builtin_mul_overflow((size_t)a->Tq, (size_t)a->Tk, &n) || __builtin_mul_overflow(n, k * sizeof(T), &n))
        return NULL;
    return malloc(n);
}

/* P = scale * q_h k_g^T, softmaxed: [Tq,Tk] */
static void LOC(att_probs)(T *P, const T *qh, const T *kg, const pipit__attn_dims *a) {
    BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)a->Tq, (blasint)a->Tk, (blasint)a->D, (T)a->scale,
              qh, (blasint)a->ldq, kg, (blasint)a->ldk, 0, P, (blasint)a->Tk);
    LOC(softmax_block)(P, a);
}

void FN(attn_fwd)(T *out, const T *q, const T *k, const T *v, const pipit__attn_dims *a, int ith, int nth) {
    T *P = LOC(att_scratch)(a, 1);
    if (!P) {
        FN(attn_fwd_stream)(out, q, k, v, a, ith, nth);
        return;
    }
    int64_t D = a->D, rep = a->Hq / a->Hkv, lo, hi;
    pipit__range(a->B * a->Hq, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / a->Hq, h = bh % a->Hq, g = h / rep;
        const T *vg = v + b * a->Tk * a->ldv + g * D;
        LOC(att_probs)(P, q + b * a->Tq * a->ldq + h * D, k + b * a->Tk * a->ldk + g * D, a);
        BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)a->Tq, (blasint)D, (blasint)a->Tk, 1, P,
                  (blasint)a->Tk, vg, (blasint)a->ldv, 0, out + b * a->Tq * a->ldo + h * D, (blasint)a->ldo);
    }
    free(P);
}

void FN(attn_bwd)(T *dq, T *dk, T *dv, const T *q, const T *k, const T *v, const T *dout,
                  const pipit__attn_dims *a, int ith, int nth) {
    T *P = LOC(att_scratch)(a, 2);
    if (!P) {
        FN(attn_bwd_stream)(dq, dk, dv, q, k, v, dout, a, ith, nth);
        return;
    }
    T *dP = P + a->Tq * a->Tk;
    blasint Tq = (blasint)a->Tq, Tk = (blasint)a->Tk, D = (blasint)a->D;
    blasint ldq = (blasint)a->ldq, ldk = (blasint)a->ldk, ldv = (blasint)a->ldv, ldo = (blasint)a->ldo;
    int64_t rep = a->Hq / a->Hkv, lo, hi;
    pipit__range(a->B * a->Hkv, ith, nth, &lo, &hi);
    for (int64_t bg = lo; bg < hi; bg++) {
        int64_t b = bg / a->Hkv, g = bg % a->Hkv;
        const T *kg = k + b * a->Tk * a->ldk + g * a->D, *vg = v + b * a->Tk * a->ldv + g * a->D;
        T *dkg = dk + b * a->Tk * a->ldk + g * a->D, *dvg = dv + b * a->Tk * a->ldv + g * a->D;
        for (int64_t h = g * rep; h < (g + 1) * rep; h++) {
            T beta = h == g * rep ? 0 : 1; /* the group's first head writes dk, dv; the others add */
            const T *qh = q + b * a->Tq * a->ldq + h * a->D, *dO = dout + b * a->Tq * a->ldo + h * a->D;
            T *dqh = dq + b * a->Tq * a->ldq + h * a->D;
            LOC(att_probs)(P, qh, kg, a);
            /* dv (+)= P^T dO; dP = dO v^T */
            BLAS_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, D, Tq, 1, P, Tk, dO, ldo, beta, dvg, ldv);
            BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, Tk, D, 1, dO, ldo, vg, ldv, 0, dP, Tk);
            LOC(dsoftmax_block)(dP, P, a); /* dS, into dP */
            /* dq = dS k; dk (+)= dS^T q */
            BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, D, Tk, 1, dP, Tk, kg, ldk, 0, dqh, ldq);
            BLAS_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, Tk, D, Tq, 1, dP, Tk, qh, ldq, beta, dkg, ldk);
        }
    }
    free(P);
}

/* GPT-2's packed layout: qkv [B,T,3C] = q | k | v, H heads of C/H, causal. */
static pipit__attn_dims LOC(packed)(int64_t B, int64_t Tq, int64_t C, int64_t H) {
    int64_t D = C / H;
    return (pipit__attn_dims){B, Tq, Tq, H, H, D, 3 * C, 3 * C, 3 * C, C, 1, 1.0 / sqrt((double)D)};
}
void FN(attention)(T *out, const T *qkv, int64_t B, int64_t Tq, int64_t C, int64_t H, int ith, int nth) {
    pipit__attn_dims a = LOC(packed)(B, Tq, C, H);
    FN(attn_fwd)(out, qkv, qkv + C, qkv + 2 * C, &a, ith, nth);
}
void FN(attention_stream)(T *out, const T *qkv, int64_t B, int64_t Tq, int64_t C, int64_t H, int ith, int nth) {
    pipit__attn_dims a = LOC(packed)(B, Tq, C, H);
    FN(attn_fwd_stream)(out, qkv, qkv + C, qkv + 2 * C, &a, ith, nth);
}
void FN(attention_dqkv)(T *dqkv, const T *qkv, const T *dout, int64_t B, int64_t Tq, int64_t C, int64_t H,
                        int ith, int nth) {
    pipit__attn_dims a = LOC(packed)(B, Tq, C, H);
    FN(attn_bwd)(dqkv, dqkv + C, dqkv + 2 * C, qkv, qkv + C, qkv + 2 * C, dout, &a, ith, nth);
}
void FN(attention_dqkv_stream)(T *dqkv, const T *qkv, const T *dout, int64_t B, int64_t Tq, int64_t C,
                               int64_t H, int ith, int nth) {
    pipit__attn_dims a = LOC(packed)(B, Tq, C, H);
    FN(attn_bwd_stream)(dqkv, dqkv + C, dqkv + 2 * C, qkv, qkv + C, qkv + 2 * C, dout, &a, ith, nth);
}

#endif /* !KERNEL_NARROW */

/* ------------------------------------------------------------ cross-entropy */

/* loss [rows] = logsumexp(logits[r,:]) - logits[r, targets[r]]; logits
 * [rows, V]; threads split rows; the sum of exponentials is in double; the
 * losses in the arithmetic type (fp32 for bf16 logits). */
void FN(xent_rows)(A *loss, const T *logits, const int32_t *targets, int64_t rows, int64_t V,
                   int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *x = logits + r * V;
        PIPIT_ASSERT(targets[r] >= 0 && targets[r] < V);
        A m = LOC(maxv)(x, V);
        double sum = LOC(sum_exp)(x, V, m);
        loss[r] = (A)((double)m + log(sum) - (double)LD(x[targets[r]]));
    }
}

/* dlogits [rows, V] = dloss[r] * (softmax(logits[r,:]) - onehot(targets[r]));
 * dloss in the losses' type. */
void FN(xent_dlogits)(T *dlogits, const T *logits, const int32_t *targets, const A *dloss,
                      int64_t rows, int64_t V, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
#if KERNEL_NARROW /* a row's exponentials kept in fp32 (never rounded) for the second pass, else recomputed */
    A *kept = lo < hi ? malloc(sizeof *kept * (size_t)V) : NULL;
#endif
    for (int64_t r = lo; r < hi; r++) {
        const T *x = logits + r * V;
        T *g = dlogits + r * V;
        PIPIT_ASSERT(targets[r] >= 0 && targets[r] < V);
        A m = LOC(maxv)(x, V);
#if KERNEL_NARROW
        A f = (A)((double)dloss[r] / LOC(sum_exp_kept)(x, V, m, kept));
        if (kept) {
            int64_t j = 0;
#ifdef WIDE_SCALE_NARROW
            j = WIDE_SCALE_NARROW(g, kept, f, V);
#endif
            for (; j < V; j++) g[j] = ST(kept[j] * f);
        }
        else
            for (int64_t j = 0; j < V; j++) g[j] = ST(EXP(LD(x[j]) - m) * f);
        g[targets[r]] = ST(EXP(LD(x[targets[r]]) - m) * f - dloss[r]);
#else
        for (int64_t j = 0; j < V; j++) g[j] = EXP(x[j] - m);
        double sum = LOC(sum_d)(g, V);
        T f = (T)((double)dloss[r] / sum);
        for (int64_t j = 0; j < V; j++) g[j] *= f;
        g[targets[r]] -= dloss[r];
#endif
    }
#if KERNEL_NARROW
    free(kept);
#endif
}

#undef FN
#undef LOC
#undef KCAT
#undef KCAT_
/* the type parameters are used up; the math macros are the includer's */
#undef T
#undef A
#undef S
#undef LD
#undef ST
#undef STD
#undef KERNEL_NARROW
#undef LD8
