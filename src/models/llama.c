/*
 * llama.c — the Llama graph builder, initializer and config readers
 * (pipit_llama.h). Weights keep nn.Linear's [out, in] layout under Hugging
 * Face's names, so every projection is x @ W^T (pipit_matmul with
 * trans_b) and files load by name with no transposes. RoPE takes each
 * row's position from its index, so the graph has no positions input.
 */
#include "pipit_llama.h"
#include "pipit_cp.h"

#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>

#include "models/decode.h"
#include "models/llama_moe.h"
#include "models/models.h"
#include "pipit_moe.h"
#include "util/checked.h"
#include "util/common.h"
#include "util/fileio.h"
#include "util/json.h"

static int kv_of(const pipit_llama_config *c) { return c->kv_heads ? c->kv_heads : c->heads; }

/* Meta's rule without the NULL and sign checks (the callers made them). */
static int64_t meta_ffn(const pipit_llama_config *c) {
    if (c->ffn_hidden) return c->ffn_hidden;
    if (c->multiple_of < 1 || !(c->ffn_dim_multiplier >= 0) || !isfinite(c->ffn_dim_multiplier)) return -1;
    double h = floor(2.0 * (4.0 * (double)c->dim) / 3.0); /* int(2 * hidden_dim / 3) */
    if (c->ffn_dim_multiplier > 0) h = floor(c->ffn_dim_multiplier * h);
    if (!(h >= 0) || h > INT32_MAX) return -1;
    int64_t m = c->multiple_of, r = m * (((int64_t)h + m - 1) / m);
    return r > INT32_MAX ? -1 : r;
}

/* The MLP width, 0 with a message when the config gives none. */
static int ffn_hidden(const pipit_llama_config *c) {
    if (c->ffn_hidden < 0 || c->dim < 1) {
        pipit__err(PIPIT_STATUS_INVALID, "llama: ffn_hidden %d must be >= 1 (or 0 for Meta's rule) with dim %d >= 1",
                   c->ffn_hidden, c->dim);
        return 0;
    }
    int64_t f = meta_ffn(c);
    if (f < 1) {
        pipit__err(PIPIT_STATUS_INVALID,
                   "llama: ffn_hidden 0 asks for Meta's rule, which needs multiple_of >= 1 (got %d) and "
                   "ffn_dim_multiplier >= 0 (got %g) giving a width in 1..2^31-1",
                   c->multiple_of, c->ffn_dim_multiplier);
        return 0;
    }
    return (int)f;
}

int pipit_llama_ffn_hidden(const pipit_llama_config *c) {
    if (!c) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: config is NULL", __func__);
        return 0;
    }
    int f = ffn_hidden(c);
    if (f < 1) pipit__err_prefix("%s", __func__);
    return f;
}

/* N with checked arithmetic: 1 and *out, or 0 when it passes 2^62. */
static int count_params(const pipit_llama_config *c, int64_t F, int64_t *out) {
    int64_t C = c->dim, D = c->dim / c->heads, kvd = (int64_t)kv_of(c) * D, emb, per = 0, t, all;
    if (!pipit__mul_i64(C, c->vocab, &emb)) return 0;
    /* q and o: C x C each; k and v: C x kv*D each; gate, up, down: C x F each; two norms */
    if (!pipit__mul_i64(C, 2 * C + 2 * kvd + 2, &per) || !pipit__mul_i64(per, c->layers, &t)) return 0;
    if (c->attn_bias && !pipit__add_i64(t, (C + 2 * kvd) * c->layers, &t)) return 0; /* Qwen2's q, k, v biases */
    for (int l = 0; l < c->layers; l++) { /* dense or MoE MLPs (llama_moe.c) */
        int64_t m;
        if (!pipit__llama_mlp_params(c, l, F, &m) || !pipit__add_i64(t, m, &t)) return 0;
    }
    if ((!c->tied && !pipit__add_i64(emb, emb, &emb)) || !pipit__add_i64(t, emb, &all) || !pipit__add_i64(all, C, &all))
        return 0;
    if (all > ((int64_t)1 << 62)) return 0;
    *out = all;
    return 1;
}

/* pipit_rope_scaled's rule for the scaling, in the config's words. */
static pipit_status rope_scaling_check(const pipit_rope_scaling *r) {
    if (r->factor == 0 && r->low_freq_factor == 0 && r->high_freq_factor == 0 && r->original_max_position_embeddings == 0)
        return PIPIT_STATUS_OK; /* none */
    if (!(r->factor > 0) || !isfinite(r->factor) || !(r->low_freq_factor > 0) ||
        !(r->high_freq_factor > r->low_freq_factor) || !isfinite(r->high_freq_factor) ||
        r->original_max_position_embeddings < 1 || r->original_max_position_embeddings > INT32_MAX)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "llama: rope_scaling (llama3) factor %g, low_freq_factor %g, high_freq_factor %g, "
                          "original_max_position_embeddings %lld: needs factor > 0, 0 < low_freq_factor < "
                          "high_freq_factor, 1 <= original_max_position_embeddings <= 2^31-1 (all zeros: no scaling)",
                          r->factor, r->low_freq_factor, r->high_freq_factor,
                          (long long)r->original_max_position_embeddings);
    return PIPIT_STATUS_OK;
}

static pipit_status llama_check_impl(const pipit_llama_config *c) {
    if (!c) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_llama_check: config is NULL");
    if (c->vocab < 1 || c->ctx < 1 || c->layers < 1 || c->heads < 1 || c->dim < 1 || c->batch < 1)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "llama: vocab %d, ctx %d, layers %d, heads %d, dim %d and batch %d must all be >= 1",
                          c->vocab, c->ctx, c->layers, c->heads, c->dim, c->batch);
    if (c->dtype != PIPIT_F32 && c->dtype != PIPIT_F64)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: dtype %d is not f32 or f64", (int)c->dtype);
    if (c->dim % c->heads)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: dim %d is not divisible by heads %d (head_dim = dim / heads)",
                          c->dim, c->heads);
    if ((c->dim / c->heads) % 2)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "llama: head_dim %d (dim %d / heads %d) is odd: RoPE rotates pairs of channels", c->dim / c->heads,
                          c->dim, c->heads);
    if (c->kv_heads < 0 || c->heads % kv_of(c))
        return pipit__err(PIPIT_STATUS_INVALID,
                          "llama: heads %d is not a multiple of kv_heads %d (each key/value head serves heads / kv_heads "
                          "query heads)",
                          c->heads, c->kv_heads);
    if (c->max_ctx < c->ctx)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: ctx %d exceeds max_ctx %d (max_position_embeddings)", c->ctx,
                          c->max_ctx);
    if (c->stages < 1 || c->stages > c->layers)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "llama: %d pipeline stages need at least %d layers (have %d): stages hold whole blocks",
                          c->stages, c->stages, c->layers);
    if (!(c->norm_eps > 0) || !isfinite(c->norm_eps))
        return pipit__err(PIPIT_STATUS_INVALID, "llama: norm_eps %g must be a positive number", c->norm_eps);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return pipit__err(PIPIT_STATUS_INVALID, "llama: rope_theta %g must be a positive number", c->rope_theta);
    if (rope_scaling_check(&c->rope_scaling)) return PIPIT_STATUS_INVALID;
    if (c->tied != 0 && c->tied != 1) return pipit__err(PIPIT_STATUS_INVALID, "llama: tied %d is not 0 or 1", c->tied);
    if (c->fused_head != 0 && c->fused_head != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: fused_head %d is not 0 (matmul head) or 1 (fused head)",
                          c->fused_head);
    if (c->attn_bias != 0 && c->attn_bias != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "llama: attn_bias %d is not 0 or 1", c->attn_bias);
    if (pipit__llama_moe_check(c)) return PIPIT_STATUS_INVALID;
    int F = ffn_hidden(c);
    if (F < 1) return PIPIT_STATUS_INVALID;
    int64_t n;
    if (!count_params(c, F, &n))
        return pipit__err(PIPIT_STATUS_INVALID, "llama: %d layers of dim %d, ffn %d and vocab %d exceed 2^62 parameters",
                          c->layers, c->dim, F, c->vocab);
    return PIPIT_STATUS_OK;
}

