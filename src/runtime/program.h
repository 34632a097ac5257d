/*
 * program.h — a compiled program as it runs: the plan (compile/plan.h) plus
 * what running it needs, per rank: memory from the backend (activation
 * arena, parameter, gradient, optimizer-state and accumulator blocks), a
 * team of compute threads, the transport between ranks, and what the last
 * step measured. pipit_compile builds the plan, then instantiates it here.
 */
#ifndef PIPIT_PROGRAM_H
#define PIPIT_PROGRAM_H

#include "backend/backend.h"
#include "compile/plan.h"
#include "runtime/pool.h"

/* ZeRO-3 reshard_after_forward's windows of a rank (runtime/zero_reshard.c). */
typedef struct pipit__reshard {
    int32_t n;              /* instructions before the post-loop */
    int32_t *gat_off, *gat; /* CSR [n + 1]: params to gather before instruction i */
    int32_t *rel_off, *rel; /* CSR [n + 1]: params to release after instruction i */
    uint8_t *present;       /* [nparams] gathered now in the full block */
} pipit__reshard;

/* One world rank's running state: world rank w = (d * P + p) * T + t runs
 * tensor-parallel rank t of pipeline rank p of replica d; its plan is
 * program->plan.ranks[p] (the T ranks of a stage run the same one). */
typedef struct {
    int world, prank, replica, tp; /* w, p, d, t */
    uint8_t *arena;      /* backend memory, plan arena_bytes */
    void *seed;          /* backend memory: the loss gradient 1/M in the loss's dtype */
    uint8_t *param_block, *grad_block, *m_block, *v_block, *acc_block;
    size_t *opt_off;     /* [nparams] offset of param i's AdamW moments in m/v_block (ZeRO-1: its
                            shard only); SIZE_MAX: not held */
    uint8_t *gshard_block, *pshard_block; /* ZeRO-2 / ZeRO-3: this replica's shard of each held param's
                            gradient / parameter between steps, at opt_off (grad_block / param_block are then
                            NULL between steps: reserved by each step, runtime/zero.c) */
    pipit__reshard *reshard; /* ZeRO-3 reshard_after_forward: the per-task gather windows (first step) */
    uint8_t *dp_buf;     /* data parallel: D shard-sized buffers (the other replicas' shards and the sum) */
    uint8_t *feed_block; /* device backends: the rank's feeds, uploaded at the start of each step (NULL on
                            host memory: feeds are read where they lie) */
    size_t *feed_off;    /* [ninputs] input i of microbatch m at feed_block + feed_off[i] + m * its bytes;
                            SIZE_MAX: this rank reads no input i */
    double *losses;      /* [M * D] every replica's per-microbatch losses of the last step */
    pipit__kctx *kc;     /* [n] resolved kernel contexts (per step) */
    void **a2a_host;     /* [n] INS_A2A_START i's host staging until its finish (runtime/ep.c) */
    void **srcs_ptr;     /* [nsrcs] resolved pointers of every GRADSUM's per-use sums */
    pipit__pool *pool;
    double *t_start, *t_end; /* [ntasks] measured task times of the last step (s, from step start) */
    double busy;         /* sum of task times of the last step */
    double wait;         /* seconds blocked in INS_RECV (inside tasks) in the last step */
    double dp_first_send;/* when the last step's first reduce-scatter send left (s from step start; -1 none) */
    double backward_end; /* when its last B, W or BW task ended (s from step start; -1 none) */
    double *sumsq;       /* [nparams] per-param sums of squares of the last step */
    double *chunks;      /* [max_chunks] scratch for per-chunk partial sums */
    double norm, clip_scale; /* of the last step (equal on every rank) */
    size_t *shadow_off;  /* [nparams] arena offset of param i's bf16 shadow (lower.c mark_shadows), written by
                            its update; SIZE_MAX: none (or a backend without adamw_bf16: the cast always runs) */
    int has_shadows;     /* any shadow_off set */
    int shadow_ok;       /* every shadow holds its param rounded as the param is now: the steps skip the casts.
                            0 after any write of a param from outside a step and after a failed step */
    double prof[PIPIT_OP_COUNT + 32]; /* profile: seconds per op (RUN) or per instruction kind */
} pipit__rank_state;

#define PIPIT_PROGRAM_MAGIC 0x70697070u

