/*
 * optim.c — the post-loop of a step and the optimizer, run by every rank
 * on the params it holds: per-use gradient sums (added once, in use order),
 * per-param sums of squares (fixed chunks, so the bits never depend on the
 * thread count), the global norm (added in param order on every rank),
 * clipping, and the AdamW / SGD update (in the param's precision, as
 * PyTorch does) with the step's learning rate from the schedule
 * (pipit_lr_at). The loops themselves are the backend's; this file decides
 * what runs on which slice, in which order.
 */
#include <math.h>

#include "runtime/ep.h"
#include "runtime/program.h"

pipit_optimizer pipit_adamw(double lr, double beta1, double beta2, double eps,
                            double weight_decay) {
    return (pipit_optimizer){PIPIT_OPT_ADAMW, lr, beta1, beta2, eps, weight_decay};
}

pipit_optimizer pipit_sgd(double lr) { return (pipit_optimizer){PIPIT_OPT_SGD, lr, 0, 0, 0, 0}; }

pipit_optimizer pipit__optimizer_resolved(const pipit_optimizer *o) {
    if (o->kind == PIPIT_OPT_ADAMW && o->lr == 0 && o->beta1 == 0 && o->beta2 == 0)
        return pipit_adamw(3e-4, 0.9, 0.95, 1e-8, 0.0);
    return *o;
}

double pipit_lr_at(const pipit_lr_schedule *s, double lr, int64_t step) {
    if (!s) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_lr_at: s is NULL"), 0.0;
    if (step < 1) return pipit__err(PIPIT_STATUS_INVALID, "pipit_lr_at: step must be >= 1 (1-based), got %lld", (long long)step), 0.0;
    if (s->kind != PIPIT_LR_CONSTANT && s->kind != PIPIT_LR_COSINE && s->kind != PIPIT_LR_LINEAR)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_lr_at: unknown kind %d", (int)s->kind), 0.0;
    if (s->warmup < 0) return pipit__err(PIPIT_STATUS_INVALID, "pipit_lr_at: warmup is %lld (< 0)", (long long)s->warmup), 0.0;
    if (s->kind != PIPIT_LR_CONSTANT && s->decay_steps <= s->warmup)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_lr_at: decay_steps %lld must be > warmup %lld",
                          (long long)s->decay_steps, (long long)s->warmup), 0.0;
    /* a NaN, infinite or negative rate would be returned as a rate */
    if (!isfinite(lr) || lr < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_lr_at: lr must be a finite number >= 0, got %g", lr), 0.0;
    if (s->kind != PIPIT_LR_CONSTANT && (!isfinite(s->min_lr) || s->min_lr < 0 || s->min_lr > lr))
        return pipit__err(PIPIT_STATUS_INVALID,
                          "pipit_lr_at: min_lr must be a finite number in [0, lr = %g] (the schedule decays to it), "
                          "got %g",
                          lr, s->min_lr), 0.0;
    return pipit__lr_at(s, lr, step);
}

/* pipit_lr_at without the checks (the options were checked at compile). */
double pipit__lr_at(const pipit_lr_schedule *s, double lr, int64_t t) {
    int64_t K = s->warmup, N = s->decay_steps, it = t - 1;
    if (t <= K) return lr * (double)t / (double)K;
    if (s->kind == PIPIT_LR_CONSTANT) return lr;
    if (it > N) return s->min_lr;
    double r = (double)(it - K) / (double)(N - K);
    double c = s->kind == PIPIT_LR_COSINE ? 0.5 * (1.0 + cos(M_PI * r)) : 1.0 - r;
    return s->min_lr + c * (lr - s->min_lr);
}

