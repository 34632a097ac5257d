/*
 * transport_mpi.c — one world rank per MPI process (MPI_COMM_WORLD rank =
 * world rank). process_mpi.c has the MPI build's pipit_init & co.
 *
 * Design (measured on 2 cores, Open MPI 4.1.4, ob1 over vader and tcp:
 * docs/benchmarks.md "MPI transport"; docs/architecture.md §6):
 *
 *  - MPI_THREAD_MULTIPLE. The rank's own thread calls MPI directly: isend
 *    is MPI_Isend of the caller's buffer itself (zero-copy: the runtime
 *    keeps the slot until the fence), recv is MPI_Irecv straight into the
 *    caller's buffer. A thread that did every MPI call on behalf of the
 *    others would add a hand-off (a condition-variable wake-up) to every
 *    message; MULTIPLE costs Open MPI's internal locks (well under a µs).
 *  - Waiting (recv, fence, bcast) is low-latency: the rank polls its
 *    request with MPI_Test for SPIN_NS, then blocks in MPI_Waitany on it and
 *    a wake-up receive, as a raw MPI_Recv would block (Open MPI polls its
 *    networks there, yielding the core when the node is oversubscribed).
 *    Nothing sleeps while a receive is posted. Aborts, timeouts and lost
 *    peers reach a blocked rank as a message to itself on a communicator of
 *    its own (wake_comm), sent by the monitor thread.
 *  - The monitor thread: Open MPI here has no progress thread of its own
 *    ("OMPI progress: no"), so a message larger than the eager limit
 *    (rendezvous) moves only while someone in the sending process calls into
 *    MPI. While the rank computes with sends outstanding, the monitor calls
 *    MPI_Testsome, spinning for PROGRESS_SPIN_NS and then sleeping with a
 *    doubling back-off up to BACKOFF_MAX_NS (on 2 cores a busy poller would
 *    take a core from compute); from the moment the rank enters a wait
 *    (polling or blocked: its MPI calls move every request of the process)
 *    it leaves the progress to it. An isend wakes no one (a small one is
 *    tested at once and is usually done): the rank's kick, when it turns
 *    to compute, and the end of a wait with sends still moving signal the
 *    monitor. Waking it on every send cost TCP a third of its bandwidth at
 *    1 MiB and 8 µs a message (docs/benchmarks.md). The same thread
 *    receives the control messages (aborts, heartbeats) and sends this
 *    process's heartbeats.
 *  - Fail fast: every process sends a heartbeat to each peer it watches
 *    (every peer up to 64 processes, else its ring neighbours) every
 *    second; a peer silent for PIPIT_HEARTBEAT seconds (default 10; 0 off, else
 *    1 to 86400: pipit__heartbeat_limit) while
 *    its transport is open (it says goodbye when it closes) is lost — a cut
 *    link, a dead host, a frozen process. The monitor then prints which
 *    rank on which host was lost and ends this process (exit status 69):
 *    an MPI job cannot go on without one of its processes, and a rank
 *    blocked in MPI could not be woken otherwise. mpirun sees the exit and
 *    ends the job (docs/mpi.md: the options that make it give up on an
 *    unreachable daemon). The heartbeats are a thread of their own, so a
 *    long computation never looks like a lost peer.
 *  - A copying send (norms, losses: small host messages) copies into a
 *    cached transport buffer and returns; the monitor frees it when done.
 *  - Abort: a short message ("rank R failed: msg") to every other process on
 *    the control communicator; the monitor of each process takes it and
 *    wakes its waiting rank. The first message a process sees (or makes)
 *    wins and stays: reset is a no-op.
 *  - Data, control, wake-ups and broadcasts each have a dup of
 *    MPI_COMM_WORLD, so no tag can collide. MPI_Irecv into the exact size
 *    never overruns: a longer message is reported as truncated.
 *  - Device buffers (cuda backend; transport.h) travel through host memory:
 *    the send downloads into a send copy, a receive lands in a cached host
 *    buffer and is uploaded, so any MPI works, CUDA-aware or not.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/transport.h"

#ifdef PIPIT_HAVE_MPI
#include <mpi.h>

#define SPIN_NS 100000L              /* a waiting rank polls this long, then blocks in MPI */
#define PROGRESS_SPIN_NS 50000L      /* the monitor's busy-poll of outstanding sends before sleeping */
#define BACKOFF_MIN_NS 2000L         /* its first sleep */
#define BACKOFF_MAX_NS 200000L       /* its longest sleep between polls (0.2 ms) */
#define POLL_WAITING_S 0.02          /* while the rank waits, the monitor looks for aborts this often */
#define CACHE_MAX_BYTES (256u << 20) /* completed send buffers kept for reuse */
#define CACHE_MAX_COUNT 16
#define FREE_WAIT_S 5.0  /* free: how long outstanding sends may take */
#define ABORT_WAIT_S 2.0 /* abort: how long the notices may take to leave */
#define WATCH_ALL_MAX 64 /* up to this many processes every one watches every other */
#define EXIT_LOST_PEER 69
#define MSG_MAX 1024

enum { CTRL_ABORT = 0, CTRL_BEAT = 1, CTRL_BYE = 2 }; /* tags on ctrl_comm */
enum { WAKE_TAG = 0 };

typedef struct { /* a copying send: its buffer goes back to the cache */
    MPI_Request req;
    void *buf;
    size_t cap;
} pending;

typedef struct { /* an irecv, until its wait_recv (the rank thread's alone) */
    MPI_Request req;
    int src, mt;
    uint64_t tag;
    void *data;
    size_t n;
} zrecv;

