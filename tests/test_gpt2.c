/*
 * test_gpt2.c — the GPT-2 model end to end through the public API: an f64
 * finite-difference gradcheck of every parameter of a tiny model, loss
 * falling from ln(V) while training on generated text, bitwise-identical
 * results for 1, 2 and 3 compute threads, microbatch accumulation equal to
 * one big batch (mean over all tokens), and the GPT-2 init statistics.
 */
#include <math.h>
#include <stdint.h>

#include "gradcheck.h"
#include "pipit_gpt2.h"
#include "test.h"
#include "io/data.h"

/* Elements of a named param (0 on error). */
static int64_t numel_of(pipit_program *p, const char *name) {
    int nd;
    int64_t shape[PIPIT_MAX_DIMS], n = 1;
    if (pipit_program_param_shape(p, name, &nd, shape)) return 0;
    for (int i = 0; i < nd; i++) n *= shape[i];
    return n;
}

/* Builds and compiles a GPT-2; returns NULL (after printing why) on failure. */
static pipit_program *gpt2_program(const pipit_gpt2_config *c, const pipit_options *o,
                                   pipit_graph **gout) {
    pipit_graph *g = pipit_graph_new();
    if (!g) return NULL;
    pipit_val loss = pipit_gpt2_build(g, c);
    pipit_program *p = NULL;
    if (pipit_graph_status(g) != PIPIT_STATUS_OK || pipit_compile(g, loss, o, &p)) {
        fprintf(stderr, "gpt2 build/compile failed: %s\n", pipit_errmsg());
        pipit_graph_free(g);
        return NULL;
    }
    *gout = g;
    return p;
}

/* Deterministic English-like text: words picked by an LCG, so it has real
 * unigram/bigram structure a small model learns within a few dozen steps. */
static const char *write_text(size_t n) {
    static char path[512];
    static const char *words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ",
                                  "to ", "park, ", "and ", "we ", "saw ", "it ", "there. "};
    snprintf(path, sizeof path, "%s/gpt2_text.txt", pipit_test_tmpdir());
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    uint32_t s = 12345;
    size_t len = 0;
    while (len < n) {
        s = s * 1664525u + 1013904223u;
        const char *w = words[(s >> 16) % (sizeof words / sizeof words[0])];
        fputs(w, f);
        len += strlen(w);
    }
    fclose(f);
    return path;
}

typedef struct {
    int32_t *tok, *tgt, *pos;
    size_t nbytes; /* of each */
} mb;

static void mb_alloc(mb *b, int B, int T) {
    b->nbytes = sizeof(int32_t) * (size_t)(B * T);
    b->tok = malloc(sizeof(int32_t) * (size_t)(B * T));
    b->tgt = malloc(sizeof(int32_t) * (size_t)(B * T));
    b->pos = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int i = 0; i < B * T; i++) b->pos[i] = i % T;
}

static void mb_free(mb *b) {
    free(b->tok);
    free(b->tgt);
    free(b->pos);
}

static void mb_feeds(const mb *b, pipit_feed *f) {
    f[0] = (pipit_feed){PIPIT_GPT2_TOKENS, b->tok, b->nbytes};
    f[1] = (pipit_feed){PIPIT_GPT2_TARGETS, b->tgt, b->nbytes};
    f[2] = (pipit_feed){PIPIT_GPT2_POSITIONS, b->pos, b->nbytes};
}

/* ------------------------------------------------------------ gradcheck */

