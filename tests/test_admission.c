/*
 * test_admission.c — memory admission (docs/refuses.md): pipit_compile
 * refuses a program that needs more memory than the process may use, with
 * NOMEM and a message naming the need, the limit and the largest
 * consumers, before anything large is allocated: under a caller's limit
 * (options.mem_limit), under RLIMIT_AS (in a child process), and for a
 * step of 2^24 microbatches before its instruction lists exist. A program
 * that fits is not refused; no_mem_check skips the check.
 */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipit_inspect.h"
#include "runtime/program.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ADMIT_SANITIZER 1 /* their shadow memory needs terabytes of address space */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ADMIT_SANITIZER 1
#endif
#endif

/* loss = sum(gelu(w * x)) over a param of n floats (4n bytes; 16n with
 * its gradient and AdamW moments) and an input of n floats: activations of
 * a few times 4n bytes, which only the plan knows. */
static pipit_val wide(pipit_graph *g, int64_t n) {
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 1, (int64_t[]){n});
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 1, (int64_t[]){n});
    return pipit_sum(g, pipit_gelu(g, pipit_mul(g, x, w)));
}

PIPIT_TEST(admission_caller_limit) {
    const int64_t n = 1 << 22; /* 16 MiB of params, 64 MiB with gradient and moments */
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = wide(g, n);
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.mem_limit = 32e6}, &p), PIPIT_STATUS_NOMEM);
    ASSERT_TRUE(p == NULL);
    ASSERT_MSG_HAS("pipit_compile: this program needs ");
    ASSERT_MSG_HAS("but 30.5 MiB is available, the limit being the limit set by the caller (30.5 MiB)");
    ASSERT_MSG_HAS("parameters with their gradients and optimizer moments (at least) 64.0 MiB");
    ASSERT_MSG_HAS("options.zero1");
    ASSERT_MSG_HAS("options.no_mem_check = 1 skips this check");
    /* the graph's bound is 80 MiB with the feeds; after planning the
     * activations count too: refused by a limit between the two */
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.mem_limit = 100e6}, &p), PIPIT_STATUS_NOMEM);
    ASSERT_MSG_HAS("optimizer moments 32.0 MiB");
    ASSERT_MSG_HAS("activation arenas");
    ASSERT_TRUE(!strstr(pipit_errmsg(), "(at least)"));
    /* fits: compiled and runs; skipping the check: compiled too */
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.mem_limit = 200e6}, &p));
    pipit_program_free(p);
    pipit_graph_free(g);
    g = pipit_graph_new();
    loss = wide(g, n);
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.mem_limit = 1, .no_mem_check = 1}, &p));
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(admission_options_checked) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = wide(g, 4);
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.mem_limit = -1}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.mem_limit must be a finite number of bytes >= 0");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.mem_limit = NAN}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.mem_limit");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.no_mem_check = 2}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.no_mem_check must be 0 (check) or 1");
    const char *which = NULL;
    double avail = pipit_mem_available(&which);
    ASSERT_TRUE(avail > 0);
    ASSERT_TRUE(which && *which);
    pipit_graph_free(g);
}

PIPIT_TEST(admission_before_planning) {
    /* 2^24 microbatches of a small model: its instruction lists alone would
     * take gigabytes; refused from the graph, before lowering, at once */
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = wide(g, 64);
    for (int i = 0; i < 8; i++) loss = pipit_scale(g, loss, 0.5);
    pipit_program *p = NULL;
    double t0 = pipit__now();
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.microbatches = PIPIT_MAX_MICROBATCHES, .mem_limit = 1e9}, &p),
                  PIPIT_STATUS_NOMEM);
    ASSERT_TRUE(pipit__now() - t0 < 2.0);
    ASSERT_MSG_HAS("instruction lists (at least)");
    ASSERT_MSG_HAS("the feeds of one step (held by the caller)");
    ASSERT_EQ_I64(g->n, 13); /* the graph as it was: nothing planned */
    pipit_graph_free(g);
}

#ifndef ADMIT_SANITIZER
/* In a child (an rlimit is for the whole process): RLIMIT_AS at what is
 * mapped + 256 MiB; a 2 GiB program is refused naming RLIMIT_AS, a small
 * one is compiled. Exit 0 when both hold. */
static int rlimit_child(void) {
    struct rlimit r;
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f || fscanf(f, "%lu", &pages) != 1) return 2;
    fclose(f);
    r.rlim_cur = r.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
    if (setrlimit(RLIMIT_AS, &r) != 0) return 3;
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = wide(g, (int64_t)1 << 27); /* 512 MiB of params: 2 GiB with gradient and moments */
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, NULL, &p) != PIPIT_STATUS_NOMEM) return 4;
    if (!strstr(pipit_errmsg(), "RLIMIT_AS") || !strstr(pipit_errmsg(), "needs ")) {
        fprintf(stderr, "message: %s\n", pipit_errmsg());
        return 5;
    }
    fprintf(stderr, "refused: %s\n", pipit_errmsg());
    pipit_graph_free(g);
    g = pipit_graph_new();
    loss = wide(g, (int64_t)1 << 20); /* 16 MiB in all: fits */
    if (pipit_compile(g, loss, NULL, &p) != PIPIT_STATUS_OK) {
        fprintf(stderr, "a program that fits was refused: %s\n", pipit_errmsg());
        return 6;
    }
    pipit_program_free(p);
    pipit_graph_free(g);
    return 0;
}
#endif

#ifndef ADMIT_SANITIZER
/* Runs child() in a forked process (its rlimit stays there) and asserts
 * that it exited 0; a non-zero exit names the check that failed inside. */
