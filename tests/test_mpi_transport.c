/*
 * test_mpi_transport.c — the MPI transport, under `mpirun -np 2` (ctest:
 * mpi_transport_vader, mpi_transport_tcp, test_mpi_netns). Run alone (one
 * process) every test here skips (exit code 77 when only these ran).
 * Each test creates its own transport (a collective: both processes run
 * the tests in the same order) and frees it.
 */
#include <time.h>
#include <unistd.h>

#include "pipit.h"
#include "runtime/transport.h"
#include "test.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Two processes, or NULL (skip). MPI is finalised at exit. */
static pipit__transport *mpi_two(const uint64_t *tags, size_t ntags) {
    static int registered;
    if (pipit_init(NULL, NULL) != PIPIT_STATUS_OK || pipit_process_count() != 2) return NULL;
    if (!registered) {
        atexit(pipit_finalize);
        registered = 1;
    }
    return pipit__transport_mpi_new(2, tags, ntags);
}

#define NEED_MPI(t)                                                                  \
    do {                                                                             \
        if (pipit_init(NULL, NULL) != PIPIT_STATUS_OK || pipit_process_count() != 2) \
            PIPIT_SKIP("not under mpirun -np 2");                                    \
        if (!(t)) PIPIT_FAIL_("pipit__transport_mpi_new: %s", pipit_errmsg());       \
    } while (0)

static unsigned char pattern(size_t i, int salt) { return (unsigned char)(i * 131u + (unsigned)salt * 7u + (i >> 9)); }

static int check_pattern(const unsigned char *p, size_t n, int salt) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern(i, salt)) return 0;
    return 1;
}

static void fill(unsigned char *p, size_t n, int salt) {
    for (size_t i = 0; i < n; i++) p[i] = pattern(i, salt);
}

/* Ping-pong of several sizes (eager and rendezvous) and tags; also the
 * message the netns test runs across emulated hosts. */
PIPIT_TEST(mpi_transport_pingpong) {
    static const size_t sizes[] = {0, 1, 8, 4096, 65536 + 3, 1 << 20, 8 << 20};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    uint64_t tags[2 * NS];
    for (int i = 0; i < NS; i++) {
        tags[2 * i] = pipit__tag(PIPIT_TAG_VALUE, i, 0);
        tags[2 * i + 1] = pipit__tag(PIPIT_TAG_VALUE, i, 1);
    }
    pipit__transport *t = mpi_two(tags, 2 * NS);
    NEED_MPI(t);
    int me = pipit_process_rank(), peer = 1 - me;
    char host[256] = "?";
    gethostname(host, sizeof host);
    printf("mpi_transport_pingpong: process %d of %d on %s\n", me, pipit_process_count(), host);
    unsigned char *buf = malloc(8 << 20), *got = malloc(8 << 20);
    ASSERT_TRUE(buf && got);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < NS; i++) {
            size_t n = sizes[i];
            if (me == 0) {
                fill(buf, n, i + round);
                ASSERT_OK(t->vt->send(t, me, peer, tags[2 * i], buf, n));
                memset(buf, 0xee, n); /* the caller may reuse its buffer at once */
                ASSERT_OK(t->vt->recv(t, me, peer, tags[2 * i + 1], got, n));
                ASSERT_TRUE(check_pattern(got, n, i + round + 1));
            } else {
                ASSERT_OK(t->vt->recv(t, me, peer, tags[2 * i], got, n));
                ASSERT_TRUE(check_pattern(got, n, i + round));
                fill(buf, n, i + round + 1);
                ASSERT_OK(t->vt->send(t, me, peer, tags[2 * i + 1], buf, n));
            }
        }
    }
    free(buf);
    free(got);
    t->vt->free(t);
}

/* Receives posted in the reverse order of the sends: the tags keep the
 * messages apart. */
