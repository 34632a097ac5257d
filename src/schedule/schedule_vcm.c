/*
 * schedule_vcm.c — the controllable-memory V schedules V-Half and V-Min
 * (Qi, Wan, Amar, Lin, "Pipeline Parallelism with Controllable Memory",
 * NeurIPS 2024), on ZB-V's placement: rank r holds stage r (chunk 0, going
 * down the V) and stage 2P-1-r (chunk 1, coming back up).
 *
 * The construction follows the rules of the authors' generator (zbv_greedy.py
 * in sail-sg/zero-bubble-pipeline-parallelism), reimplemented here:
 *  1. Building block: every rank's four passes of one microbatch (F of
 *     chunk 0, F of chunk 1, B of chunk 1, B of chunk 0, in that dependency
 *     order) sit at fixed slot offsets; microbatch m repeats the block 6m
 *     slots later. V-Half's offsets hold about P/2 + 1 microbatches per rank,
 *     V-Min's about P/3 + 4/3 (in whole microbatches: two chunk activations).
 *  2. Weight passes fill idle slots: walking the slots, each idle one runs
 *     the oldest W still owed (put_w).
 *  3. Squeeze: in slot order, passes of the warm-up (first round only) and
 *     of the cool-down (from the first rank's last F on) move to the earliest
 *     free slot after their dependencies, provided the rank's peak
 *     activation count does not rise above the block's; then the whole order
 *     is re-timed as early as its dependencies allow (unit costs). Round one
 *     squeezes with W placed, round two without (W re-filled afterwards).
 *  4. Finally W is split per chunk and re-filled into the idle slots, the
 *     chunk-1 weight pass first; each rank runs its passes in slot order.
 * tests/vsched_golden holds the fork's orders for P = 2..8; test_vsched
 * checks that these are identical.
 *
 * Pass types in this file: 0 F chunk 0, 1 F chunk 1, 2 B chunk 1, 3 B chunk 0,
 * 4 W (of chunk 1 once split, of either before), 5 W chunk 0.
 */
#include <stdlib.h>
#include <string.h>

#include "schedule/schedule.h"
#include "util/checked.h"

enum { NT = 6 };

typedef struct {
    int P, M, ntypes; /* ntypes: 4 (no W), 5 (W not split), 6 (W per chunk) */
    size_t per;       /* entries per (rank, type) list: 2M */
    int *t;           /* [P][NT][per]: slot of the i-th pass of a type */
    int *len;         /* [P][NT] */
    int *end;         /* [P][NT][per]: scratch of retime() */
    int cap;          /* slots per rank that can ever be used */
    signed char *slot;/* [cap]: scratch, type in a slot or -1 */
    unsigned char *occ;/* [P][cap]: slots taken during a squeeze */
    int *ord;         /* [P * NT * per][3]: (rank, type, index) sorted by slot */
} vcm;

static int *T(vcm *g, int r, int k, int i) { return &g->t[((size_t)r * NT + (size_t)k) * g->per + (size_t)i]; }
static int *LEN(vcm *g, int r, int k) { return &g->len[(size_t)r * NT + (size_t)k]; }

/* Per-chunk slot offsets of the building blocks (the fork's stable
 * patterns): {F0, F1, B1, B0} of rank r. */
static void block(int P, int vmin, int r, int off[4]) {
    if (vmin) {
        int gap = P % 3 == 0 ? 2 : 0;
        off[0] = r, off[1] = 2 * P - r - 1, off[2] = 2 * P + gap + r, off[3] = 4 * P + gap - r - 1;
    } else {
        int gap = P % 2 == 0 ? 3 : 0;
        off[0] = 2 * r, off[1] = 3 * P - r - 2, off[2] = 3 * P + gap + 2 * r - 1, off[3] = 6 * P + gap - r - 2;
    }
}

static int last_slot(vcm *g, int r, int ntypes) {
    int b = -1;
    for (int k = 0; k < ntypes; k++) {
        int n = *LEN(g, r, k);
        if (n && *T(g, r, k, n - 1) > b) b = *T(g, r, k, n - 1);
    }
    return b;
}

