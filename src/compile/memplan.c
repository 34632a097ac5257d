/*
 * memplan.c — interval-based offset assignment. Buffers are placed in order
 * of first use at the lowest offset not overlapping any buffer still live:
 * first fit, deterministic (same program, same offsets on every rank and
 * every run). The free gaps between live buffers sit in a treap keyed by
 * offset that knows the largest gap of each subtree, and live buffers in a
 * heap keyed by their last use, so a plan of n buffers takes O(n log n)
 * instead of re-sorting every live buffer for every placement (which made
 * a 3000-layer model plan for minutes).
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

/* ---------------------------------------------------- gaps: a treap */

/* Gap [start, start + len); index 0 is the empty tree. The last gap runs
 * to SIZE_MAX, so a buffer always fits somewhere. */
typedef struct {
    size_t start, len, max; /* max: the largest len in this subtree */
    uint32_t prio;
    int32_t l, r;
} gap;

typedef struct {
    gap *g;
    int32_t root, nfree, *free; /* recycled node indices */
    int32_t used;
    uint32_t seed;
} gaps;

static size_t sub_max(const gaps *t, int32_t i) { return i ? t->g[i].max : 0; }

static void pull(gaps *t, int32_t i) {
    gap *x = &t->g[i];
    x->max = PIPIT_MAX(x->len, PIPIT_MAX(sub_max(t, x->l), sub_max(t, x->r)));
}

/* Splits tree i into keys < key (*l) and keys >= key (*r). */
static void split(gaps *t, int32_t i, size_t key, int32_t *l, int32_t *r) {
    if (!i) {
        *l = *r = 0;
        return;
    }
    if (t->g[i].start < key) {
        split(t, t->g[i].r, key, &t->g[i].r, r);
        *l = i;
    } else {
        split(t, t->g[i].l, key, l, &t->g[i].l);
        *r = i;
    }
    pull(t, i);
}

/* Joins a (every key smaller) and b. */
static int32_t merge(gaps *t, int32_t a, int32_t b) {
    if (!a || !b) return a ? a : b;
    if (t->g[a].prio > t->g[b].prio) {
        t->g[a].r = merge(t, t->g[a].r, b);
        pull(t, a);
        return a;
    }
    t->g[b].l = merge(t, a, t->g[b].l);
    pull(t, b);
    return b;
}

static void gap_insert(gaps *t, size_t start, size_t len) {
    int32_t i = t->nfree ? t->free[--t->nfree] : ++t->used;
    t->seed = t->seed * 1103515245u + 12345u; /* priorities only shape the tree, never the result */
    t->g[i] = (gap){start, len, len, t->seed, 0, 0};
    int32_t l, r;
    split(t, t->root, start, &l, &r);
    t->root = merge(t, merge(t, l, i), r);
}

/* Removes the gap starting at `start` (which exists). */
static void gap_erase(gaps *t, size_t start) {
    int32_t l, m, r;
    split(t, t->root, start, &l, &m);
    split(t, m, start + 1, &m, &r);
    if (m) t->free[t->nfree++] = m;
    t->root = merge(t, l, r);
}

/* The gap with the lowest start whose len >= need (one always exists). */
static const gap *gap_first_fit(const gaps *t, size_t need) {
    int32_t i = t->root;
    while (i) {
        const gap *x = &t->g[i];
        if (sub_max(t, x->l) >= need) i = x->l;
        else if (x->len >= need) return x;
        else i = x->r;
    }
    return NULL;
}

/* The gap ending exactly at `end`, or the one starting exactly at `start`. */
static const gap *gap_ending_at(const gaps *t, size_t end) {
    const gap *best = NULL;
    for (int32_t i = t->root; i;) {
        const gap *x = &t->g[i];
        if (x->start < end) best = x, i = x->r;
        else i = x->l;
    }
    return best && best->start + best->len == end ? best : NULL;
}

static const gap *gap_starting_at(const gaps *t, size_t start) {
    for (int32_t i = t->root; i;) {
        const gap *x = &t->g[i];
        if (x->start == start) return x;
        i = x->start < start ? x->r : x->l;
    }
    return NULL;
}

