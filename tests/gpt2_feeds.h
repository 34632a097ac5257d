/*
 * gpt2_feeds.h — the deterministic GPT-2 microbatches the equivalence
 * tests train on (test_pipeline.c, test_dp.c, test_bf16.c): token ids from
 * the step, the microbatch and the position, so every layout and schedule
 * sees the same data.
 */
#ifndef PIPIT_TEST_GPT2_FEEDS_H
#define PIPIT_TEST_GPT2_FEEDS_H

#include "pipit.h"

/* Microbatches 0..G-1 of step `step` for a [B,T] model of V tokens: buf
 * holds 3*B*T int32 per microbatch, feeds[3*m .. 3*m+2] its tokens,
 * targets and positions. */
void test_gpt2_feeds(int G, int step, int B, int T, int V, int32_t *buf, pipit_feed *feeds);

#endif
