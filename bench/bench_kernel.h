/*
 * bench_kernel.h — what the kernel benchmarks share (bench_gemm.c,
 * bench_ops.c): a persistent second thread, so a 2-thread run of a kernel
 * (the caller is ith 0, the helper ith 1, barriers around, as the
 * runtime's pool) times no thread start-up; and reproducible random data.
 * Header-only: each benchmark is one program.
 */
#ifndef PIPIT_BENCH_KERNEL_H
#define PIPIT_BENCH_KERNEL_H

#include <pthread.h>
#include <stdint.h>

#include "util/common.h"

typedef void (*bench_slice_fn)(const void *job, int ith, int nth);

static pthread_barrier_t bench_start_, bench_end_;
static bench_slice_fn bench_fn_;
static const void *bench_job_;
static int bench_quit_;
static pthread_t bench_thread_;

static inline void *bench_worker_(void *arg) {
    (void)arg;
    for (;;) {
        pthread_barrier_wait(&bench_start_);
        if (bench_quit_) return NULL;
        bench_fn_(bench_job_, 1, 2);
        pthread_barrier_wait(&bench_end_);
    }
}

static inline void bench_pool_start(void) {
    pthread_barrier_init(&bench_start_, NULL, 2);
    pthread_barrier_init(&bench_end_, NULL, 2);
    pthread_create(&bench_thread_, NULL, bench_worker_, NULL);
}

/* Runs fn(job, ith, nth) on nth = 1 or 2 threads, returning when all are done. */
static inline void bench_pool_run(bench_slice_fn fn, const void *job, int nth) {
    if (nth == 1) {
        fn(job, 0, 1);
        return;
    }
    bench_fn_ = fn, bench_job_ = job;
    pthread_barrier_wait(&bench_start_);
    fn(job, 0, 2);
    pthread_barrier_wait(&bench_end_);
}

static inline void bench_pool_stop(void) {
    bench_quit_ = 1;
    pthread_barrier_wait(&bench_start_);
    pthread_join(bench_thread_, NULL);
}

/* n floats in [-0.5, 0.5), 64-byte aligned, the same every run. */
static inline float *bench_rnd(int64_t n) {
    float *p = pipit__malloc_aligned((size_t)(n > 0 ? n : 1) * sizeof(float));
    uint64_t st = 12345;
    for (int64_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        p[i] = (float)((double)(st >> 11) / 9007199254740992.0 - 0.5);
    }
    return p;
}

#endif
