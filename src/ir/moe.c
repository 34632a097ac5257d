/*
 * moe.c — the mixture-of-experts ops (ir/moe.h): shape rules, gradient
 * rules, and the public builders of pipit_moe.h.
 */
#include "ir/moe.h"

#include <math.h>
#include <string.h>

#include "pipit_moe.h"
#include "util/checked.h"

#define IN(i) (&g->nodes[n->in[i]])

/* A shape rule's refusal: the status and its message in one call. */
#define bad(...) pipit__err(PIPIT_STATUS_SHAPE, __VA_ARGS__)

static int is_float(const pipit__node *n) {
    return n->dtype == PIPIT_F32 || n->dtype == PIPIT_F64 || n->dtype == PIPIT_BF16;
}

/* [..., N] -> [..., k] in dtype dt. */
static void last_axis_to(pipit__node *n, const pipit__node *x, int64_t k, pipit_dtype dt) {
    n->dtype = (uint8_t)dt;
    n->ndim = x->ndim;
    memcpy(n->shape, x->shape, sizeof n->shape);
    n->shape[x->ndim - 1] = k;
}

pipit_status pipit__op_topk_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0);
    if (!is_float(x)) return bad("x must be f32, f64 or bf16");
    if (x->ndim < 1) return bad("x must have rank >= 1 (top-k along its last axis)");
    int64_t N = x->shape[x->ndim - 1], k = n->iattr[0];
    if (k < 1 || k > N) return bad("k = %lld is not in 1..%lld (the last axis)", (long long)k, (long long)N);
    last_axis_to(n, x, k, PIPIT_I32);
    return PIPIT_STATUS_OK;
}

/* Leading axes of a and b equal, both rank nd. */
static int same_lead(const pipit__node *a, const pipit__node *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i + 1 < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

pipit_status pipit__op_take_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0), *idx = IN(1);
    if (!is_float(x)) return bad("x must be f32, f64 or bf16");
    if (idx->dtype != PIPIT_I32) return bad("indices must be i32");
    if (x->ndim < 1 || !same_lead(x, idx))
        return bad("indices must have x's rank (>= 1) and leading axes ([..., N] and [..., k])");
    last_axis_to(n, x, idx->shape[idx->ndim - 1], (pipit_dtype)x->dtype);
    return PIPIT_STATUS_OK;
}

void pipit__op_take_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int32_t idx = n->in[1];
    int64_t N = pipit__node_last_dim(IN(0));
    din[0] = pipit__node_add(g, PIPIT_OP_TAKE_DX, 2, (int32_t[]){idx, dout}, NULL, (int64_t[4]){N, 0, 0, 0});
}

/* TAKE_DX(idx [..., k], dout [..., k]) -> [..., N = iattr[0]]. */
pipit_status pipit__op_take_dx_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *idx = IN(0), *d = IN(1);
    if (idx->dtype != PIPIT_I32) return bad("indices must be i32");
    if (!is_float(d)) return bad("dout must be f32, f64 or bf16");
    if (d->ndim < 1 || !same_lead(idx, d) || d->shape[d->ndim - 1] != idx->shape[idx->ndim - 1])
        return bad("dout must have the indices' shape");
    if (n->iattr[0] < 1) return bad("the last axis N = %lld must be >= 1", (long long)n->iattr[0]);
    last_axis_to(n, d, n->iattr[0], (pipit_dtype)d->dtype);
    return PIPIT_STATUS_OK;
}

/* E = iattr[0] >= 1, C = iattr[1] >= 1, E * C < 2^31 (slots are i32). */
static pipit_status grid_ok(const pipit__node *n) {
    int64_t E = n->iattr[0], C = n->iattr[1];
    if (E < 1) return bad("experts = %lld must be >= 1", (long long)E);
    if (C < 1) return bad("capacity = %lld must be >= 1", (long long)C);
    int64_t ec;
    if (!pipit__mul_i64(E, C, &ec) || ec > INT32_MAX)
        return bad("experts x capacity = %lld x %lld slots exceeds 2^31 - 1 (slot numbers are i32)", (long long)E,
                   (long long)C);
    return PIPIT_STATUS_OK;
}

static pipit_status slots_ok(const pipit__node *s) {
    if (s->dtype != PIPIT_I32 || s->ndim != 2) return bad("slots must be i32 [T, k]");
    return PIPIT_STATUS_OK;
}

pipit_status pipit__op_moe_slots_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *idx = IN(0);
    if (idx->dtype != PIPIT_I32 || idx->ndim != 2) return bad("indices must be i32 [T, k]");
    if (grid_ok(n)) return PIPIT_STATUS_SHAPE;
    n->dtype = PIPIT_I32;
    n->ndim = 2;
    n->shape[0] = idx->shape[0];
    n->shape[1] = idx->shape[1];
    return PIPIT_STATUS_OK;
}

