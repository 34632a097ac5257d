/*
 * cost.c — per-stage task costs and memory of a decoder-only transformer on
 * a (tp, pp, dp) mesh: FLOPs of each GEMM through the machine's efficiency
 * curve, bytes of each elementwise kernel through its memory bandwidth,
 * tensor parallelism's all-reduces, the stage-to-stage message. Every
 * formula and its source is in docs/sim.md ("The cost model").
 */
#include <math.h>
#include <string.h>

#include "pipit_moe.h"
#include "sim/sim.h"
#include "util/checked.h"
#include "util/common.h"

/* The sizes every formula below reads, in doubles (all exact integers):
 * b, s, h, a, t, V as in Megatron's papers, T = b s tokens, fh the MLP
 * width, kvw the width of k (and of v): kv heads x head size. */
typedef struct {
    double b, s, h, a, t, V, T, fh, gates, e, kvw;
    int d;       /* dtype index */
    int flash;   /* attention as pipit's kernels run it (0: Megatron 2021's unfused softmax) */
    int rope;    /* rotary positions instead of a position table */
    double mask; /* bytes of one dropout mask element: 1, or 0 without dropout (Llama) */
    double c;    /* context-parallel ranks: T = b s / c tokens on each GPU, attention against all s keys */
    double sq;   /* queries per sequence on one GPU: s / c */
    double tsp;  /* what the regions outside the TP matmuls are cut by: t with sequence parallelism, else 1 */
    /* mixture of experts (E = 0: dense) */
    double E, k, S, fe, ep, slots; /* experts, top-k, shared, expert width, EP ranks, slots per expert */
} dims;

/* One transformer layer, one microbatch, one GPU of the TP group. */
typedef struct {
    double f, b, w;        /* forward; backward to the input (dgrad + elementwise); weight gradients */
    double tp_fwd;         /* its forward's TP all-reduce seconds */
    double cp_fwd, a2a_fwd; /* its forward's K/V all-gather and MoE all-to-all seconds (the backward's the same) */
    double eparams;        /* of params, the routed experts' */
    double act_full;       /* bytes of activations kept for its backward (no recompute) */
    double bwd_work;       /* bytes its backward holds for a moment beyond the kept ones */
    double params;
} layer_cost;

static double esize_of(int d) { return d == HW_BF16 || d == HW_FP16 ? 2.0 : 4.0; }

/* Links of a group of n ranks `stride` GPUs apart (Megatron's order: tp,
 * cp, dp, pp from the innermost): inside a node when it spans at most one. */
static int group_intra(const pipit_hw *hw, double stride, double n) { return stride * n <= hw->gpus_per_node; }

/* K and V of the whole sequence, per TP rank (kv heads / t of them), all
 * gathered over the context-parallel group, or their gradients reduce-
 * scattered: the bytes one GPU receives, and the seconds. */
static double cp_kv_bytes(const dims *x) { return (x->c - 1) / x->c * x->b * x->s * 2 * x->kvw / x->t * x->e; }
static double cp_kv_time(const pipit_hw *hw, const dims *x) {
    if (x->c <= 1) return 0;
    int intra = group_intra(hw, x->t, x->c);
    return pipit__hw_allgather_time(x->b * x->s * 2 * x->kvw / x->t * x->e, (int)x->c,
                                    intra ? hw->intra_bw : hw->inter_bw, intra ? hw->intra_lat : hw->inter_lat);
}

/* One all-to-all of a MoE layer over the ep group (ranks t c apart): each
 * GPU's dispatch buffer, E x slots tokens of h (1/t of it per TP rank),
 * (ep-1)/ep of it to other ranks; the share to ranks on other nodes goes
 * over the NICs, the rest over NVLink, at the same time. */
static double a2a_bytes(const dims *x) { return (x->ep - 1) / x->ep * x->E * x->slots * x->h * x->e / x->t; }
static double a2a_time(const pipit_hw *hw, const dims *x) {
    if (x->E < 1 || x->ep <= 1) return 0;
    double whole = x->E * x->slots * x->h * x->e / x->t;
    double per_node = fmax(1.0, fmin(x->ep, floor(hw->gpus_per_node / (x->t * x->c)))); /* group ranks a node holds */
    double intra = (per_node - 1) / x->ep * whole, inter = (x->ep - per_node) / x->ep * whole;
    double lat = (x->ep - 1) * (inter > 0 ? hw->inter_lat : hw->intra_lat);
    return fmax(intra / hw->intra_bw, inter > 0 ? inter / hw->inter_bw : 0) + lat;
}

/* Ring all-reduce over the TP group (NVLink inside a node, else the NICs). */
static double tp_allreduce(const pipit_hw *hw, const dims *x, double bytes) {
    int intra = x->t <= hw->gpus_per_node;
    return pipit__hw_allreduce_time(bytes, (int)x->t, intra ? hw->intra_bw : hw->inter_bw,
                                    intra ? hw->intra_lat : hw->inter_lat);
}

