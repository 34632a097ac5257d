/*
 * fuzz_data.c — libFuzzer target: the data reader (pipit__data_open: uint16
 * token shards and byte-level text) on arbitrary bytes, then batches.
 * The first byte picks the file name (".bin" forces the shard reader), the
 * order and T; the rest is the file.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "io/data.h"
#include "util/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t c = data[0];
    int T = 1 + (c >> 3);                                       /* 1..32 */
    pipit__data_order order = (c & 2) ? PIPIT_DATA_SEQUENTIAL : PIPIT_DATA_RANDOM;
    const char *path = pipit_fuzz_file((c & 1) ? "in.bin" : "in.txt", data + 1, size - 1);
    if (!path) return 0;
    pipit__data *d = NULL;
    pipit_status s = pipit__data_open(path, T, order, (uint64_t)c * 7919u, &d);
    if (s) {
        PIPIT_ASSERT(d == NULL);
        PIPIT_ASSERT(pipit_errmsg()[0] != 0);
        return 0;
    }
    int64_t n = pipit__data_tokens(d), w = pipit__data_windows(d);
    PIPIT_ASSERT(n >= T + 1);
    PIPIT_ASSERT(w == (n - 1) / T);
    int mx = pipit__data_max_token(d), vocab = pipit__data_vocab_hint(d);
    PIPIT_ASSERT(mx >= 0 && mx <= 65535 && vocab > 0);
    enum { B = 3 };
    int32_t in[B * 32], tg[B * 32];
    const int64_t firsts[] = {0, 1, -1, w, INT64_MAX / 2, INT64_MIN / 2, (int64_t)c << 40};
    for (size_t k = 0; k < sizeof firsts / sizeof firsts[0]; k++) {
        int64_t off = pipit__data_offset(d, firsts[k]);
        PIPIT_ASSERT(off >= 0 && off <= n - T - 1);
        pipit__data_batch(d, firsts[k], B, in, tg);
        for (int i = 0; i < B * T; i++) {
            PIPIT_ASSERT(in[i] >= 0 && in[i] <= mx && tg[i] >= 0 && tg[i] <= mx);
            if (i % T) PIPIT_ASSERT(in[i] == tg[i - 1]);
        }
    }
    pipit__data_batch(d, 0, 0, in, tg);
    pipit__data_free(d);
    return 0;
}
