/*
 * tokenizer_io.c — the tokenizer's files: Hugging Face tokenizer.json
 * (BPE model; the settings this tokenizer does not implement are refused
 * by name rather than ignored), GPT-2's vocab.json + merges.txt, and
 * writing tokenizer.json. Files spell tokens in GPT-2's byte-level
 * characters; in memory a token is its raw bytes.
 */
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "text/text.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

enum { MAX_FILE = 1 << 30 };

/* The whole file, NUL-terminated, in *out (*len bytes). */
static pipit_status read_file(const char *path, char **out, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return pipit__err(PIPIT_STATUS_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE) {
        close(fd);
        return pipit__err(PIPIT_STATUS_IO, "'%s' is not a regular file of at most 1 GiB", path);
    }
    char *buf = pipit__malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
    }
    int rc = pipit__read_full(fd, buf, (size_t)st.st_size, 0);
    int err = errno;
    close(fd);
    if (rc != 0) {
        pipit__free(buf);
        return pipit__err(PIPIT_STATUS_IO, "cannot read '%s': %s", path, strerror(err));
    }
    buf[st.st_size] = 0;
    *out = buf;
    *len = (size_t)st.st_size;
    return PIPIT_STATUS_OK;
}

static pipit_status parse_json(const char *path, cJSON **root) {
    char *buf;
    size_t len;
    pipit_status s = read_file(path, &buf, &len);
    if (s) return s;
    /* nothing may follow the value, and no object may hold a key twice:
     * cJSON would keep the first "model" and ignore the second */
    char what[4200];
    snprintf(what, sizeof what, "'%s'", path);
    s = pipit__json_parse(buf, len, what, root);
    pipit__free(buf);
    return s;
}

/* A token spelled in byte-level characters -> its raw bytes in out (room
 * for len bytes); the byte count, or -1 if a character stands for no byte. */
static long from_byte_chars(const char *s, size_t len, char *out) {
    const uint8_t *u = (const uint8_t *)s;
    long k = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += (size_t)pipit__utf8_next(u + i, len - i, &cp);
        int b = pipit__char_byte(cp);
        if (b < 0) return -1;
        out[k++] = (char)b;
    }
    return k;
}

/* ------------------------------------------------------------ loading */

/* Raw bytes of the vocabulary entry `s` with id `id`: byte-level characters,
 * or, for an added token, its content as written. */
static pipit_status add_vocab_entry(pipit_tokenizer *t, const char *s, int32_t id, const char *path) {
    size_t len = strlen(s);
    char *raw = pipit__malloc(len + 1);
    if (!raw) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
    long k = from_byte_chars(s, len, raw);
    for (int a = 0; k < 0 && a < t->nadded; a++)
        if (t->added[a].id == id && t->added[a].len == len && memcmp(t->added[a].bytes, s, len) == 0) {
            memcpy(raw, s, len);
            k = (long)len;
        }
    pipit_status st = PIPIT_STATUS_OK;
    int32_t other;
    if (k <= 0)
        st = pipit__err(PIPIT_STATUS_FORMAT, "'%s': token \"%.60s\" is %s", path, s,
                        k == 0 ? "empty" : "not in GPT-2's byte-level characters (and not an added token)");
    else if (id < t->nvocab && t->tok[id])
        st = pipit__err(PIPIT_STATUS_FORMAT, "'%s': id %d is given to two tokens (\"%.60s\")", path, id, s);
    else if (pipit__strmap_get(&t->by_bytes, raw, (size_t)k, &other))
        st = pipit__err(PIPIT_STATUS_FORMAT, "'%s': token \"%.60s\" has two ids (%d and %d)", path, s, other, id);
    else if (!pipit__tok_set(t, id, raw, (size_t)k))
        st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
    pipit__free(raw);
    return st;
}

