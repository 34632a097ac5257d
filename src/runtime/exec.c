/*
 * exec.c — runs a rank's instruction list. Pointers are resolved once per
 * step (only the feeds change between steps); then every thread of the
 * rank's pool walks the list, calling each kernel with its (ith, nth), with
 * a barrier between instructions.
 */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "runtime/program.h"
#include "runtime/transport.h"

typedef struct {
    pipit_program *p;
    pipit__rank_prog *r;
    const void **feed_ptrs; /* [M * ninputs] */
    pipit_status status;    /* first failure on this rank (thread 0 writes) */
    char msg[1024];
} exec_ctx;

static void *loc_ptr(const exec_ctx *x, const pipit__loc *l, int mb) {
    pipit_program *p = x->p;
    switch ((pipit__loc_kind)l->kind) {
    case LOC_ARENA: return x->r->arena + l->off;
    case LOC_PARAM: return x->r->param_block + l->off;
    case LOC_GRAD: return x->r->grad_block + l->off;
    case LOC_ACC: return x->r->acc_block + l->off;
    case LOC_SEED:
        return p->g->nodes[p->gr.seed].dtype == PIPIT_F64 ? (void *)&p->seed_f64 : (void *)&p->seed_f32;
    case LOC_FEED: return (void *)x->feed_ptrs[(size_t)mb * (size_t)p->ninputs + (size_t)l->idx];
    case LOC_NONE: break;
    }
    return NULL;
}

static void resolve(const exec_ctx *x) {
    const pipit_graph *g = x->p->g;
    for (int32_t i = 0; i < x->r->n; i++) {
        const pipit__instr *in = &x->r->ins[i];
        pipit__kctx *k = &x->r->kc[i];
        k->node = &g->nodes[in->node >= 0 ? in->node : 0];
        for (int u = 0; in->kind == INS_GRADSUM && u < x->p->params[in->param].nuses; u++)
            x->r->srcs_ptr[in->srcs_at + u] = loc_ptr(x, &in->srcs[u], 0);
        k->out = loc_ptr(x, &in->out, in->mb);
        for (int j = 0; j < PIPIT_MAX_IN; j++) {
            k->in[j] = in->in[j].kind ? loc_ptr(x, &in->in[j], in->mb) : NULL;
            k->in_node[j] = j < k->node->nin ? &g->nodes[k->node->in[j]] : NULL;
        }
    }
}

/* acc = contrib (first microbatch) or acc += contrib, on this thread's slice. */
static void run_acc(const pipit__instr *in, const pipit__kctx *k, int ith, int nth) {
    int64_t lo, hi;
    pipit__range(in->numel, ith, nth, &lo, &hi);
    size_t es = pipit__dtype_size((pipit_dtype)k->node->dtype);
    if (in->first) {
        memcpy((char *)k->out + lo * es, (const char *)k->in[0] + lo * es, (size_t)(hi - lo) * es);
    } else if (k->node->dtype == PIPIT_F64) {
        double *acc = k->out;
        const double *c = k->in[0];
        for (int64_t j = lo; j < hi; j++) acc[j] += c[j];
    } else {
        float *acc = k->out;
        const float *c = k->in[0];
        for (int64_t j = lo; j < hi; j++) acc[j] += c[j];
    }
}

static void run_loss(pipit_program *p, const pipit__instr *in, const pipit__kctx *k) {
    p->losses[in->mb] = k->node->dtype == PIPIT_F64 ? *(const double *)k->in[0]
                                                    : (double)*(const float *)k->in[0];
}

