/*
 * test_api_errors.c — bad inputs to the public API give the documented
 * status and a message that names what is wrong: poisoned graphs (shape,
 * dtype, matmul inner dims, foreign values), bad losses, missing or
 * out-of-range feeds, NULL handles, parameter access by bad name or size,
 * and an out-of-memory sweep over graph building + compile + step.
 */
#include <ctype.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#include "pipit.h"
#include "test.h"
#include "util/common.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

/* Asserts that string `s` contains `needle`. */
#define ASSERT_HAS(s, needle)                                                \
    do {                                                                     \
        const char *s_ = (s);                                                \
        if (!s_ || !strstr(s_, (needle)))                                    \
            PIPIT_FAIL_("\"%s\" lacks \"%s\"", s_ ? s_ : "(null)", (needle)); \
    } while (0)

PIPIT_TEST(api_shape_mismatch_poisons) {
    pipit_graph *g = pipit_graph_new();
    ASSERT_TRUE(g != NULL);
    ASSERT_OK(pipit_graph_status(g));
    pipit_val a = pipit_param(g, "a", PIPIT_F32, 2, SH(2, 3));
    pipit_val b = pipit_param(g, "b", PIPIT_F32, 2, SH(3, 2));
    ASSERT_TRUE(a.id >= 0 && b.id >= 0);
    pipit_val c = pipit_add(g, a, b);
    ASSERT_TRUE(c.id < 0);
    ASSERT_EQ_I64(pipit_val_ndim(c), 0);
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    char first[1024], lower[1024];
    snprintf(first, sizeof first, "%s", pipit_graph_errmsg(g));
    for (size_t i = 0; i < sizeof lower; i++) lower[i] = (char)tolower((unsigned char)first[i]);
    ASSERT_HAS(lower, "add"); /* the op table spells it ADD */
    ASSERT_HAS(first, "[2,3]");
    ASSERT_HAS(first, "[3,2]");
    ASSERT_MSG_HAS("[3,2]"); /* also the thread's last error */
    /* later builders, even well-formed ones, return invalid values */
    pipit_val d = pipit_add(g, a, a);
    ASSERT_TRUE(d.id < 0);
    pipit_val e = pipit_param(g, "e", PIPIT_F32, 1, SH(4));
    ASSERT_TRUE(e.id < 0);
    pipit_val f = pipit_sum(g, c);
    ASSERT_TRUE(f.id < 0);
    /* the first error sticks */
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_TRUE(strcmp(pipit_graph_errmsg(g), first) == 0);
    /* compile reports the same status and the original message */
    pipit_program *p = (pipit_program *)(uintptr_t)1;
    ASSERT_STATUS(pipit_compile(g, f, NULL, &p), PIPIT_STATUS_SHAPE);
    ASSERT_TRUE(p == NULL);
    ASSERT_MSG_HAS("[2,3]");
    ASSERT_MSG_HAS("[3,2]");
    /* also with a loss that was valid before the poisoning */
    pipit_graph *g2 = pipit_graph_new();
    pipit_val x = pipit_param(g2, "x", PIPIT_F32, 2, SH(2, 3));
    pipit_val loss = pipit_sum(g2, x);
    pipit_add(g2, x, pipit_param(g2, "y", PIPIT_F32, 2, SH(3, 2)));
    ASSERT_STATUS(pipit_compile(g2, loss, NULL, &p), PIPIT_STATUS_SHAPE);
    ASSERT_TRUE(p == NULL);
    ASSERT_TRUE(strcasestr(pipit_errmsg(), "add") != NULL);
    pipit_graph_free(g2);
    pipit_graph_free(g);
}

PIPIT_TEST(api_matmul_inner_dim) {
    pipit_graph *g = pipit_graph_new();
    pipit_val a = pipit_param(g, "a", PIPIT_F32, 2, SH(2, 3));
    pipit_val b = pipit_param(g, "b", PIPIT_F32, 2, SH(4, 5));
    ASSERT_TRUE(pipit_matmul(g, a, b, 0, 0).id < 0);
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    const char *m = pipit_graph_errmsg(g);
    ASSERT_TRUE(strcasestr(m, "matmul") != NULL);
    ASSERT_HAS(m, "[2,3]");
    ASSERT_HAS(m, "[4,5]");
    ASSERT_HAS(m, "inner");
    ASSERT_HAS(m, "3");
    pipit_graph_free(g);

    /* with trans_b the same operands are fine: [2,3] @ [5,3]^T */
    g = pipit_graph_new();
    a = pipit_param(g, "a", PIPIT_F32, 2, SH(2, 3));
    b = pipit_param(g, "b", PIPIT_F32, 2, SH(5, 3));
    pipit_val c = pipit_matmul(g, a, b, 0, 1);
    ASSERT_OK(pipit_graph_status(g));
    ASSERT_EQ_I64(pipit_val_dim(c, 0), 2);
    ASSERT_EQ_I64(pipit_val_dim(c, 1), 5);
    pipit_graph_free(g);
}

