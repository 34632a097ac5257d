/*
 * bpe.c — the tokenizer object and byte-level BPE: building a vocabulary
 * and its merge table, merging one pre-tokenised piece the way the
 * `tokenizers` package does (a heap of candidate pairs by (rank,
 * position), an entry still valid only if its pair still merges into the
 * same token), encoding a text (added tokens cut out first, a per-call
 * cache of pieces already seen) and decoding ids back to bytes.
 */
#include <string.h>

#include "text/text.h"
#include "util/checked.h"
#include "util/common.h"

/* ----------------------------------------------------------- the object */

pipit_tokenizer *pipit__tok_new(void) {
    pipit_tokenizer *t = pipit__calloc(1, sizeof *t);
    if (!t) {
        pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
        return NULL;
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    return t;
}

int pipit__tok_set(pipit_tokenizer *t, int32_t id, const char *bytes, size_t len) {
    if (id >= t->tokcap) {
        int32_t cap = t->tokcap ? t->tokcap : 512;
        while (cap <= id) cap = cap > INT32_MAX / 2 ? INT32_MAX : cap * 2;
        char **tok = pipit__realloc(t->tok, (size_t)cap * sizeof *tok);
        if (!tok) return 0;
        t->tok = tok;
        uint32_t *tl = pipit__realloc(t->tok_len, (size_t)cap * sizeof *tl);
        if (!tl) return 0;
        t->tok_len = tl;
        t->tokcap = cap;
    }
    for (; t->nvocab <= id; t->nvocab++) t->tok[t->nvocab] = NULL, t->tok_len[t->nvocab] = 0;
    char *copy = pipit__malloc(len ? len : 1);
    if (!copy) return 0;
    memcpy(copy, bytes, len);
    PIPIT_ASSERT(!t->tok[id]); /* the byte map borrows the first copy */
    t->tok[id] = copy;
    t->tok_len[id] = (uint32_t)len;
    return pipit__strmap_put(&t->by_bytes, copy, len, id);
}

pipit_status pipit__tok_add_merge(pipit_tokenizer *t, int32_t left, int32_t right, int32_t result, const char *where) {
    if (left < 0 || right < 0 || result < 0 || left >= t->nvocab || right >= t->nvocab || result >= t->nvocab ||
        !t->tok[left] || !t->tok[right] || !t->tok[result])
        return pipit__err(PIPIT_STATUS_FORMAT, "%s: merge %d of unknown tokens", where, t->nmerges + 1);
    if (t->nmerges % 1024 == 0) {
        int32_t(*m)[3] = pipit__realloc(t->merges, ((size_t)t->nmerges + 1024) * sizeof *m);
        if (!m) return pipit__err(PIPIT_STATUS_NOMEM, "%s: out of memory", where);
        t->merges = m;
    }
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    int64_t *slot = pipit__u64map_slot(&t->pair_rank, key, -1);
    if (!slot) return pipit__err(PIPIT_STATUS_NOMEM, "%s: out of memory", where);
    *slot = t->nmerges; /* a pair listed twice takes its later rank, as in `tokenizers` (and GPT-2's bpe_ranks) */
    t->merges[t->nmerges][0] = left;
    t->merges[t->nmerges][1] = right;
    t->merges[t->nmerges][2] = result;
    t->nmerges++;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__tok_finish(pipit_tokenizer *t, const char *where) {
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if (!pipit__strmap_get(&t->by_bytes, &c, 1, &t->byte_id[b]))
            return pipit__err(PIPIT_STATUS_FORMAT,
                              "%s: no token for byte 0x%02X (a byte-level BPE has a token for every byte)", where, b);
    }
    return PIPIT_STATUS_OK;
}

void pipit_tokenizer_free(pipit_tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->nvocab; i++) pipit__free(t->tok[i]);
    pipit__free(t->tok);
    pipit__free(t->tok_len);
    pipit__strmap_free(&t->by_bytes);
    pipit__free(t->merges);
    pipit__u64map_free(&t->pair_rank);
    for (int i = 0; i < t->nadded; i++) pipit__free(t->added[i].bytes);
    pipit__free(t->added);
    pipit__free(t);
}

