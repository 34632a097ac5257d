/*
 * pipit_llama.h — the Llama family exactly as Hugging Face's
 * LlamaForCausalLM defines it (pre-norm RMSNorm blocks, rotary position
 * embeddings in the rotate-half convention, grouped-query causal attention,
 * a SwiGLU MLP down(silu(gate(x)) * up(x)), a final RMSNorm and an lm head
 * tied to the embedding or not), built as a pipit graph for one microbatch
 * with yields splitting the blocks into S pipeline stages. Parameters carry
 * Hugging Face's names and nn.Linear's [out, in] layout, so a
 * `save_pretrained` safetensors file loads by name and pipit's files load in
 * transformers. Same conventions as pipit.h.
 */
#ifndef PIPIT_LLAMA_H
#define PIPIT_LLAMA_H

#include <stdint.h>
#include <stdio.h>

#include "pipit.h"
#include "pipit_decode.h"
#include "pipit_io.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int vocab;        /* V: vocab_size */
    int max_ctx;      /* max_position_embeddings: the longest ctx allowed (RoPE keeps no table) */
    int ctx;          /* T of a training sequence */
    int layers;       /* L: num_hidden_layers */
    int heads;        /* H: num_attention_heads (head_dim D = dim / heads) */
    int kv_heads;     /* num_key_value_heads, dividing heads (0: = heads, plain multi-head) */
    int dim;          /* C: hidden_size */
    int ffn_hidden;   /* F: intermediate_size; 0: Meta's rule from multiple_of and ffn_dim_multiplier */
    int multiple_of;  /* Meta's rule only: F rounded up to a multiple of this (>= 1) */
    double ffn_dim_multiplier; /* Meta's rule only: 0 for none */
    double norm_eps;  /* rms_norm_eps (> 0) */
    double rope_theta; /* RoPE base (> 0) */
    int tied;         /* 1: the lm head is model.embed_tokens.weight (tie_word_embeddings); 0: lm_head.weight */
    int batch;        /* B: sequences per microbatch */
    int stages;       /* S: pipeline stages (1 = no yield) */
    pipit_dtype dtype; /* PIPIT_F32 or PIPIT_F64 */
    /* RoPE frequency scaling, rope_type "llama3" (Llama 3.1 and later;
     * pipit_rope_scaled in pipit.h); all zeros (the default): plain RoPE */
    pipit_rope_scaling rope_scaling;
    /* The lm head and its loss, as pipit_gpt2_config.fused_head: 0 (the
     * default) logits = h W^T then pipit_xent_mean (T > 1:
     * pipit_tp_xent_mean); 1 the fused head + cross-entropy
     * (pipit_head_xent_mean, T > 1: pipit_tp_head_xent_mean), the logits
     * never stored whole but recomputed in the backward (4 head-GEMM units
     * instead of 3): memory for time. On an AVX2 EPYC (llama-100m, T 64,
     * B 4, 1 thread): f32 planned peak activations 229.7 -> 132.8 MiB,
     * the step 2301 -> 2710 ms (+18%, quiet); bf16
     * the arena 317.2 -> 353.7 MiB (worse: the bf16 dW cannot be written
     * into the fp32 gradient). The same parameters either way; losses
     * agree within rounding. Other values: INVALID. */
    int fused_head;
    /* Mixture of experts (pipit_moe.h; docs/architecture.md "Mixture of
     * experts"). All zeros (the default): every MLP dense. experts E >= 1
     * makes the MLP of every moe_every-th layer (layer l with (l + 1) %
     * moe_every == 0; 0 or 1: every layer) routed: a router
     * "model.layers.<l>.mlp.router.weight" [E, C]; E SwiGLU experts of width
     * F stacked as "mlp.experts.gate_proj.weight" and "...up_proj.weight"
     * [E, F, C], "...down_proj.weight" [E, C, F]; each of the B x T tokens
     * goes to top_k experts (router 0: softmax then top-k, the k weights
     * renormalised, Mixtral; 1: sigmoid then top-k normalised over the k,
     * DeepSeek-V3), each expert holding ceil(capacity_factor x B T x top_k /
     * E) tokens (at most B T; a token past it is dropped for that expert,
     * in token order) or, with dropless 1, all B T; plus shared_experts
     * always-on experts as one SwiGLU MLP of width shared_experts x F
     * ("mlp.shared_expert.*") added to the routed output. aux_loss > 0 adds
     * aux_loss x the sum over MoE layers of the Switch/Mixtral balance term
     * E sum_e f_e P_e (f_e: choices of expert e / tokens, P_e: the mean
     * router probability) to the loss. Not with tensor parallelism (T > 1:
     * INVALID). */
    int experts;
    int top_k;
    double capacity_factor;
    int dropless;
    int shared_experts;
    int moe_every;
    int router;
    double aux_loss;
    /* 1: each MoE layer routes with a bias "model.layers.<l>.mlp.route_bias"
     * [E] added to the scores for choosing only (the weights are the
     * unbiased scores; pipit_route_opts.bias): the auxiliary-loss-free
     * balance of DeepSeek-V3. A param no gradient reaches (the choice is
     * not differentiable), initialised to 0, which the caller updates
     * between steps (pipit_program_set_param; `pipit train --balance-bias`
     * from the token counts). 0 (default): no bias. Requires experts. */
    int route_bias;
    /* 1: the q, k and v projections add a bias "model.layers.<l>.self_attn.
     * {q,k,v}_proj.bias" (o_proj none): Qwen2 (transformers'
     * Qwen2ForCausalLM, Qwen2MoeForCausalLM). Not with tensor parallelism.
     * 0 (default): no biases, Llama. */
    int attn_bias;
    /* Where an MoE layer's weights live, so that a Hugging Face file loads
     * (and saves) by name: PIPIT_LLAMA_MOE_STACKED (0, the default) the
     * stacked "mlp.router" / "mlp.experts.*" tensors above;
     * PIPIT_LLAMA_MOE_MIXTRAL transformers' MixtralForCausalLM, router
     * "model.layers.<l>.block_sparse_moe.gate.weight" [E, C] and expert e's
     * "block_sparse_moe.experts.<e>.w1.weight" (gate) and "w3" (up) [F, C],
     * "w2" (down) [C, F] (no shared experts); PIPIT_LLAMA_MOE_QWEN2
     * Qwen2MoeForCausalLM, router "mlp.gate.weight", expert e's
     * "mlp.experts.<e>.{gate,up,down}_proj.weight". The per-expert weights
     * are stacked in the graph (a concat): the same model and numbers as
     * the stacked layout. */
    int moe_layout;
    /* 1: the shared experts' output is scaled per token by sigmoid(x w),
     * w = "model.layers.<l>.mlp.shared_expert_gate.weight" [1, C]
     * (Qwen2-MoE). Requires shared_experts. 0 (default): no gate. */
    int shared_gate;
    /* 1: the softmax router's k weights are the chosen probabilities as
     * they are, not renormalised to sum 1 (Qwen2-MoE's norm_topk_prob
     * false, its default; pipit_route_opts.normalize 0). Requires experts
     * and the softmax router. 0 (default): renormalised (Mixtral). */
    int route_unnormalized;
} pipit_llama_config;

