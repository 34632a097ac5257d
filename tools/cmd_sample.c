/*
 * cmd_sample.c — `pipit sample`: generate tokens from a GPT-2 or Llama
 * checkpoint with a forward-only program (pipit_options.forward_only,
 * B = 1) that exposes the logits (the model kind's build with logits +
 * pipit_options.outputs).
 *
 * Each new token runs one forward over a window of T = --ctx tokens (by
 * default the context the checkpoint was trained with, else its positions): the sequence so far, left-aligned at
 * positions 0..n-1 and padded after with token 0 while it is shorter than
 * T, else its last T tokens. Attention is causal, so the padding never
 * reaches row n-1, whose logits give the next token: exactly the model's
 * distribution (no padding effect). Sampling: temperature 0 is argmax
 * (seed-independent); otherwise softmax(logits / temperature) over the
 * --top-k largest logits (0: all), drawn with splitmix64 seeded by --seed,
 * so a seed reproduces the output. Models of at most 256 tokens are
 * byte-level: the prompt's bytes are its tokens and each new token is
 * printed as a byte as soon as it exists. With --tokenizer the prompt is
 * encoded and each new token printed as its bytes (only the tokenizer's
 * ids are drawn); otherwise larger vocabularies print token ids
 * (--prompt-ids gives the prompt as ids).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "train_cli.h"

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) from 53 random bits. */
static double uniform(uint64_t *s) { return (double)(splitmix64(s) >> 11) * 0x1.0p-53; }

static const float *g_row; /* qsort's comparator reads the logits row */
static int by_logit_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (g_row[i] != g_row[j]) return g_row[i] > g_row[j] ? -1 : 1;
    return i - j; /* ties: the lower id first, so the order is total */
}

/* The next token from one logits row. idx and prob are V-sized scratch. */
static int pick(const float *row, int V, double temp, int top_k, uint64_t *rng, int *idx, double *prob) {
    if (temp == 0) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        return best;
    }
    for (int v = 0; v < V; v++) idx[v] = v;
    g_row = row;
    qsort(idx, (size_t)V, sizeof *idx, by_logit_desc);
    int k = top_k > 0 && top_k < V ? top_k : V;
    double mx = row[idx[0]], z = 0;
    for (int i = 0; i < k; i++) z += prob[i] = exp(((double)row[idx[i]] - mx) / temp);
    double u = uniform(rng) * z, acc = 0;
    for (int i = 0; i < k; i++) {
        acc += prob[i];
        if (u < acc) return idx[i];
    }
    return idx[k - 1];
}

/* "1,2,3" -> ids; dies on anything else. */
static int parse_ids(const char *s, int32_t **out) {
    int n = 0, cap = 16;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    if (!ids) die("out of memory");
    while (*s) {
        char *end = NULL;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            die("--prompt-ids: '%s' is not a list of token ids like 1,2,3", s);
        }
        int32_t *more = n == cap ? realloc(ids, sizeof *ids * (size_t)(cap *= 2)) : ids;
        if (!more) {
            free(ids);
            die("out of memory");
        }
        ids = more;
        ids[n++] = (int32_t)v;
        s = end;
        if (*s == ',' && s[1]) s++;
        else if (*s) {
            char c = *s;
            free(ids);
            die("--prompt-ids: unexpected '%c' (token ids are separated by commas)", c);
        }
    }
    *out = ids;
    return n;
}

