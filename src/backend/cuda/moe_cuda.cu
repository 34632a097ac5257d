/*
 * moe_cuda.cu — CUDA kernels of the mixture-of-experts ops (ir/moe.h), the
 * counterparts of backend/cpu/moe.c with the same formulas in the same
 * order: top-k a thread per row (k scans in the strict order
 * PIPIT_TOPK_BEFORE); the slots a thread per expert scanning the choices
 * in (token, choice) order; dispatch zeroes the grid, then a thread per
 * (choice, feature) writes its slot (each slot has at most one choice);
 * combine a thread per (token, feature) summing its choices in order; the
 * weights' gradient a thread per choice (a dot product in feature order).
 * No atomics: every output element has one writer, so runs are bitwise
 * repeatable. Arithmetic in pipit_arith<T> (fp32 for bf16).
 */
#include "backend/cuda/moe_cuda.h"

#include "backend/cuda/ops_cuda.cuh"
#include "ir/graph.h"
#include "ir/moe.h"

#define KIN(i) (k->in_node[i])
#define DT(k) ((pipit_dtype)(k)->node->dtype)
#define NTH PIPIT_CUDA_THREADS

template <class T>
__global__ void topk_kernel(int32_t *out, const T *x, int64_t rows, int64_t N, int64_t K) {
    typedef pipit_arith<T> A;
    PIPIT_GRID_STRIDE(r, rows) {
        const T *row = x + r * N;
        int64_t prev = -1;
        A pv = 0;
        for (int64_t j = 0; j < K; j++) {
            int64_t best = -1;
            A bv = 0;
            for (int64_t i = 0; i < N; i++) {
                A v = (A)row[i];
                if (prev >= 0 && !PIPIT_TOPK_BEFORE(pv, prev, v, i)) continue;
                if (best < 0 || PIPIT_TOPK_BEFORE(v, i, bv, best)) best = i, bv = v;
            }
            out[r * K + j] = (int32_t)best;
            prev = best, pv = bv;
        }
    }
}

template <class T>
__global__ void take_kernel(T *out, const T *x, const int32_t *idx, int64_t rows, int64_t N, int64_t K) {
    PIPIT_GRID_STRIDE(e, rows * K) {
        int64_t r = e / K;
        int32_t i = idx[e];
        out[e] = i >= 0 && i < N ? x[r * N + i] : (T)0.0f;
    }
}

template <class T>
__global__ void take_dx_kernel(T *out, const int32_t *idx, const T *d, int64_t rows, int64_t N, int64_t K) {
    typedef pipit_arith<T> A;
    PIPIT_GRID_STRIDE(e, rows * N) {
        int64_t r = e / N, i = e % N;
        A acc = 0;
        for (int64_t j = 0; j < K; j++)
            if (idx[r * K + j] == i) acc += (A)d[r * K + j];
        out[e] = (T)acc;
    }
}

__global__ void slots_kernel(int32_t *out, const int32_t *idx, int64_t TK, int64_t E, int64_t C) {
    PIPIT_GRID_STRIDE(e, E + 1) {
        if (e == E) { /* choices of no expert */
            for (int64_t q = 0; q < TK; q++)
                if (idx[q] < 0 || idx[q] >= E) out[q] = -1;
            continue;
        }
        int64_t used = 0;
        for (int64_t q = 0; q < TK; q++)
            if (idx[q] == e) out[q] = used < C ? (int32_t)(e * C + used++) : -1;
    }
}

template <class T>
__global__ void zero_kernel(T *out, int64_t n) {
    PIPIT_GRID_STRIDE(e, n) out[e] = (T)0.0f;
}

template <class T>
__global__ void dispatch_kernel(T *out, const T *x, const int32_t *slot, const T *w, int64_t TK, int64_t K,
                                int64_t EC, int64_t D) {
    typedef pipit_arith<T> A;
    PIPIT_GRID_STRIDE(e, TK * D) {
        int64_t q = e / D, c = e % D, p = slot[q];
        if (p < 0 || p >= EC) continue;
        T v = x[(q / K) * D + c];
        out[p * D + c] = w ? (T)((A)w[q] * (A)v) : v;
    }
}

template <class T>
__global__ void combine_kernel(T *out, const T *y, const int32_t *slot, const T *w, int64_t T_, int64_t K, int64_t EC,
                               int64_t D) {
    typedef pipit_arith<T> A;
    PIPIT_GRID_STRIDE(e, T_ * D) {
        int64_t t = e / D, c = e % D;
        A acc = 0;
        for (int64_t j = 0; j < K; j++) {
            int64_t p = slot[t * K + j];
            if (p < 0 || p >= EC) continue;
            A v = (A)y[p * D + c];
            acc += w ? (A)w[t * K + j] * v : v;
        }
        out[e] = (T)acc;
    }
}

template <class T>
__global__ void dw_kernel(T *out, const T *a, const int32_t *slot, const T *b, int64_t TK, int64_t K, int64_t EC,
                          int64_t D) {
    typedef pipit_arith<T> A;
    PIPIT_GRID_STRIDE(q, TK) {
        int64_t p = slot[q];
        A acc = 0;
        if (p >= 0 && p < EC)
            for (int64_t c = 0; c < D; c++) acc += (A)a[p * D + c] * (A)b[(q / K) * D + c];
        out[q] = (T)acc;
    }
}

