/*
 * ops.c — one section per op of ops.def: what the op IS — its shape and
 * dtype rule and its gradient (VJP) rule as graph ops — then the table that
 * binds them. Kernels live with each backend (src/backend/<name>/), which
 * fills its own run table from the same ops.def. To add an op: a line in
 * ops.def, a section here, a kernel per backend, and a gradcheck entry in
 * tests/test_ops.c (the test enforces both).
 */
#include <math.h>
#include <string.h>

#include "ir/graph.h"
#include "ir/head_xent.h"
#include "ir/ep.h"
#include "ir/moe.h"
#include "ir/cp.h"
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

static int is_float(const pipit__node *n) {
    return n->dtype == PIPIT_F32 || n->dtype == PIPIT_F64 || n->dtype == PIPIT_BF16;
}

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
    if (!is_float(n)) return shape_err("%s must be f32, f64 or bf16", what);
    return PIPIT_STATUS_OK;
}

static pipit_status need_same_float(const pipit__node *a, const pipit__node *b) {
    if (!is_float(a) || a->dtype != b->dtype)
        return shape_err("inputs must share one float dtype");
    return PIPIT_STATUS_OK;
}

static int32_t add_node(pipit_graph *g, pipit__opcode op, int nin, const int32_t *in,
                        const double f[4], const int64_t i[4]) {
    return pipit__node_add(g, op, nin, in, f, i);
}
static int32_t op1(pipit_graph *g, pipit__opcode op, int32_t a) { return add_node(g, op, 1, &a, NULL, NULL); }
static int32_t op2(pipit_graph *g, pipit__opcode op, int32_t a, int32_t b) {
    return add_node(g, op, 2, (int32_t[]){a, b}, NULL, NULL);
}
static int32_t reshape_to(pipit_graph *g, int32_t x, int ndim, const int64_t *shape) {
    int64_t iattr[4] = {0};
    for (int i = 0; i < ndim; i++) iattr[i] = shape[i];
    return add_node(g, PIPIT_OP_RESHAPE, 1, &x, (double[4]){(double)ndim, 0}, iattr);
}
/* An op whose attributes are a target shape (iattr) of rank fattr[0]. */
static int32_t to_shape(pipit_graph *g, pipit__opcode op, int32_t x, const pipit__node *like, double f1) {
    int64_t iattr[4] = {0};
    for (int i = 0; i < like->ndim; i++) iattr[i] = like->shape[i];
    return add_node(g, op, 1, &x, (double[4]){(double)like->ndim, f1}, iattr);
}
/* Rank fattr[0] and shape iattr as the output's, refusing a bad rank or a
 * dimension < 1 (reshape, view, sum_to, broadcast_to). */
static pipit_status target_shape(pipit__node *n) {
    int nd = (int)n->fattr[0];
    if (!(n->fattr[0] >= 0 && n->fattr[0] <= PIPIT_MAX_DIMS) || nd != n->fattr[0])
        return shape_err("target rank %g not in 0..%d", n->fattr[0], PIPIT_MAX_DIMS);
    for (int i = 0; i < nd; i++)
        if (n->iattr[i] <= 0) return shape_err("dimension %d is %lld", i, (long long)n->iattr[i]);
    n->ndim = (uint8_t)nd;
    for (int i = 0; i < nd; i++) n->shape[i] = n->iattr[i];
    return PIPIT_STATUS_OK;
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
/* iattr[1] = 1: vocab-parallel (the table is this rank's shard of rows;
 * an index outside it reads zeros, and its gradient skips it). */
static void op_EMBED_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int64_t iattr[4] = {IN(0)->shape[0], n->iattr[1], 0, 0};
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

/* GATHER(table [N, ...], idx i32 [...]) -> [..., table's trailing axes]:
 * the embedding generalised to a table of any rank >= 1 (rows of any
 * shape); the same kernels with a row of numel(table) / N elements. */
static pipit_status op_GATHER_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *t = IN(0), *idx = IN(1);
    if (t->ndim < 1) return shape_err("table must have rank >= 1 (rows along axis 0)");
    if (need_float(t, "table")) return PIPIT_STATUS_SHAPE;
    if (idx->dtype != PIPIT_I32) return shape_err("indices must be i32");
    if (idx->ndim + t->ndim - 1 > PIPIT_MAX_DIMS)
        return shape_err("output rank %d (indices' + table's - 1) exceeds %d", idx->ndim + t->ndim - 1,
                         PIPIT_MAX_DIMS);
    n->dtype = t->dtype;
    n->ndim = (uint8_t)(idx->ndim + t->ndim - 1);
    memcpy(n->shape, idx->shape, sizeof(int64_t) * idx->ndim);
    for (int i = 1; i < t->ndim; i++) n->shape[idx->ndim + i - 1] = t->shape[i];
    return PIPIT_STATUS_OK;
}
static void op_GATHER_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node t = g->nodes[g->nodes[id].in[0]];
    int32_t idx = g->nodes[id].in[1];
    int64_t iattr[4] = {0};
    for (int i = 0; i < t.ndim; i++) iattr[i] = t.shape[i];
    din[0] = add_node(g, PIPIT_OP_GATHER_DTABLE, 2, (int32_t[]){idx, dout}, (double[4]){t.ndim, 0}, iattr);
}

/* GATHER_DTABLE(idx, dout) -> the table's shape (iattr, rank fattr[0]):
 * scatter-add of dout's rows by index, in index order. */
static pipit_status op_GATHER_DTABLE_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *idx = IN(0), *d = IN(1);
    if (idx->dtype != PIPIT_I32) return shape_err("indices must be i32");
    if (need_float(d, "dout") || target_shape(n)) return PIPIT_STATUS_SHAPE;
    int ok = n->ndim >= 1 && d->ndim == idx->ndim + n->ndim - 1;
    for (int i = 0; ok && i < idx->ndim; i++) ok = d->shape[i] == idx->shape[i];
    for (int i = 1; ok && i < n->ndim; i++) ok = d->shape[idx->ndim + i - 1] == n->shape[i];
    if (!ok) return shape_err("dout must be the indices' shape + the table's trailing axes");
    n->dtype = d->dtype;
    return PIPIT_STATUS_OK;
}
#define op_GATHER_DTABLE_vjp NULL

/* ------------------------------------------------- add, sub, mul, div, scale */

/* NumPy broadcasting: shapes aligned at their last axis; each pair of
 * dimensions is equal or one of them is 1 (a missing axis counts as 1). */
