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

/* The sizes every formula below reads, in doubles (all exact integers). */
typedef struct {
    double b, s, h, a, t, V, T, fh, gates, e;
    int d; /* dtype index */
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

static layer_cost layer(const pipit_hw *hw, const dims *x, int recompute) {
    layer_cost c = {0};
    double T = x->T, h = x->h, t = x->t, bat = x->b * x->a / t, hd = x->h / x->a;
    /* the six GEMMs of Megatron's layer (QKV, scores, context, projection, MLP in/out) */
    double qkv = pipit__hw_gemm_time(hw, x->d, 1, T, 3 * h / t, h);
    double score = pipit__hw_gemm_time(hw, x->d, bat, x->s, x->s, hd);
    double ctx = pipit__hw_gemm_time(hw, x->d, bat, x->s, hd, x->s);
    double proj = pipit__hw_gemm_time(hw, x->d, 1, T, h, h / t);
    double fc1 = x->gates * pipit__hw_gemm_time(hw, x->d, 1, T, x->fh / t, h);
    double fc2 = pipit__hw_gemm_time(hw, x->d, 1, T, h, x->fh / t);
    double gemm_f = qkv + score + ctx + proj + fc1 + fc2;
    /* elementwise traffic: LayerNorms and bias-dropout-adds on the full
     * hidden state (not split by TP), softmax + dropout on the scores and
     * the activation on the MLP's width (split) */
    double e = x->e, sq = x->b * (x->a / t) * x->s * x->s;
    double act_fn = x->gates > 1 ? 3 * e : 2 * e;
    double mem_f = T * h * (10 * e + 2) + sq * (4 * e + 1) + T * (x->fh / t) * act_fn;
    double ar = tp_allreduce(hw, x, T * h * e);
    c.tp_fwd = 2 * ar;
    c.f = gemm_f + pipit__hw_mem_time(hw, mem_f) + 8 * hw->kernel_overhead + c.tp_fwd;
    /* backward: every GEMM again for the input gradients (the two attention
     * GEMMs twice: both operands are activations), twice the elementwise
     * traffic, the same two all-reduces; full recompute adds a forward */
    c.b = gemm_f + score + ctx + pipit__hw_mem_time(hw, 2 * mem_f) + 16 * hw->kernel_overhead + 2 * ar;
    if (recompute) c.b += c.f;
    c.w = qkv + proj + fc1 + fc2;
    /* Korthikanti et al. 2022, eq. 2 (generalised to any element size and MLP width) */
    c.act_full = T * h * (4 * e + 2 + (4 * e + x->gates * e * x->fh / h + e * x->fh / h) / t) + sq * (2 * e + 1);
    c.params = (4 * h * h + (x->gates + 1) * x->fh * h + 3 * h + x->gates * x->fh) / t + 6 * h;
    return c;
}

/* Embedding lookup (+ positions) on the first stage: a gather, and with TP
 * Megatron's vocabulary-parallel embedding all-reduces its output. */
static void embedding(const pipit_hw *hw, const dims *x, double *f, double *w, double *params) {
    *f += pipit__hw_mem_time(hw, 3 * x->e * x->T * x->h) + tp_allreduce(hw, x, x->T * x->h * x->e);
    *w += pipit__hw_mem_time(hw, 3 * x->e * x->T * x->h);
    *params += x->V * x->h / x->t + x->s * x->h;
}

/* Final LayerNorm, logits against the (tied) embedding, cross-entropy on the
 * last stage; its input gradient is all-reduced over TP. */
static void head(const pipit_hw *hw, const dims *x, int own_copy, double *f, double *b, double *w, double *params,
                 double *work) {
    double T = x->T, Vt = x->V / x->t;
    double logits = pipit__hw_gemm_time(hw, x->d, 1, T, Vt, x->h);
    *f += pipit__hw_mem_time(hw, 2 * x->e * T * x->h + T * Vt * (x->e + 4)) + logits;
    *b += pipit__hw_mem_time(hw, 4 * x->e * T * x->h + T * Vt * (x->e + 4)) + logits +
          tp_allreduce(hw, x, T * x->h * x->e);
    *w += logits;
    /* the tied embedding: a copy of its own when the first stage is on another rank */
    *params += (own_copy ? Vt * x->h : 0) + 2 * x->h;
    *work += T * Vt * (x->e + 4); /* logits and their fp32 softmax, while the loss runs */
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
    if (c->recompute != PIPIT_RECOMPUTE_NONE && c->recompute != PIPIT_RECOMPUTE_FULL)
        return pipit__err(PIPIT_STATUS_INVALID, "recompute must be none or full");
    if (c->hidden % c->heads)
        return pipit__err(PIPIT_STATUS_INVALID, "hidden %d is not divisible by heads %d", c->hidden, c->heads);
    if (c->heads % c->tp)
        return pipit__err(PIPIT_STATUS_INVALID, "heads %d is not divisible by tp %d (each TP rank holds whole heads)",
                          c->heads, c->tp);
    double fh = (c->ffn_mult > 0 ? c->ffn_mult : 4.0) * c->hidden;
    if (!(fh <= 2147483647.0)) /* a width like the others: beyond it the FLOP counts leave double's range */
        return pipit__err(PIPIT_STATUS_INVALID, "the MLP width %g (ffn multiplier %g x hidden %d) must be at most 2^31-1",
                          fh, c->ffn_mult, c->hidden);
    if (fmod(fh, c->tp) != 0 || fh != floor(fh))
        return pipit__err(PIPIT_STATUS_INVALID, "the MLP width %g (ffn multiplier x hidden) is not a whole multiple of tp %d",
                          fh, c->tp);
    if (c->vocab % c->tp)
        return pipit__err(PIPIT_STATUS_INVALID, "vocab %d is not divisible by tp %d (vocabulary-parallel embedding)",
                          c->vocab, c->tp);
    int64_t S = (int64_t)c->pp * V;
    if (S > c->layers || c->layers % S)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "layers %d cannot be split into pp %d x virtual %d = %lld stages of whole layers",
                          c->layers, c->pp, V, (long long)S);
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
    m->f = pipit__calloc((size_t)S * 6, sizeof(double));
    if (!m->f) return pipit__err(PIPIT_STATUS_NOMEM, "sim: out of memory");
    m->b = m->f + S, m->w = m->f + 2 * S, m->act = m->f + 3 * S, m->work = m->f + 4 * S, m->params = m->f + 5 * S;
    m->S = S;
    return PIPIT_STATUS_OK;
}

