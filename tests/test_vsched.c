/*
 * test_vsched.c — the controllable-memory V schedules V-Half and V-Min
 * (src/schedule/schedule_vcm.c): the same orders as the authors' generator
 * (golden files in tests/vsched_golden, made by its gen_golden.py from
 * sail-sg/zero-bubble-pipeline-parallelism's zbv_greedy.py), the same
 * unit-cost step time as that generator's own timing, the papers' peak
 * in-flight microbatches, and the papers' bubble figures.
 * Training equivalence (the same bits as one rank, hence as 1F1B) is in
 * test_pipeline.c, test_dp.c and test_tp.c, which iterate these kinds too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/schedule.h"
#include "test.h"


static const char *vname(int vmin) { return vmin ? "min" : "half"; }

/* Paper (Qi et al. 2024, table 1): activation memory in microbatches. */
static int in_flight_bound(int vmin, int P) { return vmin ? (P + 4) / 3 : (P + 2) / 2; }

/* The "# makespan N" line of a golden file: the fork's unit-cost timing. */
static int golden_makespan(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "# makespan %d", &n) == 1) break;
    fclose(f);
    return n;
}

/* First task where two schedules with the same shape differ, printed. */
static void print_first_diff(const pipit_schedule *want, const pipit_schedule *got, const char *what) {
    for (int r = 0; r < want->P && r < got->P; r++) {
        int n = want->ntasks[r] < got->ntasks[r] ? want->ntasks[r] : got->ntasks[r];
        for (int i = 0; i <= n; i++) {
            char a[32] = "(end)", b[32] = "(end)";
            if (i < want->ntasks[r]) pipit__task_str(a, sizeof a, want->tasks[r][i]);
            if (i < got->ntasks[r]) pipit__task_str(b, sizeof b, got->tasks[r][i]);
            if (strcmp(a, b)) {
                fprintf(stderr, "%s: rank %d task %d: the fork runs %s, pipit %s\n", what, r, i, a, b);
                return;
            }
        }
    }
    fprintf(stderr, "%s: same tasks, different stage map or sizes\n", what);
}

PIPIT_TEST(vsched_golden_orders) {
    int compared = 0;
    for (int vmin = 0; vmin <= 1; vmin++)
        for (int P = 2; P <= 8; P++) {
            int ms[3] = {2 * P, 3 * P + 1, 4 * P};
            for (int j = 0; j < 3; j++) {
                int M = ms[j];
                char path[1024], what[64];
                snprintf(path, sizeof path, "%s/vsched_golden/v-%s_p%d_m%d.sched", pipit_test_srcdir(), vname(vmin), P,
                         M);
                snprintf(what, sizeof what, "v-%s P=%d M=%d", vname(vmin), P, M);
                pipit_schedule *want = NULL, *got = NULL;
                ASSERT_OK(pipit_schedule_load(path, &want));
                ASSERT_OK(pipit_schedule_build(vmin ? PIPIT_SCHED_V_MIN : PIPIT_SCHED_V_HALF, P, 0, M, &got));
                ASSERT_OK(pipit_schedule_check(want));
                if (!pipit__schedule_equal(want, got)) {
                    print_first_diff(want, got, what);
                    PIPIT_FAIL_("%s differs from the fork's order (%s)", what, path);
                }
                /* the fork's own timing of its order: pipit's simulator at
                 * F = B = W = 1 and no communication cost lands on it */
                pipit__sim_result r;
                ASSERT_OK(pipit__schedule_simulate(got, NULL, &r));
                int span = golden_makespan(path);
                ASSERT_TRUE(span > 0);
                if (r.step_time < span - 1 || r.step_time > span + 1)
                    PIPIT_FAIL_("%s: simulated step %g, the fork's %d", what, r.step_time, span);
                pipit__sim_result_free(&r);
                pipit_schedule_free(want);
                pipit_schedule_free(got);
                compared++;
            }
        }
    ASSERT_EQ_I64(compared, 42);
}

/* Peak in-flight microbatches per rank (live (stage, microbatch)
 * activations / V, a stage being half a rank's layers): at most the
 * paper's (P+2)//2 (V-Half) and (P+4)//3 (V-Min) on every rank, exactly
 * that on the fullest, for M >= 2P; ZB-V (same placement) holds P. */
