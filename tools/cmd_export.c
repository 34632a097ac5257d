/*
 * cmd_export.c — `pipit export --hf DIR --init FILE`: a checkpoint (a
 * training one with its optimizer state, or weights only) as a folder that
 * Hugging Face transformers' from_pretrained(DIR) loads without a warning:
 * model.safetensors with the weights alone under the model's Hugging Face
 * names, config.json, and, with --tokenizer, tokenizer.json (with a
 * tokenizer_config.json for AutoTokenizer). The model
 * kind (--kind, default: the checkpoint's "model" metadata, else what its
 * tensor names say, else gpt2) picks one row of KINDS: how to open the checkpoint's model and what its
 * config.json says. A new model family adds a row.
 *
 * bos_token_id and eos_token_id (config.json): the tokenizer's
 * "<|endoftext|>" when --tokenizer has one, else the vocabulary's last id,
 * V - 1 (GPT-2's own <|endoftext|> is its last id 50256; in a byte-level
 * model V - 1 = 255 is a byte UTF-8 text never holds). Without them
 * transformers would assume GPT-2's 50256 whatever the vocabulary.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "flags.h"
#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_io.h"
#include "pipit_text.h"
#include "train_cli.h"

/* What an export needs from the command line. */
typedef struct {
    const char *dir, *init;
    int heads;               /* --heads (0: from the checkpoint) */
    int bos, eos;            /* config.json's bos_token_id and eos_token_id */
    const pipit_checkpoint *ck;
    const flag_cmd *c;       /* the flags given */
} export_args;

/* ------------------------------------------------------------------ gpt2 */

/* The model's sizes from the file (heads from its metadata or --heads). */
static pipit_gpt2_config gpt2_config(const export_args *a) {
    pipit_gpt2_config cfg = {0};
    if (pipit_gpt2_config_from_checkpoint(a->ck, &cfg)) die("--init: %s", pipit_errmsg());
    if (a->heads) {
        if (cfg.heads && cfg.heads != a->heads)
            die("--heads %d disagrees with checkpoint '%s' (%d)", a->heads, a->init, cfg.heads);
        cfg.heads = a->heads;
    }
    if (!cfg.heads) die("checkpoint '%s' does not record its head count: pass --heads", a->init);
    cfg.ctx = 1; /* nothing runs: the smallest activations */
    cfg.batch = 1;
    cfg.stages = 1;
    cfg.dtype = PIPIT_F32;
    if (pipit_gpt2_check(&cfg)) die("--init '%s': %s", a->init, pipit_errmsg());
    return cfg;
}

/* GPT2LMHeadModel's config: pipit's GPT-2 is the Hugging Face one (tanh
 * GELU = gelu_new, LayerNorm eps 1e-5, head tied to wte) without dropout. */
static void gpt2_write_config(FILE *f, const pipit_gpt2_config *c, int bos, int eos) {
    fprintf(f,
            "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
            "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
            "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
            "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
            "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
            "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n"
            "  \"scale_attn_by_inverse_layer_idx\": false,\n  \"reorder_and_upcast_attn\": false,\n"
            "  \"tie_word_embeddings\": true,\n  \"torch_dtype\": \"float32\",\n  \"use_cache\": true,\n"
            "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d\n}\n",
            c->vocab, c->max_ctx, c->max_ctx, c->dim, c->layers, c->heads, bos, eos);
}

static int export_gpt2(const export_args *a, const char *weights, FILE *config) {
    pipit_gpt2_config cfg = gpt2_config(a);
    pipit_graph *g = pipit_graph_new();
    if (!g) die("out of memory");
    pipit_val loss = pipit_gpt2_build(g, &cfg);
    if (pipit_graph_status(g)) die("model: %s", pipit_errmsg());
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.forward_only = 1}, &p)) die("compile: %s", pipit_errmsg());
    if (pipit_checkpoint_load_into(p, a->ck)) die("--init: %s", pipit_errmsg());
    char heads[16], layers[16];
    snprintf(heads, sizeof heads, "%d", cfg.heads);
    snprintf(layers, sizeof layers, "%d", cfg.layers);
    /* "format": "pt" is what transformers asks of a safetensors file; heads
     * and layers let pipit read the file back (eval, sample, --init) */
    const char *meta[] = {"format", "pt", "model", "gpt2", "heads", heads, "layers", layers, NULL};
    if (pipit_checkpoint_save(p, weights, meta)) die("--hf: %s", pipit_errmsg());
    gpt2_write_config(config, &cfg, a->bos, a->eos);
    pipit_program_free(p);
    pipit_graph_free(g);
    return cfg.max_ctx;
}

