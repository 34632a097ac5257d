/*
 * cmd_sample.c — `pipit sample`: generate tokens from a GPT-2 or Llama
 * checkpoint, B = 1, with forward-only programs of the public API.
 *
 * The next token's logits come from one of two programs, the same
 * distribution (tests/test_decode.c, test_cli_sample.sh):
 *   - the KV cache (default): the model's decoding graph
 *     (pipit_gpt2_build_decode / pipit_llama_build_decode, pipit_decoder)
 *     runs one new position per step over the cached keys and values of
 *     the positions before it, while the sequence fits the window T =
 *     --ctx (by default the context the checkpoint was trained with, else
 *     its positions); the prompt goes in one token per step first;
 *   - the window (--no-kv-cache, and once the sequence is longer than T):
 *     each token runs the training graph's forward over T positions, the
 *     sequence so far left-aligned at 0..n-1 and padded after it with
 *     token 0 (causal attention never lets the padding reach row n-1), or
 *     its last T tokens once it is longer.
 * The draw is pipit_sample_token's (temperature 0: argmax; else --top-k,
 * then --top-p, from a splitmix64 stream seeded by --seed: a seed
 * reproduces the text) over the ids that can be printed: with --tokenizer
 * only the tokenizer's (ids it has no token for, and a model vocabulary
 * padded past it, are never drawn). Output: the prompt (unless --no-echo),
 * then each new token as soon as it exists: text with --tokenizer, bytes
 * for byte-level models (at most 256 tokens: the prompt's bytes are its
 * tokens), else token ids.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "pipit_decode.h"
#include "train_cli.h"

/* The command line. */
typedef struct {
    const char *prompt, *prompt_ids, *tokenizer, *merges;
    int tokens, top_k, no_echo, no_kv_cache;
    double temperature, top_p;
    uint64_t seed;
    opts o; /* the checkpoint, window, heads and device, as train's options hold them */
    flag fl[20];
    flag_cmd c;
} sample_args;

/* What generating needs, and the sequence so far. */
typedef struct {
    pipit_checkpoint *ck;
    pipit_tokenizer *tk;
    cli_model cfg;
    pipit_options po; /* threads, device, tf32, dtype of both programs */
    int V, T, byte_level;
    int32_t *seq;     /* the prompt, then the new tokens (room for all) */
    int n, printed;   /* tokens in seq; tokens printed (ids are separated) */
    float *blocked;   /* [V]: 0 for an id that may be drawn, -inf for one that may not */
    float *row;       /* [V]: the logits plus blocked */
    pipit_sampling how;
    uint64_t rng;
} sampler;

/* ---- the command line ---- */

static void check_args(const sample_args *a) {
    if (!a->prompt && !a->prompt_ids) die("sample: --prompt TEXT or --prompt-ids LIST is required");
    if (a->prompt && a->prompt_ids) die("sample: give --prompt or --prompt-ids, not both");
    if (a->tokens < 0) die("--tokens must be >= 0 (got %d)", a->tokens);
    if (!isfinite(a->temperature) || a->temperature < 0)
        die("--temperature must be a finite number >= 0 (got %g)", a->temperature);
    if (!(a->top_p > 0 && a->top_p <= 1))
        die("--top-p must be in (0, 1] (got %g): the share of the probability the candidates keep", a->top_p);
    if (a->o.threads < 1 || a->o.threads > PIPIT_MAX_THREADS)
        die("--threads must be in 1..%d (got %d)", PIPIT_MAX_THREADS, a->o.threads);
    if (a->merges && !a->tokenizer) die("--merges goes with --tokenizer vocab.json");
}

