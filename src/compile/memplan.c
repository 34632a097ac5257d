/*
 * memplan.c — interval-based offset assignment. Buffers are placed in order
 * of first use at the lowest offset not overlapping any buffer still live;
 * a simple first-fit that is deterministic (same program, same offsets on
 * every rank and every run).
 */
#include "compile/memplan.h"

#include "util/checked.h"
#include "util/common.h"

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

static int by_first(const void *a, const void *b) {
    const int32_t *x = a, *y = b;
    if (x[1] != y[1]) return x[1] < y[1] ? -1 : 1;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

static int by_offset(const void *a, const void *b) {
    const pipit__mp_buf *const *x = a, *const *y = b;
    return ((*x)->offset > (*y)->offset) - ((*x)->offset < (*y)->offset);
}

size_t pipit__memplan(pipit__mp_buf *bufs, int32_t n) {
    /* order[i] = {index, first}: visit buffers by first use, ties by index */
    int32_t (*order)[2] = pipit__malloc(sizeof(*order) * (size_t)PIPIT_MAX(n, 1));
    pipit__mp_buf **live = pipit__malloc(sizeof(*live) * (size_t)PIPIT_MAX(n, 1));
    if (!order || !live) {
        pipit__free(order);
        pipit__free(live);
        return (size_t)-1;
    }
    for (int32_t i = 0; i < n; i++) {
        order[i][0] = i;
        order[i][1] = bufs[i].first;
    }
    qsort(order, (size_t)n, sizeof *order, by_first);
    int32_t nlive = 0;
    size_t peak = 0;
    for (int32_t k = 0; k < n; k++) {
        pipit__mp_buf *b = &bufs[order[k][0]];
        int32_t keep = 0; /* drop buffers dead before b is written */
        for (int32_t i = 0; i < nlive; i++)
            if (pipit__mp_end(live[i]) >= b->first) live[keep++] = live[i];
        nlive = keep;
        qsort(live, (size_t)nlive, sizeof *live, by_offset);
        /* every size and offset stays <= PIPIT__MAX_BYTES, so these sums cannot wrap */
        if (b->size > (size_t)PIPIT__MAX_BYTES) goto too_large;
        size_t need = align64(b->size), at = 0;
        for (int32_t i = 0; i < nlive; i++) {
            if (live[i]->offset >= at + need) break;
            size_t end = live[i]->offset + align64(live[i]->size);
            if (end > at) at = end;
        }
        if (at + need > (size_t)PIPIT__MAX_BYTES) goto too_large;
        b->offset = at;
        live[nlive++] = b;
        if (at + need > peak) peak = at + need;
    }
    pipit__free(order);
    pipit__free(live);
    return peak;
too_large:
    pipit__free(order);
    pipit__free(live);
    return PIPIT__MEMPLAN_TOO_LARGE;
}

size_t pipit__memplan_naive(const pipit__mp_buf *bufs, int32_t n) {
    size_t s = 0;
    for (int32_t i = 0; i < n; i++) /* saturates: a statistic only */
        if (!pipit__add_align64(s, bufs[i].size, &s)) return SIZE_MAX;
    return s;
}