/* ----------------------------------------------------------------- llama */

/* The tensor of a stacked-experts program (pipit's own MoE layout) that a
 * Mixtral-named param `name` comes from: the router, or expert e's slice of
 * a stacked [E, d0, d1] weight (*e set); else the same name. */
static void stacked_source(const char *name, char *src, size_t n, int *e) {
    int l = -1, x = -1, off = 0;
    char w[3] = "";
    *e = -1;
    if (sscanf(name, "model.layers.%d.block_sparse_moe.gate.weight%n", &l, &off) == 1 && name[off] == 0) {
        snprintf(src, n, "model.layers.%d.mlp.router.weight", l);
        return;
    }
    if (sscanf(name, "model.layers.%d.block_sparse_moe.experts.%d.%2[w0-9].weight%n", &l, &x, w, &off) == 3 &&
        name[off] == 0) {
        snprintf(src, n, "model.layers.%d.mlp.experts.%s_proj.weight", l,
                 strcmp(w, "w1") == 0 ? "gate" : strcmp(w, "w3") == 0 ? "up" : "down");
        *e = x;
        return;
    }
    snprintf(src, n, "%s", name);
}

/* pipit's stacked experts (moe_layout 0) as Mixtral's per-expert params:
 * a program of the Mixtral layout (*lc changed to it) holding p's weights
 * (expert e of a stacked [E, d0, d1] is its contiguous slice e). */
static pipit_program *stacked_to_mixtral(pipit_program *p, pipit_llama_config *lc, pipit_graph **g2) {
    lc->moe_layout = PIPIT_LLAMA_MOE_MIXTRAL;
    if (pipit_llama_check(lc)) die("--hf: no Hugging Face model for this mixture of experts: %s", pipit_errmsg());
    *g2 = pipit_graph_new();
    if (!*g2) die("out of memory");
    pipit_val loss = pipit_llama_build(*g2, lc);
    pipit_program *q = NULL;
    if (pipit_graph_status(*g2) || pipit_compile(*g2, loss, &(pipit_options){.forward_only = 1}, &q))
        die("model: %s", pipit_errmsg());
    for (int i = 0, n = pipit_program_num_params(q); i < n; i++) {
        const char *name = pipit_program_param_name(q, i);
        char src[256];
        int e = 0;
        int64_t want = 0, have = 0;
        stacked_source(name, src, sizeof src, &e);
        if (pipit_program_param_numel(q, name, &want) || pipit_program_param_numel(p, src, &have))
            die("--hf: %s", pipit_errmsg());
        float *buf = malloc(sizeof(float) * (size_t)have);
        if (!buf) die("out of memory");
        if (pipit_program_get_param(p, src, buf, sizeof(float) * (size_t)have)) die("--hf: %s", pipit_errmsg());
        size_t at = e < 0 ? 0 : (size_t)e * (size_t)want;
        if (pipit_program_set_param(q, name, buf + at, sizeof(float) * (size_t)want)) die("--hf: %s", pipit_errmsg());
        free(buf);
    }
    return q;
}

/* LlamaForCausalLM's config and the weights under its names (pipit's own):
 * the sizes from the file's tensors, heads and the rest from its metadata
 * or a config.json beside it, as `pipit train --init` reads them. Qwen2,
 * Mixtral and Qwen2-MoE models (their layouts, pipit_llama_config) keep
 * their classes' names; pipit's own stacked experts are renamed as
 * Mixtral's (MixtralForCausalLM computes every choice: dropless). */
