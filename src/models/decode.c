/*
 * decode.c — incremental decoding (pipit_decode.h): the pieces of a
 * decoding graph the model builders share (decode.h), the decoder that
 * holds the KV cache and feeds it, and the sampler.
 *
 * The graph's attention of the new position p, per layer (decode_attend):
 *   K = cache keys + the new key placed at slot p     [B,S,KVD]  (exact: the
 *   V = cache values + the new value placed at slot p [B,S,KVD]   slot held 0)
 *   scores = q K^T / sqrt(D) + mask  (mask: 0 for slots <= p, -inf after)
 *   out = softmax(scores) V
 * with the query heads grouped by the key/value head they read ([B,KV,rep,D]
 * against [B,KV,S,D]), so grouped-query attention is one batched product.
 * The slots after p hold zeros and weigh exp(-inf) = 0.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/decode.h"
#include "util/checked.h"
#include "util/common.h"

/* ---- the graph ---- */

pipit_status pipit__decode_begin(pipit_graph *g, pipit__decode *d, int layers, int stages, int64_t B, int64_t S,
                                 int64_t kvd, pipit_dtype dt, const char *fn) {
    memset(d, 0, sizeof *d);
    if (pipit_graph_tensor_parallel(g) > 1)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "%s: a decoding graph runs on one rank per stage (the graph is set to tensor parallelism %d)",
                          fn, pipit_graph_tensor_parallel(g));
    if (stages != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: a decoding graph is one stage (the config asks for %d)", fn,
                          stages);
    d->g = g, d->layers = layers, d->B = B, d->S = S, d->kvd = kvd;
    d->rows = pipit__calloc((size_t)layers * 2, sizeof *d->rows);
    if (!d->rows) return pipit__err(PIPIT_STATUS_NOMEM, "%s: out of memory", fn);
    d->cache = pipit_input(g, PIPIT_DECODE_CACHE, dt, 4, (int64_t[]){2 * (int64_t)layers, B, S, kvd});
    d->slot = pipit_input(g, PIPIT_DECODE_SLOT, dt, 3, (int64_t[]){B, S, 1});
    d->mask = pipit_input(g, PIPIT_DECODE_MASK, dt, 4, (int64_t[]){B, 1, 1, S});
    return PIPIT_STATUS_OK;
}

pipit_val pipit__decode_place(const pipit__decode *d, pipit_val x) { return pipit_mul(d->g, d->slot, x); }

pipit_val pipit__decode_row(const pipit__decode *d, pipit_val placed) { return pipit_reduce_sum(d->g, placed, 1, 1); }

pipit_val pipit__decode_rope_basis(const pipit__decode *d, int64_t D) {
    pipit_graph *g = d->g;
    pipit_val one = pipit_reduce_sum(g, d->slot, 1, 1); /* [B,1,1]: the slot's one 1 */
    pipit_val ones = pipit_broadcast_to(g, one, 3, (int64_t[]){d->B, 1, D / 2});
    pipit_val halves[2] = {ones, pipit_sub(g, ones, ones)};
    return pipit_concat(g, 2, halves, 2);
}

void pipit__decode_set_rope(pipit__decode *d, pipit_val cos_sin) {
    pipit_graph *g = d->g;
    int64_t D = pipit_val_dim(cos_sin, 2);
    pipit_val cs[2];
    pipit_split(g, cos_sin, 2, 2, (int64_t[]){D / 2, D / 2}, cs); /* on failure: invalid, the graph poisoned */
    pipit_val c2[2] = {cs[0], cs[0]}, s2[2] = {cs[1], cs[1]};
    d->cos = pipit_reshape(g, pipit_concat(g, 2, c2, 2), 4, (int64_t[]){d->B, 1, 1, D});
    d->sin = pipit_reshape(g, pipit_concat(g, 2, s2, 2), 4, (int64_t[]){d->B, 1, 1, D});
}

pipit_val pipit__decode_rotate(const pipit__decode *d, pipit_val x, int heads) {
    pipit_graph *g = d->g;
    int64_t D = pipit_val_dim(d->cos, 3);
    pipit_val xh = pipit_reshape(g, x, 4, (int64_t[]){d->B, 1, heads, D}), h[2];
    pipit_split(g, xh, 3, 2, (int64_t[]){D / 2, D / 2}, h);
    pipit_val rot[2] = {pipit_neg(g, h[1]), h[0]}; /* rotate_half: (-x2, x1) */
    pipit_val y = pipit_add(g, pipit_mul(g, xh, d->cos), pipit_mul(g, pipit_concat(g, 2, rot, 3), d->sin));
    return pipit_reshape(g, y, 3, (int64_t[]){d->B, 1, (int64_t)heads * D});
}

