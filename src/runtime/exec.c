/*
 * exec.c — runs a rank's instruction list. Pointers are resolved once per
 * step (only the feeds change between steps); then every thread of the
 * rank's pool walks the list, calling the backend's kernel for each
 * instruction with its (ith, nth), with a barrier between instructions.
 */
#include <string.h>

#include "runtime/program.h"
#include "runtime/transport.h"

typedef struct {
    pipit_program *p;
    const pipit__rank_plan *r; /* the rank's plan */
    pipit__rank_state *rs;     /* and its memory, threads, timings */
    const void **feed_ptrs; /* [M * ninputs] */
    pipit_status status;    /* first failure on this rank (thread 0 writes) */
    char msg[1024];
} exec_ctx;

static void *loc_ptr(const exec_ctx *x, const pipit__loc *l, int mb) {
    pipit_program *p = x->p;
    switch ((pipit__loc_kind)l->kind) {
    case LOC_ARENA: return x->rs->arena + l->off;
    case LOC_PARAM: return x->rs->param_block + l->off;
    case LOC_GRAD: return x->rs->grad_block + l->off;
    case LOC_ACC: return x->rs->acc_block + l->off;
    case LOC_SEED: return x->rs->seed;
    case LOC_FEED: return (void *)x->feed_ptrs[(size_t)mb * (size_t)p->plan.ninputs + (size_t)l->idx];
    case LOC_NONE: break;
    }
    return NULL;
}

static void resolve(const exec_ctx *x) {
    const pipit_graph *g = x->p->plan.g;
    for (int32_t i = 0; i < x->r->n; i++) {
        const pipit__instr *in = &x->r->ins[i];
        pipit__kctx *k = &x->rs->kc[i];
        k->node = &g->nodes[in->node >= 0 ? in->node : 0];
        for (int u = 0; in->kind == INS_GRADSUM && u < x->p->plan.params[in->param].nuses; u++)
            x->rs->srcs_ptr[in->srcs_at + u] = loc_ptr(x, &in->srcs[u], 0);
        k->out = loc_ptr(x, &in->out, in->mb);
        for (int j = 0; j < PIPIT_MAX_IN; j++) {
            k->in[j] = in->in[j].kind ? loc_ptr(x, &in->in[j], in->mb) : NULL;
            k->in_node[j] = j < k->node->nin ? &g->nodes[k->node->in[j]] : NULL;
        }
    }
}

/* The loss scalar comes back to the host. */
static void run_loss(pipit_program *p, const pipit__instr *in, const pipit__kctx *k) {
    if (k->node->dtype == PIPIT_F64) {
        p->be->download(&p->losses[in->mb], k->in[0], sizeof(double));
    } else {
        float v;
        p->be->download(&v, k->in[0], sizeof v);
        p->losses[in->mb] = (double)v;
    }
}

/* Communication and bookkeeping run on thread 0 of the rank's team. */
static pipit_status run_serial(exec_ctx *x, int32_t i) {
    pipit_program *p = x->p;
    const pipit__rank_plan *r = x->r;
    pipit__rank_state *rs = x->rs;
    const pipit__instr *in = &r->ins[i];
    const pipit__kctx *k = &rs->kc[i];
    pipit__transport *t = p->transport;
    switch ((pipit__ins_kind)in->kind) {
    case INS_LOSS: run_loss(p, in, k); break;
    case INS_SEND: return t->vt->send(t, r->rank, in->peer, pipit__tag(PIPIT_TAG_VALUE, in->node, in->mb), k->in[0], in->bytes);
    case INS_RECV: { /* time spent waiting inside a task is not busy time */
        double t0 = pipit__now();
        pipit_status s = t->vt->recv(t, r->rank, in->peer, pipit__tag(PIPIT_TAG_VALUE, in->node, in->mb), k->out, in->bytes);
        double waited = pipit__now() - t0;
        rs->busy -= waited;
        rs->wait += waited;
        return s;
    }
    case INS_ACC_SEND:
        return t->vt->send(t, r->rank, in->peer, pipit__tag(PIPIT_TAG_ACC, in->param, in->use), k->in[0], in->bytes);
    case INS_ACC_RECV: {
        double t0 = pipit__now();
        pipit_status s = t->vt->recv(t, r->rank, in->peer, pipit__tag(PIPIT_TAG_ACC, in->param, in->use), k->out, in->bytes);
        rs->busy -= pipit__now() - t0;
        return s;
    }
    case INS_SUMSQ_FIN: pipit__post_sumsq_fin(p, r->rank, in->param); break;
    case INS_NORM_SEND:
        return t->vt->send(t, r->rank, in->peer, pipit__tag(PIPIT_TAG_NORM, in->param, 0), &rs->sumsq[in->param], sizeof(double));
    case INS_NORM_RECV: {
        double t0 = pipit__now();
        pipit_status s = t->vt->recv(t, r->rank, in->peer, pipit__tag(PIPIT_TAG_NORM, in->param, 0), &rs->sumsq[in->param],
                                     sizeof(double));
        rs->busy -= pipit__now() - t0;
        return s;
    }
    case INS_NORM: pipit__post_norm(p, r->rank); break;
    case INS_MARK: {
        double now = pipit__now() - p->step_t0;
        if (in->first) {
            rs->t_end[in->task] = now;
            rs->busy += now - rs->t_start[in->task];
        } else {
            rs->t_start[in->task] = now;
        }
        break;
    }
    default: break;
    }
    return PIPIT_STATUS_OK;
}

