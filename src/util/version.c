/*
 * version.c — pipit_version, pipit_build_id, pipit_have_mpi and
 * pipit_have_cuda: what this build of the library is (the version comes
 * from CMake's project(), PIPIT_VERSION_STRING; the build id from
 * cmake/build_id.cmake).
 */
#include <stdlib.h>

#include "pipit.h"

extern const char pipit__build_id[]; /* generated/build_id.c */

#ifndef PIPIT_VERSION_STRING
#define PIPIT_VERSION_STRING "unknown"
#endif

const char *pipit_version(void) { return PIPIT_VERSION_STRING; }

const char *pipit_build_id(void) {
    const char *e = getenv("PIPIT_BUILD_ID"); /* a stated id: tests, or builds known to be equal */
    return e && *e ? e : pipit__build_id;
}

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
