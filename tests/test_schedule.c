/*
 * test_schedule.c — pipeline schedules: every built-in passes the checker for
 * P = 1..8 and many M and V; the simulator reproduces the textbook bubble
 * formulas exactly under unit costs; peak live activations; broken schedules
 * are rejected with messages naming the task and rank; the text format round
 * trips; bad arguments and allocation failures are reported, never crash.
 */
#include "schedule/schedule.h"

#include "test.h"

/* Microbatch counts worth trying for P ranks: below, at and above P and 2P. */
static int m_values(int P, int *out) {
    int cand[] = {1, 2, 3, P - 1, P, P + 1, 2 * P - 1, 2 * P, 2 * P + 1, 3 * P, 4 * P, 17};
    int n = 0;
    for (size_t i = 0; i < sizeof cand / sizeof *cand; i++) {
        int dup = cand[i] < 1;
        for (int j = 0; j < n && !dup; j++) dup = out[j] == cand[i];
        if (!dup) out[n++] = cand[i];
    }
    return n;
}

/* Whether (kind, P, V, M) satisfies the documented constraints. */
static int allowed(int kind, int P, int V, int M) {
    switch (kind) {
    case PIPIT_SCHED_INTERLEAVED_1F1B: return M % P == 0;
    case PIPIT_SCHED_INTERLEAVED_GPIPE: return 1;
    case PIPIT_SCHED_DUALPIPEV: return V == 2 && M >= 2 * P;
    case PIPIT_SCHED_ZB_V:
    case PIPIT_SCHED_V_HALF:
    case PIPIT_SCHED_V_MIN: return V == 2;
    /* PyTorch's rule: M a multiple of its max(1, M/P) rounds */
    case PIPIT_SCHED_INTERLEAVED_ZB: return V >= 2 && M % PIPIT_MAX(1, M / P) == 0;
    default: return V == 1;
    }
}

static int max_v(int kind) {
    switch (kind) {
    case PIPIT_SCHED_INTERLEAVED_1F1B:
    case PIPIT_SCHED_INTERLEAVED_GPIPE:
    case PIPIT_SCHED_INTERLEAVED_ZB: return 4;
    case PIPIT_SCHED_DUALPIPEV:
    case PIPIT_SCHED_ZB_V:
    case PIPIT_SCHED_V_HALF:
    case PIPIT_SCHED_V_MIN: return 2;
    default: return 1;
    }
}

/* V = 1 is tried for interleaved-zb too: it must be refused. */
static int min_v(int kind) {
    return kind == PIPIT_SCHED_DUALPIPEV || kind == PIPIT_SCHED_ZB_V || kind == PIPIT_SCHED_V_HALF ||
                   kind == PIPIT_SCHED_V_MIN
               ? 2
               : 1;
}

PIPIT_TEST(sched_builtins_pass_checker) {
    for (int kind = 0; kind < PIPIT_SCHED_COUNT; kind++)
        for (int P = 1; P <= 8; P++)
            for (int V = min_v(kind); V <= max_v(kind); V++) {
                int ms[16], nm = m_values(P, ms);
                for (int i = 0; i < nm; i++) {
                    int M = ms[i];
                    pipit_schedule *s = NULL;
                    pipit_status st = pipit_schedule_build(kind, P, V, M, &s);
                    if (!allowed(kind, P, V, M)) {
                        ASSERT_STATUS(st, PIPIT_STATUS_SCHEDULE);
                        ASSERT_TRUE(s == NULL);
                        continue;
                    }
                    if (st || pipit_schedule_check(s))
                        fprintf(stderr, "%s P=%d V=%d M=%d\n", pipit_schedule_kind_name(kind), P,
                                V, M);
                    ASSERT_OK(st);
                    ASSERT_OK(pipit_schedule_check(s));
                    ASSERT_EQ_I64(s->kind, kind);
                    ASSERT_EQ_I64(s->S, P * V);
                    ASSERT_EQ_I64(s->M, M);
                    pipit_schedule_free(s);
                }
            }
}

/* Builds and simulates kind with costs f, b, w and `bytes` of activations
 * on every stage; NULL on failure. */
static pipit_schedule *build_sim_uniform(int kind, int P, int V, int M, double f, double b, double w,
                                         double bytes, pipit__sim_result *r) {
    pipit_schedule *s = NULL;
    if (pipit_schedule_build(kind, P, V, M, &s)) return NULL;
    double fc[64], bc[64], wc[64], act[64];
    for (int i = 0; i < 64; i++) fc[i] = f, bc[i] = b, wc[i] = w, act[i] = bytes;
    pipit__sim_costs c = {.f = fc, .b = bc, .w = wc, .act_bytes = act};
    if (pipit__schedule_simulate(s, &c, r)) {
        pipit_schedule_free(s);
        return NULL;
    }
    return s;
}

/* Bubble of a built schedule under f/b/w costs (same on every stage). */
static double bubble_of(int kind, int P, int V, int M, double f, double b, double w) {
    pipit__sim_result r;
    pipit_schedule *s = build_sim_uniform(kind, P, V, M, f, b, w, 1, &r);
    if (!s) return -1;
    double bubble = r.bubble;
    pipit__sim_result_free(&r);
    pipit_schedule_free(s);
    return bubble;
}

/* GPipe and 1F1B: (P-1)/(M+P-1) with F = 1, BW = 2 (B = W = 1), any M. */
PIPIT_TEST(sched_bubble_gpipe_1f1b_textbook) {
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 20; M++) {
            double expect = (P - 1.0) / (M + P - 1.0);
            ASSERT_NEAR_F64(bubble_of(PIPIT_SCHED_GPIPE, P, 1, M, 1, 1, 1), expect, 1e-12);
            ASSERT_NEAR_F64(bubble_of(PIPIT_SCHED_1F1B, P, 1, M, 1, 1, 1), expect, 1e-12);
            /* with no latency the extra warmup of eager 1F1B costs nothing */
            ASSERT_NEAR_F64(bubble_of(PIPIT_SCHED_EAGER_1F1B, P, 1, M, 1, 1, 1), expect, 1e-12);
            /* non-unit but uniform costs leave the fraction unchanged */
            ASSERT_NEAR_F64(bubble_of(PIPIT_SCHED_1F1B, P, 1, M, 0.5, 0.5, 0.5), expect, 1e-12);
        }
}

