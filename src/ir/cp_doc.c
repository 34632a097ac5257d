/*
 * cp_doc.c — packed documents under context parallelism (ir/cp.h,
 * pipit_cp.h): the builder pipit_attention_cp_docs and the shape and
 * gradient rules of ATTENTION_CP_DOC and ATTN_CP_DOC_D. k and v travel
 * as one gather of their concat (k | v per row), so the forward op reads
 * three inputs and its backward four (PIPIT_MAX_IN); the document ids are
 * gathered by the same CP_GATHER (it moves bytes of any dtype).
 */
#include <math.h>
#include <string.h>

#include "ir/cp.h"
#include "pipit_cp.h"

#define IN(i) (&g->nodes[n->in[i]])
#define bad(...) pipit__err(PIPIT_STATUS_SHAPE, __VA_ARGS__)

pipit_val pipit_attention_cp_docs(pipit_graph *g, pipit_val q, pipit_val k, pipit_val v, pipit_val doc,
                                  const pipit_attention_opts *o) {
    if (!g || g->magic != PIPIT_GRAPH_MAGIC) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: %s", __func__,
                   g ? "invalid graph handle (freed, or not a pipit_graph)" : "graph is NULL");
        return (pipit_val){g, -1};
    }
    if (!o) {
        if (g->status == PIPIT_STATUS_OK) pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: options are NULL", __func__);
        pipit__err(PIPIT_STATUS_INVALID, "%s: options are NULL", __func__);
        return (pipit_val){g, -1};
    }
    int C = pipit__graph_cp(g), kvh = o->kv_heads ? o->kv_heads : o->heads;
    pipit_val kv = pipit__build(g, __func__, PIPIT_OP_CONCAT, 2, (pipit_val[]){k, v}, NULL, (int64_t[4]){2, 0, 0, 0});
    if (kv.id < 0) return (pipit_val){g, -1};
    pipit_val kvg = pipit__build(g, __func__, PIPIT_OP_CP_GATHER, 1, &kv, NULL, (int64_t[4]){C, 0, 0, 0});
    pipit_val dg = pipit__build(g, __func__, PIPIT_OP_CP_GATHER, 1, &doc, NULL, (int64_t[4]){C, 0, 0, 0});
    if (kvg.id < 0 || dg.id < 0) return (pipit_val){g, -1};
    double scale = o->scale;
    const pipit__node *qn = q.g == g && q.id >= 0 && q.id < g->n ? &g->nodes[q.id] : NULL;
    if (scale == 0 && qn && qn->ndim == 3 && o->heads > 0 && qn->shape[2] % o->heads == 0)
        scale = 1.0 / sqrt((double)(qn->shape[2] / o->heads));
    return pipit__build(g, __func__, PIPIT_OP_ATTENTION_CP_DOC, 3, (pipit_val[]){q, kvg, dg}, (double[4]){scale, 0},
                        (int64_t[4]){o->heads, kvh, o->causal != 0, C});
}

pipit_status pipit__op_attention_cp_doc_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *q = IN(0), *kv = IN(1), *doc = IN(2);
    int64_t Hq = n->iattr[0], Hkv = n->iattr[1], C = n->iattr[3];
    if (C < 1 || C > 64) return bad("C = %lld context-parallel ranks (1 to 64)", (long long)C);
    if ((q->dtype != PIPIT_F32 && q->dtype != PIPIT_F64 && q->dtype != PIPIT_BF16) || kv->dtype != q->dtype)
        return bad("q and the gathered k | v must be one float dtype (f32, f64 or bf16)");
    if (q->ndim != 3 || kv->ndim != 3) return bad("q and k | v must be 3-D [B,T,heads*D]");
    if (Hq <= 0 || q->shape[2] % Hq != 0)
        return bad("heads (%lld) must divide q's last axis (%lld)", (long long)Hq, (long long)q->shape[2]);
    if (Hkv <= 0 || Hq % Hkv != 0) return bad("kv_heads (%lld) must divide heads (%lld)", (long long)Hkv, (long long)Hq);
    int64_t D = q->shape[2] / Hq;
    if (q->shape[1] % 2 != 0)
        return bad("q's axis 1 (%lld) must be 2L: this rank's two chunks of the sequence", (long long)q->shape[1]);
    if (kv->shape[0] != q->shape[0] || kv->shape[1] != q->shape[1] * C || kv->shape[2] != 2 * Hkv * D)
        return bad("the gathered k | v must be [%lld,%lld,%lld] (C = %lld times q's %lld rows; k then v, kv_heads x "
                   "head size each)",
                   (long long)q->shape[0], (long long)(q->shape[1] * C), (long long)(2 * Hkv * D), (long long)C,
                   (long long)q->shape[1]);
    if (doc->dtype != PIPIT_I32 || doc->ndim != 2 || doc->shape[0] != q->shape[0] || doc->shape[1] != kv->shape[1])
        return bad("the gathered document ids must be i32 [%lld,%lld] (q's batch, k | v's rows)",
                   (long long)q->shape[0], (long long)kv->shape[1]);
    if (!(n->fattr[0] > 0) || !isfinite(n->fattr[0])) return bad("scale must be finite and > 0");
    n->dtype = q->dtype;
    n->ndim = 3;
    memcpy(n->shape, q->shape, sizeof n->shape);
    return PIPIT_STATUS_OK;
}

/* One backward op: [dq | dkv] flat, each input's gradient a view of its part. */
void pipit__op_attention_cp_doc_vjp(pipit_graph *g, int32_t id, int32_t dout, int32_t *din) {
    pipit__node n = g->nodes[id], q = g->nodes[n.in[0]], kv = g->nodes[n.in[1]];
    int32_t d = pipit__node_add(g, PIPIT_OP_ATTN_CP_DOC_D, 4, (int32_t[]){n.in[0], n.in[1], dout, n.in[2]}, n.fattr,
                                n.iattr);
    if (d < 0) return;
    int64_t nq = pipit__node_numel(&q);
    int64_t qs[4] = {q.shape[0], q.shape[1], q.shape[2], 0}, ks[4] = {kv.shape[0], kv.shape[1], kv.shape[2], 0};
    din[0] = pipit__node_add(g, PIPIT_OP_VIEW, 1, &d, (double[4]){3, 0}, qs);
    din[1] = pipit__node_add(g, PIPIT_OP_VIEW, 1, &d, (double[4]){3, (double)nq}, ks);
}

pipit_status pipit__op_attn_cp_doc_d_shape(const pipit_graph *g, pipit__node *n) {
    const pipit__node *q = IN(0), *kv = IN(1), *d = IN(2), *doc = IN(3);
    if (d->dtype != q->dtype || d->ndim != q->ndim || memcmp(d->shape, q->shape, sizeof d->shape) != 0)
        return bad("q and dout must match");
    if (doc->dtype != PIPIT_I32) return bad("document ids must be i32");
    n->dtype = q->dtype;
    n->ndim = 1;
    n->shape[0] = pipit__node_numel(q) + pipit__node_numel(kv);
    return PIPIT_STATUS_OK;
}