/* Returns [off, off + len) to the free gaps, merged with its neighbours. */
static void gap_release(gaps *t, size_t off, size_t len) {
    const gap *before = gap_ending_at(t, off), *after = gap_starting_at(t, off + len);
    size_t start = off, end = off + len;
    if (before) {
        start = before->start;
        gap_erase(t, start);
    }
    if (after) {
        size_t a = after->start;
        end = a + after->len; /* the last gap: SIZE_MAX */
        gap_erase(t, a);
    }
    gap_insert(t, start, end - start);
}

/* ------------------------ live buffers: a heap by last use (or send fence) */

static int earlier(const pipit__mp_buf *a, const pipit__mp_buf *b) { return pipit__mp_end(a) < pipit__mp_end(b); }

static void heap_push(pipit__mp_buf **h, int32_t *n, pipit__mp_buf *b) {
    int32_t i = (*n)++;
    while (i > 0 && earlier(b, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = b;
}

static pipit__mp_buf *heap_pop(pipit__mp_buf **h, int32_t *n) {
    pipit__mp_buf *top = h[0], *x = h[--*n];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && earlier(h[c + 1], h[c])) c++;
        if (!earlier(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = x;
    return top;
}

/* ---------------------------------------------------------------- plan */

size_t pipit__memplan(pipit__mp_buf *bufs, int32_t n) {
    size_t cap = (size_t)PIPIT_MAX(n, 1) + 2;
    /* order[i] = {index, first}: visit buffers by first use, ties by index */
    int32_t (*order)[2] = pipit__malloc(sizeof(*order) * cap);
    pipit__mp_buf **live = pipit__malloc(sizeof(*live) * cap);
    gaps t = {.g = pipit__malloc(sizeof(gap) * (cap + 1)), .free = pipit__malloc(sizeof(int32_t) * (cap + 1))};
    size_t peak = (size_t)-1;
    if (!order || !live || !t.g || !t.free) goto out;
    for (int32_t i = 0; i < n; i++) {
        order[i][0] = i;
        order[i][1] = bufs[i].first;
    }
    qsort(order, (size_t)n, sizeof *order, by_first);
    gap_insert(&t, 0, SIZE_MAX);
    int32_t nlive = 0;
    peak = 0;
    for (int32_t k = 0; k < n; k++) {
        pipit__mp_buf *b = &bufs[order[k][0]];
        while (nlive && pipit__mp_end(live[0]) < b->first) { /* dead before b is written */
            const pipit__mp_buf *d = heap_pop(live, &nlive);
            gap_release(&t, d->offset, align64(d->size));
        }
        /* every size and offset stays <= PIPIT__MAX_BYTES, so these sums cannot wrap */
        if (b->size > (size_t)PIPIT__MAX_BYTES) goto too_large;
        size_t need = align64(b->size);
        if (need == 0) { /* takes no bytes: at 0, and never in the way */
            b->offset = 0;
            continue;
        }
        const gap *at = gap_first_fit(&t, need);
        size_t start = at->start, len = at->len;
        if (start + need > (size_t)PIPIT__MAX_BYTES) goto too_large;
        gap_erase(&t, start);
        if (len > need) gap_insert(&t, start + need, len - need);
        b->offset = start;
        heap_push(live, &nlive, b);
        if (start + need > peak) peak = start + need;
    }
    goto out;
too_large:
    peak = PIPIT__MEMPLAN_TOO_LARGE;
out:
    pipit__free(order);
    pipit__free(live);
    pipit__free(t.g);
    pipit__free(t.free);
    return peak;
}

size_t pipit__memplan_naive(const pipit__mp_buf *bufs, int32_t n) {
    size_t s = 0;
    for (int32_t i = 0; i < n; i++) /* saturates: a statistic only */
        if (!pipit__add_align64(s, bufs[i].size, &s)) return SIZE_MAX;
    return s;
}