PIPIT_TEST(gpt2_gradcheck_tiny) {
    enum { V = 16, T = 4, L = 2, H = 2, C = 8, B = 2 };
    pipit_gpt2_config c = {V, T, T, L, H, C, B, 1, PIPIT_F64, 0};
    ASSERT_OK(pipit_gpt2_check(&c));
    pipit_graph *g = NULL;
    pipit_program *p = gpt2_program(&c, &(pipit_options){.microbatches = 1}, &g);
    ASSERT_TRUE(p != NULL);
    /* 2 + 12 per layer + 2 (ln_f) parameter tensors */
    ASSERT_EQ_I64(pipit_program_num_params(p), 2 + 12 * L + 2);
    gc_init_params(p, 99, 0.3);
    /* LN gains near 1 so the blocks are not degenerate */
    uint64_t st = 7;
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        if (!strstr(name, "ln_") || !strstr(name, ".weight")) continue;
        double w[C];
        ASSERT_EQ_I64(numel_of(p, name), C);
        for (int k = 0; k < C; k++) w[k] = 1.0 + 0.3 * gc_rand(&st);
        ASSERT_OK(pipit_program_set_param(p, name, w, sizeof w));
    }
    mb b;
    mb_alloc(&b, B, T);
    for (int i = 0; i < B * T; i++) {
        b.tok[i] = (i * 5 + 3) % V;
        b.tgt[i] = (i * 11 + 1) % V;
    }
    pipit_feed f[3];
    mb_feeds(&b, f);
    pipit_metrics m;
    ASSERT_OK(pipit_step(p, f, 3, 0, &m));
    ASSERT_TRUE(isfinite(m.loss) && m.loss > 0);
    ASSERT_TRUE(m.grad_norm > 1e-3); /* the check below is not vacuous */
    double err = gc_max_rel_error(p, f, 3, 1e-6, 1);
    fprintf(stderr, "gpt2 gradcheck: max relative error %g\n", err);
    mb_free(&b);
    pipit_program_free(p);
    pipit_graph_free(g);
    ASSERT_TRUE(err >= 0);
    if (!(err < 1e-6)) PIPIT_FAIL_("gpt2 gradcheck: max relative error %g >= 1e-6", err);
}

/* ---------------------------------------------------------- loss falls */

#define LF_V 256
#define LF_T 32
#define LF_B 4
#define LF_M 2

static pipit_gpt2_config lf_config(int B) {
    return (pipit_gpt2_config){LF_V, LF_T, LF_T, 2, 2, 32, B, 1, PIPIT_F32, 0};
}

/* Runs `steps` training steps on the generated text; losses[] gets each
 * step's loss. Returns the program (caller frees p and *g) or NULL. */
static pipit_program *train_steps(int threads, int steps, double *losses, pipit_graph **g) {
    const char *path = write_text(20000);
    if (!path) return NULL;
    pipit__data *d = NULL;
    if (pipit__data_open(path, LF_T, PIPIT_DATA_SEQUENTIAL, 0, &d)) return NULL;
    pipit_gpt2_config c = lf_config(LF_B);
    pipit_options o = {.microbatches = LF_M, .threads = threads,
                       .optimizer = pipit_adamw(1e-3, 0.9, 0.95, 1e-8, 0.0)};
    pipit_program *p = gpt2_program(&c, &o, g);
    if (!p || pipit_gpt2_init(p, &c, 1)) {
        pipit__data_free(d);
        return p;
    }
    mb b[LF_M];
    pipit_feed f[3 * LF_M];
    for (int m = 0; m < LF_M; m++) {
        mb_alloc(&b[m], LF_B, LF_T);
        mb_feeds(&b[m], f + 3 * m);
    }
    for (int s = 0; s < steps; s++) {
        for (int m = 0; m < LF_M; m++)
            pipit__data_batch(d, ((int64_t)s * LF_M + m) * LF_B, LF_B, b[m].tok, b[m].tgt);
        pipit_metrics met;
        losses[s] = pipit_step(p, f, 3, 1, &met) ? NAN : met.loss;
    }
    for (int m = 0; m < LF_M; m++) mb_free(&b[m]);
    pipit__data_free(d);
    return p;
}

