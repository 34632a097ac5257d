/*
 * ep.h — expert parallelism's two ops of the op table (ir/ep.c): their
 * shape and gradient rules, bound into ir/ops.c's table by the names it
 * expects. Both are collectives of the EP group (OPF_COLL: the runtime's
 * instructions, runtime/ep.c), E = iattr[0]:
 *   EP_A2A(x [X, C, ...]) -> [X/E, E C, ...]: block k of X/E experts to EP
 *       member k; member j's block lands at [:, j C, (j+1) C).
 *   EP_A2A_REV(y [X/E, E C, ...]) -> [X, C, ...]: the inverse.
 * Each is the other's VJP (a permutation's transpose is its inverse).
 */
#ifndef PIPIT_IR_EP_H
#define PIPIT_IR_EP_H

#include "ir/graph.h"

/* Whether node op is one of the two EP all-to-alls (lowered to the pair
 * INS_A2A_START / INS_A2A_FINISH, compile/lower.c, runtime/ep.c). */
static inline int pipit__is_ep_op(int op) { return op == PIPIT_OP_EP_A2A || op == PIPIT_OP_EP_A2A_REV; }

pipit_status pipit__op_ep_a2a_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_ep_a2a_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);
pipit_status pipit__op_ep_a2a_rev_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_ep_a2a_rev_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);

#define op_EP_A2A_shape pipit__op_ep_a2a_shape
#define op_EP_A2A_vjp pipit__op_ep_a2a_vjp
#define op_EP_A2A_REV_shape pipit__op_ep_a2a_rev_shape
#define op_EP_A2A_REV_vjp pipit__op_ep_a2a_rev_vjp

#endif