/* Score and context products of the attention (one [s,s] x [s,hd] product
 * per head and sequence), `n` of them. Flash-style kernels skip the key
 * tiles the causal mask hides: (s+1)/2s of the square. */
static double attn_gemms(const pipit_hw *hw, const dims *x, double n) {
    /* context parallelism: s/c queries against the s keys; with the 2c
     * chunks balanced, each GPU's causal share is the same (s+1)/2s */
    double part = x->flash ? (x->s + 1) / (2 * x->s) : 1;
    return n * pipit__hw_gemm_time(hw, x->d, x->b * x->a / x->t * part, x->sq, x->s, x->h / x->a);
}

/* The routed and shared experts of a MoE layer on one GPU: E/ep experts
 * of ep x slots rows each (every rank's tokens for them), the width cut by
 * t; the shared experts one MLP of width S x fe; the router T x E x h. */
static double moe_gemms(const pipit_hw *hw, const dims *x) {
    double rows = x->ep * x->slots, fe = x->fe / x->t, sw = x->S * x->fe / x->t;
    double routed = x->gates * pipit__hw_gemm_time(hw, x->d, x->E / x->ep, rows, fe, x->h) +
                    pipit__hw_gemm_time(hw, x->d, x->E / x->ep, rows, x->h, fe);
    double shared = x->S > 0 ? x->gates * pipit__hw_gemm_time(hw, x->d, 1, x->T, sw, x->h) +
                                   pipit__hw_gemm_time(hw, x->d, 1, x->T, x->h, sw)
                             : 0;
    return routed + shared + pipit__hw_gemm_time(hw, x->d, 1, x->T, x->E, x->h);
}

static layer_cost layer(const pipit_hw *hw, const dims *x, pipit_recompute recompute, int moe) {
    layer_cost c = {0};
    double T = x->T, h = x->h, t = x->t, kv = x->kvw;
    /* the GEMMs of the layer: QKV (k and v kv wide: grouped-query), the
     * attention's, projection, MLP in (gated: two) and out, or a MoE
     * layer's experts and router */
    double qkv = pipit__hw_gemm_time(hw, x->d, 1, T, (h + 2 * kv) / t, h);
    double proj = pipit__hw_gemm_time(hw, x->d, 1, T, h, h / t);
    double fc1 = moe ? 0 : x->gates * pipit__hw_gemm_time(hw, x->d, 1, T, x->fh / t, h);
    double fc2 = moe ? 0 : pipit__hw_gemm_time(hw, x->d, 1, T, h, x->fh / t);
    double dense = qkv + proj + fc1 + fc2 + (moe ? moe_gemms(hw, x) : 0);
    /* elementwise traffic: norms and (bias-dropout-)adds on the hidden
     * state (not split by TP; split with sequence parallelism), the
     * activation on the MLP's width (split), RoPE on q and k (split);
     * unfused, softmax + dropout on the scores. MoE: the activation on
     * every slot, dispatch and combine copies, the router's softmax/top-k */
    double e = x->e, sq = x->b * (x->a / t) * x->sq * x->s;
    double act_fn = x->gates > 1 ? 3 * e : 2 * e;
    double rows = x->E * x->slots; /* routed rows one GPU computes (E/ep experts x ep x slots) */
    double act_f = moe ? (rows + T * x->S) * (x->fe / t) * act_fn : T * (x->fh / t) * act_fn; /* the activation */
    double mlp_f = act_f + (moe ? 2 * (rows + T) * h * e / t + T * x->E * 12 : 0);
    double mem_f = T * h * (10 * e + 2 * x->mask) / x->tsp + mlp_f + (x->rope ? 2 * e * T * (h + kv) / t : 0) +
                   (x->flash ? 0 : sq * (4 * e + 1));
    /* with sequence parallelism each all-reduce is an all-gather and a
     * reduce-scatter of the same bytes: the same ring time */
    double ar = tp_allreduce(hw, x, T * h * e);
    double cpt = cp_kv_time(hw, x), a2a = moe ? 2 * a2a_time(hw, x) : 0; /* dispatch + combine */
    c.tp_fwd = 2 * ar;
    c.cp_fwd = cpt, c.a2a_fwd = a2a;
    c.f = dense + attn_gemms(hw, x, 2) + pipit__hw_mem_time(hw, mem_f) + (moe ? 14 : 8) * hw->kernel_overhead +
          c.tp_fwd + cpt + a2a;
    /* backward: every dense GEMM again for the input gradients; the
     * attention's four (both operands are activations), five flash-style
     * (the scores recomputed from q and k); twice the elementwise traffic,
     * the same two all-reduces; full recompute adds a forward */
    c.b = dense + attn_gemms(hw, x, x->flash ? 5 : 4) + pipit__hw_mem_time(hw, 2 * mem_f) +
          (moe ? 28 : 16) * hw->kernel_overhead + 2 * ar + cpt + a2a; /* K/V gradients reduce-scattered */
    /* sequence parallelism keeps the QKV's and MLP's inputs cut by t and
     * all-gathers them again for the weight gradients: two all-gathers,
     * one all-reduce's time (Korthikanti et al. 2022, section 4.2.2) */
    if (x->tsp > 1) c.b += ar;
    if (recompute == PIPIT_RECOMPUTE_FULL) c.b += c.f;
    /* pointwise: the MLP's activation (GELU; SwiGLU's silu and product)
     * again, its elementwise traffic once more, no GEMM */
    if (recompute == PIPIT_RECOMPUTE_POINTWISE) c.b += pipit__hw_mem_time(hw, act_f) + 2 * hw->kernel_overhead;
    c.w = dense;
    /* Korthikanti et al. 2022, eq. 2, generalised to any element size, MLP
     * width and kv width (q, k, v and the projection's input are kept);
     * flash-style attention keeps nothing of size s^2; sequence
     * parallelism cuts the first term (norms, residuals, dropout masks and
     * the matmuls' inputs) by t (Korthikanti's eq. 4, 34 sbh / t); context
     * parallelism keeps the gathered K and V of the other ranks too. A MoE
     * layer keeps, for each of its rows, the dispatched input and the
     * expert's output (the combine's weight gradient) and the expert's
     * activations, the shared experts' as a dense MLP's, the router's fp32
     * probabilities and the k weights and indices of each token. The MLP
     * keeps what pipit's autodiff keeps: GELU its input and output (2 F),
     * SwiGLU the gate and up outputs, silu(gate) and their product (4 F:
     * the silu's output is a tensor of its own, read by the product's
     * backward); with pointwise recompute GELU its input (1 F), SwiGLU the
     * gate and up (2 F): the backward computes the rest again */
    double mlp_rows = (recompute == PIPIT_RECOMPUTE_POINTWISE ? 1 : 2) * x->gates; /* kept MLP-width values per row */
    double mlp_keep = moe ? (rows * (2 * h * e + mlp_rows * e * x->fe) + T * x->S * mlp_rows * e * x->fe) / t +
                                T * (4 * x->E + 8 * x->k)
                          : T * mlp_rows * e * x->fh / t;
    c.act_full = T * h * (4 * e + 2 * x->mask) / x->tsp + T * h * (2 + 2 * kv / h) * e / t + mlp_keep +
                 cp_kv_bytes(x) + (x->flash ? 0 : sq * (2 * e + 1));
    /* the backward's own buffers at its fullest: the gradient arriving at
     * the layer (T h) and one MLP-width gradient (T F / t; a MoE layer's
     * on its E slots rows) alive together, as pipit's planner lays them */
    c.bwd_work = (T * h + (moe ? rows * x->fe : T * x->fh) / t) * e;
    /* with rotary positions (Llama) no biases and RMSNorm's h weights;
     * else (GPT) the biases and LayerNorm's 2h */
    double bias = x->rope ? 0 : 1;
    double attn_params = (2 * h * h + 2 * h * kv + bias * (h + 2 * kv)) / t + (x->rope ? 2 * h : 6 * h);
    if (moe) {
        double expert = (x->gates + 1) * x->fe * h + bias * x->gates * x->fe; /* one expert's matrices and biases */
        c.eparams = x->E / x->ep * expert / t;
        c.params = attn_params + c.eparams + x->S * expert / t + x->E * h;
    } else {
        c.params = attn_params + ((x->gates + 1) * x->fh * h + bias * x->gates * x->fh) / t;
    }
    return c;
}

