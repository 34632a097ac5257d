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

pipit_status pipit__ep_collective(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k) {
    const pipit__backend *be = p->be;
    const pipit__node *n = k->node;
    pipit_dtype dt = (pipit_dtype)n->dtype;
    size_t es = pipit__dtype_size(dt), bytes = (size_t)in->numel * es;
    int E = p->plan.E, fwd = n->op == PIPIT_OP_EP_A2A, group[PIPIT_MAX_COLL];
    if (n->iattr[0] != E)
        return pipit__err(PIPIT_STATUS_INTERNAL, "rank %d: an all-to-all built for E = %lld in a program of E = %d", w,
                          (long long)n->iattr[0], E);
    if (E == 1) { /* the identity */
        if (k->out != k->in[0]) be->copy(k->out, k->in[0], bytes, 0, 1);
        return PIPIT_STATUS_OK;
    }
    /* the local experts X/E and one expert's slots of one member (C x the rest) in bytes */
    int64_t Xl = fwd ? n->shape[0] : n->shape[0] / E;
    size_t run = bytes / (size_t)E / (size_t)Xl;
    uint8_t *host = pipit__malloc(2 * (bytes ? bytes : 1));
    if (!host) return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory for a %zu-byte all-to-all", w, bytes);
    uint8_t *a = host, *b = host + bytes;
    if (be->host_memory) memcpy(a, k->in[0], bytes);
    else be->download(a, k->in[0], bytes);
    ep_group(p, w, group);
    pipit_status s;
    if (fwd) { /* [E (to), Xl, run] -> [E (from), Xl, run] -> [Xl, E, run] */
        s = pipit__transport_alltoall(p->transport, w, group, E, in->node, dt, a, b, in->numel / E);
        if (!s) swap_axes(a, b, E, Xl, run);
    } else { /* [Xl, E (to), run] -> [E, Xl, run] -> [E (from): its experts, Xl, run] */
        swap_axes(b, a, Xl, E, run);
        s = pipit__transport_alltoall(p->transport, w, group, E, in->node, dt, b, a, in->numel / E);
    }
    if (!s) {
        if (be->host_memory) memcpy(k->out, a, bytes);
        else be->upload(k->out, a, bytes);
    }
    pipit__free(host);
    return s;
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
