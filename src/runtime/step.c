/*
 * step.c — pipit_step and the parameter accessors: validates a step's feeds
 * (every input present, token ids in range), runs the rank programs, then
 * the post-loop (gradient sums, norm, clipping, update).
 */
#include <math.h>
#include <string.h>

#include <pthread.h>
#include <time.h>

#include "runtime/ep.h"
#include "runtime/program.h"
#include "runtime/transport.h"
#include "util/bf16.h"

static pipit_status check_program_fn(const pipit_program *p, const char *fn) {
    if (!p) return pipit__err(PIPIT_STATUS_MISUSE, "%s: program is NULL", fn);
    if (p->magic != PIPIT_PROGRAM_MAGIC)
        return pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid program handle (freed, or not a pipit_program)", fn);
    return PIPIT_STATUS_OK;
}
#define check_program(p) check_program_fn(p, __func__)

static pipit_status fail(pipit_program *p, pipit_status s) {
    snprintf(p->errmsg, sizeof p->errmsg, "%s", pipit_errmsg());
    return s;
}

const char *pipit_program_errmsg(const pipit_program *p) {
    return check_program(p) ? "invalid program handle" : p->errmsg;
}

/* The one feed of microbatch m for input `in`; NULL (with a message) if it
 * is missing, given twice, has NULL data or a size other than the input's. */
static const void *find_feed(const pipit_feed *f, int nfeed, const pipit__input *in, int m) {
    const pipit_feed *hit = NULL;
    for (int i = 0; i < nfeed; i++) {
        if (!f[i].name || strcmp(f[i].name, in->name) != 0) continue;
        if (hit) {
            pipit__err(PIPIT_STATUS_INVALID, "pipit_step: microbatch %d has two feeds for input '%s'", m, in->name);
            return NULL;
        }
        hit = &f[i];
    }
    if (!hit) {
        pipit__err(PIPIT_STATUS_INVALID, "pipit_step: microbatch %d has no data for input '%s'", m, in->name);
        return NULL;
    }
    size_t want = (size_t)in->numel * pipit__dtype_size(in->dtype);
    if (!hit->data) {
        pipit__err(PIPIT_STATUS_INVALID, "pipit_step: input '%s' of microbatch %d: data is NULL (expected %zu bytes)",
                   in->name, m, want);
        return NULL;
    }
    if (hit->nbytes != want) {
        pipit__err(PIPIT_STATUS_INVALID,
                   "pipit_step: input '%s' of microbatch %d: feed has %zu bytes, expected %zu (%s x %lld)",
                   in->name, m, hit->nbytes, want, pipit__dtype_name(in->dtype), (long long)in->numel);
        return NULL;
    }
    return hit->data;
}

/* MoE slots fed to dispatch / combine (plan.c mark_fed_slots): each -1
 * (dropped) or a cell of the [E, C] grid, no cell twice. */
static pipit_status check_fed_slots(const pipit__input *in, int m, const int32_t *t) {
    unsigned char *seen = pipit__calloc((size_t)in->slot_grid, 1);
    if (!seen) return pipit__err(PIPIT_STATUS_NOMEM, "pipit_step: out of memory checking input '%s'", in->name);
    pipit_status s = PIPIT_STATUS_OK;
    for (int64_t k = 0; k < in->numel && !s; k++) {
        if (t[k] == -1) continue;
        if (t[k] < -1 || t[k] >= in->slot_grid)
            s = pipit__err(PIPIT_STATUS_INVALID,
                           "pipit_step: input '%s' of microbatch %d holds slot %d at index %lld, outside [0, %d) "
                           "(the experts x capacity grid; -1 marks a dropped choice)",
                           in->name, m, t[k], (long long)k, in->slot_grid);
        else if (seen[t[k]]++)
            s = pipit__err(PIPIT_STATUS_INVALID,
                           "pipit_step: input '%s' of microbatch %d holds slot %d twice (again at index %lld): two "
                           "choices would share one expert row",
                           in->name, m, t[k], (long long)k);
    }
    pipit__free(seen);
    return s;
}

/* Whether replica d's ranks run in this process. */
static int replica_is_local(const pipit_program *p, int d) {
    return p->procs == 1 || pipit__replica_of(p, p->local[0]) == d;
}