PIPIT_TEST(api_dtype_and_foreign_values) {
    pipit_graph *g = pipit_graph_new();
    pipit_val a = pipit_param(g, "a", PIPIT_F32, 1, SH(3));
    pipit_val b = pipit_param(g, "b", PIPIT_F64, 1, SH(3));
    ASSERT_TRUE(pipit_add(g, a, b).id < 0);
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_HAS(pipit_graph_errmsg(g), "f64");
    pipit_graph_free(g);

    /* i32 params are refused */
    g = pipit_graph_new();
    ASSERT_TRUE(pipit_param(g, "i", PIPIT_I32, 1, SH(3)).id < 0);
    ASSERT_TRUE(pipit_graph_status(g) != PIPIT_STATUS_OK);
    pipit_graph_free(g);

    /* a value of another graph poisons the graph it is passed to */
    pipit_graph *g1 = pipit_graph_new(), *g2 = pipit_graph_new();
    pipit_val x1 = pipit_param(g1, "x", PIPIT_F32, 1, SH(3));
    pipit_val x2 = pipit_param(g2, "x", PIPIT_F32, 1, SH(3));
    ASSERT_TRUE(pipit_add(g2, x1, x2).id < 0);
    ASSERT_STATUS(pipit_graph_status(g2), PIPIT_STATUS_INVALID);
    ASSERT_HAS(pipit_graph_errmsg(g2), "another graph");
    ASSERT_OK(pipit_graph_status(g1));
    /* and a loss of another graph is refused by compile */
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g1, x2, NULL, &p), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(p == NULL);
    pipit_graph_free(g1);
    pipit_graph_free(g2);
}

PIPIT_TEST(api_bad_loss) {
    /* not a scalar */
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_param(g, "x", PIPIT_F32, 2, SH(2, 3));
    pipit_val y = pipit_gelu(g, x);
    ASSERT_OK(pipit_graph_status(g));
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, y, NULL, &p), PIPIT_STATUS_SHAPE);
    ASSERT_TRUE(p == NULL);
    ASSERT_MSG_HAS("scalar");
    ASSERT_MSG_HAS("rank 2");
    /* invalid value as loss */
    ASSERT_TRUE(pipit_compile(g, (pipit_val){g, -1}, NULL, &p) != PIPIT_STATUS_OK);
    ASSERT_TRUE(p == NULL);
    /* id past the end */
    ASSERT_TRUE(pipit_compile(g, (pipit_val){g, 1000}, NULL, &p) != PIPIT_STATUS_OK);
    ASSERT_TRUE(p == NULL);
    pipit_graph_free(g);

    /* no parameters: the loss depends on inputs only */
    g = pipit_graph_new();
    pipit_val in = pipit_input(g, "in", PIPIT_F32, 2, SH(2, 3));
    pipit_val l = pipit_sum(g, pipit_gelu(g, in));
    ASSERT_OK(pipit_graph_status(g));
    ASSERT_STATUS(pipit_compile(g, l, NULL, &p), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(p == NULL);
    ASSERT_MSG_HAS("param");
    pipit_graph_free(g);

    /* a param exists but the loss does not use it */
    g = pipit_graph_new();
    pipit_param(g, "unused", PIPIT_F32, 1, SH(3));
    in = pipit_input(g, "in", PIPIT_F32, 1, SH(3));
    l = pipit_sum(g, in);
    ASSERT_STATUS(pipit_compile(g, l, NULL, &p), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(p == NULL);
    pipit_graph_free(g);
}

PIPIT_TEST(api_bad_options) {
    pipit_graph *g = pipit_graph_new();
    pipit_val l = pipit_sum(g, pipit_param(g, "x", PIPIT_F32, 1, SH(3)));
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.microbatches = -1}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("microbatches");
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.threads = 1000}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("threads");
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.clip_norm = -1}, &p), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_compile(g, l, &(pipit_options){.optimizer = pipit_adamw(1e-3, 1.0, 0.9, 1e-8, 0)}, &p),
                  PIPIT_STATUS_INVALID);
    ASSERT_TRUE(p == NULL);
    /* the graph is still usable afterwards */
    ASSERT_OK(pipit_compile(g, l, NULL, &p));
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* A small model: embed tokens, project, xent against targets. */
static pipit_val small_model_y(pipit_graph *g, int yield) {
    pipit_val tok = pipit_input(g, "tokens", PIPIT_I32, 2, SH(2, 4));
    pipit_val tgt = pipit_input(g, "targets", PIPIT_I32, 2, SH(2, 4));
    pipit_val wte = pipit_param(g, "wte", PIPIT_F32, 2, SH(10, 6));
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 2, SH(6, 7));
    pipit_val b = pipit_param(g, "b", PIPIT_F32, 1, SH(7));
    pipit_val h = pipit_gelu(g, pipit_embed(g, wte, tok));
    if (yield) h = pipit_yield(g, h);
    pipit_val logits = pipit_bias_add(g, pipit_matmul(g, h, w, 0, 0), b);
    return pipit_xent_mean(g, logits, tgt);
}
static pipit_val small_model(pipit_graph *g) { return small_model_y(g, 0); }

