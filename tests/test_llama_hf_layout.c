/*
 * test_llama_hf_layout.c — the Llama builder's Hugging Face layouts
 * (pipit_llama_config's moe_layout, attn_bias, shared_gate,
 * route_unnormalized; src/models/llama_moe.c):
 *   - Mixtral's and Qwen2-MoE's per-expert params, concatenated in the
 *     graph, give the bits of pipit's stacked experts holding the same
 *     weights (expert e = slice e): the loss and every parameter after
 *     AdamW steps with clipping (the concat's gradient splits back exactly);
 *   - the refusals by message.
 * The numerics against transformers (biases, the shared expert's gate,
 * unnormalised top-k): tests/test_moe_oracle.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"
#include "pipit_llama.h"
#include "pipit_moe.h"
#include "test.h"

static pipit_llama_config stacked(void) {
    return (pipit_llama_config){.vocab = 40, .max_ctx = 16, .ctx = 8, .layers = 2, .heads = 4, .kv_heads = 2,
                                .dim = 16, .ffn_hidden = 12, .norm_eps = 1e-5, .rope_theta = 1e4, .batch = 2,
                                .stages = 1, .dtype = PIPIT_F32, .experts = 3, .top_k = 2, .capacity_factor = 1.0,
                                .aux_loss = 0.01};
}

static pipit_program *compile(pipit_graph **g, const pipit_llama_config *c) {
    *g = pipit_graph_new();
    pipit_val loss = pipit_llama_build(*g, c);
    pipit_program *p = NULL;
    if (pipit_graph_status(*g) ||
        pipit_compile(*g, loss, &(pipit_options){.optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1), .clip_norm = 0.5},
                      &p))
        return NULL;
    return p;
}

/* The stacked tensor of HF param `name` and the expert it is (-1: the same name, or the router). */
static void source(const pipit_llama_config *hf, const char *name, char *src, size_t n, int *e) {
    int l = -1, x = -1, off = 0;
    char w[16] = "";
    *e = -1;
    snprintf(src, n, "%s", name);
    int o1 = 0, o2 = 0;
    if ((sscanf(name, "model.layers.%d.block_sparse_moe.gate.weight%n", &l, &o1) == 1 && o1 && name[o1] == 0) ||
        (sscanf(name, "model.layers.%d.mlp.gate.weight%n", &l, &o2) == 1 && o2 && name[o2] == 0)) {
        snprintf(src, n, "model.layers.%d.mlp.router.weight", l);
    } else if (hf->moe_layout == PIPIT_LLAMA_MOE_MIXTRAL &&
               sscanf(name, "model.layers.%d.block_sparse_moe.experts.%d.%2[w0-9].weight%n", &l, &x, w, &off) == 3 &&
               name[off] == 0) {
        snprintf(src, n, "model.layers.%d.mlp.experts.%s_proj.weight", l,
                 strcmp(w, "w1") == 0 ? "gate" : strcmp(w, "w3") == 0 ? "up" : "down");
        *e = x;
    } else if (sscanf(name, "model.layers.%d.mlp.experts.%d.%15[a-z]_proj.weight%n", &l, &x, w, &off) == 3 &&
               name[off] == 0) {
        snprintf(src, n, "model.layers.%d.mlp.experts.%s_proj.weight", l, w);
        *e = x;
    }
}

/* Every param of hf against its stacked source: copy (to) or compare bits
 * (!to); 1 when all went well (and, comparing, all were equal). */
static int match(pipit_program *st, pipit_program *hfp, const pipit_llama_config *hf, int to) {
    int ok = 1;
    for (int i = 0, n = pipit_program_num_params(hfp); i < n && ok; i++) {
        const char *name = pipit_program_param_name(hfp, i);
        char src[200];
        int e = 0;
        int64_t want = 0, have = 0;
        source(hf, name, src, sizeof src, &e);
        if (pipit_program_param_numel(hfp, name, &want) || pipit_program_param_numel(st, src, &have)) {
            fprintf(stderr, "  %s / %s: %s\n", name, src, pipit_errmsg());
            return 0;
        }
        float *a = malloc(sizeof(float) * (size_t)have), *b = malloc(sizeof(float) * (size_t)want);
        size_t at = e < 0 ? 0 : (size_t)e * (size_t)want;
        ok = a && b && !pipit_program_get_param(st, src, a, sizeof(float) * (size_t)have);
        if (ok && to) ok = !pipit_program_set_param(hfp, name, a + at, sizeof(float) * (size_t)want);
        if (ok && !to)
            ok = !pipit_program_get_param(hfp, name, b, sizeof(float) * (size_t)want) &&
                 memcmp(a + at, b, sizeof(float) * (size_t)want) == 0;
        if (!ok) fprintf(stderr, "  %s differs from %s (expert %d)\n", name, src, e);
        free(a);
        free(b);
    }
    return ok;
}