/* ---------------------------------------------------------------- merging */

/* The candidate merges of a piece, popped lowest (rank, pos) first, as a
 * heap of them would pop them (a heap it was: O(n log n) with a cache miss
 * per level, 2.5 s for a MiB of spaces). Entries of one rank mostly come
 * in increasing pos: every pair at the start, left to right, then the
 * pairs that merges form, left to right while a rank is merged. So the
 * queue keeps runs, lists of entries of one rank in increasing pos: an
 * entry joins its rank's latest run when it does not come before the
 * run's tail, else it starts a run; a heap orders the runs by their first
 * entry. A step costs O(log runs): a run of spaces (a few ranks, a run
 * each) merges in linear time. Each run is sorted and holds one rank, so
 * the first entry of the heap's top run is the lowest of all. */
typedef struct {
    int32_t pos, next; /* next: the following entry of its run, or -1 */
} qentry;

typedef struct {
    int32_t rank, head, tail; /* head -1: empty (out of the heap) */
} qrun;

typedef struct {
    qentry *ent;
    int32_t nent, entcap;
    qrun *run;
    int32_t *heap; /* runs by (rank, pos of their head) */
    int32_t nrun, runcap, nheap;
    int32_t *latest; /* rank (hashed) -> its latest run, or -1; a clash only starts more runs */
    uint32_t mask;
    int own; /* run and heap are allocated (not the caller's stack) */
    uint64_t work;
} queue;

static int run_before(const queue *q, int32_t a, int32_t b) {
    const qrun *x = &q->run[a], *y = &q->run[b];
    if (x->rank != y->rank) return x->rank < y->rank;
    return q->ent[x->head].pos < q->ent[y->head].pos;
}

static void heap_up(queue *q, int32_t i) {
    int32_t r = q->heap[i];
    while (i > 0 && run_before(q, r, q->heap[(i - 1) / 2])) {
        q->heap[i] = q->heap[(i - 1) / 2];
        i = (i - 1) / 2;
        q->work++;
    }
    q->heap[i] = r;
}

static void heap_down(queue *q, int32_t i) {
    int32_t r = q->heap[i], n = q->nheap;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && run_before(q, q->heap[c + 1], q->heap[c])) c++;
        if (!run_before(q, q->heap[c], r)) break;
        q->heap[i] = q->heap[c];
        i = c;
        q->work++;
    }
    q->heap[i] = r;
}

static pipit_status q_push(queue *q, int32_t rank, int32_t pos) {
    PIPIT_ASSERT(q->nent < q->entcap);
    int32_t e = q->nent++;
    q->ent[e] = (qentry){pos, -1};
    q->work++;
    uint32_t slot = ((uint32_t)rank * 2654435761u >> 7) & q->mask;
    int32_t r = q->latest[slot];
    if (r >= 0 && q->run[r].rank == rank) {
        qrun *ru = &q->run[r];
        if (ru->head < 0) { /* emptied: it starts again here */
            ru->head = ru->tail = e;
            q->heap[q->nheap++] = r;
            heap_up(q, q->nheap - 1);
            return PIPIT_STATUS_OK;
        }
        if (q->ent[ru->tail].pos <= pos) { /* the head stays: the heap is unchanged */
            q->ent[ru->tail].next = e;
            ru->tail = e;
            return PIPIT_STATUS_OK;
        }
    }
    if (q->nrun == q->runcap) { /* runs <= entries <= entcap < INT32_MAX */
        int32_t cap = (int64_t)q->runcap * 2 < q->entcap ? q->runcap * 2 : q->entcap;
        qrun *run = pipit__malloc((size_t)cap * sizeof *run);
        int32_t *heap = pipit__malloc((size_t)cap * sizeof *heap);
        if (!run || !heap) {
            pipit__free(run);
            pipit__free(heap);
            return pipit__err(PIPIT_STATUS_NOMEM, "out of memory merging a piece");
        }
        memcpy(run, q->run, (size_t)q->nrun * sizeof *run);
        memcpy(heap, q->heap, (size_t)q->nheap * sizeof *heap);
        if (q->own) {
            pipit__free(q->run);
            pipit__free(q->heap);
        }
        q->run = run;
        q->heap = heap;
        q->own = 1;
        q->runcap = cap;
    }
    r = q->nrun++;
    q->run[r] = (qrun){rank, e, e};
    q->latest[slot] = r;
    q->heap[q->nheap++] = r;
    heap_up(q, q->nheap - 1);
    return PIPIT_STATUS_OK;
}

