/*
 * cost.c — per-stage task costs and memory of a decoder-only transformer on
 * a (tp, pp, dp) mesh: FLOPs of each GEMM through the machine's efficiency
 * curve, bytes of each elementwise kernel through its memory bandwidth,
 * tensor parallelism's all-reduces, the stage-to-stage message. Every
 * formula and its source is in docs/sim.md ("The cost model").
 */
#include <math.h>
#include <string.h>

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
} dims;

/* One transformer layer, one microbatch, one GPU of the TP group. */
typedef struct {
    double f, b, w;        /* forward; backward to the input (dgrad + elementwise); weight gradients */
    double tp_fwd;         /* its forward's TP all-reduce seconds */
    double act_full;       /* bytes of activations kept for its backward (no recompute) */
    double params;
} layer_cost;

static double esize_of(int d) { return d == HW_BF16 || d == HW_FP16 ? 2.0 : 4.0; }

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
    double part = x->flash ? (x->s + 1) / (2 * x->s) : 1;
    return n * pipit__hw_gemm_time(hw, x->d, x->b * x->a / x->t * part, x->s, x->s, x->h / x->a);
}

static layer_cost layer(const pipit_hw *hw, const dims *x, int recompute) {
    layer_cost c = {0};
    double T = x->T, h = x->h, t = x->t, kv = x->kvw;
    /* the GEMMs of the layer: QKV (k and v kv wide: grouped-query), the
     * attention's, projection, MLP in (gated: two) and out */
    double qkv = pipit__hw_gemm_time(hw, x->d, 1, T, (h + 2 * kv) / t, h);
    double proj = pipit__hw_gemm_time(hw, x->d, 1, T, h, h / t);
    double fc1 = x->gates * pipit__hw_gemm_time(hw, x->d, 1, T, x->fh / t, h);
    double fc2 = pipit__hw_gemm_time(hw, x->d, 1, T, h, x->fh / t);
    double dense = qkv + proj + fc1 + fc2;
    /* elementwise traffic: norms and (bias-dropout-)adds on the full hidden
     * state (not split by TP), the activation on the MLP's width (split),
     * RoPE on q and k (split); unfused, softmax + dropout on the scores */
    double e = x->e, sq = x->b * (x->a / t) * x->s * x->s;
    double act_fn = x->gates > 1 ? 3 * e : 2 * e;
    double mem_f = T * h * (10 * e + 2) + T * (x->fh / t) * act_fn + (x->rope ? 2 * e * T * (h + kv) / t : 0) +
                   (x->flash ? 0 : sq * (4 * e + 1));
    double ar = tp_allreduce(hw, x, T * h * e);
    c.tp_fwd = 2 * ar;
    c.f = dense + attn_gemms(hw, x, 2) + pipit__hw_mem_time(hw, mem_f) + 8 * hw->kernel_overhead + c.tp_fwd;
    /* backward: every dense GEMM again for the input gradients; the
     * attention's four (both operands are activations), five flash-style
     * (the scores recomputed from q and k); twice the elementwise traffic,
     * the same two all-reduces; full recompute adds a forward */
    c.b = dense + attn_gemms(hw, x, x->flash ? 5 : 4) + pipit__hw_mem_time(hw, 2 * mem_f) + 16 * hw->kernel_overhead +
          2 * ar;
    if (recompute) c.b += c.f;
    c.w = dense;
    /* Korthikanti et al. 2022, eq. 2, generalised to any element size, MLP
     * width and kv width (q, k, v and the projection's input are kept);
     * flash-style attention keeps nothing of size s^2 */
    c.act_full = T * h * (4 * e + 2 + ((2 + 2 * kv / h) * e + x->gates * e * x->fh / h + e * x->fh / h) / t) +
                 (x->flash ? 0 : sq * (2 * e + 1));
    c.params = (2 * h * h + 2 * h * kv + (x->gates + 1) * x->fh * h + h + 2 * kv + x->gates * x->fh) / t + 6 * h;
    return c;
}

/* Embedding lookup (+ positions) on the first stage: a gather, and with TP
 * Megatron's vocabulary-parallel embedding all-reduces its output. */
static void embedding(const pipit_hw *hw, const dims *x, double *f, double *w, double *params) {
    *f += pipit__hw_mem_time(hw, 3 * x->e * x->T * x->h) + tp_allreduce(hw, x, x->T * x->h * x->e);
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
                 double *work) {
    double T = x->T, Vt = x->V / x->t;
    double logits = pipit__hw_gemm_time(hw, x->d, 1, T, Vt, x->h);
    *f += pipit__hw_mem_time(hw, 2 * x->e * T * x->h + T * Vt * (x->e + 4)) + logits + xent_allreduces(hw, x);
    *b += pipit__hw_mem_time(hw, 4 * x->e * T * x->h + T * Vt * (x->e + 4)) + logits +
          tp_allreduce(hw, x, T * x->h * x->e);
    *w += logits;
    /* the tied embedding: a copy of its own when the first stage is on another rank */
    *params += (own_copy ? Vt * x->h : 0) + 2 * x->h;
    *work += T * Vt * (x->e + 4); /* logits and their fp32 softmax, while the loss runs */
}

