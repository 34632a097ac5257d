/*
 * test_llama.c — the Llama builder's own contract (pipit_llama.h): the
 * config checks refuse what cannot be built with a message naming the
 * value; Meta's MLP-width rule and the parameter count against published
 * Llama sizes; the graph's parameters carry Hugging Face's names and
 * [out, in] shapes; the init is HF's and independent of the layout;
 * checkpoints give their config back, and a missing or mis-shaped tensor is
 * refused by name; config.json round trips and what pipit does not
 * implement is refused by key. (Numerics against transformers:
 * test_llama_oracle.sh; pipelines: pipeline_equivalence_llama.)
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/safetensors.h"
#include "pipit_llama.h"
#include "test.h"

static pipit_llama_config tiny(void) {
    return (pipit_llama_config){.vocab = 40, .max_ctx = 16, .ctx = 8, .layers = 2, .heads = 4, .kv_heads = 2,
                                .dim = 16, .ffn_hidden = 24, .norm_eps = 1e-5, .rope_theta = 1e4, .tied = 0,
                                .batch = 2, .stages = 1, .dtype = PIPIT_F32};
}

/* One refused config: INVALID and a message holding `needle`. */
#define REFUSED(field_assign, needle)                                   \
    do {                                                                \
        pipit_llama_config c_ = tiny();                                 \
        c_.field_assign;                                                \
        ASSERT_STATUS(pipit_llama_check(&c_), PIPIT_STATUS_INVALID);    \
        ASSERT_MSG_HAS(needle);                                         \
    } while (0)