static void parse_args(sample_args *a, int argc, char **argv) {
    flag table[] = {
        {"init", FL_STR, &a->o.init, "safetensors checkpoint (GPT-2 or Llama, pipit's or a Hugging Face one)", 0},
        {"prompt", FL_STR, &a->prompt, "prompt text (encoded with --tokenizer; else its bytes are its tokens)", 0},
        {"prompt-ids", FL_STR, &a->prompt_ids, "prompt as comma-separated token ids (any vocabulary)", 0},
        {"tokenizer", FL_STR, &a->tokenizer, "encode --prompt and print text with this tokenizer.json, vocab.json "
                                             "(with --merges) or folder of either (`pipit tokenize` writes one)", 0},
        {"merges", FL_STR, &a->merges, "GPT-2's merges.txt beside --tokenizer vocab.json", 0},
        {"tokens", FL_INT, &a->tokens, "tokens to generate N (default 64)", 0},
        {"temperature", FL_DBL, &a->temperature, "softmax temperature >= 0 (default 1; 0: argmax)", 0},
        {"top-k", FL_INT, &a->top_k, "sample among the K most likely tokens (default 0: all)", 0},
        {"top-p", FL_DBL, &a->top_p, "nucleus sampling: among the most likely tokens holding P of the "
                                     "probability, 0 < P <= 1 (default 1: all)", 0},
        {"seed", FL_U64, &a->seed, "random seed (default 0): the same seed gives the same text", 0},
        {"no-echo", FL_BOOL, &a->no_echo, "print only the new tokens, not the prompt before them", 0},
        {"no-kv-cache", FL_BOOL, &a->no_kv_cache, "run every token over the whole window (no KV cache): "
                                                  "the same tokens, slower", 0},
        {"ctx", FL_INT, &a->o.ctx, "window T (default: the checkpoint's training ctx, else its positions)", 0},
        {"heads", FL_INT, &a->o.heads, "attention heads (default: from the checkpoint's metadata or config.json)", 0},
        {"threads", FL_INT, &a->o.threads, "compute threads (default 1; cpu only)", 0},
        {"device", FL_STR, &a->o.device, "cpu (default) or cuda", 0},
        {"tf32", FL_BOOL, &a->o.tf32, "with --device cuda: GEMMs on TF32 tensor cores", 0},
        {"dtype", FL_STR, &a->o.dtype, "compute precision: f32 (default) or bf16", 0},
    };
    _Static_assert(sizeof table <= sizeof a->fl, "sample_args.fl holds the flags");
    memcpy(a->fl, table, sizeof table);
    a->c = (flag_cmd){"sample", "--init FILE --prompt TEXT --tokens N [--temperature X] [--top-k K] [--top-p P] [--seed S]",
                    "Prints the prompt and N tokens generated after it, each as soon as it is produced: text with "
                    "--tokenizer, bytes for models of at most 256 tokens, else token ids. Each token is one step of "
                    "a KV cache (the keys and values of the tokens before it are kept) while the sequence fits the "
                    "window T; past T, or with --no-kv-cache, one forward over its last T tokens, left-aligned at "
                    "positions 0..n-1 with padding after it, which causal attention never sees.",
                    a->fl, NFLAGS(table)};
    flags_parse(&a->c, argc, argv);
    flags_require(&a->c, (const char *const[]){"init", NULL});
    check_args(a);
}

/* ---- the model, the tokenizer, the prompt ---- */

static void open_checkpoint(sampler *s, sample_args *a) {
    opts *o = &a->o;
    const flag_cmd *c = &a->c;
    cli_check_device(o->device, o->tf32);
    s->po = (pipit_options){.threads = o->threads, .forward_only = 1, .device = o->device, .tf32 = o->tf32,
                            .dtype = cli_dtype(o->dtype, o->device)};
    if (pipit_checkpoint_open(o->init, &s->ck)) die("--init: %s", pipit_errmsg());
    cli_note_unverified(s->ck, "init");
    cli_note_bf16(s->ck, "init");
    int ctx = o->ctx;
    model_from_checkpoint(s->ck, o, c);
    s->V = o->vocab;
    if (a->top_k < 0 || a->top_k > s->V)
        die("--top-k must be in 0..%d (the vocabulary; 0: all), got %d", s->V, a->top_k);
    if (!o->max_ctx && !flags_seen(c, "ctx"))
        die("checkpoint '%s' does not record its longest sequence (max_position_embeddings): pass --ctx", o->init);
    if (flags_seen(c, "ctx") && (ctx < 1 || (o->max_ctx && ctx > o->max_ctx)))
        die("--ctx must be in 1..%d (the checkpoint's positions), got %d", o->max_ctx, ctx);
    o->ctx = ctx ? ctx : (int)meta_i64(s->ck, "init", "ctx", 1, o->max_ctx, o->max_ctx);
    o->micro_batch = 1;
    s->cfg = model_config(o, 1);
    s->T = s->cfg.ctx;
}

