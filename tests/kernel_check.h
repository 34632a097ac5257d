/*
 * kernel_check.h — what the kernel tests share (test_kernels.c,
 * test_kernels_ops.c): typed buffers with exact double copies for naive
 * references, a relative error, and the bitwise thread-count check that
 * runs a kernel's slices for nth = 1 and 2, 3, 4, 7.
 */
#ifndef PIPIT_KERNEL_CHECK_H
#define PIPIT_KERNEL_CHECK_H

#include "backend/cpu/kernels.h"
#include "test.h"

/* Buffers are untyped; dt 0 = f32, 1 = f64. */
size_t esz(int dt);
double get(const void *p, int dt, int64_t i);
void set(void *p, int dt, int64_t i, double v);
/* Deterministic uniform in [-1, 1). */
double urand(void);
/* A buffer of n values in [-amp, amp); the double copy is exactly what the
 * typed buffer holds, so references see the same inputs. */
void *rbuf(int dt, int64_t n, double amp, double **ref);
/* Garbage-filled output buffer (NaN bytes), so unwritten slots show. */
void *obuf(int dt, int64_t n);
/* The default tolerance of maxerr: 1e-10 (f64), 2e-4 (f32). */
double tol_of(int dt);
/* max |out - ref| / (1 + |ref|) over n (NaN wins). */
double maxerr(const void *out, int dt, const double *ref, int64_t n);

/* A kernel call with its arguments; run(a, ith, nth) calls one slice. */
typedef struct kargs {
    int dt;
    void *out;
    const void *in[4];
    const int32_t *idx;
    int64_t d[8];
    double x;
    const int *perm;
    void (*run)(const struct kargs *a, int ith, int nth);
    int64_t nout; /* elements of out */
    const void *aux; /* anything else a run function needs */
} kargs;

#define CALL(dt, name, ...) \
    ((dt) ? pipit__##name##_f64(__VA_ARGS__) : pipit__##name##_f32(__VA_ARGS__))

/* Runs the nth slices of a one after another. */
void run_seq(const kargs *a, int nth);
/* Runs with nth = 1 into a->out, then nth = 2,3,4,7 into fresh buffers
 * (pre-filled with the same bytes): every result must match bitwise. */
int deterministic(kargs *a);

#endif
