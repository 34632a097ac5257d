/*
 * moe.c — CPU kernels of the mixture-of-experts ops (ir/moe.h). Thread
 * contract of kernels.h: each thread writes its own static slice, every
 * sum runs in a fixed order (choices j in order, features in order), so
 * the bits never depend on the thread count. Arithmetic in the element's
 * arithmetic type (fp32 for f32 and bf16, f64 for f64), one rounding per
 * output element. An index or slot outside its range reads as a dropped
 * choice, but none reaches a kernel: pipit_step checks fed expert ids
 * (moe_slots), take indices and slots fed straight to dispatch / combine
 * (-1 or in the grid, none twice: runtime/step.c), and computed ones are
 * in range.
 */
#include "backend/cpu/moe.h"

#include <string.h>

#include "ir/moe.h"
#include "util/bf16.h"

#define KIN(i) (k->in_node[i])

static inline float ld_f32(const float *p, int64_t i) { return p[i]; }
static inline double ld_f64(const double *p, int64_t i) { return p[i]; }
static inline float ld_bf16(const pipit__bf16 *p, int64_t i) { return pipit__bf16_to_f32(p[i]); }
static inline void st_f32(float *p, int64_t i, float v) { p[i] = v; }
static inline void st_f64(double *p, int64_t i, double v) { p[i] = v; }
static inline void st_bf16(pipit__bf16 *p, int64_t i, float v) { p[i] = pipit__bf16_from_f32(v); }

/* The kernels for element type T (arithmetic type A, suffix S). */
#define MOE_KERNELS(T, A, S)                                                                                      \
    /* x [rows, N] -> idx [rows, k]: k passes of a scan, each taking the best after the previous pick in the     \
     * strict order PIPIT_TOPK_BEFORE. */                                                                         \
    static void topk_##S(int32_t *out, const T *x, int64_t rows, int64_t N, int64_t K, int ith, int nth) {     \
        int64_t lo, hi;                                                                                           \
        pipit__range(rows, ith, nth, &lo, &hi);                                                                   \
        for (int64_t r = lo; r < hi; r++) {                                                                       \
            const T *row = x + r * N;                                                                             \
            int64_t prev = -1;                                                                                    \
            A pv = 0;                                                                                             \
            for (int64_t j = 0; j < K; j++) {                                                                     \
                int64_t best = -1;                                                                                \
                A bv = 0;                                                                                         \
                for (int64_t i = 0; i < N; i++) {                                                                 \
                    A v = ld_##S(row, i);                                                                         \
                    if (prev >= 0 && !PIPIT_TOPK_BEFORE(pv, prev, v, i)) continue;                                \
                    if (best < 0 || PIPIT_TOPK_BEFORE(v, i, bv, best)) best = i, bv = v;                          \
                }                                                                                                 \
                out[r * K + j] = (int32_t)best;                                                                   \
                prev = best, pv = bv;                                                                             \
            }                                                                                                     \
        }                                                                                                         \
    }                                                                                                             \
    static void take_##S(T *out, const T *x, const int32_t *idx, int64_t rows, int64_t N, int64_t K, int ith,     \
                         int nth) {                                                                               \
        int64_t lo, hi;                                                                                           \
        pipit__range(rows, ith, nth, &lo, &hi);                                                                   \
        for (int64_t r = lo; r < hi; r++)                                                                         \
            for (int64_t j = 0; j < K; j++) {                                                                     \
                int32_t i = idx[r * K + j];                                                                       \
                st_##S(out, r * K + j, i >= 0 && i < N ? ld_##S(x, r * N + i) : (A)0);                           \
            }                                                                                                     \
    }                                                                                                             \
    /* out [rows, N]: element i is the sum over j (in order) of d[r, j] where idx[r, j] == i. */                 \
    static void take_dx_##S(T *out, const int32_t *idx, const T *d, int64_t rows, int64_t N, int64_t K, int ith,  \
                            int nth) {                                                                            \
        int64_t lo, hi;                                                                                           \
        pipit__range(rows, ith, nth, &lo, &hi);                                                                   \
        for (int64_t r = lo; r < hi; r++)                                                                         \
            for (int64_t i = 0; i < N; i++) {                                                                     \
                A acc = 0;                                                                                        \
                for (int64_t j = 0; j < K; j++)                                                                   \
                    if (idx[r * K + j] == i) acc += ld_##S(d, r * K + j);                                         \
                st_##S(out, r * N + i, acc);                                                                      \
            }                                                                                                     \
    }                                                                                                             \
    /* out [E*C, D]: this thread's slot rows zeroed, then filled from the tokens assigned to them. */            \
    static void dispatch_##S(T *out, const T *x, const int32_t *slot, const T *w, int64_t TK, int64_t K,         \
                             int64_t EC, int64_t D, int ith, int nth) {                                           \
        int64_t lo, hi;                                                                                           \
        pipit__range(EC, ith, nth, &lo, &hi);                                                                     \
        if (lo >= hi) return;                                                                                     \
        memset(out + lo * D, 0, sizeof(T) * (size_t)((hi - lo) * D));                                             \
        for (int64_t q = 0; q < TK; q++) {                                                                        \
            int64_t p = slot[q];                                                                                  \
            if (p < lo || p >= hi) continue;                                                                      \
            const T *xr = x + (q / K) * D;                                                                        \
            if (!w) {                                                                                             \
                memcpy(out + p * D, xr, sizeof(T) * (size_t)D);                                                   \
                continue;                                                                                         \
            }                                                                                                     \
            A wq = ld_##S(w, q);                                                                                  \
            for (int64_t c = 0; c < D; c++) st_##S(out, p * D + c, wq * ld_##S(xr, c));                           \
        }                                                                                                         \
    }                                                                                                             \
    /* out [T, D]: row t = sum over its kept choices j in order of (w *) y[slot]. */                              \
    static void combine_##S(T *out, const T *y, const int32_t *slot, const T *w, int64_t T_, int64_t K,          \
                            int64_t EC, int64_t D, int ith, int nth) {                                            \
        int64_t lo, hi;                                                                                           \
        pipit__range(T_, ith, nth, &lo, &hi);                                                                     \
        for (int64_t t = lo; t < hi; t++)                                                                         \
            for (int64_t c = 0; c < D; c++) {                                                                     \
                A acc = 0;                                                                                        \
                for (int64_t j = 0; j < K; j++) {                                                                 \
                    int64_t p = slot[t * K + j];                                                                  \
                    if (p < 0 || p >= EC) continue;                                                               \
                    A v = ld_##S(y, p * D + c);                                                                   \
                    acc += w ? ld_##S(w, t * K + j) * v : v;                                                      \
                }                                                                                                 \
                st_##S(out, t * D + c, acc);                                                                      \
            }                                                                                                     \
    }                                                                                                             \
    /* out [T, K]: dot(a[slot], b[t]) in feature order, 0 for a dropped choice. */                               \
    static void dw_##S(T *out, const T *a, const int32_t *slot, const T *b, int64_t T_, int64_t K, int64_t EC,    \
                       int64_t D, int ith, int nth) {                                                             \
        int64_t lo, hi;                                                                                           \
        pipit__range(T_ * K, ith, nth, &lo, &hi);                                                                 \
        for (int64_t q = lo; q < hi; q++) {                                                                       \
            int64_t p = slot[q];                                                                                  \
            A acc = 0;                                                                                            \
            if (p >= 0 && p < EC)                                                                                 \
                for (int64_t c = 0; c < D; c++) acc += ld_##S(a, p * D + c) * ld_##S(b, (q / K) * D + c);         \
            st_##S(out, q, acc);                                                                                  \
        }                                                                                                         \
    }

