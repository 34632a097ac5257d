/*
 * bench_tokenize.c — encoding speed of pipit's byte-level BPE (public API
 * only): loads a tokenizer.json and a text file, checks that the text
 * encodes and decodes back to itself, then times pipit_tokenizer_encode
 * (best of REPS, one thread) over the whole text and over the text in
 * chunks (a chunk ends at the first newline CHUNK or more bytes after its
 * start: documents of a few KB, as corpora are encoded), and prints MB/s.
 * With IDS_OUT it writes the chunked encoding's ids (int32, little-endian)
 * for bench/tokenizer.sh to compare with the Python packages' before they
 * are timed.
 *
 *   build/bench_tokenize TOKENIZER.json TEXT [REPS] [CHUNK] [IDS_OUT]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipit_text.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* Encodes text chunk by chunk into ids; returns the token count. */
static size_t encode_chunks(const pipit_tokenizer *t, const char *text, size_t len, size_t chunk, int32_t *ids) {
    size_t total = 0;
    for (size_t at = 0; at < len;) {
        size_t end = at + chunk < len ? at + chunk : len;
        while (end < len && text[end - 1] != '\n') end++;
        size_t n = 0;
        if (pipit_tokenizer_encode(t, text + at, end - at, ids + total, end - at + 1, &n)) return 0;
        total += n;
        at = end;
    }
    return total;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenize TOKENIZER.json TEXT [REPS] [CHUNK] [IDS_OUT]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    size_t chunk = argc > 4 ? (size_t)atol(argv[4]) : 4096;
    size_t len = 0, n = 0, back_len = 0;
    char *text = read_all(argv[2], &len);
    pipit_tokenizer *t = NULL;
    if (!text || pipit_tokenizer_load(argv[1], &t)) {
        fprintf(stderr, "bench_tokenize: %s\n", text ? pipit_errmsg() : "cannot read the text");
        return 1;
    }
    int32_t *ids = malloc(sizeof *ids * (len + 1));
    char *back = malloc(len + 1);
    if (!ids || !back) return 1;
    /* check first: the text comes back */
    if (pipit_tokenizer_encode(t, text, len, ids, len + 1, &n) ||
        pipit_tokenizer_decode(t, ids, n, back, len + 1, &back_len) || back_len != len || memcmp(back, text, len)) {
        fprintf(stderr, "bench_tokenize: the text does not round-trip: %s\n", pipit_errmsg());
        return 1;
    }
    double best = 1e300;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        pipit_tokenizer_encode(t, text, len, ids, len + 1, &n);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    printf("pipit encode, whole text: %.2f MB/s (%zu bytes -> %zu tokens, best of %d: %.3f s)\n",
           (double)len / best / 1e6, len, n, reps, best);
    double best_c = 1e300;
    size_t nc = 0;
    for (int r = 0; r < reps && chunk; r++) {
        double t0 = now();
        nc = encode_chunks(t, text, len, chunk, ids);
        double dt = now() - t0;
        if (dt < best_c) best_c = dt;
    }
    if (chunk && !nc) {
        fprintf(stderr, "bench_tokenize: %s\n", pipit_errmsg());
        return 1;
    }
    if (chunk)
        printf("pipit encode: %.2f MB/s (chunks of %zu+ bytes: %zu tokens, best of %d: %.3f s)\n",
               (double)len / best_c / 1e6, chunk, nc, reps, best_c);
    if (argc > 5) {
        FILE *f = fopen(argv[5], "wb");
        if (!f || fwrite(ids, sizeof *ids, nc, f) != nc) return 1;
        fclose(f);
    }
    free(ids);
    free(back);
    free(text);
    pipit_tokenizer_free(t);
    return 0;
}
