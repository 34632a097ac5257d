/*
 * model.h — the model kinds the CLI trains (GPT-2, Llama) behind one
 * vtable over the public pipit_gpt2_* and pipit_llama_* calls, so that
 * train, plan, eval, sample, validation and --auto-stages name no model.
 * A cli_model holds its kind and the union of the kinds' fields; each
 * kind reads the fields it has.
 */
#ifndef PIPIT_TOOLS_MODEL_H
#define PIPIT_TOOLS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "pipit.h"
#include "pipit_decode.h"
#include "pipit_io.h"
#include "pipit_llama.h"

#define CLI_MAX_FEEDS 4 /* graph inputs per microbatch, the most any kind has (GPT-2 with documents) */

typedef struct cli_model_kind cli_model_kind;

typedef struct {
    const cli_model_kind *kind;
    int vocab, max_ctx, ctx, layers, heads, dim, batch, stages;
    int tp; /* tensor-parallel ranks per stage: the graph describes one (0 or 1: none) */
    int cp; /* --cp: context-parallel ranks the graph describes one of, its ctx / cp tokens (0 or 1: none; set after model_config) */
    /* Llama only (pipit_llama_config) */
    int kv_heads, ffn_hidden, multiple_of, tied;
    double ffn_dim_multiplier, norm_eps, rope_theta;
    pipit_rope_scaling rope_scaling; /* llama3 RoPE scaling (all zeros: none), from the checkpoint or config.json */
    int fused_head; /* the lm head: 0 matmul + cross-entropy, 1 fused (pipit_gpt2_config.fused_head); both kinds */
    /* Llama MoE: pipit_llama_config's fields of the same names (all 0: dense) */
    int experts, top_k, dropless, shared_experts, moe_every, router;
    double capacity_factor, aux_loss;
    double balance_bias; /* > 0: the routing bias params (route_bias 1), moved by this much per step (moe_counts.c) */
    /* packed documents (--doc-sep): docs 1 sets pipit_graph_set_documents before every build and feeds
     * "documents", ids from the tokens (a new document after each doc_sep); doc_pos_reset: GPT-2's
     * positions restart at 0 in each document (Llama: RoPE needs none, architecture section 13) */
    int docs, doc_sep, doc_pos_reset;
    /* Llama: pipit_llama_config's attn_bias (Qwen2), moe_layout and shared_gate (Mixtral, Qwen2-MoE): from a checkpoint's tensors */
    int attn_bias, moe_layout, shared_gate;
    int route_unnormalized; /* Llama MoE: the top-k weights not renormalised (Qwen2-MoE's norm_topk_prob false) */
    int ep; /* --ep: expert-parallel ranks the graph describes one of (pipit_graph_set_expert_parallel; 0 or 1: none; set after model_config) */
    int sp; /* --sp: sequence parallelism (pipit_graph_set_sequence_parallel on every build; model_config sets it) */
} cli_model;

struct cli_model_kind {
    const char *name;  /* "gpt2", "llama": the checkpoint's "model" metadata */
    const char *title; /* "GPT-2", "Llama" */
    int nfeeds;        /* graph inputs per microbatch (<= CLI_MAX_FEEDS) */
    pipit_status (*check)(const cli_model *m);
    /* The model's graph for one of its tp ranks and its loss; *logits (if
     * not NULL) the lm head's [B,T,V] (V/tp classes with tp > 1). */
    pipit_val (*build)(pipit_graph *g, const cli_model *m, pipit_val *logits);
    pipit_status (*init)(pipit_program *p, const cli_model *m, uint64_t seed);
    int64_t (*num_params)(const cli_model *m);
    double (*flops_per_token)(const cli_model *m);
    /* The sizes a checkpoint of this kind implies, into m (heads 0 when unrecorded). */
    pipit_status (*from_checkpoint)(const pipit_checkpoint *ck, cli_model *m);
    /* One microbatch's nfeeds feeds; pos is B*T scratch the kind may fill. */
    pipit_status (*feeds)(const cli_model *m, const int32_t *tok, const int32_t *tgt, int32_t *pos, pipit_feed *out);
    /* The decoding graph (pipit_decode.h): one new position of m->batch
     * sequences over a KV cache of m->ctx slots. */
    pipit_status (*build_decode)(pipit_graph *g, const cli_model *m, pipit_decode_graph *out);
};

/* The kind called `name` ("gpt2", "llama"), or NULL. */
const cli_model_kind *cli_model_kind_find(const char *name);
/* The kind whose tensors a checkpoint holds ('model.embed_tokens.weight':
 * Llama; 'wte.weight': GPT-2), or NULL. */
const cli_model_kind *cli_model_kind_of_checkpoint(const pipit_checkpoint *ck);

/* A Llama MoE's graph as its kind's build, and choices[l] (m->layers
 * entries) layer l's router choices (pipit_llama_build_moe). */
pipit_val cli_model_build_moe(pipit_graph *g, const cli_model *m, pipit_val *choices);
/* The graph inputs per microbatch: the kind's, and "documents" with m->docs. */
int cli_model_nfeeds(const cli_model *m);
/* One microbatch's cli_model_nfeeds feeds: the kind's, then with m->docs
 * each token's document id into doc (B*T scratch; a sequence's first
 * document is 0, and a token equal to doc_sep is the last of its
 * document) and, with doc_pos_reset, GPT-2's positions restarted per
 * document. */
pipit_status cli_model_feeds(const cli_model *m, const int32_t *tok, const int32_t *tgt, int32_t *pos, int32_t *doc,
                             pipit_feed *out);

/* The library's config of a Llama cli_model (f32). */
pipit_llama_config cli_model_llama(const cli_model *m);

/* "GPT-2 L=4 H=4 C=128 V=256 T=64", "Llama L=4 H=4 KV=2 C=128 F=352 V=256 T=64 untied". */
void cli_model_describe(const cli_model *m, char *buf, size_t n);

/* The model's fields as checkpoint metadata ("model" = the kind's name,
 * vocab ctx max_ctx layers heads dim, and Llama's kv_heads ffn_hidden
 * norm_eps rope_theta tied, with RoPE scaling rope_type "llama3",
 * rope_factor, rope_low_freq_factor, rope_high_freq_factor and
 * rope_original_max_position_embeddings, and an MoE model's experts top_k
 * capacity_factor dropless shared_experts moe_every router aux_loss),
 * key/value pairs with numbers printed into the struct's own buffers. */
typedef struct {
    const char *kv[2 * 32];
    int n;
    char num[32][40];
} cli_model_meta;
void cli_model_meta_fill(const cli_model *m, cli_model_meta *out);

#endif
