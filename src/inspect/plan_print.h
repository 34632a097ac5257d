/*
 * plan_print.h — human-readable dump of a compiled program (`pipit plan`).
 */
#ifndef PIPIT_PLAN_PRINT_H
#define PIPIT_PLAN_PRINT_H

#include <stdio.h>

#include "runtime/program.h"

/* verbose = 1 lists every RUN; 0 shows tasks and communication only. */
void pipit__plan_print(FILE *f, const pipit_program *p, int verbose);

/* Per rank, the time spent in each op and instruction kind (program->profile). */
void pipit__profile_print(FILE *f, const pipit_program *p);

#endif
