/*
 * gpt2.c — the GPT-2 graph builder and initializer. Weight layouts follow
 * Hugging Face's Conv1D ([in, out]), so checkpoints load by name with no
 * transposes, and the lm head reuses wte (logits = h @ wte^T).
 */
#include "pipit_gpt2.h"
#include "pipit_cp.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "models/decode.h"
#include "models/models.h"
#include "util/common.h"

static pipit_status gpt2_check_impl(const pipit_gpt2_config *c) {
    if (!c) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_gpt2_check: config is NULL");
    if (c->vocab < 1 || c->ctx < 1 || c->layers < 1 || c->heads < 1 || c->dim < 1 || c->batch < 1)
        return pipit__err(PIPIT_STATUS_INVALID, "gpt2: vocab, ctx, layers, heads, dim and batch must be >= 1");
    if (c->dtype != PIPIT_F32 && c->dtype != PIPIT_F64)
        return pipit__err(PIPIT_STATUS_INVALID, "gpt2: dtype %d is not f32 or f64", (int)c->dtype);
    if (c->fused_head != 0 && c->fused_head != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "gpt2: fused_head %d is not 0 (matmul head) or 1 (fused head)",
                          c->fused_head);
    if (c->dim % c->heads)
        return pipit__err(PIPIT_STATUS_INVALID, "gpt2: dim %d is not divisible by heads %d", c->dim, c->heads);
    if (c->max_ctx < c->ctx)
        return pipit__err(PIPIT_STATUS_INVALID, "gpt2: ctx %d exceeds max_ctx %d (the rows of 'wpe.weight', one per position)", c->ctx,
                          c->max_ctx);
    if (c->stages < 1 || c->stages > c->layers)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "gpt2: %d pipeline stages need at least %d layers (have %d): stages hold whole blocks",
                          c->stages, c->stages, c->layers);
    return PIPIT_STATUS_OK;
}

pipit_status pipit_gpt2_check(const pipit_gpt2_config *c) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(gpt2_check_impl(c), gen0, __func__);
}

/* Heads split q, k, v (and so C, 3C and 4C); the vocabulary splits wte. */
static pipit_status check_tp(const pipit_gpt2_config *c, int T) {
    pipit__tp_count counts[] = {{"heads", c->heads}, {"vocab", c->vocab}};
    return pipit__models_tp_check("gpt2", T, counts, 2);
}

int pipit_gpt2_stage_first_layer(const pipit_gpt2_config *c, int s) {
    return pipit__models_first_layer(!c, c ? c->layers : 0, c ? c->stages : 0, s, __func__);
}

static pipit_val param(pipit_graph *g, const pipit_gpt2_config *c, const char *name, int nd,
                       int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    return pipit_param(g, name, c->dtype, nd, shape);
}

/* Megatron's split of a Conv1D x @ W [in, out] + b over the stage's T
 * ranks: none; column-parallel (W's out columns and b split, `parts`
 * blocks each: c_attn's q|k|v is 3); or row-parallel (W's in rows split,
 * the partial products all-reduced before the replicated bias). */
enum { SPLIT_NONE, SPLIT_COLUMNS, SPLIT_ROWS };

static pipit_val linear_split(pipit_graph *g, const pipit_gpt2_config *c, pipit_val x, const char *prefix,
                              int64_t in, int64_t out, int split, int parts) {
    char wn[96], bn[96];
    snprintf(wn, sizeof wn, "%s.weight", prefix);
    snprintf(bn, sizeof bn, "%s.bias", prefix);
    int T = pipit_graph_tensor_parallel(g), cols = split == SPLIT_COLUMNS;
    pipit_val w = pipit__models_param(g, c->dtype, T, wn, 2, in, out, split == SPLIT_NONE ? -1 : cols ? 1 : 0, parts);
    pipit_val b = pipit__models_param(g, c->dtype, T, bn, 1, out, 0, cols ? 0 : -1, parts);
    pipit_val y = pipit_matmul(g, x, w, 0, 0);
    if (split == SPLIT_ROWS) y = pipit__models_tp_sum(g, T, y), b = pipit__models_sp_param(g, b);
    return pipit_bias_add(g, y, b);
}


static pipit_val layernorm(pipit_graph *g, const pipit_gpt2_config *c, pipit_val x, const char *prefix) {
    char wn[96], bn[96];
    snprintf(wn, sizeof wn, "%s.weight", prefix);
    snprintf(bn, sizeof bn, "%s.bias", prefix);
    pipit_val w = param(g, c, wn, 1, c->dim, 0); /* weight first: params keep HF order */
    pipit_val b = param(g, c, bn, 1, c->dim, 0);
    return pipit_layernorm(g, x, pipit__models_sp_param(g, w), pipit__models_sp_param(g, b), 1e-5);
}

