/*
 * program.c — pipit_compile and pipit_program_free: validate the options,
 * build the plan (compile/), then instantiate it on a backend: every
 * rank's memory, its thread team and, with several ranks, the transport.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ep.h"
#include "runtime/cp.h"
#include "runtime/program.h"
#include "runtime/transport.h"
#include "schedule/schedule.h"
#include "util/checked.h"
#include "compile/memplan.h"
#include "util/memlimit.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A finite value in [lo, hi] (hi_open: [lo, hi)); NaN and infinities fail
 * (comparisons that are written as "accept" never let NaN through). */
static int in_range(double x, double lo, double hi, int hi_open) {
    return isfinite(x) && x >= lo && (hi_open ? x < hi : x <= hi);
}

static pipit_status check_options(const pipit_options *o) {
    if (o->microbatches < 0 || o->microbatches > PIPIT__SCHED_MAX_MB)
        return pipit__err(PIPIT_STATUS_INVALID, "options.microbatches must be in 1..%d (or 0: default 1), got %d",
                          PIPIT__SCHED_MAX_MB, o->microbatches);
    if (o->threads < 0 || o->threads > PIPIT__MAX_THREADS)
        return pipit__err(PIPIT_STATUS_INVALID, "options.threads must be in 1..%d (or 0: default 1), got %d",
                          PIPIT__MAX_THREADS, o->threads);
    if (!in_range(o->clip_norm, 0, HUGE_VAL, 0))
        return pipit__err(PIPIT_STATUS_INVALID, "options.clip_norm must be a finite number >= 0 (0: no clipping), got %g",
                          o->clip_norm);
    if (o->remat < PIPIT_REMAT_NONE || o->remat > PIPIT_REMAT_POINTWISE)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.remat must be PIPIT_REMAT_NONE (0), PIPIT_REMAT_FULL (1: the stage's forward again "
                          "in its backward) or PIPIT_REMAT_POINTWISE (2: elementwise values again), got %d",
                          o->remat);
    if (o->no_a2a_overlap != 0 && o->no_a2a_overlap != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "options.no_a2a_overlap must be 0 (overlap all-to-alls where the "
                          "schedule allows) or 1 (never), got %d", o->no_a2a_overlap);
    if (o->tf32 != 0 && o->tf32 != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "options.tf32 must be 0 (fp32 GEMMs) or 1 (TF32 tensor cores), got %d",
                          o->tf32);
    if (!in_range(o->mem_limit, 0, HUGE_VAL, 0))
        return pipit__err(PIPIT_STATUS_INVALID, "options.mem_limit must be a finite number of bytes >= 0 (0: the "
                          "detected limit), got %g", o->mem_limit);
    if (o->plan_only != 0 && o->plan_only != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "options.plan_only must be 0 (a program that runs) or 1 (the plan "
                          "only: no rank memory), got %d", o->plan_only);
    if (o->no_mem_check != 0 && o->no_mem_check != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "options.no_mem_check must be 0 (check) or 1 (skip the memory "
                          "admission), got %d", o->no_mem_check);
    if (o->dtype != PIPIT_F32 && o->dtype != PIPIT_BF16)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.dtype must be PIPIT_F32 (0: values as the graph declares them) or PIPIT_BF16 (%d: "
                          "mixed precision), got %d",
                          (int)PIPIT_BF16, (int)o->dtype);
    if (o->bf16_policy != PIPIT_BF16_AUTOCAST && o->bf16_policy != PIPIT_BF16_ALL)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.bf16_policy must be PIPIT_BF16_AUTOCAST (0: bf16 matmuls, fp32 residual stream and "
                          "norms) or PIPIT_BF16_ALL (1: every activation bf16), got %d",
                          (int)o->bf16_policy);
    if (o->data_parallel < 0 || o->data_parallel > PIPIT_MAX_DP)
        return pipit__err(PIPIT_STATUS_INVALID, "options.data_parallel must be in 1..%d (or 0: default 1), got %d",
                          PIPIT_MAX_DP, o->data_parallel);
    if (o->zero1 != 0 && o->zero1 != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "options.zero1 must be 0 or 1 (ZeRO stage 1), got %d", o->zero1);
    if (o->zero < 0 || o->zero > 3)
        return pipit__err(PIPIT_STATUS_INVALID, "options.zero must be a ZeRO stage in 0..3, got %d", o->zero);
    if (o->zero1 && o->zero > 1)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.zero1 = 1 asks for ZeRO stage 1 but options.zero = %d: contradictory (set "
                          "options.zero alone)",
                          o->zero);
    if (o->reshard_after_forward != 0 && o->reshard_after_forward != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "options.reshard_after_forward must be 0 or 1, got %d",
                          o->reshard_after_forward);
    if (o->reshard_after_forward && o->zero != 3)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.reshard_after_forward releases ZeRO-3's gathered parameters after each task: it "
                          "needs options.zero = 3, got options.zero = %d",
                          o->zero);
    if (o->tensor_parallel < 0 || o->tensor_parallel > PIPIT_MAX_COLL)
        return pipit__err(PIPIT_STATUS_INVALID, "options.tensor_parallel must be in 1..%d (or 0: default 1), got %d",
                          PIPIT_MAX_COLL, o->tensor_parallel);
    const pipit_optimizer *op = &o->optimizer;
    if (op->kind != PIPIT_OPT_ADAMW && op->kind != PIPIT_OPT_SGD)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.optimizer.kind must be PIPIT_OPT_ADAMW (0) or PIPIT_OPT_SGD (1), got %d",
                          (int)op->kind);
    const struct {
        const char *name;
        double v;
        int open; /* [0,1) */
    } f[] = {{"lr", op->lr, 0}, {"beta1", op->beta1, 1}, {"beta2", op->beta2, 1},
             {"eps", op->eps, 0}, {"weight_decay", op->weight_decay, 0}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!in_range(f[i].v, 0, f[i].open ? 1 : HUGE_VAL, f[i].open))
            return pipit__err(PIPIT_STATUS_INVALID, "options.optimizer.%s must be a finite number %s, got %g", f[i].name,
                              f[i].open ? "in [0, 1)" : ">= 0", f[i].v);
    const pipit_lr_schedule *ls = &o->lr_schedule;
    if (ls->kind != PIPIT_LR_CONSTANT && ls->kind != PIPIT_LR_COSINE && ls->kind != PIPIT_LR_LINEAR)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.lr_schedule.kind must be PIPIT_LR_CONSTANT (0), PIPIT_LR_COSINE (1) or "
                          "PIPIT_LR_LINEAR (2), got %d",
                          (int)ls->kind);
    if (ls->warmup < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "options.lr_schedule.warmup must be >= 0 (0: none), got %lld",
                          (long long)ls->warmup);
    if (ls->kind == PIPIT_LR_CONSTANT) {
        if (ls->decay_steps != 0)
            return pipit__err(PIPIT_STATUS_INVALID,
                              "options.lr_schedule.decay_steps must be 0 for a constant schedule (set kind to "
                              "PIPIT_LR_COSINE or PIPIT_LR_LINEAR to decay), got %lld",
                              (long long)ls->decay_steps);
        if (ls->min_lr != 0)
            return pipit__err(PIPIT_STATUS_INVALID,
                              "options.lr_schedule.min_lr must be 0 for a constant schedule (set kind to "
                              "PIPIT_LR_COSINE or PIPIT_LR_LINEAR to decay), got %g",
                              ls->min_lr);
    } else {
        if (ls->decay_steps <= ls->warmup)
            return pipit__err(PIPIT_STATUS_INVALID,
                              "options.lr_schedule.decay_steps must be > options.lr_schedule.warmup (%lld) for a "
                              "decaying schedule, got %lld",
                              (long long)ls->warmup, (long long)ls->decay_steps);
        if (!in_range(ls->min_lr, 0, HUGE_VAL, 0))
            return pipit__err(PIPIT_STATUS_INVALID, "options.lr_schedule.min_lr must be a finite number >= 0, got %g",
                              ls->min_lr);
        /* the "decay" would raise the rate (a zero optimizer is the default AdamW, lr 3e-4) */
        double lr = pipit__optimizer_resolved(op).lr;
        if (ls->min_lr > lr)
            return pipit__err(PIPIT_STATUS_INVALID,
                              "options.lr_schedule.min_lr %g is above the optimizer's lr %g: a decaying schedule goes "
                              "from lr down to min_lr",
                              ls->min_lr, lr);
    }
    return PIPIT_STATUS_OK;
}

