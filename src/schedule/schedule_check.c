/*
 * schedule_check.c — proves a schedule runnable and predicts how it runs.
 * The checker validates placement, completeness and microbatch order, then
 * executes the rank lists in order (non-blocking sends, blocking receives)
 * and, if that stalls, names the cycle of waiting tasks. The simulator runs
 * the same walk with per-task costs to get the timeline, bubble and memory.
 * A cross-rank message leaves when its task ends and its link is free: the
 * messages of one directed link go one at a time, xfer seconds each, and
 * arrive comm seconds later. The walk takes each rank's tasks in list order,
 * so a link's messages (all from its sending rank) are issued in time order.
 * A pulled message (a rendezvous) instead leaves once its receiver waits
 * for it and a reply has crossed back (pull).
 */
#include "schedule/schedule.h"

#include <math.h>
#include <string.h>

/* Where each (kind, stage, mb) sits: rank and index in that rank's list. */
typedef struct {
    int32_t rank, idx;
} task_loc;

typedef struct {
    const pipit_schedule *s;
    size_t slots;        /* S * M */
    task_loc *loc[4];    /* [kind][stage * M + mb], rank = -1 if absent */
    unsigned char *done[4];
    double *fin[4];      /* finish time per task (simulation only) */
    double *arr[4];      /* when its output reaches the consumer's rank (simulation only) */
    double *link_free;   /* [P * P] when link a -> b has sent its last message (simulation only) */
    int *pos;            /* [P] next task to run on each rank */
    /* pulled messages: each link's transfers, in time order, as a list in
     * one pool (at most one message per F, B or BW task: 2 S M) */
    double *bk_start, *bk_end;
    int32_t *bk_next, nbk;
    int32_t *bk_tail, *bk_cursor; /* [P * P]: the last transfer; the first one a reply may still wait for */
    const uint8_t *const *paired; /* [P][ntasks] 1: task i runs as one with task i + 1 (NULL: none) */
} walk_ctx;

static size_t slot(const walk_ctx *c, int stage, int mb) {
    return (size_t)stage * (size_t)c->s->M + (size_t)mb;
}

const char *pipit__task_str(char *buf, size_t n, pipit_task t) {
    static const char *const k[] = {"F", "B", "W", "BW"};
    snprintf(buf, n, "%s%d.%d", t.kind < 4 ? k[t.kind] : "?", (int)t.stage, (int)t.mb);
    return buf;
}

static pipit_task mk_task(int kind, int stage, int mb) {
    pipit_task t = {(uint8_t)kind, (int16_t)stage, (int32_t)mb};
    return t;
}

static void ctx_free(walk_ctx *c) {
    for (int k = 0; k < 4; k++) {
        pipit__free(c->loc[k]);
        pipit__free(c->done[k]);
        pipit__free(c->fin[k]);
        pipit__free(c->arr[k]);
    }
    pipit__free(c->link_free);
    pipit__free(c->pos);
    pipit__free(c->bk_start);
    pipit__free(c->bk_end);
    pipit__free(c->bk_next);
    pipit__free(c->bk_tail);
    pipit__free(c->bk_cursor);
}

/* with_times: the simulator's timeline; pulled: and its rendezvous
 * bookkeeping (pull), only when the costs ask for it. */
