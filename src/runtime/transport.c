/*
 * transport.c — what every transport shares: the hang timeout, the
 * heartbeat limit of MPI processes (PIPIT_HEARTBEAT), the debug
 * checksum of PIPIT_DEBUG_SENDS, and the in-stage all-reduce, which is
 * built on the vtable's isend / recv / fence and so runs on any transport.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/transport.h"

void pipit__host_label(char *out, size_t n) {
    char name[PIPIT_HOST_MAX] = "?", ip[INET_ADDRSTRLEN] = "";
    gethostname(name, sizeof name - 1);
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) == 0) {
        for (const struct ifaddrs *a = all; a && !ip[0]; a = a->ifa_next)
            if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET && (a->ifa_flags & IFF_UP) &&
                !(a->ifa_flags & IFF_LOOPBACK))
                inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)a->ifa_addr)->sin_addr, ip, sizeof ip);
        freeifaddrs(all);
    }
    if (ip[0]) snprintf(out, n, "%.40s (%s)", name, ip);
    else snprintf(out, n, "%s", name);
}

/* An environment variable of seconds: NULL when unset or empty (*text says which);
 * else the reason it is not a finite number (NULL if it is), *v its value
 * and *underflow whether strtod rounded a nonzero text to 0 ("1e-400"). */
static const char *env_seconds(const char *name, const char **text, double *v, int *underflow) {
    *text = getenv(name);
    *v = 0, *underflow = 0;
    if (!*text || !**text) return NULL;
    char *end;
    errno = 0;
    *v = strtod(*text, &end);
    if (end == *text || *end || isspace((unsigned char)**text)) return "not a number of seconds";
    if (!isfinite(*v)) return "not a finite number of seconds";
    *underflow = errno == ERANGE && *v == 0;
    return NULL;
}

pipit_status pipit__timeout_limit(double *seconds) {
    *seconds = PIPIT_TIMEOUT_DEFAULT_S;
    const char *s;
    double v;
    int underflow;
    const char *why = env_seconds("PIPIT_TIMEOUT", &s, &v, &underflow);
    if (!s || !*s) return PIPIT_STATUS_OK;
    if (!why && (v <= 0 || underflow)) why = v < 0 ? "negative" : "not above 0";
    if (!why && v >= PIPIT_TIMEOUT_MAX_S) why = "too long";
    if (why)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "PIPIT_TIMEOUT='%.40s': %s; it must be the seconds a receive may wait, above 0 and below "
                          "%g (unset: %g)",
                          s, why, PIPIT_TIMEOUT_MAX_S, PIPIT_TIMEOUT_DEFAULT_S);
    *seconds = v;
    return PIPIT_STATUS_OK;
}

double pipit__transport_timeout(void) {
    double v;
    return pipit__timeout_limit(&v) ? PIPIT_TIMEOUT_DEFAULT_S : v;
}

static const char *heartbeat_out_of_range(double v, int underflow) {
    if (v < 0) return "negative";
    if ((v != 0 || underflow) && v < PIPIT_HEARTBEAT_MIN_S) /* underflow: "1e-400" is not 0 */
        return "shorter than the heartbeats' own period: every process sends one each second, so a healthy job "
               "would be taken for lost";
    if (v > PIPIT_HEARTBEAT_MAX_S) return "longer than a day";
    return NULL;
}

pipit_status pipit__heartbeat_limit(double *seconds) {
    *seconds = PIPIT_HEARTBEAT_DEFAULT_S;
    const char *s;
    double v;
    int underflow;
    const char *why = env_seconds("PIPIT_HEARTBEAT", &s, &v, &underflow);
    if (!s || !*s) return PIPIT_STATUS_OK;
    if (!why) why = heartbeat_out_of_range(v, underflow);
    if (why)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "PIPIT_HEARTBEAT='%.40s': %s; it must be 0 (no heartbeats) or seconds from %g to %g "
                          "(unset: %g)",
                          s, why, PIPIT_HEARTBEAT_MIN_S, PIPIT_HEARTBEAT_MAX_S, PIPIT_HEARTBEAT_DEFAULT_S);
    *seconds = v;
    return PIPIT_STATUS_OK;
}

int pipit__debug_sends(void) {
    const char *s = getenv("PIPIT_DEBUG_SENDS");
    return s && strcmp(s, "1") == 0;
}

