/*
 * pipit_inspect.h — look at schedules and programs: the schedule text
 * format, the simulator (step time, bubble, peak activations from per-task
 * costs), grids and SVG timelines, and a compiled program's plan (text or
 * JSON) and profile. Same conventions as pipit.h.
 */
#ifndef PIPIT_INSPECT_H
#define PIPIT_INSPECT_H

#include <stdio.h>

#include "pipit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- schedules */

/* Writes the schedule in the text format pipit_schedule_load reads
 * (docs/schedules.md). IO if writing fails. */
PIPIT_API pipit_status pipit_schedule_write(FILE *f, const pipit_schedule *s);

/* Per-task costs for the simulator, indexed by stage; every NULL array or
 * zero field means the default. */
typedef struct {
    const double *f, *b, *w;      /* [S] each, or NULL: unit costs (BW = B + W) */
    const double *act_bytes;      /* [S]: bytes (s, m) keeps alive from F to the end of its
                                     backward; NULL: 1 per stage (peak bytes = count) */
    double comm;                  /* latency added to each cross-rank dependency */
    const double *b_delta_bytes;  /* [S] or NULL: split schedules, signed change of bytes
                                     (s, m) holds when its B finishes */
    double xfer;                  /* seconds a cross-rank message occupies its link: the messages
                                     of one directed link go one at a time, in the order sent,
                                     then arrive comm later; the sender is not held up */
    int pulled;                   /* 1: a cross-rank message is a rendezvous (MPI above its eager
                                     limit): its notice arrives comm after the send; once the
                                     receiver has reached the task that needs it, a reply goes
                                     back when the reverse link is free (it queues behind the data
                                     going that way) and takes comm; then the data takes its turn
                                     on the link, xfer, and arrives comm later. The receiver waits
                                     through all of it. 0: the data leaves when sent. */
} pipit_sim_costs;

typedef struct pipit_sim_result pipit_sim_result;

/* Simulates a checked schedule: each rank runs its list in order; a task
 * starts when its rank is free and its dependencies have finished (across
 * ranks: their message's turn on the link + xfer + comm). costs NULL = unit
 * costs. */
PIPIT_API pipit_status pipit_schedule_simulate(const pipit_schedule *s, const pipit_sim_costs *costs,
                                               pipit_sim_result **out);
PIPIT_API void pipit_sim_result_free(pipit_sim_result *r);
PIPIT_API int pipit_sim_result_ranks(const pipit_sim_result *r);
/* Makespan, and bubble = 1 - sum(busy) / (P * makespan). */
PIPIT_API double pipit_sim_result_step_time(const pipit_sim_result *r);
PIPIT_API double pipit_sim_result_bubble(const pipit_sim_result *r);
/* Per rank: busy time, peak number of (stage, mb) with live activations,
 * peak live bytes (0 for a rank out of range). */
PIPIT_API double pipit_sim_result_busy(const pipit_sim_result *r, int rank);
PIPIT_API int pipit_sim_result_peak_live(const pipit_sim_result *r, int rank);
PIPIT_API double pipit_sim_result_peak_bytes(const pipit_sim_result *r, int rank);
/* Start and end of task i of rank's list (the schedule's order). */
PIPIT_API pipit_status pipit_sim_result_task(const pipit_sim_result *r, int rank, int i, double *start,
                                             double *end);

/* The grid (one row per rank, one column per time unit) like the tables
 * of the GPipe / 1F1B papers, then bubble and peak activations per rank. */
PIPIT_API pipit_status pipit_schedule_print_grid(FILE *f, const pipit_schedule *s, const pipit_sim_result *r);
/* The simulated timeline as an SVG picture (one row per rank, one box per
 * task: F blue, B orange, W green, BW red). */
PIPIT_API pipit_status pipit_schedule_write_svg(FILE *f, const pipit_schedule *s, const pipit_sim_result *r,
                                                const char *title);

/* -------------------------------------------------------------- programs */

/* Per rank: its stages, planned peak activation memory, the ops it runs
 * and its instruction list (verbose = 1 lists every RUN; 0 shows tasks and
 * communication only). */
PIPIT_API pipit_status pipit_program_print_plan(FILE *f, const pipit_program *p, int verbose);
/* The same as one JSON object:
 *   {"stages": S, "microbatches": M, "threads", "tensor_parallel": T,
 *    "data_parallel": D, "stage_rank": [...],
 *    "ranks": [{"rank", "stages", "arena_bytes", "naive_bytes",
 *               "param_bytes", "grad_bytes", "moment_bytes",
 *               "resident_param_bytes", "resident_grad_bytes" (what stays
 *               between steps: under options.zero 3 / 2 the replica's
 *               shards, else param_bytes / grad_bytes),
 *               "preloop_bytes" (values of params alone, held through the
 *               loop: under options.dtype bf16 the params' bf16 copies),
 *               "loop_peak_bytes" (the loop's own buffers at their peak),
 *               "instructions", "instruction_kinds": {kind: count},
 *               "tasks": ["F0.0", ...], "program": ["SEND ...", ...]}],
 *    "params": [{"name", "dtype", "shape", "numel", "holders", "norm_rank"
 *                (+ "shard_axis", "shard_parts", "full_shape" when split
 *                over the T ranks: shape and numel are the local shard's)}]}
 * ("program" lists every instruction, as the verbose text does; the
 * *_bytes of a rank are what EACH of its T x D world ranks holds, the
 * moments those of replica 0 under ZeRO-1). */
PIPIT_API pipit_status pipit_program_write_plan_json(FILE *f, const pipit_program *p);
/* Per rank, the time spent in each op and instruction kind since profiling
 * was turned on (pipit_program_set_profile). */
PIPIT_API pipit_status pipit_program_print_profile(FILE *f, const pipit_program *p);
/* The same as one JSON object (no newline), for tools (`pipit sim --calibrate`):
 *   {"ranks": [{"rank": r, "total_s": x, "ops": {"matmul": s, ...},
 *               "instructions": {"send": s, "optimizer update": s, ...}}]}
 * listing this process's ranks and only the kinds that took time. */
PIPIT_API pipit_status pipit_program_write_profile_json(FILE *f, const pipit_program *p);

#ifdef __cplusplus
}
#endif
#endif /* PIPIT_INSPECT_H */