pipit_status pipit_llama_check(const pipit_llama_config *c) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(llama_check_impl(c), gen0, __func__);
}

int pipit_llama_stage_first_layer(const pipit_llama_config *c, int s) {
    return pipit__models_first_layer(!c, c ? c->layers : 0, c ? c->stages : 0, s, __func__);
}

/* ---- the graph ---- */

static pipit_val param(pipit_graph *g, const pipit_llama_config *c, const char *name, int nd, int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    return pipit_param(g, name, c->dtype, nd, shape);
}

/* x @ W^T for the nn.Linear weight "model.layers.<l>.<what>.weight" [out,
 * in], over the stage's T ranks (the graph's T): `axis` 0 splits the out
 * features (column-parallel), 1 the in features (row-parallel: the partial
 * products are all-reduced), -1 none. */
static pipit_val linear(pipit_graph *g, const pipit_llama_config *c, pipit_val x, int l, const char *what, int64_t in,
                        int64_t out, int axis) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, what);
    int T = pipit_graph_tensor_parallel(g);
    pipit_val y = pipit_matmul(g, x, pipit__models_param(g, c->dtype, T, name, 2, out, in, axis, 1), 0, 1);
    return axis == 1 ? pipit__models_tp_sum(g, T, y) : y;
}

/* Heads (query and key/value) split attention, the width the MLP, the
 * vocabulary the embedding and the head. */
static pipit_status check_tp(const pipit_llama_config *c, int T) {
    pipit__tp_count counts[] = {
        {"heads", c->heads}, {"kv_heads", kv_of(c)}, {"ffn_hidden", ffn_hidden(c)}, {"vocab", c->vocab}};
    return pipit__models_tp_check("llama", T, counts, 4);
}

static pipit_val rmsnorm(pipit_graph *g, const pipit_llama_config *c, pipit_val x, const char *name) {
    return pipit_rmsnorm(g, x, pipit__models_sp_param(g, param(g, c, name, 1, c->dim, 0)), c->norm_eps);
}

/* RoPE of the model on x [B,T,heads*D] (row t at position t): the one
 * call the training and the decoding graph share. */
static pipit_val rope(pipit_graph *g, const pipit_llama_config *c, pipit_val x, int heads) {
    return pipit_rope_scaled(g, x, heads, c->rope_theta, 0, &c->rope_scaling);
}

/* A decoding graph's attention of the new position (decode.h): q and k
 * [B,1,*] rotated by RoPE at its position (the model's rope() of the basis
 * row in its slot: pipit__decode_rope_basis, made once per graph). */
static pipit_val decode_attention(pipit__decode *d, const pipit_llama_config *c, pipit_val q, pipit_val k,
                                  pipit_val v, int l) {
    if (d->cos.g == NULL) {
        pipit_val basis = pipit__decode_place(d, pipit__decode_rope_basis(d, c->dim / c->heads));
        pipit__decode_set_rope(d, pipit__decode_row(d, rope(d->g, c, basis, 1)));
    }
    q = pipit__decode_rotate(d, q, c->heads);
    k = pipit__decode_rotate(d, k, kv_of(c));
    return pipit__decode_attend(d, l, q, k, pipit__decode_place(d, k), v, pipit__decode_place(d, v), c->heads,
                                kv_of(c));
}

/* With T > 1 ranks per stage each holds H/T query and KV/T key/value heads
 * (query head h still reads kv head h / (H/KV): both are split in order).
 * dec: a decoding graph's (NULL in the training graph). */
static pipit_val attention(pipit_graph *g, const pipit_llama_config *c, pipit_val x, int l, pipit__decode *dec,
                           pipit_val docs) {
    int64_t C = c->dim, kvd = (int64_t)kv_of(c) * (C / c->heads);
    int T = pipit_graph_tensor_parallel(g), col = T > 1 ? 0 : -1, row = T > 1 ? 1 : -1;
    x = pipit__models_tp_copy(g, T, x);
    pipit_val q = linear(g, c, x, l, "self_attn.q_proj", C, C, col);
    pipit_val k = linear(g, c, x, l, "self_attn.k_proj", C, kvd, col);
    pipit_val v = linear(g, c, x, l, "self_attn.v_proj", C, kvd, col);
    if (c->attn_bias) { /* Qwen2: q, k, v biases (one rank per stage: the build refuses T > 1) */
        char name[96];
        pipit_val *qkv[3] = {&q, &k, &v};
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%c_proj.bias", l, "qkv"[i]);
            *qkv[i] = pipit_bias_add(g, *qkv[i], param(g, c, name, 1, i ? kvd : C, 0));
        }
    }
    pipit_val a;
    if (dec) {
        a = decode_attention(dec, c, q, k, v, l);
    } else if (pipit_graph_context_parallel(g) > 1) { /* context parallelism: global positions, k, v (and the
                                                         document ids) gathered */
        q = pipit_rope_cp(g, q, c->heads / T, c->rope_theta, &c->rope_scaling);
        k = pipit_rope_cp(g, k, kv_of(c) / T, c->rope_theta, &c->rope_scaling);
        pipit_attention_opts o = {c->heads / T, kv_of(c) / T, 1, 0};
        a = docs.id >= 0 ? pipit_attention_cp_docs(g, q, k, v, docs, &o) : pipit_attention_cp(g, q, k, v, &o);
    } else {
        q = rope(g, c, q, c->heads / T);
        k = rope(g, c, k, kv_of(c) / T);
        pipit_attention_opts o = {c->heads / T, kv_of(c) / T, 1, 0};
        if (docs.id >= 0) /* packed documents: one q | k | v row per token */
            a = pipit_attention_docs(g, pipit_concat(g, 3, (pipit_val[]){q, k, v}, 2), docs, &o);
        else a = pipit_attention_qkv(g, q, k, v, &o);
    }
    return linear(g, c, a, l, "self_attn.o_proj", C, C, row);
}

/* down(silu(gate(x)) * up(x)): gate and up column-, down row-parallel. */
static pipit_val mlp(pipit_graph *g, const pipit_llama_config *c, pipit_val x, int l, int64_t F) {
    int T = pipit_graph_tensor_parallel(g), col = T > 1 ? 0 : -1, row = T > 1 ? 1 : -1;
    x = pipit__models_tp_copy(g, T, x);
    pipit_val gate = pipit_silu(g, linear(g, c, x, l, "mlp.gate_proj", c->dim, F, col));
    pipit_val up = linear(g, c, x, l, "mlp.up_proj", c->dim, F, col);
    return linear(g, c, pipit_mul(g, gate, up), l, "mlp.down_proj", F, c->dim, row);
}

static pipit_val block(pipit_graph *g, const pipit_llama_config *c, pipit_val x, int l, int64_t F,
                       pipit__decode *dec, pipit_val docs, pipit_val *aux, pipit_val *choice) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
    x = pipit_add(g, x, attention(g, c, rmsnorm(g, c, x, name), l, dec, docs));
    snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
    pipit_val h = rmsnorm(g, c, x, name);
    return pipit_add(g, x, pipit__llama_is_moe(c, l) ? pipit__llama_moe_mlp(g, c, h, l, F, aux, choice) : mlp(g, c, h, l, F));
}

