/*
 * ops_cpu.c — the CPU backend's kernel for every op of ir/ops.def: each
 * reads its sizes off the node (shapes were fixed by the op's shape rule)
 * and calls a raw kernel of kernels.h on its thread's slice. The run table
 * at the end is generated from ops.def, so an op without a CPU kernel is a
 * compile error here (leaves and aliases have none: they run nothing).
 */
#include "backend/cpu/cpu.h"
#include "backend/cpu/kernels.h"

#define KIN(i) (k->in_node[i])

/* Calls kernel fn_f32 or fn_f64 by the output's dtype. */
#define DISPATCH(k, fn, ...)                                                      \
    do {                                                                          \
        if ((k)->node->dtype == PIPIT_F64) fn##_f64(__VA_ARGS__);                  \
        else fn##_f32(__VA_ARGS__);                                               \
    } while (0)

/* Leaves are bound from outside; reshape and yield alias their input. */
#define cpu_INPUT NULL
#define cpu_PARAM NULL
#define cpu_RESHAPE NULL
#define cpu_YIELD NULL

static void cpu_EMBED(const pipit__kctx *k, int ith, int nth) {
    int64_t cnt = pipit__node_numel(KIN(1)), C = KIN(0)->shape[1];
    DISPATCH(k, pipit__embed, k->out, k->in[0], k->in[1], cnt, C, ith, nth);
}

static void cpu_EMBED_DTABLE(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__embed_dtable, k->out, k->in[0], k->in[1], pipit__node_numel(KIN(0)),
             k->node->shape[0], k->node->shape[1], ith, nth);
}

static void cpu_ADD(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__add, k->out, k->in[0], k->in[1], pipit__node_numel(k->node), ith, nth);
}

static void cpu_MUL(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__mul, k->out, k->in[0], k->in[1], pipit__node_numel(k->node), ith, nth);
}

static void cpu_SCALE(const pipit__kctx *k, int ith, int nth) {
    int64_t cnt = pipit__node_numel(k->node);
    if (k->node->dtype == PIPIT_F64)
        pipit__scale_f64(k->out, k->in[0], k->node->fattr[0], cnt, ith, nth);
    else
        pipit__scale_f32(k->out, k->in[0], (float)k->node->fattr[0], cnt, ith, nth);
}

static void cpu_MATMUL(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *a = KIN(0), *b = KIN(1);
    pipit__mm_dims d = pipit__matmul_dims(a, b, k->node);
    int64_t lda = a->shape[a->ndim - 1], ldb = b->shape[b->ndim - 1];
    int64_t batch = d.batch, M = d.M;
    if (d.broadcast) { M *= batch; batch = 1; } /* rows of a flatten into M */
    int64_t sA = a->shape[a->ndim - 1] * a->shape[a->ndim - 2];
    int64_t sB = b->ndim == 2 ? 0 : b->shape[b->ndim - 1] * b->shape[b->ndim - 2];
    DISPATCH(k, pipit__gemm, d.ta, d.tb, batch, M, d.N, d.K, k->in[0], lda, sA, k->in[1], ldb,
             sB, k->out, d.N, d.M * d.N, 0, ith, nth);
}

static void cpu_BIAS_ADD(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__bias_add, k->out, k->in[0], k->in[1], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), ith, nth);
}

static void cpu_SUM_ROWS(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__sum_rows, k->out, k->in[0], pipit__node_rows(KIN(0)), pipit__node_last_dim(KIN(0)), ith, nth);
}

static void cpu_LAYERNORM(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__layernorm, k->out, k->in[0], k->in[1], k->in[2], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), k->node->fattr[0], ith, nth);
}

static void cpu_LN_DX(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__layernorm_dx, k->out, k->in[0], k->in[1], k->in[2], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), k->node->fattr[0], ith, nth);
}

static void cpu_LN_DW(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__layernorm_dw, k->out, k->in[0], k->in[1], pipit__node_rows(KIN(0)),
             pipit__node_last_dim(KIN(0)), k->node->fattr[0], ith, nth);
}

static void cpu_GELU(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__gelu, k->out, k->in[0], pipit__node_numel(k->node), ith, nth);
}

static void cpu_GELU_DX(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__gelu_dx, k->out, k->in[0], k->in[1], pipit__node_numel(k->node), ith, nth);
}

static void cpu_ATTENTION(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *n = k->node;
    DISPATCH(k, pipit__attention, k->out, k->in[0], n->shape[0], n->shape[1], n->shape[2],
             n->iattr[0], ith, nth);
}

static void cpu_ATTN_DQKV(const pipit__kctx *k, int ith, int nth) {
    const pipit__node *d = KIN(1);
    DISPATCH(k, pipit__attention_dqkv, k->out, k->in[0], k->in[1], d->shape[0], d->shape[1],
             d->shape[2], k->node->iattr[0], ith, nth);
}

static void cpu_XENT_ROWS(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__xent_rows, k->out, k->in[0], k->in[1], pipit__node_rows(KIN(0)), pipit__node_last_dim(KIN(0)),
             ith, nth);
}

static void cpu_XENT_DLOGITS(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__xent_dlogits, k->out, k->in[0], k->in[1], k->in[2], pipit__node_rows(KIN(0)),
             pipit__node_last_dim(KIN(0)), ith, nth);
}

static void cpu_SUM(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__sum_all, k->out, k->in[0], pipit__node_numel(KIN(0)), k->node->fattr[0],
             ith, nth);
}

static void cpu_FILL(const pipit__kctx *k, int ith, int nth) {
    DISPATCH(k, pipit__fill, k->out, k->in[0], k->node->fattr[0], pipit__node_numel(k->node), ith,
             nth);
}

static void cpu_PERMUTE(const pipit__kctx *k, int ith, int nth) {
    int perm[PIPIT_MAX_DIMS];
    for (int i = 0; i < PIPIT_MAX_DIMS; i++) perm[i] = (int)k->node->iattr[i];
    DISPATCH(k, pipit__permute, k->out, k->in[0], KIN(0)->ndim, KIN(0)->shape, perm, ith, nth);
}

const pipit__op_kernel pipit__cpu_ops[PIPIT_OP_COUNT] = {
#define X(NAME, str, arity, nondiff, alias, flags) [PIPIT_OP_##NAME] = cpu_##NAME,
#include "ir/ops.def"
#undef X
};