PIPIT_TEST(mpi_transport_order) {
    enum { K = 6 };
    uint64_t tags[K];
    for (int i = 0; i < K; i++) tags[i] = pipit__tag(i % 2 ? PIPIT_TAG_ACC : PIPIT_TAG_VALUE, 3, i);
    /* sorted, as the runtime passes them */
    for (int i = 1; i < K; i++)
        for (int j = i; j > 0 && tags[j - 1] > tags[j]; j--) {
            uint64_t x = tags[j];
            tags[j] = tags[j - 1];
            tags[j - 1] = x;
        }
    pipit__transport *t = mpi_two(tags, K);
    NEED_MPI(t);
    int me = pipit_process_rank();
    size_t n = 300000; /* above the eager limits: rendezvous */
    unsigned char *buf = malloc(n);
    ASSERT_TRUE(buf);
    if (me == 0) {
        for (int i = 0; i < K; i++) {
            fill(buf, n, 10 + i);
            ASSERT_OK(t->vt->send(t, 0, 1, tags[i], buf, n - (size_t)i));
        }
    } else {
        for (int i = K - 1; i >= 0; i--) {
            ASSERT_OK(t->vt->recv(t, 1, 0, tags[i], buf, n - (size_t)i));
            ASSERT_TRUE(check_pattern(buf, n - (size_t)i, 10 + i));
        }
    }
    unsigned char sync = 0;
    ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
    free(buf);
    t->vt->free(t);
}

/* A sender that goes on computing (never calls MPI) still delivers a large
 * message: the monitor thread moves it, for a copying send at once and for
 * an isend once the rank's kick hands it over (the runtime kicks when a
 * rank turns from sending to compute). */
PIPIT_TEST(mpi_transport_progress) {
    uint64_t tags[2] = {pipit__tag(PIPIT_TAG_VALUE, 0, 0), pipit__tag(PIPIT_TAG_VALUE, 0, 1)};
    pipit__transport *t = mpi_two(tags, 2);
    NEED_MPI(t);
    int me = pipit_process_rank();
    size_t n = 16 << 20;
    unsigned char *buf = malloc(n);
    ASSERT_TRUE(buf);
    unsigned char sync = 0;
    for (int zc = 0; zc < 2; zc++) {
        ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
        if (me == 0) {
            fill(buf, n, 5 + zc);
            if (zc) {
                ASSERT_OK(t->vt->isend(t, 0, 1, tags[1], buf, n));
                t->vt->kick(t, 0);
            } else {
                ASSERT_OK(t->vt->send(t, 0, 1, tags[0], buf, n));
            }
            double t0 = now();
            volatile double x = 0; /* compute, no MPI calls, for 1.5 s */
            while (now() - t0 < 1.5) x += 1.0;
            if (zc) ASSERT_OK(t->vt->fence(t, 0, 1, tags[1]));
        } else {
            double t0 = now();
            ASSERT_OK(t->vt->recv(t, 1, 0, tags[zc], buf, n));
            double dt = now() - t0;
            printf("16 MiB (%s) arrived after %.3f s while the sender computed\n", zc ? "isend" : "copying send", dt);
            ASSERT_TRUE(check_pattern(buf, n, 5 + zc));
            ASSERT_TRUE(dt < 1.0);
        }
    }
    ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
    free(buf);
    t->vt->free(t);
}

/* Several isends completing in one MPI_Testsome: each completion marks
 * the send MPI finished, not a later one. Sixteen medium isends (above
 * the eager limit: each completes only once its receive has matched; 32
 * KiB for shared memory, 96 KiB for TCP) are queued before one 1 MiB
 * isend. The receiver takes the sixteen, then says so; the sender's wait
 * for that word moves MPI (the sixteen complete inside MPI), and the test
 * of the sends as the wait ends finds them together. The receiver takes
 * the large one 0.3 s later; the sender's fence of it must wait for that:
 * once it returns the sender overwrites the buffer, and what arrives must
 * still be what was sent. (A completion mapped to the wrong send marked
 * the large one done: a fence that returned at once, bytes overwritten in
 * flight, and MPI writing a freed request.) */