/* A decoding graph's attention of the new position (decode.h), from its
 * q | k | v [B,1,3C]. */
static pipit_val decode_attention(pipit__decode *d, const pipit_gpt2_config *c, pipit_val qkv, int l) {
    pipit_val x[3];
    int64_t C = c->dim;
    pipit_split(d->g, qkv, 2, 3, (int64_t[]){C, C, C}, x); /* on failure x[] is invalid: the graph is poisoned */
    return pipit__decode_attend(d, l, x[0], x[1], pipit__decode_place(d, x[1]), x[2], pipit__decode_place(d, x[2]),
                                c->heads, c->heads);
}

/* With T > 1 ranks per stage each holds H/T heads and 4C/T MLP columns:
 * the block's input enters the sharded regions through tp_copy, and the
 * row-parallel projections leave them through tp_sum. dec: a decoding
 * graph's (NULL in the training graph). */
static pipit_val block(pipit_graph *g, const pipit_gpt2_config *c, pipit_val x, int l, pipit__decode *dec,
                       pipit_val docs) {
    char pre[64];
    int64_t C = c->dim;
    int T = pipit_graph_tensor_parallel(g), tp = T > 1;
    snprintf(pre, sizeof pre, "h.%d.ln_1", l);
    pipit_val h = pipit__models_tp_copy(g, T, layernorm(g, c, x, pre));
    snprintf(pre, sizeof pre, "h.%d.attn.c_attn", l);
    pipit_val qkv = linear_split(g, c, h, pre, C, 3 * C, tp ? SPLIT_COLUMNS : SPLIT_NONE, 3);
    if (dec) h = decode_attention(dec, c, qkv, l);
    else if (pipit_graph_context_parallel(g) > 1) { /* context parallelism: k, v (and ids) gathered over the group */
        int64_t w = C / T;
        pipit_val q = pipit_slice(g, qkv, 2, 0, w), k = pipit_slice(g, qkv, 2, w, w), v = pipit_slice(g, qkv, 2, 2 * w, w);
        pipit_attention_opts o = {c->heads / T, 0, 1, 0};
        h = docs.id >= 0 ? pipit_attention_cp_docs(g, q, k, v, docs, &o) : pipit_attention_cp(g, q, k, v, &o);
    } else if (docs.id >= 0) /* packed documents: q | k | v of H/T heads each */
        h = pipit_attention_docs(g, qkv, docs, &(pipit_attention_opts){c->heads / T, c->heads / T, 1, 0});
    else h = pipit_attention(g, qkv, c->heads / T);
    snprintf(pre, sizeof pre, "h.%d.attn.c_proj", l);
    x = pipit_add(g, x, linear_split(g, c, h, pre, C, C, tp ? SPLIT_ROWS : SPLIT_NONE, 1));
    snprintf(pre, sizeof pre, "h.%d.ln_2", l);
    h = pipit__models_tp_copy(g, T, layernorm(g, c, x, pre));
    snprintf(pre, sizeof pre, "h.%d.mlp.c_fc", l);
    h = pipit_gelu(g, linear_split(g, c, h, pre, C, 4 * C, tp ? SPLIT_COLUMNS : SPLIT_NONE, 1));
    snprintf(pre, sizeof pre, "h.%d.mlp.c_proj", l);
    return pipit_add(g, x, linear_split(g, c, h, pre, 4 * C, C, tp ? SPLIT_ROWS : SPLIT_NONE, 1));
}

static pipit_val build(pipit_graph *g, const pipit_gpt2_config *c, pipit_val *logits_out, const char *fn);

pipit_val pipit_gpt2_build(pipit_graph *g, const pipit_gpt2_config *c) { return build(g, c, NULL, __func__); }

pipit_val pipit_gpt2_build_logits(pipit_graph *g, const pipit_gpt2_config *c, pipit_val *logits) {
    return build(g, c, logits, __func__);
}

