/*
 * kernels_impl.h — template for the non-GEMM kernels; included by kernels.c
 * once per type with T (element type), S (suffix: f32/f64) and the math
 * function EXP defined. Not a header to include elsewhere.
 * Layouts are row-major; [a,b] in comments are shapes.
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
#endif

/* ------------------------------------------------------------ reductions */

/* sum of x[0..n) in double: 8 fixed lanes, then a fixed tree, then the tail.
 * The order depends only on n, and the lanes let the compiler vectorise. */
static double LOC(sum_d)(const T *restrict x, int64_t n) {
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += (double)x[i + j];
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += (double)x[i];
    return s;
}

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

/* max of x[0..n), n >= 1, in 8 lanes (max is exact: the order only
 * matters for which NaN wins). */
static T LOC(maxv)(const T *restrict x, int64_t n) {
    T acc[8];
    for (int j = 0; j < 8; j++) acc[j] = x[0];
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    T m = acc[0];
    for (int j = 1; j < 8; j++) m = acc[j] > m ? acc[j] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* x[n] = exp(x[n] - m) */
static void LOC(exp_shift)(T *restrict x, T m, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = EXP(x[i] - m);
}

/* y[n] += a * x[n] */
static void LOC(axpy)(T *restrict y, T a, const T *restrict x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* ------------------------------------------------------------ elementwise */

void FN(add)(T *out, const T *a, const T *b, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) out[i] = a[i] + b[i];
}

void FN(mul)(T *out, const T *a, const T *b, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) out[i] = a[i] * b[i];
}

void FN(scale)(T *out, const T *a, T alpha, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) out[i] = alpha * a[i];
}

/* out, x [rows, C]; bias [C]; threads split rows. */
void FN(bias_add)(T *out, const T *x, const T *bias, int64_t rows, int64_t C, int ith,
                  int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        T *o = out + r * C;
        const T *xr = x + r * C;
        for (int64_t c = 0; c < C; c++) o[c] = xr[c] + bias[c];
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
        for (int64_t r = 0; r < rows; r++) {
            const T *xr = x + r * C + c0;
            for (int64_t j = 0; j < w; j++) acc[j] += (double)xr[j];
        }
        for (int64_t j = 0; j < w; j++) out[c0 + j] = (T)acc[j];
    }
}

/* out [1] = scale * sum(x [n]), sequential in double, thread 0 only. */
void FN(sum_all)(T *out, const T *x, int64_t n, double scale, int ith, int nth) {
    (void)nth;
    if (ith != 0) return;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i];
    out[0] = (T)(s * scale);
}

/* out [n] = scalar[0] * scale */
void FN(fill)(T *out, const T *scalar, double scale, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    T v = (T)((double)scalar[0] * scale);
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

/* ------------------------------------------------------------ layernorm */

/* Mean and 1/sqrt(var + eps) of one row x [C], accumulated in double with a
 * fixed order, rounded to T (all three layernorm kernels share this). */
static void LOC(ln_stats)(const T *restrict x, int64_t C, double eps, T *mean, T *rstd) {
    double m = LOC(sum_d)(x, C) / (double)C;
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= C; i += 8)
        for (int j = 0; j < 8; j++) {
            double d = (double)x[i + j] - m;
            acc[j] += d * d;
        }
    double v = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < C; i++) v += ((double)x[i] - m) * ((double)x[i] - m);
    *mean = (T)m;
    *rstd = (T)(1.0 / sqrt(v / (double)C + eps));
}

/* out, x [rows, C]; w, b [C]; threads split rows. */
void FN(layernorm)(T *out, const T *x, const T *w, const T *b, int64_t rows, int64_t C,
                   double eps, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *xr = x + r * C;
        T *o = out + r * C;
        T m, rs;
        LOC(ln_stats)(xr, C, eps, &m, &rs);
        for (int64_t c = 0; c < C; c++) o[c] = (xr[c] - m) * rs * w[c] + b[c];
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
        T m, rs;
        LOC(ln_stats)(xr, C, eps, &m, &rs);
        double a1[8] = {0}, a2[8] = {0};
        int64_t c = 0;
        for (; c + 8 <= C; c += 8)
            for (int j = 0; j < 8; j++) {
                T xh = (xr[c + j] - m) * rs, g = dr[c + j] * w[c + j];
                a1[j] += (double)g;
                a2[j] += (double)g * (double)xh;
            }
        double sg = ((a1[0] + a1[1]) + (a1[2] + a1[3])) + ((a1[4] + a1[5]) + (a1[6] + a1[7]));
        double sgx = ((a2[0] + a2[1]) + (a2[2] + a2[3])) + ((a2[4] + a2[5]) + (a2[6] + a2[7]));
        for (; c < C; c++) {
            T xh = (xr[c] - m) * rs, g = dr[c] * w[c];
            sg += (double)g;
            sgx += (double)g * (double)xh;
        }
        T mg = (T)(sg / (double)C), mgx = (T)(sgx / (double)C);
        for (c = 0; c < C; c++) {
            T xh = (xr[c] - m) * rs, g = dr[c] * w[c];
            o[c] = rs * (g - mg - xh * mgx);
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
            T m, rs;
            LOC(ln_stats)(xr, C, eps, &m, &rs);
            xr += c0;
            for (int64_t j = 0; j < w; j++) acc[j] += (double)(dr[j] * ((xr[j] - m) * rs));
        }
        for (int64_t j = 0; j < w; j++) dw[c0 + j] = (T)acc[j];
    }
}