template <class T>
static void launch_topk(void *out, const void *x, int64_t rows, int64_t N, int64_t K) {
    if (rows <= 0) return;
    topk_kernel<T><<<pipit_grid_for(rows, NTH), NTH, 0, pipit__cuda_stream()>>>((int32_t *)out, (const T *)x, rows, N,
                                                                                  K);
}
template <class T>
static void launch_take(void *out, const void *x, const int32_t *idx, int64_t rows, int64_t N, int64_t K) {
    if (rows * K <= 0) return;
    take_kernel<T><<<pipit_grid_for(rows * K, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, (const T *)x, idx, rows,
                                                                                      N, K);
}
template <class T>
static void launch_take_dx(void *out, const int32_t *idx, const void *d, int64_t rows, int64_t N, int64_t K) {
    if (rows * N <= 0) return;
    take_dx_kernel<T><<<pipit_grid_for(rows * N, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, idx, (const T *)d,
                                                                                         rows, N, K);
}
template <class T>
static void launch_dispatch(void *out, const void *x, const int32_t *slot, const void *w, int64_t TK, int64_t K,
                            int64_t EC, int64_t D) {
    if (EC * D <= 0) return;
    zero_kernel<T><<<pipit_grid_for(EC * D, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, EC * D);
    if (TK * D <= 0) return;
    dispatch_kernel<T><<<pipit_grid_for(TK * D, NTH), NTH, 0, pipit__cuda_stream()>>>(
        (T *)out, (const T *)x, slot, (const T *)w, TK, K, EC, D);
}
template <class T>
static void launch_combine(void *out, const void *y, const int32_t *slot, const void *w, int64_t T_, int64_t K,
                           int64_t EC, int64_t D) {
    if (T_ * D <= 0) return;
    combine_kernel<T><<<pipit_grid_for(T_ * D, NTH), NTH, 0, pipit__cuda_stream()>>>(
        (T *)out, (const T *)y, slot, (const T *)w, T_, K, EC, D);
}
template <class T>
static void launch_dw(void *out, const void *a, const int32_t *slot, const void *b, int64_t TK, int64_t K, int64_t EC,
                      int64_t D) {
    if (TK <= 0) return;
    dw_kernel<T><<<pipit_grid_for(TK, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, (const T *)a, slot,
                                                                              (const T *)b, TK, K, EC, D);
}

/* One launch per op, from thread 0 of the rank's team. */
#define ONLY_THREAD0(ith, nth) \
    do {                       \
        (void)(nth);           \
        if ((ith) != 0) return; \
    } while (0)

void pipit__cuda_op_topk(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *x = KIN(0);
    PIPIT_BY_DTYPE((pipit_dtype)x->dtype, launch_topk, k->out, k->in[0], pipit__node_rows(x), pipit__node_last_dim(x),
                   k->node->iattr[0]);
    PIPIT_CUDA_LAUNCHED("topk");
}

void pipit__cuda_op_take(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *x = KIN(0);
    PIPIT_BY_DTYPE(DT(k), launch_take, k->out, k->in[0], (const int32_t *)k->in[1], pipit__node_rows(x),
                   pipit__node_last_dim(x), pipit__node_last_dim(k->node));
    PIPIT_CUDA_LAUNCHED("take");
}

void pipit__cuda_op_take_dx(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *d = KIN(1);
    PIPIT_BY_DTYPE(DT(k), launch_take_dx, k->out, (const int32_t *)k->in[0], k->in[1], pipit__node_rows(d),
                   k->node->iattr[0], pipit__node_last_dim(d));
    PIPIT_CUDA_LAUNCHED("take_dx");
}

void pipit__cuda_op_moe_slots(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t E = k->node->iattr[0];
    slots_kernel<<<pipit_grid_for(E + 1, NTH), NTH, 0, pipit__cuda_stream()>>>(
        (int32_t *)k->out, (const int32_t *)k->in[0], pipit__node_numel(k->node), E, k->node->iattr[1]);
    PIPIT_CUDA_LAUNCHED("moe_slots");
}

void pipit__cuda_op_moe_dispatch(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *x = KIN(0), *s = KIN(1), *n = k->node;
    const void *w = n->nin > 2 ? k->in[2] : NULL;
    PIPIT_BY_DTYPE(DT(k), launch_dispatch, k->out, k->in[0], (const int32_t *)k->in[1], w, pipit__node_numel(s),
                   s->shape[1], n->shape[0] * n->shape[1], x->shape[1]);
    PIPIT_CUDA_LAUNCHED("moe_dispatch");
}

void pipit__cuda_op_moe_combine(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *y = KIN(0), *s = KIN(1), *n = k->node;
    const void *w = n->nin > 2 ? k->in[2] : NULL;
    PIPIT_BY_DTYPE(DT(k), launch_combine, k->out, k->in[0], (const int32_t *)k->in[1], w, s->shape[0], s->shape[1],
                   y->shape[0] * y->shape[1], y->shape[2]);
    PIPIT_CUDA_LAUNCHED("moe_combine");
}

void pipit__cuda_op_moe_dw(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *a = KIN(0), *s = KIN(1);
    PIPIT_BY_DTYPE(DT(k), launch_dw, k->out, k->in[0], (const int32_t *)k->in[1], k->in[2], pipit__node_numel(s),
                   s->shape[1], a->shape[0] * a->shape[1], a->shape[2]);
    PIPIT_CUDA_LAUNCHED("moe_dw");
}
