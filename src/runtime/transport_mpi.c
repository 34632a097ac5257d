/*
 * transport_mpi.c — one world rank per MPI process (MPI_COMM_WORLD rank =
 * world rank). process_mpi.c has the MPI build's pipit_init & co.
 *
 * Design (measured on 2 cores, Open MPI 4.1.4, ob1 over vader and tcp:
 * docs/benchmarks.md "MPI transport"; docs/architecture.md §6):
 *
 *  - MPI_THREAD_MULTIPLE. The rank's own thread calls MPI directly: send is
 *    MPI_Isend, recv polls MPI_Improbe then MPI_Imrecv straight into the
 *    caller's buffer. A progress thread that did every MPI call on behalf of
 *    the others (MPI_THREAD_SERIALIZED) would add a thread hand-off (a
 *    condition-variable wake-up, several µs, worse when the 2 cores are
 *    busy) to every message; MULTIPLE costs Open MPI's internal locks
 *    (well under a µs).
 *  - Sends complete in the background: Open MPI here has no progress thread
 *    of its own ("OMPI progress: no"), so a message larger than the eager
 *    limit (rendezvous) moves only while someone in the sending process
 *    calls into MPI. Our progress thread does: it sleeps on a condition
 *    variable while no send is outstanding (no CPU at all), and while some
 *    are it calls MPI_Testsome, spinning for PROGRESS_SPIN_NS and then
 *    sleeping with a doubling back-off up to BACKOFF_MAX_NS, so on 2 cores
 *    a long-running send steals little compute. A send that completes at
 *    once (eager: 8 B, anything up to Open MPI's eager limit) never wakes it.
 *  - The caller reuses its buffer as soon as send returns, and an Isend
 *    reads the buffer until it completes, so send copies into a transport
 *    buffer; completed buffers are kept (up to CACHE_MAX_BYTES) and reused,
 *    so a steady stream of activations costs one warm memcpy, no malloc and
 *    no page faults.
 *  - A waiting recv polls with the same spin-then-back-off policy, checking
 *    the abort communicator and the timeout as it goes. Matched probes
 *    (Improbe/Imrecv) give the exact incoming size before any byte is
 *    written, so a size mismatch names both sizes and never overruns; an
 *    unmatched message is never half-received, so an abort or a timeout
 *    leaves no receive posted into the caller's buffer.
 *  - Abort: a short message ("rank R failed: msg") to every other process on
 *    a communicator of its own (a dup of MPI_COMM_WORLD), which every
 *    waiting recv and the progress thread probe. The first message a
 *    process sees (or makes) wins and stays: reset is a no-op.
 *  - Data goes on a second dup, so no user tag can collide with an abort;
 *    bcast uses a third (MPI_Ibcast, polled like a recv, chunked by
 *    INT_MAX bytes).
 *  - Device buffers (cuda backend; transport.h) travel through host memory:
 *    the send downloads into its send copy, a receive lands in a cached
 *    host buffer and is uploaded, so any MPI works, CUDA-aware or not.
 *    (Between GPUs, NCCL would replace both copies: transport.h.)
 */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/transport.h"

#ifdef PIPIT_HAVE_MPI
#include <mpi.h>

#define PROGRESS_SPIN_NS 50000L      /* busy-poll this long before sleeping */
#define BACKOFF_MIN_NS 2000L         /* first sleep */
#define BACKOFF_MAX_NS 200000L       /* longest sleep between polls (0.2 ms) */
#define MATCHED_SPIN_BPS 1e9         /* a matched receive spins n / this s */
#define CACHE_MAX_BYTES (256u << 20) /* completed send buffers kept for reuse */
#define CACHE_MAX_COUNT 16
#define FREE_WAIT_S 5.0  /* free: how long outstanding sends may take */
#define ABORT_WAIT_S 2.0 /* abort: how long the notices may take to leave */
#define ABORT_TAG 0
#define MSG_MAX 1024

typedef struct {
    MPI_Request req;
    void *buf;
    size_t cap;
} pending;

typedef struct {
    void *buf;
    size_t cap;
} cached;

