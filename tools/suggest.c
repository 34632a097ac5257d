/*
 * suggest.c — "did you mean" for unknown commands, flags, schedules,
 * presets and config keys (see cli.h).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Optimal string alignment distance (Damerau-Levenshtein without
 * repeated edits of a substring); words are short (flag names). */
static int osa_distance(const char *a, const char *b) {
    enum { MAXW = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= MAXW || m >= MAXW) return MAXW;
    int d[MAXW + 1][MAXW + 1];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

const char *cli_suggest(const char *word, const char *const *cands, int n) {
    if (!word) return NULL;
    int limit = strlen(word) <= 4 ? 1 : 2, best = limit + 1;
    const char *pick = NULL;
    for (int i = 0; i < n; i++) {
        if (!cands[i]) continue;
        int dist = osa_distance(word, cands[i]);
        if (dist < best) best = dist, pick = cands[i];
    }
    return pick;
}

const char *cli_did_you_mean(const char *word, const char *const *cands, int n, const char *prefix) {
    static char buf[160];
    const char *s = cli_suggest(word, cands, n);
    if (!s) return "";
    snprintf(buf, sizeof buf, "; did you mean '%s%s'?", prefix ? prefix : "", s);
    return buf;
}