/* With a tokenizer only its ids that have a text may be drawn (a model's
 * vocabulary may be padded past it, and a tokenizer.json may leave ids
 * out); without one every id. */
static void open_tokenizer(sampler *s, const sample_args *a) {
    s->blocked = malloc(sizeof *s->blocked * (size_t)s->V);
    s->row = malloc(sizeof *s->row * (size_t)s->V);
    if (!s->blocked || !s->row) die("out of memory");
    s->tk = a->tokenizer ? cli_tokenizer_open(a->tokenizer, a->merges) : NULL;
    s->byte_level = s->V <= 256 && !s->tk;
    int has = s->tk ? pipit_tokenizer_vocab_size(s->tk) : s->V, drawable = 0;
    if (has > s->V) die("--tokenizer has %d tokens but the model in '%s' only %d", has, a->o.init, s->V);
    for (int v = 0; v < s->V; v++) {
        size_t len;
        int ok = !s->tk || (v < has && pipit_tokenizer_token(s->tk, v, &len));
        s->blocked[v] = ok ? 0.0f : -INFINITY;
        drawable += ok;
    }
    if (!drawable) die("--tokenizer '%s' has no token with an id below %d (the model's vocabulary)", a->tokenizer, s->V);
    if (a->top_k > drawable)
        die("--top-k must be in 0..%d (the tokenizer's vocabulary; 0: all), got %d", drawable, a->top_k);
}

/* "1,2,3" -> ids; dies on anything else. */
static int parse_ids(const char *s, int32_t **out) {
    int n = 0, cap = 16;
    int32_t *ids = malloc(sizeof *ids * (size_t)cap);
    if (!ids) die("out of memory");
    *out = ids; /* reachable if it dies */
    while (*s) {
        char *end = NULL;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) die("--prompt-ids: '%s' is not a list of token ids like 1,2,3", s);
        if (n == cap) {
            if (cap > INT32_MAX / 4 || !(ids = realloc(*out, sizeof *ids * (size_t)(cap *= 2)))) die("out of memory");
            *out = ids;
        }
        ids[n++] = (int32_t)v;
        s = end;
        if (*s == ',' && s[1]) s++;
        else if (*s) die("--prompt-ids: unexpected '%c' (token ids are separated by commas)", *s);
    }
    return n;
}

/* The prompt's tokens: the ids given, the tokenizer's encoding of the
 * text, or its bytes. */
static void prompt_tokens(sampler *s, const sample_args *a) {
    if (a->prompt_ids) {
        s->n = parse_ids(a->prompt_ids, &s->seq);
        return;
    }
    size_t len = strlen(a->prompt), k = 0;
    if (len > INT32_MAX / 4) die("--prompt is too long");
    if (s->tk) {
        s->seq = cli_encode(s->tk, "--prompt", a->prompt, len, &k);
        s->n = (int)k;
        return;
    }
    s->n = (int)len;
    s->seq = malloc(sizeof *s->seq * (len ? len : 1));
    if (!s->seq) die("out of memory");
    for (size_t i = 0; i < len; i++) s->seq[i] = (unsigned char)a->prompt[i];
    if (!s->byte_level && pipit_process_rank() == 0)
        fprintf(stderr, "pipit: note: the model has %d tokens (not byte-level): prompt bytes are used as token ids\n",
                s->V);
}

