/*
 * cp_feeds.c — pipit train --cp C: the replicas' chunks of the step's
 * whole-sequence feeds (cp_feeds.h).
 */
#include "cp_feeds.h"

#include <stdlib.h>
#include <string.h>

#include "pipit_cp.h"
#include "train_cli.h"

void cli_cp_feeds_open(cli_cp_feeds *f, int C, int G, int M, int nf, int B, int T) {
    *f = (cli_cp_feeds){0};
    if (C <= 1) return;
    f->C = C, f->G = G, f->M = M, f->nf = nf, f->rows = (int64_t)B * T;
    f->buf = malloc(sizeof(int32_t) * (size_t)f->rows * (size_t)G * (size_t)nf); /* G C nf x rows / C */
    f->feeds = calloc((size_t)G * (size_t)C * (size_t)nf, sizeof *f->feeds);
    if (!f->buf || !f->feeds) die("out of memory for --cp %d's feeds", C);
}

const pipit_feed *cli_cp_feeds_cut(cli_cp_feeds *f, const pipit_feed *full, int B, int T) {
    int64_t part = f->rows / f->C;
    for (int g = 0; g < f->G; g++) {
        int d = g / f->M, m = g % f->M;
        for (int c = 0; c < f->C; c++) {
            int64_t e = ((int64_t)(d * f->C + c) * f->M + m) * f->nf; /* replica d C + c's microbatch m */
            for (int k = 0; k < f->nf; k++) {
                const pipit_feed *src = &full[(int64_t)g * f->nf + k];
                int32_t *dst = f->buf + (e + k) * part;
                cli_check(pipit_cp_slice(dst, src->data, B, T, sizeof(int32_t), f->C, c), "--cp");
                f->feeds[e + k] = (pipit_feed){src->name, dst, sizeof(int32_t) * (size_t)part};
            }
        }
    }
    return f->feeds;
}

void cli_cp_feeds_close(cli_cp_feeds *f) {
    free(f->buf);
    free(f->feeds);
    *f = (cli_cp_feeds){0};
}

void cli_check_cp(const opts *o) {
    if (o->cp < 1 || o->cp > 64) die("--cp must be in 1..64 context-parallel ranks (got %d)", o->cp);
    if (o->cp == 1) return;
    if (o->ctx % (2 * o->cp))
        die("--cp %d cuts each sequence into 2C = %d chunks of equal length (rank c holds chunks c and 2C-1-c): "
            "--ctx %d is not a multiple of %d", o->cp, 2 * o->cp, o->ctx, 2 * o->cp);
    if ((int64_t)o->dp * o->cp > 64)
        die("--dp %d x --cp %d = %d replicas: at most 64 (a context group is --cp consecutive replicas)", o->dp, o->cp,
            o->dp * o->cp);
    if (o->experts) die("--cp with --experts %d: mixture-of-experts layers are not built with --cp yet", o->experts);
    if (o->device && strcmp(o->device, "cuda") == 0)
        die("--cp runs on the cpu backend only (the CUDA backend runs context parallelism's kernels on host copies, "
            "untested)");
}
