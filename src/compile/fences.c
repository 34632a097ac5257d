/*
 * fences.c — zero-copy sends, where each one's fence goes, and the proof
 * that no rank can deadlock waiting on a fence (docs/architecture.md,
 * "Zero-copy sends").
 *
 * A zero-copy send hands its bytes to the transport, which reads them until
 * the sender's fence for it returns; nothing may write them before.
 *  - A value sent from the activation arena (INS_SEND) is fenced at the
 *    first point of the sender's program that its receive is known to have
 *    happened before: the sender has just received a message that some rank
 *    sent after (transitively) that receive was done. Vector clocks over one
 *    replica's ranks find the point. There the receiver has the bytes, so
 *    the fence waits for no peer, only for its own transport to notice. The
 *    slot is held until then (memplan gives its bytes to no other buffer).
 *    A value whose receive is not known to be done before the loop ends is
 *    sent as a copy instead, so no slot is held past the loop.
 *  - Accumulator, gradient and parameter bytes (post-loop sends, the
 *    data-parallel shards) are fenced right before the first later
 *    instruction that writes them, else at the end of the program.
 * The proof: the programs of the world ranks run in a simulation where a
 * send never blocks, a receive waits for its send and a fence for the
 * receive of its send. Matching is fixed (every message has its own tag)
 * and what one rank does only ever enables more of what others can do, so
 * if this run reaches every rank's end, every run does: no interleaving of
 * the real ranks can deadlock. If it stalls, every send becomes a copy and
 * the plan is simulated again; a stall then is an internal error naming
 * the waiting instructions. Up to MAX_WORLD world ranks are all simulated;
 * beyond that three replicas stand for D (the data-parallel exchange is the
 * same for every replica and every replica runs the same program).
 */
#include <stdlib.h>
#include <string.h>

#include "compile/lowering.h"

#define MAX_WORLD 256

enum { M_VALUE, M_ACC, M_NORM, M_LOSS, M_DPR, M_DPG, M_DPP, M_DPS };

typedef struct {
    int32_t src, dst, a, b;
    int kind;
} msg_key;

typedef struct {
    msg_key k;
    int used, posted, received;
    int32_t recv_at; /* the receiving instruction */
    int32_t vc_at;   /* vector clocks: the sender's clock, at vcs[vc_at * P] */
} msg_slot;

typedef struct { /* an arena send whose receive is not known to be done yet */
    int32_t send;
    const msg_slot *m;
} pending;

typedef struct {
    const pipit__plan *p;
    int D, W;           /* simulated replicas and world ranks */
    msg_slot *tab;      /* open addressing */
    size_t cap;
    int32_t *pc, *sub, *fc;
    /* vector clocks (one replica only: W = P) */
    int32_t *vc;        /* [P * P] each rank's clock: vc[w * P + r] = instructions of r that w knows done */
    int32_t *vcs;       /* [nvcs * P] the clocks messages carried */
    int32_t nvcs, vcs_cap;
    int32_t **cause;    /* [P][n] where arena send i's receive is known done (its fence), -1 */
    pending **pend;     /* [P] sends waiting for that */
    int *npend, *cappend;
} sim;

/* ------------------------------------------------------------ messages */

static size_t key_hash(const msg_key *k) {
    uint64_t h = (uint64_t)(uint32_t)k->src * 0x9e3779b97f4a7c15ull;
    h ^= ((uint64_t)(uint32_t)k->dst << 20) ^ ((uint64_t)k->kind << 50);
    h = (h ^ (uint64_t)(uint32_t)k->a * 0xbf58476d1ce4e5b9ull) * 0x94d049bb133111ebull;
    h ^= (uint64_t)(uint32_t)k->b * 0xff51afd7ed558ccdull;
    return (size_t)(h ^ (h >> 31));
}

static msg_slot *slot_of(sim *S, msg_key k) {
    for (size_t i = key_hash(&k) & (S->cap - 1);; i = (i + 1) & (S->cap - 1)) {
        msg_slot *m = &S->tab[i];
        if (!m->used) {
            m->used = 1, m->k = k, m->recv_at = -1, m->vc_at = -1;
            return m;
        }
        if (!memcmp(&m->k, &k, sizeof k)) return m;
    }
}