/* Embedding lookup (+ positions) on the first stage: a gather, and with TP
 * Megatron's vocabulary-parallel embedding all-reduces its output. */
static void embedding(const pipit_hw *hw, const dims *x, double *f, double *w, double *params) {
    /* sequence parallelism: the vocabulary-parallel output reduce-scattered, half an all-reduce */
    *f += pipit__hw_mem_time(hw, 3 * x->e * x->T * x->h) + (x->tsp > 1 ? 0.5 : 1.0) * tp_allreduce(hw, x, x->T * x->h * x->e);
    *w += pipit__hw_mem_time(hw, 3 * x->e * x->T * x->h);
    *params += x->V * x->h / x->t + (x->rope ? 0 : x->s * x->h);
}

/* The vocabulary-parallel cross-entropy's three all-reduces of one number
 * per token (the row max, the sum of exponentials, the target logit), in
 * the forward: pipit_tp_xent_mean, as Megatron's. */
static double xent_allreduces(const pipit_hw *hw, const dims *x) { return 3 * tp_allreduce(hw, x, x->T * x->e); }

/* Final LayerNorm, logits against the (tied) embedding, cross-entropy on the
 * last stage; its input gradient is all-reduced over TP. */
static void head(const pipit_hw *hw, const dims *x, int own_copy, double *f, double *b, double *w, double *params,
                 double *act, double *work) {
    double T = x->T, Vt = x->V / x->t;
    double logits = pipit__hw_gemm_time(hw, x->d, 1, T, Vt, x->h);
    *f += pipit__hw_mem_time(hw, 2 * x->e * T * x->h / x->tsp + T * Vt * (x->e + 4)) + logits + xent_allreduces(hw, x);
    *b += pipit__hw_mem_time(hw, 4 * x->e * T * x->h + T * Vt * (x->e + 4)) + logits +
          tp_allreduce(hw, x, T * x->h * x->e);
    *w += logits;
    /* the tied embedding: a copy of its own when the first stage is on another rank */
    *params += (own_copy ? Vt * x->h : 0) + (x->rope ? 1 : 2) * x->h; /* RMSNorm or LayerNorm */
    /* the final norm's input and output, kept for the backward */
    *act += 2 * T * x->h * x->e / x->tsp;
    /* the logits and their gradient while the loss runs: T x V/t of each
     * (e + 4 bytes: the gradient of a 16-bit run's fp32 cross-entropy);
     * the larger of that and a layer's backward buffers */
    *work = fmax(*work, T * Vt * (x->e + 4));
}

