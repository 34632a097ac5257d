/*
 * auto_stages.c — `pipit train|plan --auto-stages`: the model's graph is
 * built without yields and cut by pipit_partition (docs/partition.md);
 * the chosen stages and their predicted costs are printed next to the
 * builder's even split, so the gain the partition expects can be seen.
 */
#include <stdio.h>

#include "cli.h"
#include "pipit_partition.h"

static double worst_stage(const pipit_partition_result *pt) {
    double w = 0;
    for (int s = 0; s < pipit_partition_stages(pt); s++)
        if (pipit_partition_stage_cost(pt, s) > w) w = pipit_partition_stage_cost(pt, s);
    return w;
}

/* The even split as the same cost model sees it: the builder's yields are
 * the only cuts allowed, and all of them are taken. NULL if the builder
 * cannot split so finely. The graph is the caller's to free. */
static pipit_partition_result *even_split(const cli_auto_stages *a, const cli_model *cfg, pipit_graph **g) {
    *g = NULL;
    if (a->stages > cfg->layers) return NULL;
    cli_model ec = *cfg;
    ec.stages = a->stages;
    if (!(*g = pipit_graph_new())) die("out of memory");
    pipit_val loss = ec.kind->build(*g, &ec, NULL);
    pipit_partition_options po = {.schedule = a->sched, .stages = a->sched ? 0 : a->stages,
                                  .yields = PIPIT_PARTITION_YIELDS_AS_CUTS, .profile = a->profile, .remat = a->remat};
    pipit_partition_result *pt = NULL;
    return pipit_partition(*g, loss, &po, &pt) == PIPIT_STATUS_OK ? pt : NULL;
}

static void print_comparison(const cli_auto_stages *a, const cli_model *cfg, const pipit_partition_result *pt) {
    pipit_graph *eg;
    pipit_partition_result *even = even_split(a, cfg, &eg);
    if (even)
        printf("  even split by layers (the builder's): slowest stage %.4g ms; auto: %.4g ms (%.2fx)\n",
               1e3 * worst_stage(even), 1e3 * worst_stage(pt), worst_stage(even) / worst_stage(pt));
    double te = 0, ta = 0;
    if (a->sched && pipit_partition_simulate(pt, a->sched, &ta) == PIPIT_STATUS_OK) {
        printf("  simulated step (%d microbatches): auto %.4g ms", pipit_schedule_microbatches(a->sched), 1e3 * ta);
        if (even && pipit_partition_simulate(even, a->sched, &te) == PIPIT_STATUS_OK)
            printf(", even %.4g ms (%.2fx)", 1e3 * te, te / ta);
        printf("\n");
    }
    pipit_partition_free(even);
    pipit_graph_free(eg);
}

void cli_auto_stages_apply(const cli_auto_stages *a, const cli_model *cfg, pipit_graph *g, pipit_val *loss) {
    pipit_partition_options po = {.schedule = a->sched, .stages = a->sched ? 0 : a->stages,
                                  .profile = a->profile, .mem_limit = a->mem_limit, .remat = a->remat};
    pipit_partition_result *pt = NULL;
    if (pipit_partition(g, *loss, &po, &pt)) die("--auto-stages: %s", pipit_errmsg());
    if (a->print) {
        if (pipit_partition_print(stdout, pt)) die("--auto-stages: %s", pipit_errmsg());
        print_comparison(a, cfg, pt);
        fflush(stdout);
    }
    if (pipit_partition_apply(pt, g, loss, 1)) die("--auto-stages: %s", pipit_errmsg());
    pipit_partition_free(pt);
}
