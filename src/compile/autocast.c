/*
 * autocast.c — the mixed-precision twin of a graph (pipit_options.dtype =
 * PIPIT_BF16). The program compiles a copy of the user's forward graph to
 * which the twin of every value the loss and the outputs depend on is
 * appended: every op is the user's op on the twins of its inputs, each
 * input first cast as the precision policy below says for that opcode, so
 * the op table's dtype rules give the output's dtype. The user's graph is
 * untouched.
 *
 * PIPIT_BF16_AUTOCAST (the default) follows PyTorch's autocast: params and
 * inputs stay fp32 leaves; a matmul reads bf16 copies (a cast of a param
 * is an op on params alone, so the pre-loop computes it once per step on
 * the ranks that read it, and autodiff adds its gradient straight into the
 * param's fp32 accumulators), norms and softmax read fp32, and an add of
 * fp32 and bf16 is fp32 -- so the residual stream, fp32 from the
 * embedding on, stays fp32 while the branches that feed it are bf16. A
 * yield sends its value in its own dtype (the residual stream fp32: see
 * the table). Each cast of a value is made once and shared by its readers.
 *
 * PIPIT_BF16_ALL (the policy before) casts every f32 param and input to
 * bf16 as it is read, so every activation is bf16; an op that would mix
 * fp32 and bf16 inputs gets its fp32 ones cast to bf16.
 */
#include "compile/autocast.h"

#include <string.h>

/* How an op's float inputs are cast before it runs under
 * PIPIT_BF16_AUTOCAST. An opcode not in the table (a new op) gets 0,
 * BF16: it runs on bf16 inputs with fp32 arithmetic inside its kernel, as
 * every op did under the policy before. */
typedef enum {
    PREC_BF16 = 0, /* float inputs cast to bf16 */
    PREC_F32,      /* float inputs cast to fp32 (widened exactly from bf16) */
    PREC_PROMOTE,  /* fp32 and bf16 mixed: all fp32 (PyTorch's type promotion); else as they are */
    PREC_FOLLOW,   /* the other float inputs cast to input 0's dtype */
    PREC_KEEP,     /* inputs as they are: the op reads bf16 itself and its rule says its output's dtype */
} prec_rule;

