/*
 * ops.c — one section per op of ops.def: what the op IS — its shape and
 * dtype rule and its gradient (VJP) rule as graph ops — then the table that
 * binds them. Kernels live with each backend (src/backend/<name>/), which
 * fills its own run table from the same ops.def. To add an op: a line in
 * ops.def, a section here, a kernel per backend, and a gradcheck entry in
 * tests/test_ops.c (the test enforces both).
 */
#include <string.h>

#include "ir/graph.h"
#include "util/checked.h"

#define IN(i) (&g->nodes[n->in[i]])

static pipit_status shape_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static pipit_status shape_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pipit__verr(PIPIT_STATUS_SHAPE, fmt, ap);
    va_end(ap);
    return PIPIT_STATUS_SHAPE;
}

static int is_float(const pipit__node *n) { return n->dtype == PIPIT_F32 || n->dtype == PIPIT_F64; }

static int same_shape(const pipit__node *a, const pipit__node *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static void copy_shape(pipit__node *dst, const pipit__node *src) {
    dst->ndim = src->ndim;
    memcpy(dst->shape, src->shape, sizeof dst->shape);
}

static pipit_status need_float(const pipit__node *n, const char *what) {
    if (!is_float(n)) return shape_err("%s must be f32 or f64", what);
    return PIPIT_STATUS_OK;
}

static pipit_status need_same_float(const pipit__node *a, const pipit__node *b) {
    if (!is_float(a) || a->dtype != b->dtype)
        return shape_err("inputs must share one float dtype");
    return PIPIT_STATUS_OK;
}

static int32_t add_node(pipit_graph *g, pipit__opcode op, int nin, const int32_t *in,
                        const double *f, const int64_t *i) {
    return pipit__node_add(g, op, nin, in, f, i);
}
static int32_t op1(pipit_graph *g, pipit__opcode op, int32_t a) { return add_node(g, op, 1, &a, NULL, NULL); }
static int32_t op2(pipit_graph *g, pipit__opcode op, int32_t a, int32_t b) {
    return add_node(g, op, 2, (int32_t[]){a, b}, NULL, NULL);
}
static int32_t reshape_to(pipit_graph *g, int32_t x, int ndim, const int64_t *shape) {
    int64_t iattr[4] = {0};
    for (int i = 0; i < ndim; i++) iattr[i] = shape[i];
    return add_node(g, PIPIT_OP_RESHAPE, 1, &x, (double[2]){(double)ndim, 0}, iattr);
}

/* ---------------------------------------------------------------- leaves */

static pipit_status op_INPUT_shape(const pipit_graph *g, pipit__node *n) { (void)g; (void)n; return PIPIT_STATUS_OK; }
#define op_PARAM_shape op_INPUT_shape
#define op_INPUT_vjp NULL
#define op_PARAM_vjp NULL

/* ----------------------------------------------------------------- embed */

static pipit_status op_EMBED_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *t = IN(0), *idx = IN(1);
    if (t->ndim != 2) return shape_err("table must be 2-D [V,C]");
    if (need_float(t, "table")) return PIPIT_STATUS_SHAPE;
    if (idx->dtype != PIPIT_I32) return shape_err("indices must be i32");
    if (idx->ndim + 1 > PIPIT_MAX_DIMS) return shape_err("indices rank too high");
    n->dtype = t->dtype;
    n->ndim = (uint8_t)(idx->ndim + 1);
    memcpy(n->shape, idx->shape, sizeof(int64_t) * idx->ndim);
    n->shape[idx->ndim] = t->shape[1];
    return PIPIT_STATUS_OK;
}
static void op_EMBED_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int64_t iattr[4] = {IN(0)->shape[0], 0, 0, 0};
    din[0] = add_node(g, PIPIT_OP_EMBED_DTABLE, 2, (int32_t[]){n->in[1], dout}, NULL, iattr);
}

/* EMBED_DTABLE(idx, dout) -> [V, C]: scatter-add of dout rows by index. */
static pipit_status op_EMBED_DTABLE_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *idx = IN(0), *d = IN(1);
    if (idx->dtype != PIPIT_I32) return shape_err("indices must be i32");
    if (need_float(d, "dout")) return PIPIT_STATUS_SHAPE;
    if (d->ndim != idx->ndim + 1) return shape_err("dout must be indices shape + [C]");
    n->dtype = d->dtype;
    n->ndim = 2;
    n->shape[0] = n->iattr[0];
    n->shape[1] = pipit__node_last_dim(d);
    return PIPIT_STATUS_OK;
}
#define op_EMBED_DTABLE_vjp NULL

/* ------------------------------------------------------- add, mul, scale */

