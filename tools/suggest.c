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

/* Other trainers' names for pipit's flags (nanoGPT, llm.c, Hugging Face
 * configs, torchtitan, Megatron), written with '-': an unknown flag or
 * config key that is one of them is pointed to pipit's, when the command
 * has it. */
static const struct {
    const char *from, *to;
} ALIASES[] = {
    {"batch-size", "micro-batch"}, {"batch", "micro-batch"}, {"micro-batch-size", "micro-batch"},
    {"per-device-train-batch-size", "micro-batch"}, {"mbs", "micro-batch"},
    {"gradient-accumulation-steps", "microbatches"}, {"grad-accum-steps", "microbatches"},
    {"grad-accum", "microbatches"}, {"accumulation-steps", "microbatches"},
    {"block-size", "ctx"}, {"seq-len", "ctx"}, {"seq-length", "ctx"}, {"sequence-length", "ctx"},
    {"context-length", "ctx"}, {"n-ctx", "ctx"}, {"max-seq-len", "ctx"},
    {"max-position-embeddings", "max-ctx"}, {"n-positions", "max-ctx"},
    {"n-layer", "layers"}, {"n-layers", "layers"}, {"num-layers", "layers"}, {"num-hidden-layers", "layers"},
    {"depth", "layers"},
    {"n-head", "heads"}, {"n-heads", "heads"}, {"num-heads", "heads"}, {"num-attention-heads", "heads"},
    {"n-embd", "dim"}, {"n-embed", "dim"}, {"hidden-size", "dim"}, {"d-model", "dim"}, {"embed-dim", "dim"},
    {"channels", "dim"},
    {"n-kv-heads", "kv-heads"}, {"num-key-value-heads", "kv-heads"}, {"num-kv-heads", "kv-heads"},
    {"intermediate-size", "ffn-hidden"}, {"ffn-dim", "ffn-hidden"},
    {"vocab-size", "vocab"}, {"padded-vocab-size", "vocab"},
    {"rms-norm-eps", "norm-eps"}, {"rope-base", "rope-theta"}, {"tie-word-embeddings", "tied"},
    {"learning-rate", "lr"}, {"max-lr", "lr"},
    {"max-iters", "steps"}, {"iters", "steps"}, {"max-steps", "steps"}, {"num-iterations", "steps"},
    {"train-iters", "steps"}, {"train-steps", "steps"}, {"total-steps", "steps"},
    {"warmup-iters", "warmup"}, {"warmup-steps", "warmup"}, {"lr-warmup-iters", "warmup"},
    {"lr-decay-iters", "decay-steps"}, {"lr-decay-steps", "decay-steps"},
    {"lr-scheduler", "lr-schedule"}, {"lr-scheduler-type", "lr-schedule"}, {"scheduler", "lr-schedule"},
    {"grad-clip", "clip"}, {"max-grad-norm", "clip"}, {"clip-grad", "clip"}, {"gradient-clipping", "clip"},
    {"adam-beta1", "beta1"}, {"adam-beta2", "beta2"}, {"adam-eps", "eps"}, {"adam-epsilon", "eps"},
    {"wd", "weight-decay"},
    {"out-dir", "save"}, {"output-dir", "save"}, {"checkpoint", "save"},
    {"init-from", "init"}, {"load", "init"}, {"checkpoint-path", "init"}, {"model-path", "init"},
    {"input-bin", "data"}, {"train-data", "data"}, {"dataset", "data"}, {"data-dir", "data"},
    {"input-val-bin", "val-data"}, {"val-bin", "val-data"},
    {"eval-interval", "eval-every"}, {"val-loss-every", "eval-every"}, {"eval-steps", "eval-every"},
    {"eval-iters", "eval-batches"}, {"val-max-steps", "eval-batches"},
    {"log-interval", "log-every"}, {"logging-steps", "log-every"},
    {"save-interval", "save-every"}, {"checkpoint-every", "save-every"}, {"save-steps", "save-every"},
    {"pipeline-parallel", "pp"}, {"pipeline-model-parallel-size", "pp"}, {"pipeline-parallel-degree", "pp"},
    {"tensor-parallel", "tp"}, {"tensor-model-parallel-size", "tp"}, {"tensor-parallel-degree", "tp"},
    {"data-parallel", "dp"}, {"data-parallel-degree", "dp"},
    {"num-microbatches", "microbatches"}, {"n-microbatches", "microbatches"},
    {"virtual-pipeline-model-parallel-size", "virtual"}, {"virtual-stages", "virtual"},
    {"num-threads", "threads"}, {"nthreads", "threads"},
    {"recompute", "remat"}, {"activation-checkpointing", "remat"}, {"gradient-checkpointing", "remat"},
};

