/*
 * test_data.c — data streams: hand-computed sequential windows with
 * wrap-around, targets shifted by one, random offsets reproducible per
 * (seed, sequence) and in range, short files rejected, and uint16 token
 * shards (header, detection, truncation) plus an OOM sweep of open;
 * several files (windows numbered file after file, never straddling two;
 * one file as before), headerless u16 files, specs (glob and comma lists,
 * sorted; no match names the pattern), tail splits and their OOM sweep.
 */
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

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

/* ---- several files, u16, specs, splits */

static int rows_are(const int32_t *in, const char *const *want, int n, int T) {
    for (int i = 0; i < n; i++)
        if (!row_is(in + (size_t)i * T, want[i], T)) return 0;
    return 1;
}

PIPIT_TEST(data_multi_file_windows) {
    const char *a = dpath("m_a.txt"), *b = dpath("m_b.txt");
    ASSERT_TRUE(dwrite(a, "abcdefg", 7) == 0);     /* T = 3: W = 2 */
    ASSERT_TRUE(dwrite(b, "0123456789", 10) == 0); /* W = 3 */
    const char *paths[2] = {a, b};
    pipit__data *d = NULL;
    ASSERT_OK(pipit__data_open_files(paths, 2, PIPIT_DATA_AUTO, 3, PIPIT_DATA_SEQUENTIAL, 0, &d));
    ASSERT_EQ_I64(pipit__data_windows(d), 5);
    ASSERT_EQ_I64(pipit__data_tokens(d), 17);
    ASSERT_EQ_I64(pipit__data_files(d), 2);
    ASSERT_TRUE(strcmp(pipit__data_file(d, 1), b) == 0);
    int32_t in[7 * 3], tg[7 * 3];
    pipit__data_batch(d, 0, 7, in, tg);
    static const char *const want[7] = {"abc", "def", "012", "345", "678", "abc", "def"};
    ASSERT_TRUE(rows_are(in, want, 7, 3));
    ASSERT_TRUE(row_is(tg + 3, "efg", 3) && row_is(tg + 12, "789", 3)); /* never crosses into b */
    ASSERT_EQ_I64(pipit__data_offset(d, 2), 7);
    pipit__data_free(d);

    /* random: every sequence inside one file, reproducible, both files drawn */
    pipit__data *r1 = NULL, *r2 = NULL, *one = NULL, *one_files = NULL;
    ASSERT_OK(pipit__data_open_files(paths, 2, PIPIT_DATA_AUTO, 3, PIPIT_DATA_RANDOM, 5, &r1));
    ASSERT_OK(pipit__data_open_files(paths, 2, PIPIT_DATA_TEXT, 3, PIPIT_DATA_RANDOM, 5, &r2));
    int seen_a = 0, seen_b = 0, ok = 1;
    for (int64_t k = 0; k < 200; k++) {
        int64_t o = pipit__data_offset(r1, k);
        ok = ok && o == pipit__data_offset(r2, k) && ((o >= 0 && o <= 3) || (o >= 7 && o <= 13));
        seen_a |= o <= 3;
        seen_b |= o >= 7;
    }
    ASSERT_TRUE(ok && seen_a && seen_b);
    pipit__data_free(r1);
    pipit__data_free(r2);

    /* one file through the list API: the very same sequences as pipit__data_open */
    for (int order = 0; order < 2; order++) {
        ASSERT_OK(pipit__data_open(b, 3, (pipit__data_order)order, 9, &one));
        ASSERT_OK(pipit__data_open_files(&b, 1, PIPIT_DATA_AUTO, 3, (pipit__data_order)order, 9, &one_files));
        int32_t i1[64 * 3], t1[64 * 3], i2[64 * 3], t2[64 * 3];
        pipit__data_batch(one, -5, 64, i1, t1);
        pipit__data_batch(one_files, -5, 64, i2, t2);
        ASSERT_TRUE(memcmp(i1, i2, sizeof i1) == 0 && memcmp(t1, t2, sizeof t1) == 0);
        pipit__data_free(one);
        pipit__data_free(one_files);
    }

    /* errors name the file */
    const char *s = dpath("m_short.txt");
    ASSERT_TRUE(dwrite(s, "xy", 2) == 0);
    const char *with_short[3] = {a, s, b};
    pipit__data *e = (pipit__data *)1;
    ASSERT_STATUS(pipit__data_open_files(with_short, 3, PIPIT_DATA_AUTO, 3, PIPIT_DATA_RANDOM, 0, &e),
                  PIPIT_STATUS_FORMAT);
    ASSERT_TRUE(e == NULL);
    ASSERT_MSG_HAS("m_short.txt");
    const char *with_absent[2] = {a, dpath("m_absent.txt")};
    ASSERT_STATUS(pipit__data_open_files(with_absent, 2, PIPIT_DATA_AUTO, 3, PIPIT_DATA_RANDOM, 0, &e),
                  PIPIT_STATUS_IO);
    ASSERT_MSG_HAS("m_absent.txt");
    uint16_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const char *sh = dpath("m_tok.bin");
    ASSERT_TRUE(write_shard(sh, PIPIT_DATA_SHARD_MAGIC, 1, 9, toks, 9) == 0);
    const char *mixed[2] = {dpath("m_a.txt"), sh};
    ASSERT_STATUS(pipit__data_open_files(mixed, 2, PIPIT_DATA_AUTO, 3, PIPIT_DATA_RANDOM, 0, &e),
                  PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("m_tok.bin");
    ASSERT_MSG_HAS("differ in kind");
    ASSERT_STATUS(pipit__data_open_files(paths, 0, PIPIT_DATA_AUTO, 3, PIPIT_DATA_RANDOM, 0, &e),
                  PIPIT_STATUS_INVALID);
}

PIPIT_TEST(data_u16_headerless) {
    /* nanoGPT's train.bin: little-endian uint16 tokens, no header */
    const unsigned char raw[] = {0x51, 0xc4, 0x01, 0x00, 0xff, 0xff, 0x02, 0x01, 0x07, 0x00};
    const char *p = dpath("train.bin");
    ASSERT_TRUE(dwrite(p, raw, sizeof raw) == 0); /* tokens 50257, 1, 65535, 258, 7 */
    pipit__data *d = NULL;
    ASSERT_OK(pipit__data_open_files(&p, 1, PIPIT_DATA_U16, 2, PIPIT_DATA_SEQUENTIAL, 0, &d));
    ASSERT_EQ_I64(pipit__data_tokens(d), 5);
    ASSERT_EQ_I64(pipit__data_windows(d), 2);
    ASSERT_EQ_I64(pipit__data_vocab_hint(d), 50257);
    ASSERT_EQ_I64(pipit__data_max_token(d), 65535);
    int32_t in[4], tg[4];
    pipit__data_batch(d, 0, 2, in, tg);
    ASSERT_TRUE(in[0] == 50257 && in[1] == 1 && tg[1] == 65535 && in[2] == 65535 && in[3] == 258 && tg[3] == 7);
    pipit__data_free(d);
    /* auto: a .bin without the shard magic is an error that names the file and u16 */
    d = (pipit__data *)1;
    ASSERT_STATUS(pipit__data_open_files(&p, 1, PIPIT_DATA_AUTO, 2, PIPIT_DATA_SEQUENTIAL, 0, &d),
                  PIPIT_STATUS_FORMAT);
    ASSERT_TRUE(d == NULL);
    ASSERT_MSG_HAS("train.bin");
    ASSERT_MSG_HAS("u16");
    /* odd size */
    ASSERT_TRUE(dwrite(p, raw, 9) == 0);
    ASSERT_STATUS(pipit__data_open_files(&p, 1, PIPIT_DATA_U16, 2, PIPIT_DATA_SEQUENTIAL, 0, &d),
                  PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("train.bin");
    ASSERT_MSG_HAS("odd");
    /* forcing text on a .bin reads its bytes; forcing shard on text checks the magic */
    ASSERT_OK(pipit__data_open_files(&p, 1, PIPIT_DATA_TEXT, 2, PIPIT_DATA_SEQUENTIAL, 0, &d));
    ASSERT_EQ_I64(pipit__data_tokens(d), 9);
    ASSERT_EQ_I64(pipit__data_vocab_hint(d), 256);
    pipit__data_free(d);
    const char *t = dpath("u16.txt");
    ASSERT_TRUE(dwrite(t, "hello world, some text", 22) == 0);
    ASSERT_STATUS(pipit__data_open_files(&t, 1, PIPIT_DATA_SHARD, 2, PIPIT_DATA_SEQUENTIAL, 0, &d),
                  PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("u16.txt");
    ASSERT_MSG_HAS("truncated header");
    ASSERT_STATUS(pipit__data_open_files(&t, 1, (pipit_data_format)7, 2, PIPIT_DATA_SEQUENTIAL, 0, &d),
                  PIPIT_STATUS_INVALID);
}

PIPIT_TEST(data_spec_glob_and_list) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/shards_spec", pipit_test_tmpdir());
    mkdir(dir, 0700);
    char pa[600], pb[600], pc[600], spec[1400];
    snprintf(pa, sizeof pa, "%s/s_a.bin", dir);
    snprintf(pb, sizeof pb, "%s/s_b.bin", dir);
    snprintf(pc, sizeof pc, "%s/s_c.bin", dir);
    uint16_t ta[5] = {10, 11, 12, 13, 14}, tb[5] = {20, 21, 22, 23, 24}, tc[5] = {30, 31, 32, 33, 34};
    /* written in the order c, a, b: the order read is sorted by path */
    ASSERT_TRUE(write_shard(pc, PIPIT_DATA_SHARD_MAGIC, 1, 5, tc, 5) == 0);
    ASSERT_TRUE(write_shard(pa, PIPIT_DATA_SHARD_MAGIC, 1, 5, ta, 5) == 0);
    ASSERT_TRUE(write_shard(pb, PIPIT_DATA_SHARD_MAGIC, 1, 5, tb, 5) == 0);
    snprintf(spec, sizeof spec, "%s/s_*.bin", dir);
    pipit__data *d = NULL;
    ASSERT_OK(pipit__data_open_spec(spec, PIPIT_DATA_AUTO, 4, PIPIT_DATA_SEQUENTIAL, 0, &d));
    ASSERT_EQ_I64(pipit__data_files(d), 3);
    ASSERT_TRUE(strcmp(pipit__data_file(d, 0), pa) == 0 && strcmp(pipit__data_file(d, 2), pc) == 0);
    int32_t in[3 * 4], tg[3 * 4];
    pipit__data_batch(d, 0, 3, in, tg);
    ASSERT_TRUE(in[0] == 10 && tg[3] == 14 && in[4] == 20 && in[8] == 30 && tg[11] == 34);
    pipit__data_free(d);
    /* a list, unsorted on the command line: sorted too; a list may hold patterns */
    snprintf(spec, sizeof spec, "%s,%s", pc, pa);
    ASSERT_OK(pipit__data_open_spec(spec, PIPIT_DATA_AUTO, 4, PIPIT_DATA_SEQUENTIAL, 0, &d));
    ASSERT_EQ_I64(pipit__data_files(d), 2);
    ASSERT_TRUE(strcmp(pipit__data_file(d, 0), pa) == 0 && strcmp(pipit__data_file(d, 1), pc) == 0);
    pipit__data_free(d);
    /* no match: IO naming the pattern; a file twice; an empty item */
    snprintf(spec, sizeof spec, "%s/nothing_*.bin", dir);
    d = (pipit__data *)1;
    ASSERT_STATUS(pipit__data_open_spec(spec, PIPIT_DATA_AUTO, 4, PIPIT_DATA_SEQUENTIAL, 0, &d), PIPIT_STATUS_IO);
    ASSERT_TRUE(d == NULL);
    ASSERT_MSG_HAS("no file matches");
    ASSERT_MSG_HAS("nothing_*.bin");
    snprintf(spec, sizeof spec, "%s/s_*.bin,%s", dir, pb);
    ASSERT_STATUS(pipit__data_open_spec(spec, PIPIT_DATA_AUTO, 4, PIPIT_DATA_SEQUENTIAL, 0, &d),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("listed twice");
    snprintf(spec, sizeof spec, "%s,", pa);
    ASSERT_STATUS(pipit__data_open_spec(spec, PIPIT_DATA_AUTO, 4, PIPIT_DATA_SEQUENTIAL, 0, &d),
                  PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("empty name");
    /* an existing file whose name holds a comma is that file */
    const char *odd = dpath("odd,name.txt");
    ASSERT_TRUE(dwrite(odd, "abcdefgh", 8) == 0);
    ASSERT_OK(pipit__data_open_spec(odd, PIPIT_DATA_AUTO, 3, PIPIT_DATA_SEQUENTIAL, 0, &d));
    ASSERT_EQ_I64(pipit__data_files(d), 1);
    pipit__data_free(d);
}

PIPIT_TEST(data_split_tail) {
    const char *a = dpath("sp_a.txt"), *b = dpath("sp_b.txt");
    ASSERT_TRUE(dwrite(a, "abcdefghij", 10) == 0); /* T = 3: W = 3 */
    ASSERT_TRUE(dwrite(b, "0123456789", 10) == 0); /* W = 3 */
    pipit__data *d = NULL, *v = NULL;
    ASSERT_OK(pipit__data_open(a, 3, PIPIT_DATA_SEQUENTIAL, 0, &d));
    ASSERT_OK(pipit__data_split(d, 1, &v));
    ASSERT_EQ_I64(pipit__data_windows(d), 2);
    ASSERT_EQ_I64(pipit__data_windows(v), 1);
    ASSERT_EQ_I64(pipit__data_tokens(d), 7);
    int32_t in[4 * 3], tg[4 * 3];
    pipit__data_batch(d, 0, 3, in, tg);
    static const char *const head[3] = {"abc", "def", "abc"};
    ASSERT_TRUE(rows_are(in, head, 3, 3));
    pipit__data_batch(v, 0, 2, in, tg);
    ASSERT_TRUE(row_is(in, "ghi", 3) && row_is(tg, "hij", 3) && row_is(in + 3, "ghi", 3));
    ASSERT_EQ_I64(pipit__data_max_token(v), 'j');
    ASSERT_EQ_I64(pipit__data_max_token(d), 'g');
    pipit__data_free(d);
    pipit__data_free(v);

    /* across files: W = 6, the last 4 windows are a's last one and all of b's */
    const char *paths[2] = {a, b};
    ASSERT_OK(pipit__data_open_files(paths, 2, PIPIT_DATA_AUTO, 3, PIPIT_DATA_RANDOM, 3, &d));
    ASSERT_OK(pipit__data_split(d, 4, &v));
    ASSERT_EQ_I64(pipit__data_windows(d), 2);
    ASSERT_EQ_I64(pipit__data_files(d), 1);
    ASSERT_EQ_I64(pipit__data_windows(v), 4);
    ASSERT_EQ_I64(pipit__data_files(v), 2);
    pipit__data_batch(v, 0, 4, in, tg);
    static const char *const tail[4] = {"ghi", "012", "345", "678"};
    ASSERT_TRUE(rows_are(in, tail, 4, 3));
    int ok = 1;
    for (int64_t k = 0; k < 100; k++) ok = ok && pipit__data_offset(d, k) <= 3; /* head only: a[0..6] */
    ASSERT_TRUE(ok);
    pipit__data *v2 = (pipit__data *)1;
    ASSERT_STATUS(pipit__data_split(d, 2, &v2), PIPIT_STATUS_INVALID); /* would leave nothing */
    ASSERT_TRUE(v2 == NULL);
    pipit__data_free(d);
    pipit__data_free(v);
}

PIPIT_TEST(data_multi_oom_sweep) {
    const char *a = dpath("mo_a.txt"), *b = dpath("mo_b.txt");
    ASSERT_TRUE(dwrite(a, "abcdefghij", 10) == 0);
    ASSERT_TRUE(dwrite(b, "0123456789", 10) == 0);
    char spec[1200];
    snprintf(spec, sizeof spec, "%s,%s/mo_a*.txt", b, pipit_test_tmpdir());
    int done = 0;
    for (long n = 1; n < 200 && !done; n++) {
        pipit__alloc_fail_after(n);
        pipit__data *d = NULL, *v = NULL;
        pipit_status s = pipit__data_open_spec(spec, PIPIT_DATA_AUTO, 3, PIPIT_DATA_RANDOM, 1, &d);
        if (s == PIPIT_STATUS_OK) s = pipit__data_split(d, 2, &v);
        pipit__alloc_fail_after(-1);
        ASSERT_TRUE(s == PIPIT_STATUS_OK || s == PIPIT_STATUS_NOMEM);
        done = s == PIPIT_STATUS_OK;
        pipit__data_free(d);
        pipit__data_free(v);
    }
    ASSERT_TRUE(done);
}
