/*
 * reduce_cuda.cu — the reductions: column sums (sum_rows), the whole sum,
 * sum_to (the gradient of a broadcast), max along an axis and its
 * gradient, softmax / log-softmax along the last axis and their gradients,
 * and cross-entropy rows. The math is the CPU's (backend/cpu/kernels_impl.h):
 * sums in double, maxima and exponentials in the element type.
 *
 * Determinism: no atomics. Every output is owned by one thread, one warp or
 * one block, whose reduction order is fixed by the shapes: lane-strided
 * partials, xor butterflies (pipit_group_sum: the same bits on every lane),
 * the warps' values in warp order, and column sums by the fixed tree of
 * colsum_cuda.cuh. A maximum is exact, so its order matters only for which
 * NaN wins; the gradient of a max goes to the first maximal element, as on
 * the CPU.
 */
#include <cmath>

#include "backend/cuda/colsum_cuda.cuh"
#include "ir/graph.h"

#define NTH PIPIT_CUDA_THREADS

/* ------------------------------------------------------------ column sums */

template <class T>
struct col_of_x { /* sum_rows: x[r, c] */
    const T *x;
    int64_t C;
    __device__ double operator()(int64_t r, int64_t c) const { return (double)x[r * C + c]; }
};

template <class T>
static void sum_rows(void *out, const void *x, int64_t rows, int64_t C) {
    colsum<T>((T *)out, col_of_x<T>{(const T *)x, C}, rows, C, 1.0, "sum_rows");
}

void pipit__cuda_sum_rows(pipit_dtype dt, void *out, const void *x, int64_t rows, int64_t C) {
    PIPIT_BY_WIDE(dt, sum_rows, out, x, rows, C);
}

/* ------------------------------------------------------------ sum of everything */

#define SUM_THREADS 1024

/* out [1] = (T)(scale * sum of x [n]) in double: one block, thread t sums
 * x[t], x[t+1024], ... in order, then a fixed halving tree. */
template <class T>
__global__ void sum_all_kernel(T *out, const T *x, int64_t n, double scale) {
    __shared__ double sh[SUM_THREADS];
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += SUM_THREADS) s += (double)x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = SUM_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (T)(sh[0] * scale);
}

void pipit__cuda_sum_all(pipit_dtype dt, void *out, const void *x, int64_t n, double scale) {
    PIPIT_LAUNCH_WIDE(dt, sum_all_kernel, 1, SUM_THREADS, (T *)out, (const T *)x, n, scale);
    PIPIT_CUDA_LAUNCHED("sum");
}

/* ------------------------------------------------------------ sum_to */

/* x [d] (contiguous, strides xs) reduced over the axes where out's stride
 * is 0. Output element o has the kept axes' indices of o (dims od, out's
 * order), input element r of o the summed axes' indices of r (dims sd,
 * ascending = the CPU's order). */
struct sum_to_args {
    int64_t od[4], sd[4], xs[4];
};

/* Offset in x of output element o and input element r of it. */
__device__ __forceinline__ int64_t sum_to_at(const sum_to_args &g, int64_t o, int64_t r) {
    int64_t off = 0;
    for (int a = 3; a >= 0; a--) {
        int64_t i = g.od[a] > 1 ? o % g.od[a] : r % g.sd[a];
        if (g.od[a] > 1) o /= g.od[a];
        else r /= g.sd[a];
        off += i * g.xs[a];
    }
    return off;
}

/* The last axis kept: output elements are columns, the summed elements
 * rows of the column-sum tree (neighbouring columns are neighbours in x). */
template <class T>
struct col_of_sum_to {
    const T *x;
    sum_to_args g;
    __device__ double operator()(int64_t r, int64_t c) const { return (double)x[sum_to_at(g, c, r)]; }
};

/* The last axis summed: a warp per output element; lane l sums the
 * elements l, l+32, ... of the output's inputs in order, then a butterfly. */
template <class T>
__global__ void sum_to_warp_kernel(T *out, const T *x, sum_to_args g, int64_t nout, int64_t nin, double scale) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(o, nout) {
        double s = 0;
        for (int64_t r = lane; r < nin; r += 32) s += (double)x[sum_to_at(g, o, r)];
        s = pipit_group_sum(s, 32);
        if (lane == 0) out[o] = (T)(s * scale);
    }
}

