/*
 * test_text.c — the byte-level BPE tokenizer (pipit_text.h) against hand
 * computations: GPT-2's byte characters, the pre-tokenisation pattern on
 * cases worked out from the regex, a training run small enough to do by
 * hand, round trips of every byte value and of Unicode text, files
 * written and read back, added tokens, and the errors of bad files and
 * bad calls. The comparison with the Python `tokenizers` package is
 * tests/test_tokenizer.sh.
 */
#include <stdio.h>
#include <string.h>

#include "pipit_text.h"
#include "test.h"
#include "text/text.h"

/* The pieces of s as "|"-separated text. */
static void pieces(const char *s, char *out, size_t cap) {
    size_t n = strlen(s), k = 0;
    for (size_t i = 0; i < n;) {
        size_t end = pipit__pretok_next((const uint8_t *)s, n, i);
        if (k && k + 1 < cap) out[k++] = '|';
        for (size_t j = i; j < end && k + 1 < cap; j++) out[k++] = s[j];
        i = end;
    }
    out[k] = 0;
}

#define ASSERT_PIECES(text, want)                                                          \
    do {                                                                                   \
        char got_[512];                                                                    \
        pieces(text, got_, sizeof got_);                                                   \
        if (strcmp(got_, want) != 0) PIPIT_FAIL_("pieces of \"%s\": \"%s\", want \"%s\"", \
                                                 text, got_, want);                        \
    } while (0)

PIPIT_TEST(text_byte_chars) {
    /* GPT-2's encoder.py bytes_to_unicode, worked out by hand */
    ASSERT_EQ_I64(pipit__byte_char('!'), '!');
    ASSERT_EQ_I64(pipit__byte_char(0), 0x100);
    ASSERT_EQ_I64(pipit__byte_char('\n'), 0x10A); /* "Ċ" */
    ASSERT_EQ_I64(pipit__byte_char(' '), 0x120);  /* "Ġ" */
    ASSERT_EQ_I64(pipit__byte_char(0x7F), 0x121); /* "ġ" */
    ASSERT_EQ_I64(pipit__byte_char(0xA0), 0x142);
    ASSERT_EQ_I64(pipit__byte_char(0xAD), 0x143); /* the soft hyphen, the last one */
    ASSERT_EQ_I64(pipit__byte_char(0xAE), 0xAE);
    for (int b = 0; b < 256; b++) ASSERT_EQ_I64(pipit__char_byte(pipit__byte_char((uint8_t)b)), b);
    ASSERT_EQ_I64(pipit__char_byte(0x144), -1);
    ASSERT_EQ_I64(pipit__char_byte(' '), -1);
}

PIPIT_TEST(text_pretokenize) {
    /* contractions (case-sensitive), an optional space before letters,
     * numbers or other symbols, and white space leaving its last character
     * to what follows */
    ASSERT_PIECES("Hello world", "Hello| world");
    ASSERT_PIECES("it's we'll they're I'M", "it|'s| we|'ll| they|'re| I|'|M");
    ASSERT_PIECES("a  b", "a| | b");
    ASSERT_PIECES("a   \n\nb", "a|   \n|\n|b");
    ASSERT_PIECES("x\n", "x|\n");
    ASSERT_PIECES("x   ", "x|   ");
    ASSERT_PIECES("abc123 456!?  ...", "abc|123| 456|!?| | ...");
    ASSERT_PIECES("!'s", "!'|s");
    ASSERT_PIECES(" 's", " '|s");
    ASSERT_PIECES("\t\tword", "\t|\t|word");
    /* Unicode letters and numbers: é (L), Ω (L), 二 (L), ² (No), ٣ (Nd), no-break space (White_Space) */
    ASSERT_PIECES("caf\xc3\xa9 \xce\xa9\xe4\xba\x8c \xc2\xb2\xd9\xa3", "caf\xc3\xa9| \xce\xa9\xe4\xba\x8c| \xc2\xb2\xd9\xa3");
    ASSERT_PIECES("a\xc2\xa0\xc2\xa0z", "a|\xc2\xa0|\xc2\xa0|z");
    /* U+001C..U+001F are not white space here (Python's isspace says they are) */
    ASSERT_PIECES("a\x1c b", "a|\x1c| b");
    /* invalid UTF-8 bytes are symbols */
    ASSERT_PIECES("ab\xff\xfe cd", "ab|\xff\xfe| cd");
}

/* The worked example: "ab ab ab cd" has the pieces "ab", " ab" (twice) and
 * " cd"; pairs (a,b) 3, (Ġ,a) 2, (Ġ,c) 1, (c,d) 1. Merges in order: ab,
 * Ġab, then the tie between (Ġ,c) = (220,66) and (c,d) = (66,67) goes to
 * the smaller pair, cd, then Ġcd. */
