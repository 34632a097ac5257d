/*
 * test_partition.c — automatic stage balancing. The dynamic program against
 * brute force over every cut set of small random op sequences (optimal
 * slowest stage, then the smallest sum of squares, memory limits and the
 * smallest feasible limit); GPT-2 re-cut by pipit_partition trains bit for
 * bit like the builder's even split at P = 2 and P = 4; the user's yields
 * as hints; the errors.
 */
#include <math.h>
#include <string.h>

#include "partition/partition.h"
#include "runtime/program.h"
#include "pipit_gpt2.h"
#include "test.h"

/* ---- the DP against brute force */

typedef struct {
    const double *op_bytes; /* [n] */
    double per_stage;       /* + per_stage * (s + 1): stages differ, as in-flight counts do */
} mem_ctx;

static double toy_bytes(void *ctx, int s, int a, int b) {
    const mem_ctx *m = ctx;
    double t = m->per_stage * (s + 1);
    for (int i = a; i < b; i++) t += m->op_bytes[i];
    return t;
}

typedef struct {
    double best_max, best_sq, min_bytes; /* INFINITY: none */
} brute_result;

/* Every set of S - 1 allowed cuts, as a bitmask over positions 0..n-2. */
static brute_result brute(const pipit__dp_problem *pr) {
    brute_result r = {INFINITY, INFINITY, INFINITY};
    int n = pr->n;
    for (unsigned mask = 0; mask < (1u << (n - 1)); mask++) {
        if (__builtin_popcount(mask) != pr->S - 1) continue;
        int ok = 1, a = 0, s = 0;
        double mx = 0, sq = 0, mb = 0;
        for (int i = 0; i < n && ok; i++) {
            if (i < n - 1 && !((mask >> i) & 1)) continue;
            if (i < n - 1 && !pr->cut_ok[i]) ok = 0;
            double t = pipit__seg_cost(pr->cost, a, i + 1);
            double bytes = pr->bytes ? pr->bytes(pr->ctx, s, a, i + 1) : 0;
            mb = fmax(mb, bytes);
            if (pr->bytes && bytes > pr->limit) ok = ok == 1 ? 2 : ok; /* cuts valid, memory not */
            mx = fmax(mx, t);
            sq += t * t;
            a = i + 1;
            s++;
        }
        if (!ok) continue;
        r.min_bytes = fmin(r.min_bytes, mb);
        if (ok == 2) continue;
        if (mx < r.best_max) r.best_max = mx, r.best_sq = INFINITY;
        if (mx == r.best_max) r.best_sq = fmin(r.best_sq, sq);
    }
    return r;
}

static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

PIPIT_TEST(partition_dp_matches_brute_force) {
    uint64_t seed = 12345;
    int checked = 0, infeasible = 0, limited = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int n = 1 + (int)(rng_next(&seed) % 11), S = 1 + (int)(rng_next(&seed) % 5);
        double cost[12], obytes[12];
        uint8_t cut_ok[12];
        int small = trial % 2; /* small integer costs: many ties */
        for (int i = 0; i < n; i++) {
            cost[i] = small ? (double)(rng_next(&seed) % 4) : (double)(rng_next(&seed) % 100000) / 997.0;
            obytes[i] = (double)(rng_next(&seed) % 50);
            cut_ok[i] = rng_next(&seed) % 4 != 0;
        }
        mem_ctx mc = {obytes, (double)(rng_next(&seed) % 20)};
        int with_mem = trial % 3 == 0;
        pipit__dp_problem pr = {n, S, cost, cut_ok, with_mem ? toy_bytes : NULL, &mc,
                                with_mem ? (double)(rng_next(&seed) % 200) : 0, NULL};
        brute_result want = brute(&pr);
        int bounds[8];
        double worst = -1, min_limit = -1;
        pipit_status s = pipit__partition_dp(&pr, bounds, &worst, &min_limit);
        if (want.best_max == INFINITY) {
            ASSERT_EQ_I64(s, PIPIT_STATUS_INVALID);
            if (with_mem && want.min_bytes < INFINITY) { /* the cuts exist: memory was the problem */
                ASSERT_TRUE(min_limit == want.min_bytes);
                limited++;
            }
            infeasible++;
            continue;
        }
        ASSERT_EQ_I64(s, PIPIT_STATUS_OK);
        ASSERT_TRUE(worst == want.best_max);
        /* the DP's own cut set: valid, within the limit, optimal, least squares */
        ASSERT_EQ_I64(bounds[0], 0);
        ASSERT_EQ_I64(bounds[S], n);
        double mx = 0, sq = 0;
        for (int k = 0; k < S; k++) {
            ASSERT_TRUE(bounds[k] < bounds[k + 1]);
            if (k > 0) ASSERT_TRUE(cut_ok[bounds[k] - 1]);
            if (with_mem) ASSERT_TRUE(toy_bytes(&mc, k, bounds[k], bounds[k + 1]) <= pr.limit);
            double t = pipit__seg_cost(cost, bounds[k], bounds[k + 1]);
            mx = fmax(mx, t);
            sq += t * t;
        }
        ASSERT_TRUE(mx == want.best_max);
        ASSERT_TRUE(fabs(sq - want.best_sq) <= 1e-9 * fmax(1, want.best_sq));
        checked++;
    }
    ASSERT_TRUE(checked > 1000 && infeasible > 100 && limited > 20); /* every branch was exercised */
}