static pipit_val build(pipit_graph *g, const pipit_gpt2_config *c, pipit_val *logits_out, const char *fn) {
    if (logits_out) *logits_out = (pipit_val){g, -1};
    if (!g || !c) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: %s is NULL", fn, g ? "config" : "graph");
        return (pipit_val){g, -1};
    }
    if (pipit_graph_status(g) != PIPIT_STATUS_OK) { /* a bad handle or a poisoned graph */
        pipit__err_prefix("%s", fn);
        return (pipit_val){g, -1};
    }
    if (pipit_gpt2_check(c) != PIPIT_STATUS_OK) {
        pipit__err_prefix("%s", fn);
        return (pipit_val){g, -1};
    }
    int T = pipit_graph_tensor_parallel(g);
    if (check_tp(c, T) != PIPIT_STATUS_OK || pipit__models_sp_check("gpt2", g, c->ctx) != PIPIT_STATUS_OK) {
        pipit__err_prefix("%s", fn);
        return (pipit_val){g, -1};
    }
    int64_t bt[2] = {c->batch, c->ctx};
    pipit_val tok = pipit_input(g, PIPIT_GPT2_TOKENS, PIPIT_I32, 2, bt);
    pipit_val tgt = pipit_input(g, PIPIT_GPT2_TARGETS, PIPIT_I32, 2, bt);
    pipit_val pos = pipit_input(g, PIPIT_GPT2_POSITIONS, PIPIT_I32, 2, bt);
    pipit_val docs = pipit_graph_documents(g) ? pipit_input(g, PIPIT_GPT2_DOCUMENTS, PIPIT_I32, 2, bt) : (pipit_val){g, -1};
    pipit_val wte = pipit__models_param(g, c->dtype, T, "wte.weight", 2, c->vocab, c->dim, 0, 1); /* vocab-parallel */
    pipit_val wpe = param(g, c, "wpe.weight", 2, c->max_ctx, c->dim);
    pipit_val tok_emb = pipit__models_tp_sum(g, T, pipit_embed(g, wte, tok));
    pipit_val x = pipit_add(g, tok_emb, pipit__models_sp_split(g, pipit_embed(g, wpe, pos))); /* SP: [B, S/T, C] */
    int stage = 0;
    for (int l = 0; l < c->layers; l++) {
        if (stage + 1 < c->stages && l == pipit_gpt2_stage_first_layer(c, stage + 1)) {
            x = pipit_yield(g, x);
            stage++;
        }
        x = block(g, c, x, l, NULL, docs);
    }
    x = pipit__models_tp_copy(g, T, layernorm(g, c, x, "ln_f"));
    return pipit__models_head_loss(g, T, c->fused_head, x, wte, tgt, logits_out); /* tied lm head */
}

/* The decoding graph: build()'s ops on one new position per sequence, the
 * attention over the cache (decode.h). */
static pipit_status build_decode(pipit_graph *g, const pipit_gpt2_config *c, pipit_decode_graph *out) {
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "out is NULL");
    *out = (pipit_decode_graph){{g, -1}, {g, -1}, {g, -1}, {g, -1}};
    if (!g || !c) return pipit__err(PIPIT_STATUS_MISUSE, "%s is NULL", g ? "config" : "graph");
    pipit_status s = pipit_graph_status(g);
    if (!s) s = gpt2_check_impl(c);
    pipit__decode d;
    if (!s)
        s = pipit__decode_begin(g, &d, c->layers, c->stages, c->batch, c->ctx, c->dim, c->dtype,
                                "pipit_gpt2_build_decode");
    if (s) return s;
    int64_t b1[2] = {c->batch, 1};
    pipit_val tok = pipit_input(g, PIPIT_DECODE_TOKENS, PIPIT_I32, 2, b1);
    pipit_val pos = pipit_input(g, PIPIT_DECODE_POSITIONS, PIPIT_I32, 2, b1);
    pipit_val wte = param(g, c, "wte.weight", 2, c->vocab, c->dim);
    pipit_val wpe = param(g, c, "wpe.weight", 2, c->max_ctx, c->dim);
    pipit_val x = pipit_add(g, pipit_embed(g, wte, tok), pipit_embed(g, wpe, pos));
    for (int l = 0; l < c->layers; l++) x = block(g, c, x, l, &d, (pipit_val){g, -1});
    pipit_val logits = pipit_matmul_nt(g, layernorm(g, c, x, "ln_f"), wte);
    return pipit__decode_end(&d, logits, out, "pipit_gpt2_build_decode");
}

pipit_status pipit_gpt2_build_decode(pipit_graph *g, const pipit_gpt2_config *c, pipit_decode_graph *out) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(build_decode(g, c, out), gen0, __func__);
}

/* ---- init ---- */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* N(0, 0.02), c_proj weights N(0, 0.02/sqrt(2L)); 1-D params: LN weights
 * 1, biases 0. */
static pipit__init_rule init_rule(const char *name, int ndim, const void *ctx) {
    const pipit_gpt2_config *c = ctx;
    if (ndim == 1) return (pipit__init_rule){0, strstr(name, "ln_") && ends_with(name, ".weight") ? 1.0 : 0.0};
    return (pipit__init_rule){ends_with(name, "c_proj.weight") ? 0.02 / sqrt(2.0 * c->layers) : 0.02, 0};
}

static pipit_status gpt2_init_impl(pipit_program *p, const pipit_gpt2_config *c, uint64_t seed) {
    if (!p || !c) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_gpt2_init: %s is NULL", p ? "config" : "program");
    return pipit__models_init(p, c->dtype, seed, init_rule, c, "pipit_gpt2_init");
}

