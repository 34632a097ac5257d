/*
 * cp_feeds.h — pipit train --cp C (tools/cp_feeds.c): the step's G = M x D
 * whole-sequence microbatch feeds cut into the G x C feeds of the D x C
 * replicas, replica d C + c taking chunks c and 2C-1-c of each sequence of
 * microbatch d M + m (pipit_cp_slice; docs/architecture.md section 14).
 */
#ifndef PIPIT_CLI_CP_FEEDS_H
#define PIPIT_CLI_CP_FEEDS_H

#include "pipit.h"
#include "train_cli.h"

typedef struct cli_cp_feeds {
    int C, G, M, nf;   /* C > 1 when in use */
    int64_t rows;      /* B x T tokens of one whole-sequence feed */
    int32_t *buf;      /* G x C x nf slices of rows / C tokens */
    pipit_feed *feeds; /* G x C x nf */
} cli_cp_feeds;

/* For G = M x D microbatches of nf per-token i32 feeds [B, T]. C <= 1: nothing. */
void cli_cp_feeds_open(cli_cp_feeds *f, int C, int G, int M, int nf, int B, int T);
/* The replicas' feeds from the whole ones (full[g * nf + k]). */
const pipit_feed *cli_cp_feeds_cut(cli_cp_feeds *f, const pipit_feed *full, int B, int T);
void cli_cp_feeds_close(cli_cp_feeds *f);
/* --cp's refusals (dies naming the flag and the value). */
void cli_check_cp(const opts *o);

#endif