static const struct {
    uint8_t rule;
    const char *why; /* docs/architecture.md "Precision" has the same table */
} policy[PIPIT_OP_COUNT] = {
    [PIPIT_OP_MATMUL] = {PREC_BF16, "the FLOPs: bf16 operands, fp32 sums, one rounding (autocast's mm/linear)"},
    [PIPIT_OP_ATTENTION] = {PREC_BF16, "matmuls inside: q, k, v are matmul outputs; scores and softmax fp32 in the kernel"},
    [PIPIT_OP_ATTENTION_QKV] = {PREC_BF16, "as attention"},
    [PIPIT_OP_ATTENTION_DOC] = {PREC_BF16, "as attention (the document ids are i32)"},
    [PIPIT_OP_HEAD_XENT] = {PREC_BF16, "the LM head's matmul fused with its cross-entropy: bf16 h and W; logits, sums "
                                       "and the per-row losses fp32 inside"},
    [PIPIT_OP_BIAS_ADD] = {PREC_FOLLOW, "the linear's bias: bf16 after a bf16 matmul (autocast's linear)"},
    [PIPIT_OP_LAYERNORM] = {PREC_F32, "the residual's statistics in fp32 (autocast's layer_norm); the output is fp32 "
                                      "until a matmul rounds it"},
    [PIPIT_OP_RMSNORM] = {PREC_F32, "as layernorm"},
    [PIPIT_OP_SOFTMAX] = {PREC_F32, "autocast's softmax is fp32"},
    [PIPIT_OP_LOG_SOFTMAX] = {PREC_F32, "autocast's log_softmax is fp32"},
    [PIPIT_OP_XENT_ROWS] = {PREC_KEEP, "bf16 logits are read as they are: fp32 arithmetic and fp32 per-row losses "
                                       "(autocast's cross_entropy) without an fp32 copy of [N,V]"},
    [PIPIT_OP_SUM] = {PREC_KEEP, "a sum of bf16 values is fp32 by its own rule"},
    [PIPIT_OP_ADD] = {PREC_PROMOTE, "the residual stream stays fp32 (a bf16 branch is widened exactly)"},
    [PIPIT_OP_SUB] = {PREC_PROMOTE, "as add"},
    [PIPIT_OP_MUL] = {PREC_PROMOTE, "as add (two bf16 branches, SwiGLU's, stay bf16)"},
    [PIPIT_OP_DIV] = {PREC_PROMOTE, "as add"},
    [PIPIT_OP_CONCAT] = {PREC_PROMOTE, "as add"},
    [PIPIT_OP_EMBED] = {PREC_KEEP, "the fp32 table (autocast leaves embedding fp32): the residual stream starts fp32 "
                                   "and its gradient is added into the table in fp32"},
    [PIPIT_OP_GATHER] = {PREC_KEEP, "as embed"},
    [PIPIT_OP_CAST] = {PREC_KEEP, "the user's cast says its dtype"},
    [PIPIT_OP_YIELD] = {PREC_KEEP, "a message in its value's dtype: rounding the fp32 residual at a cut would make "
                                   "the bits depend on where the stages are cut (P), which they must not"},
    [PIPIT_OP_GELU] = {PREC_FOLLOW, "elementwise: its input's dtype (autocast's gelu)"},
    [PIPIT_OP_SILU] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_RELU] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_SIGMOID] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_TANH] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_NEG] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_ABS] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_EXP] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_LOG] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_SQRT] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_RSQRT] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_SCALE] = {PREC_FOLLOW, "as gelu"},
    [PIPIT_OP_ROPE] = {PREC_FOLLOW, "rotates q and k, matmul outputs, in their dtype"},
    [PIPIT_OP_MAX] = {PREC_FOLLOW, "its input's dtype"},
    [PIPIT_OP_FILL] = {PREC_FOLLOW, "its input's dtype"},
    [PIPIT_OP_SUM_TO] = {PREC_FOLLOW, "its input's dtype"},
    [PIPIT_OP_BROADCAST_TO] = {PREC_FOLLOW, "its input's dtype"},
    [PIPIT_OP_RESHAPE] = {PREC_FOLLOW, "moves values: no rounding"},
    [PIPIT_OP_VIEW] = {PREC_FOLLOW, "as reshape"},
    [PIPIT_OP_PERMUTE] = {PREC_FOLLOW, "as reshape"},
    [PIPIT_OP_SLICE] = {PREC_FOLLOW, "as reshape"},
    [PIPIT_OP_TP_COPY] = {PREC_FOLLOW, "tensor-parallel identity: its input's dtype"},
    [PIPIT_OP_TP_SUM] = {PREC_FOLLOW, "sums the row-parallel matmul's bf16 partials in fp32, rounded once"},
    [PIPIT_OP_TP_MAX] = {PREC_FOLLOW, "its input's dtype"},
    [PIPIT_OP_SP_GATHER] = {PREC_FOLLOW, "moves its input's values"},
    [PIPIT_OP_SP_SCATTER] = {PREC_FOLLOW, "as tp_sum: bf16 partials summed in fp32, rounded once"},
    [PIPIT_OP_SP_SPLIT] = {PREC_FOLLOW, "moves its input's values"},
    [PIPIT_OP_EP_A2A] = {PREC_FOLLOW, "moves its input's bytes"},
    [PIPIT_OP_EP_A2A_REV] = {PREC_FOLLOW, "as ep_a2a"},
    [PIPIT_OP_TP_PICK] = {PREC_FOLLOW, "its input's dtype"},
    [PIPIT_OP_TOPK] = {PREC_KEEP, "chooses on the scores as they are (fp32 after softmax): no ties made by rounding"},
    [PIPIT_OP_TAKE] = {PREC_KEEP, "moves values: the router's weights stay fp32"},
    [PIPIT_OP_MOE_DISPATCH] = {PREC_FOLLOW, "the tokens' dtype (the weights cast to it)"},
    [PIPIT_OP_MOE_COMBINE] = {PREC_FOLLOW, "the experts' outputs' dtype (the weights cast to it)"},
};

/* The first backward node of g (an earlier training compile's), or g->n. */
static int32_t forward_end(const pipit_graph *g) {
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].flags & NODE_BWD) return i;
    return g->n;
}

/* need[j]: the loss or an output depends on node j (j < n). */
static uint8_t *mark_needed(const pipit_graph *g, int32_t n, int32_t loss, const int32_t *outs, int nout) {
    uint8_t *need = pipit__calloc((size_t)PIPIT_MAX(n, 1), 1);
    if (!need) return NULL;
    need[loss] = 1;
    for (int i = 0; i < nout; i++) need[outs[i]] = 1;
    for (int32_t j = n - 1; j >= 0; j--)
        for (int k = 0; need[j] && k < g->nodes[j].nin; k++) need[g->nodes[j].in[k]] = 1;
    return need;
}

