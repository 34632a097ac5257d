/*
 * test_memplan.c — the static memory planner: hand-computed arena sizes for
 * chains of short-lived buffers (64-byte alignment), no two buffers with
 * overlapping lifetimes ever sharing a byte (all pairs, random intervals),
 * the peak never below the live-bytes lower bound, and a compiled chain
 * graph whose planned arena is well below the no-reuse sum, the same
 * offsets as a plain quadratic first fit (the planner before its gap tree),
 * and a plan of 200k buffers in well under a second.
 */
#include <stdint.h>
#include <time.h>

#include "runtime/program.h"
#include "compile/memplan.h"
#include "test.h"

static size_t al64(size_t n) { return (n + 63) / 64 * 64; }

PIPIT_TEST(memplan_chain_reuses) {
    /* buffer i is written by instruction i and last read by i+1 */
    pipit__mp_buf b[10];
    for (int i = 0; i < 10; i++) b[i] = (pipit__mp_buf){.size = 100, .first = i, .last = i + 1};
    ASSERT_EQ_I64(pipit__memplan_naive(b, 10), 10 * 128);
    size_t peak = pipit__memplan(b, 10);
    /* two 128-byte (aligned) buffers are live at any instruction */
    ASSERT_EQ_I64(peak, 2 * 128);
    for (int i = 0; i < 10; i++) {
        ASSERT_EQ_I64(b[i].offset % 64, 0);
        ASSERT_TRUE(b[i].offset + b[i].size <= peak);
        if (i > 0) ASSERT_TRUE(b[i].offset != b[i - 1].offset);
    }
    /* a buffer dead before the next is written frees its bytes at once */
    for (int i = 0; i < 10; i++) b[i] = (pipit__mp_buf){.size = 64 * (size_t)(i + 1), .first = 2 * i, .last = 2 * i + 1};
    ASSERT_EQ_I64(pipit__memplan(b, 10), 640); /* the largest */
    for (int i = 0; i < 10; i++) ASSERT_EQ_I64(b[i].offset, 0);
    /* empty plan */
    ASSERT_EQ_I64(pipit__memplan(b, 0), 0);
    ASSERT_EQ_I64(pipit__memplan_naive(b, 0), 0);
}

PIPIT_TEST(memplan_hand_computed) {
    /* A: 1 byte   [0,3]  -> 64 at 0
     * B: 65 bytes [1,1]  -> 128 at 64
     * C: 64 bytes [2,3]  -> B is dead at 2: fits at 64
     * D: 200      [4,5]  -> A, C dead: 256 at 0
     * E: 10       [4,4]  -> 64 at 256
     * F: 1        [5,5]  -> E dead, D live: 64 at 256  => peak 320 */
    pipit__mp_buf b[6] = {
        {.size = 1, .first = 0, .last = 3},   {.size = 65, .first = 1, .last = 1},
        {.size = 64, .first = 2, .last = 3},  {.size = 200, .first = 4, .last = 5},
        {.size = 10, .first = 4, .last = 4},  {.size = 1, .first = 5, .last = 5},
    };
    ASSERT_EQ_I64(pipit__memplan_naive(b, 6), 64 + 128 + 64 + 256 + 64 + 64);
    ASSERT_EQ_I64(pipit__memplan(b, 6), 320);
    const size_t want[6] = {0, 64, 64, 0, 256, 256};
    for (int i = 0; i < 6; i++) ASSERT_EQ_I64(b[i].offset, want[i]);
    /* reversed input: visited by first use, so the same peak (D and E tie
     * on first use and swap places) */
    pipit__mp_buf r[6];
    for (int i = 0; i < 6; i++) r[i] = b[5 - i];
    ASSERT_EQ_I64(pipit__memplan(r, 6), 320);
    const size_t want_r[6] = {0, 64, 64, 64, 0, 0}; /* r[5-i] for A..F */
    for (int i = 0; i < 6; i++) ASSERT_EQ_I64(r[5 - i].offset, want_r[i]);
}

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

PIPIT_TEST(memplan_no_overlap_random) {
    enum { N = 300, NI = 120 };
    pipit__mp_buf b[N];
    uint64_t s = 2718;
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < N; i++) {
            int32_t first = (int32_t)(rng(&s) % NI);
            int32_t len = (int32_t)(rng(&s) % (trial % 2 ? 40 : 5));
            size_t size = rng(&s) % 5 == 0 ? 1 + rng(&s) % 4096 : rng(&s) % 300;
            b[i] = (pipit__mp_buf){.size = size, .first = first, .last = first + len};
        }
        size_t peak = pipit__memplan(b, N);
        ASSERT_TRUE(peak != (size_t)-1);
        ASSERT_TRUE(peak <= pipit__memplan_naive(b, N));
        /* lower bound: aligned bytes live at any one instruction */
        size_t lb = 0;
        for (int t = 0; t < NI + 40; t++) {
            size_t live = 0;
            for (int i = 0; i < N; i++)
                if (b[i].first <= t && t <= b[i].last) live += al64(b[i].size);
            if (live > lb) lb = live;
        }
        ASSERT_TRUE(peak >= lb);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            if (b[i].offset % 64 || b[i].offset + b[i].size > peak) bad++;
            for (int j = i + 1; j < N; j++) {
                int alive_together = b[i].first <= b[j].last && b[j].first <= b[i].last;
                if (!alive_together || b[i].size == 0 || b[j].size == 0) continue;
                int share = b[i].offset < b[j].offset + b[j].size && b[j].offset < b[i].offset + b[i].size;
                if (share) {
                    if (bad < 5)
                        fprintf(stderr, "trial %d: bufs %d [%d,%d] @%zu+%zu and %d [%d,%d] @%zu+%zu overlap\n",
                                trial, i, b[i].first, b[i].last, b[i].offset, b[i].size, j, b[j].first,
                                b[j].last, b[j].offset, b[j].size);
                    bad++;
                }
            }
        }
        ASSERT_EQ_I64(bad, 0);
    }
}

