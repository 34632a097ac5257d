/*
 * model.c — the CLI's two model kinds (model.h): thin adapters from a
 * cli_model to pipit_gpt2_config / pipit_llama_config and the public calls
 * that take them, and the model's fields as metadata, JSON and a
 * one-line description.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "pipit_cp.h"
#include "pipit_gpt2.h"
#include "pipit_llama.h"
#include "pipit_moe.h"

/* ---- GPT-2 ---- */

static pipit_gpt2_config gpt2_cfg(const cli_model *m) {
    return (pipit_gpt2_config){.vocab = m->vocab, .max_ctx = m->max_ctx, .ctx = m->ctx, .layers = m->layers,
                               .heads = m->heads, .dim = m->dim, .batch = m->batch, .stages = m->stages,
                               .dtype = PIPIT_F32, .fused_head = m->fused_head};
}
static pipit_status gpt2_check(const cli_model *m) {
    pipit_gpt2_config c = gpt2_cfg(m);
    return pipit_gpt2_check(&c);
}
/* The graph describes one of the stage's m->tp ranks (pipit.h). */
static int set_tp(pipit_graph *g, const cli_model *m) {
    return pipit_graph_set_tensor_parallel(g, m->tp > 1 ? m->tp : 1) == PIPIT_STATUS_OK &&
           pipit_graph_set_sequence_parallel(g, m->sp != 0) == PIPIT_STATUS_OK && /* --sp */
           pipit_graph_set_documents(g, m->docs != 0) == PIPIT_STATUS_OK && /* packed documents: every build */
           pipit_graph_set_expert_parallel(g, m->ep > 1 ? m->ep : 1) == PIPIT_STATUS_OK; /* pipit_moe.h */
}

/* --cp: the graph describes one of a context group's C ranks, whose
 * sequence inputs hold ctx / C tokens (tools/cp_feeds.c cuts them). */
static int set_cp(pipit_graph *g, const cli_model *m, int *ctx) {
    if (m->cp > 1) *ctx /= m->cp;
    return pipit_graph_set_context_parallel(g, m->cp > 1 ? m->cp : 1) == PIPIT_STATUS_OK;
}

static pipit_val gpt2_build(pipit_graph *g, const cli_model *m, pipit_val *logits) {
    pipit_gpt2_config c = gpt2_cfg(m);
    if (!set_tp(g, m) || !set_cp(g, m, &c.ctx)) return (pipit_val){g, -1};
    return pipit_gpt2_build_logits(g, &c, logits);
}
static pipit_status gpt2_init(pipit_program *p, const cli_model *m, uint64_t seed) {
    pipit_gpt2_config c = gpt2_cfg(m);
    return pipit_gpt2_init(p, &c, seed);
}
static int64_t gpt2_params(const cli_model *m) {
    pipit_gpt2_config c = gpt2_cfg(m);
    return pipit_gpt2_num_params(&c);
}
static double gpt2_flops(const cli_model *m) {
    pipit_gpt2_config c = gpt2_cfg(m);
    return pipit_gpt2_flops_per_token(&c);
}
static pipit_status gpt2_from_checkpoint(const pipit_checkpoint *ck, cli_model *m) {
    pipit_gpt2_config c = gpt2_cfg(m);
    pipit_status s = pipit_gpt2_config_from_checkpoint(ck, &c);
    if (!s) m->vocab = c.vocab, m->dim = c.dim, m->max_ctx = c.max_ctx, m->layers = c.layers, m->heads = c.heads;
    return s;
}
static pipit_status gpt2_feeds(const cli_model *m, const int32_t *tok, const int32_t *tgt, int32_t *pos,
                               pipit_feed *out) {
    pipit_gpt2_config c = gpt2_cfg(m);
    return pipit_gpt2_feeds(&c, tok, tgt, pos, out);
}

static pipit_status gpt2_build_decode(pipit_graph *g, const cli_model *m, pipit_decode_graph *out) {
    pipit_gpt2_config c = gpt2_cfg(m);
    return pipit_gpt2_build_decode(g, &c, out);
}

static const cli_model_kind GPT2 = {"gpt2", "GPT-2", 3, gpt2_check, gpt2_build, gpt2_init, gpt2_params, gpt2_flops,
                                    gpt2_from_checkpoint, gpt2_feeds, gpt2_build_decode};

/* ---- Llama ---- */