static pipit_val build(pipit_graph *g, const pipit_llama_config *c, pipit_val *logits_out, pipit_val *choices,
                       const char *fn) {
    if (logits_out) *logits_out = (pipit_val){g, -1};
    if (choices && c)
        for (int l = 0; l < c->layers; l++) choices[l] = (pipit_val){g, -1};
    if (!g || !c) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: %s is NULL", fn, g ? "config" : "graph");
        return (pipit_val){g, -1};
    }
    if (pipit_graph_status(g) != PIPIT_STATUS_OK || llama_check_impl(c) != PIPIT_STATUS_OK) {
        pipit__err_prefix("%s", fn); /* a bad handle, a poisoned graph or a refused config */
        return (pipit_val){g, -1};
    }
    int T = pipit_graph_tensor_parallel(g);
    if (check_tp(c, T) != PIPIT_STATUS_OK || pipit__models_sp_check("llama", g, c->ctx) != PIPIT_STATUS_OK) {
        pipit__err_prefix("%s", fn);
        return (pipit_val){g, -1};
    }
    if (T > 1 && c->attn_bias) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: llama: attention biases (attn_bias, Qwen2) with tensor parallelism (T = %d) "
                   "are not built yet", fn, T);
        return (pipit_val){g, -1};
    }
    if (T > 1 && c->experts > 0 && c->moe_layout != PIPIT_LLAMA_MOE_STACKED) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: llama: tensor parallelism (T = %d) with Hugging Face's per-expert weights "
                   "(moe_layout %d) is not built: each expert is its own param (moe_layout 0 stacks them; its experts "
                   "split their hidden width over the T ranks)", fn, T, c->moe_layout);
        return (pipit_val){g, -1};
    }
    if (T > 1 && c->experts > 0 && pipit_graph_expert_parallel(g) > 1) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: llama: expert parallelism (E = %d) with tensor parallelism (T = %d) is not "
                   "built: an expert param is either split over the EP ranks or over the TP ranks, not both (use one)",
                   fn, pipit_graph_expert_parallel(g), T);
        return (pipit_val){g, -1};
    }
    if (pipit_graph_expert_parallel(g) > 1 && c->moe_layout != PIPIT_LLAMA_MOE_STACKED) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: llama: expert parallelism with Hugging Face's per-expert weights "
                   "(moe_layout %d) is not built: each expert is its own param (moe_layout 0 stacks them)", fn,
                   c->moe_layout);
        return (pipit_val){g, -1};
    }
    int64_t bt[2] = {c->batch, c->ctx}, F = ffn_hidden(c);
    pipit_val tok = pipit_input(g, PIPIT_LLAMA_TOKENS, PIPIT_I32, 2, bt);
    pipit_val tgt = pipit_input(g, PIPIT_LLAMA_TARGETS, PIPIT_I32, 2, bt);
    pipit_val docs = pipit_graph_documents(g) ? pipit_input(g, PIPIT_LLAMA_DOCUMENTS, PIPIT_I32, 2, bt) : (pipit_val){g, -1};
    /* vocab-parallel over T > 1 ranks: each holds V/T rows */
    pipit_val emb = pipit__models_param(g, c->dtype, T, "model.embed_tokens.weight", 2, c->vocab, c->dim, 0, 1);
    pipit_val x = pipit__models_tp_sum(g, T, pipit_embed(g, emb, tok));
    int stage = 0;
    pipit_val aux = {g, -1}; /* the MoE layers' balance terms (llama_moe.c) */
    for (int l = 0; l < c->layers; l++) {
        if (stage + 1 < c->stages && l == pipit_llama_stage_first_layer(c, stage + 1)) {
            x = pipit_yield(g, x);
            if (aux.id >= 0) aux = pipit_yield(g, aux);
            stage++;
        }
        x = block(g, c, x, l, F, NULL, docs, &aux, choices ? &choices[l] : NULL);
    }
    x = pipit__models_tp_copy(g, T, rmsnorm(g, c, x, "model.norm.weight"));
    pipit_val head = c->tied ? emb : pipit__models_param(g, c->dtype, T, "lm_head.weight", 2, c->vocab, c->dim, 0, 1);
    pipit_val loss = pipit__models_head_loss(g, T, c->fused_head, x, head, tgt, logits_out);
    return aux.id >= 0 ? pipit_add(g, loss, pipit_scale(g, aux, c->aux_loss)) : loss;
}

pipit_val pipit_llama_build(pipit_graph *g, const pipit_llama_config *c) { return build(g, c, NULL, NULL, __func__); }

pipit_val pipit_llama_build_logits(pipit_graph *g, const pipit_llama_config *c, pipit_val *logits) {
    return build(g, c, logits, NULL, __func__);
}

pipit_val pipit_llama_build_moe(pipit_graph *g, const pipit_llama_config *c, pipit_val *logits, pipit_val *choices) {
    if (!choices) {
        if (logits) *logits = (pipit_val){g, -1};
        pipit__err(PIPIT_STATUS_MISUSE, "%s: choices is NULL (an array of config->layers values)", __func__);
        return (pipit_val){g, -1};
    }
    return build(g, c, logits, choices, __func__);
}

/* The decoding graph: build()'s ops on one new position per sequence, the
 * attention over the cache (decode.h). */
static pipit_status build_decode(pipit_graph *g, const pipit_llama_config *c, pipit_decode_graph *out) {
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "out is NULL");
    *out = (pipit_decode_graph){{g, -1}, {g, -1}, {g, -1}, {g, -1}};
    if (!g || !c) return pipit__err(PIPIT_STATUS_MISUSE, "%s is NULL", g ? "config" : "graph");
    pipit_status s = pipit_graph_status(g);
    if (!s) s = llama_check_impl(c);
    pipit__decode d;
    int64_t kvd = (int64_t)kv_of(c) * (c->dim / c->heads), F = s ? 0 : ffn_hidden(c);
    if (!s)
        s = pipit__decode_begin(g, &d, c->layers, c->stages, c->batch, c->ctx, kvd, c->dtype,
                                "pipit_llama_build_decode");
    if (s) return s;
    pipit_val tok = pipit_input(g, PIPIT_DECODE_TOKENS, PIPIT_I32, 2, (int64_t[]){c->batch, 1});
    pipit_val emb = param(g, c, "model.embed_tokens.weight", 2, c->vocab, c->dim);
    pipit_val x = pipit_embed(g, emb, tok);
    for (int l = 0; l < c->layers; l++) x = block(g, c, x, l, F, &d, (pipit_val){g, -1}, NULL, NULL);
    x = rmsnorm(g, c, x, "model.norm.weight");
    pipit_val head = c->tied ? emb : param(g, c, "lm_head.weight", 2, c->vocab, c->dim);
    return pipit__decode_end(&d, pipit_matmul_nt(g, x, head), out, "pipit_llama_build_decode");
}

pipit_status pipit_llama_build_decode(pipit_graph *g, const pipit_llama_config *c, pipit_decode_graph *out) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(build_decode(g, c, out), gen0, __func__);
}

/* ---- init, sizes ---- */

/* Hugging Face's _init_weights: Linear and Embedding N(0, initializer_range
 * 0.02); the only 1-D params are RMSNorm weights, which start at 1. */
static pipit__init_rule init_rule(const char *name, int ndim, const void *ctx) {
    (void)ctx;
    size_t n = strlen(name), s = strlen(".route_bias");
    if (n > s && strcmp(name + n - s, ".route_bias") == 0) return (pipit__init_rule){0, 0}; /* the MoE routing bias: 0 */
    if (n > 5 && strcmp(name + n - 5, ".bias") == 0) return (pipit__init_rule){0, 0}; /* Qwen2's q/k/v biases: 0 */
    return ndim == 1 ? (pipit__init_rule){0, 1.0} : (pipit__init_rule){0.02, 0};
}

