/*
 * timeline.h — a pipeline step drawn as an SVG timeline: one row per rank,
 * one box per task (F blue, B orange, W green, BW red), from measured
 * task times (`pipit train --trace x.svg`) or simulated ones
 * (`pipit schedule --format svg`).
 */
#ifndef PIPIT_TIMELINE_H
#define PIPIT_TIMELINE_H

#include <stdio.h>

#include "pipit.h"

void pipit__timeline_svg(FILE *f, const char *title, int P, const int *ntasks, pipit_task *const *tasks,
                         double *const *start, double *const *end);

#endif