pipit_llama_config cli_model_llama(const cli_model *m) {
    return (pipit_llama_config){.vocab = m->vocab, .max_ctx = m->max_ctx, .ctx = m->ctx, .layers = m->layers,
                                .heads = m->heads, .kv_heads = m->kv_heads, .dim = m->dim,
                                .ffn_hidden = m->ffn_hidden, .multiple_of = m->multiple_of,
                                .ffn_dim_multiplier = m->ffn_dim_multiplier, .norm_eps = m->norm_eps,
                                .rope_theta = m->rope_theta, .tied = m->tied, .batch = m->batch,
                                .stages = m->stages, .dtype = PIPIT_F32, .rope_scaling = m->rope_scaling,
                                .fused_head = m->fused_head, .experts = m->experts, .top_k = m->top_k,
                                .capacity_factor = m->capacity_factor, .dropless = m->dropless,
                                .shared_experts = m->shared_experts, .moe_every = m->moe_every, .router = m->router,
                                .aux_loss = m->aux_loss, .route_bias = m->balance_bias > 0,
                                .attn_bias = m->attn_bias, .moe_layout = m->moe_layout, .shared_gate = m->shared_gate,
                                .route_unnormalized = m->route_unnormalized};
}
static pipit_status llama_check(const cli_model *m) {
    pipit_llama_config c = cli_model_llama(m);
    return pipit_llama_check(&c);
}
static pipit_val llama_build(pipit_graph *g, const cli_model *m, pipit_val *logits) {
    pipit_llama_config c = cli_model_llama(m);
    if (!set_tp(g, m) || !set_cp(g, m, &c.ctx)) return (pipit_val){g, -1};
    return pipit_llama_build_logits(g, &c, logits);
}
pipit_val cli_model_build_moe(pipit_graph *g, const cli_model *m, pipit_val *choices) {
    pipit_llama_config c = cli_model_llama(m);
    if (!set_tp(g, m) || !set_cp(g, m, &c.ctx)) return (pipit_val){g, -1};
    return pipit_llama_build_moe(g, &c, NULL, choices);
}
static pipit_status llama_init(pipit_program *p, const cli_model *m, uint64_t seed) {
    pipit_llama_config c = cli_model_llama(m);
    return pipit_llama_init(p, &c, seed);
}
static int64_t llama_params(const cli_model *m) {
    pipit_llama_config c = cli_model_llama(m);
    return pipit_llama_num_params(&c);
}
static double llama_flops(const cli_model *m) {
    pipit_llama_config c = cli_model_llama(m);
    return pipit_llama_flops_per_token(&c);
}
static pipit_status llama_from_checkpoint(const pipit_checkpoint *ck, cli_model *m) {
    pipit_llama_config c = cli_model_llama(m);
    pipit_status s = pipit_llama_config_from_checkpoint(ck, &c);
    if (!s) {
        m->vocab = c.vocab, m->dim = c.dim, m->layers = c.layers, m->heads = c.heads, m->kv_heads = c.kv_heads;
        m->ffn_hidden = c.ffn_hidden, m->tied = c.tied, m->max_ctx = c.max_ctx;
        m->norm_eps = c.norm_eps, m->rope_theta = c.rope_theta, m->rope_scaling = c.rope_scaling;
        m->experts = c.experts, m->top_k = c.top_k, m->capacity_factor = c.capacity_factor, m->dropless = c.dropless;
        m->shared_experts = c.shared_experts, m->moe_every = c.moe_every, m->router = c.router;
        m->aux_loss = c.aux_loss; /* MoE: the metadata's (as given for a dense file) */
        m->attn_bias = c.attn_bias, m->moe_layout = c.moe_layout, m->shared_gate = c.shared_gate; /* from the tensors */
        m->route_unnormalized = c.route_unnormalized;
        const char *bb = pipit_checkpoint_meta(ck, "balance_bias"); /* its routing bias's coefficient */
        m->balance_bias = c.route_bias && bb ? strtod(bb, NULL) : 0;
    }
    return s;
}
static pipit_status llama_feeds(const cli_model *m, const int32_t *tok, const int32_t *tgt, int32_t *pos,
                                pipit_feed *out) {
    (void)pos; /* RoPE takes positions from the row index */
    pipit_llama_config c = cli_model_llama(m);
    return pipit_llama_feeds(&c, tok, tgt, out);
}

static pipit_status llama_build_decode(pipit_graph *g, const cli_model *m, pipit_decode_graph *out) {
    pipit_llama_config c = cli_model_llama(m);
    return pipit_llama_build_decode(g, &c, out);
}

static const cli_model_kind LLAMA = {"llama", "Llama", 2, llama_check, llama_build, llama_init, llama_params,
                                     llama_flops, llama_from_checkpoint, llama_feeds, llama_build_decode};

/* ---- kinds, fields ---- */

int cli_model_nfeeds(const cli_model *m) { return m->kind->nfeeds + (m->docs != 0); }

pipit_status cli_model_feeds(const cli_model *m, const int32_t *tok, const int32_t *tgt, int32_t *pos, int32_t *doc,
                             pipit_feed *out) {
    pipit_status s = m->kind->feeds(m, tok, tgt, pos, out);
    if (s || !m->docs) return s;
    int gpt2 = m->kind == &GPT2;
    for (int b = 0; b < m->batch; b++) { /* the separator ends its document (Llama 3, torchtitan) */
        size_t row = (size_t)b * (size_t)m->ctx;
        int32_t id = 0, start = 0;
        for (int32_t t = 0; t < m->ctx; t++) {
            doc[row + t] = id;
            if (gpt2 && m->doc_pos_reset) pos[row + t] = t - start;
            if (tok[row + t] == m->doc_sep) id++, start = t + 1;
        }
    }
    out[m->kind->nfeeds] = (pipit_feed){gpt2 ? PIPIT_GPT2_DOCUMENTS : PIPIT_LLAMA_DOCUMENTS, doc, sizeof(int32_t) * (size_t)m->batch * (size_t)m->ctx};
    return PIPIT_STATUS_OK;
}