PIPIT_TEST(text_train_by_hand) {
    const char *text = "ab ab ab cd";
    size_t len = strlen(text);
    pipit_tokenizer *t = NULL;
    ASSERT_STATUS(pipit_tokenizer_train(&text, &len, 1, 300, &t), PIPIT_STATUS_OK);
    ASSERT_EQ_I64(pipit_tokenizer_vocab_size(t), 260); /* ran out of pairs */
    const char *want[] = {"ab", " ab", "cd", " cd"};
    for (int i = 0; i < 4; i++) {
        size_t n = 0;
        const char *tok = pipit_tokenizer_token(t, 256 + i, &n);
        ASSERT_TRUE(tok && n == strlen(want[i]) && memcmp(tok, want[i], n) == 0);
    }
    size_t n = 0;
    ASSERT_TRUE(pipit_tokenizer_token(t, 220, &n) && n == 1); /* byte ' ' is id 220, as in GPT-2 */
    ASSERT_EQ_I64(t->nmerges, 4);
    int32_t ids[16];
    ASSERT_STATUS(pipit_tokenizer_encode(t, "ab cd ab", 8, ids, 16, &n), PIPIT_STATUS_OK);
    ASSERT_EQ_I64(n, 3);
    ASSERT_EQ_I64(ids[0], 256);
    ASSERT_EQ_I64(ids[1], 259);
    ASSERT_EQ_I64(ids[2], 257);
    /* a vocabulary of 257: only the first merge */
    pipit_tokenizer *t1 = NULL;
    ASSERT_STATUS(pipit_tokenizer_train(&text, &len, 1, 257, &t1), PIPIT_STATUS_OK);
    ASSERT_EQ_I64(pipit_tokenizer_vocab_size(t1), 257);
    ASSERT_STATUS(pipit_tokenizer_encode(t1, " ab", 3, ids, 16, &n), PIPIT_STATUS_OK);
    ASSERT_EQ_I64(n, 2);
    ASSERT_EQ_I64(ids[0], 220);
    ASSERT_EQ_I64(ids[1], 256);
    pipit_tokenizer_free(t1);
    pipit_tokenizer_free(t);
}

/* Text whose bytes are every value (twice, in two orders) and Unicode. */
static size_t sample_text(char *buf) {
    size_t k = 0;
    for (int b = 0; b < 256; b++) buf[k++] = (char)b;
    for (int b = 255; b >= 0; b--) buf[k++] = (char)b;
    const char *u = " Grüße, 世界! naïve café — 3½ ١٢٣ κόσμε \xf0\x9f\x98\x80 it's   done\n\n";
    memcpy(buf + k, u, strlen(u));
    return k + strlen(u);
}

static void assert_round_trip(const pipit_tokenizer *t, const char *text, size_t len) {
    int32_t ids[4096];
    char back[4096];
    size_t n = 0, blen = 0;
    ASSERT_TRUE(len <= sizeof ids / sizeof ids[0]);
    ASSERT_STATUS(pipit_tokenizer_encode(t, text, len, ids, len, &n), PIPIT_STATUS_OK);
    ASSERT_TRUE(n <= len);
    ASSERT_STATUS(pipit_tokenizer_decode(t, ids, n, NULL, 0, &blen), PIPIT_STATUS_OK);
    ASSERT_EQ_I64(blen, len);
    ASSERT_STATUS(pipit_tokenizer_decode(t, ids, n, back, sizeof back, &blen), PIPIT_STATUS_OK);
    ASSERT_TRUE(blen == len && memcmp(back, text, len) == 0);
}

PIPIT_TEST(text_round_trip) {
    char text[1024];
    size_t len = sample_text(text);
    const char *corpus[2] = {text, "the cat sat on the mat; the dog sat on the cat. Grüße Grüße 世界世界"};
    size_t lens[2] = {len, strlen(corpus[1])};
    pipit_tokenizer *t = NULL;
    ASSERT_STATUS(pipit_tokenizer_train(corpus, lens, 2, 400, &t), PIPIT_STATUS_OK);
    ASSERT_TRUE(pipit_tokenizer_vocab_size(t) > 300);
    assert_round_trip(t, text, len);
    assert_round_trip(t, corpus[1], lens[1]);
    for (int b = 0; b < 256; b++) {
        char one = (char)b;
        assert_round_trip(t, &one, 1);
    }
    /* a long piece (no spaces) goes through the heap path of merging */
    char longw[3000];
    for (int i = 0; i < 3000; i++) longw[i] = "thecat"[i % 6];
    assert_round_trip(t, longw, sizeof longw);
    pipit_tokenizer_free(t);
}

