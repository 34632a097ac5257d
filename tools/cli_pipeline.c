/*
 * cli_pipeline.c — `pipit schedule` and `pipit plan`: look at a schedule or
 * a compiled plan before anything runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/schedule.h"
#include "pipit.h"

int pipit_cli_schedule(int argc, char **argv);
int pipit_cli_plan(int argc, char **argv);

int pipit_cli_plan(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "pipit plan: not available yet\n");
    return 1;
}

int pipit_cli_schedule(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "pipit schedule: not available yet\n");
    return 1;
}
