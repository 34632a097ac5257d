/*
 * test_decode.c — incremental decoding with a KV cache (pipit_decode.h)
 * against its oracle, the training graph run on the whole window (what
 * `pipit sample --no-kv-cache` does): for GPT-2 and for Llama with
 * grouped-query attention, position by position over the whole cache, the
 * decoder's logits equal the full forward's row of that position to 1e-5
 * in f32 (1e-12 in f64), greedy generation picks the same tokens, the
 * decoding graph has the training graph's params, a full cache and bad
 * arguments are refused by name, and reset starts over with the same bits.
 * The sampler (pipit_sample_token) against hand-computed draws: top-p on a
 * small distribution, top-k, temperature 0, -inf masks, refused options.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pipit.h"
#include "pipit_decode.h"
#include "pipit_gpt2.h"
#include "pipit_llama.h"
#include "test.h"

enum { B = 2, S = 10, V = 50 };

/* One model family behind the calls the test makes. */
typedef struct {
    int llama;
    pipit_gpt2_config gc;
    pipit_llama_config lc;
} model;

static model gpt2_model(void) {
    return (model){0, {.vocab = V, .max_ctx = 16, .ctx = S, .layers = 2, .heads = 2, .dim = 16, .batch = B,
                       .stages = 1, .dtype = PIPIT_F32}, {0}};
}

static model llama_model(pipit_dtype dt) {
    return (model){1, {0}, {.vocab = V, .max_ctx = 16, .ctx = S, .layers = 2, .heads = 4, .kv_heads = 2, .dim = 32,
                            .ffn_hidden = 48, .norm_eps = 1e-5, .rope_theta = 1e4, .tied = 0, .batch = B, .stages = 1,
                            .dtype = dt}};
}

static size_t elt(const model *m) { return m->llama && m->lc.dtype == PIPIT_F64 ? 8 : 4; }

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Weights from the model's init, every matrix scaled by 10 (std 0.2) so
 * attention is far from uniform and a wrong position or key would show. */
static pipit_status init_weights(pipit_program *p, const model *m) {
    pipit_status s = m->llama ? pipit_llama_init(p, &m->lc, 3) : pipit_gpt2_init(p, &m->gc, 3);
    for (int i = 0; !s && i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int nd;
        int64_t shape[PIPIT_MAX_DIMS], n;
        s = pipit_program_param_shape(p, name, &nd, shape);
        if (s || nd != 2) continue;
        n = shape[0] * shape[1];
        size_t bytes = (size_t)n * elt(m);
        char *w = malloc(bytes);
        s = pipit_program_get_param(p, name, w, bytes);
        for (int64_t k = 0; !s && k < n; k++) {
            if (elt(m) == 8) ((double *)(void *)w)[k] *= 10;
            else ((float *)(void *)w)[k] *= 10;
        }
        if (!s) s = pipit_program_set_param(p, name, w, bytes);
        free(w);
    }
    return s;
}

/* The oracle: the training graph over the window, forward only. */
typedef struct {
    pipit_graph *g;
    pipit_program *p;
    pipit_val logits;
    int32_t tok[B * S], tgt[B * S], pos[B * S];
    pipit_feed feeds[3];
    int nfeeds;
} full_run;

static pipit_status full_open(full_run *f, const model *m) {
    memset(f, 0, sizeof *f);
    f->g = pipit_graph_new();
    pipit_val loss = m->llama ? pipit_llama_build_logits(f->g, &m->lc, &f->logits)
                              : pipit_gpt2_build_logits(f->g, &m->gc, &f->logits);
    pipit_status s = pipit_graph_status(f->g);
    pipit_options o = {.forward_only = 1, .outputs = &f->logits, .noutputs = 1};
    if (!s) s = pipit_compile(f->g, loss, &o, &f->p);
    if (!s) s = init_weights(f->p, m);
    f->nfeeds = m->llama ? 2 : 3;
    if (!s) s = m->llama ? pipit_llama_feeds(&m->lc, f->tok, f->tgt, f->feeds)
                         : pipit_gpt2_feeds(&m->gc, f->tok, f->tgt, f->pos, f->feeds);
    return s;
}

static void full_close(full_run *f) {
    pipit_program_free(f->p);
    pipit_graph_free(f->g);
}

/* Next-token logits [B,V] after seq[b][0..n-1] (n <= S): the sequences
 * left-aligned in the window, padded with token 0, row n-1. */
