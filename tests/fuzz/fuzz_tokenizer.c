/*
 * fuzz_tokenizer.c — libFuzzer target: the tokenizer's readers and its
 * encoder on arbitrary bytes. The first byte picks the mode:
 *   0: the rest is a tokenizer.json (pipit_tokenizer_load);
 *   1: the rest is vocab.json, a NUL, then merges.txt (load_gpt2);
 *   2: a byte-level BPE of 256 + (byte >> 2) tokens is trained on the rest.
 * Whatever loads or trains must encode the rest back to itself: decode
 * (encode(text)) == text for any bytes (a prefix space aside), every id
 * in the vocabulary; and merging the rest's first bytes as one piece
 * (pipit__bpe_merge, a queue of runs) must give what the definition gives,
 * carried out slowly here (a list of candidates scanned for the lowest).
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "pipit_text.h"
#include "text/text.h"
#include "util/common.h"

static void round_trip(const pipit_tokenizer *t, const uint8_t *text, size_t len) {
    size_t cap = 2 * len + 2, n = 0, back = 0; /* a token per byte, and a prefix space per stretch */
    int32_t *ids = pipit__malloc(cap * sizeof *ids);
    char *out = pipit__malloc(len + 1);
    if (!ids || !out) goto done;
    pipit_status s = pipit_tokenizer_encode(t, (const char *)text, len, ids, cap, &n);
    if (s == PIPIT_STATUS_NOMEM) goto done;
    PIPIT_ASSERT(s == PIPIT_STATUS_OK && n <= cap);
    for (size_t i = 0; i < n; i++) PIPIT_ASSERT(ids[i] >= 0 && ids[i] < pipit_tokenizer_vocab_size(t));
    s = pipit_tokenizer_decode(t, ids, n, NULL, 0, &back);
    PIPIT_ASSERT(s == PIPIT_STATUS_OK);
    if (back > len + 1) goto done; /* a prefix space adds one byte; an added token's text is its own */
    s = pipit_tokenizer_decode(t, ids, n, out, len + 1, &back);
    PIPIT_ASSERT(s == PIPIT_STATUS_OK);
    PIPIT_ASSERT(back == len ? memcmp(out, text, len) == 0 : back == len + 1 && out[0] == ' ');
done:
    pipit__free(ids);
    pipit__free(out);
}

static int32_t rank_of(const pipit_tokenizer *t, int32_t a, int32_t b) {
    int64_t r;
    return pipit__u64map_get(&t->pair_rank, (uint64_t)(uint32_t)a << 32 | (uint32_t)b, &r) ? (int32_t)r : -1;
}

/* Candidates (rank, pos, result), the lowest (rank, pos) first, one still
 * valid when the pair at pos merges into the same token: O(n^2). */
static size_t slow_merge(const pipit_tokenizer *t, int32_t *ids, size_t n) {
    enum { N = 512 };
    static int32_t cand[3 * N][3], nxt[N];
    size_t nc = 0;
    for (size_t i = 0; i < n; i++) nxt[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = rank_of(t, ids[i], ids[i + 1]);
        if (r >= 0) cand[nc][0] = r, cand[nc][1] = (int32_t)i, cand[nc][2] = t->merges[r][2], nc++;
    }
    while (nc) {
        size_t best = 0;
        for (size_t c = 1; c < nc; c++)
            if (cand[c][0] < cand[best][0] || (cand[c][0] == cand[best][0] && cand[c][1] < cand[best][1])) best = c;
        int32_t pos = cand[best][1], res = cand[best][2], nx = nxt[pos];
        memcpy(cand[best], cand[--nc], sizeof cand[0]);
        if (ids[pos] < 0 || nx < 0) continue;
        int32_t r = rank_of(t, ids[pos], ids[nx]);
        if (r < 0 || t->merges[r][2] != res) continue;
        ids[pos] = res;
        ids[nx] = -1;
        nxt[pos] = nxt[nx];
        int32_t prev = pos - 1;
        while (prev >= 0 && ids[prev] < 0) prev--;
        if (prev >= 0 && (r = rank_of(t, ids[prev], ids[pos])) >= 0)
            cand[nc][0] = r, cand[nc][1] = prev, cand[nc][2] = t->merges[r][2], nc++;
        if (nxt[pos] >= 0 && (r = rank_of(t, ids[pos], ids[nxt[pos]])) >= 0)
            cand[nc][0] = r, cand[nc][1] = pos, cand[nc][2] = t->merges[r][2], nc++;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0) ids[k++] = ids[i];
    return k;
}

static void check_merge(const pipit_tokenizer *t, const uint8_t *text, size_t len) {
    static int32_t a[512], b[512];
    size_t n = len < 512 ? len : 512, k = n;
    for (size_t i = 0; i < n; i++) a[i] = b[i] = t->byte_id[text[i]];
    if (pipit__bpe_merge(t, a, &k) == PIPIT_STATUS_NOMEM) return;
    size_t kw = slow_merge(t, b, n);
    PIPIT_ASSERT(k == kw && memcmp(a, b, k * sizeof *a) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t c = data[0];
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    pipit_tokenizer *t = NULL;
    pipit_status s;
    if (c % 3 == 0) {
        const char *path = pipit_fuzz_file("tokenizer.json", rest, n);
        if (!path) return 0;
        s = pipit_tokenizer_load(path, &t);
    } else if (c % 3 == 1) {
        const uint8_t *nul = memchr(rest, 0, n);
        size_t a = nul ? (size_t)(nul - rest) : n;
        const char *vocab = pipit_fuzz_file("vocab.json", rest, a);
        const char *merges = pipit_fuzz_file("merges.txt", nul ? nul + 1 : rest + n, nul ? n - a - 1 : 0);
        if (!vocab || !merges) return 0;
        s = pipit_tokenizer_load_gpt2(vocab, merges, &t);
    } else {
        const char *text = (const char *)rest;
        s = pipit_tokenizer_train(&text, &n, 1, 256 + (c >> 2), &t);
    }
    if (s) {
        PIPIT_ASSERT(t == NULL);
        PIPIT_ASSERT(pipit_errmsg()[0] != 0);
        return 0;
    }
    round_trip(t, rest, n);
    check_merge(t, rest, n);
    pipit_tokenizer_free(t);
    return 0;
}