/* The loss gradient of one microbatch's loss: 1/(M*D), since the step's
 * loss is the mean over all microbatches of all replicas. */
static void upload_seed(const pipit_program *p, pipit__rank_state *rs) {
    if (p->plan.gr.seed < 0) return; /* forward-only: no backward */
    double s64 = 1.0 / ((double)p->plan.M * p->plan.D);
    float s32 = (float)s64;
    if (p->plan.g->nodes[p->plan.gr.seed].dtype == PIPIT_F64) p->be->upload(rs->seed, &s64, sizeof s64);
    else p->be->upload(rs->seed, &s32, sizeof s32);
}

/* Where each held param's AdamW moments live: the whole param, or with
 * ZeRO-1 only this replica's shard of it. opt_off may be NULL (sizes only). */
size_t pipit__moment_bytes(const pipit_program *p, int prank, int replica, size_t *opt_off) {
    const pipit__rank_plan *rp = &p->plan.ranks[prank];
    size_t bytes = 0;
    for (int i = 0; i < p->plan.nparams; i++) {
        const pipit__param *pp = &p->plan.params[i];
        if (opt_off) opt_off[i] = SIZE_MAX;
        if (rp->param_off[i] == SIZE_MAX) continue;
        int64_t a = 0, b = pp->numel;
        if (p->plan.zero1) pipit__dp_replica_shard(&p->plan, i, replica, &a, &b); /* runtime/ep.c */
        if (opt_off) opt_off[i] = bytes;
        bytes += ((size_t)(b - a) * pipit__dtype_size(pp->dtype) + 63) / 64 * 64;
    }
    return bytes;
}

/* The large blocks of world rank w, in allocation order; returns their
 * count; `at` is where rs keeps each (NULL without rs: sizes only). */
typedef struct {
    const char *what;
    size_t bytes;
    uint8_t **at;
    int per_step; /* not reserved here: ZeRO-2/3's full blocks (reserved by each step and released at its
                     end, runtime/zero.c), or a shard block this stage does not use (0 bytes) */
} rank_block;

enum { NBLOCKS = 9 };

/* The admission's category of block k: parameters, gradients, moments,
 * accumulators, arena, data-parallel buffer (the ZeRO-2/3 shards count as
 * gradients and parameters). */
static int block_category(int k) { return k == 7 ? 1 : k == 8 ? 0 : k <= 1 ? k : k <= 3 ? 2 : k - 1; }