/* Entry i (2l: layer l's keys, 2l+1: its values) of the cache: [B,S,KVD],
 * a view of the input (the leading axis is sliced). */
static pipit_val cached(const pipit__decode *d, int i) {
    pipit_val c = pipit_slice(d->g, d->cache, 0, i, 1);
    return pipit_reshape(d->g, c, 3, (int64_t[]){d->B, d->S, d->kvd});
}

/* [B,S,KV*D] -> [B,KV,S,D] */
static pipit_val by_head(const pipit__decode *d, pipit_val x, int kv, int64_t D) {
    return pipit_transpose(d->g, pipit_reshape(d->g, x, 4, (int64_t[]){d->B, d->S, kv, D}), 1, 2);
}

pipit_val pipit__decode_attend(pipit__decode *d, int l, pipit_val q, pipit_val k_row, pipit_val k_placed,
                               pipit_val v_row, pipit_val v_placed, int heads, int kv_heads) {
    pipit_graph *g = d->g;
    int64_t D = d->kvd / kv_heads, rep = heads / kv_heads;
    d->rows[2 * l] = k_row;
    d->rows[2 * l + 1] = v_row;
    pipit_val K = by_head(d, pipit_add(g, cached(d, 2 * l), k_placed), kv_heads, D);
    pipit_val V = by_head(d, pipit_add(g, cached(d, 2 * l + 1), v_placed), kv_heads, D);
    pipit_val qh = pipit_reshape(g, q, 4, (int64_t[]){d->B, kv_heads, rep, D}); /* head h = g * rep + r */
    pipit_val s = pipit_scale(g, pipit_matmul(g, qh, K, 0, 1), 1.0 / sqrt((double)D)); /* [B,KV,rep,S] */
    pipit_val p = pipit_softmax(g, pipit_add(g, s, d->mask));
    pipit_val o = pipit_matmul(g, p, V, 0, 0); /* [B,KV,rep,D] */
    return pipit_reshape(g, o, 3, (int64_t[]){d->B, 1, (int64_t)heads * D});
}

void pipit__decode_free(pipit__decode *d) {
    pipit__free(d->rows);
    d->rows = NULL;
}

pipit_status pipit__decode_end(pipit__decode *d, pipit_val logits, pipit_decode_graph *out, const char *fn) {
    pipit_graph *g = d->g;
    int n = 2 * d->layers;
    for (int i = 0; i < n; i++) /* [B,1,KVD] -> [1,B,1,KVD], joined along the first axis */
        d->rows[i] = pipit_reshape(g, d->rows[i], 4, (int64_t[]){1, d->B, 1, d->kvd});
    pipit_val kv = pipit_concat(g, n, d->rows, 0);
    pipit_val loss = pipit_mean(g, logits);
    pipit__decode_free(d);
    pipit_status s = pipit_graph_status(g);
    if (s) {
        pipit__err(s, "%s: %s", fn, pipit_graph_errmsg(g));
        return s;
    }
    *out = (pipit_decode_graph){loss, logits, kv, d->cache};
    return PIPIT_STATUS_OK;
}

/* ---- the decoder ---- */

#define DECODER_MAGIC 0x6b76636163686521ull

struct pipit_decoder {
    uint64_t magic;
    pipit_program *p;
    pipit_val logits, kv;
    int64_t L2, B, S, kvd, V; /* L2 = 2 x layers */
    size_t es, les;           /* element sizes: cache / slot / mask, logits */
    int64_t len;              /* positions cached */
    char *cache, *slot, *mask, *rows; /* rows: the step's new keys and values [2L,B,1,KVD] */
    int32_t *tok, *pos;
};

static int bad_decoder(const pipit_decoder *d) { return !d || d->magic != DECODER_MAGIC; }

static size_t dtype_size(pipit_dtype t) { return t == PIPIT_F64 ? 8 : 4; }

/* Element ei of a float buffer of element size es. */
static void put(char *buf, size_t es, int64_t ei, double v) {
    if (es == 8) ((double *)(void *)buf)[ei] = v;
    else ((float *)(void *)buf)[ei] = (float)v;
}

