/*
 * cp.c — context parallelism in the graph (ir/cp.h, pipit_cp.h): the
 * graph's C, the builders, and the shape and gradient rules of CP_GATHER,
 * CP_SCATTER, ROPE_CP, ATTENTION_CP and ATTN_CP_D. The feeding helper
 * pipit_cp_slice lives here too (it is the layout's other half).
 */
#include "ir/cp.h"

#include <math.h>
#include <string.h>

#include "pipit_cp.h"
#include "util/checked.h"

#define IN(i) (&g->nodes[n->in[i]])
#define bad(...) pipit__err(PIPIT_STATUS_SHAPE, __VA_ARGS__)
#define CP_MAX_RANKS 64 /* the transport's group limit (runtime/transport.h) */

static int bad_handle(const pipit_graph *g, const char *fn) {
    if (g && g->magic == PIPIT_GRAPH_MAGIC) return 0;
    pipit__err(PIPIT_STATUS_MISUSE, "%s: %s", fn, g ? "invalid graph handle (freed, or not a pipit_graph)" : "graph is NULL");
    return 1;
}

static int is_cp_op(int op) {
    return op == PIPIT_OP_CP_GATHER || op == PIPIT_OP_CP_SCATTER || op == PIPIT_OP_ROPE_CP ||
           op == PIPIT_OP_ATTENTION_CP || op == PIPIT_OP_ATTN_CP_D;
}

pipit_status pipit_graph_set_context_parallel(pipit_graph *g, int C) {
    if (bad_handle(g, __func__)) return PIPIT_STATUS_MISUSE;
    if (C < 1 || C > CP_MAX_RANKS)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: C = %d context-parallel ranks (1 to %d)", __func__, C,
                          CP_MAX_RANKS);
    if (C != pipit__graph_cp(g))
        for (int32_t i = 0; i < g->n; i++)
            if (is_cp_op(g->nodes[i].op))
                return pipit__err(PIPIT_STATUS_INVALID,
                                  "%s: the graph already holds context-parallel ops for C = %d; set C = %d before "
                                  "the first of them",
                                  __func__, pipit__graph_cp(g), C);
    g->cp = C;
    return PIPIT_STATUS_OK;
}

int pipit_graph_context_parallel(const pipit_graph *g) { return bad_handle(g, __func__) ? 0 : pipit__graph_cp(g); }

/* ------------------------------------------------------------- builders */

pipit_val pipit_cp_gather(pipit_graph *g, pipit_val x) {
    if (bad_handle(g, __func__)) return (pipit_val){g, -1};
    return pipit__build(g, __func__, PIPIT_OP_CP_GATHER, 1, &x, NULL, (int64_t[4]){pipit__graph_cp(g), 0, 0, 0});
}

pipit_val pipit_attention_cp(pipit_graph *g, pipit_val q, pipit_val k, pipit_val v, const pipit_attention_opts *o) {
    if (bad_handle(g, __func__)) return (pipit_val){g, -1};
    if (!o) {
        if (g->status == PIPIT_STATUS_OK) pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: options are NULL", __func__);
        pipit__err(PIPIT_STATUS_INVALID, "%s: options are NULL", __func__);
        return (pipit_val){g, -1};
    }
    int C = pipit__graph_cp(g), kv = o->kv_heads ? o->kv_heads : o->heads;
    pipit_val kg = pipit__build(g, __func__, PIPIT_OP_CP_GATHER, 1, &k, NULL, (int64_t[4]){C, 0, 0, 0});
    pipit_val vg = pipit__build(g, __func__, PIPIT_OP_CP_GATHER, 1, &v, NULL, (int64_t[4]){C, 0, 0, 0});
    if (kg.id < 0 || vg.id < 0) return (pipit_val){g, -1};
    double scale = o->scale;
    const pipit__node *qn = q.g == g && q.id >= 0 && q.id < g->n ? &g->nodes[q.id] : NULL;
    if (scale == 0 && qn && qn->ndim == 3 && o->heads > 0 && qn->shape[2] % o->heads == 0)
        scale = 1.0 / sqrt((double)(qn->shape[2] / o->heads));
    return pipit__build(g, __func__, PIPIT_OP_ATTENTION_CP, 3, (pipit_val[]){q, kg, vg}, (double[4]){scale, 0},
                        (int64_t[4]){o->heads, kv, o->causal != 0, C});
}

static pipit_val rope_cp(pipit_graph *g, const char *fn, pipit_val x, int heads, double theta, const double f[3],
                         int64_t orig) {
    return pipit__build(g, fn, PIPIT_OP_ROPE_CP, 1, &x, (double[4]){theta, f[0], f[1], f[2]},
                        (int64_t[4]){heads, pipit__graph_cp(g), 0, orig});
}