MOE_KERNELS(float, float, f32)
MOE_KERNELS(double, double, f64)
MOE_KERNELS(pipit__bf16, float, bf16)

#define BY_DT(dt, fn, ...)                                                 \
    do {                                                                   \
        if ((dt) == PIPIT_F64) fn##_f64(__VA_ARGS__);                      \
        else if ((dt) == PIPIT_BF16) fn##_bf16(__VA_ARGS__);               \
        else fn##_f32(__VA_ARGS__);                                        \
    } while (0)

void pipit__cpu_topk(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *x = KIN(0);
    BY_DT(x->dtype, topk, k->out, k->in[0], pipit__node_rows(x), pipit__node_last_dim(x), k->node->iattr[0], ith,
          nth);
}

void pipit__cpu_take(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *x = KIN(0);
    BY_DT(x->dtype, take, k->out, k->in[0], k->in[1], pipit__node_rows(x), pipit__node_last_dim(x),
          pipit__node_last_dim(k->node), ith, nth);
}

void pipit__cpu_take_dx(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *d = KIN(1);
    BY_DT(d->dtype, take_dx, k->out, k->in[0], k->in[1], pipit__node_rows(d), k->node->iattr[0],
          pipit__node_last_dim(d), ith, nth);
}

/* Thread ith owns experts [e0, e1): for each, one scan of the choices in
 * (token, choice) order counts its slots; thread 0 also marks the choices
 * of no expert (an index outside [0, E)). */
void pipit__cpu_moe_slots(const pipit__kctx *k, int ith, int nth) {
    const int32_t *idx = k->in[0];
    int32_t *out = k->out;
    int64_t TK = pipit__node_numel(k->node), E = k->node->iattr[0], C = k->node->iattr[1], e0, e1;
    pipit__range(E, ith, nth, &e0, &e1);
    for (int64_t e = e0; e < e1; e++) {
        int64_t used = 0;
        for (int64_t q = 0; q < TK; q++)
            if (idx[q] == e) out[q] = used < C ? (int32_t)(e * C + used++) : -1;
    }
    if (ith == 0)
        for (int64_t q = 0; q < TK; q++)
            if (idx[q] < 0 || idx[q] >= E) out[q] = -1;
}

void pipit__cpu_moe_dispatch(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *x = KIN(0), *s = KIN(1), *n = k->node;
    const void *w = n->nin > 2 ? k->in[2] : NULL;
    BY_DT(n->dtype, dispatch, k->out, k->in[0], k->in[1], w, pipit__node_numel(s), s->shape[1],
          n->shape[0] * n->shape[1], x->shape[1], ith, nth);
}

void pipit__cpu_moe_combine(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *y = KIN(0), *s = KIN(1), *n = k->node;
    const void *w = n->nin > 2 ? k->in[2] : NULL;
    BY_DT(n->dtype, combine, k->out, k->in[0], k->in[1], w, s->shape[0], s->shape[1], y->shape[0] * y->shape[1],
          y->shape[2], ith, nth);
}

void pipit__cpu_moe_dw(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *a = KIN(0), *s = KIN(1);
    BY_DT(k->node->dtype, dw, k->out, k->in[0], k->in[1], k->in[2], s->shape[0], s->shape[1],
          a->shape[0] * a->shape[1], a->shape[2], ith, nth);
}