/* The MLP width F and the kv heads a config means (its zeros resolved). */
static double ffn_width(const pipit_sim_config *c) {
    return c->ffn_hidden > 0 ? (double)c->ffn_hidden : (c->ffn_mult > 0 ? c->ffn_mult : 4.0) * c->hidden;
}
static int kv_heads(const pipit_sim_config *c) { return c->kv_heads > 0 ? c->kv_heads : c->heads; }

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
    if (c->recompute != PIPIT_RECOMPUTE_NONE && c->recompute != PIPIT_RECOMPUTE_FULL)
        return pipit__err(PIPIT_STATUS_INVALID, "recompute must be none or full");
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
    int64_t g;
    if (!pipit__mul_le((int64_t)c->tp * c->pp, c->dp, 1 << 24, &g))
        return pipit__err(PIPIT_STATUS_INVALID, "tp %d x pp %d x dp %d GPUs: more than 2^24", c->tp, c->pp, c->dp);
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
    m->f = pipit__calloc((size_t)S * 7, sizeof(double));
    if (!m->f) return pipit__err(PIPIT_STATUS_NOMEM, "sim: out of memory");
    m->b = m->f + S, m->w = m->f + 2 * S, m->act = m->f + 3 * S, m->work = m->f + 4 * S, m->params = m->f + 5 * S;
    m->layers = m->f + 6 * S;
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
    double full = x->T * x->h * x->e;
    m->p2p_inter = (int64_t)c->tp * c->dp * c->pp > hw->gpus_per_node;
    double bw = m->p2p_inter ? hw->inter_bw : hw->intra_bw, lat = m->p2p_inter ? hw->inter_lat : hw->intra_lat;
    int scatter = c->scatter_gather_p2p && c->tp > 1;
    m->p2p_bytes = scatter ? full / x->t : full;
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
    dims x = {c->micro_batch, c->seq, c->hidden, c->heads, c->tp, c->vocab, (double)c->micro_batch * c->seq,
              ffn_width(c), c->gated_mlp ? 2 : 1, esize_of(d), (double)kv_heads(c) * (c->hidden / c->heads), d,
              !c->unfused_attention, c->rope != 0};
    m->P = c->pp, m->V = V, m->M = (int)M, m->dtype = d, m->esize = (int)x.e, m->peak = hw->peak[d], m->ffn = x.fh;
    int full = c->recompute == PIPIT_RECOMPUTE_FULL;
    layer_cost lc = layer(hw, &x, full);
    int slots = c->layers + (c->ends_as_layers ? 2 : 0);
    for (int s = 0; s < S; s++) {
        /* pipit's builders' cut: the first (slots mod S) stages one layer
         * more; the ends' slots, if counted, are the embedding and the head */
        double Ls = slots / S + (s < slots % S) - (c->ends_as_layers ? (s == 0) + (s == S - 1) : 0);
        m->layers[s] = Ls;
        m->f[s] = Ls * lc.f, m->b[s] = Ls * lc.b, m->w[s] = Ls * lc.w, m->params[s] = Ls * lc.params;
        /* full recompute keeps each layer's input; its backward rebuilds one layer at a time */
        m->act[s] = full ? Ls * x.T * x.h * x.e : Ls * lc.act_full;
        m->work[s] = full ? lc.act_full : 0;
        if (s == 0) embedding(hw, &x, &m->f[s], &m->w[s], &m->params[s]);
        if (s == S - 1) head(hw, &x, !head_with_first, &m->f[s], &m->b[s], &m->w[s], &m->params[s], &m->work[s]);
    }
    double most = 0; /* the fullest stage (not stage 0 when the embedding counts as a layer) */
    for (int s = 0; s < S; s++) most = fmax(most, m->layers[s]);
    m->tp_s_per_mb = most * (full ? 3 : 2) * lc.tp_fwd;
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
    double h = c->hidden, s = c->seq, fh = ffn_width(c), kvw = (double)kv_heads(c) * (c->hidden / c->heads);
    double gates = c->gated_mlp ? 2 : 1, tokens = (double)c->global_batch * s;
    double layer_f = 2 * tokens * (2 * h * h + 2 * h * kvw + (gates + 1) * fh * h) + 4 * (double)c->global_batch * s * s * h;
    double passes = count_recompute && c->recompute == PIPIT_RECOMPUTE_FULL ? 4 : 3;
    return passes * layer_f * c->layers + 3 * 2 * tokens * h * c->vocab;
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
