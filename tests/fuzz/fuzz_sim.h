/*
 * fuzz_sim.h — what fuzz_hw.c and fuzz_profile.c both check of a hardware
 * description pipit accepted or fitted: pipit_hw_write writes it, and the
 * text parses back (what pipit writes, it reads) with the same numbers.
 */
#ifndef PIPIT_FUZZ_SIM_H
#define PIPIT_FUZZ_SIM_H

#include <stdio.h>
#include <stdlib.h>

#include "pipit_sim.h"
#include "util/common.h"

static inline void pipit_fuzz_hw_round_trip(const pipit_hw *hw) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    PIPIT_ASSERT(m);
    pipit_status st = pipit_hw_write(m, hw);
    fclose(m);
    PIPIT_ASSERT(st == PIPIT_STATUS_OK);
    pipit_hw *back = NULL;
    PIPIT_ASSERT(pipit_hw_parse(text, "written", &back) == PIPIT_STATUS_OK);
    PIPIT_ASSERT(pipit_hw_mem_capacity(back) == pipit_hw_mem_capacity(hw));
    PIPIT_ASSERT(pipit_hw_peak_flops(back, NULL) == pipit_hw_peak_flops(hw, NULL));
    pipit_hw_free(back);
    free(text);
}

#endif
