/*
 * hashmap.c — the two hash maps the tokenizer needs: merge pairs
 * (uint64 keys) and token strings (byte strings). Open addressing with
 * linear probing in power-of-two tables kept at most half full; entries
 * are never removed (a tokenizer only grows while it is built).
 */
#include <string.h>

#include "text/text.h"
#include "util/common.h"

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t hash_bytes(const char *s, size_t n) { /* FNV-1a, then mixed */
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001B3ull;
    return mix64(h);
}

/* ------------------------------------------------------------- u64 -> i64 */

static size_t u64_find(const pipit__u64map *m, uint64_t key) {
    size_t mask = m->cap - 1, i = mix64(key) & mask;
    while (m->used[i] && m->keys[i] != key) i = (i + 1) & mask;
    return i;
}

int pipit__u64map_get(const pipit__u64map *m, uint64_t key, int64_t *val) {
    if (!m->cap) return 0;
    size_t i = u64_find(m, key);
    if (!m->used[i]) return 0;
    *val = m->vals[i];
    return 1;
}

static int u64_grow(pipit__u64map *m) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    pipit__u64map g = {pipit__malloc(cap * sizeof *g.keys), pipit__malloc(cap * sizeof *g.vals),
                       pipit__calloc(cap, 1), cap, m->n};
    if (!g.keys || !g.vals || !g.used) {
        pipit__u64map_free(&g);
        return 0;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i]) {
            size_t j = u64_find(&g, m->keys[i]);
            g.used[j] = 1;
            g.keys[j] = m->keys[i];
            g.vals[j] = m->vals[i];
        }
    pipit__u64map_free(m);
    *m = g;
    return 1;
}

int64_t *pipit__u64map_slot(pipit__u64map *m, uint64_t key, int64_t init) {
    if ((m->n + 1) * 2 > m->cap && !u64_grow(m)) return NULL;
    size_t i = u64_find(m, key);
    if (!m->used[i]) {
        m->used[i] = 1;
        m->keys[i] = key;
        m->vals[i] = init;
        m->n++;
    }
    return &m->vals[i];
}

void pipit__u64map_free(pipit__u64map *m) {
    pipit__free(m->keys);
    pipit__free(m->vals);
    pipit__free(m->used);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------- bytes -> i32 */

static size_t str_find(const pipit__strmap *m, const char *key, size_t len) {
    size_t mask = m->cap - 1, i = hash_bytes(key, len) & mask;
    while (m->keys[i] && !(m->lens[i] == len && memcmp(m->keys[i], key, len) == 0)) i = (i + 1) & mask;
    return i;
}

int pipit__strmap_get(const pipit__strmap *m, const char *key, size_t len, int32_t *val) {
    if (!m->cap) return 0;
    size_t i = str_find(m, key, len);
    if (!m->keys[i]) return 0;
    *val = m->vals[i];
    return 1;
}

static int str_grow(pipit__strmap *m) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    pipit__strmap g = {pipit__calloc(cap, sizeof *g.keys), pipit__malloc(cap * sizeof *g.lens),
                       pipit__malloc(cap * sizeof *g.vals), cap, m->n};
    if (!g.keys || !g.lens || !g.vals) {
        pipit__strmap_free(&g);
        return 0;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) {
            size_t j = str_find(&g, m->keys[i], m->lens[i]);
            g.keys[j] = m->keys[i];
            g.lens[j] = m->lens[i];
            g.vals[j] = m->vals[i];
        }
    pipit__strmap_free(m);
    *m = g;
    return 1;
}

int pipit__strmap_put(pipit__strmap *m, const char *key, size_t len, int32_t val) {
    if (len > UINT32_MAX) return 0;
    if ((m->n + 1) * 2 > m->cap && !str_grow(m)) return 0;
    size_t i = str_find(m, key, len);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->lens[i] = (uint32_t)len;
        m->n++;
    }
    m->vals[i] = val;
    return 1;
}

void pipit__strmap_free(pipit__strmap *m) {
    pipit__free(m->keys);
    pipit__free(m->lens);
    pipit__free(m->vals);
    memset(m, 0, sizeof *m);
}