static int is_float_dt(int dt) { return dt == PIPIT_F32 || dt == PIPIT_F64 || dt == PIPIT_BF16; }

/* The twin graph being built: each value's casts made so far (one per
 * value and dtype, shared by its readers). */
typedef struct {
    pipit_graph *c;
    pipit_bf16_policy policy;
    int32_t cap;      /* entries of the arrays below (grown with c->n) */
    int32_t *as_bf16; /* -1: not made yet */
    int32_t *as_f32;
    pipit_status err; /* why a twin failed */
} twin_state;

static int grow(twin_state *t) {
    if (t->c->n <= t->cap) return 1;
    int32_t cap = PIPIT_MAX(t->c->n, 2 * t->cap);
    int32_t *b = pipit__realloc(t->as_bf16, sizeof *b * (size_t)cap);
    if (b) t->as_bf16 = b;
    int32_t *f = b ? pipit__realloc(t->as_f32, sizeof *f * (size_t)cap) : NULL;
    if (!f) return 0;
    t->as_f32 = f;
    for (int32_t i = t->cap; i < cap; i++) t->as_bf16[i] = t->as_f32[i] = -1;
    t->cap = cap;
    return 1;
}

/* Node v (a value of c) as dtype dt: v itself, or its one cast. A cast
 * from bf16 to fp32 is exact, so the fp32 value's bf16 copy is v. */
static int32_t cast_to(twin_state *t, int32_t v, pipit_dtype dt) {
    pipit_graph *c = t->c;
    if (c->nodes[v].dtype == (uint8_t)dt) return v;
    int memo = dt == PIPIT_BF16 || dt == PIPIT_F32;
    if (memo && (dt == PIPIT_BF16 ? t->as_bf16 : t->as_f32)[v] >= 0) return (dt == PIPIT_BF16 ? t->as_bf16 : t->as_f32)[v];
    int32_t r = pipit__cast(c, v, dt);
    if (r < 0 || !grow(t)) return -1; /* grow may move the arrays */
    if (memo) (dt == PIPIT_BF16 ? t->as_bf16 : t->as_f32)[v] = r;
    if (dt == PIPIT_F32 && c->nodes[v].dtype == PIPIT_BF16) t->as_bf16[r] = v;
    return r;
}

/* The twin of a leaf. The policy before reads f32 params and inputs
 * through a cast; the autocast policy casts where a reader asks. */
static int32_t twin_leaf(twin_state *t, int32_t j) {
    const pipit__node *n = &t->c->nodes[j];
    if (n->op == PIPIT_OP_PARAM && n->dtype == PIPIT_F64) {
        t->err = pipit__err(PIPIT_STATUS_INVALID,
                   "options.dtype PIPIT_BF16: param '%s' is f64; mixed precision runs an f32 model in bf16 (build it "
                   "in f32, or compile with options.dtype PIPIT_F32)",
                   n->name);
        return -1;
    }
    if (t->policy != PIPIT_BF16_ALL || n->dtype != PIPIT_F32 || (n->flags & NODE_GRADOF)) return j;
    int32_t r = cast_to(t, j, PIPIT_BF16);
    if (r < 0) t->err = pipit__err(t->c->status ? t->c->status : PIPIT_STATUS_NOMEM, "options.dtype PIPIT_BF16: %s",
                                   t->c->status ? t->c->errmsg : "out of memory");
    return r;
}

/* The dtype input k of a node with rule r and inputs in[] is cast to, or
 * -1 to leave it as it is. */
static int wanted_dtype(const pipit_graph *c, int r, const int32_t *in, int nin, int k) {
    int dt = c->nodes[in[k]].dtype;
    if (dt != PIPIT_F32 && dt != PIPIT_BF16) return -1; /* integers (indices, targets), f64 */
    int has32 = 0, has16 = 0;
    for (int i = 0; i < nin; i++) {
        has32 |= c->nodes[in[i]].dtype == PIPIT_F32;
        has16 |= c->nodes[in[i]].dtype == PIPIT_BF16;
    }
    switch ((prec_rule)r) {
    case PREC_BF16: return PIPIT_BF16;
    case PREC_F32: return PIPIT_F32;
    case PREC_PROMOTE: return has32 && has16 ? PIPIT_F32 : -1;
    case PREC_FOLLOW: return is_float_dt(c->nodes[in[0]].dtype) ? c->nodes[in[0]].dtype : -1;
    case PREC_KEEP: return -1;
    }
    return -1;
}

