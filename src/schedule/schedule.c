/*
 * schedule.c — the built-in schedule generators (GPipe, 1F1B, eager 1F1B,
 * interleaved 1F1B and GPipe, ZB-H1, DualPipeV, and the zero-bubble family:
 * ZB-H2, ZB-V, interleaved zero bubble; V-Half and V-Min are in
 * schedule_vcm.c) and the public schedule API.
 * Each generator fills per-rank task lists from (P, V, M) alone; the checker
 * (schedule_check.c) proves them complete and free of deadlock, and the tests
 * run it over every kind for P = 1..8 and many M.
 */
#include "schedule/schedule.h"

#include <ctype.h>
#include <string.h>

/* ------------------------------------------------------------ allocation */

pipit_schedule *pipit__schedule_alloc(int P, int S, int M) {
    if (P < 1 || S < 1 || M < 1) return NULL;
    pipit_schedule *s = pipit__calloc(1, sizeof *s);
    if (!s) return NULL;
    s->kind = -1;
    s->P = P;
    s->S = S;
    s->M = M;
    s->stage_rank = pipit__calloc((size_t)S, sizeof *s->stage_rank);
    s->ntasks = pipit__calloc((size_t)P, sizeof *s->ntasks);
    s->tasks = pipit__calloc((size_t)P, sizeof *s->tasks);
    if (!s->stage_rank || !s->ntasks || !s->tasks) {
        pipit_schedule_free(s);
        return NULL;
    }
    return s;
}

void pipit_schedule_free(pipit_schedule *s) {
    if (!s) return;
    if (s->tasks)
        for (int r = 0; r < s->P; r++) pipit__free(s->tasks[r]);
    pipit__free(s->tasks);
    pipit__free(s->ntasks);
    pipit__free(s->stage_rank);
    pipit__free(s);
}

void pipit__schedule_infer_meta(pipit_schedule *s) {
    s->split_bw = 0;
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->ntasks[r]; i++)
            if (s->tasks[r][i].kind == PIPIT_TASK_B || s->tasks[r][i].kind == PIPIT_TASK_W)
                s->split_bw = 1;
    /* V is only meaningful when every rank owns the same number of stages. */
    s->V = s->S % s->P == 0 ? s->S / s->P : 0;
    for (int r = 0; r < s->P && s->V; r++) {
        int owned = 0;
        for (int st = 0; st < s->S; st++) owned += s->stage_rank[st] == r;
        if (owned != s->V) s->V = 0;
    }
}