int cmd_sample(int argc, char **argv) {
    const char *prompt = NULL, *prompt_ids = NULL, *tok_path = NULL, *merges = NULL;
    int tokens = 64, top_k = 0;
    double temp = 1.0;
    uint64_t seed = 0;
    opts o; /* the checkpoint, window, heads and device, as train's options hold them */
    default_opts(&o);
    flag fl[] = {
        {"init", FL_STR, &o.init, "safetensors checkpoint (GPT-2 or Llama, pipit's or a Hugging Face one)", 0},
        {"prompt", FL_STR, &prompt, "prompt text: its bytes are the first tokens (byte-level models)", 0},
        {"prompt-ids", FL_STR, &prompt_ids, "prompt as comma-separated token ids (any vocabulary)", 0},
        {"tokenizer", FL_STR, &tok_path, "encode --prompt and print text with this tokenizer.json, vocab.json "
                                         "(with --merges) or folder of either (`pipit tokenize` writes one)", 0},
        {"merges", FL_STR, &merges, "GPT-2's merges.txt beside --tokenizer vocab.json", 0},
        {"tokens", FL_INT, &tokens, "tokens to generate N (default 64)", 0},
        {"temperature", FL_DBL, &temp, "softmax temperature >= 0 (default 1; 0: argmax)", 0},
        {"top-k", FL_INT, &top_k, "sample among the K most likely tokens (default 0: all)", 0},
        {"seed", FL_U64, &seed, "random seed (default 0): the same seed gives the same text", 0},
        {"ctx", FL_INT, &o.ctx, "window T (default: the checkpoint's training ctx, else its positions)", 0},
        {"heads", FL_INT, &o.heads, "attention heads (default: from the checkpoint's metadata or config.json)", 0},
        {"threads", FL_INT, &o.threads, "compute threads (default 1; cpu only)", 0},
        {"device", FL_STR, &o.device, "cpu (default) or cuda", 0},
        {"tf32", FL_BOOL, &o.tf32, "with --device cuda: GEMMs on TF32 tensor cores", 0},
        {"dtype", FL_STR, &o.dtype, "compute precision: f32 (default) or bf16", 0},
    };
    flag_cmd c = {"sample", "--init FILE --prompt TEXT --tokens N [--temperature X] [--top-k K] [--seed S]",
                  "Generates N tokens after the prompt with a forward-only program and prints them as they are "
                  "produced: text with --tokenizer, bytes for models of at most 256 tokens, else token ids. Each "
                  "token runs one forward "
                  "over the sequence so far (its last T tokens), left-aligned at positions 0..n-1 with padding "
                  "after it, which causal attention never sees.",
                  fl, NFLAGS(fl)};
    flags_parse(&c, argc, argv);
    flags_require(&c, (const char *const[]){"init", NULL});
    if (!prompt && !prompt_ids) die("sample: --prompt TEXT or --prompt-ids LIST is required");
    if (prompt && prompt_ids) die("sample: give --prompt or --prompt-ids, not both");
    if (tokens < 0) die("--tokens must be >= 0 (got %d)", tokens);
    if (!isfinite(temp) || temp < 0) die("--temperature must be a finite number >= 0 (got %g)", temp);
    if (o.threads < 1 || o.threads > PIPIT_MAX_THREADS)
        die("--threads must be in 1..%d (got %d)", PIPIT_MAX_THREADS, o.threads);
    cli_check_device(o.device, o.tf32);
    pipit_dtype dt = cli_dtype(o.dtype, o.device);
    if (merges && !tok_path) die("--merges goes with --tokenizer vocab.json");
    pipit_tokenizer *tk = tok_path ? cli_tokenizer_open(tok_path, merges) : NULL;

    pipit_checkpoint *ck = NULL;
    if (pipit_checkpoint_open(o.init, &ck)) die("--init: %s", pipit_errmsg());
    cli_note_unverified(ck, "init");
    cli_note_bf16(ck, "init");
    int ctx = o.ctx;
    model_from_checkpoint(ck, &o, &c);
    int V = o.vocab;
    if (top_k < 0 || top_k > V) die("--top-k must be in 0..%d (the vocabulary; 0: all), got %d", V, top_k);
    if (!o.max_ctx && !flags_seen(&c, "ctx"))
        die("checkpoint '%s' does not record its longest sequence (max_position_embeddings): pass --ctx", o.init);
    if (flags_seen(&c, "ctx") && (ctx < 1 || (o.max_ctx && ctx > o.max_ctx)))
        die("--ctx must be in 1..%d (the checkpoint's positions), got %d", o.max_ctx, ctx);
    o.ctx = ctx ? ctx : (int)meta_i64(ck, "init", "ctx", 1, o.max_ctx, o.max_ctx);
    o.micro_batch = 1;
    cli_model cfg = model_config(&o, 1);
    int T = cfg.ctx, byte_level = V <= 256 && !tk;
    int drawn = V; /* ids that may be drawn: with a tokenizer, only its own (a model's vocabulary may be padded) */
    if (tk) {
        drawn = pipit_tokenizer_vocab_size(tk);
        if (drawn > V) die("--tokenizer has %d tokens but the model in '%s' only %d", drawn, o.init, V);
        if (top_k > drawn) die("--top-k must be in 0..%d (the tokenizer's vocabulary; 0: all), got %d", drawn, top_k);
    }

    /* the prompt: checked before (or freed before) the process ends on a
     * bad one, so nothing allocated is left behind at exit */
    int32_t *seq = NULL;
    int n = 0;
    if (prompt_ids) {
        n = parse_ids(prompt_ids, &seq);
    } else if (tk) {
        size_t k = 0;
        if (strlen(prompt) > INT32_MAX / 4) die("--prompt is too long");
        seq = cli_encode(tk, "--prompt", prompt, strlen(prompt), &k);
        n = (int)k;
    } else {
        n = (int)strlen(prompt);
        seq = malloc(sizeof *seq * (size_t)(n > 0 ? n : 1));
        if (!seq) die("out of memory");
        for (int i = 0; i < n; i++) seq[i] = (unsigned char)prompt[i];
    }
    char why[160] = "";
    if (n == 0) snprintf(why, sizeof why, "sample: the prompt is empty (give at least one token)");
    else if ((int64_t)n + tokens > INT32_MAX / 2) snprintf(why, sizeof why, "--tokens %d is too many", tokens);
    for (int i = 0; i < n && !why[0]; i++)
        if (seq[i] >= V)
            snprintf(why, sizeof why, "sample: prompt token %d (%s %d) is outside the model's vocabulary of %d tokens",
                     i, prompt_ids ? "id" : tk ? "token" : "byte", seq[i], V);
    if (why[0]) {
        free(seq);
        pipit_checkpoint_free(ck);
        pipit_tokenizer_free(tk);
        die("%s", why);
    }
    if (prompt && !byte_level && !tk && pipit_process_rank() == 0)
        fprintf(stderr, "pipit: note: the model has %d tokens (not byte-level): prompt bytes are used as token ids\n", V);
    int32_t *all = realloc(seq, sizeof *all * (size_t)(n + tokens + 1));
    if (!all) die("out of memory");
    seq = all;
    for (int i = 0; prompt && i < n; i++) seq[i] = (unsigned char)prompt[i];

    pipit_graph *g = pipit_graph_new();
    if (!g) die("out of memory");
    pipit_val logits;
    pipit_val loss = cfg.kind->build(g, &cfg, &logits);
    if (pipit_graph_status(g)) die("model: %s", pipit_errmsg());
    pipit_options po = {.threads = o.threads, .forward_only = 1, .outputs = &logits, .noutputs = 1,
                        .device = o.device, .tf32 = o.tf32, .dtype = dt};
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &po, &p)) die("compile: %s", pipit_errmsg());
    if (pipit_checkpoint_load_into(p, ck)) die("--init: %s", pipit_errmsg());

    int32_t *tok = calloc((size_t)T, sizeof *tok), *tgt = calloc((size_t)T, sizeof *tgt),
            *pos = calloc((size_t)T, sizeof *pos);
    float *lg = malloc(sizeof *lg * (size_t)T * (size_t)V);
    int *idx = malloc(sizeof *idx * (size_t)V);
    double *prob = malloc(sizeof *prob * (size_t)V);
    if (!tok || !tgt || !pos || !lg || !idx || !prob) die("out of memory");
    pipit_feed feeds[CLI_MAX_FEEDS];
    if (cfg.kind->feeds(&cfg, tok, tgt, pos, feeds)) die("feeds: %s", pipit_errmsg());
    uint64_t rng = seed;
    for (int k = 0; k < tokens; k++) {
        int w = n < T ? n : T, first = n - w; /* the window: seq[first .. n-1] at positions 0 .. w-1 */
        for (int i = 0; i < T; i++) tok[i] = i < w ? seq[first + i] : 0;
        if (pipit_step_feeds(p, feeds, cfg.kind->nfeeds, cfg.kind->nfeeds, 0, NULL)) die("sample: %s", pipit_program_errmsg(p));
        if (pipit_program_get_output(p, logits, 0, lg, sizeof *lg * (size_t)T * (size_t)V))
            die("sample: %s", pipit_errmsg());
        int next = pick(lg + (size_t)(w - 1) * (size_t)V, drawn, temp, top_k, &rng, idx, prob);
        seq[n++] = next;
        size_t len = 0;
        const char *bytes = tk ? pipit_tokenizer_token(tk, next, &len) : NULL;
        if (tk && !bytes) die("sample: %s", pipit_errmsg());
        if (tk) fwrite(bytes, 1, len, stdout);
        else if (byte_level) putchar(next);
        else printf("%s%d", k ? " " : "", next);
        fflush(stdout);
    }
    if (!byte_level && !tk && tokens) putchar('\n');
    fflush(stdout);
    free(tok);
    free(tgt);
    free(pos);
    free(lg);
    free(idx);
    free(prob);
    free(seq);
    pipit_program_free(p);
    pipit_graph_free(g);
    pipit_checkpoint_free(ck);
    pipit_tokenizer_free(tk);
    return 0;
}