/* Marks g->slot[0..bound] with the types of the first ntypes lists of rank r. */
static pipit_status mark_slots(vcm *g, int r, int ntypes, int bound) {
    memset(g->slot, -1, (size_t)bound + 1);
    for (int k = 0; k < ntypes; k++)
        for (int i = 0; i < *LEN(g, r, k); i++) {
            int s = *T(g, r, k, i);
            if (s < 0 || s > bound || g->slot[s] >= 0)
                return pipit__err(PIPIT_STATUS_INTERNAL, "v schedule: rank %d has two passes in slot %d", r, s);
            g->slot[s] = (signed char)k;
        }
    return PIPIT_STATUS_OK;
}

/* Idle slots run the oldest weight pass owed (B of chunk 1 before chunk 0
 * when split); the rest follow the last pass. Rank r has 4 lists. */
static pipit_status put_w(vcm *g, int r, int split) {
    int bound = last_slot(g, r, 4), wc[2] = {0, 0}, i;
    pipit_status st = mark_slots(g, r, 4, bound);
    if (st) return st;
    *LEN(g, r, 4) = *LEN(g, r, 5) = 0;
    for (i = 0; i <= bound; i++) {
        int k = g->slot[i];
        if (k >= 2)
            wc[split ? k - 2 : 0]++;
        else if (k < 0)
            for (int w = 0; w < 2; w++)
                if (wc[w]) {
                    *T(g, r, 4 + w, (*LEN(g, r, 4 + w))++) = i;
                    wc[w]--;
                    break;
                }
    }
    i = bound;
    for (int w = 0; w < 2; w++)
        for (; wc[w] > 0; wc[w]--) *T(g, r, 4 + w, (*LEN(g, r, 4 + w))++) = ++i;
    PIPIT_ASSERT(i < g->cap);
    return PIPIT_STATUS_OK;
}

/* Peak live chunk activations of rank r: F adds one, W frees one; with no
 * W lists (ntypes 4) each idle slot runs a W owed. */
static pipit_status peak_of(vcm *g, int r, int *peak) {
    int has_w = g->ntypes > 4, bound = last_slot(g, r, g->ntypes), cur = 0, res = 0, owed = 0;
    pipit_status st = mark_slots(g, r, g->ntypes, bound);
    if (st) return st;
    for (int i = 0; i <= bound; i++) {
        int k = g->slot[i];
        if (k >= 0) {
            cur += k <= 1 ? 1 : k >= 4 ? -1 : 0;
            if (k == 2 || k == 3) owed++;
        } else if (!has_w && owed) {
            cur--, owed--;
        }
        if (cur > res) res = cur;
    }
    *peak = res;
    return PIPIT_STATUS_OK;
}

/* qsort has no context argument in C11: the schedule being sorted is
 * passed in a thread-local (builds on different threads stay apart). */
static _Thread_local vcm *sort_ctx;