/* The messages instruction `in` of world rank w sends (out = 1) or
 * receives (out = 0): up to W of them, in the order the runtime takes them.
 * Returns how many; *out_dir says which. Mirrors runtime/exec.c and dp.c
 * (empty shards included: both sides count them, so none is unmatched). */
static int msgs_of(const sim *S, int w, const pipit__instr *in, msg_key *m, int *out_dir) {
    const pipit__plan *p = S->p;
    int P = p->nranks, d = w / P, q = w % P, n = 0;
    *out_dir = 1;
#define ONE(dir, peer, kd, x, y) (*out_dir = (dir), m[n++] = (msg_key){(dir) ? w : (peer), (dir) ? (peer) : w, x, y, kd})
    switch ((pipit__ins_kind)in->kind) {
    case INS_SEND: ONE(1, d * P + in->peer, M_VALUE, in->node, in->mb); break;
    case INS_RECV: ONE(0, d * P + in->peer, M_VALUE, in->node, in->mb); break;
    case INS_ACC_SEND: ONE(1, d * P + in->peer, M_ACC, in->param, in->use); break;
    case INS_ACC_RECV: ONE(0, d * P + in->peer, M_ACC, in->param, in->use); break;
    case INS_NORM_SEND: ONE(1, d * P + in->peer, M_NORM, in->param, 0); break;
    case INS_NORM_RECV: ONE(0, d * P + in->peer, M_NORM, in->param, 0); break;
    case INS_LOSS_SEND:
        for (int v = 0; v < S->W; v++)
            if (v != w) ONE(1, v, M_LOSS, d, 0);
        break;
    case INS_LOSS_RECV:
        if (in->peer < S->D && in->peer * P + in->use != w) ONE(0, in->peer * P + in->use, M_LOSS, in->peer, 0);
        *out_dir = 0;
        break;
    default: {
        int kd = -1, dir = 1, own = 1; /* own: the shard named is the sender's (1) or the receiver's (0) */
        switch ((pipit__ins_kind)in->kind) {
        case INS_DP_RS_SEND: kd = M_DPR, own = 0; break;
        case INS_DP_RS_RECV: kd = M_DPR, dir = 0, own = 0; break;
        case INS_DP_AG_SEND: kd = M_DPG; break;
        case INS_DP_AG_RECV: kd = M_DPG, dir = 0; break;
        case INS_DP_PARAM_SEND: kd = M_DPP; break;
        case INS_DP_PARAM_RECV: kd = M_DPP, dir = 0; break;
        case INS_DP_SUMSQ_SEND: kd = M_DPS; break;
        case INS_DP_SUMSQ_RECV: kd = M_DPS, dir = 0; break;
        default: break;
        }
        *out_dir = dir;
        for (int k = 0; kd >= 0 && k < S->D; k++) {
            if (k == d) continue;
            int sender = dir ? d : k, receiver = dir ? k : d;
            ONE(dir, k * P + q, kd, in->param, own ? sender : receiver);
        }
    }
    }
#undef ONE
    return n;
}

/* ---------------------------------------------------------- simulation */

static const pipit__rank_plan *plan_of(const sim *S, int w) { return &S->p->ranks[w % S->p->nranks]; }

/* Whether every message of send instruction i of world rank w was received. */
static int received_all(sim *S, int w, int32_t i, msg_key *m) {
    int dir, n = msgs_of(S, w, &plan_of(S, w)->ins[i], m, &dir);
    for (int k = 0; k < n; k++)
        if (!slot_of(S, m[k])->received) return 0;
    return 1;
}

/* Rank w sent arena value i (message s): its fence waits for proof that s
 * was received. */
static int await(sim *S, int w, int32_t i, const msg_slot *s) {
    if (S->npend[w] == S->cappend[w]) {
        int cap = S->cappend[w] ? 2 * S->cappend[w] : 16;
        pending *v = pipit__realloc(S->pend[w], sizeof *v * (size_t)cap);
        if (!v) return 0;
        S->pend[w] = v, S->cappend[w] = cap;
    }
    S->pend[w][S->npend[w]++] = (pending){i, s};
    return 1;
}

/* A message arrives at rank w, instruction i, in the vector-clock run: w's
 * clock takes the sender's, so w knows all the sender knew; every send of
 * w whose receive that covers is fenced right after i. Only in the loop: a
 * send still waiting when the loop ends is made a copy. */
