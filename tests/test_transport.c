/*
 * test_transport.c — the threads transport (transport_local.c) and what
 * every transport shares (transport.c): zero-copy isend + fence with a slow
 * receiver, the PIPIT_DEBUG_SENDS checksum catching a sender that writes
 * too early, a fence woken by an abort, and the in-stage all-reduce over a
 * group of threads (sums in rank order, the same bits on every member
 * whatever order they arrive in). tests/test_mpi_transport.c covers the
 * same over MPI.
 */
#include <pthread.h>
#include <time.h>

#include "pipit.h"
#include "runtime/transport.h"
#include "test.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct {
    pipit__transport *t;
    int rank, delay_ms;
    pipit_status status;
    char msg[512];
    void *arg;
} peer;

static void *receiver(void *arg) {
    peer *r = arg;
    float *got = r->arg;
    sleep_ms(r->delay_ms);
    r->status = r->t->vt->recv(r->t, 1, 0, pipit__tag(PIPIT_TAG_VALUE, 5, 0), got, 1000 * sizeof *got);
    if (r->status) snprintf(r->msg, sizeof r->msg, "%s", pipit_errmsg());
    return NULL;
}

/* The receiver takes 200 ms to come; the fence waits for it, and only then
 * may the sender write its buffer: the receiver gets what was sent. */
PIPIT_TEST(transport_local_zero_copy) {
    pipit__transport *t = pipit__transport_local_new(2);
    ASSERT_TRUE(t);
    float sent[1000], got[1000] = {0};
    for (int i = 0; i < 1000; i++) sent[i] = (float)i * 0.5f;
    peer r = {t, 1, 200, PIPIT_STATUS_OK, "", got};
    pthread_t th;
    ASSERT_TRUE(pthread_create(&th, NULL, receiver, &r) == 0);
    uint64_t tag = pipit__tag(PIPIT_TAG_VALUE, 5, 0);
    ASSERT_OK(t->vt->isend(t, 0, 1, tag, sent, sizeof sent));
    double t0 = pipit__now();
    ASSERT_OK(t->vt->fence(t, 0, 1, tag));
    double waited = pipit__now() - t0;
    for (int i = 0; i < 1000; i++) sent[i] = -1; /* ours again */
    pthread_join(th, NULL);
    ASSERT_OK(r.status);
    for (int i = 0; i < 1000; i++) ASSERT_TRUE(got[i] == (float)i * 0.5f);
    ASSERT_TRUE(waited > 0.1); /* it did wait for the slow receiver */
    ASSERT_STATUS(t->vt->fence(t, 0, 1, tag), PIPIT_STATUS_INTERNAL);
    ASSERT_MSG_HAS("not outstanding");
    t->vt->free(t);
}

/* PIPIT_DEBUG_SENDS: writing the buffer before the fence is reported by
 * the receiver, naming both ranks and the tag. */