template <class T>
static void sum_to(void *out, const void *x, sum_to_args g, int64_t nout, int64_t nin, double scale) {
    if (g.od[3] > 1) { /* the last axis kept */
        colsum<T>((T *)out, col_of_sum_to<T>{(const T *)x, g}, nin, nout, scale, "sum_to");
        return;
    }
    sum_to_warp_kernel<T><<<pipit_warp_rows_grid(nout), PIPIT_WARP_ROWS_THREADS, 0, pipit__cuda_stream()>>>(
        (T *)out, (const T *)x, g, nout, nin, scale);
    PIPIT_CUDA_LAUNCHED("sum_to");
}

void pipit__cuda_sum_to(pipit_dtype dt, void *out, const void *x, const int64_t dims[4], const int64_t so[4],
                        double scale) {
    sum_to_args g;
    int64_t nout = 1, nin = 1, st = 1;
    for (int a = 3; a >= 0; a--) {
        g.od[a] = so[a] ? dims[a] : 1;
        g.sd[a] = so[a] ? 1 : dims[a];
        g.xs[a] = st;
        st *= dims[a];
        nout *= g.od[a];
        nin *= g.sd[a];
    }
    if (nout <= 0) return;
    PIPIT_BY_WIDE(dt, sum_to, out, x, g, nout, nin, scale);
}

/* ------------------------------------------------------------ max along an axis */

/* A thread per output (o, c) of x [outer, n, inner]: the CPU's loop, j
 * ascending with a strict comparison (so the same value, and the first
 * maximal j). */
template <class T>
__global__ void max_axis_kernel(T *out, const T *x, int64_t outer, int64_t n, int64_t inner) {
    PIPIT_GRID_STRIDE(i, outer * inner) {
        const T *base = x + i / inner * n * inner + i % inner;
        T m = base[0];
        for (int64_t j = 1; j < n; j++) m = base[j * inner] > m ? base[j * inner] : m;
        out[i] = m;
    }
}

template <class T>
__global__ void max_dx_kernel(T *dx, const T *x, const T *d, int64_t outer, int64_t n, int64_t inner) {
    PIPIT_GRID_STRIDE(i, outer * inner) {
        int64_t at = i / inner * n * inner + i % inner, arg = 0;
        const T *base = x + at;
        T m = base[0];
        for (int64_t j = 1; j < n; j++)
            if (base[j * inner] > m) m = base[j * inner], arg = j;
        for (int64_t j = 0; j < n; j++) dx[at + j * inner] = j == arg ? d[i] : (T)0;
    }
}

void pipit__cuda_max_axis(pipit_dtype dt, void *out, const void *x, int64_t outer, int64_t n, int64_t inner) {
    if (outer * inner <= 0 || n <= 0) return;
    PIPIT_LAUNCH_WIDE(dt, max_axis_kernel, pipit_grid_for(outer * inner, NTH), NTH, (T *)out, (const T *)x, outer, n,
                   inner);
    PIPIT_CUDA_LAUNCHED("max");
}

void pipit__cuda_max_dx(pipit_dtype dt, void *dx, const void *x, const void *d, int64_t outer, int64_t n,
                        int64_t inner) {
    if (outer * inner <= 0 || n <= 0) return;
    PIPIT_LAUNCH_WIDE(dt, max_dx_kernel, pipit_grid_for(outer * inner, NTH), NTH, (T *)dx, (const T *)x, (const T *)d,
                   outer, n, inner);
    PIPIT_CUDA_LAUNCHED("max_dx");
}

/* ------------------------------------------------------------ softmax */

/* A warp per row of [rows, C] (lane-strided, butterflies): the row's max;
 * each lane writes and later rescales only its own elements. */
template <class T>
__device__ __forceinline__ T warp_row_max(const T *x, int64_t C, int lane) {
    T m = x[0];
    for (int64_t c = lane; c < C; c += 32) m = x[c] > m ? x[c] : m;
    return pipit_group_max(m, 32);
}

