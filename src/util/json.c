/*
 * json.c — cJSON with the checks of json.h: the whole text is one value,
 * and no object holds a key twice.
 */
#include "util/json.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

#include "util/common.h"

static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* A key of object o that two of its members share, or NULL (*nomem on a
 * failed allocation). Small objects pairwise; larger ones sorted. */
static const char *dup_in_object(const cJSON *o, int *nomem) {
    size_t k = 0;
    for (const cJSON *a = o->child; a; a = a->next) k++;
    if (k <= 16) {
        for (const cJSON *a = o->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (strcmp(a->string, b->string) == 0) return a->string;
        return NULL;
    }
    const cJSON **v = pipit__malloc(k * sizeof *v);
    if (!v) {
        *nomem = 1;
        return NULL;
    }
    size_t i = 0;
    for (const cJSON *a = o->child; a; a = a->next) v[i++] = a;
    qsort(v, k, sizeof *v, by_key);
    const char *dup = NULL;
    for (i = 1; i < k && !dup; i++)
        if (strcmp(v[i - 1]->string, v[i]->string) == 0) dup = v[i]->string;
    pipit__free(v);
    return dup;
}

const char *pipit__json_dup_key_path(const cJSON *o, char *buf, size_t n, int *nomem) {
    if (!cJSON_IsObject(o) && !cJSON_IsArray(o)) return NULL;
    if (cJSON_IsObject(o)) {
        const char *d = dup_in_object(o, nomem);
        if (d || *nomem) {
            if (d) snprintf(buf, n, "%s", d);
            return d ? buf : NULL;
        }
    }
    int idx = 0;
    for (const cJSON *a = o->child; a; a = a->next, idx++) {
        char inner[256];
        if (!pipit__json_dup_key_path(a, inner, sizeof inner, nomem)) {
            if (*nomem) return NULL;
            continue;
        }
        if (cJSON_IsObject(o)) snprintf(buf, n, "%s%s%s", a->string, inner[0] == '[' ? "" : ".", inner);
        else snprintf(buf, n, "[%d]%s%s", idx, inner[0] == '[' ? "" : ".", inner);
        return buf;
    }
    return NULL;
}

pipit_status pipit__json_parse(const char *text, size_t len, const char *what, cJSON **out) {
    *out = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        long at = end && end >= text && end <= text + len ? (long)(end - text) : -1;
        return pipit__err(PIPIT_STATUS_FORMAT, "%s: not JSON (error near byte %ld)", what, at);
    }
    for (const char *p = end; p && p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return pipit__err(PIPIT_STATUS_FORMAT, "%s: text follows the JSON value (at byte %ld of %zu)", what,
                              (long)(p - text), len);
        }
    char dup[256];
    int nomem = 0;
    const char *d = pipit__json_dup_key_path(root, dup, sizeof dup, &nomem);
    if (d || nomem) {
        cJSON_Delete(root);
        if (nomem) return pipit__err(PIPIT_STATUS_NOMEM, "%s: out of memory", what);
        return pipit__err(PIPIT_STATUS_FORMAT, "%s: key \"%s\" appears twice in one object (which one was meant?)",
                          what, d);
    }
    *out = root;
    return PIPIT_STATUS_OK;
}