pipit_val pipit_rope_cp(pipit_graph *g, pipit_val x, int heads, double theta, const pipit_rope_scaling *s) {
    if (bad_handle(g, __func__)) return (pipit_val){g, -1};
    const pipit_rope_scaling none = {0};
    if (!s) s = &none;
    return rope_cp(g, __func__, x, heads, theta, (double[3]){s->factor, s->low_freq_factor, s->high_freq_factor},
                   s->original_max_position_embeddings);
}

pipit_val pipit__rope_cp(pipit_graph *g, pipit_val x, int heads, double theta, const double f[3], int64_t orig) {
    return rope_cp(g, "pipit_rope_cp", x, heads, theta, f, orig);
}

/* ----------------------------------------------------------- shape rules */

static int is_float(const pipit__node *n) {
    return n->dtype == PIPIT_F32 || n->dtype == PIPIT_F64 || n->dtype == PIPIT_BF16;
}

static pipit_status c_ok(const pipit__node *n, int at) {
    int64_t C = n->iattr[at];
    if (C < 1 || C > CP_MAX_RANKS) return bad("C = %lld context-parallel ranks (1 to %d)", (long long)C, CP_MAX_RANKS);
    return PIPIT_STATUS_OK;
}

pipit_status pipit__op_cp_gather_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0);
    if (c_ok(n, 0)) return PIPIT_STATUS_SHAPE;
    if (x->ndim < 2 || x->shape[1] % 2 != 0)
        return bad("x must be [B, 2L, ...] (this rank's two chunks of L tokens along axis 1), got rank %d%s", x->ndim,
                   x->ndim >= 2 ? " with an odd axis 1" : "");
    int64_t m;
    if (!pipit__mul_le(x->shape[1], n->iattr[0], PIPIT__MAX_NUMEL, &m)) return bad("the gathered sequence is too long");
    n->dtype = x->dtype;
    n->ndim = x->ndim;
    memcpy(n->shape, x->shape, sizeof n->shape);
    n->shape[1] = m;
    return PIPIT_STATUS_OK;
}
void pipit__op_cp_gather_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    int64_t iattr[4] = {g->nodes[id].iattr[0], 0, 0, 0};
    din[0] = pipit__node_add(g, PIPIT_OP_CP_SCATTER, 1, &dout, NULL, iattr);
}

pipit_status pipit__op_cp_scatter_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *x = IN(0);
    if (c_ok(n, 0)) return PIPIT_STATUS_SHAPE;
    if (!is_float(x)) return bad("the gradient must be f32, f64 or bf16");
    int64_t C = n->iattr[0];
    if (x->ndim < 2 || x->shape[1] % (2 * C) != 0)
        return bad("dy must be [B, S, ...] with S a multiple of 2C = %lld", (long long)(2 * C));
    n->dtype = x->dtype;
    n->ndim = x->ndim;
    memcpy(n->shape, x->shape, sizeof n->shape);
    n->shape[1] = x->shape[1] / C;
    return PIPIT_STATUS_OK;
}
void pipit__op_cp_scatter_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    int64_t iattr[4] = {g->nodes[id].iattr[0], 0, 0, 0};
    din[0] = pipit__node_add(g, PIPIT_OP_CP_GATHER, 1, &dout, NULL, iattr);
}

/* ROPE's own rule with the offset 0 (it checks heads, theta, scaling), and
 * an even sequence axis. */
pipit_status pipit__op_rope_cp_shape(const pipit_graph *g, pipit__node *n) {
    if (c_ok(n, 1)) return PIPIT_STATUS_SHAPE;
    pipit__node m = *n;
    m.iattr[1] = 0;
    pipit_status s = pipit__ops[PIPIT_OP_ROPE].shape(g, &m);
    if (s) return s;
    if (m.shape[1] % 2 != 0) return bad("x's axis 1 (%lld) must be 2L: this rank's two chunks", (long long)m.shape[1]);
    n->dtype = m.dtype;
    n->ndim = m.ndim;
    memcpy(n->shape, m.shape, sizeof n->shape);
    return PIPIT_STATUS_OK;
}
void pipit__op_rope_cp_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id]; /* copied first: adding a node may move g->nodes */
    n.iattr[2] = !n.iattr[2];
    din[0] = pipit__node_add(g, PIPIT_OP_ROPE_CP, 1, &dout, n.fattr, n.iattr);
}