PIPIT_TEST(llama_check_refuses_by_value) {
    pipit_llama_config c = tiny();
    ASSERT_OK(pipit_llama_check(&c));
    REFUSED(kv_heads = 3, "heads 4 is not a multiple of kv_heads 3");
    REFUSED(dim = 12, "head_dim 3 (dim 12 / heads 4) is odd");
    REFUSED(dim = 18, "dim 18 is not divisible by heads 4");
    REFUSED(ctx = 17, "ctx 17 exceeds max_ctx 16");
    REFUSED(stages = 3, "3 pipeline stages need at least 3 layers (have 2)");
    REFUSED(norm_eps = 0, "norm_eps 0 must be a positive number");
    REFUSED(rope_theta = NAN, "rope_theta nan must be a positive number");
    REFUSED(ffn_hidden = -1, "ffn_hidden -1 must be >= 1");
    REFUSED(kv_heads = -2, "kv_heads -2");
    REFUSED(tied = 2, "tied 2 is not 0 or 1");
    REFUSED(fused_head = 2, "fused_head 2 is not 0 (matmul head) or 1 (fused head)");
    REFUSED(dtype = PIPIT_I32, "dtype 2 is not f32 or f64");
    REFUSED(layers = 0, "layers 0");
    /* Meta's rule with a multiple_of it cannot use */
    REFUSED(ffn_hidden = 0, "multiple_of >= 1 (got 0)");
    /* sizes past 2^62 parameters: refused, never wrapped */
    c = tiny();
    c.vocab = c.dim = c.ffn_hidden = c.max_ctx = INT32_MAX - 1;
    c.heads = c.kv_heads = 1;
    c.dim = INT32_MAX - 1;
    c.layers = 1000;
    ASSERT_STATUS(pipit_llama_check(&c), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("exceed 2^62 parameters");
    ASSERT_STATUS(pipit_llama_check(NULL), PIPIT_STATUS_MISUSE);
    /* a refused config builds nothing and says why */
    pipit_graph *g = pipit_graph_new();
    c = tiny();
    c.kv_heads = 3;
    ASSERT_TRUE(pipit_llama_build(g, &c).id < 0);
    ASSERT_MSG_HAS("pipit_llama_build: llama: heads 4 is not a multiple of kv_heads 3");
    pipit_graph_free(g);
}

/* Published sizes: Llama 2 7B's MLP width from Meta's rule (dim 4096,
 * multiple_of 256: 11008) and its 6,738,415,616 parameters; Llama 3 8B's
 * (ffn_dim_multiplier 1.3, multiple_of 1024: 14336); Llama 2 70B's (1.3,
 * 4096: 28672); TinyLlama 1.1B (GQA 32/4, 1,100,048,384 parameters). */
PIPIT_TEST(llama_sizes_match_published_models) {
    pipit_llama_config c = {.vocab = 32000, .max_ctx = 4096, .ctx = 4096, .layers = 32, .heads = 32, .dim = 4096,
                            .multiple_of = 256, .norm_eps = 1e-5, .rope_theta = 1e4, .batch = 1, .stages = 1,
                            .dtype = PIPIT_F32};
    ASSERT_EQ_I64(pipit_llama_ffn_hidden(&c), 11008);
    ASSERT_EQ_I64(pipit_llama_num_params(&c), 6738415616LL);
    c.ffn_dim_multiplier = 1.3, c.multiple_of = 1024;
    ASSERT_EQ_I64(pipit_llama_ffn_hidden(&c), 14336);
    c.dim = 8192, c.heads = 64, c.multiple_of = 4096;
    ASSERT_EQ_I64(pipit_llama_ffn_hidden(&c), 28672);
    pipit_llama_config t = {.vocab = 32000, .max_ctx = 2048, .ctx = 2048, .layers = 22, .heads = 32, .kv_heads = 4,
                            .dim = 2048, .ffn_hidden = 5632, .norm_eps = 1e-5, .rope_theta = 1e4, .batch = 1,
                            .stages = 1, .dtype = PIPIT_F32};
    ASSERT_EQ_I64(pipit_llama_num_params(&t), 1100048384LL);
    /* FLOPs: 6 x the non-embedding matmul weights (+ the head) + 12 L T C */
    double n = 1100048384.0 - 32000.0 * 2048;
    ASSERT_NEAR_F64(pipit_llama_flops_per_token(&t), 6 * n + 12.0 * 22 * 2048 * 2048, 1);
    t.tied = 1;
    ASSERT_EQ_I64(pipit_llama_num_params(&t), 1100048384LL - 32000LL * 2048);
}

/* The graph's params: Hugging Face's names and nn.Linear's [out, in]
 * shapes, counted by pipit_llama_num_params; lm_head only when untied. */
PIPIT_TEST(llama_params_have_hf_names_and_layouts) {
    for (int tied = 0; tied < 2; tied++) {
        pipit_llama_config c = tiny();
        c.tied = tied;
        pipit_graph *g = pipit_graph_new();
        pipit_val loss = pipit_llama_build(g, &c);
        pipit_program *p = NULL;
        ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.microbatches = 1}, &p));
        const struct {
            const char *name;
            int64_t d0, d1;
        } want[] = {{"model.embed_tokens.weight", 40, 16}, {"model.layers.1.self_attn.q_proj.weight", 16, 16},
                    {"model.layers.1.self_attn.k_proj.weight", 8, 16}, {"model.layers.1.self_attn.v_proj.weight", 8, 16},
                    {"model.layers.1.self_attn.o_proj.weight", 16, 16}, {"model.layers.0.mlp.gate_proj.weight", 24, 16},
                    {"model.layers.0.mlp.up_proj.weight", 24, 16}, {"model.layers.0.mlp.down_proj.weight", 16, 24},
                    {"model.layers.0.input_layernorm.weight", 16, 0},
                    {"model.layers.0.post_attention_layernorm.weight", 16, 0}, {"model.norm.weight", 16, 0}};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            int nd;
            int64_t sh[PIPIT_MAX_DIMS];
            ASSERT_OK(pipit_program_param_shape(p, want[i].name, &nd, sh));
            ASSERT_EQ_I64(nd, want[i].d1 ? 2 : 1);
            ASSERT_EQ_I64(sh[0], want[i].d0);
            if (nd == 2) ASSERT_EQ_I64(sh[1], want[i].d1);
        }
        int64_t total = 0, n;
        for (int i = 0; i < pipit_program_num_params(p); i++) {
            ASSERT_OK(pipit_program_param_numel(p, pipit_program_param_name(p, i), &n));
            total += n;
        }
        ASSERT_EQ_I64(pipit_program_num_params(p), 1 + 2 * 9 + 1 + !tied);
        ASSERT_EQ_I64(total, pipit_llama_num_params(&c));
        ASSERT_EQ_I64(pipit_program_param_shape(p, "lm_head.weight", &(int){0}, (int64_t[4]){0}) == PIPIT_STATUS_OK,
                      !tied);
        pipit_program_free(p);
        pipit_graph_free(g);
    }
}

