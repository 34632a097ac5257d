/*
 * dp.c — data parallelism between the D replicas of a pipeline rank, and
 * the exchange of losses. A param's elements are cut into D shards of whole
 * sum-of-squares chunks (pipit__dp_shard); replica k owns shard k:
 *   reduce-scatter  every replica sends each shard to its owner; the owner
 *                   adds the D copies in replica order ((g0 + g1) + g2)...,
 *                   so the sum does not depend on who delivers first;
 *   all-gather      the owner sends the summed shard to every replica,
 *                   which leaves every replica with the same bits;
 *   ZeRO-1          the gather is skipped: each replica computes its
 *                   shard's chunk partials of the norm (exchanged, so
 *                   every replica adds the same chunks in the same order),
 *                   updates its shard with the moments it alone keeps, and
 *                   sends the new parameter shard to the others.
 * Peers are the world ranks of the same pipeline rank p and tensor-parallel
 * rank t in the other replicas (pipit__world(d, p, t)).
 */
#include <string.h>

#include "runtime/ep.h"
#include "runtime/program.h"
#include "runtime/transport.h"

static size_t esize(const pipit__param *pp) { return pipit__dtype_size(pp->dtype); }

static int peer(const pipit_program *p, int w, int replica) { return pipit__world(p, replica, p->rs[w].prank, p->rs[w].tp); }

/* Sends [a_k, b_k) of block to replica k's rank, for every k but mine
 * (mine_to_all = 0: to the owner k of each shard; 1: my own shard to all),
 * zero-copy when the plan fences it (zc), else as copies. With fence = 1
 * it instead waits for each of those sends to complete. */