/* The twin of op node j: the same op on its inputs' twins, each cast as
 * the policy says. */
static int32_t twin_op(twin_state *t, int32_t j, const int32_t *twin) {
    pipit_graph *c = t->c;
    pipit__node n = c->nodes[j]; /* a copy: adding nodes may move the array */
    int32_t in[PIPIT_MAX_IN], r = -1;
    int any_bf16 = 0, want[PIPIT_MAX_IN], ok = 1;
    for (int k = 0; k < n.nin; k++) {
        in[k] = twin[n.in[k]];
        any_bf16 |= c->nodes[in[k]].dtype == PIPIT_BF16;
    }
    for (int k = 0; k < n.nin; k++) /* decided before a cast changes the inputs' dtypes */
        want[k] = t->policy == PIPIT_BF16_AUTOCAST ? wanted_dtype(c, policy[n.op].rule, in, n.nin, k)
                  : any_bf16 && n.nin > 1 && c->nodes[in[k]].dtype == PIPIT_F32 ? PIPIT_BF16
                                                                              : -1;
    for (int k = 0; ok && k < n.nin; k++)
        if (want[k] >= 0) ok = (in[k] = cast_to(t, in[k], (pipit_dtype)want[k])) >= 0;
    if (ok && c->status == PIPIT_STATUS_OK) r = pipit__node_add(c, (pipit__opcode)n.op, n.nin, in, n.fattr, n.iattr);
    if (r >= 0) grow(t);
    if (r < 0 || c->n > t->cap) {
        int oom = c->status == PIPIT_STATUS_OK;
        t->err = pipit__err(oom ? PIPIT_STATUS_NOMEM : c->status, "options.dtype PIPIT_BF16: the bf16 copy of node %d: %s",
                   (int)j, oom ? "out of memory" : c->errmsg);
        return -1;
    }
    return r;
}

static pipit_status build_twins(twin_state *t, const uint8_t *need, int32_t n, int32_t *twin) {
    for (int32_t j = 0; j < n; j++) {
        twin[j] = -1;
        if (!need[j]) continue;
        twin[j] = (pipit__ops[t->c->nodes[j].op].flags & OPF_LEAF) ? twin_leaf(t, j) : twin_op(t, j, twin);
        if (twin[j] < 0) return t->err;
    }
    return PIPIT_STATUS_OK;
}

pipit_status pipit__autocast(const pipit_graph *g, int32_t loss, const int32_t *outs, int nout,
                             pipit_bf16_policy policy_kind, pipit_graph **out, int32_t *loss_out, int32_t *outs_out) {
    *out = NULL;
    if (g->status != PIPIT_STATUS_OK) return pipit__err(g->status, "graph has a build error: %s", g->errmsg);
    int32_t n = forward_end(g);
    if (loss < 0 || loss >= n) return pipit__err(PIPIT_STATUS_INVALID, "loss is not a forward value of this graph");
    for (int i = 0; i < nout; i++)
        if (outs[i] >= n)
            return pipit__err(PIPIT_STATUS_INVALID, "options.outputs[%d] is not a forward value of this graph", i);
    uint8_t *need = mark_needed(g, n, loss, outs, nout);
    int32_t *twin = pipit__malloc(sizeof *twin * (size_t)PIPIT_MAX(n, 1));
    twin_state t = {.c = need && twin ? pipit__graph_clone(g, n) : NULL, .policy = policy_kind};
    pipit_graph *c = t.c;
    pipit_status s = c && grow(&t) ? build_twins(&t, need, n, twin)
                                   : pipit__err(PIPIT_STATUS_NOMEM, "autocast: out of memory");
    if (!s) {
        *loss_out = twin[loss];
        int ldt = g->nodes[loss].dtype; /* a loss of bf16 values would be fp32 already (SUM's rule) */
        if (is_float_dt(ldt) && c->nodes[*loss_out].dtype != ldt &&
            (*loss_out = pipit__cast(c, *loss_out, (pipit_dtype)ldt)) < 0)
            s = pipit__err(c->status, "%s", c->errmsg);
        for (int i = 0; i < nout; i++) outs_out[i] = twin[outs[i]];
    }
    pipit__free(need);
    pipit__free(twin);
    pipit__free(t.as_bf16);
    pipit__free(t.as_f32);
    if (s) {
        pipit_graph_free(c);
        return s;
    }
    *out = c;
    return PIPIT_STATUS_OK;
}