PIPIT_TEST(mpi_transport_fence_after_testsome) {
    enum { K = 16, MEDIUM_MAX = 96 << 10 };
    static const size_t mediums[2] = {32 << 10, MEDIUM_MAX};
    uint64_t tags[K + 2]; /* the sixteen, the large one, the receiver's word */
    for (int i = 0; i < K + 2; i++) tags[i] = pipit__tag(PIPIT_TAG_VALUE, 7, i); /* ascending */
    pipit__transport *t = mpi_two(tags, K + 2);
    NEED_MPI(t);
    int me = pipit_process_rank();
    size_t n = 1 << 20;
    unsigned char *big = malloc(n), *med = malloc((size_t)K * MEDIUM_MAX), word = 1;
    ASSERT_TRUE(big && med);
    for (int round = 0; round < 2; round++) {
        size_t m = mediums[round];
        unsigned char sync = 0;
        ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
        if (me == 0) {
            for (int i = 0; i < K; i++) {
                fill(med + (size_t)i * m, m, 60 + i + round);
                ASSERT_OK(t->vt->isend(t, 0, 1, tags[i], med + (size_t)i * m, m));
            }
            fill(big, n, 77 + round);
            ASSERT_OK(t->vt->isend(t, 0, 1, tags[K], big, n));
            ASSERT_OK(t->vt->recv(t, 0, 1, tags[K + 1], &word, 1));
            double t0 = now();
            ASSERT_OK(t->vt->fence(t, 0, 1, tags[K]));
            double dt = now() - t0;
            memset(big, 0xee, n); /* the buffer is the caller's again */
            for (int i = 0; i < K; i++) ASSERT_OK(t->vt->fence(t, 0, 1, tags[i]));
            printf("%zu KiB: the large isend's fence returned after %.3f s (its receive came 0.3 s after the word)\n",
                   m >> 10, dt);
        } else {
            for (int i = 0; i < K; i++) {
                ASSERT_OK(t->vt->recv(t, 1, 0, tags[i], med + (size_t)i * m, m));
                ASSERT_TRUE(check_pattern(med + (size_t)i * m, m, 60 + i + round));
            }
            ASSERT_OK(t->vt->send(t, 1, 0, tags[K + 1], &word, 1));
            sleep_s(0.3);
            ASSERT_OK(t->vt->recv(t, 1, 0, tags[K], big, n));
            ASSERT_TRUE(check_pattern(big, n, 77 + round));
        }
    }
    unsigned char sync = 0;
    ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
    free(big);
    free(med);
    t->vt->free(t);
}

PIPIT_TEST(mpi_transport_bcast) {
    uint64_t tag = pipit__tag(PIPIT_TAG_LOSS, 0, 0);
    pipit__transport *t = mpi_two(&tag, 1);
    NEED_MPI(t);
    int me = pipit_process_rank();
    size_t n = 3 << 20;
    unsigned char *buf = malloc(n);
    ASSERT_TRUE(buf);
    for (int root = 0; root < 2; root++) {
        if (me == root)
            fill(buf, n, 40 + root);
        else
            memset(buf, 0, n);
        ASSERT_OK(t->vt->bcast(t, root, buf, n));
        ASSERT_TRUE(check_pattern(buf, n, 40 + root));
    }
    free(buf);
    t->vt->free(t);
}

PIPIT_TEST(mpi_transport_size_mismatch) {
    uint64_t tags[2] = {pipit__tag(PIPIT_TAG_VALUE, 1, 0), pipit__tag(PIPIT_TAG_VALUE, 1, 1)};
    pipit__transport *t = mpi_two(tags, 2);
    NEED_MPI(t);
    int me = pipit_process_rank();
    unsigned char buf[32];
    if (me == 0) {
        fill(buf, 32, 1);
        ASSERT_OK(t->vt->send(t, 0, 1, tags[0], buf, 16)); /* too big */
        ASSERT_OK(t->vt->send(t, 0, 1, tags[0], buf, 4));  /* too small */
        ASSERT_OK(t->vt->send(t, 0, 1, tags[0], buf, 8));  /* right */
        ASSERT_STATUS(t->vt->send(t, 0, 1, pipit__tag(PIPIT_TAG_NORM, 0, 0), buf, 8), PIPIT_STATUS_INTERNAL);
        ASSERT_MSG_HAS("not in the tag table");
    } else {
        memset(buf, 0, sizeof buf);
        ASSERT_STATUS(t->vt->recv(t, 1, 0, tags[0], buf, 8), PIPIT_STATUS_RUNTIME);
        ASSERT_MSG_HAS("rank 1: message from rank 0 is larger than the 8 bytes expected");
        ASSERT_TRUE(buf[9] == 0 && buf[15] == 0); /* no overrun */
        ASSERT_STATUS(t->vt->recv(t, 1, 0, tags[0], buf, 8), PIPIT_STATUS_RUNTIME);
        ASSERT_MSG_HAS("has 4 bytes, expected 8");
        ASSERT_OK(t->vt->recv(t, 1, 0, tags[0], buf, 8));
        ASSERT_TRUE(check_pattern(buf, 8, 1));
    }
    unsigned char sync = 0;
    ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
    t->vt->free(t);
}