uint64_t pipit__checksum(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* ---------------------------------------------------------- all-reduce */

/* The checks every collective makes: `what` names it in the message;
 * summed says whether the dtype must be one the sum takes. */
static pipit_status check_members(const char *what, int me, const int *group, int n, pipit_dtype dtype, int summed,
                                  int64_t count, int *mine) {
    if (n < 1 || n > PIPIT_MAX_COLL || !group)
        return pipit__err(PIPIT_STATUS_INTERNAL, "%s: a group of %d ranks (1 to %d)", what, n, PIPIT_MAX_COLL);
    if (summed && dtype != PIPIT_F32 && dtype != PIPIT_F64)
        return pipit__err(PIPIT_STATUS_INTERNAL, "%s: dtype %s is not summed (f32 or f64 only)", what,
                          pipit__dtype_name(dtype));
    if (count < 0) return pipit__err(PIPIT_STATUS_INTERNAL, "%s: %lld elements", what, (long long)count);
    *mine = -1;
    for (int k = 0; k < n; k++) {
        if (k && group[k] <= group[k - 1])
            return pipit__err(PIPIT_STATUS_INTERNAL,
                              "%s: the group must list world ranks in ascending order (the sum's order): "
                              "rank %d follows rank %d",
                              what, group[k], group[k - 1]);
        if (group[k] == me) *mine = k;
    }
    if (*mine < 0) return pipit__err(PIPIT_STATUS_INTERNAL, "%s: rank %d is not in its group", what, me);
    return PIPIT_STATUS_OK;
}

static pipit_status check_group(int me, const int *group, int n, pipit_dtype dtype, int64_t count, int *mine) {
    return check_members("all-reduce", me, group, n, dtype, 1, count, mine);
}

/* acc (+)= src over n elements: the first source is copied, the next ones
 * added, so the sum is ((x0 + x1) + x2) ... in the order of the calls (or
 * the max: max(max(x0, x1), x2) ..., a later value wins only if larger). */
#define COMBINE(T, a, b, n, op)                                                \
    do {                                                                       \
        if ((op) == PIPIT_REDUCE_MAX)                                          \
            for (int64_t i = 0; i < (n); i++) (a)[i] = (b)[i] > (a)[i] ? (b)[i] : (a)[i]; \
        else                                                                   \
            for (int64_t i = 0; i < (n); i++) (a)[i] += (b)[i];                \
    } while (0)
static void add_into(pipit_dtype dtype, pipit__reduce_op op, void *acc, const void *src, int64_t n, int first) {
    if (first) memcpy(acc, src, (size_t)n * pipit__dtype_size(dtype));
    else if (dtype == PIPIT_F64) COMBINE(double, (double *)acc, (const double *)src, n, op);
    else COMBINE(float, (float *)acc, (const float *)src, n, op);
}
#undef COMBINE

/* Member `mine` owns chunk `mine`: everyone's copy of it, added in rank
 * order into acc, then written back into data. */
static pipit_status reduce_my_chunk(pipit__transport *t, const int *group, int n, int mine, int32_t id,
                                    pipit_dtype dtype, pipit__reduce_op op, unsigned char *chunk, int64_t len) {
    size_t bytes = (size_t)len * pipit__dtype_size(dtype);
    unsigned char *acc = pipit__malloc(2 * bytes), *in = acc + bytes;
    if (!acc) return pipit__err(PIPIT_STATUS_NOMEM, "rank %d: all-reduce: out of memory (%zu bytes)", group[mine], 2 * bytes);
    pipit_status s = PIPIT_STATUS_OK;
    for (int j = 0; j < n && !s; j++) {
        const unsigned char *src = chunk;
        if (j != mine) {
            s = t->vt->recv(t, group[mine], group[j], pipit__tag(PIPIT_TAG_COLL, id, mine), in, bytes);
            src = in;
        }
        if (!s) add_into(dtype, op, acc, src, len, j == 0);
    }
    if (!s) memcpy(chunk, acc, bytes);
    pipit__free(acc);
    return s;
}

pipit_status pipit__transport_allreduce(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                        pipit_dtype dtype, void *data, int64_t count) {
    return pipit__transport_allreduce_op(t, me, group, n, id, dtype, PIPIT_REDUCE_SUM, data, count);
}

pipit_status pipit__transport_allreduce_op(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                           pipit_dtype dtype, pipit__reduce_op op, void *data, int64_t count) {
    int mine = 0;
    pipit_status s = check_group(me, group, n, dtype, count, &mine);
    if (s || n == 1) return s;
    size_t es = pipit__dtype_size(dtype);
    unsigned char *base = data;
    int64_t lo[PIPIT_MAX_COLL] = {0}, hi[PIPIT_MAX_COLL] = {0};
    for (int k = 0; k < n; k++) pipit__range(count, k, n, &lo[k], &hi[k]);
#define CHUNK(k) (base + (size_t)lo[k] * es), ((size_t)(hi[k] - lo[k]) * es)
    /* reduce-scatter: chunk k to its owner, zero-copy */
    for (int k = 0; k < n && !s; k++)
        if (k != mine && hi[k] > lo[k]) s = t->vt->isend(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, k), CHUNK(k));
    if (!s && hi[mine] > lo[mine]) s = reduce_my_chunk(t, group, n, mine, id, dtype, op, base + (size_t)lo[mine] * es, hi[mine] - lo[mine]);
    /* all-gather: my sum to everyone; theirs into place, each chunk once my
     * send of it is complete (its owner received it before sending its sum,
     * so the fence waits for nobody) */
    for (int k = 0; k < n && !s; k++)
        if (k != mine && hi[mine] > lo[mine])
            s = t->vt->isend(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, n + mine), CHUNK(mine));
    for (int k = 0; k < n && !s; k++) {
        if (k == mine || hi[k] <= lo[k]) continue;
        s = t->vt->fence(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, k));
        if (!s) s = t->vt->recv(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, n + k), CHUNK(k));
    }
    for (int k = 0; k < n && !s; k++)
        if (k != mine && hi[mine] > lo[mine]) s = t->vt->fence(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, n + mine));
