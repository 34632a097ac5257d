/*
 * llama_moe.c — the Llama builder's mixture-of-experts MLP (pipit_llama.h's
 * experts fields; the ops of pipit_moe.h): which layers are MoE, the
 * config's checks, the parameter count, and the routed + shared MLP with
 * its Switch/Mixtral load-balancing term.
 */
#include <math.h>
#include <stdio.h>

#include "models/llama_moe.h"
#include "models/models.h"
#include "pipit_moe.h"
#include "util/checked.h"
#include "util/common.h"

int pipit__llama_is_moe(const pipit_llama_config *c, int l) {
    int every = c->moe_every > 1 ? c->moe_every : 1;
    return c->experts > 0 && (l + 1) % every == 0;
}

pipit_status pipit__llama_moe_check(const pipit_llama_config *c) {
    if (c->experts < 0) return pipit__err(PIPIT_STATUS_INVALID, "llama: experts %d must be >= 1 (0: dense MLPs)", c->experts);
    if (c->experts == 0) {
        if (c->top_k || c->capacity_factor != 0 || c->dropless || c->shared_experts || c->moe_every || c->router ||
            c->aux_loss != 0 || c->route_bias || c->moe_layout || c->shared_gate || c->route_unnormalized)
            return pipit__err(PIPIT_STATUS_INVALID,
                              "llama: top_k, capacity_factor, dropless, shared_experts, moe_every, router, aux_loss or route_bias "
                              "given without experts (experts 0: dense MLPs; moe_layout, shared_gate and route_unnormalized too)");
        return PIPIT_STATUS_OK;
    }
    if (c->top_k < 1 || c->top_k > c->experts)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: top_k %d must be in 1..experts (%d)", c->top_k, c->experts);
    if (c->dropless != 0 && c->dropless != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: dropless %d is not 0 or 1", c->dropless);
    if (!c->dropless && (!(c->capacity_factor > 0) || !isfinite(c->capacity_factor)))
        return pipit__err(PIPIT_STATUS_INVALID,
                          "llama: capacity_factor %g must be > 0 (slots per expert = ceil(factor x tokens x top_k / "
                          "experts)), or dropless 1",
                          c->capacity_factor);
    if (c->shared_experts < 0 || c->moe_every < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: shared_experts %d and moe_every %d must be >= 0",
                          c->shared_experts, c->moe_every);
    if (c->router != PIPIT_ROUTER_SOFTMAX && c->router != PIPIT_ROUTER_SIGMOID)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: router %d is not 0 (softmax) or 1 (sigmoid)", c->router);
    if (!(c->aux_loss >= 0) || !isfinite(c->aux_loss))
        return pipit__err(PIPIT_STATUS_INVALID, "llama: aux_loss %g must be a number >= 0", c->aux_loss);
    if (c->route_bias != 0 && c->route_bias != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: route_bias %d is not 0 or 1", c->route_bias);
    if (c->moe_layout < PIPIT_LLAMA_MOE_STACKED || c->moe_layout > PIPIT_LLAMA_MOE_QWEN2)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: moe_layout %d is not 0 (stacked), 1 (Mixtral) or 2 (Qwen2-MoE)",
                          c->moe_layout);
    if (c->moe_layout == PIPIT_LLAMA_MOE_MIXTRAL && c->shared_experts)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: moe_layout 1 (Mixtral) has no shared experts (got %d)",
                          c->shared_experts);
    if (c->route_unnormalized != 0 && (c->route_unnormalized != 1 || c->router != PIPIT_ROUTER_SOFTMAX))
        return pipit__err(PIPIT_STATUS_INVALID, "llama: route_unnormalized %d must be 0, or 1 with the softmax router (router 0)",
                          c->route_unnormalized);
    if (c->shared_gate != 0 && (c->shared_gate != 1 || c->shared_experts < 1))
        return pipit__err(PIPIT_STATUS_INVALID, "llama: shared_gate %d must be 0, or 1 with shared_experts >= 1 (got %d)",
                          c->shared_gate, c->shared_experts);
    return PIPIT_STATUS_OK;
}

