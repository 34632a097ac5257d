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