/* The bytes reserved for block k of world rank w: its own (zeroed), but
 * ZeRO-2's shards on host memory lie in an allocation of the full
 * gradient block's size (runtime/zero.c). What it adds to a rank's peak:
 * its bytes, but none for those shards (counted as the gradients). */
static size_t reserve_bytes(const pipit_program *p, int w, int k, const rank_block *b) {
    return k == 7 && pipit__zero_grads(p) ? pipit__zero_grad_alloc_bytes(p, pipit__prank_of(p, w), b->bytes) : b->bytes;
}
static double peak_bytes_of(const pipit_program *p, int k, const rank_block *b) {
    return k == 7 && pipit__zero_grads(p) && p->be->host_memory ? 0 : (double)b->bytes;
}

static int rank_blocks(const pipit_program *p, int w, pipit__rank_state *rs, size_t opt_bytes, rank_block *blk) {
    const pipit__rank_plan *rp = &p->plan.ranks[pipit__prank_of(p, w)];
    /* a forward-only program has no gradients and no optimizer state */
    size_t grad_bytes = p->plan.forward_only ? 0 : rp->param_bytes;
    if (p->plan.forward_only) opt_bytes = 0;
    rank_block all[NBLOCKS] = {
        {"parameters", rp->param_bytes, rs ? &rs->param_block : NULL, pipit__zero_params(p)},
        {"gradients", grad_bytes, rs ? &rs->grad_block : NULL, pipit__zero_grads(p)},
        {"optimizer first moments", opt_bytes, rs ? &rs->m_block : NULL, 0},
        {"optimizer second moments", opt_bytes, rs ? &rs->v_block : NULL, 0},
        {"gradient accumulators", rp->acc_bytes, rs ? &rs->acc_block : NULL, 0},
        {"activation arena", rp->arena_bytes, rs ? &rs->arena : NULL, 0},
        {"data-parallel buffer", (size_t)(p->plan.D > 1 ? p->plan.D : 0) * p->dp_shard_bytes, rs ? &rs->dp_buf : NULL, 0},
        /* ZeRO-2/3 (D > 1): what stays between steps, laid out as the moments */
        {"gradient shards (ZeRO-2)", pipit__zero_grads(p) ? opt_bytes : 0, rs ? &rs->gshard_block : NULL,
         !pipit__zero_grads(p)},
        {"parameter shards (ZeRO-3)", pipit__zero_params(p) ? opt_bytes : 0, rs ? &rs->pshard_block : NULL,
         !pipit__zero_params(p)},
    };
    int n = p->plan.D == 1 ? NBLOCKS - 3 : NBLOCKS;
    memcpy(blk, all, sizeof all);
    return n;
}

/* Device backends: a block for the inputs this rank reads, M microbatches
 * of each, filled at the start of every step (exec.c). Host memory needs
 * none: kernels read the caller's feeds in place. */
static pipit_status alloc_feeds(pipit_program *p, pipit__rank_state *rs) {
    const pipit__plan *pl = &p->plan;
    const pipit__rank_plan *rp = &pl->ranks[rs->prank];
    if (p->be->host_memory || pl->ninputs == 0) return PIPIT_STATUS_OK;
    rs->feed_off = pipit__malloc(sizeof *rs->feed_off * (size_t)pl->ninputs);
    if (!rs->feed_off) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    for (int i = 0; i < pl->ninputs; i++) rs->feed_off[i] = SIZE_MAX;
    for (int32_t k = 0; k < rp->n; k++)
        for (int j = 0; j < PIPIT_MAX_IN; j++)
            if (rp->ins[k].in[j].kind == LOC_FEED) rs->feed_off[rp->ins[k].in[j].idx] = 0;
    size_t bytes = 0;
    for (int i = 0; i < pl->ninputs; i++) {
        if (rs->feed_off[i] == SIZE_MAX) continue;
        size_t one = (size_t)pl->inputs[i].numel * pipit__dtype_size(pl->inputs[i].dtype), all;
        rs->feed_off[i] = bytes;
        if (!pipit__mul_size(one, (size_t)pl->M, &all) || !pipit__add_align64(bytes, all, &bytes))
            return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: its inputs of %d microbatches overflow size_t", rs->world,
                              pl->M);
    }
    if (bytes && !(rs->feed_block = p->be->reserve(bytes)))
        return pipit__err(PIPIT_STATUS_NOMEM, "out of memory for rank %d: its inputs (%zu bytes)", rs->world, bytes);
    return PIPIT_STATUS_OK;
}

/* Where the update writes each param's bf16 shadow (the arena slot of its
 * pre-loop cast), where the backend can; PIPIT_BF16_SHADOW=0 turns them
 * off (every step casts: the tests compare the two). */
static pipit_status find_shadows(const pipit_program *p, pipit__rank_state *rs, const pipit__rank_plan *rp) {
    rs->shadow_off = pipit__malloc(sizeof *rs->shadow_off * (size_t)PIPIT_MAX(p->plan.nparams, 1));
    if (!rs->shadow_off) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    for (int i = 0; i < p->plan.nparams; i++) rs->shadow_off[i] = SIZE_MAX;
    const char *env = getenv("PIPIT_BF16_SHADOW");
    int on = p->be->adamw_bf16 && !(env && strcmp(env, "0") == 0);
    for (int32_t k = 0; on && k < rp->n; k++)
        if (rp->ins[k].shadow) rs->shadow_off[rp->ins[k].param] = rp->ins[k].out.off, rs->has_shadows = 1;
    return PIPIT_STATUS_OK;
}

