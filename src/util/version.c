/*
 * version.c — pipit_version, pipit_have_mpi and pipit_have_cuda: what this build of the
 * library is (the version comes from CMake's project(), PIPIT_VERSION_STRING).
 */
#include "pipit.h"

#ifndef PIPIT_VERSION_STRING
#define PIPIT_VERSION_STRING "unknown"
#endif

const char *pipit_version(void) { return PIPIT_VERSION_STRING; }

int pipit_have_mpi(void) {
#ifdef PIPIT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

int pipit_have_cuda(void) {
#ifdef PIPIT_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}
