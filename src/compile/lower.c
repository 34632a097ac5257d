/*
 * lower.c — from (staged graph, schedule) to one instruction list per rank.
 *
 *   pre-loop   RUN the pre-loop nodes this rank needs (ops on params only;
 *              replicated on every rank that reads them, so no messages)
 *   loop       per task of the rank's list: RECV what the task reads from
 *              other ranks (just before its first reader, so a receive never
 *              holds back work that does not need it), RUN the task's nodes,
 *              ACC the gradient-target uses it produced, SEND what others read
 *   post-loop  pre-loop values' per-use sums exchanged and added in use
 *              order, their backward (the post-loop region), then the params':
 *              per-use sums exchanged between holders and added in use order,
 *              the global norm from per-param sums of squares in param
 *              order, and the same update on every holder.
 *
 * Every rank derives the same plan from the same inputs: it is deterministic.
 */
#include <stdlib.h>
#include <string.h>

#include "compile/lowering.h"
#include "ir/ep.h"
#include "schedule/schedule.h"
#include "util/checked.h"


static int is_loop_phase(int ph) { return ph == PH_F || ph == PH_B || ph == PH_W; }

static int rank_of_node(const lowering *L, int32_t id) { return L->stage_rank[L->st->stage[id]]; }

/* A pre-loop value runs wherever a pre-loop node reading it runs (readers
 * come after what they read: one backward sweep closes it). */
static void close_over_preloop_readers(const pipit__plan *p, uint64_t *rk) {
    const pipit_graph *g = p->g;
    for (int32_t j = p->gr.fwd_end - 1; j >= 0; j--)
        for (int k = 0; p->gr.preloop[j] && k < g->nodes[j].nin; k++)
            if (g->nodes[j].in[k] < p->gr.fwd_end && p->gr.preloop[g->nodes[j].in[k]]) rk[g->nodes[j].in[k]] |= rk[j];
}

/* Ranks that run each pre-loop node: those of its loop readers, and those
 * that run its pre-loop readers. Post-loop nodes and gradient leaves run
 * where the pre-loop node they differentiate runs. */
static pipit_status find_region_ranks(lowering *L) {
    pipit__plan *p = L->p;
    const pipit_graph *g = p->g;
    uint64_t *rk = pipit__calloc((size_t)g->n, sizeof *rk);
    if (!rk) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    for (int32_t j = g->n - 1; j >= 0; j--) {
        const pipit__node *n = &g->nodes[j];
        if (!L->st->live[j] || j >= p->gr.fwd_end || (pipit__ops[n->op].flags & OPF_LEAF)) continue;
        uint64_t mine = p->gr.preloop[j] ? rk[j] : 1ull << rank_of_node(L, j);
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] < p->gr.fwd_end && p->gr.preloop[n->in[k]]) rk[n->in[k]] |= mine;
    }
    /* loop readers in the backward (e.g. a VJP reading a pre-loop value) */
    for (int32_t j = p->gr.fwd_end; j < g->n; j++) {
        const pipit__node *n = &g->nodes[j];
        if (!L->st->live[j] || !is_loop_phase(L->st->phase[j])) continue;
        for (int k = 0; k < n->nin; k++) {
            int32_t r = pipit__alias_root(g, n->in[k]);
            if (r < p->gr.fwd_end && p->gr.preloop[r]) rk[r] |= 1ull << rank_of_node(L, j);
        }
    }
    close_over_preloop_readers(p, rk);
    for (int32_t j = p->gr.fwd_end; j < g->n; j++)
        if (g->nodes[j].flags & NODE_POST) rk[j] = g->nodes[j].origin >= 0 ? rk[g->nodes[j].origin] : 1;
    /* A post-loop node also runs on every rank that runs a post-loop node
     * reading it, and so does each pre-loop value it reads: the backward of
     * s = f(param), read by stage 0, sums the gradient coming back from
     * t = h(s), read only on another rank, so t's backward (from its
     * accumulated gradient, which its holders then receive) runs on s's
     * ranks too. Readers come after what they read: one backward pass,
     * then the pre-loop closure again. */
    for (int32_t j = g->n - 1; j >= p->gr.fwd_end; j--) {
        const pipit__node *n = &g->nodes[j];
        if (!(n->flags & NODE_POST)) continue;
        for (int k = 0; k < n->nin; k++) {
            int32_t r = n->in[k];
            if (r >= p->gr.fwd_end ? (g->nodes[r].flags & NODE_POST) != 0 : p->gr.preloop[r]) rk[r] |= rk[j];
        }
    }
    close_over_preloop_readers(p, rk);
    p->node_ranks = rk;
    return PIPIT_STATUS_OK;
}

/* Values whose only reader is one gradient-target use: the first
 * microbatch's kernel can write them straight into the accumulator. */
static void find_sole_acc(lowering *L) {
    const pipit__plan *p = L->p;
    const pipit_graph *g = p->g;
    for (int i = 0; i < p->ntargets; i++)
        for (int u = 0; u < p->gr.t[i].nuses; u++) {
            int32_t r = pipit__alias_root(g, p->gr.t[i].contrib[u]);
            if (pipit__node_runs(&g->nodes[r])) L->sole_acc[r] = L->sole_acc[r] ? 2 : 1;
        }
    for (int32_t j = 0; j < g->n; j++) {
        const pipit__node *n = &g->nodes[j];
        if (!L->st->live[j] || !pipit__node_runs(n)) continue;
        for (int k = 0; k < n->nin; k++) L->sole_acc[pipit__alias_root(g, n->in[k])] = 2;
    }
    L->sole_acc[p->loss] = 2;
    for (int32_t j = 0; j < g->n; j++) L->sole_acc[j] = L->sole_acc[j] == 1;
}

/* Values whose tail one gradient-target use reads (a view from a 64-byte
 * multiple to the value's end) while every other reader reads only the
 * bytes before it: the fused head's [G partial dh | dW] (ops.c
 * HEAD_XENT_BWD), whose dW view is the weight's contribution and whose
 * partials only HEAD_XENT_DH reads. The first microbatch's kernel can then
 * write the value with its tail in the accumulator and its head in the
 * bytes kept free just before it (tail_lead), so neither sits in the arena. */
static void find_tail_acc(lowering *L) {
    const pipit__plan *p = L->p;
    const pipit_graph *g = p->g;
    uint8_t *t = L->tail_acc;
    for (int i = 0; i < p->ntargets; i++)
        for (int u = 0; u < p->gr.t[i].nuses; u++) {
            int32_t c = p->gr.t[i].contrib[u], r = pipit__alias_root(g, c);
            size_t o = pipit__alias_offset(g, c);
            if (!pipit__node_runs(&g->nodes[r])) continue;
            int tail = o > 0 && o % 64 == 0 && o + pipit__node_bytes(&g->nodes[c]) == pipit__node_bytes(&g->nodes[r]);
            t[r] = tail && !t[r] ? 1 : 2;
        }
    for (int32_t j = 0; j < g->n; j++) {
        const pipit__node *n = &g->nodes[j];
        if (!L->st->live[j] || !pipit__node_runs(n)) continue;
        for (int k = 0; k < n->nin; k++) {
            int32_t r = pipit__alias_root(g, n->in[k]);
            if (t[r] && !(n->op == PIPIT_OP_HEAD_XENT_DH && n->in[k] == r)) t[r] = 2; /* DH reads the partials */
        }
    }
    t[p->loss] = 2;
    for (int32_t j = 0; j < g->n; j++) t[j] = t[j] == 1;
}

