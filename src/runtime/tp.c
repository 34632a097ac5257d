/*
 * tp.c — the runtime's side of tensor parallelism: the INS_TP collective
 * (TP_SUM, TP_MAX) and the cross-shard sum of the global norm, both on the
 * transports' in-stage all-reduce (transport.c), which combines the T
 * ranks' values in rank order: for a fixed T the bits depend neither on
 * which message arrives first nor on threads vs MPI processes.
 */
#include <string.h>

#include "runtime/program.h"
#include "runtime/transport.h"

/* The T world ranks of w's stage, ascending (consecutive: t is innermost). */
static void stage_group(const pipit_program *p, int w, int *group) {
    int base = w - p->rs[w].tp;
    for (int k = 0; k < p->plan.T; k++) group[k] = base + k;
}

pipit_status pipit__tp_collective(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k) {
    const pipit__backend *be = p->be;
    pipit_dtype dt = (pipit_dtype)k->node->dtype;
    size_t bytes = (size_t)in->numel * pipit__dtype_size(dt);
    pipit__reduce_op op = k->node->op == PIPIT_OP_TP_MAX ? PIPIT_REDUCE_MAX : PIPIT_REDUCE_SUM;
    int T = p->plan.T, group[PIPIT_MAX_COLL];
    if (T == 1) { /* the identity */
        if (k->out != k->in[0]) be->copy(k->out, k->in[0], bytes, 0, 1);
        return PIPIT_STATUS_OK;
    }
    stage_group(p, w, group);
    if (be->host_memory) { /* in place on the output */
        if (k->out != k->in[0]) memcpy(k->out, k->in[0], bytes);
        return pipit__transport_allreduce_op(p->transport, w, group, T, in->node, dt, op, k->out, in->numel);
    }
    /* device memory: the all-reduce works on a host copy */
    void *host = pipit__malloc(bytes ? bytes : 1);
    if (!host) return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory for a %zu-byte all-reduce", w, bytes);
    be->download(host, k->in[0], bytes);
    pipit_status s = pipit__transport_allreduce_op(p->transport, w, group, T, in->node, dt, op, host, in->numel);
    if (!s) be->upload(k->out, host, bytes);
    pipit__free(host);
    return s;
}

pipit_status pipit__tp_norm_terms(pipit_program *p, int w) {
    int T = p->plan.T, group[PIPIT_MAX_COLL];
    if (T == 1) return PIPIT_STATUS_OK;
    pipit__rank_state *rs = &p->rs[w];
    /* a sharded param's term is the sum over its T shards; a replicated
     * one (bitwise equal on the T ranks) is counted once, from rank 0 */
    for (int i = 0; i < p->plan.nparams; i++)
        if (p->plan.params[i].shard_axis < 0 && rs->tp != 0) rs->sumsq[i] = 0;
    stage_group(p, w, group);
    return pipit__transport_allreduce_op(p->transport, w, group, T, PIPIT_TP_NORM_ID, PIPIT_F64, PIPIT_REDUCE_SUM,
                                         rs->sumsq, p->plan.nparams);
}
