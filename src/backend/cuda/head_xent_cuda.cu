/*
 * head_xent_cuda.cu — the fused LM head + cross-entropy (ops.def HEAD_XENT,
 * HEAD_XENT_BWD, HEAD_XENT_DH), the counterpart of backend/cpu/head_xent.c
 * with its op contract unchanged: the forward writes [3, N] (lse, the
 * target logit, lse's rounding error) in the arithmetic type A, the
 * backward [G partial dh [N, d] of A | dW [V, d] of T], HEAD_XENT_DH the
 * partials added in group order, rounded once to T. T is f32, f64 or bf16
 * (A = fp32 for bf16: h and each chunk of W widened exactly into fp32
 * scratch, the logits and every sum fp32 or double, dW rounded once).
 *
 * The [N, V] logits are never stored: the vocabulary is walked in the
 * shape-only chunks of ir/head_xent.h (the CPU's), each chunk's logits
 * [N, chunk] formed by one pipit__cuda_gemm (cuBLASLt) into stream-ordered
 * scratch, then:
 *   - forward: a warp per row updates the row's online log-sum-exp (the
 *     max in A, exactly; the sum of exp(z - max) lane-strided in double, an
 *     xor butterfly, added to the row's double sum, which is rescaled by
 *     exp(old max - new max) in double when the max grows) and picks the
 *     target logit; after the last chunk one thread a row writes the three
 *     rows;
 *   - backward: per group, its chunks in order: the logits, then in place
 *     dz = dlse exp((z - lse) - err) + dzt onehot(t - off) (a thread an
 *     element), dW_chunk = dz^T h (narrowed to bf16 by a kernel where T is
 *     bf16) and the group's partial (+)= dz W_chunk.
 * Determinism: no atomics; every sum's order is fixed by the shapes (the
 * chunks, the warp's lanes, the groups in order); the GEMMs are the
 * backend's (one algorithm per shape, no split-K). Against the CPU: the
 * same formulas and types, other summation orders (and expf for the CPU's
 * fast_expf): equal to rounding, not bitwise.
 */
#include <cmath>

#include "backend/cuda/ops_cuda.cuh"
#include "ir/head_xent.h"

#define NTH PIPIT_CUDA_THREADS

/* The dtype pipit__cuda_gemm computes A in. */
template <class A>
static pipit_dtype gemm_dt() {
    return sizeof(A) == sizeof(double) ? PIPIT_F64 : PIPIT_F32;
}

/* n values of es bytes stay within the bytes of one block (2^56). */
static int hx_fits(int64_t n, size_t es) {
    return n >= 0 && n <= ((int64_t)1 << 56) / (int64_t)es;
}

/* ------------------------------------------------------------ small kernels */

/* out [n] of A = x [n] of T (exact: bf16 into fp32). */
template <class T>
__global__ void hx_widen_kernel(pipit_arith<T> *out, const T *x, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) out[i] = (pipit_arith<T>)x[i];
}

/* out [n] of T = x [n] of A, rounded once to nearest even. */
template <class T>
__global__ void hx_narrow_kernel(T *out, const pipit_arith<T> *x, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) out[i] = (T)x[i];
}

/* x as A: itself, or (bf16) widened into buf; NULL after a failed launch. */
template <class T>
static const pipit_arith<T> *hx_wide(const T *x, int64_t n, pipit_arith<T> *buf, const char *what) {
    if (sizeof(T) == sizeof(pipit_arith<T>)) return (const pipit_arith<T> *)(const void *)x;
    if (n > 0) hx_widen_kernel<T><<<pipit_grid_for(n, NTH), NTH, 0, pipit__cuda_stream()>>>(buf, x, n);
    return PIPIT_CUDA_LAUNCHED(what) ? NULL : buf;
}

/* ------------------------------------------------------------ forward */

