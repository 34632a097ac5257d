/*
 * checked.h — checked integer arithmetic for every size pipit forms
 * (element counts, byte counts, task and slot counts), and the limits those
 * sizes must stay under. Each helper returns 1 and stores the result, or
 * returns 0 on overflow (leaving *out unspecified); callers turn 0 into a
 * SHAPE / INVALID error that names the value and the limit.
 * docs/ops.md "Limits" and docs/schedules.md list the limits.
 */
#ifndef PIPIT_CHECKED_H
#define PIPIT_CHECKED_H

#include <stddef.h>
#include <stdint.h>

#include "pipit.h"

/* Largest element count of one tensor (2^48) and byte count of one tensor
 * or memory block (2^56): far above any memory, far below int64 overflow,
 * so sums of a few thousand of them cannot wrap. */
#define PIPIT__MAX_NUMEL PIPIT_MAX_ELEMENTS
#define PIPIT__MAX_BYTES ((int64_t)1 << 56)
/* Other limits (microbatches and stages: schedule/schedule.h). */
#define PIPIT__MAX_THREADS PIPIT_MAX_THREADS

static inline int pipit__mul_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int pipit__add_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline int pipit__mul_size(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int pipit__add_size(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
/* a * b for counts that must stay <= limit (and >= 0). */
static inline int pipit__mul_le(int64_t a, int64_t b, int64_t limit, int64_t *out) {
    int64_t r;
    if (a < 0 || b < 0 || !pipit__mul_i64(a, b, &r) || r > limit) return 0;
    *out = r;
    return 1;
}
/* size_t a + b rounded up to a multiple of 64 (block layouts). */
static inline int pipit__add_align64(size_t a, size_t b, size_t *out) {
    size_t r;
    if (!pipit__add_size(b, 63, &r)) return 0;
    r = r / 64 * 64;
    return pipit__add_size(a, r, out);
}

/* Element count of a shape: 1 and *out set when every dimension is >= 0
 * and the product is <= PIPIT__MAX_NUMEL; 0 otherwise. */
static inline int pipit__shape_numel(int ndim, const int64_t *shape, int64_t *out) {
    int64_t k = 1;
    for (int i = 0; i < ndim; i++)
        if (!pipit__mul_le(k, shape[i], PIPIT__MAX_NUMEL, &k)) return 0;
    *out = k;
    return 1;
}

#endif
