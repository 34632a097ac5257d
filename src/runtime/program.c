/*
 * program.c — pipit_compile and pipit_program_free: validate the options,
 * build the plan (compile/), then instantiate it on a backend: every
 * rank's memory, its thread team and, with several ranks, the transport.
 */
#include <string.h>

#include "runtime/program.h"
#include "runtime/transport.h"

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

/* The loss gradient of one microbatch's loss: 1/M, since the step's loss
 * is the mean over microbatches. */
static void upload_seed(const pipit_program *p, pipit__rank_state *rs) {
    double s64 = 1.0 / p->plan.M;
    float s32 = (float)s64;
    if (p->plan.g->nodes[p->plan.gr.seed].dtype == PIPIT_F64) p->be->upload(rs->seed, &s64, sizeof s64);
    else p->be->upload(rs->seed, &s32, sizeof s32);
}

static pipit_status alloc_rank(pipit_program *p, int r) {
    const pipit__rank_plan *rp = &p->plan.ranks[r];
    pipit__rank_state *rs = &p->rs[r];
    const pipit__backend *be = p->be;
    rs->param_block = be->alloc(rp->param_bytes);
    rs->grad_block = be->alloc(rp->param_bytes);
    rs->m_block = be->alloc(rp->param_bytes);
    rs->v_block = be->alloc(rp->param_bytes);
    rs->acc_block = be->alloc(rp->acc_bytes);
    rs->arena = be->alloc(rp->arena_bytes);
    rs->seed = be->alloc(sizeof(double));
    rs->srcs_ptr = pipit__calloc((size_t)PIPIT_MAX(rp->nsrcs, 1), sizeof *rs->srcs_ptr);
    rs->sumsq = pipit__calloc((size_t)PIPIT_MAX(p->plan.nparams, 1), sizeof *rs->sumsq);
    rs->chunks = pipit__calloc((size_t)PIPIT_MAX(rp->max_chunks, 1), sizeof *rs->chunks);
    rs->kc = pipit__calloc((size_t)PIPIT_MAX(rp->n, 1), sizeof *rs->kc);
    rs->t_start = pipit__calloc((size_t)PIPIT_MAX(rp->ntasks, 1), sizeof *rs->t_start);
    rs->t_end = pipit__calloc((size_t)PIPIT_MAX(rp->ntasks, 1), sizeof *rs->t_end);
    rs->pool = pipit__pool_new(p->plan.threads);
    if (!rs->param_block || !rs->grad_block || !rs->m_block || !rs->v_block || !rs->acc_block || !rs->arena || !rs->seed ||
        !rs->srcs_ptr || !rs->sumsq || !rs->chunks || !rs->kc || !rs->t_start || !rs->t_end || !rs->pool)
        return pipit__err(PIPIT_STATUS_NOMEM,
                          "out of memory for rank %d (%zu bytes of parameters, %zu-byte activation arena)", r,
                          rp->param_bytes, rp->arena_bytes);
    upload_seed(p, rs);
    return PIPIT_STATUS_OK;
}

/* Backend memory, thread teams and the transport for a built plan. */
static pipit_status instantiate(pipit_program *p) {
    p->be->init();
    p->losses = pipit__calloc((size_t)p->plan.M, sizeof *p->losses);
    p->rs = pipit__calloc((size_t)p->plan.nranks, sizeof *p->rs);
    if (!p->losses || !p->rs) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    if (p->plan.nranks > 1 && !(p->transport = pipit__transport_local_new(p->plan.nranks)))
        return pipit__err(PIPIT_STATUS_NOMEM, "out of memory for the transport");
    for (int r = 0; r < p->plan.nranks; r++) {
        pipit_status s = alloc_rank(p, r);
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
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
    p->fail_rank = p->fail_instr = -1;
    p->be = pipit__backend_find("cpu");
    s = p->be ? pipit__plan_build(g, loss.id, opt, &p->plan) : PIPIT_STATUS_INVALID;
    if (!s) s = instantiate(p);
    if (s) {
        pipit__err_prefix("pipit_compile");
        pipit_program_free(p);
        return s;
    }
    *out = p;
    return PIPIT_STATUS_OK;
}

static void free_rank(const pipit_program *p, pipit__rank_state *rs) {
    p->be->free(rs->param_block);
    p->be->free(rs->grad_block);
    p->be->free(rs->m_block);
    p->be->free(rs->v_block);
    p->be->free(rs->acc_block);
    p->be->free(rs->arena);
    p->be->free(rs->seed);
    pipit__free(rs->srcs_ptr);
    pipit__free(rs->sumsq);
    pipit__free(rs->chunks);
    pipit__free(rs->kc);
    pipit__free(rs->t_start);
    pipit__free(rs->t_end);
    pipit__pool_free(rs->pool);
}

void pipit_program_free(pipit_program *p) {
    if (!p || p->magic != PIPIT_PROGRAM_MAGIC) return;
    for (int r = 0; p->rs && r < p->plan.nranks; r++) free_rank(p, &p->rs[r]);
    pipit__free(p->rs);
    if (p->transport) p->transport->vt->free(p->transport);
    pipit__free(p->losses);
    pipit__plan_free(&p->plan);
    p->magic = 0;
    pipit__free(p);
}
