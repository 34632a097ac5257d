/*
 * cmd_tokenize.c — `pipit tokenize`: text files to the token shards
 * `pipit train` reads. The tokenizer is trained on the files (--train
 * VOCAB_SIZE) or loaded (--tokenizer FILE|DIR [--merges FILE]); the files
 * are encoded one after another in the order given, their tokens written
 * in that order as llm.c-format shards (256-int32 header, magic 20240520,
 * version 1, token count; then uint16 tokens) DIR/train_NNNNNN.bin, with
 * the stream's last ceil(F x tokens) as DIR/val_NNNNNN.bin when
 * --val-split F asks; DIR/tokenizer.json is the tokenizer used, for
 * `pipit sample --tokenizer` and for the `tokenizers` package.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "flags.h"
#include "pipit_text.h"
#include "progress.h"

enum { SHARD_MAGIC = 20240520, SHARD_VERSION = 1, MAX_SHARD_VOCAB = 65536 };

/* One shard: the header, then n tokens as little-endian uint16. */
static void write_shard(const char *path, const uint16_t *tok, int64_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) die("--out: cannot write '%s': %s", path, strerror(errno));
    unsigned char hdr[1024] = {0};
    const uint32_t head[3] = {SHARD_MAGIC, SHARD_VERSION, (uint32_t)n};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 4; b++) hdr[4 * i + b] = (unsigned char)(head[i] >> (8 * b));
    fwrite(hdr, 1, sizeof hdr, f);
    unsigned char buf[8192];
    for (int64_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < sizeof buf && i < n; i++, k += 2) {
            buf[k] = (unsigned char)(tok[i] & 0xFF);
            buf[k + 1] = (unsigned char)(tok[i] >> 8);
        }
        fwrite(buf, 1, k, f);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) die("--out: writing '%s' failed: %s", path, strerror(errno));
}

/* tokens [0, n) as shards "<dir>/<kind>_NNNNNN.bin" of at most per tokens each. */
static int write_shards(const char *dir, const char *kind, const uint16_t *tok, int64_t n, int64_t per) {
    int shards = 0;
    for (int64_t at = 0; at < n; at += per, shards++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, kind, shards);
        write_shard(path, tok + at, n - at < per ? n - at : per);
    }
    return shards;
}

/* Encodes one text and appends its tokens (< 65536) to *stream. */
static void encode_into(const pipit_tokenizer *t, const char *path, const char *text, size_t len, uint16_t **stream,
                        int64_t *n, int64_t *cap) {
    char what[4200];
    snprintf(what, sizeof what, "'%s'", path);
    size_t k = 0;
    int32_t *ids = cli_encode(t, what, text, len, &k);
    if (*n + (int64_t)k > *cap) {
        int64_t c = *cap ? *cap : 1 << 16;
        while (c < *n + (int64_t)k) c *= 2;
        uint16_t *more = realloc(*stream, sizeof *more * (size_t)c);
        if (!more) die("out of memory: %lld tokens", (long long)c);
        *stream = more;
        *cap = c;
    }
    for (size_t i = 0; i < k; i++) (*stream)[(*n)++] = (uint16_t)ids[i];
    free(ids);
}

static void make_dir(const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) die("--out: cannot create folder '%s': %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) die("--out: '%s' is not a folder", dir);
}