/* Resolves every (microbatch, input) of the replicas run here to its data
 * once for all ranks, and checks that index inputs lie within what their
 * consumers allow. Microbatch j of the step (of M * D) is replica j / M's. */
static pipit_status resolve_feeds(const pipit_program *p, const pipit_feed *feeds, int nfeed, const void **ptrs) {
    if (!feeds && p->plan.ninputs > 0) return pipit__err(PIPIT_STATUS_INVALID, "pipit_step: feeds is NULL");
    int G = p->plan.M * p->plan.D;
    for (int m = 0; m < G; m++) {
        if (!replica_is_local(p, m / p->plan.M)) continue;
        const pipit_feed *f = feeds + (size_t)m * (size_t)nfeed;
        for (int i = 0; i < p->plan.ninputs; i++) {
            const pipit__input *in = &p->plan.inputs[i];
            const void *d = find_feed(f, nfeed, in, m);
            if (!d) return PIPIT_STATUS_INVALID;
            ptrs[(size_t)m * (size_t)p->plan.ninputs + (size_t)i] = d;
            if (in->dtype == PIPIT_I32 && in->doc_T > 0) { /* packed documents' ids */
                const int32_t *t = d;
                for (int64_t k = 1; k < in->numel; k++)
                    if (k % in->doc_T && t[k] < t[k - 1])
                        return pipit__err(PIPIT_STATUS_INVALID,
                                          "pipit_step: input '%s' of microbatch %d holds document ids that decrease "
                                          "at sequence %lld, position %lld (%d after %d): document ids must be "
                                          "non-decreasing along each sequence",
                                          in->name, m, (long long)(k / in->doc_T), (long long)(k % in->doc_T), t[k],
                                          t[k - 1]);
            }
            if (in->dtype == PIPIT_I32 && in->slot_grid > 0) {
                pipit_status s = check_fed_slots(in, m, d);
                if (s) return s;
            }
            if (in->dtype != PIPIT_I32 || in->limit <= 0) continue;
            const int32_t *t = d;
            for (int64_t k = 0; k < in->numel; k++)
                if (t[k] < 0 || t[k] >= in->limit)
                    return pipit__err(PIPIT_STATUS_INVALID,
                                      "pipit_step: input '%s' of microbatch %d holds %d at index %lld, outside [0, %d) "
                                      "(is the vocabulary large enough for this data?)",
                                      in->name, m, t[k], (long long)k, in->limit);
        }
    }
    return PIPIT_STATUS_OK;
}

/* The threads of one step and how many have finished: the caller waits on
 * this instead of joining blindly, so a rank that hangs cannot hang it. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int finished, failed;
} step_join;

typedef struct {
    pipit_program *p;
    int rank;
    const void **feed_ptrs;
    step_join *join;
    int done;
    pipit_status status;
    char msg[2048];
} rank_run;

static void *rank_main(void *a) {
    rank_run *rr = a;
    rr->status = pipit__exec_rank(rr->p, rr->rank, rr->feed_ptrs);
    if (rr->status) {
        snprintf(rr->msg, sizeof rr->msg, "%s", pipit_errmsg());
        /* a rank that failed before or outside its instruction loop must
         * still wake the others (abort is idempotent) */
        rr->p->transport->vt->abort(rr->p->transport, rr->rank, rr->msg);
    }
    pthread_mutex_lock(&rr->join->mu);
    rr->done = 1;
    rr->join->finished++;
    rr->join->failed |= rr->status != PIPIT_STATUS_OK;
    pthread_cond_broadcast(&rr->join->cv);
    pthread_mutex_unlock(&rr->join->mu);
    return NULL;
}

/* Waits until every rank thread is done. Once one is, the others get the
 * hang timeout (5 s once one has failed: the abort wakes every rank that
 * waits for a message); a rank still running then has hung. Returns the
 * first rank not done, or -1. */