static pipit_status ctx_init(walk_ctx *c, const pipit_schedule *s, int with_times, int pulled) {
    memset(c, 0, sizeof *c);
    c->s = s;
    c->slots = (size_t)s->S * (size_t)s->M;
    int ok = (c->pos = pipit__calloc((size_t)s->P, sizeof *c->pos)) != NULL;
    size_t links = (size_t)s->P * (size_t)s->P, nbk = 2 * c->slots;
    if (ok && with_times) ok = (c->link_free = pipit__calloc(links, sizeof(double))) != NULL;
    if (ok && with_times && pulled) {
        c->bk_start = pipit__malloc(PIPIT_MAX(nbk, 1) * sizeof(double));
        c->bk_end = pipit__malloc(PIPIT_MAX(nbk, 1) * sizeof(double));
        c->bk_next = pipit__malloc(PIPIT_MAX(nbk, 1) * sizeof(int32_t));
        c->bk_tail = pipit__malloc(links * sizeof(int32_t));
        c->bk_cursor = pipit__malloc(links * sizeof(int32_t));
        ok = c->bk_start && c->bk_end && c->bk_next && c->bk_tail && c->bk_cursor;
        for (size_t i = 0; ok && i < links; i++) c->bk_tail[i] = c->bk_cursor[i] = -1;
    }
    for (int k = 0; k < 4 && ok; k++) {
        c->loc[k] = pipit__malloc(c->slots * sizeof(task_loc));
        c->done[k] = pipit__calloc(c->slots, 1);
        c->fin[k] = with_times ? pipit__calloc(c->slots, sizeof(double)) : NULL;
        c->arr[k] = with_times ? pipit__calloc(c->slots, sizeof(double)) : NULL;
        ok = c->loc[k] && c->done[k] && (!with_times || (c->fin[k] && c->arr[k]));
        for (size_t i = 0; ok && i < c->slots; i++) c->loc[k][i].rank = -1;
    }
    if (ok) return PIPIT_STATUS_OK;
    ctx_free(c);
    return pipit__err(PIPIT_STATUS_NOMEM, "out of memory checking a schedule");
}

/* ------------------------------------------------------------- structure */

static pipit_status check_sizes(const pipit_schedule *s) {
    if (!s) return pipit__err(PIPIT_STATUS_MISUSE, "schedule is NULL");
    if (s->P < 1 || s->S < 1 || s->M < 1)
        return pipit__err(PIPIT_STATUS_SCHEDULE, "schedule needs P, S, M >= 1 (got P=%d S=%d M=%d)",
                          s->P, s->S, s->M);
    if (s->S > PIPIT__SCHED_MAX_STAGES || s->M > PIPIT__SCHED_MAX_MB ||
        (long)s->S * s->M > PIPIT__SCHED_MAX_SLOTS)
        return pipit__err(PIPIT_STATUS_SCHEDULE, "schedule too large (S=%d, M=%d)", s->S, s->M);
    if (!s->stage_rank || !s->ntasks || !s->tasks)
        return pipit__err(PIPIT_STATUS_MISUSE, "schedule is half-built (NULL arrays)");
    for (int st = 0; st < s->S; st++)
        if (s->stage_rank[st] < 0 || s->stage_rank[st] >= s->P)
            return pipit__err(PIPIT_STATUS_SCHEDULE,
                              "stage %d is mapped to rank %d, but there %s only %d rank%s (0..%d)", st,
                              s->stage_rank[st], s->P == 1 ? "is" : "are", s->P, s->P == 1 ? "" : "s", s->P - 1);
    for (int r = 0; r < s->P; r++)
        if (s->ntasks[r] < 0 || (s->ntasks[r] > 0 && !s->tasks[r]))
            return pipit__err(PIPIT_STATUS_MISUSE, "rank %d has a bad task list (ntasks=%d)", r,
                              s->ntasks[r]);
    return PIPIT_STATUS_OK;
}

/* Range, placement and uniqueness of one task, recording where it sits. */
static pipit_status index_task(walk_ctx *c, int r, int i) {
    const pipit_schedule *s = c->s;
    pipit_task t = s->tasks[r][i];
    char a[32];
    if (t.kind > PIPIT_TASK_BW)
        return pipit__err(PIPIT_STATUS_SCHEDULE, "rank %d task %d has unknown kind %d", r, i,
                          (int)t.kind);
    if (t.stage < 0 || t.stage >= s->S || t.mb < 0 || t.mb >= s->M)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "rank %d has %s, outside the schedule's %d stage%s and %d microbatch%s",
                          r, pipit__task_str(a, sizeof a, t), s->S, s->S == 1 ? "" : "s", s->M, s->M == 1 ? "" : "es");
    if (s->stage_rank[t.stage] != r)
        return pipit__err(PIPIT_STATUS_SCHEDULE, "rank %d has %s but stage %d belongs to rank %d",
                          r, pipit__task_str(a, sizeof a, t), (int)t.stage,
                          s->stage_rank[t.stage]);
    task_loc *l = &c->loc[t.kind][slot(c, t.stage, t.mb)];
    if (l->rank >= 0)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "task %s appears twice (rank %d position %d and rank %d position %d)",
                          pipit__task_str(a, sizeof a, t), l->rank, l->idx, r, i);
    l->rank = r;
    l->idx = i;
    return PIPIT_STATUS_OK;
}