enum { PIPIT_LLAMA_MOE_STACKED = 0, PIPIT_LLAMA_MOE_MIXTRAL = 1, PIPIT_LLAMA_MOE_QWEN2 = 2 };

/* Graph inputs the builder declares; feed them per microbatch. Positions
 * are the row index 0..T-1 (RoPE computes its angles from it). */
#define PIPIT_LLAMA_TOKENS "tokens"   /* i32 [B,T] */
#define PIPIT_LLAMA_TARGETS "targets" /* i32 [B,T] */
/* i32 [B,T] on a graph set to packed documents (pipit_graph_set_documents,
 * before building), as PIPIT_GPT2_DOCUMENTS: q, k and v are concatenated
 * into pipit_attention_docs' packed qkv. RoPE needs no position reset: the
 * score of query t and key s depends on t - s alone, the same within a
 * document wherever it starts (up to the rounding of the angles). */
#define PIPIT_LLAMA_DOCUMENTS "documents"

/* Checks the config: positive sizes, dim % heads == 0, an even head_dim
 * (RoPE rotates pairs), heads % kv_heads == 0, ctx <= max_ctx, 1 <= S <= L,
 * norm_eps and rope_theta positive and finite, F >= 1 (given, or from
 * Meta's rule), dtype f32 or f64, rope_scaling all zeros or valid
 * (pipit_rope_scaled), tied and fused_head 0 or 1. INVALID with a message
 * naming the value. */
