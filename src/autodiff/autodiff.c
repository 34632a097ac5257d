/*
 * autodiff.c — reverse mode over the graph, in two passes. The loop pass
 * walks the per-microbatch forward nodes from the loss back, asks each op's
 * VJP rule (ops.c) for its inputs' gradients, and stops at gradient targets
 * (params and pre-loop values), whose per-use contributions it records. The
 * post-loop pass starts from each pre-loop value's accumulated gradient and
 * walks the pre-loop region back to the params. Every gradient's shape is
 * checked against its primal; summation order is consumer order, always,
 * and a yield does not change it (pass_yield, sum_terms).
 */
#include "autodiff/autodiff.h"

#include <stdlib.h>
#include <string.h>

/* A contribution, its place in the sum, and the yields it came through.
 * key = consumer * PIPIT_MAX_IN + input slot, where the consumer is the node
 * whose VJP produced it: a contribution passed on through a yield keeps its
 * key, so a value's contributions are added in the order of their real
 * consumers whether or not yields stand between (the graph without yields,
 * a one-rank run, sums exactly these in exactly this order). via: the
 * yield it reached this value through (a hop, nearest first), -1 if none. */
typedef struct {
    int32_t id, via;
    int64_t key;
} contrib;

static int64_t contrib_key(int32_t consumer, int slot) { return (int64_t)consumer * PIPIT_MAX_IN + slot; }

/* Per-value list, appended in descending key order by the walk (reverse
 * topological), plus what yields pass on; summed in ascending key order. */
typedef struct {
    contrib *c;
    int n, cap;
} contrib_list;

static int list_push(contrib_list *l, int32_t id, int64_t key, int32_t via) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        contrib *c = pipit__realloc(l->c, (size_t)cap * sizeof *c);
        if (!c) return 0;
        l->c = c;
        l->cap = cap;
    }
    l->c[l->n++] = (contrib){id, via, key};
    return 1;
}

static int key_desc(const void *a, const void *b) {
    int64_t x = ((const contrib *)a)->key, y = ((const contrib *)b)->key;
    return (x < y) - (x > y);
}

/* Descending key order (keys are unique: one per consumer input slot). */
static void list_sort(contrib_list *l) {
    if (l->n > 1) qsort(l->c, (size_t)l->n, sizeof *l->c, key_desc);
}

static int diff_input(const pipit__node *n, int k) { return !(pipit__ops[n->op].nondiff >> k & 1); }

/* needs[i]: node i lies on a path param -> loss (so it gets a gradient).
 * Sized for every forward node [0, fwd_end): nodes built after the loss
 * (post-loop transforms, unused ops) are simply not part of the loss. */
static uint8_t *mark_needed(const pipit_graph *g, int32_t loss, int32_t fwd_end) {
    int32_t n = loss + 1;
    uint8_t *from_param = pipit__calloc((size_t)PIPIT_MAX(fwd_end, 1), 1), *to_loss = pipit__calloc((size_t)n, 1);
    if (!from_param || !to_loss) {
        pipit__free(from_param);
        pipit__free(to_loss);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) {
        const pipit__node *nd = &g->nodes[i];
        if (nd->op == PIPIT_OP_PARAM) from_param[i] = 1;
        for (int k = 0; k < nd->nin; k++)
            if (diff_input(nd, k) && from_param[nd->in[k]]) from_param[i] = 1;
    }
    to_loss[loss] = 1;
    for (int32_t i = n - 1; i >= 0; i--) {
        if (!to_loss[i]) continue;
        const pipit__node *nd = &g->nodes[i];
        for (int k = 0; k < nd->nin; k++)
            if (diff_input(nd, k)) to_loss[nd->in[k]] = 1;
    }
    for (int32_t i = 0; i < n; i++) from_param[i] = from_param[i] && to_loss[i];
    pipit__free(to_loss);
    return from_param;
}

/* preloop[i]: a non-leaf forward node whose inputs are all params or
 * pre-loop nodes, i.e. the same for every microbatch. */