static pipit_status op_ADD_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *a = IN(0), *b = IN(1);
    if (need_same_float(a, b)) return PIPIT_STATUS_SHAPE;
    int nd = PIPIT_MAX(a->ndim, b->ndim);
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return shape_err("shapes do not broadcast (%lld vs %lld at axis %d from the end)", (long long)da,
                             (long long)db, nd - i);
        n->shape[i] = da == 1 ? db : da;
    }
    n->dtype = a->dtype;
    n->ndim = (uint8_t)nd;
    return PIPIT_STATUS_OK;
}
#define op_SUB_shape op_ADD_shape
#define op_MUL_shape op_ADD_shape
#define op_DIV_shape op_ADD_shape

/* Two float inputs of one shape and dtype (the fused gradient ops). */
static pipit_status op_same2_shape(const pipit_graph *g, pipit__node *n) {
    if (need_same_float(IN(0), IN(1))) return PIPIT_STATUS_SHAPE;
    if (!same_shape(IN(0), IN(1))) return shape_err("shapes must be equal");
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}

/* The gradient of an input of shape `like` from d (the output's shape):
 * d summed over the axes `like` was broadcast along, times scale, by one
 * SUM_TO (a fixed order); without broadcasting d itself (or -d). */
static int32_t reduce_to(pipit_graph *g, int32_t d, int32_t like, double scale) {
    if (d < 0) return -1;
    pipit__node x = g->nodes[like]; /* a copy: adding nodes may move the array */
    if (same_shape(&x, &g->nodes[d])) {
        if (scale == 1) return d;
        if (scale == -1) return op1(g, PIPIT_OP_NEG, d);
        return add_node(g, PIPIT_OP_SCALE, 1, &d, (double[4]){scale, 0}, NULL);
    }
    return to_shape(g, PIPIT_OP_SUM_TO, d, &x, scale);
}

static void op_ADD_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int32_t a = n->in[0], b = n->in[1];
    din[0] = reduce_to(g, dout, a, 1);
    din[1] = reduce_to(g, dout, b, 1);
}
static void op_SUB_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int32_t a = n->in[0], b = n->in[1];
    din[0] = reduce_to(g, dout, a, 1);
    din[1] = reduce_to(g, dout, b, -1);
}
static void op_MUL_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int32_t a = n->in[0], b = n->in[1];
    din[0] = reduce_to(g, op2(g, PIPIT_OP_MUL, dout, b), a, 1);
    din[1] = reduce_to(g, op2(g, PIPIT_OP_MUL, dout, a), b, 1);
}
/* y = a / b: da = d / b, db = -(d / b) * y, each reduced to its input. */
static void op_DIV_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int32_t a = n->in[0], b = n->in[1];
    int32_t t = op2(g, PIPIT_OP_DIV, dout, b);
    din[0] = reduce_to(g, t, a, 1);
    din[1] = t < 0 ? -1 : reduce_to(g, op2(g, PIPIT_OP_MUL, t, id), b, -1);
}

/* Whether `small` broadcasts to `big` (each of its dimensions, trailing
 * aligned, equal to big's or 1); the message names the target shape. */
static pipit_status broadcasts_to(const pipit__node *small, const pipit__node *big, const pipit__node *target) {
    char sh[96];
    pipit__shape_str(sh, sizeof sh, target->ndim, target->shape);
    if (small->ndim > big->ndim)
        return shape_err("to %s: rank %d cannot broadcast to rank %d", sh, small->ndim, big->ndim);
    for (int i = 0; i < small->ndim; i++) {
        int64_t bd = big->shape[i + big->ndim - small->ndim];
        if (small->shape[i] != 1 && small->shape[i] != bd)
            return shape_err("to %s: dimension %lld does not broadcast to %lld (axis %d from the end; must be "
                             "equal, or 1 in the smaller)",
                             sh, (long long)small->shape[i], (long long)bd, small->ndim - i);
    }
    return PIPIT_STATUS_OK;
}

/* SUM_TO(x) -> shape iattr (rank fattr[0]), times fattr[1]: x summed over
 * the axes the target lacks or has as 1 (trailing axes aligned), in
 * ascending index order, in double. BROADCAST_TO(x) -> the same target
 * shape: x repeated along the axes where it has 1 or which it lacks. */
static pipit_status to_target_shape(const pipit_graph *g, pipit__node *n, int reduce) {
    const pipit__node *x = IN(0);
    if (need_float(x, "input") || target_shape(n) || broadcasts_to(reduce ? n : x, reduce ? x : n, n))
        return PIPIT_STATUS_SHAPE;
    n->dtype = x->dtype;
    return PIPIT_STATUS_OK;
}
static pipit_status op_SUM_TO_shape(const pipit_graph *g, pipit__node *n) { return to_target_shape(g, n, 1); }
static void op_SUM_TO_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node x = g->nodes[g->nodes[id].in[0]];
    double scale = g->nodes[id].fattr[1];
    int32_t b = to_shape(g, PIPIT_OP_BROADCAST_TO, dout, &x, 0);
    din[0] = scale == 1 || b < 0 ? b : add_node(g, PIPIT_OP_SCALE, 1, &b, (double[4]){scale, 0}, NULL);
}

static pipit_status op_BROADCAST_TO_shape(const pipit_graph *g, pipit__node *n) { return to_target_shape(g, n, 0); }
static void op_BROADCAST_TO_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    din[0] = reduce_to(g, dout, g->nodes[id].in[0], 1);
}

static pipit_status op_SCALE_shape(const pipit_graph *g, pipit__node *n) {
    if (need_float(IN(0), "input")) return PIPIT_STATUS_SHAPE;
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
static void op_SCALE_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    double f[4] = {g->nodes[id].fattr[0], 0};
    din[0] = add_node(g, PIPIT_OP_SCALE, 1, &dout, f, NULL);
}

/* CAST(x) -> float dtype iattr[0], same shape, rounded to nearest even.
 * Its gradient is dout cast back to x's dtype -- or dout itself when it
 * has that dtype already: the fp32 accumulated gradient of a bf16 copy
 * (autodiff's @gacc leaf) reaches an fp32 value without a round trip
 * through bf16. */
