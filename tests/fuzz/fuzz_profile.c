/*
 * fuzz_profile.c — libFuzzer target: calibration profiles
 * (pipit_hw_calibrate: src/sim/calibrate.c reads a `pipit train
 * --profile-out` file and fits a CPU description). A description it fits
 * must be one pipit writes and reads back.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "fuzz_sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = pipit_fuzz_file("profile.json", data, size);
    if (!path) return 0;
    pipit_hw *hw = NULL;
    if (pipit_hw_calibrate(path, &hw)) {
        PIPIT_ASSERT(hw == NULL && pipit_errmsg()[0] != 0);
        return 0;
    }
    pipit_fuzz_hw_round_trip(hw); /* a fitted description is always written and read back */
    pipit_hw_free(hw);
    return 0;
}
