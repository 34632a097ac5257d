/*
 * sim.c — one simulated training step: the per-stage costs of cost.c run
 * through the schedule simulator (pipit_schedule_simulate, stage messages
 * queued on their links), then each pipeline rank's data-parallel gradient
 * exchange, overlapped with the backward as the runtime overlaps it (each
 * layer's share leaves as soon as its stage's last backward has made it),
 * and the optimizer update (docs/sim.md); memory per rank; and the report
 * as JSON or text.
 */
#include <math.h>
#include <string.h>

#include "pipit_inspect.h"
#include "sim/sim.h"
#include "util/common.h"

typedef struct {
    int from, to;
    double fwd_bytes, bwd_bytes;
    long messages;
} sim_link;

typedef struct {
    double busy, end, peak_bytes, params, eparams, static_bytes, act_peak, opt_s;
    double dp_s, dp_total_s; /* the exchange left after the loop, and all of it */
    int peak_live;
} rank_row;

struct pipit_sim_report {
    pipit_sim_config cfg;
    char hw_name[64], sched_name[64];
    double mem_capacity;
    pipit_sim_summary sum;
    pipit__sim_model m;
    rank_row *ranks;    /* [P] */
    sim_link *links;    /* [nlinks] */
    int nlinks;
    double dp_bytes;    /* largest rank's gradient bytes per GPU in the DP exchange */
};

void pipit_sim_report_free(pipit_sim_report *r) {
    if (!r) return;
    pipit__sim_model_free(&r->m);
    pipit__free(r->ranks);
    pipit__free(r->links);
    pipit__free(r);
}

const char *pipit_recompute_name(pipit_recompute r) {
    switch (r) {
    case PIPIT_RECOMPUTE_NONE: return "none";
    case PIPIT_RECOMPUTE_FULL: return "full";
    case PIPIT_RECOMPUTE_POINTWISE: return "pointwise";
    }
    pipit__err(PIPIT_STATUS_INVALID, "%s: %d is not a pipit_recompute", __func__, (int)r);
    return "unknown";
}

/* Bytes per parameter at a step's peak: weights + gradients in the
 * training dtype, and the optimizer's state (Adam's two moments, plus fp32
 * master weights when the weights are 16-bit: ZeRO's 16 bytes per
 * parameter), sharded from ZeRO stage 1 on. As pipit's runtime does
 * (runtime/zero.c), ZeRO-2 and ZeRO-3 hold the full gradient (and
 * parameter) block during a step and keep a 1/dp shard of it between
 * steps: the peak grows by that shard, what stays between steps shrinks. */
static double bytes_per_param(int esize, int zero, int dp) {
    if (dp < 1) dp = 1;
    double opt = esize == 4 ? 8.0 : 12.0;
    double shards = dp > 1 ? (zero >= 3 ? 2.0 : zero >= 2 ? 1.0 : 0.0) * esize / dp : 0.0;
    return 2.0 * esize + (zero ? opt / dp : opt) + shards;
}

/* Adam touches master weights, gradient, both moments (read) and writes
 * them back (and the 16-bit copy): memory-bound. */
static double optimizer_time(const pipit_hw *hw, double params, int esize, int zero1, int dp) {
    double bytes = esize == 4 ? 28.0 : 24.0 + 2.0 * esize;
    return pipit__hw_mem_time(hw, params * bytes / (zero1 ? dp : 1));
}

/* The gradient group of one pipeline rank: its c x d replicas (t GPUs
 * apart, spanning t c d GPUs); of a stage's bytes, the dense share is
 * reduced over c d, the routed experts' share over the c d / ep ranks that
 * hold the same experts. */
static int grad_group(const pipit_sim_report *r) { return r->cfg.dp * r->m.cp; }
static double dp_time(const pipit_sim_report *r, const pipit_hw *hw, double bytes, double ebytes) {
    int n = grad_group(r);
    int intra = (double)r->cfg.tp * n <= hw->gpus_per_node;
    double bw = intra ? hw->intra_bw : hw->inter_bw, lat = intra ? hw->intra_lat : hw->inter_lat;
    return pipit__hw_allreduce_time(bytes - ebytes, n, bw, lat) + pipit__hw_allreduce_time(ebytes, n / r->m.ep, bw, lat);
}