static pipit_status load_vocab(pipit_tokenizer *t, const cJSON *vocab, const char *path) {
    if (!cJSON_IsObject(vocab)) return pipit__err(PIPIT_STATUS_FORMAT, "'%s': the vocabulary is not a JSON object", path);
    for (const cJSON *v = vocab->child; v; v = v->next) {
        double id = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(id >= 0 && id < (1 << 24) && id == (double)(int32_t)id))
            return pipit__err(PIPIT_STATUS_FORMAT, "'%s': token \"%.60s\" has no id in 0 .. 2^24-1", path, v->string);
        pipit_status s = add_vocab_entry(t, v->string, (int32_t)id, path);
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

/* One merge "a b" (or a and b given apart): the ids of a, b and a+b. */
static pipit_status add_merge(pipit_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                              const char *path, long line) {
    char *raw = pipit__malloc(alen + blen + 1);
    if (!raw) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
    long ka = from_byte_chars(a, alen, raw), kb = ka < 0 ? -1 : from_byte_chars(b, blen, raw + ka);
    int32_t ia = -1, ib = -1, ir = -1;
    pipit_status s = PIPIT_STATUS_OK;
    if (ka > 0 && kb > 0 && pipit__strmap_get(&t->by_bytes, raw, (size_t)ka, &ia) &&
        pipit__strmap_get(&t->by_bytes, raw + ka, (size_t)kb, &ib) &&
        pipit__strmap_get(&t->by_bytes, raw, (size_t)(ka + kb), &ir)) {
        char where[64];
        snprintf(where, sizeof where, "merge %ld", line);
        s = pipit__tok_add_merge(t, ia, ib, ir, where);
        if (s) pipit__err_prefix("'%s'", path);
    } else {
        s = pipit__err(PIPIT_STATUS_FORMAT, "'%s': merge %ld (\"%.*s\" + \"%.*s\"): %s", path, line, (int)PIPIT_MIN(alen, 60),
                       a, (int)PIPIT_MIN(blen, 60), b,
                       ia < 0 || ib < 0 ? "a part is not in the vocabulary" : "the merged token is not in the vocabulary");
    }
    pipit__free(raw);
    return s;
}

/* "a b": exactly one space, neither side empty. */
static pipit_status add_merge_line(pipit_tokenizer *t, const char *s, size_t len, const char *path, long line) {
    const char *sp = memchr(s, ' ', len);
    if (!sp || sp == s || sp + 1 == s + len || memchr(sp + 1, ' ', (size_t)(s + len - sp - 1)))
        return pipit__err(PIPIT_STATUS_FORMAT, "'%s': merge %ld is \"%.*s\", not two tokens separated by one space",
                          path, line, (int)PIPIT_MIN(len, 60), s);
    return add_merge(t, s, (size_t)(sp - s), sp + 1, (size_t)(s + len - sp - 1), path, line);
}

static pipit_status load_merges_json(pipit_tokenizer *t, const cJSON *merges, const char *path) {
    if (!cJSON_IsArray(merges)) return pipit__err(PIPIT_STATUS_FORMAT, "'%s': \"merges\" is not a JSON array", path);
    long line = 0;
    for (const cJSON *m = merges->child; m; m = m->next) {
        line++;
        pipit_status s;
        if (cJSON_IsString(m)) {
            s = add_merge_line(t, m->valuestring, strlen(m->valuestring), path, line);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            const char *a = m->child->valuestring, *b = m->child->next->valuestring;
            s = add_merge(t, a, strlen(a), b, strlen(b), path, line);
        } else {
            s = pipit__err(PIPIT_STATUS_FORMAT, "'%s': merge %ld is neither \"a b\" nor [\"a\", \"b\"]", path, line);
        }
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

/* A field that must be absent, null, false or "" (a feature not implemented). */
static pipit_status refuse_set(const cJSON *obj, const char *key, const char *what, const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v) || (cJSON_IsString(v) && !v->valuestring[0])) return PIPIT_STATUS_OK;
    return pipit__err(PIPIT_STATUS_FORMAT, "'%s': %s \"%s\" is set; this byte-level BPE does not implement it", path,
                      what, key);
}

static const char *type_of(const cJSON *obj) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(ty) ? ty->valuestring : "?";
}

/* normalizer none; pre-tokenizer ByteLevel with its regex; post-processor
 * none or ByteLevel (anything else adds tokens); the model's options. */
