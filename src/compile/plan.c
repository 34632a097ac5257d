/*
 * plan.c — from a graph and its loss to a plan: differentiate, describe
 * every gradient target and graph input, and lower the step into per-rank
 * instruction lists (lower.c). With no schedule (or one rank) the step is
 * the sequential reference: for each microbatch, forward then backward.
 */
#include <string.h>

#include "compile/autocast.h"
#include "compile/plan.h"
#include "schedule/schedule.h"

/* The full tensor behind a (possibly sharded) param's local one. */
static void describe_shard(const pipit__plan *p, pipit__param *pp, const pipit__node *n) {
    pp->ndim = n->ndim;
    memcpy(pp->full_shape, n->shape, sizeof pp->full_shape);
    pp->shard_axis = pipit__param_shard_axis(n);
    pp->shard_parts = pp->shard_axis >= 0 ? (int)n->iattr[1] : 1;
    if (pp->shard_axis >= 0) pp->full_shape[pp->shard_axis] *= p->T;
    pp->full_numel = pp->numel * (pp->shard_axis >= 0 ? p->T : 1);
    pp->ep = p->E > 1 && pipit__param_experts(n);
    if (pp->ep) pp->full_shape[0] *= p->E, pp->full_numel *= p->E;
}

void pipit__shard_copy(const pipit__param *pp, int T, int t, void *full, void *shard, size_t es, int to_full) {
    if (pp->shard_axis < 0 || T == 1) {
        if (to_full) memcpy(full, shard, (size_t)pp->numel * es);
        else memcpy(shard, full, (size_t)pp->numel * es);
        return;
    }
    /* the tensor as [outer, parts, T, piece * inner]: rank t holds [outer, parts, piece * inner] */
    int64_t outer = 1, inner = 1, parts = pp->shard_parts;
    for (int i = 0; i < pp->shard_axis; i++) outer *= pp->full_shape[i];
    for (int i = pp->shard_axis + 1; i < pp->ndim; i++) inner *= pp->full_shape[i];
    size_t run = (size_t)(pp->full_shape[pp->shard_axis] / (parts * T) * inner) * es;
    for (int64_t o = 0; o < outer * parts; o++) {
        unsigned char *f = (unsigned char *)full + ((size_t)o * (size_t)T + (size_t)t) * run;
        unsigned char *sh = (unsigned char *)shard + (size_t)o * run;
        if (to_full) memcpy(f, sh, run);
        else memcpy(sh, f, run);
    }
}

/* Global facts about each gradient target; ranks come with lowering. */
static pipit_status describe_params(pipit__plan *p) {
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
        /* a pre-loop value's gradient accumulates in fp32 when it is bf16 */
        pp->dtype = t->boundary ? pipit__acc_dtype((pipit_dtype)n->dtype) : (pipit_dtype)n->dtype;
        pp->numel = pipit__node_numel(n);
        pp->decay = n->ndim >= 2;
        describe_shard(p, pp, n);
        pp->nuses = t->nuses;
        pp->post = t->post;
        pp->use_ranks = pipit__calloc((size_t)PIPIT_MAX(t->nuses, 1), sizeof *pp->use_ranks);
        if (!pp->use_ranks) return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    }
    return PIPIT_STATUS_OK;
}

/* qsort has no context argument: the params being sorted, per thread. */
static _Thread_local const pipit__param *sort_params;

static int cmp_param_name(const void *a, const void *b) {
    return strcmp(sort_params[*(const int *)a].name, sort_params[*(const int *)b].name);
}

/* by_name and param_of: lookups by name are a binary search, by node one
 * load (a model of thousands of
 * layers sets and reads tens of thousands of params by name). */
static pipit_status index_param_names(pipit__plan *p) {
    p->by_name = pipit__malloc(sizeof(int) * (size_t)PIPIT_MAX(p->nparams, 1));
    if (!p->by_name) return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    p->param_of = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(p->g->n, 1));
    if (!p->param_of) return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    for (int32_t i = 0; i < p->g->n; i++) p->param_of[i] = -1;
    for (int i = 0; i < p->nparams; i++) p->param_of[p->params[i].node] = i;
    for (int i = 0; i < p->nparams; i++) p->by_name[i] = i;
    sort_params = p->params;
    qsort(p->by_name, (size_t)p->nparams, sizeof *p->by_name, cmp_param_name);
    sort_params = NULL;
    return PIPIT_STATUS_OK;
}