static int has(const walk_ctx *c, int kind, int st, int mb) {
    return c->loc[kind][slot(c, st, mb)].rank >= 0;
}

static pipit_status missing(const walk_ctx *c, int kind, int st, int mb) {
    char a[32];
    return pipit__err(PIPIT_STATUS_SCHEDULE, "missing task %s (stage %d is on rank %d)",
                      pipit__task_str(a, sizeof a, mk_task(kind, st, mb)), st,
                      c->s->stage_rank[st]);
}

/* Every (stage, mb) has F and either BW or B + W, never a mix. */
static pipit_status check_complete(const walk_ctx *c) {
    for (int st = 0; st < c->s->S; st++)
        for (int mb = 0; mb < c->s->M; mb++) {
            int b = has(c, PIPIT_TASK_B, st, mb), w = has(c, PIPIT_TASK_W, st, mb);
            char a[32], x[32];
            if (!has(c, PIPIT_TASK_F, st, mb)) return missing(c, PIPIT_TASK_F, st, mb);
            if (has(c, PIPIT_TASK_BW, st, mb) && (b || w))
                return pipit__err(PIPIT_STATUS_SCHEDULE,
                                  "stage %d microbatch %d has both %s and %s: a backward is "
                                  "either BW, or B then W",
                                  st, mb, pipit__task_str(a, sizeof a, mk_task(PIPIT_TASK_BW, st, mb)),
                                  pipit__task_str(x, sizeof x, mk_task(b ? PIPIT_TASK_B : PIPIT_TASK_W, st, mb)));
            if (has(c, PIPIT_TASK_BW, st, mb)) continue;
            if (b && !w) return missing(c, PIPIT_TASK_W, st, mb);
            if (w && !b) return missing(c, PIPIT_TASK_B, st, mb);
            if (!b) return missing(c, c->s->split_bw ? PIPIT_TASK_B : PIPIT_TASK_BW, st, mb);
        }
    return PIPIT_STATUS_OK;
}

/* Microbatches of one stage run in increasing order, separately for the
 * forwards, the input-gradient passes (B or BW) and the weight-gradient
 * passes (W or BW): the last fixes the gradient accumulation order. */
static pipit_status check_order(const walk_ctx *c) {
    const pipit_schedule *s = c->s;
    pipit_task *last = pipit__malloc((size_t)s->S * 3 * sizeof *last);
    if (!last) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory checking a schedule");
    for (int i = 0; i < s->S * 3; i++) last[i].mb = -1;
    pipit_status st = PIPIT_STATUS_OK;
    for (int r = 0; r < s->P && !st; r++)
        for (int i = 0; i < s->ntasks[r] && !st; i++) {
            pipit_task t = s->tasks[r][i];
            int chains[2], n = 0; /* 0: F, 1: B/BW, 2: W/BW */
            if (t.kind == PIPIT_TASK_F) chains[n++] = 0;
            if (t.kind == PIPIT_TASK_B || t.kind == PIPIT_TASK_BW) chains[n++] = 1;
            if (t.kind == PIPIT_TASK_W || t.kind == PIPIT_TASK_BW) chains[n++] = 2;
            for (int k = 0; k < n && !st; k++) {
                pipit_task *prev = &last[t.stage * 3 + chains[k]];
                char a[32], b[32];
                if (prev->mb > t.mb)
                    st = pipit__err(PIPIT_STATUS_SCHEDULE,
                                    "rank %d runs %s after %s: microbatches of one stage must run "
                                    "in increasing order",
                                    r, pipit__task_str(a, sizeof a, t),
                                    pipit__task_str(b, sizeof b, *prev));
                *prev = t;
            }
        }
    pipit__free(last);
    return st;
}

/* ------------------------------------------------------------- execution */

