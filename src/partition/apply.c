/*
 * apply.c — pipit_partition_apply: rewrite the graph so that its stages
 * are the partition's. The nodes are copied in order; the user's yields
 * are dropped (a yield is an identity: its readers read its input), and
 * after the last op of each stage but the last a yield is appended on the
 * value the cut carries, which every later reader then reads instead.
 * The other nodes keep their relative order, so gradient contributions
 * are added in the same order as before and the numbers do not change.
 */
#include <string.h>

#include "partition/partition.h"
#include "util/checked.h"

static pipit_status check_apply(const pipit_partition_result *p, const pipit_graph *g, const pipit_val *vals, int nvals) {
    if (!p || p->magic != PIPIT_PARTITION_MAGIC)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_partition_apply: invalid partition handle (NULL, freed, or not a pipit_partition_result)");
    if (!g || g->magic != PIPIT_GRAPH_MAGIC)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_partition_apply: invalid graph handle");
    if (g != p->g || g->n != p->gn)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "pipit_partition_apply: the graph is not the one partitioned, or it changed since (%d nodes, "
                          "partitioned with %d; apply once)",
                          (int)g->n, (int)p->gn);
    if (nvals < 0 || (nvals > 0 && !vals))
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_partition_apply: vals is NULL or nvals (%d) < 0", nvals);
    for (int i = 0; i < nvals; i++)
        if (vals[i].g != g || vals[i].id < 0 || vals[i].id >= g->n)
            return pipit__err(PIPIT_STATUS_INVALID, "pipit_partition_apply: vals[%d] is not a value of this graph", i);
    return PIPIT_STATUS_OK;
}

static pipit__node yield_of(const pipit__node *v, int32_t id) {
    pipit__node y;
    memset(&y, 0, sizeof y);
    y.op = PIPIT_OP_YIELD;
    y.dtype = v->dtype;
    y.ndim = v->ndim;
    y.nin = 1;
    y.in[0] = id;
    memcpy(y.shape, v->shape, sizeof y.shape);
    y.stage = -1;
    y.origin = -1;
    return y;
}

static pipit_status partition_apply_impl(const pipit_partition_result *p, pipit_graph *g, pipit_val *vals, int nvals) {
    pipit_status s = check_apply(p, g, vals, nvals);
    if (s) return s;
    int32_t n = g->n, cap; /* at most S - 1 yields more */
    if (__builtin_add_overflow(n, p->S, &cap))
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_partition_apply: %d nodes and %d yields exceed a graph's size", (int)n,
                          p->S - 1);
    pipit__node *nodes = pipit__calloc((size_t)cap, sizeof *nodes);
    int32_t *map = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(n, 1));
    int32_t *own = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(n, 1)); /* map before any redirect */
    int32_t *cut_at = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(n, 1));
    if (!nodes || !map || !own || !cut_at) {
        pipit__free(nodes);
        pipit__free(map);
        pipit__free(own);
        pipit__free(cut_at);
        return pipit__err(PIPIT_STATUS_NOMEM, "pipit_partition_apply: out of memory");
    }
    for (int32_t i = 0; i < n; i++) cut_at[i] = -1;
    for (int c = 0; c + 1 < p->S; c++) cut_at[p->op_node[p->bounds[c + 1] - 1]] = c;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        const pipit__node *old = &g->nodes[i];
        if (old->op == PIPIT_OP_YIELD) { /* the user's: its readers read its input */
            own[i] = map[i] = map[old->in[0]];
            continue;
        }
        nodes[m] = *old;
        for (int k = 0; k < old->nin; k++) nodes[m].in[k] = map[old->in[k]];
        own[i] = map[i] = m++;
        if (cut_at[i] < 0) continue;
        int32_t v = p->carry[cut_at[i]];
        nodes[m] = yield_of(&nodes[map[v]], map[v]);
        map[v] = m++; /* later readers of v read the yield */
    }
    for (int32_t k = 0; k < g->ngradset; k++)
        for (int j = 0; j < 2; j++) g->gradset[k][j] = own[g->gradset[k][j]];
    for (int i = 0; i < nvals; i++) vals[i].id = own[vals[i].id]; /* a carried value stays itself, not its yield */
    pipit__free(g->nodes); /* the names moved to the new array */
    g->nodes = nodes;
    g->n = m;
    g->cap = cap;
    pipit__graph_names_moved(g);
    pipit__free(map);
    pipit__free(own);
    pipit__free(cut_at);
    return PIPIT_STATUS_OK;
}

pipit_status pipit_partition_apply(const pipit_partition_result *p, pipit_graph *g, pipit_val *vals, int nvals) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(partition_apply_impl(p, g, vals, nvals), gen0, __func__);
}