/* The kernel fusions below (bias epilogue, weight-gradient accumulation)
 * have CPU kernels only: a plan for another device keeps the ops apart. */
static int cpu_plan(const pipit__plan *p) {
    const char *dev = p->opt.device;
    return !dev || !*dev || strcmp(dev, "cpu") == 0;
}

/* The bias epilogue: a bf16 BIAS_ADD whose input is a bf16 matmul's output
 * (not a view of it) read by nothing else, with a bias of params alone (a
 * param's bf16 copy, made before the loop), runs inside the matmul: the
 * kernel adds the bias to each fp32 sum before its one rounding
 * (pipit__gemm_bf16_bias; before, the product was rounded, then the sum).
 * The matmul's output never exists; its buffer holds the BIAS_ADD's. The
 * CPU kernels have it; CUDA plans keep the two instructions. Marks such
 * BIAS_ADDs; the emitter fuses each where the matmul's kernel is on the
 * same rank and still unread (pipit__emit_fuse_bias). */
static void find_bias_epi(lowering *L, uint8_t *readers) {
    const pipit__plan *p = L->p;
    const pipit_graph *g = p->g;
    if (!cpu_plan(p)) return;
    for (int32_t j = 0; j < g->n; j++) { /* readers of each root: 2 = more than one, or not a node */
        const pipit__node *n = &g->nodes[j];
        if (!L->st->live[j] || !pipit__node_runs(n)) continue;
        for (int k = 0; k < n->nin; k++) {
            uint8_t *c = &readers[pipit__alias_root(g, n->in[k])];
            *c = *c ? 2 : 1;
        }
    }
    for (int i = 0; i < p->ntargets; i++)
        for (int u = 0; u < p->gr.t[i].nuses; u++) readers[pipit__alias_root(g, p->gr.t[i].contrib[u])] = 2;
    for (int i = 0; i < p->noutputs; i++) readers[pipit__alias_root(g, p->outputs[i])] = 2;
    readers[p->loss] = 2;
    for (int32_t j = 0; j < g->n; j++) {
        const pipit__node *n = &g->nodes[j];
        if (!L->st->live[j] || n->op != PIPIT_OP_BIAS_ADD || n->dtype != PIPIT_BF16) continue;
        int32_t r = n->in[0], b = pipit__alias_root(g, n->in[1]);
        const pipit__node *mm = &g->nodes[r];
        int bias_pre = g->nodes[b].op == PIPIT_OP_PARAM || (b < p->gr.fwd_end && p->gr.preloop[b]);
        L->bias_epi[j] = mm->op == PIPIT_OP_MATMUL && mm->dtype == PIPIT_BF16 && pipit__alias_root(g, r) == r &&
                         readers[r] == 1 && bias_pre && L->st->live[r] && L->st->stage[r] == L->st->stage[j] &&
                         L->st->phase[r] == L->st->phase[j];
    }
}

/* The bytes use u of target i keeps free before its accumulator (or, for
 * a param's direct first use, before its gradient): its contribution's
 * offset in a tail_acc value of the accumulator's dtype; else 0. */
static size_t tail_lead(const lowering *L, int i, int u) {
    const pipit__plan *p = L->p;
    int32_t c = p->gr.t[i].contrib[u];
    if (p->params[i].post[u] || !L->tail_acc[pipit__alias_root(p->g, c)] || p->g->nodes[c].dtype != p->params[i].dtype)
        return 0;
    return pipit__alias_offset(p->g, c);
}

/* The weight-gradient accumulation fusion: a bf16 matmul whose product is
 * an fp32 accumulator's only input (a weight's gradient under autocast)
 * writes it there in fp32, adding from the second microbatch on: no bf16
 * rounding of the product, no bf16 buffer, no INS_ACC pass. The CPU
 * kernels have it (pipit__gemm_bf16_f32); the CUDA backend not yet, so its
 * plans keep INS_ACC. */
static int fuses_wgrad(const pipit__plan *p, const pipit__node *n, pipit_dtype acc) {
    return cpu_plan(p) && n->op == PIPIT_OP_MATMUL && n->dtype == PIPIT_BF16 && acc == PIPIT_F32;
}

/* First microbatch: let the kernel write the use's sum directly (no copy),
 * when nothing else reads the value; otherwise accumulate. Never through
 * a view of part of its producer's output: the producer writes all of it;
 * nor when the accumulator's dtype is another (a bf16 contribution to an
 * fp32 gradient is converted as it is added), unless the producer is a
 * bf16 matmul that can write fp32 (fuses_wgrad): then every microbatch's. */
static void acc_or_retarget(lowering *L, pipit__emitter *e, int i, int32_t c, int mb, pipit__loc dst) {
    const pipit_graph *g = L->p->g;
    int32_t r = pipit__alias_root(g, c);
    pipit_dtype dt = L->p->params[i].dtype;
    int whole = pipit__alias_offset(g, c) == 0 && pipit__node_bytes(&g->nodes[c]) == pipit__node_bytes(&g->nodes[r]);
    if (mb == 0 && L->sole_acc[r] && whole && g->nodes[c].dtype == dt && pipit__emit_retarget(e, r, mb, dst)) return;
    if (L->sole_acc[r] && c == r && fuses_wgrad(L->p, &g->nodes[r], dt) &&
        pipit__emit_retarget_f32(e, r, mb, dst, mb == 0))
        return;
    pipit__emit_acc(e, c, mb, dst, mb == 0, dt);
}

static int32_t use_root(const pipit__plan *p, int i, int u) { return pipit__alias_root(p->g, p->gr.t[i].contrib[u]); }

/* The loop uses by the root node of their contribution, so that each is
 * accumulated right after its kernel runs: its buffer dies at once, and the
 * last microbatch's can start the param's data-parallel exchange while the
 * rest of the backward runs (dp_finalize). */
static pipit_status index_acc_roots(lowering *L) {
    const pipit__plan *p = L->p;
    int32_t n = p->g->n, total = 0;
    for (int i = 0; i < p->ntargets; i++) total += p->params[i].nuses;
    L->acc_first = pipit__calloc((size_t)n + 1, sizeof *L->acc_first);
    L->acc_tgt = pipit__malloc(sizeof *L->acc_tgt * (size_t)PIPIT_MAX(total, 1));
    L->acc_use = pipit__malloc(sizeof *L->acc_use * (size_t)PIPIT_MAX(total, 1));
    int32_t *at = pipit__malloc(sizeof *at * ((size_t)n + 1));
    if (!L->acc_first || !L->acc_tgt || !L->acc_use || !at) {
        pipit__free(at);
        return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    }
    for (int i = 0; i < p->ntargets; i++)
        for (int u = 0; u < p->params[i].nuses; u++)
            if (!p->params[i].post[u]) L->acc_first[use_root(p, i, u) + 1]++;
    for (int32_t j = 0; j < n; j++) L->acc_first[j + 1] += L->acc_first[j];
    memcpy(at, L->acc_first, sizeof *at * ((size_t)n + 1));
    for (int i = 0; i < p->ntargets; i++)
        for (int u = 0; u < p->params[i].nuses; u++) {
            if (p->params[i].post[u]) continue;
            int32_t k = at[use_root(p, i, u)]++;
            L->acc_tgt[k] = i, L->acc_use[k] = u;
        }
    pipit__free(at);
    return PIPIT_STATUS_OK;
}

