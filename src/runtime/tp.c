/*
 * tp.c — the runtime's side of tensor parallelism: the INS_TP collective
 * (TP_SUM, TP_MAX) and the cross-shard sum of the global norm, both on the
 * transports' in-stage all-reduce (transport.c), which combines the T
 * ranks' values in rank order: for a fixed T the bits depend neither on
 * which message arrives first nor on threads vs MPI processes. bf16
 * values (options.dtype bf16) are all-reduced in fp32: widened, combined
 * in rank order in fp32 and rounded to bf16 once.
 */
#include <string.h>

#include "runtime/cp.h"
#include "runtime/program.h"
#include "runtime/sp.h"
#include "runtime/transport.h"
#include "util/bf16.h"

/* The T world ranks of w's stage, ascending (consecutive: t is innermost). */
static void stage_group(const pipit_program *p, int w, int *group) {
    int base = w - p->rs[w].tp;
    for (int k = 0; k < p->plan.T; k++) group[k] = base + k;
}

/* The all-reduce of data (host memory) over group: bf16 values through an
 * fp32 copy (twice the bytes on the wire; one rounding, after the sum). */
static pipit_status reduce_host(pipit_program *p, int w, const int *group, const pipit__instr *in, pipit_dtype dt,
                                pipit__reduce_op op, void *data) {
    if (dt != PIPIT_BF16)
        return pipit__transport_allreduce_op(p->transport, w, group, p->plan.T, in->node, dt, op, data, in->numel);
    float *wide = pipit__malloc(sizeof *wide * (size_t)PIPIT_MAX(in->numel, 1));
    if (!wide)
        return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory for the fp32 copy of a %lld-element bf16 all-reduce",
                          w, (long long)in->numel);
    pipit__bf16 *v = data;
    for (int64_t i = 0; i < in->numel; i++) wide[i] = pipit__bf16_to_f32(v[i]);
    pipit_status s = pipit__transport_allreduce_op(p->transport, w, group, p->plan.T, in->node, PIPIT_F32, op, wide,
                                                   in->numel);
    for (int64_t i = 0; !s && i < in->numel; i++) v[i] = pipit__bf16_from_f32(wide[i]);
    pipit__free(wide);
    return s;
}

pipit_status pipit__tp_collective(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k) {
    if (pipit__is_sp_op(k->node->op)) return pipit__sp_collective(p, w, in, k); /* runtime/sp.c */
    if (pipit__is_cp_op(k->node->op)) return pipit__cp_collective(p, w, in, k); /* runtime/cp.c */
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
        return reduce_host(p, w, group, in, dt, op, k->out);
    }
    /* device memory: the all-reduce works on a host copy */
    void *host = pipit__malloc(bytes ? bytes : 1);
    if (!host) return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory for a %zu-byte all-reduce", w, bytes);
    be->download(host, k->in[0], bytes);
    pipit_status s = reduce_host(p, w, group, in, dt, op, host);
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