static int export_llama(const export_args *a, const char *weights, FILE *config) {
    opts o;
    default_opts(&o);
    o.heads = a->heads;
    model_from_checkpoint(a->ck, &o, a->c);
    if (!o.max_ctx) die("checkpoint '%s' does not record max_position_embeddings (its metadata 'max_ctx')", a->init);
    o.ctx = o.micro_batch = 1; /* nothing runs: the smallest activations */
    cli_model m = model_config(&o, 1);
    pipit_llama_config lc = cli_model_llama(&m);
    if (pipit_llama_check(&lc)) die("--init '%s': %s", a->init, pipit_errmsg());
    pipit_graph *g = pipit_graph_new();
    if (!g) die("out of memory");
    pipit_val loss = pipit_llama_build(g, &lc);
    pipit_program *p = NULL;
    if (pipit_graph_status(g) || pipit_compile(g, loss, &(pipit_options){.forward_only = 1}, &p))
        die("model: %s", pipit_errmsg());
    if (pipit_checkpoint_load_into(p, a->ck)) die("--init: %s", pipit_errmsg());
    pipit_graph *g2 = NULL;
    if (lc.experts && lc.moe_layout == PIPIT_LLAMA_MOE_STACKED) { /* pipit's stacked experts: Mixtral's names */
        pipit_program *q = stacked_to_mixtral(p, &lc, &g2);
        pipit_program_free(p);
        p = q;
        if (!lc.dropless)
            fprintf(stderr, "pipit: note: the model was trained with capacity factor %g (tokens past an expert's "
                            "capacity dropped); transformers' Mixtral computes every choice (dropless)\n",
                    lc.capacity_factor);
    }
    cli_model_meta mm; /* "format": "pt" for transformers; the model's fields for pipit */
    cli_model_meta_fill(&m, &mm);
    const char *meta[2 + NFLAGS(mm.kv) + 1] = {"format", "pt"};
    memcpy(meta + 2, mm.kv, sizeof(char *) * (size_t)mm.n);
    if (pipit_checkpoint_save(p, weights, meta)) die("--hf: %s", pipit_errmsg());
    if (pipit_llama_write_hf_config_ex(&lc, a->bos, a->eos, config)) die("--hf: %s", pipit_errmsg());
    pipit_program_free(p);
    pipit_graph_free(g2);
    pipit_graph_free(g);
    return lc.max_ctx;
}

/* tokenizer.json and a tokenizer_config.json that makes transformers'
 * AutoTokenizer take it as it is: the generic fast tokenizer (a model
 * class's tokenizer would add its special tokens to a vocabulary that
 * lacks them) and no clean-up of spaces (decode gives the bytes back). */
static void write_tokenizer(const pipit_tokenizer *tk, const char *dir, int max_len, char *tj, size_t n) {
    snprintf(tj, n, "%s/tokenizer.json", dir);
    if (pipit_tokenizer_save(tk, tj)) die("--tokenizer: %s", pipit_errmsg());
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) die("--hf: cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"clean_up_tokenization_spaces\": false,\n"
               "  \"model_max_length\": %d\n}\n", max_len);
    if (fclose(f) != 0) die("--hf: writing '%s' failed: %s", path, strerror(errno));
}

/* ------------------------------------------------------------ the kinds */

typedef struct {
    const char *name, *about;
    const char *embedding; /* the [V, C] tensor whose rows are the vocabulary */
    /* writes the weights file and the config.json text; returns the
     * model's longest context (the tokenizer's model_max_length) */
    int (*export_to)(const export_args *a, const char *weights, FILE *config);
} export_kind;

static const export_kind KINDS[] = {
    {"gpt2", "GPT-2 (transformers' GPT2LMHeadModel)", "wte.weight", export_gpt2},
    {"llama", "Llama (transformers' LlamaForCausalLM)", "model.embed_tokens.weight", export_llama},
};

static const export_kind *find_kind(const char *name) {
    const char *names[sizeof KINDS / sizeof KINDS[0]];
    for (int i = 0; i < NFLAGS(KINDS); i++) {
        if (strcmp(KINDS[i].name, name) == 0) return &KINDS[i];
        names[i] = KINDS[i].name;
    }
    die("--kind '%s': pipit exports gpt2 or llama%s", name, cli_did_you_mean(name, names, NFLAGS(KINDS), ""));
}

/* The model's vocabulary size V (the rows of its embedding). */
static int model_vocab(const export_kind *k, const pipit_checkpoint *ck, const char *path) {
    int nd = 0;
    int64_t sh[PIPIT_MAX_DIMS];
    if (pipit_checkpoint_tensor_shape(ck, k->embedding, &nd, sh) || nd != 2 || sh[0] < 1 || sh[0] > INT32_MAX)
        die("--init: checkpoint '%s' has no 2-D '%s' (the %s embedding)", path, k->embedding, k->name);
    return (int)sh[0];
}

/* config.json's bos/eos ids (see the top of this file); a tokenizer with
 * more tokens than the model has rows is refused, naming both sizes. */