/* The largest rank load of bounds (stages summed per rank_of), and the
 * sum of squared rank loads. */
static void rank_loads(const double *cost, const int *bounds, int S, const int *rank_of, double *mx, double *sq) {
    double load[8] = {0};
    for (int s = 0; s < S; s++) load[rank_of[s]] += pipit__seg_cost(cost, bounds[s], bounds[s + 1]);
    *mx = 0, *sq = 0;
    for (int r = 0; r < 8; r++) *mx = fmax(*mx, load[r]), *sq += load[r] * load[r];
}

/* Several stages per rank (interleaved: s mod P; a V: s and 2P-1-s): the
 * smallest largest rank load, against every cut set. */
PIPIT_TEST(partition_dp_balances_ranks_like_brute_force) {
    uint64_t seed = 777;
    int checked = 0;
    for (int trial = 0; trial < 2000; trial++) {
        int n = 2 + (int)(rng_next(&seed) % 10), S = 2 + 2 * (int)(rng_next(&seed) % 2), P = S / 2;
        double cost[12], obytes[12];
        uint8_t cut_ok[12];
        int rank_of[4];
        for (int i = 0; i < n; i++) {
            cost[i] = trial % 2 ? (double)(rng_next(&seed) % 4) : (double)(rng_next(&seed) % 100000) / 997.0;
            obytes[i] = (double)(rng_next(&seed) % 50);
            cut_ok[i] = rng_next(&seed) % 4 != 0;
        }
        for (int s = 0; s < S; s++) rank_of[s] = trial % 3 ? s % P : (s < P ? s : 2 * P - 1 - s);
        mem_ctx mc = {obytes, 0};
        int with_mem = trial % 4 == 0;
        pipit__dp_problem pr = {n, S, cost, cut_ok, with_mem ? toy_bytes : NULL, &mc, with_mem ? 120 : 0, rank_of};
        int K = 1;
        for (int i = 0; i + 1 < n; i++) K += cut_ok[i];
        ASSERT_EQ_I64(pipit__dp_balances_ranks(&pr), K >= S); /* few cut sets here: always exhaustive */
        double best = INFINITY, best_sq = INFINITY;
        for (unsigned mask = 0; mask < (1u << (n - 1)); mask++) {
            if (__builtin_popcount(mask) != S - 1) continue;
            int bounds[5] = {0}, k = 1, ok = 1;
            for (int i = 0; i + 1 < n; i++)
                if ((mask >> i) & 1) ok &= cut_ok[i], bounds[k++] = i + 1;
            bounds[S] = n;
            for (int s = 0; s < S && ok && with_mem; s++) ok = toy_bytes(&mc, s, bounds[s], bounds[s + 1]) <= pr.limit;
            if (!ok) continue;
            double mx, sq;
            rank_loads(cost, bounds, S, rank_of, &mx, &sq);
            if (mx < best) best = mx, best_sq = INFINITY;
            if (mx == best) best_sq = fmin(best_sq, sq);
        }
        int bounds[5];
        double worst;
        pipit_status st = pipit__partition_dp(&pr, bounds, &worst, NULL);
        ASSERT_EQ_I64(st, best == INFINITY ? PIPIT_STATUS_INVALID : PIPIT_STATUS_OK);
        if (st) continue;
        double mx, sq;
        rank_loads(cost, bounds, S, rank_of, &mx, &sq);
        ASSERT_TRUE(mx == best);
        ASSERT_TRUE(fabs(sq - best_sq) <= 1e-9 * fmax(1, best_sq));
        checked++;
    }
    ASSERT_TRUE(checked > 500);
    /* too many cut sets to try (C(199, 7) > 2e6): the stage DP decides */
    double cost[200];
    uint8_t cut_ok[200];
    int rank_of[8], bounds[9];
    for (int i = 0; i < 200; i++) cost[i] = 1 + i % 7, cut_ok[i] = 1;
    for (int s = 0; s < 8; s++) rank_of[s] = s % 4;
    pipit__dp_problem big = {200, 8, cost, cut_ok, NULL, NULL, 0, rank_of};
    ASSERT_TRUE(!pipit__dp_balances_ranks(&big));
    double worst;
    ASSERT_OK(pipit__partition_dp(&big, bounds, &worst, NULL));
    ASSERT_TRUE(worst <= 200.0 * 4 / 8 + 7); /* stage-balanced: within an op of the mean */
}

