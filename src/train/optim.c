/*
 * optim.c — the post-loop of a step: per-use gradient sums (added once, in
 * use order), the global gradient norm (per-param sums of squares added in
 * the fixed param order), clipping, and the AdamW / SGD updates. Element
 * math is in double and rounded once, so results match PyTorch to ~1e-7.
 */
#include <math.h>
#include <string.h>

#include "pipeline/program.h"

pipit_optimizer pipit_adamw(double lr, double beta1, double beta2, double eps,
                            double weight_decay) {
    return (pipit_optimizer){PIPIT_OPT_ADAMW, lr, beta1, beta2, eps, weight_decay};
}

pipit_optimizer pipit_sgd(double lr) { return (pipit_optimizer){PIPIT_OPT_SGD, lr, 0, 0, 0, 0}; }

/* Elements of a param as double, whatever its dtype. */
static double get(const uint8_t *base, pipit_dtype dt, int64_t i) {
    return dt == PIPIT_F64 ? ((const double *)base)[i] : (double)((const float *)base)[i];
}
static void put(uint8_t *base, pipit_dtype dt, int64_t i, double v) {
    if (dt == PIPIT_F64) ((double *)base)[i] = v;
    else ((float *)base)[i] = (float)v;
}

/* grad = acc_0 + acc_1 + ... in use order (bitwise the same on any layout). */
static void sum_uses(pipit_program *p, const pipit__param *pp) {
    uint8_t *grad = p->grad_block + pp->off;
    size_t bytes = (size_t)pp->numel * pipit__dtype_size(pp->dtype);
    if (pp->nuses == 0) {
        memset(grad, 0, bytes);
        return;
    }
    memcpy(grad, p->acc_block + pp->acc_off[0], bytes);
    for (int u = 1; u < pp->nuses; u++) {
        const uint8_t *acc = p->acc_block + pp->acc_off[u];
        if (pp->dtype == PIPIT_F64) {
            double *g = (double *)grad;
            const double *a = (const double *)acc;
            for (int64_t i = 0; i < pp->numel; i++) g[i] += a[i];
        } else {
            float *g = (float *)grad;
            const float *a = (const float *)acc;
            for (int64_t i = 0; i < pp->numel; i++) g[i] += a[i];
        }
    }
}

/* Sum of squares in double, in index order. */
static double sum_squares(const uint8_t *grad, pipit_dtype dt, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = get(grad, dt, i);
        s += v * v;
    }
    return s;
}

double pipit__grads_finish(pipit_program *p) {
    double total = 0;
    for (int i = 0; i < p->nparams; i++) {
        const pipit__param *pp = &p->params[i];
        sum_uses(p, pp);
        total += sum_squares(p->grad_block + pp->off, pp->dtype, pp->numel);
    }
    return sqrt(total);
}

static void adamw_param(pipit_program *p, const pipit__param *pp, double clip_scale) {
    const pipit_optimizer *o = &p->opt.optimizer;
    double t = (double)p->opt_step;
    double bc1 = 1.0 - pow(o->beta1, t), bc2 = 1.0 - pow(o->beta2, t);
    double step_size = o->lr / bc1, bc2_sqrt = sqrt(bc2);
    double decay = pp->decay ? 1.0 - o->lr * o->weight_decay : 1.0;
    uint8_t *w = p->param_block + pp->off, *gr = p->grad_block + pp->off;
    uint8_t *m = p->m_block + pp->off, *v = p->v_block + pp->off;
    for (int64_t i = 0; i < pp->numel; i++) {
        double g = get(gr, pp->dtype, i) * clip_scale;
        double mi = o->beta1 * get(m, pp->dtype, i) + (1.0 - o->beta1) * g;
        double vi = o->beta2 * get(v, pp->dtype, i) + (1.0 - o->beta2) * g * g;
        put(m, pp->dtype, i, mi);
        put(v, pp->dtype, i, vi);
        double wi = get(w, pp->dtype, i) * decay;
        wi -= step_size * mi / (sqrt(vi) / bc2_sqrt + o->eps);
        put(w, pp->dtype, i, wi);
    }
}

static void sgd_param(pipit_program *p, const pipit__param *pp, double clip_scale) {
    uint8_t *w = p->param_block + pp->off, *gr = p->grad_block + pp->off;
    double lr = p->opt.optimizer.lr;
    for (int64_t i = 0; i < pp->numel; i++)
        put(w, pp->dtype, i, get(w, pp->dtype, i) - lr * (get(gr, pp->dtype, i) * clip_scale));
}

pipit_status pipit__optimizer_update(pipit_program *p, double clip_scale) {
    p->opt_step++;
    for (int i = 0; i < p->nparams; i++) {
        if (p->opt.optimizer.kind == PIPIT_OPT_ADAMW) adamw_param(p, &p->params[i], clip_scale);
        else sgd_param(p, &p->params[i], clip_scale);
    }
    return PIPIT_STATUS_OK;
}