/* The largest D shards of one parameter a rank's data-parallel exchange
 * buffer holds (pipit__sim_model.dpbuf), in elements: the embedding V h/t,
 * a layer's fused QKV (h + 2 kvw) h/t, an MLP matrix F h/t, or a MoE
 * layer's stacked experts (a rank's E/ep of them sharded over the D/ep
 * replicas holding them: D shards are E fe h/t whatever ep). */
static double largest_param(const dims *x) {
    double m = fmax(x->V * x->h, fmax((x->h + 2 * x->kvw) * x->h, x->fh * x->h));
    if (x->E > 0) m = fmax(m, x->E * x->fe * x->h);
    return m / x->t;
}

/* The MLP width F and the kv heads a config means (its zeros resolved). */
static double ffn_width(const pipit_sim_config *c) {
    return c->ffn_hidden > 0 ? (double)c->ffn_hidden : (c->ffn_mult > 0 ? c->ffn_mult : 4.0) * c->hidden;
}
static int kv_heads(const pipit_sim_config *c) { return c->kv_heads > 0 ? c->kv_heads : c->heads; }
static int cp_of(const pipit_sim_config *c) { return c->cp > 1 ? c->cp : 1; }
static int ep_of(const pipit_sim_config *c) { return c->ep > 1 ? c->ep : 1; }
static int topk_of(const pipit_sim_config *c) { return c->top_k > 0 ? c->top_k : 2; }
static double expert_width(const pipit_sim_config *c) { return c->expert_ffn > 0 ? (double)c->expert_ffn : ffn_width(c); }
/* MoE layers among layers [a, b) (from 0): layer l is one when
 * (l + 1) % moe_every == 0, i.e. the multiples of moe_every in [a+1, b]. */
static int64_t moe_layers(const pipit_sim_config *c, int64_t a, int64_t b) {
    if (c->experts <= 0 || b <= a) return 0;
    if (c->moe_every <= 1) return b - a;
    return b / c->moe_every - a / c->moe_every;
}

/* Sequence, context and expert parallelism and the MoE fields, each bad
 * value a message naming it. */
static pipit_status check_seq_moe(const pipit_sim_config *c) {
    if (c->sp != 0 && c->sp != 1) return pipit__err(PIPIT_STATUS_INVALID, "sp must be 0 or 1 (got %d)", c->sp);
    if (c->cp < 0) return pipit__err(PIPIT_STATUS_INVALID, "cp must be >= 1 (got %d)", c->cp);
    int cp = cp_of(c);
    if (cp > 1 && c->seq % (2 * cp))
        return pipit__err(PIPIT_STATUS_INVALID,
                          "seq %d is not divisible by 2 x cp = %d (context parallelism cuts the sequence into 2 x cp "
                          "chunks, rank i holding chunks i and 2cp-1-i)", c->seq, 2 * cp);
    if (c->sp && c->tp < 2)
        return pipit__err(PIPIT_STATUS_INVALID, "sequence parallelism (sp) needs tp > 1 (got tp %d): it cuts the "
                          "sequence over the tensor-parallel group", c->tp);
    if (c->sp && (c->seq / cp) % c->tp)
        return pipit__err(PIPIT_STATUS_INVALID, "seq %d%s is not divisible by tp %d (sequence parallelism cuts each "
                          "rank's tokens over the tensor-parallel group)", cp > 1 ? c->seq / cp : c->seq,
                          cp > 1 ? " (seq / cp)" : "", c->tp);
    const struct { const char *name; int v; } nonneg[] = {{"experts", c->experts}, {"top-k", c->top_k},
        {"shared experts", c->shared_experts}, {"moe every", c->moe_every}, {"ep", c->ep}, {"expert ffn", c->expert_ffn}};
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
        if (nonneg[i].v < 0)
            return pipit__err(PIPIT_STATUS_INVALID, "%s must be >= 0 (got %d)", nonneg[i].name, nonneg[i].v);
    if (!(c->capacity_factor >= 0) || !isfinite(c->capacity_factor) || (c->capacity_factor == 0 && signbit(c->capacity_factor)))
        return pipit__err(PIPIT_STATUS_INVALID, "capacity factor must be > 0 (got %g)", c->capacity_factor);
    if (c->dropless != 0 && c->dropless != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "dropless must be 0 or 1 (got %d)", c->dropless);
    if (!c->experts) {
        const char *what = c->top_k ? "top-k" : c->shared_experts ? "shared experts" : c->moe_every ? "moe every"
                         : c->capacity_factor > 0 ? "capacity factor" : c->dropless ? "dropless"
                         : c->ep > 1 ? "ep" : c->expert_ffn ? "expert ffn" : NULL;
        if (what) return pipit__err(PIPIT_STATUS_INVALID, "%s is a mixture-of-experts setting: give experts too", what);
        return PIPIT_STATUS_OK;
    }
    if (topk_of(c) > c->experts)
        return pipit__err(PIPIT_STATUS_INVALID, "top-k %d is more than the experts (%d)", topk_of(c), c->experts);
    if (c->experts % ep_of(c))
        return pipit__err(PIPIT_STATUS_INVALID, "experts %d is not divisible by ep %d (each expert-parallel rank "
                          "holds whole experts)", c->experts, ep_of(c));
    if (c->dp % ep_of(c))
        return pipit__err(PIPIT_STATUS_INVALID, "dp %d is not divisible by ep %d (the expert-parallel ranks are "
                          "taken from the data-parallel group)", c->dp, ep_of(c));
    if (fmod(expert_width(c), c->tp) != 0)
        return pipit__err(PIPIT_STATUS_INVALID, "the expert width %g is not a whole multiple of tp %d",
                          expert_width(c), c->tp);
    return PIPIT_STATUS_OK;
}