pipit_status pipit_gpt2_init(pipit_program *p, const pipit_gpt2_config *c, uint64_t seed) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(gpt2_init_impl(p, c, seed), gen0, __func__);
}

int64_t pipit_gpt2_num_params(const pipit_gpt2_config *c) {
    if (!c) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: config is NULL", __func__);
        return 0;
    }
    int64_t C = c->dim, L = c->layers;
    return (int64_t)c->vocab * C + (int64_t)c->max_ctx * C + L * (12 * C * C + 13 * C) + 2 * C;
}

double pipit_gpt2_flops_per_token(const pipit_gpt2_config *c) {
    if (!c) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: config is NULL", __func__);
        return 0;
    }
    /* 6 N per token for the weights that multiply activations (wpe is only
     * gathered, so it is left out, as nanoGPT does), plus attention scores and
     * values: 12 L T C per token (forward and backward, full square), as in
     * the PaLM appendix. bench/torch_step.py counts the same way. */
    double n = (double)pipit_gpt2_num_params(c) - (double)c->max_ctx * c->dim;
    return 6.0 * n + 12.0 * c->layers * c->ctx * (double)c->dim;
}

/* ---- checkpoints and feeds ---- */

static pipit_status gpt2_config_from_checkpoint_impl(const pipit_checkpoint *ck, pipit_gpt2_config *cfg) {
    if (!ck || !cfg)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_gpt2_config_from_checkpoint: NULL %s",
                          ck ? "config" : "checkpoint");
    const char *path = pipit_checkpoint_path(ck);
    int nd_wte = 0, nd_wpe = 0;
    int64_t wte[PIPIT_MAX_DIMS], wpe[PIPIT_MAX_DIMS];
    if (pipit_checkpoint_tensor_shape(ck, "wte.weight", &nd_wte, wte) ||
        pipit_checkpoint_tensor_shape(ck, "wpe.weight", &nd_wpe, wpe) || nd_wte != 2 || nd_wpe != 2)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s': no 2-D 'wte.weight' and 'wpe.weight': not a GPT-2 checkpoint", path);
    int L = 0;
    char name[64];
    for (;; L++) {
        snprintf(name, sizeof name, "h.%d.ln_1.weight", L);
        if (pipit_checkpoint_tensor_shape(ck, name, NULL, NULL)) break;
    }
    if (L == 0)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s': tensor 'h.0.ln_1.weight' is missing: no transformer blocks", path);
    if (wte[0] > INT32_MAX || wte[1] > INT32_MAX || wpe[0] > INT32_MAX)
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': 'wte.weight' or 'wpe.weight' is too large", path);
    int heads = 0;
    if (pipit__models_meta_count(ck, "heads", &heads) < 0) return PIPIT_STATUS_FORMAT;
    cfg->vocab = (int)wte[0];
    cfg->dim = (int)wte[1];
    cfg->max_ctx = (int)wpe[0];
    cfg->layers = L;
    cfg->heads = heads;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_gpt2_config_from_checkpoint(const pipit_checkpoint *ck, pipit_gpt2_config *cfg) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(gpt2_config_from_checkpoint_impl(ck, cfg), gen0, __func__);
}

static pipit_status gpt2_feeds_impl(const pipit_gpt2_config *c, const int32_t *tokens, const int32_t *targets,
                                    int32_t *positions_out, pipit_feed out[3]) {
    if (!c || !tokens || !targets || !positions_out || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_gpt2_feeds: NULL %s",
                          !c ? "config" : !tokens ? "tokens" : !targets ? "targets" : !positions_out ? "positions" : "out");
    if (c->batch < 1 || c->ctx < 1)
        return pipit__err(PIPIT_STATUS_INVALID, "gpt2 feeds: batch %d and ctx %d must be >= 1", c->batch, c->ctx);
    int64_t n = (int64_t)c->batch * c->ctx;
    for (int64_t i = 0; i < n; i++) positions_out[i] = (int32_t)(i % c->ctx);
    size_t nb = (size_t)n * sizeof(int32_t);
    out[0] = (pipit_feed){PIPIT_GPT2_TOKENS, tokens, nb};
    out[1] = (pipit_feed){PIPIT_GPT2_TARGETS, targets, nb};
    out[2] = (pipit_feed){PIPIT_GPT2_POSITIONS, positions_out, nb};
    return PIPIT_STATUS_OK;
}

pipit_status pipit_gpt2_feeds(const pipit_gpt2_config *c, const int32_t *tokens, const int32_t *targets,
                              int32_t *positions_out, pipit_feed out[3]) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(gpt2_feeds_impl(c, tokens, targets, positions_out, out), gen0, __func__);
}
