/*
 * transport_local.c — ranks are threads of one process. Each destination
 * rank has a mailbox (mutex, condition variable, list of messages). A send
 * copies the value once into a message and links it in; an isend links a
 * message that points at the sender's buffer, and the receiver copies
 * straight from it into its planned arena slot (one copy, not two), then
 * marks it done, which is what the sender's fence waits for. An abort
 * wakes every mailbox and every fence so no rank waits forever on a rank
 * that died. Device memory goes through a host message (transport.h:
 * to_host / from_host), which also orders the two ranks' streams: the
 * download waits for the sender's producer, the upload is done before the
 * receiver's next kernel.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "runtime/transport.h"

typedef struct msg {
    struct msg *next;
    int src, dst;
    uint64_t tag;
    size_t n;
    const unsigned char *zc; /* isend: the sender's buffer (NULL: the bytes follow in data) */
    int done;                /* isend: the receiver has its copy (under zc_mu) */
    int has_sum;             /* PIPIT_DEBUG_SENDS: sum = checksum of the bytes when sent */
    uint64_t sum;
    unsigned char data[];
} msg;

/* A sender's outstanding isends (only its own thread adds and removes). */
typedef struct {
    msg **v;
    int n, cap;
} msg_list;

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
    pthread_mutex_t zc_mu; /* msg.done of every isend */
    pthread_cond_t zc_cv;
    msg_list *zc;          /* [P] per sender */
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

static void link_msg(local_transport *t, msg *m) {
    mailbox *b = &t->box[m->dst];
    pthread_mutex_lock(&b->mu);
    msg **tail = &b->head;
    while (*tail) tail = &(*tail)->next;
    *tail = m;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static msg *new_msg(int src, int dst, uint64_t tag, size_t n, size_t payload) {
    msg *m = pipit__calloc(1, sizeof *m + payload);
    if (!m) {
        pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory sending %zu bytes to rank %d", src, n, dst);
        return NULL;
    }
    m->src = src, m->dst = dst, m->tag = tag, m->n = n;
    return m;
}

static pipit_status local_send(pipit__transport *tt, int src, int dst, uint64_t tag, const void *data,
                               size_t n) {
    local_transport *t = (local_transport *)tt;
    msg *m = new_msg(src, dst, tag, n, n);
    if (!m) return PIPIT_STATUS_NOMEM;
    pipit__transport_out(tt, tag, m->data, data, n); /* device memory: downloaded (waits for its producer) */
    link_msg(t, m);
    return PIPIT_STATUS_OK;
}

static int track(msg_list *l, msg *m) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        msg **v = pipit__realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return 0;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = m;
    return 1;
}

/* Device memory cannot be read by another rank's thread in place: it is
 * copied as by send, and the isend is complete at once (m only tracks it). */
