/*
 * autocast.h — mixed precision (pipit_options.dtype = PIPIT_BF16): the
 * bf16 copy of a graph a program compiles instead of the user's graph.
 * Internal to compile/.
 */
#ifndef PIPIT_AUTOCAST_H
#define PIPIT_AUTOCAST_H

#include "ir/graph.h"

/* Copies g's forward nodes (those before its first backward node) into a
 * new graph *out and appends the mixed-precision twin of every value the
 * loss and the nout outputs depend on, each op's inputs cast as `policy`
 * says (autocast.c's table); *loss_out and outs_out[nout] are their twins'
 * ids in *out (the loss keeps its dtype). g is not modified. On failure
 * *out is NULL and the message names the problem: INVALID for an f64
 * param (mixed precision converts an f32 model), NOMEM. */
pipit_status pipit__autocast(const pipit_graph *g, int32_t loss, const int32_t *outs, int nout,
                             pipit_bf16_policy policy, pipit_graph **out, int32_t *loss_out, int32_t *outs_out);

#endif
