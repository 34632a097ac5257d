/*
 * sp.h — the runtime's side of sequence parallelism (runtime/sp.c): the
 * INS_TP instructions of ops SP_GATHER, SP_SCATTER and SP_SPLIT, on the
 * transport's all-gather and reduce-scatter over the stage's T ranks.
 */
#ifndef PIPIT_RUNTIME_SP_H
#define PIPIT_RUNTIME_SP_H

#include "runtime/program.h"

static inline int pipit__is_sp_op(int op) {
    return op == PIPIT_OP_SP_GATHER || op == PIPIT_OP_SP_SCATTER || op == PIPIT_OP_SP_SPLIT;
}
pipit_status pipit__sp_collective(pipit_program *p, int w, const pipit__instr *in, const pipit__kctx *k);

#endif