static pipit_status op_CAST_shape(const pipit_graph *g, pipit__node *n) {
    if (need_float(IN(0), "input")) return PIPIT_STATUS_SHAPE;
    int64_t dt = n->iattr[0];
    if (dt != PIPIT_F32 && dt != PIPIT_F64 && dt != PIPIT_BF16)
        return shape_err("target dtype %lld is not a float dtype (PIPIT_F32, PIPIT_F64 or PIPIT_BF16)", (long long)dt);
    n->dtype = (uint8_t)dt;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
static void op_CAST_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    din[0] = dout < 0 ? -1 : pipit__cast(g, dout, (pipit_dtype)g->nodes[g->nodes[id].in[0]].dtype);
}

/* ------------------------------------------------------------ elementwise */

/* y = f(x), same shape. The gradient is one op: a composition where that
 * costs one pass anyway (neg, exp, log), else a fused NAME_DX(x or y, d). */
#define op_NEG_shape op_SCALE_shape
static void op_NEG_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    (void)id;
    din[0] = op1(g, PIPIT_OP_NEG, dout);
}
#define op_EXP_shape op_SCALE_shape
static void op_EXP_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    din[0] = op2(g, PIPIT_OP_MUL, dout, id); /* d * exp(x) = d * y */
}
#define op_LOG_shape op_SCALE_shape
static void op_LOG_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    din[0] = op2(g, PIPIT_OP_DIV, dout, g->nodes[id].in[0]);
}
/* Fused gradients reading the input x ... */
static void dx_of_x(pipit_graph *g, int32_t id, int32_t dout, int32_t *din, pipit__opcode op) {
    din[0] = op2(g, op, g->nodes[id].in[0], dout);
}
/* ... or the output y (sqrt, rsqrt, sigmoid, tanh: cheaper from y). */
static void dx_of_y(pipit_graph *g, int32_t id, int32_t dout, int32_t *din, pipit__opcode op) {
    din[0] = op2(g, op, id, dout);
}
#define UNARY_FUSED(NAME, FROM)                                                         \
    static void op_##NAME##_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) { \
        FROM(g, id, dout, din, PIPIT_OP_##NAME##_DX);                                     \
    }
#define op_SQRT_shape op_SCALE_shape
UNARY_FUSED(SQRT, dx_of_y)       /* d / (2 y) */
#define op_RSQRT_shape op_SCALE_shape
UNARY_FUSED(RSQRT, dx_of_y)      /* -d y^3 / 2 */
#define op_ABS_shape op_SCALE_shape
UNARY_FUSED(ABS, dx_of_x)        /* d sign(x) */
#define op_RELU_shape op_SCALE_shape
UNARY_FUSED(RELU, dx_of_x)       /* d (x > 0) */
#define op_SILU_shape op_SCALE_shape
UNARY_FUSED(SILU, dx_of_x)       /* d s (1 + x (1 - s)), s = sigmoid(x) */
#define op_SIGMOID_shape op_SCALE_shape
UNARY_FUSED(SIGMOID, dx_of_y)    /* d y (1 - y) */
#define op_TANH_shape op_SCALE_shape
UNARY_FUSED(TANH, dx_of_y)       /* d (1 - y^2) */
#undef UNARY_FUSED
#define op_SQRT_DX_shape op_same2_shape
#define op_RSQRT_DX_shape op_same2_shape
#define op_ABS_DX_shape op_same2_shape
#define op_RELU_DX_shape op_same2_shape
#define op_SILU_DX_shape op_same2_shape
#define op_SIGMOID_DX_shape op_same2_shape
#define op_TANH_DX_shape op_same2_shape
#define op_SQRT_DX_vjp NULL
#define op_RSQRT_DX_vjp NULL
#define op_ABS_DX_vjp NULL
#define op_RELU_DX_vjp NULL
#define op_SILU_DX_vjp NULL
#define op_SIGMOID_DX_vjp NULL
#define op_TANH_DX_vjp NULL

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

/* x [...,C] and k 1-D weights of C (layernorm: w, b; rmsnorm: w), eps > 0. */
static pipit_status norm_shape(const pipit_graph *g, pipit__node *n, int k) {
    const pipit__node *x = IN(0);
    int64_t C = pipit__node_last_dim(x);
    for (int i = 1; i <= k; i++) {
        if (need_same_float(x, IN(i))) return PIPIT_STATUS_SHAPE;
        if (x->ndim < 1 || IN(i)->ndim != 1 || IN(i)->shape[0] != C)
            return shape_err("%s must be 1-D of x's last axis", k == 2 ? "weight and bias" : "weight");
    }
    if (!(n->fattr[0] > 0)) return shape_err("eps must be > 0");
    n->dtype = x->dtype;
    copy_shape(n, x);
    return PIPIT_STATUS_OK;
}
/* dx = DX(x, w, dout) and dw = DW(x, dout): separate ops, so B and W split. */
static void norm_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din, pipit__opcode dx, pipit__opcode dw) {
    const pipit__node *n = &g->nodes[id];
    double f[4] = {n->fattr[0], 0};
    int32_t x = n->in[0], w = n->in[1];
    din[0] = add_node(g, dx, 3, (int32_t[]){x, w, dout}, f, NULL);
    din[1] = add_node(g, dw, 2, (int32_t[]){x, dout}, f, NULL);
}

static pipit_status op_LAYERNORM_shape(const pipit_graph *g, pipit__node *n) { return norm_shape(g, n, 2); }
static void op_LAYERNORM_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    norm_vjp(g, id, dout, din, PIPIT_OP_LN_DX, PIPIT_OP_LN_DW);
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

/* --------------------------------------------------------------- rmsnorm */

/* RMSNORM(x [...,C], w [C]), eps fattr[0]: y = w * (x * rsqrt(mean(x^2) + eps)),
 * as Hugging Face's LlamaRMSNorm. */
static pipit_status op_RMSNORM_shape(const pipit_graph *g, pipit__node *n) { return norm_shape(g, n, 1); }
static void op_RMSNORM_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    norm_vjp(g, id, dout, din, PIPIT_OP_RMS_DX, PIPIT_OP_RMS_DW);
}
#define op_RMS_DX_shape op_LN_DX_shape
#define op_RMS_DX_vjp NULL
#define op_RMS_DW_shape op_LN_DW_shape
#define op_RMS_DW_vjp NULL

/* ------------------------------------------------------------------ rope */

