/*
 * common.c — thread-local error messages, the replaceable allocator with
 * failure injection (for OOM-sweep tests), and small formatting helpers.
 */
#include "util/common.h"
#include "util/aligned.h"

#include <stdatomic.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_error[2048];
static _Thread_local unsigned long error_gen;

unsigned long pipit__err_gen(void) { return error_gen; }

/* 1 if `msg` holds `fn` as a whole word ("pipit_checkpoint_load" is not
 * named by "pipit_checkpoint_load_into: ..."). */
static int names_word(const char *msg, const char *fn) {
    size_t n = strlen(fn);
    for (const char *at = strstr(msg, fn); at; at = strstr(at + 1, fn)) {
        char before = at == msg ? ' ' : at[-1], after = at[n];
        int word = (after == '_' || (after >= 'a' && after <= 'z') || (after >= '0' && after <= '9')) ||
                   (before == '_' || (before >= 'a' && before <= 'z') || (before >= '0' && before <= '9'));
        if (!word) return 1;
    }
    return 0;
}

pipit_status pipit__err_fresh(pipit_status s, unsigned long gen0, const char *fn) {
    if (s == PIPIT_STATUS_OK) return s;
    if (error_gen == gen0) pipit__err(s, "%s: failed (%s)", fn, pipit_status_name(s));
    else if (!names_word(last_error, fn)) pipit__err_prefix("%s", fn); /* the message names the call */
    return s;
}

const char *pipit_status_name(pipit_status s) {
    static const char *names[] = {
#define PIPIT_X_(name, text) text,
        PIPIT_STATUS_MAP(PIPIT_X_)
#undef PIPIT_X_
    };
    if ((unsigned)s < PIPIT_STATUS_COUNT) return names[s];
    pipit__err(PIPIT_STATUS_INVALID, "pipit_status_name: %d is not a pipit_status", (int)s);
    return "unknown status";
}

const char *pipit_errmsg(void) { return last_error; }

void pipit__set_errmsg(const char *msg) {
    error_gen++;
    snprintf(last_error, sizeof last_error, "%s", msg ? msg : "");
}

pipit_status pipit__verr(pipit_status s, const char *fmt, va_list ap) {
    error_gen++;
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    return s;
}

pipit_status pipit__err(pipit_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pipit__verr(s, fmt, ap);
    va_end(ap);
    return s;
}

void pipit__err_prefix(const char *fmt, ...) {
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t n = strlen(prefix);
    if (n + 2 >= sizeof last_error) n = sizeof last_error - 3;
    memcpy(last_error, prefix, n);
    memcpy(last_error + n, ": ", 2);
    size_t rest = sizeof last_error - n - 3;
    size_t m = strlen(old);
    if (m > rest) m = rest;
    memcpy(last_error + n + 2, old, m);
    last_error[n + 2 + m] = 0;
}

/* ---- allocator with failure injection ---- */

/* Atomic: rank threads allocate concurrently during a pipelined step. */
static _Atomic long alloc_countdown = -1; /* <= 0: never fail */

void pipit__alloc_fail_after(long k) { alloc_countdown = k; }

int pipit__alloc_should_fail(void) {
    long c = alloc_countdown;
    while (c > 0) {
        if (atomic_compare_exchange_weak(&alloc_countdown, &c, c == 1 ? -1 : c - 1))
            return c == 1; /* fail once, then behave */
    }
    return 0;
}

void *pipit__malloc(size_t n) {
    if (pipit__alloc_should_fail()) return NULL;
    return malloc(n ? n : 1);
}

void *pipit__calloc(size_t count, size_t size) {
    if (pipit__alloc_should_fail()) return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *pipit__realloc(void *p, size_t n) {
    if (pipit__alloc_should_fail()) return NULL;
    return realloc(p, n ? n : 1);
}

void pipit__free(void *p) { free(p); }

/* pipit__malloc_aligned, pipit__free_aligned: util/aligned.c */

char *pipit__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = pipit__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

const char *pipit__dtype_name(pipit_dtype dt) {
    switch (dt) {
    case PIPIT_F32: return "f32";
    case PIPIT_F64: return "f64";
    case PIPIT_I32: return "i32";
    case PIPIT_BF16: return "bf16";
    }
    return "?";
}

char *pipit__shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? "," : "",
                                 (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

double pipit__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
