/*
 * memlimit.h — memory admission: how many bytes this process may use (the
 * smallest of physical RAM, the cgroup limit and the address-space and
 * data rlimits) and the check that refuses a need above it, naming the
 * need, the limit and the largest consumers, before anything large is
 * allocated. docs/refuses.md states the rule.
 */
#ifndef PIPIT_MEMLIMIT_H
#define PIPIT_MEMLIMIT_H

#include <stddef.h>

#include "pipit.h"

typedef struct {
    double bytes;  /* what this process may use */
    char why[256]; /* which limit that is, for messages ("physical RAM 23.5 GB", ...) */
} pipit__mem_budget;

/* The budget of this process. `already`: bytes of the need that are
 * allocated (mapped) already, so an rlimit is not charged for them twice.
 * override > 0 replaces the detection (options.mem_limit). Physical RAM
 * and the cgroup limit are shared by the MPI processes of this machine
 * (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE): each process gets its share. */
void pipit__mem_budget_get(pipit__mem_budget *b, double already, double override);

/* One consumer of a need: a name and its bytes. */
typedef struct {
    const char *what;
    double bytes;
} pipit__mem_item;

/* NOMEM when the items add up to more than the budget: "<who> needs 31.0 GB
 * of memory, but 23.5 GB is available (physical RAM): parameters 6.2 GB,
 * optimizer moments 12.4 GB, ... (largest first); <advice>". OK otherwise. */
pipit_status pipit__mem_admit(const char *who, const pipit__mem_item *items, int n, double already,
                              double override, const char *advice);

/* "31.0 GB", "512.0 MB", "4.0 kB", "17 bytes" into buf (returns buf). */
char *pipit__bytes_str(char *buf, size_t n, double bytes);

#endif