typedef struct {
    pipit__transport base;
    int W, rank;
    double timeout;
    uint64_t *tags;
    size_t ntags;
    MPI_Comm data_comm, abort_comm, bcast_comm;

    pthread_mutex_t mu; /* sends, the buffer cache, the abort state */
    pthread_cond_t cv;  /* wakes the progress thread */
    pending *sends;
    MPI_Request *reqs; /* scratch for Testsome, capacity nsends_cap */
    int *idx;
    int nsends, nsends_cap;
    cached cache[CACHE_MAX_COUNT];
    int ncache;
    size_t cache_bytes;
    int stop;
    pthread_t thread;
    int thread_started;

    int aborted; /* failing rank + 1, 0 if none */
    char abort_msg[MSG_MAX];
} mpi_transport;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Spin-then-back-off waiting: call backoff_wait after each fruitless poll. */
typedef struct {
    double start;
    double spin_ns; /* busy-poll this long before the first sleep */
    long sleep_ns;
} backoff;

static void backoff_init(backoff *b) {
    b->start = now_s();
    b->spin_ns = PROGRESS_SPIN_NS;
    b->sleep_ns = 0;
}

static void backoff_wait(backoff *b) {
    if (b->sleep_ns == 0) {
        if ((now_s() - b->start) * 1e9 < b->spin_ns) return;
        b->sleep_ns = BACKOFF_MIN_NS;
    }
    struct timespec ts = {0, b->sleep_ns};
    nanosleep(&ts, NULL);
    if (b->sleep_ns < BACKOFF_MAX_NS) b->sleep_ns = b->sleep_ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : b->sleep_ns * 2;
}

static pipit_status mpi_fail(int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
    return pipit__err(PIPIT_STATUS_RUNTIME, "MPI: %s failed: %s", what, s);
}

/* ---------------------------------------------------------------- abort */

/* Sets the abort state (first message wins); returns 1 if this call set it. */
static int set_aborted(mpi_transport *t, int rank, const char *text) {
    int first = 0;
    pthread_mutex_lock(&t->mu);
    if (!t->aborted) {
        t->aborted = rank + 1;
        snprintf(t->abort_msg, sizeof t->abort_msg, "%s", text);
        first = 1;
    }
    pthread_mutex_unlock(&t->mu);
    return first;
}

/* Looks for an abort notice from another process; returns non-zero (and
 * copies the message) once this transport is aborted. */
static int check_aborted(mpi_transport *t, char *why, size_t n) {
    pthread_mutex_lock(&t->mu);
    int a = t->aborted;
    pthread_mutex_unlock(&t->mu);
    if (!a) {
        int flag = 0;
        MPI_Message m;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, ABORT_TAG, t->abort_comm, &flag, &m, &st) == MPI_SUCCESS && flag) {
            char text[MSG_MAX];
            int len = 0;
            MPI_Get_count(&st, MPI_CHAR, &len);
            if (len < 0 || len >= MSG_MAX) len = MSG_MAX - 1;
            memset(text, 0, sizeof text);
            MPI_Mrecv(text, MSG_MAX, MPI_CHAR, &m, MPI_STATUS_IGNORE);
            text[MSG_MAX - 1] = 0;
            set_aborted(t, st.MPI_SOURCE, text);
        }
    }
    pthread_mutex_lock(&t->mu);
    a = t->aborted;
    if (a && why) snprintf(why, n, "%s", t->abort_msg);
    pthread_mutex_unlock(&t->mu);
    return a;
}

static void mpi_abort(pipit__transport *tt, int rank, const char *why) {
    mpi_transport *t = (mpi_transport *)tt;
    char text[MSG_MAX];
    snprintf(text, sizeof text, "rank %d failed: %s", rank, why ? why : "");
    if (!set_aborted(t, rank, text)) return; /* already aborted: the first message won */
    int len = (int)strlen(text) + 1;
    MPI_Request *r = pipit__calloc((size_t)t->W, sizeof *r);
    if (!r) return;
    int nr = 0;
    for (int p = 0; p < t->W; p++)
        if (p != t->rank && MPI_Isend(text, len, MPI_CHAR, p, ABORT_TAG, t->abort_comm, &r[nr]) == MPI_SUCCESS)
            nr++;
    /* The notices are eager (small): they leave at once unless a peer is
     * unreachable; do not hang on one. */
    double t0 = now_s();
    backoff b;
    backoff_init(&b);
    for (;;) {
        int done = 0;
        MPI_Testall(nr, r, &done, MPI_STATUSES_IGNORE);
        if (done || now_s() - t0 > ABORT_WAIT_S) break;
        backoff_wait(&b);
    }
    for (int i = 0; i < nr; i++)
        if (r[i] != MPI_REQUEST_NULL) MPI_Request_free(&r[i]);
    pipit__free(r);
}