static void learn(sim *S, int w, int32_t i, const msg_slot *s) {
    int P = S->p->nranks;
    for (int r = 0; s->vc_at >= 0 && r < P; r++)
        S->vc[w * P + r] = PIPIT_MAX(S->vc[w * P + r], S->vcs[(size_t)s->vc_at * P + r]);
    if (i + 1 > S->p->ranks[w].post_at) return;
    int keep = 0;
    for (int k = 0; k < S->npend[w]; k++) {
        const pending *e = &S->pend[w][k];
        if (e->m->received && S->vc[w * P + e->m->k.dst] >= e->m->recv_at + 1)
            S->cause[w][e->send] = i + 1;
        else
            S->pend[w][keep++] = *e;
    }
    S->npend[w] = keep;
}

static int stamp_clock(sim *S, int w, msg_slot *s) {
    int P = S->p->nranks;
    if (!S->vc) return 1;
    if (S->nvcs == S->vcs_cap) {
        int32_t cap = S->vcs_cap ? 2 * S->vcs_cap : 256;
        int32_t *v = pipit__realloc(S->vcs, sizeof *v * (size_t)cap * (size_t)P);
        if (!v) return 0;
        S->vcs = v, S->vcs_cap = cap;
    }
    memcpy(&S->vcs[(size_t)S->nvcs * P], &S->vc[w * P], sizeof *S->vcs * (size_t)P);
    s->vc_at = S->nvcs++;
    return 1;
}

/* Runs world rank w as far as it goes, honouring its plan's fences;
 * returns how many instructions it ran, -1 when out of memory. */
static long run_rank(sim *S, int w, msg_key *m) {
    const pipit__rank_plan *r = plan_of(S, w);
    int P = S->p->nranks;
    long steps = 0;
    for (;;) {
        int32_t i = S->pc[w];
        while (S->fc[w] < r->nfences && r->fences[S->fc[w]].at == i) {
            if (!received_all(S, w, r->fences[S->fc[w]].send, m)) return steps;
            S->fc[w]++;
        }
        if (i == r->n) return steps;
        int dir, n = msgs_of(S, w, &r->ins[i], m, &dir);
        if (S->vc && w < P) S->vc[w * P + w] = i + 1;
        for (; S->sub[w] < n; S->sub[w]++) {
            msg_slot *s = slot_of(S, m[S->sub[w]]);
            if (dir) {
                s->posted = 1;
                if (!stamp_clock(S, w, s) || (S->vc && r->ins[i].kind == INS_SEND && !await(S, w, i, s))) return -1;
            } else {
                if (!s->posted) return steps;
                s->received = 1, s->recv_at = i;
                if (S->vc) learn(S, w, i, s);
            }
        }
        S->sub[w] = 0, S->pc[w] = i + 1, steps++;
    }
}

static pipit_status report_stall(const sim *S) {
    char buf[512];
    size_t used = 0;
    for (int w = 0; w < S->W && used < sizeof buf - 80; w++) {
        const pipit__rank_plan *r = plan_of(S, w);
        if (S->pc[w] == r->n && S->fc[w] == r->nfences) continue;
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%sworld rank %d at instruction %d of %d", used ? ", " : "",
                                 w, S->pc[w], r->n);
    }
    return pipit__err(PIPIT_STATUS_INTERNAL, "lowering: the rank programs deadlock (%s)", buf);
}

static void sim_free(sim *S) {
    pipit__free(S->tab);
    pipit__free(S->pc);
    pipit__free(S->vc);
    pipit__free(S->vcs);
    for (int q = 0; S->cause && q < S->p->nranks; q++) pipit__free(S->cause[q]);
    for (int q = 0; S->pend && q < S->p->nranks; q++) pipit__free(S->pend[q]);
    pipit__free(S->cause);
    pipit__free(S->pend);
    pipit__free(S->npend);
    memset(S, 0, sizeof *S); /* freeing twice is harmless */
}