static int64_t num_chunks(const pipit__param *pp) { return (pp->numel + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK; }

/* The per-use sums, chunk by chunk (threads take whole chunks), and, when
 * this rank computes the param's share of the norm (in->first), each
 * chunk's sum of squares while it is still in cache. */
void pipit__post_gradsum(pipit_program *p, int w, const pipit__instr *in, void *grad, void *const *srcs,
                         int ith, int nth) {
    const pipit__param *pp = &p->plan.params[in->param];
    double *chunks = p->rs[w].chunks;
    int64_t lo, hi;
    pipit__range(num_chunks(pp), ith, nth, &lo, &hi);
    if (p->be->sumsq_chunks) { /* a device: the whole slice in two launches, one wait */
        int64_t a = lo * PIPIT_SUMSQ_CHUNK, b = PIPIT_MIN(hi * PIPIT_SUMSQ_CHUNK, pp->numel);
        if (a >= b) return;
        p->be->sum_uses(pp->dtype, grad, srcs, pp->nuses, a, b);
        if (in->first) p->be->sumsq_chunks(pp->dtype, grad, pp->numel, PIPIT_SUMSQ_CHUNK, lo, hi, chunks + lo);
        return;
    }
    for (int64_t c = lo; c < hi; c++) {
        int64_t a = c * PIPIT_SUMSQ_CHUNK, b = PIPIT_MIN(a + PIPIT_SUMSQ_CHUNK, pp->numel);
        p->be->sum_uses(pp->dtype, grad, srcs, pp->nuses, a, b);
        if (in->first) chunks[c] = p->be->sumsq(pp->dtype, grad, a, b);
    }
}

/* Chunk c's partial sum of squares, for the chunks this thread owns (of
 * this replica's data-parallel shard only, when my_shard is set). */
void pipit__post_sumsq(pipit_program *p, int w, int param, int my_shard, const void *grad, int ith, int nth) {
    const pipit__param *pp = &p->plan.params[param];
    double *chunks = p->rs[w].chunks;
    int64_t c0 = 0, c1 = num_chunks(pp), lo, hi;
    if (my_shard) {
        int64_t a, b;
        pipit__dp_replica_shard(&p->plan, param, p->rs[w].replica, &a, &b); /* expert params: of their holders */
        c0 = a / PIPIT_SUMSQ_CHUNK;
        c1 = (b + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK;
    }
    pipit__range(c1 - c0, ith, nth, &lo, &hi);
    lo += c0, hi += c0;
    if (p->be->sumsq_chunks) {
        if (lo < hi) p->be->sumsq_chunks(pp->dtype, grad, pp->numel, PIPIT_SUMSQ_CHUNK, lo, hi, chunks + lo);
        return;
    }
    for (int64_t c = lo; c < hi; c++) {
        int64_t a = c * PIPIT_SUMSQ_CHUNK, b = PIPIT_MIN(a + PIPIT_SUMSQ_CHUNK, pp->numel);
        chunks[c] = p->be->sumsq(pp->dtype, grad, a, b);
    }
}

void pipit__post_sumsq_fin(pipit_program *p, int w, int param) {
    pipit__rank_state *rs = &p->rs[w];
    int64_t n = num_chunks(&p->plan.params[param]);
    double s = 0;
    for (int64_t c = 0; c < n; c++) s += rs->chunks[c];
    rs->sumsq[param] = s;
}

pipit_status pipit__post_norm(pipit_program *p, int w) {
    pipit__rank_state *rs = &p->rs[w];
    pipit_status s = pipit__tp_norm_terms(p, w); /* whole tensors' terms, over the stage's T shards */
    if (!s) s = pipit__ep_norm_terms(p, w); /* each expert once, over the EP group */
    if (s) return s;
    double total = 0;
    for (int i = 0; i < p->plan.nparams; i++) total += rs->sumsq[i];
    rs->norm = sqrt(total);
    rs->clip_scale = 1.0;
    /* as torch.nn.utils.clip_grad_norm_: scale by clip / (norm + 1e-6) */
    double clip = p->plan.opt.clip_norm;
    if (clip > 0 && rs->norm > clip) rs->clip_scale = clip / (rs->norm + 1e-6);
    return PIPIT_STATUS_OK;
}

/* AdamW's coefficients for this step (bias corrections folded in). */
static pipit__adamw_coef adamw_coefs(const pipit_program *p, const pipit__param *pp, double clip) {
    const pipit_optimizer *o = &p->plan.opt.optimizer;
    double t = (double)p->opt_step, lr = p->step_lr; /* lr(t): o->lr itself for a constant schedule */
    pipit__adamw_coef c = {o->beta1, o->beta2, lr / (1.0 - pow(o->beta1, t)), sqrt(1.0 - pow(o->beta2, t)),
                           o->eps, pp->decay ? 1.0 - lr * o->weight_decay : 1.0, clip};
    return c;
}

/* The update of this thread's slice of param (with ZeRO-1, of this
 * replica's shard, whose moments alone it keeps). */
void pipit__post_update(pipit_program *p, int w, int param, int ith, int nth) {
    const pipit__param *pp = &p->plan.params[param];
    pipit__rank_state *rs = &p->rs[w];
    size_t es = pipit__dtype_size(pp->dtype);
    int64_t a = 0, b = pp->numel, lo, hi;
    if (p->plan.zero1) pipit__dp_replica_shard(&p->plan, param, rs->replica, &a, &b);
    pipit__range(b - a, ith, nth, &lo, &hi);
    size_t off = p->plan.ranks[rs->prank].param_off[param] + (size_t)a * es;
    /* ZeRO-3 once the loop released the full block: the shard in place */
    uint8_t *wt = rs->param_block ? rs->param_block + off : rs->pshard_block + rs->opt_off[param];
    uint8_t *g = rs->grad_block + off;
    if (p->plan.opt.optimizer.kind == PIPIT_OPT_ADAMW) {
        pipit__adamw_coef c = adamw_coefs(p, pp, rs->clip_scale);
        if (rs->shadow_off && rs->shadow_off[param] != SIZE_MAX) { /* and its bf16 copy (no ZeRO: a = 0) */
            p->be->adamw_bf16(&c, (float *)wt, (const float *)g, (float *)(rs->m_block + rs->opt_off[param]),
                              (float *)(rs->v_block + rs->opt_off[param]),
                              (pipit__bf16 *)(rs->arena + rs->shadow_off[param]), lo, hi);
            return;
        }
        p->be->adamw(pp->dtype, &c, wt, g, rs->m_block + rs->opt_off[param], rs->v_block + rs->opt_off[param], lo, hi);
        return;
    }
    p->be->sgd(pp->dtype, p->step_lr, rs->clip_scale, wt, g, lo, hi);
}