/* Every prompt token must be one the model knows and, with a tokenizer,
 * one it can print; then room for the new tokens. */
static void read_prompt(sampler *s, const sample_args *a) {
    prompt_tokens(s, a);
    if (s->n == 0) die("sample: the prompt is empty (give at least one token)");
    if ((int64_t)s->n + a->tokens > INT32_MAX / 2) die("--tokens %d is too many", a->tokens);
    const char *what = a->prompt_ids ? "id" : s->tk ? "token" : "byte";
    for (int i = 0; i < s->n; i++) {
        if (s->seq[i] >= s->V)
            die("sample: prompt token %d (%s %d) is outside the model's vocabulary of %d tokens", i, what, s->seq[i],
                s->V);
        if (s->blocked[s->seq[i]] != 0)
            die("sample: prompt token %d (id %d) has no text in --tokenizer '%s'", i, s->seq[i], a->tokenizer);
    }
    int32_t *room = realloc(s->seq, sizeof *room * ((size_t)s->n + (size_t)a->tokens + 1));
    if (!room) die("out of memory");
    s->seq = room;
}

/* ---- output ---- */

static void print_token(sampler *s, int32_t id) {
    size_t len = 0;
    if (s->tk) {
        const char *bytes = pipit_tokenizer_token(s->tk, id, &len); /* only ids with a text get here */
        fwrite(bytes, 1, len, stdout);
    } else if (s->byte_level) {
        putchar(id);
    } else {
        printf("%s%d", s->printed ? " " : "", id);
    }
    s->printed++;
}

static void echo_prompt(sampler *s, const sample_args *a) {
    for (int i = 0; !a->no_echo && i < s->n; i++) print_token(s, s->seq[i]);
    fflush(stdout);
}

/* The next token from its logits [V], appended and printed at once. */
static void take_next(sampler *s, const float *logits) {
    int32_t next;
    for (int v = 0; v < s->V; v++) s->row[v] = logits[v] + s->blocked[v];
    if (pipit_sample_token(s->row, s->V, &s->how, &s->rng, &next)) die("sample: %s", pipit_errmsg());
    s->seq[s->n++] = next;
    print_token(s, next);
    fflush(stdout);
}

/* ---- the programs ---- */

/* A forward-only program of g keeping `outs`, with the checkpoint's weights. */
static pipit_program *compile_loaded(sampler *s, pipit_graph *g, pipit_val loss, const pipit_val *outs, int nouts) {
    pipit_options po = s->po;
    po.outputs = outs, po.noutputs = nouts;
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &po, &p)) die("compile: %s", pipit_errmsg());
    if (pipit_checkpoint_load_into(p, s->ck)) die("--init: %s", pipit_errmsg());
    return p;
}

/* Up to `want` tokens with the KV cache, while the sequence fits the
 * window; returns how many. */
static int generate_cached(sampler *s, int want) {
    if (want == 0 || s->n > s->T) return 0;
    pipit_graph *g = pipit_graph_new();
    pipit_decode_graph dg;
    pipit_decoder *d = NULL;
    float *lg = malloc(sizeof *lg * (size_t)s->V);
    if (!g || !lg) die("out of memory");
    if (s->cfg.kind->build_decode(g, &s->cfg, &dg)) die("model: %s", pipit_errmsg());
    pipit_program *p = compile_loaded(s, g, dg.loss, (pipit_val[]){dg.logits, dg.kv}, 2);
    if (pipit_decoder_new(p, &dg, &d)) die("sample: %s", pipit_errmsg());
    size_t nb = sizeof *lg * (size_t)s->V;
    for (int i = 0; i + 1 < s->n; i++) /* the prompt before its last token */
        if (pipit_decoder_step(d, &s->seq[i], lg, nb)) die("sample: %s", pipit_errmsg());
    int k = 0;
    for (; k < want && s->n <= s->T; k++) {
        if (pipit_decoder_step(d, &s->seq[s->n - 1], lg, nb)) die("sample: %s", pipit_errmsg());
        take_next(s, lg);
    }
    pipit_decoder_free(d);
    pipit_program_free(p);
    pipit_graph_free(g);
    free(lg);
    return k;
}