/* Counts the messages, sizes the table, zeroes the state. */
static pipit_status sim_init(sim *S, const pipit__plan *p, int D, int with_clocks) {
    memset(S, 0, sizeof *S);
    S->p = p, S->D = D, S->W = p->nranks * D;
    size_t nmsgs = 0;
    msg_key *m = pipit__malloc(sizeof *m * (size_t)S->W);
    for (int w = 0; m && w < S->W; w++)
        for (int32_t i = 0; i < plan_of(S, w)->n; i++) {
            int dir;
            int n = msgs_of(S, w, &plan_of(S, w)->ins[i], m, &dir);
            nmsgs += dir ? (size_t)n : 0;
        }
    pipit__free(m);
    S->cap = 64;
    while (S->cap < 2 * nmsgs) S->cap *= 2;
    S->tab = pipit__calloc(S->cap, sizeof *S->tab);
    S->pc = pipit__calloc(3 * (size_t)S->W, sizeof *S->pc);
    int ok = m && S->tab && S->pc;
    if (with_clocks) {
        int P = p->nranks;
        S->vc = pipit__calloc((size_t)P * (size_t)P, sizeof *S->vc);
        S->cause = pipit__calloc((size_t)P, sizeof *S->cause);
        S->pend = pipit__calloc((size_t)P, sizeof *S->pend);
        S->npend = pipit__calloc(2 * (size_t)P, sizeof *S->npend);
        ok = ok && S->vc && S->cause && S->pend && S->npend;
        for (int q = 0; ok && q < P; q++) {
            ok = (S->cause[q] = pipit__malloc(sizeof **S->cause * (size_t)PIPIT_MAX(p->ranks[q].n, 1))) != NULL;
            for (int32_t i = 0; ok && i < p->ranks[q].n; i++) S->cause[q][i] = -1;
        }
        if (S->npend) S->cappend = S->npend + P;
    }
    if (!ok) {
        sim_free(S);
        return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    }
    S->sub = S->pc + S->W, S->fc = S->sub + S->W;
    return PIPIT_STATUS_OK;
}

/* Round robin until every rank is done (OK) or none moves (*stalled). */
static pipit_status sim_run(sim *S, int *stalled) {
    msg_key *m = pipit__malloc(sizeof *m * (size_t)S->W);
    if (!m) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    *stalled = 0;
    for (long moved = 1; moved;) {
        moved = 0;
        for (int w = 0; w < S->W; w++) {
            long k = run_rank(S, w, m);
            if (k < 0) {
                pipit__free(m);
                return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
            }
            moved += k;
        }
    }
    for (int w = 0; w < S->W; w++) *stalled |= S->pc[w] != plan_of(S, w)->n || S->fc[w] != plan_of(S, w)->nfences;
    pipit__free(m);
    return PIPIT_STATUS_OK;
}

/* ----------------------------------------------------------- placement */

enum { SH_ALL, SH_MINE, SH_OTHERS }; /* of a param's data-parallel shards */

typedef struct {
    int block;   /* LOC_GRAD, LOC_PARAM or LOC_ACC */
    int64_t idx; /* the param, or the accumulator's offset */
    int shards;
} region;

/* The bytes a zero-copy send outside the arena reads; 0 for other kinds. */
static int read_region(const pipit__instr *in, region *r) {
    switch ((pipit__ins_kind)in->kind) {
    case INS_ACC_SEND:
        if (in->in[0].kind == LOC_GRAD) *r = (region){LOC_GRAD, in->in[0].idx, SH_ALL};
        else *r = (region){LOC_ACC, (int64_t)in->in[0].off, SH_ALL};
        return 1;
    case INS_DP_RS_SEND: *r = (region){LOC_GRAD, in->param, SH_OTHERS}; return 1;
    case INS_DP_AG_SEND: *r = (region){LOC_GRAD, in->param, SH_MINE}; return 1;
    case INS_DP_PARAM_SEND: *r = (region){LOC_PARAM, in->param, SH_MINE}; return 1;
    default: return 0;
    }
}

/* Whether instruction `in` writes bytes of r. */
static int writes(const pipit__plan *p, const pipit__instr *in, const region *r) {
    region w = {-1, -1, SH_ALL};
    if (in->out.kind == LOC_GRAD) w = (region){LOC_GRAD, in->out.idx, SH_ALL};
    else if (in->out.kind == LOC_ACC) w = (region){LOC_ACC, (int64_t)in->out.off, SH_ALL};
    else if (in->kind == INS_DP_RS_RECV) w = (region){LOC_GRAD, in->param, SH_MINE};
    else if (in->kind == INS_DP_AG_RECV) w = (region){LOC_GRAD, in->param, SH_OTHERS};
    else if (in->kind == INS_DP_PARAM_RECV) w = (region){LOC_PARAM, in->param, SH_OTHERS};
    else if (in->kind == INS_UPDATE) w = (region){LOC_PARAM, in->param, p->zero1 ? SH_MINE : SH_ALL};
    if (w.block != r->block || w.idx != r->idx) return 0;
    return w.shards == SH_ALL || r->shards == SH_ALL || w.shards == r->shards;
}