static pipit_status op_ADD_shape(const pipit_graph *g, pipit__node *n) {
    if (need_same_float(IN(0), IN(1))) return PIPIT_STATUS_SHAPE;
    if (!same_shape(IN(0), IN(1))) return shape_err("shapes must be equal");
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
static void op_ADD_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    (void)g; (void)id;
    din[0] = dout;
    din[1] = dout;
}

#define op_MUL_shape op_ADD_shape
static void op_MUL_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int32_t a = n->in[0], b = n->in[1];
    din[0] = op2(g, PIPIT_OP_MUL, dout, b);
    din[1] = op2(g, PIPIT_OP_MUL, dout, a);
}

static pipit_status op_SCALE_shape(const pipit_graph *g, pipit__node *n) {
    if (need_float(IN(0), "input")) return PIPIT_STATUS_SHAPE;
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
static void op_SCALE_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    double f[2] = {g->nodes[id].fattr[0], 0};
    din[0] = add_node(g, PIPIT_OP_SCALE, 1, &dout, f, NULL);
}

/* ---------------------------------------------------------------- matmul */

static pipit_status op_MATMUL_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *a = IN(0), *b = IN(1);
    if (need_same_float(a, b)) return PIPIT_STATUS_SHAPE;
    if (a->ndim < 2 || b->ndim < 2) return shape_err("operands must have rank >= 2");
    if (b->ndim != 2 && b->ndim != a->ndim)
        return shape_err("b must be 2-D (broadcast) or have a's rank (batched)");
    if (b->ndim == a->ndim)
        for (int i = 0; i + 2 < a->ndim; i++)
            if (a->shape[i] != b->shape[i]) return shape_err("batch dimensions differ");
    pipit__mm_dims d = pipit__matmul_dims(a, b, n);
    int64_t Kb = d.tb ? b->shape[b->ndim - 1] : b->shape[b->ndim - 2];
    if (d.K != Kb) return shape_err("inner dimensions differ: %lld vs %lld", (long long)d.K, (long long)Kb);
    if (d.broadcast && d.ta) return shape_err("trans_a with a broadcast 2-D b is not supported");
    n->dtype = a->dtype;
    copy_shape(n, a);
    n->shape[a->ndim - 2] = d.M;
    n->shape[a->ndim - 1] = d.N;
    return PIPIT_STATUS_OK;
}
static int32_t mm(pipit_graph *g, int32_t a, int32_t b, int ta, int tb) {
    int64_t iattr[4] = {ta, tb, 0, 0};
    return add_node(g, PIPIT_OP_MATMUL, 2, (int32_t[]){a, b}, NULL, iattr);
}
static void op_MATMUL_vjp(pipit_graph *g, int32_t id, int32_t dc, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int32_t a = n->in[0], b = n->in[1];
    pipit__mm_dims d = pipit__matmul_dims(IN(0), IN(1), n);
    din[0] = d.ta ? mm(g, b, dc, d.tb, 1) : mm(g, dc, b, 0, !d.tb);
    if (!d.broadcast) {
        din[1] = d.tb ? mm(g, dc, a, 1, d.ta) : mm(g, a, dc, !d.ta, 0);
        return;
    }
    /* Broadcast b: its gradient contracts over every row of a and dc. */
    int64_t R = d.batch * d.M;
    int32_t a2 = reshape_to(g, a, 2, (int64_t[]){R, d.K});
    int32_t dc2 = reshape_to(g, dc, 2, (int64_t[]){R, d.N});
    din[1] = d.tb ? mm(g, dc2, a2, 1, 0) : mm(g, a2, dc2, 1, 0);
}

/* -------------------------------------------------------------- bias add */

static pipit_status op_BIAS_ADD_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0), *b = IN(1);
    if (need_same_float(x, b)) return PIPIT_STATUS_SHAPE;
    if (x->ndim < 1 || b->ndim != 1 || b->shape[0] != pipit__node_last_dim(x))
        return shape_err("bias must be 1-D matching x's last axis");
    n->dtype = x->dtype;
    copy_shape(n, x);
    return PIPIT_STATUS_OK;
}
static void op_BIAS_ADD_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    (void)id;
    din[0] = dout;
    din[1] = op1(g, PIPIT_OP_SUM_ROWS, dout);
}

static pipit_status op_SUM_ROWS_shape(const pipit_graph *g, pipit__node *n) {
    if (need_float(IN(0), "input") || IN(0)->ndim < 1) return shape_err("input must be float, rank >= 1");
    n->dtype = IN(0)->dtype;
    n->ndim = 1;
    n->shape[0] = pipit__node_last_dim(IN(0));
    return PIPIT_STATUS_OK;
}
#define op_SUM_ROWS_vjp NULL