static uint8_t *mark_preloop(const pipit_graph *g, int32_t fwd_end, int32_t loss) {
    uint8_t *pre = pipit__calloc((size_t)PIPIT_MAX(fwd_end, 1), 1);
    if (!pre) return NULL;
    for (int32_t i = 0; i < fwd_end; i++) {
        const pipit__node *n = &g->nodes[i];
        if ((pipit__ops[n->op].flags & OPF_LEAF) || i == loss) continue;
        int inv = 1;
        for (int k = 0; k < n->nin && inv; k++) {
            const pipit__node *a = &g->nodes[n->in[k]];
            inv = a->op == PIPIT_OP_PARAM || pre[n->in[k]];
        }
        pre[i] = (uint8_t)inv;
    }
    return pre;
}

/* A yield a contribution passed through (hops[h][0]) and the hop before
 * it (hops[h][1], -1 if none). */
typedef struct {
    int32_t (*hops)[2];
    int32_t nhops, caphops;
} hop_table;

/* The left fold ((t0 + t1) + t2) + ... of n contributions in ascending key
 * order, the sum of value `origin`. Where the fold starts with a run of
 * contributions that came through one yield, that run is summed on the
 * yield's side (in its stage, recursively through further yields) and
 * moved back by the yield's transpose: one message for the run, the same
 * bits. The rest, wherever it came from, is added here one by one: a
 * partial sum of a later run would change the grouping, hence the bits. */
static int32_t sum_terms(pipit_graph *g, const hop_table *h, contrib *t, int n, int32_t origin) {
    int32_t acc = t[0].id;
    int i = 1;
    if (t[0].via >= 0) {
        int32_t y = h->hops[t[0].via][0];
        int r = 0;
        for (; r < n && t[r].via >= 0 && h->hops[t[r].via][0] == y; r++) t[r].via = h->hops[t[r].via][1];
        int32_t s = sum_terms(g, h, t, r, y);
        int32_t din[PIPIT_MAX_IN] = {-1, -1, -1, -1};
        g->cur_origin = y;
        if (s >= 0) pipit__ops[PIPIT_OP_YIELD].vjp(g, y, s, din);
        acc = din[0];
        i = r;
    }
    g->cur_origin = origin;
    for (; i < n && acc >= 0; i++) acc = pipit__node_add(g, PIPIT_OP_ADD, 2, (int32_t[]){acc, t[i].id}, NULL, NULL);
    return acc;
}

static int key_asc(const void *a, const void *b) { return key_desc(b, a); }

/* Sums a value's contributions in ascending key order. */
static int32_t sum_contribs(pipit_graph *g, const hop_table *h, contrib_list *l, int32_t origin) {
    if (l->n > 1) qsort(l->c, (size_t)l->n, sizeof *l->c, key_asc);
    return sum_terms(g, h, l->c, l->n, origin);
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
        return pipit__err(PIPIT_STATUS_SHAPE, "loss must be an f32 or f64 scalar (got %s of rank %d)",
                          pipit__dtype_name((pipit_dtype)l->dtype), l->ndim);
    int32_t y = loss; /* a yield anywhere in the loss's alias chain (reshape(yield(x))) */
    while (pipit__ops[g->nodes[y].op].alias && g->nodes[y].op != PIPIT_OP_YIELD) y = g->nodes[y].in[0];
    if (g->nodes[y].op == PIPIT_OP_YIELD)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "the loss (node %d) is the output of pipit_yield: a stage boundary cannot be the loss; "
                          "pass the value before the yield (the loss is computed in the last stage)",
                          loss);
    /* Everything the loss reads runs inside the microbatch loop; an
     * accumulated gradient exists only after it. */
    uint8_t *anc = pipit__calloc((size_t)loss + 1, 1);
    if (!anc) return pipit__err(PIPIT_STATUS_NOMEM, "autodiff: out of memory");
    anc[loss] = 1;
    pipit_status s = PIPIT_STATUS_OK;
    for (int32_t i = loss; i >= 0 && !s; i--) {
        if (!anc[i]) continue;
        const pipit__node *n = &g->nodes[i];
        if (n->flags & NODE_GRADOF)
            s = pipit__err(PIPIT_STATUS_INVALID,
                           "the loss reads pipit_grad_of('%s'): accumulated gradients exist only after the "
                           "microbatch loop, so they may be used only by post-loop ops (pipit_set_grad), not by the loss",
                           g->nodes[n->iattr[0]].name);
        for (int k = 0; k < n->nin; k++) anc[n->in[k]] = 1;
    }
    pipit__free(anc);
    return s;
}