typedef struct { /* an isend, until its fence */
    MPI_Request req;
    int dst;
    uint64_t tag;
    int done;
} zsend;

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
    MPI_Comm data_comm, ctrl_comm, wake_comm, bcast_comm;

    pthread_mutex_t mu; /* everything below that the monitor shares */
    pthread_cond_t cv;  /* wakes the monitor */
    pending *sends;
    int nsends, nsends_cap;
    zsend *zs;
    int nzs, nzs_cap;
    zrecv *zr; /* posted receives (irecv): the rank thread's, not the monitor's */
    int nzr, nzr_cap;
    MPI_Request *reqs; /* scratch for Testsome */
    int *idx, *at, nreqs_cap; /* Testsome's indices; what each scratch entry is */
    cached cache[CACHE_MAX_COUNT];
    int ncache;
    size_t cache_bytes;
    int stop;
    pthread_t thread;
    int thread_started;

    int aborted; /* failing rank + 1, 0 if none */
    char abort_msg[MSG_MAX];

    /* the rank thread inside wait_req (polling or blocked: either way its
     * MPI calls move every request of the process, so the monitor leaves
     * the sends alone instead of contending for MPI's locks and a core) */
    atomic_int in_wait;
    /* the rank thread blocked in MPI, and how to wake it */
    int waiting;
    double wait_deadline;
    int wake_sent;
    MPI_Request wake_req; /* a receive from ourselves on wake_comm, always posted */
    char wake_buf;

    /* control messages and heartbeats (the monitor's) */
    MPI_Request ctrl_req;
    char ctrl_buf[MSG_MAX];
    double lost_s, beat_s; /* 0: heartbeats off */
    double last_look;      /* when the monitor last looked at the peers */
    int nwatch;
    int *watch;          /* [nwatch] peers */
    double *heard;       /* [W] when a control message last came from each peer */
    unsigned char *gone; /* [W] the peer said goodbye */
    MPI_Request *beats;  /* [nwatch] the last heartbeat to each */
    char beat_byte;
    MPI_Request *abandoned; /* requests a failed wait left active: cancelled at free */
    int nabandoned, abandoned_cap;
} mpi_transport;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Spin-then-back-off waiting: call backoff_wait after each fruitless poll. */
typedef struct {
    double start;
    long sleep_ns;
} backoff;

static void backoff_init(backoff *b) {
    b->start = now_s();
    b->sleep_ns = 0;
}

static void backoff_wait(backoff *b) {
    if (b->sleep_ns == 0) {
        if ((now_s() - b->start) * 1e9 < PROGRESS_SPIN_NS) return;
        b->sleep_ns = BACKOFF_MIN_NS;
    }
    struct timespec ts = {0, b->sleep_ns};
    nanosleep(&ts, NULL);
    if (b->sleep_ns < BACKOFF_MAX_NS) b->sleep_ns = b->sleep_ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : b->sleep_ns * 2;
}

static const char *host_of(const mpi_transport *t, int rank) {
    return t->base.hosts && rank >= 0 && rank < t->W ? t->base.hosts[rank] : "?";
}

static pipit_status mpi_fail(const mpi_transport *t, int rc, const char *what, int peer) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
    if (peer < 0) return pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: MPI: %s failed: %s", t->rank, what, s);
    return pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: MPI: %s with rank %d (host %s) failed: %s", t->rank, what, peer,
                      host_of(t, peer), s);
}

static void abandon(mpi_transport *t, MPI_Request r) {
    if (r == MPI_REQUEST_NULL) return;
    pthread_mutex_lock(&t->mu);
    if (t->nabandoned == t->abandoned_cap) {
        int cap = t->abandoned_cap ? 2 * t->abandoned_cap : 8;
        MPI_Request *a = pipit__realloc(t->abandoned, (size_t)cap * sizeof *a);
        if (a) t->abandoned = a, t->abandoned_cap = cap;
    }
    if (t->nabandoned < t->abandoned_cap) t->abandoned[t->nabandoned++] = r; /* else leaked: the job is over */
    pthread_mutex_unlock(&t->mu);
}

/* ---------------------------------------------------------------- abort */

/* Sets the abort state (first message wins); returns 1 if this call set it. */
static int set_aborted_locked(mpi_transport *t, int rank, const char *text) {
    if (t->aborted) return 0;
    t->aborted = rank + 1;
    snprintf(t->abort_msg, sizeof t->abort_msg, "%s", text);
    pthread_cond_signal(&t->cv); /* the monitor wakes a waiting rank */
    return 1;
}

static int is_aborted(mpi_transport *t, char *why, size_t n) {
    pthread_mutex_lock(&t->mu);
    int a = t->aborted;
    if (a && why) snprintf(why, n, "%s", t->abort_msg);
    pthread_mutex_unlock(&t->mu);
    return a;
}

