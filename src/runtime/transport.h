/*
 * transport.h — how world ranks exchange values: a vtable so the runtime
 * does not care whether ranks are threads of one process (local) or MPI
 * processes (mpi). World rank w = d * P + p runs pipeline rank p of
 * replica d. Tags name what a message carries (pipit__tag: a kind and two
 * indices, e.g. (value, microbatch)), so messages never mix; sends never
 * block (the data is copied or handed to the network before send returns,
 * so the caller may reuse its buffer at once); receives block until the
 * message arrives, some rank aborts, or the timeout passes.
 *
 * Device memory: a message whose tag kind carries backend memory
 * (pipit__tag_on_device: values, accumulated sums, data-parallel shards)
 * may live on a GPU. Both transports keep a host copy of every message
 * (local: the message itself; mpi: the send and receive buffers), so they
 * move those bytes with the to_host / from_host hooks the runtime sets from
 * its backend (download / upload: synchronous on the calling rank's
 * stream), and with memcpy when the hooks are NULL (the cpu backend).
 * NCCL plugs in here later: a third transport whose send / recv take
 * device buffers directly on the rank's stream, ordered by the global
 * send/recv order of the schedule (docs/cuda.md); the hooks stay unused.
 */
#ifndef PIPIT_TRANSPORT_H
#define PIPIT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/common.h"

typedef struct pipit__transport pipit__transport;

typedef struct {
    /* Queues n bytes from world rank src (a rank of this process) for world
     * rank dst; returns at once. */
    pipit_status (*send)(pipit__transport *t, int src, int dst, uint64_t tag, const void *data, size_t n);
    /* Waits at world rank dst (of this process) for (src, tag) and copies it
     * into data (n bytes: a size mismatch is PIPIT_STATUS_RUNTIME). Returns
     * PIPIT_STATUS_RUNTIME with the failing rank's message if any rank
     * aborted, or with "rank dst: no message from rank src for T s" once
     * the transport's timeout passes (see pipit__transport_timeout). */
    pipit_status (*recv)(pipit__transport *t, int dst, int src, uint64_t tag, void *data, size_t n);
    /* Marks world rank `rank` failed with `msg` and wakes every waiting rank,
     * in every process (idempotent; the first message wins). */
    void (*abort)(pipit__transport *t, int rank, const char *msg);
    /* Start of a step: clears a local abort and drops queued messages where
     * that is possible (local); a no-op where an abort is final (mpi). */
    void (*reset)(pipit__transport *t);
    /* Collective over all processes (mpi): the n bytes at `data` of the
     * process that runs world rank `root` are copied to `data` on every
     * process. Local: nothing to do (one process). */
    pipit_status (*bcast)(pipit__transport *t, int root, void *data, size_t n);
    void (*free)(pipit__transport *t);
} pipit__transport_i;

/* Copies n bytes between a buffer of backend memory and host memory. */
typedef void (*pipit__xfer_fn)(void *dst, const void *src, size_t n);

struct pipit__transport {
    const pipit__transport_i *vt;
    pipit__xfer_fn to_host;   /* device -> host (the backend's download); NULL: memcpy */
    pipit__xfer_fn from_host; /* host -> device (the backend's upload); NULL: memcpy */
};

/* One process, W world ranks as threads, one mailbox per destination rank. */
pipit__transport *pipit__transport_local_new(int W);

/* One world rank per MPI process (MPI_COMM_WORLD rank = world rank), W =
 * the communicator's size. `tags` lists every tag the program's ranks will
 * use (sorted, unique, ntags entries; copied): an MPI tag is its index
 * there. NULL with a message when MPI is not available or not
 * initialised (see pipit_init). */
pipit__transport *pipit__transport_mpi_new(int W, const uint64_t *tags, size_t ntags);

/* Seconds a receive may wait before the job is declared hung: the
 * environment variable PIPIT_TIMEOUT (seconds, > 0), else 300. */
double pipit__transport_timeout(void);

/* What a message carries. */
typedef enum {
    PIPIT_TAG_VALUE = 0,  /* a loop value: (node, microbatch) */
    PIPIT_TAG_ACC,        /* a param use's accumulated sum: (param, use) */
    PIPIT_TAG_NORM,       /* a param's sum of squares: (param, 0) */
    PIPIT_TAG_LOSS,       /* a replica's per-microbatch losses: (replica, 0) */
    PIPIT_TAG_DP_REDUCE,  /* data parallel: a gradient shard to its owner: (param, shard) */
    PIPIT_TAG_DP_GRAD,    /* data parallel: a summed gradient shard: (param, shard) */
    PIPIT_TAG_DP_PARAM,   /* ZeRO-1: an updated parameter shard: (param, shard) */
    PIPIT_TAG_DP_SUMSQ    /* ZeRO-1: a shard's sum-of-squares partials: (param, shard) */
} pipit__tag_kind;

/* kind in the top 4 bits, a in the next 28, b in the low 32. */
static inline uint64_t pipit__tag(pipit__tag_kind kind, int32_t a, int32_t b) {
    return ((uint64_t)kind << 60) | ((uint64_t)((uint32_t)a & 0x0fffffffu) << 32) | (uint32_t)b;
}

/* Whether a message of this tag carries backend memory (1) or host memory
 * (0: norms, losses and sum-of-squares partials are host doubles). */
static inline int pipit__tag_on_device(uint64_t tag) {
    switch ((pipit__tag_kind)(tag >> 60)) {
    case PIPIT_TAG_VALUE: case PIPIT_TAG_ACC: case PIPIT_TAG_DP_REDUCE: case PIPIT_TAG_DP_GRAD: case PIPIT_TAG_DP_PARAM:
        return 1;
    default: return 0;
    }
}

/* The message's bytes into the transport's host copy, and back out. */
static inline void pipit__transport_out(const pipit__transport *t, uint64_t tag, void *host, const void *data,
                                        size_t n) {
    if (t->to_host && pipit__tag_on_device(tag)) t->to_host(host, data, n);
    else if (n) memcpy(host, data, n);
}

static inline void pipit__transport_in(const pipit__transport *t, uint64_t tag, void *data, const void *host,
                                       size_t n) {
    if (t->from_host && pipit__tag_on_device(tag)) t->from_host(data, host, n);
    else if (n) memcpy(data, host, n);
}

#endif