int pipit__llama_mlp_params(const pipit_llama_config *c, int l, int64_t F, int64_t *out) {
    int64_t C = c->dim, dense, n = 0, t;
    if (!pipit__mul_i64(3 * C, F, &dense)) return 0;
    if (!pipit__llama_is_moe(c, l)) {
        *out = dense;
        return 1;
    }
    /* router E x C, E experts of 3 C F, shared experts one MLP of 3 C (S F) */
    if (!pipit__mul_i64(dense, c->experts, &n) || !pipit__mul_i64(C, c->experts, &t) || !pipit__add_i64(n, t, &n) ||
        !pipit__mul_i64(dense, c->shared_experts, &t) || !pipit__add_i64(n, t, &n) ||
        !pipit__add_i64(n, c->route_bias ? c->experts : 0, &n) || !pipit__add_i64(n, c->shared_gate ? C : 0, &n))
        return 0;
    *out = n;
    return 1;
}

static pipit_val param3(pipit_graph *g, const pipit_llama_config *c, int l, const char *what, int64_t d0, int64_t d1,
                        int64_t d2) {
    char name[112];
    snprintf(name, sizeof name, "model.layers.%d.mlp.%.64s.weight", l, what);
    return pipit_param(g, name, c->dtype, d2 ? 3 : 2, (int64_t[]){d0, d1, d2});
}

/* param3 sharded along `axis` over the stage's T > 1 tensor-parallel ranks
 * (an expert's or the shared experts' hidden width: gate and up
 * column-, down row-parallel); T = 1: param3. */
static pipit_val param3_tp(pipit_graph *g, const pipit_llama_config *c, int l, const char *what, int64_t d0, int64_t d1,
                           int64_t d2, int axis) {
    if (pipit_graph_tensor_parallel(g) <= 1) return param3(g, c, l, what, d0, d1, d2);
    char name[112];
    snprintf(name, sizeof name, "model.layers.%d.mlp.%.64s.weight", l, what);
    return pipit_param_sharded(g, name, c->dtype, d2 ? 3 : 2, (int64_t[]){d0, d1, d2}, axis, 1);
}

/* A param every tensor-parallel rank holds whole but that the MoE MLP
 * reads where the gradients are partial sums over the T ranks (after the
 * input's tp_copy, before the output's tp_sum): read through tp_copy, so
 * its gradient is their sum, as sequence parallelism reads the norms'. */
static pipit_val replicated(pipit_graph *g, pipit_val w) {
    return pipit_graph_tensor_parallel(g) > 1 ? pipit_tp_copy(g, w) : w;
}

/* Expert weight `what` ("gate", "up", "down") of E experts stacked [E, d0,
 * d1]: pipit's own stacked param, or (Hugging Face's layouts) the E
 * per-expert params [d0, d1] concatenated. */
static pipit_val experts3(pipit_graph *g, const pipit_llama_config *c, int l, const char *what, int64_t d0,
                          int64_t d1) {
    char name[128];
    if (c->moe_layout == PIPIT_LLAMA_MOE_STACKED) {
        snprintf(name, 32, "experts.%s_proj", what);
        if (pipit_graph_expert_parallel(g) > 1) { /* this EP member's block of the experts */
            char full[160];
            snprintf(full, sizeof full, "model.layers.%d.mlp.%s.weight", l, name);
            return pipit_param_experts(g, full, c->dtype, 3, (int64_t[]){c->experts, d0, d1});
        }
        /* tensor parallelism: each expert's hidden width F over the T ranks (gate, up [E, F/T, C]; down [E, C, F/T]) */
        return param3_tp(g, c, l, name, c->experts, d0, d1, what[0] == 'd' ? 2 : 1);
    }
    if (pipit_graph_expert_parallel(g) > 1) {
        pipit__err(PIPIT_STATUS_INVALID, "llama: expert parallelism with Hugging Face's per-expert weights (moe_layout %d) "
                   "is not built: the experts are stacked from one param each", c->moe_layout);
        return (pipit_val){g, -1};
    }
    pipit_val *w = pipit__calloc((size_t)c->experts, sizeof *w);
    if (!w) {
        pipit__err(PIPIT_STATUS_NOMEM, "llama: out of memory");
        return (pipit_val){g, -1};
    }
    const char *mix = what[0] == 'g' ? "w1" : what[0] == 'u' ? "w3" : "w2"; /* Mixtral's names */
    for (int e = 0; e < c->experts; e++) {
        if (c->moe_layout == PIPIT_LLAMA_MOE_MIXTRAL)
            snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, mix);
        else snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.%s_proj.weight", l, e, what);
        w[e] = pipit_param(g, name, c->dtype, 2, (int64_t[]){d0, d1});
    }
    pipit_val all = c->experts == 1 ? w[0] : pipit_concat(g, c->experts, w, 0); /* [E d0, d1] */
    pipit__free(w);
    return pipit_reshape(g, all, 3, (int64_t[]){c->experts, d0, d1});
}

