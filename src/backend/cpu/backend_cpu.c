/*
 * backend_cpu.c — the CPU backend's vtable: host memory, the op run table,
 * GEMM, and the executor's and post-loop's primitives. The post-loop
 * loops are written so they vectorise without reordering any sum: the
 * optimizer works element by element, and the sum of squares adds 8 fixed
 * lanes in a fixed order.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/kernels.h"
#include "util/bf16.h"

static void *cpu_reserve(size_t bytes) { return pipit__malloc_aligned(PIPIT_MAX(bytes, 64)); }

static void cpu_zero(void *p, size_t n) {
    if (n) memset(p, 0, n);
}

static void *cpu_alloc(size_t bytes) {
    void *p = cpu_reserve(bytes);
    if (p) cpu_zero(p, PIPIT_MAX(bytes, 64));
    return p;
}

static void cpu_copy_bytes(void *dst, const void *src, size_t n) {
    if (n && dst != src) memcpy(dst, src, n);
}

static void cpu_gemm(pipit_dtype dt, int ta, int tb, int64_t batch, int64_t M, int64_t N, int64_t K,
                     const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, void *C,
                     int64_t ldc, int64_t sC, int accumulate, int ith, int nth) {
    if (dt == PIPIT_F64)
        pipit__gemm_f64(ta, tb, batch, M, N, K, A, lda, sA, B, ldb, sB, C, ldc, sC, accumulate, ith, nth);
    else if (dt == PIPIT_BF16)
        pipit__gemm_bf16(ta, tb, batch, M, N, K, A, lda, sA, B, ldb, sB, C, ldc, sC, accumulate, ith, nth);
    else
        pipit__gemm_f32(ta, tb, batch, M, N, K, A, lda, sA, B, ldb, sB, C, ldc, sC, accumulate, ith, nth);
}

/* acc (fp32) = or += x (bf16), exactly converted and added in fp32. */
static void accumulate_bf16(float *restrict acc, const pipit__bf16 *restrict x, int64_t lo, int64_t hi, int first) {
    if (first)
        for (int64_t j = lo; j < hi; j++) acc[j] = pipit__bf16_to_f32(x[j]);
    else
        for (int64_t j = lo; j < hi; j++) acc[j] += pipit__bf16_to_f32(x[j]);
}

static void cpu_accumulate(pipit_dtype dt, pipit_dtype xdt, void *acc, const void *x, int64_t n, int first, int ith,
                           int nth) {
    int64_t lo, hi;
    pipit__range(n, ith, nth, &lo, &hi);
    size_t es = pipit__dtype_size(dt);
    PIPIT_ASSERT(xdt == dt || (xdt == PIPIT_BF16 && dt == PIPIT_F32));
    if (xdt != dt) {
        accumulate_bf16(acc, x, lo, hi, first);
    } else if (first) {
        memcpy((char *)acc + lo * es, (const char *)x + lo * es, (size_t)(hi - lo) * es);
    } else if (dt == PIPIT_F64) {
        double *a = acc;
        const double *c = x;
        for (int64_t j = lo; j < hi; j++) a[j] += c[j];
    } else {
        float *a = acc;
        const float *c = x;
        for (int64_t j = lo; j < hi; j++) a[j] += c[j];
    }
}

static void cpu_copy(void *dst, const void *src, size_t n, int ith, int nth) {
    int64_t lo, hi;
    pipit__range((int64_t)n, ith, nth, &lo, &hi);
    if (dst != src) memcpy((char *)dst + lo, (const char *)src + lo, (size_t)(hi - lo));
}

static void cpu_sum_uses(pipit_dtype dt, void *dst, void *const *srcs, int nsrcs, int64_t a, int64_t b) {
    size_t es = pipit__dtype_size(dt);
    if (nsrcs == 0) {
        memset((char *)dst + a * es, 0, (size_t)(b - a) * es);
        return;
    }
    if (nsrcs == 1) {
        if (srcs[0] != dst) memcpy((char *)dst + a * es, (const char *)srcs[0] + a * es, (size_t)(b - a) * es);
        return;
    }
    /* dst = s0 + s1 in one pass (not a copy of s0 and then += s1: a third
     * less memory traffic, the same additions), then += each further use */
    for (int u = 1; u < nsrcs; u++) {
        const void *lhs = u == 1 ? srcs[0] : dst;
        if (dt == PIPIT_F64) {
            double *g = dst;
            const double *l = lhs, *s = srcs[u];
            for (int64_t i = a; i < b; i++) g[i] = l[i] + s[i];
        } else {
            float *g = dst;
            const float *l = lhs, *s = srcs[u];
            for (int64_t i = a; i < b; i++) g[i] = l[i] + s[i];
        }
    }
}