/* w lower-cased, '_' as '-', into out[n]; 0 if it does not fit. */
static int normalize(const char *w, char *out, size_t n) {
    size_t i = 0;
    for (; w[i]; i++) {
        if (i + 1 >= n) return 0;
        char c = w[i];
        out[i] = c == '_' ? '-' : (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    out[i] = 0;
    return 1;
}

static const char *find_cand(const char *name, const char *const *cands, int n) {
    for (int i = 0; i < n; i++)
        if (cands[i] && strcmp(cands[i], name) == 0) return cands[i];
    return NULL;
}

/* How many of the '-'-separated parts of a (of 3+ letters, or all of a
 * shorter word) are parts of b. */
static int shared_parts(const char *a, const char *b) {
    int n = 0;
    for (const char *p = a; *p;) {
        size_t k = strcspn(p, "-");
        int found = 0;
        for (const char *q = b; *q && !found;) {
            size_t m = strcspn(q, "-");
            found = m == k && strncmp(p, q, k) == 0;
            q += m;
            if (*q) q++;
        }
        n += found && (k >= 3 || k == strlen(a));
        p += k;
        if (*p) p++;
    }
    return n;
}
static int count_parts(const char *a) {
    int n = 1;
    for (; *a; a++) n += *a == '-';
    return n;
}

/* The candidate sharing the most '-'-separated words of 3+ letters with w
 * ("batch" of "batch-size" in "micro-batch"; "steps" of "max-steps" is
 * the candidate "steps" itself), the fewest other words breaking a tie;
 * NULL when none shares one or the best two tie. */
static const char *by_parts(const char *w, const char *const *cands, int n) {
    const char *pick = NULL;
    int best = 0, extra = 0, tie = 0;
    for (int i = 0; i < n; i++) {
        if (!cands[i]) continue;
        int sh = shared_parts(w, cands[i]), ex = count_parts(cands[i]) - shared_parts(cands[i], w);
        if (sh == 0) continue;
        if (sh > best || (sh == best && ex < extra)) best = sh, extra = ex, pick = cands[i], tie = 0;
        else if (sh == best && ex == extra) tie = 1;
    }
    return tie ? NULL : pick;
}

const char *cli_suggest(const char *word, const char *const *cands, int n) {
    if (!word) return NULL;
    char w[64];
    if (!normalize(word, w, sizeof w)) return NULL;
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (strcmp(w, ALIASES[i].from) == 0) {
            const char *c = find_cand(ALIASES[i].to, cands, n);
            if (c) return c;
        }
    int limit = strlen(w) <= 4 ? 1 : 2, best = limit + 1;
    const char *pick = NULL;
    for (int i = 0; i < n; i++) {
        if (!cands[i]) continue;
        int dist = osa_distance(w, cands[i]);
        if (dist < best) best = dist, pick = cands[i];
    }
    return pick ? pick : by_parts(w, cands, n);
}

const char *cli_did_you_mean(const char *word, const char *const *cands, int n, const char *prefix) {
    static char buf[160];
    const char *s = cli_suggest(word, cands, n);
    if (!s) return "";
    snprintf(buf, sizeof buf, "; did you mean '%s%s'?", prefix ? prefix : "", s);
    return buf;
}