/* Communication and bookkeeping run on thread 0 of the rank's team. */
static pipit_status run_serial(exec_ctx *x, int32_t i) {
    pipit_program *p = x->p;
    pipit__rank_prog *r = x->r;
    const pipit__instr *in = &r->ins[i];
    const pipit__kctx *k = &r->kc[i];
    pipit__transport *t = p->transport;
    switch ((pipit__ins_kind)in->kind) {
    case INS_LOSS: run_loss(p, in, k); break;
    case INS_SEND: return t->vt->send(t, r->rank, in->peer, pipit__tag(in->node, in->mb), k->in[0], in->bytes);
    case INS_RECV: { /* time spent waiting inside a task is not busy time */
        double t0 = pipit__now();
        pipit_status s = t->vt->recv(t, r->rank, in->peer, pipit__tag(in->node, in->mb), k->out, in->bytes);
        double waited = pipit__now() - t0;
        r->busy -= waited;
        r->wait += waited;
        return s;
    }
    case INS_ACC_SEND:
        return t->vt->send(t, r->rank, in->peer, pipit__tag(-1 - in->param, in->use), k->in[0], in->bytes);
    case INS_ACC_RECV: {
        double t0 = pipit__now();
        pipit_status s = t->vt->recv(t, r->rank, in->peer, pipit__tag(-1 - in->param, in->use), k->out, in->bytes);
        r->busy -= pipit__now() - t0;
        return s;
    }
    case INS_SUMSQ_FIN: pipit__post_sumsq_fin(r, &p->params[in->param], in->param); break;
    case INS_NORM_SEND:
        return t->vt->send(t, r->rank, in->peer, pipit__tag(-1 - in->param, -1), &r->sumsq[in->param], sizeof(double));
    case INS_NORM_RECV: {
        double t0 = pipit__now();
        pipit_status s = t->vt->recv(t, r->rank, in->peer, pipit__tag(-1 - in->param, -1), &r->sumsq[in->param],
                                     sizeof(double));
        r->busy -= pipit__now() - t0;
        return s;
    }
    case INS_NORM: pipit__post_norm(p, r); break;
    case INS_MARK: {
        double now = pipit__now() - p->step_t0;
        if (in->first) {
            r->t_end[in->task] = now;
            r->busy += now - r->t_start[in->task];
        } else {
            r->t_start[in->task] = now;
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

static void exec_worker(void *arg, int ith, int nth) {
    exec_ctx *x = arg;
    pipit__rank_prog *r = x->r;
    double post_start = 0; /* the post-loop (gradient sums, norm, update) is compute too */
    for (int32_t i = 0; i < r->n; i++) {
        if (ith == 0 && !post_start && r->ins[i].kind >= INS_ACC_SEND) post_start = pipit__now();
        const pipit__instr *in = &r->ins[i];
        const pipit__kctx *k = &r->kc[i];
        double t0 = x->p->profile && ith == 0 ? pipit__now() : 0;
        if (i == x->p->fail_instr && r->rank == x->p->fail_rank) { /* test hook */
            if (ith == 0) fail_rank(x, pipit__err(PIPIT_STATUS_RUNTIME, "injected failure at instruction %d", i));
        } else if (in->kind == INS_RUN) {
            pipit__ops[k->node->op].run(k, ith, nth);
        } else if (in->kind == INS_ACC) {
            run_acc(in, k, ith, nth);
        } else if (in->kind == INS_GRADSUM) {
            pipit__post_gradsum(x->p, r, in, k->out, r->srcs_ptr + in->srcs_at, ith, nth);
        } else if (in->kind == INS_SUMSQ) {
            pipit__post_sumsq(r, &x->p->params[in->param], k->in[0], ith, nth);
        } else if (in->kind == INS_COPY) {
            int64_t lo, hi;
            pipit__range((int64_t)in->bytes, ith, nth, &lo, &hi);
            if (k->out != k->in[0]) memcpy((char *)k->out + lo, (const char *)k->in[0] + lo, (size_t)(hi - lo));
        } else if (in->kind == INS_UPDATE) {
            if (x->p->do_update) pipit__post_update(x->p, r, in->param, ith, nth);
        } else if (ith == 0 && !x->status) {
            pipit_status s = run_serial(x, i);
            if (s) fail_rank(x, s);
        }
        pipit__pool_barrier(r->pool);
        if (t0 > 0) r->prof[in->kind == INS_RUN ? k->node->op : PIPIT_OP_COUNT + in->kind] += pipit__now() - t0;
        if (x->status) return; /* every thread sees it after the barrier */
    }
    if (ith == 0 && post_start) r->busy += pipit__now() - post_start;
}

pipit_status pipit__exec_rank(pipit_program *p, pipit__rank_prog *r, const void **feed_ptrs) {
    exec_ctx x = {p, r, feed_ptrs, PIPIT_STATUS_OK, ""};
    resolve(&x);
    r->busy = r->wait = 0;
    pipit__pool_run(r->pool, exec_worker, &x);
    if (x.status) return pipit__err(x.status, "%s", x.msg);
    return PIPIT_STATUS_OK;
}
