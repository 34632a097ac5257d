/*
 * data.c — loads a byte-level text file or a uint16 GPT-2 token shard into
 * memory (tokens kept as uint8 or uint16) and cuts it into (input, target)
 * sequences of T+1 tokens, in window order or at seeded random offsets
 * (a stateless hash of seed and sequence index, so batches are reproducible
 * whatever the batch size or call pattern).
 */
#include "io/data.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/common.h"
#include "util/fileio.h"

struct pipit_data {
    int T;
    pipit__data_order order;
    uint64_t seed;
    int is_shard;
    int64_t n;          /* tokens */
    uint8_t *bytes;     /* text: the file */
    uint16_t *toks;     /* shard: the tokens */
    int max_token;
};


static uint32_t load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void pipit__data_free(pipit__data *d) {
    if (!d) return;
    pipit__free(d->bytes);
    pipit__free(d->toks);
    pipit__free(d);
}

static pipit_status load_shard(const char *path, int fd, uint64_t size, pipit__data *d) {
    const uint64_t hbytes = PIPIT_DATA_SHARD_HEADER_INTS * 4;
    if (size < hbytes)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "token shard '%s': truncated header: expected at least %llu bytes, "
                          "file has %llu",
                          path, (unsigned long long)hbytes, (unsigned long long)size);
    unsigned char hdr[PIPIT_DATA_SHARD_HEADER_INTS * 4];
    if (pipit__read_full(fd, hdr, sizeof hdr, 0) != 0)
        return pipit__err(PIPIT_STATUS_IO, "token shard '%s': cannot read: %s", path,
                          strerror(errno));
    uint32_t magic = load_le32(hdr), version = load_le32(hdr + 4), count = load_le32(hdr + 8);
    if (magic != PIPIT_DATA_SHARD_MAGIC)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "token shard '%s': bad magic %u (expected %d): not a uint16 token shard "
                          "(\".bin\" files must be token shards)",
                          path, magic, PIPIT_DATA_SHARD_MAGIC);
    if (version != 1)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "token shard '%s': unsupported version %u (only version 1, uint16 "
                          "GPT-2 tokens, is supported)",
                          path, version);
    if ((int32_t)count < 0)
        return pipit__err(PIPIT_STATUS_FORMAT, "token shard '%s': negative token count %d", path,
                          (int32_t)count);
    uint64_t want = hbytes + 2 * (uint64_t)count;
    if (size != want)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "token shard '%s': %s: header says %u tokens, so expected %llu bytes, "
                          "file has %llu",
                          path, size < want ? "truncated" : "trailing bytes", count,
                          (unsigned long long)want, (unsigned long long)size);
    d->is_shard = 1;
    d->n = count;
    d->toks = pipit__malloc((size_t)count * 2);
    if (!d->toks)
        return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading token shard '%s'", path);
    if (pipit__read_full(fd, d->toks, (size_t)count * 2, (off_t)hbytes) != 0)
        return pipit__err(PIPIT_STATUS_IO, "token shard '%s': cannot read: %s", path,
                          strerror(errno));
    int mx = 0;
    for (uint32_t i = 0; i < count; i++) {
        const unsigned char *p = (const unsigned char *)&d->toks[i];
        uint16_t v = (uint16_t)(p[0] | p[1] << 8); /* little-endian on disk */
        d->toks[i] = v;
        if (v > mx) mx = v;
    }
    d->max_token = mx;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__data_open(const char *path, int T, pipit__data_order order, uint64_t seed,
                              pipit__data **out) {
    if (!out || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit__data_open: NULL %s", path ? "out" : "path");
    *out = NULL;
    if (T < 1)
        return pipit__err(PIPIT_STATUS_INVALID, "data '%s': sequence length T = %d must be >= 1",
                          path, T);
    if (order != PIPIT_DATA_RANDOM && order != PIPIT_DATA_SEQUENTIAL)
        return pipit__err(PIPIT_STATUS_INVALID, "data '%s': bad order %d", path, (int)order);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pipit__err(PIPIT_STATUS_IO, "data file '%s': cannot open: %s", path,
                          strerror(errno));
    pipit_status st = PIPIT_STATUS_OK;
    pipit__data *d = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = pipit__err(PIPIT_STATUS_IO, "data file '%s': not a readable regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size > (uint64_t)SIZE_MAX / 2) {
        st = pipit__err(PIPIT_STATUS_NOMEM, "data file '%s': too large", path);
        goto fail;
    }
    d = pipit__calloc(1, sizeof *d);
    if (!d) {
        st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory opening '%s'", path);
        goto fail;
    }
    d->T = T;
    d->order = order;
    d->seed = seed;
    unsigned char m4[4] = {0};
    int magic = 0;
    if (size >= 4) {
        if (pipit__read_full(fd, m4, 4, 0) != 0) {
            st = pipit__err(PIPIT_STATUS_IO, "data file '%s': cannot read: %s", path,
                            strerror(errno));
            goto fail;
        }
        magic = load_le32(m4) == PIPIT_DATA_SHARD_MAGIC;
    }
    if (magic || ends_with(path, ".bin")) {
        if ((st = load_shard(path, fd, size, d)) != PIPIT_STATUS_OK) goto fail;
    } else {
        d->n = (int64_t)size;
        d->bytes = pipit__malloc((size_t)size);
        if (!d->bytes) {
            st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s' (%llu bytes)", path,
                            (unsigned long long)size);
            goto fail;
        }
        if (pipit__read_full(fd, d->bytes, (size_t)size, 0) != 0) {
            st = pipit__err(PIPIT_STATUS_IO, "data file '%s': cannot read: %s", path,
                            strerror(errno));
            goto fail;
        }
        int mx = 0;
        for (uint64_t i = 0; i < size; i++)
            if (d->bytes[i] > mx) mx = d->bytes[i];
        d->max_token = mx;
    }
    if (d->n < (int64_t)T + 1) {
        st = pipit__err(PIPIT_STATUS_FORMAT,
                        "data file '%s' has %lld tokens (%s), too short for one sequence of "
                        "T+1 = %lld tokens (T = %d)",
                        path, (long long)d->n, d->is_shard ? "uint16 shard" : "bytes",
                        (long long)T + 1, T);
        goto fail;
    }
    close(fd);
    *out = d;
    return PIPIT_STATUS_OK;
fail:
    close(fd);
    pipit__data_free(d);
    return st;
}