int pipit__schedule_equal(const pipit_schedule *a, const pipit_schedule *b) {
    if (a->P != b->P || a->S != b->S || a->M != b->M) return 0;
    if (memcmp(a->stage_rank, b->stage_rank, (size_t)a->S * sizeof *a->stage_rank)) return 0;
    for (int r = 0; r < a->P; r++) {
        if (a->ntasks[r] != b->ntasks[r]) return 0;
        for (int i = 0; i < a->ntasks[r]; i++) {
            pipit_task x = a->tasks[r][i], y = b->tasks[r][i];
            if (x.kind != y.kind || x.stage != y.stage || x.mb != y.mb) return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------ generators */

/* Generators append into lists preallocated for their worst case, so they
 * cannot fail; emit() asserts the bound to catch a generator bug. */
typedef struct {
    pipit_schedule *s;
    int cap; /* per-rank capacity of tasks[r] */
} gen_ctx;

static void emit(gen_ctx *g, int r, int kind, int stage, int mb) {
    PIPIT_ASSERT(g->s->ntasks[r] < g->cap);
    pipit_task t = {(uint8_t)kind, (int16_t)stage, (int32_t)mb};
    g->s->tasks[r][g->s->ntasks[r]++] = t;
}

/* One rank of 1F1B on a single stage: `warmup` forwards, then alternate one
 * forward and one fused backward, then drain the remaining backwards.
 * Plain 1F1B uses warmup = P-1-r, eager 1F1B uses 2(P-1-r). */
static void one_f_one_b_rank(gen_ctx *g, int r, int stage, int warmup) {
    int M = g->s->M, w = PIPIT_MIN(warmup, M);
    for (int m = 0; m < w; m++) emit(g, r, PIPIT_TASK_F, stage, m);
    for (int i = 0; i < M - w; i++) {
        emit(g, r, PIPIT_TASK_F, stage, w + i);
        emit(g, r, PIPIT_TASK_BW, stage, i);
    }
    for (int m = M - w; m < M; m++) emit(g, r, PIPIT_TASK_BW, stage, m);
}

static void gen_gpipe(gen_ctx *g) {
    for (int r = 0; r < g->s->P; r++) {
        for (int m = 0; m < g->s->M; m++) emit(g, r, PIPIT_TASK_F, r, m);
        for (int m = 0; m < g->s->M; m++) emit(g, r, PIPIT_TASK_BW, r, m);
    }
}

static void gen_1f1b(gen_ctx *g) {
    for (int r = 0; r < g->s->P; r++) one_f_one_b_rank(g, r, r, g->s->P - 1 - r);
}

static void gen_eager_1f1b(gen_ctx *g) {
    for (int r = 0; r < g->s->P; r++) one_f_one_b_rank(g, r, r, 2 * (g->s->P - 1 - r));
}

/* Megatron's interleaved order: the k-th forward (backward) of a rank is
 * microbatch-group major (groups of `group` microbatches), then model chunk,
 * then microbatch within the group. Megatron's groups have P microbatches
 * (it needs M % P == 0); PyTorch's interleaved zero bubble uses M / rounds. */
static void interleaved_slot(int group, int V, int k, int *chunk, int *mb) {
    int in_group = k % (group * V);
    *chunk = in_group / group;
    *mb = (k / (group * V)) * group + in_group % group;
}

/* The k-th pass of `kind` on rank r; every backward kind (B, W, BW) walks
 * the chunks in reverse. */
static void interleaved_emit(gen_ctx *g, int r, int group, int k, int kind) {
    int P = g->s->P, V = g->s->V, chunk, mb;
    interleaved_slot(group, V, k, &chunk, &mb);
    if (kind != PIPIT_TASK_F) chunk = V - 1 - chunk;
    emit(g, r, kind, chunk * P + r, mb);
}

static void gen_interleaved_1f1b(gen_ctx *g) {
    int P = g->s->P, V = g->s->V, total = g->s->M * V;
    for (int r = 0; r < P; r++) {
        /* Megatron: 2(P-1-r) + (V-1)P warmup forwards; when that covers
         * everything (M == P on rank 0) it degenerates to all F then all B. */
        int w = PIPIT_MIN(2 * (P - 1 - r) + (V - 1) * P, total);
        for (int k = 0; k < w; k++) interleaved_emit(g, r, P, k, PIPIT_TASK_F);
        for (int k = 0; k < total - w; k++) {
            interleaved_emit(g, r, P, w + k, PIPIT_TASK_F);
            interleaved_emit(g, r, P, k, PIPIT_TASK_BW);
        }
        for (int k = total - w; k < total; k++) interleaved_emit(g, r, P, k, PIPIT_TASK_BW);
    }
}

/* Breadth-first ("looped BFS"): every microbatch through chunk 0, then chunk
 * 1, ...; backwards from the last chunk down. */
static void gen_interleaved_gpipe(gen_ctx *g) {
    int P = g->s->P, V = g->s->V, M = g->s->M;
    for (int r = 0; r < P; r++) {
        for (int v = 0; v < V; v++)
            for (int m = 0; m < M; m++) emit(g, r, PIPIT_TASK_F, v * P + r, m);
        for (int v = V - 1; v >= 0; v--)
            for (int m = 0; m < M; m++) emit(g, r, PIPIT_TASK_BW, v * P + r, m);
    }
}

/* One rank of the handcrafted zero-bubble schedules: `warmup` forwards,
 * then `pairs` (B, F) pairs that defer as many weight passes, then rotate
 * B -> W -> F, skipping kinds already exhausted. */
static void zb_rank(gen_ctx *g, int r, int warmup, int pairs) {
    int M = g->s->M, nf = 0, nb = 0, nw = 0;
    while (nf < PIPIT_MIN(warmup, M)) emit(g, r, PIPIT_TASK_F, r, nf++);
    for (int i = 0; i < pairs; i++) {
        if (nb < M) emit(g, r, PIPIT_TASK_B, r, nb++);
        if (nf < M) emit(g, r, PIPIT_TASK_F, r, nf++);
    }
    while (nb < M || nw < M || nf < M) {
        if (nb < M) emit(g, r, PIPIT_TASK_B, r, nb++);
        if (nw < M) emit(g, r, PIPIT_TASK_W, r, nw++);
        if (nf < M) emit(g, r, PIPIT_TASK_F, r, nf++);
    }
}

/* ZB-H1 (Qi et al. 2023): 1F1B's warmup plus one, then r (B, F) pairs.
 * Rank r holds at most P microbatches, like rank 0 of 1F1B. */
static void gen_zb_h1(gen_ctx *g) {
    for (int r = 0; r < g->s->P; r++) zb_rank(g, r, g->s->P - r, r);
}

/* ZB-H2 (Qi et al., ICLR 2024, section 2.2): more warm-up forwards fill the
 * start-up bubble. Under F = B = W the first B reaches rank r at time
 * 2P-1-r and its first F starts at r, so exactly 2(P-1-r)+1 forwards fit
 * before it; 2r (B, F) pairs then bring every rank to 2P-1 forwards ahead
 * of its first W (the paper's (2p-1) M_B peak), and the rotation keeps it
 * there. With M >= 2P-1 and F = B = W no rank idles between its first and
 * last task: the paper's (p-1)(T_F + T_B - 2T_W) bubble, i.e. zero. */
static void gen_zb_h2(gen_ctx *g) {
    for (int r = 0; r < g->s->P; r++) zb_rank(g, r, 2 * (g->s->P - 1 - r) + 1, 2 * r);
}

/* ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", section 6; the
 * handcrafted order of PyTorch's ScheduleZBVZeroBubble): chunk 0 is stage r
 * (going down the V), chunk 1 is stage 2P-1-r (coming back up). The order
 * is built for n = max(2P-1, M) microbatches, the fewest that fill the V,
 * and the passes of microbatches >= M are dropped: a subsequence of a
 * deadlock-free order stays deadlock-free, since dependencies never cross
 * microbatches. */
typedef struct {
    gen_ctx *g;
    int r, stage[2], nf[2], nb[2], nw[2];
} zbv_rank;

static void zbv_pass(zbv_rank *z, int kind, int ch) {
    int *count = kind == PIPIT_TASK_F ? z->nf : kind == PIPIT_TASK_B ? z->nb : z->nw;
    int mb = count[ch]++;
    if (mb < z->g->s->M) emit(z->g, z->r, kind, z->stage[ch], mb);
}

/* B then W of the same chunk, as one "backward" slot. */
static void zbv_bw(zbv_rank *z, int ch) {
    zbv_pass(z, PIPIT_TASK_B, ch);
    zbv_pass(z, PIPIT_TASK_W, ch);
}

static void zbv_rank_tasks(zbv_rank *z, int P, int n) {
    int r = z->r;
    for (int i = 0; i < 2 * (P - r) - 1; i++) zbv_pass(z, PIPIT_TASK_F, 0); /* fill the V */
    for (int i = 0; i < r; i++) {
        zbv_pass(z, PIPIT_TASK_F, 1);
        zbv_pass(z, PIPIT_TASK_F, 0);
    }
    for (int i = 0; i < P - r; i++) { /* the V's bottom turns: chunk 1 runs F, B, W */
        zbv_pass(z, PIPIT_TASK_F, 1);
        zbv_bw(z, 1);
    }
    while (z->nf[1] < z->nf[0] || z->nf[0] < n) { /* steady: F0 B0 W0 F1 B1 W1 */
        if (z->nf[0] < n) zbv_pass(z, PIPIT_TASK_F, 0);
        zbv_bw(z, 0);
        zbv_pass(z, PIPIT_TASK_F, 1);
        zbv_bw(z, 1);
    }
    for (int i = 0; i < r; i++) { /* cool-down: input gradients first, W later */
        zbv_pass(z, PIPIT_TASK_B, 0);
        zbv_pass(z, PIPIT_TASK_B, 1);
    }
    for (int i = 0; i < P - r; i++) {
        zbv_pass(z, PIPIT_TASK_B, 0);
        zbv_pass(z, PIPIT_TASK_W, 0);
    }
    while (z->nw[1] < z->nb[1]) zbv_pass(z, PIPIT_TASK_W, 1);
    while (z->nw[0] < z->nb[0]) zbv_pass(z, PIPIT_TASK_W, 0);
    PIPIT_ASSERT(z->nf[0] == n && z->nb[0] == n && z->nw[0] == n);
    PIPIT_ASSERT(z->nf[1] == n && z->nb[1] == n && z->nw[1] == n);
}

static void gen_zb_v(gen_ctx *g) {
    int P = g->s->P, n = PIPIT_MAX(2 * P - 1, g->s->M);
    for (int r = 0; r < P; r++) {
        zbv_rank z = {g, r, {r, 2 * P - 1 - r}, {0, 0}, {0, 0}, {0, 0}};
        zbv_rank_tasks(&z, P, n);
    }
}

/* PyTorch's microbatch rounds: max(1, M / P) rounds of M / rounds each. */
static int izb_group(int P, int M) { return M / PIPIT_MAX(1, M / P); }

/* Interleaved zero bubble (PyTorch's ScheduleInterleavedZeroBubble, the
 * paper's ZB1P on interleaved stages): interleaved 1F1B over groups of
 * izb_group microbatches, with (V-1)*group + P-1-r warm-up forwards (one
 * per hop, not two: B no longer waits for W); the j-th steady or cool-down
 * slot runs F, B, and from j = r on the W of the oldest B still owed. */
static void gen_interleaved_zb(gen_ctx *g) {
    int P = g->s->P, V = g->s->V, total = g->s->M * V, grp = izb_group(P, g->s->M);
    for (int r = 0; r < P; r++) {
        int w = PIPIT_MIN((V - 1) * grp + P - 1 - r, total), nw = 0;
        for (int k = 0; k < w; k++) interleaved_emit(g, r, grp, k, PIPIT_TASK_F);
        for (int j = 0; j < total; j++) {
            if (w + j < total) interleaved_emit(g, r, grp, w + j, PIPIT_TASK_F);
            interleaved_emit(g, r, grp, j, PIPIT_TASK_B);
            if (j >= r) interleaved_emit(g, r, grp, nw++, PIPIT_TASK_W);
        }
        while (nw < total) interleaved_emit(g, r, grp, nw++, PIPIT_TASK_W);
    }
}

/* DualPipeV state of one rank: phase 0 is stage r (going down the V),
 * phase 1 is stage 2P-1-r (coming back up). Deferred W passes queue FIFO,
 * as in the reference's WeightGradStore. */
typedef struct {
    gen_ctx *g;
    int r, stage[2], nf[2], nb[2];
    pipit_task *wq; /* deferred W tasks */
    int wq_head, wq_tail;
} dpv_rank;

static void dpv_f(dpv_rank *d, int ph) { emit(d->g, d->r, PIPIT_TASK_F, d->stage[ph], d->nf[ph]++); }

static void dpv_b(dpv_rank *d, int ph, int zero_bubble) {
    int mb = d->nb[ph]++;
    if (!zero_bubble) {
        emit(d->g, d->r, PIPIT_TASK_BW, d->stage[ph], mb);
        return;
    }
    emit(d->g, d->r, PIPIT_TASK_B, d->stage[ph], mb);
    pipit_task w = {PIPIT_TASK_W, (int16_t)d->stage[ph], mb};
    d->wq[d->wq_tail++] = w;
}

static void dpv_w(dpv_rank *d) {
    PIPIT_ASSERT(d->wq_head < d->wq_tail);
    pipit_task w = d->wq[d->wq_head++];
    emit(d->g, d->r, w.kind, w.stage, w.mb);
}

/* The eight steps of DeepSeek's DualPipeV (dualpipev.py, step()). Overlapped
 * "F&B" chunk pairs become F then BW, in that order. */
static void dpv_rank_tasks(dpv_rank *d, int P, int M) {
    int r = d->r, zb = 0;
    for (int i = 0; i < 2 * (P - r - 1); i++) dpv_f(d, 0);      /* 1: nF0 */
    for (int i = 0; i < r + 1; i++) {                          /* 2: nF0F1 */
        dpv_f(d, 0);
        dpv_f(d, 1);
    }
    for (int i = 0; i < P - r - 1; i++) {                      /* 3: nB1W1F1 */
        dpv_b(d, 1, 1);
        dpv_w(d);
        dpv_f(d, 1);
    }
    for (int i = 0; i < M - 2 * P + r + 1; i++) {              /* 4: nF0B1F1B0 */
        dpv_f(d, 0);
        dpv_b(d, 1, 0);
        dpv_f(d, 1);
        dpv_b(d, 0, 0);
    }
    for (int i = 0; i < P - r - 1; i++) {                      /* 5: nB1F1B0 */
        dpv_b(d, 1, 0);
        dpv_f(d, 1);
        dpv_b(d, 0, 0);
    }
    for (int i = 0; i < r + 1; i++) {                          /* 6: nB1B0 */
        /* the second half switches to split backwards (zero bubble) */
        if (i == (r + 1) / 2 && r % 2 == 1) zb = 1;
        dpv_b(d, 1, zb);
        if (i == (r + 1) / 2 && r % 2 == 0) zb = 1;
        dpv_b(d, 0, zb);
    }
    for (int i = 0; i < P - r - 1; i++) {                      /* 7: nWB0 */
        dpv_w(d);
        dpv_b(d, 0, 1);
    }
    for (int i = 0; i < r + 1; i++) dpv_w(d);                  /* 8: nW */
    PIPIT_ASSERT(d->wq_head == d->wq_tail);
}

static pipit_status gen_dualpipev(gen_ctx *g) {
    int P = g->s->P, M = g->s->M;
    pipit_task *wq = pipit__malloc((size_t)2 * (size_t)M * sizeof *wq);
    if (!wq) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory building DualPipeV");
    for (int r = 0; r < P; r++) {
        dpv_rank d = {g, r, {r, 2 * P - 1 - r}, {0, 0}, {0, 0}, wq, 0, 0};
        dpv_rank_tasks(&d, P, M);
    }
    pipit__free(wq);
    return PIPIT_STATUS_OK;
}

/* ------------------------------------------------------------ public API */

static const char *const kind_names[PIPIT_SCHED_COUNT] = {
    "gpipe", "1f1b",  "eager-1f1b", "interleaved-1f1b", "interleaved-gpipe",
    "zb-h1", "dualpipev", "zb-h2", "zb-v", "interleaved-zb", "v-half", "v-min",
};

const char *pipit_schedule_kind_name(pipit_schedule_kind kind) {
    if ((unsigned)kind < PIPIT_SCHED_COUNT) return kind_names[kind];
    pipit__err(PIPIT_STATUS_INVALID, "%s: kind %d is not a pipit_schedule_kind", __func__, (int)kind);
    return "unknown";
}

/* Case-insensitive, '_' and '-' interchangeable ("ZB_H1" == "zb-h1"). */
static int name_matches(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        int x = tolower((unsigned char)*a), y = tolower((unsigned char)*b);
        if (x == '_') x = '-';
        if (y == '_') y = '-';
        if (x != y) return 0;
    }
    return *a == *b;
}

int pipit_schedule_kind_from_name(const char *name) {
    if (!name) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: name is NULL", __func__);
        return -1;
    }
    for (int k = 0; k < PIPIT_SCHED_COUNT; k++)
        if (name_matches(name, kind_names[k])) return k;
    if (name_matches(name, "pipedream-flush")) return PIPIT_SCHED_1F1B;
    pipit__err(PIPIT_STATUS_INVALID, "%s: no schedule named '%s'", __func__, name);
    return -1;
}

/* V = 0 picks the kind's natural value. */
static int default_v(pipit_schedule_kind kind) {
    switch (kind) {
    case PIPIT_SCHED_INTERLEAVED_1F1B:
    case PIPIT_SCHED_INTERLEAVED_GPIPE:
    case PIPIT_SCHED_DUALPIPEV:
    case PIPIT_SCHED_ZB_V:
    case PIPIT_SCHED_V_HALF:
    case PIPIT_SCHED_V_MIN:
    case PIPIT_SCHED_INTERLEAVED_ZB: return 2;
    default: return 1;
    }
}

static pipit_status check_v(pipit_schedule_kind kind, int V) {
    const char *name = kind_names[kind];
    switch (kind) {
    case PIPIT_SCHED_INTERLEAVED_1F1B:
    case PIPIT_SCHED_INTERLEAVED_GPIPE:
        if (V < 1)
            return pipit__err(PIPIT_STATUS_SCHEDULE,
                              "%s needs V >= 1 stages per rank (got V=%d)", name, V);
        return PIPIT_STATUS_OK;
    case PIPIT_SCHED_DUALPIPEV:
    case PIPIT_SCHED_ZB_V:
    case PIPIT_SCHED_V_HALF:
    case PIPIT_SCHED_V_MIN:
        if (V != 2)
            return pipit__err(PIPIT_STATUS_SCHEDULE,
                              "%s needs V=2 stages per rank (stages r and 2P-1-r), got V=%d", name,
                              V);
        return PIPIT_STATUS_OK;
    case PIPIT_SCHED_INTERLEAVED_ZB:
        if (V < 2)
            return pipit__err(PIPIT_STATUS_SCHEDULE,
                              "interleaved-zb needs V >= 2 stages per rank (got V=%d); zb-h1 is its "
                              "V=1 counterpart",
                              V);
        return PIPIT_STATUS_OK;
    default:
        if (V != 1)
            return pipit__err(PIPIT_STATUS_SCHEDULE,
                              "%s needs V=1 stage per rank (got V=%d); use interleaved-1f1b or "
                              "interleaved-gpipe for several stages per rank",
                              name, V);
        return PIPIT_STATUS_OK;
    }
}

static pipit_status check_args(pipit_schedule_kind kind, int P, int V, int M) {
    if ((unsigned)kind >= PIPIT_SCHED_COUNT)
        return pipit__err(PIPIT_STATUS_INVALID, "unknown schedule kind %d", (int)kind);
    if (P < 1)
        return pipit__err(PIPIT_STATUS_SCHEDULE, "%s needs P >= 1 pipeline ranks (got P=%d)",
                          kind_names[kind], P);
    if (M < 1)
        return pipit__err(PIPIT_STATUS_SCHEDULE, "%s needs M >= 1 microbatches (got M=%d)",
                          kind_names[kind], M);
    pipit_status st = check_v(kind, V);
    if (st) return st;
    if ((long)P * V > PIPIT__SCHED_MAX_STAGES || M > PIPIT__SCHED_MAX_MB ||
        (long)P * V * M > PIPIT__SCHED_MAX_SLOTS)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "%s with P=%d V=%d M=%d is too large (at most %d stages, %d "
                          "microbatches, %ld stage-microbatch pairs)",
                          kind_names[kind], P, V, M, PIPIT__SCHED_MAX_STAGES, PIPIT__SCHED_MAX_MB,
                          PIPIT__SCHED_MAX_SLOTS);
    if (kind == PIPIT_SCHED_INTERLEAVED_1F1B && M % P != 0)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "interleaved-1f1b needs M to be a multiple of P (got M=%d, P=%d), as "
                          "in Megatron-LM's interleaved schedule",
                          M, P);
    if (kind == PIPIT_SCHED_INTERLEAVED_ZB && M % PIPIT_MAX(1, M / P) != 0)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "interleaved-zb needs M to be a multiple of its number of rounds "
                          "max(1, M/P) = %d (got M=%d, P=%d), as in PyTorch's "
                          "ScheduleInterleavedZeroBubble",
                          PIPIT_MAX(1, M / P), M, P);
    if (kind == PIPIT_SCHED_DUALPIPEV && M < 2 * P)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "dualpipev needs M >= 2P microbatches (got M=%d, P=%d), as in "
                          "DeepSeek's reference",
                          M, P);
    return PIPIT_STATUS_OK;
}

