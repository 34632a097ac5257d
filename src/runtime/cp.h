/*
 * cp.h — the runtime's side of context parallelism (runtime/cp.c): the
 * INS_TP instructions of ops CP_GATHER and CP_SCATTER, on the transport's
 * all-gather and reduce-scatter over the context group (the C consecutive
 * replicas of w's pipeline and tensor-parallel rank; ir/cp.h).
 */
#ifndef PIPIT_RUNTIME_CP_H
#define PIPIT_RUNTIME_CP_H

#include "runtime/program.h"

static inline int pipit__is_cp_op(int op) { return op == PIPIT_OP_CP_GATHER || op == PIPIT_OP_CP_SCATTER; }
/* w's index c in its context group (0 when C = 1). */
static inline int pipit__cp_rank(const pipit_program *p, int w) {
    return p->plan.C > 1 ? p->rs[w].replica % p->plan.C : 0;
}
pipit_status pipit__cp_collective(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k);

#endif
