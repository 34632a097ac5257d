/*
 * links.c — the link flags `pipit sim` and `pipit plan --search` share
 * (--inter-node-bw, --inter-node-lat, --intra-node-bw, --intra-node-lat,
 * --gpus-per-node, --link SPEC), applied over the hardware description, and
 * the measured links `pipit sim --calibrate` writes instead of constants.
 */
#include <stdio.h>

#include "cli.h"
#include "pipit.h"
#include "pipit_sim.h"

/* One "key=value" item into the description; dies naming the flag. */
static void apply(pipit_hw *hw, const char *flagname, const char *spec) {
    pipit_hw_links l;
    if (pipit_hw_parse_links(spec, &l) || pipit_hw_set_links(hw, &l)) die("--%s: %s", flagname, pipit_errmsg());
}

void cli_apply_links(pipit_hw *hw, const cli_links *l) {
    if (l->spec) apply(hw, "link", l->spec);
    const struct {
        const char *flag, *key, *value;
    } f[] = {{"inter-node-bw", "inter-bw", l->inter_bw},   {"inter-node-lat", "inter-lat", l->inter_lat},
             {"intra-node-bw", "intra-bw", l->intra_bw},   {"intra-node-lat", "intra-lat", l->intra_lat},
             {"gpus-per-node", "gpus-per-node", l->gpus_per_node}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!f[i].value) continue;
        char spec[128];
        snprintf(spec, sizeof spec, "%s=%.100s", f[i].key, f[i].value);
        apply(hw, f[i].flag, spec);
    }
}

void cli_measure_links(pipit_hw *hw) {
    pipit_link_probe pr;
    if (pipit_probe_links(&pr) || pipit_hw_apply_probe(hw, &pr)) die("--calibrate: measuring the links: %s", pipit_errmsg());
    if (pipit_process_rank() != 0) return;
    fprintf(stderr, "pipit: links: %d process%s on %d host%s", pr.processes, pr.processes == 1 ? "" : "es", pr.hosts,
            pr.hosts == 1 ? "" : "s");
    if (pr.intra_bw > 0) fprintf(stderr, "; intra-node %.3g GB/s, %.3g us", pr.intra_bw / 1e9, pr.intra_lat * 1e6);
    if (pr.inter_bw > 0) fprintf(stderr, "; inter-node %.3g GB/s, %.3g us", pr.inter_bw / 1e9, pr.inter_lat * 1e6);
    else fprintf(stderr, "; inter-node not measured (one host: run under mpirun across hosts to measure it)");
    fprintf(stderr, "\n");
}
