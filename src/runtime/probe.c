/*
 * probe.c — pipit_probe_links: ping-pongs through pipit's own transports
 * (so a plan is made from what a step will actually see): between two
 * threads of this process, or between MPI processes on one host and on two
 * hosts. `pipit sim --calibrate` writes the results into the hardware
 * description instead of assumed constants.
 */
#include <pthread.h>
#include <string.h>

#include "pipit.h"
#include "runtime/transport.h"

#define LAT_BYTES 8
#define BW_BYTES (4u << 20)
#define LAT_ITERS 2000
#define BW_ITERS 20
#define REPS 3

typedef struct {
    pipit__transport *t;
    int a, b;         /* the two world ranks */
    unsigned char *buf[2];
    pipit_status status;
} pong;

/* Rank `me` of the pair plays `iters` round trips of n bytes; returns
 * seconds per one-way message (a's clock decides), best of REPS. */
static double play(pong *g, int me, size_t n, int iters) {
    pipit__transport *t = g->t;
    uint64_t go = pipit__tag(PIPIT_TAG_VALUE, 0, 0), back = pipit__tag(PIPIT_TAG_VALUE, 0, 1);
    int other = me == g->a ? g->b : g->a;
    double best = 1e30;
    for (int r = 0; r < REPS && !g->status; r++) {
        double t0 = pipit__now();
        for (int i = 0; i < iters && !g->status; i++) {
            pipit_status s;
            if (me == g->a) {
                s = t->vt->isend(t, me, other, go, g->buf[0], n);
                if (!s) s = t->vt->recv(t, me, other, back, g->buf[1], n);
                if (!s) s = t->vt->fence(t, me, other, go);
            } else {
                s = t->vt->recv(t, me, other, go, g->buf[0] + BW_BYTES, n);
                if (!s) s = t->vt->isend(t, me, other, back, g->buf[0] + BW_BYTES, n);
                if (!s) s = t->vt->fence(t, me, other, back);
            }
            if (s) g->status = s;
        }
        double dt = (pipit__now() - t0) / (2.0 * iters);
        if (dt < best) best = dt;
    }
    return best;
}

/* Latency and bandwidth of the pair, measured by rank `me` of it. */
static void measure(pong *g, int me, double *bw, double *lat) {
    *lat = play(g, me, LAT_BYTES, LAT_ITERS);
    *bw = BW_BYTES / play(g, me, BW_BYTES, BW_ITERS);
}

static void *thread_b(void *arg) {
    pong *g = arg;
    double bw, lat;
    measure(g, g->b, &bw, &lat);
    return NULL;
}

/* One process: two threads through the threads transport. */
static pipit_status probe_threads(pipit_link_probe *out, unsigned char *mem) {
    pong g = {pipit__transport_local_new(2), 0, 1, {mem, mem + 2 * (size_t)BW_BYTES}, PIPIT_STATUS_OK};
    if (!g.t) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory for the transport");
    pthread_t th;
    if (pthread_create(&th, NULL, thread_b, &g) != 0) {
        g.t->vt->free(g.t);
        return pipit__err(PIPIT_STATUS_RUNTIME, "cannot start a thread");
    }
    measure(&g, 0, &out->intra_bw, &out->intra_lat);
    pthread_join(th, NULL);
    g.t->vt->free(g.t);
    out->processes = out->hosts = out->per_host = 1;
    return g.status;
}

/* Process 0 and `peer` ping-pong; everyone learns the result. */
static pipit_status probe_pair(pong *g, int me, int peer, double *bw, double *lat) {
    double v[2] = {0, 0};
    g->a = 0, g->b = peer;
    if (peer > 0 && (me == 0 || me == peer)) measure(g, me, &v[0], &v[1]);
    pipit_status s = g->status;
    if (s) g->t->vt->abort(g->t, me, pipit_errmsg()); /* so the others do not wait in the broadcast */
    pipit_status b = g->t->vt->bcast(g->t, 0, v, sizeof v);
    *bw = v[0], *lat = v[1];
    return s ? s : b;
}

static pipit_status probe_mpi(pipit_link_probe *out, unsigned char *mem) {
    int W = pipit_process_count(), me = pipit_process_rank();
    uint64_t tags[2] = {pipit__tag(PIPIT_TAG_VALUE, 0, 0), pipit__tag(PIPIT_TAG_VALUE, 0, 1)};
    pong g = {pipit__transport_mpi_new(W, tags, 2), 0, 0, {mem, mem + 2 * (size_t)BW_BYTES}, PIPIT_STATUS_OK};
    if (!g.t) return PIPIT_STATUS_RUNTIME; /* its message says why */
    int intra = -1, inter = -1;
    out->processes = W, out->hosts = 0, out->per_host = 0;
    for (int w = 0; w < W; w++) {
        int first = 1, same = 0;
        for (int v = 0; v < w; v++) first &= strcmp(g.t->hosts[v], g.t->hosts[w]) != 0;
        for (int v = 0; v < W; v++) same += strcmp(g.t->hosts[v], g.t->hosts[w]) == 0;
        out->hosts += first;
        out->per_host = same > out->per_host ? same : out->per_host;
        if (w && intra < 0 && !strcmp(g.t->hosts[w], g.t->hosts[0])) intra = w;
        if (inter < 0 && strcmp(g.t->hosts[w], g.t->hosts[0])) inter = w;
    }
    pipit_status s = probe_pair(&g, me, intra, &out->intra_bw, &out->intra_lat);
    if (!s) s = probe_pair(&g, me, inter, &out->inter_bw, &out->inter_lat);
    g.t->vt->free(g.t);
    return s;
}

pipit_status pipit_probe_links(pipit_link_probe *out) {
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_probe_links: out is NULL");
    memset(out, 0, sizeof *out);
    pipit_status s = pipit_init(NULL, NULL);
    if (s) return s;
    unsigned char *mem = pipit__calloc(3, BW_BYTES);
    if (!mem) return pipit__err(PIPIT_STATUS_NOMEM, "pipit_probe_links: out of memory");
    s = pipit_process_count() > 1 ? probe_mpi(out, mem) : probe_threads(out, mem);
    pipit__free(mem);
    if (s) pipit__err_prefix("pipit_probe_links");
    return s;
}
