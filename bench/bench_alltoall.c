/*
 * bench_alltoall.c — expert parallelism's all-to-all (pipit__transport_alltoall,
 * what src/runtime/ep.c runs for pipit_ep_dispatch / pipit_ep_combine) on the
 * MPI transport against raw MPI_Alltoall of the same bytes, under
 * `mpirun -np N` (white-box, as bench_transport: it calls the transport).
 *
 * Every process holds `total` bytes cut into N blocks; block k goes to
 * process k (both: MPI_Alltoall of total / N MPI_BYTEs per peer on a
 * duplicate of MPI_COMM_WORLD; pipit's isend of each block, recv into the
 * output block, then the fences, as the EP ops call it). One figure = the
 * time of `iters` back-to-back calls after a barrier, the slowest process's
 * (MPI_MAX), per call; the median of REPS repetitions, raw and pipit
 * alternating, so a noisy machine slows both alike. Bandwidth = total bytes
 * per process / time per call (the same definition for both, so the ratio
 * is the ratio of times). Sizes: 64 KiB, 1 MiB, 2.5 MiB (moe-100m's
 * dispatch grid [E=8, cap=160, C=512] f32 at ctx 256, micro-batch 2), 16
 * MiB. Both run under MPI_THREAD_MULTIPLE (what pipit_init asks for). The
 * last line, "summary 64K R 1M R 2.5M R 16M R", gives pipit / raw bandwidth.
 * BENCH_VERBOSE=1 prints each repetition.
 *
 * Usage: mpirun -np N [--mca btl self,vader|self,tcp ...] bench_alltoall [reps]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "runtime/transport.h"
#include "bench_stats.h"

typedef struct {
    size_t total; /* bytes per process, all blocks */
    int iters;
    const char *what, *tag; /* tag: its name on the summary line */
} size_case;

static const size_case cases[] = {
    {64u << 10, 400, "64 KiB", "64K"},
    {1u << 20, 60, "1 MiB", "1M"},
    {2621440, 24, "2.5 MiB", "2.5M"},
    {16u << 20, 6, "16 MiB", "16M"},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

static void fail(int me, const char *what) {
    fprintf(stderr, "bench_alltoall: process %d: %s: %s\n", me, what, pipit_errmsg());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static double slowest(MPI_Comm c, double t0, int iters) {
    double dt = (MPI_Wtime() - t0) / iters, mx = 0;
    MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, c);
    return mx;
}

static double raw_alltoall(MPI_Comm c, const void *in, void *out, size_t block, int iters) {
    MPI_Barrier(c);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) MPI_Alltoall(in, (int)block, MPI_BYTE, out, (int)block, MPI_BYTE, c);
    return slowest(c, t0, iters);
}

static double pipit_alltoall(pipit__transport *t, MPI_Comm c, int me, const int *group, int n, const void *in,
                             void *out, size_t block, int iters) {
    MPI_Barrier(c);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        if (pipit__transport_alltoall(t, me, group, n, 0, PIPIT_F32, in, out, (int64_t)(block / 4))) fail(me, "all-to-all");
    return slowest(c, t0, iters);
}

int main(int argc, char **argv) {
    if (pipit_init(&argc, &argv) != PIPIT_STATUS_OK) {
        fprintf(stderr, "bench_alltoall: %s\n", pipit_errmsg());
        return 1;
    }
    int n = pipit_process_count(), me = pipit_process_rank();
    if (n < 2 || n > 64) {
        fprintf(stderr, "bench_alltoall: run it as mpirun -np N bench_alltoall, N in 2..64 (got %d processes)\n", n);
        pipit_finalize();
        return 2;
    }
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1) reps = 1;
    if (reps > 64) reps = 64;
    const char *verbose = getenv("BENCH_VERBOSE");
    int *group = malloc((size_t)n * sizeof *group);
    uint64_t *tags = malloc((size_t)n * sizeof *tags);
    if (!group || !tags) return 1;
    for (int k = 0; k < n; k++) { /* the all-to-all's tags: (COLL, id 0, 2n + k), ascending */
        group[k] = k;
        tags[k] = pipit__tag(PIPIT_TAG_COLL, 0, 2 * n + k);
    }
    pipit__transport *t = pipit__transport_mpi_new(n, tags, (size_t)n);
    if (!t) fail(me, "transport");
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    if (me == 0)
        printf("all-to-all over %d processes %14s %14s %8s\n%-26s %14s %14s %8s\n", n, "raw MPI", "pipit", "ratio",
               "bytes per process", "MPI_Alltoall", "transport", "p / raw");
    char summary[256];
    size_t sk = (size_t)snprintf(summary, sizeof summary, "summary");
    for (int k = 0; k < NCASES; k++) {
        size_t block = cases[k].total / (size_t)n / 4 * 4, total = block * (size_t)n;
        char *in = malloc(total), *out = malloc(total);
        if (!in || !out) fail(me, "out of memory");
        for (size_t i = 0; i < total; i++) in[i] = (char)(i * 31 + (size_t)me);
        int it = cases[k].iters;
        raw_alltoall(c, in, out, block, it / 4 + 1); /* warm both paths */
        pipit_alltoall(t, c, me, group, n, in, out, block, it / 4 + 1);
        for (int j = 0; j < n; j++) /* the blocks landed: block j came from process j, its block `me` */
            for (size_t i = 0; i < block; i += 4093)
                if (out[(size_t)j * block + i] != (char)(((size_t)me * block + i) * 31 + (size_t)j)) fail(me, "wrong bytes");
        double raws[64], pips[64];
        for (int r = 0; r < reps; r++) {
            if (r % 2 == 0) {
                raws[r] = raw_alltoall(c, in, out, block, it);
                pips[r] = pipit_alltoall(t, c, me, group, n, in, out, block, it);
            } else {
                pips[r] = pipit_alltoall(t, c, me, group, n, in, out, block, it);
                raws[r] = raw_alltoall(c, in, out, block, it);
            }
            if (verbose && me == 0)
                fprintf(stderr, "%zu B: raw %.1f us, pipit %.1f us\n", total, raws[r] * 1e6, pips[r] * 1e6);
        }
        double raw = bench_median(raws, reps), pip = bench_median(pips, reps);
        if (me == 0) {
            printf("%-26s %9.0f MB/s %9.0f MB/s %8.3f  (%.1f / %.1f us per call)\n", cases[k].what, total / raw / 1e6,
                   total / pip / 1e6, raw / pip, raw * 1e6, pip * 1e6);
            sk += (size_t)snprintf(summary + sk, sizeof summary - sk, " %s %.3f", cases[k].tag, raw / pip);
        }
        free(in);
        free(out);
    }
    if (me == 0) printf("%s\n", summary);
    fflush(stdout);
    MPI_Comm_free(&c);
    t->vt->free(t);
    free(group);
    free(tags);
    pipit_finalize();
    return 0;
}