/* ROPE(x) rotates each head's halves (Hugging Face's rotate_half):
 * x [B,T,H*D] with H = iattr[0], or [B,T,H,D]; positions iattr[1] + t;
 * theta fattr[0]; iattr[2] = 1 rotates back (the gradient). fattr[1] > 0
 * scales the frequencies as rope_type "llama3" (pipit_rope_scaled): factor
 * fattr[1], low_freq_factor fattr[2], high_freq_factor fattr[3],
 * original_max_position_embeddings iattr[3]; all four 0 without scaling.
 * The backends form the frequencies with src/backend/rope_freq.h. */
static pipit_status rope_scaling_check(const pipit__node *n) {
    double factor = n->fattr[1], lo = n->fattr[2], hi = n->fattr[3];
    int64_t orig = n->iattr[3];
    if (factor == 0 && lo == 0 && hi == 0 && orig == 0) return PIPIT_STATUS_OK; /* plain RoPE */
    if (!(factor > 0) || !isfinite(factor))
        return shape_err("llama3 scaling: factor %g must be finite and > 0 (0 with the other three 0: no scaling)",
                         factor);
    if (!(lo > 0) || !(hi > lo) || !isfinite(hi))
        return shape_err("llama3 scaling: low_freq_factor %g and high_freq_factor %g must be finite with "
                         "0 < low_freq_factor < high_freq_factor",
                         lo, hi);
    if (orig < 1 || orig > INT32_MAX)
        return shape_err("llama3 scaling: original_max_position_embeddings %lld not in 1..2^31-1", (long long)orig);
    return PIPIT_STATUS_OK;
}
static pipit_status op_ROPE_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0);
    if (need_float(x, "input")) return PIPIT_STATUS_SHAPE;
    if (x->ndim != 3 && x->ndim != 4) return shape_err("x must be [B,T,heads*D] or [B,T,heads,D]");
    int64_t H = n->iattr[0], C = x->ndim == 3 ? x->shape[2] : x->shape[2] * x->shape[3];
    if (x->ndim == 4 && H != x->shape[2])
        return shape_err("heads (%lld) must equal x's axis 2 (%lld)", (long long)H, (long long)x->shape[2]);
    if (H <= 0 || C % H != 0) return shape_err("heads (%lld) must divide %lld", (long long)H, (long long)C);
    if ((C / H) % 2 != 0) return shape_err("head size %lld is odd (rope rotates pairs of halves)", (long long)(C / H));
    if (!(n->fattr[0] > 0) || !isfinite(n->fattr[0])) return shape_err("theta must be finite and > 0");
    if (n->iattr[1] < 0 || n->iattr[1] > ((int64_t)1 << 24))
        return shape_err("position offset %lld not in 0..2^24", (long long)n->iattr[1]);
    if (rope_scaling_check(n)) return PIPIT_STATUS_SHAPE;
    n->dtype = x->dtype;
    copy_shape(n, x);
    return PIPIT_STATUS_OK;
}
/* The gradient of a rotation is the inverse rotation (same frequencies).
 * The attributes are copied first: adding a node may move g->nodes. */
static void op_ROPE_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id];
    n.iattr[2] = !n.iattr[2];
    din[0] = add_node(g, PIPIT_OP_ROPE, 1, &dout, n.fattr, n.iattr);
}

/* ------------------------------------------------------------------ gelu */

#define op_GELU_shape op_SCALE_shape
static void op_GELU_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    din[0] = op2(g, PIPIT_OP_GELU_DX, g->nodes[id].in[0], dout);
}
#define op_GELU_DX_shape op_same2_shape
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

/* ATTENTION_QKV(q [B,T,Hq*D], k [B,S,Hkv*D], v [B,S,Hkv*D]) -> [B,T,Hq*D]:
 * Hq = iattr[0], Hkv = iattr[1] (grouped-query: q head h reads kv head
 * h / (Hq/Hkv)), causal iattr[2] (needs S == T), scale fattr[0]. */
static pipit_status op_ATTENTION_QKV_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *q = IN(0), *k = IN(1), *v = IN(2);
    if (need_same_float(q, k) || need_same_float(q, v)) return PIPIT_STATUS_SHAPE;
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3) return shape_err("q, k and v must be 3-D [B,T,heads*D]");
    int64_t Hq = n->iattr[0], Hkv = n->iattr[1];
    if (Hq <= 0 || q->shape[2] % Hq != 0)
        return shape_err("heads (%lld) must divide q's last axis (%lld)", (long long)Hq, (long long)q->shape[2]);
    if (Hkv <= 0 || Hq % Hkv != 0)
        return shape_err("kv_heads (%lld) must divide heads (%lld)", (long long)Hkv, (long long)Hq);
    int64_t D = q->shape[2] / Hq;
    if (!same_shape(k, v)) return shape_err("k and v must have one shape");
    if (k->shape[0] != q->shape[0] || k->shape[2] != Hkv * D)
        return shape_err("k and v must be [%lld,S,%lld] (batch of q, kv_heads x head size %lld)",
                         (long long)q->shape[0], (long long)(Hkv * D), (long long)D);
    if (n->iattr[2] && k->shape[1] != q->shape[1])
        return shape_err("causal attention needs as many keys as queries (S %lld, T %lld)",
                         (long long)k->shape[1], (long long)q->shape[1]);
    if (!(n->fattr[0] > 0) || !isfinite(n->fattr[0])) return shape_err("scale must be finite and > 0");
    n->dtype = q->dtype;
    copy_shape(n, q);
    return PIPIT_STATUS_OK;
}
/* One backward op computes dq, dk and dv into one flat buffer
 * [dq | dk | dv]; each input's gradient is a view of its part. */
static void op_ATTENTION_QKV_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id], q = g->nodes[n.in[0]], k = g->nodes[n.in[1]];
    int32_t d = add_node(g, PIPIT_OP_ATTN_QKV_D, 4, (int32_t[]){n.in[0], n.in[1], n.in[2], dout}, n.fattr, n.iattr);
    if (d < 0) return;
    int64_t nq = pipit__node_numel(&q), nk = pipit__node_numel(&k);
    din[0] = to_shape(g, PIPIT_OP_VIEW, d, &q, 0);
    din[1] = to_shape(g, PIPIT_OP_VIEW, d, &k, (double)nq);
    din[2] = to_shape(g, PIPIT_OP_VIEW, d, &k, (double)(nq + nk));
}
static pipit_status op_ATTN_QKV_D_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *q = IN(0), *k = IN(1), *d = IN(3);
    if (need_same_float(q, d) || !same_shape(q, d)) return shape_err("q and dout must match");
    n->dtype = q->dtype;
    n->ndim = 1;
    n->shape[0] = pipit__node_numel(q) + 2 * pipit__node_numel(k);
    return PIPIT_STATUS_OK;
}
#define op_ATTN_QKV_D_vjp NULL