/* y = exp(x - max) / sum, the sum (of the rounded exponentials) in double */
template <class T>
__global__ void softmax_kernel(T *y, const T *x, int64_t rows, int64_t C) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, rows) {
        const T *xr = x + r * C;
        T *yr = y + r * C;
        const T m = warp_row_max(xr, C, lane);
        double s = 0;
        for (int64_t c = lane; c < C; c += 32) {
            yr[c] = pipit_dexp(xr[c] - m);
            s += (double)yr[c];
        }
        const T inv = (T)(1.0 / pipit_group_sum(s, 32));
        for (int64_t c = lane; c < C; c += 32) yr[c] *= inv;
    }
}

/* y = x - (max + log(sum exp(x - max))) */
template <class T>
__global__ void log_softmax_kernel(T *y, const T *x, int64_t rows, int64_t C) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, rows) {
        const T *xr = x + r * C;
        const T m = warp_row_max(xr, C, lane);
        double s = 0;
        for (int64_t c = lane; c < C; c += 32) s += (double)pipit_dexp(xr[c] - m);
        const T lse = (T)((double)m + log(pipit_group_sum(s, 32)));
        for (int64_t c = lane; c < C; c += 32) y[r * C + c] = xr[c] - lse;
    }
}

/* softmax: dx = y (d - sum(d y)); log-softmax: dx = d - exp(y) sum(d) */
template <class T, bool LOG>
__device__ __forceinline__ void softmax_dx_rows(T *dx, const T *y, const T *d, int64_t rows, int64_t C) {
    const int lane = threadIdx.x % 32;
    PIPIT_WARP_ROW_LOOP(r, rows) {
        const T *yr = y + r * C, *dr = d + r * C;
        double s = 0;
        for (int64_t c = lane; c < C; c += 32) s += LOG ? (double)dr[c] : (double)yr[c] * (double)dr[c];
        const T sum = (T)pipit_group_sum(s, 32);
        for (int64_t c = lane; c < C; c += 32)
            dx[r * C + c] = LOG ? dr[c] - pipit_dexp(yr[c]) * sum : yr[c] * (dr[c] - sum);
    }
}

template <class T>
__global__ void softmax_dx_kernel(T *dx, const T *y, const T *d, int64_t rows, int64_t C) {
    softmax_dx_rows<T, false>(dx, y, d, rows, C);
}
template <class T>
__global__ void log_softmax_dx_kernel(T *dx, const T *y, const T *d, int64_t rows, int64_t C) {
    softmax_dx_rows<T, true>(dx, y, d, rows, C);
}

void pipit__cuda_softmax(pipit_dtype dt, int op, void *out, const void *x, const void *d, int64_t rows, int64_t C) {
    if (rows <= 0 || C <= 0) return;
    const unsigned grid = pipit_warp_rows_grid(rows), block = PIPIT_WARP_ROWS_THREADS;
    switch (op) {
    case PIPIT_OP_SOFTMAX: PIPIT_LAUNCH_WIDE(dt, softmax_kernel, grid, block, (T *)out, (const T *)x, rows, C); break;
    case PIPIT_OP_LOG_SOFTMAX:
        PIPIT_LAUNCH_WIDE(dt, log_softmax_kernel, grid, block, (T *)out, (const T *)x, rows, C);
        break;
    case PIPIT_OP_SOFTMAX_DX:
        PIPIT_LAUNCH_WIDE(dt, softmax_dx_kernel, grid, block, (T *)out, (const T *)x, (const T *)d, rows, C);
        break;
    case PIPIT_OP_LOG_SOFTMAX_DX:
        PIPIT_LAUNCH_WIDE(dt, log_softmax_dx_kernel, grid, block, (T *)out, (const T *)x, (const T *)d, rows, C);
        break;
    default: pipit__cuda_check(cudaErrorInvalidValue, "softmax: not a softmax op"); return;
    }
    PIPIT_CUDA_LAUNCHED(pipit__ops[op].name);
}

/* ------------------------------------------------------------ cross-entropy */

#define XENT_THREADS 256

/* Block-wide max and double sum with a fixed tree: warp butterflies, then
 * the warps' values in warp order (every thread gets the result). */
template <class V>
__device__ V block_max(V v, V *sh) {
    v = pipit_group_max(v, 32);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    V m = sh[0];
    for (int w = 1; w < XENT_THREADS / 32; w++) m = sh[w] > m ? sh[w] : m;
    __syncthreads(); /* sh is reused by the caller's next reduction */
    return m;
}

