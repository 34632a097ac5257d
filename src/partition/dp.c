/*
 * dp.c — the dynamic program of automatic stage balancing. Stages end only
 * at candidate positions (after an op where a cut is valid), so the table
 * is S x (cut points + 1). Pass 1 finds the smallest possible slowest
 * stage; pass 2, with that bound fixed, picks among the cut sets that reach
 * it the one with the smallest sum of squared stage costs, so stages off
 * the critical one are balanced too (the model is only a model: the less
 * any stage leans on its error, the better).
 */
#include <math.h>

#include "partition/partition.h"
#include "util/checked.h"
#include "util/common.h"

double pipit__seg_cost(const double *cost, int a, int b) {
    double t = 0;
    for (int i = b - 1; i >= a; i--) t += cost[i];
    return t;
}

typedef struct {
    const pipit__dp_problem *pr;
    const int *pos; /* [K+1] candidate stage ends: pos[0] = 0, pos[K] = n */
    int K;
    double *best;   /* [S * (K+1)] */
    int *from;      /* [S * (K+1)] argmin of pass 2 */
} dp_ctx;

enum { BY_TIME, BY_BYTES, BY_SQUARES };

static int fits(const dp_ctx *c, int s, int a, int b) {
    const pipit__dp_problem *pr = c->pr;
    return !pr->bytes || pr->bytes(pr->ctx, s, a, b) <= pr->limit;
}

/* One pass over the table. BY_TIME: the smallest slowest stage within the
 * memory limit; BY_BYTES: the smallest largest stage memory, no limit;
 * BY_SQUARES: the smallest sum of squares with every stage <= bound. The
 * stage cost of [pos[i], pos[j]) is grown by i walking down from j, adding
 * ops right to left exactly as pipit__seg_cost does. Returns the value for
 * all S stages covering the n ops (INFINITY: impossible). */
static double pass(dp_ctx *c, int mode, double bound) {
    const pipit__dp_problem *pr = c->pr;
    int K = c->K, S = pr->S;
    for (int s = 0; s < S; s++)
        for (int j = 0; j <= K; j++) {
            double *cell = &c->best[s * (K + 1) + j];
            *cell = INFINITY;
            c->from[s * (K + 1) + j] = -1;
            double t = 0;
            for (int i = j - 1; i >= 0; i--) {
                for (int k = c->pos[i + 1] - 1; k >= c->pos[i]; k--) t += pr->cost[k];
                if (s == 0 && i > 0) continue;
                double prev = s == 0 ? 0 : c->best[(s - 1) * (K + 1) + i];
                if (prev == INFINITY) continue;
                double v;
                if (mode == BY_BYTES) {
                    v = PIPIT_MAX(prev, pr->bytes(pr->ctx, s, c->pos[i], c->pos[j]));
                } else {
                    if (mode == BY_SQUARES ? t > bound : 0) continue;
                    if (!fits(c, s, c->pos[i], c->pos[j])) continue;
                    v = mode == BY_TIME ? PIPIT_MAX(prev, t) : prev + t * t;
                }
                if (v < *cell) {
                    *cell = v;
                    c->from[s * (K + 1) + j] = i;
                }
            }
        }
    return c->best[(S - 1) * (K + 1) + K];
}

/* Ranks holding more than one stage under pr->rank_of. */
static int shares_a_rank(const pipit__dp_problem *pr) {
    if (!pr->rank_of) return 0;
    uint8_t *seen = pipit__calloc((size_t)pr->S, 1);
    int shared = 0;
    for (int s = 0; s < pr->S && seen && !shared; s++) {
        int r = pr->rank_of[s];
        if (r < 0 || r >= pr->S) continue;
        shared = seen[r];
        seen[r] = 1;
    }
    pipit__free(seen);
    return shared;
}

/* Candidate stage ends besides 0: K. */
static int candidates(const pipit__dp_problem *pr) {
    int K = 1;
    for (int i = 0; i + 1 < pr->n; i++) K += pr->cut_ok[i] != 0;
    return K;
}

/* C(K - 1, S - 1): the cut sets, as a double (large counts only compare). */
static double cut_sets(int K, int S) {
    double c = 1;
    for (int k = 1; k < S && c <= PIPIT__EXHAUSTIVE_MAX; k++) c = c * (K - S + k) / k;
    return c;
}

int pipit__dp_balances_ranks(const pipit__dp_problem *pr) {
    return pr->n >= 1 && pr->S >= 1 && shares_a_rank(pr) && candidates(pr) >= pr->S &&
           cut_sets(candidates(pr), pr->S) <= PIPIT__EXHAUSTIVE_MAX;
}

/* Every cut set (S - 1 of the K - 1 inner candidates, in lexicographic
 * order): the smallest largest rank load, then the smallest sum of squared
 * rank loads, first found on ties. Stage costs come from one table of
 * candidate-to-candidate sums grown right to left, as pass() grows them. */