/* ---- GPT-2: the partitioned graph trains like the even split */

enum { GV = 512, GT = 8, GL = 4, GH = 2, GC = 16, GB = 2, GM = 4, STEPS = 3 };

static pipit_gpt2_config gcfg(int stages) { return (pipit_gpt2_config){GV, GT, GT, GL, GH, GC, GB, stages, PIPIT_F32, 0}; }

static void gfeeds(int step, int32_t *buf, pipit_feed *feeds) {
    for (int m = 0; m < GM; m++) {
        int32_t *tok = buf + (size_t)m * 3 * GB * GT, *tgt = tok + GB * GT, *pos = tgt + GB * GT;
        for (int i = 0; i < GB * GT; i++) {
            tok[i] = (step * 37 + m * 101 + i * 13) % GV;
            tgt[i] = (tok[i] * 7 + 3) % GV;
            pos[i] = i % GT;
        }
        size_t nb = sizeof(int32_t) * GB * GT;
        feeds[3 * m] = (pipit_feed){PIPIT_GPT2_TOKENS, tok, nb};
        feeds[3 * m + 1] = (pipit_feed){PIPIT_GPT2_TARGETS, tgt, nb};
        feeds[3 * m + 2] = (pipit_feed){PIPIT_GPT2_POSITIONS, pos, nb};
    }
}

static pipit_program *compile_gpt2(pipit_graph *g, pipit_val loss, pipit_schedule *sch) {
    pipit_options o = {.schedule = sch, .microbatches = GM, .optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1),
                       .clip_norm = 0.5};
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &o, &p)) {
        fprintf(stderr, "compile: %s\n", pipit_errmsg());
        return NULL;
    }
    pipit_gpt2_config c = gcfg(1);
    pipit_gpt2_init(p, &c, 11);
    return p;
}

/* Whether every param of a and b holds the same bits. */
static int same_params(const pipit_program *a, const pipit_program *b) {
    int n = pipit_program_num_params(a), same = n == pipit_program_num_params(b);
    for (int i = 0; i < n && same; i++) {
        const char *name = pipit_program_param_name(a, i);
        int64_t numel = 0;
        pipit_program_param_numel(a, name, &numel);
        size_t nb = sizeof(float) * (size_t)numel;
        float *x = malloc(nb), *y = malloc(nb);
        same = !pipit_program_get_param(a, name, x, nb) && !pipit_program_get_param(b, name, y, nb) &&
               memcmp(x, y, nb) == 0;
        if (!same) fprintf(stderr, "param %s differs\n", name);
        free(x);
        free(y);
    }
    return same;
}