/* Interleaved: (P-1)/(VM+P-1). Every virtual stage costs F = 1, BW = 2, i.e.
 * 1/V of a rank's model; the fraction is scale-free, so this is Megatron's
 * (1/V)(P-1)/M bubble-to-work ratio. Interleaved 1F1B: M % P == 0;
 * interleaved GPipe: M >= P. */
PIPIT_TEST(sched_bubble_interleaved_textbook) {
    for (int P = 1; P <= 8; P++)
        for (int V = 1; V <= 4; V++)
            for (int M = P; M <= 4 * P; M++) {
                double expect = (P - 1.0) / (V * M + P - 1.0);
                ASSERT_NEAR_F64(bubble_of(PIPIT_SCHED_INTERLEAVED_GPIPE, P, V, M, 1, 1, 1),
                                expect, 1e-12);
                if (M % P == 0)
                    ASSERT_NEAR_F64(bubble_of(PIPIT_SCHED_INTERLEAVED_1F1B, P, V, M, 1, 1, 1),
                                    expect, 1e-12);
            }
}

/* ZB-H1 with F = B = W = 1: (P-1)/(3M+P-1) for M >= P. */
PIPIT_TEST(sched_bubble_zb_h1_textbook) {
    for (int P = 1; P <= 8; P++)
        for (int M = P; M <= 4 * P + 3; M++)
            ASSERT_NEAR_F64(bubble_of(PIPIT_SCHED_ZB_H1, P, 1, M, 1, 1, 1),
                            (P - 1.0) / (3.0 * M + P - 1.0), 1e-12);
}

/* A rank's idle time between the start of its first task and the end of its
 * last: the bubble as the zero-bubble papers count it, one row of their
 * parallelogram each (they remove the synchronisation of the optimizer
 * step; the makespan still includes rank P-1's start-up of (P-1)F). */
static double own_idle(const pipit_schedule *s, const pipit__sim_result *r, int rank) {
    int n = s->ntasks[rank];
    return r->end[rank][n - 1] - r->start[rank][0] - r->busy[rank];
}

/* The measured-cost case: B slower than F, W faster (F = 1, B = 1.2,
 * W = 0.8, the shape of the per-op profiles in docs/benchmarks.md). */
static const double MF = 1, MB = 1.2, MW = 0.8;

/* Step time of kind under the measured costs (V stages per rank). */
static double measured_step(int kind, int P, int V, int M) {
    pipit__sim_result r;
    pipit_schedule *s = build_sim_uniform(kind, P, V, M, MF, MB, MW, 1, &r);
    if (!s) return -1;
    double t = r.step_time;
    pipit__sim_result_free(&r);
    pipit_schedule_free(s);
    return t;
}

/* ZB-H2 against Qi et al. (ICLR 2024), section 2's comparison of the
 * handcrafted schedules: ZB-H1 idles (p-1)(T_F+T_B-T_W) per rank with peak p M_B, ZB-H2 idles
 * (p-1)(T_F+T_B-2T_W), i.e. 0 under F = B = W, with peak (2p-1) M_B.
 * Their bubble is rank 0's own idle; the makespan adds the start-up of the
 * last rank, (P-1)F, which no schedule avoids: with unit costs ZB-H1 and
 * ZB-H2 both reach (P-1) + 3M. Needs M >= 2P-1 (the warm-up must fit). */
PIPIT_TEST(sched_zb_h2_formulas) {
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 4 * P + 3; M++) {
            pipit__sim_result u, m, h;
            pipit_schedule *su = build_sim_uniform(PIPIT_SCHED_ZB_H2, P, 1, M, 1, 1, 1, 1, &u);
            pipit_schedule *sm = build_sim_uniform(PIPIT_SCHED_ZB_H2, P, 1, M, MF, MB, MW, 1, &m);
            pipit_schedule *sh = build_sim_uniform(PIPIT_SCHED_ZB_H1, P, 1, M, MF, MB, MW, 1, &h);
            ASSERT_TRUE(su && sm && sh);
            ASSERT_EQ_I64(u.peak_live[0], PIPIT_MIN(2 * P - 1, M));
            for (int r = 0; r < P; r++) ASSERT_TRUE(u.peak_live[r] <= PIPIT_MIN(2 * P - 1, M));
            if (M >= 2 * P - 1) {
                ASSERT_NEAR_F64(u.step_time, (P - 1) + 3.0 * M, 1e-9);
                ASSERT_NEAR_F64(u.bubble, (P - 1.0) / (3.0 * M + P - 1), 1e-12);
                for (int r = 0; r < P; r++) ASSERT_NEAR_F64(own_idle(su, &u, r), 0, 1e-9);
                /* measured costs: the paper's two formulas, and ZB-H2 at the floor */
                ASSERT_NEAR_F64(own_idle(sm, &m, 0), (P - 1) * (MF + MB - 2 * MW), 1e-9);
                ASSERT_NEAR_F64(own_idle(sh, &h, 0), (P - 1) * (MF + MB - MW), 1e-9);
                ASSERT_NEAR_F64(m.step_time, (P - 1) * MF + M * (MF + MB + MW), 1e-9);
                if (P > 1) {
                    ASSERT_TRUE(m.step_time < h.step_time - 1e-9);
                    ASSERT_TRUE(h.step_time < measured_step(PIPIT_SCHED_1F1B, P, 1, M) - 1e-9);
                }
            }
            pipit__sim_result_free(&u);
            pipit__sim_result_free(&m);
            pipit__sim_result_free(&h);
            pipit_schedule_free(su);
            pipit_schedule_free(sm);
            pipit_schedule_free(sh);
        }
}

