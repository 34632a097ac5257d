/*
 * test_mpi_agree.c — ranks agree or stop, under `mpirun -np 2` (ctest:
 * mpi_transport_vader, mpi_transport_tcp, test_mpi_netns; alone, every test
 * skips): pipit_agree and pipit_compile's plan agreement refuse, on both
 * processes and with the same message, a field or plan that differs
 * between them, naming it and each process's value; a process whose
 * compile fails alone stops the other too, naming it; processes that agree
 * compile and run as before (the exchanges stay in step).
 */
#include "pipit.h"
#include "test.h"

/* Under mpirun -np 2, with MPI finalised at exit; else skip. */
static int two_processes(void) {
    static int registered;
    if (pipit_init(NULL, NULL) != PIPIT_STATUS_OK || pipit_process_count() != 2) return 0;
    if (!registered) atexit(pipit_finalize), registered = 1;
    return 1;
}

#define NEED_TWO()                                                     \
    do {                                                               \
        if (!two_processes()) PIPIT_SKIP("not under mpirun -np 2");    \
    } while (0)

/* loss = sum(x * w) with a param w [n]. */
static pipit_val small(pipit_graph *g, int64_t n) {
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 1, (int64_t[]){n});
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 1, (int64_t[]){n});
    return pipit_sum(g, pipit_mul(g, x, w));
}

PIPIT_TEST(mpi_agree_fields) {
    NEED_TWO();
    int me = pipit_process_rank();
    ASSERT_OK(pipit_agree("test", (const char *const[]){"a", "1", "b", "same", NULL}));
    ASSERT_STATUS(pipit_agree("test", (const char *const[]){"a", "1", "b", me ? "two" : "one", NULL}),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pipit_agree (test): the 2 processes of this job disagree on b: process 0 has 'one'; process 1 "
                   "has 'two'");
    /* a bad argument on one process stops both, naming it */
    ASSERT_STATUS(pipit_agree("test", (const char *const[]){"a", me ? NULL : "1", NULL}), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("process 1 of 2 failed: pipit_agree: field 'a' has no value");
    /* different field lists: different programs */
    ASSERT_STATUS(pipit_agree("test", (const char *const[]){me ? "a" : "z", "1", NULL}), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("check different lists of fields");
    ASSERT_OK(pipit_agree("test", NULL)); /* and the exchange is still in step */
}

PIPIT_TEST(mpi_agree_compile) {
    NEED_TWO();
    int me = pipit_process_rank();
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = small(g, 8);
    pipit_program *p = NULL;
    /* a learning rate that differs: both refuse, naming it */
    pipit_options o = {.optimizer = pipit_adamw(me ? 2e-3 : 1e-3, 0.9, 0.95, 1e-8, 0), .data_parallel = 2};
    ASSERT_STATUS(pipit_compile(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pipit_compile: the 2 processes of this job disagree on options.optimizer.lr: process 0 has "
                   "'0.001'; process 1 has '0.002'");
    ASSERT_TRUE(p == NULL);
    /* clipping, microbatches */
    o = (pipit_options){.clip_norm = me ? 1.0 : 0.0, .data_parallel = 2};
    ASSERT_STATUS(pipit_compile(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("disagree on options.clip_norm");
    o = (pipit_options){.microbatches = me ? 2 : 1, .data_parallel = 2};
    ASSERT_STATUS(pipit_compile(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("disagree on options.microbatches");
    /* a bad option on one process: both stop, naming it (neither waits for the other) */
    o = (pipit_options){.threads = me ? -1 : 1, .data_parallel = 2};
    ASSERT_STATUS(pipit_compile(g, loss, &o, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("process 1 of 2 failed");
    ASSERT_MSG_HAS("options.threads");
    /* memory admission refusing on one process only: both stop */
    o = (pipit_options){.data_parallel = 2, .mem_limit = me ? 1 : 0};
    ASSERT_STATUS(pipit_compile(g, loss, &o, &p), PIPIT_STATUS_NOMEM);
    ASSERT_MSG_HAS("process 1 of 2 failed");
    /* a graph that differs: the params' shapes */
    pipit_graph *g2 = pipit_graph_new();
    pipit_val loss2 = small(g2, me ? 9 : 8);
    ASSERT_STATUS(pipit_compile(g2, loss2, &(pipit_options){.data_parallel = 2}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("disagree on the params");
    pipit_graph_free(g2);
    /* agreeing processes compile and run, with every refused compile undone */
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.data_parallel = 2}, &p));
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    pipit_feed f[2] = {{"x", x, sizeof x}, {"x", x, sizeof x}};
    pipit_metrics m;
    ASSERT_OK(pipit_step_feeds(p, f, 2, 1, 1, &m));
    pipit_program_free(p);
    pipit_graph_free(g);
}
