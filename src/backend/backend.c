/*
 * backend.c — the registry of backends. A new backend adds its vtable to
 * the list below (and its folder beside cpu/); nothing above the runtime
 * changes. `cuda` is compiled in with -DPIPIT_CUDA=ON (PIPIT_HAVE_CUDA).
 */
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#ifdef PIPIT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

static const pipit__backend *const backends[] = {
    &pipit__backend_cpu,
#ifdef PIPIT_HAVE_CUDA
    &pipit__backend_cuda,
#endif
};

/* One more backend, registered at run time (tests: a simulated device). */
static const pipit__backend *extra;

void pipit__backend_register(const pipit__backend *be) { extra = be; }

const pipit__backend *pipit__backend_find(const char *name) {
    size_t n = sizeof backends / sizeof backends[0];
    for (size_t i = 0; i < n; i++)
        if (name && strcmp(backends[i]->name, name) == 0) return backends[i];
    if (name && extra && strcmp(extra->name, name) == 0) return extra;
#ifndef PIPIT_HAVE_CUDA
    if (name && strcmp(name, "cuda") == 0) {
        pipit__err(PIPIT_STATUS_INVALID, "this build has no cuda backend (configure with -DPIPIT_CUDA=ON)");
        return NULL;
    }
#endif
    char known[64] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", backends[i]->name);
    pipit__err(PIPIT_STATUS_INVALID, "no backend named '%s' (this build has: %s)", name ? name : "(null)", known);
    return NULL;
}