static pipit_status local_isend(pipit__transport *tt, int src, int dst, uint64_t tag, const void *data, size_t n) {
    local_transport *t = (local_transport *)tt;
    msg *m = new_msg(src, dst, tag, n, 0);
    if (!m) return PIPIT_STATUS_NOMEM;
    if (!track(&t->zc[src], m)) {
        pipit__free(m);
        return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: out of memory sending %zu bytes to rank %d", src, n, dst);
    }
    if (tt->to_host && pipit__tag_on_device(tag)) {
        m->done = 1;
        pipit_status s = local_send(tt, src, dst, tag, data, n);
        if (s) t->zc[src].n--, pipit__free(m);
        return s;
    }
    m->zc = data;
    if (tt->debug_sends) m->has_sum = 1, m->sum = pipit__checksum(data, n);
    link_msg(t, m);
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

/* The message's bytes into data: from the sender's buffer (isend) or the
 * message; with PIPIT_DEBUG_SENDS checked against the sender's checksum. */
static pipit_status deliver(local_transport *t, const msg *m, void *data) {
    pipit__transport_in(&t->base, m->tag, data, m->zc ? m->zc : m->data, m->n);
    if (m->has_sum && pipit__checksum(data, m->n) != m->sum)
        return pipit__err(PIPIT_STATUS_RUNTIME,
                          "rank %d: the %zu bytes from rank %d (tag 0x%016llx) changed in flight: the sender wrote "
                          "its buffer before the send completed (PIPIT_DEBUG_SENDS)",
                          m->dst, m->n, m->src, (unsigned long long)m->tag);
    return PIPIT_STATUS_OK;
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
        s = deliver(t, m, data);
    if (!m->zc) {
        pipit__free(m);
        return s;
    }
    pthread_mutex_lock(&t->zc_mu); /* the sender's list owns it; its fence frees it */
    m->done = 1;
    pthread_cond_broadcast(&t->zc_cv);
    pthread_mutex_unlock(&t->zc_mu);
    return s;
}

static pipit_status local_fence(pipit__transport *tt, int src, int dst, uint64_t tag) {
    local_transport *t = (local_transport *)tt;
    msg_list *l = &t->zc[src];
    int i = 0;
    while (i < l->n && !(l->v[i]->dst == dst && l->v[i]->tag == tag)) i++;
    if (i == l->n)
        return pipit__err(PIPIT_STATUS_INTERNAL, "rank %d: fence for a send to rank %d (tag 0x%016llx) that is not "
                          "outstanding", src, dst, (unsigned long long)tag);
    msg *m = l->v[i];
    char why[1024];
    struct timespec deadline = deadline_in(t->timeout);
    pipit_status s = PIPIT_STATUS_OK;
    pthread_mutex_lock(&t->zc_mu);
    while (!m->done && !s) {
        if (aborted(t, why, sizeof why))
            s = pipit__err(PIPIT_STATUS_RUNTIME, "%s", why);
        else if (pthread_cond_timedwait(&t->zc_cv, &t->zc_mu, &deadline) == ETIMEDOUT && !m->done)
            s = pipit__err(PIPIT_STATUS_RUNTIME,
                           "rank %d: rank %d has not taken its message for %g s (hung? the limit is PIPIT_TIMEOUT)",
                           src, dst, t->timeout);
    }
    pthread_mutex_unlock(&t->zc_mu);
    if (s) return s; /* still linked: reset frees it once no receiver can read it */
    l->v[i] = l->v[--l->n];
    pipit__free(m);
    return PIPIT_STATUS_OK;
}

static void wake_all(local_transport *t) {
    for (int i = 0; i < t->P; i++) {
        pthread_mutex_lock(&t->box[i].mu);
        pthread_cond_broadcast(&t->box[i].cv);
        pthread_mutex_unlock(&t->box[i].mu);
    }
    pthread_mutex_lock(&t->zc_mu);
    pthread_cond_broadcast(&t->zc_cv);
    pthread_mutex_unlock(&t->zc_mu);
}

static void local_abort(pipit__transport *tt, int rank, const char *why) {
    local_transport *t = (local_transport *)tt;
    pthread_mutex_lock(&t->abort_mu);
    if (!t->aborted) {
        t->aborted = rank + 1;
        snprintf(t->abort_msg, sizeof t->abort_msg, "rank %d failed: %s", rank, why);
    }
    pthread_mutex_unlock(&t->abort_mu);
    wake_all(t);
}

/* Between steps (no rank thread runs): every queued message and every
 * outstanding isend goes. An isend's message is owned by its sender's list,
 * so the mailboxes only unlink it. */
static void drop_all(local_transport *t) {
    for (int i = 0; i < t->P; i++) {
        pthread_mutex_lock(&t->box[i].mu);
        while (t->box[i].head) {
            msg *m = t->box[i].head;
            t->box[i].head = m->next;
            if (!m->zc) pipit__free(m);
        }
        pthread_mutex_unlock(&t->box[i].mu);
    }
    for (int i = 0; i < t->P; i++) {
        for (int k = 0; k < t->zc[i].n; k++) pipit__free(t->zc[i].v[k]);
        t->zc[i].n = 0;
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
    if (t->box && t->zc) drop_all(t);
    for (int i = 0; t->box && t->zc && i < t->P; i++) {
        pthread_mutex_destroy(&t->box[i].mu);
        pthread_cond_destroy(&t->box[i].cv);
        pipit__free(t->zc[i].v);
    }
    pthread_mutex_destroy(&t->abort_mu);
    pthread_mutex_destroy(&t->zc_mu);
    pthread_cond_destroy(&t->zc_cv);
    pipit__free(t->box);
    pipit__free(t->zc);
    pipit__free(t->base.hosts);
    pipit__free(t);
}

/* One process: every rank's memory is here, nothing to broadcast. */
static pipit_status local_bcast(pipit__transport *tt, int root, void *data, size_t n) {
    (void)tt, (void)root, (void)data, (void)n;
    return PIPIT_STATUS_OK;
}

static const pipit__transport_i local_vt = {local_send,  local_isend, local_fence, local_recv,
                                            local_abort, local_reset, local_bcast, local_free,
                                            NULL,        NULL,        NULL};

pipit__transport *pipit__transport_local_new(int P) {
    local_transport *t = pipit__calloc(1, sizeof *t);
    if (!t) return NULL;
    t->base.vt = &local_vt;
    t->P = P;
    t->timeout = pipit__transport_timeout();
    t->base.debug_sends = pipit__debug_sends();
    pthread_mutex_init(&t->abort_mu, NULL);
    pthread_mutex_init(&t->zc_mu, NULL);
    pthread_condattr_t ca; /* timeouts on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->zc_cv, &ca);
    t->box = pipit__calloc((size_t)P, sizeof *t->box);
    t->zc = pipit__calloc((size_t)P, sizeof *t->zc);
    t->base.hosts = pipit__calloc((size_t)P, sizeof *t->base.hosts);
    if (!t->box || !t->zc || !t->base.hosts) {
        pthread_condattr_destroy(&ca);
        pipit__free(t->box), t->box = NULL;
        local_free(&t->base);
        return NULL;
    }
    char host[PIPIT_HOST_MAX];
    pipit__host_label(host, sizeof host);
    for (int i = 0; i < P; i++) {
        pthread_mutex_init(&t->box[i].mu, NULL);
        pthread_cond_init(&t->box[i].cv, &ca);
        memcpy(t->base.hosts[i], host, sizeof host);
    }
    pthread_condattr_destroy(&ca);
    return &t->base;
}
