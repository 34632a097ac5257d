/*
 * schedule_query.c — read-only getters on a schedule (pipit.h), so callers
 * can inspect a built or loaded schedule without its struct.
 */
#include "schedule/schedule.h"

static int null_schedule(const pipit_schedule *s, const char *fn) {
    if (s) return 0;
    pipit__err(PIPIT_STATUS_MISUSE, "%s: NULL schedule (argument s)", fn);
    return 1;
}

int pipit_schedule_ranks(const pipit_schedule *s) { return null_schedule(s, __func__) ? 0 : s->P; }
int pipit_schedule_stages(const pipit_schedule *s) { return null_schedule(s, __func__) ? 0 : s->S; }
int pipit_schedule_microbatches(const pipit_schedule *s) { return null_schedule(s, __func__) ? 0 : s->M; }
int pipit_schedule_virtual(const pipit_schedule *s) { return null_schedule(s, __func__) ? 0 : s->V; }
int pipit_schedule_get_kind(const pipit_schedule *s) { return null_schedule(s, __func__) ? -1 : s->kind; }
int pipit_schedule_split_bw(const pipit_schedule *s) { return null_schedule(s, __func__) ? 0 : s->split_bw; }

int pipit_schedule_stage_rank(const pipit_schedule *s, int stage) {
    if (null_schedule(s, __func__)) return -1;
    if (stage < 0 || stage >= s->S) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: stage %d out of range [0, %d)", __func__, stage, s->S);
        return -1;
    }
    return s->stage_rank[stage];
}

int pipit_schedule_num_tasks(const pipit_schedule *s, int rank) {
    if (null_schedule(s, __func__)) return 0;
    if (rank < 0 || rank >= s->P) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d out of range [0, %d)", __func__, rank, s->P);
        return 0;
    }
    return s->ntasks[rank];
}

pipit_status pipit_schedule_task(const pipit_schedule *s, int rank, int i, pipit_task *out) {
    if (!s || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_schedule_task: %s is NULL", s ? "out" : "schedule");
    if (rank < 0 || rank >= s->P)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d out of range [0, %d)", __func__, rank, s->P);
    if (i < 0 || i >= s->ntasks[rank])
        return pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d has %d task%s, asked for task %d", __func__, rank,
                          s->ntasks[rank], s->ntasks[rank] == 1 ? "" : "s", i);
    *out = s->tasks[rank][i];
    return PIPIT_STATUS_OK;
}