#undef CHUNK
    return s;
}

/* ------------------------------------ all-gather, reduce-scatter, all-to-all
 *
 * The sequence- and expert-parallel collectives, on the same isend / recv /
 * fence as the all-reduce. Blocks are `count` elements each, block k
 * belongs to member k (group[k]); every send is zero-copy and fenced
 * before the call returns, so the caller may reuse the memory at once.
 * Tags: PIPIT_TAG_COLL (id, b) with b = k for the reduce-scatter's block k
 * (as the all-reduce's chunks), n + k for what member k gathers out,
 * 2n + s n + j for the all-to-all block sent by member j from slot s of
 * an overlapped pair (0 outside one): distinct ids (graph nodes)
 * never meet, and one collective's messages between two members keep their
 * order. */

#define BLOCK(p, k) ((unsigned char *)(p) + (size_t)(k) * (size_t)count * es)

/* Wait for the sends of `mine`'s tag b to every other member. */
static pipit_status fence_all(pipit__transport *t, int me, const int *group, int n, int mine, int32_t id, int32_t b,
                              int64_t count) {
    pipit_status s = PIPIT_STATUS_OK;
    for (int k = 0; k < n && !s && count > 0; k++)
        if (k != mine) s = t->vt->fence(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, b));
    return s;
}

pipit_status pipit__transport_allgather(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                        pipit_dtype dtype, void *data, int64_t count) {
    int mine = 0;
    pipit_status s = check_members("all-gather", me, group, n, dtype, 0, count, &mine);
    if (s || n == 1 || count == 0) return s;
    size_t es = pipit__dtype_size(dtype), bytes = (size_t)count * es;
    for (int k = 0; k < n && !s; k++)
        if (k != mine) s = t->vt->isend(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, n + mine), BLOCK(data, mine), bytes);
    for (int k = 0; k < n && !s; k++)
        if (k != mine) s = t->vt->recv(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, n + k), BLOCK(data, k), bytes);
    if (!s) s = fence_all(t, me, group, n, mine, id, n + mine, count);
    return s;
}

pipit_status pipit__transport_reduce_scatter(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                             pipit_dtype dtype, void *data, int64_t count) {
    int mine = 0;
    pipit_status s = check_members("reduce-scatter", me, group, n, dtype, 1, count, &mine);
    if (s || n == 1 || count == 0) return s;
    size_t es = pipit__dtype_size(dtype), bytes = (size_t)count * es;
    for (int k = 0; k < n && !s; k++)
        if (k != mine) s = t->vt->isend(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, k), BLOCK(data, k), bytes);
    if (!s) s = reduce_my_chunk(t, group, n, mine, id, dtype, PIPIT_REDUCE_SUM, BLOCK(data, mine), count);
    for (int k = 0; k < n && !s; k++)
        if (k != mine) s = t->vt->fence(t, me, group[k], pipit__tag(PIPIT_TAG_COLL, id, k));
    return s;
}