static pipit_status full_logits(full_run *f, const model *m, int32_t seq[B][S], int n, void *out) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < S; t++) f->tok[b * S + t] = t < n ? seq[b][t] : 0;
    pipit_status s = pipit_step_feeds(f->p, f->feeds, f->nfeeds, f->nfeeds, 0, NULL);
    size_t es = elt(m), row = (size_t)V * es;
    char *all = malloc((size_t)B * S * row);
    if (!s) s = pipit_program_get_output(f->p, f->logits, 0, all, (size_t)B * S * row);
    for (int b = 0; !s && b < B; b++) memcpy((char *)out + b * row, all + ((size_t)b * S + (size_t)(n - 1)) * row, row);
    free(all);
    return s;
}

typedef struct {
    pipit_graph *g;
    pipit_program *p;
    pipit_decode_graph dg;
    pipit_decoder *d;
} decode_run;

static pipit_status decode_open(decode_run *r, const model *m) {
    memset(r, 0, sizeof *r);
    r->g = pipit_graph_new();
    pipit_status s = m->llama ? pipit_llama_build_decode(r->g, &m->lc, &r->dg)
                              : pipit_gpt2_build_decode(r->g, &m->gc, &r->dg);
    pipit_val outs[2] = {r->dg.logits, r->dg.kv};
    pipit_options o = {.forward_only = 1, .outputs = outs, .noutputs = 2};
    if (!s) s = pipit_compile(r->g, r->dg.loss, &o, &r->p);
    if (!s) s = init_weights(r->p, m);
    if (!s) s = pipit_decoder_new(r->p, &r->dg, &r->d);
    return s;
}

static void decode_close(decode_run *r) {
    pipit_decoder_free(r->d);
    pipit_program_free(r->p);
    pipit_graph_free(r->g);
}

static double at(const void *x, size_t es, int i) {
    return es == 8 ? ((const double *)x)[i] : (double)((const float *)x)[i];
}

static int argmax_row(const void *x, size_t es) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (at(x, es, v) > at(x, es, best)) best = v;
    return best;
}

/* Position by position over the whole cache: the decoder's logits against
 * the full forward's, |a - b| <= tol (1 + |b|); then the full cache is
 * refused, and reset gives position 0's bits again. */
static void check_against_full(const model *m, double tol) {
    full_run f;
    decode_run r;
    ASSERT_OK(full_open(&f, m));
    ASSERT_OK(decode_open(&r, m));
    ASSERT_EQ_I64(pipit_decoder_capacity(r.d), S);
    /* the same params by name and shape: the same checkpoint loads */
    ASSERT_EQ_I64(pipit_program_num_params(r.p), pipit_program_num_params(f.p));
    for (int i = 0; i < pipit_program_num_params(f.p); i++) {
        int na, nb;
        int64_t sa[PIPIT_MAX_DIMS], sb[PIPIT_MAX_DIMS];
        const char *name = pipit_program_param_name(f.p, i);
        ASSERT_OK(pipit_program_param_shape(f.p, name, &na, sa));
        ASSERT_OK(pipit_program_param_shape(r.p, name, &nb, sb));
        ASSERT_EQ_I64(na, nb);
        for (int k = 0; k < na; k++) ASSERT_EQ_I64(sa[k], sb[k]);
    }
    int32_t seq[B][S];
    uint64_t st = 11;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < S; t++) seq[b][t] = (int32_t)(mix(&st) % V);
    size_t es = elt(m), nb = (size_t)B * V * es;
    char want[B * V * 8], got[B * V * 8], first[B * V * 8];
    double worst = 0, spread = 0;
    for (int n = 1; n <= S; n++) {
        int32_t step_tok[B] = {seq[0][n - 1], seq[1][n - 1]};
        ASSERT_OK(pipit_decoder_step(r.d, step_tok, got, nb));
        ASSERT_EQ_I64(pipit_decoder_length(r.d), n);
        ASSERT_OK(full_logits(&f, m, seq, n, want));
        if (n == 1) memcpy(first, got, nb);
        for (int i = 0; i < B * V; i++) {
            double a = at(got, es, i), w = at(want, es, i), err = fabs(a - w) / (1 + fabs(w));
            if (!(err <= tol)) PIPIT_FAIL_("position %d, sequence %d, token %d: decoder %.9g vs full %.9g", n - 1,
                                           i / V, i % V, a, w);
            worst = fmax(worst, err);
            spread = fmax(spread, fabs(w - at(want, es, i - i % V)));
        }
    }
    printf("decoder vs full forward: worst relative difference %.3g over %d positions (logits spread %.3g)\n", worst,
           S, spread);
    ASSERT_TRUE(spread > 0.1); /* the logits say something: a wrong key would be seen */
    int32_t t0[B] = {seq[0][0], seq[1][0]};
    ASSERT_STATUS(pipit_decoder_step(r.d, t0, got, nb), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("the cache is full: its 10 slots");
    ASSERT_EQ_I64(pipit_decoder_length(r.d), S);
    ASSERT_OK(pipit_decoder_reset(r.d));
    ASSERT_EQ_I64(pipit_decoder_length(r.d), 0);
    ASSERT_OK(pipit_decoder_step(r.d, t0, got, nb));
    ASSERT_TRUE(memcmp(got, first, nb) == 0);

    /* greedy generation from one token: the same tokens either way */
    int32_t gen[B][S], ref[B][S];
    ASSERT_OK(pipit_decoder_reset(r.d));
    for (int b = 0; b < B; b++) gen[b][0] = ref[b][0] = seq[b][0];
    for (int n = 1; n < S; n++) {
        int32_t step_tok[B] = {gen[0][n - 1], gen[1][n - 1]};
        ASSERT_OK(pipit_decoder_step(r.d, step_tok, got, nb));
        ASSERT_OK(full_logits(&f, m, ref, n, want));
        for (int b = 0; b < B; b++) {
            gen[b][n] = argmax_row(got + (size_t)b * V * es, es);
            ref[b][n] = argmax_row(want + (size_t)b * V * es, es);
            ASSERT_EQ_I64(gen[b][n], ref[b][n]);
        }
    }
    decode_close(&r);
    full_close(&f);
}