static pipit_status alloc_rank(pipit_program *p, int w) {
    pipit__rank_state *rs = &p->rs[w];
    rs->world = w;
    rs->prank = pipit__prank_of(p, w);
    rs->replica = pipit__replica_of(p, w);
    rs->tp = w % p->plan.T;
    const pipit__rank_plan *rp = &p->plan.ranks[rs->prank];
    const pipit__backend *be = p->be;
    pipit__bind_rank(p, w); /* its memory lives on its device */
    rs->opt_off = pipit__calloc((size_t)PIPIT_MAX(p->plan.nparams, 1), sizeof *rs->opt_off);
    size_t opt_bytes = rs->opt_off ? pipit__moment_bytes(p, rs->prank, rs->replica, rs->opt_off) : 0;
    /* The large blocks: reserved untouched first, zeroed only once all of
     * them exist, so a model that does not fit fails before filling any. */
    rank_block blk[NBLOCKS];
    int nblk = rank_blocks(p, w, rs, opt_bytes, blk);
    size_t total = 0;
    for (int i = 0; i < nblk; i++)
        if (!pipit__add_size(total, blk[i].bytes, &total) || total > (size_t)PIPIT__MAX_BYTES)
            return pipit__err(PIPIT_STATUS_NOMEM, "rank %d needs more than 2^56 bytes (limit of one rank's memory) at its %s",
                              w, blk[i].what);
    for (int i = 0; i < nblk; i++)
        if (!blk[i].per_step && !(*blk[i].at = (uint8_t *)be->reserve(reserve_bytes(p, w, i, &blk[i]))))
            return be->sync(w) ? PIPIT_STATUS_RUNTIME /* not memory: the device failed (its message) */
                               : pipit__err(PIPIT_STATUS_NOMEM,
                              "out of memory for rank %d: its %s (%zu bytes) failed; the rank needs %zu bytes in all "
                              "(%zu of parameters, %zu-byte activation arena)",
                              w, blk[i].what, reserve_bytes(p, w, i, &blk[i]), total, rp->param_bytes,
                              rp->arena_bytes);
    for (int i = 0; i < nblk; i++)
        if (!blk[i].per_step) be->zero(*blk[i].at, blk[i].bytes);
    rs->seed = be->alloc(sizeof(double));
    rs->losses = pipit__calloc((size_t)p->plan.M * (size_t)p->plan.D, sizeof *rs->losses);
    rs->srcs_ptr = pipit__calloc((size_t)PIPIT_MAX(rp->nsrcs, 1), sizeof *rs->srcs_ptr);
    rs->sumsq = pipit__calloc((size_t)PIPIT_MAX(p->plan.nparams, 1), sizeof *rs->sumsq);
    rs->chunks = pipit__calloc((size_t)PIPIT_MAX(rp->max_chunks, 1), sizeof *rs->chunks);
    rs->kc = pipit__calloc((size_t)PIPIT_MAX(rp->n, 1), sizeof *rs->kc);
    rs->a2a_host = pipit__calloc((size_t)PIPIT_MAX(rp->n, 1), sizeof *rs->a2a_host);
    rs->t_start = pipit__calloc((size_t)PIPIT_MAX(rp->ntasks, 1), sizeof *rs->t_start);
    rs->t_end = pipit__calloc((size_t)PIPIT_MAX(rp->ntasks, 1), sizeof *rs->t_end);
    /* device backends: one host thread per rank queues the work */
    rs->pool = pipit__pool_new(be->host_memory ? p->plan.threads : 1);
    /* ZeRO-2/3: a full block reserved by each step instead, its shard block here */
    int zg = pipit__zero_grads(p), zp = pipit__zero_params(p);
    if (!rs->opt_off || !(zp ? rs->pshard_block : rs->param_block) || !(zg ? rs->gshard_block : rs->grad_block) ||
        !rs->m_block || !rs->v_block || !rs->acc_block ||
        !rs->arena || !rs->seed || (p->plan.D > 1 && !rs->dp_buf) || !rs->losses || !rs->srcs_ptr || !rs->sumsq ||
        !rs->chunks || !rs->kc || !rs->a2a_host || !rs->t_start || !rs->t_end || !rs->pool)
        return pipit__err(PIPIT_STATUS_NOMEM,
                          "out of memory for rank %d (%zu bytes of parameters, %zu-byte activation arena)", w,
                          rp->param_bytes, rp->arena_bytes);
    pipit_status s = alloc_feeds(p, rs);
    if (!s) s = find_shadows(p, rs, rp);
    if (s) return s;
    upload_seed(p, rs);
    return be->sync(w); /* the zeroing and the seed are done, or the device's error */
}

/* The largest data-parallel shard of any param, in bytes. */
static size_t max_shard_bytes(const pipit__plan *pl) {
    size_t m = 0;
    for (int i = 0; pl->D > 1 && !pl->forward_only && i < pl->nparams; i++) {
        int64_t a, b;
        /* shard 0 is never smaller; an expert param is shared by D / E replicas (runtime/ep.c) */
        pipit__dp_shard(pl->params[i].numel, pl->params[i].ep ? pl->D / pl->E : pl->D, 0, &a, &b);
        m = PIPIT_MAX(m, (size_t)(b - a) * pipit__dtype_size(pl->params[i].dtype));
    }
    return (m + 63) / 64 * 64;
}

/* ---- memory admission (docs/refuses.md) ---- */

