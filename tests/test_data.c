/*
 * test_data.c — data streams: hand-computed sequential windows with
 * wrap-around, targets shifted by one, random offsets reproducible per
 * (seed, sequence) and in range, short files rejected, and uint16 token
 * shards (header, detection, truncation) plus an OOM sweep of open.
 */
#include <stdint.h>

#include "test.h"
#include "io/data.h"
#include "util/common.h"

static const char *dpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", pipit_test_tmpdir(), name);
    return buf[k];
}

static int dwrite(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* A shard: header (magic, version, count as declared) + `have` tokens. */
static int write_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                       const uint16_t *toks, int have) {
    size_t n = 1024 + 2 * (size_t)have;
    unsigned char *b = calloc(1, n);
    if (!b) return -1;
    int32_t h[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)((uint32_t)h[i] >> (8 * k));
    for (int i = 0; i < have; i++) {
        b[1024 + 2 * i] = (unsigned char)(toks[i] & 0xff);
        b[1024 + 2 * i + 1] = (unsigned char)(toks[i] >> 8);
    }
    int r = dwrite(path, b, n);
    free(b);
    return r;
}

static int row_is(const int32_t *row, const char *s, int T) {
    for (int t = 0; t < T; t++)
        if (row[t] != (unsigned char)s[t]) return 0;
    return 1;
}

PIPIT_TEST(data_sequential_windows) {
    const char *p = dpath("abc.txt");
    ASSERT_TRUE(dwrite(p, "abcdefghij", 10) == 0); /* n = 10, T = 3: W = 3 */
    pipit__data *d = NULL;
    ASSERT_OK(pipit__data_open(p, 3, PIPIT_DATA_SEQUENTIAL, 0, &d));
    ASSERT_EQ_I64(pipit__data_windows(d), 3);
    ASSERT_EQ_I64(pipit__data_tokens(d), 10);
    ASSERT_EQ_I64(pipit__data_vocab_hint(d), 256);
    ASSERT_EQ_I64(pipit__data_max_token(d), 'j');
    int32_t in[5 * 3], tg[5 * 3];
    pipit__data_batch(d, 0, 4, in, tg);
    int ok = row_is(in + 0, "abc", 3) && row_is(tg + 0, "bcd", 3) && row_is(in + 3, "def", 3) &&
             row_is(tg + 3, "efg", 3) && row_is(in + 6, "ghi", 3) && row_is(tg + 6, "hij", 3) &&
             row_is(in + 9, "abc", 3) && row_is(tg + 9, "bcd", 3); /* wraps */
    /* first = 2, B = 3: windows 2, 0, 1; first = -1: window 2. */
    pipit__data_batch(d, 2, 3, in, tg);
    ok = ok && row_is(in, "ghi", 3) && row_is(in + 3, "abc", 3) && row_is(in + 6, "def", 3) &&
         row_is(tg + 6, "efg", 3);
    pipit__data_batch(d, -1, 1, in, tg);
    ok = ok && row_is(in, "ghi", 3) && row_is(tg, "hij", 3);
    ok = ok && pipit__data_offset(d, 7) == 3;
    pipit__data_free(d);
    ASSERT_TRUE(ok);

    /* W = floor((n-1)/T) for a few sizes; the last partial window is unused. */
    static const struct { int n, T, W; } c[] = {{11, 3, 3}, {7, 3, 2}, {4, 3, 1}, {13, 4, 3},
                                                {2, 1, 1}, {5, 1, 4}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        ASSERT_TRUE(dwrite(p, "0123456789abcdef", (size_t)c[i].n) == 0);
        ASSERT_OK(pipit__data_open(p, c[i].T, PIPIT_DATA_SEQUENTIAL, 0, &d));
        int64_t W = pipit__data_windows(d);
        pipit__data_free(d);
        ASSERT_EQ_I64(W, c[i].W);
    }
}

