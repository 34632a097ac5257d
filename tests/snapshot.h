/*
 * snapshot.h — a trained program's state read back through the public
 * accessors (params, last gradients, AdamW moments, losses), for tests that
 * compare runs bit for bit or to a relative tolerance (test_dp.c,
 * test_tp.c). Tensors are whole (a sharded or ZeRO-1 program assembles
 * them), kept as raw bytes of their dtype.
 */
#ifndef PIPIT_TEST_SNAPSHOT_H
#define PIPIT_TEST_SNAPSHOT_H

#include "pipit.h"

#define SNAP_MAX_STEPS 16

typedef struct {
    int n;
    char **names;
    size_t *bytes;     /* [n] of each tensor */
    size_t *es;        /* [n] element size (4: f32, 8: f64) */
    void **param, **grad, **m, **v;
    int nsteps;
    double losses[SNAP_MAX_STEPS];
} snapshot;

/* Reads every param of p (grads and moments too, unless forward-only). */
void snap_take(pipit_program *p, snapshot *s);
void snap_free(snapshot *s);
/* 1 if a and b hold the same bits everywhere (tensors and the nsteps
 * losses); else 0, printing what differs with `what`. */
int snap_same_bits(const snapshot *a, const snapshot *b, const char *what);
/* Largest |a-b| over the largest |a| of each tensor, over all tensors;
 * which: 0 params, 1 gradients. */
double snap_rel_diff(const snapshot *a, const snapshot *b, int which);

#endif