PIPIT_TEST(text_save_load) {
    char text[1024];
    size_t len = sample_text(text);
    const char *corpus = text;
    pipit_tokenizer *t = NULL, *u = NULL;
    ASSERT_STATUS(pipit_tokenizer_train(&corpus, &len, 1, 350, &t), PIPIT_STATUS_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/tok.json", pipit_test_tmpdir());
    ASSERT_STATUS(pipit_tokenizer_save(t, path), PIPIT_STATUS_OK);
    ASSERT_STATUS(pipit_tokenizer_load(path, &u), PIPIT_STATUS_OK);
    ASSERT_EQ_I64(pipit_tokenizer_vocab_size(u), pipit_tokenizer_vocab_size(t));
    int32_t a[1024], b[1024];
    size_t na = 0, nb = 0;
    ASSERT_STATUS(pipit_tokenizer_encode(t, text, len, a, len, &na), PIPIT_STATUS_OK);
    ASSERT_STATUS(pipit_tokenizer_encode(u, text, len, b, len, &nb), PIPIT_STATUS_OK);
    ASSERT_TRUE(na == nb && memcmp(a, b, na * sizeof *a) == 0);
    ASSERT_TRUE(na < len); /* it did merge */
    pipit_tokenizer_free(u);
    pipit_tokenizer_free(t);
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

/* A GPT-2 style vocabulary written by hand: the 256 bytes (ids in
 * byte-character order, as GPT-2's), "Ġt" "he" "Ġthe" and <|endoftext|>;
 * as vocab.json + merges.txt, and as tokenizer.json with <|endoftext|> an
 * added token (and add_prefix_space as asked). */
static void write_gpt2_files(const char *vocab, const char *merges, const char *json, int prefix_space) {
    static char body[16384], js[20000];
    size_t k = 0;
    int id = 0;
    for (uint32_t cp = 0; cp < 0x144; cp++) {
        if (pipit__char_byte(cp) < 0) continue;
        char u[4];
        int n = pipit__utf8_put(cp, u);
        k += (size_t)snprintf(body + k, sizeof body - k, "%s\"%s%.*s\": %d", id ? ", " : "",
                              cp == '"' || cp == '\\' ? "\\" : "", n, u, id);
        id++;
    }
    snprintf(body + k, sizeof body - k, ", \"\xc4\xa0t\": 256, \"he\": 257, \"\xc4\xa0the\": 258, \"<|endoftext|>\": 259");
    snprintf(js, sizeof js, "{%s}", body);
    write_text(vocab, js);
    write_text(merges, "#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\n");
    snprintf(js, sizeof js,
             "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 259, \"content\": \"<|endoftext|>\", "
             "\"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": true, \"special\": true}], "
             "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": %s, "
             "\"trim_offsets\": true, \"use_regex\": true}, \"post_processor\": null, \"decoder\": null, "
             "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"vocab\": {%s}, \"merges\": [[\"\xc4\xa0\", \"t\"], "
             "\"h e\", [\"\xc4\xa0t\", \"he\"]]}}",
             prefix_space ? "true" : "false", body);
    write_text(json, js);
}

static void assert_ids(const pipit_tokenizer *t, const char *text, const int32_t *want, size_t nwant) {
    int32_t ids[64];
    size_t n = 0;
    ASSERT_STATUS(pipit_tokenizer_encode(t, text, strlen(text), ids, 64, &n), PIPIT_STATUS_OK);
    if (n != nwant || memcmp(ids, want, n * sizeof *ids) != 0) {
        fprintf(stderr, "encode(\"%s\"):", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        PIPIT_FAIL_("ids differ from the hand-computed ones");
    }
}

PIPIT_TEST(text_load_gpt2_files) {
    char vocab[1024], merges[1024], json[1024];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", pipit_test_tmpdir());
    snprintf(merges, sizeof merges, "%s/merges.txt", pipit_test_tmpdir());
    snprintf(json, sizeof json, "%s/tokenizer.json", pipit_test_tmpdir());
    enum { T = 't' - 33, H = 'h' - 33, E = 'e' - 33, LT = '<' - 33, BAR = '|' - 33, SP = 220 };
    write_gpt2_files(vocab, merges, json, 0);
    pipit_tokenizer *t = NULL;
    /* vocab.json + merges.txt: no added tokens, "<|" is one symbol piece */
    ASSERT_STATUS(pipit_tokenizer_load_gpt2(vocab, merges, &t), PIPIT_STATUS_OK);
    ASSERT_EQ_I64(pipit_tokenizer_vocab_size(t), 260);
    assert_ids(t, "the the", (int32_t[]){T, 257, 258}, 3);
    assert_ids(t, "the<|", (int32_t[]){T, 257, LT, BAR}, 4);
    pipit_tokenizer_free(t);
    /* tokenizer.json: <|endoftext|> is cut out first */
    ASSERT_STATUS(pipit_tokenizer_load(json, &t), PIPIT_STATUS_OK);
    assert_ids(t, "the<|endoftext|> the", (int32_t[]){T, 257, 259, 258}, 4);
    assert_ids(t, " t h", (int32_t[]){256, SP, H}, 3);
    pipit_tokenizer_free(t);
    /* add_prefix_space: every piece between added tokens gets a space in front */
    write_gpt2_files(vocab, merges, json, 1);
    ASSERT_STATUS(pipit_tokenizer_load(json, &t), PIPIT_STATUS_OK);
    assert_ids(t, "the<|endoftext|>the", (int32_t[]){258, 259, 258}, 3);
    assert_ids(t, " the", (int32_t[]){258}, 1);
    (void)E;
    pipit_tokenizer_free(t);
}

PIPIT_TEST(text_bad_files) {
    char path[1024];
    snprintf(path, sizeof path, "%s/bad.json", pipit_test_tmpdir());
    pipit_tokenizer *t = NULL;
    struct {
        const char *json, *words;
    } cases[] = {
        {"{\"model\": ", "not JSON"},
        {"[1, 2]", "no \"model\""},
        {"{\"model\": {\"type\": \"WordPiece\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "model type \"WordPiece\""},
        {"{\"model\": {\"type\": \"BPE\"}, \"normalizer\": {\"type\": \"NFC\"}}", "normalizer \"NFC\""},
        {"{\"model\": {\"type\": \"BPE\"}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}", "pre_tokenizer \"Metaspace\""},
        {"{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "\"byte_fallback\""},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": "
         "\"ByteLevel\"}}",
         "no token for byte 0x00"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "id 0 is given to two tokens"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}, "
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "merged token is not in the vocabulary"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"ab\"]}, "
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "not two tokens"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a b\": 0}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "not in GPT-2's byte-level characters"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "has no id"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(path, cases[i].json);
        pipit_status s = pipit_tokenizer_load(path, &t);
        if (s != PIPIT_STATUS_FORMAT || !strstr(pipit_errmsg(), cases[i].words) || !strstr(pipit_errmsg(), path) ||
            !strstr(pipit_errmsg(), "pipit_tokenizer_load"))
            PIPIT_FAIL_("case %zu: status %d, message \"%s\" lacks \"%s\"", i, (int)s, pipit_errmsg(), cases[i].words);
        ASSERT_TRUE(t == NULL);
    }
    ASSERT_STATUS(pipit_tokenizer_load("/no/such/tokenizer.json", &t), PIPIT_STATUS_IO);
    ASSERT_STATUS(pipit_tokenizer_train(NULL, NULL, 0, 255, &t), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_errmsg(), "vocab_size 255") != NULL);
}

PIPIT_TEST(text_bad_calls) {
    const char *text = "hello hello";
    size_t len = strlen(text), n = 0;
    pipit_tokenizer *t = NULL;
    ASSERT_STATUS(pipit_tokenizer_train(&text, &len, 1, 300, &t), PIPIT_STATUS_OK);
    int32_t ids[16];
    ASSERT_STATUS(pipit_tokenizer_encode(t, text, len, ids, 1, &n), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_errmsg(), "more than cap = 1") != NULL);
    ASSERT_STATUS(pipit_tokenizer_encode(t, "", 0, NULL, 0, &n), PIPIT_STATUS_OK);
    ASSERT_EQ_I64(n, 0);
    int32_t bad[2] = {5, 100000};
    ASSERT_STATUS(pipit_tokenizer_decode(t, bad, 2, NULL, 0, &n), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_errmsg(), "ids[1] = 100000") != NULL);
    char out[4];
    ASSERT_STATUS(pipit_tokenizer_encode(t, text, len, ids, 16, &n), PIPIT_STATUS_OK);
    size_t blen = 0;
    ASSERT_STATUS(pipit_tokenizer_decode(t, ids, n, out, sizeof out, &blen), PIPIT_STATUS_INVALID);
    ASSERT_EQ_I64(blen, len);
    ASSERT_TRUE(pipit_tokenizer_token(t, -1, &blen) == NULL);
    pipit_tokenizer_free(t);
}