/* ZB-V against Qi et al., "Zero Bubble Pipeline Parallelism" (arXiv
 * 2401.10241v2, section 6) and "Pipeline Parallelism with Controllable
 * Memory" (NeurIPS 2024): zero bubble under T_F = T_B = T_W at 1F1B's
 * activation memory. Each of a rank's two chunks is half a 1F1B stage, so
 * with unit costs per chunk a rank works 6M; no rank idles between its
 * first and last task once M >= 2P-1, the step is (P-1) + 6M, and the 2P
 * chunk activations a rank holds at its peak weigh P stages: 1F1B's P. */
PIPIT_TEST(sched_zb_v_formulas) {
    for (int P = 1; P <= 8; P++)
        for (int M = 2 * P - 1; M <= 4 * P + 3; M++) {
            pipit__sim_result u;
            pipit_schedule *su = build_sim_uniform(PIPIT_SCHED_ZB_V, P, 2, M, 1, 1, 1, 0.5, &u);
            ASSERT_TRUE(su != NULL);
            ASSERT_NEAR_F64(u.step_time, (P - 1) + 6.0 * M, 1e-9);
            ASSERT_NEAR_F64(u.bubble, (P - 1.0) / (6.0 * M + P - 1), 1e-12);
            for (int r = 0; r < P; r++) {
                ASSERT_NEAR_F64(own_idle(su, &u, r), 0, 1e-9);
                ASSERT_EQ_I64(u.peak_live[r], 2 * P);
                ASSERT_NEAR_F64(u.peak_bytes[r], P, 0); /* 1F1B's rank-0 peak, in stages */
            }
            /* measured costs: below ZB-H1 and 1F1B (bubble fractions are
             * scale-free, so the chunks' half cost does not matter) */
            double zbv = bubble_of(PIPIT_SCHED_ZB_V, P, 2, M, MF, MB, MW);
            double h1 = bubble_of(PIPIT_SCHED_ZB_H1, P, 1, M, MF, MB, MW);
            double f1 = bubble_of(PIPIT_SCHED_1F1B, P, 1, M, MF, MB, MW);
            ASSERT_TRUE(zbv >= 0 && h1 >= 0 && f1 >= 0);
            if (P > 1) ASSERT_TRUE(zbv < h1 && h1 < f1);
            pipit__sim_result_free(&u);
            pipit_schedule_free(su);
        }
}

/* Interleaved zero bubble (PyTorch's ScheduleInterleavedZeroBubble): under
 * unit costs per virtual stage its bubble is ZB-H1's reduced by V the way
 * interleaving reduces 1F1B's (Narayanan et al. 2021): (P-1)/(3VM+P-1),
 * for M >= P. A rank holds its (V-1)*group + P-1-r warm-up forwards plus the
 * r+1 forwards it runs before its first W: (V-1)*group + P, group = M/rounds.
 * Under the measured costs it beats interleaved 1F1B and ZB-H1. */
PIPIT_TEST(sched_interleaved_zb_formulas) {
    for (int P = 1; P <= 8; P++)
        for (int V = 2; V <= 4; V++)
            for (int M = P; M <= 4 * P; M++) {
                if (!allowed(PIPIT_SCHED_INTERLEAVED_ZB, P, V, M)) continue;
                pipit__sim_result u;
                pipit_schedule *su = build_sim_uniform(PIPIT_SCHED_INTERLEAVED_ZB, P, V, M, 1, 1, 1, 1, &u);
                ASSERT_TRUE(su != NULL);
                ASSERT_NEAR_F64(u.bubble, (P - 1.0) / (3.0 * V * M + P - 1), 1e-12);
                int group = M / PIPIT_MAX(1, M / P);
                for (int r = 0; r < P; r++)
                    ASSERT_EQ_I64(u.peak_live[r], PIPIT_MIN((V - 1) * group + P, V * M));
                double izb = bubble_of(PIPIT_SCHED_INTERLEAVED_ZB, P, V, M, MF, MB, MW);
                double h1 = bubble_of(PIPIT_SCHED_ZB_H1, P, 1, M, MF, MB, MW);
                ASSERT_TRUE(izb >= 0 && h1 >= 0);
                if (P > 1) ASSERT_TRUE(izb < h1);
                if (P > 1 && M % P == 0)
                    ASSERT_TRUE(izb < bubble_of(PIPIT_SCHED_INTERLEAVED_1F1B, P, V, M, MF, MB, MW));
                pipit__sim_result_free(&u);
                pipit_schedule_free(su);
            }
}

/* Per-(stage, kind) task times measured here (ms; the shortest instance
 * over 7 steps, pipit_program_last_step): GPT-2 V=256 T=64 L=8 H=4 C=128,
 * B=4, one block per stage, interleaved-zb P=2 V=4 M=8, one thread a rank.
 * Stage 0 has no input gradient (B empty, its whole backward is W); the
 * last stage carries the tied head and the loss. */
static const double PROF_F[8] = {1.074, 1.084, 1.081, 1.069, 1.076, 1.091, 1.083, 1.276};
static const double PROF_B[8] = {0.000, 1.259, 1.256, 1.272, 1.295, 1.274, 1.276, 1.439};
static const double PROF_W[8] = {2.205, 0.915, 0.924, 0.937, 0.920, 0.932, 0.890, 1.051};

/* Makespan of kind on 4 ranks under the profile: 8 one-block stages for
 * V = 2, or 4 two-block stages for V = 1 (stage 0's whole backward in W). */
static double profiled_step(int kind, int V, int M) {
    double f[8], b[8], w[8];
    for (int s = 0; s < 8; s++) f[s] = PROF_F[s], b[s] = PROF_B[s], w[s] = PROF_W[s];
    if (V == 1)
        for (int s = 0; s < 4; s++) {
            f[s] = PROF_F[2 * s] + PROF_F[2 * s + 1];
            b[s] = s ? PROF_B[2 * s] + PROF_B[2 * s + 1] : 0;
            w[s] = PROF_W[2 * s] + PROF_W[2 * s + 1] + (s ? 0 : PROF_B[1]);
        }
    pipit_schedule *s = NULL;
    pipit__sim_result r;
    if (pipit_schedule_build(kind, 4, V, M, &s)) return -1;
    pipit__sim_costs c = {.f = f, .b = b, .w = w};
    double t = pipit__schedule_simulate(s, &c, &r) ? -1 : r.step_time;
    if (t >= 0) pipit__sim_result_free(&r);
    pipit_schedule_free(s);
    return t;
}