#define run_child(child)                                 \
    do {                                                 \
        fflush(NULL);                                    \
        pid_t pid_ = fork();                             \
        ASSERT_TRUE(pid_ >= 0);                          \
        if (pid_ == 0) _exit(child());                   \
        int st_ = 0;                                     \
        ASSERT_TRUE(waitpid(pid_, &st_, 0) == pid_);     \
        ASSERT_TRUE(WIFEXITED(st_));                     \
        ASSERT_EQ_I64(WEXITSTATUS(st_), 0);              \
    } while (0)
#endif

PIPIT_TEST(admission_rlimit_as) {
#ifdef ADMIT_SANITIZER
    PIPIT_SKIP("RLIMIT_AS cannot be set under a sanitizer (its shadow memory needs terabytes of address space)");
#else
    run_child(rlimit_child);
#endif
}

/* options.plan_only (issue 25 item 12): planning a job bigger than this
 * machine. In a child under RLIMIT_AS (mapped + 256 MiB), a program of
 * 2 GiB (params, gradients, moments) and as much input is planned, not
 * refused, and allocates nothing: its plan prints, its params can be
 * queried, and every call that runs it or reads its memory is INVALID
 * naming options.plan_only. Exit 0 when all hold. */
#ifndef ADMIT_SANITIZER
static int plan_only_child(void) {
    struct rlimit r;
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f || fscanf(f, "%lu", &pages) != 1) return 2;
    fclose(f);
    r.rlim_cur = r.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
    if (setrlimit(RLIMIT_AS, &r) != 0) return 3;
    pipit_graph *g = pipit_graph_new();
    const int64_t n = (int64_t)1 << 27;
    pipit_val loss = wide(g, n);
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.plan_only = 1}, &p) != PIPIT_STATUS_OK) {
        fprintf(stderr, "plan-only compile refused: %s\n", pipit_errmsg());
        return 4;
    }
    FILE *null = fopen("/dev/null", "w");
    int64_t numel = 0, shape[PIPIT_MAX_DIMS];
    int nd = 0;
    if (!null || pipit_program_print_plan(null, p, 1) || pipit_program_write_plan_json(null, p) ||
        pipit_program_num_params(p) != 1 || pipit_program_param_numel(p, "w", &numel) || numel != n ||
        pipit_program_param_shape(p, "w", &nd, shape) || nd != 1 || pipit_program_num_ranks(p) != 1) {
        fprintf(stderr, "inspecting a plan-only program failed: %s\n", pipit_errmsg());
        return 5;
    }
    float one = 0;
    pipit_rank_step rs;
    pipit_feed feed = {"x", &one, sizeof one};
    const struct {
        const char *fn;
        pipit_status s;
    } refused[] = {
        {"pipit_step", pipit_step(p, &feed, 1, 1, NULL)},
        {"pipit_program_get_param", pipit_program_get_param(p, "w", &one, sizeof(float) * (size_t)n)},
        {"pipit_program_set_param", pipit_program_set_param(p, "w", &one, sizeof(float) * (size_t)n)},
        {"pipit_program_get_grad", pipit_program_get_grad(p, "w", &one, sizeof(float) * (size_t)n)},
        {"pipit_program_get_opt_state", pipit_program_get_opt_state(p, "w", 0, &one, sizeof(float) * (size_t)n)},
        {"pipit_program_get_output", pipit_program_get_output(p, loss, 0, &one, sizeof one)},
        {"pipit_program_set_profile", pipit_program_set_profile(p, 1)},
        {"pipit_program_last_step", pipit_program_last_step(p, 0, &rs)},
        {"pipit_program_held_bytes", pipit_program_held_bytes(p, 0, PIPIT_HELD_GRADS, &(size_t){0})},
        {"pipit_program_print_profile", pipit_program_print_profile(null, p)},
        {"pipit_program_write_trace", pipit_program_write_trace(p, "/dev/null")},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (refused[i].s != PIPIT_STATUS_INVALID) {
            fprintf(stderr, "%s on a plan-only program: %s, not INVALID\n", refused[i].fn, pipit_status_name(refused[i].s));
            return 6;
        }
    if (!strstr(pipit_errmsg(), "pipit_program_write_trace: this program was compiled with options.plan_only")) {
        fprintf(stderr, "message: %s\n", pipit_errmsg());
        return 7;
    }
    fclose(null);
    pipit_program_free(p);
    pipit_graph_free(g);
    return 0;
}
#endif

PIPIT_TEST(admission_plan_only) {
    /* the target's limit: every world rank's need against options.mem_limit */
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = wide(g, (int64_t)1 << 22); /* 64 MiB with gradient and moments, and activations */
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.plan_only = 1, .mem_limit = 100e6}, &p), PIPIT_STATUS_NOMEM);
    ASSERT_MSG_HAS("pipit_compile: world rank 0 (the largest of 1) needs ");
    ASSERT_MSG_HAS("the limit set by the caller");
    ASSERT_MSG_HAS("activation arenas");
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.plan_only = 1, .mem_limit = 200e6}, &p));
    pipit_program_free(p);
    pipit_graph_free(g);
    g = pipit_graph_new();
    loss = wide(g, 4);
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.plan_only = 2}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.plan_only must be 0 (a program that runs) or 1");
    pipit_graph_free(g);
#ifdef ADMIT_SANITIZER
    PIPIT_SKIP("RLIMIT_AS cannot be set under a sanitizer (its shadow memory needs terabytes of address space)");
#else
    run_child(plan_only_child);
#endif
}
