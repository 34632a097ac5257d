/*
 * stages.h — stage inference from data flow (DESIGN 2.1) and the split of
 * each stage's backward into B (on the path to the gradients other stages
 * wait for) and W (weight gradients only).
 */
#ifndef PIPIT_STAGES_H
#define PIPIT_STAGES_H

#include "compile/plan.h"

/* PH_PRE: forward on params only, once before the loop; PH_POST: its
 * backward, once after the loop, from the accumulated gradient;
 * PH_GRADPOST: user ops on accumulated gradients (pipit_set_grad). */
enum { PH_NONE = 0, PH_F, PH_B, PH_W, PH_PRE, PH_POST, PH_GRADPOST };

typedef struct {
    int S;              /* stages: 1 + yields on the longest chain */
    int32_t *stage;     /* [n] stage of every needed node (-1: leaf or unused) */
    uint8_t *phase;     /* [n] PH_F / PH_B / PH_W for nodes that run; PH_NONE otherwise */
    uint8_t *live;      /* [n] node is needed for the loss or a param gradient */
} pipit__staging;

/* Infers stages for forward and backward nodes and splits backward into B
 * and W. Errors: loss not in the last stage. */
pipit_status pipit__infer_stages(const pipit__plan *p, pipit__staging *st);
void pipit__staging_free(pipit__staging *st);

#endif