/* Which ranks read each loop value (bit per rank); pre-loop values are
 * computed where they are read, so they are never sent. */
static pipit_status find_consumers(lowering *L) {
    const pipit_graph *g = L->p->g;
    L->consumer_ranks = pipit__calloc((size_t)g->n, sizeof *L->consumer_ranks);
    L->sole_acc = pipit__calloc((size_t)g->n, 1);
    L->tail_acc = pipit__calloc((size_t)g->n, 1);
    L->bias_epi = pipit__calloc((size_t)g->n, 1);
    uint8_t *readers = pipit__calloc((size_t)g->n, 1);
    if (!L->consumer_ranks || !L->sole_acc || !L->tail_acc || !L->bias_epi || !readers) {
        pipit__free(readers);
        return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    }
    find_sole_acc(L);
    find_tail_acc(L);
    find_bias_epi(L, readers);
    pipit__free(readers);
    pipit_status s = index_acc_roots(L);
    if (s) return s;
    for (int32_t j = 0; j < g->n; j++) {
        const pipit__node *n = &g->nodes[j];
        if (!L->st->live[j] || !is_loop_phase(L->st->phase[j])) continue;
        for (int k = 0; k < n->nin; k++) {
            int32_t r = pipit__alias_root(g, n->in[k]);
            if (is_loop_phase(L->st->phase[r])) L->consumer_ranks[r] |= 1ull << rank_of_node(L, j);
        }
    }
    return PIPIT_STATUS_OK;
}

static int task_has_phase(int kind, int phase) {
    switch (kind) {
    case PIPIT_TASK_F: return phase == PH_F;
    case PIPIT_TASK_B: return phase == PH_B;
    case PIPIT_TASK_W: return phase == PH_W;
    case PIPIT_TASK_BW: return phase == PH_B || phase == PH_W;
    }
    return 0;
}

/* Receives every loop input of node j that lives on another rank and is not here yet. */
static void recv_inputs(lowering *L, pipit__emitter *e, int32_t j, int mb, int me) {
    const pipit_graph *g = L->p->g;
    const pipit__node *n = &g->nodes[j];
    for (int k = 0; k < n->nin; k++) {
        int32_t r = pipit__alias_root(g, n->in[k]);
        if (!is_loop_phase(L->st->phase[r]) || pipit__emit_has(e, r, mb)) continue;
        int src = rank_of_node(L, r);
        if (src != me) pipit__emit_recv(e, r, mb, src);
    }
}

static size_t *acc_slot(const pipit__plan *p, const pipit__param *pp, int u, int q) {
    return &pp->acc_off[(size_t)u * (size_t)p->nranks + (size_t)q];
}

#define ACC_IN_GRAD (SIZE_MAX - 1) /* acc_slot: the use accumulates straight into the gradient block */

pipit__loc pipit__lower_use_loc(const pipit__plan *p, int i, int u, int q) {
    size_t off = *acc_slot(p, &p->params[i], u, q);
    if (off == ACC_IN_GRAD) return (pipit__loc){LOC_GRAD, i, 0};
    return (pipit__loc){LOC_ACC, -1, off};
}

/* Microbatch mb's contribution of use u of target i into its accumulator
 * (the same adds in the same microbatch order wherever it is emitted). */
static void acc_use(lowering *L, pipit__emitter *e, int i, int u, int mb, int me) {
    pipit__loc dst = pipit__lower_use_loc(L->p, i, u, me);
    int32_t c = L->p->gr.t[i].contrib[u];
    size_t lead = mb == 0 ? tail_lead(L, i, u) : 0;
    pipit__loc at = dst;
    at.off -= lead; /* LOC_GRAD: relative to the gradient's offset, patched in (size_t arithmetic is modular) */
    if (!lead || !pipit__emit_relocate(e, pipit__alias_root(L->p->g, c), mb, at))
        acc_or_retarget(L, e, i, c, mb, dst); /* else the kernel wrote the first microbatch's sum: the same bits */
    pipit__dp_after_acc(L, e, i, mb, me);
}

static void send_outputs(lowering *L, pipit__emitter *e, int kind, int s, int mb, int me) {
    const pipit_graph *g = L->p->g;
    for (int32_t j = 0; j < g->n; j++) {
        int ph = L->st->phase[j];
        if (!is_loop_phase(ph) || L->st->stage[j] != s || !task_has_phase(kind, ph)) continue;
        for (int q = 0; q < L->p->nranks; q++)
            if (q != me && (L->consumer_ranks[j] >> q & 1)) pipit__emit_send(e, j, mb, q);
    }
}

/* Accumulates the contributions of this task that no kernel of it
 * computes (the loss gradient seed itself); the others follow their kernel
 * (run_nodes). */
static void accumulate(lowering *L, pipit__emitter *e, int kind, int s, int mb, int me) {
    const pipit__plan *p = L->p;
    for (int i = 0; i < p->ntargets; i++) {
        const pipit__param *pp = &p->params[i];
        for (int u = 0; u < pp->nuses; u++) {
            if (pp->post[u]) continue;
            int32_t r = use_root(p, i, u);
            if (r != p->gr.seed && pipit__node_runs(&p->g->nodes[r])) continue;
            int ph = r == p->gr.seed ? PH_B : L->st->phase[r];
            int st = r == p->gr.seed ? p->S - 1 : L->st->stage[r];
            if (st != s || !task_has_phase(kind, ph)) continue;
            acc_use(L, e, i, u, mb, me);
        }
    }
}

/* Where the lowering of one task stands: an overlapped pair interleaves
 * two of them, each stopping after an all-to-all's start. */
typedef struct {
    int ti, me;
    pipit_task t;
    int pass;              /* 0: full remat's forward again (a B/BW), 1: the task's own nodes, 2: done */
    int32_t j;             /* the pass's next node */
    int32_t a2a, a2a_at;   /* an all-to-all started, not finished: its node and START index; -1: none */
    int paired;            /* 1: in an overlapped pair (other instructions come between start and finish) */
    int slot;              /* its place in the pair: 0 (also outside one) or 1 (the all-to-alls' tags) */
} task_cursor;

static task_cursor cursor_at(const lowering *L, int ti, pipit_task t, int me) {
    int remat = L->p->opt.remat == PIPIT_REMAT_FULL && (t.kind == PIPIT_TASK_B || t.kind == PIPIT_TASK_BW);
    return (task_cursor){.ti = ti, .me = me, .t = t, .pass = remat ? 0 : 1, .j = 0, .a2a = -1, .a2a_at = -1};
}

static void acc_uses_of(lowering *L, pipit__emitter *e, const task_cursor *c, int32_t j) {
    for (int32_t k = L->acc_first[j]; c->pass == 1 && k < L->acc_first[j + 1]; k++)
        acc_use(L, e, L->acc_tgt[k], L->acc_use[k], c->t.mb, c->me);
}

/* Emits the task's nodes, in graph order, from where the cursor stands
 * (RECV of what another rank sends just before its first reader; ACC of
 * each gradient use right after its kernel); stops right after the start
 * of an EP all-to-all (1) or at the end of the nodes (0). */
