/*
 * autocast.c — the bf16 twin of a graph (pipit_options.dtype = PIPIT_BF16).
 * The program compiles a copy of the user's forward graph to which the
 * twin of every value the loss and the outputs depend on is appended: an
 * f32 param is read through a cast to bf16 (an op on params alone, so the
 * pre-loop computes it once per step on the ranks that read it, and
 * autodiff adds its gradient straight into the param's fp32 accumulators),
 * an f32 input through a cast made per microbatch, and every op is the
 * user's op on the twins of its inputs, so the op table's dtype rules make
 * it bf16 -- or keep it fp32 where they say so (per-row losses, sums to a
 * scalar). Where an op would mix fp32 and bf16 inputs the fp32 ones are
 * cast to bf16, as the rest of the twin is. The user's graph is untouched.
 */
#include "compile/autocast.h"

#include <string.h>

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

/* The twin of a leaf: f32 params and inputs are read through a cast. */
static int32_t twin_leaf(pipit_graph *c, int32_t j) {
    const pipit__node *n = &c->nodes[j];
    if (n->op == PIPIT_OP_PARAM && n->dtype == PIPIT_F64) {
        pipit__err(PIPIT_STATUS_INVALID,
                   "options.dtype PIPIT_BF16: param '%s' is f64; mixed precision runs an f32 model in bf16 (build it "
                   "in f32, or compile with options.dtype PIPIT_F32)",
                   n->name);
        return -1;
    }
    if (n->dtype != PIPIT_F32 || (n->flags & NODE_GRADOF)) return j;
    int32_t t = pipit__cast(c, j, PIPIT_BF16);
    if (t < 0) pipit__err(c->status, "%s", c->errmsg);
    return t;
}

/* The twin of op node j: the same op on its inputs' twins, after casting
 * fp32 inputs to bf16 where bf16 ones sit beside them. */
static int32_t twin_op(pipit_graph *c, int32_t j, const int32_t *twin) {
    pipit__node n = c->nodes[j]; /* a copy: adding nodes may move the array */
    int32_t in[PIPIT_MAX_IN];
    int any_bf16 = 0;
    for (int k = 0; k < n.nin; k++) {
        in[k] = twin[n.in[k]];
        any_bf16 |= c->nodes[in[k]].dtype == PIPIT_BF16;
    }
    for (int k = 0; any_bf16 && n.nin > 1 && k < n.nin; k++)
        if (c->nodes[in[k]].dtype == PIPIT_F32 && (in[k] = pipit__cast(c, in[k], PIPIT_BF16)) < 0) break;
    int32_t t = -1;
    if (c->status == PIPIT_STATUS_OK) t = pipit__node_add(c, (pipit__opcode)n.op, n.nin, in, n.fattr, n.iattr);
    if (t < 0) pipit__err(c->status, "options.dtype PIPIT_BF16: the bf16 copy of node %d: %s", (int)j, c->errmsg);
    return t;
}

static pipit_status build_twins(pipit_graph *c, const uint8_t *need, int32_t n, int32_t *twin) {
    for (int32_t j = 0; j < n; j++) {
        twin[j] = -1;
        if (!need[j]) continue;
        twin[j] = (pipit__ops[c->nodes[j].op].flags & OPF_LEAF) ? twin_leaf(c, j) : twin_op(c, j, twin);
        if (twin[j] < 0) return c->status ? c->status : PIPIT_STATUS_INVALID;
    }
    return PIPIT_STATUS_OK;
}

pipit_status pipit__autocast(const pipit_graph *g, int32_t loss, const int32_t *outs, int nout,
                             pipit_graph **out, int32_t *loss_out, int32_t *outs_out) {
    *out = NULL;
    if (g->status != PIPIT_STATUS_OK) return pipit__err(g->status, "graph has a build error: %s", g->errmsg);
    int32_t n = forward_end(g);
    if (loss < 0 || loss >= n) return pipit__err(PIPIT_STATUS_INVALID, "loss is not a forward value of this graph");
    for (int i = 0; i < nout; i++)
        if (outs[i] >= n)
            return pipit__err(PIPIT_STATUS_INVALID, "options.outputs[%d] is not a forward value of this graph", i);
    uint8_t *need = mark_needed(g, n, loss, outs, nout);
    int32_t *twin = pipit__malloc(sizeof *twin * (size_t)PIPIT_MAX(n, 1));
    pipit_graph *c = need && twin ? pipit__graph_clone(g, n) : NULL;
    pipit_status s = c ? build_twins(c, need, n, twin) : pipit__err(PIPIT_STATUS_NOMEM, "autocast: out of memory");
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
    if (s) {
        pipit_graph_free(c);
        return s;
    }
    *out = c;
    return PIPIT_STATUS_OK;
}
