/*
 * compile.c — pipit_compile: differentiate, lay out parameters, gradients
 * and optimizer state in single blocks (carved by name), and lower the step
 * into per-rank instruction lists. With no schedule (or one rank) the step is
 * the sequential reference: for each microbatch, forward then backward.
 */
#include <string.h>

#include "backend/cpu/kernels.h"
#include "compile/emit.h"
#include "runtime/program.h"
#include "schedule/schedule.h"
#include "runtime/transport.h"

/* Global facts about each gradient target; ranks come with lowering. */
static pipit_status describe_params(pipit_program *p) {
    p->nparams = p->gr.nparams;
    p->ntargets = p->gr.ntargets;
    p->params = pipit__calloc((size_t)PIPIT_MAX(p->ntargets, 1), sizeof *p->params);
    if (!p->params) return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    for (int i = 0; i < p->ntargets; i++) {
        const pipit__grad_target *t = &p->gr.t[i];
        const pipit__node *n = &p->g->nodes[t->node];
        pipit__param *pp = &p->params[i];
        pp->name = t->boundary ? NULL : n->name;
        pp->node = t->node;
        pp->boundary = t->boundary;
        pp->gacc = t->gacc;
        pp->dtype = (pipit_dtype)n->dtype;
        pp->numel = pipit__node_numel(n);
        pp->decay = n->ndim >= 2;
        pp->nuses = t->nuses;
        pp->post = t->post;
        pp->use_ranks = pipit__calloc((size_t)PIPIT_MAX(t->nuses, 1), sizeof *pp->use_ranks);
        if (!pp->use_ranks) return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    }
    return PIPIT_STATUS_OK;
}

/* The smallest bound any consumer imposes on an i32 input's values; the
 * input may reach it through reshapes and yields (aliases of its bytes). */
static int32_t input_limit(const pipit_graph *g, int32_t id, int32_t fwd_end) {
    int64_t lim = 0;
    for (int32_t j = 0; j < fwd_end; j++) {
        const pipit__node *n = &g->nodes[j];
        int64_t b = 0;
        int reads = n->nin > 1 && pipit__alias_root(g, n->in[1]) == id;
        if (n->op == PIPIT_OP_EMBED && reads) b = g->nodes[n->in[0]].shape[0];
        if (n->op == PIPIT_OP_XENT_ROWS && reads) {
            const pipit__node *x = &g->nodes[n->in[0]];
            b = x->shape[x->ndim - 1];
        }
        if (b && (!lim || b < lim)) lim = b;
    }
    return (int32_t)lim;
}

static pipit_status collect_inputs(pipit_program *p) {
    const pipit_graph *g = p->g;
    for (int32_t i = 0; i < p->gr.fwd_end; i++)
        if (g->nodes[i].op == PIPIT_OP_INPUT && !(g->nodes[i].flags & NODE_GRADOF)) p->ninputs++;
    p->inputs = pipit__calloc((size_t)PIPIT_MAX(p->ninputs, 1), sizeof *p->inputs);
    if (!p->inputs) return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    int k = 0;
    for (int32_t i = 0; i < p->gr.fwd_end; i++) {
        const pipit__node *n = &g->nodes[i];
        if (n->op != PIPIT_OP_INPUT || (n->flags & NODE_GRADOF)) continue;
        p->inputs[k++] = (pipit__input){i, n->name, (pipit_dtype)n->dtype, pipit__node_numel(n),
                                        n->dtype == PIPIT_I32 ? input_limit(g, i, p->gr.fwd_end) : 0};
    }
    return PIPIT_STATUS_OK;
}

/* A graph that already holds backward nodes before this compile's own. */
static int already_compiled(const pipit_graph *g, int32_t fwd_end) {
    for (int32_t i = 0; i < fwd_end; i++)
        if (g->nodes[i].flags & NODE_BWD) return 1;
    return 0;
}

static uint8_t *zeroed_block(size_t n) {
    uint8_t *b = pipit__malloc_aligned(PIPIT_MAX(n, 64));
    if (b) memset(b, 0, PIPIT_MAX(n, 64));
    return b;
}

static pipit_status alloc_rank(pipit_program *p, pipit__rank_prog *rp) {
    int64_t nsrcs = 0; /* a param may have any number of uses */
    for (int32_t i = 0; i < rp->n; i++)
        if (rp->ins[i].kind == INS_GRADSUM) {
            rp->ins[i].srcs_at = nsrcs;
            nsrcs += p->params[rp->ins[i].param].nuses;
        }
    rp->srcs_ptr = pipit__calloc((size_t)PIPIT_MAX(nsrcs, 1), sizeof *rp->srcs_ptr);
    rp->param_block = zeroed_block(rp->param_bytes);
    rp->grad_block = zeroed_block(rp->param_bytes);
    rp->m_block = zeroed_block(rp->param_bytes);
    rp->v_block = zeroed_block(rp->param_bytes);
    rp->acc_block = zeroed_block(rp->acc_bytes);
    rp->sumsq = pipit__calloc((size_t)PIPIT_MAX(p->nparams, 1), sizeof *rp->sumsq);
    rp->chunks = pipit__calloc((size_t)PIPIT_MAX(rp->max_chunks, 1), sizeof *rp->chunks);
    rp->arena = pipit__malloc_aligned(PIPIT_MAX(rp->arena_bytes, 64));
    rp->kc = pipit__calloc((size_t)PIPIT_MAX(rp->n, 1), sizeof *rp->kc);
    rp->pool = pipit__pool_new(p->threads);
    if (!rp->param_block || !rp->grad_block || !rp->m_block || !rp->v_block || !rp->acc_block ||
        !rp->sumsq || !rp->chunks || !rp->arena || !rp->kc || !rp->pool || !rp->srcs_ptr)
        return pipit__err(PIPIT_STATUS_NOMEM,
                          "compile: out of memory for rank %d (%zu bytes of parameters, %zu-byte activation arena)",
                          rp->rank, rp->param_bytes, rp->arena_bytes);
    return PIPIT_STATUS_OK;
}

