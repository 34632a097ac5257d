/*
 * bench_transport.c — the MPI transport against raw MPI, under
 * `mpirun -np 2` (white-box: it calls the transport's vtable).
 *
 * Ping-pong between processes 0 and 1, the same way for both: raw
 * MPI_Send/MPI_Recv on a duplicate of MPI_COMM_WORLD, then pipit's
 * zero-copy path as the runtime uses it (isend of the buffer itself, recv =
 * MPI_Irecv into the caller's buffer, polled then blocking, and the fence
 * that hands the send buffer back). Process 0 sends from one buffer and
 * receives into another, process 1 answers from the buffer it received
 * into, in both. Latency = half a round trip at 8 B; bandwidth = bytes /
 * half a round trip at 64 KiB, 1 MiB and 64 MiB. Each figure is the median
 * of REPS repetitions (at most 64), raw and pipit alternating, so a noisy
 * machine slows both alike and one lucky repetition decides nothing
 * (BENCH_VERBOSE=1 prints each). Both run under MPI_THREAD_MULTIPLE (what pipit_init
 * asks for), so the difference is the transport's own cost. The last line,
 * "summary lat8 D 64K R 1M R 64M R", gives pipit - raw latency in µs and
 * the pipit / raw bandwidth ratios (bench/mpi.sh reads it).
 *
 * Usage: mpirun -np 2 [--mca btl self,vader|self,tcp ...] bench_transport [reps]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "runtime/transport.h"
#include "bench_stats.h"

typedef struct {
    size_t bytes;
    int iters;
    const char *what;
} size_case;

static const size_case cases[] = {
    {8, 20000, "latency 8 B"},
    {64u << 10, 2000, "bandwidth 64 KiB"},
    {1u << 20, 300, "bandwidth 1 MiB"},
    {64u << 20, 8, "bandwidth 64 MiB"},
};
enum { NCASES = sizeof cases / sizeof cases[0] };

/* Seconds per one-way message (half a round trip), best of reps. */
static double raw_pingpong(MPI_Comm c, int me, void *buf, void *back, size_t n, int iters, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(c);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            if (me == 0) {
                MPI_Send(buf, (int)n, MPI_BYTE, 1, 0, c);
                MPI_Recv(back, (int)n, MPI_BYTE, 1, 1, c, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, (int)n, MPI_BYTE, 0, 0, c, MPI_STATUS_IGNORE);
                MPI_Send(buf, (int)n, MPI_BYTE, 0, 1, c);
            }
        }
        double dt = (MPI_Wtime() - t0) / (2.0 * iters);
        MPI_Bcast(&dt, 1, MPI_DOUBLE, 0, c); /* rank 0's clock decides */
        if (dt < best) best = dt;
    }
    return best;
}

/* Process 0's fence follows the answer (it cannot wait: the answer came
 * after its message arrived); process 1 fences before it receives into the
 * same buffer again. */
static double pipit_pingpong(pipit__transport *t, MPI_Comm c, int me, void *buf, void *back, size_t n, int iters,
                             int reps, const uint64_t *tags) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(c);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            pipit_status s;
            if (me == 0) {
                s = t->vt->isend(t, 0, 1, tags[0], buf, n);
                if (!s) s = t->vt->recv(t, 0, 1, tags[1], back, n);
                if (!s) s = t->vt->fence(t, 0, 1, tags[0]);
            } else {
                s = t->vt->recv(t, 1, 0, tags[0], buf, n);
                if (!s) s = t->vt->isend(t, 1, 0, tags[1], buf, n);
                if (!s) s = t->vt->fence(t, 1, 0, tags[1]);
            }
            if (s) {
                fprintf(stderr, "process %d: %s\n", me, pipit_errmsg());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        double dt = (MPI_Wtime() - t0) / (2.0 * iters);
        MPI_Bcast(&dt, 1, MPI_DOUBLE, 0, c);
        if (dt < best) best = dt;
    }
    return best;
}

int main(int argc, char **argv) {
    if (pipit_init(&argc, &argv) != PIPIT_STATUS_OK) {
        fprintf(stderr, "bench_transport: %s\n", pipit_errmsg());
        return 1;
    }
    if (pipit_process_count() != 2) {
        fprintf(stderr, "bench_transport: run it as mpirun -np 2 bench_transport (got %d processes)\n",
                pipit_process_count());
        pipit_finalize();
        return 2;
    }
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) reps = 1;
    int me = pipit_process_rank();
    uint64_t tags[2] = {pipit__tag(PIPIT_TAG_VALUE, 0, 0), pipit__tag(PIPIT_TAG_VALUE, 0, 1)};
    pipit__transport *t = pipit__transport_mpi_new(2, tags, 2);
    if (!t) {
        fprintf(stderr, "bench_transport: %s\n", pipit_errmsg());
        return 1;
    }
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    size_t maxn = cases[NCASES - 1].bytes;
    unsigned char *buf = malloc(maxn), *back = malloc(maxn);
    if (!buf || !back) return 1;
    memset(buf, 1, maxn);
    memset(back, 2, maxn);
    double lat = 0, ratio[NCASES] = {0};
    if (me == 0) printf("%-18s %14s %14s %8s\n", "", "raw MPI", "pipit", "ratio");
    for (int k = 0; k < NCASES; k++) {
        size_t n = cases[k].bytes;
        int it = cases[k].iters;
        /* warm both paths (connections, registration, buffer cache) */
        raw_pingpong(c, me, buf, back, n, it / 4 + 1, 1);
        pipit_pingpong(t, c, me, buf, back, n, it / 4 + 1, 1, tags);
        /* alternated, one repetition each, so both see the same machine */
        double raws[64], pips[64];
        int nr = reps < 64 ? reps : 64;
        for (int r = 0; r < nr; r++) {
            raws[r] = raw_pingpong(c, me, buf, back, n, it, 1);
            pips[r] = pipit_pingpong(t, c, me, buf, back, n, it, 1, tags);
            if (getenv("BENCH_VERBOSE") && me == 0)
                fprintf(stderr, "%zu B: raw %.2f us, pipit %.2f us\n", n, raws[r] * 1e6, pips[r] * 1e6);
        }
        double raw = bench_median(raws, nr), pip = bench_median(pips, nr);
        if (me != 0) continue;
        if (k == 0) lat = (pip - raw) * 1e6;
        ratio[k] = raw / pip;
        if (k == 0)
            printf("%-18s %11.2f us %11.2f us %8.3f  (pipit - raw = %+.2f us)\n", cases[k].what, raw * 1e6,
                   pip * 1e6, pip / raw, (pip - raw) * 1e6);
        else
            printf("%-18s %9.0f MB/s %9.0f MB/s %8.3f  (pipit / raw bandwidth)\n", cases[k].what, n / raw / 1e6,
                   n / pip / 1e6, raw / pip);
        fflush(stdout);
    }
    if (me == 0) printf("summary lat8 %+.2f 64K %.3f 1M %.3f 64M %.3f\n", lat, ratio[1], ratio[2], ratio[3]);
    free(buf);
    free(back);
    MPI_Comm_free(&c);
    t->vt->free(t);
    pipit_finalize();
    return 0;
}
