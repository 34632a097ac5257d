/*
 * moe_counts.h — tokens per expert of each MoE layer, for `pipit train
 * --json` (moe_counts, moe_imbalance): the router's choices of every
 * microbatch (pipit_llama_build_moe, read through pipit_options.outputs)
 * counted as integers, so the figures are the same for every schedule,
 * pipeline depth and thread count.
 */
#ifndef PIPIT_CLI_MOE_COUNTS_H
#define PIPIT_CLI_MOE_COUNTS_H

#include <stdint.h>
#include <stdio.h>

#include "model.h"

typedef struct {
    int n;               /* MoE layers (0: a dense model, nothing to report) */
    int E, k;            /* experts, choices per token */
    int64_t rows;        /* tokens per microbatch (batch x ctx) */
    int *layer;          /* [n] the layer of each */
    pipit_val *choice;   /* [n] its i32 [rows, k] choices: the program's outputs */
    int64_t *count;      /* [n x E] the last step's tokens per expert, summed over its microbatches */
    int32_t *scratch;    /* [rows x k] */
    float *bias;         /* --balance-bias: [n x E] the routing biases, read before the first step (the
                            optimizer's weight decay also reaches them: this copy is the one set back) */
} cli_moe;

/* The model's graph as m->kind->build, and for a Llama MoE the choices of
 * its MoE layers into *mc (zeroed first; nothing for a dense model). */
pipit_val cli_moe_build(pipit_graph *g, const cli_model *m, cli_moe *mc);
/* After a step of G microbatches (all replicas): the counts. Dies on a failed read. */
void cli_moe_count(cli_moe *mc, const pipit_program *p, int G);
/* ,"moe_counts":[[...],...],"moe_imbalance":[...] (max / mean count per
 * layer) for the JSON step line; nothing for a dense model. */
void cli_moe_json(const cli_moe *mc, FILE *f);
/* --balance-bias COEF (auxiliary-loss-free balance, DeepSeek-V3 /
 * torchtitan), after cli_moe_count: each MoE layer's routing bias
 * "model.layers.<l>.mlp.route_bias" [E] (a param no gradient reaches)
 * += COEF x sign(mean count - count), then less its mean; read and written
 * through pipit_program_get_param / set_param. The signs come from integer
 * comparisons, so the update is the same for every layout. */
void cli_moe_balance(cli_moe *mc, pipit_program *p, double coef);
/* Before a step: the biases as the program holds them (the first time). */
void cli_moe_bias_load(cli_moe *mc, const pipit_program *p);
void cli_moe_free(cli_moe *mc);

#endif
