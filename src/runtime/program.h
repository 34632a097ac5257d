/*
 * program.h — a compiled training step: per-rank instruction lists over
 * pre-planned buffers, the parameter/gradient/optimizer-state blocks and the
 * post-loop work (per-use gradient sums, clipping, update).
 */
#ifndef PIPIT_PROGRAM_H
#define PIPIT_PROGRAM_H

#include "autodiff/autodiff.h"
#include "ir/graph.h"
#include "runtime/pool.h"

/* Where a value's bytes live. */
typedef enum {
    LOC_NONE = 0,
    LOC_ARENA,   /* off: offset in the rank's activation arena */
    LOC_PARAM,   /* idx: param index; off: offset in the rank's parameter block */
    LOC_FEED,    /* idx: graph input slot; the pointer comes from the step's feeds */
    LOC_SEED,    /* the loss-gradient scalar (1/M) */
    LOC_ACC,     /* off: offset in the rank's per-use gradient accumulator block */
    LOC_GRAD     /* idx: param index; off: offset in the rank's gradient block */
} pipit__loc_kind;

typedef struct {
    uint8_t kind;
    int32_t idx;
    size_t off;
} pipit__loc;

typedef enum {
    INS_RUN = 0,  /* run node's kernel for microbatch mb */
    INS_ACC,      /* acc (out) = / += contribution (in[0]); first = mb 0 */
    INS_LOSS,     /* losses[mb] = scalar in[0] */
    INS_SEND,     /* send value in[0] (node, mb) to rank peer (non-blocking) */
    INS_RECV,     /* receive value (node, mb) from rank peer into out (blocking) */
    INS_MARK,     /* task boundary: timestamps task `task` (start, or end if first=1) */
    /* post-loop, `param` names the parameter */
    INS_ACC_SEND, /* send use `use`'s accumulated sum (in[0]) to rank peer */
    INS_ACC_RECV, /* receive use `use`'s sum from rank peer into out */
    INS_GRADSUM,  /* grad (out) = sum of the per-use sums in[..] in use order */
    INS_SUMSQ,    /* per-chunk sums of squares of grad (parallel) */
    INS_SUMSQ_FIN,/* sumsq[param] = chunk partials added in order */
    INS_NORM_SEND,/* send sumsq[param] to rank peer */
    INS_NORM_RECV,/* receive sumsq[param] from rank peer */
    INS_NORM,     /* norm = sqrt(sum of sumsq in param order); clip scale */
    INS_UPDATE,   /* optimizer update of the rank's copy of param */
    INS_COPY      /* out = in[0], `bytes` bytes (gradient transforms) */
} pipit__ins_kind;

typedef struct {
    uint8_t kind;
    uint8_t first;       /* INS_ACC: first microbatch, copy instead of add */
    int32_t node;        /* INS_RUN: node; INS_ACC: contribution node */
    int32_t mb;
    pipit__loc out, in[PIPIT_MAX_IN];
    int64_t numel;       /* INS_ACC: elements */
    int32_t peer;        /* INS_SEND / INS_RECV: the other rank */
    int32_t task;        /* INS_MARK: index in the rank's task list */
    size_t bytes;        /* INS_SEND / INS_RECV */
    int32_t param, use;  /* post-loop instructions */
    pipit__loc *srcs;    /* INS_GRADSUM: [nuses] per-use sums, in use order (owned) */
    int64_t srcs_at;     /* INS_GRADSUM: where their pointers start in the rank's srcs_ptr */
} pipit__instr;

/* A gradient target: a param, or a pre-loop value read inside the loop
 * (its accumulated gradient feeds the post-loop region). */
typedef struct {
    char *name;          /* params: borrowed from the graph node; boundary values: NULL */
    int32_t node;
    int boundary;        /* 1: pre-loop value */
    int32_t gacc;        /* boundary: the leaf that receives its accumulated gradient */
    pipit_dtype dtype;
    int64_t numel;
    int nuses;
    uint8_t *post;       /* [nuses] 1: use computed once after the loop */
    uint64_t *use_ranks; /* [nuses] ranks that compute use u (post-loop uses are replicated) */
    size_t *acc_off;     /* [nuses * nranks] use u's accumulator on rank r; SIZE_MAX if none */
    uint64_t holders;    /* params: ranks holding a copy; boundary: ranks running its post-loop region */
    int norm_rank;       /* params: the holder that computes its sum of squares */
    int decay;           /* AdamW weight decay applies (2-D params) */
} pipit__param;

typedef struct {
    int32_t node;
    const char *name;
    pipit_dtype dtype;
    int64_t numel;
    int32_t limit;       /* i32 inputs: values must lie in [0, limit); 0 = unchecked */
} pipit__input;