PIPIT_TEST(data_random_reproducible) {
    enum { N = 1000, T = 8, B = 16 };
    unsigned char text[N];
    for (int i = 0; i < N; i++) text[i] = (unsigned char)((i * 7 + i / 13) % 251);
    const char *p = dpath("rand.txt");
    ASSERT_TRUE(dwrite(p, text, N) == 0);
    pipit__data *d1 = NULL, *d1b = NULL, *d2 = NULL;
    ASSERT_OK(pipit__data_open(p, T, PIPIT_DATA_RANDOM, 1, &d1));
    ASSERT_OK(pipit__data_open(p, T, PIPIT_DATA_RANDOM, 1, &d1b));
    ASSERT_OK(pipit__data_open(p, T, PIPIT_DATA_RANDOM, 2, &d2));
    static int32_t a_in[B * T], a_tg[B * T], b_in[B * T], b_tg[B * T], c_in[B * T], c_tg[B * T];
    pipit__data_batch(d1, 100, B, a_in, a_tg);
    /* Same sequences one at a time, in reverse, from another handle. */
    for (int k = B - 1; k >= 0; k--) pipit__data_batch(d1b, 100 + k, 1, b_in + k * T, b_tg + k * T);
    pipit__data_batch(d2, 100, B, c_in, c_tg);
    int same = memcmp(a_in, b_in, sizeof a_in) == 0 && memcmp(a_tg, b_tg, sizeof a_tg) == 0;
    int differs = memcmp(a_in, c_in, sizeof a_in) != 0;
    /* Every row is the file at its offset, targets shifted by one. */
    int rows_ok = 1, unaligned = 0;
    for (int k = 0; k < B; k++) {
        int64_t o = pipit__data_offset(d1, 100 + k);
        rows_ok = rows_ok && o >= 0 && o <= N - T - 1;
        if (!rows_ok) break;
        unaligned |= o % T != 0;
        for (int t = 0; t < T; t++)
            rows_ok = rows_ok && a_in[k * T + t] == text[o + t] && a_tg[k * T + t] == text[o + t + 1];
    }
    pipit__data_free(d1);
    pipit__data_free(d1b);
    pipit__data_free(d2);
    ASSERT_TRUE(same);
    ASSERT_TRUE(differs);
    ASSERT_TRUE(rows_ok);
    ASSERT_TRUE(unaligned);

    /* Offsets cover exactly [0, n-T-1]: n = 20, T = 5 -> 15 possible. */
    ASSERT_TRUE(dwrite(p, text, 20) == 0);
    pipit__data *d = NULL;
    ASSERT_OK(pipit__data_open(p, 5, PIPIT_DATA_RANDOM, 7, &d));
    int hit[16] = {0}, out_of_range = 0;
    for (int64_t k = -500; k < 5000; k++) {
        int64_t o = pipit__data_offset(d, k);
        if (o < 0 || o > 14) out_of_range++;
        else hit[o] = 1;
    }
    /* The smallest file: n = T+1 has exactly one offset, 0. */
    ASSERT_TRUE(dwrite(p, text, 6) == 0);
    pipit__data *e = NULL;
    pipit_status se = pipit__data_open(p, 5, PIPIT_DATA_RANDOM, 7, &e);
    int64_t oe = se == PIPIT_STATUS_OK ? pipit__data_offset(e, 12345) : -1;
    pipit__data_free(e);
    pipit__data_free(d);
    ASSERT_EQ_I64(out_of_range, 0);
    for (int i = 0; i < 15; i++) ASSERT_TRUE(hit[i]);
    ASSERT_OK(se);
    ASSERT_EQ_I64(oe, 0);
}