static void mpi_abort(pipit__transport *tt, int rank, const char *why) {
    mpi_transport *t = (mpi_transport *)tt;
    char text[MSG_MAX];
    snprintf(text, sizeof text, "rank %d failed: %s", rank, why ? why : "");
    pthread_mutex_lock(&t->mu);
    int first = set_aborted_locked(t, rank, text);
    pthread_mutex_unlock(&t->mu);
    if (!first) return; /* already aborted: the first message won */
    int len = (int)strlen(text) + 1;
    MPI_Request *r = pipit__calloc((size_t)t->W, sizeof *r);
    if (!r) return;
    int nr = 0;
    for (int p = 0; p < t->W; p++)
        if (p != t->rank && MPI_Isend(text, len, MPI_CHAR, p, CTRL_ABORT, t->ctrl_comm, &r[nr]) == MPI_SUCCESS) nr++;
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

/* ------------------------------------------------------------- waiting */

typedef enum { WAIT_OK = 0, WAIT_ABORTED, WAIT_TIMEOUT, WAIT_ERROR } wait_result;

/* Waits for *req: polls for SPIN_NS, then blocks in MPI until it completes
 * or the monitor wakes this thread (an abort, or `timeout` seconds since
 * the wait began). *rc: MPI's code when WAIT_ERROR (or an error in the
 * completed request's status). On anything but WAIT_OK the request is
 * still active: the caller cancels or abandons it. */
static wait_result wait_req_in(mpi_transport *t, MPI_Request *req, MPI_Status *st, double timeout, int *rc);
static int test_sends_locked(mpi_transport *t);

static wait_result wait_req(mpi_transport *t, MPI_Request *req, MPI_Status *st, double timeout, int *rc) {
    atomic_store_explicit(&t->in_wait, 1, memory_order_relaxed);
    wait_result w = wait_req_in(t, req, st, timeout, rc);
    atomic_store_explicit(&t->in_wait, 0, memory_order_relaxed);
    /* Sends still moving are moved once more here and otherwise left
     * listed: the rank's next wait moves them, and before the rank computes
     * the runtime hands them to the monitor (kick, exec.c's kick_sends).
     * No wake-up here: a wait is mostly followed by another transport call
     * (a collective's fence, the next receive), and a monitor woken then
     * only contends for MPI's lock (a 64 KiB all-to-all ran at 0.3-0.5x of
     * MPI_Alltoall with it on 2 loaded cores, 0.65-0.85x without:
     * docs/benchmarks.md §21). */
    pthread_mutex_lock(&t->mu);
    (void)test_sends_locked(t);
    pthread_mutex_unlock(&t->mu);
    return w;
}

static wait_result wait_req_in(mpi_transport *t, MPI_Request *req, MPI_Status *st, double timeout, int *rc) {
    double t0 = now_s();
    *rc = MPI_SUCCESS;
    for (unsigned iter = 1;; iter++) {
        int done = 0;
        *rc = MPI_Test(req, &done, st);
        if (*rc != MPI_SUCCESS) return WAIT_ERROR;
        if (done) return WAIT_OK;
        if ((iter & 63) == 0) {
            if (is_aborted(t, NULL, 0)) return WAIT_ABORTED;
            if ((now_s() - t0) * 1e9 > SPIN_NS) break;
        }
    }
    for (;;) {
        pthread_mutex_lock(&t->mu);
        if (t->aborted) {
            pthread_mutex_unlock(&t->mu);
            return WAIT_ABORTED;
        }
        if (now_s() - t0 > timeout) {
            pthread_mutex_unlock(&t->mu);
            return WAIT_TIMEOUT;
        }
        t->waiting = 1;
        t->wait_deadline = t0 + timeout;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        MPI_Request rs[2] = {*req, t->wake_req};
        MPI_Status sts[1];
        int which = MPI_UNDEFINED;
        *rc = MPI_Waitany(2, rs, &which, sts);
        *req = rs[0];
        t->wake_req = rs[1];
        pthread_mutex_lock(&t->mu);
        t->waiting = 0;
        if (which == 1) t->wake_sent = 0;
        pthread_mutex_unlock(&t->mu);
        if (which == 0) {
            if (st) *st = sts[0];
            return *rc == MPI_SUCCESS ? WAIT_OK : WAIT_ERROR;
        }
        if (*rc != MPI_SUCCESS && which != 1) return WAIT_ERROR;
        /* woken: post the next wake-up receive, then look why */
        if (MPI_Irecv(&t->wake_buf, 1, MPI_CHAR, t->rank, WAKE_TAG, t->wake_comm, &t->wake_req) != MPI_SUCCESS)
            t->wake_req = MPI_REQUEST_NULL; /* then Waitany blocks on the request alone: MPI's own failure */
    }
}

/* Cancels a receive that will not be waited for (abort, timeout); if it
 * matched already, gives its data a moment, else abandons it (*r stays
 * set: MPI may still write its buffer). */
static void cancel_recv(mpi_transport *t, MPI_Request *r) {
    if (*r == MPI_REQUEST_NULL) return;
    MPI_Cancel(r);
    double t0 = now_s();
    while (now_s() - t0 < 1.0) {
        int done = 0;
        if (MPI_Test(r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) {
            *r = MPI_REQUEST_NULL;
            return;
        }
    }
    abandon(t, *r);
}

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

/* Room for one more entry of a growable array of n entries of `size`
 * bytes: the array (moved, if it grew), or NULL when out of memory (the
 * old one stays). */
static void *grow(void *v, int n, int *cap, size_t size) {
    if (n < *cap) return v;
    int c = *cap ? 2 * *cap : 16;
    void *nv = pipit__realloc(v, (size_t)c * size);
    if (nv) *cap = c;
    return nv;
}

/* Tests the outstanding copying sends and isends once (those not taken by
 * a fence); returns how many remain. t->mu held. Scratch entry k of
 * t->reqs is copying send k (k < nsends), else the isend t->zs[at[k]]:
 * the map is made before any entry changes, so each completion marks the
 * very send MPI completed. */
static int test_sends_locked(mpi_transport *t) {
    int n = 0;
    for (int i = 0; i < t->nzs; i++) n += !t->zs[i].done;
    n += t->nsends;
    if (n == 0) return 0;
    if (n > t->nreqs_cap) {
        int c = n * 2;
        MPI_Request *r = pipit__realloc(t->reqs, (size_t)c * sizeof *r);
        if (r) t->reqs = r;
        int *x = r ? pipit__realloc(t->idx, (size_t)c * sizeof *x) : NULL;
        if (x) t->idx = x;
        int *a = x ? pipit__realloc(t->at, (size_t)c * sizeof *a) : NULL;
        if (a) t->at = a;
        if (!a) return n; /* no scratch: try again later */
        t->nreqs_cap = c;
    }
    int k = 0;
    for (int i = 0; i < t->nsends; i++) t->at[k] = -1, t->reqs[k++] = t->sends[i].req;
    for (int i = 0; i < t->nzs; i++)
        if (!t->zs[i].done) t->at[k] = i, t->reqs[k++] = t->zs[i].req;
    int outcount = 0;
    if (MPI_Testsome(k, t->reqs, &outcount, t->idx, MPI_STATUSES_IGNORE) != MPI_SUCCESS || outcount == MPI_UNDEFINED)
        return n;
    for (int c = 0; c < outcount; c++) {
        int j = t->idx[c];
        if (j < t->nsends) {
            give_buffer_locked(t, t->sends[j].buf, t->sends[j].cap);
            t->sends[j].buf = NULL;
        } else {
            t->zs[t->at[j]].done = 1;
            t->zs[t->at[j]].req = MPI_REQUEST_NULL;
        }
    }
    int j = 0;
    for (int i = 0; i < t->nsends; i++)
        if (t->sends[i].buf) t->sends[j++] = t->sends[i];
    t->nsends = j;
    return n - outcount;
}

/* The MPI tag of a pipit tag: its index in the sorted table. */
static int mpi_tag(const mpi_transport *t, uint64_t tag) {
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

/* Checksums of PIPIT_DEBUG_SENDS travel on the tags after the table. */
static int sum_tag(const mpi_transport *t, int mt) { return mt + (int)t->ntags; }

static pipit_status check_msg(mpi_transport *t, int self, int peer, uint64_t tag, size_t n, const char *what,
                              int *mt) {
    if (self != t->rank)
        return pipit__err(PIPIT_STATUS_INTERNAL, "mpi transport: %s as world rank %d in the process of rank %d",
                          what, self, t->rank);
    if (peer < 0 || peer >= t->W || peer == self)
        return pipit__err(PIPIT_STATUS_INTERNAL, "mpi transport: rank %d: %s with rank %d (world of %d)", self,
                          what, peer, t->W);
    if ((*mt = mpi_tag(t, tag)) < 0)
        return pipit__err(PIPIT_STATUS_INTERNAL, "rank %d: %s with rank %d, tag 0x%016llx: not in the tag table", self,
                          what, peer, (unsigned long long)tag);
    if (n > INT_MAX)
        return pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: message of %zu bytes with rank %d (the limit is %d)", self, n,
                          peer, INT_MAX);
    return PIPIT_STATUS_OK;
}

/* MPI_Isend of a copy of data; the monitor returns the copy to the cache. */
static pipit_status send_copy(mpi_transport *t, int dst, int mt, uint64_t tag, const void *data, size_t n) {
    size_t cap;
    void *buf = take_buffer(t, n, &cap);
    if (!buf)
        return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory sending %zu bytes to rank %d", t->rank, n, dst);
    pipit__transport_out(&t->base, tag, buf, data, n); /* device memory: downloaded into the send copy */
    MPI_Request r;
    int rc = MPI_Isend(buf, (int)n, MPI_BYTE, dst, mt, t->data_comm, &r);
    if (rc != MPI_SUCCESS) {
        pipit__free(buf);
        return mpi_fail(t, rc, "MPI_Isend", dst);
    }
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE); /* eager: usually complete already */
    pthread_mutex_lock(&t->mu);
    pending *room = done ? NULL : grow(t->sends, t->nsends, &t->nsends_cap, sizeof *t->sends);
    if (done) {
        give_buffer_locked(t, buf, cap);
    } else if (room) {
        t->sends = room;
        t->sends[t->nsends++] = (pending){r, buf, cap};
        pthread_cond_signal(&t->cv);
    } else {
        pthread_mutex_unlock(&t->mu);
        MPI_Wait(&r, MPI_STATUS_IGNORE); /* no room to track it: finish it here */
        pthread_mutex_lock(&t->mu);
        give_buffer_locked(t, buf, cap);
    }
    pthread_mutex_unlock(&t->mu);
    return PIPIT_STATUS_OK;
}

/* PIPIT_DEBUG_SENDS: the checksum of what is sent, on the tag after the
 * table (every message carries one: a receiver cannot tell copies from
 * zero-copy sends). */
static pipit_status send_sum(mpi_transport *t, int dst, int mt, const void *data, size_t n) {
    uint64_t sum = pipit__checksum(data, n);
    return send_copy(t, dst, sum_tag(t, mt), PIPIT_TAG_NORM /* host memory */, &sum, sizeof sum);
}

static pipit_status mpi_send(pipit__transport *tt, int src, int dst, uint64_t tag, const void *data, size_t n) {
    mpi_transport *t = (mpi_transport *)tt;
    int mt;
    pipit_status s = check_msg(t, src, dst, tag, n, "send", &mt);
    if (!s) s = send_copy(t, dst, mt, tag, data, n);
    if (!s && tt->debug_sends && !(tt->to_host && pipit__tag_on_device(tag))) s = send_sum(t, dst, mt, data, n);
    return s;
}

static pipit_status mpi_isend(pipit__transport *tt, int src, int dst, uint64_t tag, const void *data, size_t n) {
    mpi_transport *t = (mpi_transport *)tt;
    int mt;
    pipit_status s = check_msg(t, src, dst, tag, n, "send", &mt);
    if (s) return s;
    pthread_mutex_lock(&t->mu);
    zsend *room = grow(t->zs, t->nzs, &t->nzs_cap, sizeof *t->zs);
    if (room) t->zs = room;
    pthread_mutex_unlock(&t->mu);
    if (!room) return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory sending to rank %d", src, dst);
    zsend z = {MPI_REQUEST_NULL, dst, tag, 0};
    if (tt->to_host && pipit__tag_on_device(tag)) { /* device memory: a host copy, complete at once */
        s = send_copy(t, dst, mt, tag, data, n);
        z.done = 1;
    } else {
        int rc = MPI_Isend(data, (int)n, MPI_BYTE, dst, mt, t->data_comm, &z.req);
        if (rc != MPI_SUCCESS) return mpi_fail(t, rc, "MPI_Isend", dst);
        /* a small (eager) message is usually complete already: then the
         * monitor need not wake for it */
        MPI_Test(&z.req, &z.done, MPI_STATUS_IGNORE);
        if (tt->debug_sends) s = send_sum(t, dst, mt, data, n);
    }
    if (s) {
        abandon(t, z.req);
        return s;
    }
    pthread_mutex_lock(&t->mu);
    t->zs[t->nzs++] = z; /* moved by the rank's next wait, or by the monitor once kicked */
    pthread_mutex_unlock(&t->mu);
    return PIPIT_STATUS_OK;
}

/* The rank goes computing: sends still moving are the monitor's to move. */
static void mpi_kick(pipit__transport *tt, int src) {
    mpi_transport *t = (mpi_transport *)tt;
    (void)src;
    pthread_mutex_lock(&t->mu);
    if (test_sends_locked(t) > 0) pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static pipit_status mpi_fence(pipit__transport *tt, int src, int dst, uint64_t tag) {
    mpi_transport *t = (mpi_transport *)tt;
    pthread_mutex_lock(&t->mu);
    int i = 0;
    while (i < t->nzs && !(t->zs[i].dst == dst && t->zs[i].tag == tag)) i++;
    if (i == t->nzs) {
        pthread_mutex_unlock(&t->mu);
        return pipit__err(PIPIT_STATUS_INTERNAL,
                          "rank %d: fence for a send to rank %d (tag 0x%016llx) that is not outstanding", src, dst,
                          (unsigned long long)tag);
    }
    zsend z = t->zs[i]; /* the request is ours now: the monitor no longer tests it */
    t->zs[i] = t->zs[--t->nzs];
    pthread_mutex_unlock(&t->mu);
    if (z.done) return PIPIT_STATUS_OK;
    int rc;
    char why[MSG_MAX];
    switch (wait_req(t, &z.req, NULL, t->timeout, &rc)) {
    case WAIT_OK: return PIPIT_STATUS_OK;
    case WAIT_ERROR: abandon(t, z.req); return mpi_fail(t, rc, "MPI_Isend", dst);
    case WAIT_ABORTED: abandon(t, z.req); is_aborted(t, why, sizeof why); return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
    case WAIT_TIMEOUT: break;
    }
    abandon(t, z.req);
    snprintf(why, sizeof why,
             "rank %d: rank %d (host %s) has not received its message for %g s (hung? the limit is PIPIT_TIMEOUT)", src,
             dst, host_of(t, dst), t->timeout);
    mpi_abort(tt, src, why);
    return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
}

/* ---------------------------------------------------------------- recv */

static pipit_status recv_failed(mpi_transport *t, wait_result w, int rc, int dst, int src, size_t n) {
    char why[MSG_MAX];
    if (w == WAIT_ABORTED) {
        is_aborted(t, why, sizeof why);
        return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
    }
    if (w == WAIT_TIMEOUT) {
        snprintf(why, sizeof why, "rank %d: no message from rank %d for %g s (hung? the limit is PIPIT_TIMEOUT)", dst,
                 src, t->timeout);
        mpi_abort(&t->base, dst, why); /* so every process reports it */
        return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
    }
    int cls = rc;
    MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE)
        return pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: message from rank %d is larger than the %zu bytes expected",
                          dst, src, n);
    return mpi_fail(t, rc, "MPI_Irecv", src);
}