typedef struct {
    pipit_graph *g;
    int32_t loss, fwd_end;
    uint8_t *needs, *pre;
    contrib_list *lists;   /* [fwd_end] contributions per forward value */
    contrib_list *loop_uses; /* [fwd_end] targets' uses recorded by the loop pass */
    hop_table hops;        /* the yields contributions passed through */
    int32_t *refetched;    /* [fwd_end] an OPF_REFETCH value's backward copy, or -1 */
    int pointwise;         /* PIPIT_REMAT_POINTWISE: cheap elementwise values are refetched too */
} ad_state;

static pipit_status oom(void) { return pipit__err(PIPIT_STATUS_NOMEM, "autodiff: out of memory"); }

/* A loop value of the forward that the backward computes again rather
 * than keeps (pipit_options.remat = PIPIT_REMAT_POINTWISE): a GELU or SiLU
 * output (its own VJP reads its input, so the input is kept anyway), a
 * product whose VJP reads both factors (each kept, or itself recomputed),
 * and a cast of such a value. Recomputing it keeps no value alive that the
 * backward would not keep without it, so memory only falls. */
static int pointwise_recompute(const ad_state *a, int32_t r) {
    const pipit__node *n = &a->g->nodes[r];
    if (!a->pointwise || !a->needs[r]) return 0;
    switch (n->op) {
    case PIPIT_OP_GELU:
    case PIPIT_OP_SILU: return a->needs[n->in[0]];
    case PIPIT_OP_MUL: return a->needs[n->in[0]] && a->needs[n->in[1]];
    case PIPIT_OP_CAST: return !a->pre[n->in[0]] && pointwise_recompute(a, n->in[0]);
    default: return 0;
    }
}

/* The backward copy of forward value r when its op is OPF_REFETCH
 * (sequence parallelism's all-gather) or r is recomputed pointwise: the
 * same op on the same inputs (or their own backward copies), emitted once
 * in the backward region, so the forward's value dies after its forward
 * readers and only the inputs are kept for the backward (Megatron's SP
 * re-gathers the column-parallel matmul's input for its weight gradient;
 * torch.compile's partitioner recomputes pointwise ops the same way). The
 * same bits: the same kernel on the same inputs. r itself otherwise (-1:
 * out of memory). */
static int32_t refetch(ad_state *a, int32_t r) {
    pipit_graph *g = a->g;
    if (r >= a->fwd_end || a->pre[r]) return r;
    if (!(pipit__ops[g->nodes[r].op].flags & OPF_REFETCH) && !pointwise_recompute(a, r)) return r;
    if (a->refetched[r] >= 0) return a->refetched[r];
    pipit__node n = g->nodes[r];
    for (int k = 0; k < n.nin; k++)
        if ((n.in[k] = refetch(a, n.in[k])) < 0) return -1;
    int32_t c = pipit__node_add(g, (pipit__opcode)n.op, n.nin, n.in, n.fattr, n.iattr);
    if (c >= 0) a->refetched[r] = c;
    return c;
}

/* Emits the VJP of node j given its gradient dj, routing each input's
 * gradient into its contribution list. In the loop, the VJP reads an
 * OPF_REFETCH input through its backward copy (refetch). */
