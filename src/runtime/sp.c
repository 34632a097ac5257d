/*
 * sp.c — sequence parallelism at run time (ops.c: SP_GATHER, SP_SCATTER,
 * SP_SPLIT along an axis; lowered to INS_TP like the tensor-parallel
 * collectives, run on thread 0 of each of the stage's T ranks).
 *
 * A value seen as [outer, T*L] (L elements of one rank's block per outer
 * row) moves to and from the transport's layout [T, outer*L], rank k's
 * elements contiguous: a permute around the all-gather and the
 * reduce-scatter unless outer is 1 (the axis is the outermost). The
 * reduce-scatter adds in rank order (the all-reduce's bits for those
 * elements) and sums bf16 values in fp32 (widened in the permute, rounded
 * once after), as the tensor-parallel all-reduce does. Device memory goes
 * through host copies.
 */
#include <string.h>

#include "runtime/sp.h"
#include "runtime/transport.h"
#include "util/bf16.h"

/* [outer][T] blocks of L elements -> [T][outer] (to_ranks) or back; src
 * bf16 widened to f32 (widen +1) or f32 rounded to dst bf16 (widen -1);
 * es: the element size when not widening. */
static void permute(void *dst, const void *src, int64_t outer, int T, int64_t L, size_t es, int to_ranks, int widen) {
    for (int64_t o = 0; o < outer; o++)
        for (int r = 0; r < T; r++) {
            size_t a = (size_t)(o * T + r) * (size_t)L, b = (size_t)(r * outer + o) * (size_t)L;
            size_t si = to_ranks ? a : b, di = to_ranks ? b : a;
            if (widen > 0)
                for (int64_t i = 0; i < L; i++)
                    ((float *)dst)[di + i] = pipit__bf16_to_f32(((const pipit__bf16 *)src)[si + i]);
            else if (widen < 0)
                for (int64_t i = 0; i < L; i++)
                    ((pipit__bf16 *)dst)[di + i] = pipit__bf16_from_f32(((const float *)src)[si + i]);
            else memcpy((char *)dst + di * es, (const char *)src + si * es, (size_t)L * es);
        }
}

/* The op on host memory: x the input, y the output (distinct buffers). */
static pipit_status on_host(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k, const void *x,
                            void *y) {
    const pipit__node *n = k->node;
    int T = p->plan.T, t = p->rs[w].tp, group[PIPIT_MAX_COLL];
    pipit_dtype dt = (pipit_dtype)n->dtype;
    size_t es = pipit__dtype_size(dt);
    int64_t outer, len, inner;
    /* the short side: one rank's block (the node sizes were checked at build) */
    pipit__axis_split(n->op == PIPIT_OP_SP_GATHER ? k->in_node[0] : n, (int)n->iattr[0], &outer, &len, &inner);
    int64_t L = len * inner, count = outer * L;
    for (int r = 0; r < T; r++) group[r] = w - t + r; /* the stage's T ranks: t is innermost */
    if (n->op == PIPIT_OP_SP_SPLIT) { /* no message: this rank's block of each outer row */
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)y + (size_t)(o * L) * es, (const char *)x + (size_t)((o * T + t) * L) * es, (size_t)L * es);
        return PIPIT_STATUS_OK;
    }
    if (n->op == PIPIT_OP_SP_GATHER) { /* own block into place, gathered, then [T][outer] -> [outer][T] */
        void *buf = outer == 1 ? y : pipit__malloc((size_t)(T * count) * es + 1);
        if (!buf)
            return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory for a %lld-element all-gather", w,
                              (long long)(T * count));
        memcpy((char *)buf + (size_t)(t * count) * es, x, (size_t)count * es);
        pipit_status s = pipit__transport_allgather(p->transport, w, group, T, in->node, dt, buf, count);
        if (buf != y) {
            if (!s) permute(y, buf, outer, T, L, es, 0, 0);
            pipit__free(buf);
        }
        return s;
    }
    /* SP_SCATTER: [outer][T] -> [T][outer] (widened), reduce-scatter, block t out */
    int bf = dt == PIPIT_BF16;
    size_t wes = bf ? sizeof(float) : es;
    void *buf = pipit__malloc((size_t)(T * count) * wes + 1);
    if (!buf)
        return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory for a %lld-element reduce-scatter", w,
                          (long long)(T * count));
    permute(buf, x, outer, T, L, es, 1, bf);
    pipit_status s =
        pipit__transport_reduce_scatter(p->transport, w, group, T, in->node, bf ? PIPIT_F32 : dt, buf, count);
    if (!s) permute(y, (char *)buf + (size_t)(t * count) * wes, 1, 1, count, es, 0, bf ? -1 : 0);
    pipit__free(buf);
    return s;
}

pipit_status pipit__sp_collective(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k) {
    const pipit__backend *be = p->be;
    size_t es = pipit__dtype_size((pipit_dtype)k->node->dtype);
    size_t xb = (size_t)pipit__node_numel(k->in_node[0]) * es, yb = (size_t)in->numel * es;
    if (p->plan.T == 1) { /* the identity */
        if (k->out != k->in[0]) be->copy(k->out, k->in[0], yb, 0, 1);
        return PIPIT_STATUS_OK;
    }
    if (be->host_memory) return on_host(p, w, in, k, k->in[0], k->out);
    void *x = pipit__malloc(xb + 1), *y = pipit__malloc(yb + 1);
    pipit_status s = x && y ? PIPIT_STATUS_OK
                            : pipit__err(PIPIT_STATUS_NOMEM,
                                         "rank %d: out of memory for the host copies of a %zu-byte sequence-parallel "
                                         "collective",
                                         w, xb + yb);
    if (!s) be->download(x, k->in[0], xb);
    if (!s) s = on_host(p, w, in, k, x, y);
    if (!s) be->upload(k->out, y, yb);
    pipit__free(x), pipit__free(y);
    return s;
}