/* PIPIT_DEBUG_SENDS: the sender's checksum of what it meant to send. */
static pipit_status check_sum(mpi_transport *t, int dst, int src, int mt, uint64_t tag, const void *got, size_t n) {
    uint64_t sum = 0;
    MPI_Request r;
    MPI_Status st;
    int rc = MPI_Irecv(&sum, (int)sizeof sum, MPI_BYTE, src, sum_tag(t, mt), t->data_comm, &r);
    wait_result w = rc == MPI_SUCCESS ? wait_req(t, &r, &st, t->timeout, &rc) : WAIT_ERROR;
    if (w) {
        cancel_recv(t, &r);
        return recv_failed(t, w, rc, dst, src, sizeof sum);
    }
    if (sum != pipit__checksum(got, n))
        return pipit__err(PIPIT_STATUS_RUNTIME,
                          "rank %d: the %zu bytes from rank %d (tag 0x%016llx) changed in flight: the sender wrote "
                          "its buffer before the send completed (PIPIT_DEBUG_SENDS)",
                          dst, n, src, (unsigned long long)tag);
    return PIPIT_STATUS_OK;
}

static pipit_status mpi_recv(pipit__transport *tt, int dst, int src, uint64_t tag, void *data, size_t n) {
    mpi_transport *t = (mpi_transport *)tt;
    int mt;
    pipit_status s = check_msg(t, dst, src, tag, n, "receive", &mt);
    if (s) return s;
    char why[MSG_MAX];
    if (is_aborted(t, why, sizeof why)) return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
    /* Device memory is received into a host buffer (from the send cache),
     * then uploaded: any MPI works, CUDA-aware or not. */
    size_t cap = 0;
    void *stage = NULL;
    if (tt->from_host && pipit__tag_on_device(tag) && !(stage = take_buffer(t, n, &cap)))
        return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory receiving %zu bytes from rank %d", dst, n, src);
    void *into = stage ? stage : data;
    MPI_Request r;
    MPI_Status st;
    int rc = MPI_Irecv(into, (int)n, MPI_BYTE, src, mt, t->data_comm, &r);
    wait_result w = rc == MPI_SUCCESS ? wait_req(t, &r, &st, t->timeout, &rc) : WAIT_ERROR;
    int count = 0;
    if (!w) MPI_Get_count(&st, MPI_BYTE, &count);
    if (w) {
        cancel_recv(t, &r);
        s = recv_failed(t, w, rc, dst, src, n);
    } else if ((size_t)count != n) {
        s = pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: message from rank %d has %d bytes, expected %zu", dst, src,
                       count, n);
    } else if (tt->debug_sends && !stage) {
        s = check_sum(t, dst, src, mt, tag, into, n);
    }
    if (stage) {
        if (!s) pipit__transport_in(tt, tag, data, stage, n);
        pthread_mutex_lock(&t->mu);
        if (r == MPI_REQUEST_NULL) give_buffer_locked(t, stage, cap); /* else MPI may still write it: leaked */
        pthread_mutex_unlock(&t->mu);
    }
    return s;
}