static pipit_status llama_init_impl(pipit_program *p, const pipit_llama_config *c, uint64_t seed) {
    if (!p || !c) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_llama_init: %s is NULL", p ? "config" : "program");
    return pipit__models_init(p, c->dtype, seed, init_rule, c, "pipit_llama_init");
}

pipit_status pipit_llama_init(pipit_program *p, const pipit_llama_config *c, uint64_t seed) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(llama_init_impl(p, c, seed), gen0, __func__);
}

int64_t pipit_llama_num_params(const pipit_llama_config *c) {
    if (!c) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: config is NULL", __func__);
        return 0;
    }
    int64_t n = 0;
    if (llama_check_impl(c) != PIPIT_STATUS_OK) { /* the count needs a valid config */
        pipit__err_prefix("%s", __func__);
        return 0;
    }
    count_params(c, ffn_hidden(c), &n);
    return n;
}

double pipit_llama_flops_per_token(const pipit_llama_config *c) {
    if (!c) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: config is NULL", __func__);
        return 0;
    }
    int64_t n = pipit_llama_num_params(c);
    if (n == 0) {
        pipit__err_prefix("%s", __func__);
        return 0;
    }
    /* an untied embedding is only gathered; the tied one is also the head */
    double matmul = (double)n - (c->tied ? 0.0 : (double)c->vocab * c->dim);
    /* MoE: model FLOPs count the top_k routed experts a token uses, not all
     * E (empty capacity slots computed on the [E, C] grid are no useful work) */
    for (int l = 0; l < c->layers; l++)
        if (pipit__llama_is_moe(c, l)) matmul -= 3.0 * c->dim * (double)ffn_hidden(c) * (c->experts - c->top_k);
    return 6.0 * matmul + 12.0 * c->layers * c->ctx * (double)c->dim;
}

/* ---- checkpoints, config.json, feeds ---- */

/* Shape of a tensor as [d0, d1] if it is 2-D with int-sized dims; else 0. */
static int shape2(const pipit_checkpoint *ck, const char *name, int64_t d[2]) {
    int nd = 0;
    int64_t s[PIPIT_MAX_DIMS];
    if (pipit_checkpoint_tensor_shape(ck, name, &nd, s) || nd != 2 || s[0] > INT32_MAX || s[1] > INT32_MAX) return 0;
    d[0] = s[0], d[1] = s[1];
    return 1;
}

/* The RoPE scaling pipit records ("rope_type" llama3 and its four
 * numbers; "default": none); cfg's left as it is without "rope_type". */
static pipit_status meta_rope_scaling(const pipit_checkpoint *ck, pipit_llama_config *cfg) {
    const char *type = pipit_checkpoint_meta(ck, "rope_type");
    if (!type) return PIPIT_STATUS_OK;
    if (strcmp(type, "default") == 0) {
        cfg->rope_scaling = (pipit_rope_scaling){0};
        return PIPIT_STATUS_OK;
    }
    if (strcmp(type, "llama3") != 0)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s': metadata 'rope_type' is '%s': pipit implements \"default\" and \"llama3\"",
                          pipit_checkpoint_path(ck), type);
    static const char *const keys[] = {"rope_factor", "rope_low_freq_factor", "rope_high_freq_factor"};
    double v[3];
    int orig = 0;
    for (int i = 0; i < 3; i++) {
        int r = pipit__models_meta_positive(ck, keys[i], &v[i]);
        if (r < 0) return PIPIT_STATUS_FORMAT;
        if (r == 0)
            return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': metadata 'rope_type' is llama3 but '%s' is missing",
                              pipit_checkpoint_path(ck), keys[i]);
    }
    int r = pipit__models_meta_count(ck, "rope_original_max_position_embeddings", &orig);
    if (r < 0) return PIPIT_STATUS_FORMAT;
    if (r == 0)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s': metadata 'rope_type' is llama3 but 'rope_original_max_position_embeddings' "
                          "is missing",
                          pipit_checkpoint_path(ck));
    cfg->rope_scaling = (pipit_rope_scaling){v[0], v[1], v[2], orig};
    return PIPIT_STATUS_OK;
}

/* heads, kv_heads, max_ctx, norm_eps, rope_theta, the RoPE scaling from the metadata pipit writes. */
static pipit_status meta_fields(const pipit_checkpoint *ck, pipit_llama_config *cfg) {
    int heads = 0, kv = 0, max_ctx = 0;
    double eps = 0, theta = 0;
    int h = pipit__models_meta_count(ck, "heads", &heads), k = pipit__models_meta_count(ck, "kv_heads", &kv);
    int m = pipit__models_meta_count(ck, "max_ctx", &max_ctx);
    int e = pipit__models_meta_positive(ck, "norm_eps", &eps), t = pipit__models_meta_positive(ck, "rope_theta", &theta);
    if (h < 0 || k < 0 || m < 0 || e < 0 || t < 0) return PIPIT_STATUS_FORMAT;
    cfg->heads = heads;
    cfg->kv_heads = kv;
    if (m) cfg->max_ctx = max_ctx;
    if (e) cfg->norm_eps = eps;
    if (t) cfg->rope_theta = theta;
    return meta_rope_scaling(ck, cfg);
}

/* Whether the builder of L layers reads the tensor `name` (a param, its
 * optimizer state, or a rotary_emb.inv_freq buffer that RoPE never needs). */
static int llama_uses(const char *name, int L, int tied, const pipit_llama_config *c) {
    if (strncmp(name, "opt.m.", 6) == 0 || strncmp(name, "opt.v.", 6) == 0) return llama_uses(name + 6, L, tied, c);
    if (strcmp(name, "model.embed_tokens.weight") == 0 || strcmp(name, "model.norm.weight") == 0) return 1;
    if (strcmp(name, "lm_head.weight") == 0) return !tied;
    static const char *const per_layer[] = {
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",    "mlp.up_proj.weight",      "mlp.down_proj.weight",    "input_layernorm.weight",
        "post_attention_layernorm.weight", "self_attn.rotary_emb.inv_freq"};
    const char *p = "model.layers.";
    if (strncmp(name, p, strlen(p)) != 0) return 0;
    const char *d = name + strlen(p), *dot = strchr(d, '.');
    if (!dot || dot == d || dot - d > 9 || (*d == '0' && dot - d > 1)) return 0; /* digits, no leading zero */
    long l = 0;
    for (const char *q = d; q < dot; q++) {
        if (*q < '0' || *q > '9') return 0;
        l = 10 * l + (*q - '0');
    }
    if (l >= L) return 0;
    if (pipit__llama_moe_uses(c, (int)l, dot + 1)) return 1;
    if (c->attn_bias && (strcmp(dot + 1, "self_attn.q_proj.bias") == 0 || strcmp(dot + 1, "self_attn.k_proj.bias") == 0 ||
                         strcmp(dot + 1, "self_attn.v_proj.bias") == 0))
        return 1;
    for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++)
        if (strcmp(dot + 1, per_layer[i]) == 0 &&
            !(pipit__llama_is_moe(c, (int)l) && strncmp(per_layer[i], "mlp.", 4) == 0)) /* MoE: no dense MLP */
            return 1;
    return 0;
}

/* Every tensor of the file is one the builder reads (it would otherwise be
 * silently ignored: a Qwen2's biases, a layer past a gap). */
static pipit_status llama_all_used(const pipit_checkpoint *ck, int L, int tied, const pipit_llama_config *c) {
    for (int i = 0, n = pipit_checkpoint_num_tensors(ck); i < n; i++) {
        const char *name = pipit_checkpoint_tensor_name(ck, i);
        if (llama_uses(name, L, tied, c)) continue;
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s': tensor '%s' is not used by the llama builder (LlamaForCausalLM with %d "
                          "layers, %s, %s head%s): another model's weights (o_proj or MLP biases, ...) are refused "
                          "rather than ignored",
                          pipit_checkpoint_path(ck), name, L,
                          c->attn_bias ? "q/k/v biases (Qwen2, from 'model.layers.0.self_attn.q_proj.bias')"
                                       : "no biases (no 'model.layers.0.self_attn.q_proj.bias')",
                          tied ? "a tied" : "an untied", c->experts ? ", mixture of experts" : "");
    }
    return PIPIT_STATUS_OK;
}