static int advance(lowering *L, pipit__emitter *e, task_cursor *c) {
    const pipit_graph *g = L->p->g;
    for (; c->pass < 2; c->pass++, c->j = 0) {
        for (; c->j < g->n; c->j++) {
            int32_t j = c->j;
            int ph = L->st->phase[j];
            if (!is_loop_phase(ph) || L->st->stage[j] != c->t.stage) continue;
            if (c->pass == 0 ? ph != PH_F : !task_has_phase(c->t.kind, ph)) continue;
            recv_inputs(L, e, j, c->t.mb, c->me);
            if (pipit__is_ep_op(g->nodes[j].op)) {
                c->a2a = j;
                c->a2a_at = pipit__emit_a2a_start(e, j, c->t.mb, c->paired, c->slot);
                c->j++;
                return 1;
            }
            if (!L->bias_epi[j] || !pipit__emit_fuse_bias(e, j, c->t.mb)) pipit__emit_run(e, j, c->t.mb);
            acc_uses_of(L, e, c, j);
        }
    }
    return 0;
}

/* The end of a task: its loss, the gradient uses no kernel computes, its
 * messages to other ranks, its end mark. */
static void task_tail(lowering *L, pipit__emitter *e, const task_cursor *c) {
    pipit__plan *p = L->p;
    pipit_task t = c->t;
    if (t.kind == PIPIT_TASK_F && t.stage == L->st->stage[p->loss]) pipit__emit_loss(e, p->loss, t.mb);
    accumulate(L, e, t.kind, t.stage, t.mb, c->me);
    send_outputs(L, e, t.kind, t.stage, t.mb, c->me);
    pipit__emit_mark(e, c->ti, 1);
}

/* Finishes the all-to-all the cursor stopped at (if any) and emits the
 * task up to its next start (1), or to its end and its tail (0). */
static int next_segment(lowering *L, pipit__emitter *e, task_cursor *c) {
    if (c->a2a >= 0) {
        pipit__emit_a2a_finish(e, c->a2a, c->t.mb, c->a2a_at, c->paired, c->slot);
        acc_uses_of(L, e, c, c->a2a);
        c->a2a = -1;
    }
    if (advance(L, e, c)) return 1;
    task_tail(L, e, c);
    return 0;
}

static void lower_task(lowering *L, pipit__emitter *e, int ti, pipit_task t, int me) {
    task_cursor c = cursor_at(L, ti, t, me);
    pipit__emit_mark(e, ti, 0);
    while (next_segment(L, e, &c)) {
    }
}

/* Two adjacent tasks of different microbatches lowered as one (an
 * overlapped pair, choose_overlaps): each runs up to its next all-to-all's
 * start, then the other does, so one task's blocks move while the other
 * computes (DualPipeV's overlapped F and B; Megatron's combined 1F1B). Each
 * task's instructions keep their order, only the two are interleaved: the
 * same kernels on the same values, the same bits. */
static void lower_pair(lowering *L, pipit__emitter *e, int ti, const pipit_task *t, int me) {
    task_cursor a = cursor_at(L, ti, t[0], me), b = cursor_at(L, ti + 1, t[1], me);
    a.paired = b.paired = 1;
    b.slot = 1;
    pipit__emit_mark(e, ti, 0);
    pipit__emit_mark(e, ti + 1, 0);
    int more_a = next_segment(L, e, &a), more_b = next_segment(L, e, &b);
    while (more_a || more_b) {
        if (more_a) more_a = next_segment(L, e, &a);
        if (more_b) more_b = next_segment(L, e, &b);
    }
}

/* The pre-loop and post-loop regions run on every rank that needs them. */
static void run_region(lowering *L, pipit__emitter *e, int phase, int me) {
    const pipit__plan *p = L->p;
    for (int32_t j = 0; j < p->g->n; j++)
        if (L->st->phase[j] == phase && (p->node_ranks[j] >> me & 1)) pipit__emit_run(e, j, 0);
}

/* ------------------------------------------------------------ placement */

/* Which ranks compute each use of each target, and where its accumulator
 * lives on each of them. Loop uses run on their stage's rank; post-loop
 * uses on every rank of their region. */
static pipit_status place_uses(lowering *L) {
    pipit__plan *p = L->p;
    for (int i = 0; i < p->ntargets; i++) {
        pipit__param *pp = &p->params[i];
        pp->acc_off = pipit__malloc(sizeof(size_t) * (size_t)PIPIT_MAX(pp->nuses, 1) * (size_t)p->nranks);
        if (!pp->acc_off) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
        for (int u = 0; u < pp->nuses; u++) {
            int32_t r = pipit__alias_root(p->g, p->gr.t[i].contrib[u]);
            if (pp->post[u]) pp->use_ranks[u] = p->node_ranks[r];
            else pp->use_ranks[u] = 1ull << (r == p->gr.seed ? L->stage_rank[p->S - 1] : rank_of_node(L, r));
            /* a param's first use, accumulated per microbatch, needs no
             * buffer of its own: the gradient block holds its sum, and the
             * use-order sum (a left fold from use 0: GRADSUM) adds the
             * others to it in place, the same bits. A holder that sends
             * the sum on is fenced before GRADSUM writes it (fences.c). */
            int direct = !pp->boundary && u == 0 && !pp->post[u];
            size_t lead = tail_lead(L, i, u); /* kept free before the sum: a fused head's partials */
            if (direct) pp->lead = lead;
            for (int q = 0; q < p->nranks; q++) {
                *acc_slot(p, pp, u, q) = SIZE_MAX;
                if (!(pp->use_ranks[u] >> q & 1)) continue;
                if (direct) {
                    *acc_slot(p, pp, u, q) = ACC_IN_GRAD;
                    continue;
                }
                int ok = pipit__add_align64(p->ranks[q].acc_bytes, lead, &p->ranks[q].acc_bytes);
                *acc_slot(p, pp, u, q) = p->ranks[q].acc_bytes;
                if (!ok ||
                    !pipit__add_align64(p->ranks[q].acc_bytes, (size_t)pp->numel * pipit__dtype_size(pp->dtype),
                                        &p->ranks[q].acc_bytes) ||
                    p->ranks[q].acc_bytes > (size_t)PIPIT__MAX_BYTES)
                    return pipit__err(PIPIT_STATUS_INVALID,
                                      "rank %d: gradient accumulators exceed 2^56 bytes (the limit of one memory "
                                      "block)",
                                      q);
            }
        }
    }
    return PIPIT_STATUS_OK;
}

/* A rank holds every param its instructions read (a tied weight is held by
 * each rank that uses it); an unused param is kept by rank 0. A pre-loop
 * value's gradient is needed by the ranks that run its post-loop region. */
static int param_of(const pipit__plan *p, int32_t node) {
    for (int i = 0; i < p->nparams; i++)
        if (p->params[i].node == node) return i;
    return -1;
}

/* A gradient transform of param P runs on P's holders; they must then also
 * hold every param (and gradient) it reads, which may widen those params'
 * holders and so the ranks of their own transforms: iterate to a fixpoint. */