static pipit_status check_pipeline(pipit_tokenizer *t, const cJSON *root, const cJSON *model, const char *path) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm))
        return pipit__err(PIPIT_STATUS_FORMAT, "'%s': normalizer \"%s\" is not implemented (only none)", path,
                          type_of(norm));
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (!cJSON_IsObject(pre) || strcmp(type_of(pre), "ByteLevel") != 0)
        return pipit__err(PIPIT_STATUS_FORMAT, "'%s': pre_tokenizer \"%s\" is not implemented (only ByteLevel)", path,
                          pre ? type_of(pre) : "none");
    const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
    if (cJSON_IsFalse(regex))
        return pipit__err(PIPIT_STATUS_FORMAT, "'%s': ByteLevel \"use_regex\": false is not implemented", path);
    t->add_prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space"));
    const cJSON *post = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    if (post && !cJSON_IsNull(post) && strcmp(type_of(post), "ByteLevel") != 0)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "'%s': post_processor \"%s\" is not implemented (it adds tokens; only ByteLevel or none)",
                          path, type_of(post));
    if (strcmp(type_of(model), "BPE") != 0)
        return pipit__err(PIPIT_STATUS_FORMAT, "'%s': model type \"%s\" is not implemented (only BPE)", path,
                          type_of(model));
    static const char *const unsupported[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix",
                                              "byte_fallback", "ignore_merges"};
    for (int i = 0; i < 5; i++) {
        pipit_status s = refuse_set(model, unsupported[i], "BPE option", path);
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

static pipit_status load_added(pipit_tokenizer *t, const cJSON *added, const char *path) {
    if (!added || cJSON_IsNull(added)) return PIPIT_STATUS_OK;
    if (!cJSON_IsArray(added)) return pipit__err(PIPIT_STATUS_FORMAT, "'%s': \"added_tokens\" is not an array", path);
    int n = cJSON_GetArraySize(added);
    t->added = pipit__calloc((size_t)(n ? n : 1), sizeof *t->added);
    if (!t->added) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
    for (const cJSON *a = added->child; a; a = a->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id"),
                    *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!cJSON_IsNumber(id) || !(id->valuedouble >= 0 && id->valuedouble < (1 << 24)) ||
            id->valuedouble != (double)(int32_t)id->valuedouble || !cJSON_IsString(content) || !content->valuestring[0])
            return pipit__err(PIPIT_STATUS_FORMAT, "'%s': added token %d lacks an id in 0 .. 2^24-1 or a content", path,
                              t->nadded);
        static const char *const flags[] = {"single_word", "lstrip", "rstrip"};
        for (int f = 0; f < 3; f++) {
            pipit_status s = refuse_set(a, flags[f], "added token option", path);
            if (s) return s;
        }
        pipit__added_token *at = &t->added[t->nadded++];
        at->id = (int32_t)id->valuedouble;
        at->len = (uint32_t)strlen(content->valuestring);
        at->bytes = pipit__strdup(content->valuestring);
        if (!at->bytes) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
        at->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
        at->normalized = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "normalized"));
    }
    return PIPIT_STATUS_OK;
}

/* Added tokens whose ids the model's vocabulary does not have get them. */
static pipit_status place_added(pipit_tokenizer *t, const char *path) {
    for (int a = 0; a < t->nadded; a++) {
        const pipit__added_token *at = &t->added[a];
        if (at->id < t->nvocab && t->tok[at->id]) {
            if (t->tok_len[at->id] != at->len || memcmp(t->tok[at->id], at->bytes, at->len) != 0)
                return pipit__err(PIPIT_STATUS_FORMAT, "'%s': added token \"%.60s\" has id %d, which the vocabulary gives "
                                  "to another token", path, at->bytes, at->id);
            continue;
        }
        int32_t other;
        if (pipit__strmap_get(&t->by_bytes, at->bytes, at->len, &other))
            return pipit__err(PIPIT_STATUS_FORMAT, "'%s': added token \"%.60s\" has two ids (%d and %d)", path,
                              at->bytes, other, at->id);
        if (!pipit__tok_set(t, at->id, at->bytes, at->len))
            return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
    }
    return PIPIT_STATUS_OK;
}

static pipit_status load_json(const char *path, pipit_tokenizer **out) {
    cJSON *root = NULL;
    pipit_status s = parse_json(path, &root);
    if (s) return s;
    pipit_tokenizer *t = pipit__tok_new();
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!t) s = PIPIT_STATUS_NOMEM;
    else if (!cJSON_IsObject(root) || !cJSON_IsObject(model))
        s = pipit__err(PIPIT_STATUS_FORMAT, "'%s': not a tokenizer.json (no \"model\" object)", path);
    if (!s) s = check_pipeline(t, root, model, path);
    if (!s) s = load_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), path);
    if (!s) s = load_vocab(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"), path);
    if (!s) s = place_added(t, path);
    if (!s) s = load_merges_json(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), path);
    if (!s) s = pipit__tok_finish(t, path);
    cJSON_Delete(root);
    if (s) {
        pipit_tokenizer_free(t);
        return s;
    }
    *out = t;
    return PIPIT_STATUS_OK;
}

/* merges.txt: "#version..." lines skipped, then one "a b" per line. */
static pipit_status load_merges_txt(pipit_tokenizer *t, const char *path) {
    char *buf;
    size_t len;
    pipit_status s = read_file(path, &buf, &len);
    if (s) return s;
    long line = 0;
    for (size_t i = 0; !s && i < len;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - buf) : len, n = end - i;
        if (n && buf[i + n - 1] == '\r') n--;
        line++;
        if (!(n >= 8 && memcmp(buf + i, "#version", 8) == 0)) s = add_merge_line(t, buf + i, n, path, line);
        i = end + 1;
    }
    pipit__free(buf);
    return s;
}

static pipit_status load_gpt2(const char *vocab_json, const char *merges_txt, pipit_tokenizer **out) {
    cJSON *root = NULL;
    pipit_status s = parse_json(vocab_json, &root);
    if (s) return s;
    pipit_tokenizer *t = pipit__tok_new();
    if (!t) s = PIPIT_STATUS_NOMEM;
    if (!s) s = load_vocab(t, root, vocab_json);
    cJSON_Delete(root);
    if (!s) s = load_merges_txt(t, merges_txt);
    if (!s) s = pipit__tok_finish(t, vocab_json);
    if (s) {
        pipit_tokenizer_free(t);
        return s;
    }
    *out = t;
    return PIPIT_STATUS_OK;
}