static pipit_status llama_config_from_checkpoint_impl(const pipit_checkpoint *ck, pipit_llama_config *cfg) {
    if (!ck || !cfg)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_llama_config_from_checkpoint: NULL %s", ck ? "config" : "checkpoint");
    const char *path = pipit_checkpoint_path(ck);
    int64_t emb[2], gate[2], kp[2];
    if (!shape2(ck, "model.embed_tokens.weight", emb))
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': no 2-D 'model.embed_tokens.weight': not a Llama checkpoint",
                          path);
    int L = 0;
    char name[96];
    for (;; L++) {
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", L);
        if (pipit_checkpoint_tensor_shape(ck, name, NULL, NULL)) break;
    }
    if (L == 0)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s': tensor 'model.layers.0.input_layernorm.weight' is missing: no decoder layers",
                          path);
    pipit_llama_config f = *cfg;
    int64_t moe_F = 0; /* a mixture of experts (llama_moe_ckpt.c): its fields from the metadata */
    if (pipit__llama_moe_from_checkpoint(ck, L, emb[1], &f, &moe_F)) return PIPIT_STATUS_FORMAT;
    if (moe_F && pipit__llama_is_moe(&f, 0)) {
        gate[0] = moe_F;
    } else if (!shape2(ck, "model.layers.0.mlp.gate_proj.weight", gate) || gate[1] != emb[1])
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s': 'model.layers.0.mlp.gate_proj.weight' is missing or not [F, %lld] (hidden size "
                          "from 'model.embed_tokens.weight')",
                          path, (long long)emb[1]);
    else if (moe_F && gate[0] != moe_F)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s': the dense MLP of layer 0 is %lld wide but the experts are %lld: pipit's dense "
                          "and expert MLPs have one width (Qwen2-MoE: intermediate_size = moe_intermediate_size)",
                          path, (long long)gate[0], (long long)moe_F);
    f.attn_bias = pipit_checkpoint_tensor_shape(ck, "model.layers.0.self_attn.q_proj.bias", NULL, NULL) == PIPIT_STATUS_OK;
    if (meta_fields(ck, &f)) return PIPIT_STATUS_FORMAT;
    if (f.heads && emb[1] % f.heads == 0 && shape2(ck, "model.layers.0.self_attn.k_proj.weight", kp)) {
        int64_t D = emb[1] / f.heads;
        if (kp[0] % D || kp[0] / D < 1 || (f.kv_heads && kp[0] / D != f.kv_heads))
            return pipit__err(PIPIT_STATUS_FORMAT,
                              "checkpoint '%s': 'model.layers.0.self_attn.k_proj.weight' has %lld rows, not kv_heads%s%.0d x "
                              "head_dim %lld (heads %d)",
                              path, (long long)kp[0], f.kv_heads ? " " : "", f.kv_heads, (long long)D, f.heads);
        f.kv_heads = (int)(kp[0] / D);
    }
    f.vocab = (int)emb[0];
    f.dim = (int)emb[1];
    f.layers = L;
    f.ffn_hidden = (int)gate[0];
    f.tied = pipit_checkpoint_tensor_shape(ck, "lm_head.weight", NULL, NULL) != PIPIT_STATUS_OK;
    pipit_llama_config used = f; /* a dense file is read as dense, whatever MoE fields cfg holds */
    if (!moe_F) used.experts = 0;
    if (llama_all_used(ck, L, f.tied, &used)) return PIPIT_STATUS_FORMAT;
    *cfg = f;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_llama_config_from_checkpoint(const pipit_checkpoint *ck, pipit_llama_config *cfg) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(llama_config_from_checkpoint_impl(ck, cfg), gen0, __func__);
}

/* config.json's fields, one JSON type each; a refusal names the key. */
typedef struct {
    const char *path;
    const cJSON *root;
    pipit_status st;
} hf_ctx;

static const cJSON *hf_get(const hf_ctx *h, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static void hf_fail(hf_ctx *h, pipit_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void hf_fail(hf_ctx *h, pipit_status s, const char *fmt, ...) {
    if (h->st) return; /* the first refusal is the message */
    va_list ap;
    va_start(ap, fmt);
    h->st = pipit__verr(s, fmt, ap);
    va_end(ap);
    pipit__err_prefix("config '%s'", h->path);
}

/* A positive integer field: 1 and *out, 0 when absent (or null). */
static int hf_int(hf_ctx *h, const char *key, int *out) {
    const cJSON *v = hf_get(h, key);
    if (!v) return 0;
    double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!(x >= 1 && x <= INT32_MAX && x == floor(x))) {
        hf_fail(h, PIPIT_STATUS_FORMAT, "\"%s\" must be a positive integer", key);
        return 0;
    }
    *out = (int)x;
    return 1;
}

static int hf_positive(hf_ctx *h, const char *key, double *out) {
    const cJSON *v = hf_get(h, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || !isfinite(v->valuedouble)) {
        hf_fail(h, PIPIT_STATUS_FORMAT, "\"%s\" must be a positive number", key);
        return 0;
    }
    *out = v->valuedouble;
    return 1;
}

/* A boolean that pipit supports only as false (attention_bias, mlp_bias). */
static void hf_refuse_true(hf_ctx *h, const char *key, const char *why) {
    const cJSON *v = hf_get(h, key);
    if (v && !cJSON_IsFalse(v)) hf_fail(h, PIPIT_STATUS_INVALID, "\"%s\" is not false: %s", key, why);
}

/* A string that pipit supports only as `want` (model_type, hidden_act). */
static void hf_refuse_other(hf_ctx *h, const char *key, const char *want, const char *why) {
    const cJSON *v = hf_get(h, key);
    if (v && (!cJSON_IsString(v) || strcmp(v->valuestring, want) != 0))
        hf_fail(h, PIPIT_STATUS_INVALID, "\"%s\" is %s%s%s, not \"%s\": %s", key, cJSON_IsString(v) ? "\"" : "",
                cJSON_IsString(v) ? v->valuestring : "not a string", cJSON_IsString(v) ? "\"" : "", want, why);
}

/* The model types pipit reads: Llama, Qwen2 (q/k/v biases), Mixtral and
 * Qwen2-MoE (mixtures of experts; pipit_llama_config.moe_layout). */
enum { HF_LLAMA, HF_QWEN2, HF_MIXTRAL, HF_QWEN2_MOE };
static const char *const hf_types[] = {"llama", "qwen2", "mixtral", "qwen2_moe"};

static int hf_model_type(hf_ctx *h) {
    const cJSON *v = hf_get(h, "model_type");
    if (!v) return HF_LLAMA;
    for (int i = 0; cJSON_IsString(v) && i < 4; i++)
        if (strcmp(v->valuestring, hf_types[i]) == 0) return i;
    hf_fail(h, PIPIT_STATUS_INVALID,
            "\"model_type\" is %s%s%s: pipit builds \"llama\" (LlamaForCausalLM), \"qwen2\" (Qwen2ForCausalLM), "
            "\"mixtral\" (MixtralForCausalLM) and \"qwen2_moe\" (Qwen2MoeForCausalLM)",
            cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "not a string", cJSON_IsString(v) ? "\"" : "");
    return HF_LLAMA;
}

/* A boolean (absent: dflt). */
static int hf_bool(hf_ctx *h, const char *key, int dflt) {
    const cJSON *v = hf_get(h, key);
    if (!v) return dflt;
    if (!cJSON_IsBool(v)) hf_fail(h, PIPIT_STATUS_FORMAT, "\"%s\" must be true or false", key);
    return cJSON_IsTrue(v);
}

/* A number >= 0 (absent: dflt). */
static double hf_nonneg(hf_ctx *h, const char *key, double dflt) {
    const cJSON *v = hf_get(h, key);
    if (!v) return dflt;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || !isfinite(v->valuedouble)) {
        hf_fail(h, PIPIT_STATUS_FORMAT, "\"%s\" must be a number >= 0", key);
        return dflt;
    }
    return v->valuedouble;
}