/* Rank 1 fails while rank 0 waits for it: rank 0 wakes at once with rank
 * 1's message; the abort stays (reset is a no-op). */
PIPIT_TEST(mpi_transport_abort) {
    uint64_t tag = pipit__tag(PIPIT_TAG_VALUE, 2, 0);
    pipit__transport *t = mpi_two(&tag, 1);
    NEED_MPI(t);
    int me = pipit_process_rank();
    unsigned char sync = 0, buf[8];
    ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
    if (me == 1) {
        sleep_s(0.3);
        t->vt->abort(t, 1, "boom");
        t->vt->abort(t, 1, "second"); /* the first message wins */
        ASSERT_STATUS(t->vt->recv(t, 1, 0, tag, buf, 8), PIPIT_STATUS_RUNTIME);
        ASSERT_MSG_HAS("rank 1 failed: boom");
    } else {
        double t0 = now();
        ASSERT_STATUS(t->vt->recv(t, 0, 1, tag, buf, 8), PIPIT_STATUS_RUNTIME);
        double dt = now() - t0;
        ASSERT_MSG_HAS("rank 1 failed: boom");
        printf("rank 0 woke %.3f s after it began waiting (rank 1 aborted after 0.3 s)\n", dt);
        ASSERT_TRUE(dt < 1.3);
        t->vt->reset(t);
        ASSERT_STATUS(t->vt->recv(t, 0, 1, tag, buf, 8), PIPIT_STATUS_RUNTIME);
        ASSERT_MSG_HAS("rank 1 failed: boom");
    }
    t->vt->free(t);
}

/* Rank 0 waits for a message rank 1 never sends: with PIPIT_TIMEOUT=1 it
 * reports the hang, and rank 1 (waiting with a long limit) hears of it. */
PIPIT_TEST(mpi_transport_timeout) {
    uint64_t tag = pipit__tag(PIPIT_TAG_VALUE, 4, 0);
    if (pipit_init(NULL, NULL) != PIPIT_STATUS_OK || pipit_process_count() != 2) PIPIT_SKIP("not under mpirun -np 2");
    int me = pipit_process_rank();
    const char *old = getenv("PIPIT_TIMEOUT");
    char saved[64] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    setenv("PIPIT_TIMEOUT", me == 0 ? "1" : "30", 1);
    pipit__transport *t = mpi_two(&tag, 1);
    if (old)
        setenv("PIPIT_TIMEOUT", saved, 1);
    else
        unsetenv("PIPIT_TIMEOUT");
    NEED_MPI(t);
    unsigned char buf[8];
    double t0 = now();
    if (me == 0) {
        ASSERT_STATUS(t->vt->recv(t, 0, 1, tag, buf, 8), PIPIT_STATUS_RUNTIME);
        ASSERT_MSG_HAS("rank 0: no message from rank 1 for 1 s (hung? the limit is PIPIT_TIMEOUT)");
    } else {
        ASSERT_STATUS(t->vt->recv(t, 1, 0, tag, buf, 8), PIPIT_STATUS_RUNTIME);
        ASSERT_MSG_HAS("rank 0 failed: rank 0: no message from rank 1 for 1 s");
    }
    double dt = now() - t0;
    printf("process %d: %s (after %.2f s)\n", me, pipit_errmsg(), dt);
    ASSERT_TRUE(dt < 5);
    t->vt->free(t);
}

/* Device memory through the transport's host copies (the cuda backend's
 * path, transport.h): messages of device tags go through to_host on the
 * sender and from_host on the receiver (each exactly once per message),
 * host tags never; the bytes arrive intact either way. */
static int to_host_calls, from_host_calls;
static void count_to_host(void *dst, const void *src, size_t n) {
    to_host_calls++;
    memcpy(dst, src, n);
}
static void count_from_host(void *dst, const void *src, size_t n) {
    from_host_calls++;
    memcpy(dst, src, n);
}