/* The lowest entry: 0 when the queue is empty. */
static int q_pop(queue *q, int32_t *rank, int32_t *pos) {
    if (!q->nheap) return 0;
    int32_t r = q->heap[0];
    qrun *ru = &q->run[r];
    int32_t e = ru->head;
    *rank = ru->rank;
    *pos = q->ent[e].pos;
    ru->head = q->ent[e].next;
    q->work++;
    if (ru->head < 0 && --q->nheap) q->heap[0] = q->heap[q->nheap];
    if (q->nheap) heap_down(q, 0);
    return 1;
}

/* The rank of merging (left, right), or -1. */
static int32_t rank_of(const pipit_tokenizer *t, int32_t left, int32_t right) {
    int64_t r;
    return pipit__u64map_get(&t->pair_rank, (uint64_t)(uint32_t)left << 32 | (uint32_t)right, &r) ? (int32_t)r : -1;
}

/* Queues the pair starting at symbol pos (whose right neighbour is nx). */
static pipit_status push_pair(const pipit_tokenizer *t, const int32_t *ids, int32_t pos, int32_t nx, queue *q) {
    int32_t r = rank_of(t, ids[pos], ids[nx]);
    return r >= 0 ? q_push(q, r, pos) : PIPIT_STATUS_OK;
}

/* Merging with links between the symbols left (prev[i] = links[2i],
 * next[i] = links[2i+1]): an entry is still valid only if its pair still
 * merges into the same token (as in `tokenizers`). */