/* Stage s lives on rank s mod P, except in the V shapes (DualPipeV, ZB-V,
 * V-Half, V-Min). */
static void fill_stage_rank(pipit_schedule *s) {
    int v_shape = s->kind == PIPIT_SCHED_DUALPIPEV || s->kind == PIPIT_SCHED_ZB_V ||
                  s->kind == PIPIT_SCHED_V_HALF || s->kind == PIPIT_SCHED_V_MIN;
    for (int st = 0; st < s->S; st++)
        s->stage_rank[st] = v_shape && st >= s->P
                                ? 2 * s->P - 1 - st
                                : st % s->P;
}

static pipit_status run_generator(gen_ctx *g) {
    switch ((pipit_schedule_kind)g->s->kind) {
    case PIPIT_SCHED_GPIPE: gen_gpipe(g); break;
    case PIPIT_SCHED_1F1B: gen_1f1b(g); break;
    case PIPIT_SCHED_EAGER_1F1B: gen_eager_1f1b(g); break;
    case PIPIT_SCHED_INTERLEAVED_1F1B: gen_interleaved_1f1b(g); break;
    case PIPIT_SCHED_INTERLEAVED_GPIPE: gen_interleaved_gpipe(g); break;
    case PIPIT_SCHED_ZB_H1: gen_zb_h1(g); break;
    case PIPIT_SCHED_DUALPIPEV: return gen_dualpipev(g);
    case PIPIT_SCHED_ZB_H2: gen_zb_h2(g); break;
    case PIPIT_SCHED_ZB_V: gen_zb_v(g); break;
    case PIPIT_SCHED_INTERLEAVED_ZB: gen_interleaved_zb(g); break;
    case PIPIT_SCHED_V_HALF: return pipit__schedule_gen_vcm(g->s, 0);
    case PIPIT_SCHED_V_MIN: return pipit__schedule_gen_vcm(g->s, 1);
    default: return pipit__err(PIPIT_STATUS_INTERNAL, "no generator for kind %d", g->s->kind);
    }
    return PIPIT_STATUS_OK;
}

