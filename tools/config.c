/*
 * config.c — `--config FILE`: a JSON object whose keys are flag names
 * without "--" ({"layers": 6, "lr": 6e-4, "schedule": "1f1b", "remat":
 * true}), read with cJSON. Keys set their flags before the command line is
 * parsed, so flags override the file, which overrides the preset.
 */
#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static cJSON *load(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("--config: cannot open '%s'", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = (cap ? cap * 2 : 8192);
            if (cap > ((size_t)1 << 24)) die("--config '%s': larger than 16 MiB", path);
            char *nb = realloc(buf, cap);
            if (!nb) die("out of memory");
            buf = nb;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) die("--config: cannot read '%s'", path);
    buf[n] = 0;
    const char *end = NULL;
    if (strlen(buf) != n) {
        free(buf);
        die("--config '%s': holds a NUL byte (not JSON text)", path);
    }
    /* n + 1: the terminating NUL must be inside what cJSON may read, so that
     * "nothing follows the object" can hold */
    cJSON *j = cJSON_ParseWithLengthOpts(buf, n + 1, &end, 1);
    if (!j) {
        long at = end && end >= buf ? (long)(end - buf) : 0L;
        free(buf);
        die("--config '%s': malformed JSON (or text after the object) near byte %ld", path, at);
    }
    free(buf);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        die("--config '%s': expected a JSON object of flag names and values", path);
    }
    /* cJSON keeps both copies of a key and lookups find the first: a second
     * "lr" would be silently ignored */
    for (const cJSON *a = j->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (strcmp(a->string, b->string) == 0) {
                char key[128];
                snprintf(key, sizeof key, "%s", a->string);
                cJSON_Delete(j);
                die("--config '%s': key \"%s\" appears twice", path, key);
            }
    return j;
}

static int skipped(const char *key, const char *const *skip) {
    for (; skip && *skip; skip++)
        if (strcmp(key, *skip) == 0) return 1;
    return 0;
}

/* Strings from a config file live as long as the process, like argv's:
 * kept here (and freed at exit) so that nothing is lost track of. */
static char **kept;
static int nkept;

static void free_kept(void) {
    for (int i = 0; i < nkept; i++) free(kept[i]);
    free(kept);
    kept = NULL;
    nkept = 0;
}

static const char *keep_string(const char *v) {
    if (!kept) atexit(free_kept);
    char **more = realloc(kept, sizeof *kept * (size_t)(nkept + 1));
    if (!more) die("out of memory");
    kept = more;
    char *s = strdup(v);
    if (!s) die("out of memory");
    kept[nkept++] = s;
    return s;
}

static void set_flag(flag *f, const cJSON *v, const char *path) {
    const char *k = f->name;
    switch (f->type) {
    case FL_INT:
    case FL_U64: {
        if (!cJSON_IsNumber(v)) die("--config '%s': \"%s\" must be an integer", path, k);
        double x = v->valuedouble;
        if (!isfinite(x) || x != floor(x)) die("--config '%s': \"%s\" must be an integer, got %g", path, k, x);
        if (f->type == FL_INT) {
            if (x < -2147483647.0 || x > 2147483647.0) die("--config '%s': \"%s\" is out of range (%g)", path, k, x);
            *(int *)f->ptr = (int)x;
        } else {
            if (x < 0 || x >= 18446744073709551616.0) die("--config '%s': \"%s\" must be >= 0, got %g", path, k, x);
            *(uint64_t *)f->ptr = (uint64_t)x;
        }
        break;
    }
    case FL_DBL:
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) die("--config '%s': \"%s\" must be a number", path, k);
        *(double *)f->ptr = v->valuedouble;
        break;
    case FL_STR: {
        if (!cJSON_IsString(v)) die("--config '%s': \"%s\" must be a string", path, k);
        *(const char **)f->ptr = keep_string(v->valuestring);
        break;
    }
    case FL_BOOL:
        if (!cJSON_IsBool(v)) die("--config '%s': \"%s\" must be true or false", path, k);
        *(int *)f->ptr = cJSON_IsTrue(v);
        break;
    }
    f->seen = 1;
}

void cli_config_apply(flag_cmd *c, const char *path, const char *const *skip) {
    cJSON *j = load(path);
    const char *names[128];
    int nn = 0;
    for (int i = 0; i < c->n && nn < 128; i++) names[nn++] = c->flags[i].name;
    for (const cJSON *v = j->child; v; v = v->next) {
        if (skipped(v->string, skip)) continue;
        flag *f = NULL;
        for (int i = 0; i < c->n; i++)
            if (strcmp(c->flags[i].name, v->string) == 0) f = &c->flags[i];
        if (!f || strcmp(v->string, "config") == 0)
            die("--config '%s': unknown key \"%s\" for pipit %s%s", path, v->string, c->name,
                cli_did_you_mean(v->string, names, nn, ""));
        set_flag(f, v, path);
    }
    cJSON_Delete(j);
}

const char *cli_config_string(const char *path, const char *key) {
    cJSON *j = load(path);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    const char *out = NULL;
    if (v) {
        if (!cJSON_IsString(v)) die("--config '%s': \"%s\" must be a string", path, key);
        out = keep_string(v->valuestring);
    }
    cJSON_Delete(j);
    return out;
}
