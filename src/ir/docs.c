/*
 * docs.c — packed documents in the graph: the setting the model builders
 * read (pipit_graph_set_documents). The masked attention itself is op
 * attention_doc (ops.c, pipit_attention_docs in graph.c).
 */
#include "ir/graph.h"

static int bad_handle(const pipit_graph *g, const char *fn) {
    if (g && g->magic == PIPIT_GRAPH_MAGIC) return 0;
    pipit__err(PIPIT_STATUS_MISUSE, "%s: %s", fn, g ? "invalid graph handle (freed, or not a pipit_graph)" : "graph is NULL");
    return 1;
}

pipit_status pipit_graph_set_documents(pipit_graph *g, int on) {
    if (bad_handle(g, __func__)) return PIPIT_STATUS_MISUSE;
    if (on != 0 && on != 1)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: on = %d is not 0 (one sequence) or 1 (packed documents)", __func__,
                          on);
    g->documents = on;
    return PIPIT_STATUS_OK;
}

int pipit_graph_documents(const pipit_graph *g) { return bad_handle(g, __func__) ? 0 : g->documents; }
