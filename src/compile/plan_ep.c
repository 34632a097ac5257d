/*
 * plan_ep.c — expert parallelism's checks at compile (docs/architecture.md,
 * "Mixture of experts"): the graph's E against the mesh the options ask for.
 */
#include "compile/plan.h"

pipit_status pipit__check_ep(pipit__plan *p) {
    const pipit_graph *g = p->g;
    p->E = pipit__graph_ep(g);
    if (p->E == 1) return PIPIT_STATUS_OK;
    if (p->D % p->E != 0)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "the graph describes one of %d expert-parallel ranks (pipit_graph_set_expert_parallel), "
                          "which must divide options.data_parallel (%d): the EP groups are %d consecutive replicas",
                          p->E, p->D, p->E);
    if (p->T > 1)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "expert parallelism (E = %d) with tensor parallelism (T = %d) is not built: use one of them",
                          p->E, p->T);
    if (p->reshard)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "expert parallelism (E = %d) with options.reshard_after_forward is not built yet: ZeRO-3's "
                          "per-task gathers do not know the expert params' D/E holders (gather once per step)",
                          p->E);
    if (g->n >= PIPIT_TP_NORM_ID)
        return pipit__err(PIPIT_STATUS_INVALID, "an expert-parallel graph may have at most %d nodes (has %d)",
                          PIPIT_TP_NORM_ID, (int)g->n);
    return PIPIT_STATUS_OK;
}
