/*
 * pipit_decode.h — generating tokens: incremental decoding with a KV cache
 * over the decoding graphs of the model builders (pipit_gpt2_build_decode,
 * pipit_llama_build_decode), and the sampler that picks the next token from
 * a row of logits. Same conventions as pipit.h.
 *
 * A model's training graph (pipit_gpt2_build_logits) gives the logits of T
 * positions at once: generating with it runs the whole window again for
 * every new token. Its decoding graph computes ONE new position per
 * sequence: it reads the keys and values of the positions before it from a
 * cache fed as an input and gives, beside the logits, the new position's
 * key and value of every layer, which the caller appends to the cache. Its
 * ops on that position are the training graph's own (the same params, the
 * same RoPE angles at the position's index), and its attention scores the
 * cached keys with the new one put in its slot, masking the slots after it,
 * so its logits are the training graph's at that row up to rounding
 * (tests/test_decode.c: 1e-5 in f32, and the same greedy tokens).
 *
 *   pipit_decode_graph dg;
 *   pipit_gpt2_build_decode(g, &cfg, &dg);          // cfg.ctx: the cache's slots S
 *   pipit_val outs[2] = {dg.logits, dg.kv};
 *   pipit_compile(g, dg.loss, &(pipit_options){.forward_only = 1, .outputs = outs, .noutputs = 2}, &p);
 *   ... load the weights (pipit_checkpoint_load_into) ...
 *   pipit_decoder_new(p, &dg, &d);
 *   for each token t: pipit_decoder_step(d, &t, logits, sizeof logits);   // positions 0, 1, ...
 *
 * The decoder holds the cache and the mask inputs and runs pipit_step; its
 * sequences (B = cfg.batch) advance together, one position per step, up to
 * the S slots (then pipit_decoder_reset, or a model of a longer ctx).
 */
#ifndef PIPIT_DECODE_H
#define PIPIT_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "pipit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a decoding graph gives its caller. */
typedef struct {
    pipit_val loss;   /* the scalar to compile it with (the mean of the logits: it has no targets) */
    pipit_val logits; /* [B,1,V]: the next-token logits of each sequence (an output to request) */
    pipit_val kv;     /* [2L,B,1,KVD]: the new position's key (after RoPE, for Llama) and value of
                         layer l at 2l and 2l+1 (an output to request) */
    pipit_val cache;  /* the cache input, PIPIT_DECODE_CACHE: its shape gives the slots S */
} pipit_decode_graph;

/* The inputs a decoding graph declares (the decoder feeds them). With
 * KVD = kv_heads * head_dim and S = the config's ctx: */
#define PIPIT_DECODE_TOKENS "tokens"       /* i32 [B,1]: each sequence's token at the new position */
#define PIPIT_DECODE_POSITIONS "positions" /* i32 [B,1]: that position (GPT-2's learned positions) */
#define PIPIT_DECODE_CACHE "kv_cache"      /* [2L,B,S,KVD]: keys and values of the positions before it */
#define PIPIT_DECODE_SLOT "kv_slot"        /* [B,S,1]: 1 at the new position's slot, else 0 */
#define PIPIT_DECODE_MASK "kv_mask"        /* [B,1,1,S]: 0 up to the new position, -inf after it */

typedef struct pipit_decoder pipit_decoder;

/* A decoder over program p (borrowed: it must outlive the decoder),
 * compiled from the decoding graph dg describes with dg->logits and dg->kv
 * among its options.outputs, one microbatch, no data parallelism. Its cache
 * is empty. INVALID for values of different graphs or shapes that are not
 * a decoding graph's; MISUSE for NULL; NOMEM. */
PIPIT_API pipit_status pipit_decoder_new(pipit_program *p, const pipit_decode_graph *dg, pipit_decoder **out);
PIPIT_API void pipit_decoder_free(pipit_decoder *d);
/* Runs the next position: tokens[b] is sequence b's token there (B of
 * them); logits (nbytes = B x V x the logits' element size: f32, or f64 for
 * an f64 model) gets each sequence's next-token logits; the new keys and
 * values join the cache. INVALID when the cache is full (S positions; the
 * message says so) or for a wrong nbytes; a failing pipit_step's status
 * (a token outside the vocabulary: INVALID). On failure the cache is as it
 * was. */
PIPIT_API pipit_status pipit_decoder_step(pipit_decoder *d, const int32_t *tokens, void *logits, size_t nbytes);
/* Positions in the cache (steps since the last reset), and its slots S;
 * -1 and a message for a NULL decoder. */
PIPIT_API int pipit_decoder_length(const pipit_decoder *d);
PIPIT_API int pipit_decoder_capacity(const pipit_decoder *d);
/* Empties the cache (the next step is position 0). */
PIPIT_API pipit_status pipit_decoder_reset(pipit_decoder *d);

/* How the next token is drawn from a row of logits (every zero field is the
 * default: argmax). In order, as transformers' generate applies them:
 * temperature, then top-k, then top-p. */
typedef struct {
    double temperature; /* >= 0, finite. 0: the argmax (the lowest id among equal maxima), no draw */
    int top_k;          /* >= 0: only the k largest logits (ties: the lower id first); 0: all */
    double top_p;       /* 0 (all), or in (0, 1]: nucleus sampling, only the most likely tokens whose
                           probabilities (after temperature and top-k) add up to at least top_p,
                           at least one */
} pipit_sampling;

/* The next token from logits[0 .. n-1] (f32): with temperature T > 0 the
 * candidates' probabilities are exp((logit - max) / T), normalised over
 * those top-k and top-p keep, and one uniform number u in [0, 1) from
 * splitmix64 (one call advancing *state, a seed) picks the first candidate,
 * largest logit first, whose running sum of probabilities passes u times
 * their total; so a seed reproduces a draw. A logit of -inf is never drawn
 * (a caller masks ids that way). INVALID for a NaN or +inf logit, no
 * finite one, n < 1 or options outside their ranges; MISUSE for NULL. */
PIPIT_API pipit_status pipit_sample_token(const float *logits, int n, const pipit_sampling *s, uint64_t *state,
                                          int32_t *token);

#ifdef __cplusplus
}
#endif
#endif /* PIPIT_DECODE_H */