/* ZeRO-3 with reshard_after_forward (runtime/zero_reshard.c), under a
 * 32-bit dtype: each param is gathered over the gradient group before every
 * task that reads it (F, B, BW; a W reads activations and output gradients,
 * not params), one param at a time with copied sends, inside the task (its
 * compute thread waits), instead of once per step; the peak holds the most
 * gathered at once (one layer's params while its task runs) instead of the
 * full block. A 16-bit dtype's loop reads the pre-loop's 16-bit copies: the
 * 32-bit params are gathered once (as stage 3) and nothing changes here. */
static int reshards(const pipit_sim_report *r) {
    return r->cfg.reshard_after_forward && r->cfg.zero1 == 3 && grad_group(r) > 1 && r->m.esize == 4;
}
static double stage_tensors(const pipit_sim_report *r, int st) { /* param tensors: a layer's, or the ends' one */
    return PIPIT_MAX(1.0, r->m.layers[st] * (r->cfg.gated_mlp ? 9.0 : 12.0));
}
/* The seconds one task of stage st spends gathering the stage's params. */
static double gather_time(const pipit_sim_report *r, const pipit_hw *hw, int st) {
    int n = grad_group(r), ne = n / r->m.ep;
    int intra = (double)r->cfg.tp * n <= hw->gpus_per_node;
    double bw = intra ? hw->intra_bw : hw->inter_bw, lat = intra ? hw->intra_lat : hw->inter_lat;
    double k = stage_tensors(r, st), e = r->m.esize, ep = r->m.eparams[st];
    double t = k * pipit__hw_allgather_time((r->m.params[st] - ep) * e / k, n, bw, lat);
    double kl = PIPIT_MAX(1.0, r->m.layers[st]); /* the routed experts: a stacked tensor per layer */
    if (ep > 0 && ne > 1) t += kl * pipit__hw_allgather_time(ep * e / kl, ne, bw, lat);
    return t;
}
static void book_gathers(pipit_sim_report *r, const pipit_hw *hw) {
    for (int st = 0; st < r->m.S; st++) {
        double g = gather_time(r, hw, st);
        r->m.f[st] += g;
        r->m.b[st] += g; /* B, or BW: the same booking */
    }
}
/* The params stage st holds at once under reshard: its largest layer's
 * (a stage's params over its layers; the ends' tables counted in) plus, for
 * a replica at most one gather ahead of another, two params' shards from
 * each other replica (as `pipit plan`'s report, inspect/memreport.c). */
static double reshard_gathered(const pipit_sim_report *r, int st) {
    double layer = r->m.params[st] / PIPIT_MAX(1.0, r->m.layers[st]);
    int n = grad_group(r);
    double shard = layer / (r->m.layers[st] > 0 ? (r->cfg.gated_mlp ? 9.0 : 12.0) : 1.0) / n;
    return (layer + 2.0 * (n - 1) * shard) * r->m.esize;
}

typedef struct {
    double ready, bytes, ebytes; /* ebytes: of bytes, the routed experts' */
} dp_chunk;

static int by_ready(const void *a, const void *b) {
    const dp_chunk *x = a, *y = b;
    return (x->ready > y->ready) - (x->ready < y->ready);
}

/* Rank q's data-parallel exchange as the runtime runs it: a stage's
 * gradients become final over its last backward task (the W, or BW, of the
 * last microbatch), one layer after another, and each layer's share is
 * all-reduced on the rank's DP link as soon as it is final, one share at a
 * time. Returns when the last share is done; *total: the shares' summed
 * time. */
