/*
 * agree.h — ranks agree or stop (docs/refuses.md): the processes of an MPI
 * job exchange what must be the same in all of them (the build, the
 * caller's fields: a training configuration, a plan) and how far each got,
 * and all of them refuse together, naming the first field that differs and
 * which processes hold which value, or the process that failed.
 */
#ifndef PIPIT_AGREE_H
#define PIPIT_AGREE_H

#include <stddef.h>

#include "pipit.h"

/* Every process's n bytes, in process order, into all[procs * n]: a
 * collective over a communicator of pipit's own (process_mpi.c). One
 * process: a copy. */
pipit_status pipit__proc_allgather(const void *mine, size_t n, void *all);

/* pipit_agree with this process's status so far: every process takes part
 * whatever its status (a process that failed alone would leave the others
 * waiting in the exchange), and every process returns the same result:
 * the status and message of the lowest failing process, else INVALID for
 * a differing build or field, else OK. kv: NULL-terminated name, value,
 * ... (values compared exactly). One process: `local` unchanged. */
pipit_status pipit__agree(const char *what, pipit_status local, const char *const *kv);

#endif