/* Sum of squares of n elements in double, in 8 interleaved lanes added in
 * a fixed order at the end: vectorisable, and the same bits everywhere. */
static double sumsq_f32(const float *g, int64_t n) {
    double lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lane[l] += (double)g[i + l] * (double)g[i + l];
    for (; i < n; i++) lane[0] += (double)g[i] * (double)g[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

static double sumsq_f64(const double *g, int64_t n) {
    double lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lane[l] += g[i + l] * g[i + l];
    for (; i < n; i++) lane[0] += g[i] * g[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

static double cpu_sumsq(pipit_dtype dt, const void *x, int64_t a, int64_t b) {
    if (dt == PIPIT_F64) return sumsq_f64((const double *)x + a, b - a);
    return sumsq_f32((const float *)x + a, b - a);
}

/* AdamW: fp32 in adamw.c; fp64 here, the same formula. */
static void adamw_f64(const pipit__adamw_coef *c, double *restrict w, const double *restrict gr,
                      double *restrict m, double *restrict v, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) {
        double g = gr[i] * c->clip;
        double mi = c->b1 * m[i] + (1.0 - c->b1) * g;
        double vi = c->b2 * v[i] + (1.0 - c->b2) * (g * g);
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * c->decay - c->step_size * (mi / (sqrt(vi) / c->bc2_sqrt + c->eps));
    }
}

static void cpu_adamw(pipit_dtype dt, const pipit__adamw_coef *c, void *w, const void *g, void *m, void *v,
                      int64_t lo, int64_t hi) {
    if (dt == PIPIT_F64) adamw_f64(c, w, g, m, v, lo, hi);
    else pipit__adamw_f32(c, w, g, m, v, lo, hi);
}

/* w -= lr * (g * clip), computed in double and rounded once, as before. */
static void cpu_sgd(pipit_dtype dt, double lr, double clip, void *w, const void *g, int64_t lo, int64_t hi) {
    if (dt == PIPIT_F64) {
        double *x = w;
        const double *d = g;
        for (int64_t i = lo; i < hi; i++) x[i] = x[i] - lr * (d[i] * clip);
    } else {
        float *x = w;
        const float *d = g;
        for (int64_t i = lo; i < hi; i++) x[i] = (float)((double)x[i] - lr * ((double)d[i] * clip));
    }
}

/* One device (the host); nothing to bind, nothing queued to wait for. */
static int cpu_devices(void) { return 1; }

/* Nothing to bind but the rank a failing kernel reports to; nothing is
 * queued, so sync only returns what a kernel of the rank recorded. */
static void cpu_bind(int rank, int device, int tf32) {
    (void)device, (void)tf32;
    pipit__kernel_bind(rank);
}

static pipit_status cpu_sync(int rank) {
    const char *why = pipit__kernel_take_error(rank);
    return why ? pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: %s", rank, why) : PIPIT_STATUS_OK;
}

const pipit__backend pipit__backend_cpu = {
    .name = "cpu",
    .init = pipit__gemm_init,
    .alloc = cpu_alloc,
    .reserve = cpu_reserve,
    .zero = cpu_zero,
    .free = pipit__free_aligned,
    .upload = cpu_copy_bytes,
    .download = cpu_copy_bytes,
    .ops = pipit__cpu_ops,
    .gemm = cpu_gemm,
    .accumulate = cpu_accumulate,
    .copy = cpu_copy,
    .sum_uses = cpu_sum_uses,
    .sumsq = cpu_sumsq,
    .adamw = cpu_adamw,
    .sgd = cpu_sgd,
    .adamw_bf16 = pipit__adamw_f32_bf16,
    .host_memory = 1,
    .bf16 = 1,
    .devices = cpu_devices,
    .bind = cpu_bind,
    .sync = cpu_sync,
    .sumsq_chunks = NULL, /* per chunk: the partials stay in cache between the gradient sum and its squares */
};
