/*
 * test.h — the test registry and assertion macros.
 *
 * PIPIT_TEST(name) { ... } defines and registers a test. All tests link into
 * one binary, `pipit_tests`; CMake registers one ctest entry per test (with a
 * timeout, so a hang is reported by name): `pipit_tests NAME` runs one test
 * in-process (for gdb/valgrind), `pipit_tests` alone runs them all, and
 * `pipit_tests --list` prints the names.
 * Assertions print both sides and the location, then fail the test.
 */
#ifndef PIPIT_TEST_H
#define PIPIT_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*pipit_test_fn)(void);
void pipit_test_register(const char *name, pipit_test_fn fn);
/* Set when an assertion fails; the runner returns non-zero. */
extern int pipit_test_failed;
/* Set by PIPIT_SKIP: the test did not apply here (e.g. not under mpirun).
 * When every test that ran was skipped, the runner exits PIPIT_TEST_SKIP_CODE
 * (ctest's SKIP_RETURN_CODE). */
extern int pipit_test_skipped;
#define PIPIT_TEST_SKIP_CODE 77
/* Directory for scratch files of this test run (exists, writable). */
const char *pipit_test_tmpdir(void);
/* "<tmpdir>/<name>" in one of four rotating static buffers (four paths may
 * be held at once). */
const char *pipit_test_path(const char *name);
/* Directory of the source tree's tests/ (for fixtures and scripts). */
const char *pipit_test_srcdir(void);

#define PIPIT_TEST(name)                                                     \
    static void test_##name(void);                                           \
    __attribute__((constructor)) static void register_##name(void) {         \
        pipit_test_register(#name, test_##name);                             \
    }                                                                        \
    static void test_##name(void)

#define PIPIT_FAIL_(...)                                                     \
    do {                                                                     \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                      \
        fprintf(stderr, __VA_ARGS__);                                        \
        fprintf(stderr, "\n");                                               \
        pipit_test_failed = 1;                                               \
        return;                                                              \
    } while (0)

#define PIPIT_SKIP(...)                                                      \
    do {                                                                     \
        printf("skipped: ");                                                 \
        printf(__VA_ARGS__);                                                 \
        printf("\n");                                                        \
        pipit_test_skipped = 1;                                              \
        return;                                                              \
    } while (0)

#define ASSERT_TRUE(c)                                                       \
    do {                                                                     \
        if (!(c)) PIPIT_FAIL_("assertion failed: %s", #c);                   \
    } while (0)

#define ASSERT_EQ_I64(a, b)                                                  \
    do {                                                                     \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_) PIPIT_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_); \
    } while (0)

#define ASSERT_NEAR_F64(a, b, tol)                                           \
    do {                                                                     \
        double a_ = (double)(a), b_ = (double)(b);                           \
        if (!(fabs(a_ - b_) <= (tol)))                                       \
            PIPIT_FAIL_("%s ~= %s: %.12g vs %.12g (tol %g)", #a, #b, a_, b_, \
                        (double)(tol));                                      \
    } while (0)

#define ASSERT_STATUS(call, expect)                                          \
    do {                                                                     \
        pipit_status s_ = (call);                                            \
        if (s_ != (expect))                                                  \
            PIPIT_FAIL_("%s: got %s, expected %s (msg: %s)", #call,          \
                        pipit_status_name(s_), pipit_status_name(expect),    \
                        pipit_errmsg());                                     \
    } while (0)

#define ASSERT_OK(call) ASSERT_STATUS(call, PIPIT_STATUS_OK)

/* Asserts that the last error message contains `needle`. */
#define ASSERT_MSG_HAS(needle)                                               \
    do {                                                                     \
        if (!strstr(pipit_errmsg(), (needle)))                               \
            PIPIT_FAIL_("message \"%s\" lacks \"%s\"", pipit_errmsg(),       \
                        (needle));                                           \
    } while (0)

#endif