static pipit_status merge_queued(const pipit_tokenizer *t, int32_t *ids, size_t *n_io, int32_t *links, queue *q) {
    size_t n = *n_io;
    for (size_t i = 0; i < n; i++) {
        links[2 * i] = (int32_t)i - 1;
        links[2 * i + 1] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    pipit_status s = PIPIT_STATUS_OK;
    for (size_t i = 0; i + 1 < n && !s; i++) s = push_pair(t, ids, (int32_t)i, (int32_t)i + 1, q);
    int32_t rank, pos;
    while (!s && q_pop(q, &rank, &pos)) {
        int32_t nx = links[2 * pos + 1], result = t->merges[rank][2];
        if (ids[pos] < 0 || nx < 0) continue; /* merged away, or the last symbol now */
        int32_t r = rank_of(t, ids[pos], ids[nx]);
        if (r < 0 || t->merges[r][2] != result) continue; /* an expired entry */
        ids[pos] = result;
        ids[nx] = -1;
        int32_t after = links[2 * nx + 1];
        links[2 * pos + 1] = after;
        if (after >= 0) links[2 * after] = pos;
        if (links[2 * pos] >= 0) s = push_pair(t, ids, links[2 * pos], pos, q);
        if (after >= 0 && !s) s = push_pair(t, ids, pos, after, q);
    }
    if (s) return s;
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = links[2 * i + 1]) ids[k++] = ids[i];
    *n_io = k;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__bpe_merge_work(const pipit_tokenizer *t, int32_t *ids, size_t *n_io, uint64_t *work) {
    size_t n = *n_io;
    if (n < 2 || !t->nmerges) return PIPIT_STATUS_OK;
    /* entries: n - 1 pairs at the start, at most two more per merge */
    enum { SMALL = 64, SMALL_ENT = 3 * SMALL, SMALL_RUN = 32 }; /* more runs move to the heap */
    int32_t small_links[2 * SMALL], small_latest[SMALL], small_heap[SMALL_RUN];
    qentry small_ent[SMALL_ENT];
    qrun small_run[SMALL_RUN];
    int32_t *links = small_links;
    queue q = {.ent = small_ent, .entcap = SMALL_ENT, .run = small_run, .heap = small_heap, .runcap = SMALL_RUN,
               .latest = small_latest};
    uint32_t tab = 8; /* the rank table: a slot per symbol, up to 2^16 */
    while (tab < n && tab < 1u << 16) tab <<= 1;
    q.mask = tab - 1;
    if (n > SMALL) {
        size_t nl, ne;
        if (n > INT32_MAX / 4 || !pipit__mul_size(n, 2 * sizeof *links, &nl) ||
            !pipit__mul_size(n, 3 * sizeof *q.ent, &ne))
            return pipit__err(PIPIT_STATUS_INVALID, "a piece of %zu bytes is too long to merge", n);
        links = pipit__malloc(nl);
        q.ent = pipit__malloc(ne);
        q.latest = pipit__malloc(tab * sizeof *q.latest);
        if (!links || !q.ent || !q.latest) {
            pipit__free(links);
            pipit__free(q.ent);
            pipit__free(q.latest);
            return pipit__err(PIPIT_STATUS_NOMEM, "out of memory merging a piece of %zu bytes", n);
        }
        q.entcap = (int32_t)(3 * n);
    }
    for (uint32_t i = 0; i <= q.mask; i++) q.latest[i] = -1;
    pipit_status s = merge_queued(t, ids, n_io, links, &q);
    if (work) *work += q.work;
    if (q.own) {
        pipit__free(q.run);
        pipit__free(q.heap);
    }
    if (links != small_links) {
        pipit__free(links);
        pipit__free(q.ent);
        pipit__free(q.latest);
    }
    return s;
}

pipit_status pipit__bpe_merge(const pipit_tokenizer *t, int32_t *ids, size_t *n_io) {
    return pipit__bpe_merge_work(t, ids, n_io, NULL);
}

/* --------------------------------------------------------------- encoding */

/* A call's output and its cache of pieces already encoded (keys point
 * into the caller's text, or into prefixed copies kept until the end). */
typedef struct {
    const pipit_tokenizer *t;
    int32_t *ids;
    size_t cap, n;
    pipit__strmap cache;  /* piece bytes -> index into spans */
    int32_t (*spans)[2];  /* start in pool, count */
    size_t nspans;
    int32_t *pool;
    size_t npool, poolcap;
    char **copies;
    size_t ncopies;
    int32_t scratch[256];
} enc_state;

enum { CACHE_MAX = 1 << 20 }; /* pieces remembered per call */

static void emit(enc_state *e, const int32_t *ids, size_t k) {
    for (size_t i = 0; i < k; i++, e->n++)
        if (e->n < e->cap) e->ids[e->n] = ids[i];
}

static pipit_status remember(enc_state *e, const char *p, size_t len, const int32_t *ids, size_t k) {
    if (e->nspans >= CACHE_MAX) return PIPIT_STATUS_OK;
    if (e->nspans % 4096 == 0) {
        int32_t(*s)[2] = pipit__realloc(e->spans, (e->nspans + 4096) * sizeof *s);
        if (!s) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
        e->spans = s;
    }
    if (e->npool + k > e->poolcap) {
        size_t cap = e->poolcap ? e->poolcap * 2 : 4096;
        while (cap < e->npool + k) cap *= 2;
        int32_t *pool = pipit__realloc(e->pool, cap * sizeof *pool);
        if (!pool) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
        e->pool = pool;
        e->poolcap = cap;
    }
    if (e->npool + k > INT32_MAX) return PIPIT_STATUS_OK;
    memcpy(e->pool + e->npool, ids, k * sizeof *ids);
    e->spans[e->nspans][0] = (int32_t)e->npool;
    e->spans[e->nspans][1] = (int32_t)k;
    if (!pipit__strmap_put(&e->cache, p, len, (int32_t)e->nspans)) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    e->npool += k;
    e->nspans++;
    return PIPIT_STATUS_OK;
}

/* One pre-tokenised piece: from the cache, or its bytes merged. */
static pipit_status encode_piece(enc_state *e, const char *p, size_t len) {
    int32_t hit;
    if (pipit__strmap_get(&e->cache, p, len, &hit)) {
        emit(e, e->pool + e->spans[hit][0], (size_t)e->spans[hit][1]);
        return PIPIT_STATUS_OK;
    }
    int32_t *ids = len <= 256 ? e->scratch : pipit__malloc(len * sizeof *ids);
    if (!ids) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    for (size_t i = 0; i < len; i++) ids[i] = e->t->byte_id[(uint8_t)p[i]];
    size_t k = len;
    pipit_status s = pipit__bpe_merge(e->t, ids, &k);
    if (!s) {
        emit(e, ids, k);
        s = remember(e, p, len, ids, k);
    }
    if (ids != e->scratch) pipit__free(ids);
    return s;
}

/* Text between added tokens: a space in front if the tokenizer says so,
 * then piece by piece. */
static pipit_status encode_segment(enc_state *e, const char *s, size_t len) {
    if (!len) return PIPIT_STATUS_OK; /* empty splits are dropped, as in `tokenizers` */
    if (e->t->add_prefix_space && s[0] != ' ') {
        char **more = pipit__realloc(e->copies, (e->ncopies + 1) * sizeof *more);
        char *c = len < SIZE_MAX ? pipit__malloc(len + 1) : NULL;
        if (more) e->copies = more;
        if (!more || !c) {
            pipit__free(c);
            return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
        }
        c[0] = ' ';
        memcpy(c + 1, s, len);
        e->copies[e->ncopies++] = c;
        s = c;
        len++;
    }
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < len;) {
        size_t end = pipit__pretok_next(u, len, i);
        pipit_status st = encode_piece(e, s + i, end - i);
        if (st) return st;
        i = end;
    }
    return PIPIT_STATUS_OK;
}