PIPIT_API pipit_status pipit_llama_check(const pipit_llama_config *c);
/* The MLP width F: c->ffn_hidden if set, else Meta's rule
 * (llama/model.py): h = int(2 * 4 * dim / 3); with ffn_dim_multiplier m > 0
 * h = int(m * h); F = multiple_of * ceil(h / multiple_of). 0 and a message
 * for a NULL config or values the rule cannot use. */
PIPIT_API int pipit_llama_ffn_hidden(const pipit_llama_config *c);
/* Builds the graph; returns the scalar mean cross-entropy (check
 * pipit_graph_status). A NULL argument, a bad or poisoned graph or a config
 * pipit_llama_check refuses: an invalid value and a message.
 * Tensor parallelism: on a graph set to T > 1 ranks per stage
 * (pipit_graph_set_tensor_parallel, before building) the graph describes
 * one of them (pipit.h): attention split by heads (q, k, v projections
 * column-parallel with H/T query and KV/T key/value heads per rank, o_proj
 * row-parallel), the MLP's gate and up column- and down row-parallel, the
 * embedding and lm head vocab-parallel, the loss pipit_tp_xent_mean
 * (fused_head 1: pipit_tp_head_xent_mean);
 * RMSNorm weights replicated. T must divide heads, kv_heads (key/value
 * heads are split, never replicated), the MLP width and vocab (INVALID
 * naming them and a T that would). */
PIPIT_API pipit_val pipit_llama_build(pipit_graph *g, const pipit_llama_config *c);
/* The same loss (bit for bit), and *logits (if not NULL) = the lm head's
 * logits [B,T,V] (the loss's input with fused_head 0; with fused_head 1:
 * h W^T as a node of its own beside the loss, computed only where read;
 * with T > 1 ranks per stage: this rank's classes
 * [B,T,V/T]; an invalid value on failure), for pipit_options.outputs. */
PIPIT_API pipit_val pipit_llama_build_logits(pipit_graph *g, const pipit_llama_config *c, pipit_val *logits);
/* The same loss (bit for bit) and *logits (may be NULL) as
 * pipit_llama_build_logits, and choices[l] (an array of c->layers values,
 * required: MISUSE when NULL) = layer l's router choices, the i32
 * [batch x ctx, top_k] expert indices (row b x ctx + t: token t of
 * sequence b) for an MoE layer and an invalid value (id -1) for a dense
 * one: per-microbatch values for pipit_options.outputs, from which the
 * caller counts the tokens sent to each expert (as `pipit train --json`'s
 * moe_counts). */
PIPIT_API pipit_val pipit_llama_build_moe(pipit_graph *g, const pipit_llama_config *c, pipit_val *logits,
                                          pipit_val *choices);
/* The decoding graph (pipit_decode.h), as pipit_gpt2_build_decode's: the
 * same model on ONE new position per sequence, RoPE at that position, its
 * grouped-query attention over a KV cache of S = c->ctx slots (KVD =
 * kv_heads * head_dim: keys after RoPE), B = c->batch sequences, c->stages
 * 1 and one rank per stage. Inputs PIPIT_DECODE_TOKENS, _CACHE, _SLOT,
 * _MASK (no positions: the slot gives RoPE its position); build's params.
 * MISUSE for NULL; INVALID (or the graph's status) otherwise on failure. */
PIPIT_API pipit_status pipit_llama_build_decode(pipit_graph *g, const pipit_llama_config *c,
                                                pipit_decode_graph *out);
