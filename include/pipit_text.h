/*
 * pipit_text.h — text to tokens and back: a byte-level BPE tokenizer with
 * GPT-2's rules (its pre-tokenisation regex and byte-to-character mapping),
 * loaded from GPT-2's vocab.json + merges.txt or a Hugging Face
 * tokenizer.json (BPE model), or trained on a corpus; it writes
 * tokenizer.json, which the Hugging Face `tokenizers` package loads.
 * Same conventions as pipit.h: every fallible call returns pipit_status and
 * leaves a message naming the function (and the file) in pipit_errmsg();
 * pipit_tokenizer_free accepts NULL.
 *
 * Encoding is exactly the `tokenizers` package's for the same files:
 *   1. added tokens (tokenizer.json "added_tokens", e.g. "<|endoftext|>")
 *      are cut out of the text first, leftmost-longest;
 *   2. each remaining piece (with a space put in front when the file's
 *      ByteLevel pre-tokenizer says add_prefix_space) is split by GPT-2's
 *      pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      (implemented by hand; \p{L} and \p{N} from a table of Unicode 14.0,
 *      \s = White_Space);
 *   3. each part's bytes start as one token each and are merged by the
 *      lowest-ranked pair, leftmost first, until no pair has a merge.
 * Bytes that are not valid UTF-8 count as symbols (neither letter, number
 * nor space) and still round-trip; the Python packages refuse such text.
 * Decoding concatenates the tokens' bytes (added tokens included).
 *
 * Thread safety: a tokenizer is immutable once made; encode, decode and
 * the getters may run on several threads at once.
 */
#ifndef PIPIT_TEXT_H
#define PIPIT_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "pipit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pipit_tokenizer pipit_tokenizer;

/* Loads a Hugging Face tokenizer.json whose model is byte-level BPE
 * ("model": {"type": "BPE"}, a ByteLevel pre-tokenizer or none, no
 * normalizer): vocab, merges (either "a b" strings or ["a", "b"] pairs) and
 * added tokens. IO (cannot read), FORMAT (not JSON, text after the
 * object or a key twice in one object, another model type, a
 * setting this tokenizer does not implement, named; a merge of unknown
 * tokens; a byte without a token), NOMEM, MISUSE (NULL). */
PIPIT_API pipit_status pipit_tokenizer_load(const char *path, pipit_tokenizer **out);
/* Loads GPT-2's pair of files: vocab.json (token -> id) and merges.txt
 * (one "a b" merge per line, by rank; a first line "#version..." is
 * skipped). No added tokens: "<|endoftext|>" in the text is encoded as
 * text, as the `tokenizers` package's ByteLevelBPETokenizer does. Errors as
 * pipit_tokenizer_load. */
PIPIT_API pipit_status pipit_tokenizer_load_gpt2(const char *vocab_json, const char *merges_txt,
                                                 pipit_tokenizer **out);
/* Trains a byte-level BPE of vocab_size tokens (>= 256: the 256 bytes,
 * then one token per merge) on n texts (texts[i] of lens[i] bytes; each is
 * pre-tokenised on its own). The merge taken each time is the most frequent
 * pair, ties to the smallest (left id, right id): the rule of the
 * `tokenizers` package's BpeTrainer, whose result (min_frequency 0, the 256
 * bytes as initial alphabet, no special tokens) it reproduces. Training
 * stops early when no pair is left (pipit_tokenizer_vocab_size says how
 * many tokens there are). INVALID (vocab_size < 256 or > 2^24, n < 0, a
 * NULL text), NOMEM. */
PIPIT_API pipit_status pipit_tokenizer_train(const char *const *texts, const size_t *lens, int n, int vocab_size,
                                             pipit_tokenizer **out);
/* Writes a tokenizer.json (BPE model, ByteLevel pre-tokenizer and decoder)
 * that pipit_tokenizer_load and the `tokenizers` package read back. IO. */
PIPIT_API pipit_status pipit_tokenizer_save(const pipit_tokenizer *t, const char *path);
PIPIT_API void pipit_tokenizer_free(pipit_tokenizer *t);

/* Number of token ids (largest id + 1); 0 and a message for NULL. */
PIPIT_API int pipit_tokenizer_vocab_size(const pipit_tokenizer *t);
/* The bytes of token `id` (not NUL-terminated; *len set), or NULL with a
 * message for an id outside 0 .. vocab_size-1 or an id no token has. */
PIPIT_API const char *pipit_tokenizer_token(const pipit_tokenizer *t, int32_t id, size_t *len);

/* Encodes len bytes of text into ids[0 .. *n-1]. Every token covers at
 * least one byte of the text, so cap >= len suffices, except with a
 * tokenizer that adds a prefix space (each stretch of text between added
 * tokens may then give one token more). If the tokens do not fit, the
 * first cap are written, *n is the count needed and the status INVALID.
 * MISUSE for a NULL tokenizer, n, or text / ids with a non-zero length. */
PIPIT_API pipit_status pipit_tokenizer_encode(const pipit_tokenizer *t, const char *text, size_t len, int32_t *ids,
                                              size_t cap, size_t *n);
/* Decodes n ids into their bytes: *len = the byte count; the bytes are
 * written to out when cap >= *len (followed by a NUL when there is room),
 * so out = NULL, cap = 0 asks for the size. INVALID for an id outside the
 * vocabulary (naming its position) or a cap too small for the bytes. */
PIPIT_API pipit_status pipit_tokenizer_decode(const pipit_tokenizer *t, const int32_t *ids, size_t n, char *out,
                                              size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* PIPIT_TEXT_H */