/* The Qwen2 attention and the mixture of experts of Mixtral and Qwen2-MoE
 * (transformers' defaults for an absent key); what pipit lacks, refused
 * naming the key. */
static void hf_family(hf_ctx *h, int type, pipit_llama_config *f, int *has) {
    f->attn_bias = type == HF_QWEN2 || type == HF_QWEN2_MOE;
    f->experts = f->top_k = f->dropless = f->shared_experts = f->moe_every = f->router = 0;
    f->moe_layout = f->shared_gate = f->route_unnormalized = 0, f->capacity_factor = f->aux_loss = 0;
    if (f->attn_bias && hf_bool(h, "use_sliding_window", 0))
        hf_fail(h, PIPIT_STATUS_INVALID, "\"use_sliding_window\" is true: pipit has no sliding-window attention");
    if (type == HF_LLAMA || type == HF_QWEN2) return;
    *has |= PIPIT_LLAMA_HAS_MOE;
    int mix = type == HF_MIXTRAL;
    f->moe_layout = mix ? PIPIT_LLAMA_MOE_MIXTRAL : PIPIT_LLAMA_MOE_QWEN2;
    f->experts = mix ? 8 : 60, f->top_k = mix ? 2 : 4; /* MixtralConfig's and Qwen2MoeConfig's defaults */
    hf_int(h, mix ? "num_local_experts" : "num_experts", &f->experts);
    hf_int(h, "num_experts_per_tok", &f->top_k);
    f->dropless = 1; /* transformers computes every choice: nothing dropped */
    f->router = PIPIT_ROUTER_SOFTMAX;
    /* the balance loss joins transformers' loss only with output_router_logits */
    double coef = hf_nonneg(h, "router_aux_loss_coef", 0.001);
    f->aux_loss = hf_bool(h, "output_router_logits", 0) ? coef : 0;
    if (mix) {
        if (hf_nonneg(h, "router_jitter_noise", 0) != 0)
            hf_fail(h, PIPIT_STATUS_INVALID, "\"router_jitter_noise\" is not 0: pipit's router has no jitter");
        int w = 0, maxp = f->max_ctx;
        if (hf_int(h, "sliding_window", &w) && w < maxp)
            hf_fail(h, PIPIT_STATUS_INVALID,
                    "\"sliding_window\" %d is less than max_position_embeddings %d: pipit has no sliding-window "
                    "attention (null, or at least the positions, is full attention)",
                    w, maxp);
        return;
    }
    f->route_unnormalized = !hf_bool(h, "norm_topk_prob", 0); /* absent: Qwen2MoeConfig's default, false */
    const cJSON *only = hf_get(h, "mlp_only_layers");
    if (only && (!cJSON_IsArray(only) || cJSON_GetArraySize(only) != 0))
        hf_fail(h, PIPIT_STATUS_INVALID,
                "\"mlp_only_layers\" is not empty: pipit's dense layers are every layer but each "
                "decoder_sparse_step-th (moe_every), not a list");
    int step = 1, moe_f = 1408, shared = 5632, dense = f->ffn_hidden;
    hf_int(h, "decoder_sparse_step", &step);
    hf_int(h, "moe_intermediate_size", &moe_f);
    const cJSON *sv = hf_get(h, "shared_expert_intermediate_size");
    if (sv && cJSON_IsNumber(sv) && sv->valuedouble == 0) shared = 0;
    else hf_int(h, "shared_expert_intermediate_size", &shared);
    f->moe_every = step;
    if (step > 1 && (*has & PIPIT_LLAMA_HAS_FFN) && dense != moe_f)
        hf_fail(h, PIPIT_STATUS_INVALID,
                "\"intermediate_size\" %d (the dense layers') differs from \"moe_intermediate_size\" %d with "
                "decoder_sparse_step %d: pipit's dense and expert MLPs have one width",
                dense, moe_f, step);
    if (shared == 0 || shared % moe_f)
        hf_fail(h, PIPIT_STATUS_INVALID,
                "\"shared_expert_intermediate_size\" %d is not a positive multiple of \"moe_intermediate_size\" %d: "
                "pipit's shared expert is shared_experts x the experts' width",
                shared, moe_f);
    else f->shared_experts = shared / moe_f;
    f->shared_gate = 1; /* Qwen2-MoE's sigmoid shared_expert_gate */
    f->ffn_hidden = moe_f, *has |= PIPIT_LLAMA_HAS_FFN;
}

/* What pipit does not implement, each refused with its key. */
static void hf_unsupported(hf_ctx *h, int hidden, int heads) {
    hf_refuse_other(h, "hidden_act", "silu", "pipit's MLP is SwiGLU (SiLU gate)");
    hf_refuse_true(h, "attention_bias", "pipit's q, k, v and o projections have no bias (Qwen2's q/k/v biases: "
                                        "model_type \"qwen2\")");
    hf_refuse_true(h, "mlp_bias", "pipit's gate, up and down projections have no bias");
    const cJSON *d = hf_get(h, "attention_dropout");
    if (d && (!cJSON_IsNumber(d) || d->valuedouble != 0))
        hf_fail(h, PIPIT_STATUS_INVALID, "\"attention_dropout\" is not 0: pipit has no dropout");
    int hd = 0;
    if (hf_int(h, "head_dim", &hd) && heads && (int64_t)hd * heads != hidden)
        hf_fail(h, PIPIT_STATUS_INVALID,
                "\"head_dim\" %d is not hidden_size %d / num_attention_heads %d: pipit derives the head size from "
                "the width",
                hd, hidden, heads);
}

/* ---- RoPE in config.json ----
 * transformers < 5 writes "rope_theta" at the top and "rope_scaling" (null
 * or {"rope_type" (once "type"), "factor", ...}); transformers >= 5 writes
 * "rope_parameters": {"rope_theta", "rope_type", ...}. Each setting is
 * read from every place it may be; two places that disagree are refused. */

enum { ROPE_TOP, ROPE_SCALING, ROPE_PARAMS, ROPE_PLACES };
static const char *const rope_place[ROPE_PLACES] = {"", "rope_scaling.", "rope_parameters."};

static int json_same(const cJSON *a, const cJSON *b) {
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
    if (cJSON_IsString(a) && cJSON_IsString(b)) return strcmp(a->valuestring, b->valuestring) == 0;
    return cJSON_Compare(a, b, 1);
}

/* The value of `key` (or its older spelling `alt`) wherever RoPE settings
 * live (the top level only for rope_theta), or NULL; its place into where. */
static const cJSON *rope_get(hf_ctx *h, const cJSON *const obj[ROPE_PLACES], const char *key, const char *alt,
                             char *where, size_t n) {
    const cJSON *found = NULL;
    char first[96] = "";
    for (int p = 0; p < ROPE_PLACES; p++) {
        if (!obj[p] || (p == ROPE_TOP && strcmp(key, "rope_theta") != 0)) continue;
        for (int k = 0; k < 2; k++) {
            const char *name = k ? alt : key;
            const cJSON *v = name ? cJSON_GetObjectItemCaseSensitive(obj[p], name) : NULL;
            if (!v || cJSON_IsNull(v)) continue;
            char here[96];
            snprintf(here, sizeof here, "%s%s", rope_place[p], name);
            if (found && !json_same(found, v)) {
                hf_fail(h, PIPIT_STATUS_INVALID, "\"%s\" and \"%s\" disagree: which one was meant?", first, here);
                return NULL;
            }
            if (!found) found = v, snprintf(first, sizeof first, "%s", here);
        }
    }
    snprintf(where, n, "%s", first);
    return found;
}