static pipit_status place_gradpost(lowering *L) {
    pipit__plan *p = L->p;
    const pipit_graph *g = p->g;
    uint8_t *cone = pipit__malloc((size_t)g->n);
    if (!cone) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t k = 0; k < g->ngradset; k++) {
            uint64_t ranks = p->params[param_of(p, g->gradset[k][0])].holders;
            memset(cone, 0, (size_t)g->n);
            cone[g->gradset[k][1]] = 1;
            for (int32_t j = g->gradset[k][1]; j >= 0; j--) {
                if (!cone[j]) continue;
                const pipit__node *n = &g->nodes[j];
                p->node_ranks[j] |= ranks;
                int32_t q = n->op == PIPIT_OP_PARAM ? j : (n->flags & NODE_GRADOF) ? (int32_t)n->iattr[0] : -1;
                if (q >= 0) {
                    pipit__param *pq = &p->params[param_of(p, q)];
                    if ((pq->holders | ranks) != pq->holders) changed = 1;
                    pq->holders |= ranks;
                }
                for (int i = 0; i < n->nin; i++) cone[n->in[i]] = 1;
            }
        }
    }
    pipit__free(cone);
    return PIPIT_STATUS_OK;
}

static pipit_status place_params(lowering *L) {
    pipit__plan *p = L->p;
    for (int q = 0; q < p->nranks; q++) {
        const pipit__rank_plan *r = &p->ranks[q];
        for (int32_t i = 0; i < r->n; i++)
            for (int k = 0; k < PIPIT_MAX_IN; k++)
                if (r->ins[i].in[k].kind == LOC_PARAM) p->params[r->ins[i].in[k].idx].holders |= 1ull << q;
    }
    /* The post-loop region, emitted after this, reads params too, also on
     * ranks whose loop never read them (find_region_ranks widens it). */
    for (int32_t j = p->gr.fwd_end; j < p->g->n; j++) {
        if (L->st->phase[j] != PH_POST) continue;
        for (int k = 0; k < p->g->nodes[j].nin; k++) {
            int32_t r = pipit__alias_root(p->g, p->g->nodes[j].in[k]);
            if (p->g->nodes[r].op == PIPIT_OP_PARAM && p->param_of[r] >= 0)
                p->params[p->param_of[r]].holders |= p->node_ranks[j];
        }
    }
    for (int i = 0; i < p->ntargets; i++) {
        pipit__param *pp = &p->params[i];
        if (pp->boundary) pp->holders = p->node_ranks[pp->gacc];
        if (!pp->holders) pp->holders = 1;
        for (int u = 0; u < pp->nuses && !pp->boundary; u++) pp->holders |= pp->use_ranks[u];
    }
    pipit_status s = place_gradpost(L);
    if (s) return s;
    for (int i = 0; i < p->ntargets; i++) p->params[i].norm_rank = __builtin_ctzll(p->params[i].holders);
    for (int q = 0; q < p->nranks; q++) {
        pipit__rank_plan *r = &p->ranks[q];
        r->param_off = pipit__malloc(sizeof(size_t) * (size_t)PIPIT_MAX(p->nparams, 1));
        if (!r->param_off) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
        for (int i = 0; i < p->nparams; i++) {
            const pipit__param *pp = &p->params[i];
            r->param_off[i] = SIZE_MAX;
            if (!(pp->holders >> q & 1)) continue;
            /* the blocks keep pp->lead bytes free before the param where its
             * direct first use writes a fused head's partials there */
            size_t lead = pp->nuses > 0 && (pp->use_ranks[0] >> q & 1) ? pp->lead : 0;
            int ok = pipit__add_align64(r->param_bytes, lead, &r->param_bytes);
            r->param_off[i] = r->param_bytes;
            if (!ok ||
                !pipit__add_align64(r->param_bytes, (size_t)pp->numel * pipit__dtype_size(pp->dtype),
                                    &r->param_bytes) ||
                r->param_bytes > (size_t)PIPIT__MAX_BYTES)
                return pipit__err(PIPIT_STATUS_INVALID,
                                  "rank %d: parameters exceed 2^56 bytes (the limit of one memory block) at '%s'",
                                  q, pp->name ? pp->name : "?");
            r->max_chunks = PIPIT_MAX(r->max_chunks, (pp->numel + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK);
        }
    }
    return PIPIT_STATUS_OK;
}

/* ------------------------------------------------------------ post-loop */

pipit__instr *pipit__lower_post(pipit__emitter *e, int kind, int param, int use, int peer) {
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return NULL;
    in->kind = (uint8_t)kind;
    in->param = param;
    in->use = use;
    in->peer = peer;
    return in;
}

/* Whether pipit_set_grad replaces param i's gradient. */
static int transformed(const pipit__plan *p, int i) {
    for (int32_t k = 0; k < p->g->ngradset; k++)
        if (p->g->gradset[k][0] == p->params[i].node) return 1;
    return 0;
}

/* Every holder of a target needs every use's sum: the lowest rank that
 * computed a use sends it to the holders that did not; then each holder
 * receives what it lacks. All sends of a rank come before its receives, so
 * the exchange cannot deadlock. recv_buf[k] gets the arena buffer of the
 * k-th (target, use) pair received here, -1 if local. */
static void exchange_uses(pipit__plan *p, pipit__emitter *e, int me, int first, int last, int32_t *recv_buf) {
    for (int i = first; i < last; i++) {
        const pipit__param *pp = &p->params[i];
        size_t bytes = (size_t)pp->numel * pipit__dtype_size(pp->dtype);
        for (int u = 0; u < pp->nuses; u++) {
            if (__builtin_ctzll(pp->use_ranks[u]) != me) continue;
            for (int q = 0; q < p->nranks; q++) {
                if (!pipit__has_rank(pp->holders, q) || pipit__has_rank(pp->use_ranks[u], q)) continue;
                pipit__instr *in = pipit__lower_post(e, INS_ACC_SEND, i, u, q);
                if (in) in->in[0] = pipit__lower_use_loc(p, i, u, me), in->bytes = bytes;
            }
        }
    }
    for (int i = first, k = 0; i < last; i++) {
        const pipit__param *pp = &p->params[i];
        for (int u = 0; u < pp->nuses; u++, k++) {
            recv_buf[k] = -1;
            if (!pipit__has_rank(pp->holders, me) || pipit__has_rank(pp->use_ranks[u], me)) continue;
            pipit__instr *in = pipit__lower_post(e, INS_ACC_RECV, i, u, __builtin_ctzll(pp->use_ranks[u]));
            if (!in) return;
            in->bytes = (size_t)pp->numel * pipit__dtype_size(pp->dtype);
            recv_buf[k] = pipit__emit_buf(e, in->bytes, e->r->n - 1);
            in->out = (pipit__loc){LOC_ARENA, recv_buf[k], 0};
        }
    }
}

void pipit__lower_gradsum(pipit__plan *p, pipit__emitter *e, int i, int me, const int32_t *recv_buf) {
    const pipit__param *pp = &p->params[i];
    pipit__instr *in = pipit__lower_post(e, INS_GRADSUM, i, -1, -1);
    if (!in) return;
    int32_t at = e->r->n - 1;
    in->numel = pp->numel;
    if (pp->boundary) {
        int32_t b = pipit__emit_buf(e, (size_t)pp->numel * pipit__dtype_size(pp->dtype), at);
        pipit__emit_bind(e, pp->gacc, b);
        in->out = (pipit__loc){LOC_ARENA, b, 0};
    } else {
        in->out = (pipit__loc){LOC_GRAD, i, 0};
    }
    /* the norm's partials on the fly, unless data parallelism or a
     * transform changes the gradient after this sum */
    in->first = (uint8_t)(!pp->boundary && pp->norm_rank == me && !transformed(p, i) && p->D == 1);
    in->srcs = pipit__calloc((size_t)PIPIT_MAX(pp->nuses, 1), sizeof *in->srcs);
    if (!in->srcs) {
        e->status = pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
        return;
    }
    for (int u = 0; u < pp->nuses; u++) {
        if (pipit__has_rank(pp->use_ranks[u], me)) {
            in->srcs[u] = pipit__lower_use_loc(p, i, u, me);
        } else {
            in->srcs[u] = (pipit__loc){LOC_ARENA, recv_buf[u], 0};
            pipit__emit_touch(e, recv_buf[u], at);
        }
    }
    if (in->first) pipit__lower_post(e, INS_SUMSQ_FIN, i, -1, -1); /* before the next param reuses the partials */
}

/* grad = per-use sums added in use order; a param's lands in its gradient
 * block, a pre-loop value's in a buffer bound to its gradient leaf. Params
 * whose exchange started in the loop were summed there. */
static void sum_uses(lowering *L, pipit__emitter *e, int me, int first, int last, const int32_t *recv_buf) {
    pipit__plan *p = L->p;
    for (int i = first, k = 0; i < last; k += p->params[i].nuses, i++) {
        const pipit__param *pp = &p->params[i];
        if (!pipit__has_rank(pp->holders, me) || (i < p->nparams && L->dp_state[(size_t)me * p->nparams + i]))
            continue;
        pipit__lower_gradsum(p, e, i, me, recv_buf + k);
        /* data parallel: this param's shards leave for their owners while
         * the next params are summed */
        if (!pp->boundary && p->D > 1 && !pipit__dp_serial()) pipit__lower_post(e, INS_DP_RS_SEND, i, -1, -1);
    }
}

/* The post-loop region's param uses, computed once: stored as their sums. */
static void accumulate_post(lowering *L, pipit__emitter *e, int me) {
    const pipit__plan *p = L->p;
    for (int i = 0; i < p->nparams; i++) {
        const pipit__param *pp = &p->params[i];
        for (int u = 0; u < pp->nuses; u++)
            if (pp->post[u] && pipit__has_rank(pp->use_ranks[u], me))
                acc_or_retarget(L, e, i, p->gr.t[i].contrib[u], 0, pipit__lower_use_loc(p, i, u, me));
    }
}

/* The global norm: each param's sum of squares is computed by one holder
 * and shared with every rank; every rank adds them in param order. With
 * sharded gradients each replica computes its shard's chunk partials and
 * the replicas exchange them, so every replica adds the same chunks. */
static void global_norm(pipit__plan *p, pipit__emitter *e, int me) {
    for (int i = 0; i < p->nparams; i++) {
        if (p->params[i].norm_rank != me) continue;
        if (transformed(p, i) || p->D > 1) { /* else GRADSUM computed it on the fly */
            pipit__instr *a = pipit__lower_post(e, INS_SUMSQ, i, -1, -1);
            if (a) a->in[0] = (pipit__loc){LOC_GRAD, i, 0}, a->first = (uint8_t)pipit__dp_sharded_grads(p);
            if (pipit__dp_sharded_grads(p)) {
                pipit__lower_post(e, INS_DP_SUMSQ_SEND, i, -1, -1);
                pipit__lower_post(e, INS_DP_SUMSQ_RECV, i, -1, -1);
            }
            pipit__lower_post(e, INS_SUMSQ_FIN, i, -1, -1);
        }
        for (int q = 0; q < p->nranks; q++)
            if (q != me) pipit__lower_post(e, INS_NORM_SEND, i, -1, q);
    }
    for (int i = 0; i < p->nparams; i++)
        if (p->params[i].norm_rank != me) pipit__lower_post(e, INS_NORM_RECV, i, -1, p->params[i].norm_rank);
    pipit__lower_post(e, INS_NORM, -1, -1, -1);
}

/* Every world rank learns every replica's losses: the loss rank sends its
 * replica's at the start of the post-loop, receives come last. */
static void loss_send(pipit__plan *p, pipit__emitter *e, int me) {
    if (me == p->loss_rank && p->nranks * p->D > 1) pipit__lower_post(e, INS_LOSS_SEND, -1, -1, -1);
}
static void loss_recv(pipit__plan *p, pipit__emitter *e, int me) {
    (void)me;
    for (int d = 0; d < p->D && p->nranks * p->D > 1; d++) pipit__lower_post(e, INS_LOSS_RECV, -1, p->loss_rank, d);
}

/* User gradient transforms (pipit_set_grad): run the region, snapshot every
 * new gradient, and only then overwrite the gradient blocks, so every
 * transform reads untransformed gradients. */
static void transform_grads(lowering *L, pipit__emitter *e, int me) {
    pipit__plan *p = L->p;
    const pipit_graph *g = p->g;
    if (!g->ngradset) return;
    run_region(L, e, PH_GRADPOST, me);
    int32_t *snap = pipit__malloc(sizeof(int32_t) * (size_t)g->ngradset);
    if (!snap) {
        e->status = pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
        return;
    }
    for (int32_t k = 0; k < g->ngradset; k++) {
        int i = param_of(p, g->gradset[k][0]);
        snap[k] = pipit__has_rank(p->params[i].holders, me) ? pipit__emit_snapshot(e, g->gradset[k][1]) : -1;
    }
    for (int32_t k = 0; k < g->ngradset; k++) {
        int i = param_of(p, g->gradset[k][0]);
        const pipit__param *pp = &p->params[i];
        pipit__emit_copy_out(e, snap[k], (pipit__loc){LOC_GRAD, i, 0}, (size_t)pp->numel * pipit__dtype_size(pp->dtype));
    }
    pipit__free(snap);
}

static void emit_post_loop(lowering *L, pipit__emitter *e, int me) {
    pipit__plan *p = L->p;
    int total = 0;
    for (int i = 0; i < p->ntargets; i++) total += p->params[i].nuses;
    int32_t *recv_buf = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(total, 1));
    if (!recv_buf) {
        e->status = pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
        return;
    }
    loss_send(p, e, me);
    if (p->forward_only) { /* no gradients: only every replica's losses */
        loss_recv(p, e, me);
        pipit__free(recv_buf);
        return;
    }
    /* pre-loop values first: their backward adds post-loop uses to params */
    exchange_uses(p, e, me, p->nparams, p->ntargets, recv_buf);
    sum_uses(L, e, me, p->nparams, p->ntargets, recv_buf);
    run_region(L, e, PH_POST, me);
    accumulate_post(L, e, me);
    exchange_uses(p, e, me, 0, p->nparams, recv_buf);
    sum_uses(L, e, me, 0, p->nparams, recv_buf);
    pipit__dp_reduce(L, e, me);
    transform_grads(L, e, me);
    global_norm(p, e, me);
    pipit__dp_update(L, e, me);
    loss_recv(p, e, me);
    pipit__free(recv_buf);
}