/* The training graph's forward over a window of T tokens. */
typedef struct {
    pipit_graph *g;
    pipit_program *p;
    pipit_val logits;
    int32_t *tok, *tgt, *pos;
    float *lg; /* [T,V] */
    pipit_feed feeds[CLI_MAX_FEEDS];
} window;

static void window_open(window *w, sampler *s) {
    size_t T = (size_t)s->T;
    memset(w, 0, sizeof *w);
    w->g = pipit_graph_new();
    w->tok = calloc(T, sizeof *w->tok), w->tgt = calloc(T, sizeof *w->tgt), w->pos = calloc(T, sizeof *w->pos);
    w->lg = malloc(sizeof *w->lg * T * (size_t)s->V);
    if (!w->g || !w->tok || !w->tgt || !w->pos || !w->lg) die("out of memory");
    pipit_val loss = s->cfg.kind->build(w->g, &s->cfg, &w->logits);
    if (pipit_graph_status(w->g)) die("model: %s", pipit_errmsg());
    w->p = compile_loaded(s, w->g, loss, &w->logits, 1);
    if (s->cfg.kind->feeds(&s->cfg, w->tok, w->tgt, w->pos, w->feeds)) die("feeds: %s", pipit_errmsg());
}

/* The next-token logits of the sequence: its last T tokens (or all, padded
 * after with token 0) at positions 0.., the row of its last token. */
static const float *window_logits(window *w, const sampler *s) {
    int n = s->n < s->T ? s->n : s->T, first = s->n - n;
    for (int i = 0; i < s->T; i++) w->tok[i] = i < n ? s->seq[first + i] : 0;
    int nf = s->cfg.kind->nfeeds;
    if (pipit_step_feeds(w->p, w->feeds, nf, nf, 0, NULL)) die("sample: %s", pipit_program_errmsg(w->p));
    if (pipit_program_get_output(w->p, w->logits, 0, w->lg, sizeof *w->lg * (size_t)s->T * (size_t)s->V))
        die("sample: %s", pipit_errmsg());
    return w->lg + (size_t)(n - 1) * (size_t)s->V;
}

static void window_close(window *w) {
    pipit_program_free(w->p);
    pipit_graph_free(w->g);
    free(w->tok);
    free(w->tgt);
    free(w->pos);
    free(w->lg);
}

static void generate_windowed(sampler *s, int want) {
    if (want <= 0) return;
    window w;
    window_open(&w, s);
    for (int k = 0; k < want; k++) take_next(s, window_logits(&w, s));
    window_close(&w);
}

/* ---- the command ---- */

static void close_sampler(sampler *s) {
    if (!s->tk && !s->byte_level && s->printed) putchar('\n');
    fflush(stdout);
    free(s->seq);
    free(s->blocked);
    free(s->row);
    pipit_checkpoint_free(s->ck);
    pipit_tokenizer_free(s->tk);
}

int cmd_sample(int argc, char **argv) {
    sample_args a = {.tokens = 64, .temperature = 1.0, .top_p = 1.0};
    default_opts(&a.o);
    sampler s = {0};
    parse_args(&a, argc, argv);
    open_checkpoint(&s, &a);
    open_tokenizer(&s, &a);
    read_prompt(&s, &a);
    s.how = (pipit_sampling){a.temperature, a.top_k, a.top_p};
    s.rng = a.seed;
    echo_prompt(&s, &a);
    int done = a.no_kv_cache ? 0 : generate_cached(&s, a.tokens);
    generate_windowed(&s, a.tokens - done);
    close_sampler(&s);
    return 0;
}