/* The all-to-all's tag for the block member j sends, from slot 0 or 1 of
 * an overlapped pair: the pair's two tasks may have one node's all-to-all
 * in flight at once (full remat runs the forward's again in the backward),
 * and a fence must find its own send. Otherwise one node's all-to-alls
 * follow each other, matched in order (every member sends and receives
 * them in the same instruction order). */
static uint64_t a2a_tag(int n, int32_t id, int slot, int j) { return pipit__tag(PIPIT_TAG_COLL, id, 2 * n + slot * n + j); }

static pipit_status a2a_start(pipit__transport *t, int me, const int *group, int n, int32_t id, int slot,
                              pipit_dtype dtype, const void *in, void *out, int64_t count, int post) {
    int mine = 0;
    pipit_status s = check_members("all-to-all", me, group, n, dtype, 0, count, &mine);
    if (s || count == 0) return s;
    if (slot != 0 && slot != 1) return pipit__err(PIPIT_STATUS_INTERNAL, "all-to-all: pair slot %d", slot);
    if (in == out && n > 1)
        return pipit__err(PIPIT_STATUS_INTERNAL, "all-to-all: the input and output blocks must not be the same memory");
    size_t es = pipit__dtype_size(dtype), bytes = (size_t)count * es;
    for (int k = 0; k < n && !s && post; k++) /* posted first: the blocks land while the rank computes */
        if (k != mine) s = t->vt->irecv(t, me, group[k], a2a_tag(n, id, slot, k), BLOCK(out, k), bytes);
    for (int k = 0; k < n && !s; k++)
        if (k != mine) s = t->vt->isend(t, me, group[k], a2a_tag(n, id, slot, mine), BLOCK(in, k), bytes);
    return s;
}

pipit_status pipit__transport_alltoall_start(pipit__transport *t, int me, const int *group, int n, int32_t id, int slot,
                                             pipit_dtype dtype, const void *in, void *out, int64_t count, int post) {
    return a2a_start(t, me, group, n, id, slot, dtype, in, out, count, post && t->vt->irecv);
}

static pipit_status a2a_finish(pipit__transport *t, int me, const int *group, int n, int32_t id, int slot,
                               pipit_dtype dtype, const void *in, void *out, int64_t count, int posted) {
    int mine = 0;
    pipit_status s = check_members("all-to-all", me, group, n, dtype, 0, count, &mine);
    if (s || count == 0) return s;
    size_t es = pipit__dtype_size(dtype), bytes = (size_t)count * es;
    if (BLOCK(out, mine) != BLOCK(in, mine)) memcpy(BLOCK(out, mine), BLOCK(in, mine), bytes);
    for (int k = 0; k < n && !s; k++) {
        if (k == mine) continue;
        uint64_t tag = a2a_tag(n, id, slot, k);
        s = posted ? t->vt->wait_recv(t, me, group[k], tag) : t->vt->recv(t, me, group[k], tag, BLOCK(out, k), bytes);
    }
    for (int k = 0; k < n && !s; k++)
        if (k != mine) s = t->vt->fence(t, me, group[k], a2a_tag(n, id, slot, mine));
    return s;
}

pipit_status pipit__transport_alltoall_finish(pipit__transport *t, int me, const int *group, int n, int32_t id, int slot,
                                              pipit_dtype dtype, const void *in, void *out, int64_t count, int post) {
    return a2a_finish(t, me, group, n, id, slot, dtype, in, out, count, post && t->vt->irecv);
}

/* Nothing computes between the halves: the receives are not posted ahead. */
pipit_status pipit__transport_alltoall(pipit__transport *t, int me, const int *group, int n, int32_t id,
                                       pipit_dtype dtype, const void *in, void *out, int64_t count) {
    pipit_status s = a2a_start(t, me, group, n, id, 0, dtype, in, out, count, 0);
    return s ? s : a2a_finish(t, me, group, n, id, 0, dtype, in, out, count, 0);
}

#undef BLOCK