static int by_slot(const void *a, const void *b) {
    const int *x = a, *y = b;
    int sx = *T(sort_ctx, x[0], x[1], x[2]), sy = *T(sort_ctx, y[0], y[1], y[2]);
    if (sx != sy) return sx < sy ? -1 : 1;
    for (int i = 0; i < 3; i++) /* then rank, type, index */
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* Fills g->ord with every pass in slot order; returns how many. */
static size_t sort_passes(vcm *g) {
    size_t n = 0;
    for (int r = 0; r < g->P; r++)
        for (int k = 0; k < g->ntypes; k++)
            for (int i = 0; i < *LEN(g, r, k); i++) {
                g->ord[3 * n] = r, g->ord[3 * n + 1] = k, g->ord[3 * n + 2] = i;
                n++;
            }
    sort_ctx = g;
    qsort(g->ord, n, 3 * sizeof *g->ord, by_slot);
    return n;
}

/* Slot-level predecessor of pass (r, k, i): the latest slot it must follow. */
static int dep_slot(vcm *g, int r, int k, int i) {
    int d = -1;
#define DEP(x) do { int v_ = (x); if (v_ > d) d = v_; } while (0)
    if ((k == 0 || k == 2) && r > 0) DEP(*T(g, r - 1, k, i));
    if ((k == 1 || k == 3) && r + 1 < g->P) DEP(*T(g, r + 1, k, i));
    if (k > 0 && k < 4) DEP(*T(g, r, k - 1, i));
    if (k == 4) { /* the i-th backward of either chunk */
        int a = 0, b = 0, M = g->M, s = 0;
        for (int j = 0; j <= i; j++) {
            if (b >= M || (a < M && *T(g, r, 2, a) < *T(g, r, 3, b)))
                s = *T(g, r, 2, a++);
            else
                s = *T(g, r, 3, b++);
        }
        DEP(s);
    }
    if (i > 0) DEP(*T(g, r, k, i - 1));
#undef DEP
    return d;
}

/* Re-times every pass as early as its dependencies and its rank's order
 * allow, at unit cost (the slot order kept); slots become start times. */
static pipit_status retime(vcm *g) {
    size_t n = sort_passes(g), total = (size_t)g->P * NT * g->per;
    for (size_t j = 0; j < total; j++) g->end[j] = -1;
    int *last = pipit__malloc((size_t)g->P * sizeof *last);
    if (!last) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory building a V schedule");
    for (int r = 0; r < g->P; r++) last[r] = 0;
    pipit_status st = PIPIT_STATUS_OK;
#define END(r, k, i) g->end[((size_t)(r) * NT + (size_t)(k)) * g->per + (size_t)(i)]
    for (size_t j = 0; j < n && !st; j++) {
        int r = g->ord[3 * j], k = g->ord[3 * j + 1], i = g->ord[3 * j + 2], d = last[r], e;
        int need[4] = {-2, -2, -2, -2};
        if ((k == 0 || k == 2) && r > 0) need[0] = END(r - 1, k, i);
        if ((k == 1 || k == 3) && r + 1 < g->P) need[1] = END(r + 1, k, i);
        if (k > 0 && k < 4) need[2] = END(r, k - 1, i);
        if (i > 0) need[3] = END(r, k, i - 1);
        for (int q = 0; q < 4; q++) {
            if (need[q] == -1)
                st = pipit__err(PIPIT_STATUS_INTERNAL, "v schedule: pass %d.%d of rank %d before its dependency", k,
                                i, r);
            if (need[q] > d) d = need[q];
        }
        e = d + 1;
        END(r, k, i) = e;
        last[r] = e;
    }
    for (size_t j = 0; j < n; j++) {
        int r = g->ord[3 * j], k = g->ord[3 * j + 1], i = g->ord[3 * j + 2];
        *T(g, r, k, i) = END(r, k, i) - 1;
    }
#undef END
    pipit__free(last);
    return st;
}

/* One squeeze round (step 3 above). */
static pipit_status squeeze(vcm *g, int with_w) {
    pipit_status st = PIPIT_STATUS_OK;
    if (with_w) {
        for (int r = 0; r < g->P && !st; r++) st = put_w(g, r, 0);
        g->ntypes = 5;
    }
    int peak = 0;
    for (int r = 0; r < g->P && !st; r++) {
        int p;
        st = peak_of(g, r, &p);
        if (p > peak) peak = p;
    }
    if (st) return st;
    memset(g->occ, 0, (size_t)g->P * (size_t)g->cap);
    size_t n = sort_passes(g);
    int phase = 0;
    for (size_t j = 0; j < n; j++) {
        int r = g->ord[3 * j], k = g->ord[3 * j + 1], i = g->ord[3 * j + 2];
        int *at = T(g, r, k, i), was = *at;
        unsigned char *occ = g->occ + (size_t)r * (size_t)g->cap;
        if (k == 3 && r == 0 && phase == 0) phase = 1; /* warm-up over: first B of chunk 0 on rank 0 */
        if (phase == 1 || (phase == 0 && !with_w)) { /* stays */
            if (phase == 1 && k == 0 && i == g->M - 1) phase = 2; /* the cool-down starts after it */
            occ[was] = 1;
            continue;
        }
        int from = dep_slot(g, r, k, i) + 1, ok = 0;
        if (from > was) return pipit__err(PIPIT_STATUS_INTERNAL, "v schedule: pass %d.%d of rank %d in slot %d "
                                                                 "before its dependency", k, i, r, was);
        for (int s = from; s < was && !ok; s++) {
            if (occ[s]) continue;
            *at = s;
            int p;
            st = peak_of(g, r, &p);
            if (st) return st;
            ok = p <= peak;
        }
        if (!ok) *at = was;
        occ[*at] = 1;
    }
    if (!with_w) {
        for (int r = 0; r < g->P && !st; r++) st = put_w(g, r, 0);
        g->ntypes = 5;
    }
    return st ? st : retime(g);
}

static pipit_status build(vcm *g, pipit_schedule *s, int vmin) {
    int P = g->P, M = g->M;
    for (int r = 0; r < P; r++) {
        int off[4];
        block(P, vmin, r, off);
        for (int k = 0; k < 4; k++) {
            *LEN(g, r, k) = M;
            for (int i = 0; i < M; i++) *T(g, r, k, i) = off[k] + 6 * i;
        }
    }
    g->ntypes = 4;
    pipit_status st = squeeze(g, 1);
    g->ntypes = 4; /* drop W, squeeze again without it */
    if (!st) st = squeeze(g, 0);
    g->ntypes = 4;
    for (int r = 0; r < P && !st; r++) st = put_w(g, r, 1);
    if (st) return st;
    g->ntypes = 6;
    static const int kind[NT] = {PIPIT_TASK_F, PIPIT_TASK_F, PIPIT_TASK_B, PIPIT_TASK_B, PIPIT_TASK_W, PIPIT_TASK_W};
    size_t n = sort_passes(g);
    for (size_t j = 0; j < n; j++) {
        int r = g->ord[3 * j], k = g->ord[3 * j + 1], i = g->ord[3 * j + 2];
        int down = k == 0 || k == 3 || k == 5; /* chunk 0: stage r */
        pipit_task t = {(uint8_t)kind[k], (int16_t)(down ? r : 2 * P - 1 - r), (int32_t)i};
        s->tasks[r][s->ntasks[r]++] = t;
    }
    return PIPIT_STATUS_OK;
}

pipit_status pipit__schedule_gen_vcm(pipit_schedule *s, int vmin) {
    int P = s->P, M = s->M;
    vcm g = {.P = P, .M = M, .per = (size_t)2 * (size_t)M};
    /* slots: the blocks end before 6M + 6P + 3, the Ws add at most 2M */
    int64_t cap, cells;
    if (!pipit__mul_le(8, M, INT32_MAX / 2, &cap) || !pipit__add_i64(cap, 6 * (int64_t)P + 16, &cap) ||
        cap > INT32_MAX / 2 || !pipit__mul_le((int64_t)P * NT, (int64_t)g.per, INT32_MAX / 3, &cells))
        return pipit__err(PIPIT_STATUS_SCHEDULE, "%s with P=%d M=%d is too large", vmin ? "v-min" : "v-half", P, M);
    g.cap = (int)cap;
    g.t = pipit__malloc((size_t)cells * sizeof *g.t);
    g.end = pipit__malloc((size_t)cells * sizeof *g.end);
    g.len = pipit__calloc((size_t)P * NT, sizeof *g.len);
    g.slot = pipit__malloc((size_t)g.cap);
    g.occ = pipit__malloc((size_t)P * (size_t)g.cap);
    g.ord = pipit__malloc((size_t)cells * 3 * sizeof *g.ord);
    pipit_status st = g.t && g.end && g.len && g.slot && g.occ && g.ord
                          ? build(&g, s, vmin)
                          : pipit__err(PIPIT_STATUS_NOMEM, "out of memory building a V schedule");
    pipit__free(g.t);
    pipit__free(g.end);
    pipit__free(g.len);
    pipit__free(g.slot);
    pipit__free(g.occ);
    pipit__free(g.ord);
    return st;
}
