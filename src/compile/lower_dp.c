/*
 * lower_dp.c — where the data-parallel gradient exchange goes in a rank's
 * program (runtime/dp.c runs it). Each held param's gradient is summed over
 * the D replicas, each shard by its owner in replica order, then sent back
 * (all-gather) unless ZeRO-1 keeps it sharded. A param held by one rank
 * alone, whose uses all accumulate in that rank's loop, is exchanged in the
 * loop: as soon as its last microbatch's last use is accumulated, its use
 * sums are added and its reduce-scatter leaves, while the rest of the
 * backward runs; the next steps of each exchange (the owner's receive and
 * sum + the all-gather's send, then the all-gather's receive) follow once
 * the backward has made as many gradient elements after it as it holds —
 * about as much compute as its transfer takes, so the receive usually finds
 * the shards there. Whatever the loop did not finish, and every other
 * param, is exchanged after the loop, all sends of a phase before its
 * receives. Every replica runs the same program, so the bits are those of
 * the exchange after the loop (the sums are in replica order either way).
 */
#include <stdlib.h>
#include <string.h>

#include "compile/lowering.h"

int pipit__dp_serial(void) {
    const char *v = getenv("PIPIT_BENCH_DP_SERIAL");
    return v && strcmp(v, "1") == 0;
}

int pipit__dp_sharded_grads(const pipit__plan *p) { return p->zero1 && !p->g->ngradset; }

static uint8_t *state_of(const lowering *L, int me) { return &L->dp_state[(size_t)me * (size_t)L->p->nparams]; }

/* The ranks whose instructions read each param: those of its loop readers
 * (their stage's rank) and of its pre- and post-loop readers. */
static pipit_status param_readers(const lowering *L, uint64_t *readers) {
    const pipit__plan *p = L->p;
    const pipit_graph *g = p->g;
    int32_t *param_at = pipit__malloc(sizeof *param_at * (size_t)PIPIT_MAX(g->n, 1));
    if (!param_at) return pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory");
    for (int32_t j = 0; j < g->n; j++) param_at[j] = -1;
    for (int i = 0; i < p->nparams; i++) param_at[p->params[i].node] = i;
    for (int32_t j = 0; j < g->n; j++) {
        int ph = L->st->phase[j];
        uint64_t ranks = ph == PH_F || ph == PH_B || ph == PH_W ? 1ull << L->stage_rank[L->st->stage[j]]
                         : ph == PH_PRE || ph == PH_POST || ph == PH_GRADPOST ? p->node_ranks[j]
                                                                              : 0;
        for (int k = 0; ranks && L->st->live[j] && k < g->nodes[j].nin; k++) {
            int i = param_at[pipit__alias_root(g, g->nodes[j].in[k])];
            if (i >= 0) readers[i] |= ranks;
        }
    }
    pipit__free(param_at);
    return PIPIT_STATUS_OK;
}

pipit_status pipit__dp_find_early(lowering *L) {
    const pipit__plan *p = L->p;
    size_t np = (size_t)PIPIT_MAX(p->nparams, 1);
    L->early_rank = pipit__malloc(sizeof *L->early_rank * np);
    L->dp_state = pipit__calloc((size_t)p->nranks * np, 1);
    L->left = pipit__malloc(sizeof *L->left * (size_t)PIPIT_MAX(p->ntargets, 1));
    L->order = pipit__malloc(sizeof *L->order * np);
    L->mark = pipit__malloc(sizeof *L->mark * np);
    uint64_t *readers = pipit__calloc(np, sizeof *readers);
    pipit_status s = !L->early_rank || !L->dp_state || !L->left || !L->order || !L->mark || !readers
                         ? pipit__err(PIPIT_STATUS_NOMEM, "lowering: out of memory")
                         : PIPIT_STATUS_OK;
    for (int i = 0; !s && i < p->nparams; i++) L->early_rank[i] = -1;
    int any = p->D > 1 && !p->forward_only && !pipit__dp_serial() && !p->g->ngradset;
    if (!s && any) s = param_readers(L, readers);
    for (int i = 0; !s && any && i < p->nparams; i++) {
        const pipit__param *pp = &p->params[i];
        uint64_t ranks = readers[i];
        int loop_only = pp->nuses > 0;
        for (int u = 0; u < pp->nuses; u++) loop_only &= !pp->post[u], ranks |= pp->use_ranks[u];
        if (loop_only && ranks && !(ranks & (ranks - 1))) L->early_rank[i] = __builtin_ctzll(ranks);
    }
    pipit__free(readers);
    return s;
}

pipit_status pipit__dp_begin_rank(lowering *L, int me) {
    const pipit__plan *p = L->p;
    for (int i = 0; i < p->ntargets; i++) {
        L->left[i] = 0;
        for (int u = 0; u < p->params[i].nuses; u++)
            L->left[i] += !p->params[i].post[u] && pipit__has_rank(p->params[i].use_ranks[u], me);
    }
    L->norder = L->rs_next = L->ag_next = 0;
    L->final_elems = 0;
    return PIPIT_STATUS_OK;
}