PIPIT_TEST(data_short_file) {
    const char *p = dpath("short.txt");
    ASSERT_TRUE(dwrite(p, "abcd", 4) == 0);
    pipit__data *d = (pipit__data *)1;
    ASSERT_STATUS(pipit__data_open(p, 4, PIPIT_DATA_SEQUENTIAL, 0, &d), PIPIT_STATUS_FORMAT);
    ASSERT_TRUE(d == NULL);
    ASSERT_MSG_HAS("short.txt");
    ASSERT_MSG_HAS("has 4 tokens");
    ASSERT_MSG_HAS("T = 4");
    ASSERT_TRUE(dwrite(p, "", 0) == 0);
    ASSERT_STATUS(pipit__data_open(p, 1, PIPIT_DATA_RANDOM, 0, &d), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("has 0 tokens");
    ASSERT_STATUS(pipit__data_open(dpath("absent.txt"), 4, PIPIT_DATA_RANDOM, 0, &d),
                  PIPIT_STATUS_IO);
    ASSERT_MSG_HAS("absent.txt");
    ASSERT_STATUS(pipit__data_open(p, 0, PIPIT_DATA_RANDOM, 0, &d), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit__data_open(pipit_test_tmpdir(), 4, PIPIT_DATA_RANDOM, 0, &d),
                  PIPIT_STATUS_IO);
}

PIPIT_TEST(data_shard) {
    uint16_t toks[9] = {50256, 1, 2, 65535, 300, 4, 5, 6, 7};
    const char *p = dpath("train_000.bin");
    ASSERT_TRUE(write_shard(p, PIPIT_DATA_SHARD_MAGIC, 1, 9, toks, 9) == 0);
    pipit__data *d = NULL;
    ASSERT_OK(pipit__data_open(p, 4, PIPIT_DATA_SEQUENTIAL, 0, &d));
    int32_t in[8], tg[8];
    pipit__data_batch(d, 0, 2, in, tg);
    int ok = pipit__data_tokens(d) == 9 && pipit__data_windows(d) == 2 &&
             pipit__data_vocab_hint(d) == 50257 && pipit__data_max_token(d) == 65535;
    int32_t want_in[8] = {50256, 1, 2, 65535, 300, 4, 5, 6};
    int32_t want_tg[8] = {1, 2, 65535, 300, 4, 5, 6, 7};
    ok = ok && memcmp(in, want_in, sizeof in) == 0 && memcmp(tg, want_tg, sizeof tg) == 0;
    pipit__data_free(d);
    ASSERT_TRUE(ok);

    /* Detected by the magic whatever the name. */
    p = dpath("tokens.dat");
    ASSERT_TRUE(write_shard(p, PIPIT_DATA_SHARD_MAGIC, 1, 9, toks, 9) == 0);
    ASSERT_OK(pipit__data_open(p, 8, PIPIT_DATA_RANDOM, 3, &d));
    ok = pipit__data_vocab_hint(d) == 50257 && pipit__data_tokens(d) == 9;
    pipit__data_batch(d, 5, 1, in, tg);
    ok = ok && memcmp(in, want_in, sizeof in) == 0 && memcmp(tg, want_tg, sizeof tg) == 0;
    pipit__data_free(d);
    ASSERT_TRUE(ok);
}

PIPIT_TEST(data_shard_bad) {
    uint16_t toks[100] = {0};
    pipit__data *d = NULL;
    const char *p = dpath("trunc.bin");
    ASSERT_TRUE(write_shard(p, PIPIT_DATA_SHARD_MAGIC, 1, 100, toks, 50) == 0);
    ASSERT_STATUS(pipit__data_open(p, 4, PIPIT_DATA_SEQUENTIAL, 0, &d), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("trunc.bin");
    ASSERT_MSG_HAS("truncated");
    ASSERT_MSG_HAS("expected 1224 bytes, file has 1124");
    ASSERT_TRUE(write_shard(p, PIPIT_DATA_SHARD_MAGIC, 1, 10, toks, 50) == 0);
    ASSERT_STATUS(pipit__data_open(p, 4, PIPIT_DATA_SEQUENTIAL, 0, &d), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("expected 1044 bytes, file has 1124");
    ASSERT_TRUE(write_shard(p, PIPIT_DATA_SHARD_MAGIC, 2, 50, toks, 50) == 0);
    ASSERT_STATUS(pipit__data_open(p, 4, PIPIT_DATA_SEQUENTIAL, 0, &d), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("unsupported version 2");
    ASSERT_TRUE(write_shard(p, 12345, 1, 50, toks, 50) == 0);
    ASSERT_STATUS(pipit__data_open(p, 4, PIPIT_DATA_SEQUENTIAL, 0, &d), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("bad magic 12345");
    ASSERT_TRUE(write_shard(p, PIPIT_DATA_SHARD_MAGIC, 1, 3, toks, 3) == 0);
    ASSERT_STATUS(pipit__data_open(p, 4, PIPIT_DATA_SEQUENTIAL, 0, &d), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("has 3 tokens");
    ASSERT_TRUE(dwrite(p, "\x88\xd8\x34\x01", 4) == 0); /* magic, then nothing */
    ASSERT_STATUS(pipit__data_open(p, 4, PIPIT_DATA_SEQUENTIAL, 0, &d), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("truncated header: expected at least 1024 bytes, file has 4");
    ASSERT_TRUE(d == NULL);
}

PIPIT_TEST(data_oom_sweep) {
    uint16_t toks[20] = {1, 2, 3};
    const char *paths[2] = {dpath("oom.bin"), dpath("oom.txt")};
    ASSERT_TRUE(write_shard(paths[0], PIPIT_DATA_SHARD_MAGIC, 1, 20, toks, 20) == 0);
    ASSERT_TRUE(dwrite(paths[1], "hello, world", 12) == 0);
    for (int f = 0; f < 2; f++) {
        int done = 0;
        for (long k = 1; k < 50 && !done; k++) {
            pipit__data *d = NULL;
            pipit__alloc_fail_after(k);
            pipit_status s = pipit__data_open(paths[f], 4, PIPIT_DATA_RANDOM, 1, &d);
            pipit__alloc_fail_after(-1);
            if (s == PIPIT_STATUS_OK) done = 1;
            else ASSERT_STATUS(s, PIPIT_STATUS_NOMEM);
            pipit__data_free(d);
        }
        ASSERT_TRUE(done);
    }
}
