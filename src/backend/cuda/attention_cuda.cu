/*
 * attention_cuda.cu — attention on the GPU, forward and backward, flash
 * style: no [T,S] matrix per head ever reaches global memory. One kernel
 * family serves every layout (pipit_cuda_attn, the CPU's pipit__attn_dims):
 * GPT-2's packed causal qkv [B,T,3C] and separate q [B,T,Hq*D], k, v
 * [B,S,Hkv*D] with grouped-query heads (q head h reads kv head h / (Hq/Hkv)),
 * causal or not (S != T when not), any scale. The math is the CPU's
 * (backend/cpu/kernels_impl.h): scores q.k * (T)scale, softmax with the max
 * subtracted and the sum in double, outputs and gradients at the row
 * strides of their tensors.
 *
 * Tiled kernels (f32 with D <= 128, f64 with D <= 64; D is padded with
 * zeros to DP = 32, 64 or 128): a block of 16x16 threads owns a tile, each
 * thread a 2-D micro-tile strided by 16 (rows ty+16i, columns tx+16j), so
 * shared-memory reads are broadcast or consecutive (rows padded to DP+1).
 *   forward   one block per (b, q head) and query tile; key tiles stream
 *             through shared memory; online softmax (running max m, double
 *             sum l) with the output accumulator in registers.
 *   dq        one block per (b, q head) and query tile: pass 1 over the key
 *             tiles recomputes m, l and delta = sum_j p_j dP_j (dP = dout.v)
 *             without any output, pass 2 forms dS = P (dP - delta) scale and
 *             dq = dS k. It saves (m, 1/l, delta) per query: 3 values a row.
 *   dk, dv    one block per (b, kv head) and key tile, looping over the kv
 *             head's query heads in order and, for each, over the query
 *             tiles that can see the keys: P from the saved statistics,
 *             dv += P^T dout, dk += dS^T q.
 * Every output element belongs to one thread and is summed in a fixed
 * order (a kv head's dk and dv over (query head, query) ascending, the
 * CPU's order), so there are no atomics and the bits depend only on the
 * shapes. Shared memory stays under the 48 KB of static shared memory that
 * every sm_75+ device offers. Other sizes run simple kernels (a thread per
 * query or key row, the same formulas, global-memory accumulators).
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

/* Whether query qi sees key kj: a key that exists, (causal) not later, and
 * (packed documents: db, the sequence's ids, else NULL) of the query's
 * document; a padding row qi >= Tq sees as without documents. */
__device__ __forceinline__ bool visible(const pipit_cuda_attn &a, const int32_t *db, int64_t qi, int64_t kj) {
    return kj < a.Tk && (!a.causal || kj <= qi) && (!db || qi >= a.Tq || db[kj] == db[qi]);
}

/* Packed documents: sequence b's ids, or NULL without documents. */
__device__ __forceinline__ const int32_t *doc_row(const pipit_cuda_attn &a, int64_t b) {
    return a.doc ? a.doc + b * a.Tq : nullptr;
}
/* The first token of token t's document (ids non-decreasing: a binary
 * search; a decreasing sequence, which pipit_step refuses, still stays in
 * bounds) and the end of it. */
