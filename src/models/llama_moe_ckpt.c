/*
 * llama_moe_ckpt.c — a mixture-of-experts Llama read back from a checkpoint
 * pipit wrote (llama_moe.h): the MoE fields from the metadata the CLI
 * records (experts top_k capacity_factor dropless shared_experts moe_every
 * router aux_loss), checked against the router and expert tensors.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/llama_moe.h"
#include "util/common.h"

/* Metadata `key` as a number >= 0 (an integer when `integer`): 1 and *out, or a FORMAT message (absent too). */
static int meta_nonneg(const pipit_checkpoint *ck, const char *key, int integer, double *out) {
    const char *h = pipit_checkpoint_meta(ck, key);
    char *end = NULL;
    errno = 0;
    double v = h && ((*h >= '0' && *h <= '9') || *h == '.') ? strtod(h, &end) : -1;
    if (!h || !end || *end || errno || !(v >= 0) || !isfinite(v) || (integer && (v != floor(v) || v > 1e9))) {
        pipit__err(PIPIT_STATUS_FORMAT,
                   "checkpoint '%s' holds a mixture-of-experts Llama but its metadata '%s' is %s%s%s, not %s",
                   pipit_checkpoint_path(ck), key, h ? "'" : "absent", h ? h : "", h ? "'" : "",
                   integer ? "an integer >= 0" : "a number >= 0");
        return 0;
    }
    *out = v;
    return 1;
}

static int shape_is(const pipit_checkpoint *ck, const char *name, int nd, const int64_t *want) {
    int n = 0;
    int64_t s[PIPIT_MAX_DIMS];
    if (pipit_checkpoint_tensor_shape(ck, name, &n, s) != PIPIT_STATUS_OK || n != nd) return 0;
    for (int i = 0; i < nd; i++)
        if (want[i] >= 0 && s[i] != want[i]) return 0;
    return 1;
}

pipit_status pipit__llama_moe_from_checkpoint(const pipit_checkpoint *ck, int L, int64_t C, pipit_llama_config *f,
                                              int64_t *F) {
    const char *path = pipit_checkpoint_path(ck);
    char name[112];
    int first = -1;
    for (int l = 0; l < L && first < 0; l++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.router.weight", l);
        if (pipit_checkpoint_tensor_shape(ck, name, NULL, NULL) == PIPIT_STATUS_OK) first = l;
    }
    if (first < 0) return PIPIT_STATUS_OK; /* dense: the fields as given */
    static const char *const keys[] = {"experts", "top_k", "dropless", "shared_experts", "moe_every"};
    double v[5], cf = 0, aux = 0;
    for (int i = 0; i < 5; i++)
        if (!meta_nonneg(ck, keys[i], 1, &v[i])) return PIPIT_STATUS_FORMAT;
    if (!meta_nonneg(ck, "capacity_factor", 0, &cf) || !meta_nonneg(ck, "aux_loss", 0, &aux)) return PIPIT_STATUS_FORMAT;
    const char *router = pipit_checkpoint_meta(ck, "router");
    if (!router || (strcmp(router, "softmax") && strcmp(router, "sigmoid")))
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s' holds a mixture-of-experts Llama but its metadata 'router' is %s%s%s, not "
                          "softmax or sigmoid",
                          path, router ? "'" : "absent", router ? router : "", router ? "'" : "");
    pipit_llama_config g = *f;
    g.experts = (int)v[0], g.top_k = (int)v[1], g.dropless = (int)v[2], g.shared_experts = (int)v[3];
    g.moe_every = (int)v[4], g.capacity_factor = cf, g.aux_loss = aux, g.router = strcmp(router, "sigmoid") == 0;
    if (pipit__llama_moe_check(&g)) return PIPIT_STATUS_FORMAT;
    if (!pipit__llama_is_moe(&g, first))
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "checkpoint '%s': layer %d has a router but its metadata moe_every %d makes it dense", path,
                          first, g.moe_every);
    int64_t s[3];
    int nd = 0;
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_proj.weight", first);
    if (pipit_checkpoint_tensor_shape(ck, name, &nd, s) || nd != 3 || s[0] != g.experts || s[2] != C || s[1] < 1)
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': '%s' is missing or not [experts %d, F, %lld]", path,
                          name, g.experts, (long long)C);
    *F = s[1];
    snprintf(name, sizeof name, "model.layers.%d.mlp.router.weight", first);
    if (!shape_is(ck, name, 2, (int64_t[]){g.experts, C}))
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': '%s' is not [experts %d, %lld]", path, name, g.experts,
                          (long long)C);
    snprintf(name, sizeof name, "model.layers.%d.mlp.route_bias", first); /* the balance bias, when trained with one */
    g.route_bias = pipit_checkpoint_tensor_shape(ck, name, NULL, NULL) == PIPIT_STATUS_OK;
    if (g.route_bias && !shape_is(ck, name, 1, (int64_t[]){g.experts}))
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': '%s' is not [experts %d]", path, name, g.experts);
    *f = g;
    return PIPIT_STATUS_OK;
}

int pipit__llama_moe_uses(const pipit_llama_config *c, int l, const char *what) {
    if (!pipit__llama_is_moe(c, l)) return 0;
    static const char *const routed[] = {"mlp.router.weight", "mlp.experts.gate_proj.weight",
                                         "mlp.experts.up_proj.weight", "mlp.experts.down_proj.weight"};
    static const char *const shared[] = {"mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
                                         "mlp.shared_expert.down_proj.weight"};
    if (c->route_bias && strcmp(what, "mlp.route_bias") == 0) return 1;
    for (size_t i = 0; i < sizeof routed / sizeof routed[0]; i++)
        if (strcmp(what, routed[i]) == 0) return 1;
    for (size_t i = 0; c->shared_experts > 0 && i < sizeof shared / sizeof shared[0]; i++)
        if (strcmp(what, shared[i]) == 0) return 1;
    return 0;
}