struct pipit_program {
    uint32_t magic;
    pipit__plan plan;
    const pipit__backend *be;
    int ndev;            /* devices of the backend: world rank w runs on device w % ndev */
    int tf32;            /* options.tf32 (cuda: TF32 tensor-core GEMMs) */
    int W;               /* world ranks: plan.nranks * plan.T * plan.D */
    int procs;           /* processes: 1 (ranks are threads) or W (one MPI process each) */
    int nlocal;          /* world ranks this process runs */
    int *local;          /* [nlocal] their world ranks, ascending */
    pipit__rank_state *rs; /* [W]; only the local ranks' are allocated */
    size_t dp_shard_bytes; /* the largest shard of any param (data parallel scratch) */
    struct pipit__transport *transport;
    int64_t opt_step;    /* optimizer steps taken (AdamW bias correction) */
    int do_update;       /* this step applies the optimizer */
    double step_lr;      /* lr(opt_step) of the schedule: this step's update */
    double step_t0;      /* wall clock at the start of the last step */
    double step_wall;    /* wall time of the last step's loop (s) */
    int fail_rank, fail_instr; /* test hook: rank fails at instruction (-1 off) */
    int hang;            /* test hook: ... or stops there without a word (a hung rank) */
    int delay_rank, delay_ms; /* test hook: world rank delay_rank sleeps delay_ms before each receive (-1 off) */
    int broken;          /* a rank hung: its thread may still run, so nothing is freed or run */
    int profile;         /* accumulate per-op times into rs[].prof */
    int64_t profile_steps; /* steps accumulated into rs[].prof since profiling was (re)started */
    char errmsg[2048];
};

/* Binds the calling thread to world rank w's device and stream (the
 * backend's bind): before it runs w's instructions, and before it touches
 * w's memory. A no-op on the cpu backend. */
static inline void pipit__bind_rank(const pipit_program *p, int w) {
    p->be->bind(w, p->ndev > 0 ? w % p->ndev : 0, p->tf32);
}

/* Bytes of one of the two AdamW moment blocks of pipeline rank prank in
 * replica `replica` (its held params, or with ZeRO-1 its shards of them,
 * each 64-byte aligned); fills opt_off[nparams] unless NULL. */
size_t pipit__moment_bytes(const pipit_program *p, int prank, int replica, size_t *opt_off);

/* ZeRO-2/3 (runtime/zero.c). zero_grads: the full gradient block lives
 * only during a step (the reduced shard stays, in gshard_block); with a
 * gradient transform (which reads whole gradients) it stays resident, as
 * under ZeRO-1. zero_params: the same for the parameters (ZeRO-3). */
int pipit__zero_grads(const pipit_program *p);
int pipit__zero_params(const pipit_program *p);
/* Before world rank w's step: reserves the per-step blocks and (ZeRO-3)
 * all-gathers the parameters from the replicas' shards. After it (also
 * after a failure): keeps this replica's shards and releases the blocks. */
pipit_status pipit__zero_begin_step(pipit_program *p, int w);
void pipit__zero_end_step(pipit_program *p, int w);
/* ZeRO-2: the bytes of gshard_block's allocation on pipeline rank prank
 * whose shards take shard_bytes: on host memory the full gradient block
 * (the step accumulates in it, and only the shards' pages stay resident
 * between steps), else shard_bytes. */
size_t pipit__zero_grad_alloc_bytes(const pipit_program *p, int prank, size_t shard_bytes);
/* Gives the whole pages of [a, a + n) back to the system: they read as
 * zeros when touched again (host memory only; runtime/zero_reshard.c). */
void pipit__discard_pages(uint8_t *a, size_t n);
/* pipit_program_held_bytes of world rank state rs: kind 0 parameters,
 * 1 gradients, 2 both AdamW moments, from the blocks it holds now. */
size_t pipit__held_bytes(const pipit_program *p, const pipit__rank_state *rs, int kind);
/* ZeRO-3: whether world rank w releases its full parameter block when its
 * loop ends (its post-loop does not read params; checked before the step)
 * and, at that point, the release itself: the shard kept, the block gone;
 * the update then writes the shard block. */
int pipit__zero_release_at_loop_end(const pipit_program *p, int w);
void pipit__zero_loop_end(pipit_program *p, int w);
/* ZeRO-3's reshard_after_forward (runtime/zero_reshard.c). reshard: in
 * effect. build/free: rank plan r's windows (each param gathered before
 * its first read in a task, released after its last). peak: the most
 * gathered param bytes at once on pipeline rank prank (the report's).
 * begin: at the step's start, the reserved block's pages given back.
 * gathers_at / gather_at: the gathers before instruction i (thread 0);
 * release_at: the releases after it. gather_all: every param not there
 * (a post-loop that reads params). present: param i is in the block. */
int pipit__zero_reshard(const pipit_program *p);
pipit__reshard *pipit__reshard_build(const pipit__rank_plan *r, int nparams);
void pipit__reshard_free(pipit__reshard *z);
size_t pipit__reshard_peak(const pipit_program *p, int prank);
size_t pipit__reshard_max_shard(const pipit_program *p, int prank); /* the largest param shard: one gather's sends */
pipit_status pipit__reshard_begin(pipit_program *p, int w);
int pipit__reshard_gathers_at(const pipit_program *p, int w, int32_t i);
pipit_status pipit__reshard_gather_at(pipit_program *p, int w, int32_t i);
void pipit__reshard_release_at(pipit_program *p, int w, int32_t i);
pipit_status pipit__reshard_gather_all(pipit_program *p, int w);
int pipit__reshard_present(const pipit_program *p, int w, int i);
/* ZeRO-3's all-gather of one param's shards into `block` (dp.c). */
pipit_status pipit__dp_param_gather(pipit_program *p, int w, int param, uint8_t *block, int sending);