static const char ADMIT_ADVICE[] =
    "a schedule over more pipeline ranks, options.zero1 with data_parallel > 1 (shards the optimizer moments), "
    "options.remat (keeps only each stage's inputs for the backward), context parallelism (each rank of a "
    "context group holds 1/C of a sequence's activations: pipit_graph_set_context_parallel), or smaller or fewer "
    "microbatches would need less; options.no_mem_check = 1 skips this check";

/* Bytes of one microbatch's inputs (the caller's feeds). */
static double input_bytes(const pipit_graph *g, int32_t n) {
    double b = 0;
    for (int32_t i = 0; i < n; i++)
        if (g->nodes[i].op == PIPIT_OP_INPUT && !(g->nodes[i].flags & NODE_GRADOF))
            b += (double)pipit__node_bytes(&g->nodes[i]);
    return b;
}

/* Before planning, from the graph alone: what planning itself will take
 * at least (every forward op runs once per microbatch: an instruction, an
 * arena buffer and a slot of the emitter's table each), the model's
 * parameters with their gradients and moments when every rank is a
 * thread of this process, and the feeds. A lower bound: planning a step
 * of 2^24 microbatches is refused before its instruction lists exist. */
static pipit_status admit_graph(const pipit_program *p, const pipit_graph *g, const pipit_options *o) {
    if (o->no_mem_check) return PIPIT_STATUS_OK;
    pipit_status s = pipit_init(NULL, NULL);
    if (s) return s;
    double M = o->microbatches ? o->microbatches : 1, D = o->data_parallel ? o->data_parallel : 1;
    double params = 0, runs = 0;
    for (int32_t i = 0; i < g->n; i++) {
        const pipit__node *n = &g->nodes[i];
        if (n->op == PIPIT_OP_PARAM) params += (double)pipit__node_bytes(n);
        else if (pipit__node_runs(n)) runs++;
    }
    int procs = pipit_process_count(), plan_only = o->plan_only;
    /* a plan-only program holds its plan here, nothing else: this process's
     * own limit, not mem_limit (the target's, checked per rank after planning) */
    double state = procs > 1 || plan_only || !p->be->host_memory ? 0 : params * (o->forward_only ? 1 : 4);
    pipit__mem_item items[] = {
        {"parameters with their gradients and optimizer moments (at least)", state},
        {"instruction lists (at least)", M * runs * (double)sizeof(pipit__instr)},
        {"the memory plan's tables (at least)",
         M * (runs * (double)sizeof(pipit__mp_buf) + (double)g->n * sizeof(int32_t))},
        {"the feeds of one step (held by the caller)", plan_only ? 0 : input_bytes(g, g->n) * M * (procs > 1 ? 1 : D)},
    };
    return pipit__mem_admit(plan_only ? "planning this program" : "this program", items, 4, 0,
                            plan_only ? 0 : o->mem_limit, ADMIT_ADVICE);
}

/* Bytes the plan itself holds (already allocated when admit_plan runs). */
static double plan_bytes(const pipit__plan *pl) {
    double b = (double)pl->g->cap * sizeof(pipit__node);
    for (int r = 0; r < pl->nranks; r++)
        b += (double)pl->ranks[r].cap * sizeof(pipit__instr) + (double)pl->ranks[r].nbufs * sizeof(pipit__mp_buf) +
             (double)pl->ranks[r].nsrcs * sizeof(pipit__loc);
    return b;
}

/* A plan-only program against options.mem_limit, the target's: what each
 * world rank would hold in a job of one process per rank (its blocks and
 * its process's feeds of one step); the largest is named. */
static pipit_status admit_plan_ranks(const pipit_program *p) {
    static const char *const names[] = {"parameters", "gradients", "optimizer moments", "gradient accumulators",
                                        "activation arenas", "data-parallel buffers"};
    if (!(p->plan.opt.mem_limit > 0)) return PIPIT_STATUS_OK;
    double best[6] = {0}, best_total = -1;
    int best_w = 0;
    for (int w = 0; w < p->W; w++) {
        rank_block blk[NBLOCKS];
        double sum[6] = {0}, total = 0;
        int n = rank_blocks(p, w, NULL, pipit__moment_bytes(p, pipit__prank_of(p, w), pipit__replica_of(p, w), NULL), blk);
        for (int k = 0; k < n; k++) sum[block_category(k)] += peak_bytes_of(p, k, &blk[k]), total += peak_bytes_of(p, k, &blk[k]);
        if (total > best_total) best_total = total, best_w = w, memcpy(best, sum, sizeof best);
    }
    pipit__mem_item items[7];
    for (int k = 0; k < 6; k++) items[k] = (pipit__mem_item){names[k], best[k]};
    items[6] = (pipit__mem_item){"the feeds of one step (held by its process)",
                                 input_bytes(p->plan.g, p->plan.gr.fwd_end) * p->plan.M};
    char who[64];
    snprintf(who, sizeof who, "world rank %d (the largest of %d)", best_w, p->W);
    return pipit__mem_admit(who, items, 7, 0, p->plan.opt.mem_limit, ADMIT_ADVICE);
}

/* After planning, exactly: the blocks of this process's ranks (host
 * memory only: a device backend's live on its devices), the plan and the
 * feeds of one step, before the first block is reserved. */
