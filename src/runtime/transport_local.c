/*
 * transport_local.c — ranks are threads of one process. Each destination
 * rank has a mailbox (mutex, condition variable, list of messages). A send
 * copies the value once into a message and links it in; the receiver copies
 * it into its planned arena slot and frees the message. An abort wakes every
 * mailbox so no rank waits forever on a rank that died. Device memory goes
 * through the same host message (transport.h: to_host / from_host), which
 * also orders the two ranks' streams: the download waits for the sender's
 * producer, the upload is done before the receiver's next kernel.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "runtime/transport.h"

typedef struct msg {
    struct msg *next;
    int src;
    uint64_t tag;
    size_t n;
    unsigned char data[];
} msg;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    msg *head;
} mailbox;

typedef struct {
    pipit__transport base;
    int P;
    double timeout;     /* seconds a receive waits before reporting a hang */
    mailbox *box;
    pthread_mutex_t abort_mu;
    int aborted;        /* rank that failed + 1, 0 if none */
    char abort_msg[1024];
} local_transport;

static int aborted(local_transport *t, char *why, size_t n) {
    pthread_mutex_lock(&t->abort_mu);
    int a = t->aborted;
    if (a && why) snprintf(why, n, "%s", t->abort_msg);
    pthread_mutex_unlock(&t->abort_mu);
    return a;
}

static pipit_status local_send(pipit__transport *tt, int src, int dst, uint64_t tag, const void *data,
                               size_t n) {
    local_transport *t = (local_transport *)tt;
    msg *m = pipit__malloc(sizeof *m + n);
    if (!m) return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory sending %zu bytes to rank %d", src, n, dst);
    m->src = src;
    m->tag = tag;
    m->n = n;
    m->next = NULL;
    pipit__transport_out(tt, tag, m->data, data, n); /* device memory: downloaded (waits for its producer) */
    mailbox *b = &t->box[dst];
    pthread_mutex_lock(&b->mu);
    msg **tail = &b->head;
    while (*tail) tail = &(*tail)->next;
    *tail = m;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return PIPIT_STATUS_OK;
}

static msg *take(mailbox *b, int src, uint64_t tag) {
    for (msg **pp = &b->head; *pp; pp = &(*pp)->next) {
        if ((*pp)->src == src && (*pp)->tag == tag) {
            msg *m = *pp;
            *pp = m->next;
            return m;
        }
    }
    return NULL;
}

/* The monotonic clock `secs` from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(double secs) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double whole = (double)(time_t)secs;
    ts.tv_sec += (time_t)secs;
    ts.tv_nsec += (long)((secs - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static pipit_status local_recv(pipit__transport *tt, int dst, int src, uint64_t tag, void *data, size_t n) {
    local_transport *t = (local_transport *)tt;
    mailbox *b = &t->box[dst];
    char why[1024];
    double timeout = t->timeout;
    struct timespec deadline = deadline_in(timeout);
    pthread_mutex_lock(&b->mu);
    msg *m;
    while (!(m = take(b, src, tag))) {
        if (aborted(t, why, sizeof why)) {
            pthread_mutex_unlock(&b->mu);
            return pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
        }
        if (pthread_cond_timedwait(&b->cv, &b->mu, &deadline) == ETIMEDOUT && !(m = take(b, src, tag))) {
            pthread_mutex_unlock(&b->mu);
            return pipit__err(PIPIT_STATUS_RUNTIME,
                              "rank %d: no message from rank %d for %g s (hung? the limit is PIPIT_TIMEOUT)", dst,
                              src, timeout);
        }
        if (m) break;
    }
    pthread_mutex_unlock(&b->mu);
    pipit_status s = PIPIT_STATUS_OK;
    if (m->n != n)
        s = pipit__err(PIPIT_STATUS_RUNTIME, "rank %d: message from rank %d has %zu bytes, expected %zu", dst,
                       src, m->n, n);
    else
        pipit__transport_in(tt, tag, data, m->data, n);
    pipit__free(m);
    return s;
}

static void local_abort(pipit__transport *tt, int rank, const char *why) {
    local_transport *t = (local_transport *)tt;
    pthread_mutex_lock(&t->abort_mu);
    if (!t->aborted) {
        t->aborted = rank + 1;
        snprintf(t->abort_msg, sizeof t->abort_msg, "rank %d failed: %s", rank, why);
    }
    pthread_mutex_unlock(&t->abort_mu);
    for (int i = 0; i < t->P; i++) {
        pthread_mutex_lock(&t->box[i].mu);
        pthread_cond_broadcast(&t->box[i].cv);
        pthread_mutex_unlock(&t->box[i].mu);
    }
}

static void drop_all(local_transport *t) {
    for (int i = 0; i < t->P; i++) {
        pthread_mutex_lock(&t->box[i].mu);
        while (t->box[i].head) {
            msg *m = t->box[i].head;
            t->box[i].head = m->next;
            pipit__free(m);
        }
        pthread_mutex_unlock(&t->box[i].mu);
    }
}

static void local_reset(pipit__transport *tt) {
    local_transport *t = (local_transport *)tt;
    drop_all(t);
    pthread_mutex_lock(&t->abort_mu);
    t->aborted = 0;
    t->abort_msg[0] = 0;
    pthread_mutex_unlock(&t->abort_mu);
}

static void local_free(pipit__transport *tt) {
    local_transport *t = (local_transport *)tt;
    if (!t) return;
    drop_all(t);
    for (int i = 0; i < t->P; i++) {
        pthread_mutex_destroy(&t->box[i].mu);
        pthread_cond_destroy(&t->box[i].cv);
    }
    pthread_mutex_destroy(&t->abort_mu);
    pipit__free(t->box);
    pipit__free(t);
}

/* One process: every rank's memory is here, nothing to broadcast. */
static pipit_status local_bcast(pipit__transport *tt, int root, void *data, size_t n) {
    (void)tt, (void)root, (void)data, (void)n;
    return PIPIT_STATUS_OK;
}

static const pipit__transport_i local_vt = {local_send, local_recv, local_abort, local_reset, local_bcast,
                                            local_free};

pipit__transport *pipit__transport_local_new(int P) {
    local_transport *t = pipit__calloc(1, sizeof *t);
    if (!t) return NULL;
    t->box = pipit__calloc((size_t)P, sizeof *t->box);
    if (!t->box) {
        pipit__free(t);
        return NULL;
    }
    t->base.vt = &local_vt;
    t->P = P;
    t->timeout = pipit__transport_timeout();
    pthread_mutex_init(&t->abort_mu, NULL);
    pthread_condattr_t ca; /* timeouts on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int i = 0; i < P; i++) {
        pthread_mutex_init(&t->box[i].mu, NULL);
        pthread_cond_init(&t->box[i].cv, &ca);
    }
    pthread_condattr_destroy(&ca);
    return &t->base;
}