/* First layer of stage s: the same even split as GPT-2's (the first L mod S
 * stages get one layer more), 0 <= s <= S; -1 and a message otherwise. */
PIPIT_API int pipit_llama_stage_first_layer(const pipit_llama_config *c, int s);
/* Hugging Face's init (LlamaPreTrainedModel._init_weights): every Linear
 * and the embedding N(0, 0.02) (initializer_range), RMSNorm weights 1. Each
 * tensor's stream is seeded by (seed, name), so the init is the same
 * whatever the pipeline layout. */
PIPIT_API pipit_status pipit_llama_init(pipit_program *p, const pipit_llama_config *c, uint64_t seed);
/* Parameter count, and training FLOPs per token: 6 N over the weights
 * that multiply activations (an untied embedding is only gathered, so it
 * is left out) plus attention, 12 L T C (as pipit_gpt2_flops_per_token). */
PIPIT_API int64_t pipit_llama_num_params(const pipit_llama_config *c);
PIPIT_API double pipit_llama_flops_per_token(const pipit_llama_config *c);

/* Reads the sizes a checkpoint implies into cfg: vocab and dim from
 * 'model.embed_tokens.weight' [V,C], layers from the blocks
 * 'model.layers.<i>.input_layernorm.weight' present, ffn_hidden from
 * layer 0's 'mlp.gate_proj.weight' [F,C], tied from whether
 * 'lm_head.weight' is absent; from the metadata (what pipit writes) heads,
 * kv_heads, max_ctx, norm_eps, rope_theta and the RoPE scaling (rope_type
 * "llama3" with rope_factor, rope_low_freq_factor, rope_high_freq_factor,
 * rope_original_max_position_embeddings) when present (heads and
 * kv_heads 0 when absent; the other fields are then left as they were).
 * With heads known, kv_heads also follows from 'k_proj.weight' [kv*D, C] and
 * must agree. FORMAT with a message naming the file and the tensor or key if
 * it is not a Llama checkpoint, or if it holds a tensor the builder would
 * not use (a Qwen2's 'model.layers.0.self_attn.q_proj.bias', a layer past a
 * gap, 'lm_head.weight' beside ...): every tensor must be one of the
 * model's params, or pipit's optimizer state ('opt.m.*', 'opt.v.*'), or a
 * 'rotary_emb.inv_freq' buffer (older transformers saved it; RoPE keeps no
 * table). */
PIPIT_API pipit_status pipit_llama_config_from_checkpoint(const pipit_checkpoint *ck, pipit_llama_config *cfg);
/* Reads a Hugging Face config.json (LlamaConfig) into cfg: vocab_size,
 * hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads (absent: = heads), max_position_embeddings,
 * rms_norm_eps, tie_word_embeddings (absent: false, as LlamaConfig), and
 * RoPE in both spellings: transformers < 5's top-level "rope_theta" with
 * "rope_scaling" (null or an object), and transformers >= 5's
 * "rope_parameters" {"rope_theta", "rope_type", ...}; a value given in
 * both places must be the same (INVALID naming both). rope_type (or the
 * older "type") "default" is plain RoPE, "llama3" sets cfg->rope_scaling
 * from "factor", "low_freq_factor", "high_freq_factor" and
 * "original_max_position_embeddings" (all required); any other rope_type
 * is refused by name. *present (if not NULL) gets a PIPIT_LLAMA_HAS_* bit
 * per field the file gave. What pipit does not implement is refused
 * (INVALID, naming the key): a model_type other than "llama", "qwen2",
 * "mixtral" or "qwen2_moe", attention_bias or mlp_bias true, a head_dim
 * other than hidden_size / num_attention_heads, a hidden_act other than
 * "silu", a nonzero attention_dropout.
 * The model type sets attn_bias (1 for "qwen2" and "qwen2_moe": their
 * q/k/v biases; use_sliding_window true refused) and the mixture of
 * experts (all zero for "llama" and "qwen2"): "mixtral" moe_layout
 * PIPIT_LLAMA_MOE_MIXTRAL, experts num_local_experts, top_k
 * num_experts_per_tok, F intermediate_size (router_jitter_noise other
 * than 0 and a sliding_window below max_position_embeddings refused);
 * "qwen2_moe" PIPIT_LLAMA_MOE_QWEN2, experts num_experts, F
 * moe_intermediate_size, shared_experts shared_expert_intermediate_size /
 * F with shared_gate 1, moe_every decoder_sparse_step, route_unnormalized
 * 1 when norm_topk_prob is false or absent (refused: a non-empty
 * mlp_only_layers, a dense
 * intermediate_size other than F when some layers are dense); both
 * dropless 1 and the softmax router (transformers computes every choice),
 * aux_loss router_aux_loss_coef when output_router_logits is true (else
 * 0), absent keys as transformers' config classes default them.
 * IO / FORMAT for an unreadable file, bad JSON, text
 * after the object or a key that appears twice in one object. The
 * config's other fields are untouched. */
