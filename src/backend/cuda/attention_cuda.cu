/*
 * attention_cuda.cu — causal self-attention on the GPU, forward and
 * backward, flash style: no [T,T] matrix per head ever reaches global
 * memory. The layout and math are the CPU's (backend/cpu/kernels_impl.h):
 * qkv [B,T,3C] holds q | k | v, head h uses columns h*D..h*D+D-1 of each,
 * D = C/H, scores q.k * (T)(1/sqrt(D)), causal softmax with the max
 * subtracted and the sum in double, out [B,T,C] heads concatenated.
 *
 * Tiled kernels (f32 with D <= 128, f64 with D <= 64; D is padded with
 * zeros to DP = 32, 64 or 128): a block of 16x16 threads owns a tile, each
 * thread a 2-D micro-tile strided by 16 (rows ty+16i, columns tx+16j), so
 * shared-memory reads are broadcast or consecutive (rows padded to DP+1).
 *   forward   one block per (b,h) and query tile; key tiles stream through
 *             shared memory; online softmax (running max m, double sum l)
 *             with the output accumulator in registers.
 *   dq        one block per query tile: pass 1 over the key tiles recomputes
 *             m, l and delta = sum_j p_j dP_j (dP = dout.v) without any
 *             output, pass 2 forms dS = P (dP - delta) scale and dq = dS k.
 *             It saves (m, 1/l, delta) per query: 3 values per row.
 *   dk, dv    one block per key tile, looping over the query tiles at or
 *             after it: P from the saved statistics, dv = P^T dout,
 *             dk = dS^T q.
 * Every output element belongs to one thread and is summed in a fixed
 * order, so there are no atomics and the bits depend only on the shapes.
 * Shared memory stays under the 48 KB of static shared memory that every
 * sm_75+ device offers. Other sizes run simple kernels (a thread per query
 * or key row, the same formulas, global-memory accumulators).
 */
#include <cmath>

#include "backend/cuda/ops_cuda.cuh"

#define TG 16        /* the thread grid of a tile is TG x TG */
#define NT (TG * TG) /* threads per block of the tiled kernels */

/* ------------------------------------------------------------ tile helpers */

/* sm[r][d] = rows r0.. of a strided array (row t at base + t*ld, D valid
 * columns), zero outside [0, Tn) x [0, D). All threads of the block load. */
template <class T, int R, int DP, int LDS>
__device__ __forceinline__ void load_rows(T (*sm)[LDS], const T *base, int64_t ld, int64_t r0, int64_t Tn, int D) {
    for (int e = threadIdx.x; e < R * DP; e += NT) {
        int r = e / DP, d = e % DP;
        int64_t t = r0 + r;
        sm[r][d] = t < Tn && d < D ? base[t * ld + d] : (T)0;
    }
}

/* s[i][j] = sum_d a[ty+TG*i][d] * b[tx+TG*j][d], d ascending. */
template <class T, int MA, int MB, int DP, int LDA, int LDB>
__device__ __forceinline__ void tile_dot(T (&s)[MA][MB], const T (*a)[LDA], const T (*b)[LDB], int ty, int tx) {
#pragma unroll
    for (int i = 0; i < MA; i++)
#pragma unroll
        for (int j = 0; j < MB; j++) s[i][j] = 0;
#pragma unroll 8
    for (int d = 0; d < DP; d++) {
        T av[MA], bv[MB];
#pragma unroll
        for (int i = 0; i < MA; i++) av[i] = a[ty + TG * i][d];
#pragma unroll
        for (int j = 0; j < MB; j++) bv[j] = b[tx + TG * j][d];
#pragma unroll
        for (int i = 0; i < MA; i++)
#pragma unroll
            for (int j = 0; j < MB; j++) s[i][j] += av[i] * bv[j];
    }
}