/* An abort is final for a job of processes: a peer may already have left. */
static void mpi_reset(pipit__transport *tt) { (void)tt; }

/* ---------------------------------------------------------------- sends */

/* A buffer of at least n bytes: the smallest cached one that fits, else new. */
static void *take_buffer(mpi_transport *t, size_t n, size_t *cap) {
    pthread_mutex_lock(&t->mu);
    int best = -1;
    for (int i = 0; i < t->ncache; i++)
        if (t->cache[i].cap >= n && (best < 0 || t->cache[i].cap < t->cache[best].cap)) best = i;
    if (best >= 0) {
        void *buf = t->cache[best].buf;
        *cap = t->cache[best].cap;
        t->cache_bytes -= *cap;
        t->cache[best] = t->cache[--t->ncache];
        pthread_mutex_unlock(&t->mu);
        return buf;
    }
    pthread_mutex_unlock(&t->mu);
    *cap = n ? n : 1;
    return pipit__malloc(*cap);
}

/* Keeps a finished buffer for reuse, or frees it (evicting nothing: the
 * cache only takes what fits). Called with t->mu held. */
static void give_buffer_locked(mpi_transport *t, void *buf, size_t cap) {
    if (t->ncache < CACHE_MAX_COUNT && t->cache_bytes + cap <= CACHE_MAX_BYTES) {
        t->cache[t->ncache].buf = buf;
        t->cache[t->ncache].cap = cap;
        t->ncache++;
        t->cache_bytes += cap;
    } else {
        pipit__free(buf);
    }
}

/* Tests the outstanding sends once; returns how many remain. t->mu held. */
static int test_sends_locked(mpi_transport *t) {
    if (t->nsends == 0) return 0;
    for (int i = 0; i < t->nsends; i++) t->reqs[i] = t->sends[i].req;
    int outcount = 0;
    if (MPI_Testsome(t->nsends, t->reqs, &outcount, t->idx, MPI_STATUSES_IGNORE) != MPI_SUCCESS ||
        outcount == MPI_UNDEFINED)
        return t->nsends;
    for (int k = 0; k < outcount; k++) {
        pending *p = &t->sends[t->idx[k]];
        give_buffer_locked(t, p->buf, p->cap);
        p->buf = NULL;
    }
    int j = 0;
    for (int i = 0; i < t->nsends; i++)
        if (t->sends[i].buf) t->sends[j++] = t->sends[i];
    t->nsends = j;
    return j;
}

static void *progress_main(void *arg) {
    mpi_transport *t = arg;
    backoff b;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        if (t->nsends == 0) {
            pthread_cond_wait(&t->cv, &t->mu);
            backoff_init(&b);
            continue;
        }
        int before = t->nsends;
        int left = test_sends_locked(t);
        if (left == 0) continue;
        if (left < before) backoff_init(&b); /* progress: poll eagerly again */
        pthread_mutex_unlock(&t->mu);
        backoff_wait(&b);
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* The MPI tag of a pipit tag: its index in the sorted table. */
static int mpi_tag(mpi_transport *t, uint64_t tag) {
    size_t lo = 0, hi = t->ntags;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->tags[mid] < tag)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < t->ntags && t->tags[lo] == tag ? (int)lo : -1;
}

static pipit_status check_ranks(mpi_transport *t, int self, int peer, const char *what) {
    if (self != t->rank)
        return pipit__err(PIPIT_STATUS_INTERNAL, "mpi transport: %s as world rank %d in the process of rank %d",
                          what, self, t->rank);
    if (peer < 0 || peer >= t->W || peer == self)
        return pipit__err(PIPIT_STATUS_INTERNAL, "mpi transport: rank %d: %s with rank %d (world of %d)", self,
                          what, peer, t->W);
    return PIPIT_STATUS_OK;
}