/* down(silu(gate(x)) * up(x)) with weights of any batch shape: x [.., n, C]
 * against [.., F, C] (x W^T), down [.., C, F]. */
static pipit_val swiglu(pipit_graph *g, pipit_val x, pipit_val wg, pipit_val wu, pipit_val wd) {
    pipit_val gate = pipit_silu(g, pipit_matmul(g, x, wg, 0, 1));
    pipit_val up = pipit_matmul(g, x, wu, 0, 1);
    return pipit_matmul(g, pipit_mul(g, gate, up), wd, 0, 1);
}

/* Switch/Mixtral load balancing of one layer: E sum_e f_e P_e, f_e the
 * fraction of the N tokens that chose expert e (count / N: the k choices
 * of a token each count, as transformers' load_balancing_loss_func), P_e
 * the mean router probability (softmax; sigmoid scores normalised over
 * the experts). The counts are a dispatch of ones at capacity N (every
 * choice kept: a token picks k different experts) summed per expert;
 * the ones are exp(0 x the weights' row sums), so the gradient reaching
 * the weights through them is exactly zero: f is a constant. */
static pipit_val balance_loss(pipit_graph *g, const pipit_llama_config *c, pipit_val logits, pipit_val idx,
                              pipit_val w, int64_t N) {
    pipit_val probs = c->router == PIPIT_ROUTER_SOFTMAX ? pipit_softmax(g, logits) : pipit_sigmoid(g, logits);
    if (c->router == PIPIT_ROUTER_SIGMOID) probs = pipit_div(g, probs, pipit_reduce_sum(g, probs, -1, 1));
    pipit_val ones = pipit_exp(g, pipit_scale(g, pipit_reduce_sum(g, w, -1, 1), 0.0)); /* exp(0) = 1: [N, 1] */
    pipit_val all = pipit_moe_slots(g, idx, c->experts, N);
    pipit_val cnt = pipit_reduce_sum(g, pipit_moe_dispatch(g, ones, all, c->experts, N, NULL), 1, 0); /* [E, 1] */
    pipit_val f = pipit_scale(g, pipit_reshape(g, cnt, 1, (int64_t[]){c->experts}), 1.0 / (double)N);
    pipit_val P = pipit_reduce_mean(g, probs, 0, 0);
    return pipit_scale(g, pipit_sum(g, pipit_mul(g, f, P)), (double)c->experts);
}

/* Tensor parallelism over the stage's Tp ranks (Megatron's expert tensor
 * parallelism): x enters through tp_copy (sequence parallelism: the
 * all-gather), the router, the routing and the dispatch run replicated on
 * the same tokens on every rank (same choices: deterministic), each expert
 * and the shared experts hold F/Tp of their hidden width, so each rank's
 * combine is a partial sum that the output's tp_sum (the reduce-scatter)
 * adds up. Everything between the two collectives receives partial
 * gradients: the replicated params there (router, routing bias, shared
 * gate) are read through tp_copy, the combine weights' partial gradients
 * meet the router's through the input's tp_copy, and the balance term,
 * whose gradient every rank would take whole, enters as tp_sum(term / Tp). */