/* Dependencies of t (schedule.h); after check_complete each one exists. */
static int task_deps(const walk_ctx *c, pipit_task t, pipit_task dep[2]) {
    int n = 0, st = t.stage, mb = t.mb;
    switch (t.kind) {
    case PIPIT_TASK_F:
        if (st > 0) dep[n++] = mk_task(PIPIT_TASK_F, st - 1, mb);
        break;
    case PIPIT_TASK_B:
    case PIPIT_TASK_BW:
        dep[n++] = mk_task(PIPIT_TASK_F, st, mb);
        if (st < c->s->S - 1)
            dep[n++] = mk_task(has(c, PIPIT_TASK_BW, st + 1, mb) ? PIPIT_TASK_BW : PIPIT_TASK_B,
                               st + 1, mb);
        break;
    default: dep[n++] = mk_task(PIPIT_TASK_B, st, mb); break;
    }
    return n;
}

/* First dependency of t not yet finished, or -1 if t is ready. */
static int first_unmet(const walk_ctx *c, pipit_task t, pipit_task *dep) {
    pipit_task d[2];
    int n = task_deps(c, t, d);
    for (int i = 0; i < n; i++)
        if (!c->done[d[i].kind][slot(c, d[i].stage, d[i].mb)]) {
            *dep = d[i];
            return i;
        }
    return -1;
}

/* A transfer [start, end) on link l, after the link's others. */
static void book(walk_ctx *c, size_t l, double start, double end) {
    int32_t i = c->nbk++;
    c->bk_start[i] = start, c->bk_end[i] = end, c->bk_next[i] = -1;
    if (c->bk_tail[l] >= 0) c->bk_next[c->bk_tail[l]] = i;
    if (c->bk_cursor[l] < 0) c->bk_cursor[l] = i;
    c->bk_tail[l] = i;
}

/* When a small message queued on link l at time t leaves: after the
 * transfers under way or queued back to back at t. `since` is a time no
 * later query on l goes below (transfers ended by then are passed for
 * good). */
static double queue_behind(walk_ctx *c, size_t l, double t, double since) {
    int32_t i = c->bk_cursor[l];
    while (i >= 0 && c->bk_end[i] <= since) i = c->bk_next[i];
    c->bk_cursor[l] = i;
    for (; i >= 0 && c->bk_start[i] <= t; i = c->bk_next[i]) t = PIPIT_MAX(t, c->bk_end[i]);
    return t;
}

/* A rendezvous (costs->pulled): the message of task d (on rank q) for rank
 * r, which reaches the task needing it at rank_free. Its notice arrives
 * comm after the send; the receiver, once there, replies, and the reply
 * queues behind the data going that way and takes comm; then the data
 * takes its turn on the link. Returns its arrival, booking the link. The
 * walk takes rank r's tasks in order, so its pulls on a link come in time
 * order and rank_free only grows. */
static double pull(walk_ctx *c, int q, int r, pipit_task d, double rank_free, const pipit__sim_costs *costs) {
    size_t k = slot(c, d.stage, d.mb), P = (size_t)c->s->P;
    size_t fwd = (size_t)q * P + (size_t)r, back = (size_t)r * P + (size_t)q;
    double reply = queue_behind(c, back, PIPIT_MAX(c->fin[d.kind][k] + costs->comm, rank_free), rank_free);
    double leave = PIPIT_MAX(reply + costs->comm, c->link_free[fwd]);
    c->link_free[fwd] = leave + costs->xfer;
    book(c, fwd, leave, c->link_free[fwd]);
    return c->arr[d.kind][k] = c->link_free[fwd] + costs->comm;
}

/* Start time of a ready task: its rank is free and every input has arrived
 * (a cross-rank input when its message has: send_output, or pull). */
static double ready_time(walk_ctx *c, int r, pipit_task t, double rank_free, const pipit__sim_costs *costs) {
    pipit_task d[2];
    int n = task_deps(c, t, d);
    double start = rank_free;
    for (int i = 0; i < n; i++) {
        size_t k = slot(c, d[i].stage, d[i].mb);
        int q = c->loc[d[i].kind][k].rank;
        double at = q == r                    ? c->fin[d[i].kind][k]
                    : costs && costs->pulled ? pull(c, q, r, d[i], rank_free, costs)
                                             : c->arr[d[i].kind][k];
        start = PIPIT_MAX(start, at);
    }
    return start;
}

/* Task t of rank r ended: its output (F: to the next stage; B, BW: the
 * input gradient to the previous one) leaves on its link, after the
 * messages before it on that link. */
