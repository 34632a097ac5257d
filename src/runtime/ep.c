/*
 * ep.c — the runtime's side of expert parallelism (docs/architecture.md,
 * "Mixture of experts"). World rank w = d P + p (T = 1) is EP rank d % E
 * of the group of replicas [E (d / E), E (d / E) + E) at pipeline rank p.
 * The all-to-all pair moves fixed-size blocks (capacity is static) with
 * the transports' all-to-all (transport.c), so every member receives the
 * same bytes whatever the arrival order: no arithmetic happens in it. The
 * norm terms are summed in rank order (the all-reduce's), so every member
 * computes the same global norm.
 */
#include <string.h>

#include "runtime/ep.h"
#include "runtime/transport.h"

/* The E world ranks of w's EP group, ascending. */
static void ep_group(const pipit_program *p, int w, int *group) {
    int E = p->plan.E, base = p->rs[w].replica / E * E;
    for (int j = 0; j < E; j++) group[j] = pipit__world(p, base + j, p->rs[w].prank, p->rs[w].tp);
}

int pipit__dp_group(const pipit_program *p, int w, int i, int *reps, int *mine) {
    int D = p->plan.D, d = p->rs[w].replica, step = p->plan.params[i].ep ? p->plan.E : 1, n = 0;
    for (int r = d % step; r < D; r += step) {
        if (r == d) *mine = n;
        reps[n++] = r;
    }
    return n;
}

void pipit__dp_replica_shard(const pipit__plan *pl, int i, int replica, int64_t *a, int64_t *b) {
    int E = pl->params[i].ep ? pl->E : 1;
    pipit__dp_shard(pl->params[i].numel, pl->D / E, replica / E, a, b);
}

/* [A][B][run] -> [B][A][run] (bytes). */
static void swap_axes(uint8_t *dst, const uint8_t *src, int64_t A, int64_t B, size_t run) {
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++) memcpy(dst + ((size_t)b * (size_t)A + (size_t)a) * run, src + ((size_t)a * (size_t)B + (size_t)b) * run, run);
}

/* One all-to-all of an EP op: its sizes, and the host staging between the
 * halves: `send` holds the blocks by destination, `recv` receives them. */
typedef struct {
    pipit_dtype dt;
    size_t bytes, run; /* the tensor's bytes; one expert's slots of one member */
    int64_t Xl;        /* the local experts X/E */
    int E, fwd;
} a2a_shape;

static pipit_status a2a_shape_of(const pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k,
                                 a2a_shape *a) {
    const pipit__node *n = k->node;
    a->dt = (pipit_dtype)n->dtype;
    a->bytes = (size_t)in->numel * pipit__dtype_size(a->dt);
    a->E = p->plan.E, a->fwd = n->op == PIPIT_OP_EP_A2A;
    if (n->iattr[0] != a->E)
        return pipit__err(PIPIT_STATUS_INTERNAL, "rank %d: an all-to-all built for E = %lld in a program of E = %d", w,
                          (long long)n->iattr[0], a->E);
    a->Xl = a->fwd ? n->shape[0] : n->shape[0] / a->E;
    a->run = a->bytes / (size_t)a->E / (size_t)a->Xl;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__ep_start(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k, void **staging) {
    const pipit__backend *be = p->be;
    a2a_shape a;
    int group[PIPIT_MAX_COLL];
    *staging = NULL;
    pipit_status s = a2a_shape_of(p, w, in, k, &a);
    if (s || a.E == 1) return s; /* E = 1: the identity, at finish */
    uint8_t *host = pipit__malloc(2 * (a.bytes ? a.bytes : 1));
    if (!host) return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory for a %zu-byte all-to-all", w, a.bytes);
    uint8_t *x = host, *send = host, *recv = host + a.bytes;
    if (!a.fwd) x = recv; /* the reverse swaps its axes into the send half first */
    if (be->host_memory) memcpy(x, k->in[0], a.bytes);
    else be->download(x, k->in[0], a.bytes);
    /* forward: [E (to), Xl, run] as it is; reverse: [Xl, E (to), run] -> [E, Xl, run] */
    if (!a.fwd) swap_axes(send, recv, a.Xl, a.E, a.run);
    ep_group(p, w, group);
    *staging = host;
    return pipit__transport_alltoall_start(p->transport, w, group, a.E, in->node, in->param, a.dt, send, recv,
                                           in->numel / a.E, in->first);
}

pipit_status pipit__ep_finish(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k, void *staging) {
    const pipit__backend *be = p->be;
    a2a_shape a;
    int group[PIPIT_MAX_COLL];
    pipit_status s = a2a_shape_of(p, w, in, k, &a);
    if (s) return s;
    if (a.E == 1) { /* the identity */
        if (k->out != k->in[0]) be->copy(k->out, k->in[0], a.bytes, 0, 1);
        return PIPIT_STATUS_OK;
    }
    if (!staging) return pipit__err(PIPIT_STATUS_INTERNAL, "rank %d: an all-to-all finished that never started", w);
    uint8_t *send = staging, *recv = send + a.bytes, *y = recv;
    ep_group(p, w, group);
    s = pipit__transport_alltoall_finish(p->transport, w, group, a.E, in->node, in->param, a.dt, send, recv,
                                         in->numel / a.E, in->first);
    /* forward: [E (from), Xl, run] -> [Xl, E, run] into the send half, free after the fence;
     * reverse: [E (from): its experts, Xl, run] as it is */
    if (!s && a.fwd) swap_axes(send, recv, a.E, a.Xl, a.run), y = send;
    if (s) return s; /* the transport may still touch the staging: the caller keeps it (runtime/exec.c) */
    if (be->host_memory) memcpy(k->out, y, a.bytes);
    else be->upload(k->out, y, a.bytes);
    pipit__free(staging);
    return PIPIT_STATUS_OK;
}

pipit_status pipit__ep_norm_terms(pipit_program *p, int w) {
    int E = p->plan.E, group[PIPIT_MAX_COLL];
    if (E == 1) return PIPIT_STATUS_OK;
    pipit__rank_state *rs = &p->rs[w];
    for (int i = 0; i < p->plan.nparams; i++)
        if (!p->plan.params[i].ep && rs->replica % E != 0) rs->sumsq[i] = 0;
    ep_group(p, w, group);
    return pipit__transport_allreduce_op(p->transport, w, group, E, PIPIT_EP_NORM_ID, PIPIT_F64, PIPIT_REDUCE_SUM,
                                         rs->sumsq, p->plan.nparams);
}
