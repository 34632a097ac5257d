/*
 * moe.h — the mixture-of-experts ops of the op table (ir/moe.c): their
 * shape and gradient rules, bound into ir/ops.c's table by the names it
 * expects (op_NAME_shape, op_NAME_vjp).
 *
 *   TOPK(x [..., N]) -> i32 [..., k], k = iattr[0]: the indices of the k
 *       largest values of each row, largest first; equal values by the
 *       lower index; NaN below every number. No gradient (indices).
 *   TAKE(x [..., N], idx i32 [..., k]) -> [..., k]: x[..., idx]; its VJP
 *       is TAKE_DX(idx, dout) -> [..., N = iattr[0]], dout scatter-added
 *       back in k order.
 *   MOE_SLOTS(idx i32 [T, k]) -> i32 [T, k], E = iattr[0], C = iattr[1]:
 *       where each (token, choice) goes in the [E, C] grid of expert
 *       slots, e * C + s, or -1 where expert e's C slots are taken (the
 *       token is dropped for that choice). Slots are assigned in token
 *       order, then choice order: a prefix count, so the layout is fixed
 *       by the indices alone. No gradient.
 *   MOE_DISPATCH(x [T, d], slots [T, k] [, w [T, k]]) -> [E, C, d]:
 *       slot (e, s) holds x[t] (times w[t, j]) for the (t, j) assigned to
 *       it, zeros where no token is.
 *   MOE_COMBINE(y [E, C, d], slots [T, k] [, w [T, k]]) -> [T, d]: row t
 *       is sum over j in order of (w[t, j] *) y[slot(t, j)], kept choices
 *       only (a token dropped by every choice gets exactly zero).
 *   MOE_DW(a [E, C, d], slots [T, k], b [T, d]) -> [T, k]: dot(a[slot(t,
 *       j)], b[t]), 0 for a dropped choice: the gradient of the weights of
 *       both (backward only).
 * Dispatch and combine are each other's transposes: the VJP of one is the
 * other with the same slots and weights.
 */
#ifndef PIPIT_IR_MOE_H
#define PIPIT_IR_MOE_H

#include "ir/graph.h"

pipit_status pipit__op_topk_shape(const pipit_graph *g, pipit__node *n);
pipit_status pipit__op_take_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_take_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);
pipit_status pipit__op_take_dx_shape(const pipit_graph *g, pipit__node *n);
pipit_status pipit__op_moe_slots_shape(const pipit_graph *g, pipit__node *n);
pipit_status pipit__op_moe_dispatch_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_moe_dispatch_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);
pipit_status pipit__op_moe_combine_shape(const pipit_graph *g, pipit__node *n);
void pipit__op_moe_combine_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din);
pipit_status pipit__op_moe_dw_shape(const pipit_graph *g, pipit__node *n);

#define op_TOPK_shape pipit__op_topk_shape
#define op_TOPK_vjp NULL
#define op_TAKE_shape pipit__op_take_shape
#define op_TAKE_vjp pipit__op_take_vjp
#define op_TAKE_DX_shape pipit__op_take_dx_shape
#define op_TAKE_DX_vjp NULL
#define op_MOE_SLOTS_shape pipit__op_moe_slots_shape
#define op_MOE_SLOTS_vjp NULL
#define op_MOE_DISPATCH_shape pipit__op_moe_dispatch_shape
#define op_MOE_DISPATCH_vjp pipit__op_moe_dispatch_vjp
#define op_MOE_COMBINE_shape pipit__op_moe_combine_shape
#define op_MOE_COMBINE_vjp pipit__op_moe_combine_vjp
#define op_MOE_DW_shape pipit__op_moe_dw_shape
#define op_MOE_DW_vjp NULL

/* The strict total order TOPK ranks by (every backend's kernel): a before
 * b when a is larger, or equal with the lower index; NaN after every
 * number, NaNs by index. */
#define PIPIT_TOPK_BEFORE(a, ia, b, ib) \
    ((a) != (a) ? ((b) != (b) && (ia) < (ib)) : ((b) != (b) || (a) > (b) || ((a) == (b) && (ia) < (ib))))

#endif
