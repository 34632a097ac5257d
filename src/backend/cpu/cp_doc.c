/*
 * cp_doc.c — packed documents under context parallelism on the CPU
 * (ATTENTION_CP_DOC, ATTN_CP_DOC_D; ir/cp.h). This rank's 2L query rows
 * are chunk c (global offset c L) and chunk 2C-1-c; the keys and values
 * (k | v per row) and the document ids are the whole sequence's, in
 * global order. Each query chunk is cut into its runs of equal ids; a run
 * of global rows [s, e) in the document that starts at global row ds
 * (found in the gathered ids) and ends at de is one attention problem of
 * the blocked kernels: Tq = e - s queries against the keys [ds, e)
 * (causal: the diagonal moved by s - ds, as attention_cp's chunks) or
 * [ds, de) (not causal). The keys of other documents are never scored
 * (attention_doc's "skip fully masked tiles" at its coarsest grain). One
 * document per sequence is exactly attention_cp's calls, so its bits.
 *
 * The backward runs the later chunk's runs first into the kv head's dk,
 * dv panels, the earlier chunk's into a second pair (the runs of one
 * chunk touch disjoint key rows), and adds the second pair's written rows
 * into the first (attention_cp's order). Threads split (batch, head)
 * pairs in the forward and (batch, kv head) pairs in the backward; every
 * call is fixed by the shapes, the ids and c: the bits do not depend on
 * the thread count.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cp.h"
#include "backend/cpu/kernels.h"
#include "util/bf16.h"

#define KIN(i) (k->in_node[i])
#define AT(ptr, off) ((void *)((char *)(ptr) + (size_t)(off) * es))
#define CAT(ptr, off) ((const void *)((const char *)(ptr) + (size_t)(off) * es))

typedef struct {
    int64_t B, Lc, L, S, Hq, Hkv, D;
    int C, c, causal;
    double scale;
} dims;

static dims dims_of(const pipit__kctx *k) {
    const pipit__node *q = KIN(0), *kv = KIN(1), *n = k->node;
    dims p;
    p.B = q->shape[0], p.Lc = q->shape[1], p.L = p.Lc / 2, p.S = kv->shape[1];
    p.Hq = n->iattr[0], p.Hkv = n->iattr[1], p.D = q->shape[2] / p.Hq;
    p.causal = (int)n->iattr[2], p.C = (int)n->iattr[3], p.c = p.C > 1 ? k->cp : 0;
    p.scale = n->fattr[0];
    return p;
}

/* The global offset of this rank's chunk h (0 or 1). */
static int64_t chunk_off(const dims *p, int h) { return (int64_t)(h ? 2 * p->C - 1 - p->c : p->c) * p->L; }

/* 1 when sequence b's gathered ids decrease somewhere. */
static int decreasing(const int32_t *doc, int64_t S) {
    for (int64_t t = 1; t < S; t++)
        if (doc[t] < doc[t - 1]) return 1;
    return 0;
}
static const char *const DECREASE = "attention_cp_doc: the document ids decrease along the sequence gathered over the "
                                    "context group (between ranks' chunks): ids must be non-decreasing";

/* A run of queries [s, e) (global rows) and its keys [ks, ke). */
typedef struct {
    int64_t s, e, ks, ke;
} run;

/* The next run of chunk [off, off + L) at or after global row s. */
static run next_run(const int32_t *doc, int64_t s, int64_t off, int64_t L, int64_t S, int causal) {
    run r = {s, s + 1, s, 0};
    while (r.e < off + L && doc[r.e] == doc[s]) r.e++;
    while (r.ks > 0 && doc[r.ks - 1] == doc[s]) r.ks--;
    r.ke = r.e;
    if (!causal)
        while (r.ke < S && doc[r.ke] == doc[s]) r.ke++;
    return r;
}