/* options.outputs: a no-op reader of each (output, mb) at the very end of
 * the rank that computes it, so its buffer outlives the step. */
static void emit_outputs(lowering *L, pipit__emitter *e, int me) {
    const pipit__plan *p = L->p;
    for (int i = 0; i < p->noutputs; i++) {
        int32_t r = pipit__alias_root(p->g, p->outputs[i]);
        if (rank_of_node(L, r) != me) continue;
        for (int mb = 0; mb < p->M; mb++) pipit__emit_output(e, p->outputs[i], mb);
    }
}

static pipit_status check_outputs(const lowering *L) {
    const pipit__plan *p = L->p;
    for (int i = 0; i < p->noutputs; i++) {
        int32_t r = pipit__alias_root(p->g, p->outputs[i]);
        if (r >= p->gr.fwd_end || L->st->phase[r] != PH_F)
            return pipit__err(PIPIT_STATUS_INVALID,
                              "options.outputs[%d] (node %d, %s) is not a per-microbatch forward value (a param, an "
                              "input, a value of params alone or a backward value cannot be an output)",
                              i, p->outputs[i], pipit__ops[p->g->nodes[p->outputs[i]].op].name);
    }
    return PIPIT_STATUS_OK;
}

static void patch_param_loc(const pipit__rank_plan *r, pipit__loc *l) {
    if (l->kind == LOC_PARAM || l->kind == LOC_GRAD) l->off += r->param_off[l->idx]; /* after a view's offset */
}