int pipit__plan_find_param(const pipit__plan *p, const char *name) {
    int lo = 0, hi = p->nparams - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(name, p->params[p->by_name[mid]].name);
        if (c == 0) return p->by_name[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return -1;
}

/* The smallest bound any consumer imposes on each i32 input's values (rows
 * of an embedding or gather table, classes of a cross-entropy). Index
 * values reach their consumers through aliases (reshape, view, yield) and
 * copies (slice, concat), so bounds flow back through those to the inputs
 * (a view's or slice's consumer bounds every value of the input). lim[]
 * has one entry per node; 0 = unbounded. */
static void index_limits(const pipit_graph *g, int32_t fwd_end, int64_t *lim) {
    for (int32_t j = fwd_end - 1; j >= 0; j--) {
        const pipit__node *n = &g->nodes[j];
        int64_t b = 0;
        int32_t to = -1;
        if (n->op == PIPIT_OP_EMBED || n->op == PIPIT_OP_GATHER) to = n->in[1], b = g->nodes[n->in[0]].shape[0];
        if (n->op == PIPIT_OP_XENT_ROWS) to = n->in[1], b = pipit__node_last_dim(&g->nodes[n->in[0]]);
        /* vocab parallel: the T ranks' shards together hold the classes */
        if (n->op == PIPIT_OP_EMBED && n->iattr[1]) b *= pipit__graph_tp(g);
        if (n->op == PIPIT_OP_TP_PICK) to = n->in[1], b = pipit__node_last_dim(&g->nodes[n->in[0]]) * pipit__graph_tp(g);
        if (n->op == PIPIT_OP_TAKE) to = n->in[1], b = pipit__node_last_dim(&g->nodes[n->in[0]]); /* ir/moe.h */
        if (n->op == PIPIT_OP_MOE_SLOTS) to = n->in[0], b = n->iattr[0];                         /* experts */
        if (n->op == PIPIT_OP_HEAD_XENT) /* classes: W's rows (vocab parallel: the T shards') */
            to = n->in[2], b = g->nodes[n->in[1]].shape[0] * (n->iattr[0] ? pipit__graph_tp(g) : 1);
        if (n->dtype == PIPIT_I32 && lim[j] &&
            (pipit__ops[n->op].alias || n->op == PIPIT_OP_SLICE || n->op == PIPIT_OP_CONCAT)) {
            for (int k = 0; k < n->nin; k++) /* the value moves unchanged: its bound too */
                if (!lim[n->in[k]] || lim[j] < lim[n->in[k]]) lim[n->in[k]] = lim[j];
        }
        if (to >= 0 && (!lim[to] || b < lim[to])) lim[to] = b;
    }
}

/* MoE slots fed straight to dispatch / combine / their weight gradient
 * (not computed by moe_slots): a slot outside the [E, C] grid would read
 * as a dropped choice and two choices sharing a slot would overwrite each
 * other, both silently, so pipit_step checks them (step.c). */
static void mark_fed_slots(const pipit_graph *g, int32_t fwd_end, pipit__input *inputs, int ninputs) {
    for (int32_t j = 0; j < fwd_end; j++) {
        const pipit__node *n = &g->nodes[j];
        if (n->op != PIPIT_OP_MOE_DISPATCH && n->op != PIPIT_OP_MOE_COMBINE) continue;
        /* dispatch: the grid is its output's [E, C] rows; combine: its input's */
        const pipit__node *grid = n->op == PIPIT_OP_MOE_DISPATCH ? n : &g->nodes[n->in[0]];
        int64_t rows = pipit__node_numel(grid) / PIPIT_MAX(pipit__node_last_dim(grid), 1);
        int32_t r = pipit__alias_root(g, n->in[1]);
        for (int i = 0; i < ninputs; i++)
            if (inputs[i].node == r && pipit__alias_offset(g, n->in[1]) == 0)
                inputs[i].slot_grid = (int32_t)PIPIT_MIN(rows, INT32_MAX);
    }
}

static pipit_status collect_inputs(pipit__plan *p) {
    const pipit_graph *g = p->g;
    for (int32_t i = 0; i < p->gr.fwd_end; i++)
        if (g->nodes[i].op == PIPIT_OP_INPUT && !(g->nodes[i].flags & NODE_GRADOF)) p->ninputs++;
    p->inputs = pipit__calloc((size_t)PIPIT_MAX(p->ninputs, 1), sizeof *p->inputs);
    int64_t *lim = pipit__calloc((size_t)PIPIT_MAX(p->gr.fwd_end, 1), sizeof *lim);
    if (!p->inputs || !lim) {
        pipit__free(lim);
        return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    }
    index_limits(g, p->gr.fwd_end, lim);
    int k = 0;
    for (int32_t i = 0; i < p->gr.fwd_end; i++) {
        const pipit__node *n = &g->nodes[i];
        if (n->op != PIPIT_OP_INPUT || (n->flags & NODE_GRADOF)) continue;
        /* a table of 2^31+ rows: every non-negative i32 is in range */
        int32_t limit = n->dtype == PIPIT_I32 ? (int32_t)PIPIT_MIN(lim[i], INT32_MAX) : 0;
        p->inputs[k++] = (pipit__input){i, n->name, (pipit_dtype)n->dtype, pipit__node_numel(n), limit, 0, 0};
    }
    /* document ids: an input an attention_doc reads (through aliases) as
     * its ids, checked non-decreasing per sequence by pipit_step */
    for (int32_t j = 0; j < p->gr.fwd_end; j++) {
        const pipit__node *n = &g->nodes[j];
        int32_t ids = n->op == PIPIT_OP_ATTENTION_DOC ? n->in[1] : -1;
        if (n->op == PIPIT_OP_ATTENTION_CP_DOC && g->nodes[n->in[2]].op == PIPIT_OP_CP_GATHER) /* this rank's chunks */
            ids = g->nodes[n->in[2]].in[0];
        if (ids < 0 || pipit__alias_offset(g, ids) != 0) continue;
        int32_t r = pipit__alias_root(g, ids);
        for (int i = 0; i < k; i++)
            if (p->inputs[i].node == r) p->inputs[i].doc_T = g->nodes[ids].shape[1];
    }
    mark_fed_slots(g, p->gr.fwd_end, p->inputs, k);
    pipit__free(lim);
    return PIPIT_STATUS_OK;
}

/* A graph that already holds backward nodes before this compile's own. */
static int already_compiled(const pipit_graph *g, int32_t fwd_end) {
    for (int32_t i = 0; i < fwd_end; i++)
        if (g->nodes[i].flags & NODE_BWD) return 1;
    return 0;
}

/* Where each GRADSUM's per-use sums start in its rank's pointer table (a
 * param may have any number of uses). */
static void index_gradsum_sources(pipit__plan *p) {
    for (int r = 0; r < p->nranks; r++) {
        pipit__rank_plan *rp = &p->ranks[r];
        rp->nsrcs = 0;
        for (int32_t i = 0; i < rp->n; i++)
            if (rp->ins[i].kind == INS_GRADSUM) {
                rp->ins[i].srcs_at = rp->nsrcs;
                rp->nsrcs += p->params[rp->ins[i].param].nuses;
            }
    }
}

static void apply_defaults(pipit__plan *p, const pipit_options *o) {
    p->opt = *o;
    p->M = o->microbatches ? o->microbatches : 1;
    p->threads = o->threads ? o->threads : 1;
    p->D = o->data_parallel ? o->data_parallel : 1;
    p->T = o->tensor_parallel ? o->tensor_parallel : 1;
    p->zero1 = p->D > 1 && (o->zero1 || o->zero > 0);
    p->zero = p->zero1 && !o->forward_only ? PIPIT_MAX(o->zero, 1) : 0;
    p->reshard = p->zero >= 3 && o->reshard_after_forward;
    p->forward_only = o->forward_only != 0;
    p->opt.outputs = NULL; /* borrowed for the call only: copied into p->outputs */
    p->opt.device = NULL;  /* borrowed for the call only: the runtime keeps the backend it names */
    /* opt.optimizer arrives resolved (pipit_compile: a zero one is the
     * default AdamW); the plan carries it for the runtime's UPDATE and
     * plans nothing by it */
}

/* A failed compile leaves the graph as it was: drops the backward nodes
 * this compile appended (and an error they raised), so fixing the options
 * or the schedule and compiling again works instead of reporting "already
 * compiled". */
static void rollback(pipit_graph *g, int32_t n0, pipit_status st0) {
    pipit__graph_truncate(g, n0);
    g->cur_flags = 0;
    g->cur_origin = -1;
    if (st0 == PIPIT_STATUS_OK && g->status != PIPIT_STATUS_OK) {
        g->status = PIPIT_STATUS_OK;
        g->errmsg[0] = 0;
    }
}

/* options.outputs: values of this graph, kept to the end of the step. */
static pipit_status copy_outputs(pipit__plan *p, const pipit_options *o) {
    if (o->noutputs < 0 || (o->noutputs > 0 && !o->outputs))
        return pipit__err(PIPIT_STATUS_INVALID, "options.outputs: %d outputs%s", o->noutputs,
                          o->noutputs > 0 ? " but outputs is NULL" : " (must be >= 0)");
    p->outputs = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(o->noutputs, 1));
    p->user_outputs = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(o->noutputs, 1));
    if (!p->outputs || !p->user_outputs) return pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    for (int i = 0; i < o->noutputs; i++) {
        if (o->outputs[i].g != p->g || o->outputs[i].id < 0 || o->outputs[i].id >= p->g->n)
            return pipit__err(PIPIT_STATUS_INVALID, "options.outputs[%d] is not a value of this graph", i);
        p->outputs[i] = p->user_outputs[i] = o->outputs[i].id;
    }
    p->noutputs = o->noutputs;
    return PIPIT_STATUS_OK;
}