enum {
    PIPIT_LLAMA_HAS_VOCAB = 1 << 0,
    PIPIT_LLAMA_HAS_DIM = 1 << 1,
    PIPIT_LLAMA_HAS_FFN = 1 << 2,
    PIPIT_LLAMA_HAS_LAYERS = 1 << 3,
    PIPIT_LLAMA_HAS_HEADS = 1 << 4,
    PIPIT_LLAMA_HAS_KV_HEADS = 1 << 5,
    PIPIT_LLAMA_HAS_MAX_CTX = 1 << 6,
    PIPIT_LLAMA_HAS_NORM_EPS = 1 << 7,
    PIPIT_LLAMA_HAS_ROPE_THETA = 1 << 8,
    PIPIT_LLAMA_HAS_TIED = 1 << 9,
    PIPIT_LLAMA_HAS_ROPE_SCALING = 1 << 10, /* a rope_type was given ("default" included) */
    PIPIT_LLAMA_HAS_MOE = 1 << 11 /* a mixture of experts: model_type "mixtral" or "qwen2_moe" */
};
PIPIT_API pipit_status pipit_llama_config_from_hf(const char *config_json, pipit_llama_config *cfg, int *present);
/* Writes cfg as a Hugging Face config.json (LlamaConfig, the dtype as
 * torch_dtype) to f, so that transformers' from_pretrained opens a folder
 * holding it beside the weights (model.safetensors); `pipit export --hf`
 * writes one. With attn_bias it is a Qwen2Config (Qwen2ForCausalLM), with
 * moe_layout PIPIT_LLAMA_MOE_MIXTRAL a MixtralConfig and with
 * PIPIT_LLAMA_MOE_QWEN2 a Qwen2MoeConfig (their MoE keys from the
 * experts fields; output_router_logits true when aux_loss > 0); INVALID
 * naming the field for what neither class has (stacked experts
 * (moe_layout 0), the sigmoid router, route_bias, ...). RoPE as "rope_theta" and "rope_scaling" (null, or the llama3
 * object), which transformers reads before and after 5; bos_token_id and
 * eos_token_id both the vocabulary's last id (vocab - 1: byte 255 of a
 * byte-level model, which UTF-8 text never holds; GPT-2's <|endoftext|>).
 * INVALID for a NULL argument or a config pipit_llama_check refuses, IO if
 * writing fails. */
PIPIT_API pipit_status pipit_llama_write_hf_config(const pipit_llama_config *cfg, FILE *f);
/* The same with the given bos_token_id and eos_token_id (a tokenizer's),
 * each an id of the vocabulary (INVALID otherwise). */
PIPIT_API pipit_status pipit_llama_write_hf_config_ex(const pipit_llama_config *cfg, int bos_token_id,
                                                      int eos_token_id, FILE *f);

/* One microbatch's feeds: out[0..1] = tokens, targets (borrowed buffers,
 * each i32 [B,T] with B = c->batch, T = c->ctx). */
PIPIT_API pipit_status pipit_llama_feeds(const pipit_llama_config *c, const int32_t *tokens,
                                         const int32_t *targets, pipit_feed out[2]);

#ifdef __cplusplus
}
#endif
#endif /* PIPIT_LLAMA_H */
