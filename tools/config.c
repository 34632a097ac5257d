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

/* Why a file is refused ("" while it is fine): every refusal below frees
 * what it holds first and dies once, so nothing is left allocated (the
 * fuzz target fuzz_config returns from die() and runs again). */
typedef char why_t[256];

static char *read_all(const char *path, size_t *n, why_t why) {
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(why, sizeof(why_t), "--config: cannot open '%s'", path), NULL;
    char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n + 4096 + 1 > cap) {
            cap = (cap ? cap * 2 : 8192);
            if (cap > ((size_t)1 << 24)) {
                snprintf(why, sizeof(why_t), "--config '%s': larger than 16 MiB", path);
                break;
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                snprintf(why, sizeof(why_t), "out of memory");
                break;
            }
            buf = nb;
        }
        size_t k = fread(buf + *n, 1, cap - *n - 1, f);
        *n += k;
        if (k == 0) break;
    }
    if (!why[0] && ferror(f)) snprintf(why, sizeof(why_t), "--config: cannot read '%s'", path);
    fclose(f);
    if (why[0]) {
        free(buf);
        return NULL;
    }
    buf[*n] = 0;
    return buf;
}

static cJSON *parse(const char *path, char *buf, size_t n, why_t why) {
    if (strlen(buf) != n) return snprintf(why, sizeof(why_t), "--config '%s': holds a NUL byte (not JSON text)", path), NULL;
    /* n + 1: the terminating NUL must be inside what cJSON may read, so that
     * "nothing follows the object" can hold */
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, n + 1, &end, 1);
    if (!j)
        snprintf(why, sizeof(why_t), "--config '%s': malformed JSON (or text after the object) near byte %ld", path,
                 end && end >= buf ? (long)(end - buf) : 0L);
    else if (!cJSON_IsObject(j))
        snprintf(why, sizeof(why_t), "--config '%s': expected a JSON object of flag names and values", path);
    /* cJSON keeps both copies of a key and lookups find the first: a second
     * "lr" would be silently ignored */
    for (const cJSON *a = j && !why[0] ? j->child : NULL; a && !why[0]; a = a->next)
        for (const cJSON *b = a->next; b && !why[0]; b = b->next)
            if (strcmp(a->string, b->string) == 0)
                snprintf(why, sizeof(why_t), "--config '%s': key \"%.64s\" appears twice", path, a->string);
    return j;
}

static cJSON *load(const char *path) {
    why_t why = "";
    size_t n = 0;
    char *buf = read_all(path, &n, why);
    cJSON *j = buf ? parse(path, buf, n, why) : NULL;
    free(buf);
    if (why[0]) {
        cJSON_Delete(j);
        die("%s", why);
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

/* Sets flag f from v; "" or why not. */
static void set_flag(flag *f, const cJSON *v, const char *path, why_t why) {
    const char *k = f->name;
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    switch (f->type) {
    case FL_INT:
    case FL_U64:
        if (!cJSON_IsNumber(v) || !isfinite(x) || x != floor(x))
            snprintf(why, sizeof(why_t), "--config '%s': \"%s\" must be an integer", path, k);
        else if (f->type == FL_INT && (x < -2147483647.0 || x > 2147483647.0))
            snprintf(why, sizeof(why_t), "--config '%s': \"%s\" is out of range (%g)", path, k, x);
        else if (f->type == FL_U64 && (x < 0 || x >= 18446744073709551616.0))
            snprintf(why, sizeof(why_t), "--config '%s': \"%s\" must be >= 0, got %g", path, k, x);
        else if (f->type == FL_INT) *(int *)f->ptr = (int)x; /* in range: the conversions are defined */
        else *(uint64_t *)f->ptr = (uint64_t)x;
        break;
    case FL_DBL:
        if (!cJSON_IsNumber(v) || !isfinite(x)) snprintf(why, sizeof(why_t), "--config '%s': \"%s\" must be a number", path, k);
        else *(double *)f->ptr = x;
        break;
    case FL_STR:
        if (!cJSON_IsString(v)) snprintf(why, sizeof(why_t), "--config '%s': \"%s\" must be a string", path, k);
        else *(const char **)f->ptr = keep_string(v->valuestring);
        break;
    case FL_BOOL:
        if (!cJSON_IsBool(v)) snprintf(why, sizeof(why_t), "--config '%s': \"%s\" must be true or false", path, k);
        else *(int *)f->ptr = cJSON_IsTrue(v);
        break;
    }
    if (!why[0]) f->seen = 1;
}

void cli_config_apply(flag_cmd *c, const char *path, const char *const *skip) {
    cJSON *j = load(path);
    const char *names[128];
    int nn = 0;
    why_t why = "";
    for (int i = 0; i < c->n && nn < 128; i++) names[nn++] = c->flags[i].name;
    for (const cJSON *v = j->child; v && !why[0]; v = v->next) {
        if (skipped(v->string, skip)) continue;
        flag *f = NULL;
        for (int i = 0; i < c->n; i++)
            if (strcmp(c->flags[i].name, v->string) == 0) f = &c->flags[i];
        if (!f || strcmp(v->string, "config") == 0)
            snprintf(why, sizeof why, "--config '%s': unknown key \"%.64s\" for pipit %s%s", path, v->string, c->name,
                     cli_did_you_mean(v->string, names, nn, ""));
        else set_flag(f, v, path, why);
    }
    cJSON_Delete(j);
    if (why[0]) die("%s", why);
}

const char *cli_config_string(const char *path, const char *key) {
    cJSON *j = load(path);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    int bad = v && !cJSON_IsString(v);
    const char *out = v && !bad ? keep_string(v->valuestring) : NULL;
    cJSON_Delete(j);
    if (bad) die("--config '%s': \"%s\" must be a string", path, key);
    return out;
}