/* One chunk of the online log-sum-exp: z [N, vn] the logits of classes
 * [v0, v0 + vn); per row r, m[r] (A), sum[r] (double) and zt[r] (A) carry
 * the chunks before (first: start them). A warp per row. */
template <class A>
__global__ void hx_lse_chunk_kernel(A *m, double *sum, A *zt, const A *Z, const int32_t *t, int64_t N, int64_t vn,
                                    int64_t v0, int64_t off, int first) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, N) {
        const A *z = Z + r * vn;
        A mx = z[0];
        for (int64_t j = lane; j < vn; j += 32) mx = z[j] > mx ? z[j] : mx;
        mx = pipit_group_max(mx, 32);
        A mr;
        double sr;
        if (first) {
            mr = mx, sr = 0;
        } else {
            mr = m[r], sr = sum[r];
            if (mx > mr) {
                sr *= exp((double)mr - (double)mx);
                mr = mx;
            }
        }
        double s = 0;
        for (int64_t j = lane; j < vn; j += 32) s += (double)pipit_dexp(z[j] - mr);
        s = pipit_group_sum(s, 32);
        if (lane == 0) {
            int64_t y = (int64_t)t[r] - off;
            m[r] = mr;
            sum[r] = sr + s;
            if (first) zt[r] = 0;
            if (y >= v0 && y < v0 + vn) zt[r] = z[y - v0];
        }
    }
}

/* st [3, N]: lse in A, the target logit, lse (double) minus lse in A. */
template <class A>
__global__ void hx_lse_final_kernel(A *st, const A *m, const double *sum, const A *zt, int64_t N) {
    PIPIT_GRID_STRIDE(r, N) {
        double lse = (double)m[r] + log(sum[r]);
        A l = (A)lse;
        st[r] = l;
        st[N + r] = zt[r];
        st[2 * N + r] = (A)(lse - (double)l);
    }
}

template <class T>
static void head_xent(void *st_, const void *h_, const void *W_, const int32_t *t, int64_t N, int64_t V, int64_t d,
                      int64_t off) {
    typedef pipit_arith<T> A;
    const int narrow = sizeof(T) != sizeof(A);
    const T *h = (const T *)h_, *W = (const T *)W_;
    A *st = (A *)st_;
    const char *what = "head_xent";
    int64_t C = pipit__hx_chunk(N), nc = (V + C - 1) / C;
    /* scratch: Z [N, C] A | m [N] A | zt [N] A | (bf16) h [N, d] A | W chunk [C, d] A | sum [N] double.
     * No int64 overflow: N and V d are at most 2^48 elements (the op's
     * shape rules), C at most 2048. */
    int64_t words = N * C + 2 * N + (narrow ? N * d + C * d : 0);
    if (!hx_fits(words, sizeof(A)) || !hx_fits(N, sizeof(double))) {
        pipit__cuda_check(cudaErrorInvalidValue, "head_xent: its scratch (a chunk of logits) exceeds 2^56 bytes");
        return;
    }
    size_t bytes = (size_t)words * sizeof(A), dbl = (size_t)N * sizeof(double);
    size_t dpos = (bytes + 15) / 16 * 16;
    char *buf = (char *)pipit__cuda_scratch(dpos + dbl, "head_xent: scratch");
    if (!buf) return;
    A *Z = (A *)buf, *m = Z + N * C, *zt = m + N, *hbuf = zt + N, *wbuf = hbuf + N * d;
    double *sum = (double *)(buf + dpos);
    cudaStream_t s = pipit__cuda_stream();
    const A *ha = hx_wide<T>(h, N * d, hbuf, what);
    for (int64_t c = 0; ha && c < nc; c++) {
        int64_t v0 = c * C, vn = V - v0 < C ? V - v0 : C;
        const A *wc = hx_wide<T>(W + v0 * d, vn * d, wbuf, what);
        if (!wc) break;
        pipit__cuda_gemm(gemm_dt<A>(), 0, 1, 1, N, vn, d, ha, d, 0, wc, d, 0, Z, vn, 0, 0);
        hx_lse_chunk_kernel<A><<<pipit_warp_rows_grid(N), PIPIT_WARP_ROWS_THREADS, 0, s>>>(m, sum, zt, Z, t, N, vn, v0,
                                                                                            off, c == 0);
        if (PIPIT_CUDA_LAUNCHED(what)) break;
        if (c == nc - 1) {
            hx_lse_final_kernel<A><<<pipit_grid_for(N, NTH), NTH, 0, s>>>(st, m, sum, zt, N);
            PIPIT_CUDA_LAUNCHED(what);
        }
    }
    (void)narrow;
    pipit__cuda_scratch_free(buf, "head_xent: scratch");
}