static pipit_status backprop_node(ad_state *a, int32_t j, int32_t dj) {
    pipit_graph *g = a->g;
    const pipit__op_info *info = &pipit__ops[g->nodes[j].op];
    if (!info->vjp) return pipit__err(PIPIT_STATUS_INTERNAL, "autodiff: op %s has no gradient rule", info->name);
    int32_t din[PIPIT_MAX_IN], in[PIPIT_MAX_IN];
    for (int k = 0; k < PIPIT_MAX_IN; k++) din[k] = -1;
    int nin = g->nodes[j].nin;
    memcpy(in, g->nodes[j].in, sizeof in);
    g->cur_origin = j;
    for (int k = 0; k < nin && !a->pre[j]; k++) {
        int32_t c = refetch(a, in[k]);
        if (c < 0) return pipit__err(g->status ? g->status : PIPIT_STATUS_NOMEM, "autodiff: %s", g->errmsg);
        g->nodes[j].in[k] = c;
    }
    info->vjp(g, j, dj, din);
    memcpy(g->nodes[j].in, in, sizeof in);
    if (g->status != PIPIT_STATUS_OK) return pipit__err(g->status, "autodiff: %s", g->errmsg);
    for (int k = nin - 1; k >= 0; k--) {
        if (!(info->nondiff >> k & 1) && a->needs[in[k]] && din[k] >= 0) {
            pipit_status s = check_grad_shape(g, in[k], din[k], j);
            if (s) return s;
            if (!list_push(&a->lists[in[k]], din[k], contrib_key(j, k), -1)) return oom();
        }
    }
    return PIPIT_STATUS_OK;
}

static int is_target_leaf(const ad_state *a, int32_t i) {
    return a->g->nodes[i].op == PIPIT_OP_PARAM;
}

static pipit_status fold_transparent_casts(ad_state *a);
static pipit_status fold_pre_yields(ad_state *a);

/* A yield is an identity that only moves a value to the next stage: its
 * contributions are not summed here but passed on to its input, each with
 * its key and (in the loop, hop = 1) this yield noted, so the input adds
 * them in its consumers' order (sum_terms sums on the yield's side what
 * that order allows). A pre-loop yield's loop uses are its input's
 * (fold_pre_yields); its post-loop contributions pass on without a hop
 * (the post-loop region has no stages). */
static pipit_status pass_yield(ad_state *a, int32_t j, int hop) {
    contrib_list *from = &a->lists[j], *to = &a->lists[a->g->nodes[j].in[0]];
    hop_table *h = &a->hops;
    for (int i = 0; i < from->n; i++) {
        if (!hop) {
            if (!list_push(to, from->c[i].id, from->c[i].key, -1)) return oom();
            continue;
        }
        if (h->nhops == h->caphops) {
            int32_t cap = h->caphops ? h->caphops * 2 : 16;
            int32_t(*hops)[2] = pipit__realloc(h->hops, sizeof *hops * (size_t)cap);
            if (!hops) return oom();
            h->hops = hops;
            h->caphops = cap;
        }
        h->hops[h->nhops][0] = j;
        h->hops[h->nhops][1] = from->c[i].via;
        if (!list_push(to, from->c[i].id, from->c[i].key, h->nhops++)) return oom();
    }
    from->n = 0;
    return PIPIT_STATUS_OK;
}

/* Loop pass: per-microbatch backward, stopping at params and pre-loop values. */
static pipit_status loop_pass(ad_state *a) {
    for (int32_t j = a->loss; j >= 0; j--) {
        if (!a->needs[j] || a->lists[j].n == 0 || is_target_leaf(a, j) || a->pre[j]) continue;
        if (a->g->nodes[j].op == PIPIT_OP_YIELD) {
            pipit_status s = pass_yield(a, j, 1);
            if (s) return s;
            continue;
        }
        int32_t dj = sum_contribs(a->g, &a->hops, &a->lists[j], j);
        if (dj < 0) return pipit__err(a->g->status, "autodiff: %s", a->g->errmsg);
        pipit_status s = backprop_node(a, j, dj);
        if (s) return s;
    }
    /* What reached params and pre-loop values are their loop uses. */
    for (int32_t i = 0; i < a->fwd_end; i++) {
        list_sort(&a->lists[i]);
        a->loop_uses[i] = a->lists[i];
        memset(&a->lists[i], 0, sizeof a->lists[i]);
    }
    pipit_status s = fold_pre_yields(a);
    return s ? s : fold_transparent_casts(a);
}