int cmd_tokenize(int argc, char **argv) {
    const char *tok_path = NULL, *merges = NULL, *data = NULL, *out = NULL;
    int train = 0, shard_tokens = 100000000;
    double val_split = 0;
    flag fl[] = {
        {"train", FL_INT, &train, "train a byte-level BPE of this many tokens (256 .. 65536) on the --data files", 0},
        {"tokenizer", FL_STR, &tok_path, "tokenizer.json, GPT-2's vocab.json (with --merges), or a folder of either", 0},
        {"merges", FL_STR, &merges, "GPT-2's merges.txt beside --tokenizer vocab.json", 0},
        {"data", FL_STR, &data, "text files: 'a.txt,b.txt' or a glob 'books/*.txt' (encoded in the order given)", 0},
        {"out", FL_STR, &out, "folder for train_NNNNNN.bin, val_NNNNNN.bin and tokenizer.json (created if absent)", 0},
        {"val-split", FL_DBL, &val_split, "hold out the last F of the tokens (0 < F < 1) as val_NNNNNN.bin", 0},
        {"shard-tokens", FL_INT, &shard_tokens, "tokens per shard file (default 100000000)", 0},
    };
    flag_cmd c = {"tokenize", "(--train VOCAB_SIZE | --tokenizer FILE [--merges FILE]) --data TEXT... --out DIR [--val-split F]",
                  "Encodes text files into the uint16 token shards `pipit train` reads (llm.c's format), in the order "
                  "of the files and of the text in them, with a tokenizer trained on them or loaded; writes the "
                  "tokenizer beside them as tokenizer.json.",
                  fl, NFLAGS(fl)};
    flags_parse(&c, argc, argv);
    flags_require(&c, (const char *const[]){"data", "out", NULL});
    if (!!flags_seen(&c, "train") == !!tok_path) die("tokenize: give --train VOCAB_SIZE or --tokenizer FILE (one of them)");
    if (merges && !tok_path) die("--merges goes with --tokenizer vocab.json");
    if (flags_seen(&c, "train") && (train < 256 || train > MAX_SHARD_VOCAB))
        die("--train %d: the vocabulary must be 256 .. %d tokens (256 are the bytes; shards hold uint16)", train,
            MAX_SHARD_VOCAB);
    if (flags_seen(&c, "val-split") && !(val_split > 0 && val_split < 1))
        die("--val-split must be between 0 and 1 (got %g)", val_split);
    if (shard_tokens < 1) die("--shard-tokens must be >= 1 (got %d)", shard_tokens);

    cli_paths files;
    cli_paths_expand(&files, "data", data);
    char **texts = calloc((size_t)files.n, sizeof *texts);
    size_t *lens = calloc((size_t)files.n, sizeof *lens), bytes = 0;
    if (!texts || !lens) die("out of memory");
    for (int i = 0; i < files.n; i++) {
        texts[i] = cli_read_file("data", files.path[i], &lens[i]);
        bytes += lens[i];
    }
    if (!bytes) { /* no tokens: no shard a train run could read */
        if (files.n == 1) die("--data: '%s' is empty: nothing to tokenize", files.path[0]);
        die("--data: the %d files ('%s', ...) are empty: nothing to tokenize", files.n, files.path[0]);
    }
    make_dir(out);
    double t0 = cli_now();
    pipit_tokenizer *t = NULL;
    if (tok_path) t = cli_tokenizer_open(tok_path, merges);
    else if (pipit_tokenizer_train((const char *const *)texts, lens, files.n, train, &t))
        die("--train: %s", pipit_errmsg());
    int V = pipit_tokenizer_vocab_size(t);
    if (V > MAX_SHARD_VOCAB) die("--tokenizer: %d tokens do not fit uint16 shards (at most %d)", V, MAX_SHARD_VOCAB);
    if (!tok_path)
        printf("trained a byte-level BPE of %d tokens on %zu bytes in %.1f s%s\n", V, bytes, cli_now() - t0,
               V < train ? " (the text has no more pairs to merge)" : "");
    double t1 = cli_now();
    uint16_t *stream = NULL;
    int64_t n = 0, cap = 0;
    for (int i = 0; i < files.n; i++) {
        encode_into(t, files.path[i], texts[i], lens[i], &stream, &n, &cap);
        free(texts[i]);
    }
    double enc_s = cli_now() - t1;
    int64_t nval = 0;
    if (flags_seen(&c, "val-split")) {
        nval = (int64_t)ceil(val_split * (double)n);
        if (nval >= n) die("--val-split %g of %lld tokens leaves none to train on", val_split, (long long)n);
    }
    int ntrain = write_shards(out, "train", stream, n - nval, shard_tokens);
    int nvalsh = write_shards(out, "val", stream + (n - nval), nval, shard_tokens);
    char tj[4200];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", out);
    if (pipit_tokenizer_save(t, tj)) die("--out: %s", pipit_errmsg());
    printf("encoded %zu bytes of %d file%s into %lld tokens in %.1f s (%.2f MB/s): %d train shard%s",
           bytes, files.n, files.n == 1 ? "" : "s", (long long)n, enc_s, enc_s > 0 ? (double)bytes / enc_s / 1e6 : 0.0,
           ntrain, ntrain == 1 ? "" : "s");
    if (nvalsh) printf(" (%lld tokens), %d val shard%s (%lld tokens)", (long long)(n - nval), nvalsh,
                       nvalsh == 1 ? "" : "s", (long long)nval);
    printf(", %s\ntrain with: pipit train --data '%s/train_*.bin' --vocab %d%s%s%s\n", tj, out, V,
           nvalsh ? " --val-data '" : "", nvalsh ? out : "", nvalsh ? "/val_*.bin'" : "");
    free(stream);
    free(texts);
    free(lens);
    cli_paths_free(&files);
    pipit_tokenizer_free(t);
    return 0;
}
