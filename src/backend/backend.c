/*
 * backend.c — the registry of backends. A new backend adds its vtable to
 * the list below (and its folder beside cpu/); nothing above the runtime
 * changes.
 */
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"

static const pipit__backend *const backends[] = {&pipit__backend_cpu};

const pipit__backend *pipit__backend_find(const char *name) {
    size_t n = sizeof backends / sizeof backends[0];
    for (size_t i = 0; i < n; i++)
        if (name && strcmp(backends[i]->name, name) == 0) return backends[i];
    pipit__err(PIPIT_STATUS_INVALID, "no backend named '%s' (this build has: cpu)", name ? name : "(null)");
    return NULL;
}
