/*
 * head_xent_impl.h — template of the fused LM head + cross-entropy kernels
 * (head_xent.c includes it once per type): T the storage type, A the
 * arithmetic type, S the suffix, LD / ST (T to A, A to T, rounding to
 * nearest even), EXPA (exp in A), GEMM_A (pipit__gemm_f32 or _f64, called
 * single-threaded: ith 0 of 1) and NARROW (1 for bf16: h and each chunk of
 * W are widened into fp32 panels first, the logits and every sum stay in
 * fp32, and dW is rounded once). Not a header to include elsewhere.
 *
 * The logits GEMMs (forward and backward) straight from bf16: where the
 * bf16 GEMM kind multiplies bf16 itself (oneDNN or the pairs kernel:
 * pipit__gemm_bf16_direct(), kernels.h), the bf16 kernel computes each
 * chunk's fp32 logits h W_chunk^T from the bf16 h and W
 * (pipit__gemm_bf16_f32; single-threaded, its tiles by shape only, so the
 * bits still never depend on the thread count), with no fp32 panels. The
 * backward's dW = dz^T h and dh = dz W keep the fp32 panels and sgemm: dz is
 * fp32 and rounding it to bf16 would change the math, and oneDNN 2.6 (and
 * pipit__gemm_onednn) takes A and B of one type. Bits then differ from
 * the panels' in the last place of the logits (another summation order).
 * UNTESTED ON HARDWARE: the machines this was written on have no
 * AVX512-BF16, so oneDNN never has a bf16 matmul there; what runs there is
 * the fallback when the kind is forced to oneDNN, and the very same call
 * in f32 (HX_ONEDNN_F32, a test hook: tests/test_fused_head.c).
 */
#define KCAT_(a, b) a##_##b
#define KCAT(a, b) KCAT_(a, b)
#define FN(name) KCAT(pipit__##name, S)
#define LOC(name) KCAT(name, S)