pipit_status pipit_schedule_build(pipit_schedule_kind kind, int P, int V, int M,
                                  pipit_schedule **out) {
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_schedule_build: out is NULL");
    *out = NULL;
    if ((unsigned)kind < PIPIT_SCHED_COUNT && V == 0) V = default_v(kind);
    unsigned long gen0 = pipit__err_gen();
    pipit_status st = check_args(kind, P, V, M);
    if (st) return pipit__err_fresh(st, gen0, __func__);
    pipit_schedule *s = pipit__schedule_alloc(P, P * V, M);
    if (!s) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory building a schedule");
    s->kind = (int)kind;
    s->V = V;
    fill_stage_rank(s);
    /* worst case per rank: V stages x M microbatches x (F, B, W) */
    gen_ctx g = {s, 3 * V * M};
    for (int r = 0; r < P; r++) {
        s->tasks[r] = pipit__malloc((size_t)g.cap * sizeof(pipit_task));
        if (!s->tasks[r]) {
            pipit_schedule_free(s);
            return pipit__err(PIPIT_STATUS_NOMEM, "out of memory building a schedule");
        }
    }
    st = run_generator(&g);
    if (st) {
        pipit_schedule_free(s);
        return pipit__err_fresh(st, gen0, __func__);
    }
    s->split_bw = kind == PIPIT_SCHED_ZB_H1 || kind == PIPIT_SCHED_DUALPIPEV ||
                  kind == PIPIT_SCHED_ZB_H2 || kind == PIPIT_SCHED_ZB_V ||
                  kind == PIPIT_SCHED_INTERLEAVED_ZB || kind == PIPIT_SCHED_V_HALF ||
                  kind == PIPIT_SCHED_V_MIN;
    *out = s;
    return PIPIT_STATUS_OK;
}

