/*
 * pool.h — a team of compute threads for one rank. Every thread runs the
 * same instruction list and calls each kernel with its (ith, nth); a barrier
 * separates instructions (the ggml contract). With one thread there is no
 * pool and no barrier.
 */
#ifndef PIPIT_POOL_H
#define PIPIT_POOL_H

#include <pthread.h>

typedef struct pipit__pool pipit__pool;

/* fn(arg, ith, nth) is run on all nth threads; the caller is thread 0. */
typedef void (*pipit__pool_fn)(void *arg, int ith, int nth);

pipit__pool *pipit__pool_new(int nth);
void pipit__pool_free(pipit__pool *p);
int pipit__pool_size(const pipit__pool *p);
/* Runs fn on every thread and returns when all are done. */
void pipit__pool_run(pipit__pool *p, pipit__pool_fn fn, void *arg);
/* Barrier among the team, callable from inside fn. */
void pipit__pool_barrier(pipit__pool *p);

#endif