/* The longest added token of the pass (normalized or not) at s[0..len-1], or -1. */
static int added_at(const pipit_tokenizer *t, const char *s, size_t len, int normalized) {
    int best = -1;
    for (int a = 0; a < t->nadded; a++) {
        const pipit__added_token *at = &t->added[a];
        if (at->normalized == normalized && at->len <= len && (best < 0 || at->len > t->added[best].len) &&
            memcmp(s, at->bytes, at->len) == 0)
            best = a;
    }
    return best;
}

/* Cuts the pass's added tokens out of s (leftmost-longest); the text
 * between them goes to the next pass (the normalized tokens), then to
 * encode_segment. */
static pipit_status split_added(enc_state *e, const char *s, size_t len, int pass) {
    if (pass == 2) return encode_segment(e, s, len);
    size_t from = 0;
    for (size_t i = 0; i < len;) {
        int a = e->t->nadded ? added_at(e->t, s + i, len - i, pass) : -1;
        if (a < 0) {
            i++;
            continue;
        }
        pipit_status st = split_added(e, s + from, i - from, pass + 1);
        if (st) return st;
        emit(e, &e->t->added[a].id, 1);
        i += e->t->added[a].len;
        from = i;
    }
    return split_added(e, s + from, len - from, pass + 1);
}