PIPIT_TEST(api_step_feed_errors) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = small_model(g);
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.microbatches = 2}, &p));
    int32_t tok[8] = {0, 1, 2, 3, 4, 5, 6, 9}, tgt[8] = {0, 1, 2, 3, 4, 5, 6, 6};
    pipit_feed ok[4] = {{"tokens", tok, sizeof tok}, {"targets", tgt, sizeof tgt}, {"tokens", tok, sizeof tok}, {"targets", tgt, sizeof tgt}};
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, ok, 2, 0, &m));
    ASSERT_TRUE(isfinite(m.loss));
    const double loss0 = m.loss;

    /* microbatch 1 lacks targets */
    pipit_feed miss[4] = {{"tokens", tok, sizeof tok}, {"targets", tgt, sizeof tgt}, {"tokens", tok, sizeof tok}, {"unused", tok, sizeof tok}};
    ASSERT_STATUS(pipit_step(p, miss, 2, 0, &m), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("'targets'");
    ASSERT_MSG_HAS("microbatch 1");
    ASSERT_HAS(pipit_program_errmsg(p), "'targets'");
    /* a misspelt name is a missing feed */
    pipit_feed typo[4] = {{"token", tok, sizeof tok}, {"targets", tgt, sizeof tgt}, {"tokens", tok, sizeof tok}, {"targets", tgt, sizeof tgt}};
    ASSERT_STATUS(pipit_step(p, typo, 2, 0, &m), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("'tokens'");
    ASSERT_STATUS(pipit_step(p, NULL, 2, 0, &m), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_step(p, ok, -1, 0, &m), PIPIT_STATUS_INVALID);

    /* token id >= vocab (10) of the embedding */
    int32_t big[8] = {0, 1, 2, 3, 4, 5, 6, 10};
    pipit_feed oob[4] = {{"tokens", tok, sizeof tok}, {"targets", tgt, sizeof tgt}, {"tokens", big, sizeof big}, {"targets", tgt, sizeof tgt}};
    ASSERT_STATUS(pipit_step(p, oob, 2, 0, &m), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("'tokens'");
    ASSERT_MSG_HAS("10");
    ASSERT_MSG_HAS("microbatch 1");
    /* negative id */
    int32_t neg[8] = {0, 1, 2, -3, 4, 5, 6, 7};
    pipit_feed negf[4] = {{"tokens", neg, sizeof neg}, {"targets", tgt, sizeof tgt}, {"tokens", tok, sizeof tok}, {"targets", tgt, sizeof tgt}};
    ASSERT_STATUS(pipit_step(p, negf, 2, 0, &m), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("-3");
    /* target id >= number of classes (7 logits) */
    int32_t badt[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    pipit_feed tf[4] = {{"tokens", tok, sizeof tok}, {"targets", badt, sizeof badt}, {"tokens", tok, sizeof tok}, {"targets", tgt, sizeof tgt}};
    ASSERT_STATUS(pipit_step(p, tf, 2, 0, &m), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("'targets'");
    ASSERT_MSG_HAS("7");

    /* after all that the program still works and gives the same loss */
    pipit_metrics m2;
    ASSERT_OK(pipit_step(p, ok, 2, 0, &m2));
    ASSERT_TRUE(m2.loss == loss0);
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(api_param_access_errors) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = small_model(g);
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, NULL, &p));
    ASSERT_EQ_I64(pipit_program_num_params(p), 3);
    float w[42] = {0};
    ASSERT_OK(pipit_program_set_param(p, "w", w, sizeof w));
    ASSERT_STATUS(pipit_program_set_param(p, "w", w, sizeof w - 4), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("'w'");
    ASSERT_MSG_HAS("168");
    ASSERT_MSG_HAS("164");
    ASSERT_STATUS(pipit_program_get_param(p, "w", w, sizeof w + 4), PIPIT_STATUS_SHAPE);
    ASSERT_STATUS(pipit_program_get_grad(p, "w", w, 0), PIPIT_STATUS_SHAPE);
    ASSERT_STATUS(pipit_program_set_param(p, "nope", w, sizeof w), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("'nope'");
    ASSERT_STATUS(pipit_program_get_param(p, "nope", w, sizeof w), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_program_get_grad(p, "nope", w, sizeof w), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_program_set_param(p, NULL, w, sizeof w), PIPIT_STATUS_INVALID);
    int nd = -1;
    int64_t shape[PIPIT_MAX_DIMS];
    ASSERT_STATUS(pipit_program_param_shape(p, "nope", &nd, shape), PIPIT_STATUS_INVALID);
    ASSERT_OK(pipit_program_param_shape(p, "w", &nd, shape));
    ASSERT_EQ_I64(nd, 2);
    ASSERT_EQ_I64(shape[0], 6);
    ASSERT_EQ_I64(shape[1], 7);
    ASSERT_TRUE(pipit_program_param_name(p, -1) == NULL);
    ASSERT_TRUE(pipit_program_param_name(p, 3) == NULL);
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(api_null_handles) {
    /* every *_free accepts NULL */
    pipit_graph_free(NULL);
    pipit_program_free(NULL);
    pipit_schedule_free(NULL);
    ASSERT_STATUS(pipit_graph_status(NULL), PIPIT_STATUS_MISUSE);
    ASSERT_TRUE(pipit_graph_errmsg(NULL) != NULL);
    ASSERT_TRUE(pipit_program_errmsg(NULL) != NULL);
    pipit_metrics m;
    ASSERT_STATUS(pipit_step(NULL, NULL, 0, 0, &m), PIPIT_STATUS_MISUSE);
    float x[3];
    ASSERT_STATUS(pipit_program_set_param(NULL, "x", x, sizeof x), PIPIT_STATUS_MISUSE);
    ASSERT_STATUS(pipit_program_get_param(NULL, "x", x, sizeof x), PIPIT_STATUS_MISUSE);
    ASSERT_STATUS(pipit_program_get_grad(NULL, "x", x, sizeof x), PIPIT_STATUS_MISUSE);
    ASSERT_STATUS(pipit_program_param_shape(NULL, "x", NULL, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_EQ_I64(pipit_program_num_params(NULL), 0);
    ASSERT_TRUE(pipit_program_param_name(NULL, 0) == NULL);
    /* builders on a NULL graph return invalid values and do not crash */
    pipit_val v = pipit_param(NULL, "x", PIPIT_F32, 1, SH(3));
    ASSERT_TRUE(v.id < 0);
    ASSERT_TRUE(pipit_input(NULL, "x", PIPIT_F32, 1, SH(3)).id < 0);
    ASSERT_TRUE(pipit_gelu(NULL, v).id < 0);
    ASSERT_TRUE(pipit_add(NULL, v, v).id < 0);
    ASSERT_EQ_I64(pipit_val_ndim(v), 0);
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(NULL, v, NULL, &p), PIPIT_STATUS_MISUSE);
    ASSERT_TRUE(p == NULL);
    pipit_graph *g = pipit_graph_new();
    pipit_val l = pipit_sum(g, pipit_param(g, "x", PIPIT_F32, 1, SH(3)));
    ASSERT_STATUS(pipit_compile(g, l, NULL, NULL), PIPIT_STATUS_MISUSE);
    /* empty or missing names */
    ASSERT_TRUE(pipit_param(g, "", PIPIT_F32, 1, SH(3)).id < 0);
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_INVALID);
    ASSERT_HAS(pipit_graph_errmsg(g), "name");
    pipit_graph_free(g);
    ASSERT_TRUE(strcmp(pipit_status_name(PIPIT_STATUS_OK), "ok") == 0);
    ASSERT_TRUE(pipit_status_name((pipit_status)999) != NULL);
}

/* ------------------------------------------------------------ OOM sweep */

/* Builds the small model, compiles (M = 2) and runs a step. Returns the
 * first failing status (OK if everything succeeded). */
static pipit_status build_compile_step(int threads, pipit_schedule *sched, int *got_program) {
    *got_program = 0;
    pipit_graph *g = pipit_graph_new();
    if (!g) return strstr(pipit_errmsg(), "out of memory") ? PIPIT_STATUS_NOMEM : PIPIT_STATUS_INTERNAL;
    pipit_val loss = small_model_y(g, sched != NULL);
    pipit_program *p = NULL;
    pipit_options o = {.schedule = sched, .microbatches = 2, .threads = threads};
    pipit_status s = pipit_compile(g, loss, &o, &p);
    if (s == PIPIT_STATUS_OK) {
        *got_program = p != NULL;
        int32_t tok[8] = {0, 1, 2, 3, 4, 5, 6, 9}, tgt[8] = {0, 1, 2, 3, 4, 5, 6, 6};
        pipit_feed f[4] = {{"tokens", tok, sizeof tok}, {"targets", tgt, sizeof tgt}, {"tokens", tok, sizeof tok}, {"targets", tgt, sizeof tgt}};
        pipit_metrics m;
        s = pipit_step(p, f, 2, 1, &m);
    } else if (p != NULL) {
        s = PIPIT_STATUS_INTERNAL; /* a failed compile must leave *out NULL */
    }
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

/* A hang (a rank waiting forever on a peer that failed) must fail the test
 * with the k that caused it rather than run into the ctest timeout. */
static char hang_msg[256];
static void on_alarm(int sig) {
    (void)sig;
    ssize_t w = write(2, hang_msg, strlen(hang_msg));
    (void)w;
    _exit(1);
}

static void oom_sweep(int threads, pipit_schedule *sched) {
    /* count the allocations of one full run: inject at a far count, then
     * probe how much of the countdown is left */
    const long FAR = 200000;
    int gotp;
    signal(SIGALRM, on_alarm);
    snprintf(hang_msg, sizeof hang_msg, "oom sweep: hang in the run without failures\n");
    alarm(60);
    pipit__alloc_fail_after(FAR);
    ASSERT_OK(build_compile_step(threads, sched, &gotp));
    long probes = 0;
    for (;;) {
        probes++;
        void *q = pipit__malloc(1);
        if (!q) break;
        pipit__free(q);
        if (probes > FAR) break;
    }
    pipit__alloc_fail_after(-1);
    long nalloc = FAR - probes;
    fprintf(stderr, "build + compile + step, %d thread(s), %s: %ld allocations\n", threads,
            sched ? "2 ranks" : "1 rank", nalloc);
    ASSERT_TRUE(nalloc > 10 && nalloc < FAR);
    /* With several ranks, rank threads allocate concurrently and the
     * injection countdown is a plain counter, so the count may come out a
     * little low: sweep a few past it and require success only at the end. */
    long last = nalloc + (sched ? 3 : 1);
    int fails = 0;
    for (long k = 1; k <= last; k++) {
        snprintf(hang_msg, sizeof hang_msg,
                 "oom sweep: threads=%d %s: HANG with allocation %ld failing (of %ld)\n", threads,
                 sched ? "2 ranks" : "1 rank", k, nalloc);
        if (getenv("PIPIT_TEST_VERBOSE")) fprintf(stderr, "oom sweep threads=%d k=%ld\n", threads, k);
        alarm(20);
        pipit__alloc_fail_after(k);
        pipit_status s = build_compile_step(threads, sched, &gotp);
        pipit__alloc_fail_after(-1);
        if (k <= nalloc && s != PIPIT_STATUS_NOMEM && s != PIPIT_STATUS_OK) {
            /* a graceful fallback could succeed, but nothing else is right */
            fprintf(stderr, "threads=%d k=%ld: status %s (%s), expected out of memory\n", threads, k,
                    pipit_status_name(s), pipit_errmsg());
            fails++;
        }
        if (k <= nalloc && s == PIPIT_STATUS_NOMEM && !strstr(pipit_errmsg(), "out of memory")) {
            fprintf(stderr, "threads=%d k=%ld: NOMEM with message \"%s\"\n", threads, k, pipit_errmsg());
            fails++;
        }
        if (k == last && s != PIPIT_STATUS_OK) {
            fprintf(stderr, "threads=%d k=%ld (past the last allocation): %s\n", threads, k, pipit_errmsg());
            fails++;
        }
    }
    alarm(0);
    ASSERT_EQ_I64(fails, 0);
}

/* Every allocation of build + compile + step failing in turn: a clean
 * NOMEM each time, never a crash, never a leak (run under ASan). */
PIPIT_TEST(api_oom_sweep) {
    oom_sweep(1, NULL);
    if (pipit_test_failed) return;
    oom_sweep(2, NULL); /* the compute pool's allocations too */
}

/* The same through a 2-rank 1F1B pipeline (stage split by pipit_yield). */
PIPIT_TEST(api_oom_sweep_pipeline) {
    pipit_schedule *sched = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sched));
    oom_sweep(1, sched);
    pipit_schedule_free(sched);
}

/* Indices that reach an embedding through a reshape and a yield are range
 * checked like direct ones: an out-of-range id is a clear error, never an
 * out-of-bounds read. */
PIPIT_TEST(api_token_range_through_aliases) {
    pipit_graph *g = pipit_graph_new();
    int64_t s6[1] = {6}, s23[2] = {2, 3}, tab[2] = {5, 4};
    pipit_val tok = pipit_input(g, "tok", PIPIT_I32, 1, s6);
    pipit_val t = pipit_param(g, "t", PIPIT_F32, 2, tab);
    pipit_val e = pipit_embed(g, t, pipit_yield(g, pipit_reshape(g, tok, 2, s23)));
    pipit_val loss = pipit_sum(g, pipit_gelu(g, e));
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, NULL, &p));
    int32_t ids[6] = {0, 1, 2, 3, 4, 5}; /* 5 is outside [0, 5) */
    pipit_feed f = {"tok", ids, sizeof ids};
    ASSERT_STATUS(pipit_step(p, &f, 1, 0, NULL), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_program_errmsg(p), "'tok'") != NULL);
    ASSERT_TRUE(strstr(pipit_program_errmsg(p), "[0, 5)") != NULL);
    ids[5] = 4;
    ASSERT_OK(pipit_step(p, &f, 1, 0, NULL));
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* gather's index bound reaches the input through a view (a slice of the
 * leading axis), a copying slice and a concat, and is checked before
 * anything runs; a cross-entropy's bound through the same copies. */
PIPIT_TEST(api_gather_index_range) {
    for (int how = 0; how < 3; how++) {
        pipit_graph *g = pipit_graph_new();
        pipit_val tok = pipit_input(g, "tok", PIPIT_I32, 2, SH(2, 3));
        pipit_val t = pipit_param(g, "t", PIPIT_F32, 3, SH(4, 2, 3)); /* rows of [2,3] */
        pipit_val parts[2] = {pipit_slice(g, tok, 1, 0, 1), pipit_slice(g, tok, 1, 1, 2)};
        pipit_val idx = how == 0 ? pipit_slice(g, tok, 0, 1, 1)     /* a view */
                        : how == 1 ? pipit_slice(g, tok, 1, 1, 2)   /* a copy */
                                   : pipit_concat(g, 2, parts, 1); /* copies */
        pipit_val loss = pipit_sum(g, pipit_silu(g, pipit_gather(g, t, idx)));
        if (how == 2) { /* tok also names classes of 3 logits: the tighter bound wins */
            pipit_val logits = pipit_param(g, "z", PIPIT_F32, 3, SH(2, 3, 3));
            loss = pipit_add(g, loss, pipit_xent_mean(g, logits, pipit_concat(g, 2, parts, 1)));
        }
        pipit_program *p = NULL;
        ASSERT_OK(pipit_compile(g, loss, NULL, &p));
        int32_t ids[6] = {0, 1, 2, 0, -1, 0}; /* -1 is outside [0, 4) */
        pipit_feed f = {"tok", ids, sizeof ids};
        ASSERT_STATUS(pipit_step(p, &f, 1, 0, NULL), PIPIT_STATUS_INVALID);
        ASSERT_TRUE(strstr(pipit_program_errmsg(p), "'tok'") != NULL);
        ASSERT_TRUE(strstr(pipit_program_errmsg(p), how == 2 ? "[0, 3)" : "[0, 4)") != NULL);
        ids[4] = 2;
        ASSERT_OK(pipit_step(p, &f, 1, 0, NULL));
        pipit_program_free(p);
        pipit_graph_free(g);
    }
}

/* Each builder of the general op set refuses a bad shape, axis, dtype or
 * attribute with SHAPE (or INVALID) and a message naming the builder, the
 * op, the input shapes and what is wrong. */
#define REFUSES(expr, st, ...)                                                        \
    do {                                                                              \
        pipit_graph *g = pipit_graph_new();                                           \
        pipit_val a = pipit_param(g, "a", PIPIT_F32, 2, SH(2, 3));                    \
        pipit_val b = pipit_param(g, "b", PIPIT_F32, 1, SH(4));                       \
        pipit_val q = pipit_param(g, "q", PIPIT_F32, 3, SH(2, 5, 8));                 \
        pipit_val k = pipit_param(g, "k", PIPIT_F32, 3, SH(2, 4, 6));                 \
        pipit_val d = pipit_param(g, "d", PIPIT_F64, 2, SH(2, 3));                    \
        pipit_val ids = pipit_input(g, "ids", PIPIT_I32, 1, SH(2));                   \
        (void)a, (void)b, (void)q, (void)k, (void)d, (void)ids;                       \
        pipit_val r_ = (expr);                                                        \
        ASSERT_TRUE(r_.id < 0);                                                       \
        ASSERT_STATUS(pipit_graph_status(g), st);                                     \
        const char *want_[] = {__VA_ARGS__};                                          \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof want_[0]; i_++)                \
            ASSERT_HAS(pipit_graph_errmsg(g), want_[i_]);                             \
        pipit_graph_free(g);                                                          \
    } while (0)

PIPIT_TEST(api_general_op_errors) {
    REFUSES(pipit_sub(g, a, b), PIPIT_STATUS_SHAPE, "pipit_sub", "sub(f32 [2,3], f32 [4])", "do not broadcast");
    REFUSES(pipit_add(g, a, pipit_param(g, "c", PIPIT_F32, 2, SH(3, 3))), PIPIT_STATUS_SHAPE, "pipit_add", "[3,3]",
            "do not broadcast");
    REFUSES(pipit_div(g, a, d), PIPIT_STATUS_SHAPE, "pipit_div", "f64 [2,3]", "one float dtype");
    REFUSES(pipit_mul(g, a, ids), PIPIT_STATUS_SHAPE, "pipit_mul", "i32 [2]");
    REFUSES(pipit_exp(g, ids), PIPIT_STATUS_SHAPE, "pipit_exp", "exp(i32 [2])", "f32, f64 or bf16");
    REFUSES(pipit_silu(g, ids), PIPIT_STATUS_SHAPE, "pipit_silu", "silu(i32 [2])");
    REFUSES(pipit_broadcast_to(g, a, 2, SH(4, 3)), PIPIT_STATUS_SHAPE, "pipit_broadcast_to", "[2,3]", "to [4,3]");
    REFUSES(pipit_broadcast_to(g, q, 2, SH(5, 8)), PIPIT_STATUS_SHAPE, "pipit_broadcast_to", "rank 3");
    REFUSES(pipit_reduce_sum(g, a, 2, 0), PIPIT_STATUS_SHAPE, "pipit_reduce_sum", "sum(f32 [2,3])",
            "axis 2 out of range for rank 2");
    REFUSES(pipit_reduce_mean(g, a, -3, 1), PIPIT_STATUS_SHAPE, "pipit_reduce_mean", "axis -3");
    REFUSES(pipit_reduce_max(g, ids, 0, 0), PIPIT_STATUS_SHAPE, "pipit_reduce_max", "i32 [2]");
    REFUSES(pipit_softmax(g, pipit_sum(g, a)), PIPIT_STATUS_SHAPE, "pipit_softmax", "rank >= 1");
    REFUSES(pipit_slice(g, a, 1, 2, 2), PIPIT_STATUS_SHAPE, "pipit_slice", "f32 [2,3]", "[2, 2+2)",
            "axis 1 of size 3");
    REFUSES(pipit_slice(g, a, 0, 0, 0), PIPIT_STATUS_SHAPE, "pipit_slice", "length >= 1");
    REFUSES(pipit_concat(g, 2, ((pipit_val[]){a, q}), 0), PIPIT_STATUS_SHAPE, "pipit_concat",
            "concat(f32 [2,3], f32 [2,5,8])", "input 1");
    REFUSES(pipit_concat(g, 2, ((pipit_val[]){a, d}), 1), PIPIT_STATUS_SHAPE, "pipit_concat", "one dtype");
    REFUSES(pipit_concat(g, 1, &a, 2), PIPIT_STATUS_SHAPE, "pipit_concat", "axis 2");
    REFUSES(pipit_concat(g, 0, &a, 0), PIPIT_STATUS_INVALID, "pipit_concat", "at least 1");
    REFUSES(pipit_gather(g, a, a), PIPIT_STATUS_SHAPE, "pipit_gather", "indices must be i32");
    REFUSES(pipit_gather(g, pipit_param(g, "t4", PIPIT_F32, 4, SH(2, 2, 2, 2)), pipit_input(g, "i2", PIPIT_I32, 2, SH(2, 2))),
            PIPIT_STATUS_SHAPE, "pipit_gather", "output rank 5");
    REFUSES(pipit_rmsnorm(g, a, b, 1e-5), PIPIT_STATUS_SHAPE, "pipit_rmsnorm", "rmsnorm(f32 [2,3], f32 [4])",
            "1-D of x's last axis");
    REFUSES(pipit_rmsnorm(g, a, pipit_param(g, "w", PIPIT_F32, 1, SH(3)), 0), PIPIT_STATUS_SHAPE, "eps must be > 0");
    REFUSES(pipit_rope(g, k, 2, 1e4), PIPIT_STATUS_SHAPE, "pipit_rope", "rope(f32 [2,4,6])", "head size 3 is odd");
    REFUSES(pipit_rope(g, a, 1, 1e4), PIPIT_STATUS_SHAPE, "pipit_rope", "[B,T,heads*D]");
    REFUSES(pipit_rope(g, q, 3, 1e4), PIPIT_STATUS_SHAPE, "pipit_rope", "heads (3) must divide 8");
    REFUSES(pipit_rope(g, q, 2, 0), PIPIT_STATUS_SHAPE, "pipit_rope", "theta");
    REFUSES(pipit_rope_ex(g, q, 2, 1e4, -1), PIPIT_STATUS_SHAPE, "pipit_rope_ex", "position offset -1");
    REFUSES(pipit_rope(g, pipit_param(g, "x4", PIPIT_F32, 4, SH(1, 2, 3, 4)), 2, 1e4), PIPIT_STATUS_SHAPE,
            "heads (2) must equal x's axis 2 (3)");
    pipit_attention_opts gqa = {4, 3, 0, 0}, causal = {4, 2, 1, 0}, mha = {4, 0, 0, 0};
    REFUSES(pipit_attention_qkv(g, q, k, k, &gqa), PIPIT_STATUS_SHAPE, "pipit_attention_qkv",
            "attention_qkv(f32 [2,5,8], f32 [2,4,6], f32 [2,4,6])", "kv_heads (3) must divide heads (4)");
    REFUSES(pipit_attention_qkv(g, q, k, k, &causal), PIPIT_STATUS_SHAPE, "k and v must be [2,S,4]");
    REFUSES(pipit_attention_qkv(g, q, q, pipit_param(g, "v", PIPIT_F32, 3, SH(2, 6, 8)), &mha), PIPIT_STATUS_SHAPE,
            "k and v must have one shape");
    REFUSES(pipit_attention_qkv(g, q, pipit_param(g, "k8", PIPIT_F32, 3, SH(2, 4, 8)),
                                pipit_param(g, "v8", PIPIT_F32, 3, SH(2, 4, 8)), (&(pipit_attention_opts){4, 4, 1, 0})),
            PIPIT_STATUS_SHAPE, "causal attention needs as many keys as queries (S 4, T 5)");
    REFUSES(pipit_attention_qkv(g, a, a, a, &mha), PIPIT_STATUS_SHAPE, "3-D");
    REFUSES(pipit_attention_qkv(g, q, q, q, (&(pipit_attention_opts){4, 4, 0, -1})), PIPIT_STATUS_SHAPE,
            "scale must be finite and > 0");
    REFUSES(pipit_attention_qkv(g, q, q, d, &mha), PIPIT_STATUS_SHAPE, "one float dtype");
    REFUSES(pipit_attention_qkv(g, q, q, q, NULL), PIPIT_STATUS_INVALID, "pipit_attention_qkv", "options are NULL");
    /* split: sizes that do not add up, an axis out of range */
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_param(g, "x", PIPIT_F32, 2, SH(2, 6)), out[2];
    ASSERT_STATUS(pipit_split(g, x, 1, 2, SH(2, 3), out), PIPIT_STATUS_SHAPE);
    ASSERT_HAS(pipit_graph_errmsg(g), "pipit_split");
    ASSERT_HAS(pipit_graph_errmsg(g), "split(f32 [2,6])");
    ASSERT_HAS(pipit_graph_errmsg(g), "add up to axis 1's 6");
    pipit_graph_free(g);
    g = pipit_graph_new();
    x = pipit_param(g, "x", PIPIT_F32, 2, SH(2, 6));
    ASSERT_STATUS(pipit_split(g, x, 2, 1, SH(6), out), PIPIT_STATUS_SHAPE);
    ASSERT_HAS(pipit_graph_errmsg(g), "axis 2 out of range");
    pipit_graph_free(g);
}

/* A param may be used any number of times: 70 uses, each accumulated on
 * its own and added in use order, give exactly 70 * x. */
PIPIT_TEST(api_param_many_uses) {
    pipit_graph *g = pipit_graph_new();
    int64_t s4[1] = {4};
    pipit_val w = pipit_param(g, "w", PIPIT_F64, 1, s4), x = pipit_input(g, "x", PIPIT_F64, 1, s4);
    pipit_val loss = pipit_sum(g, pipit_mul(g, w, x));
    for (int k = 1; k < 70; k++) loss = pipit_add(g, loss, pipit_sum(g, pipit_mul(g, w, x)));
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, NULL, &p));
    double xs[4] = {1, -2, 3, 0.5}, gw[4];
    pipit_feed f = {"x", xs, sizeof xs};
    ASSERT_OK(pipit_step(p, &f, 1, 0, NULL));
    ASSERT_OK(pipit_program_get_grad(p, "w", gw, sizeof gw));
    for (int i = 0; i < 4; i++) ASSERT_TRUE(gw[i] == 70 * xs[i]);
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* A feed given twice is an error (which one would win?); a feed with no
 * name among the real ones is ignored, never dereferenced. */
