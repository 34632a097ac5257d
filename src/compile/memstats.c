/*
 * memstats.c — memory facts read off a compiled rank program: live arena
 * bytes after any instruction, the peak at task boundaries, which is
 * what a schedule keeps in flight and what the simulator predicts, and the
 * arena split into the loop's buffers (activations) and the pre-loop
 * values that live through the loop (with options.dtype bf16: the params'
 * bf16 copies).
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

/* The pre-loop region is what comes before the first task mark. */
static int32_t loop_start(const pipit__rank_plan *r) {
    for (int32_t i = 0; i < r->n; i++)
        if (r->ins[i].kind == INS_MARK) return i;
    return r->n;
}

size_t pipit__preloop_bytes(const pipit__rank_plan *r) {
    int32_t start = loop_start(r);
    size_t b = 0;
    for (int32_t k = 0; k < r->nbufs; k++)
        if (r->bufs[k].first < start) b += r->bufs[k].size;
    return b;
}

size_t pipit__activation_peak(const pipit__rank_plan *r) {
    int32_t start = loop_start(r), end = PIPIT_MIN(r->post_at, r->n);
    size_t peak = 0;
    for (int32_t i = start; i < end; i++) {
        size_t live = 0;
        for (int32_t k = 0; k < r->nbufs; k++) {
            const pipit__mp_buf *b = &r->bufs[k];
            if (b->first >= start && b->first < end && b->first <= i && b->last >= i) live += b->size;
        }
        peak = PIPIT_MAX(peak, live);
    }
    return peak;
}
