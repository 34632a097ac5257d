/*
 * gradcheck.h — finite-difference gradient checking through the public API:
 * compile a graph's loss, read autodiff gradients, and compare with central
 * differences of the loss (f64 graphs).
 */
#ifndef PIPIT_GRADCHECK_H
#define PIPIT_GRADCHECK_H

#include "pipit.h"

/* Deterministic pseudo-random doubles in [-1, 1). */
double gc_rand(uint64_t *state);
/* Fills every param of p with scale * gc_rand. */
void gc_init_params(pipit_program *p, uint64_t seed, double scale);
/* Max relative error over all params between autodiff and central
 * differences (step h); feeds as for pipit_step with M = 1. Prints the worst
 * param on failure when verbose. Returns < 0 on API failure. */
double gc_max_rel_error(pipit_program *p, const pipit_feed *feeds, int nfeed, double h,
                        int verbose);

#endif
