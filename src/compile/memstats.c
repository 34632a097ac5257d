/*
 * memstats.c — memory facts read off a compiled rank program: live arena
 * bytes after any instruction, and the peak at task boundaries, which is
 * what a schedule keeps in flight and what the simulator predicts.
 */
#include "compile/plan.h"
#include "compile/memplan.h"

size_t pipit__live_bytes_after(const pipit__rank_plan *r, int32_t i) {
    size_t live = 0;
    for (int32_t b = 0; b < r->nbufs; b++)
        if (r->bufs[b].first <= i && r->bufs[b].last > i) live += r->bufs[b].size;
    return live;
}

size_t pipit__task_boundary_peak(const pipit__rank_plan *r) {
    size_t peak = 0;
    for (int32_t i = 0; i < r->n; i++)
        if (r->ins[i].kind == INS_MARK && r->ins[i].first) peak = PIPIT_MAX(peak, pipit__live_bytes_after(r, i));
    return peak;
}