static pipit_status mpi_send(pipit__transport *tt, int src, int dst, uint64_t tag, const void *data, size_t n) {
    mpi_transport *t = (mpi_transport *)tt;
    pipit_status s = check_ranks(t, src, dst, "send");
    if (s) return s;
    int mt = mpi_tag(t, tag);
    if (mt < 0)
        return pipit__err(PIPIT_STATUS_INTERNAL, "rank %d: send to rank %d with tag 0x%016llx, not in the tag table",
                          src, dst, (unsigned long long)tag);
    if (n > INT_MAX)
        return pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: message of %zu bytes to rank %d (the limit is %d)", src, n,
                          dst, INT_MAX);
    size_t cap;
    void *buf = take_buffer(t, n, &cap);
    if (!buf) return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory sending %zu bytes to rank %d", src, n, dst);
    pipit__transport_out(tt, tag, buf, data, n); /* device memory: downloaded into the send copy */
    MPI_Request r;
    int rc = MPI_Isend(buf, (int)n, MPI_BYTE, dst, mt, t->data_comm, &r);
    if (rc != MPI_SUCCESS) {
        pipit__free(buf);
        return mpi_fail(rc, "MPI_Isend");
    }
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE); /* eager: usually complete already */
    pthread_mutex_lock(&t->mu);
    if (done) {
        give_buffer_locked(t, buf, cap);
    } else {
        if (t->nsends == t->nsends_cap) {
            int c = t->nsends_cap ? 2 * t->nsends_cap : 16;
            pending *ns = pipit__realloc(t->sends, (size_t)c * sizeof *ns);
            if (ns) t->sends = ns;
            MPI_Request *nr = ns ? pipit__realloc(t->reqs, (size_t)c * sizeof *nr) : NULL;
            if (nr) t->reqs = nr;
            int *ni = nr ? pipit__realloc(t->idx, (size_t)c * sizeof *ni) : NULL;
            if (ni) t->idx = ni;
            if (!ni) {
                pthread_mutex_unlock(&t->mu);
                MPI_Wait(&r, MPI_STATUS_IGNORE); /* no room to track it: finish it here */
                pthread_mutex_lock(&t->mu);
                give_buffer_locked(t, buf, cap);
                pthread_mutex_unlock(&t->mu);
                return PIPIT_STATUS_OK;
            }
            t->nsends_cap = c;
        }
        t->sends[t->nsends++] = (pending){r, buf, cap};
        pthread_cond_signal(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return PIPIT_STATUS_OK;
}

/* ---------------------------------------------------------------- recv */

static pipit_status timed_out(mpi_transport *t, int dst, int src) {
    char text[MSG_MAX];
    snprintf(text, sizeof text, "rank %d: no message from rank %d for %g s (hung? the limit is PIPIT_TIMEOUT)", dst,
             src, t->timeout);
    mpi_abort(&t->base, dst, text); /* so every process reports it */
    return pipit__err(PIPIT_STATUS_RUNTIME, "%s", text);
}

static pipit_status mpi_recv(pipit__transport *tt, int dst, int src, uint64_t tag, void *data, size_t n) {
    mpi_transport *t = (mpi_transport *)tt;
    pipit_status s = check_ranks(t, dst, src, "recv");
    if (s) return s;
    int mt = mpi_tag(t, tag);
    if (mt < 0)
        return pipit__err(PIPIT_STATUS_INTERNAL,
                          "rank %d: receive from rank %d with tag 0x%016llx, not in the tag table", dst, src,
                          (unsigned long long)tag);
    char why[MSG_MAX];
    if (check_aborted(t, why, sizeof why)) return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
    MPI_Message m;
    MPI_Status st;
    backoff b;
    backoff_init(&b);
    for (unsigned iter = 1;; iter++) {
        int flag = 0;
        int rc = MPI_Improbe(src, mt, t->data_comm, &flag, &m, &st);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Improbe");
        if (flag) break;
        /* The abort probe and the clock every few polls while spinning,
         * every poll once sleeping. */
        if (b.sleep_ns || (iter & 63) == 0) {
            if (check_aborted(t, why, sizeof why)) return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
            if (now_s() - b.start > t->timeout) return timed_out(t, dst, src);
        }
        backoff_wait(&b);
    }
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if ((size_t)count != n) {
        /* Drain it so it cannot match a later receive. */
        void *sink = pipit__malloc(count ? (size_t)count : 1);
        MPI_Status ignored;
        if (sink) {
            MPI_Mrecv(sink, count, MPI_BYTE, &m, &ignored);
            pipit__free(sink);
        }
        return pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: message from rank %d has %d bytes, expected %zu", dst, src,
                          count, n);
    }
    /* Device memory is received into a host buffer (from the send cache),
     * then uploaded: any MPI works, CUDA-aware or not. */
    size_t cap = 0;
    void *stage = NULL;
    if (tt->from_host && pipit__tag_on_device(tag)) {
        if (!(stage = take_buffer(t, n, &cap)))
            return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory receiving %zu bytes from rank %d", dst, n, src);
    }
    MPI_Request r;
    int rc = MPI_Imrecv(stage ? stage : data, count, MPI_BYTE, &m, &r);
    if (rc != MPI_SUCCESS) {
        pipit__free(stage);
        return mpi_fail(rc, "MPI_Imrecv");
    }
    /* Matched: the bytes are on their way; only wait for them, spinning
     * for about as long as they take at MATCHED_SPIN_BPS (a sleep costs
     * ~60 µs of timer slack, as much as moving a MiB through shared memory). */
    backoff_init(&b);
    b.spin_ns += (double)n / MATCHED_SPIN_BPS * 1e9;
    for (;;) {
        int done = 0;
        rc = MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Test (receive)"); /* stage: MPI may still write it */
        if (done) break;
        backoff_wait(&b);
    }
    if (stage) {
        pipit__transport_in(tt, tag, data, stage, n);
        pthread_mutex_lock(&t->mu);
        give_buffer_locked(t, stage, cap);
        pthread_mutex_unlock(&t->mu);
    }
    return PIPIT_STATUS_OK;
}