/* ------------------------------------------------------------- layernorm */

static pipit_status op_LAYERNORM_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0), *w = IN(1), *b = IN(2);
    if (need_same_float(x, w) || need_same_float(x, b)) return PIPIT_STATUS_SHAPE;
    int64_t C = pipit__node_last_dim(x);
    if (x->ndim < 1 || w->ndim != 1 || b->ndim != 1 || w->shape[0] != C || b->shape[0] != C)
        return shape_err("weight and bias must be 1-D of x's last axis");
    if (!(n->fattr[0] > 0)) return shape_err("eps must be > 0");
    n->dtype = x->dtype;
    copy_shape(n, x);
    return PIPIT_STATUS_OK;
}
static void op_LAYERNORM_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    double f[2] = {n->fattr[0], 0};
    int32_t x = n->in[0], w = n->in[1];
    din[0] = add_node(g, PIPIT_OP_LN_DX, 3, (int32_t[]){x, w, dout}, f, NULL);
    din[1] = add_node(g, PIPIT_OP_LN_DW, 2, (int32_t[]){x, dout}, f, NULL);
    din[2] = op1(g, PIPIT_OP_SUM_ROWS, dout);
}

static pipit_status op_LN_DX_shape(const pipit_graph *g, pipit__node *n) {
    if (need_same_float(IN(0), IN(2)) || !same_shape(IN(0), IN(2)))
        return shape_err("x and dout must match");
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
#define op_LN_DX_vjp NULL

static pipit_status op_LN_DW_shape(const pipit_graph *g, pipit__node *n) {
    if (need_same_float(IN(0), IN(1)) || !same_shape(IN(0), IN(1)))
        return shape_err("x and dout must match");
    n->dtype = IN(0)->dtype;
    n->ndim = 1;
    n->shape[0] = pipit__node_last_dim(IN(0));
    return PIPIT_STATUS_OK;
}
#define op_LN_DW_vjp NULL

/* ------------------------------------------------------------------ gelu */

#define op_GELU_shape op_SCALE_shape
static void op_GELU_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    din[0] = op2(g, PIPIT_OP_GELU_DX, g->nodes[id].in[0], dout);
}
#define op_GELU_DX_shape op_ADD_shape
#define op_GELU_DX_vjp NULL

/* ------------------------------------------------------------- attention */

static pipit_status op_ATTENTION_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0);
    int64_t H = n->iattr[0];
    if (need_float(x, "qkv") || x->ndim != 3 || x->shape[2] % 3 != 0)
        return shape_err("qkv must be float [B,T,3C]");
    int64_t C = x->shape[2] / 3;
    if (H <= 0 || C % H != 0)
        return shape_err("heads (%lld) must divide C (%lld)", (long long)H, (long long)C);
    n->dtype = x->dtype;
    copy_shape(n, x);
    n->shape[2] = C;
    return PIPIT_STATUS_OK;
}
static void op_ATTENTION_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    int64_t iattr[4] = {g->nodes[id].iattr[0], 0, 0, 0};
    din[0] = add_node(g, PIPIT_OP_ATTN_DQKV, 2, (int32_t[]){g->nodes[id].in[0], dout}, NULL, iattr);
}
static pipit_status op_ATTN_DQKV_shape(const pipit_graph *g, pipit__node *n) {
    if (need_same_float(IN(0), IN(1)) || IN(0)->ndim != 3) return shape_err("bad qkv/dout");
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
#define op_ATTN_DQKV_vjp NULL

/* --------------------------------------------------------- cross-entropy */

static pipit_status op_XENT_ROWS_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0), *t = IN(1);
    if (need_float(x, "logits")) return PIPIT_STATUS_SHAPE;
    if (t->dtype != PIPIT_I32) return shape_err("targets must be i32");
    if (x->ndim != t->ndim + 1) return shape_err("targets must be logits' shape without the last axis");
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != x->shape[i]) return shape_err("targets must be logits' shape without the last axis");
    n->dtype = x->dtype;
    copy_shape(n, t);
    return PIPIT_STATUS_OK;
}
static void op_XENT_ROWS_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    din[0] = add_node(g, PIPIT_OP_XENT_DLOGITS, 3, (int32_t[]){n->in[0], n->in[1], dout}, NULL, NULL);
}
static pipit_status op_XENT_DLOGITS_shape(const pipit_graph *g, pipit__node *n) {
    if (need_same_float(IN(0), IN(2))) return PIPIT_STATUS_SHAPE;
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
#define op_XENT_DLOGITS_vjp NULL

/* ------------------------------------------------------- sum, mean, fill */

/* SUM(x) -> scalar, times fattr[0] (1 for sum, 1/numel for mean). */
static pipit_status op_SUM_shape(const pipit_graph *g, pipit__node *n) {
    if (need_float(IN(0), "input")) return PIPIT_STATUS_SHAPE;
    n->dtype = IN(0)->dtype;
    n->ndim = 0;
    return PIPIT_STATUS_OK;
}
static void op_SUM_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *x = &g->nodes[g->nodes[id].in[0]];
    int64_t shape[PIPIT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    din[0] = pipit__fill(g, dout, x->ndim, shape, g->nodes[id].fattr[0]);
}

/* FILL(s) -> shape iattr (rank fattr[1]), every element s * fattr[0]. */
static pipit_status op_FILL_shape(const pipit_graph *g, pipit__node *n) {
    if (need_float(IN(0), "input") || IN(0)->ndim != 0) return shape_err("input must be a float scalar");
    int nd = (int)n->fattr[1];
    if (nd < 0 || nd > PIPIT_MAX_DIMS) return shape_err("bad rank %d", nd);
    for (int i = 0; i < nd; i++)
        if (n->iattr[i] <= 0) return shape_err("dimension %d is %lld", i, (long long)n->iattr[i]);
    n->dtype = IN(0)->dtype;
    n->ndim = (uint8_t)nd;
    for (int i = 0; i < nd; i++) n->shape[i] = n->iattr[i];
    return PIPIT_STATUS_OK;
}
static void op_FILL_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    double f[2] = {g->nodes[id].fattr[0], 0};
    din[0] = add_node(g, PIPIT_OP_SUM, 1, &dout, f, NULL);
}