static void patch_params(pipit__plan *p) {
    for (int q = 0; q < p->nranks; q++) {
        pipit__rank_plan *r = &p->ranks[q];
        for (int32_t i = 0; i < r->n; i++) {
            pipit__instr *in = &r->ins[i];
            patch_param_loc(r, &in->out);
            for (int k = 0; k < PIPIT_MAX_IN; k++) patch_param_loc(r, &in->in[k]);
            for (int u = 0; in->srcs && u < p->params[in->param].nuses; u++) patch_param_loc(r, &in->srcs[u]);
        }
    }
}

/* ------------------------------------------------------------- driver */

/* The reference order on one rank: microbatch by microbatch, forward
 * through every stage, then backward from the last. */
static pipit_status sequential_schedule(int S, int M, pipit_schedule **out) {
    if (S > PIPIT__SCHED_MAX_STAGES || M > PIPIT__SCHED_MAX_MB || (int64_t)S * M > PIPIT__SCHED_MAX_SLOTS)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "sequential schedule: %d stages x %d microbatches exceeds the limits (stages <= %d, "
                          "microbatches <= %d, stages x microbatches <= %ld)",
                          S, M, PIPIT__SCHED_MAX_STAGES, PIPIT__SCHED_MAX_MB, PIPIT__SCHED_MAX_SLOTS);
    pipit_schedule *s = pipit__schedule_alloc(1, S, M);
    if (!s) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    s->ntasks[0] = 2 * S * M;
    s->tasks[0] = pipit__malloc(sizeof(pipit_task) * (size_t)s->ntasks[0]);
    if (!s->tasks[0]) {
        pipit_schedule_free(s);
        return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    }
    int k = 0;
    for (int m = 0; m < M; m++) {
        for (int st = 0; st < S; st++) s->tasks[0][k++] = (pipit_task){PIPIT_TASK_F, (int16_t)st, m};
        for (int st = S - 1; st >= 0; st--) s->tasks[0][k++] = (pipit_task){PIPIT_TASK_BW, (int16_t)st, m};
    }
    for (int st = 0; st < S; st++) s->stage_rank[st] = 0;
    *out = s;
    return PIPIT_STATUS_OK;
}

static pipit_status check_schedule_fits(const pipit__plan *p, const pipit_schedule *sch, int S) {
    if (sch->S != S)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "the graph has %d stage%s (%d yield%s on the longest chain) but the schedule has %d "
                          "stage%s (P=%d rank%s x V=%d)",
                          S, S == 1 ? "" : "s", S - 1, S == 2 ? "" : "s", sch->S, sch->S == 1 ? "" : "s", sch->P,
                          sch->P == 1 ? "" : "s", sch->V);
    if (sch->M != p->M)
        return pipit__err(PIPIT_STATUS_SCHEDULE, "the schedule is for %d microbatch%s but the step has %d (options.microbatches)",
                          sch->M, sch->M == 1 ? "" : "es", p->M);
    if (sch->P > 64) return pipit__err(PIPIT_STATUS_SCHEDULE, "at most 64 pipeline ranks (got %d)", sch->P);
    return pipit__schedule_check(sch);
}

/* The rank's task list; a forward-only program keeps the F tasks in the
 * schedule's order (F tasks depend on F tasks only, so dropping the others
 * cannot deadlock a checked schedule). */
static pipit_status copy_tasks(pipit__rank_plan *r, const pipit_schedule *sch, int q, int forward_only) {
    r->rank = q;
    r->tasks = pipit__malloc(sizeof(pipit_task) * (size_t)PIPIT_MAX(sch->ntasks[q], 1));
    if (!r->tasks) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    r->ntasks = 0;
    for (int i = 0; i < sch->ntasks[q]; i++)
        if (!forward_only || sch->tasks[q][i].kind == PIPIT_TASK_F) r->tasks[r->ntasks++] = sch->tasks[q][i];
    return PIPIT_STATUS_OK;
}

/* ------------------------------------------------------ overlapped pairs */

/* Whether task t runs an EP all-to-all: a[ph * S + s], stage s's nodes
 * of phase ph (PH_F, PH_B, PH_W) have one. */
static int task_has_a2a(const lowering *L, pipit_task t, const uint8_t *a) {
    int S = L->p->S, s = t.stage;
    if (t.kind == PIPIT_TASK_F) return a[PH_F * S + s];
    if (t.kind == PIPIT_TASK_W) return 0;
    int remat = L->p->opt.remat == PIPIT_REMAT_FULL && a[PH_F * S + s];
    return a[PH_B * S + s] || (t.kind == PIPIT_TASK_BW && a[PH_W * S + s]) || remat;
}

/* Tasks i and i + 1 of a rank may pair: a forward and a backward (either
 * order), both with an all-to-all, the second not waiting for the first. */
static int pair_candidate(const lowering *L, const pipit_task *t, const uint8_t *a) {
    int fb = t[0].kind == PIPIT_TASK_F && (t[1].kind == PIPIT_TASK_B || t[1].kind == PIPIT_TASK_BW);
    int bf = t[1].kind == PIPIT_TASK_F && (t[0].kind == PIPIT_TASK_B || t[0].kind == PIPIT_TASK_BW);
    if (!fb && !bf) return 0;
    if (fb && t[0].stage == t[1].stage && t[0].mb == t[1].mb) return 0; /* B needs its own F */
    return task_has_a2a(L, t[0], a) && task_has_a2a(L, t[1], a);
}

/* Which adjacent tasks each rank lowers as an overlapped pair
 * (pipit_options.no_a2a_overlap): greedily, in rank and list order, each
 * candidate kept if the schedule with every pair kept so far stays
 * deadlock-free (pipit__schedule_check_paired). paired[q][i] = 1: task i
 * pairs with i + 1. */
static pipit_status choose_overlaps(lowering *L, const pipit_schedule *sch, uint8_t **paired) {
    pipit__plan *p = L->p;
    if (p->E <= 1 || p->forward_only || p->opt.no_a2a_overlap) return PIPIT_STATUS_OK;
    int nph = PIPIT_MAX(PH_F, PIPIT_MAX(PH_B, PH_W)) + 1;
    uint8_t *a = pipit__calloc((size_t)p->S * (size_t)nph, 1);
    if (!a) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    for (int32_t j = 0; j < p->g->n; j++) {
        int ph = L->st->phase[j];
        if (pipit__is_ep_op(p->g->nodes[j].op) && is_loop_phase(ph)) a[ph * p->S + L->st->stage[j]] = 1;
    }
    pipit_status s = PIPIT_STATUS_OK;
    for (int q = 0; !s && q < sch->P; q++)
        for (int i = 0; !s && i + 1 < sch->ntasks[q]; i++) {
            if (!pair_candidate(L, &sch->tasks[q][i], a)) continue;
            paired[q][i] = 1;
            s = pipit__schedule_check_paired(sch, (const uint8_t *const *)paired);
            if (s == PIPIT_STATUS_DEADLOCK) {
                paired[q][i] = 0;
                s = PIPIT_STATUS_OK;
                pipit__set_errmsg(""); /* a refused pair is no error */
            } else {
                i++; /* task i + 1 is taken */
            }
        }
    pipit__free(a);
    return s;
}