__device__ __forceinline__ int64_t doc_begin(const int32_t *db, int64_t t) {
    int64_t lo = 0, hi = t;
    const int32_t x = db[t];
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (db[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}
__device__ __forceinline__ int64_t doc_end(const int32_t *db, int64_t t, int64_t T) {
    int64_t lo = t + 1, hi = T;
    const int32_t x = db[t];
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (db[mid] <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Where (b, head) of a problem starts: q and dout by query head h, k and v
 * by its kv head. */
struct heads_at {
    int64_t q, k, v, o;
};
__device__ __forceinline__ heads_at heads_of(const pipit_cuda_attn &a, int64_t b, int64_t h) {
    const int64_t g = h / (a.Hq / a.Hkv);
    return {b * a.Tq * a.ldq + h * a.D, b * a.Tk * a.ldk + g * a.D, b * a.Tk * a.ldv + g * a.D,
            b * a.Tq * a.ldo + h * a.D};
}

/* One query row's scores against a key tile: scaled, with the keys the row
 * may not see set to -inf; returns the row's max over the tile, reduced
 * over the TG lanes that share the row. */
template <class T, int MK>
__device__ __forceinline__ T mask_scale_rowmax(T (&s)[MK], const pipit_cuda_attn &a, const int32_t *db, int64_t qi,
                                               int64_t k0, int tx, T scale) {
    T mx = neg_inf<T>();
#pragma unroll
    for (int j = 0; j < MK; j++) {
        const int64_t kj = k0 + tx + TG * j;
        s[j] = visible(a, db, qi, kj) ? s[j] * scale : neg_inf<T>();
        mx = s[j] > mx ? s[j] : mx;
    }
    return pipit_group_max(mx, TG);
}

/* p and dS of a visible (query, key) pair from the raw score s = q.k, dP =
 * dout.v and the query row's saved m, 1/l and delta:
 * p = exp(s scale - m) / l, dS = p (dP - delta) scale. Returns dS. */
template <class T>
__device__ __forceinline__ T prob_ds(T s, T dp, T m, T il, T delta, T scale, T *p) {
    *p = pipit_dexp(s * scale - m) * il;
    return *p * (dp - delta) * scale;
}

/* Keys a query tile [q0, q0 + BQ) may see: [0, kend). */
__device__ __forceinline__ int64_t keys_end(const pipit_cuda_attn &a, int64_t q0, int BQ) {
    if (!a.causal) return a.Tk;
    return q0 + BQ < a.Tq ? q0 + BQ : a.Tq;
}
/* With documents the tile's keys are [kbeg, kend): from the key tile (of
 * BK) that holds its first query's document's start to the end of its last
 * query's document; the key tiles outside are wholly masked and skipped. */
__device__ __forceinline__ void doc_keys(const int32_t *db, const pipit_cuda_attn &a, int64_t q0, int BQ, int BK,
                                         int64_t *kbeg, int64_t *kend) {
    if (!db) return;
    const int64_t ql = (q0 + BQ < a.Tq ? q0 + BQ : a.Tq) - 1, e = doc_end(db, ql, a.Tq);
    *kbeg = doc_begin(db, q0) / BK * BK;
    *kend = e < *kend ? e : *kend;
}
/* The online softmax's reference max: a row whose keys so far are all
 * masked (packed documents: a tile before its document) has mnew = -inf;
 * 0 then keeps exp(-inf - 0) = 0 instead of exp(NaN). Finite: mnew. */
template <class T>
__device__ __forceinline__ T softmax_ref(T mnew) {
    return mnew == neg_inf<T>() ? (T)0 : mnew;
}

/* ------------------------------------------------------------ forward */

template <class T, int BQ, int BK, int DP>
struct fwd_tiles {
    T q[BQ][DP + 1];
    T k[BK][DP + 1];
    T v[BK][DP];
    T p[BQ][BK + 1];
};

/* grid (B*Hq, query tiles), the last query tiles (the most keys when
 * causal) first. */
template <class T, int BQ, int BK, int DP>
__global__ void __launch_bounds__(NT) attn_fwd_tiled(T *out, const T *q, const T *k, const T *v, pipit_cuda_attn a,
                                                     T scale) {
    constexpr int MQ = BQ / TG, MK = BK / TG, MD = DP / TG;
    static_assert(sizeof(fwd_tiles<T, BQ, BK, DP>) <= 48 * 1024, "static shared memory over 48 KB");
    __shared__ fwd_tiles<T, BQ, BK, DP> sm;
    const int ty = threadIdx.x / TG, tx = threadIdx.x % TG, D = (int)a.D;
    const heads_at at = heads_of(a, blockIdx.x / a.Hq, blockIdx.x % a.Hq);
    const int32_t *db = doc_row(a, blockIdx.x / a.Hq);
    const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * BQ;
    int64_t kbeg = 0, kend = keys_end(a, q0, BQ);
    doc_keys(db, a, q0, BQ, BK, &kbeg, &kend);
    load_rows<T, BQ, DP, DP + 1>(sm.q, q + at.q, a.ldq, q0, a.Tq, D);
    T o[MQ][MD], m[MQ];
    double l[MQ];
#pragma unroll
    for (int i = 0; i < MQ; i++) {
        m[i] = neg_inf<T>();
        l[i] = 0;
#pragma unroll
        for (int j = 0; j < MD; j++) o[i][j] = 0;
    }
    for (int64_t k0 = kbeg; k0 < kend; k0 += BK) {
        __syncthreads(); /* the previous tile's readers are done */
        load_rows<T, BK, DP, DP + 1>(sm.k, k + at.k, a.ldk, k0, a.Tk, D);
        load_rows<T, BK, DP, DP>(sm.v, v + at.v, a.ldv, k0, a.Tk, D);
        __syncthreads();
        T s[MQ][MK];
        tile_dot<T, MQ, MK, DP>(s, sm.q, sm.k, ty, tx);
#pragma unroll
        for (int i = 0; i < MQ; i++) {
            /* A row's keys are spread over the 16 tx lanes of one half-warp.
             * Key 0 is in the first tile and visible to every row, so m is
             * finite from the first tile on and alpha = exp(-inf) = 0 then
             * (with documents from the tile of its document's start on:
             * softmax_ref until then). */
            const T mx = mask_scale_rowmax<T, MK>(s[i], a, db, q0 + ty + TG * i, k0, tx, scale);
            const T mnew = m[i] > mx ? m[i] : mx, mref = softmax_ref(mnew);
            const T alpha = pipit_dexp(m[i] - mref);
            double ps = 0;
#pragma unroll
            for (int j = 0; j < MK; j++) {
                s[i][j] = pipit_dexp(s[i][j] - mref); /* masked: exp(-inf) = 0 */
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
        if (qi >= a.Tq) continue;
        const T inv = (T)(1.0 / l[i]);
        T *orow = out + at.o + qi * a.ldo;
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

/* Key tile k0 into shared memory (k and v rows of the kv head at kb, vb),
 * then the block's query rows against it: s = q.k, dp = dout.v. */
template <class T, int BQ, int BK, int DP>
__device__ __forceinline__ void dq_scores(dq_tiles<T, BQ, BK, DP> &sm, T (&s)[BQ / TG][BK / TG],
                                          T (&dp)[BQ / TG][BK / TG], const T *kb, const T *vb,
                                          const pipit_cuda_attn &a, int64_t k0, int ty, int tx) {
    __syncthreads(); /* the previous tile's readers are done */
    load_rows<T, BK, DP, DP + 1>(sm.k, kb, a.ldk, k0, a.Tk, (int)a.D);
    load_rows<T, BK, DP, DP + 1>(sm.v, vb, a.ldv, k0, a.Tk, (int)a.D);
    __syncthreads();
    tile_dot<T, BQ / TG, BK / TG, DP>(s, sm.q, sm.k, ty, tx);
    tile_dot<T, BQ / TG, BK / TG, DP>(dp, sm.dout, sm.v, ty, tx);
}

/* grid (B*Hq, query tiles); stats: [3][B*Hq*Tq] = m, 1/l and delta per
 * (b, q head, query). */
template <class T, int BQ, int BK, int DP>
__global__ void __launch_bounds__(NT) attn_dq_tiled(T *dq, T *stats, const T *q, const T *k, const T *v,
                                                    const T *dout, pipit_cuda_attn a, T scale) {
    constexpr int MQ = BQ / TG, MK = BK / TG, MD = DP / TG;
    static_assert(sizeof(dq_tiles<T, BQ, BK, DP>) <= 48 * 1024, "static shared memory over 48 KB");
    __shared__ dq_tiles<T, BQ, BK, DP> sm;
    const int ty = threadIdx.x / TG, tx = threadIdx.x % TG, D = (int)a.D;
    const int64_t bh = blockIdx.x, N = (int64_t)gridDim.x * a.Tq;
    const heads_at at = heads_of(a, bh / a.Hq, bh % a.Hq);
    const int32_t *db = doc_row(a, bh / a.Hq);
    const int64_t q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * BQ;
    int64_t kbeg = 0, kend = keys_end(a, q0, BQ);
    doc_keys(db, a, q0, BQ, BK, &kbeg, &kend);
    load_rows<T, BQ, DP, DP + 1>(sm.q, q + at.q, a.ldq, q0, a.Tq, D);
    load_rows<T, BQ, DP, DP + 1>(sm.dout, dout + at.o, a.ldo, q0, a.Tq, D);
    T m[MQ], il[MQ], delta[MQ];
    double l[MQ], dl[MQ]; /* dl = sum_j exp(s_j - m) dP_j */
#pragma unroll
    for (int i = 0; i < MQ; i++) {
        m[i] = neg_inf<T>();
        l[i] = dl[i] = 0;
    }
    T s[MQ][MK], dp[MQ][MK];
    /* pass 1: the softmax statistics and delta */
    for (int64_t k0 = kbeg; k0 < kend; k0 += BK) {
        dq_scores<T, BQ, BK, DP>(sm, s, dp, k + at.k, v + at.v, a, k0, ty, tx);
#pragma unroll
        for (int i = 0; i < MQ; i++) {
            const T mx = mask_scale_rowmax<T, MK>(s[i], a, db, q0 + ty + TG * i, k0, tx, scale);
            const T mnew = m[i] > mx ? m[i] : mx, mref = softmax_ref(mnew);
            const T alpha = pipit_dexp(m[i] - mref);
            double ps = 0, pd = 0;
#pragma unroll
            for (int j = 0; j < MK; j++) {
                const T p = pipit_dexp(s[i][j] - mref);
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
        if (tx == 0 && qi < a.Tq) {
            stats[bh * a.Tq + qi] = m[i];
            stats[N + bh * a.Tq + qi] = il[i];
            stats[2 * N + bh * a.Tq + qi] = delta[i];
        }
    }
    /* pass 2: dS = P (dP - delta) scale, dq = dS k */
    T acc[MQ][MD];
#pragma unroll
    for (int i = 0; i < MQ; i++)
#pragma unroll
        for (int j = 0; j < MD; j++) acc[i][j] = 0;
    for (int64_t k0 = kbeg; k0 < kend; k0 += BK) {
        dq_scores<T, BQ, BK, DP>(sm, s, dp, k + at.k, v + at.v, a, k0, ty, tx);
#pragma unroll
        for (int i = 0; i < MQ; i++) {
            const int64_t qi = q0 + ty + TG * i;
#pragma unroll
            for (int j = 0; j < MK; j++) {
                const int64_t kj = k0 + tx + TG * j;
                T p = 0, ds = 0;
                if (qi < a.Tq && visible(a, db, qi, kj)) ds = prob_ds(s[i][j], dp[i][j], m[i], il[i], delta[i], scale, &p);
                sm.ds[ty + TG * i][tx + TG * j] = ds;
            }
        }
        __syncthreads();
        tile_acc<T, MQ, MD, BK>(acc, sm.ds, sm.k, ty, tx);
    }
#pragma unroll
    for (int i = 0; i < MQ; i++) {
        const int64_t qi = q0 + ty + TG * i;
        if (qi >= a.Tq) continue;
        T *row = dq + at.q + qi * a.ldq;
#pragma unroll
        for (int j = 0; j < MD; j++)
            if (tx + TG * j < D) row[tx + TG * j] = acc[i][j];
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

/* grid (B*Hkv, key tiles), the first key tiles (the most queries when
 * causal) first. Threads own keys ty+16i (rows) and queries tx+16j
 * (columns). */
template <class T, int BK, int BQ, int DP>
__global__ void __launch_bounds__(NT) attn_dkv_tiled(T *dk, T *dv, const T *stats, const T *q, const T *k,
                                                     const T *v, const T *dout, pipit_cuda_attn a, T scale) {
    constexpr int MK = BK / TG, MQ = BQ / TG, MD = DP / TG;
    static_assert(sizeof(dkv_tiles<T, BK, BQ, DP>) <= 48 * 1024, "static shared memory over 48 KB");
    __shared__ dkv_tiles<T, BK, BQ, DP> sm;
    const int ty = threadIdx.x / TG, tx = threadIdx.x % TG, D = (int)a.D;
    const int64_t b = blockIdx.x / a.Hkv, rep = a.Hq / a.Hkv, h0 = blockIdx.x % a.Hkv * rep;
    const int64_t N = a.B * a.Hq * a.Tq, k0 = (int64_t)blockIdx.y * BK;
    const heads_at kv = heads_of(a, b, h0); /* k and v of the group */
    const int32_t *db = doc_row(a, b);
    /* the queries that may see the key tile: causal from its first key's
     * tile; with documents, from its first key's document's start to its
     * last key's document's end (the query tiles outside are skipped) */
    int64_t qbeg = a.causal ? k0 / BQ * BQ : 0, qend = a.Tq;
    if (db && k0 < a.Tk) {
        const int64_t kl = (k0 + BK < a.Tk ? k0 + BK : a.Tk) - 1, fb = doc_begin(db, k0) / BQ * BQ;
        qbeg = fb > qbeg ? fb : qbeg;
        qend = doc_end(db, kl, a.Tq);
    }
    load_rows<T, BK, DP, DP + 1>(sm.k, k + kv.k, a.ldk, k0, a.Tk, D);
    load_rows<T, BK, DP, DP + 1>(sm.v, v + kv.v, a.ldv, k0, a.Tk, D);
    T dka[MK][MD], dva[MK][MD];
#pragma unroll
    for (int i = 0; i < MK; i++)
#pragma unroll
        for (int j = 0; j < MD; j++) dka[i][j] = dva[i][j] = 0;
    for (int64_t h = h0; h < h0 + rep; h++) {
        const heads_at at = heads_of(a, b, h);
        const int64_t st = (b * a.Hq + h) * a.Tq; /* the head's statistics */
        for (int64_t q0 = qbeg; q0 < qend; q0 += BQ) {
            __syncthreads();
            load_rows<T, BQ, DP, DP + 1>(sm.q, q + at.q, a.ldq, q0, a.Tq, D);
            load_rows<T, BQ, DP, DP + 1>(sm.dout, dout + at.o, a.ldo, q0, a.Tq, D);
            for (int x = threadIdx.x; x < BQ; x += NT) {
                const int64_t qx = q0 + x;
                const int ok = qx < a.Tq;
                sm.m[x] = ok ? stats[st + qx] : (T)0;
                sm.il[x] = ok ? stats[N + st + qx] : (T)0;
                sm.delta[x] = ok ? stats[2 * N + st + qx] : (T)0;
            }
            __syncthreads();
            T s[MK][MQ], dpt[MK][MQ];
            tile_dot<T, MK, MQ, DP>(s, sm.k, sm.q, ty, tx);
            tile_dot<T, MK, MQ, DP>(dpt, sm.v, sm.dout, ty, tx);
#pragma unroll
            for (int i = 0; i < MK; i++) {
                const int64_t kj = k0 + ty + TG * i;
#pragma unroll
                for (int j = 0; j < MQ; j++) {
                    const int x = tx + TG * j;
                    const int64_t qj = q0 + x;
                    T p = 0, ds = 0;
                    if (qj < a.Tq && visible(a, db, qj, kj))
                        ds = prob_ds(s[i][j], dpt[i][j], sm.m[x], sm.il[x], sm.delta[x], scale, &p);
                    sm.pt[ty + TG * i][x] = p;
                    sm.dst[ty + TG * i][x] = ds;
                }
            }
            __syncthreads();
            tile_acc<T, MK, MD, BQ>(dva, sm.pt, sm.dout, ty, tx);
            tile_acc<T, MK, MD, BQ>(dka, sm.dst, sm.q, ty, tx);
        }
    }
#pragma unroll
    for (int i = 0; i < MK; i++) {
        const int64_t kj = k0 + ty + TG * i;
        if (kj >= a.Tk) continue;
        T *krow = dk + kv.k + kj * a.ldk, *vrow = dv + kv.v + kj * a.ldv;
#pragma unroll
        for (int j = 0; j < MD; j++)
            if (tx + TG * j < D) {
                krow[tx + TG * j] = dka[i][j];
                vrow[tx + TG * j] = dva[i][j];
            }
    }
}

/* ------------------------------------------------------------ simple kernels */

/* Any D and dtype: a thread per (b, head, row), accumulators in global
 * memory (the row's own slice of the output), formulas as in the tiled
 * kernels. */

template <class T>
__device__ T dot_n(const T *a, const T *b, int D) {
    T s = 0;
    for (int d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

/* Keys query t sees: [0, nk). */
__device__ __forceinline__ int64_t keys_of(const pipit_cuda_attn &a, int64_t t) { return a.causal ? t + 1 : a.Tk; }

/* thread e: query t of (b, h) */
template <class T>
__global__ void attn_fwd_simple(T *out, const T *q, const T *k, const T *v, pipit_cuda_attn a, T scale) {
    const int D = (int)a.D;
    PIPIT_GRID_STRIDE(e, a.B * a.Hq * a.Tq) {
        const int64_t t = e % a.Tq, bh = e / a.Tq;
        const heads_at at = heads_of(a, bh / a.Hq, bh % a.Hq);
        const int32_t *db = doc_row(a, bh / a.Hq);
        const T *qt = q + at.q + t * a.ldq;
        T *o = out + at.o + t * a.ldo;
        for (int d = 0; d < D; d++) o[d] = 0;
        T m = neg_inf<T>();
        double l = 0;
        for (int64_t j = 0; j < keys_of(a, t); j++) {
            if (!visible(a, db, t, j)) continue;
            const T s = dot_n(qt, k + at.k + j * a.ldk, D) * scale, *vj = v + at.v + j * a.ldv;
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

/* thread e: query t of (b, h); stats as attn_dq_tiled's */
template <class T>
__global__ void attn_dq_simple(T *dq, T *stats, const T *q, const T *k, const T *v, const T *dout, pipit_cuda_attn a,
                               T scale) {
    const int D = (int)a.D;
    const int64_t N = a.B * a.Hq * a.Tq;
    PIPIT_GRID_STRIDE(e, N) {
        const int64_t t = e % a.Tq, bh = e / a.Tq;
        const heads_at at = heads_of(a, bh / a.Hq, bh % a.Hq);
        const int32_t *db = doc_row(a, bh / a.Hq);
        const T *qt = q + at.q + t * a.ldq, *dO = dout + at.o + t * a.ldo;
        T m = neg_inf<T>();
        double l = 0, dl = 0;
        for (int64_t j = 0; j < keys_of(a, t); j++) {
            if (!visible(a, db, t, j)) continue;
            const T s = dot_n(qt, k + at.k + j * a.ldk, D) * scale, dp = dot_n(dO, v + at.v + j * a.ldv, D);
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
        T *dqt = dq + at.q + t * a.ldq;
        for (int d = 0; d < D; d++) dqt[d] = 0;
        for (int64_t j = 0; j < keys_of(a, t); j++) {
            if (!visible(a, db, t, j)) continue;
            const T *kj = k + at.k + j * a.ldk;
            T p;
            const T ds = prob_ds(dot_n(qt, kj, D), dot_n(dO, v + at.v + j * a.ldv, D), m, il, delta, scale, &p);
            for (int d = 0; d < D; d++) dqt[d] += ds * kj[d];
        }
    }
}

/* thread e: key j of (b, kv head g), over the group's query heads in order */
template <class T>
__global__ void attn_dkv_simple(T *dk, T *dv, const T *stats, const T *q, const T *k, const T *v, const T *dout,
                                pipit_cuda_attn a, T scale) {
    const int D = (int)a.D;
    const int64_t N = a.B * a.Hq * a.Tq, rep = a.Hq / a.Hkv;
    PIPIT_GRID_STRIDE(e, a.B * a.Hkv * a.Tk) {
        const int64_t j = e % a.Tk, bg = e / a.Tk, b = bg / a.Hkv, h0 = bg % a.Hkv * rep;
        const heads_at kv = heads_of(a, b, h0);
        const T *kj = k + kv.k + j * a.ldk, *vj = v + kv.v + j * a.ldv;
        T *dkj = dk + kv.k + j * a.ldk, *dvj = dv + kv.v + j * a.ldv;
        for (int d = 0; d < D; d++) dkj[d] = dvj[d] = 0;
        for (int64_t h = h0; h < h0 + rep; h++) {
            const heads_at at = heads_of(a, b, h);
            for (int64_t t = a.causal ? j : 0; t < a.Tq; t++) {
                if (!visible(a, doc_row(a, b), t, j)) continue;
                const T *qt = q + at.q + t * a.ldq, *dO = dout + at.o + t * a.ldo;
                const int64_t se = (b * a.Hq + h) * a.Tq + t;
                T p;
                const T ds = prob_ds(dot_n(qt, kj, D), dot_n(dO, vj, D), stats[se], stats[N + se], stats[2 * N + se],
                                     scale, &p);
                for (int d = 0; d < D; d++) {
                    dkj[d] += ds * qt[d];
                    dvj[d] += p * dO[d];
                }
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

/* Whether a grid of (heads, ceil(Tn / tile)) blocks is launchable. */
static bool grid_ok(int64_t heads, int64_t Tn, int tile) {
    return heads <= INT32_MAX && (Tn + tile - 1) / tile <= 65535;
}

static dim3 tiles(int64_t heads, int64_t Tn, int tile) {
    return dim3((unsigned)heads, (unsigned)((Tn + tile - 1) / tile));
}

template <class T, int DP>
static bool fwd_tiled(T *out, const T *q, const T *k, const T *v, const pipit_cuda_attn &a, T scale) {
    typedef attn_cfg<T, DP> cfg;
    if (!grid_ok(a.B * a.Hq, a.Tq, cfg::FQ)) return false;
    attn_fwd_tiled<T, cfg::FQ, cfg::FK, DP><<<tiles(a.B * a.Hq, a.Tq, cfg::FQ), NT, 0, pipit__cuda_stream()>>>(
        out, q, k, v, a, scale);
    return true;
}

template <class T, int DP>
static bool bwd_tiled(T *dq, T *dk, T *dv, T *stats, const T *q, const T *k, const T *v, const T *dout,
                      const pipit_cuda_attn &a, T scale) {
    typedef attn_cfg<T, DP> cfg;
    if (!grid_ok(a.B * a.Hq, a.Tq, cfg::QQ) || !grid_ok(a.B * a.Hkv, a.Tk, cfg::KK)) return false;
    cudaStream_t s = pipit__cuda_stream();
    attn_dq_tiled<T, cfg::QQ, cfg::QK, DP><<<tiles(a.B * a.Hq, a.Tq, cfg::QQ), NT, 0, s>>>(dq, stats, q, k, v, dout,
                                                                                          a, scale);
    if (PIPIT_CUDA_LAUNCHED("attention backward: dq")) return true;
    attn_dkv_tiled<T, cfg::KK, cfg::KQ, DP><<<tiles(a.B * a.Hkv, a.Tk, cfg::KK), NT, 0, s>>>(dk, dv, stats, q, k, v,
                                                                                            dout, a, scale);
    return true;
}

static unsigned rows_grid(int64_t n) { return pipit_grid_for(n, 128); }

template <class T>
static void attn_fwd(void *out, const void *q, const void *k, const void *v, const pipit_cuda_attn &a) {
    const T scale = (T)a.scale, *qp = (const T *)q, *kp = (const T *)k, *vp = (const T *)v;
    T *o = (T *)out;
    bool done = false;
    switch (tiled_dp<T>(a.D)) {
    case 32: done = fwd_tiled<T, 32>(o, qp, kp, vp, a, scale); break;
    case 64: done = fwd_tiled<T, 64>(o, qp, kp, vp, a, scale); break;
    case 128: done = fwd_tiled<T, sizeof(T) == 8 ? 64 : 128>(o, qp, kp, vp, a, scale); break;
    default: break;
    }
    if (!done)
        attn_fwd_simple<T><<<rows_grid(a.B * a.Hq * a.Tq), 128, 0, pipit__cuda_stream()>>>(o, qp, kp, vp, a, scale);
}

template <class T>
static void attn_bwd(void *dq, void *dk, void *dv, const void *q, const void *k, const void *v, const void *dout,
                     const pipit_cuda_attn &a) {
    const T scale = (T)a.scale, *qp = (const T *)q, *kp = (const T *)k, *vp = (const T *)v, *dO = (const T *)dout;
    T *dqp = (T *)dq, *dkp = (T *)dk, *dvp = (T *)dv;
    T *stats = (T *)pipit__cuda_scratch((size_t)(3 * a.B * a.Hq * a.Tq) * sizeof(T), "attention backward: scratch");
    if (!stats) return;
    bool done = false;
    switch (tiled_dp<T>(a.D)) {
    case 32: done = bwd_tiled<T, 32>(dqp, dkp, dvp, stats, qp, kp, vp, dO, a, scale); break;
    case 64: done = bwd_tiled<T, 64>(dqp, dkp, dvp, stats, qp, kp, vp, dO, a, scale); break;
    case 128: done = bwd_tiled<T, sizeof(T) == 8 ? 64 : 128>(dqp, dkp, dvp, stats, qp, kp, vp, dO, a, scale); break;
    default: break;
    }
    if (!done) {
        cudaStream_t s = pipit__cuda_stream();
        attn_dq_simple<T><<<rows_grid(a.B * a.Hq * a.Tq), 128, 0, s>>>(dqp, stats, qp, kp, vp, dO, a, scale);
        if (!PIPIT_CUDA_LAUNCHED("attention backward: dq"))
            attn_dkv_simple<T><<<rows_grid(a.B * a.Hkv * a.Tk), 128, 0, s>>>(dkp, dvp, stats, qp, kp, vp, dO, a,
                                                                             scale);
    }
    PIPIT_CUDA_LAUNCHED("attention backward");
    pipit__cuda_scratch_free(stats, "attention backward: scratch");
}

/* 0: run it; 1: nothing to do (an empty tensor); -1: a problem the kernels
 * cannot run (the op's shape rule never makes one), recorded as an error. */
static int attn_check(const pipit_cuda_attn *a, const char *what) {
    if (a->B <= 0 || a->Tq <= 0 || a->Tk <= 0 || a->Hq <= 0 || a->D <= 0) return 1;
    if (a->Hkv <= 0 || a->Hq % a->Hkv != 0 || a->D > INT32_MAX || ((a->causal || a->doc) && a->Tq != a->Tk))
        return pipit__cuda_check(cudaErrorInvalidValue, what);
    return 0;
}

void pipit__cuda_attn_fwd(pipit_dtype dt, void *out, const void *q, const void *k, const void *v,
                          const pipit_cuda_attn *a) {
    if (attn_check(a, "attention: bad heads, head size or causal S != T")) return;
    PIPIT_BY_WIDE(dt, attn_fwd, out, q, k, v, *a);
    PIPIT_CUDA_LAUNCHED("attention");
}

void pipit__cuda_attn_bwd(pipit_dtype dt, void *dq, void *dk, void *dv, const void *q, const void *k, const void *v,
                          const void *dout, const pipit_cuda_attn *a) {
    if (attn_check(a, "attention backward: bad heads, head size or causal S != T")) return;
    PIPIT_BY_WIDE(dt, attn_bwd, dq, dk, dv, q, k, v, dout, *a);
}