static double stddev_of(pipit_program *p, const char *name, double *mean) {
    int64_t n;
    pipit_program_param_numel(p, name, &n);
    float *w = malloc(sizeof(float) * (size_t)n);
    pipit_program_get_param(p, name, w, sizeof(float) * (size_t)n);
    double s = 0, s2 = 0;
    for (int64_t k = 0; k < n; k++) s += w[k], s2 += (double)w[k] * w[k];
    free(w);
    *mean = s / (double)n;
    return sqrt(s2 / (double)n - *mean * *mean);
}

/* Hugging Face's init: Linear and Embedding N(0, 0.02), RMSNorm weights 1;
 * and the same bits whatever the stage layout (seeded per name). */
PIPIT_TEST(llama_init_is_hfs_and_layout_free) {
    pipit_llama_config c = tiny();
    c.vocab = 512, c.dim = 64, c.heads = 4, c.ffn_hidden = 128, c.layers = 2;
    pipit_program *p[2] = {0};
    pipit_graph *g[2];
    pipit_schedule *sch = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch));
    for (int k = 0; k < 2; k++) {
        c.stages = k + 1;
        g[k] = pipit_graph_new();
        pipit_val loss = pipit_llama_build(g[k], &c);
        ASSERT_OK(pipit_compile(g[k], loss, &(pipit_options){.microbatches = 2, .schedule = k ? sch : NULL}, &p[k]));
        ASSERT_OK(pipit_llama_init(p[k], &c, 5));
    }
    double mean, sd = stddev_of(p[0], "model.embed_tokens.weight", &mean);
    ASSERT_NEAR_F64(sd, 0.02, 0.001);
    ASSERT_NEAR_F64(mean, 0, 0.001);
    sd = stddev_of(p[0], "model.layers.1.mlp.down_proj.weight", &mean);
    ASSERT_NEAR_F64(sd, 0.02, 0.001);
    sd = stddev_of(p[0], "model.layers.1.post_attention_layernorm.weight", &mean);
    ASSERT_NEAR_F64(mean, 1, 0);
    ASSERT_NEAR_F64(sd, 0, 0);
    for (int i = 0; i < pipit_program_num_params(p[0]); i++) {
        const char *name = pipit_program_param_name(p[0], i);
        int64_t n;
        pipit_program_param_numel(p[0], name, &n);
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        ASSERT_OK(pipit_program_get_param(p[0], name, a, sizeof(float) * (size_t)n));
        ASSERT_OK(pipit_program_get_param(p[1], name, b, sizeof(float) * (size_t)n));
        ASSERT_TRUE(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
        free(a);
        free(b);
    }
    for (int k = 0; k < 2; k++) {
        pipit_program_free(p[k]);
        pipit_graph_free(g[k]);
    }
    pipit_schedule_free(sch);
}

/* A compiled, initialised tiny model of config c saved to path with meta. */
static void save_model(pipit_llama_config c, const char *path, const char *const *meta) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_llama_build(g, &c);
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.microbatches = 1}, &p) || pipit_llama_init(p, &c, 3) ||
        pipit_checkpoint_save(p, path, meta))
        fprintf(stderr, "save_model: %s\n", pipit_errmsg());
    pipit_program_free(p);
    pipit_graph_free(g);
}