/* Under measured costs the papers' claims hold: ZB-H2 beats ZB-H1, which
 * beats 1F1B; ZB-V beats ZB-H1; interleaved zero bubble
 * beats interleaved 1F1B and ZB-H1. Same total work in every case. */
PIPIT_TEST(sched_zero_bubble_profiled_costs) {
    for (int M = 8; M <= 16; M += 8) {
        double f1 = profiled_step(PIPIT_SCHED_1F1B, 1, M), h1 = profiled_step(PIPIT_SCHED_ZB_H1, 1, M);
        double h2 = profiled_step(PIPIT_SCHED_ZB_H2, 1, M), zv = profiled_step(PIPIT_SCHED_ZB_V, 2, M);
        double dpv = profiled_step(PIPIT_SCHED_DUALPIPEV, 2, M);
        double il = profiled_step(PIPIT_SCHED_INTERLEAVED_1F1B, 2, M);
        double iz = profiled_step(PIPIT_SCHED_INTERLEAVED_ZB, 2, M);
        fprintf(stderr,
                "M=%d: 1f1b %.2f zb-h1 %.2f zb-h2 %.2f zb-v %.2f dualpipev %.2f "
                "interleaved-1f1b %.2f interleaved-zb %.2f ms\n",
                M, f1, h1, h2, zv, dpv, il, iz);
        ASSERT_TRUE(f1 > 0 && h1 > 0 && h2 > 0 && zv > 0 && dpv > 0 && il > 0 && iz > 0);
        ASSERT_TRUE(h2 < h1 && h1 < f1);
        ASSERT_TRUE(zv < h1); /* (DualPipeV, not a claim of the papers, is a little faster here) */
        ASSERT_TRUE(iz < il && iz < h1);
    }
}

/* Simulates a built schedule under unit costs; NULL on failure. */
static pipit_schedule *build_sim(int kind, int P, int V, int M, pipit__sim_result *r) {
    pipit_schedule *s = NULL;
    if (pipit_schedule_build(kind, P, V, M, &s)) return NULL;
    if (pipit__schedule_simulate(s, NULL, r)) {
        pipit_schedule_free(s);
        return NULL;
    }
    return s;
}

PIPIT_TEST(sched_peak_live) {
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 3 * P; M++) {
            pipit__sim_result a, g, e, z;
            pipit_schedule *s1 = build_sim(PIPIT_SCHED_1F1B, P, 1, M, &a);
            pipit_schedule *s2 = build_sim(PIPIT_SCHED_GPIPE, P, 1, M, &g);
            pipit_schedule *s3 = build_sim(PIPIT_SCHED_EAGER_1F1B, P, 1, M, &e);
            pipit_schedule *s4 = build_sim(PIPIT_SCHED_ZB_H1, P, 1, M, &z);
            ASSERT_TRUE(s1 && s2 && s3 && s4);
            for (int r = 0; r < P; r++) {
                ASSERT_EQ_I64(a.peak_live[r], PIPIT_MIN(P - r, M));
                ASSERT_EQ_I64(g.peak_live[r], M);
                ASSERT_EQ_I64(e.peak_live[r], PIPIT_MIN(2 * (P - 1 - r) + 1, M));
                ASSERT_TRUE(z.peak_live[r] <= P);
                ASSERT_NEAR_F64(a.peak_bytes[r], a.peak_live[r], 0); /* 1 byte each */
            }
            pipit__sim_result_free(&a);
            pipit__sim_result_free(&g);
            pipit__sim_result_free(&e);
            pipit__sim_result_free(&z);
            pipit_schedule_free(s1);
            pipit_schedule_free(s2);
            pipit_schedule_free(s3);
            pipit_schedule_free(s4);
        }
}

/* Communication latency and activation bytes, checked by hand for
 * 1F1B with P = 2, M = 1: F0 (1) +c F1 (1) BW1 (2) +c BW0 (2). */
