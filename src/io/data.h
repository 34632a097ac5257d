/*
 * data.h — training data streams: byte-level text files (token = byte,
 * vocab 256) and uint16 GPT-2 token shards as written by the llm.c /
 * nanoGPT-style preparation scripts (256-int32 header, magic 20240520).
 * A sequence is T+1 consecutive tokens: inputs are the first T, targets the
 * last T (shifted by one). Order is sequential (windows) or seeded random.
 */
#ifndef PIPIT_TRAIN_DATA_H
#define PIPIT_TRAIN_DATA_H

#include <stdint.h>

#include "pipit_io.h"

#define PIPIT_DATA_SHARD_MAGIC 20240520
#define PIPIT_DATA_SHARD_HEADER_INTS 256

/* The public pipit_data (pipit_io.h) is this reader; pipit_data_* wrap
 * these functions with argument checks. */
typedef struct pipit_data pipit__data;
typedef pipit_data_order pipit__data_order;

/* Opens a data file and loads its tokens into memory.
 * Format: a file whose first int32 is the shard magic, or any file whose name
 * ends in ".bin", is a token shard (header[0] = 20240520, header[1] = 1
 * (version), header[2] = token count, then uint16 tokens; its size must be
 * exactly 1024 + 2*count). Anything else is byte-level text.
 * Errors: PIPIT_STATUS_IO (cannot read), PIPIT_STATUS_FORMAT (bad shard
 * header, size mismatch naming expected vs actual bytes, fewer than T+1
 * tokens naming the file, its length and T), PIPIT_STATUS_INVALID (T < 1). */
pipit_status pipit__data_open(const char *path, int T, pipit__data_order order, uint64_t seed,
                              pipit__data **out);
/* W = floor((n-1)/T) full windows of T+1 tokens (n = token count). */
int64_t pipit__data_windows(const pipit__data *d);
/* Number of tokens n. */
int64_t pipit__data_tokens(const pipit__data *d);
/* Vocabulary the format implies: 256 for text, 50257 (GPT-2) for shards. */
int pipit__data_vocab_hint(const pipit__data *d);
/* Largest token id in the file. Tokens are NOT checked against any model:
 * the caller must reject max_token >= the model's vocab size before
 * training (a shard can hold ids up to 65535; an out-of-range id would index
 * past the embedding table). */
int pipit__data_max_token(const pipit__data *d);

/* Fills inputs[B*T] and targets[B*T] for sequences first..first+B-1 of the
 * stream: row b is sequence first+b, and targets[b*T+t] is the token that
 * follows inputs[b*T+t] in the file.
 *   sequential: sequence k uses window (k mod W), starting at token
 *               (k mod W)*T (negative k wraps too).
 *   random:     sequence k starts at token offset splitmix64(seed, k) mod
 *               (n-T), i.e. in [0, n-T-1], not necessarily window-aligned;
 *               it depends only on (seed, k), never on B or the call pattern.
 * B <= 0 writes nothing. */
void pipit__data_batch(const pipit__data *d, int64_t first, int B, int32_t *inputs,
                       int32_t *targets);
/* Token offset where sequence k starts (the rule above). */
int64_t pipit__data_offset(const pipit__data *d, int64_t k);
/* Accepts NULL. */
void pipit__data_free(pipit__data *d);

/* Several files as one stream (pipit_data_open_files in pipit_io.h): the
 * files in the order given, all text or all uint16 tokens. */
pipit_status pipit__data_open_files(const char *const *paths, int npaths, pipit_data_format fmt,
                                    int T, pipit__data_order order, uint64_t seed,
                                    pipit__data **out);
/* A file list "a.bin,b.bin" and/or glob patterns "shards/NAME*.bin" (or one
 * existing file, taken as is) expanded, sorted by path (strcmp) and opened. */
pipit_status pipit__data_open_spec(const char *spec, pipit_data_format fmt, int T,
                                   pipit__data_order order, uint64_t seed, pipit__data **out);
/* The expansion alone: *paths_out (pipit__malloc'ed, each pipit__strdup'ed)
 * holds *n_out >= 1 sorted distinct paths. IO names a pattern without
 * matches; INVALID an empty name or a file listed twice. */
pipit_status pipit__data_expand(const char *spec, char ***paths_out, int *n_out);
/* Moves the last val_windows windows into a new sequential stream *val and
 * keeps the windows before them in d (1 <= val_windows < W). */
pipit_status pipit__data_split(pipit__data *d, int64_t val_windows, pipit__data **val);
int pipit__data_files(const pipit__data *d);
const char *pipit__data_file(const pipit__data *d, int i);
const char *pipit__data_format_name(pipit_data_format f);

#endif