/* Records this rank's failure and wakes every other rank. */
static void fail_rank(exec_ctx *x, pipit_status s) {
    x->status = s;
    snprintf(x->msg, sizeof x->msg, "%s", pipit_errmsg());
    if (x->p->transport) x->p->transport->vt->abort(x->p->transport, x->r->rank, x->msg);
}

/* One instruction's compute on this thread's slice; communication and
 * bookkeeping run on thread 0 only. */
static void run_instr(exec_ctx *x, int32_t i, int ith, int nth) {
    pipit_program *p = x->p;
    const pipit__backend *be = p->be;
    const pipit__rank_plan *r = x->r;
    const pipit__instr *in = &r->ins[i];
    const pipit__kctx *k = &x->rs->kc[i];
    switch ((pipit__ins_kind)in->kind) {
    case INS_RUN: be->ops[k->node->op](k, ith, nth); break;
    case INS_ACC: be->accumulate((pipit_dtype)k->node->dtype, k->out, k->in[0], in->numel, in->first, ith, nth); break;
    case INS_GRADSUM: pipit__post_gradsum(p, r->rank, in, k->out, x->rs->srcs_ptr + in->srcs_at, ith, nth); break;
    case INS_SUMSQ: pipit__post_sumsq(p, r->rank, in->param, k->in[0], ith, nth); break;
    case INS_COPY: be->copy(k->out, k->in[0], in->bytes, ith, nth); break;
    case INS_UPDATE:
        if (p->do_update) pipit__post_update(p, r->rank, in->param, ith, nth);
        break;
    default:
        if (ith == 0 && !x->status) {
            pipit_status s = run_serial(x, i);
            if (s) fail_rank(x, s);
        }
    }
}

static void exec_worker(void *arg, int ith, int nth) {
    exec_ctx *x = arg;
    const pipit__rank_plan *r = x->r;
    pipit__rank_state *rs = x->rs;
    double post_start = 0; /* the post-loop (gradient sums, norm, update) is compute too */
    for (int32_t i = 0; i < r->n; i++) {
        if (ith == 0 && !post_start && r->ins[i].kind >= INS_ACC_SEND) post_start = pipit__now();
        const pipit__instr *in = &r->ins[i];
        double t0 = x->p->profile && ith == 0 ? pipit__now() : 0;
        if (i == x->p->fail_instr && r->rank == x->p->fail_rank) { /* test hook */
            if (ith == 0) fail_rank(x, pipit__err(PIPIT_STATUS_RUNTIME, "injected failure at instruction %d", i));
        } else {
            run_instr(x, i, ith, nth);
        }
        pipit__pool_barrier(rs->pool);
        if (t0 > 0) rs->prof[in->kind == INS_RUN ? rs->kc[i].node->op : PIPIT_OP_COUNT + in->kind] += pipit__now() - t0;
        if (x->status) return; /* every thread sees it after the barrier */
    }
    if (ith == 0 && post_start) rs->busy += pipit__now() - post_start;
}

pipit_status pipit__exec_rank(pipit_program *p, int rank, const void **feed_ptrs) {
    exec_ctx x = {p, &p->plan.ranks[rank], &p->rs[rank], feed_ptrs, PIPIT_STATUS_OK, ""};
    resolve(&x);
    x.rs->busy = x.rs->wait = 0;
    pipit__pool_run(x.rs->pool, exec_worker, &x);
    if (x.status) return pipit__err(x.status, "%s", x.msg);
    return PIPIT_STATUS_OK;
}
