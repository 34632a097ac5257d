/*
 * attn_doc.c — attention over packed documents (op attention_doc) on the
 * CPU. qkv [B,T,(Hq+2Hkv)*D] holds per row q | k | v; doc i32 [B,T] the
 * document of every token. A query sees only the keys of its own run of
 * equal ids, so the [T,T] score matrix of a sequence is block diagonal:
 * each document is an independent attention problem of its length L, run
 * by the same blocked kernels as a sequence of L tokens alone
 * (pipit__attn_fwd / _bwd with B = 1 on pointers into the document's
 * rows). The blocks between documents are never computed — the CPU's
 * "skip fully masked tiles", at the coarsest grain: the work falls from
 * T^2 to the sum of L^2. Threads split (batch, head) pairs (forward) and
 * (batch, kv head) pairs (backward) as the plain kernels do, and a pair's
 * documents run in order: the bits depend only on the shapes and the ids,
 * and one document per sequence gives attention's own bits.
 */
#include "backend/cpu/attn_doc.h"

#include "backend/cpu/kernels.h"

/* The end of the run of equal ids that starts at s (doc row of T). */
static int64_t run_end(const int32_t *doc, int64_t s, int64_t T) {
    int64_t e = s + 1;
    while (e < T && doc[e] == doc[s]) e++;
    return e;
}

/* One sub-problem's pointers: element offsets into qkv / out, by dtype. */
#define AT(p, off) ((void *)((char *)(p) + (size_t)(off) * es))
#define CAT(p, off) ((const void *)((const char *)(p) + (size_t)(off) * es))

static void fwd_one(pipit_dtype dt, void *o, const void *q, const void *k, const void *v, const pipit__attn_dims *a) {
    if (dt == PIPIT_F64) pipit__attn_fwd_f64(o, q, k, v, a, 0, 1);
    else if (dt == PIPIT_BF16) pipit__attn_fwd_bf16(o, q, k, v, a, 0, 1);
    else pipit__attn_fwd_f32(o, q, k, v, a, 0, 1);
}

static void bwd_one(pipit_dtype dt, void *dq, void *dk, void *dv, const void *q, const void *k, const void *v,
                    const void *dout, const pipit__attn_dims *a) {
    if (dt == PIPIT_F64) pipit__attn_bwd_f64(dq, dk, dv, q, k, v, dout, a, 0, 1);
    else if (dt == PIPIT_BF16) pipit__attn_bwd_bf16(dq, dk, dv, q, k, v, dout, a, 0, 1);
    else pipit__attn_bwd_f32(dq, dk, dv, q, k, v, dout, a, 0, 1);
}

void pipit__attn_doc_fwd(pipit_dtype dt, void *out, const void *qkv, const int32_t *doc, const pipit__attn_doc *p,
                         int ith, int nth) {
    size_t es = pipit__dtype_size(dt);
    int64_t D = p->D, rep = p->Hq / p->Hkv, ld = (p->Hq + 2 * p->Hkv) * D, ldo = p->Hq * D, lo, hi;
    pipit__range(p->B * p->Hq, ith, nth, &lo, &hi);
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t b = bh / p->Hq, h = bh % p->Hq, g = h / rep;
        const int32_t *db = doc + b * p->T;
        for (int64_t s = 0; s < p->T;) {
            int64_t e = run_end(db, s, p->T), row = b * p->T + s;
            pipit__attn_dims a = {1, e - s, e - s, 1, 1, D, ld, ld, ld, ldo, p->causal, p->scale};
            fwd_one(dt, AT(out, row * ldo + h * D), CAT(qkv, row * ld + h * D),
                    CAT(qkv, row * ld + (p->Hq + g) * D), CAT(qkv, row * ld + (p->Hq + p->Hkv + g) * D), &a);
            s = e;
        }
    }
}

void pipit__attn_doc_bwd(pipit_dtype dt, void *dqkv, const void *qkv, const void *dout, const int32_t *doc,
                         const pipit__attn_doc *p, int ith, int nth) {
    size_t es = pipit__dtype_size(dt);
    int64_t D = p->D, rep = p->Hq / p->Hkv, ld = (p->Hq + 2 * p->Hkv) * D, ldo = p->Hq * D, lo, hi;
    pipit__range(p->B * p->Hkv, ith, nth, &lo, &hi);
    for (int64_t bg = lo; bg < hi; bg++) {
        int64_t b = bg / p->Hkv, g = bg % p->Hkv;
        const int32_t *db = doc + b * p->T;
        for (int64_t s = 0; s < p->T;) {
            int64_t e = run_end(db, s, p->T), row = b * p->T + s;
            int64_t qo = row * ld + g * rep * D, ko = row * ld + (p->Hq + g) * D;
            int64_t vo = row * ld + (p->Hq + p->Hkv + g) * D;
            /* the group's rep query heads side by side, one kv head */
            pipit__attn_dims a = {1, e - s, e - s, rep, 1, D, ld, ld, ld, ldo, p->causal, p->scale};
            bwd_one(dt, AT(dqkv, qo), AT(dqkv, ko), AT(dqkv, vo), CAT(qkv, qo), CAT(qkv, ko), CAT(qkv, vo),
                    CAT(dout, row * ldo + g * rep * D), &a);
            s = e;
        }
    }
}