static void empty_cache(pipit_decoder *d) {
    memset(d->cache, 0, (size_t)(d->L2 * d->B * d->S * d->kvd) * d->es);
    memset(d->slot, 0, (size_t)(d->B * d->S) * d->es);
    for (int64_t i = 0; i < d->B * d->S; i++) put(d->mask, d->es, i, -INFINITY);
    d->len = 0;
}

static pipit_status check_graph(const pipit_decode_graph *dg) {
    pipit_val v[4] = {dg->loss, dg->logits, dg->kv, dg->cache};
    for (int i = 0; i < 4; i++)
        if (!v[i].g || v[i].g != v[0].g || v[i].id < 0)
            return pipit__err(PIPIT_STATUS_INVALID,
                              "the decoding graph's loss, logits, kv and cache must be valid values of one graph "
                              "(from pipit_gpt2_build_decode or pipit_llama_build_decode)");
    pipit_val c = dg->cache, kv = dg->kv, lg = dg->logits;
    pipit_dtype dt = pipit_val_dtype(c);
    int shapes_ok = pipit_val_ndim(c) == 4 && pipit_val_ndim(kv) == 4 && pipit_val_ndim(lg) == 3 &&
                    pipit_val_dim(kv, 0) == pipit_val_dim(c, 0) && pipit_val_dim(kv, 1) == pipit_val_dim(c, 1) &&
                    pipit_val_dim(kv, 2) == 1 && pipit_val_dim(kv, 3) == pipit_val_dim(c, 3) &&
                    pipit_val_dim(lg, 0) == pipit_val_dim(c, 1) && pipit_val_dim(lg, 1) == 1 &&
                    pipit_val_dim(c, 0) % 2 == 0;
    if (!shapes_ok)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "the values are not a decoding graph's: cache [2L,B,S,KVD], kv [2L,B,1,KVD], logits [B,1,V]");
    pipit_dtype lt = pipit_val_dtype(lg);
    if ((dt != PIPIT_F32 && dt != PIPIT_F64) || pipit_val_dtype(kv) != dt || (lt != PIPIT_F32 && lt != PIPIT_F64))
        return pipit__err(PIPIT_STATUS_INVALID, "the cache, kv and logits must be f32 or f64 (the cache and kv alike)");
    return PIPIT_STATUS_OK;
}

static pipit_status decoder_new_impl(pipit_program *p, const pipit_decode_graph *dg, pipit_decoder **out) {
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "out is NULL");
    *out = NULL;
    if (!p || !dg) return pipit__err(PIPIT_STATUS_MISUSE, "%s is NULL", p ? "dg" : "program");
    pipit_status s = check_graph(dg);
    if (s) return s;
    pipit_decoder *d = pipit__calloc(1, sizeof *d);
    if (!d) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    d->p = p, d->logits = dg->logits, d->kv = dg->kv;
    d->L2 = pipit_val_dim(dg->cache, 0), d->B = pipit_val_dim(dg->cache, 1), d->S = pipit_val_dim(dg->cache, 2);
    d->kvd = pipit_val_dim(dg->cache, 3), d->V = pipit_val_dim(dg->logits, 2);
    d->es = dtype_size(pipit_val_dtype(dg->cache)), d->les = dtype_size(pipit_val_dtype(dg->logits));
    int64_t ncache, nslot; /* the graph checked every count against PIPIT_MAX_ELEMENTS */
    int ok = pipit__mul_i64(d->L2 * d->B, d->S * d->kvd, &ncache) && pipit__mul_i64(d->B, d->S, &nslot);
    if (ok) {
        d->cache = pipit__malloc((size_t)ncache * d->es);
        d->slot = pipit__malloc((size_t)nslot * d->es);
        d->mask = pipit__malloc((size_t)nslot * d->es);
        d->rows = pipit__malloc((size_t)(d->L2 * d->B * d->kvd) * d->es);
        d->tok = pipit__malloc(sizeof *d->tok * (size_t)d->B);
        d->pos = pipit__malloc(sizeof *d->pos * (size_t)d->B);
    }
    d->magic = DECODER_MAGIC;
    if (!ok || !d->cache || !d->slot || !d->mask || !d->rows || !d->tok || !d->pos) {
        pipit_decoder_free(d);
        return pipit__err(PIPIT_STATUS_NOMEM, "out of memory for a cache of %lld x %lld x %lld x %lld",
                          (long long)pipit_val_dim(dg->cache, 0), (long long)pipit_val_dim(dg->cache, 1),
                          (long long)pipit_val_dim(dg->cache, 2), (long long)pipit_val_dim(dg->cache, 3));
    }
    empty_cache(d);
    *out = d;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_decoder_new(pipit_program *p, const pipit_decode_graph *dg, pipit_decoder **out) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(decoder_new_impl(p, dg, out), gen0, __func__);
}

