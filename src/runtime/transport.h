/*
 * transport.h — how world ranks exchange values: a vtable so the runtime
 * does not care whether ranks are threads of one process (local) or MPI
 * processes (mpi). World rank w = d * P + p runs pipeline rank p of
 * replica d. Tags name what a message carries (pipit__tag: a kind and two
 * indices, e.g. (value, microbatch)), so messages never mix.
 *
 * Two sends. `send` copies (the caller may reuse its buffer at once): for
 * small host messages (norms, losses). `isend` is zero-copy: the transport
 * reads the caller's buffer (an arena slot, a gradient shard) until the
 * caller's `fence` for the same (src, dst, tag) returns, and the caller
 * writes nothing there before. The compiler places each fence where the
 * plan proves the receive has already happened, so a fence waits for no
 * peer's progress (docs/architecture.md, "Zero-copy sends"). Receives
 * block until the message arrives, some rank aborts, or the timeout passes.
 *
 * Device memory: a message whose tag kind carries backend memory
 * (pipit__tag_on_device: values, accumulated sums, data-parallel shards)
 * may live on a GPU. Both transports then keep a host copy of it (an isend
 * of device memory copies like a send; its fence returns at once), moved
 * with the to_host / from_host hooks the runtime sets from its backend
 * (download / upload: synchronous on the calling rank's stream), and with
 * memcpy when the hooks are NULL (the cpu backend: zero-copy). NCCL plugs
 * in here later: a third transport whose isend / recv take device buffers
 * directly on the rank's stream, ordered by the global send/recv order of
 * the schedule (docs/cuda.md); the hooks stay unused.
 *
 * PIPIT_DEBUG_SENDS=1 (both transports): every isend carries a checksum of
 * its bytes taken when it was issued, and the receiver checks what it got
 * against it, so a sender that wrote its buffer before the send completed
 * is reported ("changed in flight") instead of silently corrupting a step.
 */
#ifndef PIPIT_TRANSPORT_H
#define PIPIT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/common.h"

typedef struct pipit__transport pipit__transport;

#define PIPIT_HOST_MAX 64 /* bytes of a host name as the transports keep it */
#define PIPIT_MAX_COLL 64 /* members of an in-stage all-reduce group */

typedef struct {
    /* Copies n bytes from world rank src (a rank of this process) for world
     * rank dst; returns at once, the caller may reuse data. */
    pipit_status (*send)(pipit__transport *t, int src, int dst, uint64_t tag, const void *data, size_t n);
    /* Zero-copy: hands data itself to the transport for dst and returns at
     * once; the transport reads it until fence(t, src, dst, tag) returns.
     * Every isend that returned OK takes exactly one fence (reset and free
     * drop the ones a failed step left behind). */
    pipit_status (*isend)(pipit__transport *t, int src, int dst, uint64_t tag, const void *data, size_t n);
    /* Waits until the isend (src -> dst, tag) is complete: its buffer is the
     * caller's again. RUNTIME on an abort or once the timeout passes; an
     * isend that is not outstanding is PIPIT_STATUS_INTERNAL. */
    pipit_status (*fence)(pipit__transport *t, int src, int dst, uint64_t tag);
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
    /* World rank `src` (of this process) turns from messages to compute:
     * its isends still moving must move without it (mpi: the monitor
     * thread takes them over; NULL where sends need no one, as local).
     * Sends do not wake anyone themselves: a rank that waits next moves
     * them in its own wait, so a ping-pong pays no thread wake-up. */
    void (*kick)(pipit__transport *t, int src);
    /* Optional (NULL: the caller receives with recv instead). Posts a
     * receive at world rank dst (of this process) of (src, tag) into host
     * memory `data` (n bytes; a tag of device memory is INTERNAL) and returns
     * at once, so the message can land while the rank computes;
     * wait_recv(t, dst, src, tag) completes it with recv's checks and
     * errors. Every irecv that returned OK takes exactly one wait_recv (a
     * failed step's are cancelled when the transport is freed). */
    pipit_status (*irecv)(pipit__transport *t, int dst, int src, uint64_t tag, void *data, size_t n);
    pipit_status (*wait_recv)(pipit__transport *t, int dst, int src, uint64_t tag);
} pipit__transport_i;

/* Copies n bytes between a buffer of backend memory and host memory. */
typedef void (*pipit__xfer_fn)(void *dst, const void *src, size_t n);