static pipit_status mpi_irecv(pipit__transport *tt, int dst, int src, uint64_t tag, void *data, size_t n) {
    mpi_transport *t = (mpi_transport *)tt;
    int mt;
    pipit_status s = check_msg(t, dst, src, tag, n, "receive", &mt);
    if (s) return s;
    if (tt->from_host && pipit__tag_on_device(tag))
        return pipit__err(PIPIT_STATUS_INTERNAL, "rank %d: a posted receive of device memory (tag 0x%016llx)", dst,
                          (unsigned long long)tag);
    zrecv *room = grow(t->zr, t->nzr, &t->nzr_cap, sizeof *t->zr);
    if (!room) return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory receiving from rank %d", dst, src);
    t->zr = room;
    zrecv z = {MPI_REQUEST_NULL, src, mt, tag, data, n};
    int rc = MPI_Irecv(data, (int)n, MPI_BYTE, src, mt, t->data_comm, &z.req);
    if (rc != MPI_SUCCESS) return mpi_fail(t, rc, "MPI_Irecv", src);
    t->zr[t->nzr++] = z;
    return PIPIT_STATUS_OK;
}

static pipit_status mpi_wait_recv(pipit__transport *tt, int dst, int src, uint64_t tag) {
    mpi_transport *t = (mpi_transport *)tt;
    int i = 0;
    while (i < t->nzr && !(t->zr[i].src == src && t->zr[i].tag == tag)) i++;
    if (i == t->nzr)
        return pipit__err(PIPIT_STATUS_INTERNAL, "rank %d: wait for a receive from rank %d (tag 0x%016llx) never posted",
                          dst, src, (unsigned long long)tag);
    zrecv z = t->zr[i];
    t->zr[i] = t->zr[--t->nzr];
    MPI_Status st;
    int rc, count = 0;
    wait_result w = wait_req(t, &z.req, &st, t->timeout, &rc);
    if (w) {
        cancel_recv(t, &z.req);
        return recv_failed(t, w, rc, dst, src, z.n);
    }
    MPI_Get_count(&st, MPI_BYTE, &count);
    if ((size_t)count != z.n)
        return pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: message from rank %d has %d bytes, expected %zu", dst, src,
                          count, z.n);
    return tt->debug_sends ? check_sum(t, dst, src, z.mt, tag, z.data, z.n) : PIPIT_STATUS_OK;
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
        if (rc != MPI_SUCCESS) return mpi_fail(t, rc, "MPI_Ibcast", root);
        wait_result w = wait_req(t, &r, NULL, t->timeout, &rc);
        if (w) abandon(t, r); /* a collective request cannot be cancelled: the job is over */
        if (w == WAIT_ERROR) return mpi_fail(t, rc, "MPI_Ibcast", root);
        if (w == WAIT_ABORTED) {
            is_aborted(t, why, sizeof why);
            return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
        }
        if (w == WAIT_TIMEOUT) {
            snprintf(why, sizeof why,
                     "rank %d: broadcast from rank %d not done after %g s (hung? the limit is PIPIT_TIMEOUT)", t->rank,
                     root, t->timeout);
            mpi_abort(tt, t->rank, why);
            return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
        }
        p += chunk;
        n -= chunk;
    } while (n > 0);
    return PIPIT_STATUS_OK;
}

/* -------------------------------------------------------------- monitor */

