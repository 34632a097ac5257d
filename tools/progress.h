/*
 * progress.h — what `pipit train` shows while it runs (tools/progress.c):
 * step i/N, elapsed and ETA, MFU against a peak, the measured bubble and
 * the peak activation memory on every step line, a progress bar on a
 * terminal, and a summary at the end.
 */
#ifndef PIPIT_TOOLS_PROGRESS_H
#define PIPIT_TOOLS_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

#include "pipit.h"

typedef struct {
    double t_start;          /* cli_now() when the training loop started */
    int64_t first, last;     /* steps first .. last-1 run */
    double peak;             /* FLOP/s of the whole run (all ranks), 0: no MFU */
    int ranks;               /* pipeline ranks (P): the bubble is shown when > 1 */
    int64_t steps;           /* steps done */
    double tokens, step_s;   /* tokens trained, seconds inside pipit_step */
    double best_val;         /* best validation loss (have_val) and its step */
    int64_t best_val_step;
    int have_val;
} cli_progress;

/* Monotonic seconds. */
double cli_now(void);
/* One thread's sgemm speed in FLOP/s: a short 512x512x512 cblas_sgemm
 * loop (about 0.2 s) with OpenBLAS at one thread, as the library runs it. */
double cli_sgemm_flops(void);
/* "31.0 GiB", "512.0 MiB", "17 bytes" into buf (returns buf). */
char *cli_bytes(char *buf, size_t n, double bytes);
/* Counts a step of `tokens` tokens that took m->ms. */
void cli_progress_step(cli_progress *p, const pipit_metrics *m, double tokens);
/* Counts a validation loss. */
void cli_progress_val(cli_progress *p, int64_t step, double loss);
/* Appends to a text step line: "  [i/N 0:03 eta 0:10]  MFU 12.3%  bubble 25.0%
 * peak 1.2 MiB/rank" (MFU without a peak and bubble for one rank left out). */
void cli_progress_fields(FILE *f, const cli_progress *p, int64_t step, const pipit_metrics *m, double flops_per_s);
/* The progress bar: on a terminal, a last line "[#####.....] i/N elapsed
 * eta ETA  loss X" redrawn after every step, whether or not the step
 * printed its line: on stdout when it is a terminal and the output is text
 * (between the step lines), else on stderr when that is a terminal (`train
 * --json > run.jsonl`, `train > log`: the file gets only the lines); no
 * terminal, no bar. cli_bar_clear erases it before anything else is
 * printed (every printer of the train loop calls it; a no-op when none is
 * shown). */
void cli_bar_enable(int on, int json);
void cli_bar_draw(const cli_progress *p, int64_t step, double loss);
void cli_bar_clear(void);
/* The end-of-run summary: a text line, or one {"summary":{...}} JSON line.
 * checkpoint: where the run saved (NULL: nowhere). */
void cli_progress_summary(FILE *f, const cli_progress *p, int json, const char *checkpoint);

#endif