/* A number > 0 (an integer if `integer`) at `where`; 0 if absent. */
static int rope_number(hf_ctx *h, const cJSON *v, const char *where, int integer, double *out) {
    if (!v) return 0;
    double x = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!(x > 0) || !isfinite(x) || (integer && (x != floor(x) || x > INT32_MAX))) {
        hf_fail(h, PIPIT_STATUS_FORMAT, "\"%s\" must be a positive %s", where,
                integer ? "integer up to 2^31-1" : "number");
        return 0;
    }
    *out = x;
    return 1;
}

/* rope_theta into f (and PIPIT_LLAMA_HAS_ROPE_THETA), the rope_type's
 * scaling into f->rope_scaling (and PIPIT_LLAMA_HAS_ROPE_SCALING). */
static void hf_rope(hf_ctx *h, pipit_llama_config *f, int *has) {
    const cJSON *obj[ROPE_PLACES] = {h->root, hf_get(h, "rope_scaling"), hf_get(h, "rope_parameters")};
    for (int p = ROPE_SCALING; p < ROPE_PLACES; p++) {
        if (obj[p] && !cJSON_IsObject(obj[p])) {
            hf_fail(h, PIPIT_STATUS_FORMAT, "\"%.*s\" must be an object or null", (int)strlen(rope_place[p]) - 1,
                    rope_place[p]);
            return;
        }
        static const char *const known[] = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor",
                                            "high_freq_factor", "original_max_position_embeddings"};
        for (const cJSON *k = obj[p] ? obj[p]->child : NULL; k; k = k->next) {
            size_t i = 0;
            while (i < sizeof known / sizeof known[0] && strcmp(k->string, known[i]) != 0) i++;
            if (i == sizeof known / sizeof known[0]) {
                hf_fail(h, PIPIT_STATUS_INVALID,
                        "\"%s%s\": pipit does not implement it (RoPE reads rope_type, rope_theta and llama3's "
                        "factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)",
                        rope_place[p], k->string);
                return;
            }
        }
    }
    char where[96];
    double theta = 0;
    if (rope_number(h, rope_get(h, obj, "rope_theta", NULL, where, sizeof where), where, 0, &theta))
        f->rope_theta = theta, *has |= PIPIT_LLAMA_HAS_ROPE_THETA;
    const cJSON *type = rope_get(h, obj, "rope_type", "type", where, sizeof where);
    if (h->st) return;
    if (type && !cJSON_IsString(type)) {
        hf_fail(h, PIPIT_STATUS_FORMAT, "\"%s\" must be a string", where);
        return;
    }
    static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings"};
    const cJSON *v[4];
    char at[4][96];
    for (int i = 0; i < 4; i++) v[i] = rope_get(h, obj, keys[i], NULL, at[i], sizeof at[i]);
    if (h->st) return;
    int llama3 = type && strcmp(type->valuestring, "llama3") == 0;
    if (type && !llama3 && strcmp(type->valuestring, "default") != 0) {
        hf_fail(h, PIPIT_STATUS_INVALID,
                "\"%s\" is \"%s\": pipit implements rope_type \"default\" and \"llama3\" (Llama 3.1 and later)",
                where, type->valuestring);
        return;
    }
    if (type) *has |= PIPIT_LLAMA_HAS_ROPE_SCALING;
    double x[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        if (v[i] && !llama3) {
            hf_fail(h, PIPIT_STATUS_INVALID, "\"%s\" is given but the rope_type is %s%s%s, which does not use it",
                    at[i], type ? "\"" : "", type ? type->valuestring : "not given (default)", type ? "\"" : "");
            return;
        }
        if (llama3 && !v[i]) {
            hf_fail(h, PIPIT_STATUS_FORMAT, "rope_type \"llama3\" needs \"%s\" (beside \"%s\")", keys[i], where);
            return;
        }
        if (llama3 && !rope_number(h, v[i], at[i], i == 3, &x[i])) return;
    }
    if (llama3 && !(x[2] > x[1])) {
        hf_fail(h, PIPIT_STATUS_INVALID, "\"%s\" %g must exceed \"%s\" %g", at[2], x[2], at[1], x[1]);
        return;
    }
    f->rope_scaling = llama3 ? (pipit_rope_scaling){x[0], x[1], x[2], (int64_t)x[3]} : (pipit_rope_scaling){0};
}

static pipit_status llama_config_from_hf_impl(const char *config_json, pipit_llama_config *cfg, int *present) {
    if (!config_json || !cfg)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_llama_config_from_hf: NULL %s", cfg ? "path" : "config");
    char *text = NULL;
    pipit_status s = pipit__read_text(config_json, "config", &text);
    if (s) return s;
    char what[4200];
    snprintf(what, sizeof what, "config '%s'", config_json);
    cJSON *root = NULL;
    s = pipit__json_parse(text, strlen(text), what, &root);
    pipit__free(text);
    if (s) return s;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pipit__err(PIPIT_STATUS_FORMAT, "config '%s': not a JSON object (Hugging Face config.json)", config_json);
    }
    hf_ctx h = {config_json, root, PIPIT_STATUS_OK};
    pipit_llama_config f = *cfg;
    int has = 0;
    has |= hf_int(&h, "vocab_size", &f.vocab) ? PIPIT_LLAMA_HAS_VOCAB : 0;
    has |= hf_int(&h, "hidden_size", &f.dim) ? PIPIT_LLAMA_HAS_DIM : 0;
    has |= hf_int(&h, "intermediate_size", &f.ffn_hidden) ? PIPIT_LLAMA_HAS_FFN : 0;
    has |= hf_int(&h, "num_hidden_layers", &f.layers) ? PIPIT_LLAMA_HAS_LAYERS : 0;
    has |= hf_int(&h, "num_attention_heads", &f.heads) ? PIPIT_LLAMA_HAS_HEADS : 0;
    has |= hf_int(&h, "max_position_embeddings", &f.max_ctx) ? PIPIT_LLAMA_HAS_MAX_CTX : 0;
    has |= hf_positive(&h, "rms_norm_eps", &f.norm_eps) ? PIPIT_LLAMA_HAS_NORM_EPS : 0;
    hf_rope(&h, &f, &has);
    if (hf_int(&h, "num_key_value_heads", &f.kv_heads)) has |= PIPIT_LLAMA_HAS_KV_HEADS;
    else if (has & PIPIT_LLAMA_HAS_HEADS) f.kv_heads = f.heads, has |= PIPIT_LLAMA_HAS_KV_HEADS; /* LlamaConfig's default */
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie)) hf_fail(&h, PIPIT_STATUS_FORMAT, "\"tie_word_embeddings\" must be true or false");
    f.tied = tie ? cJSON_IsTrue(tie) : 0; /* LlamaConfig's default: untied */
    has |= PIPIT_LLAMA_HAS_TIED;
    hf_unsupported(&h, f.dim, (has & PIPIT_LLAMA_HAS_HEADS) ? f.heads : 0);
    int type = hf_model_type(&h);
    if (!h.st) hf_family(&h, type, &f, &has);
    cJSON_Delete(root);
    if (h.st) return h.st;
    *cfg = f;
    if (present) *present = has;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_llama_config_from_hf(const char *config_json, pipit_llama_config *cfg, int *present) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(llama_config_from_hf_impl(config_json, cfg, present), gen0, __func__);
}