static double dp_exchange(const pipit_sim_report *r, const pipit_schedule *s, const pipit_sim_result *res, int q,
                          const pipit_hw *hw, double *total) {
    const pipit_sim_config *c = &r->cfg;
    int n = 0;
    *total = 0;
    if (grad_group(r) <= 1) return 0;
    if (c->dp_after_flush) { /* one exchange of all the rank's gradients after its last task */
        int nt = pipit_schedule_num_tasks(s, q);
        double t0 = 0, t1 = 0, params = 0, eparams = 0;
        if (nt > 0) pipit_sim_result_task(res, q, nt - 1, &t0, &t1);
        for (int st = 0; st < r->m.S; st++)
            if (pipit_schedule_stage_rank(s, st) == q) params += r->m.params[st], eparams += r->m.eparams[st];
        *total = dp_time(r, hw, params * r->m.esize, eparams * r->m.esize);
        return t1 + *total;
    }
    dp_chunk *ch = pipit__malloc(sizeof *ch * ((size_t)c->layers + (size_t)r->m.S)); /* >= sum of the shares */
    if (!ch) return 0; /* out of memory: the exchange counts as hidden, the report says dp 0 */
    for (int i = 0; i < pipit_schedule_num_tasks(s, q); i++) {
        pipit_task t;
        double t0, t1;
        pipit_schedule_task(s, q, i, &t);
        if (t.mb != r->m.M - 1 || (t.kind != PIPIT_TASK_W && t.kind != PIPIT_TASK_BW)) continue;
        pipit_sim_result_task(res, q, i, &t0, &t1);
        int per = PIPIT_MAX(1, (int)r->m.layers[t.stage]); /* a stage of the embedding alone: one share */
        for (int j = 0; j < per; j++)
            ch[n++] = (dp_chunk){t0 + (t1 - t0) * (j + 1) / per, r->m.params[t.stage] * r->m.esize / per,
                                 r->m.eparams[t.stage] * r->m.esize / per};
    }
    qsort(ch, (size_t)n, sizeof *ch, by_ready);
    double link = 0;
    for (int j = 0; j < n; j++) {
        double x = dp_time(r, hw, ch[j].bytes, ch[j].ebytes);
        link = PIPIT_MAX(link, ch[j].ready) + x;
        *total += x;
    }
    pipit__free(ch);
    return link;
}

static pipit_status add_link(pipit_sim_report *r, int from, int to, double bytes, long n) {
    for (int i = 0; i < r->nlinks; i++)
        if (r->links[i].from == from && r->links[i].to == to) {
            r->links[i].fwd_bytes += bytes, r->links[i].messages += n;
            return PIPIT_STATUS_OK;
        }
    sim_link *nl = pipit__realloc(r->links, sizeof *nl * (size_t)(r->nlinks + 1));
    if (!nl) return pipit__err(PIPIT_STATUS_NOMEM, "sim: out of memory");
    r->links = nl;
    r->links[r->nlinks++] = (sim_link){from, to, bytes, 0, n};
    return PIPIT_STATUS_OK;
}

/* Every cross-rank stage boundary carries M activations forward and M
 * gradients back; the backward bytes are booked on the forward link. */
static pipit_status collect_links(pipit_sim_report *r, const pipit_schedule *s) {
    int S = r->m.S, M = r->m.M;
    for (int st = 0; st + 1 < S; st++) {
        int a = pipit_schedule_stage_rank(s, st), b = pipit_schedule_stage_rank(s, st + 1);
        if (a == b) continue;
        pipit_status e = add_link(r, a, b, M * r->m.p2p_bytes, 2L * M);
        if (e) return e;
    }
    for (int i = 0; i < r->nlinks; i++) r->links[i].bwd_bytes = r->links[i].fwd_bytes;
    return PIPIT_STATUS_OK;
}

static void fill_ranks(pipit_sim_report *r, const pipit_schedule *s, const pipit_sim_result *res,
                       const pipit_hw *hw) {
    const pipit_sim_config *c = &r->cfg;
    int P = r->m.P;
    for (int q = 0; q < P; q++) {
        rank_row *row = &r->ranks[q];
        int n = pipit_schedule_num_tasks(s, q);
        double st0 = 0, end = 0;
        if (n > 0) pipit_sim_result_task(res, q, n - 1, &st0, &end);
        row->end = end;
        row->busy = pipit_sim_result_busy(res, q);
        row->act_peak = pipit_sim_result_peak_bytes(res, q);
        row->peak_live = pipit_sim_result_peak_live(res, q);
        double work = 0, eparams = 0, gathered = 0, accum = 0;
        for (int st = 0; st < r->m.S; st++)
            if (pipit_schedule_stage_rank(s, st) == q) {
                row->params += r->m.params[st];
                eparams += r->m.eparams[st];
                work = PIPIT_MAX(work, r->m.work[st]);
                accum += r->m.accum[st];
                if (reshards(r)) gathered = PIPIT_MAX(gathered, reshard_gathered(r, st));
            }
        /* ZeRO shards over the gradient group: c d for the dense
         * parameters, c d / ep for the experts (each held by those only) */
        int ng = grad_group(r), ne = ng / r->m.ep;
        row->eparams = eparams;
        row->static_bytes = (row->params - eparams) * bytes_per_param(r->m.esize, c->zero1, ng) +
                            eparams * bytes_per_param(r->m.esize, c->zero1, ne);
        if (reshards(r)) /* the full params' block: the most gathered at once instead */
            row->static_bytes += gathered - row->params * r->m.esize;
        row->static_bytes += accum + r->m.dpbuf; /* held all step, as the runtime's blocks */
        row->peak_bytes = row->static_bytes + row->act_peak + work;
        r->dp_bytes = PIPIT_MAX(r->dp_bytes, row->params * r->m.esize);
        row->dp_s = PIPIT_MAX(0.0, dp_exchange(r, s, res, q, hw, &row->dp_total_s) - end);
        row->opt_s = optimizer_time(hw, row->params - eparams, r->m.esize, c->zero1, ng) +
                     optimizer_time(hw, eparams, r->m.esize, c->zero1, ne);
    }
}

