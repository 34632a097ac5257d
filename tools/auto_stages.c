/*
 * auto_stages.c — `pipit train|plan --auto-stages`: the GPT-2 graph is
 * built without yields and cut by pipit_partition (docs/partition.md);
 * the chosen stages and their predicted costs are printed next to the
 * builder's even split, so the gain the partition expects can be seen.
 */
#include <stdio.h>

#include "cli.h"
#include "pipit_partition.h"

/* The even split's slowest stage as the same cost model predicts it: the
 * builder's yields are the only cuts allowed, and all of them are taken. */
static double even_split_worst(const cli_auto_stages *a, const pipit_gpt2_config *cfg) {
    if (a->stages > cfg->layers) return 0; /* the builder cannot split so finely */
    pipit_gpt2_config ec = *cfg;
    ec.stages = a->stages;
    pipit_graph *g = pipit_graph_new();
    if (!g) die("out of memory");
    pipit_val loss = pipit_gpt2_build(g, &ec);
    pipit_partition_options po = {.schedule = a->sched, .stages = a->sched ? 0 : a->stages,
                                  .yields = PIPIT_PARTITION_YIELDS_AS_CUTS, .profile = a->profile};
    pipit_partition_result *pt = NULL;
    double worst = 0;
    if (pipit_partition(g, loss, &po, &pt) == PIPIT_STATUS_OK)
        for (int s = 0; s < a->stages; s++)
            if (pipit_partition_stage_cost(pt, s) > worst) worst = pipit_partition_stage_cost(pt, s);
    pipit_partition_free(pt);
    pipit_graph_free(g);
    return worst;
}

void cli_auto_stages_apply(const cli_auto_stages *a, const pipit_gpt2_config *cfg, pipit_graph *g, pipit_val *loss) {
    pipit_partition_options po = {.schedule = a->sched, .stages = a->sched ? 0 : a->stages,
                                  .profile = a->profile, .mem_limit = a->mem_limit};
    pipit_partition_result *pt = NULL;
    if (pipit_partition(g, *loss, &po, &pt)) die("--auto-stages: %s", pipit_errmsg());
    if (a->print) {
        if (pipit_partition_print(stdout, pt)) die("--auto-stages: %s", pipit_errmsg());
        double worst = 0, even = even_split_worst(a, cfg);
        for (int s = 0; s < a->stages; s++)
            if (pipit_partition_stage_cost(pt, s) > worst) worst = pipit_partition_stage_cost(pt, s);
        if (even > 0)
            printf("  even split by layers (the builder's): slowest stage %.4g ms; auto: %.4g ms (%.2fx)\n", 1e3 * even,
                   1e3 * worst, even / worst);
        fflush(stdout);
    }
    if (pipit_partition_apply(pt, g, loss, 1)) die("--auto-stages: %s", pipit_errmsg());
    pipit_partition_free(pt);
}
