/*
 * autodiff.h — reverse-mode differentiation that emits ordinary graph ops.
 *
 * Gradient contributions to one value are summed in the consumers' graph
 * order. A gradient TARGET's contributions are not summed: each use keeps
 * its own value, so the runtime can accumulate per use across microbatches
 * and add the per-use sums once, in use order, after the loop (DESIGN 2.5).
 * Targets are the params, and the pre-loop values read inside the loop:
 * forward values that depend on params only (casts, preprocessing) are
 * computed once before the microbatch loop, and their backward runs once
 * after it, from their accumulated gradient (the post-loop region).
 */
#ifndef PIPIT_AUTODIFF_H
#define PIPIT_AUTODIFF_H

#include "ir/graph.h"

typedef struct {
    int32_t node;      /* the PARAM node, or a pre-loop value read in the loop */
    int boundary;      /* 1: a pre-loop value, 0: a param */
    int32_t gacc;      /* boundary: leaf "@gacc" that receives its accumulated gradient */
    int nuses;
    int32_t *contrib;  /* [nuses] gradient of each use, in use (consumer graph) order */
    uint8_t *post;     /* [nuses] 1: computed once in the post-loop region, 0: per microbatch */
} pipit__grad_target;

typedef struct {
    int32_t fwd_end;   /* nodes [0, fwd_end) are the forward graph */
    int32_t seed;      /* INPUT "@dloss": the loss gradient (1/M), scalar */
    int nparams;       /* targets [0, nparams): params in graph order */
    int ntargets;      /* targets [nparams, ntargets): pre-loop boundary values */
    pipit__grad_target *t;
    uint8_t *preloop;  /* [fwd_end] 1: computed once before the loop */
} pipit__grads;

/* Appends the backward graph of `loss` (a scalar) to g. Backward nodes of
 * the post-loop region carry NODE_POST. remat (pipit_options.remat):
 * PIPIT_REMAT_POINTWISE makes the backward recompute the cheap elementwise
 * values it reads (autodiff.c, pointwise_recompute); other values add
 * nothing here (full remat is the lowering's). */
pipit_status pipit__autodiff(pipit_graph *g, int32_t loss, int remat, pipit__grads *out);
/* Forward-only programs: the targets (every param, no uses) and the
 * pre-loop marks, without appending anything to g; seed = -1. */
pipit_status pipit__forward_targets(pipit_graph *g, int32_t loss, pipit__grads *out);
void pipit__grads_free(pipit__grads *gr);

#endif