static pipit_status admit_plan(const pipit_program *p) {
    if (p->plan.opt.no_mem_check) return PIPIT_STATUS_OK;
    if (p->plan.opt.plan_only) return admit_plan_ranks(p);
    static const char *const names[] = {"parameters", "gradients", "optimizer moments", "gradient accumulators",
                                        "activation arenas", "data-parallel buffers"};
    double sum[6] = {0};
    for (int i = 0; p->be->host_memory && i < p->nlocal; i++) {
        int w = p->local[i];
        rank_block blk[NBLOCKS];
        int n = rank_blocks(p, w, NULL, pipit__moment_bytes(p, pipit__prank_of(p, w), pipit__replica_of(p, w), NULL), blk);
        for (int k = 0; k < n; k++) sum[block_category(k)] += peak_bytes_of(p, k, &blk[k]);
    }
    double plan = plan_bytes(&p->plan);
    pipit__mem_item items[8];
    for (int k = 0; k < 6; k++) items[k] = (pipit__mem_item){names[k], sum[k]};
    items[6] = (pipit__mem_item){"the plan (instructions, buffers, graph)", plan};
    items[7] = (pipit__mem_item){"the feeds of one step (held by the caller)",
                                 input_bytes(p->plan.g, p->plan.gr.fwd_end) * p->plan.M * (p->procs > 1 ? 1 : p->plan.D)};
    return pipit__mem_admit("this program", items, 8, plan, p->plan.opt.mem_limit, ADMIT_ADVICE);
}

/* Which world ranks run here: all of them as threads, or under an MPI
 * launch exactly one per process (the mesh must match the launch). */
static pipit_status place_ranks(pipit_program *p) {
    pipit_status s = pipit_init(NULL, NULL);
    if (s) return s;
    p->W = p->plan.nranks * p->plan.T * p->plan.D;
    int procs = p->plan.opt.plan_only ? 1 : pipit_process_count(); /* a plan runs nowhere */
    if (procs > 1 && procs != p->W)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "this job has %d processes, but the mesh needs P x T x D = %d x %d x %d = %d world ranks "
                          "(one process each)",
                          procs, p->plan.nranks, p->plan.T, p->plan.D, p->W);
    p->procs = procs > 1 ? procs : 1;
    p->nlocal = p->procs > 1 ? 1 : p->W;
    p->local = pipit__calloc((size_t)p->nlocal, sizeof *p->local);
    if (!p->local) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    for (int i = 0; i < p->nlocal; i++) p->local[i] = p->procs > 1 ? pipit_process_rank() : i;
    return PIPIT_STATUS_OK;
}

/* Every tag any world rank's messages will carry, sorted and unique (the
 * MPI transport numbers them). */
static pipit_status message_tags(const pipit__plan *pl, uint64_t **out, size_t *n) {
    size_t cap = 64, k = 0;
    uint64_t *t = pipit__malloc(cap * sizeof *t);
    for (int r = 0; t && r < pl->nranks; r++)
        for (int32_t i = 0; t && i < pl->ranks[r].n; i++) {
            const pipit__instr *in = &pl->ranks[r].ins[i];
            uint64_t one[PIPIT_MAX_DP + 2 * PIPIT_MAX_COLL];
            int m = 0;
            switch ((pipit__ins_kind)in->kind) {
            case INS_SEND: case INS_RECV: one[m++] = pipit__tag(PIPIT_TAG_VALUE, in->node, in->mb); break;
            case INS_ACC_SEND: case INS_ACC_RECV: one[m++] = pipit__tag(PIPIT_TAG_ACC, in->param, in->use); break;
            case INS_NORM_SEND: case INS_NORM_RECV: one[m++] = pipit__tag(PIPIT_TAG_NORM, in->param, 0); break;
            case INS_DP_RS_SEND: for (int d = 0; d < pl->D; d++) one[m++] = pipit__tag(PIPIT_TAG_DP_REDUCE, in->param, d); break;
            case INS_DP_AG_SEND: for (int d = 0; d < pl->D; d++) one[m++] = pipit__tag(PIPIT_TAG_DP_GRAD, in->param, d); break;
            case INS_DP_PARAM_SEND: for (int d = 0; d < pl->D; d++) one[m++] = pipit__tag(PIPIT_TAG_DP_PARAM, in->param, d); break;
            case INS_DP_SUMSQ_SEND: for (int d = 0; d < pl->D; d++) one[m++] = pipit__tag(PIPIT_TAG_DP_SUMSQ, in->param, d); break;
            case INS_UPDATE: /* ZeRO-3: the gather before each step's loop (runtime/zero.c) */
                for (int d = 0; pl->zero >= 3 && d < pl->D; d++) one[m++] = pipit__tag(PIPIT_TAG_DP_PARAM, in->param, d);
                break;
            case INS_LOSS_RECV: one[m++] = pipit__tag(PIPIT_TAG_LOSS, in->peer, 0); break;
            case INS_TP: /* the in-stage all-reduce: chunk k to its owner, its sum back (transport.h) */
                if (pipit__is_cp_op(pl->g->nodes[in->node].op)) { /* CP's all-gather / reduce-scatter over C */
                    for (int c = 0; pl->C > 1 && c < 2 * pl->C; c++) one[m++] = pipit__tag(PIPIT_TAG_COLL, in->node, c);
                    break;
                }
                for (int c = 0; pl->T > 1 && c < 2 * pl->T; c++) one[m++] = pipit__tag(PIPIT_TAG_COLL, in->node, c);
                break;
            case INS_A2A_START: /* the EP all-to-all: block k from member k, of pair slot `param` (transport.c) */
                for (int c = 0; pl->E > 1 && c < pl->E; c++)
                    one[m++] = pipit__tag(PIPIT_TAG_COLL, in->node, 2 * pl->E + in->param * pl->E + c);
                break;
            case INS_NORM:
                for (int c = 0; pl->T > 1 && c < 2 * pl->T; c++) one[m++] = pipit__tag(PIPIT_TAG_COLL, PIPIT_TP_NORM_ID, c);
                for (int c = 0; pl->E > 1 && c < 2 * pl->E; c++) one[m++] = pipit__tag(PIPIT_TAG_COLL, PIPIT_EP_NORM_ID, c);
                break;
            default: break;
            }
            for (int j = 0; j < m; j++) {
                if (k == cap) {
                    uint64_t *bigger = pipit__realloc(t, 2 * cap * sizeof *t);
                    if (!bigger) {
                        pipit__free(t);
                        t = NULL;
                        break;
                    }
                    t = bigger, cap *= 2;
                }
                t[k++] = one[j];
            }
        }
    if (!t) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    qsort(t, k, sizeof *t, cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || t[u - 1] != t[i]) t[u++] = t[i];
    *out = t;
    *n = u;
    return PIPIT_STATUS_OK;
}

