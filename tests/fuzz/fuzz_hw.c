/*
 * fuzz_hw.c — libFuzzer target: hardware descriptions (pipit_hw_load on a
 * file: src/sim/hw.c's JSON reader). A description it accepts must be
 * written (pipit_hw_write) as text that it reads back, with the same
 * numbers, and a small step simulated on it must give finite numbers or
 * a clean refusal.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "fuzz_sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = pipit_fuzz_file("hw.json", data, size);
    if (!path) return 0;
    pipit_hw *hw = NULL;
    if (pipit_hw_load(path, &hw)) {
        PIPIT_ASSERT(hw == NULL && pipit_errmsg()[0] != 0);
        return 0;
    }
    pipit_fuzz_hw_round_trip(hw); /* what pipit writes, pipit reads */
    pipit_sim_config c = {.layers = 2, .hidden = 64, .heads = 2, .seq = 16, .vocab = 64, .micro_batch = 1,
                          .global_batch = 4, .tp = 1, .pp = 2, .dp = 1, .schedule = PIPIT_SCHED_1F1B};
    pipit_sim_report *r = NULL;
    if (pipit_sim_run(&c, hw, &r) == PIPIT_STATUS_OK) {
        pipit_sim_summary u;
        PIPIT_ASSERT(pipit_sim_report_summary(r, &u) == PIPIT_STATUS_OK);
        PIPIT_ASSERT(isfinite(u.step_s) && u.step_s > 0 && isfinite(u.mfu));
        pipit_sim_report_free(r);
    } else {
        PIPIT_ASSERT(r == NULL && pipit_errmsg()[0] != 0);
    }
    pipit_hw_free(hw);
    return 0;
}
