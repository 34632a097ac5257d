/*
 * common.h — internal helpers shared by every module: error reporting,
 * the replaceable allocator, small math and assertion macros.
 * Nothing here is public; pipit.h is the only installed header.
 */
#ifndef PIPIT_COMMON_H
#define PIPIT_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pipit.h"

#ifdef __cplusplus
extern "C" { /* the CUDA backend (.cu files) includes this header from C++ */
#endif

/* Records a formatted message as this thread's last error and returns `s`,
 * so call sites read `return pipit__err(PIPIT_STATUS_SHAPE, "...", ...);`. */
pipit_status pipit__err(pipit_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, from a va_list. */
pipit_status pipit__verr(pipit_status s, const char *fmt, va_list ap);
/* Prefixes the current thread's last error with "<prefix>: ". */
void pipit__err_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Sets the thread-local message verbatim. */
void pipit__set_errmsg(const char *msg);
/* How many times this thread's message was set: a public entry point
 * notes it on entry and, when it fails, calls pipit__err_fresh: with the
 * count unchanged (a status propagated from a helper that set no message)
 * it sets one, so a failing call never leaves the previous failure's text;
 * otherwise it prefixes "<fn>: " unless the message names fn already, so
 * every failing public call's message names the call (pipit.h). */
unsigned long pipit__err_gen(void);
pipit_status pipit__err_fresh(pipit_status s, unsigned long gen0, const char *fn);

/* All allocations go through these, so tests can inject failures
 * (pipit__alloc_fail_after(k): the k-th next allocation fails). */
void *pipit__malloc(size_t n);
void *pipit__calloc(size_t count, size_t size);
void *pipit__realloc(void *p, size_t n);
void pipit__free(void *p);
/* 64-byte aligned allocation (BLAS and SIMD friendly); free with pipit__free_aligned. */
void *pipit__malloc_aligned(size_t n);
void pipit__free_aligned(void *p);
char *pipit__strdup(const char *s);
void pipit__alloc_fail_after(long k); /* k < 0 disables injection */

/* Internal invariant (never user input): stays on in release builds. */
#define PIPIT_ASSERT(c)                                                           \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "pipit: internal error: %s at %s:%d\n", #c, __FILE__, \
                    __LINE__);                                                    \
            abort();                                                              \
        }                                                                         \
    } while (0)

#define PIPIT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PIPIT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* The slice [*lo, *hi) of n items owned by thread ith of nth: a static
 * split, so which thread computes what never depends on timing. */
static inline void pipit__range(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = (n + nth - 1) / nth;
    *lo = PIPIT_MIN((int64_t)ith * per, n);
    *hi = PIPIT_MIN(*lo + per, n);
}

/* Bytes of one element of a dtype. */
static inline size_t pipit__dtype_size(pipit_dtype dt) { return dt == PIPIT_F64 ? 8 : dt == PIPIT_BF16 ? 2 : 4; }
const char *pipit__dtype_name(pipit_dtype dt);

/* Formats a shape as "[2,3,4]" into buf (returns buf). */
char *pipit__shape_str(char *buf, size_t n, int ndim, const int64_t *shape);

/* Monotonic clock in seconds. */
double pipit__now(void);

#ifdef __cplusplus
}
#endif

#endif
