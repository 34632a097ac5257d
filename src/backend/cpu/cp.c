/*
 * cp.c — context parallelism on the CPU (ir/cp.h). This rank's 2L rows are
 * two chunks of L tokens: rows [0, L) chunk c at global offset c L, rows
 * [L, 2L) chunk 2C-1-c at (2C-1-c) L; c is the kernel context's cp.
 *
 * ROPE_CP rotates each (sequence, chunk) block as ROPE at its global
 * offset. ATTENTION_CP runs each query chunk against the prefix of the
 * gathered keys (global order) it may see: the blocked kernels of
 * attention with Tq = L, Tk = offset + L and the diagonal moved by the
 * offset (causal with Tk - Tq = the offset), so no key past the last query's position
 * is scored. The backward runs the later chunk first into the kv head's
 * dk, dv panels, the earlier one into a second pair, and adds the second
 * into the first (the earlier chunk's keys are a prefix of the later's):
 * threads split (batch, kv head) pairs, whose calls are fixed by the
 * shapes and c, so the bits do not depend on the thread count.
 */
#include "backend/cpu/cp.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/rope_freq.h"
#include "util/bf16.h"

#define KIN(i) (k->in_node[i])

/* The global offset of this rank's chunk h (0 or 1). */
static int64_t chunk_off(int h, int64_t L, int C, int c) { return (int64_t)(h ? 2 * C - 1 - c : c) * L; }

void pipit__cpu_ROPE_CP(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *n = k->node;
    int64_t B = n->shape[0], Lc = n->shape[1], L = Lc / 2, H = n->iattr[0];
    int64_t D = pipit__node_numel(n) / (B * Lc) / H, row = H * D;
    int C = (int)n->iattr[1], c = C > 1 ? k->cp : 0, inv = (int)n->iattr[2];
    pipit__rope_freqs rf = pipit__rope_freqs_of(n->fattr, n->iattr[3]);
    size_t es = pipit__dtype_size((pipit_dtype)n->dtype);
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            size_t off = (size_t)((b * Lc + h * L) * row) * es;
            void *o = (char *)k->out + off;
            const void *x = (const char *)k->in[0] + off;
            int64_t p0 = chunk_off(h, L, C, c);
            if (n->dtype == PIPIT_F64) pipit__rope_f64(o, x, 1, L, H, D, p0, rf, inv, ith, nth);
            else if (n->dtype == PIPIT_BF16) pipit__rope_bf16(o, x, 1, L, H, D, p0, rf, inv, ith, nth);
            else pipit__rope_f32(o, x, 1, L, H, D, p0, rf, inv, ith, nth);
        }
}

typedef struct {
    int64_t B, Lc, L, S, Hq, Hkv, D;
    int C, c, causal;
    double scale;
} cp_dims;

static cp_dims dims_of(const pipit__kctx *k) {
    const pipit__node *q = KIN(0), *kk = KIN(1), *n = k->node;
    cp_dims p;
    p.B = q->shape[0], p.Lc = q->shape[1], p.L = p.Lc / 2, p.S = kk->shape[1];
    p.Hq = n->iattr[0], p.Hkv = n->iattr[1], p.D = q->shape[2] / p.Hq;
    p.causal = (int)n->iattr[2], p.C = (int)n->iattr[3], p.c = p.C > 1 ? k->cp : 0;
    p.scale = n->fattr[0];
    return p;
}

/* Query chunk h's problem (Tq = L rows): its visible key prefix. */
static pipit__attn_dims chunk_dims(const cp_dims *p, int h, int64_t hq, int64_t ldq, int64_t ldk, int64_t ldo) {
    int64_t off = chunk_off(h, p->L, p->C, p->c);
    pipit__attn_dims a = {1, p->L, p->causal ? off + p->L : p->S, hq, 1, p->D, ldq, ldk, ldk, ldo, p->causal,
                          p->scale}; /* causal: Tk - Tq = off moves the diagonal */
    return a;
}

#define AT(ptr, off) ((void *)((char *)(ptr) + (size_t)(off) * es))
#define CAT(ptr, off) ((const void *)((const char *)(ptr) + (size_t)(off) * es))

void pipit__cpu_ATTENTION_CP(const pipit__kctx *k, int ith, int nth) {
    cp_dims p = dims_of(k);
    pipit_dtype dt = (pipit_dtype)k->node->dtype;
    size_t es = pipit__dtype_size(dt);
    int64_t rep = p.Hq / p.Hkv, ldq = p.Hq * p.D, ldk = p.Hkv * p.D, lo, hi;
    pipit__range(p.B * p.Hq, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / p.Hq, h = bh % p.Hq, g = h / rep;
        for (int half = 0; half < 2; half++) {
            pipit__attn_dims a = chunk_dims(&p, half, 1, ldq, ldk, ldq);
            int64_t qrow = b * p.Lc + half * p.L, krow = b * p.S;
            void *o = AT(k->out, qrow * ldq + h * p.D);
            const void *q = CAT(k->in[0], qrow * ldq + h * p.D), *kk = CAT(k->in[1], krow * ldk + g * p.D);
            const void *v = CAT(k->in[2], krow * ldk + g * p.D);
            if (dt == PIPIT_F64) pipit__attn_fwd_f64(o, q, kk, v, &a, 0, 1);
            else if (dt == PIPIT_BF16) pipit__attn_fwd_bf16(o, q, kk, v, &a, 0, 1);
            else pipit__attn_fwd_f32(o, q, kk, v, &a, 0, 1);
        }
    }
}