/* A pre-loop cast of a param to a dtype whose gradients accumulate in the
 * param's own (bf16 from fp32): its loop contributions are the param's
 * loop uses, added into fp32 accumulators as they come, so the cast needs
 * no gradient buffer and no post-loop backward of its own. */
static int transparent_cast(const ad_state *a, int32_t i) {
    const pipit__node *n = &a->g->nodes[i];
    if (n->op != PIPIT_OP_CAST || !a->pre[i]) return 0;
    const pipit__node *x = &a->g->nodes[n->in[0]];
    return x->op == PIPIT_OP_PARAM && x->dtype != n->dtype && pipit__acc_dtype((pipit_dtype)n->dtype) == x->dtype;
}

/* dst gets src's contributions too, both held in descending key order. */
static pipit_status merge_uses(contrib_list *dst, contrib_list *src) {
    contrib_list m = {0};
    int i = 0, k = 0;
    while (i < dst->n || k < src->n) {
        int take_src = i >= dst->n || (k < src->n && src->c[k].key > dst->c[i].key);
        contrib c = take_src ? src->c[k++] : dst->c[i++];
        if (!list_push(&m, c.id, c.key, c.via)) {
            pipit__free(m.c);
            return oom();
        }
    }
    pipit__free(dst->c);
    pipit__free(src->c);
    *dst = m;
    memset(src, 0, sizeof *src);
    return PIPIT_STATUS_OK;
}

/* A yield of a param or pre-loop value: its loop uses are its input's, in
 * their consumers' order, as without the yield (outermost first, so a chain
 * of yields folds into the value it starts from). */
static pipit_status fold_pre_yields(ad_state *a) {
    for (int32_t i = a->fwd_end - 1; i >= 0; i--)
        if (a->loop_uses[i].n && a->pre[i] && a->g->nodes[i].op == PIPIT_OP_YIELD) {
            pipit_status s = merge_uses(&a->loop_uses[a->g->nodes[i].in[0]], &a->loop_uses[i]);
            if (s) return s;
        }
    return PIPIT_STATUS_OK;
}

static pipit_status fold_transparent_casts(ad_state *a) {
    for (int32_t i = 0; i < a->fwd_end; i++)
        if (a->loop_uses[i].n && transparent_cast(a, i)) {
            pipit_status s = merge_uses(&a->loop_uses[a->g->nodes[i].in[0]], &a->loop_uses[i]);
            if (s) return s;
        }
    return PIPIT_STATUS_OK;
}

static int is_boundary(const ad_state *a, int32_t i) { return a->pre[i] && a->needs[i] && a->loop_uses[i].n > 0; }

/* What the post-loop region receives for boundary value i: its
 * accumulated gradient `leaf` (in the accumulation dtype), rounded to the
 * value's dtype -- unless i casts a value of the leaf's dtype, whose
 * gradient the cast passes on unrounded. */
static int32_t gacc_contribution(pipit_graph *g, int32_t i, int32_t leaf) {
    const pipit__node *n = &g->nodes[i];
    if (n->dtype == g->nodes[leaf].dtype) return leaf;
    if (n->op == PIPIT_OP_CAST && g->nodes[n->in[0]].dtype == g->nodes[leaf].dtype) return leaf;
    return pipit__cast(g, leaf, (pipit_dtype)n->dtype);
}

/* Post-loop pass: from each boundary value's accumulated gradient (a leaf
 * the runtime fills) back through the pre-loop region to the params. */
