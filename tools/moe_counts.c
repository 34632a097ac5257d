/*
 * moe_counts.c — tokens per expert of each MoE layer (moe_counts.h).
 */
#include "moe_counts.h"

#include <stdlib.h>
#include <string.h>

#include "flags.h"

pipit_val cli_moe_build(pipit_graph *g, const cli_model *m, cli_moe *mc) {
    memset(mc, 0, sizeof *mc);
    if (strcmp(m->kind->name, "llama") != 0 || m->experts < 1 || m->layers < 1) return m->kind->build(g, m, NULL);
    pipit_val *all = calloc((size_t)m->layers, sizeof *all);
    if (!all) die("out of memory");
    pipit_val loss = cli_model_build_moe(g, m, all);
    if (loss.id < 0) {
        free(all);
        return loss;
    }
    mc->layer = calloc((size_t)m->layers, sizeof *mc->layer);
    mc->choice = calloc((size_t)m->layers, sizeof *mc->choice);
    mc->E = m->experts, mc->k = m->top_k;
    mc->rows = (int64_t)m->batch * m->ctx;
    mc->count = calloc((size_t)m->layers * (size_t)m->experts, sizeof *mc->count);
    mc->scratch = malloc((size_t)mc->rows * (size_t)m->top_k * sizeof *mc->scratch);
    if (!mc->layer || !mc->choice || !mc->count || !mc->scratch) die("out of memory");
    for (int l = 0; l < m->layers; l++)
        if (all[l].id >= 0) mc->layer[mc->n] = l, mc->choice[mc->n++] = all[l];
    free(all);
    return loss;
}

void cli_moe_count(cli_moe *mc, const pipit_program *p, int G) {
    size_t nb = (size_t)mc->rows * (size_t)mc->k * sizeof *mc->scratch;
    for (int i = 0; i < mc->n; i++) {
        int64_t *c = mc->count + (size_t)i * (size_t)mc->E;
        memset(c, 0, (size_t)mc->E * sizeof *c);
        for (int m = 0; m < G; m++) { /* microbatches of every replica, in order: integer sums */
            if (pipit_program_get_output(p, mc->choice[i], m, mc->scratch, nb))
                die("MoE token counts of layer %d: %s", mc->layer[i], pipit_program_errmsg(p));
            for (int64_t j = 0; j < mc->rows * mc->k; j++) {
                int32_t e = mc->scratch[j];
                if (e < 0 || e >= mc->E) die("MoE layer %d chose expert %d of %d", mc->layer[i], (int)e, mc->E);
                c[e]++;
            }
        }
    }
}

void cli_moe_json(const cli_moe *mc, FILE *f) {
    if (!mc->n) return;
    fprintf(f, ",\"moe_counts\":[");
    for (int i = 0; i < mc->n; i++) {
        fprintf(f, "%s[", i ? "," : "");
        for (int e = 0; e < mc->E; e++) fprintf(f, "%s%lld", e ? "," : "", (long long)mc->count[(size_t)i * mc->E + e]);
        fprintf(f, "]");
    }
    fprintf(f, "],\"moe_imbalance\":[");
    for (int i = 0; i < mc->n; i++) {
        const int64_t *c = mc->count + (size_t)i * (size_t)mc->E;
        int64_t max = 0, sum = 0;
        for (int e = 0; e < mc->E; e++) sum += c[e], max = c[e] > max ? c[e] : max;
        fprintf(f, "%s%.9g", i ? "," : "", sum ? (double)max * mc->E / (double)sum : 0.0); /* max / mean */
    }
    fprintf(f, "]");
}

static void bias_name(const cli_moe *mc, int i, char *name, size_t n) {
    snprintf(name, n, "model.layers.%d.mlp.route_bias", mc->layer[i]);
}

void cli_moe_bias_load(cli_moe *mc, const pipit_program *p) {
    if (mc->bias || !mc->n) return;
    mc->bias = malloc((size_t)mc->n * (size_t)mc->E * sizeof *mc->bias);
    if (!mc->bias) die("out of memory");
    for (int i = 0; i < mc->n; i++) {
        char name[96];
        bias_name(mc, i, name, sizeof name);
        if (pipit_program_get_param(p, name, mc->bias + (size_t)i * (size_t)mc->E, sizeof(float) * (size_t)mc->E))
            die("--balance-bias: %s", pipit_program_errmsg(p));
    }
}

void cli_moe_balance(cli_moe *mc, pipit_program *p, double coef) {
    double nb[256];
    if (mc->E > 256) die("--balance-bias: at most 256 experts (got %d)", mc->E);
    if (!mc->bias) die("--balance-bias: the routing biases were not read before the step");
    for (int i = 0; i < mc->n; i++) {
        const int64_t *c = mc->count + (size_t)i * (size_t)mc->E;
        float *b = mc->bias + (size_t)i * (size_t)mc->E;
        char name[96];
        bias_name(mc, i, name, sizeof name);
        int64_t sum = 0;
        for (int e = 0; e < mc->E; e++) sum += c[e];
        double mean = 0;
        for (int e = 0; e < mc->E; e++) { /* sign(sum / E - count), exactly: sum vs E x count */
            int64_t ec = c[e] * mc->E;
            nb[e] = (double)b[e] + coef * (double)((sum > ec) - (sum < ec));
            mean += nb[e];
        }
        mean /= mc->E;
        for (int e = 0; e < mc->E; e++) b[e] = (float)(nb[e] - mean);
        if (pipit_program_set_param(p, name, b, sizeof(float) * (size_t)mc->E))
            die("--balance-bias: %s", pipit_program_errmsg(p));
    }
}

void cli_moe_free(cli_moe *mc) {
    free(mc->layer), free(mc->choice), free(mc->count), free(mc->scratch), free(mc->bias);
    memset(mc, 0, sizeof *mc);
}