__device__ double block_sum(double v, double *sh) {
    v = pipit_group_sum(v, 32);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    double s = sh[0];
    for (int w = 1; w < XENT_THREADS / 32; w++) s += sh[w];
    __syncthreads();
    return s;
}

/* Max of row x [V] (V >= 1) over the block. */
template <class T>
__device__ T row_max(const T *x, int64_t V, T *sh) {
    T m = x[0];
    for (int64_t j = threadIdx.x; j < V; j += XENT_THREADS) m = x[j] > m ? x[j] : m;
    return block_max(m, sh);
}

/* loss[r] = logsumexp(logits[r,:]) - logits[r, t]: max subtracted, the sum
 * of exponentials in double (the CPU's pipit__xent_rows); one block a row. */
template <class T>
__global__ void xent_rows_kernel(T *loss, const T *logits, const int32_t *targets, int64_t V) {
    __shared__ T shm[XENT_THREADS / 32];
    __shared__ double shs[XENT_THREADS / 32];
    int64_t r = blockIdx.x;
    const T *x = logits + r * V;
    T m = row_max(x, V, shm);
    double s = 0;
    for (int64_t j = threadIdx.x; j < V; j += XENT_THREADS) s += (double)pipit_dexp(x[j] - m);
    s = block_sum(s, shs);
    if (threadIdx.x != 0) return;
    int32_t t = targets[r];
    loss[r] = t >= 0 && t < V ? (T)((double)m + log(s) - (double)x[t]) : (T)NAN;
}

/* dlogits[r,:] = dloss[r] * (softmax(x[r,:]) - onehot(t)): g = exp(x - m)
 * rounded to T, its double sum, f = dloss/sum, g*f, minus dloss at t (the
 * CPU's pipit__xent_dlogits). Each thread rescales the elements it wrote. */
template <class T>
__global__ void xent_dlogits_kernel(T *dlogits, const T *logits, const int32_t *targets, const T *dloss, int64_t V) {
    __shared__ T shm[XENT_THREADS / 32];
    __shared__ double shs[XENT_THREADS / 32];
    int64_t r = blockIdx.x;
    const T *x = logits + r * V;
    T *g = dlogits + r * V;
    T m = row_max(x, V, shm);
    double s = 0;
    for (int64_t j = threadIdx.x; j < V; j += XENT_THREADS) {
        T e = pipit_dexp(x[j] - m);
        g[j] = e;
        s += (double)e;
    }
    s = block_sum(s, shs);
    int32_t t = targets[r];
    T dl = dloss[r], f = (T)((double)dl / s);
    int ok = t >= 0 && t < V;
    for (int64_t j = threadIdx.x; j < V; j += XENT_THREADS) {
        T v = g[j] * f;
        if (j == t) v -= dl;
        g[j] = ok ? v : (T)NAN;
    }
}

void pipit__cuda_xent_rows(pipit_dtype dt, void *loss, const void *logits, const int32_t *targets, int64_t rows,
                           int64_t V) {
    if (rows <= 0) return;
    if (V <= 0 || rows > INT32_MAX) {
        pipit__cuda_check(cudaErrorInvalidValue, "xent_rows: empty rows or more than 2^31 rows");
        return;
    }
    PIPIT_LAUNCH_WIDE(dt, xent_rows_kernel, (unsigned)rows, XENT_THREADS, (T *)loss, (const T *)logits, targets, V);
    PIPIT_CUDA_LAUNCHED("xent_rows");
}

void pipit__cuda_xent_dlogits(pipit_dtype dt, void *dlogits, const void *logits, const int32_t *targets,
                              const void *dloss, int64_t rows, int64_t V) {
    if (rows <= 0 || V <= 0) return;
    if (rows > INT32_MAX) {
        pipit__cuda_check(cudaErrorInvalidValue, "xent_dlogits: more than 2^31 rows");
        return;
    }
    PIPIT_LAUNCH_WIDE(dt, xent_dlogits_kernel, (unsigned)rows, XENT_THREADS, (T *)dlogits, (const T *)logits, targets,
                   (const T *)dloss, V);
    PIPIT_CUDA_LAUNCHED("xent_dlogits");
}
