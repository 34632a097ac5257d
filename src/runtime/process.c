/*
 * process.c — the process layer without MPI: one process, ranks are
 * threads. (process_mpi.c provides the MPI build's version.)
 */
#include "pipit.h"

#ifndef PIPIT_HAVE_MPI
pipit_status pipit_init(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return PIPIT_STATUS_OK;
}
void pipit_finalize(void) {}
int pipit_process_rank(void) { return 0; }
int pipit_process_count(void) { return 1; }
#endif
