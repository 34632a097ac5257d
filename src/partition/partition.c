/*
 * partition.c — pipit_partition: the op sequence of a graph (its
 * per-microbatch forward ops in program order, the user's yields seen
 * through), where it may be cut, what each op costs (cost.c) and holds in
 * memory, the dynamic program (dp.c), and the result's getters.
 */
#include <math.h>
#include <string.h>

#include "partition/partition.h"
#include "util/checked.h"
#include "pipit_inspect.h"

typedef struct {
    const pipit_graph *g;
    const pipit_partition_options *opt;
    int S;
    uint8_t *live, *act;  /* [g->n] the loss depends on it; it depends on a graph input */
    int32_t *op_of;       /* [g->n] op index of a node, -1 */
    int n;
    int32_t *op_node;     /* [n] */
    uint8_t *cut_ok;      /* [n] */
    int32_t *carry;       /* [n] the value a cut after op i carries */
    double *fwd, *cost, *act_bytes; /* [n] */
    double *inflight;     /* [S] microbatches whose activations stage s holds at once */
    int per_rank;         /* most stages any rank holds */
    int ranks_balanced;   /* the DP minimised rank loads, not stage costs */
    int *rank_of;         /* [S] the schedule's stage -> rank (identity without one) */
    uint32_t *stamp;      /* [g->n] scratch for counting each param once per stage */
    uint32_t now;
} an_ctx;

static void an_free(an_ctx *c) {
    pipit__free(c->live);
    pipit__free(c->act);
    pipit__free(c->op_of);
    pipit__free(c->op_node);
    pipit__free(c->cut_ok);
    pipit__free(c->carry);
    pipit__free(c->fwd);
    pipit__free(c->cost);
    pipit__free(c->act_bytes);
    pipit__free(c->inflight);
    pipit__free(c->rank_of);
    pipit__free(c->stamp);
}

static int is_leaf(const pipit__node *n) { return (pipit__ops[n->op].flags & OPF_LEAF) != 0; }

/* live: what the loss depends on; act: per-microbatch values (they depend
 * on a graph input; values of params alone run once, before the loop). The
 * ops are the live per-microbatch nodes that are not yields. */
static void find_ops(an_ctx *c, int32_t loss) {
    const pipit_graph *g = c->g;
    c->live[loss] = 1;
    for (int32_t i = loss; i >= 0; i--)
        if (c->live[i])
            for (int k = 0; k < g->nodes[i].nin; k++) c->live[pipit__unyield(g, g->nodes[i].in[k])] = 1;
    for (int32_t i = 0; i < g->n; i++) {
        const pipit__node *n = &g->nodes[i];
        c->act[i] = n->op == PIPIT_OP_INPUT && !(n->flags & NODE_GRADOF);
        for (int k = 0; k < n->nin; k++) c->act[i] |= c->act[n->in[k]];
        c->op_of[i] = -1;
        if (c->live[i] && c->act[i] && !is_leaf(n) && n->op != PIPIT_OP_YIELD) {
            c->op_of[i] = c->n;
            c->op_node[c->n++] = i;
        }
    }
}

/* Whether one of the user's yields sits between ops k and k+1 and carries v. */
static int yield_between(const an_ctx *c, int k, int32_t v) {
    for (int32_t y = c->op_node[k] + 1; y < c->op_node[k + 1]; y++)
        if (c->g->nodes[y].op == PIPIT_OP_YIELD && pipit__unyield(c->g, y) == v) return 1;
    return 0;
}

/* A cut after op k is valid when exactly one op's value is read after it.
 * One sweep: op i crosses the cuts k in [i, last use of i). */
