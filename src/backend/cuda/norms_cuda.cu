/*
 * norms_cuda.cu — LayerNorm and RMSNorm over the last axis, forward and the
 * two gradient ops of each (dx per row, dw over rows). The math is the
 * CPU's (backend/cpu/kernels_impl.h): row statistics and the sums of the
 * dx formulas in double, rounded to the element type once.
 *
 * Tiling: a warp per row (8 rows a block, a grid-stride loop over rows);
 * lanes take every 32nd column and the row's sums are an xor butterfly, so
 * every lane holds the same bits. dw: the row statistics once per row into
 * scratch, then the column-sum tree of colsum_cuda.cuh. No atomics: every
 * output has one owner and an order fixed by the shapes.
 */
#include <cmath>

#include "backend/cuda/colsum_cuda.cuh"

/* ------------------------------------------------------------ layernorm */

/* Mean and 1/sqrt(var + eps) of row x [C] in double, two passes (the
 * CPU's ln_stats), lane-strided partials and a fixed butterfly; rounded
 * to T. Every lane returns the same bits. */
template <class T>
__device__ void ln_stats(const T *x, int64_t C, double eps, int lane, T *mean, T *rstd) {
    double s = 0;
    for (int64_t c = lane; c < C; c += 32) s += (double)x[c];
    double m = pipit_group_sum(s, 32) / (double)C;
    double v = 0;
    for (int64_t c = lane; c < C; c += 32) {
        double d = (double)x[c] - m;
        v += d * d;
    }
    v = pipit_group_sum(v, 32);
    *mean = (T)m;
    *rstd = (T)(1.0 / sqrt(v / (double)C + eps));
}

template <class T>
__global__ void layernorm_kernel(T *out, const T *x, const T *w, const T *b, int64_t rows, int64_t C, double eps) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, rows) {
        const T *xr = x + r * C;
        T *o = out + r * C;
        T m, rs;
        ln_stats(xr, C, eps, lane, &m, &rs);
        for (int64_t c = lane; c < C; c += 32) o[c] = (xr[c] - m) * rs * w[c] + b[c];
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g*xhat)), g = dout*w (the CPU's
 * pipit__layernorm_dx; both means from double sums). */
template <class T>
__global__ void layernorm_dx_kernel(T *dx, const T *x, const T *w, const T *dout, int64_t rows, int64_t C,
                                    double eps) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, rows) {
        const T *xr = x + r * C, *dr = dout + r * C;
        T *o = dx + r * C;
        T m, rs;
        ln_stats(xr, C, eps, lane, &m, &rs);
        double sg = 0, sgx = 0;
        for (int64_t c = lane; c < C; c += 32) {
            T xh = (xr[c] - m) * rs, g = dr[c] * w[c];
            sg += (double)g;
            sgx += (double)g * (double)xh;
        }
        sg = pipit_group_sum(sg, 32);
        sgx = pipit_group_sum(sgx, 32);
        T mg = (T)(sg / (double)C), mgx = (T)(sgx / (double)C);
        for (int64_t c = lane; c < C; c += 32) {
            T xh = (xr[c] - m) * rs, g = dr[c] * w[c];
            o[c] = rs * (g - mg - xh * mgx);
        }
    }
}

/* Row statistics alone (for layernorm dw): mean[r], rstd[r]. */
template <class T>
__global__ void ln_stats_kernel(T *mean, T *rstd, const T *x, int64_t rows, int64_t C, double eps) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, rows) {
        T m, rs;
        ln_stats(x + r * C, C, eps, lane, &m, &rs);
        if (lane == 0) {
            mean[r] = m;
            rstd[r] = rs;
        }
    }
}