/* max of x[0..n), n >= 1, in 8 lanes (exact; the order only picks a NaN) */
static A LOC(hx_max)(const A *restrict x, int64_t n) {
    A acc[8];
    for (int j = 0; j < 8; j++) acc[j] = x[0];
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    A m = acc[0];
    for (int j = 1; j < 8; j++) m = acc[j] > m ? acc[j] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* sum of exp(x[j] - m) over j < n in double: 8 fixed lanes, a fixed tree,
 * the tail (xent_rows' order) */
static double LOC(hx_sum_exp)(const A *restrict x, int64_t n, A m) {
    double acc[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += (double)EXPA(x[j + k] - m);
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; j < n; j++) s += (double)EXPA(x[j] - m);
    return s;
}

/* x [n] as A: itself, or widened into buf (bf16) */
static const A *LOC(hx_wide)(const T *x, int64_t n, A *buf) {
#if NARROW
    for (int64_t i = 0; i < n; i++) buf[i] = LD(x[i]);
    return buf;
#else
    (void)n, (void)buf;
    return x;
#endif
}

/* Z [m, n] (A) = x [m, d] y [n, d]^T of T straight from T when dnn:
 * 1 done, 0 not (the caller runs its own GEMM). bf16: bf16 in, fp32 out,
 * by the bf16 GEMM's kind (oneDNN or the pairs kernel; single-threaded,
 * its tiles by shape only); f32: f32 in and out through oneDNN (the test
 * hook); never f64. */
static int LOC(hx_onednn)(int dnn, A *Z, const T *x, const T *y, int64_t m, int64_t n, int64_t d) {
#if NARROW
    if (dnn) pipit__gemm_bf16_f32(0, 1, 1, m, n, d, x, d, 0, y, d, 0, Z, n, 0, 0, 0, 1);
    return dnn;
#elif HX_ONEDNN_F32
    return dnn && pipit__gemm_onednn(PIPIT_F32, PIPIT_F32, 0, 1, 1, m, n, d, x, d, 0, y, d, 0, Z, n, 0, 0, 0, 1) == 0;
#else
    (void)dnn, (void)Z, (void)x, (void)y, (void)m, (void)n, (void)d;
    return 0;
#endif
}

/* st [3, N]: lse[r] = log sum_v exp(h_r . W_v), zt[r] = h_r . W_{t[r] - off}
 * (0 when that class is not in [0, V): another shard's), and lse's
 * rounding error (lse in double minus lse in A). Threads take
 * blocks of pipit__hx_rows(N) rows in turn; a block walks the chunks of
 * the vocabulary in order with an online max (the sum rescaled in double
 * when the max grows). */
void FN(head_xent)(A *st, const T *h, const T *W, const int32_t *t, int64_t N, int64_t V, int64_t d, int64_t off,
                   int ith, int nth) {
    int64_t R = pipit__hx_rows(N), C = pipit__hx_chunk(N), nb = (N + R - 1) / R, nc = (V + C - 1) / C;
    if (ith >= nb) return;
    size_t words = (size_t)R * (size_t)C + (NARROW ? (size_t)(R + C) * (size_t)d : 0);
    A *Z = hx_scratch(words, sizeof(A));
    if (!Z) {
        for (int64_t b = ith; b < nb; b += nth)
            for (int64_t r = b * R; r < PIPIT_MIN(N, b * R + R); r++) st[r] = st[N + r] = st[2 * N + r] = 0;
        pipit__kernel_fail("head_xent: out of memory for its chunk of logits");
        return;
    }
    A *hbuf = Z + R * C, *wbuf = hbuf + R * d;
    A m[PIPIT_HX_MAX_ROWS], zt[PIPIT_HX_MAX_ROWS];
    double sum[PIPIT_HX_MAX_ROWS];
    int dnn = HX_DNN();
    for (int64_t b = ith; b < nb; b += nth) {
        int64_t r0 = b * R, rn = PIPIT_MIN(R, N - r0);
        const A *hb = NULL; /* widened when a chunk needs it (never where oneDNN runs them all) */
        for (int64_t c = 0; c < nc; c++) {
            int64_t v0 = c * C, vn = PIPIT_MIN(C, V - v0);
            if (!LOC(hx_onednn)(dnn, Z, h + r0 * d, W + v0 * d, rn, vn, d)) {
                if (!hb) hb = LOC(hx_wide)(h + r0 * d, rn * d, hbuf);
                const A *wc = LOC(hx_wide)(W + v0 * d, vn * d, wbuf);
                GEMM_A(0, 1, 1, rn, vn, d, hb, d, 0, wc, d, 0, Z, vn, 0, 0, 0, 1);
            }
            for (int64_t i = 0; i < rn; i++) {
                const A *z = Z + i * vn;
                A mx = LOC(hx_max)(z, vn);
                if (c == 0) {
                    m[i] = mx, sum[i] = 0, zt[i] = 0;
                } else if (mx > m[i]) {
                    sum[i] *= exp((double)m[i] - (double)mx);
                    m[i] = mx;
                }
                sum[i] += LOC(hx_sum_exp)(z, vn, m[i]);
                int64_t y = (int64_t)t[r0 + i] - off;
                if (y >= v0 && y < v0 + vn) zt[i] = z[y - v0];
            }
        }
        for (int64_t i = 0; i < rn; i++) {
            double lse = (double)m[i] + log(sum[i]);
            st[r0 + i] = (A)lse;
            st[N + r0 + i] = zt[i];
            st[2 * N + r0 + i] = (A)(lse - (double)st[r0 + i]);
        }
    }
    free(Z);
}

/* out = [G partial dh [N, d] of A | dW [V, d] of T] from sd [6, N] = (lse,
 * target logit, lse's rounding error, their gradients): per chunk, the
 * logits once more, then dz = dlse e^(z - lse) + dzt onehot(t - off), dW_chunk = dz^T h and the
 * group's partial (+)= dz W_chunk. Threads take groups in turn (a group's
 * chunks in order), so every sum is formed in one order for any nth. */
void FN(head_xent_bwd)(T *out, const T *h, const T *W, const int32_t *t, const A *sd, int64_t N, int64_t V, int64_t d,
                       int64_t off, int64_t G, int ith, int nth) {
    int64_t C = pipit__hx_chunk(N), nc = (V + C - 1) / C;
    A *part = (A *)(void *)out;
    T *dW = out + G * N * d * (int64_t)(sizeof(A) / sizeof(T));
    if (ith >= G) return;
    size_t words = (size_t)N * (size_t)C + (NARROW ? (size_t)(N + 2 * C) * (size_t)d : 0);
    A *Z = hx_scratch(words, sizeof(A));
    if (!Z) {
        for (int64_t g = ith; g < G; g += nth) {
            int64_t c0, c1;
            pipit__hx_group_chunks(nc, G, g, &c0, &c1);
            memset(part + g * N * d, 0, sizeof(A) * (size_t)(N * d));
            int64_t v0 = c0 * C, v1 = PIPIT_MIN(V, c1 * C);
            memset(dW + v0 * d, 0, sizeof(T) * (size_t)((v1 - v0) * d));
        }
        pipit__kernel_fail("head_xent (backward): out of memory for its chunk of logits");
        return;
    }
    A *hbuf = Z + N * C, *wbuf = hbuf + N * d, *dwbuf = wbuf + C * d;
    (void)dwbuf;
    const A *ha = LOC(hx_wide)(h, N * d, hbuf);
    const A *lse = sd, *res = sd + 2 * N, *dlse = sd + 3 * N, *dzt = sd + 4 * N;
    int dnn = HX_DNN();
    for (int64_t g = ith; g < G; g += nth) {
        int64_t c0, c1;
        pipit__hx_group_chunks(nc, G, g, &c0, &c1);
        A *P = part + g * N * d;
        for (int64_t c = c0; c < c1; c++) {
            int64_t v0 = c * C, vn = PIPIT_MIN(C, V - v0);
            const A *wc = LOC(hx_wide)(W + v0 * d, vn * d, wbuf); /* dh's GEMM reads it too */
            if (!LOC(hx_onednn)(dnn, Z, h, W + v0 * d, N, vn, d))
                GEMM_A(0, 1, 1, N, vn, d, ha, d, 0, wc, d, 0, Z, vn, 0, 0, 0, 1);
            for (int64_t r = 0; r < N; r++) {
                A *z = Z + r * vn, l = lse[r], e = res[r], a = dlse[r];
                for (int64_t j = 0; j < vn; j++) z[j] = a * EXPA((z[j] - l) - e);
                int64_t y = (int64_t)t[r] - off;
                if (y >= v0 && y < v0 + vn) z[y - v0] += dzt[r];
            }
#if NARROW
            GEMM_A(1, 0, 1, vn, d, N, Z, vn, 0, ha, d, 0, dwbuf, d, 0, 0, 0, 1);
            for (int64_t i = 0; i < vn * d; i++) dW[v0 * d + i] = ST(dwbuf[i]);
#else
            GEMM_A(1, 0, 1, vn, d, N, Z, vn, 0, ha, d, 0, dW + v0 * d, d, 0, 0, 0, 1);
#endif
            GEMM_A(0, 0, 1, N, d, vn, Z, vn, 0, wc, d, 0, P, d, 0, c > c0, 0, 1);
        }
    }
    free(Z);
}

/* dh [n] = the G partials (A, each [n], at the start of bwd) added in
 * group order, rounded once to T. Threads split the elements. */
void FN(head_xent_dh)(T *dh, const T *bwd, int64_t G, int64_t n, int ith, int nth) {
    const A *part = (const A *)(const void *)bwd;
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        A s = part[i];
        for (int64_t g = 1; g < G; g++) s += part[g * n + i];
        dh[i] = ST(s);
    }
}

#undef FN
#undef LOC
#undef KCAT
#undef KCAT_
#undef T
#undef A
#undef S
#undef LD
#undef ST
#undef EXPA
#undef GEMM_A
#undef NARROW
#undef HX_ONEDNN_F32
#undef HX_DNN
