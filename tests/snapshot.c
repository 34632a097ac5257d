/*
 * snapshot.c — reading a program's state back for run-to-run comparisons
 * (snapshot.h).
 */
#include "snapshot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *read_block(pipit_program *p, const char *name, size_t bytes, int what) {
    void *d = calloc(1, bytes ? bytes : 1);
    pipit_status s = what == 0   ? pipit_program_get_param(p, name, d, bytes)
                     : what == 1 ? pipit_program_get_grad(p, name, d, bytes)
                                 : pipit_program_get_opt_state(p, name, what - 2, d, bytes);
    if (s) fprintf(stderr, "snapshot: reading %s (%d): %s\n", name, what, pipit_errmsg());
    return d;
}

void snap_take(pipit_program *p, snapshot *s) {
    s->n = pipit_program_num_params(p);
    s->names = calloc((size_t)s->n, sizeof *s->names);
    s->bytes = calloc((size_t)s->n, sizeof *s->bytes);
    s->es = calloc((size_t)s->n, sizeof *s->es);
    void ***blocks[4] = {&s->param, &s->grad, &s->m, &s->v};
    for (int k = 0; k < 4; k++) *blocks[k] = calloc((size_t)s->n, sizeof(void *));
    int train = !pipit_program_forward_only(p);
    for (int i = 0; i < s->n; i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t numel = 0;
        pipit_dtype dt = PIPIT_F32;
        pipit_program_param_numel(p, name, &numel);
        pipit_program_param_dtype(p, name, &dt);
        s->names[i] = strdup(name);
        s->es[i] = dt == PIPIT_F64 ? 8 : 4;
        s->bytes[i] = s->es[i] * (size_t)numel;
        for (int k = 0; k < 4; k++) (*blocks[k])[i] = k == 0 || train ? read_block(p, name, s->bytes[i], k) : NULL;
    }
}

void snap_free(snapshot *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->names[i]);
        free(s->param[i]), free(s->grad[i]), free(s->m[i]), free(s->v[i]);
    }
    free(s->names), free(s->bytes), free(s->es);
    free(s->param), free(s->grad), free(s->m), free(s->v);
    memset(s, 0, sizeof *s);
}

int snap_same_bits(const snapshot *a, const snapshot *b, const char *what) {
    if (a->n != b->n) {
        fprintf(stderr, "%s: %d params vs %d\n", what, a->n, b->n);
        return 0;
    }
    void **fa[4] = {a->param, a->grad, a->m, a->v}, **fb[4] = {b->param, b->grad, b->m, b->v};
    static const char *kind[4] = {"param", "grad", "exp_avg", "exp_avg_sq"};
    for (int i = 0; i < a->n; i++)
        for (int k = 0; k < 4; k++)
            if ((fa[k][i] || fb[k][i]) &&
                (!fa[k][i] || !fb[k][i] || a->bytes[i] != b->bytes[i] || memcmp(fa[k][i], fb[k][i], a->bytes[i]))) {
                fprintf(stderr, "%s: %s of %s differs\n", what, kind[k], a->names[i]);
                return 0;
            }
    int n = a->nsteps > b->nsteps ? a->nsteps : b->nsteps;
    if (memcmp(a->losses, b->losses, sizeof(double) * (size_t)n) != 0) {
        fprintf(stderr, "%s: losses differ: %.9g vs %.9g\n", what, a->losses[n - 1], b->losses[n - 1]);
        return 0;
    }
    return 1;
}

static double element(const void *p, size_t es, size_t k) {
    return es == 8 ? ((const double *)p)[k] : (double)((const float *)p)[k];
}

double snap_rel_diff(const snapshot *a, const snapshot *b, int which) {
    double worst = 0;
    for (int i = 0; i < a->n && i < b->n; i++) {
        const void *x = which ? a->grad[i] : a->param[i], *y = which ? b->grad[i] : b->param[i];
        double d = 0, m = 0;
        for (size_t k = 0; x && y && k < a->bytes[i] / a->es[i]; k++) {
            d = fmax(d, fabs(element(x, a->es[i], k) - element(y, b->es[i], k)));
            m = fmax(m, fabs(element(x, a->es[i], k)));
        }
        if (m > 0) worst = fmax(worst, d / m);
    }
    return worst;
}