/* ------------------------------------------------------------ backward */

/* In place over the logits Z [N, vn] of classes [v0, v0 + vn):
 * dz = dlse exp((z - lse) - err) + dzt onehot(t - off), the CPU's
 * expression (sd [6, N]: lse, target logit, err, dlse, dzt, -). */
template <class A>
__global__ void hx_dz_kernel(A *Z, const A *sd, const int32_t *t, int64_t N, int64_t vn, int64_t v0, int64_t off) {
    PIPIT_GRID_STRIDE(e, N * vn) {
        int64_t r = e / vn, j = e % vn;
        A v = sd[3 * N + r] * pipit_dexp((Z[e] - sd[r]) - sd[2 * N + r]);
        if ((int64_t)t[r] - off == v0 + j) v += sd[4 * N + r];
        Z[e] = v;
    }
}

template <class T>
static void head_xent_bwd(void *out_, const void *h_, const void *W_, const int32_t *t, const void *sd_, int64_t N,
                          int64_t V, int64_t d, int64_t off, int64_t G) {
    typedef pipit_arith<T> A;
    const int narrow = sizeof(T) != sizeof(A);
    const T *h = (const T *)h_, *W = (const T *)W_;
    const A *sd = (const A *)sd_;
    A *part = (A *)out_;
    T *dW = (T *)out_ + G * N * d * (int64_t)(sizeof(A) / sizeof(T));
    const char *what = "head_xent (backward)";
    int64_t C = pipit__hx_chunk(N), nc = (V + C - 1) / C;
    /* scratch: Z [N, C] | (bf16) h [N, d] | W chunk [C, d] | dW chunk [C, d], all A (no int64
     * overflow, as the forward's) */
    int64_t words = N * C + (narrow ? N * d + 2 * C * d : 0);
    if (!hx_fits(words, sizeof(A))) {
        pipit__cuda_check(cudaErrorInvalidValue, "head_xent (backward): its scratch exceeds 2^56 bytes");
        return;
    }
    size_t bytes = (size_t)words * sizeof(A);
    A *Z = (A *)pipit__cuda_scratch(bytes, "head_xent (backward): scratch");
    if (!Z) return;
    A *hbuf = Z + N * C, *wbuf = hbuf + N * d, *dwbuf = wbuf + C * d;
    cudaStream_t s = pipit__cuda_stream();
    const A *ha = hx_wide<T>(h, N * d, hbuf, what);
    int bad = !ha;
    for (int64_t g = 0; !bad && g < G; g++) {
        int64_t c0, c1;
        pipit__hx_group_chunks(nc, G, g, &c0, &c1);
        A *P = part + g * N * d;
        if (c1 <= c0) /* no chunk (never, as G <= the chunk count): a zero partial */
            bad = pipit__cuda_check(cudaMemsetAsync(P, 0, sizeof(A) * (size_t)(N * d), s), what);
        for (int64_t c = c0; !bad && c < c1; c++) {
            int64_t v0 = c * C, vn = V - v0 < C ? V - v0 : C;
            const A *wc = hx_wide<T>(W + v0 * d, vn * d, wbuf, what);
            if (!wc) {
                bad = 1;
                break;
            }
            pipit__cuda_gemm(gemm_dt<A>(), 0, 1, 1, N, vn, d, ha, d, 0, wc, d, 0, Z, vn, 0, 0);
            hx_dz_kernel<A><<<pipit_grid_for(N * vn, NTH), NTH, 0, s>>>(Z, sd, t, N, vn, v0, off);
            if ((bad = PIPIT_CUDA_LAUNCHED(what)) != 0) break;
            if (narrow) {
                pipit__cuda_gemm(gemm_dt<A>(), 1, 0, 1, vn, d, N, Z, vn, 0, ha, d, 0, dwbuf, d, 0, 0);
                hx_narrow_kernel<T><<<pipit_grid_for(vn * d, NTH), NTH, 0, s>>>(dW + v0 * d, dwbuf, vn * d);
                if ((bad = PIPIT_CUDA_LAUNCHED(what)) != 0) break;
            } else {
                pipit__cuda_gemm(gemm_dt<A>(), 1, 0, 1, vn, d, N, Z, vn, 0, ha, d, 0, (A *)(void *)(dW + v0 * d), d,
                                 0, 0);
            }
            pipit__cuda_gemm(gemm_dt<A>(), 0, 0, 1, N, d, vn, Z, vn, 0, wc, d, 0, P, d, 0, c > c0);
        }
    }
    pipit__cuda_scratch_free(Z, "head_xent (backward): scratch");
}

