/*
 * gpt2_feeds.c — deterministic GPT-2 microbatches (gpt2_feeds.h).
 */
#include "gpt2_feeds.h"

#include "pipit_gpt2.h"

void test_gpt2_feeds(int G, int step, int B, int T, int V, int32_t *buf, pipit_feed *feeds) {
    for (int m = 0; m < G; m++) {
        int32_t *tok = buf + (size_t)m * 3 * B * T, *tgt = tok + B * T, *pos = tgt + B * T;
        for (int i = 0; i < B * T; i++) {
            tok[i] = (step * 131 + m * 17 + i * 7 + (i * i) % 5) % V;
            tgt[i] = (tok[i] * 3 + 1) % V;
            pos[i] = i % T;
        }
        size_t nb = sizeof(int32_t) * (size_t)(B * T);
        feeds[3 * m] = (pipit_feed){PIPIT_GPT2_TOKENS, tok, nb};
        feeds[3 * m + 1] = (pipit_feed){PIPIT_GPT2_TARGETS, tgt, nb};
        feeds[3 * m + 2] = (pipit_feed){PIPIT_GPT2_POSITIONS, pos, nb};
    }
}