/* Step = the last rank to finish its loop, its DP exchange and its update. */
static void summarize(pipit_sim_report *r, const pipit_sim_result *res, const pipit_hw *hw) {
    pipit_sim_summary *u = &r->sum;
    const pipit_sim_config *c = &r->cfg;
    u->pipeline_s = pipit_sim_result_step_time(res);
    u->bubble = pipit_sim_result_bubble(res);
    for (int q = 0; q < r->m.P; q++) {
        const rank_row *row = &r->ranks[q];
        double done = row->end + row->dp_s + row->opt_s;
        if (done > u->step_s) {
            u->step_s = done, u->dp_s = row->dp_s, u->optimizer_s = row->opt_s;
            u->dp_total_s = row->dp_total_s;
            u->dp_hidden = row->dp_total_s > 0 ? PIPIT_MAX(0.0, 1.0 - row->dp_s / row->dp_total_s) : 0.0;
        }
        u->peak_bytes_per_rank = PIPIT_MAX(u->peak_bytes_per_rank, row->peak_bytes);
    }
    u->gpus = c->tp * c->pp * c->dp * r->m.cp;
    u->model_flops = pipit__sim_model_flops(c, 1);
    u->tflops_per_gpu = u->model_flops / u->step_s / u->gpus / 1e12;
    u->hfu = u->tflops_per_gpu * 1e12 / r->m.peak;
    u->mfu = pipit__sim_model_flops(c, 0) / u->step_s / u->gpus / r->m.peak;
    u->tflops_causal = pipit__sim_model_flops_x(c, 1, 0.5) / u->step_s / u->gpus / 1e12;
    u->mfu_causal = pipit__sim_model_flops_x(c, 0, 0.5) / u->step_s / u->gpus / r->m.peak;
    u->tp_s_per_mb = r->m.tp_s_per_mb;
    u->tp_s_all_per_mb = r->m.tp_s_model_per_mb;
    u->microbatches = r->m.M, u->virt = r->m.V, u->stages = r->m.S;
    u->cp_s_per_mb = r->m.cp_s_per_mb, u->cp_bytes_per_layer = r->m.cp_bytes_per_layer;
    u->a2a_s_per_mb = r->m.a2a_s_per_mb, u->a2a_bytes_per_layer = r->m.a2a_bytes_per_layer;
    u->params_total = r->m.params_total, u->params_active = r->m.params_active, u->expert_slots = r->m.slots;
    r->mem_capacity = hw->mem_cap;
}

/* Megatron's blocking P2P: a stage whose neighbour sits on another rank
 * moves its activation (F) or its input gradient (B) there inside the task. */
static void book_transfers(pipit__sim_model *m, const pipit_schedule *s) {
    for (int st = 0; st + 1 < m->S; st++)
        if (pipit_schedule_stage_rank(s, st) != pipit_schedule_stage_rank(s, st + 1)) {
            m->f[st] += m->p2p_xfer;
            m->b[st + 1] += m->p2p_xfer;
        }
}

static pipit_status simulate(pipit_sim_report *r, const pipit_schedule *s, const pipit_hw *hw) {
    /* pipit: a stage message occupies its link, not its sender (zero-copy sends) */
    int blocking = r->cfg.blocking_p2p;
    if (blocking) book_transfers(&r->m, s);
    if (reshards(r)) book_gathers(r, hw);
    pipit_sim_costs costs = {.f = r->m.f, .b = r->m.b, .w = r->m.w, .act_bytes = r->m.act, .comm = r->m.comm,
                             .xfer = blocking ? 0 : r->m.p2p_xfer,
                             .pulled = !blocking && r->cfg.eager_limit > 0 && r->m.p2p_bytes > r->cfg.eager_limit};
    pipit_sim_result *res = NULL;
    pipit_status st = pipit_schedule_simulate(s, &costs, &res);
    if (st) return st;
    r->ranks = pipit__calloc((size_t)r->m.P, sizeof *r->ranks);
    if (!r->ranks) st = pipit__err(PIPIT_STATUS_NOMEM, "sim: out of memory");
    if (!st) {
        fill_ranks(r, s, res, hw);
        summarize(r, res, hw);
        st = collect_links(r, s);
    }
    pipit_sim_result_free(res);
    return st;
}