PIPIT_TEST(mpi_transport_device_staging) {
    static const size_t sizes[] = {8, 4096, 1 << 20};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    uint64_t tags[2 * NS];
    for (int i = 0; i < NS; i++) { /* sorted, as the transport wants them */
        tags[i] = pipit__tag(PIPIT_TAG_VALUE, i, 0);       /* device memory */
        tags[NS + i] = pipit__tag(PIPIT_TAG_NORM, i, 0);   /* host memory */
    }
    pipit__transport *t = mpi_two(tags, 2 * NS);
    NEED_MPI(t);
    t->to_host = count_to_host;
    t->from_host = count_from_host;
    to_host_calls = from_host_calls = 0;
    int me = pipit_process_rank(), peer = 1 - me;
    unsigned char *buf = malloc(1 << 20), *got = malloc(1 << 20);
    ASSERT_TRUE(buf && got);
    for (int i = 0; i < NS; i++)
        for (int host = 0; host < 2; host++) {
            size_t n = sizes[i];
            if (me == 0) {
                fill(buf, n, 3 * i + host);
                ASSERT_OK(t->vt->send(t, me, peer, tags[host * NS + i], buf, n));
            } else {
                memset(got, 0, n);
                ASSERT_OK(t->vt->recv(t, me, peer, tags[host * NS + i], got, n));
                ASSERT_TRUE(check_pattern(got, n, 3 * i + host));
            }
        }
    ASSERT_EQ_I64(me == 0 ? to_host_calls : from_host_calls, NS); /* the device tags only */
    ASSERT_EQ_I64(me == 0 ? from_host_calls : to_host_calls, 0);
    free(buf);
    free(got);
    t->vt->free(t);
}

/* Zero-copy: the receiver takes its time; the sender's fence returns only
 * once the message is out of its buffer, after which the sender may write
 * it without the receiver seeing the change. Eager and rendezvous sizes. */
PIPIT_TEST(mpi_transport_zero_copy) {
    static const size_t sizes[] = {8, 4096, 1 << 20, 8 << 20};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    uint64_t tags[NS];
    for (int i = 0; i < NS; i++) tags[i] = pipit__tag(PIPIT_TAG_VALUE, 7, i);
    pipit__transport *t = mpi_two(tags, NS);
    NEED_MPI(t);
    int me = pipit_process_rank();
    unsigned char *buf[NS];
    for (int i = 0; i < NS; i++) ASSERT_TRUE((buf[i] = malloc(sizes[i])) != NULL);
    if (me == 0) {
        for (int i = 0; i < NS; i++) {
            fill(buf[i], sizes[i], 20 + i);
            ASSERT_OK(t->vt->isend(t, 0, 1, tags[i], buf[i], sizes[i]));
        }
        for (int i = NS - 1; i >= 0; i--) { /* in any order */
            ASSERT_OK(t->vt->fence(t, 0, 1, tags[i]));
            memset(buf[i], 0xee, sizes[i]); /* the buffer is ours again */
        }
        ASSERT_STATUS(t->vt->fence(t, 0, 1, tags[0]), PIPIT_STATUS_INTERNAL);
        ASSERT_MSG_HAS("not outstanding");
    } else {
        sleep_s(0.3); /* a slow receiver */
        for (int i = 0; i < NS; i++) {
            memset(buf[i], 0, sizes[i]);
            ASSERT_OK(t->vt->recv(t, 1, 0, tags[i], buf[i], sizes[i]));
            ASSERT_TRUE(check_pattern(buf[i], sizes[i], 20 + i));
        }
    }
    unsigned char sync = 0;
    ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
    for (int i = 0; i < NS; i++) free(buf[i]);
    t->vt->free(t);
}

/* PIPIT_DEBUG_SENDS: a sender that writes its buffer before the fence is
 * caught by the receiver's checksum; one that waits for it is not. */