/* ATTENTION_DOC(qkv [B,T,(Hq+2Hkv)*D], doc i32 [B,T]) -> [B,T,Hq*D]: packed
 * documents. Each row of qkv is q (Hq heads) | k (Hkv heads) | v (Hkv
 * heads), as GPT-2's packed qkv (Hq = Hkv) or Llama's concat(q, k, v);
 * Hq = iattr[0], Hkv = iattr[1], causal iattr[2], scale fattr[0]. doc[b,t]
 * is token t's document: a query sees only the keys of its own run of
 * equal ids (its document; the ids are non-decreasing along t, which
 * pipit_step checks on every fed input that reaches this op), so no
 * token attends across a boundary. */
static pipit_status op_ATTENTION_DOC_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0), *doc = IN(1);
    if (need_float(x, "qkv") || x->ndim != 3) return shape_err("qkv must be float [B,T,(heads+2*kv_heads)*D]");
    int64_t Hq = n->iattr[0], Hkv = n->iattr[1];
    if (Hq <= 0 || Hkv <= 0 || Hq % Hkv != 0)
        return shape_err("kv_heads (%lld) must divide heads (%lld), both > 0", (long long)Hkv, (long long)Hq);
    if (x->shape[2] % (Hq + 2 * Hkv) != 0)
        return shape_err("heads + 2*kv_heads (%lld) must divide qkv's last axis (%lld)", (long long)(Hq + 2 * Hkv),
                         (long long)x->shape[2]);
    if (doc->dtype != PIPIT_I32 || doc->ndim != 2 || doc->shape[0] != x->shape[0] || doc->shape[1] != x->shape[1])
        return shape_err("document ids must be i32 [%lld,%lld] (qkv's batch and sequence)", (long long)x->shape[0],
                         (long long)x->shape[1]);
    if (!(n->fattr[0] > 0) || !isfinite(n->fattr[0])) return shape_err("scale must be finite and > 0");
    n->dtype = x->dtype;
    copy_shape(n, x);
    n->shape[2] = x->shape[2] / (Hq + 2 * Hkv) * Hq;
    return PIPIT_STATUS_OK;
}
static void op_ATTENTION_DOC_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id];
    din[0] = add_node(g, PIPIT_OP_ATTN_DOC_D, 3, (int32_t[]){n.in[0], dout, n.in[1]}, n.fattr, n.iattr);
}
/* ATTN_DOC_D(qkv, dout, doc) -> dqkv in qkv's layout. */
static pipit_status op_ATTN_DOC_D_shape(const pipit_graph *g, pipit__node *n) {
    if (need_same_float(IN(0), IN(1)) || IN(0)->ndim != 3) return shape_err("bad qkv/dout");
    if (IN(2)->dtype != PIPIT_I32) return shape_err("document ids must be i32");
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
#define op_ATTN_DOC_D_vjp NULL

/* --------------------------------------------------- softmax, log-softmax */

/* Along the last axis, max-shifted (stable); gradients from y and dout. */
static pipit_status op_SOFTMAX_shape(const pipit_graph *g, pipit__node *n) {
    if (need_float(IN(0), "input")) return PIPIT_STATUS_SHAPE;
    if (IN(0)->ndim < 1) return shape_err("input must have rank >= 1 (softmax runs along the last axis)");
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
static void op_SOFTMAX_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    dx_of_y(g, id, dout, din, PIPIT_OP_SOFTMAX_DX); /* y (d - sum(d y)) */
}
#define op_LOG_SOFTMAX_shape op_SOFTMAX_shape
static void op_LOG_SOFTMAX_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    dx_of_y(g, id, dout, din, PIPIT_OP_LOG_SOFTMAX_DX); /* d - exp(y) sum(d) */
}
#define op_SOFTMAX_DX_shape op_same2_shape
#define op_SOFTMAX_DX_vjp NULL
#define op_LOG_SOFTMAX_DX_shape op_same2_shape
#define op_LOG_SOFTMAX_DX_vjp NULL

/* ------------------------------------------------- tensor parallelism */

/* The stage's T ranks meet in these (docs/architecture.md, "The local
 * mesh"). TP_COPY: identity forward (an alias: no copy), all-reduce of the
 * gradient backward. TP_SUM: all-reduce forward (the runtime sums the T
 * ranks' values in rank order), identity backward. They are each other's
 * VJP. TP_MAX: element-wise max over the T ranks, no gradient (the shift
 * of the vocab-parallel cross-entropy). The collectives run no kernel:
 * lowering turns them into INS_TP instructions (OPF_COLL). */
#define op_TP_COPY_shape op_SCALE_shape
static void op_TP_COPY_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    (void)id;
    din[0] = op1(g, PIPIT_OP_TP_SUM, dout);
}
#define op_TP_SUM_shape op_SCALE_shape
static void op_TP_SUM_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    (void)g, (void)id;
    din[0] = dout;
}
#define op_TP_MAX_shape op_SCALE_shape
#define op_TP_MAX_vjp NULL

/* Sequence parallelism (ir/sp.c), along axis iattr[0] over the T ranks:
 * SP_GATHER all-gathers (the axis T times longer, rank t's value as block
 * t), SP_SCATTER reduce-scatters (the axis T times shorter: rank t gets
 * the rank-order sum of every rank's block t, the all-reduce's bits for
 * those elements), SP_SPLIT keeps rank t's block t of a value every rank
 * holds. GATHER and SCATTER are each other's VJP; SPLIT's is GATHER. */