/* The exchanges the loop started advance one step each once the backward
 * has made as many gradient elements since their last step as they hold. */
static void advance(lowering *L, pipit__emitter *e, int me) {
    const pipit__plan *p = L->p;
    int gather = !pipit__dp_sharded_grads(p);
    uint8_t *st = state_of(L, me);
    while (L->ag_next < L->rs_next) {
        int j = L->order[L->ag_next];
        if (L->final_elems - L->mark[j] < (double)p->params[j].numel) break;
        if (gather) pipit__lower_post(e, INS_DP_AG_RECV, j, -1, -1);
        st[j] = DP_GATHERED, L->ag_next++;
    }
    while (L->rs_next < L->norder) {
        int j = L->order[L->rs_next];
        if (L->final_elems - L->mark[j] < (double)p->params[j].numel) break;
        pipit__lower_post(e, INS_DP_RS_RECV, j, -1, -1);
        if (gather) pipit__lower_post(e, INS_DP_AG_SEND, j, -1, -1);
        st[j] = DP_REDUCED, L->mark[j] = L->final_elems, L->rs_next++;
    }
}

void pipit__dp_after_acc(lowering *L, pipit__emitter *e, int i, int mb, int me) {
    pipit__plan *p = L->p;
    if (mb != p->M - 1 || i >= p->nparams || !L->early_rank || L->early_rank[i] != me || --L->left[i] > 0) return;
    if (p->params[i].nuses > 1) pipit__lower_gradsum(p, e, i, me, NULL); /* all its uses are here */
    L->final_elems += (double)p->params[i].numel;
    advance(L, e, me);
    pipit__lower_post(e, INS_DP_RS_SEND, i, -1, -1);
    state_of(L, me)[i] = DP_RS_SENT;
    L->mark[i] = L->final_elems;
    L->order[L->norder++] = i;
}

void pipit__dp_reduce(lowering *L, pipit__emitter *e, int me) {
    const pipit__plan *p = L->p;
    if (p->D == 1) return;
    int gather = !pipit__dp_sharded_grads(p);
    const uint8_t *st = state_of(L, me);
    if (pipit__dp_serial()) { /* one param at a time, to measure what overlap saves */
        for (int i = 0; i < p->nparams; i++) {
            if (!pipit__has_rank(p->params[i].holders, me)) continue;
            pipit__lower_post(e, INS_DP_RS_SEND, i, -1, -1);
            pipit__lower_post(e, INS_DP_RS_RECV, i, -1, -1);
            if (gather) pipit__lower_post(e, INS_DP_AG_SEND, i, -1, -1), pipit__lower_post(e, INS_DP_AG_RECV, i, -1, -1);
        }
        return;
    }
    /* the reduce-scatter's sends went out in the loop or with each GRADSUM */
    for (int i = 0; i < p->nparams; i++)
        if (pipit__has_rank(p->params[i].holders, me) && st[i] < DP_REDUCED)
            pipit__lower_post(e, INS_DP_RS_RECV, i, -1, -1);
    for (int i = 0; gather && i < p->nparams; i++)
        if (pipit__has_rank(p->params[i].holders, me) && st[i] < DP_REDUCED)
            pipit__lower_post(e, INS_DP_AG_SEND, i, -1, -1);
    for (int i = 0; gather && i < p->nparams; i++)
        if (pipit__has_rank(p->params[i].holders, me) && st[i] < DP_GATHERED)
            pipit__lower_post(e, INS_DP_AG_RECV, i, -1, -1);
}

/* Every holder applies the same update; with ZeRO-1 each replica updates
 * its shard and sends it to the others right away, while it updates the
 * next params; the receives come after every send. */
void pipit__dp_update(lowering *L, pipit__emitter *e, int me) {
    const pipit__plan *p = L->p;
    for (int i = 0; i < p->nparams; i++) {
        if (!pipit__has_rank(p->params[i].holders, me)) continue;
        pipit__lower_post(e, INS_UPDATE, i, -1, -1);
        if (p->zero1 && p->zero < 3) pipit__lower_post(e, INS_DP_PARAM_SEND, i, -1, -1);
    }
    /* ZeRO-3 keeps the shard: the next step gathers it before its loop (runtime/zero.c) */
    for (int i = 0; p->zero1 && p->zero < 3 && i < p->nparams; i++)
        if (pipit__has_rank(p->params[i].holders, me)) pipit__lower_post(e, INS_DP_PARAM_RECV, i, -1, -1);
}

pipit_status pipit__dp_check_early(const lowering *L) {
    const pipit__plan *p = L->p;
    for (int i = 0; L->early_rank && i < p->nparams; i++) {
        int r = L->early_rank[i];
        if (r >= 0 && p->params[i].holders != 1ull << r)
            return pipit__err(PIPIT_STATUS_INTERNAL,
                              "lowering: param '%s' was exchanged in rank %d's loop, but ranks 0x%llx hold it",
                              p->params[i].name ? p->params[i].name : "?", r,
                              (unsigned long long)p->params[i].holders);
    }
    return PIPIT_STATUS_OK;
}
