/*
 * autodiff.c — reverse mode over the graph. Walks the forward nodes from the
 * loss back to the params, asks each op's VJP rule (ops.c) for the gradients
 * of its inputs, and checks every gradient's shape against its primal.
 * Summation order is fixed by consumer order, never by visit order.
 */
#include "autodiff/autodiff.h"

#include <string.h>

/* Per-value list of gradient contributions, appended in descending consumer
 * order (the walk is reverse topological) and summed in ascending order. */
typedef struct {
    int32_t *ids;
    int n, cap;
} contrib_list;

static int list_push(contrib_list *l, int32_t id) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        int32_t *ids = pipit__realloc(l->ids, (size_t)cap * sizeof *ids);
        if (!ids) return 0;
        l->ids = ids;
        l->cap = cap;
    }
    l->ids[l->n++] = id;
    return 1;
}

/* needs[i]: node i lies on a path param -> loss (so it gets a gradient). */
static uint8_t *mark_needed(const pipit_graph *g, int32_t loss) {
    int32_t n = loss + 1;
    uint8_t *from_param = pipit__calloc((size_t)n, 1), *to_loss = pipit__calloc((size_t)n, 1);
    if (!from_param || !to_loss) {
        pipit__free(from_param);
        pipit__free(to_loss);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) {
        const pipit__node *nd = &g->nodes[i];
        if (nd->op == PIPIT_OP_PARAM) from_param[i] = 1;
        for (int k = 0; k < nd->nin; k++)
            if (!(pipit__ops[nd->op].nondiff >> k & 1) && from_param[nd->in[k]]) from_param[i] = 1;
    }
    to_loss[loss] = 1;
    for (int32_t i = n - 1; i >= 0; i--) {
        if (!to_loss[i]) continue;
        const pipit__node *nd = &g->nodes[i];
        for (int k = 0; k < nd->nin; k++)
            if (!(pipit__ops[nd->op].nondiff >> k & 1)) to_loss[nd->in[k]] = 1;
    }
    for (int32_t i = 0; i < n; i++) from_param[i] = from_param[i] && to_loss[i];
    pipit__free(to_loss);
    return from_param;
}

/* Sums a value's contributions in ascending consumer order. The list holds
 * them descending, so walk it backwards: ((c0 + c1) + c2) + ... */
static int32_t sum_contribs(pipit_graph *g, const contrib_list *l, int32_t origin) {
    int32_t acc = l->ids[l->n - 1];
    g->cur_origin = origin;
    for (int i = l->n - 2; i >= 0 && acc >= 0; i--)
        acc = pipit__node_add(g, PIPIT_OP_ADD, 2, (int32_t[]){acc, l->ids[i]}, NULL, NULL);
    return acc;
}

static pipit_status check_grad_shape(const pipit_graph *g, int32_t primal, int32_t grad,
                                     int32_t consumer) {
    const pipit__node *p = &g->nodes[primal], *d = &g->nodes[grad];
    int ok = p->ndim == d->ndim && p->dtype == d->dtype;
    for (int i = 0; ok && i < p->ndim; i++) ok = p->shape[i] == d->shape[i];
    if (ok) return PIPIT_STATUS_OK;
    char a[96], b[96];
    return pipit__err(PIPIT_STATUS_INTERNAL,
                      "autodiff: VJP of %s (node %d) gave a gradient of shape %s for an input of shape %s",
                      pipit__ops[g->nodes[consumer].op].name, consumer,
                      pipit__shape_str(a, sizeof a, d->ndim, d->shape),
                      pipit__shape_str(b, sizeof b, p->ndim, p->shape));
}

static pipit_status validate_loss(const pipit_graph *g, int32_t loss) {
    if (!g || g->magic != PIPIT_GRAPH_MAGIC) return pipit__err(PIPIT_STATUS_MISUSE, "invalid graph");
    if (g->status != PIPIT_STATUS_OK)
        return pipit__err(g->status, "graph has a build error: %s", g->errmsg);
    if (loss < 0 || loss >= g->n) return pipit__err(PIPIT_STATUS_INVALID, "loss is not a value of this graph");
    const pipit__node *l = &g->nodes[loss];
    if (l->ndim != 0 || (l->dtype != PIPIT_F32 && l->dtype != PIPIT_F64))
        return pipit__err(PIPIT_STATUS_SHAPE, "loss must be a float scalar (got rank %d)", l->ndim);
    return PIPIT_STATUS_OK;
}

/* Emits the VJP of node j given its gradient dj, routing each input's
 * gradient into its contribution list. */