typedef struct {
    int32_t n, cap;
    pipit__instr *ins;
    size_t arena_bytes;  /* planned peak */
    size_t naive_bytes;  /* without buffer reuse */
    uint8_t *arena;
    pipit__kctx *kc;     /* [n] resolved kernel contexts (per step) */
    pipit__pool *pool;
    int rank;
    int ntasks;
    pipit_task *tasks;   /* the schedule's list for this rank (borrowed copy) */
    double *t_start, *t_end; /* [ntasks] measured task times of the last step (s, from step start) */
    double busy;         /* sum of task times of the last step */
    double wait;         /* seconds blocked in INS_RECV (inside tasks) in the last step */
    /* this rank's copies of the params it holds, and their state */
    size_t *param_off;   /* [nparams] offset in the blocks below; SIZE_MAX: not held */
    size_t param_bytes, acc_bytes;
    uint8_t *param_block, *grad_block, *m_block, *v_block, *acc_block;
    double *sumsq;       /* [nparams] per-param sums of squares of the last step */
    double *chunks;      /* scratch for per-chunk partial sums */
    int64_t max_chunks;
    double norm, clip_scale; /* of the last step (equal on every rank) */
    double prof[PIPIT_OP_COUNT + 32]; /* profile: seconds per op (RUN) or per instruction kind */
    void **srcs_ptr;     /* resolved pointers of every GRADSUM's per-use sums */
    struct pipit__mp_buf_s *bufs; /* [nbufs] planned arena buffers (lifetimes, offsets) */
    int32_t nbufs;
} pipit__rank_prog;

#define PIPIT_PROGRAM_MAGIC 0x70697070u

struct pipit_program {
    uint32_t magic;
    pipit_graph *g;
    int32_t loss;
    pipit__grads gr;
    pipit_options opt;
    int M, threads;
    int nparams;         /* params[0, nparams): the model's parameters */
    int ntargets;        /* params[nparams, ntargets): pre-loop boundary values */
    pipit__param *params;
    uint64_t *node_ranks;/* [graph nodes] pre-loop and post-loop nodes: ranks that run them */
    int ninputs;
    pipit__input *inputs;
    double seed_f64;
    float seed_f32;
    double *losses;      /* [M] */
    int64_t opt_step;    /* optimizer steps taken (AdamW bias correction) */
    int do_update;       /* this step applies the optimizer */
    int nranks;
    pipit__rank_prog *ranks;
    int S;               /* pipeline stages of the graph */
    int *stage_rank;     /* [S] */
    int32_t *node_stage; /* [graph nodes] stage of each node (-1 leaves) */
    uint8_t *node_phase; /* [graph nodes] PH_* */
    struct pipit__transport *transport;
    double step_t0;      /* wall clock at the start of the last step */
    double step_wall;    /* wall time of the last step's loop (s) */
    int fail_rank, fail_instr; /* test hook: rank fails at instruction (-1 off) */
    int profile;         /* accumulate per-op times into ranks[].prof */
    char errmsg[2048];
};

/* Bytes of arena buffers alive just after instruction i of rank r. */
size_t pipit__live_bytes_after(const pipit__rank_prog *r, int32_t i);
/* Per rank, the largest live bytes at any task boundary of the loop: what
 * the schedule keeps in flight (the simulator's peak_bytes model). */
size_t pipit__task_boundary_peak(const pipit__rank_prog *r);

/* Lowers the step into per-rank programs for schedule `sch` (NULL: one rank,
 * each microbatch's forward then backward, in order). */
pipit_status pipit__lower(pipit_program *p, const pipit_schedule *sch);
/* Runs one rank's instruction list; feed_ptrs[m * ninputs + i] is input i
 * of microbatch m (resolved and checked once by pipit_step). */
pipit_status pipit__exec_rank(pipit_program *p, pipit__rank_prog *r, const void **feed_ptrs);
/* Post-loop kernels (train/optim.c), run by every thread of the rank. */
#define PIPIT_SUMSQ_CHUNK 16384 /* elements per partial sum: fixed, so the norm's bits never depend on threads */
void pipit__post_gradsum(pipit_program *p, pipit__rank_prog *r, const pipit__instr *in, void *grad,
                         void *const *srcs, int ith, int nth);
void pipit__post_sumsq(pipit__rank_prog *r, const pipit__param *pp, const void *grad, int ith, int nth);
void pipit__post_sumsq_fin(pipit__rank_prog *r, const pipit__param *pp, int param);
void pipit__post_norm(pipit_program *p, pipit__rank_prog *r);
void pipit__post_update(pipit_program *p, pipit__rank_prog *r, int param, int ith, int nth);

#endif