PIPIT_TEST(llama_hf_layouts_equal_stacked) {
    for (int layout = PIPIT_LLAMA_MOE_MIXTRAL; layout <= PIPIT_LLAMA_MOE_QWEN2; layout++) {
        pipit_llama_config c = stacked(), h = stacked();
        if (layout == PIPIT_LLAMA_MOE_QWEN2) c.shared_experts = h.shared_experts = 1; /* the same names in both */
        h.moe_layout = layout;
        pipit_graph *gs, *gh;
        pipit_program *ps = compile(&gs, &c), *ph = compile(&gh, &h);
        ASSERT_TRUE(ps && ph);
        ASSERT_OK(pipit_llama_init(ps, &c, 11));
        /* 2 layers: 3 stacked weights each become E per-expert params */
        ASSERT_EQ_I64(pipit_program_num_params(ph), pipit_program_num_params(ps) + 2 * 3 * (c.experts - 1));
        ASSERT_EQ_I64(pipit_llama_num_params(&h), pipit_llama_num_params(&c));
        ASSERT_TRUE(match(ps, ph, &h, 1));
        int32_t tok[16], tgt[16];
        for (int i = 0; i < 16; i++) tok[i] = (i * 7 + 3) % 40, tgt[i] = (i * 5 + 1) % 40;
        pipit_feed f[2];
        ASSERT_OK(pipit_llama_feeds(&c, tok, tgt, f));
        for (int step = 0; step < 3; step++) {
            pipit_metrics a, b;
            ASSERT_OK(pipit_step(ps, f, 2, 1, &a));
            ASSERT_OK(pipit_step(ph, f, 2, 1, &b));
            ASSERT_TRUE(memcmp(&a.loss, &b.loss, sizeof a.loss) == 0);
        }
        ASSERT_TRUE(match(ps, ph, &h, 0)); /* every param after 3 AdamW steps, bit for bit */
        pipit_program_free(ps);
        pipit_program_free(ph);
        pipit_graph_free(gs);
        pipit_graph_free(gh);
    }
}

/* The config's refusal of c, by message (1: as expected). */
static int refused(pipit_llama_config c, const char *word) {
    if (pipit_llama_check(&c) == PIPIT_STATUS_INVALID && strstr(pipit_errmsg(), word)) return 1;
    fprintf(stderr, "  not refused naming '%s': %s\n", word, pipit_errmsg());
    return 0;
}

PIPIT_TEST(llama_hf_layout_refusals) {
    pipit_llama_config c = stacked();
    c.attn_bias = 2;
    ASSERT_TRUE(refused(c, "attn_bias 2"));
    c = stacked(), c.moe_layout = 3;
    ASSERT_TRUE(refused(c, "moe_layout 3"));
    c = stacked(), c.moe_layout = PIPIT_LLAMA_MOE_MIXTRAL, c.shared_experts = 1;
    ASSERT_TRUE(refused(c, "Mixtral) has no shared experts"));
    c = stacked(), c.shared_gate = 1;
    ASSERT_TRUE(refused(c, "shared_gate 1"));
    c = stacked(), c.route_unnormalized = 1, c.router = PIPIT_ROUTER_SIGMOID;
    ASSERT_TRUE(refused(c, "route_unnormalized 1"));
    c = stacked(), c.experts = c.top_k = 0, c.capacity_factor = c.aux_loss = 0, c.moe_layout = 1;
    ASSERT_TRUE(refused(c, "moe_layout"));
    /* the builders: biases with tensor parallelism, per-expert layouts with expert parallelism */
    c = stacked(), c.experts = c.top_k = 0, c.capacity_factor = c.aux_loss = 0, c.attn_bias = 1;
    pipit_graph *g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_tensor_parallel(g, 2));
    int ok = pipit_llama_build(g, &c).id < 0 && strstr(pipit_errmsg(), "attention biases");
    if (!ok) fprintf(stderr, "  tp: %s\n", pipit_errmsg());
    pipit_graph_free(g);
    ASSERT_TRUE(ok);
    c = stacked(), c.moe_layout = PIPIT_LLAMA_MOE_MIXTRAL, c.experts = 4;
    g = pipit_graph_new();
    ASSERT_OK(pipit_graph_set_expert_parallel(g, 2));
    ok = pipit_llama_build(g, &c).id < 0 && strstr(pipit_errmsg(), "per-expert");
    if (!ok) fprintf(stderr, "  ep: %s\n", pipit_errmsg());
    pipit_graph_free(g);
    ASSERT_TRUE(ok);
    /* writing a config.json of what no Hugging Face class has */
    c = stacked();
    FILE *f = tmpfile();
    ASSERT_TRUE(f != NULL);
    ok = pipit_llama_write_hf_config(&c, f) == PIPIT_STATUS_INVALID && strstr(pipit_errmsg(), "stacked experts");
    c.moe_layout = PIPIT_LLAMA_MOE_MIXTRAL, c.router = PIPIT_ROUTER_SIGMOID;
    ok = ok && pipit_llama_write_hf_config(&c, f) == PIPIT_STATUS_INVALID && strstr(pipit_errmsg(), "sigmoid router");
    fclose(f);
    ASSERT_TRUE(ok);
}
