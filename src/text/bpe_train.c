/*
 * bpe_train.c — training a byte-level BPE on a corpus, step for step the
 * algorithm of the `tokenizers` package's BpeTrainer (so both give the
 * same vocabulary and merges): the corpus is pre-tokenised and its
 * distinct pieces counted; a max-heap holds, per pair of adjacent tokens,
 * its count and the pieces it was seen in; the top pair (highest count,
 * ties to the smallest (left, right) ids; an entry whose count went stale
 * is pushed back with the current one) is merged in those pieces, which
 * reports the pairs it removed and formed; formed pairs enter the heap.
 */
#include <string.h>

#include "text/text.h"
#include "util/checked.h"
#include "util/common.h"

typedef struct {
    int64_t count;
    int32_t left, right;
    int32_t *words; /* the pieces the pair was seen in (each once) */
    int32_t nwords, cap;
} entry;

typedef struct {
    /* distinct pieces: their symbols (token ids) and how often they occur */
    pipit__strmap index;
    int64_t *start, *count;
    int32_t *len;
    int32_t nwords, wcap;
    int32_t *sym;
    int64_t nsym, symcap;
    pipit__u64map pair_count;
    /* pairs formed by the merge being applied: pair -> entry in `fresh` */
    pipit__u64map fresh_at;
    entry *fresh;
    int32_t nfresh, freshcap;
    entry *heap;
    size_t nheap, heapcap;
    pipit_tokenizer *t;
} trainer;

static pipit_status oom(void) { return pipit__err(PIPIT_STATUS_NOMEM, "out of memory while training"); }

static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

/* ------------------------------------------------------------ the heap */

static int above(const entry *a, const entry *b) { /* a pops before b */
    if (a->count != b->count) return a->count > b->count;
    return a->left != b->left ? a->left < b->left : a->right < b->right;
}

