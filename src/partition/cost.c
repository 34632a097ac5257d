/*
 * cost.c — what an op costs, in one place. GEMMs (matmul, both attention
 * ops and their backwards) are FLOP-bound: FLOPs / gemm_flops. Every other op is
 * bandwidth-bound: the bytes it reads and writes / mem_bandwidth, plus an
 * exp or tanh per element at exp_rate where it evaluates one (on this CPU
 * the cross-entropy over a large vocabulary costs ~8x its bytes). The
 * backward of a node is whatever its VJP emits, costed the same way, so a
 * matmul's backward (two GEMMs) comes out at twice its forward without
 * saying so. A measured profile rescales each op kind: the model only
 * decides how a kind's measured time splits among its nodes. Backward
 * work a yield's VJP emits (the sum of its gradient contributions) is
 * charged to the value the yield carries, so the user's yields do not
 * move costs.
 */
#include <math.h>
#include <string.h>

#include "autodiff/autodiff.h"
#include "compile/plan.h"
#include "compile/stages.h"
#include "partition/partition.h"
#include "runtime/program.h"

static int bad_rate(double r) { return !(r > 0) || !isfinite(r); }

static double matmul_flops(const pipit_graph *g, const pipit__node *n) {
    pipit__mm_dims d = pipit__matmul_dims(&g->nodes[n->in[0]], &g->nodes[n->in[1]], n);
    return 2.0 * (double)d.batch * (double)d.M * (double)d.N * (double)d.K;
}

/* Causal attention on qkv [B,T,3C]: Q K^T and P V over the lower triangle,
 * 2 x (2 B T^2 C) / 2 FLOPs; its backward recomputes P and forms four
 * products, about twice that. */
static double attention_flops(const pipit_graph *g, const pipit__node *n) {
    const pipit__node *qkv = &g->nodes[n->in[0]];
    double B = (double)pipit__node_rows(qkv) / (double)qkv->shape[qkv->ndim - 2];
    double T = (double)qkv->shape[qkv->ndim - 2], C = (double)pipit__node_last_dim(qkv) / 3;
    return (n->op == PIPIT_OP_ATTENTION ? 2.0 : 4.0) * B * T * T * C;
}

/* attention_qkv on q [B,T,Hq*D], k, v [B,S,*]: Q K^T and P V, 4 B T S Hq D
 * FLOPs, half of it with a causal mask; the backward about twice that. */
static double attention_qkv_flops(const pipit_graph *g, const pipit__node *n) {
    const pipit__node *q = &g->nodes[n->in[0]], *k = &g->nodes[n->in[1]];
    double f = 4.0 * (double)pipit__node_numel(q) * (double)k->shape[1] * (n->iattr[2] ? 0.5 : 1);
    return n->op == PIPIT_OP_ATTENTION_QKV ? f : 2 * f;
}

/* attention_doc on a packed qkv [B,T,(Hq+2Hkv)*D]: as attention_qkv with
 * S = T, priced as one document per sequence (an upper bound: the kernels
 * skip the key blocks of other documents, which the ids decide at run time). */
static double attention_doc_flops(const pipit_graph *g, const pipit__node *n) {
    const pipit__node *x = &g->nodes[n->in[0]];
    double Hq = (double)n->iattr[0], D = (double)x->shape[2] / (Hq + 2.0 * (double)n->iattr[1]);
    double f = 4.0 * (double)x->shape[0] * (double)x->shape[1] * Hq * D * (double)x->shape[1] * (n->iattr[2] ? 0.5 : 1);
    return n->op == PIPIT_OP_ATTENTION_DOC ? f : 2 * f;
}

/* Bytes a bandwidth-bound node reads and writes. An embedding reads only
 * the rows it gathers (as many bytes as it writes), not its table. */
static double node_traffic(const pipit_graph *g, const pipit__node *n) {
    double out = (double)pipit__node_bytes(n);
    if (n->op == PIPIT_OP_EMBED || n->op == PIPIT_OP_GATHER) return 2 * out;
    double in = 0;
    for (int k = 0; k < n->nin; k++) in += (double)pipit__node_bytes(&g->nodes[n->in[k]]);
    return in + out;
}