static void send_output(walk_ctx *c, int r, pipit_task t, const pipit__sim_costs *costs) {
    const pipit_schedule *s = c->s;
    int to = t.kind == PIPIT_TASK_F ? t.stage + 1 : t.kind == PIPIT_TASK_W ? -1 : t.stage - 1;
    if (to < 0 || to >= s->S || s->stage_rank[to] == r || (costs && costs->pulled)) return; /* pulled: pull */
    size_t k = slot(c, t.stage, t.mb);
    double *link = &c->link_free[(size_t)r * (size_t)s->P + (size_t)s->stage_rank[to]];
    double leave = PIPIT_MAX(c->fin[t.kind][k], *link);
    *link = leave + (costs ? costs->xfer : 0.0);
    c->arr[t.kind][k] = *link + (costs ? costs->comm : 0.0);
}

/* An overlapped pair (check only): both tasks start when the
 * dependencies of both are met and both end together, which is when the
 * rank's interleaved instructions send the first of their messages at
 * the latest and receive the last at the earliest. */
static int run_pair(walk_ctx *c, int r) {
    int i = c->pos[r];
    pipit_task a = c->s->tasks[r][i], b = c->s->tasks[r][i + 1], dep;
    if (first_unmet(c, a, &dep) >= 0 || first_unmet(c, b, &dep) >= 0) return 0;
    c->done[a.kind][slot(c, a.stage, a.mb)] = 1;
    c->done[b.kind][slot(c, b.stage, b.mb)] = 1;
    c->pos[r] += 2;
    return 2;
}

/* Runs rank r's next task (or pair) if its inputs are ready (with res !=
 * NULL also timing it; pairs only in the check): how many ran. */
static int run_next(walk_ctx *c, int r, const pipit__sim_costs *costs, pipit__sim_result *res) {
    int i = c->pos[r];
    if (c->paired && c->paired[r][i] && i + 1 < c->s->ntasks[r]) return run_pair(c, r);
    pipit_task t = c->s->tasks[r][i], dep;
    if (first_unmet(c, t, &dep) >= 0) return 0;
    size_t k = slot(c, t.stage, t.mb);
    c->done[t.kind][k] = 1;
    c->pos[r]++;
    if (res) {
        double free_at = i ? res->end[r][i - 1] : 0.0;
        res->start[r][i] = ready_time(c, r, t, free_at, costs);
        res->end[r][i] = res->start[r][i] + pipit__task_cost(costs, t);
        c->fin[t.kind][k] = res->end[r][i];
        send_output(c, r, t, costs);
    }
    return 1;
}

/* Runs every rank as far as it can, round after round, until nothing
 * moves; returns how many tasks ran (all of them unless it deadlocks). */
static long walk(walk_ctx *c, const pipit__sim_costs *costs, pipit__sim_result *res) {
    long ran = 0, before;
    do {
        before = ran;
        for (int r = 0; r < c->s->P; r++)
            for (int k; c->pos[r] < c->s->ntasks[r] && (k = run_next(c, r, costs, res));) ran += k;
    } while (ran > before);
    return ran;
}

/* Appends "rank r waits at X for Y (rank q)" for each rank on the cycle. */
static pipit_status report_deadlock(const walk_ctx *c) {
    const pipit_schedule *s = c->s;
    int *seen = pipit__malloc((size_t)s->P * sizeof *seen);
    if (!seen) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reporting a deadlock");
    for (int r = 0; r < s->P; r++) seen[r] = -1;
    /* every stuck rank waits on a task of a rank that is also stuck, so
     * following "waits for" from any stuck rank must close a cycle */
    int r = 0, step = 0;
    while (c->pos[r] >= s->ntasks[r]) r++;
    while (seen[r] < 0) {
        pipit_task dep;
        seen[r] = step++;
        first_unmet(c, s->tasks[r][c->pos[r]], &dep);
        r = c->loc[dep.kind][slot(c, dep.stage, dep.mb)].rank;
    }
    char msg[1536];
    size_t used = (size_t)snprintf(msg, sizeof msg, "deadlock: ");
    int start = r, n = 0;
    do {
        pipit_task t = s->tasks[r][c->pos[r]], dep;
        char a[32], b[32];
        first_unmet(c, t, &dep);
        int q = c->loc[dep.kind][slot(c, dep.stage, dep.mb)].rank;
        if (used < sizeof msg)
            used += (size_t)snprintf(msg + used, sizeof msg - used, "%srank %d waits at %s for %s (rank %d%s)",
                                     n++ ? ", " : "", r, pipit__task_str(a, sizeof a, t),
                                     pipit__task_str(b, sizeof b, dep), q,
                                     q == r ? ", later in its own list" : "");
        r = q;
    } while (r != start);
    pipit__free(seen);
    return pipit__err(PIPIT_STATUS_DEADLOCK, "%s", msg);
}