static pipit_status find_cuts(an_ctx *c) {
    const pipit_graph *g = c->g;
    int n = c->n;
    int32_t *last = pipit__malloc(sizeof(int32_t) * (size_t)PIPIT_MAX(n, 1));
    int64_t *ends = pipit__calloc(2 * (size_t)PIPIT_MAX(n, 1), sizeof *ends); /* per op j: how many, and which, stop at j */
    if (!last || !ends) {
        pipit__free(last);
        pipit__free(ends);
        return pipit__err(PIPIT_STATUS_NOMEM, "pipit_partition: out of memory");
    }
    for (int i = 0; i < n; i++) last[i] = -1;
    for (int j = 0; j < n; j++) {
        const pipit__node *nd = &g->nodes[c->op_node[j]];
        for (int k = 0; k < nd->nin; k++) {
            int32_t o = c->op_of[pipit__unyield(g, nd->in[k])];
            if (o >= 0) last[o] = PIPIT_MAX(last[o], j);
        }
    }
    for (int i = 0; i < n; i++)
        if (last[i] >= 0) ends[2 * last[i]]++, ends[2 * last[i] + 1] += i;
    int64_t crossing = 0, sum = 0; /* the crossing ops, and the sum of their indices */
    for (int k = 0; k + 1 < n; k++) {
        if (last[k] > k) crossing++, sum += k;
        crossing -= ends[2 * k], sum -= ends[2 * k + 1];
        c->cut_ok[k] = crossing == 1;
        if (!c->cut_ok[k]) continue;
        c->carry[k] = c->op_node[sum];
        if (c->opt->yields == PIPIT_PARTITION_YIELDS_AS_CUTS) c->cut_ok[k] = (uint8_t)yield_between(c, k, c->carry[k]);
    }
    pipit__free(last);
    pipit__free(ends);
    return PIPIT_STATUS_OK;
}

static pipit_status op_costs(an_ctx *c, int32_t loss) {
    pipit__cost_model m;
    pipit_status s = pipit__cost_model_init(c->opt, &m);
    if (s) return s;
    double *bwd = pipit__calloc((size_t)c->g->n, sizeof *bwd);
    if (!bwd) return pipit__err(PIPIT_STATUS_NOMEM, "pipit_partition: out of memory");
    s = pipit__backward_costs(&m, c->g, loss, c->opt->remat, bwd);
    for (int i = 0; i < c->n && !s; i++) {
        int32_t id = c->op_node[i];
        c->fwd[i] = pipit__node_cost(&m, c->g, id);
        c->cost[i] = (c->opt->remat == PIPIT_REMAT_FULL ? 2 * c->fwd[i] : c->fwd[i]) + bwd[id];
        c->act_bytes[i] = pipit__node_runs(&c->g->nodes[id]) ? (double)pipit__node_bytes(&c->g->nodes[id]) : 0;
    }
    pipit__free(bwd);
    return s;
}

/* Microbatches in flight per stage: the schedule's unit-cost simulation
 * (a rank's peak live (stage, microbatch) pairs shared among its stages),
 * or S - s without a schedule (1F1B on S ranks). */
static pipit_status in_flight(an_ctx *c) {
    const pipit_schedule *sch = c->opt->schedule;
    c->per_rank = 1;
    for (int s = 0; s < c->S; s++) c->rank_of[s] = sch ? pipit_schedule_stage_rank(sch, s) : s;
    if (!sch) {
        for (int s = 0; s < c->S; s++) c->inflight[s] = c->S - s;
        return PIPIT_STATUS_OK;
    }
    pipit_sim_result *r = NULL;
    pipit_status st = pipit_schedule_simulate(sch, NULL, &r);
    if (st) return st;
    int P = pipit_schedule_ranks(sch);
    for (int rank = 0; rank < P; rank++) {
        int held = 0;
        for (int s = 0; s < c->S; s++) held += pipit_schedule_stage_rank(sch, s) == rank;
        c->per_rank = PIPIT_MAX(c->per_rank, held);
        for (int s = 0; s < c->S; s++)
            if (pipit_schedule_stage_rank(sch, s) == rank)
                c->inflight[s] = ceil((double)pipit_sim_result_peak_live(r, rank) / PIPIT_MAX(held, 1));
    }
    pipit_sim_result_free(r);
    return PIPIT_STATUS_OK;
}