void pipit_decoder_free(pipit_decoder *d) {
    if (bad_decoder(d)) return;
    d->magic = 0;
    pipit__free(d->cache);
    pipit__free(d->slot);
    pipit__free(d->mask);
    pipit__free(d->rows);
    pipit__free(d->tok);
    pipit__free(d->pos);
    pipit__free(d);
}

/* Points the slot and the mask at position t (t - 1 when undoing). */
static void mark_position(pipit_decoder *d, int64_t t, int on) {
    for (int64_t b = 0; b < d->B; b++) {
        if (t > 0) put(d->slot, d->es, b * d->S + t - 1, on ? 0 : 1);
        put(d->slot, d->es, b * d->S + t, on ? 1 : 0);
        put(d->mask, d->es, b * d->S + t, on ? 0 : -INFINITY);
    }
}

static pipit_status decoder_step_impl(pipit_decoder *d, const int32_t *tokens, void *logits, size_t nbytes) {
    if (bad_decoder(d)) return pipit__err(PIPIT_STATUS_MISUSE, "invalid decoder handle (NULL, freed or garbage)");
    if (!tokens || !logits) return pipit__err(PIPIT_STATUS_MISUSE, "%s is NULL", tokens ? "logits" : "tokens");
    size_t want = (size_t)(d->B * d->V) * d->les;
    if (nbytes != want)
        return pipit__err(PIPIT_STATUS_INVALID, "logits of %lld x %lld need %zu bytes, caller passed %zu",
                          (long long)d->B, (long long)d->V, want, nbytes);
    if (d->len >= d->S)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "the cache is full: its %lld slots (the graph's ctx) hold positions 0..%lld; "
                          "pipit_decoder_reset empties it",
                          (long long)d->S, (long long)d->S - 1);
    for (int64_t b = 0; b < d->B; b++) d->tok[b] = tokens[b], d->pos[b] = (int32_t)d->len;
    size_t ncache = (size_t)(d->L2 * d->B * d->S * d->kvd) * d->es, nslot = (size_t)(d->B * d->S) * d->es;
    pipit_feed feeds[5] = {{PIPIT_DECODE_TOKENS, d->tok, sizeof *d->tok * (size_t)d->B},
                           {PIPIT_DECODE_POSITIONS, d->pos, sizeof *d->pos * (size_t)d->B},
                           {PIPIT_DECODE_CACHE, d->cache, ncache},
                           {PIPIT_DECODE_SLOT, d->slot, nslot},
                           {PIPIT_DECODE_MASK, d->mask, nslot}};
    mark_position(d, d->len, 1);
    size_t nrows = (size_t)(d->L2 * d->B * d->kvd) * d->es;
    pipit_status s = pipit_step_feeds(d->p, feeds, 5, 5, 0, NULL);
    if (!s) s = pipit_program_get_output(d->p, d->logits, 0, logits, nbytes);
    if (!s) s = pipit_program_get_output(d->p, d->kv, 0, d->rows, nrows);
    if (s) {
        mark_position(d, d->len, 0);
        return s;
    }
    size_t row = (size_t)d->kvd * d->es;
    for (int64_t i = 0; i < d->L2 * d->B; i++) /* entry i = (layer part, sequence): its row at slot len */
        memcpy(d->cache + ((size_t)i * (size_t)d->S + (size_t)d->len) * row, d->rows + (size_t)i * row, row);
    d->len++;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_decoder_step(pipit_decoder *d, const int32_t *tokens, void *logits, size_t nbytes) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(decoder_step_impl(d, tokens, logits, nbytes), gen0, __func__);
}

int pipit_decoder_length(const pipit_decoder *d) {
    if (bad_decoder(d)) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid decoder handle (NULL, freed or garbage)", __func__);
        return -1;
    }
    return (int)d->len;
}

int pipit_decoder_capacity(const pipit_decoder *d) {
    if (bad_decoder(d)) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid decoder handle (NULL, freed or garbage)", __func__);
        return -1;
    }
    return (int)d->S;
}

