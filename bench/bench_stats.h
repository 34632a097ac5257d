/*
 * bench_stats.h — what the step and transport benchmarks share to sum up
 * repetitions (bench_pipeline.c, bench_partition.c, bench_transport.c):
 * the median, which one lucky or unlucky repetition on a shared machine
 * does not move. Header-only: each benchmark is one program.
 */
#ifndef PIPIT_BENCH_STATS_H
#define PIPIT_BENCH_STATS_H

#include <stdlib.h>

static inline int bench_cmp_double_(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorted in place); 0 for n <= 0. */
static inline double bench_median(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double_);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
