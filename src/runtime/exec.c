/*
 * exec.c — runs a rank's instruction list. Pointers are resolved once per
 * step (only the feeds change between steps); then every thread of the
 * rank's pool walks the list, calling the backend's kernel for each
 * instruction with its (ith, nth), with a barrier between instructions.
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include "runtime/cp.h"
#include "runtime/ep.h"
#include "runtime/program.h"
#include "runtime/transport.h"

typedef struct {
    pipit_program *p;
    const pipit__rank_plan *r; /* the rank's plan */
    pipit__rank_state *rs;     /* and its memory, threads, timings */
    int w;                     /* world rank */
    const void **feed_ptrs; /* [M * D * ninputs]: this replica's start at d * M */
    pipit_status status;    /* first failure on this rank (thread 0 writes) */
    char msg[1024];
    int kick_due; /* sends went out since the rank last computed (thread 0) */
    int zero_release; /* ZeRO-3: release the full parameter block when the loop ends (runtime/zero.c) */
    int reshard;      /* ZeRO-3 reshard_after_forward: params gathered per task (runtime/zero_reshard.c) */
    double busy_until; /* the last task end counted as busy (an overlapped pair's tasks overlap in time) */
} exec_ctx;

static void *loc_ptr(const exec_ctx *x, const pipit__loc *l, int mb) {
    pipit_program *p = x->p;
    switch ((pipit__loc_kind)l->kind) {
    case LOC_ARENA: return x->rs->arena + l->off;
    case LOC_PARAM: return x->rs->param_block + l->off;
    case LOC_GRAD: return x->rs->grad_block + l->off;
    case LOC_ACC: return x->rs->acc_block + l->off;
    case LOC_SEED: return x->rs->seed;
    case LOC_FEED: { /* l->off: a view's offset into the input */
        if (x->rs->feed_block) /* device memory: this step's copy (upload_feeds) */
            return x->rs->feed_block + x->rs->feed_off[l->idx] + l->off +
                   (size_t)mb * (size_t)p->plan.inputs[l->idx].numel * pipit__dtype_size(p->plan.inputs[l->idx].dtype);
        size_t global_mb = (size_t)x->rs->replica * (size_t)p->plan.M + (size_t)mb;
        return (char *)x->feed_ptrs[global_mb * (size_t)p->plan.ninputs + (size_t)l->idx] + l->off;
    }
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
        k->acc_f32 = in->kind == INS_RUN ? in->acc_f32 : 0;
        k->epi_bias = in->kind == INS_RUN ? in->epi : 0;
        k->shard = x->rs->tp;
        k->cp = pipit__cp_rank(x->p, x->w);
        for (int j = 0; j < PIPIT_MAX_IN; j++) {
            k->in[j] = in->in[j].kind ? loc_ptr(x, &in->in[j], in->mb) : NULL;
            k->in_node[j] = j < k->node->nin ? &g->nodes[k->node->in[j]] : NULL;
        }
    }
}

/* Device backends: the inputs this rank reads, for each of its replica's
 * M microbatches, into its feed block (host memory reads them in place). */
static void upload_feeds(const exec_ctx *x) {
    const pipit__plan *pl = &x->p->plan;
    if (!x->rs->feed_block) return;
    for (int i = 0; i < pl->ninputs; i++) {
        if (x->rs->feed_off[i] == SIZE_MAX) continue;
        size_t bytes = (size_t)pl->inputs[i].numel * pipit__dtype_size(pl->inputs[i].dtype);
        for (int m = 0; m < pl->M; m++) {
            size_t global_mb = (size_t)x->rs->replica * (size_t)pl->M + (size_t)m;
            x->p->be->upload(x->rs->feed_block + x->rs->feed_off[i] + (size_t)m * bytes,
                             x->feed_ptrs[global_mb * (size_t)pl->ninputs + (size_t)i], bytes);
        }
    }
}