static pipit__attn_dims run_dims(const dims *p, const run *r, int64_t hq, int64_t ldq, int64_t ldk, int64_t ldo) {
    pipit__attn_dims a = {1, r->e - r->s, r->ke - r->ks, hq, 1, p->D, ldq, ldk, ldk, ldo, p->causal, p->scale};
    return a; /* causal: Tk - Tq = s - ks moves the diagonal */
}

void pipit__cpu_ATTENTION_CP_DOC(const pipit__kctx *k, int ith, int nth) {
    dims p = dims_of(k);
    pipit_dtype dt = (pipit_dtype)k->node->dtype;
    size_t es = pipit__dtype_size(dt);
    const int32_t *docs = k->in[2];
    int64_t rep = p.Hq / p.Hkv, ldq = p.Hq * p.D, ldkv = 2 * p.Hkv * p.D, lo, hi;
    for (int64_t b = 0; b < p.B; b++)
        if (decreasing(docs + b * p.S, p.S)) {
            if (ith == 0) memset(k->out, 0, (size_t)pipit__node_numel(k->node) * es);
            pipit__kernel_fail(DECREASE);
            return;
        }
    pipit__range(p.B * p.Hq, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / p.Hq, h = bh % p.Hq, g = h / rep;
        const int32_t *doc = docs + b * p.S;
        for (int half = 0; half < 2; half++) {
            int64_t off = chunk_off(&p, half);
            for (int64_t s = off; s < off + p.L;) {
                run r = next_run(doc, s, off, p.L, p.S, p.causal);
                pipit__attn_dims a = run_dims(&p, &r, 1, ldq, ldkv, ldq);
                int64_t qrow = b * p.Lc + half * p.L + (r.s - off), krow = b * p.S + r.ks;
                void *o = AT(k->out, qrow * ldq + h * p.D);
                const void *q = CAT(k->in[0], qrow * ldq + h * p.D), *kk = CAT(k->in[1], krow * ldkv + g * p.D);
                const void *v = CAT(k->in[1], krow * ldkv + (p.Hkv + g) * p.D);
                if (dt == PIPIT_F64) pipit__attn_fwd_f64(o, q, kk, v, &a, 0, 1);
                else if (dt == PIPIT_BF16) pipit__attn_fwd_bf16(o, q, kk, v, &a, 0, 1);
                else pipit__attn_fwd_f32(o, q, kk, v, &a, 0, 1);
                s = r.e;
            }
        }
    }
}

static void bwd_one(pipit_dtype dt, void *dq, void *dk, void *dv, const void *q, const void *k, const void *v,
                    const void *dout, const pipit__attn_dims *a) {
    if (dt == PIPIT_F64) pipit__attn_bwd_f64(dq, dk, dv, q, k, v, dout, a, 0, 1);
    else if (dt == PIPIT_BF16) pipit__attn_bwd_bf16(dq, dk, dv, q, k, v, dout, a, 0, 1);
    else pipit__attn_bwd_f32(dq, dk, dv, q, k, v, dout, a, 0, 1);
}

/* dst[r, :D] (row stride ld) = a[r] + b[r] where in_b[r], else a[r]
 * (a, b packed [rows, D]). */
static void add_rows(pipit_dtype dt, void *dst, int64_t ld, const void *a, const void *b, const unsigned char *in_b,
                     int64_t rows, int64_t D) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t d = 0; d < D; d++) {
            int64_t i = r * D + d, o = r * ld + d;
            if (dt == PIPIT_F64)
                ((double *)dst)[o] = ((const double *)a)[i] + (in_b[r] ? ((const double *)b)[i] : 0.0);
            else if (dt == PIPIT_F32)
                ((float *)dst)[o] = ((const float *)a)[i] + (in_b[r] ? ((const float *)b)[i] : 0.0f);
            else {
                float s = pipit__bf16_to_f32(((const pipit__bf16 *)a)[i]);
                if (in_b[r]) s += pipit__bf16_to_f32(((const pipit__bf16 *)b)[i]);
                ((pipit__bf16 *)dst)[o] = pipit__bf16_from_f32(s);
            }
        }
}