struct pipit__transport {
    const pipit__transport_i *vt;
    pipit__xfer_fn to_host;   /* device -> host (the backend's download); NULL: memcpy */
    pipit__xfer_fn from_host; /* host -> device (the backend's upload); NULL: memcpy */
    int debug_sends;          /* PIPIT_DEBUG_SENDS=1: isends carry a checksum the receiver checks */
    char (*hosts)[PIPIT_HOST_MAX]; /* [W] the host each world rank runs on (pipit__host_label) */
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
 * environment variable PIPIT_TIMEOUT (seconds, > 0), else 300. A value
 * pipit__timeout_limit refuses is never used: pipit_compile fails first. */
double pipit__transport_timeout(void);
#define PIPIT_TIMEOUT_DEFAULT_S 300.0
#define PIPIT_TIMEOUT_MAX_S 1e9
/* PIPIT_TIMEOUT checked: unset or empty gives the default; anything but a
 * finite number of seconds in (0, 1e9) is INVALID with a message naming
 * the variable and its value. */
pipit_status pipit__timeout_limit(double *seconds);

/* PIPIT_HEARTBEAT (docs/mpi.md): the seconds of silence after which an MPI
 * process takes a peer for lost, into *seconds: unset or empty 10, "0"
 * turns the heartbeats off, else a finite number from 1 to 86400 (the
 * heartbeats leave every second: a shorter limit ends healthy jobs).
 * INVALID naming the variable and its value for anything else. */
#define PIPIT_HEARTBEAT_DEFAULT_S 10.0
#define PIPIT_HEARTBEAT_MIN_S 1.0
#define PIPIT_HEARTBEAT_MAX_S 86400.0
pipit_status pipit__heartbeat_limit(double *seconds);

/* This host as messages name it: its name and its first IPv4 address that
 * is up and not loopback, "node7 (10.0.0.7)" (emulated hosts share a name). */
void pipit__host_label(char *out, size_t n);

/* Whether PIPIT_DEBUG_SENDS=1 (checksummed isends, poisoned send slots). */
int pipit__debug_sends(void);

/* FNV-1a of n bytes: the checksum of PIPIT_DEBUG_SENDS. */
uint64_t pipit__checksum(const void *data, size_t n);

/* The in-stage collective (tensor parallelism, docs/architecture.md
 * "Collectives"): every member of `group` (n world ranks, ascending, me
 * among them) calls it with `count` elements of dtype at data (host
 * memory); on return each holds the element-wise sum taken in rank order
 * ((x[g0] + x[g1]) + x[g2]) ..., so the bits depend neither on arrival order
 * nor on the transport. Built on isend / recv / fence: the elements are cut
 * into n chunks, member k adds everyone's chunk k in rank order and sends
 * the sum back (reduce-scatter + all-gather: 2 (n-1)/n of the bytes per
 * member, as a ring). `id` tells concurrent collectives apart: messages
 * carry pipit__tag(PIPIT_TAG_COLL, id, 0 .. 2n-1). F32 and F64 only. */
pipit_status pipit__transport_allreduce(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                        pipit_dtype dtype, void *data, int64_t count);
/* The same with the element-wise max instead of the sum (taken in rank
 * order too: max(max(x[g0], x[g1]), x[g2]) ...). */
typedef enum { PIPIT_REDUCE_SUM = 0, PIPIT_REDUCE_MAX = 1 } pipit__reduce_op;
pipit_status pipit__transport_allreduce_op(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                           pipit_dtype dtype, pipit__reduce_op op, void *data, int64_t count);

/* All-gather (sequence parallelism): data holds n blocks of `count`
 * elements; member k's block k (its own) lands in block k of every
 * member. Any dtype (bytes are moved, not combined). */
pipit_status pipit__transport_allgather(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                        pipit_dtype dtype, void *data, int64_t count);
/* Reduce-scatter: data holds n blocks of `count` elements on every member;
 * on return member k's block k is the sum of everyone's block k taken in
 * rank order (the all-reduce's bits for that block); the other blocks are
 * left as they were. F32 and F64 only. */
pipit_status pipit__transport_reduce_scatter(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                             pipit_dtype dtype, void *data, int64_t count);
/* All-to-all (expert parallelism): block k of `in` (count elements) goes
 * to member k, and member j's block for me lands in block j of `out`
 * (in and out distinct). Any dtype. */
pipit_status pipit__transport_alltoall(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                       pipit_dtype dtype, const void *in, void *out, int64_t count);
/* The same in two halves, so the member computes while the blocks move
 * (an overlapped pair of tasks, compile/lower.c): start sends every block
 * of `in` but its own, and with post = 1 (the same at finish) first posts
 * the receives into `out` (transports with irecv), so the blocks land
 * while the rank computes; until finish returns, neither buffer may be
 * touched. finish copies its own block, completes the receives and fences
 * the sends. slot (0, or 1 for the second task of an overlapped pair)
 * tells apart one node's all-to-alls that the pair's two tasks run at once.
 * post = 0 where nothing runs between the halves: a receive posted ahead
 * costs Open MPI's shared memory 10-15% at 2.5-16 MiB (docs/benchmarks.md
 * §21). */
pipit_status pipit__transport_alltoall_start(pipit__transport *t, int me, const int *group, int n, int32_t id, int slot,
                                             pipit_dtype dtype, const void *in, void *out, int64_t count, int post);
pipit_status pipit__transport_alltoall_finish(pipit__transport *t, int me, const int *group, int n, int32_t id, int slot,
                                              pipit_dtype dtype, const void *in, void *out, int64_t count, int post);

/* What a message carries. */
typedef enum {
    PIPIT_TAG_VALUE = 0,  /* a loop value: (node, microbatch) */
    PIPIT_TAG_ACC,        /* a param use's accumulated sum: (param, use) */
    PIPIT_TAG_NORM,       /* a param's sum of squares: (param, 0) */
    PIPIT_TAG_LOSS,       /* a replica's per-microbatch losses: (replica, 0) */
    PIPIT_TAG_DP_REDUCE,  /* data parallel: a gradient shard to its owner: (param, shard) */
    PIPIT_TAG_DP_GRAD,    /* data parallel: a summed gradient shard: (param, shard) */
    PIPIT_TAG_DP_PARAM,   /* ZeRO-1: an updated parameter shard: (param, shard) */
    PIPIT_TAG_DP_SUMSQ,   /* ZeRO-1: a shard's sum-of-squares partials: (param, shard) */
    PIPIT_TAG_COLL        /* an in-stage all-reduce: (collective id, chunk k: to owner k; n + k: from it) */
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