static pipit_status run(const pipit_sim_config *cfg, const pipit_hw *hw, pipit_sim_report *r) {
    int64_t M;
    pipit_status st = pipit__sim_microbatches(cfg, &M);
    if (st) return st;
    if (cfg->pp < 1) return pipit__err(PIPIT_STATUS_INVALID, "pp must be >= 1 (got %d)", cfg->pp);
    if (cfg->virt < 0) return pipit__err(PIPIT_STATUS_INVALID, "virtual must be >= 1 (got %d)", cfg->virt);
    if (cfg->zero1 < 0 || cfg->zero1 > 3)
        return pipit__err(PIPIT_STATUS_INVALID, "zero1 is the ZeRO stage, 0 to 3 (got %d)", cfg->zero1);
    if (cfg->reshard_after_forward && cfg->zero1 != 3)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "reshard_after_forward releases ZeRO-3's gathered parameters: it needs zero1 = 3 (got %d)",
                          cfg->zero1);
    const char *kname = (unsigned)cfg->schedule < PIPIT_SCHED_COUNT
                            ? pipit_schedule_kind_name((pipit_schedule_kind)cfg->schedule) : NULL;
    if (!kname) return pipit__err(PIPIT_STATUS_INVALID, "unknown schedule kind %d", cfg->schedule);
    snprintf(r->sched_name, sizeof r->sched_name, "%s", kname);
    snprintf(r->hw_name, sizeof r->hw_name, "%s", hw->name);
    pipit_schedule *s = NULL;
    st = pipit_schedule_build((pipit_schedule_kind)cfg->schedule, cfg->pp, cfg->virt, (int)M, &s);
    if (st) return st;
    int V = pipit_schedule_virtual(s);
    st = V < 1 ? pipit__err(PIPIT_STATUS_INVALID, "schedule %s has an uneven number of stages per rank", kname)
               : pipit__sim_model_build(cfg, hw, V,
                                        pipit_schedule_stage_rank(s, 0) ==
                                            pipit_schedule_stage_rank(s, pipit_schedule_stages(s) - 1),
                                        &r->m);
    if (!st) st = simulate(r, s, hw);
    pipit_schedule_free(s);
    return st;
}