/* ------------------------------------------------------------ dh */

/* dh [n] = the G partials [G, n] of A added in group order, rounded once. */
template <class T>
__global__ void hx_dh_kernel(T *dh, const pipit_arith<T> *part, int64_t G, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) {
        pipit_arith<T> s = part[i];
        for (int64_t g = 1; g < G; g++) s += part[g * n + i];
        dh[i] = (T)s;
    }
}

template <class T>
static void head_xent_dh(void *dh, const void *bwd, int64_t G, int64_t n) {
    hx_dh_kernel<T><<<pipit_grid_for(n, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)dh,
                                                                              (const pipit_arith<T> *)bwd, G, n);
    PIPIT_CUDA_LAUNCHED("head_xent_dh");
}

/* ------------------------------------------------------------ launchers */

void pipit__cuda_head_xent(pipit_dtype dt, void *st, const void *h, const void *W, const int32_t *t, int64_t N,
                           int64_t V, int64_t d, int64_t off) {
    if (N <= 0) return;
    if (V <= 0 || d < 0) {
        pipit__cuda_check(cudaErrorInvalidValue, "head_xent: no classes");
        return;
    }
    PIPIT_BY_DTYPE(dt, head_xent, st, h, W, t, N, V, d, off);
}

void pipit__cuda_head_xent_bwd(pipit_dtype dt, void *out, const void *h, const void *W, const int32_t *t,
                               const void *sd, int64_t N, int64_t V, int64_t d, int64_t off, int64_t G) {
    if (V <= 0 || d <= 0) return; /* an empty output */
    if (N <= 0) { /* no rows: every gradient is zero */
        size_t es = pipit__dtype_size(dt);
        pipit__cuda_check(cudaMemsetAsync(out, 0, es * (size_t)(V * d), pipit__cuda_stream()), "head_xent (backward)");
        return;
    }
    if (G < 1 || G > PIPIT_HX_MAX_GROUPS) {
        pipit__cuda_check(cudaErrorInvalidValue, "head_xent (backward): group count out of range");
        return;
    }
    PIPIT_BY_DTYPE(dt, head_xent_bwd, out, h, W, t, sd, N, V, d, off, G);
}

void pipit__cuda_head_xent_dh(pipit_dtype dt, void *dh, const void *bwd, int64_t G, int64_t n) {
    if (n <= 0) return;
    PIPIT_BY_DTYPE(dt, head_xent_dh, dh, bwd, G, n);
}
