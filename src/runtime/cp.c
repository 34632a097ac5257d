/*
 * cp.c — context parallelism's collectives (ir/cp.h) as INS_TP
 * instructions, run by thread 0 of each member of the context group:
 * replicas d C .. d C + C - 1 of the same pipeline and tensor-parallel
 * rank, world ranks P T apart. CP_GATHER all-gathers every member's [B,
 * 2L, F] (any dtype: bytes are moved) and lays the rows out in sequence
 * order; CP_SCATTER lays the gradient's rows out as the members' blocks and
 * reduce-scatters them: member c gets the rank-order sum of everyone's
 * rows of its two chunks (bf16 through an fp32 copy, rounded once), so for
 * a fixed C the bits depend neither on arrival order nor on threads vs
 * processes. Device memory goes through host copies.
 */
#include "runtime/cp.h"

#include <string.h>

#include "ir/cp.h"
#include "runtime/transport.h"
#include "util/bf16.h"

/* The C world ranks of w's context group, ascending; returns w's index. */
static int cp_group(const pipit_program *p, int w, int *group) {
    int C = p->plan.C, c = pipit__cp_rank(p, w), stride = p->plan.nranks * p->plan.T;
    for (int k = 0; k < C; k++) group[k] = w + (k - c) * stride;
    return c;
}

/* Between the members' blocks [C][B][2L][F] (blocks) and the sequence
 * order [B][S][F] (seq), rows of rb bytes: to_seq 1 gathers, 0 scatters. */
static void permute(char *seq, char *blocks, int64_t B, int64_t L, int C, size_t rb, int to_seq) {
    int64_t Lc = 2 * L, S = Lc * C;
    for (int k = 0; k < C; k++)
        for (int64_t b = 0; b < B; b++)
            for (int h = 0; h < 2; h++) {
                char *blk = blocks + (size_t)((k * B + b) * Lc + h * L) * rb;
                char *sq = seq + (size_t)(b * S + pipit__cp_row(h * L, L, C, k)) * rb;
                if (to_seq) memcpy(sq, blk, (size_t)L * rb);
                else memcpy(blk, sq, (size_t)L * rb);
            }
}

/* On host memory: out = CP_GATHER / CP_SCATTER of x. */
static pipit_status run_host(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k, void *out,
                             const void *x) {
    const pipit__node *n = k->node, *xn = k->in_node[0];
    int C = p->plan.C, group[PIPIT_MAX_COLL], gather = n->op == PIPIT_OP_CP_GATHER;
    int c = cp_group(p, w, group);
    pipit_dtype dt = (pipit_dtype)n->dtype;
    const pipit__node *local = gather ? xn : n; /* the [B, 2L, ...] side */
    int64_t B = local->shape[0], L = local->shape[1] / 2, per = pipit__node_numel(local); /* one member's block */
    size_t es = pipit__dtype_size(dt), rb = (size_t)(per / (B * 2 * L)) * es;
    int wide = !gather && dt == PIPIT_BF16; /* reduced in fp32 */
    size_t wes = wide ? sizeof(float) : es;
    char *blocks = pipit__malloc((size_t)(per * C) * wes + 1);
    if (!blocks)
        return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory for a %lld-element context-parallel %s", w,
                          (long long)(per * C), gather ? "all-gather" : "reduce-scatter");
    pipit_status s;
    if (gather) {
        memcpy(blocks + (size_t)(c * per) * es, x, (size_t)per * es);
        s = pipit__transport_allgather(p->transport, w, group, C, in->node, dt, blocks, per);
        if (!s) permute(out, blocks, B, L, C, rb, 1);
    } else {
        permute((char *)x, blocks, B, L, C, rb, 0); /* reads x only */
        if (wide) { /* widen in place, back to front */
            const pipit__bf16 *h = (const pipit__bf16 *)blocks;
            float *f = (float *)blocks;
            for (int64_t i = per * C - 1; i >= 0; i--) f[i] = pipit__bf16_to_f32(h[i]);
        }
        s = pipit__transport_reduce_scatter(p->transport, w, group, C, in->node, wide ? PIPIT_F32 : dt, blocks, per);
        if (!s && wide) {
            const float *f = (const float *)blocks + c * per;
            for (int64_t i = 0; i < per; i++) ((pipit__bf16 *)out)[i] = pipit__bf16_from_f32(f[i]);
        } else if (!s) {
            memcpy(out, blocks + (size_t)(c * per) * es, (size_t)per * es);
        }
    }
    pipit__free(blocks);
    return s;
}

pipit_status pipit__cp_collective(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k) {
    const pipit__backend *be = p->be;
    size_t ob = (size_t)pipit__node_numel(k->node) * pipit__dtype_size((pipit_dtype)k->node->dtype);
    size_t ib = (size_t)pipit__node_numel(k->in_node[0]) * pipit__dtype_size((pipit_dtype)k->in_node[0]->dtype);
    if (p->plan.C == 1) { /* the identity (one member; its two chunks are the sequence in order) */
        if (k->out != k->in[0]) be->copy(k->out, k->in[0], ob, 0, 1);
        return PIPIT_STATUS_OK;
    }
    if (be->host_memory) return run_host(p, w, in, k, k->out, k->in[0]);
    void *hin = pipit__malloc(ib + 1), *hout = pipit__malloc(ob + 1);
    pipit_status s = PIPIT_STATUS_OK;
    if (!hin || !hout) s = pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory for a context-parallel collective", w);
    if (!s) {
        be->download(hin, k->in[0], ib);
        s = run_host(p, w, in, k, hout, hin);
        if (!s) be->upload(k->out, hout, ob);
    }
    pipit__free(hin);
    pipit__free(hout);
    return s;
}
