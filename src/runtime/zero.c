/*
 * zero.c — ZeRO-2 and ZeRO-3 over the D replicas of a pipeline rank
 * (docs/architecture.md §9). What ZeRO-1 shards (the AdamW moments and the
 * update) stays as it is (dp.c, optim.c); these stages shard what is left:
 *   ZeRO-2  the gradients. The step's full gradient block (where the loop
 *           accumulates, and whose shards the overlapped reduce-scatter
 *           sends as soon as each param's gradient is final) exists from
 *           the step's start to its end (the update reads the reduced
 *           shard in it); this replica's reduced shard is kept in
 *           gshard_block (laid out as the moments). On host memory the
 *           two are one allocation of the full size: when the step ends
 *           each param's shard is moved down to its place in the shard
 *           layout (offsets never grow: opt_off[i] <= param_off[i]) and
 *           the pages past the shards are given back to the system
 *           (madvise), so between steps only the shards are resident, and
 *           during the step the full block is all there is (a step holds
 *           ZeRO-1's gradient bytes, not those plus the shards; the last
 *           step's shard is dead once the next one zeroes the block). On a
 *           device backend the full block is reserved by each step and
 *           freed at its end, beside a shard block that stays.
 *   ZeRO-3  also the parameters: between steps each replica keeps only its
 *           shard (pshard_block). Before the microbatch loop the rank
 *           reserves the stage's full parameter block and all-gathers it
 *           (its shard to every other replica, theirs into place), once per
 *           step. Once the loop is done (its last W has run) the replica's
 *           shard is copied out and the full block released, unless the
 *           post-loop reads params (a gradient transform may): then at the
 *           end of the step. The update writes the shard in place (ZeRO-1
 *           without its post-update all-gather).
 * ZeRO-3 with reshard_after_forward gathers each param per task instead
 * (runtime/zero_reshard.c).
 * The bits are ZeRO-1's: the same gradients, the same sums in replica
 * order, the same update of the same shard; the gather moves bytes.
 */
#include <string.h>

#include "runtime/ep.h"
#include "runtime/program.h"

int pipit__zero_grads(const pipit_program *p) { return p->plan.zero >= 2 && !p->plan.g->ngradset; /* as pipit__dp_sharded_grads */ }

int pipit__zero_params(const pipit_program *p) { return p->plan.zero >= 3; }

/* Copies this replica's shard of each held param between the full block
 * and the shard block (to_shard = 1: full -> shard). */
static void move_shards(const pipit_program *p, const pipit__rank_state *rs, uint8_t *full, uint8_t *shard,
                        int to_shard) {
    const pipit__rank_plan *rp = &p->plan.ranks[rs->prank];
    for (int i = 0; i < p->plan.nparams; i++) {
        if (rp->param_off[i] == SIZE_MAX) continue;
        if (to_shard && full == rs->param_block && !pipit__reshard_present(p, rs->world, i)) continue; /* released */
        const pipit__param *pp = &p->plan.params[i];
        size_t es = pipit__dtype_size(pp->dtype);
        int64_t a, b;
        pipit__dp_replica_shard(&p->plan, i, rs->replica, &a, &b); /* expert params: of their D/E holders */
        if (b <= a) continue;
        uint8_t *f = full + rp->param_off[i] + (size_t)a * es, *s = shard + rs->opt_off[i];
        size_t n = (size_t)(b - a) * es;
        if (to_shard) p->be->copy(s, f, n, 0, 1);
        else p->be->copy(f, s, n, 0, 1);
    }
}

size_t pipit__zero_grad_alloc_bytes(const pipit_program *p, int prank, size_t shard_bytes) {
    return p->be->host_memory ? p->plan.ranks[prank].param_bytes : shard_bytes;
}

/* ZeRO-2 on host memory, at the end of a step: each held param's reduced
 * shard moved from its place in the full block (param_off + a elements)
 * down to opt_off, in param order (both offsets grow with the param index
 * and opt_off[i] <= param_off[i], so a move never overwrites a shard not
 * yet moved), then the pages past the shards given back. */
static void compact_grads(const pipit_program *p, const pipit__rank_state *rs) {
    const pipit__rank_plan *rp = &p->plan.ranks[rs->prank];
    uint8_t *g = rs->grad_block;
    p->be->sync(rs->world); /* the step's kernels and sends are done with the block */
    size_t end = 0;
    for (int i = 0; i < p->plan.nparams; i++) {
        if (rp->param_off[i] == SIZE_MAX) continue;
        size_t es = pipit__dtype_size(p->plan.params[i].dtype);
        int64_t a, b;
        pipit__dp_replica_shard(&p->plan, i, rs->replica, &a, &b);
        size_t n = b > a ? (size_t)(b - a) * es : 0;
        if (n) memmove(g + rs->opt_off[i], g + rp->param_off[i] + (size_t)a * es, n);
        end = PIPIT_MAX(end, rs->opt_off[i] + n);
    }
    pipit__discard_pages(g + end, rp->param_bytes - end);
}

