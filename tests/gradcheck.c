/*
 * gradcheck.c — central-difference gradient checks (see gradcheck.h).
 */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

double gc_rand(uint64_t *s) {
    *s += 0x9E3779B97F4A7C15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static int64_t param_numel(pipit_program *p, const char *name) {
    int nd;
    int64_t shape[PIPIT_MAX_DIMS], n = 1;
    if (pipit_program_param_shape(p, name, &nd, shape)) return 0;
    for (int i = 0; i < nd; i++) n *= shape[i];
    return n;
}

void gc_init_params(pipit_program *p, uint64_t seed, double scale) {
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = param_numel(p, name);
        if (n <= 0) continue;
        double *v = malloc(sizeof(double) * (size_t)n);
        for (int64_t k = 0; k < n; k++) v[k] = scale * gc_rand(&seed);
        pipit_program_set_param(p, name, v, sizeof(double) * (size_t)n);
        free(v);
    }
}

static double loss_at(pipit_program *p, const pipit_feed *feeds, int nfeed) {
    pipit_metrics m;
    if (pipit_step(p, feeds, nfeed, 0, &m)) return NAN;
    return m.loss;
}

double gc_max_rel_error(pipit_program *p, const pipit_feed *feeds, int nfeed, double h,
                        int verbose) {
    pipit_metrics m;
    if (pipit_step(p, feeds, nfeed, 0, &m)) return -1;
    double worst = 0;
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = param_numel(p, name);
        if (n <= 0) return -1;
        size_t bytes = sizeof(double) * (size_t)n;
        double *w = malloc(bytes), *g = malloc(bytes), *fd = malloc(bytes);
        pipit_program_get_param(p, name, w, bytes);
        pipit_step(p, feeds, nfeed, 0, &m);
        pipit_program_get_grad(p, name, g, bytes);
        double gmax = 0, dmax = 0;
        for (int64_t k = 0; k < n; k++) {
            double w0 = w[k];
            w[k] = w0 + h;
            pipit_program_set_param(p, name, w, bytes);
            double lp = loss_at(p, feeds, nfeed);
            w[k] = w0 - h;
            pipit_program_set_param(p, name, w, bytes);
            double lm = loss_at(p, feeds, nfeed);
            w[k] = w0;
            pipit_program_set_param(p, name, w, bytes);
            fd[k] = (lp - lm) / (2 * h);
            gmax = fmax(gmax, fabs(fd[k]));
            dmax = fmax(dmax, fabs(fd[k] - g[k]));
        }
        double rel = dmax / fmax(gmax, 1e-8);
        if (verbose && rel > 1e-6) {
            for (int64_t k = 0; k < n; k++)
                if (fabs(fd[k] - g[k]) == dmax) {
                    fprintf(stderr, "  param %s[%lld]: autodiff %.12g, finite diff %.12g\n", name,
                            (long long)k, g[k], fd[k]);
                    break;
                }
        }
        if (rel > worst) worst = rel;
        free(w);
        free(g);
        free(fd);
    }
    return worst;
}
