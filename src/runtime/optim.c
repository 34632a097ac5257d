/*
 * optim.c — the post-loop of a step, run by every rank on the params it
 * holds: per-use gradient sums (added once, in use order), per-param sums
 * of squares (fixed chunks, so the bits never depend on the thread count),
 * the global norm (added in param order on every rank), clipping, and the
 * AdamW / SGD update (in the param's precision, as PyTorch does).
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "runtime/program.h"

pipit_optimizer pipit_adamw(double lr, double beta1, double beta2, double eps,
                            double weight_decay) {
    return (pipit_optimizer){PIPIT_OPT_ADAMW, lr, beta1, beta2, eps, weight_decay};
}

pipit_optimizer pipit_sgd(double lr) { return (pipit_optimizer){PIPIT_OPT_SGD, lr, 0, 0, 0, 0}; }

static double get(const void *base, pipit_dtype dt, int64_t i) {
    return dt == PIPIT_F64 ? ((const double *)base)[i] : (double)((const float *)base)[i];
}
static void put(void *base, pipit_dtype dt, int64_t i, double v) {
    if (dt == PIPIT_F64) ((double *)base)[i] = v;
    else ((float *)base)[i] = (float)v;
}

/* Sum of squares of n elements in double, in 8 interleaved lanes added in
 * a fixed order at the end: vectorisable, and the same bits everywhere. */
