/*
 * text_files.c — what `pipit tokenize` and `pipit sample` share around
 * text: reading whole files, expanding a --data list of files and glob
 * patterns in the order given, and opening a tokenizer from
 * --tokenizer FILE|DIR [--merges FILE].
 */
#include <cJSON.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

char *cli_read_file(const char *flagname, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("--%s: cannot open '%s': %s", flagname, path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) die("out of memory");
    for (;;) {
        if (n == cap) {
            if (cap > SIZE_MAX / 2) die("--%s: '%s' is too large", flagname, path);
            char *more = realloc(buf, cap *= 2);
            if (!more) die("out of memory reading '%s'", path);
            buf = more;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) die("--%s: cannot read '%s'", flagname, path);
    *len = n;
    return buf;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Appends one path to the list (a copy). */
static void push_path(cli_paths *p, const char *path) {
    if (p->n % 16 == 0) {
        char **more = realloc(p->path, sizeof *more * (size_t)(p->n + 16));
        if (!more) die("out of memory");
        p->path = more;
    }
    if (!(p->path[p->n++] = strdup(path))) die("out of memory");
}

void cli_paths_expand(cli_paths *p, const char *flagname, const char *spec) {
    memset(p, 0, sizeof *p);
    if (is_file(spec)) { /* an existing file is that file, commas and all */
        push_path(p, spec);
        return;
    }
    char *copy = strdup(spec);
    if (!copy) die("out of memory");
    for (char *item = copy, *next; item; item = next) {
        next = strchr(item, ',');
        if (next) *next++ = 0;
        if (!*item) die("--%s '%s': an empty item in the list", flagname, spec);
        glob_t g;
        int rc = glob(item, 0, NULL, &g);
        if (rc == GLOB_NOMATCH) die("--%s: no file matches '%s'", flagname, item);
        if (rc) die("--%s: cannot expand '%s'", flagname, item);
        for (size_t i = 0; i < g.gl_pathc; i++) push_path(p, g.gl_pathv[i]); /* sorted by glob */
        globfree(&g);
    }
    free(copy);
}

void cli_paths_free(cli_paths *p) {
    for (int i = 0; i < p->n; i++) free(p->path[i]);
    free(p->path);
    memset(p, 0, sizeof *p);
}

/* A JSON object of numbers without "model": GPT-2's vocab.json, which
 * needs its merges.txt (a tokenizer.json holds both). */
static int looks_like_vocab(const char *path) {
    if (!is_file(path)) return 0;
    size_t n = 0;
    char *text = cli_read_file("tokenizer", path, &n);
    cJSON *j = cJSON_ParseWithLength(text, n);
    int yes = cJSON_IsObject(j) && j->child && cJSON_IsNumber(j->child) &&
              !cJSON_GetObjectItemCaseSensitive(j, "model");
    cJSON_Delete(j);
    free(text);
    return yes;
}

pipit_tokenizer *cli_tokenizer_open(const char *path, const char *merges) {
    pipit_tokenizer *t = NULL;
    struct stat st;
    char a[4096], b[4096];
    if (!merges && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { /* a folder: tokenizer.json, else GPT-2's pair */
        snprintf(a, sizeof a, "%s/tokenizer.json", path);
        if (!is_file(a)) {
            snprintf(a, sizeof a, "%s/vocab.json", path);
            snprintf(b, sizeof b, "%s/merges.txt", path);
            if (!is_file(a) || !is_file(b))
                die("--tokenizer '%s': the folder has neither tokenizer.json nor vocab.json + merges.txt", path);
            merges = b;
        }
        path = a;
    }
    pipit_status s = merges ? pipit_tokenizer_load_gpt2(path, merges, &t) : pipit_tokenizer_load(path, &t);
    if (s && !merges && looks_like_vocab(path))
        die("--tokenizer '%s' is GPT-2's vocab.json (token -> id): give its merges.txt with --merges FILE", path);
    if (s) die("--tokenizer: %s", pipit_errmsg());
    return t;
}

int32_t *cli_encode(const pipit_tokenizer *t, const char *what, const char *text, size_t len, size_t *n) {
    size_t room = len + 1;
    int32_t *ids = malloc(sizeof *ids * room);
    if (!ids) die("out of memory encoding %s", what);
    pipit_status s = pipit_tokenizer_encode(t, text, len, ids, room, n);
    if (s == PIPIT_STATUS_INVALID && *n > room) { /* a prefix space per stretch of text: room for what it needs */
        free(ids);
        if (!(ids = malloc(sizeof *ids * (room = *n)))) die("out of memory encoding %s", what);
        s = pipit_tokenizer_encode(t, text, len, ids, room, n);
    }
    if (s) die("encoding %s: %s", what, pipit_errmsg());
    return ids;
}