/* Elements an op evaluates an exp, log, tanh (or cos and sin) for: one per
 * logit for the cross-entropy and its gradient, one per element for GELU,
 * SiLU, sigmoid, tanh, exp, log, softmax and their gradients that need
 * one, one per (position, frequency) for RoPE; 0 for the rest. */
static double transcendentals(const pipit_graph *g, const pipit__node *n) {
    switch (n->op) {
    case PIPIT_OP_XENT_ROWS:
    case PIPIT_OP_XENT_DLOGITS: return (double)pipit__node_numel(&g->nodes[n->in[0]]);
    case PIPIT_OP_GELU:
    case PIPIT_OP_GELU_DX:
    case PIPIT_OP_SILU:
    case PIPIT_OP_SILU_DX:
    case PIPIT_OP_SIGMOID:
    case PIPIT_OP_TANH:
    case PIPIT_OP_EXP:
    case PIPIT_OP_LOG:
    case PIPIT_OP_SOFTMAX:
    case PIPIT_OP_LOG_SOFTMAX:
    case PIPIT_OP_LOG_SOFTMAX_DX: return (double)pipit__node_numel(n);
    case PIPIT_OP_ROPE: return (double)(n->shape[1] * pipit__node_numel(n) / (n->shape[0] * n->shape[1] * n->iattr[0]));
    default: return 0;
    }
}

static double modelled(const pipit__cost_model *m, const pipit_graph *g, int32_t id) {
    const pipit__node *n = &g->nodes[id];
    if (!pipit__node_runs(n)) return 0;
    switch (n->op) {
    case PIPIT_OP_MATMUL: return matmul_flops(g, n) / m->gemm_flops;
    case PIPIT_OP_ATTENTION:
    case PIPIT_OP_ATTN_DQKV: return attention_flops(g, n) / m->gemm_flops;
    case PIPIT_OP_ATTENTION_QKV:
    case PIPIT_OP_ATTN_QKV_D: return attention_qkv_flops(g, n) / m->gemm_flops;
    case PIPIT_OP_ATTENTION_DOC:
    case PIPIT_OP_ATTN_DOC_D: return attention_doc_flops(g, n) / m->gemm_flops;
    default: return node_traffic(g, n) / m->mem_bandwidth + transcendentals(g, n) / m->exp_rate;
    }
}

double pipit__node_cost(const pipit__cost_model *m, const pipit_graph *g, int32_t id) {
    return modelled(m, g, id) * m->scale[g->nodes[id].op];
}

/* acc (+)= contribution: read both, write one. */
static double acc_modelled(const pipit__cost_model *m, double bytes) { return 3 * bytes / m->mem_bandwidth; }

double pipit__acc_cost(const pipit__cost_model *m, double bytes) { return acc_modelled(m, bytes) * m->acc_scale; }

/* scale[kind] = measured seconds per microbatch / modelled seconds of the
 * profiled program's loop nodes of that kind (its F, B and W work). */
