/*
 * plan_print.c — prints a compiled program the way `pipit plan` shows it:
 * per rank, the stage and phase of every op it runs, its planned peak
 * activation memory, and its instruction list.
 */
#include <stdio.h>

#include "inspect/plan_print.h"
#include "schedule/schedule.h"
#include "compile/stages.h"

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

static void print_instr(FILE *f, const pipit__plan *p, const pipit__instr *in) {
    char tb[48];
    const pipit__node *n = &p->g->nodes[in->node];
    switch ((pipit__ins_kind)in->kind) {
    case INS_RUN: fprintf(f, "RUN   %-12s node %-5d mb %d\n", pipit__ops[n->op].name, in->node, in->mb); break;
    case INS_ACC: fprintf(f, "ACC   grad contribution node %d mb %d%s\n", in->node, in->mb, in->first ? " (first)" : ""); break;
    case INS_LOSS: fprintf(f, "LOSS  mb %d\n", in->mb); break;
    case INS_SEND: fprintf(f, "SEND  node %d mb %d -> rank %d (%zu bytes)\n", in->node, in->mb, in->peer, in->bytes); break;
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
    }
}

void pipit__plan_print(FILE *f, const pipit_program *prog, int verbose) {
    const pipit__plan *p = &prog->plan;
    fprintf(f, "%d stage(s) on %d rank(s), %d microbatch(es)\n", p->S, p->nranks, p->M);
    for (int r = 0; r < p->nranks; r++) {
        const pipit__rank_plan *rp = &p->ranks[r];
        fprintf(f, "\n== rank %d: stages", r);
        for (int s = 0; s < p->S; s++)
            if (p->stage_rank[s] == r) fprintf(f, " %d", s);
        fprintf(f, "; planned peak activations %.3f MiB (%zu bytes; %zu without reuse); %d instructions\n",
                rp->arena_bytes / 1048576.0, rp->arena_bytes, rp->naive_bytes, rp->n);
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
        for (int32_t i = 0; i < rp->n; i++) {
            const pipit__instr *in = &rp->ins[i];
            if (in->kind == INS_MARK) {
                if (!in->first) {
                    char t[32];
                    fprintf(f, "  task %s\n", pipit__task_str(t, sizeof t, rp->tasks[in->task]));
                }
                continue;
            }
            if (i > 0 && in->kind >= INS_ACC_SEND && rp->ins[i - 1].kind < INS_ACC_SEND) fprintf(f, "  post-loop\n");
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
                                  "optimizer update", "copy"};
    return kind >= 0 && kind < (int)(sizeof names / sizeof names[0]) ? names[kind] : "?";
}

void pipit__profile_print(FILE *f, const pipit_program *p) {
    for (int r = 0; r < p->plan.nranks; r++) {
        const pipit__rank_state *rp = &p->rs[r];
        double total = 0;
        for (int k = 0; k < PIPIT_OP_COUNT + 32; k++) total += rp->prof[k];
        fprintf(f, "profile rank %d: %.3f s in instructions\n", r, total);
        for (int k = 0; k < PIPIT_OP_COUNT + 32; k++) {
            if (rp->prof[k] <= 0) continue;
            const char *name = k < PIPIT_OP_COUNT ? pipit__ops[k].name : ins_name(k - PIPIT_OP_COUNT);
            fprintf(f, "  %-18s %9.3f s  %5.1f%%\n", name, rp->prof[k], 100.0 * rp->prof[k] / total);
        }
    }
}