static pipit_status backprop_node(pipit_graph *g, int32_t j, int32_t dj, const uint8_t *needs,
                                  contrib_list *lists) {
    const pipit__node *nj = &g->nodes[j];
    const pipit__op_info *info = &pipit__ops[nj->op];
    if (!info->vjp)
        return pipit__err(PIPIT_STATUS_INTERNAL, "autodiff: op %s has no gradient rule", info->name);
    int32_t din[PIPIT_MAX_IN] = {-1, -1, -1};
    int32_t in[PIPIT_MAX_IN];
    int nin = nj->nin;
    memcpy(in, nj->in, sizeof in);
    g->cur_origin = j;
    info->vjp(g, j, dj, din);
    if (g->status != PIPIT_STATUS_OK)
        return pipit__err(g->status, "autodiff: %s", g->errmsg);
    for (int k = nin - 1; k >= 0; k--) {
        if ((info->nondiff >> k & 1) || !needs[in[k]] || din[k] < 0) continue;
        pipit_status s = check_grad_shape(g, in[k], din[k], j);
        if (s) return s;
        if (!list_push(&lists[in[k]], din[k])) return pipit__err(PIPIT_STATUS_NOMEM, "autodiff: out of memory");
    }
    return PIPIT_STATUS_OK;
}

static pipit_status collect_params(pipit_graph *g, contrib_list *lists, int32_t fwd_end,
                                   pipit__grads *out) {
    for (int32_t i = 0; i < fwd_end; i++)
        if (g->nodes[i].op == PIPIT_OP_PARAM) out->nparams++;
    out->pg = pipit__calloc((size_t)PIPIT_MAX(out->nparams, 1), sizeof *out->pg);
    if (!out->pg) return pipit__err(PIPIT_STATUS_NOMEM, "autodiff: out of memory");
    int p = 0, any = 0;
    for (int32_t i = 0; i < fwd_end; i++) {
        if (g->nodes[i].op != PIPIT_OP_PARAM) continue;
        pipit__param_grad *pg = &out->pg[p++];
        pg->param = i;
        pg->nuses = lists[i].n;
        pg->contrib = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(lists[i].n, 1));
        if (!pg->contrib) return pipit__err(PIPIT_STATUS_NOMEM, "autodiff: out of memory");
        for (int u = 0; u < lists[i].n; u++) pg->contrib[u] = lists[i].ids[lists[i].n - 1 - u];
        any |= pg->nuses > 0;
    }
    if (!any)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "the loss depends on no parameter (did you create them with pipit_param?)");
    return PIPIT_STATUS_OK;
}

pipit_status pipit__autodiff(pipit_graph *g, int32_t loss, pipit__grads *out) {
    memset(out, 0, sizeof *out);
    pipit_status s = validate_loss(g, loss);
    if (s) return s;
    int32_t fwd_end = g->n;
    out->fwd_end = fwd_end;
    uint8_t *needs = mark_needed(g, loss);
    contrib_list *lists = pipit__calloc((size_t)fwd_end, sizeof *lists);
    if (!needs || !lists) {
        s = pipit__err(PIPIT_STATUS_NOMEM, "autodiff: out of memory");
        goto done;
    }
    g->cur_flags = NODE_BWD;
    const pipit__node *ln = &g->nodes[loss];
    out->seed = pipit__node_add(g, PIPIT_OP_INPUT, 0, NULL, NULL, NULL);
    if (out->seed < 0 || !(g->nodes[out->seed].name = pipit__strdup("@dloss"))) {
        s = pipit__err(PIPIT_STATUS_NOMEM, "autodiff: out of memory");
        goto done;
    }
    g->nodes[out->seed].dtype = ln->dtype;
    g->nodes[out->seed].ndim = 0;
    if (!list_push(&lists[loss], out->seed)) {
        s = pipit__err(PIPIT_STATUS_NOMEM, "autodiff: out of memory");
        goto done;
    }
    for (int32_t j = loss; j >= 0 && s == PIPIT_STATUS_OK; j--) {
        if (!needs[j] || lists[j].n == 0 || g->nodes[j].op == PIPIT_OP_PARAM) continue;
        int32_t dj = sum_contribs(g, &lists[j], j);
        if (dj < 0) s = pipit__err(g->status, "autodiff: %s", g->errmsg);
        else s = backprop_node(g, j, dj, needs, lists);
    }
    if (s == PIPIT_STATUS_OK) s = collect_params(g, lists, fwd_end, out);
done:
    g->cur_flags = 0;
    g->cur_origin = -1;
    if (lists)
        for (int32_t i = 0; i < fwd_end; i++) pipit__free(lists[i].ids);
    pipit__free(lists);
    pipit__free(needs);
    if (s) pipit__grads_free(out);
    return s;
}

void pipit__grads_free(pipit__grads *gr) {
    if (!gr || !gr->pg) return;
    for (int i = 0; i < gr->nparams; i++) pipit__free(gr->pg[i].contrib);
    pipit__free(gr->pg);
    gr->pg = NULL;
    gr->nparams = 0;
}
