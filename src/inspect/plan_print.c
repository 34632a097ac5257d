/*
 * plan_print.c — prints a compiled program the way `pipit plan` shows it:
 * per rank, the stage and phase of every op it runs, its planned peak
 * activation memory, and its instruction list.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cJSON.h>

#include "compile/stages.h"
#include "inspect/memreport.h"
#include "inspect/plan_print.h"
#include "pipit_inspect.h"
#include "schedule/schedule.h"
#include "util/common.h"

static const char *phase_name(int ph) {
    switch (ph) {
    case PH_F: return "F";
    case PH_B: return "B";
    case PH_W: return "W";
    case PH_PRE: return "pre";
    case PH_POST: return "post";
    case PH_GRADPOST: return "gradpost";
    }
    return "-";
}

/* A param's name, or "pre-loop value <node>" for a boundary target. */
static const char *target_name(const pipit__plan *p, int i, char *buf, size_t n) {
    if (p->params[i].name) return p->params[i].name;
    snprintf(buf, n, "pre-loop value %d", p->params[i].node);
    return buf;
}

/* The rank's bf16 GEMMs with the bias in their epilogue, and those writing
 * a weight gradient into its fp32 accumulator (compile/lower.c). */
static void fusion_counts(const pipit__rank_plan *rp, int *epi, int *wgrad) {
    *epi = *wgrad = 0;
    for (int32_t i = 0; i < rp->n; i++) *epi += rp->ins[i].epi != 0, *wgrad += rp->ins[i].acc_f32 != 0;
}