PIPIT_TEST(api_feed_duplicates_and_unnamed) {
    pipit_graph *g = pipit_graph_new();
    int64_t s2[1] = {2};
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 1, s2), x = pipit_input(g, "x", PIPIT_F32, 1, s2);
    pipit_val loss = pipit_sum(g, pipit_mul(g, w, x));
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, NULL, &p));
    float a[2] = {1, 2}, b[2] = {3, 4};
    pipit_feed twice[2] = {{"x", a, sizeof a}, {"x", b, sizeof b}};
    ASSERT_STATUS(pipit_step(p, twice, 2, 0, NULL), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_program_errmsg(p), "two feeds for input 'x'") != NULL);
    pipit_feed unnamed[2] = {{NULL, b, sizeof b}, {"x", a, sizeof a}};
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, unnamed, 2, 0, &m));
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* Param and input names are unique however the graph grew: among 5000
 * names (the name index's growth) and after a failed compile rolled back
 * the nodes it had appended; the refusal names the call and the name. */
PIPIT_TEST(api_names_unique_at_scale) {
    pipit_graph *g = pipit_graph_new();
    int64_t s1[1] = {1};
    char name[32];
    pipit_val acc = pipit_input(g, "x", PIPIT_F32, 1, s1);
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "w%d", i);
        acc = pipit_add(g, acc, pipit_param(g, name, PIPIT_F32, 1, s1));
    }
    ASSERT_OK(pipit_graph_status(g));
    pipit_val loss = pipit_sum(g, pipit_yield(g, acc));
    pipit_schedule *s4 = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 4, &s4));
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.schedule = s4, .microbatches = 2}, &p),
                  PIPIT_STATUS_SCHEDULE); /* rolls back what it appended */
    pipit_schedule_free(s4);
    ASSERT_OK(pipit_graph_status(g));
    pipit_param(g, "fresh", PIPIT_F32, 1, s1);
    ASSERT_OK(pipit_graph_status(g));
    pipit_param(g, "w4999", PIPIT_F32, 1, s1);
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_graph_errmsg(g), "pipit_param: name 'w4999' is already used") != NULL);
    pipit_graph_free(g);

    g = pipit_graph_new();
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "p%d", i);
        pipit_param(g, name, PIPIT_F32, 1, s1);
    }
    pipit_input(g, "p0", PIPIT_F32, 1, s1); /* the first name, after every growth of the index */
    ASSERT_STATUS(pipit_graph_status(g), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_graph_errmsg(g), "pipit_input: name 'p0' is already used") != NULL);
    pipit_graph_free(g);
}