static int wait_ranks(step_join *j, const rank_run *rr, int n) {
    double timeout = pipit__transport_timeout(), deadline = 0;
    pthread_mutex_lock(&j->mu);
    while (j->finished < n) {
        double now = pipit__now();
        if (j->finished > 0) {
            double d = now + (j->failed ? PIPIT_MIN(timeout, 5.0) : timeout);
            if (!deadline || d < deadline) deadline = d;
        }
        if (deadline && now >= deadline) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L; /* re-check the deadline 10 times a second */
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    int hung = -1;
    for (int q = 0; q < n && hung < 0; q++)
        if (!rr[q].done) hung = q;
    pthread_mutex_unlock(&j->mu);
    return hung;
}

/* Runs every world rank of this process, one thread each (the caller's
 * thread when there is one), and reports the first rank that failed by
 * name. */
static pipit_status run_ranks(pipit_program *p, const void **feed_ptrs) {
    if (p->transport) p->transport->vt->reset(p->transport);
    if (p->nlocal == 1) {
        pipit_status s = pipit__exec_rank(p, p->local[0], feed_ptrs);
        if (s && p->W > 1 && strncmp(pipit_errmsg(), "rank ", 5) != 0) { /* name the rank, as below */
            char msg[2048];
            snprintf(msg, sizeof msg, "%s", pipit_errmsg());
            s = pipit__err(s, "rank %d failed: %s", p->local[0], msg);
        }
        return s;
    }
    int n = p->nlocal;
    rank_run *rr = pipit__calloc((size_t)n, sizeof *rr);
    pthread_t *th = pipit__calloc((size_t)n, sizeof *th);
    step_join *j = pipit__calloc(1, sizeof *j);
    if (!rr || !th || !j) {
        pipit__free(rr), pipit__free(th), pipit__free(j);
        return pipit__err(PIPIT_STATUS_NOMEM, "pipit_step: out of memory");
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    int started = 0;
    pipit_status s = PIPIT_STATUS_OK;
    for (int q = 0; q < n; q++, started++) {
        rr[q] = (rank_run){p, p->local[q], feed_ptrs, j, 0, PIPIT_STATUS_OK, ""};
        if (pthread_create(&th[q], NULL, rank_main, &rr[q]) != 0) {
            s = pipit__err(PIPIT_STATUS_RUNTIME, "pipit_step: cannot start the thread of rank %d", p->local[q]);
            p->transport->vt->abort(p->transport, p->local[q], "thread not started");
            break;
        }
    }
    int hung = wait_ranks(j, rr, started);
    if (hung >= 0) {
        /* A hung thread may still touch the program: leave it, its rank
         * data and this step's tables alive, and refuse further steps. */
        p->broken = 1;
        for (int q = 0; q < started; q++) pthread_detach(th[q]);
        pipit__free(th);
        char first[2100] = "";
        for (int q = 0; q < started && !first[0]; q++)
            if (rr[q].done && rr[q].status) snprintf(first, sizeof first, " after %s", rr[q].msg);
        return pipit__err(PIPIT_STATUS_RUNTIME,
                          "rank %d failed: no progress for %g s (hung%s); this program can no longer run",
                          rr[hung].rank, pipit__transport_timeout(), first);
    }
    for (int q = 0; q < started; q++) pthread_join(th[q], NULL);
    /* Report the rank that failed first on its own, not one that stopped
     * because of it ("rank 1 failed: ..." is already in its message). */
    for (int q = 0; !s && q < started; q++)
        if (rr[q].status && !strstr(rr[q].msg, "failed: "))
            s = pipit__err(rr[q].status, "rank %d failed: %s", rr[q].rank, rr[q].msg);
    for (int q = 0; !s && q < started; q++)
        if (rr[q].status) s = pipit__err(rr[q].status, "%s", rr[q].msg);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    pipit__free(rr), pipit__free(th), pipit__free(j);
    return s;
}

/* "nan", "inf" or "-inf": printf's spelling of a NaN's sign depends on how
 * it was made (compiler, optimisation level), a message's should not. */
static const char *nonfinite_name(double x) { return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

/* The step's metrics from this process's ranks; every rank has every
 * replica's losses and the same norm. */
static void fill_metrics(const pipit_program *p, double t0, double loss, pipit_metrics *m) {
    const pipit__rank_state *first = &p->rs[p->local[0]];
    m->loss = loss;
    m->grad_norm = first->norm;
    m->ms = (pipit__now() - t0) * 1e3;
    m->peak_bytes = 0;
    double busy = 0;
    for (int i = 0; i < p->nlocal; i++) {
        int w = p->local[i];
        m->peak_bytes = PIPIT_MAX(m->peak_bytes, p->plan.ranks[p->rs[w].prank].arena_bytes);
        busy += p->rs[w].busy;
    }
    m->bubble = p->step_wall > 0 ? 1.0 - busy / (p->nlocal * p->step_wall) : 0;
    m->lr = p->step_lr;
}

pipit_status pipit_step(pipit_program *p, const pipit_feed *feeds, int nfeed, int update,
                        pipit_metrics *metrics) {
    pipit_status s = check_program(p);
    if (!s) s = pipit__check_runnable(p, __func__);
    if (s) return s;
    unsigned long gen0 = pipit__err_gen();
    if (p->broken)
        return fail(p, pipit__err(PIPIT_STATUS_RUNTIME, "pipit_step: a rank of this program hung in an earlier step; "
                                                        "it can no longer run (free it and compile again)"));
    if (nfeed < 0) return fail(p, pipit__err(PIPIT_STATUS_INVALID, "pipit_step: nfeed is %d (< 0)", nfeed));
    if (update && p->plan.forward_only)
        return fail(p, pipit__err(PIPIT_STATUS_INVALID,
                                  "pipit_step: update = %d on a forward-only program (options.forward_only): it "
                                  "computes the loss only; pass update = 0",
                                  update));
    if (update && p->opt_step == INT64_MAX)
        return fail(p, pipit__err(PIPIT_STATUS_INVALID,
                                  "pipit_step: the optimizer step counter is at 2^63-1 and cannot advance"));
    size_t nptrs = (size_t)p->plan.M * (size_t)p->plan.D * (size_t)PIPIT_MAX(p->plan.ninputs, 1);
    const void **ptrs = pipit__calloc(nptrs, sizeof *ptrs);
    if (!ptrs) return fail(p, pipit__err(PIPIT_STATUS_NOMEM, "pipit_step: out of memory"));
    s = resolve_feeds(p, feeds, nfeed, ptrs);
    if (s) {
        pipit__free(ptrs);
        return fail(p, s);
    }
    double t0 = pipit__now();
    p->step_t0 = t0;
    p->do_update = update != 0;
    if (update) p->opt_step++;
    /* the schedule's lr of this update (of the next one without an update) */
    const pipit_options *po = &p->plan.opt;
    p->step_lr = pipit__lr_at(&po->lr_schedule, po->optimizer.lr,
                              update || p->opt_step == INT64_MAX ? PIPIT_MAX(p->opt_step, 1) : p->opt_step + 1);
    s = pipit__err_fresh(run_ranks(p, ptrs), gen0, "pipit_step");
    /* every rank ran to its end: each param's shadow is its cast or its update's (or, the update skipped,
       the cast of the unchanged param); after a failure none is trusted */
    for (int i = 0; i < p->nlocal; i++) p->rs[p->local[i]].shadow_ok = !s && p->rs[p->local[i]].has_shadows;
    if (!p->broken) pipit__free(ptrs); /* else a hung rank may still read it */
    p->step_wall = pipit__now() - t0;
    if (p->profile && !s) p->profile_steps++; /* the profile's per-step means (partition) */
    if (s) {
        if (update) p->opt_step--; /* no update happened everywhere; keep bias correction in step */
        return fail(p, s);
    }
    /* the mean over the M * D microbatches, added in the step's order */
    int G = p->plan.M * p->plan.D;
    double loss = 0;
    for (int m = 0; m < G; m++) loss += p->rs[p->local[0]].losses[m];
    loss /= G;
    if (metrics) fill_metrics(p, t0, loss, metrics);
    double norm = p->rs[p->local[0]].norm;
    if (!isfinite(norm) && update) p->opt_step--; /* every rank skipped its update (exec.c) */
    const char *skipped = !update ? "" : isfinite(norm) ? "; the parameters were updated"
                                                        : "; the update was skipped, the parameters are unchanged";
    if (!isfinite(loss))
        return fail(p, pipit__err(PIPIT_STATUS_RUNTIME,
                                  "pipit_step: loss is %s (diverged: a non-finite input, parameter or learning rate; try a "
                                  "lower learning rate)%s",
                                  nonfinite_name(loss), skipped));
    if (!isfinite(norm))
        return fail(p, pipit__err(PIPIT_STATUS_RUNTIME,
                                  "pipit_step: gradient norm is %s (loss %g: the gradients overflowed or a value is "
                                  "non-finite; try a lower learning rate or clip_norm)%s",
                                  nonfinite_name(norm), loss, skipped));
    return PIPIT_STATUS_OK;
}

pipit_status pipit_step_feeds(pipit_program *p, const pipit_feed *feeds, int64_t nfeeds_total, int nfeed, int update,
                              pipit_metrics *metrics) {
    pipit_status s = check_program(p);
    if (s) return s;
    unsigned long gen0 = pipit__err_gen();
    int64_t G = (int64_t)p->plan.M * p->plan.D, want = G * (nfeed > 0 ? nfeed : 0);
    if (nfeed >= 0 && nfeeds_total != want) /* a short array would be read past its end */
        return fail(p, pipit__err(PIPIT_STATUS_INVALID,
                                  "pipit_step_feeds: the feed array has %lld entries, but the step reads M x D x nfeed "
                                  "= %d x %d x %d = %lld (microbatch m's inputs at feeds[m * nfeed ...])",
                                  (long long)nfeeds_total, p->plan.M, p->plan.D, nfeed, (long long)want));
    s = pipit__err_fresh(pipit_step(p, feeds, nfeed, update, metrics), gen0, __func__);
    return s ? fail(p, s) : s;
}

/* ---- parameter access ---- */

int pipit_program_num_params(const pipit_program *p) { return check_program(p) ? 0 : p->plan.nparams; }

const char *pipit_program_param_name(const pipit_program *p, int i) {
    if (check_program(p)) return NULL;
    if (i < 0 || i >= p->plan.nparams) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: index %d out of range [0, %d)", __func__, i, p->plan.nparams);
        return NULL;
    }
    return p->plan.params[i].name;
}

/* The param called `name`; NULL with a message naming `fn` and INVALID in
 * *why for a NULL or unknown name. */
static const pipit__param *find_param(const pipit_program *p, const char *name, const char *fn,
                                      pipit_status *why) {
    if (!name) {
        *why = pipit__err(PIPIT_STATUS_INVALID, "%s: name is NULL", fn);
        return NULL;
    }
    int i = pipit__plan_find_param(&p->plan, name);
    if (i >= 0) return &p->plan.params[i];
    *why = pipit__err(PIPIT_STATUS_INVALID, "%s: no parameter named '%s'", fn, name);
    return NULL;
}

/* ndim and shape are optional (either may be NULL). */
pipit_status pipit_program_param_shape(const pipit_program *p, const char *name, int *ndim,
                                       int64_t *shape) {
    pipit_status s = check_program(p);
    if (s) return s;
    const pipit__param *pp = find_param(p, name, __func__, &s);
    if (!pp) return s;
    if (ndim) *ndim = pp->ndim; /* the whole tensor, also when the stage's T ranks hold shards of it */
    if (shape) memcpy(shape, pp->full_shape, sizeof(int64_t) * (size_t)pp->ndim);
    return PIPIT_STATUS_OK;
}

static pipit_status copy_param(const pipit_program *p, const char *fn, const char *name, const void *data,
                               size_t nbytes, int *idx) {
    pipit_status s = check_program_fn(p, fn);
    if (!s) s = pipit__check_runnable(p, fn); /* every read and write of a param, gradient or moment */
    if (s) return s;
    const pipit__param *pp = find_param(p, name, fn, &s);
    if (!pp) return s;
    size_t want = (size_t)pp->full_numel * pipit__dtype_size(pp->dtype);
    if (!data) return pipit__err(PIPIT_STATUS_MISUSE, "%s '%s': data is NULL (%zu bytes expected)", fn, name, want);
    if (nbytes != want)
        return pipit__err(PIPIT_STATUS_SHAPE, "%s: parameter '%s' has %zu bytes, caller passed %zu", fn, name, want,
                          nbytes);
    *idx = (int)(pp - p->plan.params);
    return PIPIT_STATUS_OK;
}

/* Reads a param, its last gradient or its optimizer state from the copy of
 * the holder that computes its norm (all copies are bitwise equal); what
 * ZeRO-1 shards over the replicas (the moments, and the gradient unless a
 * transform gathered it) comes shard by shard from each replica. */
enum { BLOCK_PARAM, BLOCK_GRAD, BLOCK_M, BLOCK_V };

static uint8_t *block_of(const pipit__rank_state *r, int which) {
    switch (which) {
    case BLOCK_GRAD: return r->grad_block;
    case BLOCK_M: return r->m_block;
    case BLOCK_V: return r->v_block;
    }
    return r->param_block;
}

/* Where param i's element `a` of `which` lives on world rank w. */
static const uint8_t *element_at(const pipit_program *p, int w, int i, int which, int64_t a) {
    const pipit__rank_state *rs = &p->rs[w];
    size_t es = pipit__dtype_size(p->plan.params[i].dtype);
    /* ZeRO-2 / ZeRO-3: between steps the gradient / parameter is this replica's shard alone */
    int zero_shard = (which == BLOCK_GRAD && pipit__zero_grads(p)) || (which == BLOCK_PARAM && pipit__zero_params(p));
    if (which == BLOCK_M || which == BLOCK_V || zero_shard) {
        int64_t first = 0, end;
        if (p->plan.zero1) pipit__dp_replica_shard(&p->plan, i, rs->replica, &first, &end);
        const uint8_t *base = which == BLOCK_GRAD ? rs->gshard_block
                              : which == BLOCK_PARAM ? rs->pshard_block
                                                     : block_of(rs, which);
        return base + rs->opt_off[i] + (size_t)(a - first) * es;
    }
    return block_of(rs, which) + p->plan.ranks[rs->prank].param_off[i] + (size_t)a * es;
}

/* n bytes from world rank w to `dst` on every process: a copy when w runs
 * here, else (MPI) a broadcast from its process, which every process joins
 * (also when the copy failed: the others must not wait for it). */
static pipit_status fetch(const pipit_program *p, int w, const uint8_t *src, void *dst, size_t n) {
    pipit_status s = PIPIT_STATUS_OK;
    if (pipit__is_local(p, w)) {
        pipit__bind_rank(p, w);
        p->be->download(dst, src, n);
        s = p->be->sync(w);
    }
    if (p->procs == 1) return s;
    pipit_status b = p->transport->vt->bcast(p->transport, w, dst, n);
    return s ? s : b;
}

static int sharded(const pipit_program *p, int which) {
    if (!p->plan.zero1) return 0;
    return which == BLOCK_M || which == BLOCK_V || (which == BLOCK_GRAD && !p->plan.g->ngradset) ||
           (which == BLOCK_PARAM && pipit__zero_params(p));
}

/* Tensor-parallel rank t's local copy of param i (its shard, or all of a
 * replicated one) into `local`, from pipeline rank q's holder in each
 * replica that keeps a data-parallel shard of it. */
static pipit_status read_local(const pipit_program *p, int i, int which, int t, uint8_t *local) {
    const pipit__param *pp = &p->plan.params[i];
    int D = sharded(p, which) ? p->plan.D : 1;
    size_t es = pipit__dtype_size(pp->dtype);
    pipit_status s = PIPIT_STATUS_OK;
    for (int d = 0; !s && d < D; d++) { /* replica d holds shard d (all of it when not sharded) */
        int64_t a = 0, b = pp->numel;
        if (D > 1) pipit__dp_shard(pp->numel, D, d, &a, &b);
        if (b <= a) continue;
        int w = pipit__world(p, d, pp->norm_rank, t);
        const uint8_t *src = pipit__is_local(p, w) ? element_at(p, w, i, which, a) : NULL;
        s = fetch(p, w, src, local + (size_t)a * es, (size_t)(b - a) * es);
    }
    return s;
}

/* An expert param (E > 1): EP rank e's block of axis 0 from replica e, or
 * with ZeRO-1 each shard k of it from its holder k E + e. */
static pipit_status read_experts(const pipit_program *p, int i, int which, uint8_t *data) {
    const pipit__param *pp = &p->plan.params[i];
    int E = p->plan.E, K = sharded(p, which) ? p->plan.D / E : 1;
    size_t es = pipit__dtype_size(pp->dtype), n = (size_t)pp->numel * es;
    pipit_status s = PIPIT_STATUS_OK;
    for (int e = 0; !s && e < E; e++)
        for (int k = 0; !s && k < K; k++) {
            int64_t a = 0, b = pp->numel;
            if (K > 1) pipit__dp_shard(pp->numel, K, k, &a, &b);
            if (b <= a) continue;
            int w = pipit__world(p, k * E + e, pp->norm_rank, 0);
            s = fetch(p, w, pipit__is_local(p, w) ? element_at(p, w, i, which, a) : NULL,
                      data + (size_t)e * n + (size_t)a * es, (size_t)(b - a) * es);
        }
    return s;
}

/* Reads the whole tensor: a replicated param from tensor-parallel rank 0,
 * a sharded one from each of the T ranks, joined along its axis. */
static pipit_status read_param(const pipit_program *p, const char *fn, const char *name, void *data, size_t nbytes,
                               int which) {
    int i;
    pipit_status s = copy_param(p, fn, name, data, nbytes, &i);
    if (s) return s;
    const pipit__param *pp = &p->plan.params[i];
    if (pp->ep) return read_experts(p, i, which, data);
    if (pp->shard_axis < 0 || p->plan.T == 1) return read_local(p, i, which, 0, data);
    size_t es = pipit__dtype_size(pp->dtype);
    uint8_t *local = pipit__malloc((size_t)pp->numel * es);
    if (!local) return pipit__err(PIPIT_STATUS_NOMEM, "%s '%s': out of memory for a shard", fn, name);
    for (int t = 0; !s && t < p->plan.T; t++) {
        s = read_local(p, i, which, t, local);
        if (!s) pipit__shard_copy(pp, p->plan.T, t, data, local, es, 1);
    }
    pipit__free(local);
    return s;
}

/* Every holder this process runs gets the same bytes (with ZeRO-1 the
 * moments of its shard; with tensor parallelism its rank's shard), so the
 * copies start (and stay) equal. */
static pipit_status write_param(pipit_program *p, const char *fn, const char *name, const void *data, size_t nbytes,
                                int which) {
    int i;
    pipit_status s = copy_param(p, fn, name, data, nbytes, &i);
    if (s) return s;
    if (which == BLOCK_PARAM) /* the next step casts the params again */
        for (int k = 0; k < p->nlocal; k++) p->rs[p->local[k]].shadow_ok = 0;
    const pipit__param *pp = &p->plan.params[i];
    size_t es = pipit__dtype_size(pp->dtype);
    int split = pp->shard_axis >= 0 && p->plan.T > 1;
    uint8_t *local = split ? pipit__malloc((size_t)pp->numel * es) : NULL;
    if (split && !local) return pipit__err(PIPIT_STATUS_NOMEM, "%s '%s': out of memory for a shard", fn, name);
    for (int k = 0; !s && k < p->nlocal; k++) {
        int w = p->local[k];
        if (!(pp->holders >> p->rs[w].prank & 1)) continue;
        int64_t a = 0, b = pp->numel;
        if (sharded(p, which)) pipit__dp_replica_shard(&p->plan, i, p->rs[w].replica, &a, &b);
        if (b <= a) continue;
        if (split) pipit__shard_copy(pp, p->plan.T, p->rs[w].tp, (void *)data, local, es, 0);
        const uint8_t *src = split ? local : (const uint8_t *)data;
        if (pp->ep) src += (size_t)(p->rs[w].replica % p->plan.E) * (size_t)pp->numel * es; /* its experts */
        pipit__bind_rank(p, w);
        p->be->upload((uint8_t *)element_at(p, w, i, which, a), src + (size_t)a * es, (size_t)(b - a) * es);
        s = p->be->sync(w);
    }
    pipit__free(local);
    return s;
}

/* A forward-only program has no gradients or optimizer state. */
static pipit_status check_trainable(const pipit_program *p, const char *fn) {
    pipit_status s = check_program_fn(p, fn);
    if (s) return s;
    if (p->plan.forward_only)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "%s: this is a forward-only program (options.forward_only): it has no gradients or "
                          "optimizer state",
                          fn);
    return PIPIT_STATUS_OK;
}

static pipit_status check_which(const pipit_program *p, int which, const char *fn) {
    pipit_status s = check_trainable(p, fn);
    if (s) return s;
    if (which != 0 && which != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: which must be 0 (exp_avg) or 1 (exp_avg_sq), got %d", fn,
                          which);
    return PIPIT_STATUS_OK;
}

pipit_status pipit_program_get_opt_state(const pipit_program *p, const char *name, int which, void *data,
                                         size_t nbytes) {
    pipit_status s = check_which(p, which, __func__);
    return s ? s : read_param(p, __func__, name, data, nbytes, BLOCK_M + which);
}

pipit_status pipit_program_set_opt_state(pipit_program *p, const char *name, int which, const void *data,
                                         size_t nbytes) {
    pipit_status s = check_which(p, which, __func__);
    return s ? s : write_param(p, __func__, name, data, nbytes, BLOCK_M + which);
}

int64_t pipit_program_opt_steps(const pipit_program *p) { return check_program(p) ? 0 : p->opt_step; }

pipit_status pipit_program_set_opt_steps(pipit_program *p, int64_t steps) {
    pipit_status s = check_program(p);
    if (s) return s;
    if (steps < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: optimizer steps must be >= 0 (got %lld)", __func__, (long long)steps);
    p->opt_step = steps;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_program_get_param(const pipit_program *p, const char *name, void *data,
                                     size_t nbytes) {
    return read_param(p, __func__, name, data, nbytes, BLOCK_PARAM);
}

pipit_status pipit_program_get_grad(const pipit_program *p, const char *name, void *data,
                                    size_t nbytes) {
    pipit_status s = check_trainable(p, __func__);
    if (s) return s;
    return read_param(p, __func__, name, data, nbytes, BLOCK_GRAD);
}

/* Every holder gets the same bytes, so the copies start (and stay) equal. */
pipit_status pipit_program_set_param(pipit_program *p, const char *name, const void *data,
                                     size_t nbytes) {
    return write_param(p, __func__, name, data, nbytes, BLOCK_PARAM);
}

int pipit_program_forward_only(const pipit_program *p) { return check_program(p) ? 0 : p->plan.forward_only; }

/* ---- outputs ---- */

/* An output the program computed as the bf16 copy of an f32 value
 * (options.dtype bf16): fetched as bf16, returned as f32 (exact). */
static pipit_status fetch_widened(const pipit_program *p, int w, const uint8_t *src, int64_t n, float *dst) {
    pipit__bf16 *tmp = pipit__malloc(sizeof *tmp * (size_t)PIPIT_MAX(n, 1));
    if (!tmp) return pipit__err(PIPIT_STATUS_NOMEM, "pipit_program_get_output: out of memory");
    pipit_status s = fetch(p, w, src, tmp, sizeof *tmp * (size_t)n);
    for (int64_t i = 0; !s && i < n; i++) dst[i] = pipit__bf16_to_f32(tmp[i]);
    pipit__free(tmp);
    return s;
}

pipit_status pipit_program_get_output(const pipit_program *p, pipit_val v, int mb, void *data, size_t nbytes) {
    pipit_status s = check_program(p);
    if (!s) s = pipit__check_runnable(p, __func__);
    if (s) return s;
    const pipit__plan *pl = &p->plan;
    int k = -1;
    for (int i = 0; v.g == pl->user_g && i < pl->noutputs; i++)
        if (pl->user_outputs[i] == v.id) k = i;
    if (k < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: value %d is not one of this program's options.outputs", __func__,
                          (int)v.id);
    if (mb < 0 || mb >= pl->M * pl->D)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: microbatch %d out of range [0, %d)", __func__, mb, pl->M * pl->D);
    const pipit__node *un = &pl->user_g->nodes[v.id], *pn = &pl->g->nodes[pl->outputs[k]];
    size_t want = pipit__node_bytes(un);
    if (!data) return pipit__err(PIPIT_STATUS_MISUSE, "%s: data is NULL (%zu bytes expected)", __func__, want);
    if (nbytes != want)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: output %d has %zu bytes, caller passed %zu", __func__, (int)v.id,
                          want, nbytes);
    if (p->step_wall <= 0) return pipit__err(PIPIT_STATUS_INVALID, "%s: no step has run yet", __func__);
    int lmb = mb % pl->M, d = mb / pl->M;
    for (int q = 0; q < pl->nranks; q++) {
        const pipit__rank_plan *r = &pl->ranks[q];
        for (int32_t i = r->n - 1; i >= 0 && r->ins[i].kind == INS_OUTPUT; i--) {
            const pipit__instr *in = &r->ins[i];
            if (in->node != pl->outputs[k] || in->mb != lmb) continue;
            int w = pipit__world(p, d, q, 0); /* tensor-parallel rank 0's (a sharded value: its shard) */
            const uint8_t *src = pipit__is_local(p, w) ? p->rs[w].arena + in->in[0].off : NULL;
            if (pn->dtype == un->dtype) return fetch(p, w, src, data, nbytes);
            return fetch_widened(p, w, src, pipit__node_numel(pn), data);
        }
    }
    return pipit__err(PIPIT_STATUS_INTERNAL, "%s: output %d of microbatch %d was not planned", __func__, (int)v.id, mb);
}