/* ------------------------------------------------------------ writing */

/* The inside of a JSON string: the raw bytes as they are (byte_chars = 0)
 * or spelled in GPT-2's byte-level characters. */
static void put_chars(FILE *f, const char *s, size_t len, int byte_chars) {
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)s[i];
        if (byte_chars && b != '"' && b != '\\') { /* those two show as themselves, escaped below */
            char u[4];
            fwrite(u, 1, (size_t)pipit__utf8_put(pipit__byte_char(b), u), f);
        } else if (b == '"' || b == '\\') {
            fprintf(f, "\\%c", b);
        } else if (b < 0x20) {
            fprintf(f, "\\u%04x", b);
        } else {
            fputc(b, f);
        }
    }
}

static void put_string(FILE *f, const char *s, size_t len, int byte_chars) {
    fputc('"', f);
    put_chars(f, s, len, byte_chars);
    fputc('"', f);
}

static const pipit__added_token *added_of(const pipit_tokenizer *t, int32_t id) {
    for (int a = 0; a < t->nadded; a++)
        if (t->added[a].id == id) return &t->added[a];
    return NULL;
}

static void write_json(const pipit_tokenizer *t, FILE *f) {
    fputs("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [", f);
    for (int a = 0; a < t->nadded; a++) {
        const pipit__added_token *at = &t->added[a];
        fprintf(f, "%s\n    {\"id\": %d, \"content\": ", a ? "," : "", at->id);
        put_string(f, at->bytes, at->len, 0);
        fprintf(f, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": %s, "
                   "\"special\": %s}", at->normalized ? "true" : "false", at->special ? "true" : "false");
    }
    fprintf(f, "%s],\n  \"normalizer\": null,\n", t->nadded ? "\n  " : "");
    fprintf(f, "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": %s, \"trim_offsets\": true, "
               "\"use_regex\": true},\n", t->add_prefix_space ? "true" : "false");
    fputs("  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false, "
          "\"use_regex\": true},\n", f);
    fputs("  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, "
          "\"use_regex\": true},\n", f);
    fputs("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
          "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
          "    \"byte_fallback\": false,\n    \"vocab\": {", f);
    int first = 1;
    for (int32_t id = 0; id < t->nvocab; id++) {
        if (!t->tok[id]) continue;
        const pipit__added_token *at = added_of(t, id);
        fputs(first ? "\n      " : ",\n      ", f);
        first = 0;
        put_string(f, t->tok[id], t->tok_len[id], !at);
        fprintf(f, ": %d", id);
    }
    fputs("\n    },\n    \"merges\": [", f);
    for (int32_t r = 0; r < t->nmerges; r++) {
        fputs(r ? ",\n      \"" : "\n      \"", f);
        for (int side = 0; side < 2; side++) {
            int32_t id = t->merges[r][side];
            put_chars(f, t->tok[id], t->tok_len[id], 1);
            if (!side) fputc(' ', f);
        }
        fputc('"', f);
    }
    fputs("\n    ]\n  }\n}\n", f);
}

static pipit_status save_json(const pipit_tokenizer *t, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return pipit__err(PIPIT_STATUS_IO, "cannot write '%s': %s", path, strerror(errno));
    write_json(t, f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return pipit__err(PIPIT_STATUS_IO, "writing '%s' failed: %s", path, strerror(errno));
    return PIPIT_STATUS_OK;
}

/* ------------------------------------------------------------ public API */

pipit_status pipit_tokenizer_load(const char *path, pipit_tokenizer **out) {
    if (!path || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_tokenizer_load: %s is NULL", path ? "out" : "path");
    *out = NULL;
    unsigned long gen0 = pipit__err_gen();
    return pipit__text_named(load_json(path, out), gen0, __func__);
}

pipit_status pipit_tokenizer_load_gpt2(const char *vocab_json, const char *merges_txt, pipit_tokenizer **out) {
    if (!vocab_json || !merges_txt || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_tokenizer_load_gpt2: %s is NULL",
                          !vocab_json ? "vocab_json" : !merges_txt ? "merges_txt" : "out");
    *out = NULL;
    unsigned long gen0 = pipit__err_gen();
    return pipit__text_named(load_gpt2(vocab_json, merges_txt, out), gen0, __func__);
}

pipit_status pipit_tokenizer_save(const pipit_tokenizer *t, const char *path) {
    if (!t || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_tokenizer_save: %s is NULL", t ? "path" : "tokenizer");
    unsigned long gen0 = pipit__err_gen();
    return pipit__text_named(save_json(t, path), gen0, __func__);
}
