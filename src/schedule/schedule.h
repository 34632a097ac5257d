/*
 * schedule.h — pipeline schedules: who runs which (kind, stage, microbatch)
 * task in which order, the checker that proves a schedule complete and free
 * of deadlock, and the simulator that predicts step time, bubble and peak
 * live activations from per-task costs.
 */
#ifndef PIPIT_SCHEDULE_H
#define PIPIT_SCHEDULE_H

#include <stdio.h>

#include "util/common.h"

struct pipit_schedule {
    int kind;          /* pipit_schedule_kind, or -1 for custom/loaded */
    int P;             /* ranks */
    int S;             /* stages */
    int V;             /* stages per rank (S / P when uniform; 0 if not) */
    int M;             /* microbatches */
    int split_bw;      /* 1 if the schedule uses separate B and W tasks */
    int *stage_rank;   /* [S]: rank that owns stage s */
    int *ntasks;       /* [P] */
    pipit_task **tasks;/* [P][ntasks[r]]: execution order on rank r */
};

/* Dependencies (what "ready" means, for check, simulate and lowering):
 *   F(s,m)  needs F(s-1,m)                         (s > 0)
 *   B(s,m)  needs F(s,m) and B/BW(s+1,m)           (s < S-1)
 *   BW(s,m) same as B(s,m)
 *   W(s,m)  needs B(s,m)
 * A stage's backward is either BW, or B followed by W, per microbatch. */

/* Per-task costs for the simulator; index by stage. NULL arrays = unit costs
 * (F = B = W = 1, BW = B + W). act_bytes[s]: bytes of activations that
 * (s, m) keeps alive from the start of F(s,m) until its backward (BW, or
 * W when split) has finished; NULL = 1 per stage (so peak bytes = count). */
typedef struct {
    const double *f, *b, *w;   /* [S] each, or NULL */
    const double *act_bytes;   /* [S] or NULL */
    double comm;               /* latency added to each cross-rank edge (0 default) */
    double xfer;               /* seconds a cross-rank message occupies its link (one at a time per
                                  directed link, in the order sent; 0 default) */
    int pulled;                /* 1: a cross-rank message moves only once its receiver waits for it
                                  (MPI's rendezvous): see pipit_sim_costs */
    /* [S] or NULL: for split schedules, the signed change of bytes (s, m)
     * holds when its B finishes (gradients W still needs, minus what only
     * B needed); released with the activations when W finishes. */
    const double *b_delta_bytes;
} pipit__sim_costs;

typedef struct {
    int P, ntotal;
    double step_time;       /* makespan */
    double bubble;          /* 1 - sum(busy) / (P * step_time) */
    double *busy;           /* [P] */
    double *rank_bubble;    /* [P] 1 - busy/step_time */
    int *peak_live;         /* [P] peak number of (stage, mb) with live activations */
    double *peak_bytes;     /* [P] (peak_live when the costs give no bytes) */
    int has_bytes;          /* the costs gave act_bytes or b_delta_bytes: peak_bytes are bytes */
    double **start, **end;  /* [P][ntasks[r]] timeline, in each rank's order */
} pipit__sim_result;

/* Validates: every task exactly once (F and BW, or F, B and W, for every
 * stage and microbatch), each on the rank owning its stage, stage_rank in
 * range, microbatches of one (stage, kind) in increasing order (per stage
 * the B/BW passes together, and the W/BW passes together, are increasing
 * too: the latter is the gradient accumulation order); then runs the
 * order simulation and reports a deadlock with the cycle of waiting tasks
 * (PIPIT_STATUS_DEADLOCK, e.g. "rank 0 waits at B0.1 for B1.1 (rank 1), rank 1
 * waits at F1.2 for F0.2 (rank 0)"). Other problems: PIPIT_STATUS_SCHEDULE. */
pipit_status pipit__schedule_check(const pipit_schedule *s);
/* The same order simulation with paired[r][i] = 1 running task i of rank
 * r and task i + 1 as one (an overlapped pair, compile/lower.c): both
 * start once the dependencies of both are met. DEADLOCK when that stalls
 * (a pair whose second task depends on its first always does). */
pipit_status pipit__schedule_check_paired(const pipit_schedule *s, const uint8_t *const *paired);

/* Simulates the (checked) schedule: each rank runs its list in order; a task
 * starts when its rank is free and its dependencies have finished (+comm if
 * on another rank). Fills *r (free with pipit__sim_result_free). */
pipit_status pipit__schedule_simulate(const pipit_schedule *s, const pipit__sim_costs *c,
                                      pipit__sim_result *r);
void pipit__sim_result_free(pipit__sim_result *r);

/* Allocates an empty schedule with the given sizes (tasks filled by caller). */
pipit_schedule *pipit__schedule_alloc(int P, int S, int M);

/* Text format (docs/schedules.md):
 *   # comment
 *   stages: 0 1 1 0          <- stage s is on rank (s-th number)
 *   F0.0 F0.1 B0.0 ...       <- one line per rank, rank 0 first
 * Tokens: F<s>.<m>, B<s>.<m>, W<s>.<m>, BW<s>.<m>. Errors name file:line. */
pipit_status pipit__schedule_parse(const char *text, const char *origin, pipit_schedule **out);
pipit_status pipit__schedule_write(FILE *f, const pipit_schedule *s);

/* Prints the grid (one row per rank, one column per time unit, from the
 * simulation) like the tables of the GPipe / 1F1B papers, then bubble and
 * peak activations per rank. */
void pipit__schedule_print_grid(FILE *f, const pipit_schedule *s, const pipit__sim_result *r);

/* Name of a task as in the text format ("BW3.12") into buf. */
const char *pipit__task_str(char *buf, size_t n, pipit_task t);

/* ---- additions (schedule.c / schedule_check.c / schedule_io.c) ---- */

/* Size limits, so index arithmetic (stage * M + mb, task counts) never
 * overflows and a hostile file cannot ask for absurd allocations. */
#define PIPIT__SCHED_MAX_STAGES PIPIT_MAX_STAGES       /* pipit_task.stage is int16 */
#define PIPIT__SCHED_MAX_MB PIPIT_MAX_MICROBATCHES
#define PIPIT__SCHED_MAX_SLOTS (1L << 26)   /* S * M */

/* Fills the derived fields V (uniform stages per rank, else 0) and split_bw
 * (1 if any B or W task) from stage_rank and the task lists. */
void pipit__schedule_infer_meta(pipit_schedule *s);

/* 1 if both schedules have the same P, S, M, stage map and task lists
 * (kind, V and split_bw are not compared). */
int pipit__schedule_equal(const pipit_schedule *a, const pipit_schedule *b);

/* V-Half (vmin 0) or V-Min (vmin 1) into s (schedule_vcm.c): s has P, M,
 * the V placement and task lists of capacity 6M per rank. */
pipit_status pipit__schedule_gen_vcm(pipit_schedule *s, int vmin);

/* Cost of one task under c (NULL = unit costs): F, B, W, or B + W for BW. */
double pipit__task_cost(const pipit__sim_costs *c, pipit_task t);

#endif