/* The optional weights (input 2): [T, k] of the data's dtype. */
static pipit_status weights_ok(const pipit_graph *g, const pipit__node *n, const pipit__node *data) {
    if (n->nin < 3) return PIPIT_STATUS_OK;
    const pipit__node *w = IN(2), *s = IN(1);
    if (w->dtype != data->dtype) return bad("weights must have the data's dtype");
    if (w->ndim != 2 || w->shape[0] != s->shape[0] || w->shape[1] != s->shape[1])
        return bad("weights must have the slots' shape [T, k]");
    return PIPIT_STATUS_OK;
}

pipit_status pipit__op_moe_dispatch_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0), *s = IN(1);
    if (n->nin < 2 || n->nin > 3) return bad("takes x, slots and optional weights");
    if (!is_float(x) || x->ndim != 2) return bad("x must be f32, f64 or bf16 [T, d]");
    if (slots_ok(s)) return PIPIT_STATUS_SHAPE;
    if (s->shape[0] != x->shape[0]) return bad("slots must have x's T rows");
    if (weights_ok(g, n, x) || grid_ok(n)) return PIPIT_STATUS_SHAPE;
    n->dtype = x->dtype;
    n->ndim = 3;
    n->shape[0] = n->iattr[0];
    n->shape[1] = n->iattr[1];
    n->shape[2] = x->shape[1];
    return PIPIT_STATUS_OK;
}

pipit_status pipit__op_moe_combine_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *y = IN(0), *s = IN(1);
    if (n->nin < 2 || n->nin > 3) return bad("takes y, slots and optional weights");
    if (!is_float(y) || y->ndim != 3) return bad("y must be f32, f64 or bf16 [E, C, d]");
    if (slots_ok(s) || weights_ok(g, n, y)) return PIPIT_STATUS_SHAPE;
    n->dtype = y->dtype;
    n->ndim = 2;
    n->shape[0] = s->shape[0];
    n->shape[1] = y->shape[2];
    return PIPIT_STATUS_OK;
}

/* MOE_DW(a [E, C, d], slots [T, k], b [T, d]) -> [T, k]. */
pipit_status pipit__op_moe_dw_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *a = IN(0), *s = IN(1), *b = IN(2);
    if (!is_float(a) || a->ndim != 3) return bad("a must be f32, f64 or bf16 [E, C, d]");
    if (slots_ok(s)) return PIPIT_STATUS_SHAPE;
    if (b->dtype != a->dtype || b->ndim != 2 || b->shape[0] != s->shape[0] || b->shape[1] != a->shape[2])
        return bad("b must be [T, d] of a's dtype");
    n->dtype = a->dtype;
    n->ndim = 2;
    n->shape[0] = s->shape[0];
    n->shape[1] = s->shape[1];
    return PIPIT_STATUS_OK;
}

/* The transposes: d dispatch(x, s, w) / dx = combine(dout, s, w), and
 * d combine(y, s, w) / dy = dispatch(dout, s, w); each weight's gradient
 * is MOE_DW of the grid-side and the token-side tensors. */
void pipit__op_moe_dispatch_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id];
    int32_t in[3] = {dout, n.in[1], n.nin > 2 ? n.in[2] : -1};
    din[0] = pipit__node_add(g, PIPIT_OP_MOE_COMBINE, n.nin, in, NULL, NULL);
    if (n.nin > 2) din[2] = pipit__node_add(g, PIPIT_OP_MOE_DW, 3, (int32_t[]){dout, n.in[1], n.in[0]}, NULL, NULL);
}

void pipit__op_moe_combine_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id];
    const pipit__node *y = &g->nodes[n.in[0]];
    int64_t iattr[4] = {y->shape[0], y->shape[1], 0, 0};
    int32_t in[3] = {dout, n.in[1], n.nin > 2 ? n.in[2] : -1};
    din[0] = pipit__node_add(g, PIPIT_OP_MOE_DISPATCH, n.nin, in, NULL, iattr);
    if (n.nin > 2) din[2] = pipit__node_add(g, PIPIT_OP_MOE_DW, 3, (int32_t[]){n.in[0], n.in[1], dout}, NULL, NULL);
}

/* ------------------------------------------------------------ builders */

pipit_val pipit_take_along(pipit_graph *g, pipit_val x, pipit_val idx) {
    return pipit__build(g, __func__, PIPIT_OP_TAKE, 2, (pipit_val[]){x, idx}, NULL, NULL);
}

pipit_val pipit_topk(pipit_graph *g, pipit_val x, int k, pipit_val *indices) {
    pipit_val idx = pipit__build(g, __func__, PIPIT_OP_TOPK, 1, &x, NULL, (int64_t[4]){k, 0, 0, 0});
    if (indices) *indices = idx;
    if (idx.id < 0) return idx;
    return pipit__build(g, __func__, PIPIT_OP_TAKE, 2, (pipit_val[]){x, idx}, NULL, NULL);
}

/* A builder's refusal before any node: a bad handle or an earlier
 * failure keeps its own message (naming fn); else g is poisoned with why. */
