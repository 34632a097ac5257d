/*
 * schedule_view.c — the public face of the schedule simulator, the text
 * format writer, the grid and the SVG timeline (pipit_inspect.h), over the
 * internal ones in src/schedule and src/inspect/timeline.c.
 */
#include <stdio.h>

#include "inspect/timeline.h"
#include "pipit_inspect.h"
#include "schedule/schedule.h"
#include "util/common.h"

struct pipit_sim_result {
    pipit__sim_result r;
    int *ntasks;          /* [P] copy of the schedule's task counts */
    pipit_task **tasks;   /* [P] copies of the schedule's task lists */
};

pipit_status pipit_schedule_write(FILE *f, const pipit_schedule *s) {
    if (!f || !s) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_schedule_write: %s is NULL", f ? "schedule" : "file");
    unsigned long gen0 = pipit__err_gen();
    pipit_status st = pipit__err_fresh(pipit__schedule_write(f, s), gen0, __func__);
    if (!st && ferror(f)) st = pipit__err(PIPIT_STATUS_IO, "schedule write: write failed");
    return st;
}

void pipit_sim_result_free(pipit_sim_result *r) {
    if (!r) return;
    for (int i = 0; r->tasks && i < r->r.P; i++) pipit__free(r->tasks[i]);
    pipit__free(r->tasks);
    pipit__free(r->ntasks);
    pipit__sim_result_free(&r->r);
    pipit__free(r);
}

pipit_status pipit_schedule_simulate(const pipit_schedule *s, const pipit_sim_costs *costs,
                                     pipit_sim_result **out) {
    if (!s || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_schedule_simulate: NULL %s", s ? "out" : "schedule");
    *out = NULL;
    unsigned long gen0 = pipit__err_gen();
    pipit_status st = pipit__schedule_check(s);
    if (st) return pipit__err_fresh(st, gen0, __func__);
    pipit__sim_costs c = {0};
    if (costs) {
        c.f = costs->f, c.b = costs->b, c.w = costs->w;
        c.act_bytes = costs->act_bytes, c.comm = costs->comm, c.b_delta_bytes = costs->b_delta_bytes;
        c.xfer = costs->xfer, c.pulled = costs->pulled;
    }
    pipit_sim_result *r = pipit__calloc(1, sizeof *r);
    if (!r) return pipit__err(PIPIT_STATUS_NOMEM, "simulate: out of memory");
    st = pipit__schedule_simulate(s, &c, &r->r);
    if (st) {
        pipit__free(r);
        return pipit__err_fresh(st, gen0, __func__);
    }
    r->ntasks = pipit__calloc((size_t)s->P, sizeof *r->ntasks);
    r->tasks = pipit__calloc((size_t)s->P, sizeof *r->tasks);
    int ok = r->ntasks && r->tasks;
    for (int i = 0; ok && i < s->P; i++) {
        r->ntasks[i] = s->ntasks[i];
        r->tasks[i] = pipit__malloc(sizeof(pipit_task) * (size_t)PIPIT_MAX(s->ntasks[i], 1));
        ok = r->tasks[i] != NULL;
        for (int k = 0; ok && k < s->ntasks[i]; k++) r->tasks[i][k] = s->tasks[i][k];
    }
    if (!ok) {
        pipit_sim_result_free(r);
        return pipit__err(PIPIT_STATUS_NOMEM, "simulate: out of memory");
    }
    *out = r;
    return PIPIT_STATUS_OK;
}

static int bad_rank(const pipit_sim_result *r, int rank, const char *fn) {
    if (!r) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: result is NULL", fn);
        return 1;
    }
    if (rank < 0 || rank >= r->r.P) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d out of range [0, %d)", fn, rank, r->r.P);
        return 1;
    }
    return 0;
}

static int null_result(const pipit_sim_result *r, const char *fn) {
    if (r) return 0;
    pipit__err(PIPIT_STATUS_MISUSE, "%s: result is NULL", fn);
    return 1;
}

int pipit_sim_result_ranks(const pipit_sim_result *r) { return null_result(r, __func__) ? 0 : r->r.P; }
double pipit_sim_result_step_time(const pipit_sim_result *r) { return null_result(r, __func__) ? 0 : r->r.step_time; }
double pipit_sim_result_bubble(const pipit_sim_result *r) { return null_result(r, __func__) ? 0 : r->r.bubble; }
double pipit_sim_result_busy(const pipit_sim_result *r, int rank) {
    return bad_rank(r, rank, __func__) ? 0 : r->r.busy[rank];
}
int pipit_sim_result_peak_live(const pipit_sim_result *r, int rank) {
    return bad_rank(r, rank, __func__) ? 0 : r->r.peak_live[rank];
}
double pipit_sim_result_peak_bytes(const pipit_sim_result *r, int rank) {
    return bad_rank(r, rank, __func__) ? 0 : r->r.peak_bytes[rank];
}

pipit_status pipit_sim_result_task(const pipit_sim_result *r, int rank, int i, double *start, double *end) {
    if (bad_rank(r, rank, __func__)) return r ? PIPIT_STATUS_INVALID : PIPIT_STATUS_MISUSE;
    if (i < 0 || i >= r->ntasks[rank])
        return pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d has %d task%s, asked for task %d", __func__, rank,
                          r->ntasks[rank], r->ntasks[rank] == 1 ? "" : "s", i);
    if (start) *start = r->r.start[rank][i];
    if (end) *end = r->r.end[rank][i];
    return PIPIT_STATUS_OK;
}

/* The result must come from this schedule (same ranks and task counts). */
static pipit_status check_pair(FILE *f, const pipit_schedule *s, const pipit_sim_result *r, const char *fn) {
    if (!f || !s || !r)
        return pipit__err(PIPIT_STATUS_MISUSE, "%s: %s is NULL", fn, !f ? "file" : !s ? "schedule" : "result");
    int same = r->r.P == s->P;
    for (int i = 0; same && i < s->P; i++) same = r->ntasks[i] == s->ntasks[i];
    if (!same) return pipit__err(PIPIT_STATUS_INVALID, "%s: the result is of another schedule", fn);
    return PIPIT_STATUS_OK;
}

pipit_status pipit_schedule_print_grid(FILE *f, const pipit_schedule *s, const pipit_sim_result *r) {
    pipit_status st = check_pair(f, s, r, __func__);
    if (st) return st;
    pipit__schedule_print_grid(f, s, &r->r);
    return ferror(f) ? pipit__err(PIPIT_STATUS_IO, "schedule grid: write failed") : PIPIT_STATUS_OK;
}

pipit_status pipit_schedule_write_svg(FILE *f, const pipit_schedule *s, const pipit_sim_result *r,
                                      const char *title) {
    pipit_status st = check_pair(f, s, r, __func__);
    if (st) return st;
    pipit__timeline_svg(f, title ? title : "", s->P, s->ntasks, s->tasks, r->r.start, r->r.end);
    return ferror(f) ? pipit__err(PIPIT_STATUS_IO, "schedule SVG: write failed") : PIPIT_STATUS_OK;
}
