/*
 * test_memory.c — the activation memory a compiled pipeline keeps between
 * tasks equals what the schedule simulator predicts from per-stage
 * activation sizes, for every rank: the runtime frees exactly when the
 * schedule says a (stage, microbatch) is done.
 */
#include "pipit_gpt2.h"
#include "runtime/program.h"
#include "schedule/schedule.h"
#include "test.h"

/* Instruction index of the MARK that starts (end = 0) or ends task t. */
static int32_t mark_of(const pipit__rank_plan *r, int t, int end) {
    for (int32_t i = 0; i < r->n; i++)
        if (r->ins[i].kind == INS_MARK && r->ins[i].task == t && r->ins[i].first == end) return i;
    return 0;
}

/* Bytes that task (kind, s, 0) adds to what its rank holds: for F the
 * stage's activation set; for B what W will still need minus what B freed. */
static double task_delta_bytes(const pipit_program *p, int kind, int s) {
    const pipit__rank_plan *r = &p->plan.ranks[p->plan.stage_rank[s]];
    for (int t = 0; t < r->ntasks; t++) {
        pipit_task k = r->tasks[t];
        if (k.kind != kind || k.stage != s || k.mb != 0) continue;
        int32_t a = mark_of(r, t, 0), b = mark_of(r, t, 1);
        return (double)pipit__live_bytes_after(r, b) - (double)pipit__live_bytes_after(r, a);
    }
    return -1;
}

/* Every schedule, split ones included: the simulator is told what F keeps
 * and what B adds or frees, and must predict every rank's peak exactly. */
static void check_case(pipit_schedule_kind kind, int P, int V, int M, int *failures) {
    pipit_gpt2_config c = {64, 8, 8, 8, 2, 16, 2, P * V, PIPIT_F32, 0};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_schedule *sch = NULL;
    pipit_program *p = NULL;
    if (pipit_schedule_build(kind, P, V, M, &sch) ||
        pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = M}, &p)) {
        fprintf(stderr, "%s P=%d: %s\n", pipit_schedule_kind_name(kind), P, pipit_errmsg());
        (*failures)++;
    } else {
        double act[64], bdelta[64];
        for (int s = 0; s < p->plan.S; s++) {
            act[s] = task_delta_bytes(p, PIPIT_TASK_F, s);
            bdelta[s] = task_delta_bytes(p, PIPIT_TASK_B, s);
        }
        pipit__sim_costs costs = {.act_bytes = act, .b_delta_bytes = bdelta};
        pipit__sim_result res;
        if (pipit__schedule_simulate(sch, &costs, &res)) {
            (*failures)++;
        } else {
            for (int r = 0; r < P; r++) {
                double got = (double)pipit__task_boundary_peak(&p->plan.ranks[r]);
                if (!(res.peak_bytes[r] > 0) || got != res.peak_bytes[r]) {
                    fprintf(stderr, "%s P=%d V=%d M=%d rank %d: runtime keeps %.0f bytes, simulator says %.0f\n",
                            pipit_schedule_kind_name(kind), P, V, M, r, got, res.peak_bytes[r]);
                    (*failures)++;
                }
            }
            pipit__sim_result_free(&res);
        }
    }
    pipit_program_free(p);
    pipit_schedule_free(sch);
    pipit_graph_free(g);
}

PIPIT_TEST(memory_runtime_matches_simulator) {
    int failures = 0;
    for (int P = 2; P <= 4; P++) {
        check_case(PIPIT_SCHED_GPIPE, P, 1, 2 * P, &failures);
        check_case(PIPIT_SCHED_1F1B, P, 1, 2 * P + 1, &failures);
        check_case(PIPIT_SCHED_EAGER_1F1B, P, 1, 2 * P, &failures);
        check_case(PIPIT_SCHED_INTERLEAVED_1F1B, P, 2, 2 * P, &failures);
        check_case(PIPIT_SCHED_INTERLEAVED_GPIPE, P, 2, P, &failures);
        check_case(PIPIT_SCHED_ZB_H1, P, 1, 2 * P, &failures);
        check_case(PIPIT_SCHED_DUALPIPEV, P, 2, 2 * P, &failures);
        check_case(PIPIT_SCHED_ZB_H2, P, 1, 2 * P, &failures);
        check_case(PIPIT_SCHED_ZB_V, P, 2, 2 * P - 1, &failures);
        check_case(PIPIT_SCHED_INTERLEAVED_ZB, P, 2, 2 * P, &failures);
    }
    ASSERT_EQ_I64(failures, 0);
}