static void print_instr(FILE *f, const pipit__plan *p, const pipit__instr *in) {
    char tb[48];
    const pipit__node *n = &p->g->nodes[in->node];
    switch ((pipit__ins_kind)in->kind) {
    case INS_RUN:
        fprintf(f, "RUN   %-12s node %-5d mb %d%s\n", pipit__ops[n->op].name, in->node, in->mb,
                in->epi            ? " + bias in the epilogue"
                : in->acc_f32 == 1 ? " -> fp32 gradient accumulator (first)"
                : in->acc_f32 == 2 ? " += fp32 gradient accumulator"
                                   : "");
        break;
    case INS_ACC: fprintf(f, "ACC   grad contribution node %d mb %d%s\n", in->node, in->mb, in->first ? " (first)" : ""); break;
    case INS_LOSS: fprintf(f, "LOSS  mb %d\n", in->mb); break;
    case INS_SEND: fprintf(f, "SEND  node %d mb %d -> rank %d (%zu bytes%s)\n", in->node, in->mb, in->peer, in->bytes, in->zc ? ", zero-copy" : ", copied"); break;
    case INS_RECV: fprintf(f, "RECV  node %d mb %d <- rank %d (%zu bytes)\n", in->node, in->mb, in->peer, in->bytes); break;
    case INS_ACC_SEND: fprintf(f, "SEND  %s use %d sum -> rank %d\n", target_name(p, in->param, tb, sizeof tb), in->use, in->peer); break;
    case INS_ACC_RECV: fprintf(f, "RECV  %s use %d sum <- rank %d\n", target_name(p, in->param, tb, sizeof tb), in->use, in->peer); break;
    case INS_GRADSUM: fprintf(f, "GRAD  %s = sum of %d use(s) in use order\n", target_name(p, in->param, tb, sizeof tb), p->params[in->param].nuses); break;
    case INS_SUMSQ: fprintf(f, "SUMSQ %s\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_SUMSQ_FIN: break;
    case INS_NORM_SEND: fprintf(f, "SEND  sumsq(%s) -> rank %d\n", target_name(p, in->param, tb, sizeof tb), in->peer); break;
    case INS_NORM_RECV: fprintf(f, "RECV  sumsq(%s) <- rank %d\n", target_name(p, in->param, tb, sizeof tb), in->peer); break;
    case INS_NORM: fprintf(f, "NORM  global gradient norm (param order), clip scale\n"); break;
    case INS_UPDATE: fprintf(f, "UPDATE %s\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_COPY: fprintf(f, "COPY  %zu bytes (gradient transform)\n", in->bytes); break;
    case INS_MARK: break;
    case INS_OUTPUT: fprintf(f, "OUT   node %d mb %d kept for pipit_program_get_output\n", in->node, in->mb); break;
    case INS_DP_RS_SEND: fprintf(f, "DP    send grad(%s) shards to their owner replicas\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_DP_RS_RECV: fprintf(f, "DP    my shard of grad(%s) = replicas' shards in replica order\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_DP_AG_SEND: fprintf(f, "DP    send my summed shard of grad(%s) to every replica\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_DP_AG_RECV: fprintf(f, "DP    receive the other summed shards of grad(%s)\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_DP_SUMSQ_SEND: fprintf(f, "DP    send my shard's sumsq partials of %s\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_DP_SUMSQ_RECV: fprintf(f, "DP    receive the other shards' sumsq partials of %s\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_DP_PARAM_SEND: fprintf(f, "DP    send my updated shard of %s to every replica\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_DP_PARAM_RECV: fprintf(f, "DP    receive the other updated shards of %s\n", target_name(p, in->param, tb, sizeof tb)); break;
    case INS_LOSS_SEND: fprintf(f, "SEND  this replica's losses -> every other rank\n"); break;
    case INS_LOSS_RECV: fprintf(f, "RECV  replica %d's losses <- its rank %d\n", in->peer, in->use); break;
    case INS_TP:
        fprintf(f, "TP    %s node %d mb %d over the stage's %d ranks (%zu bytes out, rank order)\n",
                n->op == PIPIT_OP_TP_MAX      ? "all-reduce max"
                : n->op == PIPIT_OP_SP_GATHER  ? "all-gather"
                : n->op == PIPIT_OP_SP_SCATTER ? "reduce-scatter"
                : n->op == PIPIT_OP_SP_SPLIT   ? "my sequence block of"
                                               : "all-reduce sum",
                in->node, in->mb, p->T,
                (size_t)in->numel * pipit__dtype_size((pipit_dtype)n->dtype));
        break;
    case INS_A2A_START:
        fprintf(f, "A2A   start the all-to-all of node %d mb %d over the EP group's %d ranks (%zu bytes)\n", in->node,
                in->mb, p->E, (size_t)in->numel * pipit__dtype_size((pipit_dtype)n->dtype));
        break;
    case INS_A2A_FINISH: fprintf(f, "A2A   finish node %d mb %d (started at instruction %d)\n", in->node, in->mb, in->use); break;
    }
}

/* The fences due before instruction `at`: the send each one hands back. */
static void print_fences(FILE *f, const pipit__plan *p, const pipit__rank_plan *rp, int32_t *next, int32_t at) {
    for (; *next < rp->nfences && rp->fences[*next].at == at; (*next)++) {
        const pipit__instr *in = &rp->ins[rp->fences[*next].send];
        fprintf(f, "    FENCE ");
        if (in->kind == INS_SEND) fprintf(f, "send of node %d mb %d -> rank %d complete\n", in->node, in->mb, in->peer);
        else print_instr(f, p, in);
    }
}

void pipit__plan_print(FILE *f, const pipit_program *prog, int verbose) {
    const pipit__plan *p = &prog->plan;
    fprintf(f, "%d stage(s) on %d rank(s), %d microbatch(es)", p->S, p->nranks, p->M);
    if (p->T > 1) fprintf(f, "; each rank's program runs on %d tensor-parallel ranks (SPMD)", p->T);
    fprintf(f, "\n");
    for (int r = 0; r < p->nranks; r++) {
        const pipit__rank_plan *rp = &p->ranks[r];
        fprintf(f, "\n== rank %d: stages", r);
        for (int s = 0; s < p->S; s++)
            if (p->stage_rank[s] == r) fprintf(f, " %d", s);
        fprintf(f, "; planned peak activations %.3f MiB (%zu bytes; %zu without reuse); %d instructions\n",
                rp->arena_bytes / 1048576.0, rp->arena_bytes, rp->naive_bytes, rp->n);
        size_t mom = p->forward_only ? 0 : 2 * pipit__moment_bytes(prog, r, 0, NULL);
        fprintf(f, "held per world rank: parameters %zu bytes, gradients %zu, optimizer moments %zu%s\n",
                rp->param_bytes, p->forward_only ? 0 : rp->param_bytes, mom,
                p->T > 1 ? " (its tensor-parallel shards)" : "");
        if (p->zero >= 2) /* ZeRO-2/3: the full blocks exist during a step only */
            fprintf(f, "   between steps (ZeRO-%d, its 1/%d shards): parameters %zu bytes, gradients %zu, optimizer "
                       "moments %zu\n",
                    p->zero, p->D, pipit__zero_params(prog) ? mom / 2 : rp->param_bytes,
                    pipit__zero_grads(prog) ? mom / 2 : rp->param_bytes, mom);
        int epi, wgrad;
        fusion_counts(rp, &epi, &wgrad);
        if (epi || wgrad)
            fprintf(f, "bf16 GEMM fusions: %d with the bias in the epilogue, %d writing a weight gradient into its fp32 "
                       "accumulator (docs/architecture.md \"Precision\")\n",
                    epi, wgrad);
        if (rp->npairs > 0)
            fprintf(f, "overlapped pairs: %d (a forward and a backward of two microbatches interleaved at their "
                       "all-to-alls; options.no_a2a_overlap turns them off)\n",
                    rp->npairs);
        pipit__rank_mem mem;
        pipit__rank_memory(prog, r, &mem);
        fprintf(f, "memory per world rank at a step's peak: %.3f MiB = activations %.3f + parameters %.3f + gradients "
                   "%.3f + optimizer moments %.3f + transient %.3f (arena beyond the loop's peak %.3f, gradient "
                   "accumulators %.3f, data-parallel buffer %.3f, ZeRO-3 gather copies %.3f)\n",
                mem.total / 1048576.0, mem.activations / 1048576.0, mem.params / 1048576.0, mem.grads / 1048576.0,
                mem.moments / 1048576.0, mem.transient / 1048576.0, mem.arena_slack / 1048576.0,
                mem.accumulators / 1048576.0, mem.dp_buffer / 1048576.0, mem.gather_copies / 1048576.0);
        size_t pre = pipit__preloop_bytes(rp);
        if (pre) /* ops on params alone: with options.dtype bf16, the params' bf16 copies */
            fprintf(f, "   of which: values of params alone (pre-loop) %.3f MiB, the loop's own buffers at their peak "
                       "%.3f MiB\n",
                    pre / 1048576.0, pipit__activation_peak(rp) / 1048576.0);
        fprintf(f, "ops (stage/phase):");
        int col = 0;
        for (int32_t i = 0; i < p->g->n; i++) {
            int ph = p->node_phase[i];
            if (ph == PH_NONE) continue;
            int replicated = ph == PH_PRE || ph == PH_POST || ph == PH_GRADPOST;
            if (replicated ? !(p->node_ranks[i] >> r & 1) : p->stage_rank[p->node_stage[i]] != r) continue;
            fprintf(f, "%s%d:%s@%d%s", col++ % 6 ? "  " : "\n  ", i, pipit__ops[p->g->nodes[i].op].name,
                    p->node_stage[i], phase_name(p->node_phase[i]));
        }
        fprintf(f, "\nprogram:\n");
        int32_t next_fence = 0;
        for (int32_t i = 0; i <= rp->n; i++) {
            print_fences(f, p, rp, &next_fence, i);
            if (i == rp->n) break;
            const pipit__instr *in = &rp->ins[i];
            if (in->kind == INS_MARK) {
                if (!in->first) {
                    char t[32];
                    fprintf(f, "  task %s\n", pipit__task_str(t, sizeof t, rp->tasks[in->task]));
                }
                continue;
            }
            if (i > 0 && i == rp->post_at) fprintf(f, "  post-loop\n");
            if (in->kind == INS_SUMSQ_FIN) continue;
            if (!verbose && (in->kind == INS_RUN || in->kind == INS_SUMSQ || in->kind == INS_UPDATE ||
                             in->kind == INS_GRADSUM || in->kind == INS_ACC))
                continue;
            fprintf(f, "    ");
            print_instr(f, p, in);
        }
    }
}

static const char *ins_name(int kind) {
    static const char *names[] = {"run", "accumulate", "loss", "send", "recv", "mark", "acc send", "acc recv",
                                  "grad sum", "sum of squares", "sumsq final", "norm send", "norm recv", "norm",
                                  "optimizer update", "copy", "dp reduce send", "dp reduce", "dp gather send",
                                  "dp gather", "dp sumsq send", "dp sumsq recv", "dp param send", "dp param recv",
                                  "loss send", "loss recv", "output", "tp all-reduce", "a2a start",
                                  "a2a finish"};
    return kind >= 0 && kind < (int)(sizeof names / sizeof names[0]) ? names[kind] : "?";
}

void pipit__profile_print(FILE *f, const pipit_program *p) {
    for (int i = 0; i < p->nlocal; i++) {
        int r = p->local[i];
        const pipit__rank_state *rp = &p->rs[r];
        double total = 0;
        for (int k = 0; k < PIPIT_OP_COUNT + 32; k++) total += rp->prof[k];
        fprintf(f, "profile rank %d: %.3f s in instructions\n", r, total);
        for (int k = 0; k < PIPIT_OP_COUNT + 32; k++) {
            if (rp->prof[k] <= 0) continue;
            const char *name = k < PIPIT_OP_COUNT ? pipit__ops[k].name : ins_name(k - PIPIT_OP_COUNT);
            fprintf(f, "  %-18s %9.3f s  %5.1f%%\n", name, rp->prof[k], 100.0 * rp->prof[k] / total);
        }
        if (rp->dp_first_send >= 0 && rp->backward_end >= 0)
            fprintf(f, "  overlap of the data-parallel exchange: in the last step its first send left at %.3f ms, the last "
                       "backward task ended at %.3f ms\n",
                    1e3 * rp->dp_first_send, 1e3 * rp->backward_end);
    }
}

/* ---- public API (pipit_inspect.h) ---- */

static pipit_status check_args(FILE *f, const pipit_program *p, const char *fn) {
    if (!f) return pipit__err(PIPIT_STATUS_MISUSE, "%s: file is NULL", fn);
    if (!p) return pipit__err(PIPIT_STATUS_MISUSE, "%s: program is NULL", fn);
    if (p->magic != PIPIT_PROGRAM_MAGIC)
        return pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid program handle (freed, or not a pipit_program)", fn);
    return PIPIT_STATUS_OK;
}

static pipit_status io_status(FILE *f, const char *what) {
    return ferror(f) ? pipit__err(PIPIT_STATUS_IO, "%s: write failed", what) : PIPIT_STATUS_OK;
}

pipit_status pipit_program_print_plan(FILE *f, const pipit_program *p, int verbose) {
    pipit_status s = check_args(f, p, __func__);
    if (s) return s;
    pipit__plan_print(f, p, verbose);
    return io_status(f, "plan");
}

pipit_status pipit_program_print_profile(FILE *f, const pipit_program *p) {
    pipit_status s = check_args(f, p, __func__);
    if (!s) s = pipit__check_runnable(p, __func__);
    if (s) return s;
    pipit__profile_print(f, p);
    return io_status(f, "profile");
}

/* {"ranks":[{"rank", "total_s", "ops": {op: s}, "instructions": {kind: s}}]}:
 * seconds since profiling was (re)started, only the kinds that took time. */
static cJSON *profile_rank_json(const pipit_program *p, int r) {
    const pipit__rank_state *rp = &p->rs[r];
    cJSON *o = cJSON_CreateObject(), *ops = cJSON_CreateObject(), *ins = cJSON_CreateObject();
    if (!o || !ops || !ins || !cJSON_AddItemToObject(o, "ops", ops)) {
        cJSON_Delete(o), cJSON_Delete(ops), cJSON_Delete(ins);
        return NULL;
    }
    if (!cJSON_AddItemToObject(o, "instructions", ins)) {
        cJSON_Delete(o), cJSON_Delete(ins);
        return NULL;
    }
    double total = 0;
    int ok = cJSON_AddNumberToObject(o, "rank", r) != NULL;
    for (int k = 0; ok && k < PIPIT_OP_COUNT + 32; k++) {
        total += rp->prof[k];
        if (rp->prof[k] <= 0) continue;
        if (k < PIPIT_OP_COUNT) ok = cJSON_AddNumberToObject(ops, pipit__ops[k].name, rp->prof[k]) != NULL;
        else ok = cJSON_AddNumberToObject(ins, ins_name(k - PIPIT_OP_COUNT), rp->prof[k]) != NULL;
    }
    if (!ok || !cJSON_AddNumberToObject(o, "total_s", total)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

pipit_status pipit_program_write_profile_json(FILE *f, const pipit_program *p) {
    pipit_status s = check_args(f, p, __func__);
    if (!s) s = pipit__check_runnable(p, __func__);
    if (s) return s;
    cJSON *root = cJSON_CreateObject(), *ranks = root ? cJSON_AddArrayToObject(root, "ranks") : NULL;
    int ok = ranks != NULL;
    for (int i = 0; ok && i < p->nlocal; i++) {
        cJSON *r = profile_rank_json(p, p->local[i]);
        ok = r && cJSON_AddItemToArray(ranks, r);
        if (!ok) cJSON_Delete(r);
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return pipit__err(PIPIT_STATUS_NOMEM, "profile JSON: out of memory");
    fputs(text, f);
    cJSON_free(text);
    return io_status(f, "profile JSON");
}

/* One instruction as the verbose plan prints it, without indent or newline. */
static char *instr_text(const pipit__plan *p, const pipit__instr *in) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return NULL;
    print_instr(m, p, in);
    fclose(m);
    if (buf && len > 0 && buf[len - 1] == '\n') buf[len - 1] = 0;
    return buf;
}

static cJSON *rank_json(const pipit_program *program, int r) {
    const pipit__plan *p = &program->plan;
    const pipit__rank_plan *rp = &p->ranks[r];
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "rank", r);
    cJSON *st = cJSON_AddArrayToObject(o, "stages");
    for (int s = 0; st && s < p->S; s++)
        if (p->stage_rank[s] == r) cJSON_AddItemToArray(st, cJSON_CreateNumber(s));
    cJSON_AddNumberToObject(o, "arena_bytes", (double)rp->arena_bytes);
    cJSON_AddNumberToObject(o, "naive_bytes", (double)rp->naive_bytes);
    /* what one world rank of this pipeline rank holds (replica 0's moments with ZeRO-1) */
    cJSON_AddNumberToObject(o, "param_bytes", (double)rp->param_bytes);
    cJSON_AddNumberToObject(o, "grad_bytes", p->forward_only ? 0 : (double)rp->param_bytes);
    cJSON_AddNumberToObject(o, "moment_bytes", p->forward_only ? 0 : 2.0 * (double)pipit__moment_bytes(program, r, 0, NULL));
    /* between steps: ZeRO-2 / ZeRO-3 keep replica 0's shards of the gradients / parameters only */
    double shard = p->forward_only ? 0 : (double)pipit__moment_bytes(program, r, 0, NULL);
    cJSON_AddNumberToObject(o, "resident_param_bytes", pipit__zero_params(program) ? shard : (double)rp->param_bytes);
    cJSON_AddNumberToObject(o, "resident_grad_bytes",
                            p->forward_only ? 0 : pipit__zero_grads(program) ? shard : (double)rp->param_bytes);
    cJSON_AddNumberToObject(o, "preloop_bytes", (double)pipit__preloop_bytes(rp));
    cJSON_AddNumberToObject(o, "loop_peak_bytes", (double)pipit__activation_peak(rp));
    /* one world rank at a step's peak, by kind: the blocks memory admission adds up */
    pipit__rank_mem mem;
    pipit__rank_memory(program, r, &mem);
    cJSON *mj = cJSON_AddObjectToObject(o, "memory");
    const struct { const char *k; double v; } by_kind[] = {
        {"activations", mem.activations}, {"params", mem.params}, {"grads", mem.grads},
        {"moments", mem.moments}, {"transient", mem.transient}, {"arena_slack", mem.arena_slack},
        {"accumulators", mem.accumulators}, {"dp_buffer", mem.dp_buffer}, {"gather_copies", mem.gather_copies},
        {"total", mem.total}};
    for (size_t k = 0; mj && k < sizeof by_kind / sizeof *by_kind; k++)
        cJSON_AddNumberToObject(mj, by_kind[k].k, by_kind[k].v);
    cJSON_AddNumberToObject(o, "instructions", rp->n);
    cJSON_AddNumberToObject(o, "overlapped_pairs", rp->npairs);
    int epi, wgrad;
    fusion_counts(rp, &epi, &wgrad);
    cJSON_AddNumberToObject(o, "bias_epilogues", epi);
    cJSON_AddNumberToObject(o, "fp32_weight_gradients", wgrad);
    enum { NKINDS = INS_A2A_FINISH + 1 };
    int count[NKINDS] = {0};
    for (int32_t i = 0; i < rp->n; i++)
        if (rp->ins[i].kind < NKINDS) count[rp->ins[i].kind]++;
    cJSON *kinds = cJSON_AddObjectToObject(o, "instruction_kinds");
    for (int k = 0; kinds && k < NKINDS; k++)
        if (count[k]) cJSON_AddNumberToObject(kinds, ins_name(k), count[k]);
    cJSON *tasks = cJSON_AddArrayToObject(o, "tasks");
    for (int t = 0; tasks && t < rp->ntasks; t++) {
        char name[32];
        cJSON_AddItemToArray(tasks, cJSON_CreateString(pipit__task_str(name, sizeof name, rp->tasks[t])));
    }
    cJSON *prog = cJSON_AddArrayToObject(o, "program");
    for (int32_t i = 0; prog && i < rp->n; i++) {
        const pipit__instr *in = &rp->ins[i];
        if (in->kind == INS_SUMSQ_FIN || (in->kind == INS_MARK && in->first)) continue;
        char *text;
        if (in->kind == INS_MARK) {
            char t[32], line[48];
            snprintf(line, sizeof line, "task %s", pipit__task_str(t, sizeof t, rp->tasks[in->task]));
            text = pipit__strdup(line);
            cJSON_AddItemToArray(prog, cJSON_CreateString(text ? text : "?"));
            pipit__free(text);
            continue;
        }
        text = instr_text(p, in);
        cJSON_AddItemToArray(prog, cJSON_CreateString(text ? text : "?"));
        free(text); /* open_memstream's buffer comes from malloc */
    }
    return o;
}

static cJSON *param_json(const pipit__plan *p, int i) {
    const pipit__param *pp = &p->params[i];
    const pipit__node *n = &p->g->nodes[pp->node];
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", pp->name ? pp->name : "");
    cJSON_AddStringToObject(o, "dtype", pipit__dtype_name(pp->dtype));
    cJSON *shape = cJSON_AddArrayToObject(o, "shape");
    for (int k = 0; shape && k < n->ndim; k++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)n->shape[k]));
    cJSON_AddNumberToObject(o, "numel", (double)pp->numel);
    if (pp->shard_axis >= 0) { /* this rank's shard of a tensor split over the stage's T ranks */
        cJSON_AddNumberToObject(o, "shard_axis", pp->shard_axis);
        cJSON_AddNumberToObject(o, "shard_parts", pp->shard_parts);
        cJSON *full = cJSON_AddArrayToObject(o, "full_shape");
        for (int k = 0; full && k < pp->ndim; k++) cJSON_AddItemToArray(full, cJSON_CreateNumber((double)pp->full_shape[k]));
    }
    cJSON *holders = cJSON_AddArrayToObject(o, "holders");
    for (int r = 0; holders && r < p->nranks && r < 64; r++)
        if (pp->holders >> r & 1) cJSON_AddItemToArray(holders, cJSON_CreateNumber(r));
    cJSON_AddNumberToObject(o, "norm_rank", pp->norm_rank);
    return o;
}

pipit_status pipit_program_write_plan_json(FILE *f, const pipit_program *prog) {
    pipit_status s = check_args(f, prog, __func__);
    if (s) return s;
    const pipit__plan *p = &prog->plan;
    cJSON *root = cJSON_CreateObject();
    if (!root) return pipit__err(PIPIT_STATUS_NOMEM, "plan JSON: out of memory");
    cJSON_AddNumberToObject(root, "stages", p->S);
    cJSON_AddNumberToObject(root, "microbatches", p->M);
    cJSON_AddNumberToObject(root, "threads", p->threads);
    cJSON_AddNumberToObject(root, "tensor_parallel", p->T);
    cJSON_AddNumberToObject(root, "data_parallel", p->D);
    cJSON *sr = cJSON_AddArrayToObject(root, "stage_rank");
    for (int k = 0; sr && k < p->S; k++) cJSON_AddItemToArray(sr, cJSON_CreateNumber(p->stage_rank[k]));
    cJSON *ranks = cJSON_AddArrayToObject(root, "ranks");
    for (int r = 0; ranks && r < p->nranks; r++) cJSON_AddItemToArray(ranks, rank_json(prog, r));
    cJSON *params = cJSON_AddArrayToObject(root, "params");
    for (int i = 0; params && i < p->nparams; i++) cJSON_AddItemToArray(params, param_json(p, i));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return pipit__err(PIPIT_STATUS_NOMEM, "plan JSON: out of memory");
    fputs(text, f);
    fputc('\n', f);
    cJSON_free(text);
    return io_status(f, "plan JSON");
}