static pipit_status open_transport(pipit_program *p) {
    if (p->procs == 1) {
        if (p->W > 1 && !(p->transport = pipit__transport_local_new(p->W)))
            return pipit__err(PIPIT_STATUS_NOMEM, "out of memory for the transport");
        return PIPIT_STATUS_OK;
    }
    uint64_t *tags = NULL;
    size_t ntags = 0;
    pipit_status s = message_tags(&p->plan, &tags, &ntags);
    if (s) return s;
    unsigned long gen0 = pipit__err_gen();
    p->transport = pipit__transport_mpi_new(p->W, tags, ntags);
    pipit__free(tags);
    if (p->transport) return PIPIT_STATUS_OK;
    return pipit__err_fresh(PIPIT_STATUS_RUNTIME, gen0, "cannot open the MPI transport");
}

/* Device memory moves through the transports' host copies by the
 * backend's download / upload (transport.h: which tags carry it). */
static void connect_transport(pipit_program *p) {
    if (!p->transport || p->be->host_memory) return;
    p->transport->to_host = p->be->download;
    p->transport->from_host = p->be->upload;
}

/* Every op the ranks run has a kernel on this backend. */
static pipit_status check_kernels(const pipit_program *p) {
    for (int r = 0; r < p->plan.nranks; r++)
        for (int32_t i = 0; i < p->plan.ranks[r].n; i++) {
            const pipit__instr *in = &p->plan.ranks[r].ins[i];
            if (in->kind != INS_RUN) continue;
            int op = p->plan.g->nodes[in->node].op;
            if (!p->be->ops[op])
                return pipit__err(PIPIT_STATUS_INVALID, "the %s backend has no kernel for op '%s' (node %d)",
                                  p->be->name, pipit__ops[op].name, (int)in->node);
        }
    return PIPIT_STATUS_OK;
}

/* options.device and options.tf32: the backend, and that it has a device. */
static pipit_status pick_backend(pipit_program *p, const pipit_options *opt) {
    const char *dev = opt->device && opt->device[0] ? opt->device : "cpu";
    if (!(p->be = pipit__backend_find(dev))) return PIPIT_STATUS_INVALID; /* its message names the choices */
    if (opt->tf32 && p->be->host_memory)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.tf32 needs options.device \"cuda\" (TF32 is a tensor-core mode of NVIDIA GPUs; "
                          "the %s backend computes fp32 GEMMs in fp32)",
                          p->be->name);
    if (opt->reshard_after_forward && !p->be->host_memory)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.reshard_after_forward: the %s backend cannot release part of a device block yet "
                          "(the cpu backend releases each param's pages)",
                          p->be->name);
    if (opt->dtype == PIPIT_BF16 && !p->be->bf16)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.dtype PIPIT_BF16: the %s backend has no bf16 kernels in this build (compile with "
                          "options.dtype PIPIT_F32, or on the cpu backend)",
                          p->be->name);
    p->tf32 = opt->tf32 != 0;
    p->be->init();
    p->ndev = p->be->devices();
    return p->ndev >= 1 ? PIPIT_STATUS_OK : PIPIT_STATUS_RUNTIME; /* devices() said why */
}

/* Where a built plan's ranks run and whether their memory fits: what
 * this process decides alone, before the processes agree. */
static pipit_status place(pipit_program *p) {
    pipit_status s = place_ranks(p);
    if (s) return s;
    p->be->init();
    p->dp_shard_bytes = max_shard_bytes(&p->plan);
    return admit_plan(p);
}

/* Backend memory, thread teams and the transport for a placed plan. */
static pipit_status instantiate(pipit_program *p) {
    pipit_status s = PIPIT_STATUS_OK;
    p->rs = pipit__calloc((size_t)p->W, sizeof *p->rs);
    if (!p->rs) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    s = open_transport(p);
    if (!s) connect_transport(p);
    for (int i = 0; !s && i < p->nlocal; i++) s = alloc_rank(p, p->local[i]);
    return s;
}

/* Fault injection for the failure tests of whole jobs (processes cannot be
 * reached through the API): PIPIT_INJECT_FAILURE="w:i" makes world rank w
 * fail at instruction i of the first step; PIPIT_INJECT_HANG="w:i" makes
 * it stop there silently instead; PIPIT_INJECT_DELAY="w:ms" makes it a slow
 * receiver (ms milliseconds before each receive of a value). */