pipit_status pipit__sim_microbatches(const pipit_sim_config *c, int64_t *M) {
    if (c->micro_batch < 1 || c->dp < 1 || c->global_batch < 1)
        return pipit__err(PIPIT_STATUS_INVALID, "micro-batch, dp and global batch must be >= 1 (got %d, %d, %lld)",
                          c->micro_batch, c->dp, (long long)c->global_batch);
    int64_t per = (int64_t)c->micro_batch * c->dp;
    if (c->global_batch % per)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "global batch %lld is not divisible by micro-batch %d x dp %d = %lld",
                          (long long)c->global_batch, c->micro_batch, c->dp, (long long)per);
    *M = c->global_batch / per;
    if (*M > PIPIT_MAX_MICROBATCHES)
        return pipit__err(PIPIT_STATUS_INVALID, "%lld microbatches per step: more than the limit %d",
                          (long long)*M, PIPIT_MAX_MICROBATCHES);
    return PIPIT_STATUS_OK;
}

static pipit_status check_config(const pipit_sim_config *c, const pipit_hw *hw, int V, int64_t *M) {
    const struct { const char *name; int64_t v; } pos[] = {
        {"layers", c->layers}, {"hidden", c->hidden}, {"heads", c->heads}, {"seq", c->seq},
        {"vocab", c->vocab}, {"micro-batch", c->micro_batch}, {"global-batch", c->global_batch},
        {"tp", c->tp}, {"pp", c->pp}, {"dp", c->dp}, {"virtual", V}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < 1) return pipit__err(PIPIT_STATUS_INVALID, "%s must be >= 1 (got %lld)", pos[i].name, (long long)pos[i].v);
    if (!(c->ffn_mult >= 0) || !isfinite(c->ffn_mult))
        return pipit__err(PIPIT_STATUS_INVALID, "ffn multiplier must be > 0 (got %g)", c->ffn_mult);
    if (!(c->eager_limit >= 0) || !isfinite(c->eager_limit))
        return pipit__err(PIPIT_STATUS_INVALID,
                          "eager limit must be a finite number >= 0 bytes (0: every message eager; got %g)",
                          c->eager_limit);
    if (c->ffn_hidden < 0 || c->kv_heads < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "%s must be >= 1, or 0 for the default (got %d)",
                          c->ffn_hidden < 0 ? "ffn hidden" : "kv heads", c->ffn_hidden < 0 ? c->ffn_hidden : c->kv_heads);
    if (c->ffn_hidden > 0 && c->ffn_mult > 0)
        return pipit__err(PIPIT_STATUS_INVALID, "give the MLP width as ffn hidden %d or as ffn multiplier %g, not both",
                          c->ffn_hidden, c->ffn_mult);
    if (c->recompute != PIPIT_RECOMPUTE_NONE && c->recompute != PIPIT_RECOMPUTE_FULL &&
        c->recompute != PIPIT_RECOMPUTE_POINTWISE)
        return pipit__err(PIPIT_STATUS_INVALID, "recompute must be none, full or pointwise (got %d)", (int)c->recompute);
    if (c->hidden % c->heads)
        return pipit__err(PIPIT_STATUS_INVALID, "hidden %d is not divisible by heads %d", c->hidden, c->heads);
    if (c->heads % c->tp)
        return pipit__err(PIPIT_STATUS_INVALID, "heads %d is not divisible by tp %d (each TP rank holds whole heads)",
                          c->heads, c->tp);
    if (c->kv_heads > c->heads || c->heads % kv_heads(c))
        return pipit__err(PIPIT_STATUS_INVALID, "heads %d is not a multiple of kv heads %d (grouped-query attention)",
                          c->heads, c->kv_heads);
    if (kv_heads(c) % c->tp)
        return pipit__err(PIPIT_STATUS_INVALID, "kv heads %d is not divisible by tp %d (each TP rank holds whole kv heads)",
                          kv_heads(c), c->tp);
    double fh = ffn_width(c);
    if (!(fh <= 2147483647.0)) /* a width like the others: beyond it the FLOP counts leave double's range */
        return pipit__err(PIPIT_STATUS_INVALID, "the MLP width %g (ffn multiplier %g x hidden %d) must be at most 2^31-1",
                          fh, c->ffn_mult, c->hidden);
    if (fmod(fh, c->tp) != 0 || fh != floor(fh))
        return pipit__err(PIPIT_STATUS_INVALID, "the MLP width %g is not a whole multiple of tp %d", fh, c->tp);
    if (c->vocab % c->tp)
        return pipit__err(PIPIT_STATUS_INVALID, "vocab %d is not divisible by tp %d (vocabulary-parallel embedding)",
                          c->vocab, c->tp);
    int64_t S = (int64_t)c->pp * V, slots = (int64_t)c->layers + (c->ends_as_layers ? 2 : 0);
    if (S > slots)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "layers %d cannot be split into pp %d x virtual %d = %lld stages of at least one layer%s",
                          c->layers, c->pp, V, (long long)S, c->ends_as_layers ? " (the embedding and the head "
                          "counted as a layer each)" : "");
    pipit_status st = pipit__sim_microbatches(c, M);
    if (st) return st;
    if ((st = check_seq_moe(c))) return st;
    int64_t g;
    if (!pipit__mul_le(c->tp, c->pp, 1 << 24, &g) || !pipit__mul_le(g, cp_of(c), 1 << 24, &g) ||
        !pipit__mul_le(g, c->dp, 1 << 24, &g))
        return pipit__err(PIPIT_STATUS_INVALID, "tp %d x cp %d x pp %d x dp %d GPUs: more than 2^24", c->tp, cp_of(c),
                          c->pp, c->dp);
    if (c->tp > hw->gpus_per_node)
        return pipit__err(PIPIT_STATUS_INVALID, "tp %d spans more than one node of '%s' (%d GPUs per node)", c->tp,
                          hw->name, hw->gpus_per_node);
    int d = c->dtype ? pipit__hw_dtype(c->dtype) : hw->train_dtype;
    if (d < 0) return pipit__err(PIPIT_STATUS_INVALID, "unknown dtype '%s': expected fp32, tf32, bf16 or fp16", c->dtype);
    if (!(hw->peak[d] > 0))
        return pipit__err(PIPIT_STATUS_INVALID, "hardware '%s' gives no %s peak", hw->name, pipit__hw_dtype_name(d));
    return PIPIT_STATUS_OK;
}