pipit_status pipit_sim_run(const pipit_sim_config *cfg, const pipit_hw *hw, pipit_sim_report **out) {
    if (!cfg || !hw || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_sim_run: NULL %s", !cfg ? "config" : !hw ? "hardware" : "out");
    *out = NULL;
    unsigned long gen0 = pipit__err_gen();
    pipit_sim_report *r = pipit__calloc(1, sizeof *r);
    if (!r) return pipit__err(PIPIT_STATUS_NOMEM, "sim: out of memory");
    r->cfg = *cfg;
    r->cfg.dtype = NULL; /* not owned: the dtype is recorded in the model */
    pipit_status st = run(cfg, hw, r);
    pipit_sim_summary u;
    if (!st && !pipit_sim_report_summary(r, &u) &&
        !(isfinite(u.step_s) && u.step_s > 0 && isfinite(u.model_flops) && isfinite(u.peak_bytes_per_rank)))
        st = pipit__err(PIPIT_STATUS_INVALID, "pipit_sim_run: the model's step time, FLOPs or memory is not a finite "
                        "number (step %g s, %g FLOPs, %g bytes per rank): sizes beyond what the cost model represents",
                        u.step_s, u.model_flops, u.peak_bytes_per_rank);
    if (st) {
        pipit_sim_report_free(r);
        return pipit__err_fresh(st, gen0, __func__);
    }
    *out = r;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_sim_report_summary(const pipit_sim_report *r, pipit_sim_summary *out) {
    if (!r || !out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_sim_report_summary: NULL %s", r ? "out" : "report");
    *out = r->sum;
    return PIPIT_STATUS_OK;
}

static const rank_row *row_at(const pipit_sim_report *r, int rank, const char *fn) {
    if (!r) return pipit__err(PIPIT_STATUS_MISUSE, "%s: report is NULL", fn), NULL;
    if (rank < 0 || rank >= r->m.P)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: rank %d out of range [0, %d)", fn, rank, r->m.P), NULL;
    return &r->ranks[rank];
}

double pipit_sim_report_rank_peak_bytes(const pipit_sim_report *r, int rank) {
    const rank_row *row = row_at(r, rank, __func__);
    return row ? row->peak_bytes : -1;
}

double pipit_sim_report_rank_busy(const pipit_sim_report *r, int rank) {
    const rank_row *row = row_at(r, rank, __func__);
    return row ? row->busy : -1;
}

/* ---------------------------------------------------------------- output */

static void json_stages(FILE *f, const pipit_sim_report *r) {
    fprintf(f, "\"stages\":[");
    for (int s = 0; s < r->m.S; s++)
        fprintf(f, "%s{\"stage\":%d,\"f_s\":%.9g,\"b_s\":%.9g,\"w_s\":%.9g,\"act_bytes\":%.9g,\"params\":%.9g,"
                   "\"expert_params\":%.9g}",
                s ? "," : "", s, r->m.f[s], r->m.b[s], r->m.w[s], r->m.act[s], r->m.params[s], r->m.eparams[s]);
    fprintf(f, "]");
}

static void json_ranks(FILE *f, const pipit_sim_report *r) {
    fprintf(f, "\"ranks\":[");
    for (int q = 0; q < r->m.P; q++) {
        const rank_row *w = &r->ranks[q];
        fprintf(f,
                "%s{\"rank\":%d,\"busy_s\":%.9g,\"end_s\":%.9g,\"peak_bytes\":%.9g,\"static_bytes\":%.9g,"
                "\"activation_bytes\":%.9g,\"peak_live\":%d,\"params\":%.9g,\"dp_s\":%.9g,\"dp_total_s\":%.9g,"
                "\"optimizer_s\":%.9g,\"expert_params\":%.9g}",
                q ? "," : "", q, w->busy, w->end, w->peak_bytes, w->static_bytes, w->act_peak, w->peak_live,
                w->params, w->dp_s, w->dp_total_s, w->opt_s, w->eparams);
    }
    fprintf(f, "]");
}

static void json_links(FILE *f, const pipit_sim_report *r) {
    fprintf(f, "\"links\":[");
    for (int i = 0; i < r->nlinks; i++) {
        const sim_link *l = &r->links[i];
        fprintf(f, "%s{\"from\":%d,\"to\":%d,\"fwd_bytes\":%.9g,\"bwd_bytes\":%.9g,\"messages\":%ld}", i ? "," : "",
                l->from, l->to, l->fwd_bytes, l->bwd_bytes, l->messages);
    }
    fprintf(f, "]");
}

pipit_status pipit_sim_report_write_json(FILE *f, const pipit_sim_report *r) {
    if (!f || !r) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_sim_report_write_json: NULL %s", f ? "report" : "file");
    const pipit_sim_summary *u = &r->sum;
    const pipit_sim_config *c = &r->cfg;
    fprintf(f,
            "{\"hw\":\"%s\",\"schedule\":\"%s\",\"dtype\":\"%s\",\"layers\":%d,\"hidden\":%d,\"heads\":%d,"
            "\"kv_heads\":%d,\"ffn_hidden\":%.9g,\"mlp\":\"%s\",\"positions\":\"%s\",\"attention\":\"%s\",\"seq\":%d,"
            "\"vocab\":%d,\"micro_batch\":%d,\"global_batch\":%lld,\"recompute\":\"%s\",\"tp\":%d,\"pp\":%d,\"dp\":%d,"
            "\"virtual\":%d,\"microbatches\":%d,\"gpus\":%d,\"sp\":%s,\"cp\":%d,\"experts\":%d,\"top_k\":%d,"
            "\"shared_experts\":%d,\"moe_every\":%d,\"ep\":%d,",
            r->hw_name, r->sched_name, pipit__hw_dtype_name(r->m.dtype), c->layers, c->hidden, c->heads,
            c->kv_heads ? c->kv_heads : c->heads, r->m.ffn, c->gated_mlp ? "swiglu" : "gelu", c->rope ? "rope" : "learned",
            c->unfused_attention ? "unfused" : "flash", c->seq, c->vocab, c->micro_batch, (long long)c->global_batch,
            pipit_recompute_name(c->recompute), c->tp, c->pp, c->dp, u->virt, u->microbatches, u->gpus,
            c->sp ? "true" : "false", r->m.cp, c->experts, c->experts ? (c->top_k ? c->top_k : 2) : 0,
            c->shared_experts, c->experts ? (c->moe_every > 1 ? c->moe_every : 1) : 0, r->m.ep);
    fprintf(f,
            "\"step_s\":%.9g,\"tflops_per_gpu\":%.6g,\"mfu\":%.6g,\"hfu\":%.6g,\"bubble\":%.6g,"
            "\"peak_bytes_per_rank\":%.9g,\"mem_capacity\":%.9g,\"fits\":%s,\"model_flops\":%.9g,\"pipeline_s\":%.9g,"
            "\"dp_s\":%.9g,\"dp_total_s\":%.9g,\"dp_hidden\":%.6g,\"optimizer_s\":%.9g,"
            "\"tp_allreduce_s_per_microbatch\":%.9g,\"tp_allreduce_s_all_stages_per_microbatch\":%.9g,"
            "\"tp_allreduce_bytes_per_gpu\":%.9g,\"dp_allreduce_bytes_per_gpu\":%.9g,\"p2p_message_bytes\":%.9g,"
            "\"p2p_s\":%.9g,\"p2p_latency_s\":%.9g,\"p2p_inter_node\":%s,",
            u->step_s, u->tflops_per_gpu, u->mfu, u->hfu, u->bubble, u->peak_bytes_per_rank, r->mem_capacity,
            u->peak_bytes_per_rank <= r->mem_capacity ? "true" : "false", u->model_flops, u->pipeline_s, u->dp_s,
            u->dp_total_s, u->dp_hidden, u->optimizer_s, u->tp_s_per_mb, u->tp_s_all_per_mb, r->m.tp_bytes_per_step, r->dp_bytes, r->m.p2p_bytes, r->m.p2p_xfer,
            r->m.comm, r->m.p2p_inter ? "true" : "false");
    fprintf(f,
            "\"cp_s_per_microbatch\":%.9g,\"cp_allgather_bytes_per_layer\":%.9g,\"a2a_s_per_microbatch\":%.9g,"
            "\"a2a_bytes_per_layer\":%.9g,\"params_total\":%.9g,\"params_active\":%.9g,\"expert_slots\":%.9g,"
            "\"tflops_per_gpu_causal\":%.6g,\"mfu_causal\":%.6g,",
            u->cp_s_per_mb, u->cp_bytes_per_layer, u->a2a_s_per_mb, u->a2a_bytes_per_layer, u->params_total,
            u->params_active, u->expert_slots, u->tflops_causal, u->mfu_causal);
    json_stages(f, r);
    fputc(',', f);
    json_ranks(f, r);
    fputc(',', f);
    json_links(f, r);
    fprintf(f, "}\n");
    return ferror(f) ? pipit__err(PIPIT_STATUS_IO, "sim report: write failed") : PIPIT_STATUS_OK;
}

static double gib(double b) { return b / (1024.0 * 1024.0 * 1024.0); }

/* 1.77B, 12.3M, 4.10k, 512 */
static const char *count_text(char *buf, size_t n, double v) {
    static const struct { double scale; const char *unit; } units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (v >= units[i].scale) {
            snprintf(buf, n, "%.3g%s", v / units[i].scale, units[i].unit);
            return buf;
        }
    snprintf(buf, n, "%.0f", v);
    return buf;
}

pipit_status pipit_sim_report_print(FILE *f, const pipit_sim_report *r) {
    if (!f || !r) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_sim_report_print: NULL %s", f ? "report" : "file");
    const pipit_sim_summary *u = &r->sum;
    const pipit_sim_config *c = &r->cfg;
    fprintf(f, "model   %d layers, hidden %d, %d heads (%d kv), MLP %.0f %s, %s positions, seq %d, vocab %d, %s attention, "
               "recompute %s, %s\n",
            c->layers, c->hidden, c->heads, c->kv_heads ? c->kv_heads : c->heads, r->m.ffn, c->gated_mlp ? "SwiGLU" : "GELU",
            c->rope ? "rotary" : "learned", c->seq, c->vocab, c->unfused_attention ? "unfused" : "flash-style",
            pipit_recompute_name(c->recompute), pipit__hw_dtype_name(r->m.dtype));
    if (c->experts) {
        char tot[32], act[32];
        char every[32] = "every layer";
        if (c->moe_every > 1) snprintf(every, sizeof every, "every %d-th layer", c->moe_every);
        fprintf(f, "moe     %d experts (top-%d, %d shared) in %s, %s params, %s active; %.0f slots per "
                   "expert; ep %d\n",
                c->experts, c->top_k ? c->top_k : 2, c->shared_experts, every, count_text(tot, sizeof tot, u->params_total),
                count_text(act, sizeof act, u->params_active), u->expert_slots, r->m.ep);
    }
    if (r->m.cp > 1 || c->sp)
        fprintf(f, "mesh    tp %d%s x cp %d x pp %d x dp %d = %d GPUs of %s; %s, V=%d, M=%d microbatches of %d (global batch "
                   "%lld)\n",
                c->tp, c->sp ? " (sp)" : "", r->m.cp, c->pp, c->dp, u->gpus, r->hw_name, r->sched_name, u->virt,
                u->microbatches, c->micro_batch, (long long)c->global_batch);
    else
        fprintf(f, "mesh    tp %d x pp %d x dp %d = %d GPUs of %s; %s, V=%d, M=%d microbatches of %d (global batch %lld)\n",
                c->tp, c->pp, c->dp, u->gpus, r->hw_name, r->sched_name, u->virt, u->microbatches, c->micro_batch,
                (long long)c->global_batch);
    fprintf(f, "step    %.4f s  (pipeline %.4f s, bubble %.1f%%; then DP exchange %.4f s, optimizer %.4f s)\n",
            u->step_s, u->pipeline_s, 100 * u->bubble, u->dp_s, u->optimizer_s);
    if (u->dp_total_s > 0)
        fprintf(f, "dp      exchange %.4f s in all, %.1f%% of it hidden behind the backward\n", u->dp_total_s,
                100 * u->dp_hidden);
    int giga = u->tflops_per_gpu < 1; /* a CPU */
    fprintf(f, "speed   %.1f %s per GPU (Megatron's count), MFU %.1f%%, HFU %.1f%%; causal attention counted: %.1f, "
               "MFU %.1f%%\n",
            giga ? 1e3 * u->tflops_per_gpu : u->tflops_per_gpu, giga ? "GFLOP/s" : "TFLOP/s", 100 * u->mfu, 100 * u->hfu,
            giga ? 1e3 * u->tflops_causal : u->tflops_causal, 100 * u->mfu_causal);
    fprintf(f, "memory  %.2f GiB peak on the fullest rank of %.2f GiB%s\n", gib(u->peak_bytes_per_rank),
            gib(r->mem_capacity), u->peak_bytes_per_rank <= r->mem_capacity ? "" : "  (DOES NOT FIT)");
    fprintf(f, "comm    stage message %.3g MB per GPU (%s, %.3g ms); TP all-reduce %.3g ms per microbatch-stage\n",
            r->m.p2p_bytes / 1e6, r->m.p2p_inter ? "across nodes" : "inside a node", 1e3 * (r->m.comm + r->m.p2p_xfer),
            1e3 * u->tp_s_per_mb);
    if (r->m.cp > 1)
        fprintf(f, "cp      K/V all-gather %.3g MB per GPU per layer; %.3g ms per microbatch-stage (forward and backward)\n",
                u->cp_bytes_per_layer / 1e6, 1e3 * u->cp_s_per_mb);
    if (c->experts && r->m.ep > 1)
        fprintf(f, "ep      all-to-all %.3g MB per GPU, 4 per MoE layer; %.3g ms per microbatch-stage\n",
                u->a2a_bytes_per_layer / 1e6, 1e3 * u->a2a_s_per_mb);
    fprintf(f, "\nrank   busy s   bubble  peak GiB  params     DP s\n");
    for (int q = 0; q < r->m.P; q++) {
        const rank_row *w = &r->ranks[q];
        char params[32];
        fprintf(f, "%4d %8.4f  %5.1f%%  %8.2f  %8s %8.4f\n", q, w->busy,
                u->pipeline_s > 0 ? 100 * (1 - w->busy / u->pipeline_s) : 0.0, gib(w->peak_bytes),
                count_text(params, sizeof params, w->params), w->dp_s);
    }
    for (int i = 0; i < r->nlinks; i++)
        fprintf(f, "%slink %d->%d: %.3g GB forward, %.3g GB backward, %ld messages\n", i ? "" : "\n", r->links[i].from,
                r->links[i].to, r->links[i].fwd_bytes / 1e9, r->links[i].bwd_bytes / 1e9, r->links[i].messages);
    return ferror(f) ? pipit__err(PIPIT_STATUS_IO, "sim report: write failed") : PIPIT_STATUS_OK;
}
