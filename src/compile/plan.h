/*
 * plan.h — what compilation produces: per-rank instruction lists over
 * pre-planned buffer offsets, the layout of every rank's parameter,
 * gradient and accumulator blocks, and the post-loop work (per-use
 * gradient sums, clipping, update). A plan holds no memory that kernels
 * touch: the runtime (runtime/program.h) allocates that from a backend
 * when it instantiates the plan, so compile/ knows no backend and no
 * transport.
 */
#ifndef PIPIT_PLAN_H
#define PIPIT_PLAN_H

#include "autodiff/autodiff.h"
#include "ir/graph.h"

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
    size_t off;      /* bytes into the location (a view's offset is added to every kind but SEED) */
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
    INS_UPDATE,   /* optimizer update of the rank's copy of param (ZeRO-1: of its shard) */
    INS_COPY,     /* out = in[0], `bytes` bytes (gradient transforms) */
    /* data parallelism over the D replicas of this pipeline rank; each
     * param's elements are cut into D shards of whole sum-of-squares chunks,
     * shard k owned by replica k (runtime: pipit__dp_shard) */
    INS_DP_RS_SEND,   /* send every shard of grad[param] but mine to its owner */
    INS_DP_RS_RECV,   /* my shard = the replicas' shards added in replica order */
    INS_DP_AG_SEND,   /* send my summed shard to every other replica */
    INS_DP_AG_RECV,   /* receive every other summed shard into grad[param] */
    INS_DP_SUMSQ_SEND,/* ZeRO-1: send my shard's chunk partials to every other replica */
    INS_DP_SUMSQ_RECV,/* ZeRO-1: receive the other shards' chunk partials */
    INS_DP_PARAM_SEND,/* ZeRO-1: send my updated shard of param to every other replica */
    INS_DP_PARAM_RECV,/* ZeRO-1: receive the other updated shards */
    INS_LOSS_SEND,    /* the loss rank: send this replica's M losses to every other world rank */
    INS_LOSS_RECV,    /* receive replica `peer`'s M losses from its loss rank `use` */
    INS_OUTPUT,       /* no-op at the end of the list: keeps output (node, mb) in[0] alive for
                         pipit_program_get_output */
    INS_TP,           /* tensor parallelism: out = the T ranks' in[0] of (node, mb) combined in rank
                         order by the transport's all-reduce (TP_SUM: sum, TP_MAX: max); numel elements */
    INS_A2A_START,    /* expert parallelism: the all-to-all of EP node (node, mb) starts: in[0] staged
                         and its blocks sent (runtime/ep.c); first = 1: in an overlapped pair, the
                         receives posted here too */
    INS_A2A_FINISH    /* ... and ends: the blocks received into out; `use` = its START's index, first
                         its START's. Other instructions may run between the two (an overlapped pair) */
} pipit__ins_kind;

typedef struct {
    uint8_t kind;
    uint8_t first;       /* INS_ACC: first microbatch, copy instead of add; INS_SUMSQ: my DP shard only */
    uint8_t dtype;       /* INS_ACC: the accumulator's dtype (the contribution has its node's: a bf16
                            contribution is converted as it is added into an fp32 accumulator) */
    uint8_t acc_f32;     /* INS_RUN: 0, or its out is an fp32 accumulator (a gradient use's, the value's only
                            reader) that a bf16 matmul writes (1) or adds into (2) in fp32: no INS_ACC */
    uint8_t epi;         /* INS_RUN of a bf16 MATMUL: 1 = the BIAS_ADD reading it runs in its epilogue, bias
                            in[2], out the sum's value (lower.c find_bias_epi) */
    uint8_t shadow;      /* INS_RUN of a pre-loop cast of param `param` to bf16: 1 = its output is the
                            param's bf16 shadow, kept in the arena across steps and rewritten by the update,
                            so a step whose shadow is current skips it (lower.c mark_shadows) */
    int32_t node;        /* INS_RUN: node; INS_ACC: contribution node */
    int32_t mb;
    pipit__loc out, in[PIPIT_MAX_IN];
    int64_t numel;       /* INS_ACC: elements */
    int32_t peer;        /* INS_SEND / INS_RECV: the other rank */
    uint8_t zc;          /* a send: 1 = zero-copy (its buffer is the transport's until its fence) */
    int32_t task;        /* INS_MARK: index in the rank's task list */
    size_t bytes;        /* INS_SEND / INS_RECV */
    int32_t param, use;  /* post-loop instructions; INS_A2A_START / FINISH: param = the task's slot in its
                            overlapped pair (0, or 1 for the second task), use (FINISH) = its START */
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
    size_t lead;         /* bytes kept free before the gradient (and the param) in the blocks of the ranks
                            of a direct first use that is a tail view (lower.c tail_lead); 0 mostly */
    uint64_t holders;    /* params: ranks holding a copy; boundary: ranks running its post-loop region */
    int norm_rank;       /* params: the holder that computes its sum of squares */
    int decay;           /* AdamW weight decay applies (2-D params) */
    /* tensor parallelism: numel is the local shard's; the full tensor (what
     * the accessors and checkpoints see) is full_shape, cut along
     * shard_axis (-1: replicated on the T ranks) into T parts of each of
     * shard_parts blocks (pipit__shard_copy) */
    int shard_axis, shard_parts, ndim;
    int64_t full_shape[PIPIT_MAX_DIMS], full_numel;
    /* expert parallelism (E > 1): an expert param; numel is the local block
     * (replica % E) of full_shape's axis 0 (runtime/ep.c) */
    int ep;
} pipit__param;

