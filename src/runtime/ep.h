/*
 * ep.h — the runtime's side of expert parallelism (runtime/ep.c): the
 * all-to-all pair of the EP group, the expert params' norm terms, and the
 * replicas a param's gradient is summed over.
 */
#ifndef PIPIT_RUNTIME_EP_H
#define PIPIT_RUNTIME_EP_H

#include "ir/ep.h"
#include "runtime/program.h"

/* EP_A2A / EP_A2A_REV in two halves, on thread 0: out = the all-to-all of
 * in[0] over w's EP group (the E consecutive replicas of w's stage); the
 * rank may compute between them while the blocks move. start reads in[0]
 * into a host staging buffer (*staging; NULL when E = 1) and sends its
 * blocks; finish receives the others, writes out and frees the staging
 * (when it fails, the staging is left to the caller: the transport may
 * still use it). */
pipit_status pipit__ep_start(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k, void **staging);
pipit_status pipit__ep_finish(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k, void *staging);
/* Before the global norm: the expert params' terms summed over the EP
 * group in rank order (each expert counted once); every other param keeps
 * its value (EP rank 0's, the others' zeros added). E = 1: nothing. */
pipit_status pipit__ep_norm_terms(pipit_program *p, int w);
/* The replicas whose gradients of param i are summed with world rank w's,
 * ascending, into reps (n of them, returned): all D, or for an expert param
 * the D/E holding the same experts (replica = w's mod E). *mine: w's index. */
int pipit__dp_group(const pipit_program *p, int w, int i, int *reps, int *mine);
/* ZeRO-1: the [a, b) of param i's elements whose optimizer state replica
 * keeps (pipit__dp_shard over all D, or for an expert param over its D/E
 * holders, where replica is holder replica / E). */
void pipit__dp_replica_shard(const pipit__plan *pl, int i, int replica, int64_t *a, int64_t *b);

#endif
