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

/* One rank's running state; its plan is program->plan.ranks[rank]. */
typedef struct {
    uint8_t *arena;      /* backend memory, plan arena_bytes */
    void *seed;          /* backend memory: the loss gradient 1/M in the loss's dtype */
    uint8_t *param_block, *grad_block, *m_block, *v_block, *acc_block;
    pipit__kctx *kc;     /* [n] resolved kernel contexts (per step) */
    void **srcs_ptr;     /* [nsrcs] resolved pointers of every GRADSUM's per-use sums */
    pipit__pool *pool;
    double *t_start, *t_end; /* [ntasks] measured task times of the last step (s, from step start) */
    double busy;         /* sum of task times of the last step */
    double wait;         /* seconds blocked in INS_RECV (inside tasks) in the last step */
    double *sumsq;       /* [nparams] per-param sums of squares of the last step */
    double *chunks;      /* [max_chunks] scratch for per-chunk partial sums */
    double norm, clip_scale; /* of the last step (equal on every rank) */
    double prof[PIPIT_OP_COUNT + 32]; /* profile: seconds per op (RUN) or per instruction kind */
} pipit__rank_state;

#define PIPIT_PROGRAM_MAGIC 0x70697070u

struct pipit_program {
    uint32_t magic;
    pipit__plan plan;
    const pipit__backend *be;
    pipit__rank_state *rs; /* [plan.nranks] */
    struct pipit__transport *transport;
    double *losses;      /* [M] */
    int64_t opt_step;    /* optimizer steps taken (AdamW bias correction) */
    int do_update;       /* this step applies the optimizer */
    double step_t0;      /* wall clock at the start of the last step */
    double step_wall;    /* wall time of the last step's loop (s) */
    int fail_rank, fail_instr; /* test hook: rank fails at instruction (-1 off) */
    int profile;         /* accumulate per-op times into rs[].prof */
    char errmsg[2048];
};

/* Runs one rank's instruction list; feed_ptrs[m * ninputs + i] is input i
 * of microbatch m (resolved and checked once by pipit_step). */
pipit_status pipit__exec_rank(pipit_program *p, int rank, const void **feed_ptrs);

/* Post-loop (runtime/optim.c): gradient sums, norm, update; run by every
 * thread of the rank. */
void pipit__post_gradsum(pipit_program *p, int rank, const pipit__instr *in, void *grad, void *const *srcs,
                         int ith, int nth);
void pipit__post_sumsq(pipit_program *p, int rank, int param, const void *grad, int ith, int nth);
void pipit__post_sumsq_fin(pipit_program *p, int rank, int param);
void pipit__post_norm(pipit_program *p, int rank);
void pipit__post_update(pipit_program *p, int rank, int param, int ith, int nth);

#endif
