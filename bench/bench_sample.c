/*
 * bench_sample.c — tokens per second of generation with and without the
 * KV cache (public API only): the window (what `pipit sample --no-kv-cache`
 * runs: the training graph's forward over T positions for every new token)
 * against the decoder (pipit_decode.h: one new position per step over the
 * cached keys and values). A randomly initialised model (its matrices
 * scaled so the greedy choice is clear-cut), a prompt of 8 tokens, then
 * TOKENS greedy tokens (default T - 8: the whole window, the cache never
 * full), timed from the first step to the last (the cache's time includes
 * feeding it the prompt; compiling is not timed). The two run alternately
 * REPS times, so a busy machine slows both alike; the medians (tokens per
 * second of wall time, and CPU milliseconds per token: the process's CPU
 * time, which other jobs on the machine move less) and the median of the
 * per-round ratios are printed, and the two must generate the same tokens.
 *
 *   build/bench_sample [gpt2|llama] [T] [TOKENS] [REPS] [THREADS]
 *   (defaults: gpt2 256 248 3 1; L=4 H=4 C=256 V=512, Llama with KV=2, F=688)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_stats.h"
#include "pipit.h"
#include "pipit_decode.h"
#include "pipit_gpt2.h"
#include "pipit_llama.h"

enum { PROMPT = 8, MAX_REPS = 64 };

typedef struct {
    int llama, T, V, threads;
    pipit_gpt2_config gc;
    pipit_llama_config lc;
} model;

/* Wall time, and the CPU time of the process (all its threads): on a
 * machine other jobs share, the CPU seconds a token costs move less. */
typedef struct {
    double wall, cpu;
} clock_pair;

static clock_pair now(void) {
    struct timespec w, c;
    clock_gettime(CLOCK_MONOTONIC, &w);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c);
    return (clock_pair){(double)w.tv_sec + w.tv_nsec * 1e-9, (double)c.tv_sec + c.tv_nsec * 1e-9};
}

static clock_pair since(clock_pair t0) {
    clock_pair t = now();
    return (clock_pair){t.wall - t0.wall, t.cpu - t0.cpu};
}

static void check(pipit_status s, const char *what) {
    if (s) {
        fprintf(stderr, "bench_sample: %s: %s\n", what, pipit_errmsg());
        exit(1);
    }
}

static pipit_program *compile(const model *m, pipit_graph *g, pipit_val loss, const pipit_val *outs, int nouts) {
    pipit_program *p = NULL;
    check(pipit_compile(g, loss, &(pipit_options){.forward_only = 1, .outputs = outs, .noutputs = nouts,
                                                   .threads = m->threads}, &p),
          "compile");
    check(m->llama ? pipit_llama_init(p, &m->lc, 1) : pipit_gpt2_init(p, &m->gc, 1), "init");
    for (int i = 0; i < pipit_program_num_params(p); i++) { /* matrices x 10: clear-cut greedy choices */
        const char *name = pipit_program_param_name(p, i);
        int nd;
        int64_t shape[PIPIT_MAX_DIMS];
        check(pipit_program_param_shape(p, name, &nd, shape), "param shape");
        if (nd != 2) continue;
        size_t n = (size_t)(shape[0] * shape[1]);
        float *w = malloc(n * sizeof *w);
        if (!w) check(PIPIT_STATUS_NOMEM, "weights");
        check(pipit_program_get_param(p, name, w, n * sizeof *w), "get");
        for (size_t k = 0; k < n; k++) w[k] *= 10;
        check(pipit_program_set_param(p, name, w, n * sizeof *w), "set");
        free(w);
    }
    return p;
}

/* The greedy token: pipit_sample_token at temperature 0 (the sampler pipit
 * sample uses), so both paths pick ties alike. */
static int argmax(const float *row, int V) {
    int32_t tok = 0;
    uint64_t state = 0;
    check(pipit_sample_token(row, V, &(pipit_sampling){0}, &state, &tok), "sample");
    return tok;
}

/* Greedy tokens after the prompt, the training graph over the window for
 * each; returns the seconds. */
static clock_pair run_window(const model *m, int32_t *seq, int tokens) {
    pipit_graph *g = pipit_graph_new();
    pipit_val logits;
    pipit_val loss = m->llama ? pipit_llama_build_logits(g, &m->lc, &logits) : pipit_gpt2_build_logits(g, &m->gc, &logits);
    check(pipit_graph_status(g), "build");
    pipit_program *p = compile(m, g, loss, &logits, 1);
    int T = m->T, V = m->V, nf = m->llama ? 2 : 3;
    int32_t *tok = calloc((size_t)T, 4), *tgt = calloc((size_t)T, 4), *pos = calloc((size_t)T, 4);
    float *lg = malloc(sizeof *lg * (size_t)T * (size_t)V);
    pipit_feed feeds[3];
    check(m->llama ? pipit_llama_feeds(&m->lc, tok, tgt, feeds) : pipit_gpt2_feeds(&m->gc, tok, tgt, pos, feeds), "feeds");
    clock_pair t0 = now();
    for (int n = PROMPT; n < PROMPT + tokens; n++) {
        for (int i = 0; i < T; i++) tok[i] = i < n ? seq[i] : 0;
        check(pipit_step_feeds(p, feeds, nf, nf, 0, NULL), "step");
        check(pipit_program_get_output(p, logits, 0, lg, sizeof *lg * (size_t)T * (size_t)V), "logits");
        seq[n] = argmax(lg + (size_t)(n - 1) * (size_t)V, V);
    }
    clock_pair dt = since(t0);
    free(tok), free(tgt), free(pos), free(lg);
    pipit_program_free(p);
    pipit_graph_free(g);
    return dt;
}