/* o[i][j] += sum_k p[ty+TG*i][k] * v[k][tx+TG*j], k ascending over NK. */
template <class T, int MA, int MD, int NK, int LDP, int LDV>
__device__ __forceinline__ void tile_acc(T (&o)[MA][MD], const T (*p)[LDP], const T (*v)[LDV], int ty, int tx) {
#pragma unroll 4
    for (int k = 0; k < NK; k++) {
        T pv[MA], vv[MD];
#pragma unroll
        for (int i = 0; i < MA; i++) pv[i] = p[ty + TG * i][k];
#pragma unroll
        for (int j = 0; j < MD; j++) vv[j] = v[k][tx + TG * j];
#pragma unroll
        for (int i = 0; i < MA; i++)
#pragma unroll
            for (int j = 0; j < MD; j++) o[i][j] += pv[i] * vv[j];
    }
}

template <class T>
__device__ __forceinline__ T neg_inf() {
    return -(T)INFINITY;
}

/* One query row's scores against a key tile: scaled, with the keys the row
 * may not see (later than qi: causal; past the end) set to -inf; returns
 * the row's max over the tile, reduced over the TG lanes that share the row. */
template <class T, int MK>
__device__ __forceinline__ T mask_scale_rowmax(T (&s)[MK], int64_t qi, int64_t k0, int tx, int64_t Tn, T scale) {
    T mx = neg_inf<T>();
#pragma unroll
    for (int j = 0; j < MK; j++) {
        const int64_t kj = k0 + tx + TG * j;
        s[j] = kj <= qi && kj < Tn ? s[j] * scale : neg_inf<T>();
        mx = s[j] > mx ? s[j] : mx;
    }
    return pipit_group_max(mx, TG);
}

/* ------------------------------------------------------------ forward */

template <class T, int BQ, int BK, int DP>
struct fwd_tiles {
    T q[BQ][DP + 1];
    T k[BK][DP + 1];
    T v[BK][DP];
    T p[BQ][BK + 1];
};

/* grid (B*H, query tiles), the last query tiles (the most keys) first. */
template <class T, int BQ, int BK, int DP>
__global__ void __launch_bounds__(NT) attn_fwd_tiled(T *out, const T *qkv, int64_t Tn, int64_t C, int64_t H, int D,
                                                     T scale) {
    constexpr int MQ = BQ / TG, MK = BK / TG, MD = DP / TG;
    static_assert(sizeof(fwd_tiles<T, BQ, BK, DP>) <= 48 * 1024, "static shared memory over 48 KB");
    __shared__ fwd_tiles<T, BQ, BK, DP> sm;
    const int ty = threadIdx.x / TG, tx = threadIdx.x % TG;
    const int64_t b = blockIdx.x / H, h = blockIdx.x % H, ld = 3 * C;
    const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * BQ;
    const int64_t qend = q0 + BQ < Tn ? q0 + BQ : Tn; /* keys < qend can be seen */
    const T *base = qkv + b * Tn * ld + h * D;         /* q of (b, t=0, h) */
    load_rows<T, BQ, DP, DP + 1>(sm.q, base, ld, q0, Tn, D);
    T o[MQ][MD], m[MQ];
    double l[MQ];
#pragma unroll
    for (int i = 0; i < MQ; i++) {
        m[i] = neg_inf<T>();
        l[i] = 0;
#pragma unroll
        for (int j = 0; j < MD; j++) o[i][j] = 0;
    }
    for (int64_t k0 = 0; k0 < qend; k0 += BK) {
        __syncthreads(); /* the previous tile's readers are done */
        load_rows<T, BK, DP, DP + 1>(sm.k, base + C, ld, k0, Tn, D);
        load_rows<T, BK, DP, DP>(sm.v, base + 2 * C, ld, k0, Tn, D);
        __syncthreads();
        T s[MQ][MK];
        tile_dot<T, MQ, MK, DP>(s, sm.q, sm.k, ty, tx);
#pragma unroll
        for (int i = 0; i < MQ; i++) {
            /* A row's keys are spread over the 16 tx lanes of one half-warp.
             * Key 0 is in the first tile and visible to every row, so m is
             * finite from the first tile on and alpha = exp(-inf) = 0 then. */
            const T mx = mask_scale_rowmax<T, MK>(s[i], q0 + ty + TG * i, k0, tx, Tn, scale);
            const T mnew = m[i] > mx ? m[i] : mx;
            const T alpha = pipit_dexp(m[i] - mnew);
            double ps = 0;
#pragma unroll
            for (int j = 0; j < MK; j++) {
                s[i][j] = pipit_dexp(s[i][j] - mnew); /* masked: exp(-inf) = 0 */
                ps += (double)s[i][j];
            }
            l[i] = l[i] * (double)alpha + pipit_group_sum(ps, TG);
#pragma unroll
            for (int j = 0; j < MD; j++) o[i][j] *= alpha;
            m[i] = mnew;
#pragma unroll
            for (int j = 0; j < MK; j++) sm.p[ty + TG * i][tx + TG * j] = s[i][j];
        }
        __syncthreads();
        tile_acc<T, MQ, MD, BK>(o, sm.p, sm.v, ty, tx);
    }
#pragma unroll
    for (int i = 0; i < MQ; i++) {
        const int64_t qi = q0 + ty + TG * i;
        if (qi >= Tn) continue;
        const T inv = (T)(1.0 / l[i]);
        T *orow = out + (b * Tn + qi) * C + h * D;
#pragma unroll
        for (int j = 0; j < MD; j++)
            if (tx + TG * j < D) orow[tx + TG * j] = o[i][j] * inv;
    }
}