PIPIT_TEST(memplan_compiled_chain) {
    pipit_graph *g = pipit_graph_new();
    ASSERT_TRUE(g != NULL);
    pipit_val x = pipit_param(g, "x", PIPIT_F32, 2, (int64_t[]){64, 64});
    for (int i = 0; i < 20; i++) x = pipit_gelu(g, x);
    pipit_val loss = pipit_sum(g, x);
    ASSERT_OK(pipit_graph_status(g));
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, NULL, &p));
    ASSERT_EQ_I64(p->plan.nranks, 1);
    size_t arena = p->plan.ranks[0].arena_bytes, naive = p->plan.ranks[0].naive_bytes;
    const size_t t = 64 * 64 * 4; /* one activation */
    fprintf(stderr, "chain of 20 gelus: arena %zu bytes, naive %zu (%.1f tensors vs %.1f)\n", arena, naive,
            (double)arena / t, (double)naive / t);
    /* forward: 20 gelu outputs (19 kept for backward); backward: 20 input
     * gradients that each die after the next gelu_backward. No reuse means
     * >= 40 tensors, reuse needs about 20 + a couple. */
    ASSERT_TRUE(naive >= 40 * t);
    ASSERT_TRUE(arena < naive);
    ASSERT_TRUE(arena <= 26 * t);
    /* the program still runs and its metrics report the planned peak */
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, NULL, 0, 0, &m));
    ASSERT_EQ_I64(m.peak_bytes, arena);
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* The planner as it was before its gap tree: for every buffer, drop the
 * dead ones, sort the live ones by offset and take the first gap that
 * fits. An independent oracle for the offsets. */
static int ref_by_offset(const void *a, const void *b) {
    const pipit__mp_buf *const *x = a, *const *y = b;
    return ((*x)->offset > (*y)->offset) - ((*x)->offset < (*y)->offset);
}

static size_t ref_memplan(pipit__mp_buf *bufs, int n) {
    pipit__mp_buf **live = malloc(sizeof *live * (size_t)(n + 1));
    int *order = malloc(sizeof *order * (size_t)(n + 1));
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* stable insertion sort by first use */
        for (int j = i; j > 0 && bufs[order[j - 1]].first > bufs[order[j]].first; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int nlive = 0;
    size_t peak = 0;
    for (int k = 0; k < n; k++) {
        pipit__mp_buf *b = &bufs[order[k]];
        int keep = 0;
        for (int i = 0; i < nlive; i++)
            if (live[i]->last >= b->first) live[keep++] = live[i];
        nlive = keep;
        qsort(live, (size_t)nlive, sizeof *live, ref_by_offset);
        size_t need = al64(b->size), at = 0;
        for (int i = 0; i < nlive; i++) {
            if (live[i]->offset >= at + need) break;
            size_t end = live[i]->offset + al64(live[i]->size);
            if (end > at) at = end;
        }
        b->offset = at;
        live[nlive++] = b;
        if (at + need > peak) peak = at + need;
    }
    free(live);
    free(order);
    return peak;
}

PIPIT_TEST(memplan_matches_plain_first_fit) {
    enum { N = 400 };
    pipit__mp_buf a[N], b[N];
    uint64_t s = 31337;
    for (int trial = 0; trial < 60; trial++) {
        int n = 1 + (int)(rng(&s) % N), span = 1 + (int)(rng(&s) % 200);
        for (int i = 0; i < n; i++) {
            int32_t first = (int32_t)(rng(&s) % (uint64_t)span);
            int32_t len = (int32_t)(rng(&s) % (trial % 3 ? 30 : 3));
            size_t size = rng(&s) % 7 == 0 ? 0 : rng(&s) % 5 == 0 ? 1 + rng(&s) % 100000 : 1 + rng(&s) % 700;
            a[i] = b[i] = (pipit__mp_buf){.size = size, .first = first, .last = first + len};
        }
        size_t want = ref_memplan(a, n), got = pipit__memplan(b, n);
        ASSERT_EQ_I64(got, want);
        for (int i = 0; i < n; i++)
            if (a[i].offset != b[i].offset)
                PIPIT_FAIL_("trial %d: buffer %d [%d,%d] of %zu bytes at %zu, plain first fit puts it at %zu", trial, i,
                            b[i].first, b[i].last, b[i].size, b[i].offset, a[i].offset);
    }
}

PIPIT_TEST(memplan_near_linear) {
    /* 200k buffers, a third of them alive to the end (activations kept for
     * the backward): the quadratic planner took minutes on such lists */
    enum { N = 200000 };
    pipit__mp_buf *b = malloc(sizeof *b * N);
    ASSERT_TRUE(b != NULL);
    uint64_t s = 7;
    for (int i = 0; i < N; i++)
        b[i] = (pipit__mp_buf){.size = 64 + rng(&s) % 4096, .first = i, .last = i % 3 == 0 ? N : i + 1 + (int32_t)(rng(&s) % 8)};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t peak = pipit__memplan(b, N);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "memplan of %d buffers: %.3f s, peak %zu bytes\n", N, sec, peak);
    ASSERT_TRUE(peak != (size_t)-1 && peak != PIPIT__MEMPLAN_TOO_LARGE);
    ASSERT_TRUE(sec < 30.0); /* 0.2 s (Release), 3 s (ASan); the quadratic planner: hours */
    free(b);
}
