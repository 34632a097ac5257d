/*
 * process.c — the process layer without MPI: one process, ranks are
 * threads. (process_mpi.c provides the MPI build's version.)
 */
#include <string.h>

#include "pipit.h"
#include "runtime/agree.h"

#ifndef PIPIT_HAVE_MPI
pipit_status pipit__proc_allgather(const void *mine, size_t n, void *all) {
    memcpy(all, mine, n);
    return PIPIT_STATUS_OK;
}
pipit_status pipit_init(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return PIPIT_STATUS_OK;
}
void pipit_finalize(void) {}
int pipit_process_rank(void) { return 0; }
int pipit_process_count(void) { return 1; }
#endif
