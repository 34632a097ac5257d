/*
 * transport.h — how ranks exchange values: a vtable (isend, recv, abort,
 * free) so the runtime does not care whether ranks are threads (local) or
 * processes (MPI, a later transport). Tags name (value, microbatch), so
 * messages never mix; sends never block, receives block until the message
 * arrives or some rank aborts.
 */
#ifndef PIPIT_TRANSPORT_H
#define PIPIT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "util/common.h"

typedef struct pipit__transport pipit__transport;

typedef struct {
    /* Copies n bytes and queues them for rank dst; returns at once. */
    pipit_status (*send)(pipit__transport *t, int src, int dst, uint64_t tag, const void *data, size_t n);
    /* Waits for (src, tag) at rank dst and copies it into data. Returns
     * PIPIT_STATUS_RUNTIME with the failing rank's message if any rank aborted. */
    pipit_status (*recv)(pipit__transport *t, int dst, int src, uint64_t tag, void *data, size_t n);
    /* Marks rank `rank` failed with `msg` and wakes every waiting rank. */
    void (*abort)(pipit__transport *t, int rank, const char *msg);
    /* Clears an abort and drops queued messages (start of a step). */
    void (*reset)(pipit__transport *t);
    void (*free)(pipit__transport *t);
} pipit__transport_i;

struct pipit__transport {
    const pipit__transport_i *vt;
};

/* One process, P ranks as threads, one mailbox per destination rank. */
pipit__transport *pipit__transport_local_new(int P);

static inline uint64_t pipit__tag(int32_t node, int32_t mb) {
    return ((uint64_t)(uint32_t)node << 32) | (uint32_t)mb;
}

#endif
