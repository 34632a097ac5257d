/*
 * program.h — a compiled training step: per-rank instruction lists over
 * pre-planned buffers, the parameter/gradient/optimizer-state blocks and the
 * post-loop work (per-use gradient sums, clipping, update).
 */
#ifndef PIPIT_PROGRAM_H
#define PIPIT_PROGRAM_H

#include "autodiff/autodiff.h"
#include "graph/graph.h"
#include "runtime/pool.h"

/* Where a value's bytes live. */
typedef enum {
    LOC_NONE = 0,
    LOC_ARENA,   /* off: offset in the rank's activation arena */
    LOC_PARAM,   /* off: offset in the parameter block */
    LOC_FEED,    /* idx: graph input slot; the pointer comes from the step's feeds */
    LOC_SEED,    /* the loss-gradient scalar (1/M) */
    LOC_ACC      /* off: offset in the per-use gradient accumulator block */
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
    INS_MARK      /* task boundary: timestamps task `task` (start, or end if first=1) */
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
} pipit__instr;

typedef struct {
    char *name;          /* borrowed from the graph node */
    int32_t node;
    pipit_dtype dtype;
    int64_t numel;
    size_t off;          /* byte offset in param/grad/m/v blocks */
    int nuses;
    size_t *acc_off;     /* [nuses] byte offsets in the accumulator block */
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
} pipit__rank_prog;

#define PIPIT_PROGRAM_MAGIC 0x70697070u

struct pipit_program {
    uint32_t magic;
    pipit_graph *g;
    int32_t loss;
    pipit__grads gr;
    pipit_options opt;
    int M, threads;
    int nparams;
    pipit__param *params;
    size_t param_bytes, acc_bytes;
    uint8_t *param_block, *grad_block, *acc_block, *m_block, *v_block;
    int ninputs;
    pipit__input *inputs;
    double seed_f64;
    float seed_f32;
    double *losses;      /* [M] */
    int64_t opt_step;    /* optimizer steps taken (AdamW bias correction) */
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
    char errmsg[2048];
};

/* Lowers the step into per-rank programs for schedule `sch` (NULL: one rank,
 * each microbatch's forward then backward, in order). */
pipit_status pipit__lower(pipit_program *p, const pipit_schedule *sch);
/* Runs one rank's instruction list with the given feeds. */
pipit_status pipit__exec_rank(pipit_program *p, pipit__rank_prog *r, const pipit_feed *feeds,
                              int nfeed);
/* Post-loop: per-use sums -> grads, global norm, clipping, update. */
double pipit__grads_finish(pipit_program *p);
pipit_status pipit__optimizer_update(pipit_program *p, double clip_scale);

#endif