pipit_status pipit_decoder_reset(pipit_decoder *d) {
    if (bad_decoder(d))
        return pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid decoder handle (NULL, freed or garbage)", __func__);
    empty_cache(d);
    return PIPIT_STATUS_OK;
}

/* ---- sampling ---- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) from 53 random bits. */
static double uniform(uint64_t *s) { return (double)(splitmix64(s) >> 11) * 0x1.0p-53; }

typedef struct {
    float logit;
    int32_t id;
} candidate;

/* Largest logit first; ties: the lower id first, so the order is total. */
static int by_logit_desc(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static pipit_status check_sampling(const float *logits, int n, const pipit_sampling *s, int *finite) {
    if (n < 1) return pipit__err(PIPIT_STATUS_INVALID, "n is %d: there must be at least one logit", n);
    if (!isfinite(s->temperature) || s->temperature < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "temperature %g must be a finite number >= 0", s->temperature);
    if (s->top_k < 0) return pipit__err(PIPIT_STATUS_INVALID, "top_k %d must be >= 0 (0: all)", s->top_k);
    if (!(s->top_p >= 0 && s->top_p <= 1))
        return pipit__err(PIPIT_STATUS_INVALID, "top_p %g must be in (0, 1] (or 0: all)", s->top_p);
    *finite = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return pipit__err(PIPIT_STATUS_INVALID, "logit %d is %s: only finite logits and -inf can be sampled", i,
                              isnan(logits[i]) ? "NaN" : "+inf");
        *finite += logits[i] != -INFINITY;
    }
    if (!*finite) return pipit__err(PIPIT_STATUS_INVALID, "all %d logits are -inf: no token can be drawn", n);
    return PIPIT_STATUS_OK;
}

static int32_t argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int32_t v = 1; v < n; v++)
        if (logits[v] > logits[best]) best = v;
    return best;
}

/* The draw among the m candidates (sorted) that top-k and top-p keep. */
static int32_t draw(const candidate *c, int m, const pipit_sampling *s, uint64_t *state, double *prob) {
    int k = s->top_k > 0 && s->top_k < m ? s->top_k : m;
    double mx = c[0].logit, z = 0;
    for (int i = 0; i < k; i++) z += prob[i] = exp(((double)c[i].logit - mx) / s->temperature);
    if (s->top_p > 0 && s->top_p < 1) { /* the shortest prefix holding top_p of the probability */
        double want = s->top_p * z, acc = 0;
        int keep = 0;
        while (keep < k && (keep == 0 || acc < want)) acc += prob[keep++];
        k = keep, z = acc;
    }
    double u = uniform(state) * z, acc = 0;
    for (int i = 0; i < k; i++) {
        acc += prob[i];
        if (u < acc) return c[i].id;
    }
    return c[k - 1].id;
}

static pipit_status sample_impl(const float *logits, int n, const pipit_sampling *s, uint64_t *state,
                                int32_t *token) {
    if (!logits || !s || !state || !token)
        return pipit__err(PIPIT_STATUS_MISUSE, "%s is NULL",
                          !logits ? "logits" : !s ? "sampling options" : !state ? "state" : "token");
    int finite = 0;
    pipit_status st = check_sampling(logits, n, s, &finite);
    if (st) return st;
    if (s->temperature == 0) {
        *token = argmax(logits, n);
        return PIPIT_STATUS_OK;
    }
    candidate *c = pipit__malloc(sizeof *c * (size_t)finite);
    double *prob = pipit__malloc(sizeof *prob * (size_t)finite);
    if (!c || !prob) {
        pipit__free(c);
        pipit__free(prob);
        return pipit__err(PIPIT_STATUS_NOMEM, "out of memory for %d candidates", finite);
    }
    int m = 0;
    for (int32_t v = 0; v < n; v++)
        if (logits[v] != -INFINITY) c[m++] = (candidate){logits[v], v};
    qsort(c, (size_t)m, sizeof *c, by_logit_desc);
    *token = draw(c, m, s, state, prob);
    pipit__free(c);
    pipit__free(prob);
    return PIPIT_STATUS_OK;
}

pipit_status pipit_sample_token(const float *logits, int n, const pipit_sampling *s, uint64_t *state,
                                int32_t *token) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(sample_impl(logits, n, s, state, token), gen0, __func__);
}