static long total_tasks(const pipit_schedule *s) {
    long n = 0;
    for (int r = 0; r < s->P; r++) n += s->ntasks[r];
    return n;
}

/* Everything but the walk: sizes, placement, completeness, order. */
static pipit_status check_static(walk_ctx *c) {
    for (int r = 0; r < c->s->P; r++)
        for (int i = 0; i < c->s->ntasks[r]; i++) {
            pipit_status st = index_task(c, r, i);
            if (st) return st;
        }
    pipit_status st = check_complete(c);
    return st ? st : check_order(c);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The first slot (stage * M + mb) in 0..slots-1 absent from keys[n], or -1. */
static int64_t first_gap(int64_t *keys, size_t n, int64_t slots) {
    qsort(keys, n, sizeof *keys, cmp_i64);
    int64_t want = 0;
    for (size_t i = 0; i < n && want < slots; i++) {
        if (keys[i] > want) return want;
        if (keys[i] == want) want++;
    }
    return want < slots ? want : -1;
}

/* The checker's tables have S * M entries per task kind. A schedule with
 * fewer than 2 * S * M tasks is incomplete, so when those tables would be
 * larger than the schedule itself, the missing task is found by sorting the
 * tasks instead: memory and time stay proportional to what the schedule
 * holds (a 28-byte file naming microbatch 16777215 allocates nothing big). */
static pipit_status check_sparse(const pipit_schedule *s, int *done) {
    int64_t slots = (int64_t)s->S * s->M, total = total_tasks(s);
    *done = 0;
    if (slots <= 65536 || total >= 2 * slots) return PIPIT_STATUS_OK;
    *done = 1;
    for (int r = 0; r < s->P; r++) /* the cheap per-task checks come first, as in check_static */
        for (int i = 0; i < s->ntasks[r]; i++) {
            pipit_task t = s->tasks[r][i];
            char a[32];
            if (t.kind > PIPIT_TASK_BW)
                return pipit__err(PIPIT_STATUS_SCHEDULE, "rank %d task %d has unknown kind %d", r, i, (int)t.kind);
            if (t.stage < 0 || t.stage >= s->S || t.mb < 0 || t.mb >= s->M)
                return pipit__err(PIPIT_STATUS_SCHEDULE,
                                  "rank %d has %s, outside the schedule's %d stages and %d microbatches", r,
                                  pipit__task_str(a, sizeof a, t), s->S, s->M);
        }
    int64_t *keys = pipit__malloc(sizeof *keys * (size_t)PIPIT_MAX(total, 1));
    if (!keys) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory checking a schedule");
    int64_t gap = -1;
    int kind = PIPIT_TASK_F;
    for (int pass = 0; pass < 2 && gap < 0; pass++) {
        size_t n = 0;
        for (int r = 0; r < s->P; r++)
            for (int i = 0; i < s->ntasks[r]; i++) {
                pipit_task t = s->tasks[r][i];
                int fwd = t.kind == PIPIT_TASK_F, bwd = t.kind == PIPIT_TASK_B || t.kind == PIPIT_TASK_BW;
                if (pass == 0 ? fwd : bwd) keys[n++] = (int64_t)t.stage * s->M + t.mb;
            }
        gap = first_gap(keys, n, slots);
        kind = pass == 0 ? PIPIT_TASK_F : s->split_bw ? PIPIT_TASK_B : PIPIT_TASK_BW;
    }
    pipit__free(keys);
    PIPIT_ASSERT(gap >= 0); /* fewer than 2 * slots tasks: F or a backward is missing */
    int st = (int)(gap / s->M), mb = (int)(gap % s->M);
    char a[32];
    return pipit__err(PIPIT_STATUS_SCHEDULE,
                      "missing task %s (stage %d is on rank %d): %lld tasks cannot cover %d stages x %d microbatches",
                      pipit__task_str(a, sizeof a, mk_task(kind, st, mb)), st, s->stage_rank[st], (long long)total,
                      s->S, s->M);
}

pipit_status pipit__schedule_check(const pipit_schedule *s) {
    pipit_status st = check_sizes(s);
    if (st) return st;
    int done;
    if ((st = check_sparse(s, &done)) || done) return st;
    walk_ctx c;
    if ((st = ctx_init(&c, s, 0, 0))) return st;
    st = check_static(&c);
    if (!st && walk(&c, NULL, NULL) < total_tasks(s)) st = report_deadlock(&c);
    ctx_free(&c);
    return st;
}

pipit_status pipit__schedule_check_paired(const pipit_schedule *s, const uint8_t *const *paired) {
    walk_ctx c;
    pipit_status st = ctx_init(&c, s, 0, 0);
    if (st) return st;
    c.paired = paired;
    st = check_static(&c);
    if (!st && walk(&c, NULL, NULL) < total_tasks(s)) st = pipit__err(PIPIT_STATUS_DEADLOCK, "overlapped pairs deadlock");
    ctx_free(&c);
    return st;
}

/* ------------------------------------------------------------- simulator */

double pipit__task_cost(const pipit__sim_costs *c, pipit_task t) {
    double f = c && c->f ? c->f[t.stage] : 1.0;
    double b = c && c->b ? c->b[t.stage] : 1.0;
    double w = c && c->w ? c->w[t.stage] : 1.0;
    switch (t.kind) {
    case PIPIT_TASK_F: return f;
    case PIPIT_TASK_B: return b;
    case PIPIT_TASK_W: return w;
    default: return b + w;
    }
}

static pipit_status check_costs(const pipit__sim_costs *c, int S) {
    if (!c) return PIPIT_STATUS_OK;
    const double *arr[4] = {c->f, c->b, c->w, c->act_bytes};
    const char *name[4] = {"f", "b", "w", "act_bytes"};
    for (int k = 0; k < 4; k++)
        for (int st = 0; arr[k] && st < S; st++)
            if (!isfinite(arr[k][st]) || arr[k][st] < 0)
                return pipit__err(PIPIT_STATUS_INVALID,
                                  "simulator cost %s[%d] = %g must be finite and >= 0", name[k], st,
                                  arr[k][st]);
    for (int st = 0; c->b_delta_bytes && st < S; st++) {
        double act = c->act_bytes ? c->act_bytes[st] : 1.0;
        if (!isfinite(c->b_delta_bytes[st]) || act + c->b_delta_bytes[st] < 0)
            return pipit__err(PIPIT_STATUS_INVALID, "simulator b_delta_bytes[%d] = %g leaves negative bytes", st,
                              c->b_delta_bytes[st]);
    }
    if (!isfinite(c->comm) || c->comm < 0)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "simulator comm latency %g must be finite and >= 0", c->comm);
    if (!isfinite(c->xfer) || c->xfer < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "simulator message transfer time %g must be finite and >= 0",
                          c->xfer);
    return PIPIT_STATUS_OK;
}