static void check_auto_equals_even(int P) {
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, P, 1, GM, &sch));
    pipit_gpt2_config even_c = gcfg(P), auto_c = gcfg(1);
    pipit_graph *ge = pipit_graph_new(), *ga = pipit_graph_new();
    pipit_val le = pipit_gpt2_build(ge, &even_c), la = pipit_gpt2_build(ga, &auto_c);
    /* the even split's predicted costs: its own yields are the only cuts */
    pipit_partition_result *pe = NULL, *pa = NULL;
    pipit_partition_options eo = {.schedule = sch, .yields = PIPIT_PARTITION_YIELDS_AS_CUTS}, ao = {.schedule = sch};
    ASSERT_OK(pipit_partition(ge, le, &eo, &pe));
    ASSERT_OK(pipit_partition(ga, la, &ao, &pa));
    double we = 0, wa = 0;
    int differs = 0;
    for (int s = 0; s < P; s++) {
        we = fmax(we, pipit_partition_stage_cost(pe, s));
        wa = fmax(wa, pipit_partition_stage_cost(pa, s));
        int a0, a1, e0, e1;
        pipit_partition_stage_ops(pa, s, &a0, &a1);
        pipit_partition_stage_ops(pe, s, &e0, &e1);
        differs |= a1 != e1;
    }
    ASSERT_TRUE(differs);  /* the head moves the cuts: the test compares two layouts */
    ASSERT_TRUE(wa < we);  /* and the DP found a better one than the even split */
    /* 1F1B: the slowest stage runs all M microbatches, and nothing waits longer than the fill */
    double te = 0, ta = 0;
    ASSERT_OK(pipit_partition_simulate(pe, sch, &te));
    ASSERT_OK(pipit_partition_simulate(pa, sch, &ta));
    ASSERT_TRUE(te >= GM * we * (1 - 1e-12) && te <= (GM + P - 1) * we * (1 + 1e-12));
    ASSERT_TRUE(ta >= GM * wa * (1 - 1e-12) && ta <= (GM + P - 1) * wa * (1 + 1e-12));
    ASSERT_TRUE(ta < te);
    ASSERT_OK(pipit_partition_apply(pa, ga, &la, 1));
    pipit_program *pev = compile_gpt2(ge, le, sch), *pau = compile_gpt2(ga, la, sch);
    ASSERT_TRUE(pev && pau);
    int32_t buf[3 * GB * GT * GM];
    pipit_feed feeds[3 * GM];
    for (int step = 0; step < STEPS; step++) {
        gfeeds(step, buf, feeds);
        pipit_metrics me, ma;
        ASSERT_OK(pipit_step(pev, feeds, 3, 1, &me));
        ASSERT_OK(pipit_step(pau, feeds, 3, 1, &ma));
        ASSERT_TRUE(memcmp(&me.loss, &ma.loss, sizeof me.loss) == 0);
    }
    ASSERT_TRUE(same_params(pev, pau));
    pipit_program_free(pev);
    pipit_program_free(pau);
    pipit_partition_free(pe);
    pipit_partition_free(pa);
    pipit_graph_free(ge);
    pipit_graph_free(ga);
    pipit_schedule_free(sch);
}

PIPIT_TEST(partition_gpt2_auto_bitwise_equals_even_p2) { check_auto_equals_even(2); }
PIPIT_TEST(partition_gpt2_auto_bitwise_equals_even_p4) { check_auto_equals_even(4); }

/* ---- the user's yields */

static int count_yields(const pipit_graph *g) {
    int k = 0;
    for (int32_t i = 0; i < g->n; i++) k += g->nodes[i].op == PIPIT_OP_YIELD;
    return k;
}