static pipit_status axis_attr(const pipit__node *x, const pipit__node *n);
static pipit_status sp_shape(const pipit_graph *g, pipit__node *n, int grow, int summed) {
    const pipit__node *x = IN(0);
    int T = pipit__graph_tp(g);
    if ((summed && need_float(x, "input")) || axis_attr(x, n)) return PIPIT_STATUS_SHAPE;
    int a = (int)n->iattr[0];
    int64_t len = x->shape[a], m = 0;
    if (!grow && len % T)
        return shape_err("axis %d of %lld elements does not split over %d tensor-parallel ranks", a, (long long)len, T);
    if (grow && !pipit__mul_le(len, T, PIPIT__MAX_NUMEL, &m))
        return shape_err("axis %d of %lld elements times %d ranks is too large", a, (long long)len, T);
    n->dtype = x->dtype;
    copy_shape(n, x);
    n->shape[a] = grow ? m : len / T;
    return PIPIT_STATUS_OK;
}
static pipit_status op_SP_GATHER_shape(const pipit_graph *g, pipit__node *n) { return sp_shape(g, n, 1, 0); }
static pipit_status op_SP_SCATTER_shape(const pipit_graph *g, pipit__node *n) { return sp_shape(g, n, 0, 1); }
static pipit_status op_SP_SPLIT_shape(const pipit_graph *g, pipit__node *n) { return sp_shape(g, n, 0, 0); }
static void sp_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din, pipit__opcode op) {
    int64_t iattr[4] = {g->nodes[id].iattr[0], 0, 0, 0};
    din[0] = add_node(g, op, 1, &dout, NULL, iattr);
}
static void op_SP_GATHER_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    sp_vjp(g, id, dout, din, PIPIT_OP_SP_SCATTER);
}
static void op_SP_SCATTER_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    sp_vjp(g, id, dout, din, PIPIT_OP_SP_GATHER);
}
static void op_SP_SPLIT_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    sp_vjp(g, id, dout, din, PIPIT_OP_SP_GATHER);
}

/* TP_PICK(z [...,V], y i32 [...]) -> [...]: z[..., y - t V] where rank t
 * holds classes [t V, (t+1) V) of the vocabulary, 0 where y is another
 * rank's (the target logit of the vocab-parallel cross-entropy, summed
 * over the ranks by TP_SUM). TP_PICK_DX(y, d) -> [..., V = iattr[0]]: d at
 * the picked class, 0 elsewhere. */
static pipit_status op_TP_PICK_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *z = IN(0), *y = IN(1);
    if (need_float(z, "logits")) return PIPIT_STATUS_SHAPE;
    if (y->dtype != PIPIT_I32) return shape_err("targets must be i32");
    int ok = z->ndim == y->ndim + 1;
    for (int i = 0; ok && i < y->ndim; i++) ok = z->shape[i] == y->shape[i];
    if (!ok) return shape_err("targets must be logits' shape without the last axis");
    n->dtype = z->dtype;
    copy_shape(n, y);
    return PIPIT_STATUS_OK;
}
static void op_TP_PICK_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    int64_t iattr[4] = {pipit__node_last_dim(IN(0)), 0, 0, 0};
    din[0] = add_node(g, PIPIT_OP_TP_PICK_DX, 2, (int32_t[]){n->in[1], dout}, NULL, iattr);
}
static pipit_status op_TP_PICK_DX_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *y = IN(0), *d = IN(1);
    if (y->dtype != PIPIT_I32) return shape_err("targets must be i32");
    if (need_float(d, "dout") || !same_shape(y, d)) return shape_err("dout must be float of the targets' shape");
    if (y->ndim + 1 > PIPIT_MAX_DIMS || n->iattr[0] < 1) return shape_err("bad class count %lld", (long long)n->iattr[0]);
    n->dtype = d->dtype;
    copy_shape(n, y);
    n->ndim = (uint8_t)(y->ndim + 1);
    n->shape[y->ndim] = n->iattr[0];
    return PIPIT_STATUS_OK;
}
#define op_TP_PICK_DX_vjp NULL

/* --------------------------------------------------------- cross-entropy */

static pipit_status op_XENT_ROWS_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0), *t = IN(1);
    if (need_float(x, "logits")) return PIPIT_STATUS_SHAPE;
    if (t->dtype != PIPIT_I32) return shape_err("targets must be i32");
    if (x->ndim != t->ndim + 1) return shape_err("targets must be logits' shape without the last axis");
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != x->shape[i]) return shape_err("targets must be logits' shape without the last axis");
    n->dtype = (uint8_t)pipit__acc_dtype((pipit_dtype)x->dtype); /* bf16 logits: fp32 losses */
    copy_shape(n, t);
    return PIPIT_STATUS_OK;
}
static void op_XENT_ROWS_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    const pipit__node *n = &g->nodes[id];
    din[0] = add_node(g, PIPIT_OP_XENT_DLOGITS, 3, (int32_t[]){n->in[0], n->in[1], dout}, NULL, NULL);
}
/* XENT_DLOGITS(logits, targets, dloss): dloss has the losses' dtype (fp32
 * for bf16 logits), the result the logits'. */
static pipit_status op_XENT_DLOGITS_shape(const pipit_graph *g, pipit__node *n) {
    if (need_float(IN(0), "logits")) return PIPIT_STATUS_SHAPE;
    if (IN(2)->dtype != pipit__acc_dtype((pipit_dtype)IN(0)->dtype))
        return shape_err("dloss must be %s for %s logits",
                         pipit__dtype_name(pipit__acc_dtype((pipit_dtype)IN(0)->dtype)),
                         pipit__dtype_name((pipit_dtype)IN(0)->dtype));
    n->dtype = IN(0)->dtype;
    copy_shape(n, IN(0));
    return PIPIT_STATUS_OK;
}
#define op_XENT_DLOGITS_vjp NULL

/* ------------------------------------- fused LM head + cross-entropy */

/* HEAD_XENT(h [...,d], W [V,d], targets i32 [...]) -> [3, ...] in the
 * losses' dtype (fp32 for bf16): row 0 the log-sum-exp over the V classes
 * of the logits h W^T, row 1 the target logit. iattr[0] = 1: vocab
 * parallel (W is this rank's shard of rows, classes [shard V, shard V +
 * V); a target of another shard picks 0). The kernels never store the
 * logits: they walk the vocabulary in chunks (ir/head_xent.h). */