void pipit__cuda_layernorm(pipit_dtype dt, void *out, const void *x, const void *w, const void *b, int64_t rows,
                           int64_t C, double eps) {
    if (rows <= 0 || C <= 0) return;
    PIPIT_LAUNCH_WIDE(dt, layernorm_kernel, pipit_warp_rows_grid(rows), PIPIT_WARP_ROWS_THREADS, (T *)out, (const T *)x,
                   (const T *)w, (const T *)b, rows, C, eps);
    PIPIT_CUDA_LAUNCHED("layernorm");
}

void pipit__cuda_layernorm_dx(pipit_dtype dt, void *dx, const void *x, const void *w, const void *dout,
                              int64_t rows, int64_t C, double eps) {
    if (rows <= 0 || C <= 0) return;
    PIPIT_LAUNCH_WIDE(dt, layernorm_dx_kernel, pipit_warp_rows_grid(rows), PIPIT_WARP_ROWS_THREADS, (T *)dx,
                   (const T *)x, (const T *)w, (const T *)dout, rows, C, eps);
    PIPIT_CUDA_LAUNCHED("ln_dx");
}

template <class T>
struct col_of_ln_dw { /* layernorm dw: dout[r,c] * xhat[r,c], formed in T as the CPU does */
    const T *x, *dout, *mean, *rstd;
    int64_t C;
    __device__ double operator()(int64_t r, int64_t c) const {
        int64_t i = r * C + c;
        return (double)(dout[i] * ((x[i] - mean[r]) * rstd[r]));
    }
};

template <class T>
static void layernorm_dw(void *dw, const void *x, const void *dout, int64_t rows, int64_t C, double eps) {
    if (rows <= 0) {
        colsum<T>((T *)dw, col_of_ln_dw<T>{}, 0, C, 1.0, "ln_dw"); /* zeros */
        return;
    }
    T *stats = (T *)pipit__cuda_scratch((size_t)(2 * rows) * sizeof(T), "ln_dw: scratch");
    if (!stats) return;
    ln_stats_kernel<T><<<pipit_warp_rows_grid(rows), PIPIT_WARP_ROWS_THREADS, 0, pipit__cuda_stream()>>>(
        stats, stats + rows, (const T *)x, rows, C, eps);
    if (!PIPIT_CUDA_LAUNCHED("ln_dw: stats"))
        colsum<T>((T *)dw, col_of_ln_dw<T>{(const T *)x, (const T *)dout, stats, stats + rows, C}, rows, C, 1.0,
                  "ln_dw");
    pipit__cuda_scratch_free(stats, "ln_dw: scratch");
}
void pipit__cuda_layernorm_dw(pipit_dtype dt, void *dw, const void *x, const void *dout, int64_t rows, int64_t C,
                              double eps) {
    if (C <= 0) return;
    PIPIT_BY_WIDE(dt, layernorm_dw, dw, x, dout, rows, C, eps);
}

/* ------------------------------------------------------------ RMSNorm */

/* 1/sqrt(mean(x^2) + eps) of row x [C]: the squares in double, a fixed
 * butterfly, the root in double, rounded once to T (the CPU's rms_rstd). */
template <class T>
__device__ T rms_rstd(const T *x, int64_t C, double eps, int lane) {
    double s = 0;
    for (int64_t c = lane; c < C; c += 32) s += (double)x[c] * (double)x[c];
    return (T)(1.0 / sqrt(pipit_group_sum(s, 32) / (double)C + eps));
}

/* out = w * (x * r) (Hugging Face's order) */
template <class T>
__global__ void rmsnorm_kernel(T *out, const T *x, const T *w, int64_t rows, int64_t C, double eps) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, rows) {
        const T *xr = x + r * C;
        T *o = out + r * C;
        const T rs = rms_rstd(xr, C, eps, lane);
        for (int64_t c = lane; c < C; c += 32) o[c] = w[c] * (xr[c] * rs);
    }
}

/* dx = r (g - x * k), g = dout * w, k = r^2 mean(g x) (the CPU's
 * pipit__rmsnorm_dx: the sum in double, k rounded once). */