static pipit_status push(trainer *tr, entry e) {
    if (tr->nheap == tr->heapcap) {
        size_t cap = tr->heapcap ? tr->heapcap * 2 : 1024;
        entry *h = pipit__realloc(tr->heap, cap * sizeof *h);
        if (!h) return oom();
        tr->heap = h;
        tr->heapcap = cap;
    }
    size_t i = tr->nheap++;
    while (i > 0 && above(&e, &tr->heap[(i - 1) / 2])) {
        tr->heap[i] = tr->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    tr->heap[i] = e;
    return PIPIT_STATUS_OK;
}

static entry pop(trainer *tr) {
    entry *h = tr->heap, top = h[0], last = h[--tr->nheap];
    size_t i = 0, n = tr->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && above(&h[c + 1], &h[c])) c++;
        if (!above(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

/* -------------------------------------------------- pairs being formed */

/* Notes that piece w holds pair (a, b): its entry among the fresh pairs. */
static pipit_status note_pair(trainer *tr, int32_t a, int32_t b, int32_t w) {
    int64_t *at = pipit__u64map_slot(&tr->fresh_at, pair_key(a, b), -1);
    if (!at) return oom();
    if (*at < 0) {
        if (tr->nfresh == tr->freshcap) {
            int32_t cap = tr->freshcap ? tr->freshcap * 2 : 256;
            entry *f = pipit__realloc(tr->fresh, (size_t)cap * sizeof *f);
            if (!f) return oom();
            tr->fresh = f;
            tr->freshcap = cap;
        }
        *at = tr->nfresh;
        tr->fresh[tr->nfresh++] = (entry){0, a, b, NULL, 0, 0};
    }
    entry *e = &tr->fresh[*at];
    if (e->nwords && e->words[e->nwords - 1] == w) return PIPIT_STATUS_OK; /* a piece's pairs come together */
    if (e->nwords == e->cap) {
        int32_t cap = e->cap ? e->cap * 2 : 4;
        int32_t *ws = pipit__realloc(e->words, (size_t)cap * sizeof *ws);
        if (!ws) return oom();
        e->words = ws;
        e->cap = cap;
    }
    e->words[e->nwords++] = w;
    return PIPIT_STATUS_OK;
}

/* The fresh pairs with a positive count enter the heap (the others are dropped). */
static pipit_status push_fresh(trainer *tr) {
    pipit_status s = PIPIT_STATUS_OK;
    for (int32_t i = 0; i < tr->nfresh; i++) {
        entry e = tr->fresh[i];
        int64_t c = 0;
        pipit__u64map_get(&tr->pair_count, pair_key(e.left, e.right), &c);
        e.count = c;
        if (c > 0 && !s) s = push(tr, e);
        else pipit__free(e.words);
    }
    tr->nfresh = 0;
    pipit__u64map_free(&tr->fresh_at);
    return s;
}

/* pair_count[(a, b)] += d (d = the change times the piece's count); a
 * pair formed (change > 0) is noted for the heap. */
static pipit_status change(trainer *tr, int32_t a, int32_t b, int sign, int32_t w) {
    int64_t *c = pipit__u64map_slot(&tr->pair_count, pair_key(a, b), 0);
    if (!c) return oom();
    *c += sign * tr->count[w];
    return sign > 0 ? note_pair(tr, a, b, w) : PIPIT_STATUS_OK;
}

/* ---------------------------------------------------------- the pieces */

static pipit_status add_piece(trainer *tr, const char *p, size_t len) {
    int32_t w;
    if (pipit__strmap_get(&tr->index, p, len, &w)) {
        tr->count[w]++;
        return PIPIT_STATUS_OK;
    }
    if (tr->nwords == INT32_MAX || len > INT32_MAX) return pipit__err(PIPIT_STATUS_INVALID, "the corpus has too many distinct pieces");
    if (tr->nwords == tr->wcap) {
        int32_t cap = tr->wcap ? (tr->wcap > INT32_MAX / 2 ? INT32_MAX : tr->wcap * 2) : 4096;
        int64_t *st = pipit__realloc(tr->start, (size_t)cap * sizeof *st);
        if (st) tr->start = st;
        int64_t *ct = st ? pipit__realloc(tr->count, (size_t)cap * sizeof *ct) : NULL;
        if (ct) tr->count = ct;
        int32_t *ln = ct ? pipit__realloc(tr->len, (size_t)cap * sizeof *ln) : NULL;
        if (!ln) return oom();
        tr->len = ln;
        tr->wcap = cap;
    }
    if (tr->nsym + (int64_t)len > tr->symcap) {
        int64_t cap = tr->symcap ? tr->symcap * 2 : 1 << 16;
        while (cap < tr->nsym + (int64_t)len) cap *= 2;
        int32_t *sym = pipit__realloc(tr->sym, (size_t)cap * sizeof *sym);
        if (!sym) return oom();
        tr->sym = sym;
        tr->symcap = cap;
    }
    w = tr->nwords++;
    tr->start[w] = tr->nsym;
    tr->len[w] = (int32_t)len;
    tr->count[w] = 1;
    for (size_t i = 0; i < len; i++) tr->sym[tr->nsym++] = tr->t->byte_id[(uint8_t)p[i]];
    return pipit__strmap_put(&tr->index, p, len, w) ? PIPIT_STATUS_OK : oom();
}

static pipit_status count_pieces(trainer *tr, const char *const *texts, const size_t *lens, int n) {
    for (int k = 0; k < n; k++) {
        const uint8_t *u = (const uint8_t *)texts[k];
        for (size_t i = 0; i < lens[k];) {
            size_t end = pipit__pretok_next(u, lens[k], i);
            pipit_status s = add_piece(tr, texts[k] + i, end - i);
            if (s) return s;
            i = end;
        }
    }
    return PIPIT_STATUS_OK;
}

/* Every adjacent pair of every piece: counted, and noted with its pieces. */
static pipit_status count_pairs(trainer *tr) {
    for (int32_t w = 0; w < tr->nwords; w++) {
        const int32_t *s = tr->sym + tr->start[w];
        for (int32_t i = 0; i + 1 < tr->len[w]; i++) {
            pipit_status st = change(tr, s[i], s[i + 1], +1, w);
            if (st) return st;
        }
    }
    return push_fresh(tr);
}

/* Merges every (a, b) of piece w into r, left to right, reporting the
 * pairs around each merge that go away and that form. */
static pipit_status merge_piece(trainer *tr, int32_t w, int32_t a, int32_t b, int32_t r) {
    int32_t *s = tr->sym + tr->start[w], n = tr->len[w], out = 0;
    pipit_status st = PIPIT_STATUS_OK;
    for (int32_t i = 0; i < n && !st;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            if (out > 0) {
                st = change(tr, s[out - 1], a, -1, w);
                if (!st) st = change(tr, s[out - 1], r, +1, w);
            }
            s[out++] = r;
            i += 2;
            if (i < n && !st) {
                st = change(tr, b, s[i], -1, w);
                if (!st) st = change(tr, r, s[i], +1, w);
            }
        } else {
            s[out++] = s[i++];
        }
    }
    tr->len[w] = out;
    return st;
}

/* The id of left + right's bytes: an existing token, or a new one. */
static pipit_status merged_token(trainer *tr, int32_t left, int32_t right, int32_t *id) {
    pipit_tokenizer *t = tr->t;
    size_t la = t->tok_len[left], lb = t->tok_len[right];
    char *buf = pipit__malloc(la + lb);
    if (!buf) return oom();
    memcpy(buf, t->tok[left], la);
    memcpy(buf + la, t->tok[right], lb);
    int ok = 1;
    if (!pipit__strmap_get(&t->by_bytes, buf, la + lb, id)) {
        *id = t->nvocab;
        ok = pipit__tok_set(t, *id, buf, la + lb);
    }
    pipit__free(buf);
    return ok ? PIPIT_STATUS_OK : oom();
}

static pipit_status merge_loop(trainer *tr, int vocab_size) {
    pipit_tokenizer *t = tr->t;
    while (t->nvocab < vocab_size && tr->nheap) {
        entry top = pop(tr);
        int64_t now = 0;
        pipit__u64map_get(&tr->pair_count, pair_key(top.left, top.right), &now);
        if (top.count != now) { /* stale: back with the current count */
            top.count = now;
            pipit_status s = push(tr, top);
            if (s) {
                pipit__free(top.words);
                return s;
            }
            continue;
        }
        int32_t r = -1;
        pipit_status s = top.count < 1 ? PIPIT_STATUS_OK : merged_token(tr, top.left, top.right, &r);
        if (!s && r >= 0) s = pipit__tok_add_merge(t, top.left, top.right, r, "training");
        for (int32_t i = 0; i < top.nwords && !s && r >= 0; i++) s = merge_piece(tr, top.words[i], top.left, top.right, r);
        pipit__free(top.words);
        if (!s && r >= 0) s = push_fresh(tr);
        if (s || r < 0) return s;
    }
    return PIPIT_STATUS_OK;
}

/* The 256 bytes as ids 0..255 in the order of their byte-level characters
 * (the `tokenizers` trainer sorts its initial alphabet that way). */
static pipit_status init_bytes(pipit_tokenizer *t) {
    int32_t id = 0;
    for (uint32_t cp = 0; cp < 0x100 + 68; cp++) {
        int b = pipit__char_byte(cp);
        if (b < 0) continue;
        char c = (char)b;
        if (!pipit__tok_set(t, id++, &c, 1)) return oom();
    }
    PIPIT_ASSERT(id == 256);
    return pipit__tok_finish(t, "training");
}

static void trainer_free(trainer *tr) {
    pipit__strmap_free(&tr->index);
    pipit__free(tr->start);
    pipit__free(tr->count);
    pipit__free(tr->len);
    pipit__free(tr->sym);
    pipit__u64map_free(&tr->pair_count);
    pipit__u64map_free(&tr->fresh_at);
    for (int32_t i = 0; i < tr->nfresh; i++) pipit__free(tr->fresh[i].words);
    pipit__free(tr->fresh);
    for (size_t i = 0; i < tr->nheap; i++) pipit__free(tr->heap[i].words);
    pipit__free(tr->heap);
}

static pipit_status train(const char *const *texts, const size_t *lens, int n, int vocab_size, pipit_tokenizer **out) {
    if (vocab_size < 256 || vocab_size > (1 << 24))
        return pipit__err(PIPIT_STATUS_INVALID, "vocab_size %d is outside 256 .. 2^24 (256 are the bytes)", vocab_size);
    if (n < 0) return pipit__err(PIPIT_STATUS_INVALID, "n = %d texts", n);
    for (int k = 0; k < n; k++)
        if (!texts[k] && lens[k]) return pipit__err(PIPIT_STATUS_INVALID, "texts[%d] is NULL", k);
    trainer tr = {.t = pipit__tok_new()};
    if (!tr.t) return PIPIT_STATUS_NOMEM;
    pipit_status s = init_bytes(tr.t);
    if (!s) s = count_pieces(&tr, texts, lens, n);
    if (!s) s = count_pairs(&tr);
    if (!s) s = merge_loop(&tr, vocab_size);
    trainer_free(&tr);
    if (s) {
        pipit_tokenizer_free(tr.t);
        return s;
    }
    *out = tr.t;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_tokenizer_train(const char *const *texts, const size_t *lens, int n, int vocab_size,
                                   pipit_tokenizer **out) {
    if (!out || (n > 0 && (!texts || !lens)))
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_tokenizer_train: %s is NULL", !out ? "out" : !texts ? "texts" : "lens");
    *out = NULL;
    unsigned long gen0 = pipit__err_gen();
    return pipit__text_named(train(texts, lens, n, vocab_size, out), gen0, __func__);
}
