/*
 * fuzz_config.c — libFuzzer target: `--config FILE` (tools/config.c,
 * cli_config_apply and cli_config_string) on arbitrary bytes, into a flag
 * table of every type. tools/config.c and tools/flags.c are compiled into
 * this target with -DPIPIT_FLAGS_EXIT=pipit_fuzz_flags_exit, so die() lands
 * in the longjmp below instead of exiting. An accepted file stored values
 * in range, and no key twice.
 */
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
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
    static int i_val, b_val;
    static uint64_t u_val;
    static double d_val;
    static const char *s_val;
    static flag fl[] = {
        {"layers", FL_INT, &i_val, "an int", 0}, {"seed", FL_U64, &u_val, "a u64", 0},
        {"lr", FL_DBL, &d_val, "a double", 0},   {"schedule", FL_STR, &s_val, "a string", 0},
        {"remat", FL_BOOL, &b_val, "a bool", 0},
    };
    static flag_cmd cmd = {"fuzz", "[flags]", NULL, fl, NFLAGS(fl)};
    const char *path = pipit_fuzz_file("config.json", data, size);
    if (!path) return 0;
    for (int k = 0; k < NFLAGS(fl); k++) fl[k].seen = 0;
    i_val = b_val = 0;
    u_val = 0;
    d_val = 0;
    s_val = NULL;
    exit_status = -1;
    if (setjmp(back) == 0) {
        cli_config_apply(&cmd, path, (const char *const[]){"model", NULL});
        PIPIT_ASSERT(!fl[0].seen || (i_val >= -2147483647 && i_val <= 2147483647));
        PIPIT_ASSERT(!fl[2].seen || isfinite(d_val));
        PIPIT_ASSERT(!fl[3].seen || s_val != NULL);
        PIPIT_ASSERT(!fl[4].seen || b_val == 0 || b_val == 1);
        if (setjmp(back) == 0) (void)cli_config_string(path, "model");
        else PIPIT_ASSERT(exit_status == 1);
    } else {
        PIPIT_ASSERT(exit_status == 1);
    }
    return 0;
}
