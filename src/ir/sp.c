/*
 * sp.c — sequence parallelism in the graph (Megatron's, beside tensor
 * parallelism; docs/architecture.md section 11): the switch the model
 * builders read (pipit_graph_set_sequence_parallel) and the three ops that
 * move a value between "every rank holds all of it" and "rank t holds
 * block t of an axis" (ops.c: SP_GATHER, SP_SCATTER, SP_SPLIT; the runtime
 * side is runtime/tp.c's collective).
 */
#include "ir/graph.h"

static int bad_handle(const pipit_graph *g, const char *fn) {
    if (g && g->magic == PIPIT_GRAPH_MAGIC) return 0;
    pipit__err(PIPIT_STATUS_MISUSE, "%s: %s", fn, g ? "invalid graph handle (freed, or not a pipit_graph)" : "graph is NULL");
    return 1;
}

pipit_status pipit_graph_set_sequence_parallel(pipit_graph *g, int on) {
    if (bad_handle(g, __func__)) return PIPIT_STATUS_MISUSE;
    if (on != 0 && on != 1)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "%s: on = %d is not 0 (every rank holds the whole sequence) or 1 (sequence parallel)",
                          __func__, on);
    g->sp = on;
    return PIPIT_STATUS_OK;
}

int pipit_graph_sequence_parallel(const pipit_graph *g) { return bad_handle(g, __func__) ? 0 : g->sp; }

/* The op along `axis` (negative: from the end) of x; the shape rule
 * refuses an axis out of range or one that does not split over T. */
static pipit_val sp_op(pipit_graph *g, const char *fn, pipit__opcode op, pipit_val x, int axis) {
    if (bad_handle(g, fn)) return (pipit_val){g, -1};
    int nd = x.g == g && x.id >= 0 && x.id < g->n ? g->nodes[x.id].ndim : 0;
    int64_t iattr[4] = {axis < 0 ? (int64_t)axis + nd : axis, 0, 0, 0};
    return pipit__build(g, fn, op, 1, &x, NULL, iattr);
}

pipit_val pipit_sp_gather(pipit_graph *g, pipit_val x, int axis) {
    return sp_op(g, __func__, PIPIT_OP_SP_GATHER, x, axis);
}
pipit_val pipit_sp_scatter(pipit_graph *g, pipit_val x, int axis) {
    return sp_op(g, __func__, PIPIT_OP_SP_SCATTER, x, axis);
}
pipit_val pipit_sp_split(pipit_graph *g, pipit_val x, int axis) {
    return sp_op(g, __func__, PIPIT_OP_SP_SPLIT, x, axis);
}