static pipit_status alloc_blocks(pipit_program *p) {
    p->losses = pipit__calloc((size_t)p->M, sizeof *p->losses);
    if (!p->losses) return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    if (p->nranks > 1 && !(p->transport = pipit__transport_local_new(p->nranks)))
        return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory for the transport");
    for (int r = 0; r < p->nranks; r++) {
        pipit_status s = alloc_rank(p, &p->ranks[r]);
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

static pipit_status check_options(const pipit_options *o) {
    if (o->microbatches < 0) return pipit__err(PIPIT_STATUS_INVALID, "microbatches must be >= 1 (got %d)", o->microbatches);
    if (o->threads < 0 || o->threads > 256) return pipit__err(PIPIT_STATUS_INVALID, "threads must be in 1..256 (got %d)", o->threads);
    if (o->clip_norm < 0) return pipit__err(PIPIT_STATUS_INVALID, "clip norm must be >= 0");
    const pipit_optimizer *op = &o->optimizer;
    if (op->lr < 0 || op->weight_decay < 0 || op->beta1 < 0 || op->beta1 >= 1 || op->beta2 < 0 ||
        op->beta2 >= 1 || op->eps < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "optimizer: need lr, eps, weight decay >= 0 and betas in [0,1)");
    return PIPIT_STATUS_OK;
}

static void apply_defaults(pipit_program *p, const pipit_options *o) {
    p->opt = *o;
    p->M = o->microbatches ? o->microbatches : 1;
    p->threads = o->threads ? o->threads : 1;
    pipit_optimizer *op = &p->opt.optimizer;
    if (op->kind == PIPIT_OPT_ADAMW && op->lr == 0 && op->beta1 == 0 && op->beta2 == 0)
        *op = pipit_adamw(3e-4, 0.9, 0.95, 1e-8, 0.0);
    p->seed_f64 = 1.0 / p->M;
    p->seed_f32 = (float)(1.0 / p->M);
}

pipit_status pipit_compile(pipit_graph *g, pipit_val loss, const pipit_options *opt,
                           pipit_program **out) {
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_compile: out is NULL");
    *out = NULL;
    if (!g || g->magic != PIPIT_GRAPH_MAGIC) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_compile: invalid graph");
    if (loss.g != g) return pipit__err(PIPIT_STATUS_INVALID, "pipit_compile: loss is not a value of this graph");
    pipit_options defaults = {0};
    if (!opt) opt = &defaults;
    pipit_status s = check_options(opt);
    if (s) return s;
    pipit_program *p = pipit__calloc(1, sizeof *p);
    if (!p) return pipit__err(PIPIT_STATUS_NOMEM, "pipit_compile: out of memory");
    p->magic = PIPIT_PROGRAM_MAGIC;
    p->g = g;
    p->loss = loss.id;
    apply_defaults(p, opt);
    pipit__gemm_init();
    p->fail_rank = p->fail_instr = -1;
    if (already_compiled(g, g->n))
        s = pipit__err(PIPIT_STATUS_MISUSE, "this graph was already compiled (compile each graph once)");
    else
        s = pipit__autodiff(g, loss.id, &p->gr);
    if (!s) s = describe_params(p);
    if (!s) s = collect_inputs(p);
    if (!s) s = pipit__lower(p, opt->schedule);
    if (!s) s = alloc_blocks(p);
    if (s) {
        pipit__err_prefix("pipit_compile");
        pipit_program_free(p);
        return s;
    }
    *out = p;
    return PIPIT_STATUS_OK;
}

void pipit_program_free(pipit_program *p) {
    if (!p || p->magic != PIPIT_PROGRAM_MAGIC) return;
    for (int r = 0; p->ranks && r < p->nranks; r++) {
        pipit__rank_prog *rp = &p->ranks[r];
        for (int32_t i = 0; rp->ins && i < rp->n; i++) pipit__free(rp->ins[i].srcs);
        pipit__free(rp->ins);
        pipit__free(rp->param_off);
        pipit__free(rp->bufs);
        pipit__free(rp->srcs_ptr);
        pipit__free_aligned(rp->param_block);
        pipit__free_aligned(rp->grad_block);
        pipit__free_aligned(rp->m_block);
        pipit__free_aligned(rp->v_block);
        pipit__free_aligned(rp->acc_block);
        pipit__free(rp->sumsq);
        pipit__free(rp->chunks);
        pipit__free_aligned(rp->arena);
        pipit__free(rp->kc);
        pipit__pool_free(rp->pool);
        pipit__free(rp->tasks);
        pipit__free(rp->t_start);
        pipit__free(rp->t_end);
    }
    pipit__free(p->ranks);
    pipit__free(p->stage_rank);
    pipit__free(p->node_stage);
    pipit__free(p->node_phase);
    if (p->transport) p->transport->vt->free(p->transport);
    for (int i = 0; p->params && i < p->ntargets; i++) {
        pipit__free(p->params[i].acc_off);
        pipit__free(p->params[i].use_ranks);
    }
    pipit__free(p->node_ranks);
    pipit__free(p->params);
    pipit__free(p->inputs);
    pipit__free(p->losses);
    pipit__grads_free(&p->gr);
    p->magic = 0;
    pipit__free(p);
}