/* Bytes stage s holds with ops [a, b): each param it reads once (value,
 * gradient, optimizer state), one accumulator per use, and its forward
 * values (with remat: the largest one, standing for its input) for the
 * microbatches in flight. */
static double stage_bytes(void *ctx, int s, int a, int b) {
    an_ctx *c = ctx;
    const pipit_graph *g = c->g;
    int slots = c->opt->optimizer_slots ? c->opt->optimizer_slots : 2;
    double fixed = 0, act = 0;
    c->now++;
    for (int i = a; i < b; i++) {
        act = c->opt->remat == PIPIT_REMAT_FULL ? PIPIT_MAX(act, c->act_bytes[i]) : act + c->act_bytes[i];
        const pipit__node *n = &g->nodes[c->op_node[i]];
        for (int k = 0; k < n->nin; k++) {
            int32_t r = pipit__unyield(g, n->in[k]);
            if (g->nodes[r].op != PIPIT_OP_PARAM) continue;
            double bytes = (double)pipit__node_bytes(&g->nodes[r]);
            fixed += bytes; /* this use's accumulator */
            if (c->stamp[r] != c->now) fixed += bytes * (2 + slots);
            c->stamp[r] = c->now;
        }
    }
    return fixed + act * c->inflight[s];
}

static pipit_status check_args(const pipit_graph *g, pipit_val loss, const pipit_partition_options *opt,
                               pipit_partition_result **out, int *S) {
    if (!g || !opt || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_partition: %s is NULL", !g ? "graph" : !opt ? "options" : "out");
    *out = NULL;
    pipit_status s = pipit_graph_status(g);
    if (s) {
        pipit__err_prefix("pipit_partition");
        return s;
    }
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].flags & NODE_BWD)
            return pipit__err(PIPIT_STATUS_MISUSE, "pipit_partition: the graph is already compiled: partition it before pipit_compile");
    if (loss.g != g || loss.id < 0 || loss.id >= g->n || g->nodes[loss.id].ndim != 0)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_partition: loss is not a scalar value of this graph");
    *S = opt->schedule ? pipit_schedule_stages(opt->schedule) : opt->stages;
    if (opt->schedule && opt->stages && opt->stages != *S)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_partition: stages = %d but the schedule has %d stages", opt->stages, *S);
    if (*S < 1 || *S > PIPIT_MAX_STAGES)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_partition: stages must be in 1..%d (got %d; set options.stages or options.schedule)",
                          PIPIT_MAX_STAGES, *S);
    if ((unsigned)opt->yields > PIPIT_PARTITION_YIELDS_AS_CUTS)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_partition: yields = %d is not a pipit_partition_yields", (int)opt->yields);
    if (opt->remat < PIPIT_REMAT_NONE || opt->remat > PIPIT_REMAT_POINTWISE)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_partition: remat must be 0 (none), 1 (full) or 2 (pointwise), got %d",
                          opt->remat);
    if (!(opt->mem_limit >= 0) || !isfinite(opt->mem_limit) || opt->optimizer_slots < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_partition: mem_limit (%g) and optimizer_slots (%d) must be >= 0",
                          opt->mem_limit, opt->optimizer_slots);
    return PIPIT_STATUS_OK;
}

