/*
 * fuzz_flags.c — libFuzzer target: the CLI's flag parser (tools/flags.c,
 * flags_parse) on arbitrary argument vectors. The input is split at NUL
 * bytes into argv. tools/flags.c is compiled into this target with
 * -DPIPIT_FLAGS_EXIT=pipit_fuzz_flags_exit, so die() and --help land in the
 * longjmp below instead of exiting.
 */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "fuzz.h"
#include "util/common.h"

void pipit_fuzz_flags_exit(int status) __attribute__((noreturn));

static jmp_buf back;
static volatile int exit_status;

void pipit_fuzz_flags_exit(int status) {
    exit_status = status;
    longjmp(back, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    enum { MAXARGS = 64 };
    static int i_val, b_val, b2_val;
    static uint64_t u_val;
    static double d_val;
    static const char *s_val, *s2_val;
    static flag fl[] = {
        {"steps", FL_INT, &i_val, "an int", 0},     {"seed", FL_U64, &u_val, "a u64", 0},
        {"lr", FL_DBL, &d_val, "a double", 0},      {"out", FL_STR, &s_val, "a string", 0},
        {"verbose", FL_BOOL, &b_val, "a bool", 0},  {"s", FL_STR, &s2_val, "a short one", 0},
        {"steps-max", FL_BOOL, &b2_val, "a prefix of another", 0},
    };
    static flag_cmd cmd = {"fuzz", "[flags]", NULL, fl, NFLAGS(fl)};
    for (int k = 0; k < NFLAGS(fl); k++) fl[k].seen = 0;
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    char *argv[MAXARGS + 1];
    int n = 0;
    for (size_t i = 0; i <= size && n < MAXARGS;) { /* NUL-separated strings */
        argv[n++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[n] = NULL;
    volatile int argc = n; /* read after setjmp: kept out of a register longjmp may clobber */
    i_val = b_val = b2_val = 0;
    u_val = 0;
    d_val = 0;
    s_val = s2_val = NULL;
    exit_status = -1;
    if (setjmp(back) == 0) {
        flags_parse(&cmd, argc, argv);
        /* accepted: what was stored is what the flags say */
        PIPIT_ASSERT(!fl[0].seen || (i_val >= -2147483647 && i_val <= 2147483647));
        PIPIT_ASSERT(!fl[2].seen || (d_val == d_val && d_val - d_val == 0)); /* finite */
        PIPIT_ASSERT(!fl[3].seen || (s_val >= buf && s_val <= buf + size));
        PIPIT_ASSERT(fl[4].seen == b_val);
        static const char *const req[] = {"steps", NULL};
        if (setjmp(back) == 0) flags_require(&cmd, req);
        else PIPIT_ASSERT(exit_status == 1 && !fl[0].seen);
        (void)flags_seen(&cmd, "nope");
    } else {
        PIPIT_ASSERT(exit_status == 0 || exit_status == 1);
    }
    free(buf);
    return 0;
}