static pipit_val refuse(pipit_graph *g, const char *fn, const char *why) {
    if (!g) pipit__err(PIPIT_STATUS_MISUSE, "%s: graph is NULL", fn);
    else if (g->magic != PIPIT_GRAPH_MAGIC)
        pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid graph handle (freed, or not a pipit_graph)", fn);
    else if (g->status != PIPIT_STATUS_OK)
        pipit__err(g->status, "%s: the graph already failed: %s", fn, g->errmsg);
    else pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: %s", fn, why);
    return (pipit_val){g, -1};
}

pipit_val pipit_moe_route(pipit_graph *g, pipit_val logits, const pipit_route_opts *o, pipit_val *indices) {
    const char *fn = __func__;
    if (indices) *indices = (pipit_val){g, -1};
    if (!o) return refuse(g, fn, "options are NULL");
    if (!indices) return refuse(g, fn, "indices is NULL (the chosen experts are returned there)");
    if (o->kind != PIPIT_ROUTER_SOFTMAX && o->kind != PIPIT_ROUTER_SIGMOID)
        return refuse(g, fn, "router kind must be PIPIT_ROUTER_SOFTMAX or PIPIT_ROUTER_SIGMOID");
    if (!g || g->magic != PIPIT_GRAPH_MAGIC || g->status != PIPIT_STATUS_OK || logits.g != g || logits.id < 0 ||
        logits.id >= g->n)
        return pipit__build(g, fn, PIPIT_OP_SOFTMAX, 1, &logits, NULL, NULL); /* its message */
    const pipit__node *ln = &g->nodes[logits.id];
    if (ln->ndim != 2 || !is_float(ln)) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "%s: logits must be float [T, E], not rank %d", fn, ln->ndim);
        return (pipit_val){g, -1};
    }
    int64_t E = ln->shape[1];
    if (o->top_k < 1 || o->top_k > E) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: top_k = %d is not in 1..%lld (the experts)", fn, o->top_k,
                          (long long)E);
        return (pipit_val){g, -1};
    }
    pipit_val scores = o->kind == PIPIT_ROUTER_SOFTMAX ? pipit_softmax(g, logits) : pipit_sigmoid(g, logits);
    pipit_val choose = o->bias ? pipit_add(g, scores, *o->bias) : scores;
    pipit_val idx = pipit__build(g, fn, PIPIT_OP_TOPK, 1, &choose, NULL, (int64_t[4]){o->top_k, 0, 0, 0});
    pipit_val w = pipit__build(g, fn, PIPIT_OP_TAKE, 2, (pipit_val[]){scores, idx}, NULL, NULL);
    if (o->normalize) w = pipit_div(g, w, pipit_reduce_sum(g, w, -1, 1));
    *indices = idx;
    return w;
}

int64_t pipit_moe_capacity(int64_t tokens, int top_k, int experts, double factor, int dropless) {
    if (tokens < 1 || experts < 1 || top_k < 1) {
        pipit__err(PIPIT_STATUS_INVALID, "pipit_moe_capacity: tokens (%lld), top_k (%d) and experts (%d) must be >= 1",
                   (long long)tokens, top_k, experts);
        return -1;
    }
    if (top_k > experts) {
        pipit__err(PIPIT_STATUS_INVALID, "pipit_moe_capacity: top_k = %d exceeds the experts (%d)", top_k, experts);
        return -1;
    }
    if (dropless) return tokens;
    if (!(factor > 0) || !isfinite(factor)) {
        pipit__err(PIPIT_STATUS_INVALID, "pipit_moe_capacity: capacity factor %g must be > 0 (or dropless)", factor);
        return -1;
    }
    double c = ceil(factor * (double)tokens * (double)top_k / (double)experts);
    return c < 1 ? 1 : c >= (double)tokens ? tokens : (int64_t)c;
}

pipit_val pipit_moe_slots(pipit_graph *g, pipit_val indices, int experts, int64_t capacity) {
    return pipit__build(g, __func__, PIPIT_OP_MOE_SLOTS, 1, &indices, NULL, (int64_t[4]){experts, capacity, 0, 0});
}

pipit_val pipit_moe_dispatch(pipit_graph *g, pipit_val x, pipit_val slots, int experts, int64_t capacity,
                             const pipit_val *weights) {
    pipit_val in[3] = {x, slots, weights ? *weights : x};
    return pipit__build(g, __func__, PIPIT_OP_MOE_DISPATCH, weights ? 3 : 2, in, NULL,
                        (int64_t[4]){experts, capacity, 0, 0});
}

pipit_val pipit_moe_combine(pipit_graph *g, pipit_val y, pipit_val slots, const pipit_val *weights) {
    pipit_val in[3] = {y, slots, weights ? *weights : y};
    return pipit__build(g, __func__, PIPIT_OP_MOE_COMBINE, weights ? 3 : 2, in, NULL, NULL);
}
