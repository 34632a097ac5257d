/*
 * decode.h — the pieces of a decoding graph (pipit_decode.h) that the model
 * builders share (decode.c): the cache, slot and mask inputs, putting the
 * new position's rows in their slot, the attention of that position over
 * the cache, and the graph's outputs. Internal to src/models.
 *
 * The new position p of every sequence is one row [B,1,W]. "Placing" it
 * multiplies it by the one-hot slot input [B,S,1]: [B,S,W], the row at slot
 * p and zeros elsewhere, so an op on the placed tensor sees the row at
 * index p (RoPE rotates it by p's angles), and a sum over the slots takes
 * the row back out exactly (the other terms are zeros).
 */
#ifndef PIPIT_MODELS_DECODE_H
#define PIPIT_MODELS_DECODE_H

#include <stdint.h>

#include "pipit.h"
#include "pipit_decode.h"

typedef struct {
    pipit_graph *g;
    int layers;
    int64_t B, S, kvd;
    pipit_val cache, slot, mask; /* the inputs PIPIT_DECODE_CACHE, _SLOT, _MASK */
    pipit_val *rows;             /* [2L]: layer l's new key row at 2l, value row at 2l+1 */
    pipit_val cos, sin;          /* RoPE at the new position, [B,1,1,D] (pipit__decode_set_rope) */
} pipit__decode;

/* Checks what a decoding graph needs of the graph (one rank per stage, one
 * stage) and declares the cache, slot and mask inputs (dtype dt) for
 * `layers` layers, B sequences, S slots and key/value width kvd. INVALID
 * (naming fn) or NOMEM; on failure nothing is left to free. */
pipit_status pipit__decode_begin(pipit_graph *g, pipit__decode *d, int layers, int stages, int64_t B, int64_t S,
                                 int64_t kvd, pipit_dtype dt, const char *fn);
/* x [B,1,W] in the new position's slot: [B,S,W]. */
pipit_val pipit__decode_place(const pipit__decode *d, pipit_val x);
/* The row in the new position's slot of a placed [B,S,W]: [B,1,W]. */
pipit_val pipit__decode_row(const pipit__decode *d, pipit_val placed);
/* RoPE at the new position without running RoPE over all S slots for
 * every layer: the model's RoPE (heads 1) of the placed basis row
 * [B,1,D] = (1 .. 1 | 0 .. 0) gives in the new position's slot exactly
 * (cos | sin) of its angles (x1 cos - x2 sin = cos, x2 cos + x1 sin = sin
 * for x1 = 1, x2 = 0); pipit__decode_set_rope takes that row [B,1,D] and
 * pipit__decode_rotate applies it to x [B,1,heads*D] as the kernel does,
 * x cos + rotate_half(x) sin, the same products and sums: the same bits. */
pipit_val pipit__decode_rope_basis(const pipit__decode *d, int64_t D);
void pipit__decode_set_rope(pipit__decode *d, pipit_val cos_sin);
pipit_val pipit__decode_rotate(const pipit__decode *d, pipit_val x, int heads);
/* Layer l's attention of the new position: q [B,1,heads*D] its query (after
 * RoPE), k_row / v_row [B,1,KVD] its key and value and k_placed / v_placed
 * the same placed ([B,S,KVD]); query head h reads key/value head
 * h / (heads / kv_heads). Keys are the cache's with the new one in its
 * slot, slots after it masked. -> [B,1,heads*D]. */
pipit_val pipit__decode_attend(pipit__decode *d, int l, pipit_val q, pipit_val k_row, pipit_val k_placed,
                               pipit_val v_row, pipit_val v_placed, int heads, int kv_heads);
/* The outputs from the logits [B,1,V] and the rows; frees d's rows. On a
 * poisoned graph: the graph's status (fn prefixed), *out all invalid. */
pipit_status pipit__decode_end(pipit__decode *d, pipit_val logits, pipit_decode_graph *out, const char *fn);
/* Frees d's rows (after a failure before pipit__decode_end). */
void pipit__decode_free(pipit__decode *d);

#endif
