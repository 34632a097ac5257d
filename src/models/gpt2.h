/*
 * gpt2.h — GPT-2 exactly as Hugging Face defines it (pre-LN blocks, tanh
 * GELU, learned positions, lm head tied to wte), built as a pipit graph for
 * one microbatch, with yields splitting the blocks into S pipeline stages.
 */
#ifndef PIPIT_GPT2_H
#define PIPIT_GPT2_H

#include "pipit.h"

typedef struct {
    int vocab;      /* V */
    int max_ctx;    /* rows of wpe */
    int ctx;        /* T of a training sequence */
    int layers;     /* L */
    int heads;      /* H */
    int dim;        /* C */
    int batch;      /* B: sequences per microbatch */
    int stages;     /* S: pipeline stages (1 = no yield) */
    pipit_dtype dtype;
} pipit_gpt2_config;

/* Graph inputs the builder declares; feed them per microbatch. */
#define PIPIT_GPT2_TOKENS "tokens"       /* i32 [B,T] */
#define PIPIT_GPT2_TARGETS "targets"     /* i32 [B,T] */
#define PIPIT_GPT2_POSITIONS "positions" /* i32 [B,T]: 0..T-1 per row */

/* Checks the config (positive sizes, C % H == 0, T <= max_ctx, 1 <= S <= L). */
pipit_status pipit_gpt2_check(const pipit_gpt2_config *c);
/* Builds the graph; returns the scalar mean loss (check pipit_graph_status). */
pipit_val pipit_gpt2_build(pipit_graph *g, const pipit_gpt2_config *c);
/* First layer of stage s (stage s holds layers [first(s), first(s+1))). */
int pipit_gpt2_stage_first_layer(const pipit_gpt2_config *c, int s);
/* GPT-2 init: N(0, 0.02), c_proj weights N(0, 0.02/sqrt(2L)), biases 0, LN
 * weights 1. Each tensor's stream is seeded by (seed, name), so the init is
 * the same whatever the pipeline layout. */
pipit_status pipit_gpt2_init(pipit_program *p, const pipit_gpt2_config *c, uint64_t seed);
/* Parameter count and training FLOPs per token (6N + attention). */
int64_t pipit_gpt2_num_params(const pipit_gpt2_config *c);
double pipit_gpt2_flops_per_token(const pipit_gpt2_config *c);

#endif