static pipit_status post_pass(ad_state *a, int32_t *gacc) {
    pipit_graph *g = a->g;
    g->cur_flags = NODE_BWD | NODE_POST;
    for (int32_t i = 0; i < a->fwd_end; i++) {
        gacc[i] = -1;
        if (!is_boundary(a, i)) continue;
        g->cur_origin = i;
        int32_t leaf = pipit__node_add(g, PIPIT_OP_INPUT, 0, NULL, NULL, NULL);
        char name[32];
        snprintf(name, sizeof name, "@gacc:%d", i);
        if (leaf < 0 || !(g->nodes[leaf].name = pipit__strdup(name))) return oom();
        pipit__node *n = &g->nodes[leaf];
        n->dtype = (uint8_t)pipit__acc_dtype((pipit_dtype)g->nodes[i].dtype);
        n->ndim = g->nodes[i].ndim;
        memcpy(n->shape, g->nodes[i].shape, sizeof n->shape);
        gacc[i] = leaf;
        int32_t c = gacc_contribution(g, i, leaf);
        if (c < 0) return pipit__err(g->status, "autodiff: %s", g->errmsg);
        if (!list_push(&a->lists[i], c, contrib_key(INT32_MAX, 0), -1)) return oom();
    }
    for (int32_t j = a->fwd_end - 1; j >= 0; j--) {
        if (!a->pre[j] || !a->needs[j] || a->lists[j].n == 0) continue;
        if (g->nodes[j].op == PIPIT_OP_YIELD) {
            pipit_status s = pass_yield(a, j, 0);
            if (s) return s;
            continue;
        }
        int32_t dj = sum_contribs(g, &a->hops, &a->lists[j], j);
        if (dj < 0) return pipit__err(g->status, "autodiff: %s", g->errmsg);
        pipit_status s = backprop_node(a, j, dj);
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

/* A target's uses: loop uses and post-loop uses merged by key (the two
 * sets of consumers are disjoint); each list is held in descending order. */
static pipit_status make_target(pipit__grad_target *t, int32_t node, const contrib_list *loop,
                                const contrib_list *post) {
    t->node = node;
    t->nuses = loop->n + post->n;
    t->contrib = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(t->nuses, 1));
    t->post = pipit__calloc((size_t)PIPIT_MAX(t->nuses, 1), 1);
    if (!t->contrib || !t->post) return oom();
    int i = loop->n - 1, k = post->n - 1;
    for (int u = 0; u < t->nuses; u++) {
        int take_post = i < 0 || (k >= 0 && post->c[k].key < loop->c[i].key);
        t->contrib[u] = take_post ? post->c[k--].id : loop->c[i--].id;
        t->post[u] = (uint8_t)take_post;
    }
    return PIPIT_STATUS_OK;
}

static pipit_status collect_targets(ad_state *a, const int32_t *gacc, pipit__grads *out) {
    const pipit_graph *g = a->g;
    int nb = 0;
    for (int32_t i = 0; i < a->fwd_end; i++) {
        if (g->nodes[i].op == PIPIT_OP_PARAM) out->nparams++;
        if (gacc[i] >= 0) nb++;
    }
    out->ntargets = out->nparams + nb;
    out->t = pipit__calloc((size_t)PIPIT_MAX(out->ntargets, 1), sizeof *out->t);
    if (!out->t) return oom();
    int p = 0, b = out->nparams, any = 0;
    contrib_list none = {0};
    for (int32_t i = 0; i < a->fwd_end; i++) {
        pipit_status s = PIPIT_STATUS_OK;
        if (g->nodes[i].op == PIPIT_OP_PARAM) {
            s = make_target(&out->t[p], i, &a->loop_uses[i], &a->lists[i]);
            any |= out->t[p++].nuses > 0;
        } else if (gacc[i] >= 0) {
            s = make_target(&out->t[b], i, &a->loop_uses[i], &none);
            out->t[b].boundary = 1;
            out->t[b++].gacc = gacc[i];
        }
        if (s) return s;
    }
    if (!any)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "the loss depends on no parameter (did you create them with pipit_param?)");
    return PIPIT_STATUS_OK;
}

static pipit_status add_seed(ad_state *a, pipit__grads *out) {
    pipit_graph *g = a->g;
    g->cur_flags = NODE_BWD;
    out->seed = pipit__node_add(g, PIPIT_OP_INPUT, 0, NULL, NULL, NULL);
    if (out->seed < 0 || !(g->nodes[out->seed].name = pipit__strdup("@dloss"))) return oom();
    g->nodes[out->seed].dtype = g->nodes[a->loss].dtype;
    g->nodes[out->seed].ndim = 0;
    return list_push(&a->lists[a->loss], out->seed, contrib_key(INT32_MAX, 0), -1) ? PIPIT_STATUS_OK : oom();
}

