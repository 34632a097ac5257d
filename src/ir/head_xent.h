/*
 * head_xent.h — the chunking of the fused LM head + cross-entropy
 * (ops.def HEAD_XENT, HEAD_XENT_BWD, HEAD_XENT_DH), shared by the op
 * table and every backend's kernels. Every size here depends on the
 * problem's shape only (rows N, classes V), never on a thread count, so
 * each backend forms the same sums in the same order whatever team runs
 * it:
 *   - the vocabulary is cut into chunks of pipit__hx_chunk(N) classes
 *     (the last one shorter), so a chunk's logits [N, chunk] stay within
 *     2^20 values (4 MiB of fp32) whatever N;
 *   - the chunks are dealt, in contiguous runs, to pipit__hx_groups(N, V)
 *     groups: the backward's unit of work. A group forms the weight
 *     gradient of its classes and its own partial input gradient [N, d]
 *     (summed over its chunks in order); HEAD_XENT_DH adds the groups'
 *     partials in group order;
 *   - the forward cuts rows into blocks of pipit__hx_rows(N): a block
 *     walks every chunk in order (an online log-sum-exp), so no sum
 *     crosses blocks.
 */
#ifndef PIPIT_HEAD_XENT_H
#define PIPIT_HEAD_XENT_H

#include <stdint.h>

#define PIPIT_HX_MAX_CHUNK 2048 /* classes per chunk at most */
#define PIPIT_HX_MIN_CHUNK 64
#define PIPIT_HX_CHUNK_VALUES ((int64_t)1 << 20)
#define PIPIT_HX_MAX_GROUPS 16 /* backward work units: partial input gradients kept at once */
#define PIPIT_HX_MAX_ROWS 256  /* forward row block at most */

static inline int64_t pipit__hx_chunk(int64_t rows) {
    int64_t c = PIPIT_HX_CHUNK_VALUES / (rows > 0 ? rows : 1) / 64 * 64;
    return c < PIPIT_HX_MIN_CHUNK ? PIPIT_HX_MIN_CHUNK : c > PIPIT_HX_MAX_CHUNK ? PIPIT_HX_MAX_CHUNK : c;
}
static inline int64_t pipit__hx_nchunks(int64_t rows, int64_t V) {
    int64_t c = pipit__hx_chunk(rows);
    return (V + c - 1) / c;
}
static inline int64_t pipit__hx_groups(int64_t rows, int64_t V) {
    int64_t n = pipit__hx_nchunks(rows, V);
    return n < 1 ? 1 : n > PIPIT_HX_MAX_GROUPS ? PIPIT_HX_MAX_GROUPS : n;
}
/* Group g of G holds chunks [*c0, *c1) of n. */
static inline void pipit__hx_group_chunks(int64_t n, int64_t G, int64_t g, int64_t *c0, int64_t *c1) {
    *c0 = n * g / G;
    *c1 = n * (g + 1) / G;
}
/* Rows per forward block: about a quarter of N (so two to four threads
 * share a small batch), in multiples of 16, within [16, 256]. */
static inline int64_t pipit__hx_rows(int64_t rows) {
    int64_t r = ((rows + 3) / 4 + 15) / 16 * 16;
    return r < 16 ? 16 : r > PIPIT_HX_MAX_ROWS ? PIPIT_HX_MAX_ROWS : r;
}

#endif
