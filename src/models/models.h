/*
 * models.h — what the model builders (gpt2.c, llama.c) share: the even
 * split of blocks over stages, the seeded per-name normal init that makes
 * an init independent of the pipeline layout, and the reading of small
 * integers from checkpoint metadata. Internal to src/models.
 */
#ifndef PIPIT_MODELS_H
#define PIPIT_MODELS_H

#include <stdint.h>

#include "pipit.h"
#include "pipit_io.h"

/* First layer of stage s of `layers` blocks split evenly over `stages`
 * (the first layers mod stages stages get one more); -1 and a message
 * naming fn for a NULL config (cfg_null) or s outside 0..stages. */
int pipit__models_first_layer(int cfg_null, int layers, int stages, int s, const char *fn);

/* Tensor parallelism (common.c): builders read T from the graph
 * (pipit_graph_tensor_parallel). The check of a model's sizes against T:
 * T dividing each named count ({name, value} pairs, n of them); INVALID
 * naming the model, the count and T, with the largest T' < T that divides
 * them all. */
typedef struct {
    const char *name;
    int64_t value;
} pipit__tp_count;
pipit_status pipit__models_tp_check(const char *model, int T, const pipit__tp_count *counts, int n);
/* A param of a model built for T ranks: sharded along `axis` in `parts`
 * blocks when T > 1 and axis >= 0, else a plain (replicated) param, so a
 * T = 1 graph is the one built without tensor parallelism. */
pipit_val pipit__models_param(pipit_graph *g, pipit_dtype dt, int T, const char *name, int nd, int64_t d0, int64_t d1,
                              int axis, int parts);
/* Megatron's f and g: identities when T <= 1 (nothing added to the graph).
 * With sequence parallelism (pipit_graph_set_sequence_parallel, T > 1) the
 * stream between them holds [B, S/T, d]: tp_copy is then the all-gather
 * along the sequence (axis 1) and tp_sum the reduce-scatter. */
pipit_val pipit__models_tp_copy(pipit_graph *g, int T, pipit_val x);
pipit_val pipit__models_tp_sum(pipit_graph *g, int T, pipit_val x);
/* Sequence parallelism (common.c): whether the graph cuts the sequence
 * (T > 1 and the switch on); a replicated param read between the
 * collectives (norm weights, a row-parallel bias), through tp_copy then,
 * whose gradient sums the T ranks' partial ones; rank t's block of the
 * sequence (axis 1) of a value every rank holds; the check that T divides
 * the sequence (INVALID naming the model, ctx and T). */
int pipit__models_sp(pipit_graph *g);
pipit_val pipit__models_sp_param(pipit_graph *g, pipit_val w);
pipit_val pipit__models_sp_split(pipit_graph *g, pipit_val x);
pipit_status pipit__models_sp_check(const char *model, pipit_graph *g, int ctx);
/* The LM head and its loss from the final hidden h and the head's weight W
 * [V, d] (this rank's V/T rows with T > 1). fused 0: logits = h W^T
 * (pipit_matmul_nt) and pipit_xent_mean (T > 1: pipit_tp_xent_mean) on
 * them, *logits (if not NULL) that very node. fused 1: the fused head +
 * cross-entropy (pipit_head_xent_mean, vocab parallel with T > 1: the
 * [rows, V] logits are never stored); *logits (if not NULL) = h W^T, a node
 * of its own beside the loss (dead unless read: pipit_options.outputs), so
 * the loss is the same graph with or without it. */
pipit_val pipit__models_head_loss(pipit_graph *g, int T, int fused, pipit_val h, pipit_val W, pipit_val targets,
                                  pipit_val *logits);

/* How one param is initialised: every element the constant `value`
 * (std = 0), or drawn from N(0, std). */
typedef struct {
    double std, value;
} pipit__init_rule;

/* Sets every param of p from its rule (rule(name, ndim, ctx)), each
 * tensor's normal stream seeded by seed ^ hash(name): the same weights
 * whatever the pipeline layout. fn names the caller in messages. */
pipit_status pipit__models_init(pipit_program *p, pipit_dtype dt, uint64_t seed,
                                pipit__init_rule (*rule)(const char *name, int ndim, const void *ctx),
                                const void *ctx, const char *fn);

/* Metadata `key` of ck as a positive int: 1 and *out when present and
 * valid, 0 when absent; -1 (FORMAT set, naming the file and the key) for
 * anything but digits up to INT32_MAX. */
int pipit__models_meta_count(const pipit_checkpoint *ck, const char *key, int *out);
/* Metadata `key` as a positive finite number: 1, 0 (absent) or -1 as above. */
int pipit__models_meta_positive(const pipit_checkpoint *ck, const char *key, double *out);

#endif