pipit_status pipit__autodiff(pipit_graph *g, int32_t loss, int remat, pipit__grads *out) {
    memset(out, 0, sizeof *out);
    pipit_status s = validate_loss(g, loss);
    if (s) return s;
    ad_state a = {g, loss, g->n, NULL, NULL, NULL, NULL, {NULL, 0, 0}, NULL, remat == PIPIT_REMAT_POINTWISE};
    out->fwd_end = a.fwd_end;
    a.needs = mark_needed(g, loss, a.fwd_end);
    a.pre = mark_preloop(g, a.fwd_end, loss);
    a.lists = pipit__calloc((size_t)a.fwd_end, sizeof *a.lists);
    a.loop_uses = pipit__calloc((size_t)a.fwd_end, sizeof *a.loop_uses);
    a.refetched = pipit__malloc(sizeof(int32_t) * (size_t)(a.fwd_end ? a.fwd_end : 1));
    for (int32_t i = 0; a.refetched && i < a.fwd_end; i++) a.refetched[i] = -1;
    int32_t *gacc = pipit__malloc(sizeof(int32_t) * (size_t)a.fwd_end);
    if (!a.needs || !a.pre || !a.lists || !a.loop_uses || !a.refetched || !gacc) s = oom();
    if (!s) s = add_seed(&a, out);
    if (!s) s = loop_pass(&a);
    if (!s) s = post_pass(&a, gacc);
    if (!s) s = collect_targets(&a, gacc, out);
    g->cur_flags = 0;
    g->cur_origin = -1;
    for (int32_t i = 0; a.lists && i < a.fwd_end; i++) pipit__free(a.lists[i].c);
    for (int32_t i = 0; a.loop_uses && i < a.fwd_end; i++) pipit__free(a.loop_uses[i].c);
    pipit__free(a.lists);
    pipit__free(a.loop_uses);
    pipit__free(a.refetched);
    pipit__free(a.needs);
    pipit__free(gacc);
    pipit__free(a.hops.hops);
    out->preloop = a.pre;
    if (s) pipit__grads_free(out);
    return s;
}

/* Forward-only: no backward nodes; every param is a target with no use,
 * the forward region ends before any backward node an earlier (training)
 * compile appended. */
pipit_status pipit__forward_targets(pipit_graph *g, int32_t loss, pipit__grads *out) {
    memset(out, 0, sizeof *out);
    out->seed = -1;
    pipit_status s = validate_loss(g, loss);
    if (s) return s;
    int32_t end = g->n;
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].flags & NODE_BWD) {
            end = i;
            break;
        }
    out->fwd_end = end;
    out->preloop = mark_preloop(g, end, loss);
    for (int32_t i = 0; i < end; i++)
        if (g->nodes[i].op == PIPIT_OP_PARAM) out->nparams++;
    out->ntargets = out->nparams;
    out->t = pipit__calloc((size_t)PIPIT_MAX(out->ntargets, 1), sizeof *out->t);
    if (!out->preloop || !out->t) s = oom();
    for (int32_t i = 0, k = 0; !s && i < end; i++) {
        if (g->nodes[i].op != PIPIT_OP_PARAM) continue;
        contrib_list none = {0};
        s = make_target(&out->t[k++], i, &none, &none);
    }
    if (s) pipit__grads_free(out);
    return s;
}

void pipit__grads_free(pipit__grads *gr) {
    if (!gr) return;
    for (int i = 0; gr->t && i < gr->ntargets; i++) {
        pipit__free(gr->t[i].contrib);
        pipit__free(gr->t[i].post);
    }
    pipit__free(gr->t);
    pipit__free(gr->preloop);
    gr->t = NULL;
    gr->preloop = NULL;
    gr->nparams = gr->ntargets = 0;
}