static double sumsq_f32(const float *g, int64_t n) {
    double lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lane[l] += (double)g[i + l] * (double)g[i + l];
    for (; i < n; i++) lane[0] += (double)g[i] * (double)g[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

static double sumsq_f64(const double *g, int64_t n) {
    double lane[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) lane[l] += g[i + l] * g[i + l];
    for (; i < n; i++) lane[0] += g[i] * g[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

static double chunk_sumsq(const pipit__param *pp, const void *grad, int64_t a, int64_t b) {
    if (pp->dtype == PIPIT_F64) return sumsq_f64((const double *)grad + a, b - a);
    return sumsq_f32((const float *)grad + a, b - a);
}

/* grad[a, b) = ((acc_0 + acc_1) + acc_2) ..., in the param's dtype. */
static void sum_range(const pipit__param *pp, void *grad, void *const *srcs, int64_t a, int64_t b) {
    size_t es = pipit__dtype_size(pp->dtype);
    if (pp->nuses == 0) {
        memset((char *)grad + a * es, 0, (size_t)(b - a) * es);
        return;
    }
    if (srcs[0] != grad) memcpy((char *)grad + a * es, (const char *)srcs[0] + a * es, (size_t)(b - a) * es);
    for (int u = 1; u < pp->nuses; u++) {
        if (pp->dtype == PIPIT_F64) {
            double *restrict g = grad;
            const double *restrict s = srcs[u];
            for (int64_t i = a; i < b; i++) g[i] += s[i];
        } else {
            float *restrict g = grad;
            const float *restrict s = srcs[u];
            for (int64_t i = a; i < b; i++) g[i] += s[i];
        }
    }
}

/* The per-use sums, chunk by chunk (threads take whole chunks), and, when
 * this rank computes the param's share of the norm (in->first), each
 * chunk's sum of squares while it is still in cache. */
void pipit__post_gradsum(pipit_program *p, pipit__rank_prog *r, const pipit__instr *in, void *grad,
                         void *const *srcs, int ith, int nth) {
    const pipit__param *pp = &p->params[in->param];
    int64_t nchunks = (pp->numel + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK, lo, hi;
    pipit__range(nchunks, ith, nth, &lo, &hi);
    for (int64_t c = lo; c < hi; c++) {
        int64_t a = c * PIPIT_SUMSQ_CHUNK, b = PIPIT_MIN(a + PIPIT_SUMSQ_CHUNK, pp->numel);
        sum_range(pp, grad, srcs, a, b);
        if (in->first) r->chunks[c] = chunk_sumsq(pp, grad, a, b);
    }
}

/* Chunk c's partial sum of squares, for the chunks this thread owns. */
void pipit__post_sumsq(pipit__rank_prog *r, const pipit__param *pp, const void *grad, int ith, int nth) {
    int64_t nchunks = (pp->numel + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK, lo, hi;
    pipit__range(nchunks, ith, nth, &lo, &hi);
    for (int64_t c = lo; c < hi; c++) {
        int64_t a = c * PIPIT_SUMSQ_CHUNK, b = PIPIT_MIN(a + PIPIT_SUMSQ_CHUNK, pp->numel);
        r->chunks[c] = chunk_sumsq(pp, grad, a, b);
    }
}

void pipit__post_sumsq_fin(pipit__rank_prog *r, const pipit__param *pp, int param) {
    int64_t nchunks = (pp->numel + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK;
    double s = 0;
    for (int64_t c = 0; c < nchunks; c++) s += r->chunks[c];
    r->sumsq[param] = s;
}

void pipit__post_norm(pipit_program *p, pipit__rank_prog *r) {
    double total = 0;
    for (int i = 0; i < p->nparams; i++) total += r->sumsq[i];
    r->norm = sqrt(total);
    r->clip_scale = 1.0;
    /* as torch.nn.utils.clip_grad_norm_: scale by clip / (norm + 1e-6) */
    if (p->opt.clip_norm > 0 && r->norm > p->opt.clip_norm) r->clip_scale = p->opt.clip_norm / (r->norm + 1e-6);
}

/* AdamW as torch.optim.AdamW computes it (single tensor, no foreach):
 * m, v in the param's precision, bias corrections folded into the step
 * size and the denominator. One plain loop per dtype, so it vectorises. */
typedef struct {
    double b1, b2, step_size, bc2_sqrt, eps, decay, clip;
} adamw_coef;

static adamw_coef adamw_coefs(const pipit_program *p, const pipit__param *pp, double clip) {
    const pipit_optimizer *o = &p->opt.optimizer;
    double t = (double)p->opt_step;
    adamw_coef c = {o->beta1, o->beta2, o->lr / (1.0 - pow(o->beta1, t)), sqrt(1.0 - pow(o->beta2, t)), o->eps,
                    pp->decay ? 1.0 - o->lr * o->weight_decay : 1.0, clip};
    return c;
}

static void adamw_f32(const adamw_coef *c, float *restrict w, const float *restrict gr, float *restrict m,
                      float *restrict v, int64_t lo, int64_t hi) {
    const float b1 = (float)c->b1, nb1 = (float)(1.0 - c->b1), b2 = (float)c->b2, nb2 = (float)(1.0 - c->b2);
    const float step = (float)c->step_size, bc2 = (float)c->bc2_sqrt, eps = (float)c->eps;
    const float decay = (float)c->decay, clip = (float)c->clip;
    for (int64_t i = lo; i < hi; i++) {
        float g = gr[i] * clip;
        float mi = b1 * m[i] + nb1 * g;
        float vi = b2 * v[i] + nb2 * (g * g);
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * decay - step * (mi / (sqrtf(vi) / bc2 + eps));
    }
}

static void adamw_f64(const adamw_coef *c, double *restrict w, const double *restrict gr, double *restrict m,
                      double *restrict v, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) {
        double g = gr[i] * c->clip;
        double mi = c->b1 * m[i] + (1.0 - c->b1) * g;
        double vi = c->b2 * v[i] + (1.0 - c->b2) * (g * g);
        m[i] = mi;
        v[i] = vi;
        w[i] = w[i] * c->decay - c->step_size * (mi / (sqrt(vi) / c->bc2_sqrt + c->eps));
    }
}

void pipit__post_update(pipit_program *p, pipit__rank_prog *r, int param, int ith, int nth) {
    const pipit__param *pp = &p->params[param];
    size_t off = r->param_off[param];
    uint8_t *w = r->param_block + off, *gr = r->grad_block + off;
    int64_t lo, hi;
    pipit__range(pp->numel, ith, nth, &lo, &hi);
    if (p->opt.optimizer.kind == PIPIT_OPT_ADAMW) {
        adamw_coef c = adamw_coefs(p, pp, r->clip_scale);
        if (pp->dtype == PIPIT_F64)
            adamw_f64(&c, (double *)w, (const double *)gr, (double *)(r->m_block + off), (double *)(r->v_block + off), lo, hi);
        else
            adamw_f32(&c, (float *)w, (const float *)gr, (float *)(r->m_block + off), (float *)(r->v_block + off), lo, hi);
        return;
    }
    double lr = p->opt.optimizer.lr;
    for (int64_t i = lo; i < hi; i++)
        put(w, pp->dtype, i, get(w, pp->dtype, i) - lr * (get(gr, pp->dtype, i) * r->clip_scale));
}