static pipit_status op_HEAD_XENT_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *h = IN(0), *w = IN(1), *t = IN(2);
    if (need_float(h, "h")) return PIPIT_STATUS_SHAPE;
    if (w->dtype != h->dtype)
        return shape_err("h and W must share one float dtype (h is %s, W %s)", pipit__dtype_name((pipit_dtype)h->dtype),
                         pipit__dtype_name((pipit_dtype)w->dtype));
    if (w->ndim != 2) return shape_err("W must be 2-D [V, d] (the tied embedding's layout), not rank %d", w->ndim);
    if (h->ndim < 1 || h->shape[h->ndim - 1] != w->shape[1])
        return shape_err("h's last axis (%lld) must be W's d = shape[1] (%lld)",
                         (long long)(h->ndim ? h->shape[h->ndim - 1] : 0), (long long)w->shape[1]);
    if (t->dtype != PIPIT_I32) return shape_err("targets must be i32");
    int ok = h->ndim == t->ndim + 1;
    for (int i = 0; ok && i < t->ndim; i++) ok = t->shape[i] == h->shape[i];
    if (!ok) return shape_err("targets must be h's shape without the last axis");
    if (n->iattr[0] != 0 && n->iattr[0] != 1) return shape_err("vocab-parallel flag %lld not 0 or 1", (long long)n->iattr[0]);
    n->dtype = (uint8_t)pipit__acc_dtype((pipit_dtype)h->dtype);
    n->ndim = (uint8_t)(t->ndim + 1);
    n->shape[0] = 3;
    for (int i = 0; i < t->ndim; i++) n->shape[i + 1] = t->shape[i];
    return PIPIT_STATUS_OK;
}
/* Elements of h's dtype the backward's G partial input gradients take
 * (each [N, d] in the arithmetic type: two bf16 slots per fp32 value). */
static int hx_partial_elems(const pipit__node *h, int64_t G, int64_t *out) {
    int64_t per = (int64_t)(pipit__dtype_size(pipit__acc_dtype((pipit_dtype)h->dtype)) / pipit__dtype_size((pipit_dtype)h->dtype));
    return pipit__mul_le(pipit__node_numel(h), G * per, PIPIT__MAX_NUMEL, out);
}
/* One backward op recomputes the logits chunk by chunk (once) and writes
 * [G partial dh | dW]; dh is the sum of the partials (HEAD_XENT_DH), dW a
 * view. It reads the forward's rows and their gradients as one [6, ...]. */
static void op_HEAD_XENT_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id], h = g->nodes[n.in[0]], w = g->nodes[n.in[1]];
    if (dout < 0) return;
    int32_t sd = add_node(g, PIPIT_OP_CONCAT, 2, (int32_t[]){id, dout}, NULL, NULL);
    int64_t G = pipit__hx_groups(pipit__node_numel(&h) / w.shape[1], w.shape[0]), part;
    if (sd < 0 || !hx_partial_elems(&h, G, &part)) return;
    int32_t b = add_node(g, PIPIT_OP_HEAD_XENT_BWD, 4, (int32_t[]){n.in[0], n.in[1], n.in[2], sd}, NULL,
                         (int64_t[4]){n.iattr[0], G, 0, 0});
    if (b < 0) return;
    din[0] = add_node(g, PIPIT_OP_HEAD_XENT_DH, 2, (int32_t[]){b, n.in[0]}, NULL, (int64_t[4]){G, 0, 0, 0});
    din[1] = to_shape(g, PIPIT_OP_VIEW, b, &w, (double)part);
}
/* HEAD_XENT_BWD(h, W, targets, sd [6, ...]) -> flat, h's dtype: G =
 * iattr[1] partial input gradients [N, d] in the arithmetic type, then
 * dW [V, d]. */
static pipit_status op_HEAD_XENT_BWD_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *h = IN(0), *w = IN(1), *t = IN(2), *sd = IN(3);
    if (need_float(h, "h") || w->dtype != h->dtype || w->ndim != 2 || t->dtype != PIPIT_I32)
        return shape_err("bad h, W or targets");
    int64_t N = pipit__node_numel(t), G = n->iattr[1], part, all;
    if (sd->dtype != pipit__acc_dtype((pipit_dtype)h->dtype) || pipit__node_numel(sd) != 6 * N)
        return shape_err("the statistics must be [6, %lld] of the losses' dtype", (long long)N);
    if (G != pipit__hx_groups(N, w->shape[0])) return shape_err("group count %lld is not the chunking's", (long long)G);
    if (!hx_partial_elems(h, G, &part) || !pipit__add_i64(part, pipit__node_numel(w), &all) || all > PIPIT__MAX_NUMEL)
        return shape_err("the backward's partial gradients exceed 2^48 elements");
    n->dtype = h->dtype;
    n->ndim = 1;
    n->shape[0] = all;
    return PIPIT_STATUS_OK;
}
#define op_HEAD_XENT_BWD_vjp NULL
/* HEAD_XENT_DH(bwd, h) -> h's shape: the sum of the iattr[0] partials in
 * group order, rounded once to h's dtype. */
static pipit_status op_HEAD_XENT_DH_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *b = IN(0), *h = IN(1);
    int64_t part;
    if (b->op != PIPIT_OP_HEAD_XENT_BWD || b->dtype != h->dtype || !hx_partial_elems(h, n->iattr[0], &part) ||
        part > pipit__node_numel(b))
        return shape_err("input must be a head_xent_bwd of h");
    n->dtype = h->dtype;
    copy_shape(n, h);
    return PIPIT_STATUS_OK;
}
#define op_HEAD_XENT_DH_vjp NULL

/* ------------------------------------------------------- sum, mean, fill */

/* SUM(x) -> scalar, times fattr[0] (1 for sum, 1/numel for mean); the
 * sum of bf16 values is fp32 (a loss is never rounded to bf16). */
static pipit_status op_SUM_shape(const pipit_graph *g, pipit__node *n) {
    if (need_float(IN(0), "input")) return PIPIT_STATUS_SHAPE;
    n->dtype = (uint8_t)pipit__acc_dtype((pipit_dtype)IN(0)->dtype);
    n->ndim = 0;
    return PIPIT_STATUS_OK;
}
/* The gradient fills in the sum's dtype, then rounds once to x's. */
static void op_SUM_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node x = g->nodes[g->nodes[id].in[0]];
    int32_t f = pipit__fill(g, dout, x.ndim, x.shape, g->nodes[id].fattr[0]);
    din[0] = f < 0 ? -1 : pipit__cast(g, f, (pipit_dtype)x.dtype);
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
    double f[4] = {g->nodes[id].fattr[0], 0};
    din[0] = add_node(g, PIPIT_OP_SUM, 1, &dout, f, NULL);
}

/* MAX(x) along axis iattr[0], keeping it as 1; the gradient goes to the
 * first maximal element of each reduced run (MAX_DX recomputes which). */