static pipit_status an_alloc(an_ctx *c) {
    size_t N = (size_t)PIPIT_MAX(c->g->n, 1);
    c->live = pipit__calloc(N, 1);
    c->act = pipit__calloc(N, 1);
    c->op_of = pipit__calloc(N, sizeof *c->op_of);
    c->op_node = pipit__calloc(N, sizeof *c->op_node);
    c->cut_ok = pipit__calloc(N, 1);
    c->carry = pipit__calloc(N, sizeof *c->carry);
    c->fwd = pipit__calloc(N, sizeof *c->fwd);
    c->cost = pipit__calloc(N, sizeof *c->cost);
    c->act_bytes = pipit__calloc(N, sizeof *c->act_bytes);
    c->inflight = pipit__calloc((size_t)c->S, sizeof *c->inflight);
    c->rank_of = pipit__calloc((size_t)c->S, sizeof *c->rank_of);
    c->stamp = pipit__calloc(N, sizeof *c->stamp);
    if (c->live && c->act && c->op_of && c->op_node && c->cut_ok && c->carry && c->fwd && c->cost && c->act_bytes &&
        c->inflight && c->rank_of && c->stamp)
        return PIPIT_STATUS_OK;
    return pipit__err(PIPIT_STATUS_NOMEM, "pipit_partition: out of memory");
}

/* The names of the first and last param stage ops [a, b) read. */
static pipit_status stage_params(const an_ctx *c, int a, int b, char **first, char **last) {
    const char *f = NULL, *l = NULL;
    for (int i = a; i < b; i++) {
        const pipit__node *n = &c->g->nodes[c->op_node[i]];
        for (int k = 0; k < n->nin; k++) {
            const pipit__node *r = &c->g->nodes[pipit__unyield(c->g, n->in[k])];
            if (r->op != PIPIT_OP_PARAM) continue;
            if (!f) f = r->name;
            l = r->name;
        }
    }
    *first = f ? pipit__strdup(f) : NULL;
    *last = l ? pipit__strdup(l) : NULL;
    return (f && !*first) || (l && !*last) ? pipit__err(PIPIT_STATUS_NOMEM, "pipit_partition: out of memory")
                                           : PIPIT_STATUS_OK;
}

static pipit_status infeasible(const an_ctx *c, double min_limit) {
    int cuts = 0;
    for (int k = 0; k + 1 < c->n; k++) cuts += c->cut_ok[k];
    if (cuts < c->S - 1)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "pipit_partition: %d stages need %d cuts, but the graph has only %d valid cut point%s (%s)",
                          c->S, c->S - 1, cuts, cuts == 1 ? "" : "s",
                          c->opt->yields == PIPIT_PARTITION_YIELDS_AS_CUTS
                              ? "yields = YIELDS_AS_CUTS: only the user's yields where one value crosses"
                              : "places where exactly one per-microbatch value crosses");
    return pipit__err(PIPIT_STATUS_INVALID,
                      "pipit_partition: no cut into %d stages fits the memory limit of %.0f bytes per rank; the "
                      "smallest feasible limit is %.0f bytes",
                      c->S, c->opt->mem_limit, min_limit * c->per_rank);
}

/* Fills the result from the chosen bounds; the op arrays move from c to p
 * once nothing can fail. */
static pipit_status fill_result(an_ctx *c, const int *bounds, pipit_partition_result *p) {
    int S = c->S;
    p->magic = PIPIT_PARTITION_MAGIC;
    p->g = c->g;
    p->gn = c->g->n;
    p->S = S;
    p->n = c->n;
    p->measured = c->opt->profile != NULL;
    p->ranks_balanced = c->ranks_balanced;
    p->bounds = pipit__malloc(sizeof(int) * ((size_t)S + 1));
    p->carry = pipit__calloc((size_t)S, sizeof *p->carry);
    p->stage_fwd = pipit__calloc((size_t)S, sizeof(double));
    p->stage_cost = pipit__calloc((size_t)S, sizeof(double));
    p->stage_bytes = pipit__calloc((size_t)S, sizeof(double));
    p->first_param = pipit__calloc((size_t)S, sizeof(char *));
    p->last_param = pipit__calloc((size_t)S, sizeof(char *));
    if (!p->bounds || !p->carry || !p->stage_fwd || !p->stage_cost || !p->stage_bytes || !p->first_param || !p->last_param)
        return pipit__err(PIPIT_STATUS_NOMEM, "pipit_partition: out of memory");
    memcpy(p->bounds, bounds, sizeof(int) * ((size_t)S + 1));
    for (int s = 0; s < S; s++) {
        int a = bounds[s], b = bounds[s + 1];
        if (s + 1 < S) p->carry[s] = c->carry[b - 1];
        p->stage_fwd[s] = pipit__seg_cost(c->fwd, a, b);
        p->stage_cost[s] = pipit__seg_cost(c->cost, a, b);
        p->stage_bytes[s] = stage_bytes(c, s, a, b);
        pipit_status st = stage_params(c, a, b, &p->first_param[s], &p->last_param[s]);
        if (st) return st;
    }
    p->op_node = c->op_node, c->op_node = NULL;
    p->fwd = c->fwd, c->fwd = NULL;
    p->cost = c->cost, c->cost = NULL;
    p->rank_of = c->rank_of, c->rank_of = NULL;
    return PIPIT_STATUS_OK;
}