static void bwd_one(pipit_dtype dt, void *dq, void *dk, void *dv, const void *q, const void *k, const void *v,
                    const void *dout, const pipit__attn_dims *a) {
    if (dt == PIPIT_F64) pipit__attn_bwd_f64(dq, dk, dv, q, k, v, dout, a, 0, 1);
    else if (dt == PIPIT_BF16) pipit__attn_bwd_bf16(dq, dk, dv, q, k, v, dout, a, 0, 1);
    else pipit__attn_bwd_f32(dq, dk, dv, q, k, v, dout, a, 0, 1);
}

/* dst[r, :D] (row stride ld) = a[r] + b[r] (packed [rows, D]) for r < nb,
 * a[r] for nb <= r < rows (b's rows are a prefix). */
static void add_rows(pipit_dtype dt, void *dst, int64_t ld, const void *a, const void *b, int64_t rows, int64_t nb,
                     int64_t D) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t d = 0; d < D; d++) {
            int64_t i = r * D + d, o = r * ld + d;
            if (dt == PIPIT_F64)
                ((double *)dst)[o] = ((const double *)a)[i] + (r < nb ? ((const double *)b)[i] : 0.0);
            else if (dt == PIPIT_F32)
                ((float *)dst)[o] = ((const float *)a)[i] + (r < nb ? ((const float *)b)[i] : 0.0f);
            else {
                float s = pipit__bf16_to_f32(((const pipit__bf16 *)a)[i]);
                if (r < nb) s += pipit__bf16_to_f32(((const pipit__bf16 *)b)[i]);
                ((pipit__bf16 *)dst)[o] = pipit__bf16_from_f32(s);
            }
        }
}

/* The output is [dq | dk | dv], flat, in q's, k's and v's layouts. */
void pipit__cpu_ATTN_CP_D(const pipit__kctx *k, int ith, int nth) {
    cp_dims p = dims_of(k);
    pipit_dtype dt = (pipit_dtype)k->node->dtype;
    size_t es = pipit__dtype_size(dt);
    int64_t rep = p.Hq / p.Hkv, ldq = p.Hq * p.D, ldk = p.Hkv * p.D, lo, hi;
    int64_t nq = pipit__node_numel(KIN(0)), nk = pipit__node_numel(KIN(1)), SD = p.S * p.D;
    pipit__range(p.B * p.Hkv, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    /* per pair: this kv head's k and v packed [S, D], and two dk, dv pairs */
    char *buf = malloc((size_t)(6 * SD) * es);
    if (!buf) {
        pipit__kernel_fail("attention_cp (backward): out of memory for its per-head panels");
        return;
    }
    void *kc = buf, *vc = buf + SD * es, *dk1 = buf + 2 * SD * es, *dv1 = buf + 3 * SD * es;
    void *dk0 = buf + 4 * SD * es, *dv0 = buf + 5 * SD * es;
    char *dq = k->out, *dk = dq + nq * es, *dv = dk + nk * es;
    for (int64_t bg = lo; bg < hi; bg++) {
        int64_t b = bg / p.Hkv, g = bg % p.Hkv;
        for (int64_t r = 0; r < p.S; r++) {
            memcpy((char *)kc + r * p.D * es, CAT(k->in[1], (b * p.S + r) * ldk + g * p.D), (size_t)p.D * es);
            memcpy((char *)vc + r * p.D * es, CAT(k->in[2], (b * p.S + r) * ldk + g * p.D), (size_t)p.D * es);
        }
        memset(dk1, 0, (size_t)SD * es);
        memset(dv1, 0, (size_t)SD * es);
        int64_t n1 = p.S, n0 = p.S;
        for (int half = 1; half >= 0; half--) { /* the later chunk sees the longer prefix */
            pipit__attn_dims a = chunk_dims(&p, half, rep, ldq, p.D, ldq);
            int64_t qrow = b * p.Lc + half * p.L;
            bwd_one(dt, AT(dq, qrow * ldq + g * rep * p.D), half ? dk1 : dk0, half ? dv1 : dv0,
                    CAT(k->in[0], qrow * ldq + g * rep * p.D), kc, vc, CAT(k->in[3], qrow * ldq + g * rep * p.D), &a);
            if (half) n1 = a.Tk;
            else n0 = a.Tk;
        }
        (void)n1;
        add_rows(dt, AT(dk, b * p.S * ldk + g * p.D), ldk, dk1, dk0, p.S, n0, p.D);
        add_rows(dt, AT(dv, b * p.S * ldk + g * p.D), ldk, dv1, dv0, p.S, n0, p.D);
    }
    free(buf);
}