/* A bf16 step reads each fp32 param through a pre-loop cast, which the
 * update can write instead: AdamW rounds the param it has just computed
 * (the cast's rounding, so the same bits) into the cast's buffer, pinned
 * in the arena for the whole step (emit.c), and the next step skips the
 * cast (runtime/exec.c). Only where the update writes every element of
 * the rank's copy of the whole param: AdamW without ZeRO (with ZeRO each
 * replica updates its shard and receives the rest), on the CPU backend
 * (its AdamW writes the shadow). From instruction `from` on: the pre-loop
 * just emitted. */
static void mark_shadows(lowering *L, pipit__emitter *e, int32_t from) {
    const pipit__plan *p = L->p;
    if (!cpu_plan(p) || p->forward_only || p->zero || p->reshard || p->opt.optimizer.kind != PIPIT_OPT_ADAMW) return;
    for (int32_t i = from; i < e->r->n; i++) {
        pipit__instr *in = &e->r->ins[i];
        if (in->kind != INS_RUN) continue;
        const pipit__node *n = &p->g->nodes[in->node];
        if (n->op != PIPIT_OP_CAST || n->dtype != PIPIT_BF16 || in->out.kind != LOC_ARENA ||
            in->in[0].kind != LOC_PARAM || in->in[0].off != 0)
            continue;
        if (in->in[0].idx >= p->nparams) continue; /* a pre-loop boundary value, not a param */
        const pipit__param *pp = &p->params[in->in[0].idx];
        if (pp->dtype != PIPIT_F32 || pp->numel != pipit__node_numel(n)) continue;
        in->shadow = 1;
        in->param = in->in[0].idx;
    }
}

/* Pre-loop and loop on every rank, then placement of params, then the
 * post-loop; only then are arenas planned, since post-loop buffers share them. */
static pipit_status lower_all(lowering *L, const pipit_schedule *sch) {
    pipit__plan *p = L->p;
    pipit__emitter *em = pipit__calloc((size_t)p->nranks, sizeof *em);
    if (!em) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    pipit_status s = PIPIT_STATUS_OK;
    int inited = 0;
    for (int q = 0; !s && q < p->nranks; q++) {
        s = copy_tasks(&p->ranks[q], sch, q, p->forward_only);
        if (s) break;
        s = pipit__emitter_init(&em[q], p, &p->ranks[q]); /* sets e->r even when it fails */
        inited++;
    }
    uint8_t **paired = s ? NULL : pipit__calloc((size_t)p->nranks, sizeof *paired);
    if (!s && !paired) s = pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    for (int q = 0; !s && q < p->nranks; q++)
        if (!(paired[q] = pipit__calloc((size_t)PIPIT_MAX(sch->ntasks[q], 1), 1)))
            s = pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    if (!s) s = choose_overlaps(L, sch, paired);
    if (!s) s = place_uses(L);
    if (!s) s = pipit__dp_find_early(L);
    for (int q = 0; !s && q < p->nranks; q++) {
        s = pipit__dp_begin_rank(L, q);
        if (s) break;
        int32_t pre_at = p->ranks[q].n;
        run_region(L, &em[q], PH_PRE, q);
        mark_shadows(L, &em[q], pre_at);
        for (int i = 0; i < p->ranks[q].ntasks; i++) {
            if (paired[q][i]) {
                lower_pair(L, &em[q], i, &p->ranks[q].tasks[i], q);
                p->ranks[q].npairs++;
                i++;
            } else {
                lower_task(L, &em[q], i, p->ranks[q].tasks[i], q);
            }
        }
        p->ranks[q].post_at = p->ranks[q].n;
        s = em[q].status;
    }
    if (!s) s = place_params(L);
    if (!s) s = pipit__dp_check_early(L);
    for (int q = 0; !s && q < p->nranks; q++) {
        emit_post_loop(L, &em[q], q);
        emit_outputs(L, &em[q], q);
        s = em[q].status;
    }
    if (!s) s = pipit__place_fences(L, em); /* before the arenas are planned: fences keep send slots */
    for (int q = 0; q < inited; q++) {
        pipit_status s2 = pipit__emitter_finish(&em[q]);
        if (!s) s = s2;
    }
    if (!s) patch_params(p);
    for (int q = 0; paired && q < p->nranks; q++) pipit__free(paired[q]);
    pipit__free(paired);
    pipit__free(em);
    return s;
}

pipit_status pipit__lower(pipit__plan *p, const pipit_schedule *user_sch) {
    pipit__staging st;
    pipit_status s = pipit__infer_stages(p, &st);
    if (s) return s;
    pipit_schedule *own = NULL;
    const pipit_schedule *sch = user_sch;
    if (!sch) {
        s = sequential_schedule(st.S, p->M, &own); /* forward-only: copy_tasks keeps its F tasks */
        sch = own;
    } else if (st.S == 1 && sch->P > 1) {
        s = pipit__err(PIPIT_STATUS_SCHEDULE,
                       "the graph has no pipit_yield, so it is one stage, but the schedule has %d ranks", sch->P);
    }
    if (!s) s = check_schedule_fits(p, sch, st.S);
    lowering L = {.p = p, .st = &st, .stage_rank = sch ? sch->stage_rank : NULL};
    if (!s) {
        p->S = st.S;
        p->ranks = pipit__calloc((size_t)sch->P, sizeof *p->ranks);
        p->stage_rank = pipit__malloc(sizeof(int) * (size_t)st.S);
        if (!p->ranks || !p->stage_rank) s = pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
        else p->nranks = sch->P;
    }
    if (!s) {
        memcpy(p->stage_rank, sch->stage_rank, sizeof(int) * (size_t)st.S);
        p->loss_rank = p->stage_rank[st.stage[p->loss]];
        s = find_region_ranks(&L);
    }
    if (!s) s = check_outputs(&L);
    if (!s) s = find_consumers(&L);
    if (!s) s = lower_all(&L, sch);
    if (!s) { /* keep stage and phase of every node for `pipit plan` and traces */
        p->node_stage = st.stage;
        p->node_phase = st.phase;
        st.stage = NULL;
        st.phase = NULL;
    }
    pipit__free(L.consumer_ranks);
    pipit__free(L.sole_acc);
    pipit__free(L.tail_acc);
    pipit__free(L.bias_epi);
    pipit__free(L.acc_first);
    pipit__free(L.acc_tgt);
    pipit__free(L.acc_use);
    pipit__free(L.early_rank);
    pipit__free(L.dp_state);
    pipit__free(L.left);
    pipit__free(L.order);
    pipit__free(L.mark);
    pipit_schedule_free(own);
    pipit__staging_free(&st);
    return s;
}