PIPIT_TEST(decode_gpt2_matches_full_forward) {
    model m = gpt2_model();
    check_against_full(&m, 1e-5);
}

PIPIT_TEST(decode_llama_gqa_matches_full_forward) {
    model m = llama_model(PIPIT_F32);
    check_against_full(&m, 1e-5);
}

/* In f64 the two differ only by summation order: RoPE's angles, the slot
 * and the keys are right to the last bits. */
PIPIT_TEST(decode_llama_f64_matches_full_forward_to_1e12) {
    model m = llama_model(PIPIT_F64);
    check_against_full(&m, 1e-12);
}

PIPIT_TEST(decode_refuses_bad_arguments) {
    model m = gpt2_model();
    pipit_decode_graph dg;
    pipit_graph *g = pipit_graph_new();
    ASSERT_STATUS(pipit_gpt2_build_decode(g, &m.gc, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_MSG_HAS("pipit_gpt2_build_decode: out is NULL");
    ASSERT_STATUS(pipit_gpt2_build_decode(NULL, &m.gc, &dg), PIPIT_STATUS_MISUSE);
    ASSERT_TRUE(dg.logits.id < 0 && dg.kv.id < 0 && dg.loss.id < 0);
    m.gc.stages = 2;
    ASSERT_STATUS(pipit_gpt2_build_decode(g, &m.gc, &dg), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pipit_gpt2_build_decode: a decoding graph is one stage");
    m.gc.stages = 1, m.gc.heads = 3;
    ASSERT_STATUS(pipit_gpt2_build_decode(g, &m.gc, &dg), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("dim 16 is not divisible by heads 3");
    pipit_graph_free(g);

    model l = llama_model(PIPIT_F32);
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    ASSERT_STATUS(pipit_llama_build_decode(g, &l.lc, &dg), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pipit_llama_build_decode: a decoding graph runs on one rank per stage");
    pipit_graph_free(g);

    decode_run r;
    ASSERT_OK(decode_open(&r, &l));
    float lg[B * V];
    int32_t tok[B] = {1, 2};
    ASSERT_STATUS(pipit_decoder_step(r.d, tok, lg, sizeof lg - 4), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pipit_decoder_step: logits of 2 x 50 need 400 bytes, caller passed 396");
    ASSERT_STATUS(pipit_decoder_step(r.d, NULL, lg, sizeof lg), PIPIT_STATUS_MISUSE);
    ASSERT_STATUS(pipit_decoder_step(NULL, tok, lg, sizeof lg), PIPIT_STATUS_MISUSE);
    int32_t bad[B] = {1, V}; /* outside the vocabulary: refused, the cache as it was */
    ASSERT_STATUS(pipit_decoder_step(r.d, bad, lg, sizeof lg), PIPIT_STATUS_INVALID);
    ASSERT_EQ_I64(pipit_decoder_length(r.d), 0);
    float a[B * V], b2[B * V];
    ASSERT_OK(pipit_decoder_step(r.d, tok, a, sizeof a));
    ASSERT_OK(pipit_decoder_reset(r.d));
    ASSERT_OK(pipit_decoder_step(r.d, tok, b2, sizeof b2));
    ASSERT_TRUE(memcmp(a, b2, sizeof a) == 0);
    ASSERT_EQ_I64(pipit_decoder_length(NULL), -1);
    ASSERT_EQ_I64(pipit_decoder_capacity(NULL), -1);
    ASSERT_STATUS(pipit_decoder_reset(NULL), PIPIT_STATUS_MISUSE);
    pipit_decoder *d2 = (pipit_decoder *)&r;
    ASSERT_STATUS(pipit_decoder_new(r.p, NULL, &d2), PIPIT_STATUS_MISUSE);
    ASSERT_TRUE(d2 == NULL);
    pipit_decode_graph mixed = r.dg;
    mixed.kv = r.dg.logits; /* not a decoding graph's shapes */
    ASSERT_STATUS(pipit_decoder_new(r.p, &mixed, &d2), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("not a decoding graph's");
    pipit_decoder_free(NULL);
    decode_close(&r);
}

/* ---- the sampler ---- */

/* The draw pipit_sample_token documents, by hand: u from one splitmix64
 * call on the seed. */
static double u_of(uint64_t seed) { return (double)(mix(&seed) >> 11) * 0x1.0p-53; }

/* Probabilities 0.5, 0.3, 0.15, 0.05 (relative to the first: 1, 0.6, 0.3, 0.1). */
static void four_logits(float *lg) {
    const double p[4] = {0.5, 0.3, 0.15, 0.05};
    for (int i = 0; i < 4; i++) lg[i] = (float)log(p[i]);
}

PIPIT_TEST(sample_top_p_hand_computed) {
    float lg[4];
    four_logits(lg);
    int seen[4] = {0};
    for (uint64_t seed = 0; seed < 400; seed++) {
        double u = u_of(seed);
        int32_t tok = -1;
        uint64_t st = seed;
        /* top_p 0.7: 0.5 < 0.7 <= 0.5 + 0.3, so tokens 0 and 1 remain, renormalised 0.625 / 0.375 */
        ASSERT_OK(pipit_sample_token(lg, 4, &(pipit_sampling){1.0, 0, 0.7}, &st, &tok));
        ASSERT_EQ_I64(tok, u < 0.625 ? 0 : 1);
        uint64_t st2 = seed;
        (void)mix(&st2);
        ASSERT_TRUE(st == st2); /* one call of the generator per draw */
        seen[tok]++;
        /* top_p 0.85: 0.8 < 0.85 <= 0.95: three remain, 0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95 */
        st = seed;
        ASSERT_OK(pipit_sample_token(lg, 4, &(pipit_sampling){1.0, 0, 0.85}, &st, &tok));
        ASSERT_EQ_I64(tok, u < 0.5 / 0.95 ? 0 : u < 0.8 / 0.95 ? 1 : 2);
        /* top_p 1 (and 0): all four */
        st = seed;
        ASSERT_OK(pipit_sample_token(lg, 4, &(pipit_sampling){1.0, 0, 1.0}, &st, &tok));
        ASSERT_EQ_I64(tok, u < 0.5 ? 0 : u < 0.8 ? 1 : u < 0.95 ? 2 : 3);
        int32_t tok0;
        st = seed;
        ASSERT_OK(pipit_sample_token(lg, 4, &(pipit_sampling){1.0, 0, 0}, &st, &tok0));
        ASSERT_EQ_I64(tok0, tok);
        /* top_p below the largest probability: the most likely token alone */
        st = seed;
        ASSERT_OK(pipit_sample_token(lg, 4, &(pipit_sampling){1.0, 0, 0.2}, &st, &tok));
        ASSERT_EQ_I64(tok, 0);
        /* top-k first (tokens 0 and 1: 0.625 / 0.375), then top_p 0.6 of those: token 0 alone */
        st = seed;
        ASSERT_OK(pipit_sample_token(lg, 4, &(pipit_sampling){1.0, 2, 0.6}, &st, &tok));
        ASSERT_EQ_I64(tok, 0);
        st = seed;
        ASSERT_OK(pipit_sample_token(lg, 4, &(pipit_sampling){1.0, 2, 0}, &st, &tok));
        ASSERT_EQ_I64(tok, u < 0.625 ? 0 : 1);
        /* temperature 2: probabilities ~ sqrt(p): 1, sqrt(0.6), sqrt(0.3), sqrt(0.1) before top-p 0.5 */
        double q[4] = {1, sqrt(0.6), sqrt(0.3), sqrt(0.1)}, z = q[0] + q[1] + q[2] + q[3];
        int keep = q[0] >= 0.5 * z ? 1 : q[0] + q[1] >= 0.5 * z ? 2 : 3;
        double zk = 0, acc = 0;
        for (int i = 0; i < keep; i++) zk += q[i];
        int want = keep - 1;
        for (int i = 0; i < keep; i++)
            if (u * zk < (acc += q[i])) {
                want = i;
                break;
            }
        st = seed;
        ASSERT_OK(pipit_sample_token(lg, 4, &(pipit_sampling){2.0, 0, 0.5}, &st, &tok));
        ASSERT_EQ_I64(tok, want);
    }
    ASSERT_TRUE(seen[0] > 200 && seen[1] > 100); /* both drawn, about 5 : 3 */
}

PIPIT_TEST(sample_argmax_masks_and_refusals) {
    float lg[4] = {0.5f, 2.0f, 2.0f, -1.0f};
    uint64_t st = 5;
    int32_t tok;
    ASSERT_OK(pipit_sample_token(lg, 4, &(pipit_sampling){0}, &st, &tok));
    ASSERT_EQ_I64(tok, 1); /* the lowest id among equal maxima */
    ASSERT_TRUE(st == 5);  /* no draw */
    float masked[4] = {-INFINITY, 0.0f, -INFINITY, 0.0f};
    for (uint64_t seed = 0; seed < 50; seed++) {
        st = seed;
        ASSERT_OK(pipit_sample_token(masked, 4, &(pipit_sampling){1.0, 0, 0}, &st, &tok));
        ASSERT_TRUE(tok == 1 || tok == 3);
        ASSERT_EQ_I64(tok, u_of(seed) < 0.5 ? 1 : 3);
    }
    ASSERT_OK(pipit_sample_token(masked, 4, &(pipit_sampling){0}, &st, &tok));
    ASSERT_EQ_I64(tok, 1);
    float nan_row[3] = {0, NAN, 1}, inf_row[2] = {0, INFINITY}, none[2] = {-INFINITY, -INFINITY};
    ASSERT_STATUS(pipit_sample_token(nan_row, 3, &(pipit_sampling){1.0, 0, 0}, &st, &tok), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pipit_sample_token: logit 1 is NaN");
    ASSERT_STATUS(pipit_sample_token(inf_row, 2, &(pipit_sampling){0}, &st, &tok), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("logit 1 is +inf");
    ASSERT_STATUS(pipit_sample_token(none, 2, &(pipit_sampling){1.0, 0, 0}, &st, &tok), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("all 2 logits are -inf");
    const pipit_sampling bad[] = {{-1, 0, 0}, {INFINITY, 0, 0}, {NAN, 0, 0}, {1, -1, 0},
                                  {1, 0, 1.5}, {1, 0, -0.1}, {1, 0, NAN}};
    const char *why[] = {"temperature -1", "temperature inf", "temperature nan", "top_k -1",
                         "top_p 1.5 must be in (0, 1]", "top_p -0.1", "top_p nan"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_STATUS(pipit_sample_token(lg, 4, &bad[i], &st, &tok), PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS(why[i]);
    }
    ASSERT_STATUS(pipit_sample_token(lg, 0, &(pipit_sampling){0}, &st, &tok), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_sample_token(NULL, 4, &(pipit_sampling){0}, &st, &tok), PIPIT_STATUS_MISUSE);
    ASSERT_STATUS(pipit_sample_token(lg, 4, NULL, &st, &tok), PIPIT_STATUS_MISUSE);
    ASSERT_STATUS(pipit_sample_token(lg, 4, &(pipit_sampling){0}, NULL, &tok), PIPIT_STATUS_MISUSE);
    ASSERT_STATUS(pipit_sample_token(lg, 4, &(pipit_sampling){0}, &st, NULL), PIPIT_STATUS_MISUSE);
}