PIPIT_TEST(vsched_peak_in_flight) {
    for (int vmin = 0; vmin <= 1; vmin++)
        for (int P = 2; P <= 8; P++) {
            int ms[4] = {2 * P, 2 * P + 1, 3 * P, 5 * P + 3};
            for (int j = 0; j < 4; j++) {
                int M = ms[j], bound = in_flight_bound(vmin, P), fullest = 0;
                pipit_schedule *s = NULL;
                ASSERT_OK(pipit_schedule_build(vmin ? PIPIT_SCHED_V_MIN : PIPIT_SCHED_V_HALF, P, 0, M, &s));
                ASSERT_OK(pipit_schedule_check(s));
                ASSERT_EQ_I64(s->S, 2 * P);
                for (int st = 0; st < 2 * P; st++) ASSERT_EQ_I64(s->stage_rank[st], st < P ? st : 2 * P - 1 - st);
                pipit__sim_result r;
                ASSERT_OK(pipit__schedule_simulate(s, NULL, &r));
                for (int q = 0; q < P; q++) {
                    int mb = (r.peak_live[q] + 1) / 2; /* whole microbatches, rounded up */
                    if (mb > bound)
                        PIPIT_FAIL_("v-%s P=%d M=%d: rank %d holds %d stage activations (> 2 x %d)", vname(vmin), P,
                                    M, q, r.peak_live[q], bound);
                    if (mb > fullest) fullest = mb;
                }
                if (fullest != bound)
                    PIPIT_FAIL_("v-%s P=%d M=%d: fullest rank holds %d microbatches, the paper %d", vname(vmin), P, M,
                                fullest, bound);
                pipit__sim_result_free(&r);
                pipit_schedule_free(s);
            }
            pipit_schedule *z = NULL;
            ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_ZB_V, P, 0, 2 * P, &z));
            pipit__sim_result r;
            ASSERT_OK(pipit__schedule_simulate(z, NULL, &r));
            ASSERT_EQ_I64(r.peak_live[0], 2 * P);
            pipit__sim_result_free(&r);
            pipit_schedule_free(z);
        }
}

/* Under F = B = W (one slot per pass of a half-size stage) a rank works 6M
 * slots a step. The fork's README (the paper's table 1) gives the bubble
 * as a share of 1F1B's (P-1)/(M+P-1), i.e. 6(P-1) idle slots at these
 * stage sizes: V-Half B/2 = 3(P-1), V-Min 2B/3 = 4(P-1) (plus "O(n)
 * overhead"). The simulated idle time stays within one slot of those
 * figures or below them (the squeeze beats V-Half's by up to 4 slots at
 * P <= 8), the bubble fraction is below 1F1B's at the same M, and V-Half's
 * at most V-Min's. */
PIPIT_TEST(vsched_bubble_figures) {
    for (int P = 2; P <= 8; P++)
        for (int M = 2 * P; M <= 4 * P; M += P) {
            double one_f_one_b = (double)(P - 1) / (M + P - 1), b[2];
            for (int vmin = 0; vmin <= 1; vmin++) {
                pipit_schedule *s = NULL;
                ASSERT_OK(pipit_schedule_build(vmin ? PIPIT_SCHED_V_MIN : PIPIT_SCHED_V_HALF, P, 0, M, &s));
                pipit__sim_result r;
                ASSERT_OK(pipit__schedule_simulate(s, NULL, &r));
                double idle = r.step_time - 6.0 * M, figure = vmin ? 4.0 * (P - 1) : 3.0 * (P - 1);
                b[vmin] = r.bubble;
                pipit__sim_result_free(&r);
                pipit_schedule_free(s);
                if (idle > figure + 1 || idle < figure - 4 || !(b[vmin] < one_f_one_b))
                    PIPIT_FAIL_("v-%s P=%d M=%d: %g idle slots (paper %g), bubble %.4f (1F1B %.4f)", vname(vmin), P,
                                M, idle, figure, b[vmin], one_f_one_b);
            }
            ASSERT_TRUE(b[0] <= b[1] + 1e-12);
        }
}

/* The kinds refuse V != 2 with a message naming it, accept any M >= 1
 * (checked), and go by their names. */
PIPIT_TEST(vsched_names_and_refusals) {
    pipit_schedule *s = NULL;
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_V_HALF, 4, 1, 8, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("v-half needs V=2");
    ASSERT_TRUE(s == NULL);
    ASSERT_STATUS(pipit_schedule_build(PIPIT_SCHED_V_MIN, 4, 3, 8, &s), PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("v-min needs V=2");
    ASSERT_EQ_I64(pipit_schedule_kind_from_name("V_Half"), PIPIT_SCHED_V_HALF);
    ASSERT_EQ_I64(pipit_schedule_kind_from_name("v-min"), PIPIT_SCHED_V_MIN);
    for (int P = 1; P <= 5; P++)
        for (int M = 1; M <= 2 * P + 1; M++)
            for (int k = PIPIT_SCHED_V_HALF; k <= PIPIT_SCHED_V_MIN; k++) {
                ASSERT_OK(pipit_schedule_build((pipit_schedule_kind)k, P, 0, M, &s));
                ASSERT_OK(pipit_schedule_check(s));
                ASSERT_EQ_I64(pipit_schedule_split_bw(s), 1);
                pipit_schedule_free(s);
            }
}