static pipit_status partition_impl(const pipit_graph *g, pipit_val loss, const pipit_partition_options *opt,
                                   pipit_partition_result **out) {
    an_ctx c = {.g = g, .opt = opt};
    pipit_status s = check_args(g, loss, opt, out, &c.S);
    if (s) return s;
    s = an_alloc(&c);
    if (!s) {
        find_ops(&c, loss.id);
        s = find_cuts(&c);
    }
    if (!s && c.n == 0)
        s = pipit__err(PIPIT_STATUS_INVALID, "pipit_partition: the loss depends on no per-microbatch op (none reads a graph input)");
    if (!s) {
        s = op_costs(&c, loss.id);
    }
    if (!s) s = in_flight(&c);
    int *bounds = s ? NULL : pipit__malloc(sizeof(int) * ((size_t)c.S + 1));
    if (!s && !bounds) s = pipit__err(PIPIT_STATUS_NOMEM, "pipit_partition: out of memory");
    if (!s) {
        pipit__dp_problem pr = {c.n, c.S, c.cost, c.cut_ok, opt->mem_limit > 0 ? stage_bytes : NULL, &c,
                                opt->mem_limit / c.per_rank, c.rank_of};
        double worst = 0, min_limit = 0;
        s = pipit__partition_dp(&pr, bounds, &worst, &min_limit);
        if (s == PIPIT_STATUS_INVALID) s = infeasible(&c, min_limit);
        c.ranks_balanced = !s && pipit__dp_balances_ranks(&pr);
    }
    pipit_partition_result *p = s ? NULL : pipit__calloc(1, sizeof *p);
    if (!s && !p) s = pipit__err(PIPIT_STATUS_NOMEM, "pipit_partition: out of memory");
    if (!s) s = fill_result(&c, bounds, p);
    pipit__free(bounds);
    an_free(&c);
    if (s) {
        pipit_partition_free(p);
        return s;
    }
    *out = p;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_partition(const pipit_graph *g, pipit_val loss, const pipit_partition_options *opt,
                             pipit_partition_result **out) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(partition_impl(g, loss, opt, out), gen0, __func__);
}

void pipit_partition_free(pipit_partition_result *p) {
    if (!p || p->magic != PIPIT_PARTITION_MAGIC) return; /* NULL, freed, or not a partition */
    for (int s = 0; s < p->S && p->first_param; s++) pipit__free(p->first_param[s]);
    for (int s = 0; s < p->S && p->last_param; s++) pipit__free(p->last_param[s]);
    pipit__free(p->first_param);
    pipit__free(p->last_param);
    pipit__free(p->op_node);
    pipit__free(p->bounds);
    pipit__free(p->carry);
    pipit__free(p->fwd);
    pipit__free(p->cost);
    pipit__free(p->stage_fwd);
    pipit__free(p->stage_cost);
    pipit__free(p->stage_bytes);
    pipit__free(p->rank_of);
    p->magic = 0xdeadu;
    pipit__free(p);
}