pipit_status pipit__op_attention_cp_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *q = IN(0), *k = IN(1), *v = IN(2);
    if (c_ok(n, 3)) return PIPIT_STATUS_SHAPE;
    if (!is_float(q) || k->dtype != q->dtype || v->dtype != q->dtype)
        return bad("q, k and v must be one float dtype (f32, f64 or bf16)");
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3) return bad("q, k and v must be 3-D [B,T,heads*D]");
    int64_t Hq = n->iattr[0], Hkv = n->iattr[1], C = n->iattr[3];
    if (Hq <= 0 || q->shape[2] % Hq != 0)
        return bad("heads (%lld) must divide q's last axis (%lld)", (long long)Hq, (long long)q->shape[2]);
    if (Hkv <= 0 || Hq % Hkv != 0) return bad("kv_heads (%lld) must divide heads (%lld)", (long long)Hkv, (long long)Hq);
    int64_t D = q->shape[2] / Hq;
    if (q->shape[1] % 2 != 0)
        return bad("q's axis 1 (%lld) must be 2L: this rank's two chunks of the sequence", (long long)q->shape[1]);
    for (int i = 0; i < 3; i++)
        if (k->shape[i] != v->shape[i]) return bad("k and v must have one shape");
    if (k->shape[0] != q->shape[0] || k->shape[1] != q->shape[1] * C || k->shape[2] != Hkv * D)
        return bad("k and v must be [%lld,%lld,%lld] (the gathered sequence: C = %lld times q's %lld rows; kv_heads "
                   "x head size)",
                   (long long)q->shape[0], (long long)(q->shape[1] * C), (long long)(Hkv * D), (long long)C,
                   (long long)q->shape[1]);
    if (!(n->fattr[0] > 0) || !isfinite(n->fattr[0])) return bad("scale must be finite and > 0");
    n->dtype = q->dtype;
    n->ndim = 3;
    memcpy(n->shape, q->shape, sizeof n->shape);
    return PIPIT_STATUS_OK;
}
/* One backward op: [dq | dk | dv] flat, each input's gradient a view of
 * its part (as attention_qkv's). */
void pipit__op_attention_cp_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id], q = g->nodes[n.in[0]], k = g->nodes[n.in[1]];
    int32_t d = pipit__node_add(g, PIPIT_OP_ATTN_CP_D, 4, (int32_t[]){n.in[0], n.in[1], n.in[2], dout}, n.fattr,
                                n.iattr);
    if (d < 0) return;
    int64_t nq = pipit__node_numel(&q), nk = pipit__node_numel(&k);
    int64_t qs[4] = {q.shape[0], q.shape[1], q.shape[2], 0}, ks[4] = {k.shape[0], k.shape[1], k.shape[2], 0};
    din[0] = pipit__node_add(g, PIPIT_OP_VIEW, 1, &d, (double[4]){3, 0}, qs);
    din[1] = pipit__node_add(g, PIPIT_OP_VIEW, 1, &d, (double[4]){3, (double)nq}, ks);
    din[2] = pipit__node_add(g, PIPIT_OP_VIEW, 1, &d, (double[4]){3, (double)(nq + nk)}, ks);
}
pipit_status pipit__op_attn_cp_d_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *q = IN(0), *k = IN(1), *d = IN(3);
    if (d->dtype != q->dtype || d->ndim != q->ndim || memcmp(d->shape, q->shape, sizeof d->shape) != 0)
        return bad("q and dout must match");
    n->dtype = q->dtype;
    n->ndim = 1;
    n->shape[0] = pipit__node_numel(q) + 2 * pipit__node_numel(k);
    return PIPIT_STATUS_OK;
}

/* --------------------------------------------------------------- feeding */

pipit_status pipit_cp_slice(void *dst, const void *src, int64_t B, int64_t S, int64_t row_bytes, int C, int c) {
    if (!dst || !src) return pipit__err(PIPIT_STATUS_INVALID, "%s: %s is NULL", __func__, dst ? "src" : "dst");
    if (B < 1 || row_bytes < 1)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: B = %lld and row_bytes = %lld must be >= 1", __func__,
                          (long long)B, (long long)row_bytes);
    if (C < 1 || C > CP_MAX_RANKS || c < 0 || c >= C)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: context rank c = %d of C = %d (C in 1..%d, c in 0..C-1)",
                          __func__, c, C, CP_MAX_RANKS);
    if (S < 1 || S % (2 * C) != 0)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "%s: a sequence of %lld tokens does not cut into 2C = %d equal chunks (context parallelism "
                          "needs the sequence length to be a multiple of 2C)",
                          __func__, (long long)S, 2 * C);
    int64_t L = S / (2 * C), tot;
    if (!pipit__mul_le(B, S, INT64_MAX, &tot) || !pipit__mul_le(tot, row_bytes, INT64_MAX, &tot))
        return pipit__err(PIPIT_STATUS_INVALID, "%s: B x S x row_bytes overflows", __func__);
    size_t chunk = (size_t)(L * row_bytes);
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            int64_t from = pipit__cp_row(h * L, L, C, c);
            memcpy((char *)dst + (size_t)((b * 2 * L + h * L) * row_bytes),
                   (const char *)src + (size_t)((b * S + from) * row_bytes), chunk);
        }
    return PIPIT_STATUS_OK;
}