/* The same with the decoder: the prompt one token per step, then the new ones. */
static clock_pair run_cache(const model *m, int32_t *seq, int tokens) {
    pipit_graph *g = pipit_graph_new();
    pipit_decode_graph dg;
    check(m->llama ? pipit_llama_build_decode(g, &m->lc, &dg) : pipit_gpt2_build_decode(g, &m->gc, &dg), "build");
    pipit_program *p = compile(m, g, dg.loss, (pipit_val[]){dg.logits, dg.kv}, 2);
    pipit_decoder *d = NULL;
    check(pipit_decoder_new(p, &dg, &d), "decoder");
    float *lg = malloc(sizeof *lg * (size_t)m->V);
    clock_pair t0 = now();
    for (int n = 1; n < PROMPT + tokens; n++) {
        check(pipit_decoder_step(d, &seq[n - 1], lg, sizeof *lg * (size_t)m->V), "decoder step");
        if (n >= PROMPT) seq[n] = argmax(lg, m->V);
    }
    clock_pair dt = since(t0);
    free(lg);
    pipit_decoder_free(d);
    pipit_program_free(p);
    pipit_graph_free(g);
    return dt;
}

int main(int argc, char **argv) {
    const char *kind = argc > 1 ? argv[1] : "gpt2";
    model m = {.llama = strcmp(kind, "llama") == 0, .T = argc > 2 ? atoi(argv[2]) : 256, .V = 512};
    int tokens = argc > 3 ? atoi(argv[3]) : m.T - PROMPT, reps = argc > 4 ? atoi(argv[4]) : 3;
    m.threads = argc > 5 ? atoi(argv[5]) : 1;
    if ((!m.llama && strcmp(kind, "gpt2")) || m.T <= PROMPT || tokens < 1 || PROMPT + tokens > m.T || reps < 1 ||
        reps > MAX_REPS || m.threads < 1) {
        fprintf(stderr, "usage: bench_sample [gpt2|llama] [T > %d] [TOKENS <= T - %d] [REPS 1..%d] [THREADS]\n",
                PROMPT, PROMPT, MAX_REPS);
        return 2;
    }
    m.gc = (pipit_gpt2_config){m.V, m.T, m.T, 4, 4, 256, 1, 1, PIPIT_F32, 0};
    m.lc = (pipit_llama_config){.vocab = m.V, .max_ctx = m.T, .ctx = m.T, .layers = 4, .heads = 4, .kv_heads = 2,
                                .dim = 256, .ffn_hidden = 688, .norm_eps = 1e-5, .rope_theta = 1e4, .batch = 1,
                                .stages = 1, .dtype = PIPIT_F32};
    int32_t *a = calloc((size_t)m.T, 4), *b = calloc((size_t)m.T, 4);
    for (int i = 0; i < PROMPT; i++) a[i] = b[i] = (int32_t)((i * 37 + 11) % m.V);
    double tw[MAX_REPS], tc[MAX_REPS], cw[MAX_REPS], cc[MAX_REPS], ratio[MAX_REPS], cratio[MAX_REPS];
    int same = 1;
    for (int r = 0; r < reps; r++) {
        clock_pair w = run_window(&m, a, tokens), c = run_cache(&m, b, tokens);
        tw[r] = w.wall, tc[r] = c.wall, cw[r] = w.cpu, cc[r] = c.cpu;
        ratio[r] = w.wall / c.wall, cratio[r] = w.cpu / c.cpu;
        same &= memcmp(a, b, sizeof *a * (size_t)(PROMPT + tokens)) == 0;
        printf("round %d: window %.1f tok/s (%.2f CPU ms/token), KV cache %.1f tok/s (%.2f CPU ms/token): %.1fx\n",
               r + 1, tokens / w.wall, 1e3 * w.cpu / tokens, tokens / c.wall, 1e3 * c.cpu / tokens, ratio[r]);
    }
    printf("%s L=4 H=4%s C=256 V=%d T=%d, %d threads: %d tokens after a prompt of %d, median of %d rounds:\n"
           "  window (--no-kv-cache)  %8.1f tok/s  %8.2f CPU ms/token\n"
           "  KV cache                %8.1f tok/s  %8.2f CPU ms/token\n"
           "  ratio %.1fx (wall), %.1fx (CPU); the same tokens: %s\n",
           m.llama ? "Llama" : "GPT-2", m.llama ? " KV=2 F=688" : "", m.V, m.T, m.threads, tokens, PROMPT, reps,
           tokens / bench_median(tw, reps), 1e3 * bench_median(cw, reps) / tokens, tokens / bench_median(tc, reps),
           1e3 * bench_median(cc, reps) / tokens, bench_median(ratio, reps), bench_median(cratio, reps),
           same ? "yes" : "NO");
    free(a), free(b);
    return same ? 0 : 1;
}