static pipit_status schedule_custom_impl(int P, int S, int M, const int *stage_rank,
                                         const int *ntasks, const pipit_task *const *tasks,
                                         pipit_schedule **out) {
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_schedule_custom: out is NULL");
    *out = NULL;
    if (P < 1 || S < 1 || M < 1)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "custom schedule needs P, S, M >= 1 (got P=%d S=%d M=%d)", P, S, M);
    if (P > PIPIT__SCHED_MAX_STAGES || S > PIPIT__SCHED_MAX_STAGES || M > PIPIT__SCHED_MAX_MB)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "custom schedule too large (P=%d or S=%d > %d, or M=%d > %d)", P, S,
                          PIPIT__SCHED_MAX_STAGES, M, PIPIT__SCHED_MAX_MB);
    if (!stage_rank || !ntasks || !tasks)
        return pipit__err(PIPIT_STATUS_MISUSE,
                          "pipit_schedule_custom: stage_rank, ntasks and tasks must not be NULL");
    for (int r = 0; r < P; r++)
        if (ntasks[r] < 0 || (ntasks[r] > 0 && !tasks[r]))
            return pipit__err(PIPIT_STATUS_MISUSE,
                              "pipit_schedule_custom: rank %d has ntasks=%d and tasks %p", r,
                              ntasks[r], (const void *)tasks[r]);
    pipit_schedule *s = pipit__schedule_alloc(P, S, M);
    if (!s) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory copying a custom schedule");
    memcpy(s->stage_rank, stage_rank, (size_t)S * sizeof *stage_rank);
    for (int r = 0; r < P; r++) {
        s->tasks[r] = pipit__malloc((size_t)ntasks[r] * sizeof(pipit_task));
        if (!s->tasks[r]) {
            pipit_schedule_free(s);
            return pipit__err(PIPIT_STATUS_NOMEM, "out of memory copying a custom schedule");
        }
        if (ntasks[r]) memcpy(s->tasks[r], tasks[r], (size_t)ntasks[r] * sizeof(pipit_task));
        s->ntasks[r] = ntasks[r];
    }
    pipit__schedule_infer_meta(s);
    *out = s;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_schedule_custom(int P, int S, int M, const int *stage_rank,
                                   const int *ntasks, const pipit_task *const *tasks,
                                   pipit_schedule **out) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(schedule_custom_impl(P, S, M, stage_rank, ntasks, tasks, out), gen0, __func__);
}

pipit_status pipit_schedule_check(const pipit_schedule *s) {
    if (!s) return pipit__err(PIPIT_STATUS_MISUSE, "%s: schedule is NULL", __func__);
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(pipit__schedule_check(s), gen0, __func__);
}