/* In an MPI job, the processes compare their plans and statuses before
 * any of them allocates or opens the transport (program_agree.c): every
 * process returns the same verdict. One process: `local`. */
pipit_status pipit__program_agree(const pipit_program *p, pipit_status local);

/* lr(t) of a checked schedule (optim.c). */
double pipit__lr_at(const pipit_lr_schedule *s, double lr, int64_t t);
/* The optimizer a program runs: o itself, or for the zero value (kind
 * ADAMW, lr, beta1 and beta2 0) the default AdamW (lr 3e-4, betas 0.9 and
 * 0.95, eps 1e-8, no weight decay). pipit_compile resolves it before the
 * planner sees the options: the planner only carries it. */
pipit_optimizer pipit__optimizer_resolved(const pipit_optimizer *o);

/* Runs world rank w's instruction list; feed_ptrs[m * ninputs + i] is
 * input i of the step's microbatch m (of M * D; resolved and checked once
 * by pipit_step). */
pipit_status pipit__exec_rank(pipit_program *p, int w, const void **feed_ptrs);

/* World rank of tensor-parallel rank t of pipeline rank q of replica d. */
static inline int pipit__world(const pipit_program *p, int d, int q, int t) {
    return (d * p->plan.nranks + q) * p->plan.T + t;
}
/* The pipeline rank and the replica world rank w runs. */
static inline int pipit__prank_of(const pipit_program *p, int w) { return w / p->plan.T % p->plan.nranks; }
static inline int pipit__replica_of(const pipit_program *p, int w) { return w / (p->plan.T * p->plan.nranks); }

/* Whether world rank w runs in this process. */
/* INVALID for a plan-only program (options.plan_only: no rank memory,
 * p->rs NULL), naming fn: the calls that run a program or read its
 * memory; OK otherwise. p is a valid handle. */
pipit_status pipit__check_runnable(const pipit_program *p, const char *fn);

static inline int pipit__is_local(const pipit_program *p, int w) {
    return p->procs == 1 || w == p->local[0];
}

/* Data parallelism: param elements [*a, *b) form shard k of D: whole
 * sum-of-squares chunks, dealt as evenly as the chunk count allows (a
 * shard may be empty). The chunks are [*a, *b) / PIPIT_SUMSQ_CHUNK. */
static inline void pipit__dp_shard(int64_t numel, int D, int k, int64_t *a, int64_t *b) {
    int64_t lo, hi, nchunks = (numel + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK;
    pipit__range(nchunks, k, D, &lo, &hi);
    *a = PIPIT_MIN(lo * PIPIT_SUMSQ_CHUNK, numel);
    *b = PIPIT_MIN(hi * PIPIT_SUMSQ_CHUNK, numel);
}

/* Post-loop (runtime/optim.c): gradient sums, norm, update; run by every
 * thread of the rank. */
void pipit__post_gradsum(pipit_program *p, int w, const pipit__instr *in, void *grad, void *const *srcs,
                         int ith, int nth);
void pipit__post_sumsq(pipit_program *p, int w, int param, int my_shard, const void *grad, int ith, int nth);
void pipit__post_sumsq_fin(pipit_program *p, int w, int param);
pipit_status pipit__post_norm(pipit_program *p, int w);
/* Tensor parallelism (runtime/tp.c). The global norm's per-param terms
 * of the whole tensors: each sharded param's sum of squares summed over
 * the stage's T ranks, a replicated one's taken once (in place on sumsq). */
pipit_status pipit__tp_norm_terms(pipit_program *p, int w);
/* INS_TP: out = in[0] combined over the stage's T ranks, on thread 0. */
pipit_status pipit__tp_collective(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k);
void pipit__post_update(pipit_program *p, int w, int param, int ith, int nth);

/* Data-parallel and loss-exchange instructions (runtime/dp.c): the
 * communication runs on thread 0; then, after a barrier, the compute part
 * (the reduce-scatter's sums) on every thread. */
pipit_status pipit__dp_comm(pipit_program *p, int w, const pipit__instr *in);
/* The fence of a zero-copy data-parallel send instruction: every shard it sent. */
pipit_status pipit__dp_fence(pipit_program *p, int w, const pipit__instr *in);
void pipit__dp_compute(pipit_program *p, int w, const pipit__instr *in, int ith, int nth);
static inline int pipit__is_dp_instr(int kind) { return kind >= INS_DP_RS_SEND && kind <= INS_LOSS_RECV; }

#endif