/* A peer that has been silent too long: say who, where, and end. */
static void lost_peer(const mpi_transport *t, int peer, double silent) {
    char text[512];
    int len = snprintf(text, sizeof text,
                       "pipit: rank %d (host %s) lost rank %d (host %s): no word from it for %.1f s (the limit is "
                       "PIPIT_HEARTBEAT=%g s): a cut link, a dead host or a frozen process; ending this process\n",
                       t->rank, host_of(t, t->rank), peer, host_of(t, peer), silent, t->lost_s);
    if (len > 0 && write(2, text, (size_t)PIPIT_MIN(len, (int)sizeof text - 1)) < 0) len = 0;
    _exit(EXIT_LOST_PEER); /* the rank may be blocked in MPI: nothing else can end it */
}

/* One heartbeat to every watched peer whose last one has left. t->mu held. */
static void send_beats_locked(mpi_transport *t) {
    for (int i = 0; i < t->nwatch; i++) {
        int p = t->watch[i], done = 1;
        if (t->gone[p]) continue;
        if (t->beats[i] != MPI_REQUEST_NULL) MPI_Test(&t->beats[i], &done, MPI_STATUS_IGNORE);
        if (done) MPI_Isend(&t->beat_byte, 1, MPI_CHAR, p, CTRL_BEAT, t->ctrl_comm, &t->beats[i]);
    }
}

/* Takes every control message that has arrived: aborts, heartbeats,
 * goodbyes. t->mu held. */
static void poll_ctrl_locked(mpi_transport *t, double now) {
    for (;;) {
        int done = 0;
        MPI_Status st;
        if (t->ctrl_req == MPI_REQUEST_NULL || MPI_Test(&t->ctrl_req, &done, &st) != MPI_SUCCESS || !done) return;
        int src = st.MPI_SOURCE;
        if (src >= 0 && src < t->W) t->heard[src] = now;
        if (st.MPI_TAG == CTRL_ABORT) {
            t->ctrl_buf[MSG_MAX - 1] = 0;
            set_aborted_locked(t, src, t->ctrl_buf);
        } else if (st.MPI_TAG == CTRL_BYE && src >= 0 && src < t->W) {
            t->gone[src] = 1;
        }
        if (MPI_Irecv(t->ctrl_buf, MSG_MAX, MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG, t->ctrl_comm, &t->ctrl_req) !=
            MPI_SUCCESS)
            t->ctrl_req = MPI_REQUEST_NULL;
    }
}

/* A peer silent for lost_s is lost. If this thread itself did not run for
 * a while (an overloaded machine), the peers' silence over that gap is
 * not theirs: it is forgiven. */
static void check_peers_locked(mpi_transport *t, double now) {
    double gap = now - t->last_look;
    t->last_look = now;
    for (int i = 0; gap > 2 * t->beat_s && i < t->nwatch; i++) t->heard[t->watch[i]] += gap;
    for (int i = 0; t->lost_s > 0 && i < t->nwatch; i++) {
        int p = t->watch[i];
        if (!t->gone[p] && now - t->heard[p] > t->lost_s) lost_peer(t, p, now - t->heard[p]);
    }
}

/* A rank blocked in MPI that must look up (an abort, its deadline): a
 * message to itself ends its MPI_Waitany. t->mu held. */
static void wake_waiter_locked(mpi_transport *t, double now) {
    if (!t->waiting || t->wake_sent || !(t->aborted || now >= t->wait_deadline)) return;
    MPI_Request r;
    if (MPI_Isend(&t->beat_byte, 1, MPI_CHAR, t->rank, WAKE_TAG, t->wake_comm, &r) == MPI_SUCCESS) {
        MPI_Request_free(&r);
        t->wake_sent = 1;
    }
}