/* ------------------------------------------------------------ GELU */

/* With u = sqrt(2/pi)(x + 0.044715x^3), GPT-2's 0.5x(1 + tanh(u)) equals
 * x * sigmoid(2u) = x / (1 + exp(-2u)): one exp, which vectorises. */
#define GELU_S2PI ((T)0.79788456080286535588) /* sqrt(2/pi) */
#define GELU_K ((T)0.044715)

void FN(gelu)(T *out, const T *x, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        T v = x[i];
        T u = GELU_S2PI * (v + GELU_K * v * v * v);
        out[i] = v / ((T)1 + EXP((T)-2 * u));
    }
}

/* dx = dout * gelu'(x); with sg = sigmoid(2u) = (1 + tanh u)/2:
 * gelu' = sg + 2x sg(1 - sg) du/dx. */
void FN(gelu_dx)(T *dx, const T *x, const T *dout, int64_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        T v = x[i];
        T sg = (T)1 / ((T)1 + EXP((T)-2 * GELU_S2PI * (v + GELU_K * v * v * v)));
        T du = GELU_S2PI * ((T)1 + (T)3 * GELU_K * v * v);
        T d = sg + (T)2 * v * sg * ((T)1 - sg) * du;
        dx[i] = d * dout[i];
    }
}
#undef GELU_S2PI
#undef GELU_K

/* ------------------------------------------------------------ embedding */

/* out [n, C] = rows idx[n] of table [V, C]; threads split n. */
void FN(embed)(T *out, const T *table, const int32_t *idx, int64_t n, int64_t C, int ith,
               int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        memcpy(out + i * C, table + (int64_t)idx[i] * C, (size_t)C * sizeof(T));
}

/* dtable [V, C] = sum over i (ascending) of dout[i,:] into row idx[i].
 * Threads split the V rows; each scans all of idx and takes its own rows. */
void FN(embed_dtable)(T *dtable, const int32_t *idx, const T *dout, int64_t n, int64_t V,
                      int64_t C, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(V, ith, nth, &lo, &hi);
    if (hi > lo) memset(dtable + lo * C, 0, (size_t)((hi - lo) * C) * sizeof(T));
    for (int64_t i = 0; i < n; i++) {
        int64_t v = idx[i];
        if (v < lo || v >= hi) continue;
        T *row = dtable + v * C;
        const T *d = dout + i * C;
        for (int64_t c = 0; c < C; c++) row[c] += d[c];
    }
}

/* ------------------------------------------------------------ attention */

/* qkv [B,Tq,3C] (q | k | v, each [H heads of D]); out [B,Tq,C]. Threads
 * split the (b,h) pairs. Per query, keys are scored KERNEL_ATT_CHUNK at a
 * time with an online softmax (running max m, running sum l), so no
 * scratch beyond the stack is needed; the order is fixed by the shapes. */
void FN(attention_stream)(T *out, const T *qkv, int64_t B, int64_t Tq, int64_t C, int64_t H,
                                  int ith, int nth) {
    int64_t D = C / H, lo, hi;
    T scale = (T)(1.0 / sqrt((double)D));
    T s[KERNEL_ATT_CHUNK];
    pipit__range(B * H, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / H, h = bh % H;
        const T *base = qkv + b * Tq * 3 * C + h * D; /* q of (b,0,h) */
        for (int64_t t = 0; t < Tq; t++) {
            const T *q = base + t * 3 * C;
            T *o = out + (b * Tq + t) * C + h * D; /* [D], accumulates p @ v */
            for (int64_t d = 0; d < D; d++) o[d] = 0;
            T m = -(T)INFINITY, l = 0;
            for (int64_t j0 = 0; j0 <= t; j0 += KERNEL_ATT_CHUNK) {
                int64_t n = PIPIT_MIN(KERNEL_ATT_CHUNK, t + 1 - j0);
                for (int64_t j = 0; j < n; j++)
                    s[j] = LOC(dot)(q, base + (j0 + j) * 3 * C + C, D) * scale;
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
                    LOC(axpy)(o, s[j], base + (j0 + j) * 3 * C + 2 * C, D);
                }
            }
            T inv = (T)1 / l;
            for (int64_t d = 0; d < D; d++) o[d] *= inv;
        }
    }
}