int64_t pipit__data_windows(const pipit__data *d) { return d ? (d->n - 1) / d->T : 0; }
int64_t pipit__data_tokens(const pipit__data *d) { return d ? d->n : 0; }
int pipit__data_vocab_hint(const pipit__data *d) { return d && d->is_shard ? 50257 : 256; }
int pipit__data_max_token(const pipit__data *d) { return d ? d->max_token : 0; }

int64_t pipit__data_offset(const pipit__data *d, int64_t k) {
    if (!d) return 0;
    if (d->order == PIPIT_DATA_SEQUENTIAL) {
        int64_t W = (d->n - 1) / d->T;
        int64_t w = k % W;
        if (w < 0) w += W;
        return w * d->T;
    }
    uint64_t h = splitmix64(d->seed ^ splitmix64((uint64_t)k));
    return (int64_t)(h % (uint64_t)(d->n - d->T)); /* n - T >= 1 */
}

void pipit__data_batch(const pipit__data *d, int64_t first, int B, int32_t *inputs,
                       int32_t *targets) {
    if (!d || B <= 0) return;
    const int T = d->T;
    for (int b = 0; b < B; b++) {
        int64_t o = pipit__data_offset(d, (int64_t)((uint64_t)first + (uint64_t)b)); /* wraps, never UB */
        int32_t *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        if (d->is_shard) {
            const uint16_t *s = d->toks + o;
            for (int t = 0; t < T; t++) {
                in[t] = s[t];
                tg[t] = s[t + 1];
            }
        } else {
            const uint8_t *s = d->bytes + o;
            for (int t = 0; t < T; t++) {
                in[t] = s[t];
                tg[t] = s[t + 1];
            }
        }
    }
}

/* ---- public API (pipit_io.h) ---- */

pipit_status pipit_data_open(const char *path, int T, pipit_data_order order, uint64_t seed, pipit_data **out) {
    if (!out || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_data_open: %s is NULL", path ? "out" : "path");
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(pipit__data_open(path, T, order, seed, out), gen0, __func__);
}

static int null_data(const pipit_data *d, const char *fn) {
    if (d) return 0;
    pipit__err(PIPIT_STATUS_MISUSE, "%s: data is NULL", fn);
    return 1;
}

void pipit_data_free(pipit_data *d) { pipit__data_free(d); }
int64_t pipit_data_tokens(const pipit_data *d) { return null_data(d, __func__) ? 0 : pipit__data_tokens(d); }
int64_t pipit_data_windows(const pipit_data *d) { return null_data(d, __func__) ? 0 : pipit__data_windows(d); }
int pipit_data_max_token(const pipit_data *d) { return null_data(d, __func__) ? 0 : pipit__data_max_token(d); }
int pipit_data_vocab_hint(const pipit_data *d) { return null_data(d, __func__) ? 0 : pipit__data_vocab_hint(d); }
int64_t pipit_data_offset(const pipit_data *d, int64_t k) {
    return null_data(d, __func__) ? 0 : pipit__data_offset(d, k);
}

pipit_status pipit_data_batch(const pipit_data *d, int64_t first, int B, int32_t *inputs, int32_t *targets) {
    if (!d || ((!inputs || !targets) && B > 0))
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_data_batch: %s is NULL",
                          !d ? "data" : !inputs ? "inputs" : "targets");
    if (B < 0) return pipit__err(PIPIT_STATUS_INVALID, "pipit_data_batch: batch size B = %d is negative", B);
    if (first > INT64_MAX - B)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_data_batch: sequence index %lld + B = %d exceeds 2^63-1",
                          (long long)first, B);
    pipit__data_batch(d, first, B, inputs, targets);
    return PIPIT_STATUS_OK;
}
