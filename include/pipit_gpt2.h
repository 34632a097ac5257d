/*
 * pipit_gpt2.h — GPT-2 exactly as Hugging Face defines it (pre-LN blocks,
 * tanh GELU, learned positions, lm head tied to wte), built as a pipit graph
 * for one microbatch, with yields splitting the blocks into S pipeline
 * stages. Same conventions as pipit.h.
 */
#ifndef PIPIT_GPT2_H
#define PIPIT_GPT2_H

#include <stdint.h>

#include "pipit.h"
#include "pipit_decode.h"
#include "pipit_io.h"

#ifdef __cplusplus
extern "C" {
#endif

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
    /* The lm head and its loss. 0 (the default): logits = h wte^T
     * (pipit_matmul_nt) then pipit_xent_mean (T > 1: pipit_tp_xent_mean),
     * the [B*T, V] logits and their gradient stored. 1: the fused head +
     * cross-entropy (pipit_head_xent_mean, T > 1: pipit_tp_head_xent_mean):
     * the logits are never stored whole, so it saves activation memory,
     * but its backward recomputes them (4 head-GEMM units instead of 3),
     * so it costs time. On an AVX2 EPYC (GPT-2 124M, T 64, B 4, 1
     * thread, quiet): f32 planned peak activations 243.7 -> 148.5 MiB,
     * step 2694 -> 3420 ms (+27%; llama-100m +18%); bf16 the arena
     * 367.7 -> 404.3 MiB (worse: the bf16 dW cannot be written into the
     * fp32 gradient). The same parameters either way
     * (a checkpoint trains or evaluates with both); losses agree within
     * rounding, not bit for bit. Other values: INVALID. */
    int fused_head;
} pipit_gpt2_config;

/* Graph inputs the builder declares; feed them per microbatch. */
#define PIPIT_GPT2_TOKENS "tokens"       /* i32 [B,T] */
#define PIPIT_GPT2_TARGETS "targets"     /* i32 [B,T] */
#define PIPIT_GPT2_POSITIONS "positions" /* i32 [B,T]: 0..T-1 per row */
/* i32 [B,T] on a graph set to packed documents (pipit_graph_set_documents,
 * before building): each token's document id, non-decreasing along a
 * sequence; no token attends across a document. Positions stay an input:
 * feed them restarting at 0 in every document for a position reset. */
#define PIPIT_GPT2_DOCUMENTS "documents"

/* Checks the config (positive sizes, C % H == 0, T <= max_ctx, 1 <= S <= L,
 * fused_head 0 or 1). */
PIPIT_API pipit_status pipit_gpt2_check(const pipit_gpt2_config *c);
/* Builds the graph; returns the scalar mean loss (check pipit_graph_status).
 * A NULL argument, a bad or poisoned graph or a config pipit_gpt2_check
 * refuses: an invalid value and a message, the graph left as it was.
 * Tensor parallelism: on a graph set to T > 1 ranks per stage
 * (pipit_graph_set_tensor_parallel, before building) the graph describes
 * one of them (pipit.h): attention split by heads (c_attn column-parallel,
 * its q, k and v parts each split: H/T heads per rank; attn.c_proj
 * row-parallel), the MLP column- then row-parallel, wte vocab-parallel in
 * the embedding and the tied head, the loss pipit_tp_xent_mean
 * (fused_head 1: pipit_tp_head_xent_mean);
 * layernorms, wpe and the row-parallel biases replicated. T must divide
 * heads and vocab (INVALID naming them and a T that would). */
PIPIT_API pipit_val pipit_gpt2_build(pipit_graph *g, const pipit_gpt2_config *c);
/* The same loss (bit for bit), and *logits (if not NULL) = the lm head's
 * logits [B,T,V] (the loss's own input with fused_head 0; with
 * fused_head 1: h wte^T as a node of its own beside the loss, computed
 * only where read; with T > 1 ranks per stage:
 * this rank's classes [B,T,V/T]; an invalid value on failure):
 * pass it in pipit_options.outputs to read it with pipit_program_get_output. */
PIPIT_API pipit_val pipit_gpt2_build_logits(pipit_graph *g, const pipit_gpt2_config *c, pipit_val *logits);
/* The decoding graph (pipit_decode.h): the same model on ONE new position
 * per sequence, its attention over a KV cache of S = c->ctx slots, for
 * B = c->batch sequences (c->stages 1, a graph of one rank per stage).
 * Inputs PIPIT_DECODE_TOKENS, _POSITIONS, _CACHE (KVD = dim), _SLOT,
 * _MASK; its params are build's (the same names and shapes, so the same
 * checkpoint loads). *out gets the loss to compile it with and the logits
 * and kv outputs to request. A NULL argument: MISUSE; a refused config, a
 * poisoned graph or stages / tensor parallelism other than 1: INVALID (or
 * the graph's status), *out invalid values. */
PIPIT_API pipit_status pipit_gpt2_build_decode(pipit_graph *g, const pipit_gpt2_config *c, pipit_decode_graph *out);
/* First layer of stage s (stage s holds layers [first(s), first(s+1))),
 * 0 <= s <= S (s = S gives L); -1 and a message otherwise or for NULL. */
PIPIT_API int pipit_gpt2_stage_first_layer(const pipit_gpt2_config *c, int s);
/* GPT-2 init: N(0, 0.02), c_proj weights N(0, 0.02/sqrt(2L)), biases 0, LN
 * weights 1. Each tensor's stream is seeded by (seed, name), so the init is
 * the same whatever the pipeline layout. */
PIPIT_API pipit_status pipit_gpt2_init(pipit_program *p, const pipit_gpt2_config *c, uint64_t seed);
/* Parameter count and training FLOPs per token (6N + attention). */
PIPIT_API int64_t pipit_gpt2_num_params(const pipit_gpt2_config *c);
PIPIT_API double pipit_gpt2_flops_per_token(const pipit_gpt2_config *c);

/* Reads the model sizes a checkpoint implies into cfg: vocab and dim from
 * 'wte.weight' [V,C], max_ctx from 'wpe.weight' [max_ctx,C], layers from
 * the blocks 'h.<i>.ln_1.weight' present, and heads from the metadata
 * "heads" (0 if the file does not record it). Other fields are untouched.
 * FORMAT with a message naming the file if it is not a GPT-2 checkpoint. */
PIPIT_API pipit_status pipit_gpt2_config_from_checkpoint(const pipit_checkpoint *ck, pipit_gpt2_config *cfg);

/* One microbatch's feeds: writes positions_out[B*T] = 0..T-1 per row and
 * out[0..2] = tokens, targets, positions (the buffers are borrowed, each
 * i32 [B,T] with B = c->batch, T = c->ctx). */
PIPIT_API pipit_status pipit_gpt2_feeds(const pipit_gpt2_config *c, const int32_t *tokens,
                                        const int32_t *targets, int32_t *positions_out, pipit_feed out[3]);

#ifdef __cplusplus
}
#endif
#endif /* PIPIT_GPT2_H */