const cli_model_kind *cli_model_kind_find(const char *name) {
    if (name && strcmp(name, GPT2.name) == 0) return &GPT2;
    if (name && strcmp(name, LLAMA.name) == 0) return &LLAMA;
    return NULL;
}

const cli_model_kind *cli_model_kind_of_checkpoint(const pipit_checkpoint *ck) {
    if (pipit_checkpoint_tensor_shape(ck, "model.embed_tokens.weight", NULL, NULL) == PIPIT_STATUS_OK) return &LLAMA;
    if (pipit_checkpoint_tensor_shape(ck, "wte.weight", NULL, NULL) == PIPIT_STATUS_OK) return &GPT2;
    return NULL;
}

static int is_llama(const cli_model *m) { return m->kind == &LLAMA; }

/* The MLP width a Llama model resolves to (its own, or Meta's rule). */
static int ffn_of(const cli_model *m) {
    pipit_llama_config c = cli_model_llama(m);
    return m->ffn_hidden ? m->ffn_hidden : pipit_llama_ffn_hidden(&c);
}

void cli_model_describe(const cli_model *m, char *buf, size_t n) {
    if (is_llama(m))
        snprintf(buf, n, "Llama L=%d H=%d KV=%d C=%d F=%d V=%d T=%d %s head", m->layers, m->heads,
                 m->kv_heads ? m->kv_heads : m->heads, m->dim, ffn_of(m), m->vocab, m->ctx, m->tied ? "tied" : "untied");
    else
        snprintf(buf, n, "GPT-2 L=%d H=%d C=%d V=%d T=%d", m->layers, m->heads, m->dim, m->vocab, m->ctx);
}

/* Pair i is kv[2i], kv[2i+1]; a number's text lives in num[i]. */
static void meta_add(cli_model_meta *o, const char *key, const char *fmt, double v, int is_int) {
    int k = o->n / 2;
    if (is_int) snprintf(o->num[k], sizeof o->num[k], fmt, (int)v);
    else snprintf(o->num[k], sizeof o->num[k], fmt, v);
    o->kv[o->n++] = key;
    o->kv[o->n++] = o->num[k];
}

void cli_model_meta_fill(const cli_model *m, cli_model_meta *o) {
    memset(o, 0, sizeof *o);
    o->kv[o->n++] = "model";
    o->kv[o->n++] = m->kind->name;
    const struct {
        const char *key;
        int v;
    } ints[] = {{"vocab", m->vocab}, {"ctx", m->ctx}, {"max_ctx", m->max_ctx},
                {"layers", m->layers}, {"heads", m->heads}, {"dim", m->dim}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) meta_add(o, ints[i].key, "%d", ints[i].v, 1);
    if (!is_llama(m)) return;
    meta_add(o, "kv_heads", "%d", m->kv_heads ? m->kv_heads : m->heads, 1);
    meta_add(o, "ffn_hidden", "%d", ffn_of(m), 1);
    meta_add(o, "norm_eps", "%.17g", m->norm_eps, 0);
    meta_add(o, "rope_theta", "%.17g", m->rope_theta, 0);
    meta_add(o, "tied", "%d", m->tied, 1);
    if (m->experts > 0) { /* MoE: every field, as resolved (a dense file records none) */
        meta_add(o, "experts", "%d", m->experts, 1);
        meta_add(o, "top_k", "%d", m->top_k, 1);
        meta_add(o, "capacity_factor", "%.17g", m->capacity_factor, 0);
        meta_add(o, "dropless", "%d", m->dropless, 1);
        meta_add(o, "shared_experts", "%d", m->shared_experts, 1);
        meta_add(o, "moe_every", "%d", m->moe_every, 1);
        if (m->balance_bias > 0) meta_add(o, "balance_bias", "%.17g", m->balance_bias, 0);
        o->kv[o->n++] = "router";
        o->kv[o->n++] = m->router ? "sigmoid" : "softmax";
        meta_add(o, "aux_loss", "%.17g", m->aux_loss, 0);
        if (m->route_unnormalized) meta_add(o, "route_unnormalized", "%d", 1, 1);
    }
    const pipit_rope_scaling *r = &m->rope_scaling; /* "default" recorded too: a config.json cannot add scaling */
    o->kv[o->n++] = "rope_type";
    o->kv[o->n++] = r->factor > 0 ? "llama3" : "default";
    if (!(r->factor > 0)) return;
    meta_add(o, "rope_factor", "%.17g", r->factor, 0);
    meta_add(o, "rope_low_freq_factor", "%.17g", r->low_freq_factor, 0);
    meta_add(o, "rope_high_freq_factor", "%.17g", r->high_freq_factor, 0);
    meta_add(o, "rope_original_max_position_embeddings", "%d", (double)r->original_max_position_embeddings, 1);
}