/* ---------------------------------------------------------------- bcast */

static pipit_status mpi_bcast(pipit__transport *tt, int root, void *data, size_t n) {
    mpi_transport *t = (mpi_transport *)tt;
    if (root < 0 || root >= t->W)
        return pipit__err(PIPIT_STATUS_INTERNAL, "mpi transport: bcast from rank %d (world of %d)", root, t->W);
    char why[MSG_MAX];
    unsigned char *p = data;
    do {
        size_t chunk = n > INT_MAX ? INT_MAX : n;
        MPI_Request r;
        int rc = MPI_Ibcast(p, (int)chunk, MPI_BYTE, root, t->bcast_comm, &r);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Ibcast");
        backoff b;
        backoff_init(&b);
        for (unsigned iter = 1;; iter++) {
            int done = 0;
            rc = MPI_Test(&r, &done, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Test (bcast)");
            if (done) break;
            if (b.sleep_ns || (iter & 63) == 0) {
                /* A collective request cannot be cancelled: on an abort it
                 * is left behind (the job is over). */
                if (check_aborted(t, why, sizeof why)) return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
                if (now_s() - b.start > t->timeout) {
                    char text[MSG_MAX];
                    snprintf(text, sizeof text,
                             "rank %d: broadcast from rank %d not done after %g s (hung? the limit is PIPIT_TIMEOUT)",
                             t->rank, root, t->timeout);
                    mpi_abort(tt, t->rank, text);
                    return pipit__err(PIPIT_STATUS_RUNTIME, "%s", text);
                }
            }
            backoff_wait(&b);
        }
        p += chunk;
        n -= chunk;
    } while (n > 0);
    return PIPIT_STATUS_OK;
}

/* ---------------------------------------------------------------- life */

static void mpi_free(pipit__transport *tt) {
    mpi_transport *t = (mpi_transport *)tt;
    if (!t) return;
    if (t->thread_started) {
        pthread_mutex_lock(&t->mu);
        t->stop = 1;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
    }
    /* Outstanding sends: give them a while (a peer still receiving), then
     * drop them (a peer that aborted will never take them). */
    double t0 = now_s();
    backoff b;
    backoff_init(&b);
    pthread_mutex_lock(&t->mu);
    while (test_sends_locked(t) > 0 && now_s() - t0 < FREE_WAIT_S) {
        pthread_mutex_unlock(&t->mu);
        backoff_wait(&b);
        pthread_mutex_lock(&t->mu);
    }
    for (int i = 0; i < t->nsends; i++) {
        MPI_Cancel(&t->sends[i].req);
        MPI_Request_free(&t->sends[i].req);
        /* The buffer may still be read by MPI: leak it rather than risk it. */
    }
    t->nsends = 0;
    for (int i = 0; i < t->ncache; i++) pipit__free(t->cache[i].buf);
    pthread_mutex_unlock(&t->mu);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
        if (t->data_comm != MPI_COMM_NULL) MPI_Comm_free(&t->data_comm);
        if (t->abort_comm != MPI_COMM_NULL) MPI_Comm_free(&t->abort_comm);
        if (t->bcast_comm != MPI_COMM_NULL) MPI_Comm_free(&t->bcast_comm);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    pipit__free(t->sends);
    pipit__free(t->reqs);
    pipit__free(t->idx);
    pipit__free(t->tags);
    pipit__free(t);
}

static const pipit__transport_i mpi_vt = {mpi_send, mpi_recv, mpi_abort, mpi_reset, mpi_bcast, mpi_free};

static pipit_status dup_comm(MPI_Comm *c) {
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, c);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    return PIPIT_STATUS_OK;
}