PIPIT_TEST(gpt2_loss_falls) {
    enum { N = 40 };
    double loss[N];
    pipit_graph *g = NULL;
    pipit_program *p = train_steps(1, N, loss, &g);
    ASSERT_TRUE(p != NULL);
    pipit_program_free(p);
    pipit_graph_free(g);
    for (int s = 0; s < N; s++) ASSERT_TRUE(isfinite(loss[s]));
    double tail = 0;
    for (int s = N - 5; s < N; s++) tail += loss[s] / 5;
    fprintf(stderr, "gpt2_loss_falls: first %.4f, last-5 mean %.4f\n", loss[0], tail);
    /* std-0.02 init: near-uniform predictions */
    ASSERT_NEAR_F64(loss[0], log(256.0), 0.1);
    /* A real run ends near 3.55 (a drop of 2.0); demand 1.0. */
    if (!(tail < loss[0] - 1.0)) PIPIT_FAIL_("loss did not fall: %g -> %g", loss[0], tail);
}

/* ------------------------------------------------------ thread-invariance */

PIPIT_TEST(gpt2_threads_bitwise) {
    enum { N = 3 };
    double ref_loss[N];
    pipit_graph *rg = NULL;
    pipit_program *ref = train_steps(1, N, ref_loss, &rg);
    ASSERT_TRUE(ref != NULL);
    int bad = 0;
    for (int threads = 2; threads <= 3; threads++) {
        double loss[N];
        pipit_graph *g = NULL;
        pipit_program *p = train_steps(threads, N, loss, &g);
        if (!p) {
            bad++;
            continue;
        }
        for (int s = 0; s < N; s++)
            if (memcmp(&loss[s], &ref_loss[s], sizeof(double)) != 0) {
                fprintf(stderr, "threads=%d step %d: loss %.17g vs %.17g\n", threads, s, loss[s],
                        ref_loss[s]);
                bad++;
            }
        for (int i = 0; i < pipit_program_num_params(ref); i++) {
            const char *name = pipit_program_param_name(ref, i);
            int64_t n = numel_of(ref, name);
            size_t bytes = sizeof(float) * (size_t)n;
            float *a = malloc(bytes), *b = malloc(bytes);
            if (pipit_program_get_param(ref, name, a, bytes) ||
                pipit_program_get_param(p, name, b, bytes) || memcmp(a, b, bytes) != 0) {
                fprintf(stderr, "threads=%d: param %s differs from threads=1\n", threads, name);
                bad++;
            }
            free(a);
            free(b);
        }
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    pipit_program_free(ref);
    pipit_graph_free(rg);
    ASSERT_EQ_I64(bad, 0);
}

/* ----------------------------------------------- microbatch accumulation */

PIPIT_TEST(gpt2_microbatch_accumulation) {
    enum { T = LF_T };
    /* 4 sequences of distinct tokens */
    int32_t tok[4 * T], tgt[4 * T];
    uint32_t s = 42;
    for (int i = 0; i < 4 * T; i++) {
        s = s * 1664525u + 1013904223u;
        tok[i] = (int32_t)((s >> 8) % LF_V);
        s = s * 1664525u + 1013904223u;
        tgt[i] = (int32_t)((s >> 8) % LF_V);
    }
    int32_t pos[4 * T];
    for (int i = 0; i < 4 * T; i++) pos[i] = i % T;

    pipit_gpt2_config c2 = lf_config(2), c4 = lf_config(4);
    pipit_graph *g2 = NULL, *g4 = NULL;
    pipit_program *p2 = gpt2_program(&c2, &(pipit_options){.microbatches = 2}, &g2);
    pipit_program *p4 = gpt2_program(&c4, &(pipit_options){.microbatches = 1}, &g4);
    ASSERT_TRUE(p2 && p4);
    ASSERT_OK(pipit_gpt2_init(p2, &c2, 5));
    ASSERT_OK(pipit_gpt2_init(p4, &c4, 5));
    /* non-trivial biases/LN so every gradient path carries signal */
    ASSERT_EQ_I64(pipit_program_num_params(p2), pipit_program_num_params(p4));
    uint64_t st = 3;
    for (int i = 0; i < pipit_program_num_params(p2); i++) {
        const char *name = pipit_program_param_name(p2, i);
        int64_t n = numel_of(p2, name);
        float *w = malloc(sizeof(float) * (size_t)n);
        ASSERT_OK(pipit_program_get_param(p2, name, w, sizeof(float) * (size_t)n));
        for (int64_t k = 0; k < n; k++) w[k] += (float)(0.05 * gc_rand(&st));
        ASSERT_OK(pipit_program_set_param(p2, name, w, sizeof(float) * (size_t)n));
        ASSERT_OK(pipit_program_set_param(p4, name, w, sizeof(float) * (size_t)n));
        free(w);
    }
    const size_t h = sizeof(int32_t) * 2 * T; /* a microbatch of 2 sequences */
    pipit_feed f2[6] = {
        {PIPIT_GPT2_TOKENS, tok, h},         {PIPIT_GPT2_TARGETS, tgt, h},         {PIPIT_GPT2_POSITIONS, pos, h},
        {PIPIT_GPT2_TOKENS, tok + 2 * T, h}, {PIPIT_GPT2_TARGETS, tgt + 2 * T, h}, {PIPIT_GPT2_POSITIONS, pos + 2 * T, h},
    };
    pipit_feed f4[3] = {{PIPIT_GPT2_TOKENS, tok, sizeof tok}, {PIPIT_GPT2_TARGETS, tgt, sizeof tgt},
                        {PIPIT_GPT2_POSITIONS, pos, sizeof pos}};
    pipit_metrics m2, m4;
    ASSERT_OK(pipit_step(p2, f2, 3, 0, &m2));
    ASSERT_OK(pipit_step(p4, f4, 3, 0, &m4));
    fprintf(stderr, "loss M=2,B=2 %.9g  M=1,B=4 %.9g\n", m2.loss, m4.loss);
    ASSERT_TRUE(fabs(m2.loss - m4.loss) <= 1e-6 * fabs(m4.loss));
    ASSERT_TRUE(fabs(m2.grad_norm - m4.grad_norm) <= 1e-5 * m4.grad_norm);
    int bad = 0;
    for (int i = 0; i < pipit_program_num_params(p2); i++) {
        const char *name = pipit_program_param_name(p2, i);
        int64_t n = numel_of(p2, name);
        size_t bytes = sizeof(float) * (size_t)n;
        float *a = malloc(bytes), *b = malloc(bytes);
        ASSERT_OK(pipit_program_get_grad(p2, name, a, bytes));
        ASSERT_OK(pipit_program_get_grad(p4, name, b, bytes));
        double gmax = 0, dmax = 0;
        for (int64_t k = 0; k < n; k++) {
            gmax = fmax(gmax, fabs(b[k]));
            dmax = fmax(dmax, fabs((double)a[k] - b[k]));
        }
        /* the sum (not the mean) over microbatches would differ by 2x */
        if (!(dmax <= 1e-5 * fmax(gmax, 1e-3))) {
            fprintf(stderr, "grad %s: max |diff| %g, max |grad| %g\n", name, dmax, gmax);
            bad++;
        }
        free(a);
        free(b);
    }
    pipit_program_free(p2);
    pipit_program_free(p4);
    pipit_graph_free(g2);
    pipit_graph_free(g4);
    ASSERT_EQ_I64(bad, 0);
}

/* ------------------------------------------------------------ init stats */

typedef struct {
    double n, sum, sumsq;
} moments;

static void add_param(moments *mo, pipit_program *p, const char *name) {
    int64_t n = numel_of(p, name);
    float *w = malloc(sizeof(float) * (size_t)n);
    if (pipit_program_get_param(p, name, w, sizeof(float) * (size_t)n) == PIPIT_STATUS_OK)
        for (int64_t k = 0; k < n; k++) {
            mo->n++;
            mo->sum += w[k];
            mo->sumsq += (double)w[k] * w[k];
        }
    free(w);
}

static double m_mean(const moments *m) { return m->sum / m->n; }
static double m_std(const moments *m) {
    double mu = m_mean(m);
    return sqrt(m->sumsq / m->n - mu * mu);
}

PIPIT_TEST(gpt2_init_stats) {
    enum { L = 2 };
    pipit_gpt2_config c = {256, 64, 64, L, 2, 64, 1, 1, PIPIT_F32, 0};
    pipit_graph *g = NULL;
    pipit_program *p = gpt2_program(&c, NULL, &g);
    ASSERT_TRUE(p != NULL);
    ASSERT_OK(pipit_gpt2_init(p, &c, 2024));
    moments wte = {0}, wpe = {0}, proj = {0}, other = {0};
    int bad = 0;
    add_param(&wte, p, "wte.weight");
    add_param(&wpe, p, "wpe.weight");
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = numel_of(p, name);
        size_t len = strlen(name);
        int is_w = len > 7 && strcmp(name + len - 7, ".weight") == 0;
        if (strstr(name, "c_proj.weight")) add_param(&proj, p, name);
        else if (strstr(name, "c_attn.weight") || strstr(name, "c_fc.weight")) add_param(&other, p, name);
        else if (strncmp(name, "wte", 3) && strncmp(name, "wpe", 3)) {
            /* 1-D: biases 0, LN weights exactly 1 */
            float *w = malloc(sizeof(float) * (size_t)n);
            ASSERT_OK(pipit_program_get_param(p, name, w, sizeof(float) * (size_t)n));
            float want = strstr(name, "ln_") && is_w ? 1.0f : 0.0f;
            for (int64_t k = 0; k < n; k++)
                if (w[k] != want) {
                    fprintf(stderr, "%s[%lld] = %g, want %g\n", name, (long long)k, w[k], want);
                    bad++;
                    break;
                }
            free(w);
        }
    }
    ASSERT_EQ_I64(bad, 0);
    ASSERT_EQ_I64(wte.n, 256 * 64);
    ASSERT_EQ_I64(proj.n, L * (64 * 64 + 256 * 64));
    fprintf(stderr, "wte mean %g std %g; wpe std %g; c_proj std %g; c_attn/c_fc std %g\n",
            m_mean(&wte), m_std(&wte), m_std(&wpe), m_std(&proj), m_std(&other));
    /* 16384 samples: sd of the mean 1.6e-4, of the std ~0.6% */
    ASSERT_NEAR_F64(m_mean(&wte), 0.0, 8e-4);
    ASSERT_NEAR_F64(m_std(&wte), 0.02, 0.02 * 0.03);
    ASSERT_NEAR_F64(m_std(&wpe), 0.02, 0.02 * 0.05); /* 4096 samples */
    ASSERT_NEAR_F64(m_mean(&proj), 0.0, 3e-4);
    ASSERT_NEAR_F64(m_std(&proj), 0.02 / sqrt(2.0 * L), 0.02 / sqrt(2.0 * L) * 0.03);
    ASSERT_NEAR_F64(m_std(&other), 0.02, 0.02 * 0.03);
    /* each tensor has its own stream: layer 0 and layer 1 differ */
    float a[64], b[64];
    int64_t n = numel_of(p, "h.0.mlp.c_fc.weight");
    float *w0 = malloc(sizeof(float) * (size_t)n), *w1 = malloc(sizeof(float) * (size_t)n);
    ASSERT_OK(pipit_program_get_param(p, "h.0.mlp.c_fc.weight", w0, sizeof(float) * (size_t)n));
    ASSERT_OK(pipit_program_get_param(p, "h.1.mlp.c_fc.weight", w1, sizeof(float) * (size_t)n));
    memcpy(a, w0, sizeof a);
    memcpy(b, w1, sizeof b);
    free(w0);
    free(w1);
    ASSERT_TRUE(memcmp(a, b, sizeof a) != 0);
    pipit_program_free(p);
    pipit_graph_free(g);
}