static void pick_special_ids(export_args *a, pipit_tokenizer *tk, const char *tok_path, int V) {
    a->bos = a->eos = V - 1;
    if (!tk) return;
    int n = pipit_tokenizer_vocab_size(tk);
    if (n > V) {
        pipit_tokenizer_free(tk); /* die() exits: nothing may be left for the leak checker */
        die("--tokenizer '%s' has %d tokens, but the model in '%s' has a vocabulary of %d (ids %d..%d would have no "
            "embedding): export the model this tokenizer was trained for",
            tok_path, n, a->init, V, V, n - 1);
    }
    static const char eot[] = "<|endoftext|>";
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        const char *b = pipit_tokenizer_token(tk, id, &len);
        if (b && len == sizeof eot - 1 && memcmp(b, eot, len) == 0) {
            a->bos = a->eos = id;
            return;
        }
    }
}

int cmd_export(int argc, char **argv) {
    export_args a = {0};
    const char *kind = NULL, *tok_path = NULL, *merges = NULL;
    flag fl[] = {
        {"hf", FL_STR, &a.dir, "folder to write (created if absent): model.safetensors, config.json[, tokenizer.json]", 0},
        {"init", FL_STR, &a.init, "the checkpoint: a training checkpoint or weights only", 0},
        {"kind", FL_STR, &kind, "model kind: gpt2 or llama (default: the checkpoint's \"model\" metadata, else its "
                                "tensor names)", 0},
        {"heads", FL_INT, &a.heads, "attention heads (default: from the checkpoint's metadata or config.json)", 0},
        {"tokenizer", FL_STR, &tok_path, "also write this tokenizer (tokenizer.json, vocab.json with --merges, or a "
                                         "folder) as DIR/tokenizer.json", 0},
        {"merges", FL_STR, &merges, "GPT-2's merges.txt beside --tokenizer vocab.json", 0},
    };
    flag_cmd c = {"export", "--hf DIR --init FILE [--tokenizer FILE] [--kind gpt2|llama]",
                  "Writes a checkpoint as a Hugging Face model folder: the weights alone under their Hugging Face "
                  "names (model.safetensors) and config.json (with --tokenizer also tokenizer.json and "
                  "tokenizer_config.json), so that transformers' from_pretrained(DIR) loads it "
                  "without a warning.",
                  fl, NFLAGS(fl)};
    flags_parse(&c, argc, argv);
    flags_require(&c, (const char *const[]){"hf", "init", NULL});
    if (flags_seen(&c, "heads") && a.heads < 1) die("--heads must be >= 1 (got %d)", a.heads);
    if (merges && !tok_path) die("--merges goes with --tokenizer vocab.json");
    pipit_checkpoint *ck = NULL;
    if (pipit_checkpoint_open(a.init, &ck)) die("--init: %s", pipit_errmsg());
    a.ck = ck;
    a.c = &c;
    if (!kind) kind = pipit_checkpoint_meta(ck, "model");
    if (!kind && cli_model_kind_of_checkpoint(ck)) kind = cli_model_kind_of_checkpoint(ck)->name; /* its tensor names */
    const export_kind *k = find_kind(kind ? kind : "gpt2");
    const cli_model_kind *held = cli_model_kind_of_checkpoint(ck);
    if (held && strcmp(held->name, k->name) != 0)
        die("--kind %s: checkpoint '%s' holds a %s model", k->name, a.init, held->title);
    pipit_tokenizer *tk = tok_path ? cli_tokenizer_open(tok_path, merges) : NULL;
    pick_special_ids(&a, tk, tok_path, model_vocab(k, ck, a.init));
    if (mkdir(a.dir, 0777) != 0 && errno != EEXIST) die("--hf: cannot create folder '%s': %s", a.dir, strerror(errno));
    char weights[4200], config[4200], tj[4200];
    snprintf(weights, sizeof weights, "%s/model.safetensors", a.dir);
    snprintf(config, sizeof config, "%s/config.json", a.dir);
    FILE *f = fopen(config, "w");
    if (!f) die("--hf: cannot write '%s': %s", config, strerror(errno));
    int max_len = k->export_to(&a, weights, f);
    if (fclose(f) != 0) die("--hf: writing '%s' failed: %s", config, strerror(errno));
    if (tk) write_tokenizer(tk, a.dir, max_len, tj, sizeof tj);
    printf("wrote %s (%s): %s, %s%s%s\n", a.dir, k->about, weights, config, tk ? ", " : "", tk ? tj : "");
    pipit_tokenizer_free(tk);
    pipit_checkpoint_free(ck);
    return 0;
}