static pipit_status axis_attr(const pipit__node *x, const pipit__node *n) {
    if (x->ndim < 1 || n->iattr[0] < 0 || n->iattr[0] >= x->ndim)
        return shape_err("axis %lld out of range for rank %d", (long long)n->iattr[0], x->ndim);
    return PIPIT_STATUS_OK;
}
static pipit_status op_MAX_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0);
    if (need_float(x, "input") || axis_attr(x, n)) return PIPIT_STATUS_SHAPE;
    n->dtype = x->dtype;
    copy_shape(n, x);
    n->shape[n->iattr[0]] = 1;
    return PIPIT_STATUS_OK;
}
static void op_MAX_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id]; /* a copy: adding the node may move g->nodes */
    din[0] = add_node(g, PIPIT_OP_MAX_DX, 2, (int32_t[]){n.in[0], dout}, NULL, n.iattr);
}
static pipit_status op_MAX_DX_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0), *d = IN(1);
    if (need_same_float(x, d) || axis_attr(x, n)) return PIPIT_STATUS_SHAPE;
    int ok = d->ndim == x->ndim;
    for (int i = 0; ok && i < x->ndim; i++) ok = d->shape[i] == (i == n->iattr[0] ? 1 : x->shape[i]);
    if (!ok) return shape_err("dout must be x's shape with the axis as 1");
    n->dtype = x->dtype;
    copy_shape(n, x);
    return PIPIT_STATUS_OK;
}
#define op_MAX_DX_vjp NULL

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

/* ------------------------------------------------- slice, concat, view */

/* SLICE(x): x[start : start+len] along axis (iattr axis, start, len), a
 * copy (of any dtype: its kernels move elements of 4 or 8 bytes);
 * SLICE_DX(d) puts d back at start of an axis of iattr[2] elements, zeros
 * elsewhere (the gradient of a slice; its own is the slice). */
static pipit_status range_shape(pipit__node *n, const pipit__node *x, int64_t len, int64_t full, int64_t out) {
    int64_t ax = n->iattr[0], st = n->iattr[1];
    if (st < 0 || len < 1 || len > full || st > full - len)
        return shape_err("range [%lld, %lld+%lld) is not inside axis %lld of %lld elements", (long long)st,
                         (long long)st, (long long)len, (long long)ax, (long long)full);
    n->dtype = x->dtype;
    copy_shape(n, x);
    n->shape[ax] = out;
    return PIPIT_STATUS_OK;
}
static pipit_status op_SLICE_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0); /* any dtype: i32 too (token ids), a byte copy */
    if (axis_attr(x, n)) return PIPIT_STATUS_SHAPE;
    return range_shape(n, x, n->iattr[2], x->shape[n->iattr[0]], n->iattr[2]);
}
static pipit_status op_SLICE_DX_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *d = IN(0);
    if (need_float(d, "input") || axis_attr(d, n)) return PIPIT_STATUS_SHAPE;
    return range_shape(n, d, d->shape[n->iattr[0]], n->iattr[2], n->iattr[2]);
}
/* Each is the other's gradient, with the same range. */
static void slice_pair_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din, pipit__opcode op) {
    const pipit__node *n = &g->nodes[id];
    int64_t iattr[4] = {n->iattr[0], n->iattr[1], g->nodes[n->in[0]].shape[n->iattr[0]], 0};
    din[0] = add_node(g, op, 1, &dout, NULL, iattr);
}
static void op_SLICE_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    slice_pair_vjp(g, id, dout, din, PIPIT_OP_SLICE_DX);
}
static void op_SLICE_DX_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    slice_pair_vjp(g, id, dout, din, PIPIT_OP_SLICE);
}

/* CONCAT(x0, ..., x_{nin-1}) along axis iattr[0]: equal shapes but there. */
static pipit_status op_CONCAT_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0); /* any dtype, as slice */
    if (axis_attr(x, n)) return PIPIT_STATUS_SHAPE;
    int ax = (int)n->iattr[0];
    copy_shape(n, x);
    for (int k = 1; k < n->nin; k++) {
        const pipit__node *y = IN(k);
        if (y->dtype != x->dtype) return shape_err("inputs must share one dtype");
        int ok = y->ndim == x->ndim;
        for (int i = 0; ok && i < x->ndim; i++) ok = i == ax || y->shape[i] == x->shape[i];
        if (!ok) return shape_err("input %d differs from input 0 off axis %d", k, ax);
        n->shape[ax] += y->shape[ax]; /* each <= 2^48: no overflow for 4 inputs */
    }
    n->dtype = x->dtype;
    return PIPIT_STATUS_OK;
}
static void op_CONCAT_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id];
    int ax = (int)n.iattr[0];
    int64_t at = 0;
    for (int k = 0; k < n.nin; k++) {
        int64_t len = g->nodes[n.in[k]].shape[ax];
        din[k] = dout < 0 ? -1 : pipit__slice(g, dout, ax, at, len);
        at += len;
    }
}

/* VIEW(x): an alias of x's elements [fattr[1], fattr[1] + numel) with its
 * own shape (iattr, rank fattr[0]); no kernel, no copy. Its gradient puts
 * d back at that range of a zero tensor of x's shape. */
static pipit_status op_VIEW_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0);
    if (target_shape(n)) return PIPIT_STATUS_SHAPE;
    int64_t cnt;
    double f = n->fattr[1];
    if (!pipit__shape_numel(n->ndim, n->shape, &cnt)) return shape_err("view has more than 2^48 elements");
    if (!(f >= 0 && f <= (double)PIPIT__MAX_NUMEL) || f != floor(f) || (int64_t)f > pipit__node_numel(x) - cnt)
        return shape_err("elements [%g, %g+%lld) are not inside the input's %lld", n->fattr[1], n->fattr[1],
                         (long long)cnt, (long long)pipit__node_numel(x));
    n->dtype = x->dtype;
    return PIPIT_STATUS_OK;
}
static void op_VIEW_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id], x = g->nodes[n.in[0]];
    int64_t cnt = pipit__node_numel(&n), all = pipit__node_numel(&x);
    int32_t flat = reshape_to(g, dout, 1, &cnt);
    int64_t at[4] = {0, (int64_t)n.fattr[1], all, 0}; /* axis 0 of the flat input */
    int32_t pad = flat < 0 ? -1 : add_node(g, PIPIT_OP_SLICE_DX, 1, &flat, NULL, at);
    din[0] = pad < 0 ? -1 : reshape_to(g, pad, x.ndim, x.shape);
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
