/*
 * pipit_partition.h — automatic stage balancing: cut a graph's forward ops
 * into S contiguous pipeline stages so that the slowest stage (its forward
 * plus its backward) is as fast as possible, optionally under a memory
 * limit per rank, and rewrite the graph with yields at those cuts. Same
 * conventions as pipit.h; docs/partition.md has the algorithm and the cost
 * model.
 *
 * Typical use (build the model with no yields, or with yields as hints):
 *
 *   pipit_partition_result *pt;
 *   pipit_partition_options po = {.schedule = sched};     // S = its stages
 *   pipit_partition(g, loss, &po, &pt);
 *   pipit_partition_apply(pt, g, &loss, 1);               // yields placed, loss remapped
 *   pipit_compile(g, loss, &opt, &prog);
 *
 * The user's yields. With yields = PIPIT_PARTITION_REPLACE_YIELDS (the
 * default) every pipit_yield in the graph is ignored when choosing cuts
 * and removed by pipit_partition_apply (it becomes the identity it is), so
 * a model built for any layout can be re-cut. With
 * PIPIT_PARTITION_YIELDS_AS_CUTS the user's yields are the only places a
 * cut may go (hints): the partition picks S - 1 of them; apply keeps those
 * and removes the others.
 *
 * Cut points. Ops are taken in program (graph) order, restricted to the
 * ops the loss depends on. A cut between two ops is valid when exactly one
 * per-microbatch value (one that depends on a graph input) computed before
 * it is read after it: the one value a yield carries. Params, inputs and
 * values of params alone cross freely (they are placed at their uses).
 */
#ifndef PIPIT_PARTITION_H
#define PIPIT_PARTITION_H

#include <stdio.h>

#include "pipit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pipit_partition_result pipit_partition_result;

typedef enum {
    PIPIT_PARTITION_REPLACE_YIELDS = 0, /* ignore the user's yields; apply removes them */
    PIPIT_PARTITION_YIELDS_AS_CUTS = 1  /* cut only where the user put a yield */
} pipit_partition_yields;

/* Every zero field means the default. */
typedef struct {
    /* The schedule the stages are cut for (borrowed): S = its stage count,
     * stage s runs on its rank, and its unit-cost simulation gives the
     * microbatches whose activations each rank holds at once. NULL: S =
     * stages (then required), one stage per rank, 1F1B-like in-flight
     * counts (stage s of S holds S - s). */
    const pipit_schedule *schedule;
    int stages;
    pipit_partition_yields yields;
    /* Modelled costs: a GEMM (matmul, attention) takes FLOPs / gemm_flops
     * seconds, every other op the bytes it reads and writes / mem_bandwidth,
     * plus, for ops that evaluate an exp or tanh per element (cross-entropy
     * and its gradient: per logit; GELU and its gradient), elements /
     * exp_rate. Defaults: 5e10 FLOP/s, 1e10 B/s, 3e8 elements/s. */
    double gemm_flops, mem_bandwidth, exp_rate;
    /* Measured costs: a program compiled from the same model (any layout)
     * that ran steps with pipit_program_set_profile on. Each op kind's
     * measured seconds per microbatch scale the model's costs of that kind
     * (the model still splits a kind's time among its nodes by size).
     * Borrowed for the call. NULL: modelled costs only. A profile is
     * this process's timing: in a multi-process job, where every process
     * must cut alike, use modelled costs. */
    const pipit_program *profile;
    /* Memory limit per rank in bytes (0: none): a stage's parameters,
     * gradients, optimizer state (optimizer_slots values per parameter
     * element; default 2, AdamW's moments), per-use gradient accumulators
     * and activations (the bytes of its forward values x microbatches in
     * flight) must fit. A rank holding V stages gives each limit / V. */
    double mem_limit;
    int optimizer_slots;
    /* pipit_options.remat of the program. PIPIT_REMAT_FULL: an op costs
     * twice its forward plus its backward, and a stage keeps only its
     * input per microbatch in flight (estimated as its largest forward
     * value). PIPIT_REMAT_POINTWISE: the recomputed elementwise ops count
     * in the backward; the activations are estimated as without remat
     * (every forward value: an upper bound). Other values are INVALID. */
    int remat;
} pipit_partition_options;

/* Chooses the cuts for the forward graph of `loss` (g is only read; it
 * must not be compiled yet): the slowest stage as fast as possible, then
 * the sum of squared stage costs as small as possible. With several
 * stages per rank (the schedule's map) it balances rank loads instead (the
 * sum of a rank's stages) when there are at most 2e6 cut sets to try. INVALID for bad options, a loss that is not
 * a scalar of g, fewer valid cut points than S - 1 (the message says how
 * many there are) or a memory limit no partition meets (the message names
 * the limit and the smallest feasible one); NOMEM. */
PIPIT_API pipit_status pipit_partition(const pipit_graph *g, pipit_val loss, const pipit_partition_options *opt,
                                       pipit_partition_result **out);
PIPIT_API void pipit_partition_free(pipit_partition_result *p);

/* S, and per stage (0 <= s < S) the predicted seconds of one microbatch's
 * forward + backward, of the forward alone, and the estimated bytes per
 * rank (as for mem_limit). Out of range: 0 (-1 for stages) and a message. */
PIPIT_API int pipit_partition_stages(const pipit_partition_result *p);
PIPIT_API double pipit_partition_stage_cost(const pipit_partition_result *p, int s);
PIPIT_API double pipit_partition_stage_forward(const pipit_partition_result *p, int s);
PIPIT_API double pipit_partition_stage_bytes(const pipit_partition_result *p, int s);
/* Stage s's ops: [first, end) in the partition's op sequence (0 <= s < S);
 * the sequence has pipit_partition_num_ops entries, and op i is node
 * pipit_partition_op_node(p, i) of the graph as it was partitioned. */
PIPIT_API pipit_status pipit_partition_stage_ops(const pipit_partition_result *p, int s, int *first, int *end);
PIPIT_API int pipit_partition_num_ops(const pipit_partition_result *p);
PIPIT_API int pipit_partition_op_node(const pipit_partition_result *p, int i);

/* The predicted step time (seconds) of this partition under `sched` (S
 * stages, any M): the schedule simulator run with the partition's
 * per-stage forward and backward costs (a split schedule's W tasks cost
 * nothing, its B the whole backward). SCHEDULE for a stage-count mismatch. */
PIPIT_API pipit_status pipit_partition_simulate(const pipit_partition_result *p, const pipit_schedule *sched,
                                                double *step_seconds);

/* Rewrites g (the graph partitioned, not compiled yet) so that its stages
 * are the partition's: removes the user's yields and puts one yield on the
 * value each cut carries. Node ids change: vals[0..nvals) (values of g the
 * caller keeps: the loss, outputs) are updated in place. Parameters and
 * inputs keep their names; the computation and its numbers are unchanged.
 * Once per partition: INVALID for another graph, or one that changed since
 * it was partitioned (a second apply included). */
PIPIT_API pipit_status pipit_partition_apply(const pipit_partition_result *p, pipit_graph *g, pipit_val *vals, int nvals);

/* A header line, then one line per stage: its op range, the first and
 * last param its ops read, predicted forward and forward+backward time,
 * estimated bytes, and which stage is the slowest. IO if writing fails. */
PIPIT_API pipit_status pipit_partition_print(FILE *f, const pipit_partition_result *p);

#ifdef __cplusplus
}
#endif
#endif /* PIPIT_PARTITION_H */
