/*
 * llama_moe.h — the Llama builder's mixture-of-experts MLP (llama_moe.c).
 * Internal to src/models.
 */
#ifndef PIPIT_LLAMA_MOE_H
#define PIPIT_LLAMA_MOE_H

#include "pipit_llama.h"

/* Whether layer l's MLP is routed: experts > 0 and (l + 1) % moe_every == 0
 * (moe_every 0 or 1: every layer). */
int pipit__llama_is_moe(const pipit_llama_config *c, int l);
/* The MoE fields of the config (INVALID naming the value). */
pipit_status pipit__llama_moe_check(const pipit_llama_config *c);
/* Parameters of layer l's MLP (dense 3 C F; MoE: router E C, experts
 * 3 E C F, shared 3 C (shared_experts F)) into *out; 0 past 2^63. */
int pipit__llama_mlp_params(const pipit_llama_config *c, int l, int64_t F, int64_t *out);
/* The routed (+ shared) MLP of layer l on x [B, T, C] -> [B, T, C]. With
 * aux not NULL and aux_loss > 0, the layer's balance term is added to *aux
 * (id < 0: none yet). choice (may be NULL) gets the router's i32 [B T, k]
 * expert indices. */
pipit_val pipit__llama_moe_mlp(pipit_graph *g, const pipit_llama_config *c, pipit_val x, int l, int64_t F,
                               pipit_val *aux, pipit_val *choice);
/* A checkpoint of L layers of width C with a router ('model.layers.<l>.
 * mlp.router.weight'): the MoE fields from its metadata (experts top_k
 * capacity_factor dropless shared_experts moe_every router aux_loss, as
 * the CLI writes them) into *f and the experts' width into *F, checked
 * against the tensors (FORMAT naming the key or tensor). No router: OK,
 * nothing changed. */
pipit_status pipit__llama_moe_from_checkpoint(const pipit_checkpoint *ck, int L, int64_t C, pipit_llama_config *f,
                                              int64_t *F);
/* Whether `what` (after 'model.layers.<l>.') is a tensor of layer l's MoE MLP. */
int pipit__llama_moe_uses(const pipit_llama_config *c, int l, const char *what);

#endif
