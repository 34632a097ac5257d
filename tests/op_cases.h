/*
 * op_cases.h — one small graph per op of the table (op_cases.c), shared by
 * the f64 gradient checks (test_ops.c) and the bf16-vs-f32 checks
 * (test_bf16.c).
 */
#ifndef PIPIT_OP_CASES_H
#define PIPIT_OP_CASES_H

#include "gradcheck.h"
#include "pipit.h"

typedef struct {
    const char *name;
    /* Builds y from params/inputs; the harness adds loss = sum(y * R). */
    pipit_val (*build)(pipit_graph *g);
} op_case;

extern const op_case op_cases[];
extern const int op_ncases;

/* The builders' float dtype (default f64). In loop mode every param is
 * multiplied by an input of ones, so the op runs per microbatch; otherwise
 * ops on params alone run once before the loop and their backward once
 * after it (the pre/post-loop regions). */
extern pipit_dtype op_cases_dtype;
extern int op_cases_loop_mode;

/* Fills g's inputs into feeds[*nfeed] (buffers in bufs[], for free()). */
void op_cases_fill_feeds(pipit_graph *g, uint64_t seed, int round_bf16, pipit_feed *feeds, int *nfeed, void **bufs);

#endif