static void sleep_until_locked(mpi_transport *t, double when) {
    double secs = when - now_s();
    if (secs <= 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double whole = (double)(time_t)secs;
    ts.tv_sec += (time_t)secs;
    ts.tv_nsec += (long)((secs - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&t->cv, &t->mu, &ts);
}

static void *monitor_main(void *arg) {
    mpi_transport *t = arg;
    backoff b;
    backoff_init(&b);
    double next_beat = 0;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        double now = now_s();
        if (t->beat_s > 0 && now >= next_beat) {
            send_beats_locked(t);
            next_beat = now + t->beat_s;
        }
        poll_ctrl_locked(t, now);
        check_peers_locked(t, now);
        wake_waiter_locked(t, now);
        /* sends move while the rank computes; while it waits in MPI, it moves them */
        if (!t->waiting && !atomic_load_explicit(&t->in_wait, memory_order_relaxed) && test_sends_locked(t) > 0) {
            pthread_mutex_unlock(&t->mu);
            backoff_wait(&b);
            pthread_mutex_lock(&t->mu);
            continue;
        }
        double until = t->beat_s > 0 ? next_beat : now + 3600;
        if (t->waiting) until = PIPIT_MIN(until, now + POLL_WAITING_S);
        sleep_until_locked(t, until);
        backoff_init(&b);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* An integer control variable of the MPI library (MPI_T), by name: 1 and
 * *v if this MPI has it. */
static int mpi_int_cvar(const char *name, int *v) {
    int level = MPI_THREAD_SINGLE, provided, idx, count, ok = 0;
    /* Ask MPI_T for the level MPI already runs at: Open MPI records the
     * level MPI_T_init_thread asks for as the process's, and a lower one
     * would turn its locks off under pipit's threads (and fail the next
     * transport's MPI_THREAD_MULTIPLE check). */
    MPI_Query_thread(&level);
    if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) return 0;
    MPI_T_cvar_handle h;
    if (MPI_T_cvar_get_index(name, &idx) == MPI_SUCCESS) {
        char nm[128], desc[8];
        int nl = sizeof nm, dl = sizeof desc, verb, bind, scope;
        MPI_Datatype dt;
        MPI_T_enum en;
        if (MPI_T_cvar_get_info(idx, nm, &nl, &verb, &dt, &en, desc, &dl, &bind, &scope) == MPI_SUCCESS &&
            dt == MPI_INT && bind == MPI_T_BIND_NO_OBJECT &&
            MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS) {
            ok = count == 1 && MPI_T_cvar_read(h, v) == MPI_SUCCESS;
            MPI_T_cvar_handle_free(&h);
        }
    }
    MPI_T_finalize();
    return ok;
}

/* The heartbeats must outlast the keepalive of Open MPI's daemons
 * (docs/mpi.md, "When a host is lost"): on a cut link the daemons must
 * give up first, or the processes' last words to mpirun fill the dead
 * connection and mpirun outlives its job. Only across hosts (one host has
 * no daemon connection to lose); said once, by process 0, when the
 * library's oob_tcp_keepalive_* variables say the heartbeat is shorter or
 * the keepalives are off. */
static void warn_keepalive(const mpi_transport *t) {
    int hosts = 0;
    for (int r = 0; r < t->W && hosts < 2; r++) hosts += r == 0 || strcmp(t->base.hosts[r], t->base.hosts[0]) != 0;
    int time_s, intvl_s = 0, probes = 0;
    if (t->rank != 0 || t->lost_s <= 0 || hosts < 2 || !mpi_int_cvar("oob_tcp_keepalive_time", &time_s)) return;
    char text[768];
    int len;
    if (time_s <= 0) {
        len = snprintf(text, sizeof text,
                       "pipit: warning: PIPIT_HEARTBEAT=%g s, but the keepalives of Open MPI's daemons are off "
                       "(oob_tcp_keepalive_time %d): on a cut link mpirun may outlive its job; pass mpirun --mca "
                       "oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 "
                       "(docs/mpi.md, \"When a host is lost\")\n",
                       t->lost_s, time_s);
    } else {
        if (!mpi_int_cvar("oob_tcp_keepalive_intvl", &intvl_s) || !mpi_int_cvar("oob_tcp_keepalive_probes", &probes))
            return;
        double keepalive = (double)time_s + (double)intvl_s * (double)probes;
        if (t->lost_s > keepalive) return;
        len = snprintf(text, sizeof text,
                       "pipit: warning: PIPIT_HEARTBEAT=%g s is not longer than the keepalive of Open MPI's daemons "
                       "(oob_tcp_keepalive_time %d + oob_tcp_keepalive_probes %d x oob_tcp_keepalive_intvl %d = %g "
                       "s), which it must outlast: on a cut link the processes end before the daemons notice and "
                       "mpirun may outlive its job; raise PIPIT_HEARTBEAT above %g s or shorten the keepalives "
                       "(docs/mpi.md, \"When a host is lost\": mpirun --mca oob_tcp_keepalive_time 2 --mca "
                       "oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 gives 5 s)\n",
                       t->lost_s, time_s, probes, intvl_s, keepalive, keepalive);
    }
    if (len > 0 && write(2, text, (size_t)PIPIT_MIN(len, (int)sizeof text - 1)) < 0) len = 0;
}

/* Every other process up to WATCH_ALL_MAX of them, else the ring
 * neighbours and the process opposite: any cut between hosts separates
 * some watched pair, and every process on the far side then ends itself
 * or is ended by its local daemon. */
static pipit_status pick_watch(mpi_transport *t) {
    int cand[4] = {t->rank - 1, t->rank + 1, t->rank + t->W / 2, t->rank - t->W / 2};
    t->watch = pipit__malloc(sizeof *t->watch * (size_t)t->W);
    t->beats = pipit__malloc(sizeof *t->beats * (size_t)t->W);
    t->heard = pipit__malloc(sizeof *t->heard * (size_t)t->W);
    t->gone = pipit__calloc((size_t)t->W, 1);
    if (!t->watch || !t->beats || !t->heard || !t->gone) return pipit__err(PIPIT_STATUS_NOMEM, "mpi transport: out of memory");
    double now = now_s();
    for (int p = 0; p < t->W; p++) t->heard[p] = now;
    t->last_look = now;
    for (int p = 0; t->W <= WATCH_ALL_MAX && p < t->W; p++)
        if (p != t->rank) t->watch[t->nwatch++] = p;
    for (int i = 0; t->W > WATCH_ALL_MAX && i < 4; i++) {
        int p = (cand[i] % t->W + t->W) % t->W, seen = p == t->rank;
        for (int j = 0; j < t->nwatch; j++) seen |= t->watch[j] == p;
        if (!seen) t->watch[t->nwatch++] = p;
    }
    for (int i = 0; i < t->nwatch; i++) t->beats[i] = MPI_REQUEST_NULL;
    return PIPIT_STATUS_OK;
}

/* ---------------------------------------------------------------- life */

/* Cancels and releases a request nobody will wait for. */
static void drop_request(MPI_Request *r) {
    if (*r == MPI_REQUEST_NULL) return;
    MPI_Cancel(r);
    MPI_Request_free(r);
}

/* Goodbye to the peers that watch us, so our silence is not a loss. */
static void say_bye(mpi_transport *t) {
    for (int i = 0; t->ctrl_comm != MPI_COMM_NULL && i < t->nwatch; i++) {
        MPI_Request r;
        if (MPI_Isend(&t->beat_byte, 1, MPI_CHAR, t->watch[i], CTRL_BYE, t->ctrl_comm, &r) == MPI_SUCCESS)
            MPI_Request_free(&r);
    }
}

/* Outstanding sends get a while (a peer still receiving), then are dropped
 * (a peer that aborted will never take them). */
static void finish_sends(mpi_transport *t) {
    double t0 = now_s();
    backoff b;
    backoff_init(&b);
    pthread_mutex_lock(&t->mu);
    while (test_sends_locked(t) > 0 && now_s() - t0 < FREE_WAIT_S) {
        pthread_mutex_unlock(&t->mu);
        backoff_wait(&b);
        pthread_mutex_lock(&t->mu);
    }
    for (int i = 0; i < t->nsends; i++) drop_request(&t->sends[i].req); /* its buffer may still be read: leaked */
    for (int i = 0; i < t->nzs; i++) drop_request(&t->zs[i].req);
    for (int i = 0; i < t->nzr; i++) drop_request(&t->zr[i].req); /* a failed step's posted receives */
    t->nzr = 0;
    for (int i = 0; i < t->nabandoned; i++) drop_request(&t->abandoned[i]);
    for (int i = 0; t->beats && i < t->nwatch; i++) drop_request(&t->beats[i]);
    t->nsends = t->nzs = t->nabandoned = 0;
    for (int i = 0; i < t->ncache; i++) pipit__free(t->cache[i].buf);
    t->ncache = 0;
    pthread_mutex_unlock(&t->mu);
}

static void mpi_free(pipit__transport *tt) {
    mpi_transport *t = (mpi_transport *)tt;
    if (!t) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) say_bye(t);
    if (t->thread_started) {
        pthread_mutex_lock(&t->mu);
        t->stop = 1;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
    }
    if (!fin) {
        finish_sends(t);
        drop_request(&t->wake_req);
        drop_request(&t->ctrl_req);
        /* ctrl_comm is kept until MPI_Finalize: a peer's heartbeat may still
         * be on its way, and a freed communicator's id can be given to a
         * new one, which would then receive it */
        MPI_Comm *comms[] = {&t->data_comm, &t->wake_comm, &t->bcast_comm};
        for (size_t i = 0; i < sizeof comms / sizeof comms[0]; i++)
            if (*comms[i] != MPI_COMM_NULL) MPI_Comm_free(comms[i]);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    pipit__free(t->sends);
    pipit__free(t->zs);
    pipit__free(t->zr);
    pipit__free(t->reqs);
    pipit__free(t->idx);
    pipit__free(t->at);
    pipit__free(t->tags);
    pipit__free(t->watch);
    pipit__free(t->beats);
    pipit__free(t->heard);
    pipit__free(t->gone);
    pipit__free(t->abandoned);
    pipit__free(t->base.hosts);
    pipit__free(t);
}

static const pipit__transport_i mpi_vt = {mpi_send,  mpi_isend, mpi_fence, mpi_recv,
                                          mpi_abort, mpi_reset, mpi_bcast, mpi_free,
                                          mpi_kick,  mpi_irecv, mpi_wait_recv};

static pipit_status dup_comm(mpi_transport *t, MPI_Comm *c) {
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, c);
    if (rc != MPI_SUCCESS) return mpi_fail(t, rc, "MPI_Comm_dup", -1);
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    return PIPIT_STATUS_OK;
}

/* Every process's host name, for messages and for which ranks share a node. */
static pipit_status gather_hosts(mpi_transport *t) {
    t->base.hosts = pipit__calloc((size_t)t->W, sizeof *t->base.hosts);
    if (!t->base.hosts) return pipit__err(PIPIT_STATUS_NOMEM, "mpi transport: out of memory");
    char mine[PIPIT_HOST_MAX];
    pipit__host_label(mine, sizeof mine);
    int rc = MPI_Allgather(mine, PIPIT_HOST_MAX, MPI_CHAR, t->base.hosts, PIPIT_HOST_MAX, MPI_CHAR, t->data_comm);
    return rc == MPI_SUCCESS ? PIPIT_STATUS_OK : mpi_fail(t, rc, "MPI_Allgather (host names)", -1);
}

static pipit_status check_mpi(int W, const uint64_t *tags, size_t ntags) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (!inited || fin)
        return pipit__err(PIPIT_STATUS_RUNTIME, "mpi transport: MPI is not initialised (start under mpirun; pipit_init)");
    int level = 0;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE)
        return pipit__err(PIPIT_STATUS_RUNTIME,
                          "mpi transport: MPI was initialised without MPI_THREAD_MULTIPLE (level %d); let pipit_init "
                          "initialise it, or ask MPI_Init_thread for MPI_THREAD_MULTIPLE",
                          level);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (W != size)
        return pipit__err(PIPIT_STATUS_RUNTIME,
                          "mpi transport: the program has %d world ranks but mpirun started %d processes", W, size);
    void *attr = NULL;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag);
    long tag_ub = flag && attr ? (long)*(int *)attr : 32767; /* the standard's minimum */
    long long need = (long long)ntags * (pipit__debug_sends() ? 2 : 1);
    if (need > 0 && need - 1 > (long long)tag_ub)
        return pipit__err(PIPIT_STATUS_RUNTIME,
                          "mpi transport: the program uses %lld message tags but this MPI allows tags up to %ld "
                          "(MPI_TAG_UB)",
                          need, tag_ub);
    for (size_t i = 1; i < ntags; i++)
        if (tags[i - 1] >= tags[i])
            return pipit__err(PIPIT_STATUS_INTERNAL, "mpi transport: the tag table is not sorted and unique (entry %zu)", i);
    return PIPIT_STATUS_OK;
}

