/*
 * kernel_check.c — helpers of the kernel tests (kernel_check.h).
 */
#include "kernel_check.h"

size_t esz(int dt) { return dt ? sizeof(double) : sizeof(float); }

double get(const void *p, int dt, int64_t i) {
    return dt ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

void set(void *p, int dt, int64_t i, double v) {
    if (dt)
        ((double *)p)[i] = v;
    else
        ((float *)p)[i] = (float)v;
}

static uint64_t rng_state = 1;
double urand(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2 - 1;
}

void *rbuf(int dt, int64_t n, double amp, double **ref) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * esz(dt));
    *ref = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        set(p, dt, i, amp * urand());
        (*ref)[i] = get(p, dt, i);
    }
    return p;
}

void *obuf(int dt, int64_t n) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * esz(dt));
    memset(p, 0xff, (size_t)(n > 0 ? n : 1) * esz(dt));
    return p;
}

double tol_of(int dt) { return dt ? 1e-10 : 2e-4; }

double maxerr(const void *out, int dt, const double *ref, int64_t n) {
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(get(out, dt, i) - ref[i]) / (1 + fabs(ref[i]));
        if (!(d <= e)) e = d; /* NaN wins */
    }
    return e;
}

void run_seq(const kargs *a, int nth) {
    for (int i = 0; i < nth; i++) a->run(a, i, nth);
}

int deterministic(kargs *a) {
    static const int nths[] = {2, 3, 4, 7};
    size_t bytes = (size_t)a->nout * esz(a->dt);
    void *first = a->out, *copy0 = malloc(bytes ? bytes : 1), *ref = malloc(bytes ? bytes : 1);
    memcpy(copy0, first, bytes); /* initial contents (for accumulate) */
    run_seq(a, 1);
    memcpy(ref, first, bytes);
    int ok = 1;
    for (int k = 0; k < 4; k++) {
        void *o = malloc(bytes ? bytes : 1);
        memcpy(o, copy0, bytes);
        a->out = o;
        run_seq(a, nths[k]);
        if (memcmp(o, ref, bytes) != 0) {
            fprintf(stderr, "nth=%d differs from nth=1\n", nths[k]);
            ok = 0;
        }
        free(o);
    }
    a->out = first;
    memcpy(first, ref, bytes);
    free(copy0);
    free(ref);
    return ok;
}