PIPIT_TEST(mpi_transport_debug_sends) {
    uint64_t tags[2] = {pipit__tag(PIPIT_TAG_VALUE, 8, 0), pipit__tag(PIPIT_TAG_VALUE, 8, 1)};
    if (pipit_init(NULL, NULL) != PIPIT_STATUS_OK || pipit_process_count() != 2) PIPIT_SKIP("not under mpirun -np 2");
    setenv("PIPIT_DEBUG_SENDS", "1", 1);
    pipit__transport *t = mpi_two(tags, 2);
    unsetenv("PIPIT_DEBUG_SENDS");
    NEED_MPI(t);
    ASSERT_TRUE(t->debug_sends);
    int me = pipit_process_rank();
    size_t n = 1 << 20; /* rendezvous: the bytes leave only once the receiver asks */
    unsigned char *buf = malloc(n);
    ASSERT_TRUE(buf);
    unsigned char sync = 0;
    if (me == 0) {
        fill(buf, n, 3);
        ASSERT_OK(t->vt->isend(t, 0, 1, tags[0], buf, n));
        ASSERT_OK(t->vt->fence(t, 0, 1, tags[0]));
        memset(buf, 0x11, n); /* after the fence: allowed */
        fill(buf, n, 4);
        ASSERT_OK(t->vt->isend(t, 0, 1, tags[1], buf, n));
        memset(buf, 0x22, n); /* before the fence: the contract broken */
        ASSERT_OK(t->vt->bcast(t, 0, &sync, 1)); /* only now may the receiver ask for the bytes */
        ASSERT_OK(t->vt->fence(t, 0, 1, tags[1]));
    } else {
        ASSERT_OK(t->vt->recv(t, 1, 0, tags[0], buf, n));
        ASSERT_TRUE(check_pattern(buf, n, 3));
        ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
        ASSERT_STATUS(t->vt->recv(t, 1, 0, tags[1], buf, n), PIPIT_STATUS_RUNTIME);
        ASSERT_MSG_HAS("rank 1: the 1048576 bytes from rank 0 (tag 0x0000000800000001) changed in flight");
    }
    ASSERT_OK(t->vt->bcast(t, 0, &sync, 1));
    /* copies carry a checksum too (a receiver cannot tell them apart) */
    if (me == 0) ASSERT_OK(t->vt->send(t, 0, 1, tags[0], buf, 64));
    else ASSERT_OK(t->vt->recv(t, 1, 0, tags[0], buf, 64));
    free(buf);
    t->vt->free(t);
}

/* The in-stage all-reduce over processes: rank order, so both processes
 * hold exactly x0 + x1 computed here, whatever arrives first; sizes from
 * empty to uneven chunks, f32 and f64. */
static double coll_value(int rank, int64_t i) { return rank == 0 ? 1e8 + (double)(i % 97) : 0.3 + 1e-3 * (double)i; }

PIPIT_TEST(mpi_transport_allreduce) {
    static const int64_t counts[] = {0, 1, 7, 300001};
    enum { NC = sizeof counts / sizeof counts[0] };
    uint64_t tags[4 * NC];
    for (int c = 0; c < NC; c++)
        for (int k = 0; k < 4; k++) tags[4 * c + k] = pipit__tag(PIPIT_TAG_COLL, c, k);
    pipit__transport *t = mpi_two(tags, 4 * NC);
    NEED_MPI(t);
    int me = pipit_process_rank(), group[2] = {0, 1};
    for (int dt = 0; dt < 2; dt++)
        for (int c = 0; c < NC; c++) {
            int64_t n = counts[c];
            pipit_dtype type = dt ? PIPIT_F64 : PIPIT_F32;
            size_t es = pipit__dtype_size(type);
            unsigned char *x = malloc((size_t)PIPIT_MAX(n, 1) * es);
            ASSERT_TRUE(x);
            for (int64_t i = 0; i < n; i++) {
                if (dt) ((double *)x)[i] = coll_value(me, i);
                else ((float *)x)[i] = (float)coll_value(me, i);
            }
            if (me == 1) sleep_s(0.05); /* arrive late */
            ASSERT_OK(pipit__transport_allreduce(t, me, group, 2, c, type, x, n));
            for (int64_t i = 0; i < n; i++) {
                int same = dt ? ((double *)x)[i] == coll_value(0, i) + coll_value(1, i)
                              : ((float *)x)[i] == (float)coll_value(0, i) + (float)coll_value(1, i);
                if (!same) PIPIT_FAIL_("element %lld of %lld (%s) is not x0 + x1", (long long)i, (long long)n,
                                       dt ? "f64" : "f32");
            }
            free(x);
        }
    int bad[2] = {1, 0};
    ASSERT_STATUS(pipit__transport_allreduce(t, me, bad, 2, 0, PIPIT_F32, NULL, 0), PIPIT_STATUS_INTERNAL);
    ASSERT_MSG_HAS("ascending");
    t->vt->free(t);
}