/* dqkv [B,Tq,3C] from qkv [B,Tq,3C] and dout [B,Tq,C]. Per query t: pass 1
 * recomputes the softmax statistics (m, l) and delta = sum_j p_j (dout.v_j);
 * pass 2 forms dS_j = p_j (dout.v_j - delta) and accumulates dq_t, dk_j, dv_j.
 * A (b,h) pair's slices of dqkv belong to one thread, summed in t order. */
void FN(attention_dqkv_stream)(T *dqkv, const T *qkv, const T *dout, int64_t B, int64_t Tq,
                                       int64_t C, int64_t H, int ith, int nth) {
    int64_t D = C / H, lo, hi;
    T scale = (T)(1.0 / sqrt((double)D));
    T s[KERNEL_ATT_CHUNK], dp[KERNEL_ATT_CHUNK];
    pipit__range(B * H, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / H, h = bh % H;
        const T *base = qkv + b * Tq * 3 * C + h * D;
        T *dbase = dqkv + b * Tq * 3 * C + h * D;
        for (int64_t t = 0; t < Tq; t++)
            for (int64_t k = 0; k < 3; k++)
                memset(dbase + t * 3 * C + k * C, 0, (size_t)D * sizeof(T));
        for (int64_t t = 0; t < Tq; t++) {
            const T *q = base + t * 3 * C, *dout_t = dout + (b * Tq + t) * C + h * D;
            T *dq = dbase + t * 3 * C;
            T m = -(T)INFINITY, l = 0, dl = 0; /* dl: sum_j exp(s_j - m) dp_j */
            for (int64_t j0 = 0; j0 <= t; j0 += KERNEL_ATT_CHUNK) {
                int64_t n = PIPIT_MIN(KERNEL_ATT_CHUNK, t + 1 - j0);
                for (int64_t j = 0; j < n; j++) {
                    const T *kj = base + (j0 + j) * 3 * C + C;
                    s[j] = LOC(dot)(q, kj, D) * scale;
                    dp[j] = LOC(dot)(dout_t, kj + C, D);
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
            for (int64_t j0 = 0; j0 <= t; j0 += KERNEL_ATT_CHUNK) {
                int64_t n = PIPIT_MIN(KERNEL_ATT_CHUNK, t + 1 - j0);
                for (int64_t j = 0; j < n; j++) {
                    const T *kj = base + (j0 + j) * 3 * C + C;
                    s[j] = LOC(dot)(q, kj, D) * scale;
                    dp[j] = LOC(dot)(dout_t, kj + C, D);
                }
                LOC(exp_shift)(s, m, n);
                for (int64_t j = 0; j < n; j++) {
                    const T *kj = base + (j0 + j) * 3 * C + C;
                    T *dkj = dbase + (j0 + j) * 3 * C + C;
                    T p = s[j] * inv;
                    T ds = p * (dp[j] - delta) * scale;
                    LOC(axpy)(dq, ds, kj, D);
                    LOC(axpy)(dkj, ds, q, D);
                    LOC(axpy)(dkj + C, p, dout_t, D);
                }
            }
        }
    }
}

/* The blocked kernels: per (b,h) pair the score matrix S = q k^T is one
 * small BLAS product into a [T,T] scratch, then a causal softmax row by row,
 * then products for the output (forward) or dv, dp, dq, dk (backward).
 * The masked half of S is computed and thrown away (BLAS is far faster
 * than the scalar loops it replaces). Each pair is one thread's, its calls
 * are fixed by the shapes: the bits do not depend on nth. Without scratch
 * memory they fall back to the streaming kernels above. */

/* P[t, 0..t] = softmax(S[t, 0..t]), P[t, t+1..] = 0, for a [T,T] block. */
static void LOC(causal_softmax)(T *P, int64_t Tq) {
    for (int64_t t = 0; t < Tq; t++) {
        T *row = P + t * Tq;
        T m = LOC(maxv)(row, t + 1);
        LOC(exp_shift)(row, m, t + 1);
        T inv = (T)(1.0 / LOC(sum_d)(row, t + 1));
        for (int64_t j = 0; j <= t; j++) row[j] *= inv;
        for (int64_t j = t + 1; j < Tq; j++) row[j] = 0;
    }
}

void FN(attention)(T *out, const T *qkv, int64_t B, int64_t Tq, int64_t C, int64_t H, int ith, int nth) {
    T *P = malloc(sizeof(T) * (size_t)(Tq * Tq));
    if (!P) {
        FN(attention_stream)(out, qkv, B, Tq, C, H, ith, nth);
        return;
    }
    int64_t D = C / H, lo, hi, ld = 3 * C;
    T scale = (T)(1.0 / sqrt((double)D));
    pipit__range(B * H, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / H, h = bh % H;
        const T *q = qkv + b * Tq * ld + h * D, *k = q + C, *v = q + 2 * C;
        BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)Tq, (blasint)Tq, (blasint)D, scale, q,
                  (blasint)ld, k, (blasint)ld, 0, P, (blasint)Tq);
        LOC(causal_softmax)(P, Tq);
        BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)Tq, (blasint)D, (blasint)Tq, 1, P,
                  (blasint)Tq, v, (blasint)ld, 0, out + b * Tq * C + h * D, (blasint)C);
    }
    free(P);
}

