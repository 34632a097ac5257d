/*
 * main.c — test runner: runs one named test, or all, or lists them. Also
 * the runner of pipit_cuda_tests (tests/cuda), behind a gate.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

#define MAX_TESTS 1024

static struct {
    const char *name;
    pipit_test_fn fn;
} tests[MAX_TESTS];
static int ntests;
int pipit_test_failed;
int pipit_test_skipped;

void pipit_test_register(const char *name, pipit_test_fn fn) {
    if (ntests < MAX_TESTS) {
        tests[ntests].name = name;
        tests[ntests].fn = fn;
        ntests++;
    }
}

const char *pipit_test_tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/pipit_test_%d", base && *base ? base : "/tmp",
                 (int)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

const char *pipit_test_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", pipit_test_tmpdir(), name);
    return buf[k];
}

const char *pipit_test_srcdir(void) { return PIPIT_TEST_SRCDIR; }

static int nskipped;

static int run_one(int i) {
    pipit_test_failed = 0;
    pipit_test_skipped = 0;
    tests[i].fn();
    if (pipit_test_skipped && !pipit_test_failed) nskipped++;
    printf("%s %s\n", pipit_test_failed ? "FAIL" : pipit_test_skipped ? "skip" : "ok  ", tests[i].name);
    fflush(stdout);
    return pipit_test_failed;
}

#ifdef PIPIT_TEST_GATE
/* A binary whose tests need something the machine may lack (the GPU tests:
 * a CUDA device) names a gate; when it returns non-zero (having printed
 * why), nothing runs and the binary exits PIPIT_TEST_SKIP_CODE. */
int PIPIT_TEST_GATE(void);
#endif

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < ntests; i++) printf("%s\n", tests[i].name);
        return 0;
    }
#ifdef PIPIT_TEST_GATE
    if (PIPIT_TEST_GATE()) return PIPIT_TEST_SKIP_CODE;
#endif
    int failed = 0, ran = 0;
    for (int i = 0; i < ntests; i++) {
        int wanted = argc < 2;
        for (int a = 1; a < argc; a++)
            if (strcmp(argv[a], tests[i].name) == 0) wanted = 1;
        if (!wanted) continue;
        failed += run_one(i);
        ran++;
    }
    if (ran == 0) {
        fprintf(stderr, "no test matched\n");
        return 2;
    }
    printf("%d passed, %d failed, %d skipped\n", ran - failed - nskipped, failed, nskipped);
    if (failed) return 1;
    return nskipped == ran ? PIPIT_TEST_SKIP_CODE : 0;
}
