/*
 * partition.h — the internals of automatic stage balancing
 * (include/pipit_partition.h): the dynamic program over an op sequence
 * (dp.c), the per-op cost and memory model of a graph (cost.c), and the
 * public calls built on them (partition.c, apply.c).
 */
#ifndef PIPIT_PARTITION_INTERNAL_H
#define PIPIT_PARTITION_INTERNAL_H

#include <stdint.h>

#include "pipit_partition.h"

/* Cut n ops (in order) into S non-empty contiguous stages [bounds[s],
 * bounds[s+1]), bounds[0] = 0, bounds[S] = n, cutting only after ops i
 * with cut_ok[i] (i < n - 1). Optimal: the largest stage cost (the sum of
 * its ops' costs, seg_cost) is the smallest possible; among the cut sets
 * that reach it (within a relative 1e-12), the sum of squared stage costs
 * is the smallest (the other stages as even as they can be); ties go to
 * the earlier cut. If bytes is not NULL every stage must also satisfy
 * bytes(ctx, s, a, b) <= limit. */
typedef struct {
    int n, S;
    const double *cost;     /* [n] >= 0 */
    const uint8_t *cut_ok;  /* [n] */
    double (*bytes)(void *ctx, int s, int a, int b);
    void *ctx;
    double limit;
    /* [S] the rank of each stage, or NULL (one stage per rank). When a rank
     * holds several stages its load is their sum, which the DP cannot see:
     * then, if there are at most PIPIT__EXHAUSTIVE_MAX cut sets, every one
     * is tried and the largest rank load is minimised (then the sum of
     * squared rank loads; ties: the earlier cuts); otherwise the DP's
     * stage balance stands (ranks_balanced = 0 below). */
    const int *rank_of;
} pipit__dp_problem;

#define PIPIT__EXHAUSTIVE_MAX 2000000.0

/* The cost of ops [a, b): their costs added from the last op to the
 * first (the DP grows stages leftwards, and any oracle uses this one sum,
 * so equal cut sets give equal bits). */
double pipit__seg_cost(const double *cost, int a, int b);

/* OK with bounds[S+1] and *worst (the largest stage cost); INVALID when no
 * cut set exists (too few cut points, or none within the memory limit:
 * then *min_limit, if not NULL, is the smallest limit some cut set meets);
 * NOMEM. Sets no message on INVALID: the caller knows the context. */
pipit_status pipit__partition_dp(const pipit__dp_problem *pr, int *bounds, double *worst, double *min_limit);
/* Whether pipit__partition_dp balanced rank loads (rank_of with a rank of
 * several stages and few enough cut sets) rather than stages. */
int pipit__dp_balances_ranks(const pipit__dp_problem *pr);

#endif

/* ---- the cost model (cost.c): the one place that says what an op costs */

#include "ir/graph.h"

typedef struct {
    double gemm_flops, mem_bandwidth, exp_rate; /* rates, defaults applied */
    double scale[PIPIT_OP_COUNT];     /* measured / modelled per op kind (1: unmeasured) */
    double acc_scale;                 /* the same for per-use gradient accumulation */
} pipit__cost_model;

/* Rates from the options (defaults: 5e10 FLOP/s, 1e10 B/s, 3e8 exp/s) and, with
 * opt->profile, the per-kind scales from its measured profile. INVALID for
 * a rate that is not positive and finite, or a profile with no profiled
 * step. */
pipit_status pipit__cost_model_init(const pipit_partition_options *opt, pipit__cost_model *m);
/* Seconds node id of g takes for one microbatch (0 for leaves and aliases). */
double pipit__node_cost(const pipit__cost_model *m, const pipit_graph *g, int32_t id);
/* Seconds of accumulating one use's gradient of a param of `bytes` bytes. */
double pipit__acc_cost(const pipit__cost_model *m, double bytes);
/* bwd[i] (n = g->n entries, zeroed by the caller) += the cost of the
 * backward of forward node i: the VJP nodes autodiff emits for it (on a
 * copy of g) and the accumulation of the param gradients it contributes. */
/* remat: pipit_options.remat (pointwise recomputes are counted as the
 * backward of the op that reads them) */
pipit_status pipit__backward_costs(const pipit__cost_model *m, const pipit_graph *g, int32_t loss, int remat,
                                   double *bwd);

/* ---- the partition object (partition.c), read by apply.c */

#define PIPIT_PARTITION_MAGIC 0x70697074u

struct pipit_partition_result {
    uint32_t magic;
    const pipit_graph *g; /* the graph as partitioned (borrowed) */
    int32_t gn;           /* its node count then: apply refuses a graph that changed */
    int S, n;
    int32_t *op_node;     /* [n] graph node of each op, in program order */
    int *bounds;          /* [S+1] stage s = ops [bounds[s], bounds[s+1]) */
    int32_t *carry;       /* [S-1] the node whose value cut s carries (yields resolved) */
    double *fwd, *cost;   /* [n] per op: forward, forward + backward seconds */
    double *stage_fwd, *stage_cost, *stage_bytes; /* [S] */
    char **first_param, **last_param; /* [S] names of the first / last param its ops read (or NULL) */
    int measured;         /* costs scaled by a profile */
    int ranks_balanced;   /* the largest rank load was minimised (ranks holding several stages) */
    int *rank_of;         /* [S] rank of each stage (the schedule's; identity without one) */
};

/* Follows the user's yields to the value they carry. */
static inline int32_t pipit__unyield(const pipit_graph *g, int32_t id) {
    while (g->nodes[id].op == PIPIT_OP_YIELD) id = g->nodes[id].in[0];
    return id;
}