void pipit__sim_model_free(pipit__sim_model *m) {
    if (!m) return;
    pipit__free(m->f);
    memset(m, 0, sizeof *m);
}

static pipit_status model_alloc(pipit__sim_model *m, int S) {
    memset(m, 0, sizeof *m);
    m->f = pipit__calloc((size_t)S * 9, sizeof(double));
    if (!m->f) return pipit__err(PIPIT_STATUS_NOMEM, "sim: out of memory");
    m->b = m->f + S, m->w = m->f + 2 * S, m->act = m->f + 3 * S, m->work = m->f + 4 * S, m->params = m->f + 5 * S;
    m->layers = m->f + 6 * S, m->eparams = m->f + 7 * S, m->accum = m->f + 8 * S;
    m->S = S;
    return PIPIT_STATUS_OK;
}

/* Stage-to-stage message: with TP each of the t GPUs of a stage sends the
 * whole activation to its counterpart in the next stage (pipit: the T
 * ranks of a stage hold replicated activations between blocks), or, with
 * scatter_gather_p2p, Megatron's scatter/gather: 1/t of it per GPU, then
 * an all-gather inside the node. The latency is the edge's (sim.c books
 * the transfer on the link or, blocking_p2p, on the sender). */
static void p2p(const pipit_sim_config *c, const pipit_hw *hw, const dims *x, pipit__sim_model *m) {
    double full = x->T * x->h * x->e; /* T: the rank's b s / c tokens */
    m->p2p_inter = (double)c->tp * cp_of(c) * c->dp * c->pp > hw->gpus_per_node;
    double bw = m->p2p_inter ? hw->inter_bw : hw->intra_bw, lat = m->p2p_inter ? hw->inter_lat : hw->intra_lat;
    /* sequence parallelism: a stage ends with 1/t of the sequence on each
     * GPU and the next begins so (no gather: its first norm runs on it) */
    int scatter = c->scatter_gather_p2p && c->tp > 1 && !c->sp;
    m->p2p_bytes = scatter || c->sp ? full / x->t : full;
    m->comm = lat;
    m->p2p_xfer = m->p2p_bytes / bw;
    if (scatter) m->p2p_xfer += (x->t - 1) / x->t * full / hw->intra_bw + (x->t - 1) * hw->intra_lat;
}

