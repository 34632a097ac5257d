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

/* Metadata "route_unnormalized" (absent: 0, a file from before it or of a renormalising model): 0 or 1 into
 * *out, or a FORMAT message. */
static int meta_unnormalized(const pipit_checkpoint *ck, int *out) {
    const char *h = pipit_checkpoint_meta(ck, "route_unnormalized");
    *out = h && strcmp(h, "1") == 0;
    if (h && strcmp(h, "0") != 0 && strcmp(h, "1") != 0) {
        pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': metadata 'route_unnormalized' is '%s', not 0 or 1",
                   pipit_checkpoint_path(ck), h);
        return 0;
    }
    return 1;
}

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

/* The router's name in layer l for a layout (pipit_llama_config.moe_layout). */
static void router_name(char *name, size_t n, int layout, int l) {
    if (layout == PIPIT_LLAMA_MOE_MIXTRAL) snprintf(name, n, "model.layers.%d.block_sparse_moe.gate.weight", l);
    else snprintf(name, n, "model.layers.%d.mlp.%s.weight", l, layout == PIPIT_LLAMA_MOE_QWEN2 ? "gate" : "router");
}

/* A Hugging Face layout (Mixtral, Qwen2-MoE) whose first MoE layer is
 * `first`: experts, width, shared experts and their gate from the tensors;
 * top_k and the rest from pipit's metadata when it wrote the file, else
 * as given (a config.json beside it says them: the CLI reads it). */