PIPIT_TEST(sched_simulate_comm_and_bytes) {
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 1, &s));
    double act[2] = {10, 3};
    pipit__sim_costs c = {.act_bytes = act, .comm = 0.5};
    pipit__sim_result r;
    ASSERT_OK(pipit__schedule_simulate(s, &c, &r));
    ASSERT_NEAR_F64(r.step_time, 7.0, 1e-12);
    ASSERT_NEAR_F64(r.busy[0], 3.0, 1e-12);
    ASSERT_NEAR_F64(r.start[1][0], 1.5, 1e-12);
    ASSERT_NEAR_F64(r.start[0][1], 5.0, 1e-12); /* 1.5 + 1 + 2 + 0.5 */
    ASSERT_NEAR_F64(r.rank_bubble[0], 1 - 3.0 / 7.0, 1e-12);
    ASSERT_NEAR_F64(r.bubble, 1 - 6.0 / 14.0, 1e-12);
    ASSERT_NEAR_F64(r.peak_bytes[0], 10, 0);
    ASSERT_NEAR_F64(r.peak_bytes[1], 3, 0);
    ASSERT_EQ_I64(r.ntotal, 4);
    pipit__sim_result_free(&r);
    double bad = -1;
    pipit__sim_costs cb = {.f = &bad};
    double f2[2] = {1, -1};
    cb.f = f2;
    ASSERT_STATUS(pipit__schedule_simulate(s, &cb, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("f[1]");
    pipit_schedule_free(s);
}

/* A link carries one message at a time: GPipe P = 2, M = 3, F = 1, BW = 2,
 * xfer = 3. Rank 0's forwards end at 1, 2, 3; their messages leave at 1,
 * 4, 7 (each waits for the one before) and arrive at 4, 7, 10, so rank 1
 * runs F1.0..2 at 4, 7, 10, then BW1.0..2 from 11; each input gradient
 * waits for the link back too: leaves 13, 16 (15 busy), 19 (17 busy),
 * arrives at 16, 19, 22; BW0.2 ends at 24. Without xfer nothing queues. */
PIPIT_TEST(sched_simulate_link_queue) {
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_GPIPE, 2, 1, 3, &s));
    pipit__sim_costs c = {.xfer = 3};
    pipit__sim_result r;
    ASSERT_OK(pipit__schedule_simulate(s, &c, &r));
    ASSERT_NEAR_F64(r.start[1][0], 4, 1e-12);
    ASSERT_NEAR_F64(r.start[1][1], 7, 1e-12);
    ASSERT_NEAR_F64(r.start[1][2], 10, 1e-12);
    ASSERT_NEAR_F64(r.start[0][3], 16, 1e-12);
    ASSERT_NEAR_F64(r.start[0][5], 22, 1e-12);
    ASSERT_NEAR_F64(r.step_time, 24, 1e-12);
    ASSERT_NEAR_F64(r.busy[0], 9, 1e-12); /* the sender is not held up by its messages */
    pipit__sim_result_free(&r);
    c.xfer = -1;
    ASSERT_STATUS(pipit__schedule_simulate(s, &c, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("transfer time");
    pipit_schedule_free(s);
}

/* A rendezvous waits for its receiver: GPipe P = 2, M = 2, F = 1, BW = 2,
 * xfer = 2, comm = 0.5, pulled. F0.0 ends at 1, its notice arrives at 1.5
 * while rank 1 is idle: the reply is back at 2, the data on the link 2..4,
 * there at 4.5; F1.0 runs 4.5..5.5. F0.1's notice came at 2.5, but rank 1
 * reaches F1.1 only at 5.5: data 6..8, F1.1 at 8.5..9.5, then BW1.0
 * 9.5..11.5, BW1.1 ..13.5. Rank 0 waits at BW0.0 from 3: BW1.0's notice at
 * 12, data 12.5..14.5, BW0.0 15..17; BW1.1's notice at 14, rank 0 there at
 * 17: data 17.5..19.5, BW0.1 20..22. Sent when ready (not pulled) the same
 * costs give 15 (sched_simulate_link_queue's rule). */
PIPIT_TEST(sched_simulate_rendezvous) {
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_GPIPE, 2, 1, 2, &s));
    pipit__sim_costs c = {.xfer = 2, .comm = 0.5, .pulled = 1};
    pipit__sim_result r;
    ASSERT_OK(pipit__schedule_simulate(s, &c, &r));
    ASSERT_NEAR_F64(r.start[1][0], 4.5, 1e-12);
    ASSERT_NEAR_F64(r.start[1][1], 8.5, 1e-12);
    ASSERT_NEAR_F64(r.start[0][2], 15, 1e-12);
    ASSERT_NEAR_F64(r.start[0][3], 20, 1e-12);
    ASSERT_NEAR_F64(r.step_time, 22, 1e-12);
    pipit__sim_result_free(&r);
    c.pulled = 0;
    ASSERT_OK(pipit__schedule_simulate(s, &c, &r));
    ASSERT_NEAR_F64(r.step_time, 15, 1e-12);
    pipit__sim_result_free(&r);
    pipit_schedule_free(s);
}

/* Rendezvous bounds, over built-in schedules at P = 2, M = 8: pulled is
 * never faster than sent when ready, and with no transfer time and no
 * latency the two are the same schedule. */
PIPIT_TEST(sched_simulate_rendezvous_bounds) {
    static const int kinds[] = {PIPIT_SCHED_GPIPE, PIPIT_SCHED_1F1B, PIPIT_SCHED_INTERLEAVED_1F1B, PIPIT_SCHED_ZB_H1};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        pipit_schedule *s = NULL;
        int V = kinds[i] == PIPIT_SCHED_INTERLEAVED_1F1B ? 2 : 1;
        ASSERT_OK(pipit_schedule_build(kinds[i], 2, V, 8, &s));
        pipit__sim_costs c = {.xfer = 1.5, .comm = 0.25}, z = {.pulled = 1}, u = {0};
        pipit__sim_result a, b;
        ASSERT_OK(pipit__schedule_simulate(s, &c, &a));
        c.pulled = 1;
        ASSERT_OK(pipit__schedule_simulate(s, &c, &b));
        ASSERT_TRUE(b.step_time >= a.step_time - 1e-12);
        pipit__sim_result_free(&a);
        pipit__sim_result_free(&b);
        ASSERT_OK(pipit__schedule_simulate(s, &z, &a));
        ASSERT_OK(pipit__schedule_simulate(s, &u, &b));
        ASSERT_NEAR_F64(a.step_time, b.step_time, 1e-12);
        pipit__sim_result_free(&a);
        pipit__sim_result_free(&b);
        pipit_schedule_free(s);
    }
}

/* Eager 1F1B exists to hide transfer latency: with comm > 0 it must win. */
PIPIT_TEST(sched_eager_1f1b_hides_latency) {
    pipit_schedule *a = NULL, *e = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 4, 1, 8, &a));
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_EAGER_1F1B, 4, 1, 8, &e));
    pipit__sim_costs c = {.comm = 1.0};
    pipit__sim_result ra, re;
    ASSERT_OK(pipit__schedule_simulate(a, &c, &ra));
    ASSERT_OK(pipit__schedule_simulate(e, &c, &re));
    ASSERT_NEAR_F64(ra.step_time, 49, 1e-12);
    ASSERT_NEAR_F64(re.step_time, 39, 1e-12);
    pipit__sim_result_free(&ra);
    pipit__sim_result_free(&re);
    pipit_schedule_free(a);
    pipit_schedule_free(e);
}