void FN(attention_dqkv)(T *dqkv, const T *qkv, const T *dout, int64_t B, int64_t Tq, int64_t C, int64_t H,
                        int ith, int nth) {
    T *P = malloc(sizeof(T) * (size_t)(2 * Tq * Tq));
    if (!P) {
        FN(attention_dqkv_stream)(dqkv, qkv, dout, B, Tq, C, H, ith, nth);
        return;
    }
    T *dP = P + Tq * Tq;
    int64_t D = C / H, lo, hi, ld = 3 * C;
    T scale = (T)(1.0 / sqrt((double)D));
    pipit__range(B * H, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / H, h = bh % H;
        const T *q = qkv + b * Tq * ld + h * D, *k = q + C, *v = q + 2 * C;
        const T *dO = dout + b * Tq * C + h * D;
        T *dq = dqkv + b * Tq * ld + h * D, *dk = dq + C, *dv = dq + 2 * C;
        BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)Tq, (blasint)Tq, (blasint)D, scale, q,
                  (blasint)ld, k, (blasint)ld, 0, P, (blasint)Tq);
        LOC(causal_softmax)(P, Tq);
        /* dv = P^T dO; dP = dO v^T */
        BLAS_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)Tq, (blasint)D, (blasint)Tq, 1, P,
                  (blasint)Tq, dO, (blasint)C, 0, dv, (blasint)ld);
        BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)Tq, (blasint)Tq, (blasint)D, 1, dO,
                  (blasint)C, v, (blasint)ld, 0, dP, (blasint)Tq);
        /* dS = P * (dP - rowsum(P * dP)) * scale, into dP */
        for (int64_t t = 0; t < Tq; t++) {
            T *p = P + t * Tq, *d = dP + t * Tq;
            T delta = LOC(dot)(p, d, t + 1);
            for (int64_t j = 0; j <= t; j++) d[j] = p[j] * (d[j] - delta) * scale;
            for (int64_t j = t + 1; j < Tq; j++) d[j] = 0;
        }
        /* dq = dS k; dk = dS^T q */
        BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)Tq, (blasint)D, (blasint)Tq, 1, dP,
                  (blasint)Tq, k, (blasint)ld, 0, dq, (blasint)ld);
        BLAS_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)Tq, (blasint)D, (blasint)Tq, 1, dP,
                  (blasint)Tq, q, (blasint)ld, 0, dk, (blasint)ld);
    }
    free(P);
}

/* ------------------------------------------------------------ cross-entropy */

/* loss [rows] = logsumexp(logits[r,:]) - logits[r, targets[r]]; logits
 * [rows, V]; threads split rows; the sum of exponentials is in double. */
void FN(xent_rows)(T *loss, const T *logits, const int32_t *targets, int64_t rows, int64_t V,
                   int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *x = logits + r * V;
        PIPIT_ASSERT(targets[r] >= 0 && targets[r] < V);
        T m = LOC(maxv)(x, V);
        double acc[8] = {0}; /* fixed 8 lanes, as in sum_d */
        int64_t j = 0;
        for (; j + 8 <= V; j += 8)
            for (int k = 0; k < 8; k++) acc[k] += (double)EXP(x[j + k] - m);
        double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (; j < V; j++) sum += (double)EXP(x[j] - m);
        loss[r] = (T)((double)m + log(sum) - (double)x[targets[r]]);
    }
}

/* dlogits [rows, V] = dloss[r] * (softmax(logits[r,:]) - onehot(targets[r])). */
void FN(xent_dlogits)(T *dlogits, const T *logits, const int32_t *targets, const T *dloss,
                      int64_t rows, int64_t V, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(rows, ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const T *x = logits + r * V;
        T *g = dlogits + r * V;
        PIPIT_ASSERT(targets[r] >= 0 && targets[r] < V);
        T m = LOC(maxv)(x, V);
        for (int64_t j = 0; j < V; j++) g[j] = EXP(x[j] - m);
        double sum = LOC(sum_d)(g, V);
        T f = (T)((double)dloss[r] / sum);
        for (int64_t j = 0; j < V; j++) g[j] *= f;
        g[targets[r]] -= dloss[r];
    }
}

#undef FN
#undef LOC
#undef KCAT
#undef KCAT_
