/*
 * fuzz_schedule.c — libFuzzer target: the schedule text parser
 * (pipit_schedule_load, i.e. pipit__schedule_parse, on arbitrary bytes). A
 * schedule it accepts must pass the checker, simulate, print, and write
 * out as text that parses back to the same schedule.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz.h"
#include "schedule/schedule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = pipit_fuzz_file("in.sched", data, size);
    if (!path) return 0;
    pipit_schedule *s = NULL;
    pipit_status st = pipit_schedule_load(path, &s);
    if (st) {
        PIPIT_ASSERT(s == NULL);
        PIPIT_ASSERT(pipit_errmsg()[0] != 0);
        return 0;
    }
    PIPIT_ASSERT(s && s->P >= 1 && s->S >= 1 && s->M >= 1);
    st = pipit__schedule_check(s);
    PIPIT_ASSERT(st == PIPIT_STATUS_OK || st == PIPIT_STATUS_SCHEDULE || st == PIPIT_STATUS_DEADLOCK ||
                 st == PIPIT_STATUS_NOMEM);
    if (st == PIPIT_STATUS_OK) {
        pipit__sim_result r;
        if (pipit__schedule_simulate(s, NULL, &r) == PIPIT_STATUS_OK) {
            static FILE *devnull;
            if (!devnull) devnull = fopen("/dev/null", "w");
            if (devnull) pipit__schedule_print_grid(devnull, s, &r);
            pipit__sim_result_free(&r);
        }
    }
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    PIPIT_ASSERT(m);
    PIPIT_ASSERT(pipit__schedule_write(m, s) == PIPIT_STATUS_OK);
    fclose(m);
    pipit_schedule *back = NULL;
    st = pipit__schedule_parse(text, "written", &back);
    if (st) fprintf(stderr, "re-parse of the written schedule failed: %s\n%s", pipit_errmsg(), text);
    PIPIT_ASSERT(st == PIPIT_STATUS_OK);
    PIPIT_ASSERT(pipit__schedule_equal(s, back));
    free(text);
    pipit_schedule_free(back);
    pipit_schedule_free(s);
    return 0;
}
