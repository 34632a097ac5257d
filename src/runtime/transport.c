/*
 * transport.c — what every transport shares: the hang timeout.
 */
#include <stdlib.h>

#include "runtime/transport.h"

double pipit__transport_timeout(void) {
    const char *s = getenv("PIPIT_TIMEOUT");
    if (s && *s) {
        char *end;
        double v = strtod(s, &end);
        if (*end == 0 && v > 0 && v < 1e9) return v;
    }
    return 300.0;
}

#ifndef PIPIT_HAVE_MPI
pipit__transport *pipit__transport_mpi_new(int W, const uint64_t *tags, size_t ntags) {
    (void)W, (void)tags, (void)ntags;
    pipit__err(PIPIT_STATUS_RUNTIME, "this pipit was built without MPI (configure with -DPIPIT_MPI=ON)");
    return NULL;
}
#endif