void pipit__sim_result_free(pipit__sim_result *r) {
    if (!r) return;
    for (int i = 0; i < r->P; i++) {
        if (r->start) pipit__free(r->start[i]);
        if (r->end) pipit__free(r->end[i]);
    }
    pipit__free(r->start);
    pipit__free(r->end);
    pipit__free(r->busy);
    pipit__free(r->rank_bubble);
    pipit__free(r->peak_live);
    pipit__free(r->peak_bytes);
    memset(r, 0, sizeof *r);
}

static pipit_status result_alloc(pipit__sim_result *r, const pipit_schedule *s) {
    memset(r, 0, sizeof *r);
    size_t P = (size_t)s->P;
    r->start = pipit__calloc(P, sizeof *r->start);
    r->end = pipit__calloc(P, sizeof *r->end);
    r->busy = pipit__calloc(P, sizeof *r->busy);
    r->rank_bubble = pipit__calloc(P, sizeof *r->rank_bubble);
    r->peak_live = pipit__calloc(P, sizeof *r->peak_live);
    r->peak_bytes = pipit__calloc(P, sizeof *r->peak_bytes);
    int ok = r->start && r->end && r->busy && r->rank_bubble && r->peak_live && r->peak_bytes;
    if (ok) r->P = s->P; /* from here on, free walks start/end by rank */
    for (int i = 0; ok && i < s->P; i++) {
        r->start[i] = pipit__calloc((size_t)s->ntasks[i], sizeof(double));
        r->end[i] = pipit__calloc((size_t)s->ntasks[i], sizeof(double));
        ok = r->start[i] && r->end[i];
    }
    if (ok) return PIPIT_STATUS_OK;
    pipit__sim_result_free(r);
    return pipit__err(PIPIT_STATUS_NOMEM, "out of memory simulating a schedule");
}

