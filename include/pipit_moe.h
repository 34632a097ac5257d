/*
 * pipit_moe.h — mixture-of-experts building blocks as graph ops: top-k,
 * the router, a deterministic dispatch to experts of static capacity and
 * the weighted combine back. Same conventions as pipit.h (a failed builder
 * poisons the graph; pipit_graph_status / pipit_graph_errmsg say why).
 *
 * A routed MLP of E experts over tokens x [T, d] (see docs/architecture.md,
 * "Mixture of experts"):
 *
 *   pipit_val idx, w = pipit_moe_route(g, pipit_matmul_nt(g, x, router), &ro, &idx); // [T, k] each
 *   int64_t C = pipit_moe_capacity(T, k, E, 1.25, 0);
 *   pipit_val slots = pipit_moe_slots(g, idx, E, C);                 // i32 [T, k]
 *   pipit_val xe = pipit_moe_dispatch(g, x, slots, E, C, NULL);      // [E, C, d]
 *   pipit_val ye = pipit_matmul(g, pipit_silu(g, pipit_matmul(g, xe, w1, 0, 0)), w2, 0, 0); // [E, C, d]
 *   pipit_val y = pipit_moe_combine(g, ye, slots, &w);               // [T, d]
 *
 * The expert matmuls are pipit_matmul's batched form ([E, C, d] x [E, d, f]).
 */
#ifndef PIPIT_MOE_H
#define PIPIT_MOE_H

#include <stdint.h>

#include "pipit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The k largest values along x's last axis [..., N] -> [..., k], largest
 * first (equal values: the lower index first; NaN after every number);
 * *indices (may be NULL) gets their i32 positions [..., k]. 1 <= k <= N.
 * The gradient flows to the chosen elements (scattered back). */
PIPIT_API pipit_val pipit_topk(pipit_graph *g, pipit_val x, int k, pipit_val *indices);
/* x [..., N] at i32 indices idx [..., k] (the same leading axes) along the
 * last axis -> [..., k]; the gradient scatter-adds back. */
PIPIT_API pipit_val pipit_take_along(pipit_graph *g, pipit_val x, pipit_val idx);

typedef enum {
    PIPIT_ROUTER_SOFTMAX = 0, /* softmax over the experts, then top-k (Mixtral, Qwen-MoE) */
    PIPIT_ROUTER_SIGMOID = 1, /* sigmoid scores, then top-k (DeepSeek-V3) */
} pipit_router_kind;

typedef struct {
    int top_k;              /* experts per token, 1..E */
    pipit_router_kind kind;
    int normalize;          /* 1: the k weights divided by their sum (Mixtral, DeepSeek-V3) */
    const pipit_val *bias;  /* NULL, or [E] added to the scores for choosing only (the weights
                               are the unbiased scores): load balancing without a loss */
} pipit_route_opts;

/* Router logits [T, E] -> the weights [T, k] of the chosen experts, whose
 * i32 indices go to *indices [T, k] (required). */
PIPIT_API pipit_val pipit_moe_route(pipit_graph *g, pipit_val logits, const pipit_route_opts *o,
                                    pipit_val *indices);

/* Slots per expert for T tokens with k choices over E experts:
 * ceil(factor * T * k / E) (at least 1, at most T), or T when dropless
 * (each token picks k different experts, so an expert gets at most T
 * tokens: nothing is dropped). -1 (message set) for T, k or E < 1, k > E,
 * or factor <= 0 (or not finite) without dropless. */
PIPIT_API int64_t pipit_moe_capacity(int64_t tokens, int top_k, int experts, double factor, int dropless);

/* The slot of each choice: indices i32 [T, k] in [0, E) -> i32 [T, k],
 * e * capacity + s for slot s of expert e, -1 for a choice dropped because
 * the expert's capacity slots were taken. Assigned in token order, then
 * choice order: deterministic, from the indices alone. */
PIPIT_API pipit_val pipit_moe_slots(pipit_graph *g, pipit_val indices, int experts, int64_t capacity);
/* x [T, d] into the expert grid [E, C, d] by slots (pipit_moe_slots with the
 * same E and C): slot (e, s) holds its token's row (times its weight when
 * weights [T, k] is not NULL), zeros where no token went. */
PIPIT_API pipit_val pipit_moe_dispatch(pipit_graph *g, pipit_val x, pipit_val slots, int experts, int64_t capacity,
                                       const pipit_val *weights);
/* y [E, C, d] back to the tokens [T, d]: row t = the sum over its kept
 * choices j, in order, of (weights[t, j] *) y[slot(t, j)]; a token dropped
 * by every choice gets zeros. The transpose of pipit_moe_dispatch. */
PIPIT_API pipit_val pipit_moe_combine(pipit_graph *g, pipit_val y, pipit_val slots, const pipit_val *weights);

/* Expert parallelism (docs/architecture.md, "Mixture of experts"): the
 * experts of each MoE layer split over the E replicas of an EP group, E
 * consecutive data-parallel replicas of the stage (replica d is EP rank
 * d % E of group d / E; E divides D: pipit_compile refuses otherwise).
 * Like tensor parallelism the graph describes ONE member: set E before the
 * first expert param or all-to-all. E = 1 (default): no EP; the two
 * all-to-alls are identities and expert params whole.
 *
 *   pipit_graph_set_expert_parallel(g, E);
 *   pipit_val w = pipit_param_experts(g, "w", PIPIT_F32, 3, (int64_t[]){X, d, f}); // local [X/E, d, f]
 *   pipit_val xe = pipit_ep_dispatch(g, pipit_moe_dispatch(g, x, slots, X, C, NULL)); // [X/E, E C, d]
 *   pipit_val y = pipit_moe_combine(g, pipit_ep_combine(g, pipit_matmul(g, xe, w, 0, 0)), slots, &wts);
 *
 * INVALID for E outside 1..64, or a change once the graph holds expert
 * params or all-to-alls. */
PIPIT_API pipit_status pipit_graph_set_expert_parallel(pipit_graph *g, int E);
/* The graph's E (1 when never set; 0 for an invalid handle). */
PIPIT_API int pipit_graph_expert_parallel(const pipit_graph *g);
/* An expert param of full shape [X, ...] (X experts stacked on axis 0, X a
 * multiple of E): this member holds experts [e X/E, (e+1) X/E), e its EP
 * rank, as a value of shape [X/E, ...]. Its gradient is summed over the D/E
 * replicas holding the same experts; its optimizer state lives there only;
 * reading or setting it through the program moves the whole [X, ...]. */
PIPIT_API pipit_val pipit_param_experts(pipit_graph *g, const char *name, pipit_dtype dt, int ndim,
                                        const int64_t *shape);
/* The all-to-all that sends tokens to their experts' owners: x [X, C, ...]
 * (the dispatch grid of this member's tokens for all X experts) ->
 * [X/E, E C, ...]: for each local expert, the C slots of EP member 0, then
 * member 1's, ... Its gradient is pipit_ep_combine of the output's. */
PIPIT_API pipit_val pipit_ep_dispatch(pipit_graph *g, pipit_val x);
/* The reverse all-to-all: y [X/E, E C, ...] -> [X, C, ...] (each member's
 * slots back to it). Its gradient is pipit_ep_dispatch of the output's. */
PIPIT_API pipit_val pipit_ep_combine(pipit_graph *g, pipit_val y);

#ifdef __cplusplus
}
#endif

#endif