static pipit_status exhaustive(const dp_ctx *c, int *bounds) {
    const pipit__dp_problem *pr = c->pr;
    int K = c->K, S = pr->S, R = 0;
    for (int s = 0; s < S; s++) R = PIPIT_MAX(R, pr->rank_of[s] + 1);
    size_t K1 = (size_t)K + 1;
    double *T = pipit__malloc(sizeof(double) * K1 * K1), *load = pipit__calloc((size_t)R, sizeof(double));
    int *idx = pipit__malloc(sizeof(int) * ((size_t)S + 1));
    if (!T || !load || !idx) {
        pipit__free(T);
        pipit__free(load);
        pipit__free(idx);
        return pipit__err(PIPIT_STATUS_NOMEM, "partition: out of memory");
    }
    for (int j = 0; j <= K; j++) {
        double t = 0;
        for (int i = j - 1; i >= 0; i--) {
            for (int k = c->pos[i + 1] - 1; k >= c->pos[i]; k--) t += pr->cost[k];
            T[(size_t)i * K1 + (size_t)j] = t;
        }
    }
    double best = INFINITY, best_sq = INFINITY;
    idx[0] = 0, idx[S] = K;
    for (int s = 1; s < S; s++) idx[s] = s; /* the first cut set */
    for (;;) {
        int ok = 1;
        for (int r = 0; r < R; r++) load[r] = 0;
        for (int s = 0; s < S && ok; s++) {
            ok = fits(c, s, c->pos[idx[s]], c->pos[idx[s + 1]]);
            load[pr->rank_of[s]] += T[(size_t)idx[s] * K1 + (size_t)idx[s + 1]];
        }
        double mx = 0, sq = 0;
        for (int r = 0; r < R; r++) mx = PIPIT_MAX(mx, load[r]), sq += load[r] * load[r];
        if (ok && (mx < best || (mx == best && sq < best_sq))) {
            best = mx, best_sq = sq;
            for (int s = 0; s <= S; s++) bounds[s] = c->pos[idx[s]];
        }
        int s = S - 1; /* the next cut set: bump the last index that can move */
        while (s >= 1 && idx[s] == K - S + s) s--;
        if (s < 1) break;
        idx[s]++;
        for (int t = s + 1; t < S; t++) idx[t] = idx[t - 1] + 1;
    }
    pipit__free(T);
    pipit__free(load);
    pipit__free(idx);
    return best < INFINITY ? PIPIT_STATUS_OK : PIPIT_STATUS_INVALID;
}

pipit_status pipit__partition_dp(const pipit__dp_problem *pr, int *bounds, double *worst, double *min_limit) {
    int n = pr->n, S = pr->S, K = 0;
    if (n < 1 || S < 1) return PIPIT_STATUS_INVALID;
    int *pos = pipit__malloc(sizeof(int) * ((size_t)n + 1));
    if (!pos) return pipit__err(PIPIT_STATUS_NOMEM, "partition: out of memory");
    pos[0] = 0;
    for (int i = 0; i + 1 < n; i++)
        if (pr->cut_ok[i]) pos[++K] = i + 1;
    pos[++K] = n;
    if (S > K) { /* fewer than S - 1 cut points */
        pipit__free(pos);
        return PIPIT_STATUS_INVALID;
    }
    size_t cells, bytes; /* S <= K <= n: at most (n + 1)^2 cells */
    int big = !pipit__mul_size((size_t)S, (size_t)K + 1, &cells) || !pipit__mul_size(cells, sizeof(double), &bytes);
    dp_ctx c = {pr, pos, K, big ? NULL : pipit__malloc(bytes), big ? NULL : pipit__malloc(cells * sizeof(int))};
    pipit_status st = PIPIT_STATUS_OK;
    if (!c.best || !c.from) {
        st = pipit__err(PIPIT_STATUS_NOMEM, "partition: out of memory (a table of %d stages x %d cut points)", S, K);
    } else {
        double w = pass(&c, BY_TIME, 0);
        if (w == INFINITY) {
            if (min_limit && pr->bytes) *min_limit = pass(&c, BY_BYTES, 0);
            st = PIPIT_STATUS_INVALID;
        } else if (pipit__dp_balances_ranks(pr)) {
            st = exhaustive(&c, bounds); /* some cut set fits: pass 1 found one */
        } else {
            pass(&c, BY_SQUARES, w + fabs(w) * 1e-12);
            for (int s = S - 1, j = K; s >= 0; s--) {
                bounds[s + 1] = pos[j];
                j = c.from[s * (K + 1) + j];
                PIPIT_ASSERT(j >= 0);
                if (s == 0) bounds[0] = pos[j];
            }
        }
        if (!st) {
            *worst = 0;
            for (int s = 0; s < S; s++) *worst = PIPIT_MAX(*worst, pipit__seg_cost(pr->cost, bounds[s], bounds[s + 1]));
        }
    }
    pipit__free(c.best);
    pipit__free(c.from);
    pipit__free(pos);
    return st;
}