PIPIT_TEST(transport_local_debug_sends) {
    setenv("PIPIT_DEBUG_SENDS", "1", 1);
    pipit__transport *t = pipit__transport_local_new(2);
    unsetenv("PIPIT_DEBUG_SENDS");
    ASSERT_TRUE(t && t->debug_sends);
    float buf[1000], got[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (float)i;
    uint64_t tag = pipit__tag(PIPIT_TAG_VALUE, 5, 0);
    ASSERT_OK(t->vt->isend(t, 0, 1, tag, buf, sizeof buf));
    buf[17] = 3.0f; /* the contract broken: written before the fence */
    ASSERT_STATUS(t->vt->recv(t, 1, 0, tag, got, sizeof got), PIPIT_STATUS_RUNTIME);
    ASSERT_MSG_HAS("rank 1: the 4000 bytes from rank 0 (tag 0x0000000500000000) changed in flight");
    ASSERT_OK(t->vt->fence(t, 0, 1, tag)); /* the receiver did take it */
    ASSERT_OK(t->vt->isend(t, 0, 1, tag, buf, sizeof buf)); /* kept intact: no report */
    ASSERT_OK(t->vt->recv(t, 1, 0, tag, got, sizeof got));
    ASSERT_OK(t->vt->fence(t, 0, 1, tag));
    ASSERT_TRUE(got[17] == 3.0f);
    t->vt->free(t);
}

static void *aborter(void *arg) {
    peer *r = arg;
    sleep_ms(r->delay_ms);
    r->t->vt->abort(r->t, 1, "boom");
    return NULL;
}

/* A fence whose receiver fails wakes with the failure; reset drops the
 * isend (nothing leaks: ASan), and the transport works again. */
PIPIT_TEST(transport_local_fence_abort) {
    pipit__transport *t = pipit__transport_local_new(2);
    ASSERT_TRUE(t);
    float buf[16] = {0};
    uint64_t tag = pipit__tag(PIPIT_TAG_VALUE, 1, 0);
    ASSERT_OK(t->vt->isend(t, 0, 1, tag, buf, sizeof buf));
    peer r = {t, 1, 100, PIPIT_STATUS_OK, "", NULL};
    pthread_t th;
    ASSERT_TRUE(pthread_create(&th, NULL, aborter, &r) == 0);
    ASSERT_STATUS(t->vt->fence(t, 0, 1, tag), PIPIT_STATUS_RUNTIME);
    ASSERT_MSG_HAS("rank 1 failed: boom");
    pthread_join(th, NULL);
    t->vt->reset(t);
    ASSERT_OK(t->vt->isend(t, 0, 1, tag, buf, sizeof buf));
    ASSERT_OK(t->vt->recv(t, 1, 0, tag, buf, sizeof buf));
    ASSERT_OK(t->vt->fence(t, 0, 1, tag));
    t->vt->free(t);
}

/* ------------------------------------------------------------ all-reduce */

enum { NMEM = 3, NELEM = 10007 };

typedef struct {
    pipit__transport *t;
    int me, delay_ms;
    const int *group;
    double *x;
    pipit_status status;
} member;

static void *reduce_member(void *arg) {
    member *m = arg;
    sleep_ms(m->delay_ms);
    m->status = pipit__transport_allreduce(m->t, m->me, m->group, NMEM, 9, PIPIT_F64, m->x, NELEM);
    return NULL;
}

/* 1e16 - 1e16 + small: rank order keeps the small part, another order may not */
static double value(int rank, int i) { return rank == 0 ? 1e16 + 2.0 * i : rank == 1 ? -1e16 : 1.0 + 1e-3 * i; }

/* World ranks 1, 3, 4 of a 5-rank transport; they arrive in the opposite
 * of rank order. Every member ends with ((x1 + x3) + x4), which here is
 * not (x1 + (x3 + x4)): the order is the one asked for. */
PIPIT_TEST(transport_local_allreduce) {
    pipit__transport *t = pipit__transport_local_new(5);
    ASSERT_TRUE(t);
    static const int group[NMEM] = {1, 3, 4};
    double *x[NMEM];
    member m[NMEM];
    pthread_t th[NMEM];
    for (int k = 0; k < NMEM; k++) {
        ASSERT_TRUE((x[k] = malloc(NELEM * sizeof(double))) != NULL);
        for (int i = 0; i < NELEM; i++) x[k][i] = value(k, i);
        m[k] = (member){t, group[k], 30 * (NMEM - k), group, x[k], PIPIT_STATUS_OK};
        ASSERT_TRUE(pthread_create(&th[k], NULL, reduce_member, &m[k]) == 0);
    }
    for (int k = 0; k < NMEM; k++) pthread_join(th[k], NULL);
    int differs = 0;
    for (int k = 0; k < NMEM; k++) {
        ASSERT_OK(m[k].status);
        for (int i = 0; i < NELEM; i++) {
            double want = (value(0, i) + value(1, i)) + value(2, i);
            ASSERT_TRUE(x[k][i] == want);
            differs |= want != value(0, i) + (value(1, i) + value(2, i));
        }
    }
    ASSERT_TRUE(differs); /* the test can tell the orders apart */
    for (int k = 0; k < NMEM; k++) free(x[k]);
    static const int alone[1] = {2};
    double one = 5;
    ASSERT_OK(pipit__transport_allreduce(t, 2, alone, 1, 0, PIPIT_F64, &one, 1));
    ASSERT_TRUE(one == 5);
    ASSERT_STATUS(pipit__transport_allreduce(t, 0, group, NMEM, 0, PIPIT_F64, &one, 1), PIPIT_STATUS_INTERNAL);
    ASSERT_MSG_HAS("rank 0 is not in its group");
    ASSERT_STATUS(pipit__transport_allreduce(t, 1, group, NMEM, 0, PIPIT_I32, &one, 1), PIPIT_STATUS_INTERNAL);
    ASSERT_MSG_HAS("f32 or f64 only");
    t->vt->free(t);
}

/* ------------------------------ all-gather, reduce-scatter, all-to-all */

enum { NBLK = 1000 };

typedef struct {
    pipit__transport *t;
    int me, k, delay_ms;
    const int *group;
    int32_t *gather, *a2a_in, *a2a_out;
    double *rs;
    pipit_status status;
} coll_member;

static void *coll_member_run(void *arg) {
    coll_member *m = arg;
    sleep_ms(m->delay_ms);
    m->status = pipit__transport_allgather(m->t, m->me, m->group, NMEM, 4, PIPIT_I32, m->gather, NBLK);
    if (!m->status)
        m->status = pipit__transport_reduce_scatter(m->t, m->me, m->group, NMEM, 5, PIPIT_F64, m->rs, NBLK);
    if (!m->status)
        m->status = pipit__transport_alltoall(m->t, m->me, m->group, NMEM, 6, PIPIT_I32, m->a2a_in, m->a2a_out, NBLK);
    return NULL;
}

/* Member k of world ranks {1, 3, 4} (arriving against rank order): after
 * the all-gather every member holds every member's block in place; after
 * the reduce-scatter member k's block k is ((x0 + x1) + x2), the rank
 * order (value() makes the other orders differ); after the all-to-all
 * block j of member k's output is what member j put in its block k. */
PIPIT_TEST(transport_local_gather_scatter_alltoall) {
    pipit__transport *t = pipit__transport_local_new(5);
    ASSERT_TRUE(t);
    static const int group[NMEM] = {1, 3, 4};
    coll_member m[NMEM];
    pthread_t th[NMEM];
    for (int k = 0; k < NMEM; k++) {
        m[k] = (coll_member){t, group[k], k, 20 * (NMEM - k), group, calloc(NMEM * NBLK, sizeof(int32_t)),
                             calloc(NMEM * NBLK, sizeof(int32_t)), calloc(NMEM * NBLK, sizeof(int32_t)),
                             calloc(NMEM * NBLK, sizeof(double)), PIPIT_STATUS_OK};
        ASSERT_TRUE(m[k].gather && m[k].a2a_in && m[k].a2a_out && m[k].rs);
        for (int i = 0; i < NBLK; i++) m[k].gather[k * NBLK + i] = 1000 * k + i;
        for (int b = 0; b < NMEM; b++)
            for (int i = 0; i < NBLK; i++) {
                m[k].a2a_in[b * NBLK + i] = 100000 * k + 1000 * b + i;
                m[k].rs[b * NBLK + i] = value(k, i);
            }
    }
    for (int k = 0; k < NMEM; k++) ASSERT_TRUE(pthread_create(&th[k], NULL, coll_member_run, &m[k]) == 0);
    for (int k = 0; k < NMEM; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < NMEM; k++) {
        ASSERT_OK(m[k].status);
        for (int b = 0; b < NMEM; b++)
            for (int i = 0; i < NBLK; i++) {
                ASSERT_TRUE(m[k].gather[b * NBLK + i] == 1000 * b + i);
                ASSERT_TRUE(m[k].a2a_out[b * NBLK + i] == 100000 * b + 1000 * k + i);
            }
        for (int i = 0; i < NBLK; i++) {
            ASSERT_TRUE(m[k].rs[k * NBLK + i] == (value(0, i) + value(1, i)) + value(2, i));
            for (int b = 0; b < NMEM; b++) /* the others' blocks are untouched */
                if (b != k) ASSERT_TRUE(m[k].rs[b * NBLK + i] == value(k, i));
        }
    }
    int32_t one = 7, two[2] = {0, 0};
    static const int alone[1] = {2};
    ASSERT_OK(pipit__transport_allgather(t, 2, alone, 1, 0, PIPIT_I32, &one, 1));
    ASSERT_OK(pipit__transport_alltoall(t, 2, alone, 1, 0, PIPIT_I32, &one, two, 1));
    ASSERT_TRUE(one == 7 && two[0] == 7);
    ASSERT_STATUS(pipit__transport_reduce_scatter(t, 1, group, NMEM, 0, PIPIT_I32, two, 1), PIPIT_STATUS_INTERNAL);
    ASSERT_MSG_HAS("reduce-scatter: dtype i32 is not summed");
    ASSERT_STATUS(pipit__transport_allgather(t, 0, group, NMEM, 0, PIPIT_I32, two, 1), PIPIT_STATUS_INTERNAL);
    ASSERT_MSG_HAS("all-gather: rank 0 is not in its group");
    ASSERT_STATUS(pipit__transport_alltoall(t, 1, group, NMEM, 0, PIPIT_I32, two, two, 1), PIPIT_STATUS_INTERNAL);
    ASSERT_MSG_HAS("must not be the same memory");
    for (int k = 0; k < NMEM; k++) {
        free(m[k].gather);
        free(m[k].a2a_in);
        free(m[k].a2a_out);
        free(m[k].rs);
    }
    t->vt->free(t);
}

/* Device memory (the cuda backend's hooks set): an isend cannot be read by
 * the other thread in place, so it goes through a host copy (to_host once
 * on the sender, from_host once on the receiver) and its fence is
 * immediate; host tags are never staged. */
static int to_host_calls, from_host_calls;
static void count_to_host(void *dst, const void *src, size_t n) {
    to_host_calls++;
    memcpy(dst, src, n);
}
static void count_from_host(void *dst, const void *src, size_t n) {
    from_host_calls++;
    memcpy(dst, src, n);
}

PIPIT_TEST(transport_local_device_staging) {
    pipit__transport *t = pipit__transport_local_new(2);
    ASSERT_TRUE(t);
    t->to_host = count_to_host, t->from_host = count_from_host;
    float buf[64], got[64];
    for (int i = 0; i < 64; i++) buf[i] = (float)i;
    uint64_t dev = pipit__tag(PIPIT_TAG_VALUE, 2, 0), host = pipit__tag(PIPIT_TAG_NORM, 2, 0);
    ASSERT_OK(t->vt->isend(t, 0, 1, dev, buf, sizeof buf));
    buf[5] = -1; /* the host copy was taken: writing now changes nothing sent */
    ASSERT_OK(t->vt->fence(t, 0, 1, dev));
    ASSERT_OK(t->vt->recv(t, 1, 0, dev, got, sizeof got));
    ASSERT_TRUE(got[5] == 5.0f && got[63] == 63.0f);
    ASSERT_EQ_I64(to_host_calls, 1);
    ASSERT_EQ_I64(from_host_calls, 1);
    ASSERT_OK(t->vt->send(t, 0, 1, host, buf, 8));
    ASSERT_OK(t->vt->recv(t, 1, 0, host, got, 8));
    ASSERT_EQ_I64(to_host_calls + from_host_calls, 2);
    t->vt->free(t);
}

/* PIPIT_HEARTBEAT (issue 25 item 10): 0.001 used to end healthy jobs
 * before step 0 and garbage silently meant 10 s; now unset / empty is the
 * default, 0 is off, 1 .. 86400 s are taken, anything else is INVALID
 * naming the variable and its value. */
/* PIPIT_TIMEOUT: garbage fails pipit_compile naming the variable (it
 * silently meant 300 s before). */
PIPIT_TEST(transport_timeout_limit) {
    double v = -1;
    unsetenv("PIPIT_TIMEOUT");
    ASSERT_OK(pipit__timeout_limit(&v));
    ASSERT_NEAR_F64(v, 300.0, 0);
    setenv("PIPIT_TIMEOUT", "2.5", 1);
    ASSERT_OK(pipit__timeout_limit(&v));
    ASSERT_NEAR_F64(v, 2.5, 0);
    const char *bad[] = {"abc", "10s", " 5", "0", "-3", "nan", "inf", "1e999", "1e-400", "1e9"};
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_param(g, "x", PIPIT_F32, 1, (int64_t[]){2});
    pipit_val loss = pipit_sum(g, pipit_mul(g, x, x));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("PIPIT_TIMEOUT", bad[i], 1);
        ASSERT_STATUS(pipit__timeout_limit(&v), PIPIT_STATUS_INVALID);
        pipit_program *p = NULL;
        ASSERT_STATUS(pipit_compile(g, loss, NULL, &p), PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS("pipit_compile");
        ASSERT_MSG_HAS("PIPIT_TIMEOUT='");
        ASSERT_MSG_HAS(bad[i]);
        ASSERT_TRUE(p == NULL);
    }
    unsetenv("PIPIT_TIMEOUT");
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, NULL, &p));
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(transport_heartbeat_limit) {
    double v = -1;
    unsetenv("PIPIT_HEARTBEAT");
    ASSERT_OK(pipit__heartbeat_limit(&v));
    ASSERT_NEAR_F64(v, 10.0, 0);
    const struct {
        const char *text;
        double want;
    } good[] = {{"", 10}, {"0", 0}, {"1", 1}, {"2.5", 2.5}, {"30", 30}, {"86400", 86400}, {"1e1", 10}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("PIPIT_HEARTBEAT", good[i].text, 1);
        v = -1;
        ASSERT_OK(pipit__heartbeat_limit(&v));
        ASSERT_NEAR_F64(v, good[i].want, 0);
    }
    const struct {
        const char *text, *why;
    } bad[] = {{"0.001", "shorter than the heartbeats' own period"}, {"0.999", "shorter than"},
               {"-1", "negative"},               {"-0.5", "negative"},
               {"1e-400", "shorter than"},
               {"abc", "not a number"},          {"10s", "not a number"},
               {" 5", "not a number"},           {"5 ", "not a number"},
               {"inf", "not a finite number"},   {"nan", "not a finite number"},
               {"1e999", "not a finite number"}, {"86401", "longer than a day"},
               {"1e300", "longer than a day"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("PIPIT_HEARTBEAT", bad[i].text, 1);
        v = -1;
        ASSERT_STATUS(pipit__heartbeat_limit(&v), PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS("PIPIT_HEARTBEAT='");
        ASSERT_MSG_HAS(bad[i].text);
        ASSERT_MSG_HAS(bad[i].why);
        ASSERT_MSG_HAS("it must be 0 (no heartbeats) or seconds from 1 to 86400");
    }
    unsetenv("PIPIT_HEARTBEAT");
}