/* Busy time and peak live activations of each rank. A (stage, mb) is live
 * from the start of its F until its last backward task (BW, or W) ends;
 * tasks of one rank never overlap, so list order is time order. */
static void summarize(const pipit_schedule *s, const pipit__sim_costs *c, pipit__sim_result *r) {
    for (int q = 0; q < s->P; q++) {
        int live = 0;
        double bytes = 0;
        for (int i = 0; i < s->ntasks[q]; i++) {
            pipit_task t = s->tasks[q][i];
            double act = c && c->act_bytes ? c->act_bytes[t.stage] : 1.0;
            double delta = c && c->b_delta_bytes ? c->b_delta_bytes[t.stage] : 0.0;
            r->busy[q] += r->end[q][i] - r->start[q][i];
            r->step_time = PIPIT_MAX(r->step_time, r->end[q][i]);
            if (t.kind == PIPIT_TASK_F) {
                live++;
                bytes += act;
                r->peak_live[q] = PIPIT_MAX(r->peak_live[q], live);
                r->peak_bytes[q] = PIPIT_MAX(r->peak_bytes[q], bytes);
            } else if (t.kind == PIPIT_TASK_B) {
                bytes += delta;
                r->peak_bytes[q] = PIPIT_MAX(r->peak_bytes[q], bytes);
            } else if (t.kind == PIPIT_TASK_BW || t.kind == PIPIT_TASK_W) {
                live--;
                bytes -= t.kind == PIPIT_TASK_W ? act + delta : act;
            }
        }
    }
    double total = 0;
    for (int q = 0; q < s->P; q++) {
        total += r->busy[q];
        r->rank_bubble[q] = r->step_time > 0 ? 1.0 - r->busy[q] / r->step_time : 0.0;
    }
    r->bubble = r->step_time > 0 ? 1.0 - total / ((double)s->P * r->step_time) : 0.0;
}

pipit_status pipit__schedule_simulate(const pipit_schedule *s, const pipit__sim_costs *c,
                                      pipit__sim_result *r) {
    if (!r) return pipit__err(PIPIT_STATUS_MISUSE, "simulate: result is NULL");
    memset(r, 0, sizeof *r);
    /* re-check: the walk below trusts placement and completeness */
    pipit_status st = pipit__schedule_check(s);
    if (st || (st = check_costs(c, s->S))) return st;
    walk_ctx w;
    if ((st = ctx_init(&w, s, 1, c && c->pulled))) return st;
    if ((st = check_static(&w)) || (st = result_alloc(r, s))) {
        ctx_free(&w);
        return st;
    }
    r->ntotal = (int)total_tasks(s);
    r->has_bytes = c && (c->act_bytes || c->b_delta_bytes);
    long ran = walk(&w, c, r);
    ctx_free(&w);
    PIPIT_ASSERT(ran == r->ntotal); /* the check above proved it deadlock-free */
    summarize(s, c, r);
    if (!isfinite(r->step_time)) { /* finite costs whose sums overflow */
        double t = r->step_time;
        pipit__sim_result_free(r);
        return pipit__err(PIPIT_STATUS_INVALID,
                          "simulate: the task costs are too large: the simulated step time overflows to %g "
                          "(scale the costs down)",
                          t);
    }
    return PIPIT_STATUS_OK;
}