template <class T>
__global__ void rmsnorm_dx_kernel(T *dx, const T *x, const T *w, const T *dout, int64_t rows, int64_t C,
                                  double eps) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, rows) {
        const T *xr = x + r * C, *dr = dout + r * C;
        T *o = dx + r * C;
        const T rs = rms_rstd(xr, C, eps, lane);
        double sgx = 0;
        for (int64_t c = lane; c < C; c += 32) sgx += (double)(dr[c] * w[c]) * (double)xr[c];
        sgx = pipit_group_sum(sgx, 32);
        const T k = (T)((double)rs * (double)rs * sgx / (double)C);
        for (int64_t c = lane; c < C; c += 32) o[c] = rs * (dr[c] * w[c] - xr[c] * k);
    }
}

/* The row factors alone (for dw): rstd[r]. */
template <class T>
__global__ void rms_rstd_kernel(T *rstd, const T *x, int64_t rows, int64_t C, double eps) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, rows) {
        const T rs = rms_rstd(x + r * C, C, eps, lane);
        if (lane == 0) rstd[r] = rs;
    }
}

template <class T>
struct col_of_rms_dw { /* dout[r,c] * (x[r,c] * r_r), formed in T as the CPU does */
    const T *x, *dout, *rstd;
    int64_t C;
    __device__ double operator()(int64_t r, int64_t c) const {
        int64_t i = r * C + c;
        return (double)(dout[i] * (x[i] * rstd[r]));
    }
};

void pipit__cuda_rmsnorm(pipit_dtype dt, void *out, const void *x, const void *w, int64_t rows, int64_t C,
                         double eps) {
    if (rows <= 0 || C <= 0) return;
    PIPIT_LAUNCH_WIDE(dt, rmsnorm_kernel, pipit_warp_rows_grid(rows), PIPIT_WARP_ROWS_THREADS, (T *)out, (const T *)x,
                   (const T *)w, rows, C, eps);
    PIPIT_CUDA_LAUNCHED("rmsnorm");
}

void pipit__cuda_rmsnorm_dx(pipit_dtype dt, void *dx, const void *x, const void *w, const void *dout, int64_t rows,
                            int64_t C, double eps) {
    if (rows <= 0 || C <= 0) return;
    PIPIT_LAUNCH_WIDE(dt, rmsnorm_dx_kernel, pipit_warp_rows_grid(rows), PIPIT_WARP_ROWS_THREADS, (T *)dx, (const T *)x,
                   (const T *)w, (const T *)dout, rows, C, eps);
    PIPIT_CUDA_LAUNCHED("rms_dx");
}

template <class T>
static void rmsnorm_dw(void *dw, const void *x, const void *dout, int64_t rows, int64_t C, double eps) {
    if (rows <= 0) {
        colsum<T>((T *)dw, col_of_rms_dw<T>{}, 0, C, 1.0, "rms_dw"); /* zeros */
        return;
    }
    T *rstd = (T *)pipit__cuda_scratch((size_t)rows * sizeof(T), "rms_dw: scratch");
    if (!rstd) return;
    rms_rstd_kernel<T><<<pipit_warp_rows_grid(rows), PIPIT_WARP_ROWS_THREADS, 0, pipit__cuda_stream()>>>(
        rstd, (const T *)x, rows, C, eps);
    if (!PIPIT_CUDA_LAUNCHED("rms_dw: rstd"))
        colsum<T>((T *)dw, col_of_rms_dw<T>{(const T *)x, (const T *)dout, rstd, C}, rows, C, 1.0, "rms_dw");
    pipit__cuda_scratch_free(rstd, "rms_dw: scratch");
}
void pipit__cuda_rmsnorm_dw(pipit_dtype dt, void *dw, const void *x, const void *dout, int64_t rows, int64_t C,
                            double eps) {
    if (C <= 0) return;
    PIPIT_BY_WIDE(dt, rmsnorm_dw, dw, x, dout, rows, C, eps);
}
