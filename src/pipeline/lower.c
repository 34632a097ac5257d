/*
 * lower.c — from (staged graph, schedule) to one instruction list per rank.
 * Each rank walks its own task list: RECV what the task needs from other
 * ranks (placed just before the task, so a receive never holds back work
 * that does not need it), RUN the task's nodes, ACCUMULATE the parameter
 * gradients it produced, SEND what other ranks read. Every rank derives the
 * same plan from the same inputs, so the plan is deterministic.
 */
#include <string.h>

#include "pipeline/emit.h"
#include "pipeline/schedule.h"
#include "pipeline/stages.h"

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

typedef struct {
    pipit_program *p;
    const pipit__staging *st;
    const int *stage_rank;
    uint64_t *consumer_ranks; /* [n] bit q: a node on rank q reads this value */
} lowering;

static int rank_of_node(const lowering *L, int32_t id) {
    return L->stage_rank[L->st->stage[id]];
}

/* Which ranks read each running node's output (bit per rank). */
static pipit_status find_consumers(lowering *L) {
    const pipit_graph *g = L->p->g;
    L->consumer_ranks = pipit__calloc((size_t)g->n, sizeof *L->consumer_ranks);
    if (!L->consumer_ranks) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    for (int32_t j = 0; j < g->n; j++) {
        const pipit__node *n = &g->nodes[j];
        if (!L->st->live[j] || !pipit__node_runs(n)) continue;
        for (int k = 0; k < n->nin; k++) {
            int32_t r = pipit__alias_root(g, n->in[k]);
            if (pipit__node_runs(&g->nodes[r])) L->consumer_ranks[r] |= 1ull << rank_of_node(L, j);
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

/* Receives every input of node j that lives on another rank and is not here yet. */
static void recv_inputs(lowering *L, pipit__emitter *e, int32_t j, int mb, int me) {
    const pipit_graph *g = L->p->g;
    const pipit__node *n = &g->nodes[j];
    for (int k = 0; k < n->nin; k++) {
        int32_t r = pipit__alias_root(g, n->in[k]);
        if (!pipit__node_runs(&g->nodes[r]) || pipit__emit_has(e, r, mb)) continue;
        int src = rank_of_node(L, r);
        if (src != me) pipit__emit_recv(e, r, mb, src);
    }
}

static void run_nodes(lowering *L, pipit__emitter *e, int kind, int s, int mb, int me, int remat_only) {
    const pipit_graph *g = L->p->g;
    for (int32_t j = 0; j < g->n; j++) {
        int ph = L->st->phase[j];
        if (ph == PH_NONE || L->st->stage[j] != s) continue;
        if (remat_only ? ph != PH_F : !task_has_phase(kind, ph)) continue;
        recv_inputs(L, e, j, mb, me);
        pipit__emit_run(e, j, mb);
    }
}

static void send_outputs(lowering *L, pipit__emitter *e, int kind, int s, int mb, int me) {
    const pipit_graph *g = L->p->g;
    for (int32_t j = 0; j < g->n; j++) {
        int ph = L->st->phase[j];
        if (ph == PH_NONE || L->st->stage[j] != s || !task_has_phase(kind, ph)) continue;
        for (int q = 0; q < L->p->nranks; q++)
            if (q != me && (L->consumer_ranks[j] >> q & 1)) pipit__emit_send(e, j, mb, q);
    }
}

/* Accumulates the parameter-gradient contributions this task computed. */
static void accumulate(lowering *L, pipit__emitter *e, int kind, int s, int mb) {
    const pipit_program *p = L->p;
    for (int i = 0; i < p->nparams; i++) {
        for (int u = 0; u < p->params[i].nuses; u++) {
            int32_t c = p->gr.pg[i].contrib[u];
            int32_t r = pipit__alias_root(p->g, c);
            if (L->st->stage[r] != s || !task_has_phase(kind, L->st->phase[r])) continue;
            pipit__emit_acc(e, c, mb, p->params[i].acc_off[u], mb == 0);
        }
    }
}

static void lower_task(lowering *L, pipit__emitter *e, int ti, pipit_task t, int me) {
    pipit_program *p = L->p;
    pipit__emit_mark(e, ti, 0);
    if (p->opt.remat && (t.kind == PIPIT_TASK_B || t.kind == PIPIT_TASK_BW))
        run_nodes(L, e, t.kind, t.stage, t.mb, me, 1); /* recompute the stage's forward */
    run_nodes(L, e, t.kind, t.stage, t.mb, me, 0);
    if (t.kind == PIPIT_TASK_F && t.stage == L->st->stage[p->loss]) pipit__emit_loss(e, p->loss, t.mb);
    accumulate(L, e, t.kind, t.stage, t.mb);
    send_outputs(L, e, t.kind, t.stage, t.mb, me);
    pipit__emit_mark(e, ti, 1);
}

/* The reference order on one rank: microbatch by microbatch, forward
 * through every stage, then backward from the last. */
static pipit_status sequential_schedule(int S, int M, pipit_schedule **out) {
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

static pipit_status check_schedule_fits(const pipit_program *p, const pipit_schedule *sch, int S) {
    if (sch->S != S)
        return pipit__err(PIPIT_STATUS_SCHEDULE,
                          "the graph has %d stage%s (%d yield%s on the longest chain) but the schedule has %d "
                          "stages (P=%d ranks x V=%d)",
                          S, S == 1 ? "" : "s", S - 1, S == 2 ? "" : "s", sch->S, sch->P, sch->V);
    if (sch->M != p->M)
        return pipit__err(PIPIT_STATUS_SCHEDULE, "the schedule is for %d microbatches but the step has %d",
                          sch->M, p->M);
    if (sch->P > 64) return pipit__err(PIPIT_STATUS_SCHEDULE, "at most 64 pipeline ranks (got %d)", sch->P);
    return pipit__schedule_check(sch);
}

static pipit_status copy_tasks(pipit__rank_prog *r, const pipit_schedule *sch, int q) {
    r->rank = q;
    if (r->tasks) return PIPIT_STATUS_OK;
    r->ntasks = sch->ntasks[q];
    r->tasks = pipit__malloc(sizeof(pipit_task) * (size_t)PIPIT_MAX(r->ntasks, 1));
    r->t_start = pipit__calloc((size_t)PIPIT_MAX(r->ntasks, 1), sizeof(double));
    r->t_end = pipit__calloc((size_t)PIPIT_MAX(r->ntasks, 1), sizeof(double));
    if (!r->tasks || !r->t_start || !r->t_end) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    memcpy(r->tasks, sch->tasks[q], sizeof(pipit_task) * (size_t)r->ntasks);
    return PIPIT_STATUS_OK;
}

/* Which rank computes each use of each param, and where its accumulator
 * lives in that rank's accumulator block. */
static void place_uses(lowering *L) {
    pipit_program *p = L->p;
    for (int i = 0; i < p->nparams; i++) {
        pipit__param *pp = &p->params[i];
        for (int u = 0; u < pp->nuses; u++) {
            int32_t r = pipit__alias_root(p->g, p->gr.pg[i].contrib[u]);
            int q = L->stage_rank[L->st->stage[r] < 0 ? 0 : L->st->stage[r]];
            pp->use_rank[u] = q;
            pp->acc_off[u] = p->ranks[q].acc_bytes;
            p->ranks[q].acc_bytes += align64(pipit__node_bytes(&p->g->nodes[pp->node]));
        }
    }
}

/* A rank holds every param its instructions read (a tied weight is held by
 * each rank that uses it); an unused param is kept by rank 0. */
static pipit_status place_params(pipit_program *p) {
    for (int q = 0; q < p->nranks; q++) {
        const pipit__rank_prog *r = &p->ranks[q];
        for (int32_t i = 0; i < r->n; i++)
            for (int k = 0; k < PIPIT_MAX_IN; k++)
                if (r->ins[i].in[k].kind == LOC_PARAM) p->params[r->ins[i].in[k].idx].holders |= 1ull << q;
    }
    for (int i = 0; i < p->nparams; i++) {
        pipit__param *pp = &p->params[i];
        if (!pp->holders) pp->holders = 1;
        for (int u = 0; u < pp->nuses; u++) pp->holders |= 1ull << pp->use_rank[u];
        pp->norm_rank = __builtin_ctzll(pp->holders);
    }
    for (int q = 0; q < p->nranks; q++) {
        pipit__rank_prog *r = &p->ranks[q];
        r->param_off = pipit__malloc(sizeof(size_t) * (size_t)PIPIT_MAX(p->nparams, 1));
        if (!r->param_off) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
        for (int i = 0; i < p->nparams; i++) {
            const pipit__param *pp = &p->params[i];
            r->param_off[i] = SIZE_MAX;
            if (!(pp->holders >> q & 1)) continue;
            r->param_off[i] = r->param_bytes;
            r->param_bytes += align64((size_t)pp->numel * pipit__dtype_size(pp->dtype));
            r->max_chunks = PIPIT_MAX(r->max_chunks, (pp->numel + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK);
        }
    }
    return PIPIT_STATUS_OK;
}

static pipit__instr *post(pipit__emitter *e, int kind, int param, int use, int peer) {
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return NULL;
    in->kind = (uint8_t)kind;
    in->param = param;
    in->use = use;
    in->peer = peer;
    return in;
}

static int holds(const pipit__param *pp, int q) { return (int)(pp->holders >> q & 1); }

/* Every holder of a param needs every use's sum: owners send theirs, then
 * each holder receives the others' (all sends of a rank come before its
 * receives, so the exchange cannot deadlock). */
static void exchange_uses(pipit_program *p, pipit__emitter *e, int me, int32_t *recv_buf) {
    for (int i = 0; i < p->nparams; i++) {
        const pipit__param *pp = &p->params[i];
        size_t bytes = (size_t)pp->numel * pipit__dtype_size(pp->dtype);
        for (int u = 0; u < pp->nuses; u++) {
            if (pp->use_rank[u] != me) continue;
            for (int q = 0; q < p->nranks; q++) {
                if (q == me || !holds(pp, q)) continue;
                pipit__instr *in = post(e, INS_ACC_SEND, i, u, q);
                if (in) in->in[0] = (pipit__loc){LOC_ACC, -1, pp->acc_off[u]}, in->bytes = bytes;
            }
        }
    }
    int k = 0;
    for (int i = 0; i < p->nparams; i++) {
        const pipit__param *pp = &p->params[i];
        for (int u = 0; u < pp->nuses; u++, k++) {
            recv_buf[k] = -1;
            if (!holds(pp, me) || pp->use_rank[u] == me) continue;
            pipit__instr *in = post(e, INS_ACC_RECV, i, u, pp->use_rank[u]);
            if (!in) return;
            in->bytes = (size_t)pp->numel * pipit__dtype_size(pp->dtype);
            recv_buf[k] = pipit__emit_buf(e, in->bytes, e->r->n - 1);
            in->out = (pipit__loc){LOC_ARENA, recv_buf[k], 0};
        }
    }
}

static void sum_uses(pipit_program *p, pipit__emitter *e, int me, const int32_t *recv_buf) {
    int k = 0;
    for (int i = 0; i < p->nparams; i++) {
        const pipit__param *pp = &p->params[i];
        if (!holds(pp, me)) {
            k += pp->nuses;
            continue;
        }
        pipit__instr *in = post(e, INS_GRADSUM, i, -1, -1);
        if (!in) return;
        in->numel = pp->numel;
        in->out = (pipit__loc){LOC_GRAD, i, 0};
        in->srcs = pipit__calloc((size_t)PIPIT_MAX(pp->nuses, 1), sizeof *in->srcs);
        if (!in->srcs) {
            e->status = pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
            return;
        }
        for (int u = 0; u < pp->nuses; u++, k++) {
            if (pp->use_rank[u] == me) {
                in->srcs[u] = (pipit__loc){LOC_ACC, -1, pp->acc_off[u]};
            } else {
                in->srcs[u] = (pipit__loc){LOC_ARENA, recv_buf[k], 0};
                pipit__emit_touch(e, recv_buf[k], e->r->n - 1);
            }
        }
    }
}

/* The global norm: each param's sum of squares is computed by one holder
 * and shared with every rank; every rank adds them in param order. */
static void global_norm(pipit_program *p, pipit__emitter *e, int me) {
    for (int i = 0; i < p->nparams; i++) {
        if (p->params[i].norm_rank != me) continue;
        pipit__instr *a = post(e, INS_SUMSQ, i, -1, -1);
        if (a) a->in[0] = (pipit__loc){LOC_GRAD, i, 0};
        post(e, INS_SUMSQ_FIN, i, -1, -1);
        for (int q = 0; q < p->nranks; q++)
            if (q != me) post(e, INS_NORM_SEND, i, -1, q);
    }
    for (int i = 0; i < p->nparams; i++)
        if (p->params[i].norm_rank != me) post(e, INS_NORM_RECV, i, -1, p->params[i].norm_rank);
    post(e, INS_NORM, -1, -1, -1);
}

static void emit_post_loop(pipit_program *p, pipit__emitter *e, int me) {
    int total = 0;
    for (int i = 0; i < p->nparams; i++) total += p->params[i].nuses;
    int32_t *recv_buf = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(total, 1));
    if (!recv_buf) {
        e->status = pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
        return;
    }
    exchange_uses(p, e, me, recv_buf);
    sum_uses(p, e, me, recv_buf);
    global_norm(p, e, me);
    for (int i = 0; i < p->nparams; i++)
        if (holds(&p->params[i], me)) post(e, INS_UPDATE, i, -1, -1);
    pipit__free(recv_buf);
}

static void patch_param_loc(const pipit__rank_prog *r, pipit__loc *l) {
    if (l->kind == LOC_PARAM || l->kind == LOC_GRAD) l->off = r->param_off[l->idx];
}

static void patch_params(pipit_program *p) {
    for (int q = 0; q < p->nranks; q++) {
        pipit__rank_prog *r = &p->ranks[q];
        for (int32_t i = 0; i < r->n; i++) {
            pipit__instr *in = &r->ins[i];
            patch_param_loc(r, &in->out);
            for (int k = 0; k < PIPIT_MAX_IN; k++) patch_param_loc(r, &in->in[k]);
        }
    }
}

/* Loop (every rank's tasks), then placement of params, then the post-loop;
 * only then are arenas planned, since post-loop buffers share them. */
static pipit_status lower_all(lowering *L, const pipit_schedule *sch) {
    pipit_program *p = L->p;
    pipit__emitter *em = pipit__calloc((size_t)p->nranks, sizeof *em);
    if (!em) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    pipit_status s = PIPIT_STATUS_OK;
    int inited = 0;
    for (int q = 0; !s && q < p->nranks; q++) {
        s = copy_tasks(&p->ranks[q], sch, q);
        if (s) break;
        s = pipit__emitter_init(&em[q], p, &p->ranks[q]); /* sets e->r even when it fails */
        inited++;
    }
    if (!s) place_uses(L);
    for (int q = 0; !s && q < p->nranks; q++) {
        for (int i = 0; i < p->ranks[q].ntasks; i++) lower_task(L, &em[q], i, p->ranks[q].tasks[i], q);
        s = em[q].status;
    }
    if (!s) s = place_params(p);
    for (int q = 0; !s && q < p->nranks; q++) {
        emit_post_loop(p, &em[q], q);
        s = em[q].status;
    }
    for (int q = 0; q < inited; q++) {
        pipit_status s2 = pipit__emitter_finish(&em[q]);
        if (!s) s = s2;
    }
    if (!s) patch_params(p);
    pipit__free(em);
    return s;
}

pipit_status pipit__lower(pipit_program *p, const pipit_schedule *user_sch) {
    pipit__staging st;
    pipit_status s = pipit__infer_stages(p, &st);
    if (s) return s;
    pipit_schedule *own = NULL;
    const pipit_schedule *sch = user_sch;
    if (!sch) {
        s = sequential_schedule(st.S, p->M, &own);
        sch = own;
    } else if (st.S == 1 && sch->P > 1) {
        s = pipit__err(PIPIT_STATUS_SCHEDULE,
                       "the graph has no pipit_yield, so it is one stage, but the schedule has %d ranks", sch->P);
    }
    if (!s) s = check_schedule_fits(p, sch, st.S);
    lowering L = {p, &st, sch ? sch->stage_rank : NULL, NULL};
    if (!s) {
        p->S = st.S;
        p->nranks = sch->P;
        p->ranks = pipit__calloc((size_t)p->nranks, sizeof *p->ranks);
        p->stage_rank = pipit__malloc(sizeof(int) * (size_t)st.S);
        if (!p->ranks || !p->stage_rank) s = pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    }
    if (!s) {
        memcpy(p->stage_rank, sch->stage_rank, sizeof(int) * (size_t)st.S);
        s = find_consumers(&L);
    }
    if (!s) s = lower_all(&L, sch);
    if (!s) { /* keep stage and phase of every node for `pipit plan` and traces */
        p->node_stage = st.stage;
        p->node_phase = st.phase;
        st.stage = NULL;
        st.phase = NULL;
    }
    pipit__free(L.consumer_ranks);
    pipit_schedule_free(own);
    pipit__staging_free(&st);
    return s;
}