/* The output is [dq | dkv], flat, in q's and kv's layouts. */
void pipit__cpu_ATTN_CP_DOC_D(const pipit__kctx *k, int ith, int nth) {
    dims p = dims_of(k);
    pipit_dtype dt = (pipit_dtype)k->node->dtype;
    size_t es = pipit__dtype_size(dt);
    const int32_t *docs = k->in[3];
    int64_t rep = p.Hq / p.Hkv, ldq = p.Hq * p.D, ldkv = 2 * p.Hkv * p.D, lo, hi;
    int64_t nq = pipit__node_numel(KIN(0)), SD = p.S * p.D;
    for (int64_t b = 0; b < p.B; b++)
        if (decreasing(docs + b * p.S, p.S)) {
            if (ith == 0) memset(k->out, 0, (size_t)pipit__node_numel(k->node) * es);
            pipit__kernel_fail(DECREASE);
            return;
        }
    pipit__range(p.B * p.Hkv, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    /* per pair: this kv head's k and v packed [S, D], two dk, dv pairs, and
     * which rows the earlier chunk wrote */
    char *buf = malloc((size_t)(6 * SD) * es + (size_t)p.S);
    if (!buf) {
        pipit__kernel_fail("attention_cp_doc (backward): out of memory for its per-head panels");
        return;
    }
    void *kc = buf, *vc = buf + SD * es, *dk1 = buf + 2 * SD * es, *dv1 = buf + 3 * SD * es;
    void *dk0 = buf + 4 * SD * es, *dv0 = buf + 5 * SD * es;
    unsigned char *in0 = (unsigned char *)buf + 6 * SD * es;
    char *dq = k->out, *dkv = dq + nq * es;
    for (int64_t bg = lo; bg < hi; bg++) {
        int64_t b = bg / p.Hkv, g = bg % p.Hkv;
        const int32_t *doc = docs + b * p.S;
        for (int64_t r = 0; r < p.S; r++) {
            memcpy((char *)kc + r * p.D * es, CAT(k->in[1], (b * p.S + r) * ldkv + g * p.D), (size_t)p.D * es);
            memcpy((char *)vc + r * p.D * es, CAT(k->in[1], (b * p.S + r) * ldkv + (p.Hkv + g) * p.D),
                   (size_t)p.D * es);
        }
        memset(dk1, 0, (size_t)SD * es);
        memset(dv1, 0, (size_t)SD * es);
        memset(in0, 0, (size_t)p.S);
        for (int half = 1; half >= 0; half--) { /* the later chunk first, as attention_cp */
            int64_t off = chunk_off(&p, half);
            for (int64_t s = off; s < off + p.L;) {
                run r = next_run(doc, s, off, p.L, p.S, p.causal);
                pipit__attn_dims a = run_dims(&p, &r, rep, ldq, p.D, ldq);
                int64_t qrow = b * p.Lc + half * p.L + (r.s - off), ko = r.ks * p.D;
                bwd_one(dt, AT(dq, qrow * ldq + g * rep * p.D), AT(half ? dk1 : dk0, ko), AT(half ? dv1 : dv0, ko),
                        CAT(k->in[0], qrow * ldq + g * rep * p.D), CAT(kc, ko), CAT(vc, ko),
                        CAT(k->in[2], qrow * ldq + g * rep * p.D), &a);
                if (!half) memset(in0 + r.ks, 1, (size_t)(r.ke - r.ks));
                s = r.e;
            }
        }
        add_rows(dt, AT(dkv, b * p.S * ldkv + g * p.D), ldkv, dk1, dk0, in0, p.S, p.D);
        add_rows(dt, AT(dkv, b * p.S * ldkv + (p.Hkv + g) * p.D), ldkv, dv1, dv0, in0, p.S, p.D);
    }
    free(buf);
}