PIPIT_TEST(partition_yields_as_cuts_takes_only_the_users_yields) {
    pipit_gpt2_config c = gcfg(4);
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    int32_t yields[3], ny = 0;
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].op == PIPIT_OP_YIELD) yields[ny++] = i;
    ASSERT_EQ_I64(ny, 3);
    pipit_partition_result *p = NULL;
    pipit_partition_options o = {.stages = 4, .yields = PIPIT_PARTITION_YIELDS_AS_CUTS};
    ASSERT_OK(pipit_partition(g, loss, &o, &p));
    for (int s = 1; s < 4; s++) { /* all three taken: each stage ends on the value its yield carries */
        int a, b;
        ASSERT_OK(pipit_partition_stage_ops(p, s - 1, &a, &b));
        ASSERT_EQ_I64(pipit_partition_op_node(p, b - 1), pipit__unyield(g, yields[s - 1]));
    }
    pipit_partition_free(p);
    o.stages = 2; /* one of three; apply leaves exactly that one */
    ASSERT_OK(pipit_partition(g, loss, &o, &p));
    ASSERT_OK(pipit_partition_apply(p, g, &loss, 1));
    ASSERT_EQ_I64(count_yields(g), 1);
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, GM, &sch));
    pipit_program *prog = compile_gpt2(g, loss, sch);
    ASSERT_TRUE(prog != NULL);
    pipit_program_free(prog);
    pipit_schedule_free(sch);
    pipit_partition_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(partition_replace_ignores_the_users_yields) {
    pipit_gpt2_config c4 = gcfg(4), c1 = gcfg(1);
    pipit_graph *g4 = pipit_graph_new(), *g1 = pipit_graph_new();
    pipit_val l4 = pipit_gpt2_build(g4, &c4), l1 = pipit_gpt2_build(g1, &c1);
    pipit_partition_result *p4 = NULL, *p1 = NULL;
    pipit_partition_options o = {.stages = 3};
    ASSERT_OK(pipit_partition(g4, l4, &o, &p4));
    ASSERT_OK(pipit_partition(g1, l1, &o, &p1));
    ASSERT_EQ_I64(pipit_partition_num_ops(p4), pipit_partition_num_ops(p1));
    for (int s = 0; s < 3; s++) {
        int a4, b4, a1, b1;
        ASSERT_OK(pipit_partition_stage_ops(p4, s, &a4, &b4));
        ASSERT_OK(pipit_partition_stage_ops(p1, s, &a1, &b1));
        ASSERT_TRUE(a4 == a1 && b4 == b1);
        ASSERT_TRUE(pipit_partition_stage_cost(p4, s) == pipit_partition_stage_cost(p1, s));
    }
    ASSERT_OK(pipit_partition_apply(p4, g4, &l4, 1));
    ASSERT_EQ_I64(count_yields(g4), 2); /* the builder's three are gone, the partition's two are in */
    ASSERT_EQ_I64(g4->n, g1->n + 2);
    pipit_partition_free(p4);
    pipit_partition_free(p1);
    pipit_graph_free(g4);
    pipit_graph_free(g1);
}

/* ---- errors */