pipit_status pipit__sim_model_build(const pipit_sim_config *c, const pipit_hw *hw, int V, int head_with_first,
                                    pipit__sim_model *m) {
    int64_t M;
    pipit_status st = check_config(c, hw, V, &M);
    if (st) return st;
    int S = c->pp * V;
    if ((st = model_alloc(m, S))) return st;
    int d = c->dtype ? pipit__hw_dtype(c->dtype) : hw->train_dtype;
    int cp = cp_of(c);
    dims x = {c->micro_batch, c->seq, c->hidden, c->heads, c->tp, c->vocab, (double)c->micro_batch * c->seq / cp,
              ffn_width(c), c->gated_mlp ? 2 : 1, esize_of(d), (double)kv_heads(c) * (c->hidden / c->heads), d,
              !c->unfused_attention, c->rope != 0, c->no_dropout ? 0 : 1, cp, (double)c->seq / cp, c->sp ? c->tp : 1,
              c->experts, topk_of(c), c->shared_experts, expert_width(c), ep_of(c), 0};
    if (c->experts) { /* the static capacity of the rank's microbatch, as pipit's builder sets it */
        int64_t cap = pipit_moe_capacity((int64_t)x.T, topk_of(c), c->experts,
                                         c->capacity_factor > 0 ? c->capacity_factor : 1.25, c->dropless);
        if (cap < 1) {
            pipit__sim_model_free(m);
            return pipit__err(PIPIT_STATUS_INVALID, "MoE capacity: %s", pipit_errmsg());
        }
        x.slots = (double)cap;
    }
    m->P = c->pp, m->V = V, m->M = (int)M, m->dtype = d, m->esize = (int)x.e, m->peak = hw->peak[d], m->ffn = x.fh;
    m->cp = cp, m->ep = ep_of(c), m->slots = x.slots;
    int full = c->recompute == PIPIT_RECOMPUTE_FULL;
    layer_cost lc = layer(hw, &x, c->recompute, 0), lm = c->experts ? layer(hw, &x, c->recompute, 1) : lc;
    int slots = c->layers + (c->ends_as_layers ? 2 : 0);
    int64_t first = 0; /* the stage's first transformer layer */
    double most = 0, most_moe = 0; /* the fullest stage (not stage 0 when the embedding counts as a layer) */
    for (int s = 0; s < S; s++) {
        /* pipit's builders' cut: the first (slots mod S) stages one layer
         * more; the ends' slots, if counted, are the embedding and the head */
        double Ls = slots / S + (s < slots % S) - (c->ends_as_layers ? (s == 0) + (s == S - 1) : 0);
        double Lm = (double)moe_layers(c, first, first + (int64_t)Ls); /* of which MoE layers */
        first += (int64_t)Ls;
        double Ld = Ls - Lm;
        m->layers[s] = Ls;
        m->f[s] = Ld * lc.f + Lm * lm.f, m->b[s] = Ld * lc.b + Lm * lm.b, m->w[s] = Ld * lc.w + Lm * lm.w;
        m->params[s] = Ld * lc.params + Lm * lm.params, m->eparams[s] = Lm * lm.eparams;
        /* full recompute keeps each layer's input; its backward rebuilds one layer at a time */
        m->act[s] = full ? Ls * x.T * x.h * x.e / x.tsp : Ld * lc.act_full + Lm * lm.act_full;
        /* a backward's own buffers; with full recompute on top of the
         * one layer it rebuilds */
        m->work[s] = fmax(Ld > 0 ? lc.bwd_work + (full ? lc.act_full : 0) : 0,
                          Lm > 0 ? lm.bwd_work + (full ? lm.act_full : 0) : 0);
        if (s == 0) embedding(hw, &x, &m->f[s], &m->w[s], &m->params[s]);
        if (s == S - 1) {
            head(hw, &x, !head_with_first, &m->f[s], &m->b[s], &m->w[s], &m->params[s], &m->act[s], &m->work[s]);
            /* the tied embedding's second use (the head): pipit sums each
             * use of a param apart, the first in the gradient block, the
             * others in accumulators of their own, V h/t on the head's rank */
            m->accum[s] = x.V * x.h / x.t * x.e;
        }
        if (Ls > most || (Ls == most && Lm > most_moe)) most = Ls, most_moe = Lm;
    }
    m->tp_s_per_mb = most * (full ? 3 : 2) * lc.tp_fwd;
    m->cp_s_per_mb = most * (full ? 3 : 2) * lc.cp_fwd;
    m->a2a_s_per_mb = most_moe * (full ? 3 : 2) * lm.a2a_fwd;
    m->cp_bytes_per_layer = cp_kv_bytes(&x);
    /* the gradient exchange over the c d replicas: each rank's buffer of
     * c d shards of the largest parameter (runtime/program.c) */
    double ng = (double)cp * c->dp;
    m->dpbuf = ng > 1 ? ng * ceil(largest_param(&x) / ng) * x.e : 0;
    m->a2a_bytes_per_layer = c->experts ? a2a_bytes(&x) : 0;
    pipit__sim_param_counts(c, &m->params_total, &m->params_active);
    m->tp_bytes_per_step = (double)c->layers / c->pp * (full ? 6 : 4) * x.T * x.h * x.e * (double)M;
    /* every all-reduce of a microbatch over all stages: the layers', the
     * embedding's, the head's input gradient and the cross-entropy's */
    m->tp_s_model_per_mb = (double)c->layers * (full ? 3 : 2) * lc.tp_fwd + 2 * tp_allreduce(hw, &x, x.T * x.h * x.e) +
                           xent_allreduces(hw, &x);
    p2p(c, hw, &x, m);
    return PIPIT_STATUS_OK;
}

