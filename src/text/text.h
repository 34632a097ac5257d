/*
 * text.h — the tokenizer's insides, shared by the files of src/text/:
 * the tokenizer object, its hash maps, GPT-2's byte <-> character mapping,
 * UTF-8 and the pre-tokenisation split (pretok.c), BPE merging (bpe.c),
 * training (bpe_train.c) and the file formats (tokenizer_io.c).
 */
#ifndef PIPIT_TEXT_INTERNAL_H
#define PIPIT_TEXT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pipit_text.h"

/* ---- hash maps (open addressing, power-of-two tables, never shrink) ---- */

/* uint64 key -> int64 value. */
typedef struct {
    uint64_t *keys;
    int64_t *vals;
    uint8_t *used;
    size_t cap, n;
} pipit__u64map;

/* 1 and *val if key is present. */
int pipit__u64map_get(const pipit__u64map *m, uint64_t key, int64_t *val);
/* The value slot of key, inserted as `init` if absent; NULL on OOM. */
int64_t *pipit__u64map_slot(pipit__u64map *m, uint64_t key, int64_t init);
void pipit__u64map_free(pipit__u64map *m);

/* Byte string (borrowed, must outlive the map) -> int32 value. */
typedef struct {
    const char **keys;
    uint32_t *lens;
    int32_t *vals;
    size_t cap, n;
} pipit__strmap;

int pipit__strmap_get(const pipit__strmap *m, const char *key, size_t len, int32_t *val);
/* Inserts or overwrites; 0 on OOM (or a string of 4 GiB or more). */
int pipit__strmap_put(pipit__strmap *m, const char *key, size_t len, int32_t val);
void pipit__strmap_free(pipit__strmap *m);

/* ---- the tokenizer ---- */

typedef struct {
    char *bytes;    /* the token's raw bytes (content of an added token) */
    uint32_t len;
    int special;    /* tokenizer.json "special" */
    int normalized; /* tokenizer.json "normalized" (which pass cuts it out) */
    int32_t id;
} pipit__added_token;

struct pipit_tokenizer {
    int32_t nvocab, tokcap;  /* ids 0 .. nvocab-1; room for tokcap */
    char **tok;              /* raw bytes of each id (NULL: no token has the id) */
    uint32_t *tok_len;
    pipit__strmap by_bytes;  /* raw bytes -> id */
    int32_t byte_id[256];    /* the token of each single byte */
    int32_t nmerges;         /* merges by rank: (left, right) -> result */
    int32_t (*merges)[3];
    pipit__u64map pair_rank; /* left << 32 | right -> rank */
    int nadded;
    pipit__added_token *added;
    int add_prefix_space;
};

/* An empty tokenizer (no ids yet), or NULL (NOMEM set). */
pipit_tokenizer *pipit__tok_new(void);
/* Sets id's raw bytes (copied); grows the vocabulary to id+1. 0 on OOM.
 * The caller makes sure no id is set twice (the byte map borrows them). */
int pipit__tok_set(pipit_tokenizer *t, int32_t id, const char *bytes, size_t len);
/* Appends merge (left, right) -> result as the next rank (a pair given
 * again takes the new rank): FORMAT for an unknown id; `where` names the
 * file in messages. */
pipit_status pipit__tok_add_merge(pipit_tokenizer *t, int32_t left, int32_t right, int32_t result, const char *where);
/* Fills byte_id from the vocabulary: FORMAT naming a byte no token has. */
pipit_status pipit__tok_finish(pipit_tokenizer *t, const char *where);

/* ---- GPT-2's byte-level mapping and UTF-8 (pretok.c) ---- */

/* The character GPT-2 shows byte b as: printable Latin-1 bytes stand for
 * themselves, the other 68 are U+0100 + their rank among them. */
uint32_t pipit__byte_char(uint8_t b);
/* The byte shown as code point cp, or -1 if cp shows none. */
int pipit__char_byte(uint32_t cp);
/* Decodes one UTF-8 character at s[0 .. n-1] (n >= 1): its length and
 * *cp; an invalid or truncated sequence is one byte with *cp = 0xFFFFFFFF. */
int pipit__utf8_next(const uint8_t *s, size_t n, uint32_t *cp);
/* Writes cp as UTF-8 into out[0..3]; returns the length. */
int pipit__utf8_put(uint32_t cp, char *out);

/* The end (exclusive) of the pre-tokenisation piece that starts at byte i
 * of s[0 .. n-1] (i < n): GPT-2's pattern, see pipit_text.h. */
size_t pipit__pretok_next(const uint8_t *s, size_t n, size_t i);

/* ---- BPE (bpe.c) ---- */

/* What a public function returns: a failure gets a fresh message that
 * starts with (or at least names) the function `fn`. */
pipit_status pipit__text_named(pipit_status s, unsigned long gen0, const char *fn);

/* Merges the symbols ids[0 .. *n-1] in place as the tokenizer's merges
 * say (lowest rank first, leftmost among equals); *n shrinks. Scratch of
 * 3 * n int32 and n heap entries is allocated here: NOMEM. */
pipit_status pipit__bpe_merge(const pipit_tokenizer *t, int32_t *ids, size_t *n);
/* pipit__bpe_merge, adding to *work the steps its queue of candidate pairs
 * took (entries in and out, levels sifted): tests check that the work
 * grows linearly with the piece. */
pipit_status pipit__bpe_merge_work(const pipit_tokenizer *t, int32_t *ids, size_t *n, uint64_t *work);

#endif
