/*
 * pipit_cp.h — context parallelism (docs/architecture.md "Context
 * parallelism"): a sequence of S tokens is shared by a context group of C
 * world ranks. The sequence is cut into 2C chunks of L = S/(2C) tokens and
 * context rank c holds chunks c and 2C-1-c (Llama 3's split: every rank
 * gets the same causal attention work). The graph describes ONE rank of a
 * group (SPMD, as tensor parallelism): its per-token inputs are [B, 2L],
 * and attention gathers the keys and values of the whole sequence over the
 * group (queries stay local); the gradient of the gather is a
 * reduce-scatter. The C ranks of a group are C consecutive data-parallel
 * replicas (options.data_parallel = D x C, C dividing it): parameters are
 * replicated and their gradients summed over all D x C replicas like any
 * replica's, and since every rank holds 2L tokens the mean of the
 * replicas' losses is the whole sequence's mean. The caller feeds replica
 * r = d x C + c the chunks of sequence set d (pipit_cp_slice), so the
 * step's M x D x C feed entries hold M x D sequences' chunks.
 *
 * Same conventions as pipit.h (a failed builder poisons the graph).
 */
#ifndef PIPIT_CP_H
#define PIPIT_CP_H

#include <stdint.h>

#include "pipit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The graph's C (default 1), set before the first CP op as the
 * tensor-parallel T. With C > 1 the model builders (pipit_gpt2.h,
 * pipit_llama.h) take their seq_len as the LOCAL 2L and build the CP
 * attention (and Llama's CP RoPE; GPT-2's fed positions must be the
 * global ones, sliced as the tokens). INVALID for C outside
 * 1..64 or a change once the graph holds CP ops; MISUSE for a bad handle.
 * pipit_graph_context_parallel: the graph's C (0 for a bad handle). */
PIPIT_API pipit_status pipit_graph_set_context_parallel(pipit_graph *g, int C);
PIPIT_API int pipit_graph_context_parallel(const pipit_graph *g);

/* x [B, 2L, ...] of this rank -> [B, 2 C L, ...]: every rank's rows, in
 * the sequence's order (all-gather over the context group). Any dtype; its
 * gradient is the reduce-scatter of the incoming gradient. SHAPE when x's
 * axis 1 is odd or x has rank < 2. */
PIPIT_API pipit_val pipit_cp_gather(pipit_graph *g, pipit_val x);
/* Causal attention of this rank's queries q [B, 2L, heads*D] against the
 * whole sequence's keys and values: k and v are this rank's [B, 2L,
 * kv_heads*D], gathered here (pipit_cp_gather). A query at global
 * position t sees keys 0..t (causal = 0: all). Options as
 * pipit_attention_qkv's. -> [B, 2L, heads*D]. */
PIPIT_API pipit_val pipit_attention_cp(pipit_graph *g, pipit_val q, pipit_val k, pipit_val v,
                                       const pipit_attention_opts *o);
/* Packed documents under CP: pipit_attention_cp's attention where no
 * token attends across a document boundary (pipit_attention_docs' mask).
 * doc is this rank's i32 [B, 2L] document ids (its chunks of the
 * sequence's ids, fed as the tokens: pipit_cp_slice); they are gathered
 * over the group with k and v (k and v as one [B, S, 2 kv_heads*D]
 * gather). The ids must be non-decreasing along the whole sequence:
 * pipit_step refuses a rank's decreasing chunk, the step fails (RUNTIME,
 * named) on a decrease between ranks' chunks. One document per sequence
 * gives pipit_attention_cp's bits. -> [B, 2L, heads*D]. */
PIPIT_API pipit_val pipit_attention_cp_docs(pipit_graph *g, pipit_val q, pipit_val k, pipit_val v, pipit_val doc,
                                            const pipit_attention_opts *o);
/* pipit_rope_scaled of this rank's rows x [B, 2L, heads*D] at their global
 * positions (no offset; scaling NULL: none). */
PIPIT_API pipit_val pipit_rope_cp(pipit_graph *g, pipit_val x, int heads, double theta,
                                  const pipit_rope_scaling *scaling);

/* Feeding: dst [B, 2L, row_bytes] = context rank c's rows of src [B, S,
 * row_bytes] (S = 2 C L): chunk c then chunk 2C-1-c of each sequence.
 * INVALID for NULL pointers, B < 1, row_bytes < 1, C outside 1..64, c
 * outside 0..C-1, or S not a positive multiple of 2C (named). */
PIPIT_API pipit_status pipit_cp_slice(void *dst, const void *src, int64_t B, int64_t S, int64_t row_bytes, int C,
                                      int c);

#ifdef __cplusplus
}
#endif

#endif
