/*
 * program_agree.c — pipit_compile's agreement (agree.h) in an MPI job:
 * every process compiles the plan itself, so before any of them allocates
 * or opens the transport they compare what the plan is made of: the
 * options that change numbers (optimizer, clipping, lr schedule,
 * microbatches, replicas, ZeRO-1, remat, TF32), the schedule's task lists,
 * the stage cuts, the params, the inputs and the graph itself, and the
 * heartbeat limit (PIPIT_HEARTBEAT) the transports will keep. A field is
 * its text (hashes of the long ones), so the message can say which one
 * differs first and what each process has.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/agree.h"
#include "runtime/program.h"
#include "runtime/transport.h"

enum { NFIELDS = 21, VAL_LEN = 160 };

static uint64_t mix(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define MIX(h, x) mix((h), &(x), sizeof(x))

static uint64_t hash_schedule(const pipit__plan *pl) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int r = 0; r < pl->nranks; r++) {
        h = MIX(h, pl->ranks[r].ntasks);
        for (int i = 0; i < pl->ranks[r].ntasks; i++) { /* field by field: a task has padding */
            const pipit_task *t = &pl->ranks[r].tasks[i];
            h = MIX(h, t->kind), h = MIX(h, t->stage), h = MIX(h, t->mb);
        }
    }
    return mix(h, pl->stage_rank, sizeof *pl->stage_rank * (size_t)pl->S);
}

/* Field by field, not the struct's bytes: padding is not part of a node. */
static uint64_t hash_graph(const pipit_graph *g, int32_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < n; i++) {
        const pipit__node *x = &g->nodes[i];
        h = MIX(h, x->op), h = MIX(h, x->dtype), h = MIX(h, x->ndim), h = MIX(h, x->nin), h = MIX(h, x->flags);
        h = mix(h, x->in, sizeof x->in[0] * x->nin);
        h = mix(h, x->shape, sizeof x->shape[0] * x->ndim);
        h = mix(h, x->fattr, sizeof x->fattr), h = mix(h, x->iattr, sizeof x->iattr);
        if (x->name) h = mix(h, x->name, strlen(x->name) + 1);
    }
    return h;
}

/* "stages begin at nodes 0, 57, 113" (the first forward node of each). */
static void stage_cuts(const pipit__plan *pl, char *out, size_t n) {
    size_t u = (size_t)snprintf(out, n, "%d stages, beginning at nodes", pl->S);
    uint64_t h = mix(0xcbf29ce484222325ull, pl->node_stage, sizeof *pl->node_stage * (size_t)pl->gr.fwd_end);
    for (int s = 0; s < pl->S && u + 24 < n; s++)
        for (int32_t i = 0; i < pl->gr.fwd_end; i++)
            if (pl->node_stage[i] == s) {
                u += (size_t)snprintf(out + u, n - u, "%s %d", s ? "," : "", (int)i);
                break;
            }
    snprintf(out + u, n - u, " (%016llx)", (unsigned long long)h);
}

static void describe_params(const pipit__plan *pl, char *out, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    int64_t numel = 0;
    for (int i = 0; i < pl->nparams; i++) {
        const pipit__node *x = &pl->g->nodes[pl->params[i].node];
        h = mix(h, x->name, strlen(x->name) + 1), h = MIX(h, x->dtype), h = mix(h, x->shape, sizeof x->shape[0] * x->ndim);
        numel += pl->params[i].numel;
    }
    snprintf(out, n, "%d params, %lld elements (%016llx)", pl->nparams, (long long)numel, (unsigned long long)h);
}

static void describe_inputs(const pipit__plan *pl, char *out, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < pl->ninputs; i++) {
        const pipit__input *in = &pl->inputs[i];
        h = mix(h, in->name, strlen(in->name) + 1), h = MIX(h, in->dtype), h = MIX(h, in->numel);
    }
    snprintf(out, n, "%d inputs (%016llx)", pl->ninputs, (unsigned long long)h);
}

pipit_status pipit__program_agree(const pipit_program *p, pipit_status local) {
    static const char *const names[NFIELDS] = {
        "options.optimizer.kind", "options.optimizer.lr", "options.optimizer.beta1", "options.optimizer.beta2",
        "options.optimizer.eps", "options.optimizer.weight_decay", "options.clip_norm", "options.lr_schedule",
        "options.microbatches", "options.data_parallel", "options.zero (ZeRO stage)", "options.remat", "options.forward_only",
        "options.tf32", "options.outputs", "the schedule", "the stage cuts", "the params", "the inputs", "the graph",
        "PIPIT_HEARTBEAT (seconds)"};
    char val[NFIELDS][VAL_LEN];
    const char *kv[2 * NFIELDS + 1];
    double beat = 0; /* a bad PIPIT_HEARTBEAT is this process's failure: every process learns it */
    if (!local) local = pipit__heartbeat_limit(&beat);
    for (int i = 0; i < NFIELDS; i++) snprintf(val[i], VAL_LEN, "-"); /* a process that failed: none */
    if (!local && p) {
        const pipit__plan *pl = &p->plan;
        const pipit_optimizer *o = &pl->opt.optimizer;
        const pipit_lr_schedule *ls = &pl->opt.lr_schedule;
        const double num[] = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, pl->opt.clip_norm};
        snprintf(val[0], VAL_LEN, "%d", (int)o->kind);
        for (int i = 0; i < 6; i++) snprintf(val[1 + i], VAL_LEN, "%.17g", num[i]);
        snprintf(val[7], VAL_LEN, "kind %d, warmup %lld, decay_steps %lld, min_lr %.17g", (int)ls->kind,
                 (long long)ls->warmup, (long long)ls->decay_steps, ls->min_lr);
        const int ints[] = {pl->M, pl->D, pl->zero1 ? PIPIT_MAX(pl->zero, 1) : 0, pl->opt.remat, pl->forward_only, p->tf32};
        for (int i = 0; i < 6; i++) snprintf(val[8 + i], VAL_LEN, "%d", ints[i]);
        if (pl->reshard) snprintf(val[10], VAL_LEN, "%d, reshard_after_forward", ints[2]);
        uint64_t h = mix(0xcbf29ce484222325ull, pl->outputs, sizeof *pl->outputs * (size_t)pl->noutputs);
        snprintf(val[14], VAL_LEN, "%d (%016llx)", pl->noutputs, (unsigned long long)h);
        snprintf(val[15], VAL_LEN, "%d ranks, %d stages, %d microbatches (%016llx)", pl->nranks, pl->S, pl->M,
                 (unsigned long long)hash_schedule(pl));
        stage_cuts(pl, val[16], VAL_LEN);
        describe_params(pl, val[17], VAL_LEN);
        describe_inputs(pl, val[18], VAL_LEN);
        snprintf(val[19], VAL_LEN, "%d nodes (%016llx)", pl->g->n, (unsigned long long)hash_graph(pl->g, pl->g->n));
        /* a process without heartbeats would be taken for lost by peers that expect them */
        snprintf(val[20], VAL_LEN, beat > 0 ? "%g" : "0 (off)", beat);
    }
    for (int i = 0; i < NFIELDS; i++) kv[2 * i] = names[i], kv[2 * i + 1] = val[i];
    kv[2 * NFIELDS] = NULL;
    return pipit__agree("pipit_compile", local, kv);
}
