/*
 * optim.c — the post-loop of a step, run by every rank on the params it
 * holds: per-use gradient sums (added once, in use order), per-param sums
 * of squares (fixed chunks, so the bits never depend on the thread count),
 * the global norm (added in param order on every rank), clipping, and the
 * AdamW / SGD update. Element math is in double, rounded once.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "pipeline/program.h"

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

/* grad = ((acc_0 + acc_1) + acc_2) ..., elementwise, in the param's dtype. */
void pipit__post_gradsum(pipit_program *p, pipit__rank_prog *r, const pipit__instr *in, void *grad,
                         void *const *srcs, int ith, int nth) {
    (void)r;
    const pipit__param *pp = &p->params[in->param];
    int64_t lo, hi;
    pipit__range(pp->numel, ith, nth, &lo, &hi);
    size_t es = pipit__dtype_size(pp->dtype);
    if (pp->nuses == 0) {
        memset((char *)grad + lo * es, 0, (size_t)(hi - lo) * es);
        return;
    }
    memcpy((char *)grad + lo * es, (const char *)srcs[0] + lo * es, (size_t)(hi - lo) * es);
    for (int u = 1; u < pp->nuses; u++) {
        if (pp->dtype == PIPIT_F64) {
            double *g = grad;
            const double *a = srcs[u];
            for (int64_t i = lo; i < hi; i++) g[i] += a[i];
        } else {
            float *g = grad;
            const float *a = srcs[u];
            for (int64_t i = lo; i < hi; i++) g[i] += a[i];
        }
    }
}

/* Chunk c's partial sum of squares, for the chunks this thread owns. */
void pipit__post_sumsq(pipit__rank_prog *r, const pipit__param *pp, const void *grad, int ith, int nth) {
    int64_t nchunks = (pp->numel + PIPIT_SUMSQ_CHUNK - 1) / PIPIT_SUMSQ_CHUNK, lo, hi;
    pipit__range(nchunks, ith, nth, &lo, &hi);
    for (int64_t c = lo; c < hi; c++) {
        int64_t a = c * PIPIT_SUMSQ_CHUNK, b = PIPIT_MIN(a + PIPIT_SUMSQ_CHUNK, pp->numel);
        double s = 0;
        for (int64_t i = a; i < b; i++) {
            double v = get(grad, pp->dtype, i);
            s += v * v;
        }
        r->chunks[c] = s;
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

static void adamw(const pipit_program *p, const pipit__param *pp, void *w, const void *gr, void *m, void *v,
                  double clip, int64_t lo, int64_t hi) {
    const pipit_optimizer *o = &p->opt.optimizer;
    double t = (double)p->opt_step;
    double bc1 = 1.0 - pow(o->beta1, t), bc2 = 1.0 - pow(o->beta2, t);
    double step_size = o->lr / bc1, bc2_sqrt = sqrt(bc2);
    double decay = pp->decay ? 1.0 - o->lr * o->weight_decay : 1.0;
    for (int64_t i = lo; i < hi; i++) {
        double g = get(gr, pp->dtype, i) * clip;
        double mi = o->beta1 * get(m, pp->dtype, i) + (1.0 - o->beta1) * g;
        double vi = o->beta2 * get(v, pp->dtype, i) + (1.0 - o->beta2) * g * g;
        put(m, pp->dtype, i, mi);
        put(v, pp->dtype, i, vi);
        double wi = get(w, pp->dtype, i) * decay;
        put(w, pp->dtype, i, wi - step_size * mi / (sqrt(vi) / bc2_sqrt + o->eps));
    }
}

void pipit__post_update(pipit_program *p, pipit__rank_prog *r, int param, int ith, int nth) {
    const pipit__param *pp = &p->params[param];
    size_t off = r->param_off[param];
    uint8_t *w = r->param_block + off, *gr = r->grad_block + off;
    int64_t lo, hi;
    pipit__range(pp->numel, ith, nth, &lo, &hi);
    if (p->opt.optimizer.kind == PIPIT_OPT_ADAMW) {
        adamw(p, pp, w, gr, r->m_block + off, r->v_block + off, r->clip_scale, lo, hi);
        return;
    }
    double lr = p->opt.optimizer.lr;
    for (int64_t i = lo; i < hi; i++)
        put(w, pp->dtype, i, get(w, pp->dtype, i) - lr * (get(gr, pp->dtype, i) * r->clip_scale));
}