/* Loads path into a fresh program of config c: the status, message set. */
static pipit_status load_model(pipit_llama_config c, const char *path) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_llama_build(g, &c);
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(g, loss, &(pipit_options){.microbatches = 1}, &p);
    if (!s) s = pipit_checkpoint_load(p, path);
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

PIPIT_TEST(llama_checkpoint_config_and_bad_tensors) {
    pipit_llama_config c = tiny();
    const char *meta[] = {"heads", "4", "kv_heads", "2", "max_ctx", "16", "rope_theta", "500", "norm_eps", "1e-6", NULL};
    save_model(c, pipit_test_path("l.st"), meta);
    pipit_checkpoint *ck = NULL;
    ASSERT_OK(pipit_checkpoint_open(pipit_test_path("l.st"), &ck));
    pipit_llama_config f = {.norm_eps = 9, .rope_theta = 9};
    ASSERT_OK(pipit_llama_config_from_checkpoint(ck, &f));
    ASSERT_EQ_I64(f.vocab, 40);
    ASSERT_EQ_I64(f.dim, 16);
    ASSERT_EQ_I64(f.layers, 2);
    ASSERT_EQ_I64(f.heads, 4);
    ASSERT_EQ_I64(f.kv_heads, 2);
    ASSERT_EQ_I64(f.ffn_hidden, 24);
    ASSERT_EQ_I64(f.max_ctx, 16);
    ASSERT_EQ_I64(f.tied, 0);
    ASSERT_NEAR_F64(f.rope_theta, 500, 0);
    ASSERT_NEAR_F64(f.norm_eps, 1e-6, 0);
    pipit_checkpoint_free(ck);
    /* a tied file has no lm_head; loading it into an untied model names the missing tensor */
    pipit_llama_config t = c;
    t.tied = 1;
    save_model(t, pipit_test_path("t.st"), NULL);
    ASSERT_OK(pipit_checkpoint_open(pipit_test_path("t.st"), &ck));
    ASSERT_OK(pipit_llama_config_from_checkpoint(ck, &f));
    ASSERT_EQ_I64(f.tied, 1);
    ASSERT_EQ_I64(f.heads, 0); /* unrecorded: the caller must say */
    pipit_checkpoint_free(ck);
    ASSERT_STATUS(load_model(c, pipit_test_path("t.st")), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("lm_head.weight");
    /* other kv heads: k_proj's shape differs, named with both shapes */
    pipit_llama_config k = c;
    k.kv_heads = 4;
    ASSERT_STATUS(load_model(k, pipit_test_path("l.st")), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("model.layers.0.self_attn.k_proj.weight");
    /* metadata that contradicts the shapes, and files that are not Llama's */
    const char *bad[] = {"heads", "4", "kv_heads", "1", NULL};
    save_model(c, pipit_test_path("b.st"), bad);
    ASSERT_OK(pipit_checkpoint_open(pipit_test_path("b.st"), &ck));
    ASSERT_STATUS(pipit_llama_config_from_checkpoint(ck, &f), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("'model.layers.0.self_attn.k_proj.weight' has 8 rows, not kv_heads 1 x head_dim 4");
    pipit_checkpoint_free(ck);
    const char *neg[] = {"heads", "-4", NULL};
    save_model(c, pipit_test_path("n.st"), neg);
    ASSERT_OK(pipit_checkpoint_open(pipit_test_path("n.st"), &ck));
    ASSERT_STATUS(pipit_llama_config_from_checkpoint(ck, &f), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("metadata 'heads' is '-4', not a positive count");
    pipit_checkpoint_free(ck);
    ASSERT_STATUS(pipit_llama_config_from_checkpoint(NULL, &f), PIPIT_STATUS_MISUSE);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* A config.json with one extra member: refused (naming needle) or not. */
static pipit_status hf_with(const char *member, int *has) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"vocab_size\": 40, \"hidden_size\": 16, \"intermediate_size\": 24, "
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"rms_norm_eps\": 1e-06%s%s}",
             *member ? ", " : "", member);
    write_file(pipit_test_path("config.json"), text);
    pipit_llama_config c = tiny();
    return pipit_llama_config_from_hf(pipit_test_path("config.json"), &c, has);
}

#define HF_REFUSED(member, needle)                                          \
    do {                                                                    \
        ASSERT_STATUS(hf_with(member, &has), PIPIT_STATUS_INVALID);         \
        ASSERT_MSG_HAS(needle);                                             \
    } while (0)

PIPIT_TEST(llama_hf_config_round_trip_and_refusals) {
    pipit_llama_config c = tiny(), r = {0};
    c.max_ctx = 2048, c.rope_theta = 500000, c.norm_eps = 1e-6, c.tied = 1;
    FILE *w = fopen(pipit_test_path("w.json"), "w");
    ASSERT_OK(pipit_llama_write_hf_config(&c, w));
    fclose(w);
    int has = 0;
    ASSERT_OK(pipit_llama_config_from_hf(pipit_test_path("w.json"), &r, &has));
    ASSERT_EQ_I64(has, 0x3ff);
    ASSERT_EQ_I64(r.vocab, c.vocab);
    ASSERT_EQ_I64(r.dim, c.dim);
    ASSERT_EQ_I64(r.ffn_hidden, c.ffn_hidden);
    ASSERT_EQ_I64(r.layers, c.layers);
    ASSERT_EQ_I64(r.heads, c.heads);
    ASSERT_EQ_I64(r.kv_heads, c.kv_heads);
    ASSERT_EQ_I64(r.max_ctx, c.max_ctx);
    ASSERT_EQ_I64(r.tied, 1);
    ASSERT_TRUE(r.rope_theta == c.rope_theta && r.norm_eps == c.norm_eps);
    /* LlamaConfig's defaults for absent keys: kv heads = heads, untied */
    ASSERT_OK(hf_with("", &has));
    ASSERT_TRUE(!(has & PIPIT_LLAMA_HAS_MAX_CTX) && (has & PIPIT_LLAMA_HAS_KV_HEADS));
    ASSERT_OK(hf_with("\"rope_scaling\": null, \"attention_bias\": false, \"head_dim\": 4, \"pretraining_tp\": 1", &has));
    HF_REFUSED("\"attention_bias\": true", "\"attention_bias\" is not false");
    HF_REFUSED("\"mlp_bias\": true", "\"mlp_bias\" is not false");
    HF_REFUSED("\"head_dim\": 8", "\"head_dim\" 8 is not hidden_size 16 / num_attention_heads 4");
    HF_REFUSED("\"hidden_act\": \"gelu\"", "\"hidden_act\" is \"gelu\", not \"silu\"");
    HF_REFUSED("\"attention_dropout\": 0.1", "\"attention_dropout\" is not 0");
    HF_REFUSED("\"model_type\": \"mistral\"", "\"model_type\" is \"mistral\": pipit builds \"llama\"");
    ASSERT_STATUS(hf_with("\"num_key_value_heads\": 2.5", &has), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("\"num_key_value_heads\" must be a positive integer");
    ASSERT_STATUS(hf_with("\"tie_word_embeddings\": 1", &has), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("config.json': \"tie_word_embeddings\" must be true or false");
    write_file(pipit_test_path("bad.json"), "[1, 2]");
    ASSERT_STATUS(pipit_llama_config_from_hf(pipit_test_path("bad.json"), &r, NULL), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("not a JSON object");
    ASSERT_STATUS(pipit_llama_config_from_hf(pipit_test_path("absent.json"), &r, NULL), PIPIT_STATUS_IO);
    c.kv_heads = 3;
    ASSERT_STATUS(pipit_llama_write_hf_config(&c, stdout), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("kv_heads 3");
}

/* transformers < 5 and >= 5 spell RoPE differently; both are read, and
 * two spellings that disagree, a rope_type pipit does not implement, a
 * llama3 without its numbers and keys twice are refused. */
PIPIT_TEST(llama_hf_config_rope_forms) {
    int has = 0;
    pipit_llama_config r = tiny();
    /* transformers >= 5: rope_parameters only (before the fix: 10000 and exit 0) */
    write_file(pipit_test_path("config.json"),
               "{\"hidden_size\": 16, \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"default\"}}");
    ASSERT_OK(pipit_llama_config_from_hf(pipit_test_path("config.json"), &r, &has));
    ASSERT_TRUE(r.rope_theta == 500000.0 && (has & PIPIT_LLAMA_HAS_ROPE_THETA) && (has & PIPIT_LLAMA_HAS_ROPE_SCALING));
    ASSERT_TRUE(r.rope_scaling.factor == 0);
    /* both spellings, agreeing; then disagreeing */
    ASSERT_OK(hf_with("\"rope_theta\": 500000, \"rope_parameters\": {\"rope_theta\": 500000.0}", &has));
    HF_REFUSED("\"rope_theta\": 10000, \"rope_parameters\": {\"rope_theta\": 500000.0}",
               "\"rope_theta\" and \"rope_parameters.rope_theta\" disagree");
    HF_REFUSED("\"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
               "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}, "
               "\"rope_parameters\": {\"rope_type\": \"default\"}",
               "\"rope_scaling.type\" and \"rope_parameters.rope_type\" disagree");
    /* llama3, in the older rope_scaling with "type" and in rope_parameters */
    const char *l3 = "\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
                     "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192";
    for (int form = 0; form < 3; form++) {
        char m[512];
        if (form == 0) snprintf(m, sizeof m, "\"rope_theta\": 500000.0, \"rope_scaling\": {%s}", l3);
        else if (form == 1) snprintf(m, sizeof m, "\"rope_parameters\": {\"rope_theta\": 500000.0, %s}", l3);
        else snprintf(m, sizeof m, "\"rope_theta\": 500000.0, \"rope_scaling\": {%s}, \"rope_parameters\": {%s}", l3, l3);
        char text[1024];
        snprintf(text, sizeof text, "{\"vocab_size\": 40, \"num_attention_heads\": 4, %s}", m);
        write_file(pipit_test_path("config.json"), text);
        r = tiny();
        ASSERT_OK(pipit_llama_config_from_hf(pipit_test_path("config.json"), &r, &has));
        ASSERT_TRUE(r.rope_theta == 500000.0 && r.rope_scaling.factor == 32.0 && r.rope_scaling.low_freq_factor == 1.0);
        ASSERT_TRUE(r.rope_scaling.high_freq_factor == 4.0 && r.rope_scaling.original_max_position_embeddings == 8192);
    }
    /* written back as rope_scaling (with floats: transformers warns on an int factor), read back the same */
    r.max_ctx = 16;
    r.dim = 16, r.ffn_hidden = 24, r.layers = 2, r.kv_heads = 2;
    FILE *w = fopen(pipit_test_path("w.json"), "w");
    ASSERT_OK(pipit_llama_write_hf_config_ex(&r, 3, 39, w));
    fclose(w);
    pipit_llama_config b = tiny();
    ASSERT_OK(pipit_llama_config_from_hf(pipit_test_path("w.json"), &b, &has));
    ASSERT_TRUE(b.rope_scaling.factor == 32.0 && b.rope_scaling.high_freq_factor == 4.0 &&
                b.rope_scaling.original_max_position_embeddings == 8192);
    char text[2048] = "";
    FILE *rf = fopen(pipit_test_path("w.json"), "r");
    size_t got = fread(text, 1, sizeof text - 1, rf);
    fclose(rf);
    text[got] = 0;
    ASSERT_TRUE(strstr(text, "\"factor\": 32.0,") && strstr(text, "\"low_freq_factor\": 1.0,"));
    ASSERT_TRUE(strstr(text, "\"bos_token_id\": 3,") && strstr(text, "\"eos_token_id\": 39,"));
    w = fopen(pipit_test_path("w.json"), "w");
    ASSERT_STATUS(pipit_llama_write_hf_config_ex(&r, 0, 40, w), PIPIT_STATUS_INVALID); /* 40 is not an id of 40 */
    fclose(w);
    ASSERT_MSG_HAS("eos_token_id 40");
    /* what pipit does not implement, by name */
    HF_REFUSED("\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", "\"rope_scaling.rope_type\" is \"yarn\"");
    HF_REFUSED("\"rope_parameters\": {\"rope_type\": \"dynamic\"}", "\"dynamic\": pipit implements");
    HF_REFUSED("\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}", "\"linear\"");
    HF_REFUSED("\"rope_parameters\": {\"rope_type\": \"default\", \"factor\": 2.0}",
               "\"rope_parameters.factor\" is given but the rope_type is \"default\"");
    HF_REFUSED("\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
               "\"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}",
               "\"rope_parameters.high_freq_factor\" 1 must exceed \"rope_parameters.low_freq_factor\" 4");
    HF_REFUSED("\"rope_parameters\": {\"rope_type\": \"llama3\", \"attention_factor\": 1.0}",
               "\"rope_parameters.attention_factor\": pipit does not implement it");
    ASSERT_STATUS(hf_with("\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}", &has), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("rope_type \"llama3\" needs \"low_freq_factor\"");
    ASSERT_STATUS(hf_with("\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                          "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192.5}",
                          &has),
                  PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("\"rope_parameters.original_max_position_embeddings\" must be a positive integer");
    ASSERT_STATUS(hf_with("\"rope_scaling\": 8", &has), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("\"rope_scaling\" must be an object or null");
    /* keys twice (cJSON would read the first) and text after the object */
    ASSERT_STATUS(hf_with("\"rope_theta\": 10000, \"rope_theta\": 500000", &has), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("key \"rope_theta\" appears twice");
    ASSERT_STATUS(hf_with("\"rope_parameters\": {\"rope_theta\": 1.0, \"rope_theta\": 2.0}", &has), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("key \"rope_parameters.rope_theta\" appears twice");
    write_file(pipit_test_path("config.json"), "{\"hidden_size\": 16} {\"hidden_size\": 32}");
    ASSERT_STATUS(pipit_llama_config_from_hf(pipit_test_path("config.json"), &r, &has), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("text follows the JSON value (at byte 20 of 39)");
    write_file(pipit_test_path("config.json"), "{\"hidden_size\": 16}\n\n");
    ASSERT_OK(pipit_llama_config_from_hf(pipit_test_path("config.json"), &r, &has)); /* whitespace may follow */
}

/* pipit's metadata records the scaling; a checkpoint's tensors that the
 * builder would not read (another model's) are refused by name. */
PIPIT_TEST(llama_checkpoint_scaling_and_unused_tensors) {
    pipit_llama_config c = tiny();
    c.rope_scaling = (pipit_rope_scaling){8, 1, 4, 8};
    const char *meta[] = {"heads", "4", "rope_type", "llama3", "rope_factor", "8", "rope_low_freq_factor", "1",
                          "rope_high_freq_factor", "4", "rope_original_max_position_embeddings", "8", NULL};
    save_model(c, pipit_test_path("s.st"), meta);
    pipit_checkpoint *ck = NULL;
    ASSERT_OK(pipit_checkpoint_open(pipit_test_path("s.st"), &ck));
    pipit_llama_config f = {0};
    ASSERT_OK(pipit_llama_config_from_checkpoint(ck, &f));
    ASSERT_TRUE(f.rope_scaling.factor == 8 && f.rope_scaling.low_freq_factor == 1 && f.rope_scaling.high_freq_factor == 4 &&
                f.rope_scaling.original_max_position_embeddings == 8);
    pipit_checkpoint_free(ck);
    const char *yarn[] = {"heads", "4", "rope_type", "yarn", NULL};
    save_model(c, pipit_test_path("y.st"), yarn);
    ASSERT_OK(pipit_checkpoint_open(pipit_test_path("y.st"), &ck));
    ASSERT_STATUS(pipit_llama_config_from_checkpoint(ck, &f), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("metadata 'rope_type' is 'yarn'");
    pipit_checkpoint_free(ck);
    const char *half[] = {"heads", "4", "rope_type", "llama3", "rope_factor", "8", NULL};
    save_model(c, pipit_test_path("h.st"), half);
    ASSERT_OK(pipit_checkpoint_open(pipit_test_path("h.st"), &ck));
    ASSERT_STATUS(pipit_llama_config_from_checkpoint(ck, &f), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("'rope_low_freq_factor' is missing");
    pipit_checkpoint_free(ck);
    /* the file's tensors plus one more: refused or not, by name */
    pipit__st_file *src = NULL;
    ASSERT_OK(pipit__st_read(pipit_test_path("s.st"), &src));
    int n = pipit__st_count(src);
    pipit__st_tensor t[64];
    ASSERT_TRUE(n < 63);
    for (int i = 0; i < n; i++) t[i] = *pipit__st_get(src, i);
    static const float bias[16];
    const struct {
        const char *name;
        int refused;
    } extra[] = {{"model.layers.2.mlp.up_proj.weight", 1}, /* a layer past the last (Qwen2 q/k/v biases: attn_bias, test_llama_hf_layout.c) */
                 {"model.layers.01.mlp.up_proj.weight", 1},       /* not a name the builder forms */
                 {"lm_head.bias", 1},
                 {"opt.m.model.norm.weight", 0},                  /* pipit's optimizer state */
                 {"opt.v.model.layers.9.mlp.up_proj.weight", 1},  /* ... of no param */
                 {"model.layers.1.self_attn.rotary_emb.inv_freq", 0}}; /* older transformers' buffer */
    for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++) {
        t[n] = (pipit__st_tensor){(char *)extra[k].name, PIPIT_F32, 1, {16}, sizeof bias, bias};
        ASSERT_OK(pipit__st_write(pipit_test_path("x.st"), t, n + 1, NULL));
        ASSERT_OK(pipit_checkpoint_open(pipit_test_path("x.st"), &ck));
        pipit_status s = pipit_llama_config_from_checkpoint(ck, &f);
        pipit_checkpoint_free(ck);
        if (!extra[k].refused) {
            ASSERT_OK(s);
            continue;
        }
        ASSERT_STATUS(s, PIPIT_STATUS_FORMAT);
        ASSERT_MSG_HAS(extra[k].name);
        ASSERT_MSG_HAS("is not used by the llama builder");
    }
    pipit__st_free(src);
}

PIPIT_TEST(llama_feeds_and_misuse) {
    pipit_llama_config c = tiny();
    int32_t tok[16] = {0}, tgt[16] = {0};
    pipit_feed f[2];
    ASSERT_OK(pipit_llama_feeds(&c, tok, tgt, f));
    ASSERT_TRUE(strcmp(f[0].name, PIPIT_LLAMA_TOKENS) == 0 && f[0].nbytes == sizeof tok);
    ASSERT_TRUE(strcmp(f[1].name, PIPIT_LLAMA_TARGETS) == 0 && f[1].data == tgt);
    ASSERT_STATUS(pipit_llama_feeds(&c, NULL, tgt, f), PIPIT_STATUS_MISUSE);
    ASSERT_MSG_HAS("NULL tokens");
    c.batch = 0;
    ASSERT_STATUS(pipit_llama_feeds(&c, tok, tgt, f), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_llama_init(NULL, &c, 1), PIPIT_STATUS_MISUSE);
    ASSERT_EQ_I64(pipit_llama_num_params(NULL), 0);
    ASSERT_EQ_I64(pipit_llama_stage_first_layer(&c, 5), -1);
    c = tiny();
    c.stages = 2, c.layers = 5;
    ASSERT_EQ_I64(pipit_llama_stage_first_layer(&c, 1), 3);
    ASSERT_TRUE(pipit_llama_build(NULL, &c).id < 0);
    ASSERT_MSG_HAS("pipit_llama_build: graph is NULL");
}
