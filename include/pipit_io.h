/*
 * pipit_io.h — checkpoints (safetensors files, by tensor name, so any
 * pipeline layout loads any checkpoint and Hugging Face GPT-2 weights load
 * directly), optimizer state for exact resumes, and training data streams.
 * Same conventions as pipit.h: every fallible call returns pipit_status and
 * leaves a message naming the file in pipit_errmsg(); *_free accepts NULL.
 */
#ifndef PIPIT_IO_H
#define PIPIT_IO_H

#include <stdint.h>

#include "pipit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------- checkpoints */

typedef struct pipit_checkpoint pipit_checkpoint;

/* Writes every param (f32, or f64 as declared) to a safetensors file,
 * atomically (tmp file, fsync, rename). meta: NULL-terminated key, value,
 * key, value, ... list stored in "__metadata__", or NULL. In a
 * multi-process (MPI) job this is collective: every process calls it (the
 * params are gathered from their holders) and process 0 writes the file.
 * The same holds for pipit_optimizer_save; loads read the file on every
 * process, each setting the params its ranks hold. */
PIPIT_API pipit_status pipit_checkpoint_save(const pipit_program *p, const char *path,
                                             const char *const *meta);
/* The same with the tensors' dtype: PIPIT_F32 is pipit_checkpoint_save (the
 * params as declared); PIPIT_BF16 writes every param rounded to bfloat16
 * (safetensors "BF16", to nearest even): half the bytes, for inference
 * tools -- the fp32 masters' low bits are gone, so a run that loads it does
 * not continue the saving run exactly (training checkpoints stay fp32).
 * INVALID for another dtype. */
PIPIT_API pipit_status pipit_checkpoint_save_as(const pipit_program *p, const char *path,
                                                const char *const *meta, pipit_dtype dtype);
/* Sets every param from the file, by name: a missing tensor, or one whose
 * dtype or shape differs, is an error naming the file, the tensor and both
 * shapes; everything is validated before the first param is written. A
 * BF16 tensor loads into an f32 param, widened exactly (the masters start
 * from the bf16 values: pipit_checkpoint_tensor_dtype tells a caller to
 * say so). */
PIPIT_API pipit_status pipit_checkpoint_load(pipit_program *p, const char *path);

/* Reads and validates a whole file (IO, FORMAT, NOMEM), checksums
 * included (pipit_checkpoint_verified), to look at its tensors and
 * metadata before (or instead of) loading it. Names carrying
 * the Hugging Face GPT2LMHeadModel prefix "transformer." are seen (listed,
 * looked up, loaded) without it; a name stored both with and without the
 * prefix is FORMAT. Tensors no param asks for (e.g. the attention-mask
 * buffers "h.N.attn.bias") are listed and never loaded. */
PIPIT_API pipit_status pipit_checkpoint_open(const char *path, pipit_checkpoint **out);
PIPIT_API void pipit_checkpoint_free(pipit_checkpoint *ck);
/* The path it was opened from. */
PIPIT_API const char *pipit_checkpoint_path(const pipit_checkpoint *ck);
PIPIT_API int pipit_checkpoint_num_tensors(const pipit_checkpoint *ck);
/* Name of tensor i (file order), NULL if out of range. */
PIPIT_API const char *pipit_checkpoint_tensor_name(const pipit_checkpoint *ck, int i);
/* Shape of a tensor (shape: PIPIT_MAX_DIMS entries); INVALID if absent. */
PIPIT_API pipit_status pipit_checkpoint_tensor_shape(const pipit_checkpoint *ck, const char *name,
                                                     int *ndim, int64_t *shape);
/* The dtype a tensor is stored in (PIPIT_F32, PIPIT_F64, PIPIT_BF16 or
 * PIPIT_I32); INVALID if absent. */
PIPIT_API pipit_status pipit_checkpoint_tensor_dtype(const pipit_checkpoint *ck, const char *name,
                                                     pipit_dtype *out);
/* A "__metadata__" value, NULL if absent. */
PIPIT_API const char *pipit_checkpoint_meta(const pipit_checkpoint *ck, const char *key);
/* A "__metadata__" value that must be a count (a step, a seed, a data
 * position): decimal digits only -- no sign, space, exponent or fraction --
 * and at most max. FORMAT naming the key and the value for anything else
 * ("-1", "1e20", "18446744073709551616"), INVALID when the key is absent. */