/* ------------------------------------------------------------ backward: dq */

template <class T, int BQ, int BK, int DP>
struct dq_tiles {
    T q[BQ][DP + 1];
    T dout[BQ][DP + 1];
    T k[BK][DP + 1];
    T v[BK][DP + 1];
    T ds[BQ][BK + 1];
};

/* stats: [3][B*H*Tn] = m, 1/l and delta per (b,h,query). */
template <class T, int BQ, int BK, int DP>
__global__ void __launch_bounds__(NT) attn_dq_tiled(T *dqkv, T *stats, const T *qkv, const T *dout, int64_t Tn,
                                                    int64_t C, int64_t H, int D, T scale) {
    constexpr int MQ = BQ / TG, MK = BK / TG, MD = DP / TG;
    static_assert(sizeof(dq_tiles<T, BQ, BK, DP>) <= 48 * 1024, "static shared memory over 48 KB");
    __shared__ dq_tiles<T, BQ, BK, DP> sm;
    const int ty = threadIdx.x / TG, tx = threadIdx.x % TG;
    const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, ld = 3 * C, N = (int64_t)gridDim.x * Tn;
    const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * BQ;
    const int64_t qend = q0 + BQ < Tn ? q0 + BQ : Tn;
    const T *base = qkv + b * Tn * ld + h * D;
    load_rows<T, BQ, DP, DP + 1>(sm.q, base, ld, q0, Tn, D);
    load_rows<T, BQ, DP, DP + 1>(sm.dout, dout + b * Tn * C + h * D, C, q0, Tn, D);
    T m[MQ], il[MQ], delta[MQ];
    double l[MQ], dl[MQ]; /* dl = sum_j exp(s_j - m) dP_j */
#pragma unroll
    for (int i = 0; i < MQ; i++) {
        m[i] = neg_inf<T>();
        l[i] = dl[i] = 0;
    }
    T s[MQ][MK], dp[MQ][MK];
    /* pass 1: the softmax statistics and delta */
    for (int64_t k0 = 0; k0 < qend; k0 += BK) {
        __syncthreads();
        load_rows<T, BK, DP, DP + 1>(sm.k, base + C, ld, k0, Tn, D);
        load_rows<T, BK, DP, DP + 1>(sm.v, base + 2 * C, ld, k0, Tn, D);
        __syncthreads();
        tile_dot<T, MQ, MK, DP>(s, sm.q, sm.k, ty, tx);
        tile_dot<T, MQ, MK, DP>(dp, sm.dout, sm.v, ty, tx);
#pragma unroll
        for (int i = 0; i < MQ; i++) {
            const T mx = mask_scale_rowmax<T, MK>(s[i], q0 + ty + TG * i, k0, tx, Tn, scale);
            const T mnew = m[i] > mx ? m[i] : mx;
            const T alpha = pipit_dexp(m[i] - mnew);
            double ps = 0, pd = 0;
#pragma unroll
            for (int j = 0; j < MK; j++) {
                const T p = pipit_dexp(s[i][j] - mnew);
                ps += (double)p;
                pd += (double)p * (double)dp[i][j];
            }
            l[i] = l[i] * (double)alpha + pipit_group_sum(ps, TG);
            dl[i] = dl[i] * (double)alpha + pipit_group_sum(pd, TG);
            m[i] = mnew;
        }
    }
#pragma unroll
    for (int i = 0; i < MQ; i++) {
        const int64_t qi = q0 + ty + TG * i;
        il[i] = (T)(1.0 / l[i]);
        delta[i] = (T)(dl[i] / l[i]);
        if (tx == 0 && qi < Tn) {
            stats[bh * Tn + qi] = m[i];
            stats[N + bh * Tn + qi] = il[i];
            stats[2 * N + bh * Tn + qi] = delta[i];
        }
    }
    /* pass 2: dS = P (dP - delta) scale, dq = dS k */
    T dq[MQ][MD];
#pragma unroll
    for (int i = 0; i < MQ; i++)
#pragma unroll
        for (int j = 0; j < MD; j++) dq[i][j] = 0;
    for (int64_t k0 = 0; k0 < qend; k0 += BK) {
        __syncthreads();
        load_rows<T, BK, DP, DP + 1>(sm.k, base + C, ld, k0, Tn, D);
        load_rows<T, BK, DP, DP + 1>(sm.v, base + 2 * C, ld, k0, Tn, D);
        __syncthreads();
        tile_dot<T, MQ, MK, DP>(s, sm.q, sm.k, ty, tx);
        tile_dot<T, MQ, MK, DP>(dp, sm.dout, sm.v, ty, tx);
#pragma unroll
        for (int i = 0; i < MQ; i++) {
            const int64_t qi = q0 + ty + TG * i;
#pragma unroll
            for (int j = 0; j < MK; j++) {
                const int64_t kj = k0 + tx + TG * j;
                T ds = 0;
                if (kj <= qi && kj < Tn && qi < Tn) {
                    const T p = pipit_dexp(s[i][j] * scale - m[i]) * il[i];
                    ds = p * (dp[i][j] - delta[i]) * scale;
                }
                sm.ds[ty + TG * i][tx + TG * j] = ds;
            }
        }
        __syncthreads();
        tile_acc<T, MQ, MD, BK>(dq, sm.ds, sm.k, ty, tx);
    }
#pragma unroll
    for (int i = 0; i < MQ; i++) {
        const int64_t qi = q0 + ty + TG * i;
        if (qi >= Tn) continue;
        T *row = dqkv + (b * Tn + qi) * ld + h * D;
#pragma unroll
        for (int j = 0; j < MD; j++)
            if (tx + TG * j < D) row[tx + TG * j] = dq[i][j];
    }
}