/* The loss scalar comes back to the host, into this replica's row. */
static void run_loss(const exec_ctx *x, const pipit__instr *in, const pipit__kctx *k) {
    double *dst = &x->rs->losses[(size_t)x->rs->replica * (size_t)x->p->plan.M + (size_t)in->mb];
    if (k->node->dtype == PIPIT_F64) {
        x->p->be->download(dst, k->in[0], sizeof(double));
    } else {
        float v;
        x->p->be->download(&v, k->in[0], sizeof v);
        *dst = (double)v;
    }
}

/* The world rank of pipeline rank q in this rank's replica and
 * tensor-parallel slice: stages exchange values between ranks of one t. */
static int same_replica(const exec_ctx *x, int q) { return pipit__world(x->p, x->rs->replica, q, x->rs->tp); }

/* A receive from pipeline rank q of this replica; waiting is not busy time
 * (and inside a task it counts as the rank's receive wait). */
static pipit_status timed_recv(exec_ctx *x, int q, uint64_t tag, void *data, size_t n, int in_task) {
    pipit__transport *t = x->p->transport;
    if (x->w == x->p->delay_rank && in_task) { /* a slow receiver (test hook) */
        struct timespec ts = {x->p->delay_ms / 1000, (long)(x->p->delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    double t0 = pipit__now();
    pipit_status s = t->vt->recv(t, x->w, same_replica(x, q), tag, data, n);
    double waited = pipit__now() - t0;
    x->rs->busy -= waited;
    if (in_task) x->rs->wait += waited;
    return s;
}

/* A send to pipeline rank q of this replica: zero-copy (the buffer is the
 * transport's until the send's fence) or a copy. */
static pipit_status send_to(exec_ctx *x, int q, uint64_t tag, const void *data, size_t n, int zc) {
    pipit__transport *t = x->p->transport;
    return (zc ? t->vt->isend : t->vt->send)(t, x->w, same_replica(x, q), tag, data, n);
}

/* The fence of send instruction `in`: waiting is not busy time. */
static pipit_status fence_send(exec_ctx *x, const pipit__instr *in) {
    pipit__transport *t = x->p->transport;
    double t0 = pipit__now();
    pipit_status s;
    switch ((pipit__ins_kind)in->kind) {
    case INS_SEND: s = t->vt->fence(t, x->w, same_replica(x, in->peer), pipit__tag(PIPIT_TAG_VALUE, in->node, in->mb)); break;
    case INS_ACC_SEND: s = t->vt->fence(t, x->w, same_replica(x, in->peer), pipit__tag(PIPIT_TAG_ACC, in->param, in->use)); break;
    default: s = pipit__dp_fence(x->p, x->w, in); break;
    }
    x->rs->busy -= pipit__now() - t0;
    return s;
}

/* The fences due before instruction `at` (after the last one: at = n);
 * with PIPIT_DEBUG_SENDS a send slot that dies there is poisoned, so a
 * receiver still reading it would see garbage and its checksum fail. */
static pipit_status run_fences(exec_ctx *x, int32_t *next, int32_t at) {
    const pipit__rank_plan *r = x->r;
    for (; *next < r->nfences && r->fences[*next].at == at; (*next)++) {
        const pipit__fence *f = &r->fences[*next];
        pipit_status s = fence_send(x, &r->ins[f->send]);
        if (s) return s;
        if (f->poison && x->p->transport->debug_sends && x->p->be->host_memory)
            memset(loc_ptr(x, &r->ins[f->send].in[0], r->ins[f->send].mb), 0xa5, r->ins[f->send].bytes);
    }
    return PIPIT_STATUS_OK;
}

static void mark_task(exec_ctx *x, const pipit__instr *in) {
    pipit__rank_state *rs = x->rs;
    double now = pipit__now() - x->p->step_t0;
    if (in->first) {
        rs->t_end[in->task] = now;
        rs->busy += now - PIPIT_MAX(rs->t_start[in->task], x->busy_until); /* a time counted once */
        x->busy_until = now;
        if (x->r->tasks[in->task].kind != PIPIT_TASK_F) rs->backward_end = now;
    } else {
        rs->t_start[in->task] = now;
    }
}

/* Communication and bookkeeping run on thread 0 of the rank's team. */
static pipit_status run_serial(exec_ctx *x, int32_t i) {
    pipit_program *p = x->p;
    pipit__rank_state *rs = x->rs;
    const pipit__instr *in = &x->r->ins[i];
    const pipit__kctx *k = &rs->kc[i];
    uint64_t value = pipit__tag(PIPIT_TAG_VALUE, in->node, in->mb);
    uint64_t use = pipit__tag(PIPIT_TAG_ACC, in->param, in->use), norm = pipit__tag(PIPIT_TAG_NORM, in->param, 0);
    switch ((pipit__ins_kind)in->kind) {
    case INS_LOSS: run_loss(x, in, k); break;
    case INS_SEND: return send_to(x, in->peer, value, k->in[0], in->bytes, in->zc);
    case INS_RECV: return timed_recv(x, in->peer, value, k->out, in->bytes, 1);
    case INS_ACC_SEND: return send_to(x, in->peer, use, k->in[0], in->bytes, in->zc);
    case INS_ACC_RECV: return timed_recv(x, in->peer, use, k->out, in->bytes, 0);
    case INS_SUMSQ_FIN: pipit__post_sumsq_fin(p, x->w, in->param); break;
    case INS_NORM_SEND: return send_to(x, in->peer, norm, &rs->sumsq[in->param], sizeof(double), 0);
    case INS_NORM_RECV: return timed_recv(x, in->peer, norm, &rs->sumsq[in->param], sizeof(double), 0);
    case INS_NORM: return pipit__post_norm(p, x->w);
    case INS_TP: return pipit__tp_collective(p, x->w, in, k); /* busy time: the stage's T ranks work in step */
    case INS_A2A_START: return pipit__ep_start(p, x->w, in, k, &rs->a2a_host[i]);
    case INS_A2A_FINISH: {
        pipit_status s = pipit__ep_finish(p, x->w, in, k, rs->a2a_host[in->use]);
        if (!s) rs->a2a_host[in->use] = NULL; /* freed; a failure leaves it to release_staging */
        return s;
    }
    case INS_MARK: mark_task(x, in); break;
    default:
        if (pipit__is_dp_instr(in->kind)) {
            double t0 = pipit__now();
            if (in->kind == INS_DP_RS_SEND && rs->dp_first_send < 0) rs->dp_first_send = t0 - p->step_t0;
            pipit_status s = pipit__dp_comm(p, x->w, in);
            rs->busy -= pipit__now() - t0;
            return s;
        }
        break;
    }
    return PIPIT_STATUS_OK;
}

/* Records this rank's failure and wakes every other rank. */
static void fail_rank(exec_ctx *x, pipit_status s) {
    x->status = s;
    snprintf(x->msg, sizeof x->msg, "%s", pipit_errmsg());
    if (x->p->transport) x->p->transport->vt->abort(x->p->transport, x->w, x->msg);
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
    case INS_RUN:
        if (in->shadow && x->rs->shadow_ok) break; /* the last update wrote the param's cast */
        be->ops[k->node->op](k, ith, nth);
        break;
    case INS_ACC:
        be->accumulate((pipit_dtype)in->dtype, (pipit_dtype)k->node->dtype, k->out, k->in[0], in->numel, in->first,
                       ith, nth);
        break;
    case INS_GRADSUM: pipit__post_gradsum(p, x->w, in, k->out, x->rs->srcs_ptr + in->srcs_at, ith, nth); break;
    case INS_SUMSQ: pipit__post_sumsq(p, x->w, in->param, in->first, k->in[0], ith, nth); break;
    case INS_COPY: be->copy(k->out, k->in[0], in->bytes, ith, nth); break;
    case INS_UPDATE:
        /* a non-finite global norm (equal on every rank) skips the update
         * everywhere: pipit_step then stops with "gradient norm is nan" */
        if (p->do_update && isfinite(x->rs->norm)) pipit__post_update(p, x->w, in->param, ith, nth);
        break;
    default:
        if (ith == 0 && !x->status) {
            pipit_status s = run_serial(x, i);
            if (s) fail_rank(x, s);
        }
        if (pipit__is_dp_instr(in->kind)) { /* the compute part, once the data is here */
            pipit__pool_barrier(x->rs->pool);
            if (!x->status) pipit__dp_compute(p, x->w, in, ith, nth);
        }
    }
}

/* A hung rank, for the hang-detection tests: alive, silent, forever. */
static void pause_forever(void) {
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
}

/* Profiling on a device backend: the instruction's work is queued, not
 * done; wait for it so its time is its own (and surface its error). */
static void profile_wait(exec_ctx *x) {
    if (x->p->be->host_memory || x->status) return;
    pipit_status s = x->p->be->sync(x->w);
    if (s) fail_rank(x, s);
}

/* sends: the instruction hands the transport a send. computes: the rank
 * works without calling the transport (not a send, a receive, a collective
 * or a task mark), so sends still moving need someone else to move them. */
static int sends(pipit__ins_kind k) {
    return k == INS_SEND || k == INS_ACC_SEND || k == INS_DP_RS_SEND || k == INS_DP_AG_SEND || k == INS_DP_PARAM_SEND ||
           k == INS_A2A_START;
}
static int computes(pipit__ins_kind k) {
    return !(sends(k) || k == INS_RECV || k == INS_ACC_RECV || k == INS_NORM_SEND || k == INS_NORM_RECV ||
             k == INS_TP || k == INS_A2A_FINISH || k == INS_MARK || pipit__is_dp_instr(k));
}

/* Before the rank computes after sending, the transport takes over the
 * sends still moving (a rank that waits moves them itself). */
static void kick_sends(exec_ctx *x, const pipit__instr *in) {
    pipit__transport *t = x->p->transport;
    pipit__ins_kind k = (pipit__ins_kind)in->kind;
    if (sends(k)) {
        x->kick_due = 1;
    } else if (x->kick_due && computes(k)) {
        if (t && t->vt->kick) t->vt->kick(t, x->w);
        x->kick_due = 0;
    }
}

static void exec_worker(void *arg, int ith, int nth) {
    exec_ctx *x = arg;
    const pipit__rank_plan *r = x->r;
    pipit__rank_state *rs = x->rs;
    double post_start = 0; /* the post-loop (gradient sums, norm, update) is compute too */
    int32_t next_fence = 0;
    if (ith > 0) pipit__bind_rank(x->p, x->w); /* thread 0 was bound by pipit__exec_rank */
    for (int32_t i = 0; i < r->n; i++) {
        if (i == r->post_at && x->zero_release) { /* ZeRO-3: the loop was the params' last reader */
            if (ith == 0 && !x->status) pipit__zero_loop_end(x->p, x->w);
            pipit__pool_barrier(rs->pool);
        } else if (i == r->post_at && x->reshard) { /* the post-loop reads params: all of them back */
            if (ith == 0 && !x->status) {
                pipit_status s = pipit__reshard_gather_all(x->p, x->w);
                if (s) fail_rank(x, s);
            }
            pipit__pool_barrier(rs->pool);
            if (x->status) return;
        }
        if (x->reshard && pipit__reshard_gathers_at(x->p, x->w, i)) { /* this task's first read of params */
            if (ith == 0 && !x->status) {
                pipit_status s = pipit__reshard_gather_at(x->p, x->w, i);
                if (s) fail_rank(x, s);
            }
            pipit__pool_barrier(rs->pool);
            if (x->status) return;
        }
        if (ith == 0 && !post_start && i == r->post_at) post_start = pipit__now();
        const pipit__instr *in = &r->ins[i];
        double t0 = x->p->profile && ith == 0 ? pipit__now() : 0;
        if (ith == 0) kick_sends(x, in);
        if (i == x->p->fail_instr && x->w == x->p->fail_rank) { /* test hooks */
            while (x->p->hang) pause_forever();
            if (ith == 0) fail_rank(x, pipit__err(PIPIT_STATUS_RUNTIME, "injected failure at instruction %d", i));
        } else {
            run_instr(x, i, ith, nth);
        }
        if (ith == 0 && !x->status) { /* before the next instruction may write a send's bytes */
            pipit_status s = run_fences(x, &next_fence, i + 1);
            if (s) fail_rank(x, s);
        }
        pipit__pool_barrier(rs->pool);
        if (t0 > 0) {
            profile_wait(x);
            rs->prof[in->kind == INS_RUN || in->kind == INS_TP ? rs->kc[i].node->op : PIPIT_OP_COUNT + in->kind] +=
                pipit__now() - t0;
        }
        if (x->status) return; /* every thread sees it after the barrier */
        /* the task's last read of params is done on every thread: thread 0 gives their pages back
         * (the next instruction reads none of them) */
        if (x->reshard && ith == 0) pipit__reshard_release_at(x->p, x->w, i);
    }
    if (ith == 0 && post_start) rs->busy += pipit__now() - post_start;
}

/* The host staging of all-to-alls a failed step started and never
 * finished. The transport may still read their sends or write their
 * posted receives until it forgets the step: the local transport's reset
 * (the start of this step) drops them; an MPI transport keeps its posted
 * receives until it is freed (an abort is final there), so the staging
 * stays with the rank until pipit_program_free, after the transport
 * (free_rank), as the rank's other memory does. */
static void release_staging(const exec_ctx *x) {
    if (x->p->plan.E <= 1 || (x->p->transport && x->p->transport->vt->irecv)) return; /* none, or not yet */
    for (int32_t i = 0; i < x->r->n; i++) {
        pipit__free(x->rs->a2a_host[i]);
        x->rs->a2a_host[i] = NULL;
    }
}

pipit_status pipit__exec_rank(pipit_program *p, int w, const void **feed_ptrs) {
    exec_ctx x = {p, &p->plan.ranks[p->rs[w].prank], &p->rs[w], w, feed_ptrs, PIPIT_STATUS_OK, "", 0, 0, 0, 0};
    pipit__bind_rank(p, w);
    pipit_status zs = pipit__zero_begin_step(p, w); /* ZeRO-2/3: the step's full blocks, gathered */
    if (zs) {
        fail_rank(&x, zs);
        pipit__zero_end_step(p, w);
        return pipit__err(zs, "%s", x.msg);
    }
    x.zero_release = pipit__zero_release_at_loop_end(p, w);
    x.reshard = pipit__zero_reshard(p) && p->rs[w].param_block;
    upload_feeds(&x);
    resolve(&x);
    release_staging(&x);
    x.rs->busy = x.rs->wait = 0;
    x.rs->dp_first_send = x.rs->backward_end = -1;
    pipit__pool_run(x.rs->pool, exec_worker, &x);
    /* A device backend's queued work ends here; its first error (a kernel
     * or a copy that failed) is the rank's failure, reported like any. */
    pipit_status s = p->be->sync(w);
    pipit__zero_end_step(p, w); /* ZeRO-2/3: keeps this replica's shards, releases the full blocks */
    if (x.status) return pipit__err(x.status, "%s", x.msg);
    if (s) {
        fail_rank(&x, s); /* wakes the other ranks and processes: this rank's results are wrong */
        return pipit__err(s, "%s", x.msg);
    }
    return PIPIT_STATUS_OK;
}