/* Collective: every process creates its transports in the same order. */
static pipit_status open_comms(mpi_transport *t) {
    pipit_status s = PIPIT_STATUS_OK;
    MPI_Comm *comms[] = {&t->data_comm, &t->ctrl_comm, &t->wake_comm, &t->bcast_comm};
    for (size_t i = 0; !s && i < sizeof comms / sizeof comms[0]; i++) s = dup_comm(t, comms[i]);
    if (!s) s = gather_hosts(t);
    if (!s) warn_keepalive(t);
    if (!s) s = pick_watch(t);
    if (!s && (MPI_Irecv(&t->wake_buf, 1, MPI_CHAR, t->rank, WAKE_TAG, t->wake_comm, &t->wake_req) != MPI_SUCCESS ||
               MPI_Irecv(t->ctrl_buf, MSG_MAX, MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG, t->ctrl_comm, &t->ctrl_req) !=
                   MPI_SUCCESS))
        s = pipit__err(PIPIT_STATUS_RUNTIME, "mpi transport: cannot post the control receives");
    return s;
}

pipit__transport *pipit__transport_mpi_new(int W, const uint64_t *tags, size_t ntags) {
    double lost_s;
    if (check_mpi(W, tags, ntags) || pipit__heartbeat_limit(&lost_s)) return NULL; /* the message names PIPIT_HEARTBEAT */
    mpi_transport *t = pipit__calloc(1, sizeof *t);
    if (!t) {
        pipit__err(PIPIT_STATUS_NOMEM, "mpi transport: out of memory");
        return NULL;
    }
    t->base.vt = &mpi_vt;
    t->base.debug_sends = pipit__debug_sends();
    t->W = W;
    MPI_Comm_rank(MPI_COMM_WORLD, &t->rank);
    t->timeout = pipit__transport_timeout();
    t->lost_s = lost_s;
    t->beat_s = t->lost_s > 0 ? PIPIT_MIN(1.0, t->lost_s / 4) : 0;
    t->data_comm = t->ctrl_comm = t->wake_comm = t->bcast_comm = MPI_COMM_NULL;
    t->wake_req = t->ctrl_req = MPI_REQUEST_NULL;
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca; /* timed waits on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    t->ntags = ntags;
    t->tags = pipit__malloc((ntags ? ntags : 1) * sizeof *t->tags);
    if (!t->tags) {
        pipit__err(PIPIT_STATUS_NOMEM, "mpi transport: out of memory");
        mpi_free(&t->base);
        return NULL;
    }
    if (ntags) memcpy(t->tags, tags, ntags * sizeof *tags);
    if (open_comms(t)) {
        mpi_free(&t->base);
        return NULL;
    }
    if (pthread_create(&t->thread, NULL, monitor_main, t) != 0) {
        pipit__err(PIPIT_STATUS_RUNTIME, "mpi transport: cannot start the monitor thread");
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
