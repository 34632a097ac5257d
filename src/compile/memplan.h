/*
 * memplan.h — static memory planning: every buffer of a rank's program gets
 * an offset in one arena before anything runs, so peak bytes are known (and
 * printed by `pipit plan`) up front. Buffers whose lifetimes do not overlap
 * share memory.
 */
#ifndef PIPIT_MEMPLAN_H
#define PIPIT_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

typedef struct pipit__mp_buf_s {
    size_t size;      /* bytes */
    int32_t first;    /* instruction that writes it */
    int32_t last;     /* last instruction that reads it (>= first) */
    size_t offset;    /* out: offset in the arena (64-byte aligned) */
    int32_t hold;     /* a zero-copy send still reads it through this instruction (its fence is
                         before the next): its bytes stay its own; -1 none. Not an activation: the
                         live-bytes statistics count first..last only */
} pipit__mp_buf;

/* The last instruction through which b's bytes must stay its own. */
static inline int32_t pipit__mp_end(const pipit__mp_buf *b) { return b->hold > b->last ? b->hold : b->last; }

/* Assigns offsets (greedy first-fit in order of first use) and returns the
 * arena size, i.e. the planned peak. Returns (size_t)-1 on out of memory. */
size_t pipit__memplan(pipit__mp_buf *bufs, int32_t n);
/* pipit__memplan's result when an arena would exceed PIPIT__MAX_BYTES
 * (util/checked.h); (size_t)-1 means out of memory. */
#define PIPIT__MEMPLAN_TOO_LARGE ((size_t)-2)
/* Sum of all sizes: what a plan without reuse would need. */
size_t pipit__memplan_naive(const pipit__mp_buf *bufs, int32_t n);

#endif