static pipit_status hf_layout(const pipit_checkpoint *ck, int layout, int first, int64_t C, pipit_llama_config *f,
                              int64_t *F) {
    const char *path = pipit_checkpoint_path(ck);
    char name[160];
    int64_t s[PIPIT_MAX_DIMS];
    int nd = 0;
    router_name(name, sizeof name, layout, first);
    if (pipit_checkpoint_tensor_shape(ck, name, &nd, s) || nd != 2 || s[1] != C || s[0] < 1 || s[0] > 1000000)
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': '%s' is not [experts, %lld]", path, name, (long long)C);
    pipit_llama_config g = *f;
    g.experts = (int)s[0], g.moe_layout = layout, g.moe_every = first + 1;
    if (layout == PIPIT_LLAMA_MOE_MIXTRAL) snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.0.w1.weight", first);
    else snprintf(name, sizeof name, "model.layers.%d.mlp.experts.0.gate_proj.weight", first);
    if (pipit_checkpoint_tensor_shape(ck, name, &nd, s) || nd != 2 || s[1] != C || s[0] < 1 || s[0] > INT32_MAX)
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': '%s' is missing or not [F, %lld]", path, name, (long long)C);
    *F = s[0];
    g.shared_experts = 0, g.shared_gate = 0;
    snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert.gate_proj.weight", first);
    if (layout == PIPIT_LLAMA_MOE_QWEN2 && pipit_checkpoint_tensor_shape(ck, name, &nd, s) == PIPIT_STATUS_OK) {
        if (nd != 2 || s[1] != C || s[0] % *F || s[0] / *F > 1000000)
            return pipit__err(PIPIT_STATUS_FORMAT,
                              "checkpoint '%s': '%s' is not [S, %lld] with S a multiple of the experts' width %lld: "
                              "pipit's shared expert is shared_experts x F wide (shared_expert_intermediate_size a "
                              "multiple of moe_intermediate_size)",
                              path, name, (long long)C, (long long)*F);
        g.shared_experts = (int)(s[0] / *F);
        snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert_gate.weight", first);
        g.shared_gate = pipit_checkpoint_tensor_shape(ck, name, NULL, NULL) == PIPIT_STATUS_OK;
    }
    snprintf(name, sizeof name, "model.layers.%d.mlp.route_bias", first);
    g.route_bias = pipit_checkpoint_tensor_shape(ck, name, NULL, NULL) == PIPIT_STATUS_OK;
    if (pipit_checkpoint_meta(ck, "top_k")) { /* pipit wrote it: its fields */
        double v[3], cf = 0, aux = 0;
        static const char *const keys[] = {"top_k", "dropless", "moe_every"};
        for (int i = 0; i < 3; i++)
            if (!meta_nonneg(ck, keys[i], 1, &v[i])) return PIPIT_STATUS_FORMAT;
        if (!meta_nonneg(ck, "capacity_factor", 0, &cf) || !meta_nonneg(ck, "aux_loss", 0, &aux)) return PIPIT_STATUS_FORMAT;
        g.top_k = (int)v[0], g.dropless = (int)v[1], g.moe_every = (int)v[2], g.capacity_factor = cf, g.aux_loss = aux;
        g.router = 0; /* softmax */
        if (!meta_unnormalized(ck, &g.route_unnormalized)) return PIPIT_STATUS_FORMAT;
        if (pipit__llama_moe_check(&g)) return PIPIT_STATUS_FORMAT;
        if (!pipit__llama_is_moe(&g, first))
            return pipit__err(PIPIT_STATUS_FORMAT,
                              "checkpoint '%s': layer %d has a router but its metadata moe_every %d makes it dense", path,
                              first, g.moe_every);
    }
    *f = g;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__llama_moe_from_checkpoint(const pipit_checkpoint *ck, int L, int64_t C, pipit_llama_config *f,
                                              int64_t *F) {
    const char *path = pipit_checkpoint_path(ck);
    char name[112];
    int first = -1, layout = -1;
    for (int l = 0; l < L && first < 0; l++)
        for (int k = PIPIT_LLAMA_MOE_STACKED; k <= PIPIT_LLAMA_MOE_QWEN2 && first < 0; k++) {
            router_name(name, sizeof name, k, l);
            if (pipit_checkpoint_tensor_shape(ck, name, NULL, NULL) == PIPIT_STATUS_OK) first = l, layout = k;
        }
    if (first < 0) return PIPIT_STATUS_OK; /* dense: the fields as given */
    if (layout != PIPIT_LLAMA_MOE_STACKED) return hf_layout(ck, layout, first, C, f, F);
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
    g.moe_layout = PIPIT_LLAMA_MOE_STACKED, g.shared_gate = 0;
    g.experts = (int)v[0], g.top_k = (int)v[1], g.dropless = (int)v[2], g.shared_experts = (int)v[3];
    g.moe_every = (int)v[4], g.capacity_factor = cf, g.aux_loss = aux, g.router = strcmp(router, "sigmoid") == 0;
    if (!meta_unnormalized(ck, &g.route_unnormalized)) return PIPIT_STATUS_FORMAT;
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

/* Whether `what` is "<e>.<leaf>" with e < E a number without a leading zero. */
static int expert_leaf(const char *what, int E, const char *leaf) {
    const char *d = what;
    long e = 0;
    while (*what >= '0' && *what <= '9' && what - d < 9) e = 10 * e + (*what++ - '0');
    if (what == d || *what != '.' || (*d == '0' && what - d > 1) || e >= E) return 0;
    return strcmp(what + 1, leaf) == 0;
}

int pipit__llama_moe_uses(const pipit_llama_config *c, int l, const char *what) {
    if (!pipit__llama_is_moe(c, l)) return 0;
    if (c->shared_gate && strcmp(what, "mlp.shared_expert_gate.weight") == 0) return 1;
    if (c->moe_layout != PIPIT_LLAMA_MOE_STACKED) {
        int mix = c->moe_layout == PIPIT_LLAMA_MOE_MIXTRAL;
        const char *pre = mix ? "block_sparse_moe." : "mlp.";
        size_t n = strlen(pre);
        if (strncmp(what, pre, n) == 0) {
            if (strcmp(what + n, "gate.weight") == 0) return 1;
            if (strncmp(what + n, "experts.", 8) == 0) {
                static const char *const leaves[2][3] = {{"gate_proj.weight", "up_proj.weight", "down_proj.weight"},
                                                         {"w1.weight", "w3.weight", "w2.weight"}};
                for (int i = 0; i < 3; i++)
                    if (expert_leaf(what + n + 8, c->experts, leaves[mix][i])) return 1;
            }
        }
        if (c->route_bias && strcmp(what, "mlp.route_bias") == 0) return 1;
        static const char *const sh[] = {"mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
                                         "mlp.shared_expert.down_proj.weight"};
        for (size_t i = 0; c->shared_experts > 0 && i < 3; i++)
            if (strcmp(what, sh[i]) == 0) return 1;
        return 0;
    }
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