static pipit_status send_shards(pipit_program *p, int w, int param, const uint8_t *block, pipit__tag_kind kind,
                                int mine_to_all, int zc, int fence) {
    const pipit__param *pp = &p->plan.params[param];
    int reps[PIPIT_MAX_DP], d = 0, D = pipit__dp_group(p, w, param, reps, &d); /* expert params: D/E */
    pipit__transport *t = p->transport;
    for (int k = 0; k < D; k++) {
        if (k == d) continue;
        int shard = mine_to_all ? d : k;
        int64_t a, b;
        pipit__dp_shard(pp->numel, D, shard, &a, &b);
        if (b <= a) continue;
        uint64_t tag = pipit__tag(kind, param, shard);
        pipit_status s = fence ? t->vt->fence(t, w, peer(p, w, reps[k]), tag)
                               : (zc ? t->vt->isend : t->vt->send)(t, w, peer(p, w, reps[k]), tag,
                                                                  block + (size_t)a * esize(pp),
                                                                  (size_t)(b - a) * esize(pp));
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

/* Receives every other replica's shard k of block into place. */
static pipit_status recv_shards(pipit_program *p, int w, int param, uint8_t *block, pipit__tag_kind kind) {
    const pipit__param *pp = &p->plan.params[param];
    int reps[PIPIT_MAX_DP], d = 0, D = pipit__dp_group(p, w, param, reps, &d);
    pipit__transport *t = p->transport;
    for (int k = 0; k < D; k++) {
        if (k == d) continue;
        int64_t a, b;
        pipit__dp_shard(pp->numel, D, k, &a, &b);
        if (b <= a) continue;
        pipit_status s = t->vt->recv(t, w, peer(p, w, reps[k]), pipit__tag(kind, param, k), block + (size_t)a * esize(pp),
                                     (size_t)(b - a) * esize(pp));
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

/* The other replicas' copies of my shard, into dp_buf slots (slot k holds
 * replica k's; mine stays in the gradient block). */
static pipit_status recv_for_reduce(pipit_program *p, int w, int param) {
    const pipit__param *pp = &p->plan.params[param];
    int reps[PIPIT_MAX_DP], d = 0, D = pipit__dp_group(p, w, param, reps, &d);
    int64_t a, b;
    pipit__dp_shard(pp->numel, D, d, &a, &b);
    if (b <= a) return PIPIT_STATUS_OK;
    pipit__transport *t = p->transport;
    for (int k = 0; k < D; k++) {
        if (k == d) continue;
        uint8_t *slot = p->rs[w].dp_buf + (size_t)k * p->dp_shard_bytes;
        pipit_status s = t->vt->recv(t, w, peer(p, w, reps[k]), pipit__tag(PIPIT_TAG_DP_REDUCE, param, d), slot,
                                     (size_t)(b - a) * esize(pp));
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

/* Chunk partials of shard k live at chunks[a_k / CHUNK ...). */
static pipit_status exchange_sumsq(pipit_program *p, int w, int param, int sending) {
    const pipit__param *pp = &p->plan.params[param];
    int reps[PIPIT_MAX_DP], d = 0, D = pipit__dp_group(p, w, param, reps, &d);
    double *chunks = p->rs[w].chunks;
    pipit__transport *t = p->transport;
    for (int k = 0; k < D; k++) {
        if (k == d) continue;
        int shard = sending ? d : k;
        int64_t a, b;
        pipit__dp_shard(pp->numel, D, shard, &a, &b);
        if (b <= a) continue;
        int64_t c0 = a / PIPIT_SUMSQ_CHUNK, c1 = (b + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK;
        uint64_t tag = pipit__tag(PIPIT_TAG_DP_SUMSQ, param, shard);
        size_t n = sizeof(double) * (size_t)(c1 - c0);
        pipit_status s = sending ? t->vt->send(t, w, peer(p, w, reps[k]), tag, chunks + c0, n)
                                 : t->vt->recv(t, w, peer(p, w, reps[k]), tag, chunks + c0, n);
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

/* The loss rank of replica d sends its M losses to every other world rank
 * of its tensor-parallel slice (the T loss ranks of a replica compute the
 * same losses); each rank receives replica `in->peer`'s from its loss rank. */
static pipit_status exchange_losses(pipit_program *p, int w, const pipit__instr *in) {
    int M = p->plan.M, P = p->plan.nranks, d = p->rs[w].replica, tp = p->rs[w].tp;
    double *losses = p->rs[w].losses;
    pipit__transport *t = p->transport;
    if (in->kind == INS_LOSS_SEND) {
        for (int u = 0; u < P * p->plan.D; u++) {
            int q = pipit__world(p, u / P, u % P, tp);
            if (q == w) continue;
            pipit_status s = t->vt->send(t, w, q, pipit__tag(PIPIT_TAG_LOSS, d, 0), losses + (size_t)d * M,
                                         sizeof(double) * (size_t)M);
            if (s) return s;
        }
        return PIPIT_STATUS_OK;
    }
    int src = pipit__world(p, in->peer, in->use, tp);
    if (src == w) return PIPIT_STATUS_OK;
    return t->vt->recv(t, w, src, pipit__tag(PIPIT_TAG_LOSS, in->peer, 0), losses + (size_t)in->peer * M,
                       sizeof(double) * (size_t)M);
}

/* The shard sends of a send instruction (fence = 0), or their fences. */
static pipit_status shards_of(pipit_program *p, int w, const pipit__instr *in, int fence) {
    pipit__rank_state *rs = &p->rs[w];
    size_t off = p->plan.ranks[rs->prank].param_off[in->param];
    switch ((pipit__ins_kind)in->kind) {
    case INS_DP_RS_SEND: return send_shards(p, w, in->param, rs->grad_block + off, PIPIT_TAG_DP_REDUCE, 0, in->zc, fence);
    case INS_DP_AG_SEND: return send_shards(p, w, in->param, rs->grad_block + off, PIPIT_TAG_DP_GRAD, 1, in->zc, fence);
    case INS_DP_PARAM_SEND: return send_shards(p, w, in->param, rs->param_block + off, PIPIT_TAG_DP_PARAM, 1, in->zc, fence);
    default: return pipit__err(PIPIT_STATUS_INTERNAL, "rank %d: a fence for instruction kind %d, not a send", w, in->kind);
    }
}

pipit_status pipit__dp_fence(pipit_program *p, int w, const pipit__instr *in) { return shards_of(p, w, in, 1); }

pipit_status pipit__dp_comm(pipit_program *p, int w, const pipit__instr *in) {
    pipit__rank_state *rs = &p->rs[w];
    switch ((pipit__ins_kind)in->kind) {
    case INS_DP_RS_SEND: case INS_DP_AG_SEND: case INS_DP_PARAM_SEND: return shards_of(p, w, in, 0);
    case INS_DP_RS_RECV: return recv_for_reduce(p, w, in->param);
    case INS_DP_AG_RECV: return recv_shards(p, w, in->param, rs->grad_block + p->plan.ranks[rs->prank].param_off[in->param], PIPIT_TAG_DP_GRAD);
    case INS_DP_PARAM_RECV: return recv_shards(p, w, in->param, rs->param_block + p->plan.ranks[rs->prank].param_off[in->param], PIPIT_TAG_DP_PARAM);
    case INS_DP_SUMSQ_SEND: return exchange_sumsq(p, w, in->param, 1);
    case INS_DP_SUMSQ_RECV: return exchange_sumsq(p, w, in->param, 0);
    case INS_LOSS_SEND:
    case INS_LOSS_RECV: return exchange_losses(p, w, in);
    default: break;
    }
    return PIPIT_STATUS_OK;
}

/* The reduce-scatter's sum of my shard, on this thread's slice: the D
 * copies in replica order into the sum slot, then back into the gradient. */
void pipit__dp_compute(pipit_program *p, int w, const pipit__instr *in, int ith, int nth) {
    if (in->kind != INS_DP_RS_RECV) return;
    const pipit__param *pp = &p->plan.params[in->param];
    pipit__rank_state *rs = &p->rs[w];
    int reps[PIPIT_MAX_DP], d = 0, D = pipit__dp_group(p, w, in->param, reps, &d);
    if (D == 1) return; /* an expert param of E = D replicas: nothing to add */
    int64_t a, b, lo, hi;
    pipit__dp_shard(pp->numel, D, d, &a, &b);
    pipit__range(b - a, ith, nth, &lo, &hi);
    if (hi <= lo) return;
    uint8_t *grad = rs->grad_block + p->plan.ranks[rs->prank].param_off[in->param] + (size_t)a * esize(pp);
    void *srcs[PIPIT_MAX_DP];
    for (int k = 0; k < D; k++) srcs[k] = k == d ? (void *)grad : rs->dp_buf + (size_t)k * p->dp_shard_bytes;
    uint8_t *sum = rs->dp_buf + (size_t)d * p->dp_shard_bytes; /* my slot is free: my copy is in grad */
    p->be->sum_uses(pp->dtype, sum, srcs, D, lo, hi);
    p->be->copy(grad + (size_t)lo * esize(pp), sum + (size_t)lo * esize(pp), (size_t)(hi - lo) * esize(pp), 0, 1);
}

/* ZeRO-3's gather before the loop (runtime/zero.c): my shard of param,
 * already in place in `block`, to every other replica (sending = 1, as
 * copies), or theirs into place (sending = 0). */
pipit_status pipit__dp_param_gather(pipit_program *p, int w, int param, uint8_t *block, int sending) {
    return sending ? send_shards(p, w, param, block, PIPIT_TAG_DP_PARAM, 1, 0, 0)
                   : recv_shards(p, w, param, block, PIPIT_TAG_DP_PARAM);
}
