/*
 * query.c — the partition's getters and its printout.
 */
#include "partition/partition.h"
#include "pipit_inspect.h"
#include "util/common.h"

static int bad(const pipit_partition_result *p, int s, const char *fn) {
    if (!p || p->magic != PIPIT_PARTITION_MAGIC) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid partition handle (NULL, freed, or not a pipit_partition_result)", fn);
        return 1;
    }
    if (s < 0 || s >= p->S) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: stage %d out of range [0, %d)", fn, s, p->S);
        return 1;
    }
    return 0;
}

int pipit_partition_stages(const pipit_partition_result *p) { return bad(p, 0, __func__) ? -1 : p->S; }
double pipit_partition_stage_cost(const pipit_partition_result *p, int s) { return bad(p, s, __func__) ? 0 : p->stage_cost[s]; }
double pipit_partition_stage_forward(const pipit_partition_result *p, int s) { return bad(p, s, __func__) ? 0 : p->stage_fwd[s]; }
double pipit_partition_stage_bytes(const pipit_partition_result *p, int s) { return bad(p, s, __func__) ? 0 : p->stage_bytes[s]; }
int pipit_partition_num_ops(const pipit_partition_result *p) { return bad(p, 0, __func__) ? 0 : p->n; }

int pipit_partition_op_node(const pipit_partition_result *p, int i) {
    if (bad(p, 0, __func__)) return -1;
    if (i < 0 || i >= p->n) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: op %d out of range [0, %d)", __func__, i, p->n);
        return -1;
    }
    return p->op_node[i];
}

static pipit_status partition_stage_ops_impl(const pipit_partition_result *p, int s, int *first, int *end) {
    if (bad(p, s, "pipit_partition_stage_ops")) return p && p->magic == PIPIT_PARTITION_MAGIC ? PIPIT_STATUS_INVALID : PIPIT_STATUS_MISUSE;
    if (!first || !end) return pipit__err(PIPIT_STATUS_MISUSE, "%s: %s is NULL", "pipit_partition_stage_ops", first ? "end" : "first");
    *first = p->bounds[s];
    *end = p->bounds[s + 1];
    return PIPIT_STATUS_OK;
}

pipit_status pipit_partition_stage_ops(const pipit_partition_result *p, int s, int *first, int *end) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(partition_stage_ops_impl(p, s, first, end), gen0, __func__);
}

static pipit_status partition_print_impl(FILE *f, const pipit_partition_result *p) {
    if (bad(p, 0, "pipit_partition_print")) return PIPIT_STATUS_MISUSE;
    if (!f) return pipit__err(PIPIT_STATUS_MISUSE, "%s: f is NULL", "pipit_partition_print");
    int worst = 0;
    for (int s = 0; s < p->S; s++)
        if (p->stage_cost[s] > p->stage_cost[worst]) worst = s;
    fprintf(f, "partition: %d stage%s over %d ops, %s costs per microbatch%s\n", p->S, p->S == 1 ? "" : "s", p->n,
            p->measured ? "measured (profile-scaled)" : "modelled",
            p->ranks_balanced ? "; balanced over ranks (the slowest rank's stages together)" : "");
    for (int s = 0; s < p->S; s++)
        fprintf(f, "  stage %d (rank %d): ops %4d..%-4d params %s .. %s  fwd %.4g ms  fwd+bwd %.4g ms  ~%.1f MiB%s\n", s,
                p->rank_of[s], p->bounds[s], p->bounds[s + 1] - 1, p->first_param[s] ? p->first_param[s] : "-",
                p->last_param[s] ? p->last_param[s] : "-", 1e3 * p->stage_fwd[s], 1e3 * p->stage_cost[s],
                p->stage_bytes[s] / 1048576.0, s == worst ? "  (slowest)" : "");
    if (ferror(f)) return pipit__err(PIPIT_STATUS_IO, "%s: writing failed", "pipit_partition_print");
    return PIPIT_STATUS_OK;
}

pipit_status pipit_partition_print(FILE *f, const pipit_partition_result *p) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(partition_print_impl(f, p), gen0, __func__);
}

static pipit_status partition_simulate_impl(const pipit_partition_result *p, const pipit_schedule *sched, double *step_seconds) {
    if (bad(p, 0, "pipit_partition_simulate")) return PIPIT_STATUS_MISUSE;
    if (!sched || !step_seconds)
        return pipit__err(PIPIT_STATUS_MISUSE, "%s: %s is NULL", "pipit_partition_simulate", sched ? "step_seconds" : "sched");
    if (pipit_schedule_stages(sched) != p->S)
        return pipit__err(PIPIT_STATUS_SCHEDULE, "%s: the schedule has %d stages, the partition %d", "pipit_partition_simulate",
                          pipit_schedule_stages(sched), p->S);
    double *c = pipit__calloc(3 * (size_t)p->S, sizeof *c);
    if (!c) return pipit__err(PIPIT_STATUS_NOMEM, "%s: out of memory", "pipit_partition_simulate");
    for (int s = 0; s < p->S; s++) {
        c[s] = p->stage_fwd[s];
        c[p->S + s] = p->stage_cost[s] - p->stage_fwd[s];
    }
    pipit_sim_costs sc = {.f = c, .b = c + p->S, .w = c + 2 * p->S};
    pipit_sim_result *r = NULL;
    pipit_status st = pipit_schedule_simulate(sched, &sc, &r);
    if (!st) *step_seconds = pipit_sim_result_step_time(r);
    pipit_sim_result_free(r);
    pipit__free(c);
    return st;
}

pipit_status pipit_partition_simulate(const pipit_partition_result *p, const pipit_schedule *sched, double *step_seconds) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(partition_simulate_impl(p, sched, step_seconds), gen0, __func__);
}
