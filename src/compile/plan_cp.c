/*
 * plan_cp.c — context parallelism's checks at compile (docs/architecture.md,
 * "Context parallelism"): the graph's C against the mesh the options ask for.
 */
#include "compile/plan.h"
#include "ir/cp.h"

pipit_status pipit__check_cp(pipit__plan *p) {
    const pipit_graph *g = p->g;
    p->C = pipit__graph_cp(g);
    if (p->C == 1) return PIPIT_STATUS_OK;
    if (p->D % p->C != 0)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "the graph describes one of %d context-parallel ranks (pipit_graph_set_context_parallel), "
                          "which must divide options.data_parallel (%d): the context groups are %d consecutive "
                          "replicas sharing a sequence",
                          p->C, p->D, p->C);
    if (pipit__graph_ep(g) > 1)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "context parallelism (C = %d) with expert parallelism (E = %d) is not built: use one of them",
                          p->C, pipit__graph_ep(g));
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].op == PIPIT_OP_ATTENTION_DOC)
            return pipit__err(PIPIT_STATUS_INVALID,
                              "packed documents (attention_doc, node %d) with context parallelism (C = %d): its "
                              "mask sees this rank's chunks only; use pipit_attention_cp_docs (the ids gathered "
                              "over the group)",
                              (int)i, p->C);
    if (g->n >= PIPIT_TP_NORM_ID)
        return pipit__err(PIPIT_STATUS_INVALID, "a context-parallel graph may have at most %d nodes (has %d)",
                          PIPIT_TP_NORM_ID, (int)g->n);
    return PIPIT_STATUS_OK;
}