PIPIT_API pipit_status pipit_checkpoint_meta_count(const pipit_checkpoint *ck, const char *key, uint64_t max,
                                                   uint64_t *out);
/* Integrity (docs/refuses.md): pipit writes a CRC-32C of every tensor and
 * of the header into the metadata ("crc32c:NAME", "crc32c") and
 * pipit_checkpoint_open verifies them, refusing a file whose bytes changed
 * (FORMAT naming the tensor), as it refuses bytes after the last tensor.
 * 1 if this file's checksums were verified; 0 for a file without any
 * (older pipit, Hugging Face and other writers): loaded unverified. */
PIPIT_API int pipit_checkpoint_verified(const pipit_checkpoint *ck);
/* pipit_checkpoint_load from an opened file. */
PIPIT_API pipit_status pipit_checkpoint_load_into(pipit_program *p, const pipit_checkpoint *ck);

/* Optimizer state beside a checkpoint: "<param>.exp_avg" and
 * "<param>.exp_avg_sq" per param, metadata "opt_steps" (updates taken) and
 * "next_step" (the training step to continue from). Written atomically;
 * loading validates every tensor first (all or nothing). */
PIPIT_API pipit_status pipit_optimizer_save(const pipit_program *p, const char *path, int64_t next_step);
PIPIT_API pipit_status pipit_optimizer_load(pipit_program *p, const char *path, int64_t *next_step);

/* One-file training checkpoints: everything a run needs to continue, so
 * params and optimizer state can never come from different steps. The file
 * holds every param under its own (Hugging Face GPT-2) name, the AdamW
 * moments as "opt.m.<name>" and "opt.v.<name>" (in the param's dtype; zeros under SGD), and
 * "__metadata__" with "pipit": "train", "step" (next_step: the training
 * step to continue from) and "opt_steps" (updates taken), plus the
 * caller's meta (NULL-terminated key, value list, or NULL; those three keys
 * are the function's own and are dropped from meta). The file is a plain
 * checkpoint too: pipit_checkpoint_load reads its params and ignores the
 * rest. Written atomically ("<path>.tmp.<pid>", fsync, rename, fsync of the
 * folder); collective under MPI (process 0 writes). */
PIPIT_API pipit_status pipit_checkpoint_save_train(const pipit_program *p, const char *path, int64_t next_step,
                                                   const char *const *meta);
/* Sets params, moments and the update count from an opened training
 * checkpoint and gives its next step: FORMAT if the file is not one (no
 * "pipit": "train"), or a tensor is missing or of another shape; everything
 * is validated before the first byte is loaded (all or nothing). The
 * program's layout (ranks, stages, schedule, replicas, ZeRO-1) may differ
 * from the saving one's. */
PIPIT_API pipit_status pipit_checkpoint_load_train(pipit_program *p, const pipit_checkpoint *ck,
                                                   int64_t *next_step);

/* ------------------------------------------------------------------ data */

/* A training data stream: a byte-level text file (token = byte, vocab 256)
 * or a uint16 GPT-2 token shard as written by the llm.c / nanoGPT-style
 * scripts (256-int32 header, magic 20240520; any file whose first int32 is
 * the magic, or whose name ends in ".bin"). A sequence is T+1 consecutive
 * tokens: inputs are the first T, targets the last T (shifted by one). */
typedef struct pipit_data pipit_data;

typedef enum { PIPIT_DATA_RANDOM = 0, PIPIT_DATA_SEQUENTIAL = 1 } pipit_data_order;

/* Loads the file's tokens into memory. IO (cannot read), FORMAT (bad shard
 * header, size mismatch, fewer than T+1 tokens), INVALID (T < 1, bad
 * order), MISUSE (NULL). */
PIPIT_API pipit_status pipit_data_open(const char *path, int T, pipit_data_order order, uint64_t seed,
                                       pipit_data **out);
PIPIT_API void pipit_data_free(pipit_data *d);
/* The getters below give 0 (and set pipit_errmsg) for a NULL stream. */
/* Number of tokens n (all files). */
PIPIT_API int64_t pipit_data_tokens(const pipit_data *d);
/* W = floor((n-1)/T) full windows of T+1 tokens (several files: the sum
 * of each file's own). */
PIPIT_API int64_t pipit_data_windows(const pipit_data *d);
/* Largest token id in the file. Tokens are NOT checked against any model:
 * reject max_token >= the model's vocabulary before training. */
