/*
 * program_query.c — read-only queries on a compiled program (pipit.h):
 * param dtype and size, profiling on/off, the last step's measured
 * per-rank timeline, and how many CUDA devices the cuda backend sees. Kept apart so that the program's layout can change
 * behind these few functions.
 */
#include <string.h>

#include "runtime/program.h"
#include "util/common.h"

static pipit_status check(const pipit_program *p, const char *fn) {
    if (!p) return pipit__err(PIPIT_STATUS_MISUSE, "%s: program is NULL", fn);
    if (p->magic != PIPIT_PROGRAM_MAGIC)
        return pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid program handle (freed, or not a pipit_program)", fn);
    return PIPIT_STATUS_OK;
}

pipit_status pipit__check_runnable(const pipit_program *p, const char *fn) {
    if (p->rs) return PIPIT_STATUS_OK;
    return pipit__err(PIPIT_STATUS_INVALID,
                      "%s: this program was compiled with options.plan_only: it has no memory, so it can be "
                      "inspected (pipit_program_print_plan, the param queries), not run or read",
                      fn);
}

static const pipit__param *param_named(const pipit_program *p, const char *name, const char *fn) {
    if (!name) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: name is NULL", fn);
        return NULL;
    }
    int i = pipit__plan_find_param(&p->plan, name);
    if (i >= 0) return &p->plan.params[i];
    pipit__err(PIPIT_STATUS_INVALID, "%s: no parameter named '%s'", fn, name);
    return NULL;
}

pipit_status pipit_program_param_dtype(const pipit_program *p, const char *name, pipit_dtype *out) {
    pipit_status s = check(p, __func__);
    if (s) return s;
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "%s: out is NULL", __func__);
    const pipit__param *pp = param_named(p, name, __func__);
    if (!pp) return name ? PIPIT_STATUS_INVALID : PIPIT_STATUS_MISUSE;
    *out = pp->dtype;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_program_param_numel(const pipit_program *p, const char *name, int64_t *out) {
    pipit_status s = check(p, __func__);
    if (s) return s;
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "%s: out is NULL", __func__);
    const pipit__param *pp = param_named(p, name, __func__);
    if (!pp) return name ? PIPIT_STATUS_INVALID : PIPIT_STATUS_MISUSE;
    *out = pp->full_numel; /* the whole tensor, also when T ranks hold shards of it */
    return PIPIT_STATUS_OK;
}

pipit_status pipit_program_set_profile(pipit_program *p, int on) {
    pipit_status s = check(p, __func__);
    if (!s) s = pipit__check_runnable(p, __func__);
    if (s) return s;
    p->profile = on != 0;
    if (on) p->profile_steps = 0;
    if (on)
        for (int i = 0; i < p->nlocal; i++) memset(p->rs[p->local[i]].prof, 0, sizeof p->rs[p->local[i]].prof);
    return PIPIT_STATUS_OK;
}

int pipit_program_num_ranks(const pipit_program *p) { return check(p, __func__) ? 0 : p->W; }

double pipit_program_step_wall(const pipit_program *p) { return check(p, __func__) ? 0 : p->step_wall; }

pipit_status pipit_program_last_step(const pipit_program *p, int rank, pipit_rank_step *out) {
    pipit_status s = check(p, __func__);
    if (!s) s = pipit__check_runnable(p, __func__);
    if (s) return s;
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "%s: out is NULL", __func__);
    if (rank < 0 || rank >= p->W)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d out of range [0, %d)", __func__, rank, p->W);
    if (!pipit__is_local(p, rank))
        return pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d runs in another process (this one runs rank %d)",
                          __func__, rank, p->local[0]);
    const pipit__rank_plan *r = &p->plan.ranks[p->rs[rank].prank];
    const pipit__rank_state *rs = &p->rs[rank];
    *out = (pipit_rank_step){r->ntasks, r->tasks, rs->t_start, rs->t_end, rs->busy, rs->wait};
    return PIPIT_STATUS_OK;
}

pipit_status pipit_program_held_bytes(const pipit_program *p, int rank, pipit_held_kind kind, size_t *bytes) {
    pipit_status s = check(p, __func__);
    if (!s) s = pipit__check_runnable(p, __func__);
    if (s) return s;
    if (!bytes) return pipit__err(PIPIT_STATUS_MISUSE, "%s: bytes is NULL", __func__);
    if (rank < 0 || rank >= p->W)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d out of range [0, %d)", __func__, rank, p->W);
    if (!pipit__is_local(p, rank))
        return pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d runs in another process (this one runs rank %d)",
                          __func__, rank, p->local[0]);
    if ((int)kind < PIPIT_HELD_PARAMS || (int)kind > PIPIT_HELD_MOMENTS)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "%s: kind %d is not PIPIT_HELD_PARAMS (0), PIPIT_HELD_GRADS (1) or PIPIT_HELD_MOMENTS (2)",
                          __func__, (int)kind);
    const pipit__rank_state *rs = &p->rs[rank];
    *bytes = pipit__held_bytes(p, rs, (int)kind);
    return PIPIT_STATUS_OK;
}

int pipit_cuda_device_count(void) {
    unsigned long gen0 = pipit__err_gen();
    const pipit__backend *be = pipit__backend_find("cuda");
    int n = 0;
    if (be) {
        be->init();
        n = be->devices();
    }
    if (n <= 0) pipit__err_fresh(PIPIT_STATUS_RUNTIME, gen0, __func__); /* the message says why, naming the call */
    return n > 0 ? n : 0;
}