/* Parses text that must fail the check with `status` and `needle`. */
static void expect_rejected(const char *text, pipit_status status, const char *needle) {
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit__schedule_parse(text, "bad.txt", &s));
    ASSERT_STATUS(pipit_schedule_check(s), status);
    ASSERT_MSG_HAS(needle);
    pipit_schedule_free(s);
}

PIPIT_TEST(sched_check_rejects_broken) {
    /* 2 ranks, 2 stages, 2 microbatches */
    expect_rejected("stages: 0 1\n"
                    "F0.0 F0.1 BW0.0 BW0.1\n"
                    "F1.0 BW1.0 F1.1\n",
                    PIPIT_STATUS_SCHEDULE, "missing task BW1.1 (stage 1 is on rank 1)");
    expect_rejected("stages: 0 1\n"
                    "F0.0 F0.1 BW0.0 BW0.1\n"
                    "F1.0 BW1.0 F1.1 BW1.1 F1.1\n",
                    PIPIT_STATUS_SCHEDULE, "task F1.1 appears twice");
    expect_rejected("stages: 0 1\n"
                    "F0.0 F1.0 F0.1 BW0.0 BW0.1\n"
                    "BW1.0 F1.1 BW1.1\n",
                    PIPIT_STATUS_SCHEDULE, "rank 0 has F1.0 but stage 1 belongs to rank 1");
    expect_rejected("stages: 0 1\n"
                    "F0.1 F0.0 BW0.0 BW0.1\n"
                    "F1.0 BW1.0 F1.1 BW1.1\n",
                    PIPIT_STATUS_SCHEDULE, "rank 0 runs F0.0 after F0.1");
    expect_rejected("stages: 0 1\n"
                    "F0.0 F0.1 BW0.0 B0.1 W0.1 BW0.1\n"
                    "F1.0 BW1.0 F1.1 BW1.1\n",
                    PIPIT_STATUS_SCHEDULE, "has both BW0.1 and B0.1");
    expect_rejected("stages: 0 1\n"
                    "F0.0 F0.1 BW0.0 B0.1\n"
                    "F1.0 BW1.0 F1.1 BW1.1\n",
                    PIPIT_STATUS_SCHEDULE, "missing task W0.1");
    /* each rank waits for the other: rank 0 wants BW1.0 before sending F0.1 */
    expect_rejected("stages: 0 1\n"
                    "F0.0 BW0.0 F0.1 BW0.1\n"
                    "F1.0 F1.1 BW1.0 BW1.1\n",
                    PIPIT_STATUS_DEADLOCK,
                    "rank 0 waits at BW0.0 for BW1.0 (rank 1), rank 1 waits at F1.1 for F0.1 "
                    "(rank 0)");
    /* a rank waiting on itself: W before its B */
    expect_rejected("stages: 0\n"
                    "F0.0 W0.0 B0.0\n",
                    PIPIT_STATUS_DEADLOCK, "rank 0 waits at W0.0 for B0.0 (rank 0, later in its own list)");
}

/* Parses text that must fail with PIPIT_STATUS_FORMAT and `needle`. */
static void expect_parse_error(const char *text, const char *needle) {
    pipit_schedule *s = (pipit_schedule *)&s; /* must be reset to NULL */
    ASSERT_STATUS(pipit__schedule_parse(text, "bad.txt", &s), PIPIT_STATUS_FORMAT);
    ASSERT_TRUE(s == NULL);
    ASSERT_MSG_HAS(needle);
}

PIPIT_TEST(sched_parse_errors) {
    expect_parse_error("stages: 0 1\nF0.0 BW0.0\nF1.0 X1.0\n", "bad.txt:3: bad token 'X1.0'");
    expect_parse_error("# c\nstages: 0\nF0.0 BW0-0\n", "bad.txt:3: bad token 'BW0-0'");
    expect_parse_error("stages: 0\nF0.0 BW0.\n", "bad token 'BW0.'");
    expect_parse_error("stages: 0\nF0.0 F0.0x\n", "bad token 'F0.0x'");
    expect_parse_error("stages: 0\nF0.0 BWW0.0\n", "bad token 'BWW0.0'");
    expect_parse_error("F0.0 BW0.0\n", "bad.txt:1: expected the 'stages:' header");
    expect_parse_error("stages: 0 1\nF0.0 BW0.0\n", "bad.txt:1: the stages: header uses ranks 0..1");
    expect_parse_error("stages: 0\nF0.0 F3.0\n", "names stage 3");
    expect_parse_error("stages: 0 x\n", "bad rank 'x'");
    expect_parse_error("stages:\n", "lists no stages");
    expect_parse_error("stages: 0\n", "1 rank lines must follow, found 0");
    expect_parse_error("# only a comment\n\n", "no 'stages:' header");
    expect_parse_error("stages: 0\nF0.99999999999999999999\n", "too large");
    expect_parse_error("stages: 0\nstages: 0\n", "second 'stages:' header");
    /* comments, CRLF, tabs and blank lines are fine */
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit__schedule_parse("# hi\r\n\r\nstages:\t0 1 # map\r\nF0.0\tBW0.0\r\n"
                                    "# rank 1\nF1.0 BW1.0",
                                    "ok.txt", &s));
    ASSERT_EQ_I64(s->P, 2);
    ASSERT_EQ_I64(s->S, 2);
    ASSERT_EQ_I64(s->M, 1);
    ASSERT_EQ_I64(s->V, 1);
    ASSERT_EQ_I64(s->split_bw, 0);
    ASSERT_OK(pipit_schedule_check(s));
    pipit_schedule_free(s);
}