typedef struct {
    int32_t node;
    const char *name;
    pipit_dtype dtype;
    int64_t numel;
    int32_t limit;       /* i32 inputs: values must lie in [0, limit); 0 = unchecked */
    int64_t doc_T;       /* document ids (attention_doc): rows of doc_T values, each non-decreasing; 0 = none */
    int32_t slot_grid;   /* MoE slots fed to dispatch/combine: each -1 (dropped) or in [0, slot_grid), none twice
                            in a microbatch; 0 = not slots */
} pipit__input;

/* A zero-copy send's fence: before instruction `at` of its rank (at = n:
 * after the last one) the rank waits until send instruction `send` has
 * completed, and only then are its bytes written again (fences.c places
 * it; docs/architecture.md, "Zero-copy sends"). */
typedef struct {
    int32_t at, send;
    uint8_t poison; /* the send's arena buffer dies here: PIPIT_DEBUG_SENDS poisons it */
} pipit__fence;

/* One rank's part of the plan. */
typedef struct {
    int32_t n, cap;
    pipit__instr *ins;
    size_t arena_bytes;  /* planned peak */
    size_t naive_bytes;  /* without buffer reuse */
    int rank;
    int ntasks;
    pipit_task *tasks;   /* the schedule's list for this rank (a copy) */
    int npairs;          /* adjacent tasks lowered as overlapped pairs (EP all-to-alls, lower.c) */
    int32_t post_at;     /* the first instruction of the post-loop (n: none) */
    pipit__fence *fences;/* [nfences] ordered by at */
    int32_t nfences;
    /* where the params this rank holds live in its blocks */
    size_t *param_off;   /* [nparams] offset in the blocks; SIZE_MAX: not held */
    size_t param_bytes, acc_bytes;
    int64_t max_chunks;  /* largest param's count of sum-of-squares chunks */
    int64_t nsrcs;       /* per-use sums read by all GRADSUMs (their pointer table) */
    struct pipit__mp_buf_s *bufs; /* [nbufs] planned arena buffers (lifetimes, offsets) */
    int32_t nbufs;
} pipit__rank_plan;

#define PIPIT_MAX_DP 64        /* data-parallel replicas */
#define PIPIT_SUMSQ_CHUNK 16384 /* elements per partial sum: fixed, so the norm's bits never depend on threads */

