/*
 * memreport.h — what one world rank of a pipeline rank holds at a step's
 * peak, by kind (`pipit plan`'s memory report, text and JSON).
 */
#ifndef PIPIT_MEMREPORT_H
#define PIPIT_MEMREPORT_H

#include "runtime/program.h"

typedef struct {
    double activations;  /* the microbatch loop's own arena buffers at their peak */
    double params;       /* the parameter block (+ its kept 1/D shard under ZeRO-3) */
    double grads;        /* the gradient block (+ its kept 1/D shard under ZeRO-2/3) */
    double moments;      /* AdamW's two moments (this replica's shard under ZeRO-1+) */
    double transient;    /* the rest: arena_slack + accumulators + dp_buffer + gather_copies */
    double arena_slack;  /* arena bytes beyond the loop's peak: the pre-loop values (bf16 copies of params)
                            and what first-fit packing adds */
    double accumulators; /* gradient accumulators */
    double dp_buffer;    /* the data-parallel exchange's scratch (D > 1) */
    double gather_copies; /* ZeRO-3: the copies of this replica's parameter shard sent to the D - 1 others
                             at the step's all-gather (every send before any receive: all in flight at once) */
    double total;        /* the sum: the rank's blocks, as memory admission counts them */
} pipit__rank_mem;

/* Replica 0's world rank of pipeline rank prank (its shard is never smaller). */
void pipit__rank_memory(const pipit_program *p, int prank, pipit__rank_mem *m);

#endif