PIPIT_API int pipit_data_max_token(const pipit_data *d);
/* Vocabulary the format implies: 256 for text, 50257 (GPT-2) for shards. */
PIPIT_API int pipit_data_vocab_hint(const pipit_data *d);
/* Token offset where sequence k starts:
 *   sequential: window (k mod W), i.e. token (k mod W)*T (negative k wraps);
 *   random:     splitmix64(seed, k) mod (n-T), in [0, n-T-1], depending
 *               only on (seed, k), never on the batch size or call pattern. */
PIPIT_API int64_t pipit_data_offset(const pipit_data *d, int64_t k);
/* Fills inputs[B*T] and targets[B*T] for sequences first .. first+B-1: row
 * b is sequence first+b, and targets[b*T+t] is the token that follows
 * inputs[b*T+t] in the file. B = 0 writes nothing; B < 0 is INVALID. */
PIPIT_API pipit_status pipit_data_batch(const pipit_data *d, int64_t first, int B, int32_t *inputs,
                                        int32_t *targets);

/* File formats. AUTO: a file whose first int32 is the shard magic, or whose
 * name ends in ".bin", is a SHARD (a .bin without the magic is a FORMAT
 * error, never guessed), anything else TEXT. TEXT: bytes are tokens (vocab
 * 256). SHARD: the llm.c header + uint16 tokens described above. U16: a
 * headerless little-endian uint16 token file, nanoGPT's train.bin / val.bin
 * (its size must be even). */
typedef enum {
    PIPIT_DATA_AUTO = 0,
    PIPIT_DATA_TEXT = 1,
    PIPIT_DATA_SHARD = 2,
    PIPIT_DATA_U16 = 3
} pipit_data_format;

/* Several files as one stream, in the order given (all TEXT, or all uint16
 * tokens: SHARD and U16 may mix under AUTO). Each file must hold T+1 tokens
 * or more, and no sequence straddles two files: file i contributes its own
 * W_i = floor((n_i-1)/T) windows and n_i-T random start positions, numbered
 * after those of files 0 .. i-1. Sequence k (sequential order) is window
 * k mod (W_0 + W_1 + ...) of that numbering; random order draws one of the
 * sum of (n_i - T) start positions from (seed, k). One file gives exactly
 * what pipit_data_open gives. Offsets (pipit_data_offset) index the files'
 * tokens laid end to end. Errors as pipit_data_open, each naming the file;
 * FORMAT for text mixed with token files, INVALID for n < 1 or a bad
 * format. */
PIPIT_API pipit_status pipit_data_open_files(const char *const *paths, int n, pipit_data_format format, int T,
                                             pipit_data_order order, uint64_t seed, pipit_data **out);
/* A spec: one existing file (taken as is, whatever its name holds), or a
 * comma-separated list of paths and glob(3) patterns ("a.bin,b.bin",
 * "shards/NAME*.bin"), expanded and sorted by path (strcmp, bytewise) before
 * pipit_data_open_files. IO for a pattern that matches nothing (naming the
 * pattern), INVALID for an empty list item or a file listed twice. */
PIPIT_API pipit_status pipit_data_open_spec(const char *spec, pipit_data_format format, int T,
                                            pipit_data_order order, uint64_t seed, pipit_data **out);
/* Holds out the stream's last val_windows windows (in window order, across
 * files) as a new SEQUENTIAL stream *val; d keeps windows 0 .. W-val_windows-1
 * (its random offsets then never reach into *val's tokens; the one token at
 * the boundary is the last target of d and the first input of *val).
 * INVALID unless 1 <= val_windows < W. */
PIPIT_API pipit_status pipit_data_split(pipit_data *d, int64_t val_windows, pipit_data **val);
/* CRC-32C of the stream's tokens, file after file (the bytes of text; the
 * uint16 tokens of shards in this machine's byte order): the same tokens,
 * the same value, whatever the paths. The processes of an MPI job compare
 * it (pipit_agree) to know they read the same data. 0 and a message for
 * NULL. */
PIPIT_API uint32_t pipit_data_checksum(const pipit_data *d);
/* Number of files of the stream, and file i's path (NULL outside 0 .. n-1). */
PIPIT_API int pipit_data_files(const pipit_data *d);
PIPIT_API const char *pipit_data_file(const pipit_data *d, int i);

#ifdef __cplusplus
}
#endif
#endif /* PIPIT_IO_H */