static pipit_status reserve_full(const pipit_program *p, int w, uint8_t **at, const char *what, int untouched) {
    size_t n = p->plan.ranks[p->rs[w].prank].param_bytes;
    if (!(*at = (uint8_t *)p->be->reserve(n)))
        return p->be->sync(w) ? PIPIT_STATUS_RUNTIME
                              : pipit__err(PIPIT_STATUS_NOMEM, "out of memory for rank %d: its step's %s (%zu bytes)",
                                           w, what, n);
    if (!untouched) p->be->zero(*at, n);
    return PIPIT_STATUS_OK;
}

pipit_status pipit__zero_begin_step(pipit_program *p, int w) {
    pipit__rank_state *rs = &p->rs[w];
    pipit_status s = PIPIT_STATUS_OK;
    if (pipit__zero_grads(p) && !rs->grad_block) {
        if (p->be->host_memory) { /* the shards' allocation, all of it zeroed again (the shards are dead) */
            rs->grad_block = rs->gshard_block;
            p->be->zero(rs->grad_block, p->plan.ranks[rs->prank].param_bytes);
        } else
            s = reserve_full(p, w, &rs->grad_block, "gradients (ZeRO-2)", 0);
    }
    if (s || !pipit__zero_params(p) || rs->param_block) return s;
    if ((s = reserve_full(p, w, &rs->param_block, "parameters (ZeRO-3)", pipit__zero_reshard(p)))) return s;
    if (pipit__zero_reshard(p)) return pipit__reshard_begin(p, w); /* gathered per task (zero_reshard.c) */
    move_shards(p, rs, rs->param_block, rs->pshard_block, 0);
    if ((s = p->be->sync(w))) return s;
    const pipit__rank_plan *rp = &p->plan.ranks[rs->prank];
    /* every send (copies: they never block) before every receive */
    for (int sending = 1; sending >= 0; sending--)
        for (int i = 0; !s && i < p->plan.nparams; i++)
            if (rp->param_off[i] != SIZE_MAX)
                s = pipit__dp_param_gather(p, w, i, rs->param_block + rp->param_off[i], sending);
    return s;
}

/* Whether the post-loop of rank plan r reads or writes the parameter
 * block itself (the update writes the shard block instead). */
static int post_uses_params(const pipit__rank_plan *r) {
    for (int32_t i = r->post_at; i < r->n; i++) {
        const pipit__instr *in = &r->ins[i];
        if (in->kind == INS_UPDATE) continue;
        if (in->out.kind == LOC_PARAM) return 1;
        for (int j = 0; j < PIPIT_MAX_IN; j++)
            if (in->in[j].kind == LOC_PARAM) return 1;
    }
    return 0;
}

int pipit__zero_release_at_loop_end(const pipit_program *p, int w) {
    const pipit__rank_state *rs = &p->rs[w];
    const pipit__rank_plan *r = &p->plan.ranks[rs->prank];
    return pipit__zero_params(p) && rs->param_block && r->post_at < r->n && !post_uses_params(r);
}

void pipit__zero_loop_end(pipit_program *p, int w) {
    pipit__rank_state *rs = &p->rs[w];
    if (!pipit__zero_reshard(p)) move_shards(p, rs, rs->param_block, rs->pshard_block, 1); /* else: unchanged */
    p->be->sync(w); /* the loop's kernels and the copy are done before the block goes */
    p->be->free(rs->param_block);
    rs->param_block = NULL;
}

void pipit__zero_end_step(pipit_program *p, int w) {
    pipit__rank_state *rs = &p->rs[w];
    if (pipit__zero_params(p) && rs->param_block) {
        move_shards(p, rs, rs->param_block, rs->pshard_block, 1);
        p->be->sync(w);
        p->be->free(rs->param_block);
        rs->param_block = NULL;
    }
    if (pipit__zero_grads(p) && rs->grad_block == rs->gshard_block && rs->grad_block) {
        compact_grads(p, rs);
        rs->grad_block = NULL;
    }
    if (pipit__zero_grads(p) && rs->grad_block) {
        move_shards(p, rs, rs->grad_block, rs->gshard_block, 1);
        p->be->sync(w);
        p->be->free(rs->grad_block);
        rs->grad_block = NULL;
    }
}

size_t pipit__held_bytes(const pipit_program *p, const pipit__rank_state *rs, int kind) {
    const pipit__rank_plan *rp = &p->plan.ranks[rs->prank];
    if (p->plan.forward_only && kind != 0) return 0; /* no gradients, no optimizer state */
    size_t shard = pipit__moment_bytes(p, rs->prank, rs->replica, NULL), held = 0;
    if (kind == 2) return rs->m_block && rs->v_block ? 2 * shard : 0;
    if (kind == 1) {
        if (rs->grad_block) held += rp->param_bytes;
        if (rs->gshard_block && rs->gshard_block != rs->grad_block) held += shard; /* else: in the full block */
        return held;
    }
    if (rs->param_block && !pipit__zero_reshard(p)) held += rp->param_bytes;
    else if (rs->param_block) /* reshard_after_forward: the params gathered now (the rest is untouched) */
        for (int i = 0; i < p->plan.nparams; i++)
            if (rp->param_off[i] != SIZE_MAX && pipit__reshard_present(p, rs->world, i))
                held += (size_t)p->plan.params[i].numel * pipit__dtype_size(p->plan.params[i].dtype);
    if (rs->pshard_block) held += shard;
    return held;
}