static void inject_faults(pipit_program *p) {
    const char *delay = getenv("PIPIT_INJECT_DELAY");
    int w, ms;
    if (delay && sscanf(delay, "%d:%d", &w, &ms) == 2 && w >= 0 && ms >= 0) p->delay_rank = w, p->delay_ms = ms;
    const char *names[2] = {"PIPIT_INJECT_FAILURE", "PIPIT_INJECT_HANG"};
    for (int k = 0; k < 2; k++) {
        const char *v = getenv(names[k]);
        int i;
        if (v && sscanf(v, "%d:%d", &w, &i) == 2 && w >= 0 && i >= 0) {
            p->fail_rank = w;
            p->fail_instr = i;
            p->hang = k;
        }
    }
}

pipit_status pipit_compile(pipit_graph *g, pipit_val loss, const pipit_options *opt,
                           pipit_program **out) {
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_compile: out is NULL");
    *out = NULL;
    if (!g) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_compile: graph is NULL");
    if (g->magic != PIPIT_GRAPH_MAGIC)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_compile: invalid graph handle (freed, or not a pipit_graph)");
    if (loss.g != g) return pipit__err(PIPIT_STATUS_INVALID, "pipit_compile: loss is not a value of this graph");
    pipit_options defaults = {0};
    if (!opt) opt = &defaults;
    unsigned long gen0 = pipit__err_gen();
    pipit_status s = check_options(opt);
    double timeout_s; /* a bad PIPIT_TIMEOUT fails here, not silently as 300 s at the first hang */
    if (!s) s = pipit__timeout_limit(&timeout_s);
    pipit_program *p = s ? NULL : pipit__calloc(1, sizeof *p);
    if (!s && !p) s = pipit__err(PIPIT_STATUS_NOMEM, "pipit_compile: out of memory");
    int planned = 0;
    if (!s) {
        p->magic = PIPIT_PROGRAM_MAGIC;
        p->fail_rank = p->fail_instr = p->delay_rank = -1;
        inject_faults(p);
        s = pick_backend(p, opt);
    }
    if (!s) s = admit_graph(p, g, opt);
    /* the planner carries the optimizer, resolved here where optimizers live */
    pipit_options resolved = *opt;
    resolved.optimizer = pipit__optimizer_resolved(&opt->optimizer);
    if (!s) s = pipit__plan_build(g, loss.id, &resolved, &p->plan);
    if (!s) planned = 1, s = check_kernels(p);
    if (!s) s = place(p);
    /* every process of an MPI job takes part, failed or not, and all get the same verdict */
    if (pipit_process_count() > 1) s = pipit__program_agree(p, s);
    if (!s && !opt->plan_only) s = instantiate(p); /* a plan-only program has no rank memory (p->rs NULL) */
    if (s) {
        if (pipit__err_gen() == gen0) pipit__err(s, "%s", pipit_status_name(s)); /* a helper set no message */
        pipit__err_fresh(s, gen0, "pipit_compile");
        if (!p) return s;
        /* the graph as it was, so a compile with other options works */
        int rollback = planned && !p->plan.forward_only && !p->plan.own_g; /* a bf16 copy is the plan's */
        int32_t n0 = p->plan.graph_n0;
        pipit_status st0 = p->plan.graph_st0;
        pipit_program_free(p);
        if (rollback) pipit__graph_rollback(g, n0, st0);
        return s;
    }
    *out = p;
    return PIPIT_STATUS_OK;
}

static void free_rank(const pipit_program *p, pipit__rank_state *rs) {
    pipit__bind_rank(p, rs->world);
    pipit__free(rs->opt_off);
    pipit__free(rs->feed_off);
    p->be->free(rs->feed_block);
    pipit__free(rs->losses);
    p->be->free(rs->dp_buf);
    p->be->free(rs->param_block);
    if (rs->grad_block != rs->gshard_block) p->be->free(rs->grad_block); /* ZeRO-2 on host: one allocation */
    p->be->free(rs->gshard_block);
    p->be->free(rs->pshard_block);
    pipit__reshard_free(rs->reshard);
    p->be->free(rs->m_block);
    p->be->free(rs->v_block);
    p->be->free(rs->acc_block);
    p->be->free(rs->arena);
    p->be->free(rs->seed);
    pipit__free(rs->srcs_ptr);
    pipit__free(rs->sumsq);
    pipit__free(rs->shadow_off);
    pipit__free(rs->chunks);
    pipit__free(rs->kc);
    for (int32_t i = 0; rs->a2a_host && i < p->plan.ranks[rs->prank].n; i++) /* a failed step's staging */
        pipit__free(rs->a2a_host[i]);
    pipit__free(rs->a2a_host);
    pipit__free(rs->t_start);
    pipit__free(rs->t_end);
    pipit__pool_free(rs->pool);
}

void pipit_program_free(pipit_program *p) {
    if (!p || p->magic != PIPIT_PROGRAM_MAGIC) return;
    if (p->broken) { /* a hung rank's thread may still use all of it: leak rather than free under it */
        p->magic = 0;
        return;
    }
    /* the transport first: after a failed step it may still hold sends that
     * read the ranks' memory, and it finishes or cancels them */
    if (p->transport) p->transport->vt->free(p->transport);
    for (int i = 0; p->rs && i < p->nlocal; i++) free_rank(p, &p->rs[p->local[i]]);
    pipit__free(p->rs);
    pipit__free(p->local);
    pipit__plan_free(&p->plan);
    p->magic = 0;
    pipit__free(p);
}
