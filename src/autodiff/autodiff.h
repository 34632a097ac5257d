/*
 * autodiff.h — reverse-mode differentiation that emits ordinary graph ops.
 * Gradient contributions to one value are summed in the consumers' graph
 * order; a param's contributions are NOT summed: each use keeps its own
 * value so the runtime can accumulate per use across microbatches and add
 * the per-use sums once, in use order, after the loop (DESIGN 2.5).
 */
#ifndef PIPIT_AUTODIFF_H
#define PIPIT_AUTODIFF_H

#include "graph/graph.h"

typedef struct {
    int32_t param;     /* PARAM node */
    int nuses;         /* contributions, in use (consumer graph) order */
    int32_t *contrib;  /* [nuses] node ids */
} pipit__param_grad;

typedef struct {
    int32_t fwd_end;   /* nodes [0, fwd_end) are the forward graph */
    int32_t seed;      /* INPUT "@dloss": the loss gradient (1/M), scalar */
    int nparams;
    pipit__param_grad *pg; /* params in graph order; nuses = 0 if unused */
} pipit__grads;

/* Appends the backward graph of `loss` (a scalar) to g. */
pipit_status pipit__autodiff(pipit_graph *g, int32_t loss, pipit__grads *out);
void pipit__grads_free(pipit__grads *gr);

#endif