PIPIT_TEST(sched_text_round_trip) {
    char path[512];
    snprintf(path, sizeof path, "%s/sched_round_trip.txt", pipit_test_tmpdir());
    for (int kind = 0; kind < PIPIT_SCHED_COUNT; kind++)
        for (int P = 1; P <= 5; P++) {
            int V = min_v(kind), M = 2 * P + 2;
            if (kind == PIPIT_SCHED_INTERLEAVED_1F1B || kind == PIPIT_SCHED_INTERLEAVED_GPIPE ||
                kind == PIPIT_SCHED_INTERLEAVED_ZB)
                V = 3, M = 2 * P;
            pipit_schedule *s = NULL, *back = NULL;
            ASSERT_OK(pipit_schedule_build(kind, P, V, M, &s));
            FILE *f = fopen(path, "w");
            ASSERT_TRUE(f != NULL);
            ASSERT_OK(pipit__schedule_write(f, s));
            fclose(f);
            ASSERT_OK(pipit_schedule_load(path, &back));
            ASSERT_TRUE(pipit__schedule_equal(s, back));
            ASSERT_EQ_I64(back->kind, -1);
            ASSERT_EQ_I64(back->V, s->V);
            ASSERT_EQ_I64(back->split_bw, s->split_bw);
            pipit_schedule_free(s);
            pipit_schedule_free(back);
        }
    remove(path);
    pipit_schedule *s = NULL;
    ASSERT_STATUS(pipit_schedule_load("/nonexistent/dir/s.txt", &s), PIPIT_STATUS_IO);
    ASSERT_MSG_HAS("/nonexistent/dir/s.txt");
}

PIPIT_TEST(sched_bad_arguments) {
    pipit_schedule *s = NULL;
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_1F1B, 0, 1, 4, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("P >= 1");
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_GPIPE, 4, 1, 0, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("M >= 1");
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_GPIPE, 4, 2, 4, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("V=1");
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_ZB_H1, 4, 3, 4, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("V=1");
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_DUALPIPEV, 4, 3, 8, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("V=2");
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_DUALPIPEV, 4, 2, 7, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("M >= 2P");
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_INTERLEAVED_1F1B, 4, 2, 6, &s),
                  PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("multiple of P");
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_ZB_V, 4, 3, 8, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("zb-v needs V=2");
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_ZB_H2, 4, 2, 8, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("V=1");
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_INTERLEAVED_ZB, 4, 1, 8, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("interleaved-zb needs V >= 2");
    /* P = 4, M = 9: 2 rounds, and 9 is not a multiple of 2 */
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_INTERLEAVED_ZB, 4, 2, 9, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("max(1, M/P) = 2 (got M=9, P=4)");
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_INTERLEAVED_ZB, 4, 0, 6, &s)); /* 1 round of 6 */
    ASSERT_EQ_I64(s->V, 2);
    ASSERT_EQ_I64(s->split_bw, 1);
    pipit_schedule_free(s);
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_ZB_V, 3, 0, 1, &s)); /* any M */
    ASSERT_EQ_I64(s->V, 2);
    ASSERT_EQ_I64(s->stage_rank[5], 0);
    pipit_schedule_free(s);
    s = NULL;
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_INTERLEAVED_GPIPE, 4, -1, 6, &s),
                  PIPIT_STATUS_SCHEDULE);
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_1F1B, 4, 1, 1 << 30, &s),
                  PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("too large");
    ASSERT_STATUS(pipit_schedule_build((pipit_schedule_kind)99, 4, 1, 4, &s),
                  PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_1F1B, 4, 1, 4, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_TRUE(s == NULL);
    /* V = 0 means the kind's natural value */
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_DUALPIPEV, 3, 0, 6, &s));
    ASSERT_EQ_I64(s->V, 2);
    ASSERT_EQ_I64(s->split_bw, 1);
    pipit_schedule_free(s);
    ASSERT_STATUS(pipit_schedule_check(NULL), PIPIT_STATUS_MISUSE);
    pipit_schedule_free(NULL);
}

PIPIT_TEST(sched_kind_names) {
    for (int k = 0; k < PIPIT_SCHED_COUNT; k++)
        ASSERT_EQ_I64(pipit_schedule_kind_from_name(pipit_schedule_kind_name(k)), k);
    ASSERT_EQ_I64(pipit_schedule_kind_from_name("ZB_H1"), PIPIT_SCHED_ZB_H1);
    ASSERT_EQ_I64(pipit_schedule_kind_from_name("zb-h2"), PIPIT_SCHED_ZB_H2);
    ASSERT_EQ_I64(pipit_schedule_kind_from_name("zb-v"), PIPIT_SCHED_ZB_V);
    ASSERT_EQ_I64(pipit_schedule_kind_from_name("interleaved-zb"), PIPIT_SCHED_INTERLEAVED_ZB);
    ASSERT_TRUE(strcmp(pipit_schedule_kind_name(PIPIT_SCHED_ZB_V), "zb-v") == 0);
    ASSERT_EQ_I64(pipit_schedule_kind_from_name("Interleaved_1F1B"),
                  PIPIT_SCHED_INTERLEAVED_1F1B);
    ASSERT_EQ_I64(pipit_schedule_kind_from_name("1f1"), -1);
    ASSERT_EQ_I64(pipit_schedule_kind_from_name(""), -1);
    ASSERT_EQ_I64(pipit_schedule_kind_from_name(NULL), -1);
    ASSERT_TRUE(strcmp(pipit_schedule_kind_name((pipit_schedule_kind)-3), "unknown") == 0);
}