typedef struct {
    pipit_graph *g;      /* the graph the backward was appended to: the user's (borrowed), or with
                            options.dtype bf16 the plan's own bf16 copy of it (compile/autocast.c) */
    pipit_graph *user_g; /* the user's graph (borrowed; = g unless own_g) */
    int own_g;           /* g is the plan's (freed with it) */
    int32_t loss;
    pipit__grads gr;
    pipit_options opt;   /* with defaults applied */
    int M, threads;
    int D;               /* data-parallel replicas (world ranks = nranks * T * D) */
    int T;               /* tensor-parallel ranks per pipeline rank (the graph's T) */
    int C;               /* context-parallel group: C consecutive replicas sharing a sequence (the graph's C;
                            divides D; compile/plan_cp.c) */
    int E;               /* expert-parallel group: E consecutive replicas (the graph's E; divides D) */
    int zero1;           /* D > 1: optimizer state and update sharded over the replicas */
    int zero;            /* ZeRO stage 0..3 in effect (0 unless D > 1 and training); zero1 = zero >= 1 */
    int reshard;         /* ZeRO-3 reshard_after_forward in effect: params gathered per task (runtime/zero.c) */
    int loss_rank;       /* pipeline rank that computes the loss */
    int nparams;         /* params[0, nparams): the model's parameters */
    int *by_name;        /* [nparams] param indices sorted by name (pipit__plan_find_param) */
    int32_t *param_of;   /* [graph nodes] index of the param that node is, -1 for other nodes */
    int ntargets;        /* params[nparams, ntargets): pre-loop boundary values */
    pipit__param *params;
    uint64_t *node_ranks;/* [graph nodes] pre-loop and post-loop nodes: ranks that run them */
    int ninputs;
    pipit__input *inputs;
    int nranks;
    pipit__rank_plan *ranks;
    int S;               /* pipeline stages of the graph */
    int *stage_rank;     /* [S] */
    int32_t *node_stage; /* [graph nodes] stage of each node (-1 leaves) */
    uint8_t *node_phase; /* [graph nodes] PH_* */
    int forward_only;    /* options.forward_only: F tasks only, no gradients, no post-loop */
    int noutputs;
    int32_t *outputs;    /* [noutputs] options.outputs' node ids in g */
    int32_t *user_outputs; /* [noutputs] the same values' ids in user_g (their dtype is what
                            pipit_program_get_output returns) */
    int32_t graph_n0;    /* the graph's node count before this compile appended to it */
    pipit_status graph_st0; /* and its status */
} pipit__plan;

/* Differentiates `loss`, infers stages, checks the schedule (NULL: one
 * rank, each microbatch's forward then backward, in order) and lowers the
 * step into per-rank instruction lists with planned arenas. Options must
 * already be validated. On failure *pl is freed. */
pipit_status pipit__plan_build(pipit_graph *g, int32_t loss, const pipit_options *opt, pipit__plan *pl);
void pipit__plan_free(pipit__plan *pl);
/* For a built plan whose program could not be made (memory admission,
 * backend memory): after freeing it, leaves the graph as it was before the
 * compile (pl->graph_n0, graph_st0; a forward-only compile appended
 * nothing), so a second compile with other options works. */
void pipit__graph_rollback(pipit_graph *g, int32_t n0, pipit_status st0);
/* Index of the param called `name` (binary search over by_name), -1 if none. */
int pipit__plan_find_param(const pipit__plan *pl, const char *name);

/* The collective id of the global norm's all-reduce over a stage's T
 * ranks (the others use their node's id, which compile keeps below it). */
#define PIPIT_TP_NORM_ID 0x0ffffff0
/* Sets pl->C from the graph and checks it against the mesh (compile/plan_cp.c). */
pipit_status pipit__check_cp(pipit__plan *pl);
/* ... and of the expert params' norm terms over an EP group (runtime/ep.c). */
#define PIPIT_EP_NORM_ID 0x0ffffff1
/* Sets pl->E from the graph and checks it against the mesh (compile/plan_ep.c):
 * E divides D; no tensor parallelism or ZeRO with E > 1. */
pipit_status pipit__check_ep(pipit__plan *pl);

/* Copies shard t of T of param pp between the full tensor and its local
 * shard: full -> shard (to_full = 0) or shard -> full (1); elements of
 * `es` bytes. A replicated param is one memcpy. */
void pipit__shard_copy(const pipit__param *pp, int T, int t, void *full, void *shard, size_t es, int to_full);

/* Lowers the step into per-rank programs for schedule `sch` (NULL: the
 * sequential reference). */
pipit_status pipit__lower(pipit__plan *p, const pipit_schedule *sch);

/* Bytes of arena buffers alive just after instruction i of rank r. */
size_t pipit__live_bytes_after(const pipit__rank_plan *r, int32_t i);
/* Per rank, the largest live bytes at any task boundary of the loop: what
 * the schedule keeps in flight (the simulator's peak_bytes model). */
size_t pipit__task_boundary_peak(const pipit__rank_plan *r);
/* The arena's two parts: the bytes of pre-loop values (they live into the
 * loop: the params' bf16 copies under options.dtype bf16), and the peak of
 * the buffers born in the loop (activations, messages, gradients per
 * microbatch) at any instruction of it. */
size_t pipit__preloop_bytes(const pipit__rank_plan *r);
size_t pipit__activation_peak(const pipit__rank_plan *r);

#endif