/* Megatron's count (Narayanan et al. 2021, section 5.1), any MLP and kv
 * width as Megatron-LM's num_floating_point_operations counts them: per
 * layer forward 2T(2h^2 + 2h kvw + (gates+1) F h) + 4 b s^2 h (the whole
 * square of scores: model FLOPs, whatever the kernels skip), logits 2 T h V;
 * backward twice the forward; full recompute one more layer forward. */
double pipit__sim_model_flops(const pipit_sim_config *c, int count_recompute) {
    return pipit__sim_model_flops_x(c, count_recompute, 1.0);
}

double pipit__sim_model_flops_x(const pipit_sim_config *c, int count_recompute, double square) {
    double h = c->hidden, s = c->seq, fh = ffn_width(c), kvw = (double)kv_heads(c) * (c->hidden / c->heads);
    double gates = c->gated_mlp ? 2 : 1, tokens = (double)c->global_batch * s;
    double attn = 2 * tokens * (2 * h * h + 2 * h * kvw) + square * 4 * (double)c->global_batch * s * s * h;
    double layer_f = attn + 2 * tokens * (gates + 1) * fh * h;
    /* a MoE layer: the k routed and the shared experts each token goes
     * through (active parameters; capacity's empty or dropped slots are not
     * model FLOPs) and the router */
    double moe_f = attn + 2 * tokens * ((gates + 1) * expert_width(c) * h * (topk_of(c) + c->shared_experts) +
                                        h * c->experts);
    double nmoe = (double)moe_layers(c, 0, c->layers);
    double passes = count_recompute && c->recompute == PIPIT_RECOMPUTE_FULL ? 4 : 3;
    return passes * (layer_f * (c->layers - nmoe) + moe_f * nmoe) + 3 * 2 * tokens * h * c->vocab;
}

/* Parameters of the whole model as the memory model counts them (the
 * embedding once, as if tied): a layer's attention 2h^2 + 2h kvw (+ GPT's
 * biases h + 2 kvw and LayerNorms and output biases 6h; Llama's RMSNorms
 * 2h), a dense MLP (g+1) F h (+ g F biases), a MoE MLP E h (router) +
 * (E + S) experts of (g+1) fe h (+ g fe), of which a token uses k + S; the
 * embedding V h (+ s h learned positions) and the final norm (2h; h). */
void pipit__sim_param_counts(const pipit_sim_config *c, double *total, double *active) {
    double h = c->hidden, kv = (double)kv_heads(c) * (c->hidden / c->heads), g = c->gated_mlp ? 2 : 1;
    double bias = c->rope ? 0 : 1, F = ffn_width(c), fe = expert_width(c);
    double attn = 2 * h * h + 2 * h * kv + bias * (h + 2 * kv) + (c->rope ? 2 * h : 6 * h);
    double dense = (g + 1) * F * h + bias * g * F, expert = (g + 1) * fe * h + bias * g * fe;
    double ends = (double)c->vocab * h + (c->rope ? 0 : (double)c->seq * h) + (c->rope ? h : 2 * h);
    double nm = (double)moe_layers(c, 0, c->layers), nd = c->layers - nm;
    *total = ends + nd * (attn + dense) + nm * (attn + c->experts * h + (c->experts + c->shared_experts) * expert);
    *active = ends + nd * (attn + dense) + nm * (attn + c->experts * h + (topk_of(c) + c->shared_experts) * expert);
}

/* The attention's score and context FLOPs of a step as the cost model
 * prices them (attn_gemms): 2 b a s^2 hd per product, two forward, four
 * backward or five flash-style (+ two with full recompute), flash-style
 * the causal (s+1)/2s of the square. */
double pipit__sim_attn_flops(const pipit_sim_config *c) {
    double s = c->seq, M = (double)c->global_batch / c->micro_batch / c->dp;
    double n = (c->unfused_attention ? 6 : 7) + (c->recompute == PIPIT_RECOMPUTE_FULL ? 2 : 0);
    double part = c->unfused_attention ? 1 : (s + 1) / (2 * s);
    return n * 2 * c->micro_batch * s * s * c->hidden * part * c->layers * M;
}