/* ------------------------------------------------------------ backward: dk, dv */

template <class T, int BK, int BQ, int DP>
struct dkv_tiles {
    T k[BK][DP + 1];
    T v[BK][DP + 1];
    T q[BQ][DP + 1];
    T dout[BQ][DP + 1];
    T pt[BK][BQ + 1];  /* P^T of the tile */
    T dst[BK][BQ + 1]; /* dS^T */
    T m[BQ], il[BQ], delta[BQ];
};

/* grid (B*H, key tiles), the first key tiles (the most queries) first.
 * Threads own keys ty+16i (rows) and queries tx+16j (columns). */
template <class T, int BK, int BQ, int DP>
__global__ void __launch_bounds__(NT) attn_dkv_tiled(T *dqkv, const T *stats, const T *qkv, const T *dout,
                                                     int64_t Tn, int64_t C, int64_t H, int D, T scale) {
    constexpr int MK = BK / TG, MQ = BQ / TG, MD = DP / TG;
    static_assert(sizeof(dkv_tiles<T, BK, BQ, DP>) <= 48 * 1024, "static shared memory over 48 KB");
    __shared__ dkv_tiles<T, BK, BQ, DP> sm;
    const int ty = threadIdx.x / TG, tx = threadIdx.x % TG;
    const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, ld = 3 * C, N = (int64_t)gridDim.x * Tn;
    const int64_t k0 = (int64_t)blockIdx.y * BK;
    const T *base = qkv + b * Tn * ld + h * D, *dbase = dout + b * Tn * C + h * D;
    load_rows<T, BK, DP, DP + 1>(sm.k, base + C, ld, k0, Tn, D);
    load_rows<T, BK, DP, DP + 1>(sm.v, base + 2 * C, ld, k0, Tn, D);
    T dk[MK][MD], dv[MK][MD];
#pragma unroll
    for (int i = 0; i < MK; i++)
#pragma unroll
        for (int j = 0; j < MD; j++) dk[i][j] = dv[i][j] = 0;
    for (int64_t q0 = k0 / BQ * BQ; q0 < Tn; q0 += BQ) {
        __syncthreads();
        load_rows<T, BQ, DP, DP + 1>(sm.q, base, ld, q0, Tn, D);
        load_rows<T, BQ, DP, DP + 1>(sm.dout, dbase, C, q0, Tn, D);
        for (int x = threadIdx.x; x < BQ; x += NT) {
            const int64_t qx = q0 + x;
            const int ok = qx < Tn;
            sm.m[x] = ok ? stats[bh * Tn + qx] : (T)0;
            sm.il[x] = ok ? stats[N + bh * Tn + qx] : (T)0;
            sm.delta[x] = ok ? stats[2 * N + bh * Tn + qx] : (T)0;
        }
        __syncthreads();
        T st[MK][MQ], dpt[MK][MQ];
        tile_dot<T, MK, MQ, DP>(st, sm.k, sm.q, ty, tx);
        tile_dot<T, MK, MQ, DP>(dpt, sm.v, sm.dout, ty, tx);
#pragma unroll
        for (int i = 0; i < MK; i++) {
            const int64_t kj = k0 + ty + TG * i;
#pragma unroll
            for (int j = 0; j < MQ; j++) {
                const int x = tx + TG * j;
                const int64_t qj = q0 + x;
                T p = 0, ds = 0;
                if (kj <= qj && qj < Tn && kj < Tn) {
                    p = pipit_dexp(st[i][j] * scale - sm.m[x]) * sm.il[x];
                    ds = p * (dpt[i][j] - sm.delta[x]) * scale;
                }
                sm.pt[ty + TG * i][x] = p;
                sm.dst[ty + TG * i][x] = ds;
            }
        }
        __syncthreads();
        tile_acc<T, MK, MD, BQ>(dv, sm.pt, sm.dout, ty, tx);
        tile_acc<T, MK, MD, BQ>(dk, sm.dst, sm.q, ty, tx);
    }
#pragma unroll
    for (int i = 0; i < MK; i++) {
        const int64_t kj = k0 + ty + TG * i;
        if (kj >= Tn) continue;
        T *row = dqkv + (b * Tn + kj) * ld + C + h * D;
#pragma unroll
        for (int j = 0; j < MD; j++)
            if (tx + TG * j < D) {
                row[tx + TG * j] = dk[i][j];
                row[C + tx + TG * j] = dv[i][j];
            }
    }
}