/* Stage-to-stage message: with TP, Megatron's scatter/gather optimisation
 * sends 1/t of the activation per GPU and all-gathers it inside the node.
 * The transfer occupies the sender (Megatron's blocking P2P; the local
 * transport's copy), the latency only the edge (sim.c books both). */
static void p2p(const pipit_sim_config *c, const pipit_hw *hw, const dims *x, pipit__sim_model *m) {
    double full = x->T * x->h * x->e;
    m->p2p_inter = (int64_t)c->tp * c->dp * c->pp > hw->gpus_per_node;
    double bw = m->p2p_inter ? hw->inter_bw : hw->intra_bw, lat = m->p2p_inter ? hw->inter_lat : hw->intra_lat;
    m->p2p_bytes = full / x->t;
    m->comm = lat;
    m->p2p_xfer = m->p2p_bytes / bw;
    if (c->tp > 1) m->p2p_xfer += (x->t - 1) / x->t * full / hw->intra_bw + (x->t - 1) * hw->intra_lat;
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
              (c->ffn_mult > 0 ? c->ffn_mult : 4.0) * c->hidden, c->gated_mlp ? 2 : 1, esize_of(d), d};
    m->P = c->pp, m->V = V, m->M = (int)M, m->dtype = d, m->esize = (int)x.e, m->peak = hw->peak[d];
    int full = c->recompute == PIPIT_RECOMPUTE_FULL;
    layer_cost lc = layer(hw, &x, full);
    double Ls = (double)c->layers / S;
    for (int s = 0; s < S; s++) {
        m->f[s] = Ls * lc.f, m->b[s] = Ls * lc.b, m->w[s] = Ls * lc.w, m->params[s] = Ls * lc.params;
        /* full recompute keeps each layer's input; its backward rebuilds one layer at a time */
        m->act[s] = full ? Ls * x.T * x.h * x.e : Ls * lc.act_full;
        m->work[s] = full ? lc.act_full : 0;
        if (s == 0) embedding(hw, &x, &m->f[s], &m->w[s], &m->params[s]);
        if (s == S - 1) head(hw, &x, !head_with_first, &m->f[s], &m->b[s], &m->w[s], &m->params[s], &m->work[s]);
    }
    m->tp_s_per_mb = Ls * (full ? 3 : 2) * lc.tp_fwd;
    m->tp_bytes_per_step = (double)c->layers / c->pp * (full ? 6 : 4) * x.T * x.h * x.e * (double)M;
    p2p(c, hw, &x, m);
    return PIPIT_STATUS_OK;
}

/* Megatron's count (Narayanan et al. 2021, section 5.1), any MLP width:
 * per layer forward 2T(4h^2 + (gates+1) f h^2) + 4 b s^2 h, logits 2 T h V;
 * backward twice the forward; full recompute one more layer forward. */
double pipit__sim_model_flops(const pipit_sim_config *c, int count_recompute) {
    double h = c->hidden, s = c->seq, fh = (c->ffn_mult > 0 ? c->ffn_mult : 4.0) * h;
    double gates = c->gated_mlp ? 2 : 1, tokens = (double)c->global_batch * s;
    double layer_f = 2 * tokens * (4 * h * h + (gates + 1) * fh * h) + 4 * (double)c->global_batch * s * s * h;
    double passes = count_recompute && c->recompute == PIPIT_RECOMPUTE_FULL ? 4 : 3;
    return passes * layer_f * c->layers + 3 * 2 * tokens * h * c->vocab;
}