static int by_at(const void *a, const void *b) {
    const pipit__fence *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    return (x->send > y->send) - (x->send < y->send);
}

/* The fence of send i of rank q, or none (a copy): -1. */
static int32_t fence_point(const pipit__plan *p, const pipit__rank_plan *r, int32_t i, const int32_t *cause) {
    const pipit__instr *in = &r->ins[i];
    region g;
    if (in->kind == INS_SEND) return in->in[0].kind == LOC_ARENA ? cause[i] : -1;
    if (!read_region(in, &g)) return -1;
    for (int32_t k = i + 1; k < r->n; k++)
        if (writes(p, &r->ins[k], &g)) return k;
    return r->n;
}

/* Every send of rank q becomes zero-copy where it has a fence point, and
 * its arena slot (if any) is held until then. */
static pipit_status fence_rank(const pipit__plan *p, pipit__emitter *e, const int32_t *cause) {
    pipit__rank_plan *r = e->r;
    r->nfences = 0;
    for (int32_t i = 0; i < r->n; i++) r->nfences += fence_point(p, r, i, cause) >= 0;
    r->fences = pipit__malloc(sizeof *r->fences * (size_t)PIPIT_MAX(r->nfences, 1));
    if (!r->fences) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    int32_t k = 0;
    for (int32_t i = 0; i < r->n; i++) {
        pipit__instr *in = &r->ins[i];
        int32_t at = fence_point(p, r, i, cause);
        in->zc = at >= 0;
        if (at < 0) continue;
        uint8_t poison = 0;
        if (in->kind == INS_SEND) {
            pipit__mp_buf *b = &e->bufs[in->in[0].idx];
            b->hold = PIPIT_MAX(b->hold, at - 1);
            poison = at - 1 >= b->last;
        }
        r->fences[k++] = (pipit__fence){at, i, poison};
    }
    qsort(r->fences, (size_t)r->nfences, sizeof *r->fences, by_at);
    return PIPIT_STATUS_OK;
}

/* Back to plain copies everywhere (the simulation with fences stalled). */
static void drop_fences(const pipit__plan *p, pipit__emitter *em) {
    for (int q = 0; q < p->nranks; q++) {
        pipit__rank_plan *r = em[q].r;
        for (int32_t i = 0; i < r->n; i++) {
            if (r->ins[i].kind == INS_SEND && r->ins[i].zc) em[q].bufs[r->ins[i].in[0].idx].hold = -1;
            r->ins[i].zc = 0;
        }
        pipit__free(r->fences);
        r->fences = NULL;
        r->nfences = 0;
    }
}

/* Simulates the world's programs with their fences; *stalled if they stop. */
static pipit_status check_world(const pipit__plan *p, int *stalled, sim *S) {
    int D = p->nranks * p->D <= MAX_WORLD ? p->D : PIPIT_MIN(p->D, 3);
    pipit_status s = sim_init(S, p, D, 0);
    if (!s) s = sim_run(S, stalled);
    return s;
}

pipit_status pipit__place_fences(lowering *L, pipit__emitter *em) {
    pipit__plan *p = L->p;
    sim S;
    int stalled = 0;
    pipit_status s = sim_init(&S, p, 1, 1); /* one replica, with vector clocks */
    if (!s) s = sim_run(&S, &stalled);
    if (!s && stalled) s = report_stall(&S);
    for (int q = 0; !s && q < p->nranks; q++) s = fence_rank(p, &em[q], S.cause[q]);
    sim_free(&S);
    if (s) return s;
    s = check_world(p, &stalled, &S);
    sim_free(&S);
    if (s || !stalled) return s;
    drop_fences(p, em); /* cannot happen by construction; if it did, copies are always safe */
    s = check_world(p, &stalled, &S);
    if (!s && stalled) s = report_stall(&S);
    sim_free(&S);
    return s;
}