PIPIT_TEST(sched_custom_api) {
    /* two stages on one rank plus one on another: uneven, so V = 0 */
    int stage_rank[3] = {0, 1, 0};
    pipit_task r0[] = {{PIPIT_TASK_F, 0, 0}, {PIPIT_TASK_F, 2, 0}, {PIPIT_TASK_B, 2, 0},
                       {PIPIT_TASK_W, 2, 0}, {PIPIT_TASK_BW, 0, 0}};
    pipit_task r1[] = {{PIPIT_TASK_F, 1, 0}, {PIPIT_TASK_BW, 1, 0}};
    const pipit_task *lists[2] = {r0, r1};
    int n[2] = {5, 2};
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_custom(2, 3, 1, stage_rank, n, lists, &s));
    r0[0].mb = 7; /* the schedule holds a copy */
    ASSERT_EQ_I64(s->tasks[0][0].mb, 0);
    ASSERT_EQ_I64(s->V, 0);
    ASSERT_EQ_I64(s->split_bw, 1);
    ASSERT_EQ_I64(s->kind, -1);
    ASSERT_OK(pipit_schedule_check(s));
    pipit_schedule_free(s);
    int bad_map[3] = {0, 5, 0};
    ASSERT_OK(pipit_schedule_custom(2, 3, 1, bad_map, n, lists, &s));
    ASSERT_STATUS(pipit_schedule_check(s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("stage 1 is mapped to rank 5");
    pipit_schedule_free(s);
    s = NULL;
    ASSERT_STATUS(pipit_schedule_custom(0, 3, 1, stage_rank, n, lists, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_STATUS(pipit_schedule_custom(2, 3, 1, NULL, n, lists, &s), PIPIT_STATUS_MISUSE);
    r0[0].mb = 0;
    r0[1].stage = 9; /* out of range task */
    ASSERT_OK(pipit_schedule_custom(2, 3, 1, stage_rank, n, lists, &s));
    ASSERT_STATUS(pipit_schedule_check(s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("rank 0 has F9.0");
    pipit_schedule_free(s);
}

/* DualPipeV follows the reference's phase counts: rank r starts with
 * 2(P-1-r) forwards of stage r, then F(r) F(2P-1-r) pairs. */
PIPIT_TEST(sched_dualpipev_shape) {
    int P = 4, M = 10;
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_DUALPIPEV, P, 2, M, &s));
    for (int st = 0; st < 2 * P; st++)
        ASSERT_EQ_I64(s->stage_rank[st], st < P ? st : 2 * P - 1 - st);
    for (int r = 0; r < P; r++) {
        int i = 0;
        for (; i < 2 * (P - 1 - r); i++) {
            ASSERT_EQ_I64(s->tasks[r][i].kind, PIPIT_TASK_F);
            ASSERT_EQ_I64(s->tasks[r][i].stage, r);
            ASSERT_EQ_I64(s->tasks[r][i].mb, i);
        }
        ASSERT_EQ_I64(s->tasks[r][i].stage, r);
        ASSERT_EQ_I64(s->tasks[r][i + 1].stage, 2 * P - 1 - r);
        ASSERT_EQ_I64(s->tasks[r][i + 1].mb, 0);
        /* the last task is a deferred W */
        ASSERT_EQ_I64(s->tasks[r][s->ntasks[r] - 1].kind, PIPIT_TASK_W);
    }
    pipit__sim_result r;
    ASSERT_OK(pipit__schedule_simulate(s, NULL, &r));
    ASSERT_TRUE(r.bubble > 0 && r.bubble < 0.5);
    pipit__sim_result_free(&r);
    pipit_schedule_free(s);
}

PIPIT_TEST(sched_grid_print) {
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &s));
    pipit__sim_result r;
    ASSERT_OK(pipit__schedule_simulate(s, NULL, &r));
    FILE *f = tmpfile();
    ASSERT_TRUE(f != NULL);
    pipit__schedule_print_grid(f, s, &r);
    char buf[4096];
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    /* rank 1: idle one unit, then F1.0 BW1.0(2 units) F1.1 BW1.1 */
    ASSERT_TRUE(strstr(buf, "rank 0  | F0.0  F0.1  .     .     BW0.0 ~     .     BW0.1 ~\n"));
    ASSERT_TRUE(strstr(buf, "rank 1  | .     F1.0  BW1.0 ~     F1.1  BW1.1 ~     .     .\n"));
    ASSERT_TRUE(strstr(buf, "step time 9, bubble 33.3%") != NULL);
    /* under unit costs a count, not "2 (2 bytes)": there are no bytes to tell */
    ASSERT_TRUE(strstr(buf, "rank 0: busy 6, bubble 33.3%, peak live 2 (stage, microbatch) activations\n") != NULL);
    ASSERT_TRUE(strstr(buf, "rank 1: busy 6, bubble 33.3%, peak live 1 (stage, microbatch) activation\n") != NULL);
    ASSERT_TRUE(strstr(buf, "bytes") == NULL);
    pipit__sim_result_free(&r);
    /* priced activations: their bytes too (rank 0 holds F0.0 and F0.1 of
     * 100 bytes each, rank 1 one of stage 1's 300) */
    const double act[2] = {100, 300};
    pipit__sim_costs c = {.act_bytes = act};
    ASSERT_OK(pipit__schedule_simulate(s, &c, &r));
    f = tmpfile();
    ASSERT_TRUE(f != NULL);
    pipit__schedule_print_grid(f, s, &r);
    rewind(f);
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    ASSERT_TRUE(strstr(buf, "rank 0: busy 6, bubble 33.3%, peak live 2 (stage, microbatch) activations, 200 bytes\n"));
    ASSERT_TRUE(strstr(buf, "rank 1: busy 6, bubble 33.3%, peak live 1 (stage, microbatch) activation, 300 bytes\n"));
    pipit__sim_result_free(&r);
    pipit_schedule_free(s);
}

/* Every allocation failing in turn: a clean NOMEM each time, no leak. */
PIPIT_TEST(sched_out_of_memory) {
    for (long k = 1; k < 200; k++) {
        pipit_schedule *s = NULL, *back = NULL;
        pipit__sim_result r;
        pipit__alloc_fail_after(k);
        pipit_status st = pipit_schedule_build(PIPIT_SCHED_DUALPIPEV, 3, 2, 6, &s);
        if (!st) st = pipit__schedule_simulate(s, NULL, &r);
        if (!st) {
            pipit__sim_result_free(&r);
            st = pipit__schedule_parse("stages: 0 1\nF0.0 BW0.0\nF1.0 BW1.0\n", "x", &back);
        }
        pipit__alloc_fail_after(-1);
        ASSERT_TRUE(st == PIPIT_STATUS_OK || st == PIPIT_STATUS_NOMEM);
        if (k == 199) ASSERT_OK(st); /* the sweep went past the last allocation */
        pipit_schedule_free(s);
        pipit_schedule_free(back);
    }
}