/* ------------------------------------------------------------ simple kernels */

/* Any D and dtype: a thread per (b,h,row), accumulators in global memory
 * (the row's own slice of the output), formulas as in the tiled kernels. */

#define ROWS_STRIDE(e, n)                                                         \
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < (n); \
         e += (int64_t)gridDim.x * blockDim.x)

template <class T>
__device__ T dot_n(const T *a, const T *b, int D) {
    T s = 0;
    for (int d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

template <class T>
__global__ void attn_fwd_simple(T *out, const T *qkv, int64_t BH, int64_t Tn, int64_t C, int64_t H, int D, T scale) {
    ROWS_STRIDE(e, BH * Tn) {
        const int64_t t = e % Tn, bh = e / Tn, b = bh / H, h = bh % H, ld = 3 * C;
        const T *base = qkv + b * Tn * ld + h * D, *q = base + t * ld;
        T *o = out + (b * Tn + t) * C + h * D;
        for (int d = 0; d < D; d++) o[d] = 0;
        T m = neg_inf<T>();
        double l = 0;
        for (int64_t j = 0; j <= t; j++) {
            const T s = dot_n(q, base + j * ld + C, D) * scale, *vj = base + j * ld + 2 * C;
            if (s > m) { /* rescale what was accumulated under the old max */
                const T f = pipit_dexp(m - s);
                for (int d = 0; d < D; d++) o[d] *= f;
                l *= (double)f;
                m = s;
            }
            const T p = pipit_dexp(s - m);
            l += (double)p;
            for (int d = 0; d < D; d++) o[d] += p * vj[d];
        }
        const T inv = (T)(1.0 / l);
        for (int d = 0; d < D; d++) o[d] *= inv;
    }
}

template <class T>
__global__ void attn_dq_simple(T *dqkv, T *stats, const T *qkv, const T *dout, int64_t BH, int64_t Tn, int64_t C,
                               int64_t H, int D, T scale) {
    const int64_t N = BH * Tn;
    ROWS_STRIDE(e, N) {
        const int64_t t = e % Tn, bh = e / Tn, b = bh / H, h = bh % H, ld = 3 * C;
        const T *base = qkv + b * Tn * ld + h * D, *q = base + t * ld, *dO = dout + (b * Tn + t) * C + h * D;
        T m = neg_inf<T>();
        double l = 0, dl = 0;
        for (int64_t j = 0; j <= t; j++) {
            const T *kj = base + j * ld + C;
            const T s = dot_n(q, kj, D) * scale, dp = dot_n(dO, kj + C, D);
            if (s > m) {
                const T f = pipit_dexp(m - s);
                l *= (double)f;
                dl *= (double)f;
                m = s;
            }
            const T p = pipit_dexp(s - m);
            l += (double)p;
            dl += (double)p * (double)dp;
        }
        const T il = (T)(1.0 / l), delta = (T)(dl / l);
        stats[e] = m;
        stats[N + e] = il;
        stats[2 * N + e] = delta;
        T *dq = dqkv + (b * Tn + t) * ld + h * D;
        for (int d = 0; d < D; d++) dq[d] = 0;
        for (int64_t j = 0; j <= t; j++) {
            const T *kj = base + j * ld + C;
            const T s = dot_n(q, kj, D) * scale, dp = dot_n(dO, kj + C, D);
            const T p = pipit_dexp(s - m) * il, ds = p * (dp - delta) * scale;
            for (int d = 0; d < D; d++) dq[d] += ds * kj[d];
        }
    }
}

template <class T>
__global__ void attn_dkv_simple(T *dqkv, const T *stats, const T *qkv, const T *dout, int64_t BH, int64_t Tn,
                                int64_t C, int64_t H, int D, T scale) {
    const int64_t N = BH * Tn;
    ROWS_STRIDE(e, N) {
        const int64_t j = e % Tn, bh = e / Tn, b = bh / H, h = bh % H, ld = 3 * C;
        const T *base = qkv + b * Tn * ld + h * D, *kj = base + j * ld + C, *vj = kj + C;
        T *dk = dqkv + (b * Tn + j) * ld + C + h * D, *dv = dk + C;
        for (int d = 0; d < D; d++) dk[d] = dv[d] = 0;
        for (int64_t t = j; t < Tn; t++) {
            const T *q = base + t * ld, *dO = dout + (b * Tn + t) * C + h * D;
            const int64_t se = bh * Tn + t;
            const T s = dot_n(q, kj, D) * scale, dp = dot_n(dO, vj, D);
            const T p = pipit_dexp(s - stats[se]) * stats[N + se];
            const T ds = p * (dp - stats[2 * N + se]) * scale;
            for (int d = 0; d < D; d++) {
                dk[d] += ds * q[d];
                dv[d] += p * dO[d];
            }
        }
    }
}

/* ------------------------------------------------------------ dispatch */

/* Tile sizes per (dtype, padded D): forward (query x key tile), dq (query x
 * key), dk/dv (key x query). Chosen to stay under 48 KB of static shared
 * memory (static_asserts above) with 256 threads; f32 D=64 (GPT-2) runs
 * 64x32, 32x32, 32x32. */
template <class T, int DP>
struct attn_cfg;
template <> struct attn_cfg<float, 32> { enum { FQ = 64, FK = 32, QQ = 64, QK = 32, KK = 32, KQ = 32 }; };
template <> struct attn_cfg<float, 64> { enum { FQ = 64, FK = 32, QQ = 32, QK = 32, KK = 32, KQ = 32 }; };
template <> struct attn_cfg<float, 128> { enum { FQ = 32, FK = 16, QQ = 16, QK = 16, KK = 16, KQ = 16 }; };
template <> struct attn_cfg<double, 32> { enum { FQ = 32, FK = 32, QQ = 32, QK = 16, KK = 16, KQ = 16 }; };
template <> struct attn_cfg<double, 64> { enum { FQ = 32, FK = 16, QQ = 16, QK = 16, KK = 16, KQ = 16 }; };

/* Padded head size of the tiled kernels for (dtype, D); 0: the simple ones. */
template <class T>
static int tiled_dp(int64_t D) {
    const int64_t max_dp = sizeof(T) == 8 ? 64 : 128;
    for (int dp = 32; dp <= max_dp; dp *= 2)
        if (D <= dp) return dp;
    return 0;
}

/* Whether a grid of (BH, ceil(Tn / tile)) blocks is launchable. */
static bool grid_ok(int64_t BH, int64_t Tn, int tile) {
    return BH <= INT32_MAX && (Tn + tile - 1) / tile <= 65535;
}

static unsigned rows_grid(int64_t n) {
    int64_t b = (n + 127) / 128;
    return (unsigned)(b > (1 << 20) ? (1 << 20) : b);
}

template <class T, int DP>
static bool fwd_tiled(T *out, const T *qkv, int64_t BH, int64_t Tn, int64_t C, int64_t H, int D, T scale) {
    typedef attn_cfg<T, DP> cfg;
    if (!grid_ok(BH, Tn, cfg::FQ)) return false;
    dim3 grid((unsigned)BH, (unsigned)((Tn + cfg::FQ - 1) / cfg::FQ));
    attn_fwd_tiled<T, cfg::FQ, cfg::FK, DP><<<grid, NT, 0, pipit__cuda_stream()>>>(out, qkv, Tn, C, H, D, scale);
    return true;
}

template <class T, int DP>
static bool bwd_tiled(T *dqkv, T *stats, const T *qkv, const T *dout, int64_t BH, int64_t Tn, int64_t C, int64_t H,
                      int D, T scale) {
    typedef attn_cfg<T, DP> cfg;
    if (!grid_ok(BH, Tn, cfg::QQ) || !grid_ok(BH, Tn, cfg::KK)) return false;
    cudaStream_t s = pipit__cuda_stream();
    dim3 gq((unsigned)BH, (unsigned)((Tn + cfg::QQ - 1) / cfg::QQ));
    attn_dq_tiled<T, cfg::QQ, cfg::QK, DP><<<gq, NT, 0, s>>>(dqkv, stats, qkv, dout, Tn, C, H, D, scale);
    if (PIPIT_CUDA_LAUNCHED("attn_dqkv: dq")) return true;
    dim3 gk((unsigned)BH, (unsigned)((Tn + cfg::KK - 1) / cfg::KK));
    attn_dkv_tiled<T, cfg::KK, cfg::KQ, DP><<<gk, NT, 0, s>>>(dqkv, stats, qkv, dout, Tn, C, H, D, scale);
    return true;
}

template <class T>
static void attention(T *out, const T *qkv, int64_t B, int64_t Tn, int64_t C, int64_t H) {
    const int64_t D = C / H, BH = B * H;
    const T scale = (T)(1.0 / sqrt((double)D));
    bool done = false;
    switch (tiled_dp<T>(D)) {
    case 32: done = fwd_tiled<T, 32>(out, qkv, BH, Tn, C, H, (int)D, scale); break;
    case 64: done = fwd_tiled<T, 64>(out, qkv, BH, Tn, C, H, (int)D, scale); break;
    case 128: done = fwd_tiled<T, sizeof(T) == 8 ? 64 : 128>(out, qkv, BH, Tn, C, H, (int)D, scale); break;
    default: break;
    }
    if (!done)
        attn_fwd_simple<T><<<rows_grid(BH * Tn), 128, 0, pipit__cuda_stream()>>>(out, qkv, BH, Tn, C, H, (int)D,
                                                                                 scale);
    PIPIT_CUDA_LAUNCHED("attention");
}

template <class T>
static void attention_dqkv(T *dqkv, const T *qkv, const T *dout, int64_t B, int64_t Tn, int64_t C, int64_t H) {
    const int64_t D = C / H, BH = B * H;
    const T scale = (T)(1.0 / sqrt((double)D));
    T *stats = (T *)pipit__cuda_scratch((size_t)(3 * BH * Tn) * sizeof(T), "attn_dqkv: scratch");
    if (!stats) return;
    bool done = false;
    switch (tiled_dp<T>(D)) {
    case 32: done = bwd_tiled<T, 32>(dqkv, stats, qkv, dout, BH, Tn, C, H, (int)D, scale); break;
    case 64: done = bwd_tiled<T, 64>(dqkv, stats, qkv, dout, BH, Tn, C, H, (int)D, scale); break;
    case 128: done = bwd_tiled<T, sizeof(T) == 8 ? 64 : 128>(dqkv, stats, qkv, dout, BH, Tn, C, H, (int)D, scale); break;
    default: break;
    }
    if (!done) {
        cudaStream_t s = pipit__cuda_stream();
        attn_dq_simple<T><<<rows_grid(BH * Tn), 128, 0, s>>>(dqkv, stats, qkv, dout, BH, Tn, C, H, (int)D, scale);
        if (!PIPIT_CUDA_LAUNCHED("attn_dqkv: dq"))
            attn_dkv_simple<T><<<rows_grid(BH * Tn), 128, 0, s>>>(dqkv, stats, qkv, dout, BH, Tn, C, H, (int)D,
                                                                  scale);
    }
    PIPIT_CUDA_LAUNCHED("attn_dqkv");
    pipit__cuda_scratch_free(stats, "attn_dqkv: scratch");
}

void pipit__cuda_attention(pipit_dtype dt, void *out, const void *qkv, int64_t B, int64_t T, int64_t C, int64_t H) {
    if (B <= 0 || T <= 0 || C <= 0 || H <= 0) return;
    if (dt == PIPIT_F64) attention<double>((double *)out, (const double *)qkv, B, T, C, H);
    else attention<float>((float *)out, (const float *)qkv, B, T, C, H);
}

void pipit__cuda_attention_dqkv(pipit_dtype dt, void *dqkv, const void *qkv, const void *dout, int64_t B, int64_t T,
                                int64_t C, int64_t H) {
    if (B <= 0 || T <= 0 || C <= 0 || H <= 0) return;
    if (dt == PIPIT_F64)
        attention_dqkv<double>((double *)dqkv, (const double *)qkv, (const double *)dout, B, T, C, H);
    else
        attention_dqkv<float>((float *)dqkv, (const float *)qkv, (const float *)dout, B, T, C, H);
}
