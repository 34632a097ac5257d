/*
 * memreport.c — a pipeline rank's memory by kind, from the same blocks the
 * runtime reserves (runtime/program.c rank_blocks) and memory admission
 * adds up: parameters, gradients, AdamW moments, gradient accumulators,
 * the activation arena and the data-parallel buffer, with ZeRO-2/3's kept
 * shards. ZeRO-2/3's full blocks exist during a step only (runtime/zero.c)
 * but do at its peak, so they count here (on host memory ZeRO-2's
 * gradient shards lie in the full block's allocation: not counted twice).
 * The arena is split into the loop's buffers at their peak (activations)
 * and the rest (transient), which also holds ZeRO-3's all-gather: copied
 * sends of this replica's
 * shard to the D - 1 others, all in flight before the first receive
 * (runtime/zero.c). With reshard_after_forward the parameters count the
 * most of them gathered at once (the block's other pages are not touched),
 * and the gather's copies two params' shards (gathered one at a time, a
 * replica at most one gather ahead of another).
 * The caller's feeds are not the rank's and are left out.
 */
#include "inspect/memreport.h"

#include <string.h>

#include "compile/plan.h"

void pipit__rank_memory(const pipit_program *p, int prank, pipit__rank_mem *m) {
    memset(m, 0, sizeof *m);
    const pipit__plan *pl = &p->plan;
    const pipit__rank_plan *rp = &pl->ranks[prank];
    double shard = pl->forward_only ? 0 : (double)pipit__moment_bytes(p, prank, 0, NULL);
    int sharded = pl->D > 1;
    double loop = (double)pipit__activation_peak(rp), arena = (double)rp->arena_bytes;
    m->activations = loop < arena ? loop : arena;
    m->arena_slack = arena - m->activations;
    /* reshard_after_forward: the most params gathered at once (runtime/zero_reshard.c) */
    double gathered = pipit__zero_reshard(p) ? (double)pipit__reshard_peak(p, prank) : (double)rp->param_bytes;
    m->params = gathered + (sharded && pipit__zero_params(p) ? shard : 0);
    /* ZeRO-2 on host memory: the shards lie in the full block's allocation (runtime/zero.c) */
    int grad_shard_apart = sharded && pipit__zero_grads(p) && !p->be->host_memory;
    m->grads = pl->forward_only ? 0 : (double)rp->param_bytes + (grad_shard_apart ? shard : 0);
    m->moments = 2 * shard;
    m->accumulators = (double)rp->acc_bytes;
    m->dp_buffer = sharded ? (double)pl->D * (double)p->dp_shard_bytes : 0;
    m->gather_copies = sharded && pipit__zero_params(p) ? (double)(pl->D - 1) * shard : 0;
    if (pipit__zero_reshard(p)) /* a replica is at most one gather ahead of another: two params' copies */
        m->gather_copies = 2.0 * (double)(pl->D - 1) * (double)pipit__reshard_max_shard(p, prank);
    m->transient = m->arena_slack + m->accumulators + m->dp_buffer + m->gather_copies;
    m->total = m->activations + m->params + m->grads + m->moments + m->transient;
}
