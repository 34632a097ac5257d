/*
 * calibrate.c — fits a CPU hardware description to a measured profile.
 */
#include "sim/sim.h"
#include "util/common.h"

pipit_status pipit_hw_calibrate(const char *profile_path, pipit_hw **out) {
    if (!profile_path || !out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_hw_calibrate: NULL argument");
    *out = NULL;
    return pipit__err(PIPIT_STATUS_INVALID, "calibration is not implemented yet");
}