pipit_val pipit__llama_moe_mlp(pipit_graph *g, const pipit_llama_config *c, pipit_val x, int l, int64_t F,
                               pipit_val *aux, pipit_val *choice) {
    int Tp = pipit_graph_tensor_parallel(g);
    x = pipit__models_tp_copy(g, Tp, x); /* the whole sequence on every rank */
    int64_t C = c->dim, E = c->experts, B = pipit_val_dim(x, 0), T = pipit_val_dim(x, 1), N = B * T;
    pipit_val xf = pipit_reshape(g, x, 2, (int64_t[]){N, C}), idx;
    char rname[112];
    if (c->moe_layout == PIPIT_LLAMA_MOE_MIXTRAL) snprintf(rname, sizeof rname, "model.layers.%d.block_sparse_moe.gate.weight", l);
    else snprintf(rname, sizeof rname, "model.layers.%d.mlp.%s.weight", l, c->moe_layout ? "gate" : "router");
    pipit_val logits = pipit_matmul_nt(g, xf, replicated(g, pipit_param(g, rname, c->dtype, 2, (int64_t[]){E, C})));
    char bname[96];
    snprintf(bname, sizeof bname, "model.layers.%d.mlp.route_bias", l);
    pipit_val rb = c->route_bias ? replicated(g, pipit_param(g, bname, c->dtype, 1, (int64_t[]){E})) : (pipit_val){g, -1};
    pipit_route_opts ro = {c->top_k, (pipit_router_kind)c->router, !c->route_unnormalized, c->route_bias ? &rb : NULL};
    pipit_val w = pipit_moe_route(g, logits, &ro, &idx);
    if (choice) *choice = idx;
    /* the config check refuses what the capacity rule would (-1: the slots refuse it) */
    int64_t cap = pipit_moe_capacity(N, c->top_k, c->experts, c->capacity_factor, c->dropless);
    pipit_val slots = pipit_moe_slots(g, idx, c->experts, cap);
    pipit_val xe = pipit_moe_dispatch(g, xf, slots, c->experts, cap, NULL); /* [E, cap, C] */
    int ep = pipit_graph_expert_parallel(g) > 1; /* to the experts' owners [E/ep, ep cap, C] and back */
    if (ep) xe = pipit_ep_dispatch(g, xe);
    pipit_val ye = swiglu(g, xe, experts3(g, c, l, "gate", F, C), experts3(g, c, l, "up", F, C),
                          experts3(g, c, l, "down", C, F));
    if (ep) ye = pipit_ep_combine(g, ye);
    pipit_val y = pipit_moe_combine(g, ye, slots, &w); /* [N, C] */
    if (c->shared_experts > 0) {
        int64_t S = (int64_t)c->shared_experts * F;
        pipit_val sh = swiglu(g, xf, param3_tp(g, c, l, "shared_expert.gate_proj", S, C, 0, 0),
                              param3_tp(g, c, l, "shared_expert.up_proj", S, C, 0, 0),
                              param3_tp(g, c, l, "shared_expert.down_proj", C, S, 0, 1));
        if (c->shared_gate) /* Qwen2-MoE: times sigmoid(x w) [N, 1], broadcast over C */
            sh = pipit_mul(g, sh, pipit_sigmoid(g, pipit_matmul_nt(g, xf, replicated(g, param3(g, c, l, "shared_expert_gate", 1, C, 0)))));
        y = pipit_add(g, y, sh);
    }
    if (aux && c->aux_loss > 0) {
        pipit_val a = balance_loss(g, c, logits, idx, w, N);
        if (Tp > 1) a = pipit_tp_sum(g, pipit_scale(g, a, 1.0 / Tp)); /* its gradient 1/Tp a rank: a partial sum */
        *aux = aux->id >= 0 ? pipit_add(g, *aux, a) : a;
    }
    return pipit__models_tp_sum(g, Tp, pipit_reshape(g, y, 3, (int64_t[]){B, T, C}));
}