static pipit_status apply_profile(pipit__cost_model *m, const pipit_program *p) {
    if (!p || p->magic != PIPIT_PROGRAM_MAGIC)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_partition: options.profile is not a valid program handle");
    if (p->profile_steps < 1)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "pipit_partition: options.profile has no profiled step (call pipit_program_set_profile(p, 1) "
                          "and run steps first)");
    const pipit__plan *pl = &p->plan;
    double mbs = (double)p->profile_steps * pl->M * pl->D, measured[PIPIT_OP_COUNT + 32] = {0};
    for (int i = 0; i < p->nlocal; i++)
        for (int k = 0; k < PIPIT_OP_COUNT + 32; k++) measured[k] += p->rs[p->local[i]].prof[k];
    double model[PIPIT_OP_COUNT] = {0}, acc_model = 0;
    for (int32_t i = 0; i < pl->g->n; i++) {
        int ph = pl->node_phase[i];
        if (ph != PH_F && ph != PH_B && ph != PH_W) continue; /* the loop's work */
        model[pl->g->nodes[i].op] += modelled(m, pl->g, i);
    }
    for (int t = 0; t < pl->ntargets; t++)
        for (int u = 0; u < pl->params[t].nuses; u++)
            if (!pl->params[t].post[u])
                acc_model += acc_modelled(m, (double)pl->params[t].numel * (double)pipit__dtype_size(pl->params[t].dtype));
    for (int k = 0; k < PIPIT_OP_COUNT; k++)
        if (model[k] > 0 && measured[k] > 0) m->scale[k] = measured[k] / mbs / model[k];
    if (acc_model > 0 && measured[PIPIT_OP_COUNT + INS_ACC] > 0)
        m->acc_scale = measured[PIPIT_OP_COUNT + INS_ACC] / mbs / acc_model;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__cost_model_init(const pipit_partition_options *opt, pipit__cost_model *m) {
    memset(m, 0, sizeof *m);
    m->gemm_flops = opt->gemm_flops ? opt->gemm_flops : 5e10;
    m->mem_bandwidth = opt->mem_bandwidth ? opt->mem_bandwidth : 1e10;
    m->exp_rate = opt->exp_rate ? opt->exp_rate : 3e8;
    if (bad_rate(m->gemm_flops) || bad_rate(m->mem_bandwidth) || bad_rate(m->exp_rate))
        return pipit__err(PIPIT_STATUS_INVALID,
                          "pipit_partition: gemm_flops (%g), mem_bandwidth (%g) and exp_rate (%g) must be positive and "
                          "finite (0: the defaults)",
                          opt->gemm_flops, opt->mem_bandwidth, opt->exp_rate);
    for (int k = 0; k < PIPIT_OP_COUNT; k++) m->scale[k] = 1;
    m->acc_scale = 1;
    return opt->profile ? apply_profile(m, opt->profile) : PIPIT_STATUS_OK;
}

/* A copy of g's nodes (names too) that autodiff may extend. */
static pipit_graph *copy_graph(const pipit_graph *g) {
    pipit_graph *c = pipit_graph_new();
    if (!c) return NULL;
    c->nodes = pipit__calloc((size_t)PIPIT_MAX(g->n, 1), sizeof *c->nodes);
    if (!c->nodes) goto fail;
    c->cap = PIPIT_MAX(g->n, 1);
    for (int32_t i = 0; i < g->n; i++, c->n++) {
        c->nodes[i] = g->nodes[i];
        c->nodes[i].name = NULL;
        if (g->nodes[i].name && !(c->nodes[i].name = pipit__strdup(g->nodes[i].name))) goto fail;
    }
    return c;
fail:
    pipit_graph_free(c);
    return NULL;
}

pipit_status pipit__backward_costs(const pipit__cost_model *m, const pipit_graph *g, int32_t loss, int remat,
                                   double *bwd) {
    pipit_graph *c = copy_graph(g);
    if (!c) return pipit__err(PIPIT_STATUS_NOMEM, "pipit_partition: out of memory");
    pipit__grads gr;
    memset(&gr, 0, sizeof gr);
    pipit_status s = pipit__autodiff(c, loss, remat, &gr);
    if (!s) {
        for (int32_t i = gr.fwd_end; i < c->n; i++) {
            const pipit__node *n = &c->nodes[i];
            if (n->origin >= 0 && n->origin < g->n && !(n->flags & NODE_POST))
                bwd[pipit__unyield(c, n->origin)] += pipit__node_cost(m, c, i);
        }
        for (int t = 0; t < gr.ntargets; t++) {
            double bytes = (double)pipit__node_bytes(&c->nodes[gr.t[t].node]);
            for (int u = 0; u < gr.t[t].nuses; u++) {
                if (gr.t[t].contrib[u] < 0) continue;
                int32_t o = c->nodes[gr.t[t].contrib[u]].origin;
                if (!gr.t[t].post[u] && o >= 0 && o < g->n) bwd[pipit__unyield(c, o)] += pipit__acc_cost(m, bytes);
            }
        }
    }
    pipit__grads_free(&gr);
    pipit_graph_free(c);
    return s;
}