PIPIT_TEST(partition_errors_name_the_problem) {
    pipit_gpt2_config c = gcfg(1);
    pipit_graph *g = pipit_graph_new(), *other = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c), ol = pipit_gpt2_build(other, &c);
    pipit_partition_result *p = NULL;
    pipit_partition_options o = {.stages = 200};
    ASSERT_STATUS(pipit_partition(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("valid cut point");
    ASSERT_TRUE(p == NULL);
    o.stages = 0;
    ASSERT_STATUS(pipit_partition(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("stages must be in");
    o.stages = 2;
    ASSERT_STATUS(pipit_partition(g, ol, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("not a scalar value of this graph");
    ASSERT_STATUS(pipit_partition(NULL, loss, &o, &p), PIPIT_STATUS_MISUSE);
    o.gemm_flops = -1;
    ASSERT_STATUS(pipit_partition(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("gemm_flops");
    o.gemm_flops = 0;
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 4, 1, GM, &sch));
    o.schedule = sch;
    ASSERT_STATUS(pipit_partition(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("but the schedule has 4 stages");
    o.stages = 0;
    /* a limit below every cut set: the message names the smallest that works */
    o.mem_limit = 1000;
    ASSERT_STATUS(pipit_partition(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("memory limit of 1000 bytes");
    const char *at = strstr(pipit_errmsg(), "smallest feasible limit is ");
    ASSERT_TRUE(at != NULL);
    double smallest = atof(at + strlen("smallest feasible limit is "));
    ASSERT_TRUE(smallest > 1000);
    o.mem_limit = smallest + 1; /* printed rounded to a byte */
    ASSERT_OK(pipit_partition(g, loss, &o, &p));
    double most = 0;
    for (int s = 0; s < 4; s++) most = fmax(most, pipit_partition_stage_bytes(p, s));
    ASSERT_TRUE(most <= o.mem_limit && most >= smallest - 1); /* the bound is tight */
    o.mem_limit = smallest * 0.999;
    pipit_partition_result *q = NULL;
    ASSERT_STATUS(pipit_partition(g, loss, &o, &q), PIPIT_STATUS_INVALID);
    pipit_schedule *s2 = NULL;
    double t = 0;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, GM, &s2));
    ASSERT_STATUS(pipit_partition_simulate(p, s2, &t), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("the schedule has 2 stages, the partition 4");
    pipit_schedule_free(s2);
    /* getters out of range, apply to another graph, apply twice, a compiled graph */
    ASSERT_TRUE(pipit_partition_stage_cost(p, 4) == 0);
    ASSERT_MSG_HAS("out of range");
    ASSERT_EQ_I64(pipit_partition_stages(NULL), -1);
    ASSERT_STATUS(pipit_partition_apply(p, other, &ol, 1), PIPIT_STATUS_INVALID);
    ASSERT_OK(pipit_partition_apply(p, g, &loss, 1));
    ASSERT_STATUS(pipit_partition_apply(p, g, &loss, 1), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("apply once");
    pipit_program *prog = compile_gpt2(g, loss, sch);
    ASSERT_TRUE(prog != NULL);
    o.mem_limit = 0;
    ASSERT_STATUS(pipit_partition(g, loss, &o, &q), PIPIT_STATUS_MISUSE);
    ASSERT_MSG_HAS("already compiled");
    pipit_program_free(prog);
    pipit_partition_free(p);
    pipit_schedule_free(sch);
    pipit_graph_free(g);
    pipit_graph_free(other);
}

/* ---- measured costs */

PIPIT_TEST(partition_measured_costs_add_up_to_the_profile) {
    pipit_gpt2_config c = gcfg(1);
    pipit_graph *pg = pipit_graph_new(), *g = pipit_graph_new();
    pipit_val pl = pipit_gpt2_build(pg, &c), loss = pipit_gpt2_build(g, &c);
    pipit_program *prof = compile_gpt2(pg, pl, NULL);
    ASSERT_TRUE(prof != NULL);
    pipit_partition_result *p = NULL;
    pipit_partition_options o = {.stages = 2, .profile = prof};
    ASSERT_OK(pipit_program_set_profile(prof, 1));
    ASSERT_STATUS(pipit_partition(g, loss, &o, &p), PIPIT_STATUS_INVALID); /* no step profiled yet */
    ASSERT_MSG_HAS("no profiled step");
    int32_t buf[3 * GB * GT * GM];
    pipit_feed feeds[3 * GM];
    for (int step = 0; step < 2; step++) {
        gfeeds(step, buf, feeds);
        ASSERT_OK(pipit_step(prof, feeds, 3, 1, NULL));
    }
    ASSERT_OK(pipit_partition(g, loss, &o, &p));
    /* each kind's modelled time is scaled to its measured mean, so the
     * stages add up to the measured loop work of one microbatch */
    const pipit__rank_state *rs = &prof->rs[0];
    double measured = rs->prof[PIPIT_OP_COUNT + INS_ACC];
    for (int k = 0; k < PIPIT_OP_COUNT; k++) measured += rs->prof[k];
    measured /= 2.0 * GM;
    double total = pipit_partition_stage_cost(p, 0) + pipit_partition_stage_cost(p, 1);
    ASSERT_NEAR_F64(total, measured, 1e-9 * measured);
    pipit_partition_free(p);
    pipit_program_free(prof);
    pipit_graph_free(pg);
    pipit_graph_free(g);
}

/* ---- valid cut points, by hand: a = x w1; b = gelu(a); c = b + a; d = c w2; loss = mean(d)
 * After a: only a is read later (valid). After b: a and b both are (not).
 * After c: only c; after d: only d (valid). So 4 stages are possible, 5 not. */

/* The graph with a user yield after op `at` (0..3: a, b, c, d; -1 none),
 * every later reader of that value reading the yield. */
static pipit_val residual_graph(pipit_graph *g, int at) {
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, (int64_t[]){4, 8});
    pipit_val w1 = pipit_param(g, "w1", PIPIT_F32, 2, (int64_t[]){8, 8});
    pipit_val w2 = pipit_param(g, "w2", PIPIT_F32, 2, (int64_t[]){8, 8});
    pipit_val a = pipit_matmul(g, x, w1, 0, 0);
    if (at == 0) a = pipit_yield(g, a);
    pipit_val b = pipit_gelu(g, a);
    if (at == 1) b = pipit_yield(g, b);
    pipit_val c = pipit_add(g, b, a);
    if (at == 2) c = pipit_yield(g, c);
    pipit_val d = pipit_matmul(g, c, w2, 0, 0);
    if (at == 3) d = pipit_yield(g, d);
    return pipit_mean(g, d);
}

PIPIT_TEST(partition_cut_points_carry_one_value) {
    for (int at = 0; at < 4; at++) {
        pipit_graph *g = pipit_graph_new();
        pipit_val loss = residual_graph(g, at);
        pipit_partition_result *p = NULL;
        pipit_partition_options o = {.stages = 2, .yields = PIPIT_PARTITION_YIELDS_AS_CUTS};
        pipit_status s = pipit_partition(g, loss, &o, &p);
        ASSERT_EQ_I64(s, at == 1 ? PIPIT_STATUS_INVALID : PIPIT_STATUS_OK);
        if (at == 1) ASSERT_MSG_HAS("only 0 valid cut points");
        if (p) { /* the hint taken: stage 0 ends on op `at` */
            int a, b;
            ASSERT_OK(pipit_partition_stage_ops(p, 0, &a, &b));
            ASSERT_EQ_I64(b, at + 1);
        }
        pipit_partition_free(p);
        pipit_graph_free(g);
    }
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = residual_graph(g, -1);
    pipit_partition_result *p = NULL;
    pipit_partition_options o = {.stages = 4};
    ASSERT_OK(pipit_partition(g, loss, &o, &p));
    int want[5] = {0, 1, 3, 4, 5}; /* the only 4-stage cut: a | b c | d | mean */
    for (int s = 0; s < 4; s++) {
        int a, b;
        ASSERT_OK(pipit_partition_stage_ops(p, s, &a, &b));
        ASSERT_TRUE(a == want[s] && b == want[s + 1]);
    }
    pipit_partition_free(p);
    o.stages = 5;
    ASSERT_STATUS(pipit_partition(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("only 3 valid cut points");
    pipit_graph_free(g);
}

PIPIT_TEST(partition_remat_counts_the_forward_twice) {
    pipit_gpt2_config c = gcfg(1);
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_partition_result *p = NULL, *r = NULL;
    pipit_partition_options o = {.stages = 1}, orm = {.stages = 1, .remat = 1};
    ASSERT_OK(pipit_partition(g, loss, &o, &p));
    ASSERT_OK(pipit_partition(g, loss, &orm, &r));
    double f = pipit_partition_stage_forward(p, 0), want = pipit_partition_stage_cost(p, 0) + f;
    ASSERT_TRUE(f > 0);
    ASSERT_NEAR_F64(pipit_partition_stage_cost(r, 0), want, 1e-12 * want);
    ASSERT_TRUE(pipit_partition_stage_bytes(r, 0) < pipit_partition_stage_bytes(p, 0)); /* keeps less */
    pipit_partition_free(p);
    pipit_partition_free(r);
    pipit_graph_free(g);
}