/* options.tensor_parallel is the graph's T, and every sharded param
 * feeds only ops that have a sharded rule (ir/tp.c). */
static pipit_status check_tp(const pipit__plan *p) {
    const pipit_graph *g = p->g;
    if (p->T != pipit__graph_tp(g))
        return pipit__err(PIPIT_STATUS_INVALID,
                          "options.tensor_parallel is %d but the graph describes one of %d tensor-parallel ranks "
                          "(pipit_graph_set_tensor_parallel)",
                          p->T, pipit__graph_tp(g));
    if (p->T > 1 && g->n >= PIPIT_TP_NORM_ID)
        return pipit__err(PIPIT_STATUS_INVALID, "a tensor-parallel graph may have at most %d nodes (has %d)",
                          PIPIT_TP_NORM_ID, (int)g->n);
    int32_t end = g->n; /* the forward graph: a graph compiled for training before holds backward nodes */
    for (int32_t i = 0; i < g->n && end == g->n; i++)
        if (g->nodes[i].flags & NODE_BWD) end = i;
    return pipit__tp_check_uses(g, end);
}

/* options.dtype bf16: the plan compiles its own bf16 copy of the graph
 * (the loss and the outputs become their twins there). */
static pipit_status use_bf16_copy(pipit__plan *p, int32_t *loss, pipit_bf16_policy policy) {
    pipit_graph *c;
    pipit_status s = pipit__autocast(p->user_g, *loss, p->user_outputs, p->noutputs, policy, &c, loss, p->outputs);
    if (s) return s;
    p->g = c;
    p->own_g = 1;
    p->loss = *loss;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__plan_build(pipit_graph *g, int32_t loss, const pipit_options *opt, pipit__plan *p) {
    memset(p, 0, sizeof *p);
    p->g = p->user_g = g;
    p->loss = loss;
    apply_defaults(p, opt);
    pipit_status s = copy_outputs(p, opt);
    if (!s && opt->dtype == PIPIT_BF16) s = use_bf16_copy(p, &loss, opt->bf16_policy);
    if (s) {
        pipit__plan_free(p);
        return s;
    }
    g = p->g; /* the graph this plan compiles: the user's or its bf16 copy */
    s = check_tp(p);
    if (!s) s = pipit__check_cp(p);
    if (!s) s = pipit__check_ep(p);
    if (s) {
        pipit__plan_free(p);
        return s;
    }
    int32_t n0 = g->n;
    pipit_status st0 = g->status;
    int compiled = p->forward_only ? 0 : already_compiled(g, g->n);
    if (p->forward_only)
        s = pipit__forward_targets(g, loss, &p->gr);
    else if (compiled)
        s = pipit__err(PIPIT_STATUS_MISUSE, "this graph was already compiled (compile each graph once)");
    else
        s = pipit__autodiff(g, loss, opt->remat, &p->gr);
    if (!s) s = describe_params(p);
    if (!s) s = index_param_names(p);
    if (!s) s = collect_inputs(p);
    if (!s) s = pipit__lower(p, opt->schedule);
    if (!s) index_gradsum_sources(p);
    p->graph_n0 = n0;
    p->graph_st0 = st0;
    if (s) {
        int own = p->own_g;
        pipit__plan_free(p); /* frees an own graph */
        if (!compiled && !own) rollback(g, n0, st0);
    }
    return s;
}

void pipit__graph_rollback(pipit_graph *g, int32_t n0, pipit_status st0) { rollback(g, n0, st0); }

void pipit__plan_free(pipit__plan *p) {
    for (int r = 0; p->ranks && r < p->nranks; r++) {
        pipit__rank_plan *rp = &p->ranks[r];
        for (int32_t i = 0; rp->ins && i < rp->n; i++) pipit__free(rp->ins[i].srcs);
        pipit__free(rp->ins);
        pipit__free(rp->param_off);
        pipit__free(rp->bufs);
        pipit__free(rp->tasks);
        pipit__free(rp->fences);
    }
    pipit__free(p->ranks);
    pipit__free(p->stage_rank);
    pipit__free(p->node_stage);
    pipit__free(p->node_phase);
    for (int i = 0; p->params && i < p->ntargets; i++) {
        pipit__free(p->params[i].acc_off);
        pipit__free(p->params[i].use_ranks);
    }
    pipit__free(p->node_ranks);
    pipit__free(p->params);
    pipit__free(p->by_name);
    pipit__free(p->param_of);
    pipit__free(p->inputs);
    pipit__free(p->outputs);
    pipit__free(p->user_outputs);
    pipit__grads_free(&p->gr);
    if (p->own_g) pipit_graph_free(p->g);
    memset(p, 0, sizeof *p);
}