static pipit_status encode(const pipit_tokenizer *t, const char *text, size_t len, int32_t *ids, size_t cap,
                           size_t *n) {
    enc_state e = {.t = t, .ids = ids, .cap = cap};
    pipit_status s = split_added(&e, text, len, 0);
    for (size_t i = 0; i < e.ncopies; i++) pipit__free(e.copies[i]);
    pipit__free(e.copies);
    pipit__strmap_free(&e.cache);
    pipit__free(e.spans);
    pipit__free(e.pool);
    if (s) return s;
    *n = e.n;
    if (e.n > cap)
        return pipit__err(PIPIT_STATUS_INVALID, "the text is %zu tokens, more than cap = %zu", e.n, cap);
    return PIPIT_STATUS_OK;
}

/* ------------------------------------------------------------ public API */

pipit_status pipit__text_named(pipit_status s, unsigned long gen0, const char *fn) {
    s = pipit__err_fresh(s, gen0, fn);
    if (s && !strstr(pipit_errmsg(), fn)) pipit__err_prefix("%s", fn);
    return s;
}

pipit_status pipit_tokenizer_encode(const pipit_tokenizer *t, const char *text, size_t len, int32_t *ids, size_t cap,
                                    size_t *n) {
    if (!t || !n || (!text && len) || (!ids && cap))
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_tokenizer_encode: %s is NULL",
                          !t ? "tokenizer" : !n ? "n" : !ids && cap ? "ids" : "text");
    *n = 0;
    unsigned long gen0 = pipit__err_gen();
    return pipit__text_named(encode(t, text ? text : "", len, ids, cap, n), gen0, __func__);
}

pipit_status pipit_tokenizer_decode(const pipit_tokenizer *t, const int32_t *ids, size_t n, char *out, size_t cap,
                                    size_t *len) {
    if (!t || !len || (!ids && n) || (!out && cap))
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_tokenizer_decode: %s is NULL",
                          !t ? "tokenizer" : !len ? "len" : !ids && n ? "ids" : "out");
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->nvocab || !t->tok[ids[i]])
            return pipit__err(PIPIT_STATUS_INVALID,
                              "pipit_tokenizer_decode: ids[%zu] = %d is not a token of this vocabulary (0..%d)", i,
                              ids[i], t->nvocab - 1);
        if (!pipit__add_size(total, t->tok_len[ids[i]], &total))
            return pipit__err(PIPIT_STATUS_INVALID, "pipit_tokenizer_decode: the text would overflow size_t");
    }
    *len = total;
    if (!out && !cap) return PIPIT_STATUS_OK;
    if (cap < total)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_tokenizer_decode: the text is %zu bytes, more than cap = %zu",
                          total, cap);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + at, t->tok[ids[i]], t->tok_len[ids[i]]);
        at += t->tok_len[ids[i]];
    }
    if (at < cap) out[at] = 0;
    return PIPIT_STATUS_OK;
}

int pipit_tokenizer_vocab_size(const pipit_tokenizer *t) {
    if (!t) {
        pipit__err(PIPIT_STATUS_MISUSE, "pipit_tokenizer_vocab_size: tokenizer is NULL");
        return 0;
    }
    return t->nvocab;
}

const char *pipit_tokenizer_token(const pipit_tokenizer *t, int32_t id, size_t *len) {
    if (!t || !len) {
        pipit__err(PIPIT_STATUS_MISUSE, "pipit_tokenizer_token: %s is NULL", t ? "len" : "tokenizer");
        return NULL;
    }
    if (id < 0 || id >= t->nvocab || !t->tok[id]) {
        pipit__err(PIPIT_STATUS_INVALID, "pipit_tokenizer_token: %d is not a token of this vocabulary (0..%d)", id,
                   t->nvocab - 1);
        return NULL;
    }
    *len = t->tok_len[id];
    return t->tok[id];
}