pipit__transport *pipit__transport_mpi_new(int W, const uint64_t *tags, size_t ntags) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (!inited || fin) {
        pipit__err(PIPIT_STATUS_RUNTIME, "mpi transport: MPI is not initialised (start under mpirun; pipit_init)");
        return NULL;
    }
    int level = 0;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
        pipit__err(PIPIT_STATUS_RUNTIME,
                   "mpi transport: MPI was initialised without MPI_THREAD_MULTIPLE (level %d); let pipit_init "
                   "initialise it, or ask MPI_Init_thread for MPI_THREAD_MULTIPLE",
                   level);
        return NULL;
    }
    int size = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (W != size) {
        pipit__err(PIPIT_STATUS_RUNTIME, "mpi transport: the program has %d world ranks but mpirun started %d processes",
                   W, size);
        return NULL;
    }
    void *attr = NULL;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag);
    long tag_ub = flag && attr ? (long)*(int *)attr : 32767; /* the standard's minimum */
    if (ntags > 0 && (long long)ntags - 1 > (long long)tag_ub) {
        pipit__err(PIPIT_STATUS_RUNTIME,
                   "mpi transport: the program uses %zu message tags but this MPI allows tags up to %ld (MPI_TAG_UB)",
                   ntags, tag_ub);
        return NULL;
    }
    for (size_t i = 1; i < ntags; i++)
        if (tags[i - 1] >= tags[i]) {
            pipit__err(PIPIT_STATUS_INTERNAL, "mpi transport: the tag table is not sorted and unique (entry %zu)", i);
            return NULL;
        }
    mpi_transport *t = pipit__calloc(1, sizeof *t);
    if (!t) {
        pipit__err(PIPIT_STATUS_NOMEM, "mpi transport: out of memory");
        return NULL;
    }
    t->base.vt = &mpi_vt;
    t->W = W;
    t->rank = rank;
    t->timeout = pipit__transport_timeout();
    t->data_comm = t->abort_comm = t->bcast_comm = MPI_COMM_NULL;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->ntags = ntags;
    t->tags = pipit__malloc((ntags ? ntags : 1) * sizeof *t->tags);
    if (!t->tags) {
        pipit__err(PIPIT_STATUS_NOMEM, "mpi transport: out of memory");
        mpi_free(&t->base);
        return NULL;
    }
    if (ntags) memcpy(t->tags, tags, ntags * sizeof *tags);
    /* Collective: every process creates its transport in the same order. */
    if (dup_comm(&t->data_comm) || dup_comm(&t->abort_comm) || dup_comm(&t->bcast_comm)) {
        mpi_free(&t->base);
        return NULL;
    }
    if (pthread_create(&t->thread, NULL, progress_main, t) != 0) {
        pipit__err(PIPIT_STATUS_RUNTIME, "mpi transport: cannot start the progress thread");
        mpi_free(&t->base);
        return NULL;
    }
    t->thread_started = 1;
    return &t->base;
}

#else /* !PIPIT_HAVE_MPI */

pipit__transport *pipit__transport_mpi_new(int W, const uint64_t *tags, size_t ntags) {
    (void)W, (void)tags, (void)ntags;
    pipit__err(PIPIT_STATUS_RUNTIME, "mpi transport: this pipit was built without MPI (PIPIT_MPI=OFF)");
    return NULL;
}

#endif