/* ------------------------------------------------- reshape, permute, yield */

static pipit_status op_RESHAPE_shape(const pipit_graph *g, pipit__node *n) {
    int nd = (int)n->fattr[0];
    int64_t cnt = 1;
    for (int i = 0; i < nd; i++) {
        if (n->iattr[i] <= 0) return shape_err("dimension %d is %lld", i, (long long)n->iattr[i]);
        if (!pipit__mul_le(cnt, n->iattr[i], PIPIT__MAX_NUMEL, &cnt))
            return shape_err("target shape has more than 2^48 elements (the limit of one tensor)");
    }
    if (cnt != pipit__node_numel(IN(0)))
        return shape_err("element count %lld differs from the input's %lld", (long long)cnt,
                         (long long)pipit__node_numel(IN(0)));
    n->dtype = IN(0)->dtype;
    n->ndim = (uint8_t)nd;
    for (int i = 0; i < nd; i++) n->shape[i] = n->iattr[i];
    return PIPIT_STATUS_OK;
}
static void op_RESHAPE_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *x = &g->nodes[g->nodes[id].in[0]];
    int64_t shape[PIPIT_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    din[0] = reshape_to(g, dout, x->ndim, shape);
}

static pipit_status op_PERMUTE_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0);
    if (need_float(x, "input")) return PIPIT_STATUS_SHAPE;
    int seen = 0;
    for (int i = 0; i < x->ndim; i++) {
        int64_t p = n->iattr[i];
        if (p < 0 || p >= x->ndim || (seen >> p & 1)) return shape_err("not a permutation of the axes");
        seen |= 1 << p;
        n->shape[i] = x->shape[p];
    }
    n->dtype = x->dtype;
    n->ndim = x->ndim;
    return PIPIT_STATUS_OK;
}
static void op_PERMUTE_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int64_t inv[4] = {0, 1, 2, 3};
    for (int i = 0; i < n->ndim; i++) inv[n->iattr[i]] = i;
    din[0] = add_node(g, PIPIT_OP_PERMUTE, 1, &dout, NULL, inv);
}

static pipit_status op_YIELD_shape(const pipit_graph *g, pipit__node *n) {
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
/* The transpose of a yield is a yield: the gradient moves one stage back. */
static void op_YIELD_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    (void)id;
    din[0] = op1(g, PIPIT_OP_YIELD, dout);
    if (din[0] >= 0) g->nodes[din[0]].flags |= NODE_BWD_YIELD;
}

/* ----------------------------------------------------------------- table */

#define VJP_OF_(NAME) op_##NAME##_vjp
const pipit__op_info pipit__ops[PIPIT_OP_COUNT] = {
#define X(NAME, str, arity, nondiff, alias, flags) \
    [PIPIT_OP_##NAME] = {str, arity, nondiff, alias, flags, op_##NAME##_shape, VJP_OF_(NAME)},
#include "ir/ops.def"
#undef X
};