/* The shortest text that reads back as v (config.json is read by people too). */
static void shortest(char *buf, size_t n, double v) {
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* shortest(), spelled as a float ("8.0", not "8"): transformers warns
 * when a rope_scaling factor reads back as a Python int. */
static void shortest_float(char *buf, size_t n, double v) {
    shortest(buf, n, v);
    if (!strpbrk(buf, ".eEin")) strncat(buf, ".0", n - strlen(buf) - 1);
}

/* The Hugging Face model a config is (HF_*), or -1 with a message naming
 * what none of them has. */
static int hf_kind_of(const pipit_llama_config *c, const char *fn) {
    if (!c->experts) return c->attn_bias ? HF_QWEN2 : HF_LLAMA;
    const char *why = NULL;
    int qwen = c->moe_layout == PIPIT_LLAMA_MOE_QWEN2;
    if (c->moe_layout == PIPIT_LLAMA_MOE_STACKED)
        why = "pipit's stacked experts ('mlp.experts.*_proj.weight' [E, F, C]) are not under Mixtral's or Qwen2-MoE's "
              "per-expert names (moe_layout 0: `pipit export --hf` renames them as Mixtral's)";
    else if (c->router != PIPIT_ROUTER_SOFTMAX) why = "the sigmoid router (DeepSeek-V3's) is neither Mixtral's nor Qwen2-MoE's";
    else if (c->route_bias) why = "the routing bias (route_bias, --balance-bias) is in neither Mixtral nor Qwen2-MoE";
    else if (qwen && !c->attn_bias) why = "Qwen2-MoE's q/k/v projections have biases (attn_bias 1)";
    else if (qwen && !(c->shared_experts && c->shared_gate))
        why = "Qwen2-MoE has one shared expert with its sigmoid gate (shared_experts >= 1, shared_gate 1)";
    else if (!qwen && c->attn_bias) why = "Mixtral's attention has no biases (attn_bias 1)";
    else if (!qwen && c->moe_every > 1) why = "every Mixtral layer is MoE (moe_every > 1)";
    else if (!qwen && c->route_unnormalized) why = "Mixtral renormalises the top-k weights (route_unnormalized 1)";
    if (why) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: no Hugging Face model for this mixture of experts: %s", fn, why);
        return -1;
    }
    return qwen ? HF_QWEN2_MOE : HF_MIXTRAL;
}

static pipit_status write_hf_config(const pipit_llama_config *c, int bos, int eos, FILE *f, const char *fn) {
    if (!c || !f) return pipit__err(PIPIT_STATUS_MISUSE, "%s: NULL %s", fn, c ? "file" : "config");
    if (llama_check_impl(c)) {
        pipit__err_prefix("%s", fn);
        return PIPIT_STATUS_INVALID;
    }
    if (bos < 0 || bos >= c->vocab || eos < 0 || eos >= c->vocab)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: bos_token_id %d and eos_token_id %d must be ids of the vocabulary "
                                                "(0 .. %d)",
                          fn, bos, eos, c->vocab - 1);
    char eps[32], theta[32], scaling[400] = "null";
    shortest(eps, sizeof eps, c->norm_eps);
    shortest(theta, sizeof theta, c->rope_theta);
    const pipit_rope_scaling *r = &c->rope_scaling;
    if (r->factor > 0) {
        char fa[32], lo[32], hi[32];
        shortest_float(fa, sizeof fa, r->factor);
        shortest_float(lo, sizeof lo, r->low_freq_factor);
        shortest_float(hi, sizeof hi, r->high_freq_factor);
        snprintf(scaling, sizeof scaling,
                 "{\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, \"high_freq_factor\": %s, "
                 "\"original_max_position_embeddings\": %lld}",
                 fa, lo, hi, (long long)r->original_max_position_embeddings);
    }
    int kind = hf_kind_of(c, fn);
    if (kind < 0) return PIPIT_STATUS_INVALID;
    static const char *const arch[] = {"LlamaForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM",
                                       "Qwen2MoeForCausalLM"};
    fprintf(f,
            "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
            "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n",
            arch[kind], hf_types[kind], c->vocab, c->dim, ffn_hidden(c), c->layers, c->heads, kv_of(c));
    if (kind == HF_LLAMA)
        fprintf(f, "  \"head_dim\": %d,\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n", c->dim / c->heads);
    else if (kind == HF_MIXTRAL)
        fprintf(f, "  \"head_dim\": %d,\n  \"sliding_window\": null,\n", c->dim / c->heads);
    else fprintf(f, "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n  \"max_window_layers\": %d,\n",
                 c->layers);
    if (kind >= HF_MIXTRAL) {
        char coef[32];
        shortest_float(coef, sizeof coef, c->aux_loss > 0 ? c->aux_loss : 0.001);
        fprintf(f, "  \"%s\": %d,\n  \"num_experts_per_tok\": %d,\n  \"router_aux_loss_coef\": %s,\n"
                   "  \"output_router_logits\": %s,\n",
                kind == HF_MIXTRAL ? "num_local_experts" : "num_experts", c->experts, c->top_k, coef,
                c->aux_loss > 0 ? "true" : "false");
        if (kind == HF_MIXTRAL) fprintf(f, "  \"router_jitter_noise\": 0.0,\n");
        else
            fprintf(f, "  \"moe_intermediate_size\": %d,\n  \"shared_expert_intermediate_size\": %lld,\n"
                       "  \"decoder_sparse_step\": %d,\n  \"mlp_only_layers\": [],\n  \"norm_topk_prob\": %s,\n",
                    ffn_hidden(c), (long long)c->shared_experts * ffn_hidden(c), c->moe_every > 1 ? c->moe_every : 1,
                    c->route_unnormalized ? "false" : "true");
    }
    fprintf(f,
            "  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %s,\n"
            "  \"rope_theta\": %s,\n  \"rope_scaling\": %s,\n  \"tie_word_embeddings\": %s,\n"
            "  \"hidden_act\": \"silu\",\n"
            "  \"attention_dropout\": 0.0,\n  \"initializer_range\": 0.02,\n  \"torch_dtype\": \"%s\",\n"
            "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"use_cache\": true\n}\n",
            c->max_ctx, eps, theta, scaling, c->tied ? "true" : "false", c->dtype == PIPIT_F64 ? "float64" : "float32",
            bos, eos);
    if (ferror(f)) return pipit__err(PIPIT_STATUS_IO, "%s: writing failed", fn);
    return PIPIT_STATUS_OK;
}

pipit_status pipit_llama_write_hf_config(const pipit_llama_config *c, FILE *f) {
    int last = c && c->vocab > 0 ? c->vocab - 1 : 0;
    return write_hf_config(c, last, last, f, __func__);
}

pipit_status pipit_llama_write_hf_config_ex(const pipit_llama_config *c, int bos_token_id, int eos_token_id, FILE *f) {
    return write_hf_config(c, bos_token_id, eos_token_id, f, __func__);
}

pipit_status pipit_llama_feeds(const pipit_llama_config *c, const int32_t *tokens, const int32_t *targets,
                               pipit_feed out[2]) {
    if (!c || !tokens || !targets || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_llama_feeds: NULL %s",
                          !c ? "config" : !tokens ? "tokens" : !targets ? "targets" : "out");
    int64_t n;
    if (c->batch < 1 || c->ctx < 1 || !pipit__mul_le(c->batch, c->ctx, PIPIT_MAX_ELEMENTS, &n))
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_llama_feeds: batch %d and ctx %d must be >= 1", c->batch, c->ctx);
    size_t nb = (size_t)n * sizeof(int32_t);
    out[0] = (pipit_feed){PIPIT_LLAMA_TOKENS, tokens, nb};
    out[1] = (pipit_feed){PIPIT_LLAMA_TARGETS, targets, nb};
    return PIPIT_STATUS_OK;
}
