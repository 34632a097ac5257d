/*
 * session.c — what train, plan and eval open before a step runs: the
 * schedule, the data, the model's graph (cut by --auto-stages if asked), the
 * compiled program and its first weights, and the microbatch buffers that
 * feed it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipit_llama.h"
#include "progress.h"
#include "train_cli.h"
#include "cp_feeds.h"

/* tools/cmd_schedule.c */
pipit_status pipit_cli_schedule_open(const char *flagname, const char *name, int P, int V, int M, pipit_schedule **out);

/* A file's value for a flag: taken when the flag is not given; a flag
 * that disagrees dies if `strict` (the file's shapes fix it), else wins. */
static void take(const flag_cmd *c, const char *name, int *dst, int v, int strict, const char *path) {
    if (flags_seen(c, name) && *dst != v) {
        if (strict) die("--%s %d disagrees with checkpoint '%s' (%d)", name, *dst, path, v);
        return;
    }
    *dst = v;
}

static void take_dbl(const flag_cmd *c, const char *name, double *dst, double v) {
    if (!flags_seen(c, name) && v > 0) *dst = v;
}

/* The Hugging Face config.json beside a Llama checkpoint, if there is one:
 * its fields into *j, their PIPIT_LLAMA_HAS_* bits returned (0: no file). */
static int hf_config_beside(const char *ckpt_path, pipit_llama_config *j, char *where, size_t n) {
    const char *slash = strrchr(ckpt_path, '/');
    snprintf(where, n, "%.*sconfig.json", slash ? (int)(slash - ckpt_path + 1) : 0, ckpt_path);
    if (access(where, F_OK) != 0) return 0;
    int has = 0;
    cli_check(pipit_llama_config_from_hf(where, j, &has), "--init");
    return has;
}

/* The shapes config.json states must be the checkpoint's. */
static void hf_agrees(const char *json, int has, const pipit_llama_config *j, const cli_model *f, const char *path) {
    const struct { int bit; const char *key; int json, file; } tab[] = {
        {PIPIT_LLAMA_HAS_VOCAB, "vocab_size", j->vocab, f->vocab}, {PIPIT_LLAMA_HAS_DIM, "hidden_size", j->dim, f->dim},
        {PIPIT_LLAMA_HAS_FFN, "intermediate_size", j->ffn_hidden, f->ffn_hidden},
        {PIPIT_LLAMA_HAS_LAYERS, "num_hidden_layers", j->layers, f->layers},
        {PIPIT_LLAMA_HAS_TIED, "tie_word_embeddings", j->tied, f->tied}};
    for (int i = 0; i < NFLAGS(tab); i++)
        if ((has & tab[i].bit) && tab[i].json != tab[i].file)
            die("config '%s': %s %d disagrees with checkpoint '%s' (%d, from its tensors)", json, tab[i].key,
                tab[i].json, path, tab[i].file);
}

static int same_scaling(const pipit_rope_scaling *a, const pipit_rope_scaling *b) {
    return a->factor == b->factor && a->low_freq_factor == b->low_freq_factor &&
           a->high_freq_factor == b->high_freq_factor &&
           a->original_max_position_embeddings == b->original_max_position_embeddings;
}

static const char *scaling_str(const pipit_rope_scaling *r, char *buf, size_t n) {
    if (!(r->factor > 0)) return "rope_type default";
    snprintf(buf, n, "rope_type llama3, factor %g, low_freq_factor %g, high_freq_factor %g, "
             "original_max_position_embeddings %lld", r->factor, r->low_freq_factor, r->high_freq_factor,
             (long long)r->original_max_position_embeddings);
    return buf;
}

/* What config.json states must be what pipit recorded in the checkpoint's
 * metadata (f: 0 where it records nothing): heads, max positions (and at
 * least the ctx it was trained at), eps, theta, the RoPE scaling. */
static void hf_agrees_meta(const char *json, int has, const pipit_llama_config *j, const pipit_checkpoint *ck,
                           const cli_model *f) {
    const char *path = pipit_checkpoint_path(ck);
    if ((has & PIPIT_LLAMA_HAS_HEADS) && f->heads && j->heads != f->heads)
        die("config '%s': num_attention_heads %d disagrees with checkpoint '%s' (heads %d in its metadata)", json,
            j->heads, path, f->heads);
    if ((has & PIPIT_LLAMA_HAS_MAX_CTX) && f->max_ctx && j->max_ctx != f->max_ctx)
        die("config '%s': max_position_embeddings %d disagrees with checkpoint '%s' (max_ctx %d in its metadata)", json,
            j->max_ctx, path, f->max_ctx);
    uint64_t ctx = 0; /* what pipit trained it at; absent or unreadable: 0 */
    if (pipit_checkpoint_meta_count(ck, "ctx", INT32_MAX, &ctx) != PIPIT_STATUS_OK) ctx = 0;
    if ((has & PIPIT_LLAMA_HAS_MAX_CTX) && ctx > (uint64_t)j->max_ctx)
        die("config '%s': max_position_embeddings %d is less than the ctx %d checkpoint '%s' was trained at", json,
            j->max_ctx, (int)ctx, path);
    if ((has & PIPIT_LLAMA_HAS_NORM_EPS) && f->norm_eps > 0 && j->norm_eps != f->norm_eps)
        die("config '%s': rms_norm_eps %.17g disagrees with checkpoint '%s' (norm_eps %.17g in its metadata)", json,
            j->norm_eps, path, f->norm_eps);
    if ((has & PIPIT_LLAMA_HAS_ROPE_THETA) && f->rope_theta > 0 && j->rope_theta != f->rope_theta)
        die("config '%s': rope_theta %.17g disagrees with checkpoint '%s' (rope_theta %.17g in its metadata)", json,
            j->rope_theta, path, f->rope_theta);
    char a[200], b[200];
    if (has && pipit_checkpoint_meta(ck, "rope_type") && !same_scaling(&j->rope_scaling, &f->rope_scaling))
        die("config '%s': RoPE (%s) disagrees with checkpoint '%s' (%s in its metadata)", json,
            scaling_str(&j->rope_scaling, a, sizeof a), path, scaling_str(&f->rope_scaling, b, sizeof b));
}

/* Llama's settings from the metadata pipit writes, else config.json, else
 * the defaults LlamaConfig has; heads and kv heads checked against the
 * projections' shapes, what config.json says against the tensors and the
 * metadata. */
static void llama_from_checkpoint(const pipit_checkpoint *ck, opts *o, const flag_cmd *c, const cli_model *f) {
    const char *path = pipit_checkpoint_path(ck);
    pipit_llama_config j = {0};
    char json[4200];
    int has = hf_config_beside(path, &j, json, sizeof json);
    hf_agrees(json, has, &j, f, path);
    hf_agrees_meta(json, has, &j, ck, f);
    take(c, "ffn-hidden", &o->ffn_hidden, f->ffn_hidden, 1, path);
    int tied = o->untied ? 0 : o->tied;
    if ((flags_seen(c, "tied") || flags_seen(c, "untied")) && tied != f->tied)
        die("--%s disagrees with checkpoint '%s' (%s)", tied ? "tied" : "untied", path,
            f->tied ? "no 'lm_head.weight': tied" : "it has 'lm_head.weight': untied");
    o->tied = f->tied, o->untied = !f->tied;
    if (f->heads) take(c, "heads", &o->heads, f->heads, 1, path);
    else if (has & PIPIT_LLAMA_HAS_HEADS) take(c, "heads", &o->heads, j.heads, 0, path);
    else if (!flags_seen(c, "heads"))
        die("checkpoint '%s' does not record its head count: pass --heads (or put its config.json beside it)", path);
    int64_t kp[PIPIT_MAX_DIMS];
    int nd = 0, D = o->heads > 0 && f->dim % o->heads == 0 ? f->dim / o->heads : 0;
    if (!D) die("--heads %d does not divide the checkpoint's hidden size %d ('%s')", o->heads, f->dim, path);
    if (pipit_checkpoint_tensor_shape(ck, "model.layers.0.self_attn.k_proj.weight", &nd, kp) || nd != 2 || kp[0] % D)
        die("checkpoint '%s': 'model.layers.0.self_attn.k_proj.weight' is missing or not [kv_heads x %d, %d]", path, D,
            f->dim);
    take(c, "kv-heads", &o->kv_heads, (int)(kp[0] / D), 1, path);
    if ((has & PIPIT_LLAMA_HAS_KV_HEADS) && j.kv_heads != o->kv_heads)
        die("config '%s': num_key_value_heads %d disagrees with checkpoint '%s' (%d, from k_proj)", json, j.kv_heads,
            path, o->kv_heads);
    if (has & PIPIT_LLAMA_HAS_MAX_CTX) take(c, "max-ctx", &o->max_ctx, j.max_ctx, 0, path);
    if (f->max_ctx) take(c, "max-ctx", &o->max_ctx, f->max_ctx, 0, path);
    take_dbl(c, "norm-eps", &o->norm_eps, (has & PIPIT_LLAMA_HAS_NORM_EPS) ? j.norm_eps : 0);
    take_dbl(c, "norm-eps", &o->norm_eps, f->norm_eps);
    take_dbl(c, "rope-theta", &o->rope_theta, (has & PIPIT_LLAMA_HAS_ROPE_THETA) ? j.rope_theta : 0);
    take_dbl(c, "rope-theta", &o->rope_theta, f->rope_theta);
    /* the scaling (no flag sets it): the metadata's, else config.json's
     * (none there is rope_type default, as in transformers) */
    if (pipit_checkpoint_meta(ck, "rope_type")) o->rope_scaling = f->rope_scaling;
    else if (has) o->rope_scaling = j.rope_scaling;
    /* Qwen2's q/k/v biases and Hugging Face's MoE layouts: what the tensors hold */
    o->attn_bias = f->attn_bias, o->moe_layout = f->moe_layout, o->shared_gate = f->shared_gate;
    if (has && j.attn_bias != f->attn_bias)
        die("config '%s': its model_type %s q/k/v biases but checkpoint '%s' %s 'model.layers.0.self_attn.q_proj.bias'",
            json, j.attn_bias ? "(qwen2, qwen2_moe) has" : "has no", path, f->attn_bias ? "holds" : "has no");
    if (f->attn_bias && !has && !pipit_checkpoint_meta(ck, "rope_theta"))
        die("checkpoint '%s' holds Qwen2's q/k/v biases ('model.layers.0.self_attn.q_proj.bias') but neither pipit's "
            "metadata nor a config.json beside it: its rope_theta, rms_norm_eps and heads are unknown (Qwen2's are not "
            "Llama's defaults): put the model's config.json beside it",
            path);
    if ((has & PIPIT_LLAMA_HAS_MOE) && !f->experts)
        die("config '%s' describes a mixture of experts (%d experts) but checkpoint '%s' has no router tensor", json,
            j.experts, path);
    cli_model hf = *f; /* an HF MoE file without pipit's metadata: top-k and the rest from config.json */
    if (f->experts && f->moe_layout && !pipit_checkpoint_meta(ck, "top_k")) {
        const char *arch = f->moe_layout == PIPIT_LLAMA_MOE_MIXTRAL ? "mixtral" : "qwen2_moe";
        if (!(has & PIPIT_LLAMA_HAS_MOE))
            die("checkpoint '%s' holds a Hugging Face mixture of experts (%s's tensor names) but no config.json (model_type "
                "%s) beside it: its num_experts_per_tok and router settings are unknown: put its config.json beside it",
                path, arch, arch);
        if (j.moe_layout != f->moe_layout || j.experts != f->experts || j.shared_experts != f->shared_experts ||
            j.shared_gate != f->shared_gate || (j.moe_every > 1 ? j.moe_every : 1) != f->moe_every)
            die("config '%s' (model_type %s, %d experts, %d shared x F, decoder_sparse_step %d) disagrees with checkpoint "
                "'%s' (%s names, %d experts, %d shared x F, first MoE layer %d)",
                json, j.moe_layout == PIPIT_LLAMA_MOE_MIXTRAL ? "mixtral" : "qwen2_moe", j.experts, j.shared_experts,
                j.moe_every, path, arch, f->experts, f->shared_experts, f->moe_every - 1);
        hf.top_k = j.top_k, hf.dropless = j.dropless, hf.capacity_factor = j.capacity_factor, hf.router = j.router;
        hf.aux_loss = j.aux_loss, hf.route_unnormalized = j.route_unnormalized;
        f = &hf;
    }
    o->route_unnormalized = f->route_unnormalized;
    if (f->experts) { /* mixture of experts: its metadata's fields; a flag given must agree */
        take(c, "experts", &o->experts, f->experts, 1, path);
        take(c, "top-k", &o->top_k, f->top_k, 1, path);
        take(c, "dropless", &o->dropless, f->dropless, 1, path);
        take(c, "shared-experts", &o->shared_experts, f->shared_experts, 1, path);
        take(c, "moe-every", &o->moe_every, f->moe_every, 1, path);
        const char *router = f->router ? "sigmoid" : "softmax";
        if (flags_seen(c, "router") && strcmp(o->router, router) != 0)
            die("--router %s disagrees with checkpoint '%s' (%s)", o->router, path, router);
        o->router = router;
        const struct { const char *flag; double *dst, v; } d[] = {
            {"capacity-factor", &o->capacity_factor, f->capacity_factor}, {"aux-loss", &o->aux_loss, f->aux_loss},
            {"balance-bias", &o->balance_bias, f->balance_bias}};
        for (int i = 0; i < NFLAGS(d); i++) {
            if (flags_seen(c, d[i].flag) && *d[i].dst != d[i].v)
                die("--%s %g disagrees with checkpoint '%s' (%.17g)", d[i].flag, *d[i].dst, path, d[i].v);
            *d[i].dst = d[i].v;
        }
    }
}

void model_from_checkpoint(const pipit_checkpoint *ck, opts *o, const flag_cmd *c) {
    const char *path = pipit_checkpoint_path(ck);
    const cli_model_kind *k = cli_model_kind_of_checkpoint(ck);
    if (!k)
        die("checkpoint '%s' holds neither a GPT-2 model ('wte.weight') nor a Llama model "
            "('model.embed_tokens.weight')",
            path);
    if (strcmp(o->arch, k->name) != 0) {
        if (o->model)
            die("--model %s is a %s model, but checkpoint '%s' holds a %s model", o->model,
                cli_model_kind_find(o->arch)->title, path, k->title);
        o->arch = k->name;
        if (!flags_seen(c, "norm-eps")) o->norm_eps = 1e-6; /* LlamaConfig's defaults (unused by GPT-2) */
        if (!flags_seen(c, "rope-theta")) o->rope_theta = 1e4;
    }
    cli_model f = {.kind = k};
    cli_check(k->from_checkpoint(ck, &f), "--init");
    take(c, "vocab", &o->vocab, f.vocab, 1, path);
    take(c, "dim", &o->dim, f.dim, 1, path);
    take(c, "layers", &o->layers, f.layers, 1, path);
    if (k == cli_model_kind_find("llama")) {
        llama_from_checkpoint(ck, o, c, &f);
        return;
    }
    take(c, "max-ctx", &o->max_ctx, f.max_ctx, 1, path); /* the rows of 'wpe.weight' */
    if (f.heads) take(c, "heads", &o->heads, f.heads, 1, path);
    else if (!flags_seen(c, "heads")) die("checkpoint '%s' does not record its head count: pass --heads", path);
}

cli_model model_config(const opts *o, int stages) {
    return (cli_model){cli_model_kind_find(o->arch), o->vocab, o->max_ctx ? o->max_ctx : o->ctx, o->ctx, o->layers,
                       o->heads, o->dim, o->micro_batch, stages, o->tp, 1 /* cp: open_model sets it */, o->kv_heads, o->ffn_hidden, o->multiple_of,
                       o->untied ? 0 : o->tied, o->ffn_dim_multiplier, o->norm_eps, o->rope_theta, o->rope_scaling,
                       o->fused_head, o->experts, /* MoE: top-k 2 and capacity factor 1.25 unless given */
                       o->experts ? (o->top_k ? o->top_k : (o->experts < 2 ? o->experts : 2)) : 0, o->dropless,
                       o->shared_experts, o->moe_every, o->router && strcmp(o->router, "sigmoid") == 0,
                       o->experts && !o->dropless && o->capacity_factor == 0 ? 1.25 : o->capacity_factor,
                       o->aux_loss, o->balance_bias, o->doc_sep >= 0, o->doc_sep, o->doc_pos_reset,
                       o->attn_bias, o->moe_layout, o->shared_gate, o->route_unnormalized, 1 /* ep: open_model sets it */,
                       o->sp};
}

/* Microbatch feeds for sequences first .. first+B-1. */
void fill_microbatch(const pipit_data *d, const cli_model *c, int64_t first, mb_buf *b, pipit_feed *f) {
    cli_check(pipit_data_batch(d, first, c->batch, b->tok, b->tgt), "--data");
    cli_check(cli_model_feeds(c, b->tok, b->tgt, b->pos, b->doc, f), "feeds");
}

/* G microbatch buffers of B x T tokens each, and their 3 G feeds. */
mb_buf *mb_bufs_new(int G, int B, int T, pipit_feed **feeds) {
    mb_buf *bufs = calloc((size_t)G, sizeof *bufs);
    *feeds = calloc((size_t)G * CLI_MAX_FEEDS, sizeof **feeds);
    if (!bufs || !*feeds) die("out of memory");
    for (int m = 0; m < G; m++) {
        bufs[m].tok = malloc(sizeof(int32_t) * (size_t)B * T);
        bufs[m].tgt = malloc(sizeof(int32_t) * (size_t)B * T);
        bufs[m].pos = malloc(sizeof(int32_t) * (size_t)B * T);
        bufs[m].doc = malloc(sizeof(int32_t) * (size_t)B * T); /* packed documents' ids */
        if (!bufs[m].tok || !bufs[m].tgt || !bufs[m].pos || !bufs[m].doc) die("out of memory");
    }
    return bufs;
}

void mb_bufs_free(mb_buf *bufs, int G, pipit_feed *feeds) {
    for (int m = 0; m < G; m++) {
        free(bufs[m].tok);
        free(bufs[m].tgt);
        free(bufs[m].pos);
        free(bufs[m].doc);
    }
    free(bufs);
    free(feeds);
}

/* The Llama numbers given as flags (or --config keys), each against its
 * own range, before the model's check sees them under its field names. */
static void check_llama_numbers(const opts *o, const flag_cmd *c) {
    if (flags_seen(c, "kv-heads") && o->kv_heads < 1)
        die("--kv-heads must be a positive integer (the key/value heads, a divisor of --heads %d; got %d)", o->heads,
            o->kv_heads);
    if (flags_seen(c, "ffn-hidden") && o->ffn_hidden < 0)
        die("--ffn-hidden must be a positive integer, or 0 for Meta's rule from --multiple-of (got %d)", o->ffn_hidden);
    if (flags_seen(c, "multiple-of") && o->multiple_of < 1)
        die("--multiple-of must be a positive integer (got %d)", o->multiple_of);
    if (flags_seen(c, "ffn-dim-multiplier") && !(o->ffn_dim_multiplier >= 0))
        die("--ffn-dim-multiplier must be a number > 0, or 0 for none (got %g)", o->ffn_dim_multiplier);
    if (flags_seen(c, "norm-eps") && !(o->norm_eps > 0))
        die("--norm-eps must be a number > 0 (RMSNorm's epsilon, e.g. 1e-5; got %g)", o->norm_eps);
    /* below 1 every channel turns faster than one radian per position, and
     * in f32 (the frequencies are f32, as in transformers) a base under
     * 1.2e-38 is 0 and gives NaN */
    if (flags_seen(c, "rope-theta") && !(o->rope_theta >= 1))
        die("--rope-theta must be a number >= 1 (RoPE's base: 10000 in Llama 2, 500000 in Llama 3; got %g)",
            o->rope_theta);
    /* mixture of experts */
    if (flags_seen(c, "experts") && o->experts < 1)
        die("--experts must be a positive integer (the routed experts per MoE layer; got %d)", o->experts);
    static const char *const moe_only[] = {"top-k", "capacity-factor", "dropless", "shared-experts", "moe-every",
                                           "router", "aux-loss", "balance-bias"};
    for (int i = 0; i < NFLAGS(moe_only); i++)
        if (!o->experts && flags_seen(c, moe_only[i]))
            die("--%s applies to mixture-of-experts models: pass --experts N (or --model moe-tiny)", moe_only[i]);
    if (o->experts && flags_seen(c, "top-k") && (o->top_k < 1 || o->top_k > o->experts))
        die("--top-k %d must be in 1..--experts (%d): each token goes to that many different experts", o->top_k,
            o->experts);
    if (flags_seen(c, "capacity-factor") && (!(o->capacity_factor > 0) || !isfinite(o->capacity_factor)))
        die("--capacity-factor must be a number > 0 (slots per expert = ceil(F x tokens x top-k / experts); got %g); "
            "--dropless keeps every token", o->capacity_factor);
    if (flags_seen(c, "shared-experts") && o->shared_experts < 0)
        die("--shared-experts must be an integer >= 0 (got %d)", o->shared_experts);
    if (flags_seen(c, "moe-every") && o->moe_every < 1)
        die("--moe-every must be a positive integer (every K-th layer is MoE; got %d)", o->moe_every);
    if (o->router && strcmp(o->router, "softmax") && strcmp(o->router, "sigmoid"))
        die("bad value '%s' for --router: expected softmax or sigmoid", o->router);
    if (flags_seen(c, "aux-loss") && (!(o->aux_loss >= 0) || !isfinite(o->aux_loss)))
        die("--aux-loss must be a number >= 0 (the balance loss's coefficient, e.g. 0.01; got %g)", o->aux_loss);
    if (flags_seen(c, "balance-bias") && (!(o->balance_bias >= 0) || !isfinite(o->balance_bias)))
        die("--balance-bias must be a number >= 0 (the routing bias's step per training step, e.g. 0.001; got %g)",
            o->balance_bias);
}

/* The Llama flags apply to Llama models only, --tied and --untied to one
 * run at most one of them. */
void check_model_flags(const opts *o, const flag_cmd *c) {
    static const char *const llama_only[] = {"kv-heads", "ffn-hidden", "multiple-of", "ffn-dim-multiplier",
                                             "norm-eps", "rope-theta", "tied", "untied", "experts", "top-k",
                                             "capacity-factor", "dropless", "shared-experts", "moe-every",
                                             "router", "aux-loss", "balance-bias"};
    if (flags_seen(c, "tied") && flags_seen(c, "untied")) die("--tied and --untied contradict each other: pass one");
    if ((flags_seen(c, "doc-sep") || o->doc_sep != -1) && (o->doc_sep < 0 || o->doc_sep >= o->vocab))
        die("--doc-sep %d is outside the vocabulary: the separator is a token id in 0..%d (--vocab %d)", o->doc_sep,
            o->vocab - 1, o->vocab);
    if (o->doc_pos_reset && o->doc_sep < 0)
        die("--doc-pos-reset restarts the positions at each document: it needs --doc-sep ID (the separator token)");
    if (strcmp(o->arch, "llama") == 0) {
        check_llama_numbers(o, c);
        return;
    }
    for (int i = 0; i < NFLAGS(llama_only); i++)
        if (flags_seen(c, llama_only[i]))
            die("--%s applies to Llama models (--model llama-tiny, llama-100m or moe-tiny, or --init a Llama checkpoint); this "
                "run's model is %s",
                llama_only[i], cli_model_kind_find(o->arch)->title);
}

static void check_auto_stages_flags(const opts *o, const flag_cmd *c) {
    if (!o->auto_stages && (flags_seen(c, "stage-costs") || flags_seen(c, "stage-mem-limit")))
        die("--%s applies to --auto-stages only", flags_seen(c, "stage-costs") ? "stage-costs" : "stage-mem-limit");
    if (o->stage_costs && strcmp(o->stage_costs, "model") && strcmp(o->stage_costs, "measured"))
        die("bad value '%s' for --stage-costs: expected model or measured", o->stage_costs);
    if (!(o->stage_mem_limit >= 0 && o->stage_mem_limit < 1e300))
        die("--stage-mem-limit must be a number of bytes >= 0 (got %g)", o->stage_mem_limit);
}

/* --stage-costs measured: the yield-free model run sequentially for two
 * steps on the first batches, the second one profiled (the first pays
 * page faults). The program and its graph are the caller's to free. */
static pipit_program *profile_run(session *s, const opts *o, int M, pipit_graph **gout) {
    pipit_graph *g = *gout = pipit_graph_new();
    if (!g) die("out of memory");
    pipit_val loss = s->cfg.kind->build(g, &s->cfg, NULL);
    pipit_options po = {.microbatches = M, .threads = o->threads, .optimizer = make_optimizer(o)};
    pipit_program *p = NULL;
    cli_check(pipit_compile(g, loss, &po, &p), "--stage-costs measured");
    cli_check(s->cfg.kind->init(p, &s->cfg, o->seed), "--stage-costs measured");
    pipit_feed *feeds;
    mb_buf *bufs = mb_bufs_new(M, s->cfg.batch, s->cfg.ctx, &feeds);
    int nf = cli_model_nfeeds(&s->cfg);
    for (int m = 0; m < M; m++) fill_microbatch(s->data, &s->cfg, (int64_t)m * s->cfg.batch, &bufs[m], feeds + nf * m);
    for (int step = 0; step < 2; step++) {
        cli_check(pipit_program_set_profile(p, 1), "--stage-costs measured"); /* resets: step 2 alone counts */
        if (pipit_step_feeds(p, feeds, (int64_t)M * nf, nf, 0, NULL)) die("--stage-costs measured: %s", pipit_program_errmsg(p));
    }
    mb_bufs_free(bufs, M, feeds);
    return p;
}

/* --auto-stages: cut the yield-free graph into the schedule's stages. */
static void auto_stages(session *s, const opts *o, int M) {
    int measured = o->stage_costs && strcmp(o->stage_costs, "measured") == 0;
    if (measured && pipit_process_count() > 1) /* each process would time its own run and cut differently */
        die("--stage-costs measured runs in one process only (this job has %d MPI processes): use the modelled costs",
            pipit_process_count());
    pipit_graph *pg = NULL;
    pipit_program *prof = measured ? profile_run(s, o, M, &pg) : NULL;
    cli_model cfg = s->cfg;
    /* fixed rates, not a timing: every MPI process must choose the same cuts */
    cli_auto_stages a = {.sched = s->sched, .stages = s->stages, .mem_limit = o->stage_mem_limit, .profile = prof,
                         .remat = o->remat,
                         .print = !o->json && pipit_process_rank() == 0};
    cli_auto_stages_apply(&a, &cfg, s->g, &s->loss);
    pipit_program_free(prof);
    pipit_graph_free(pg);
}

/* --tp against the sizes it splits, in the flags' words (the builders
 * refuse the same, naming the config fields). */
static void check_tp(const cli_model *m) {
    if (m->tp <= 1) return;
    int llama = strcmp(m->kind->name, "llama") == 0;
    pipit_llama_config lc = cli_model_llama(m);
    const struct {
        const char *flag, *why;
        int v;
    } split[] = {{"heads", "", m->heads},
                 {"vocab", "", m->vocab},
                 {"kv-heads", " of the key/value heads (they are split, never replicated)",
                  m->kv_heads ? m->kv_heads : m->heads},
                 {"ffn-hidden", " of the MLP width", llama ? pipit_llama_ffn_hidden(&lc) : 0}};
    for (int i = 0; i < (llama ? 4 : 2); i++)
        if (split[i].v % m->tp && i == 1) /* the vocabulary can be padded with unused rows (nanoGPT's 50304) */
            die("--tp %d does not divide --vocab %d: each of a stage's %d tensor-parallel ranks holds an equal share "
                "of the vocabulary; pad it: --vocab %lld (the next multiple of %d) would allow --tp %d",
                m->tp, m->vocab, m->tp, ((long long)m->vocab + m->tp - 1) / m->tp * m->tp, m->tp, m->tp);
        else if (split[i].v % m->tp)
            die("--tp %d does not divide --%s %d: each of a stage's %d tensor-parallel ranks holds an equal share%s",
                m->tp, split[i].flag, split[i].v, m->tp, split[i].why);
}

/* Memory admission at the start (docs/refuses.md): the model's state and
 * a step's feeds against what this process may use, before the data, the
 * graph or the plan exist (pipit_compile checks the exact plan again). */
static void admit_run(const session *s, const opts *o, int M, const char *mflag) {
    if (o->no_mem_check || s->plan_only) return; /* a plan allocates no model: pipit_compile checks its ranks */
    const cli_model *cfg = &s->cfg;
    int procs = pipit_process_count(), D = o->dp, P = s->stages / (o->virt > 1 ? o->virt : 1);
    double params = (double)cfg->kind->num_params(cfg), moments = s->forward_only ? 0 : 8 * params;
    if (o->zero1 || o->zero > 0) moments /= D;
    double state = params * (s->forward_only ? 4 : 8) + moments; /* f32 params (+ grads, 2 moments) */
    /* a process holds one rank (a 1/T shard of its stage); threads hold them all */
    state = procs > 1 ? state / (P > 1 ? P : 1) / o->tp : state * D;
    double feeds = 4.0 * cli_model_nfeeds(cfg) * cfg->batch * cfg->ctx * M * (procs > 1 ? 1 : D); /* i32 inputs */
    const char *why = "the limit given by --mem-limit";
    double avail = o->mem_limit > 0 ? o->mem_limit : pipit_mem_available(&why);
    if (state + feeds <= avail) return;
    char need[32], have[32], st[32], fd[32];
    die("this run needs at least %s of memory but %s is available, the limit being %s: %s %s (%lld parameters%s), "
        "the feeds of a step %s (--%s %d, --micro-batch %d, --ctx %d%s); try --zero1 with --dp, more --pp stages, "
        "--remat, a smaller --micro-batch or fewer --%s, or --no-mem-check to run anyway",
        cli_bytes(need, sizeof need, state + feeds), cli_bytes(have, sizeof have, avail), why,
        s->forward_only ? "parameters" : "parameters, gradients and AdamW moments", cli_bytes(st, sizeof st, state),
        (long long)params, procs > 1 ? ", this process's stage" : D > 1 ? ", every replica" : "",
        cli_bytes(fd, sizeof fd, feeds), mflag, M, cfg->batch, cfg->ctx, D > 1 && procs == 1 ? ", every replica" : "",
        mflag);
}

/* Ranks agree or stop (docs/refuses.md): in an MPI job every process
 * checks, before it compiles, that all of them resolved the same command
 * line (every flag's value, from the flags, --config, the preset or
 * --resume) and read the same data and weights (by content: paths may
 * differ between machines); pipit_compile then compares the plans. Flags
 * that change nothing the processes share are left out. */
static const char *const PER_PROCESS[] = {"threads", "device", "json", "json-summary", "trace", "profile",
                                          "profile-out", "verbose", "peak-flops", "mem-limit", "no-mem-check",
                                          "print-config", "config", "log-every", NULL};
static const char *const BY_CONTENT[] = {"data", "init", "resume", "init-optimizer", "save", "save-optimizer", NULL};

static int listed(const char *name, const char *const *list) {
    for (; *list; list++)
        if (strcmp(name, *list) == 0) return 1;
    return 0;
}

/* A checkpoint's content: its header checksum (which covers every
 * tensor's), or its path for a file without checksums. (--val-data is
 * opened after this: agree_validation compares it.) */
static const char *checkpoint_digest(const pipit_checkpoint *ck) {
    const char *h = ck ? pipit_checkpoint_meta(ck, "crc32c") : NULL;
    return h ? h : ck ? pipit_checkpoint_path(ck) : "-";
}

/* The agreement's list: name/value pairs in kv, texts in their own buffers. */
enum { AGREE_MAX = 96 };
typedef struct {
    char names[AGREE_MAX][48], vals[AGREE_MAX][96];
    const char *kv[2 * AGREE_MAX + 1];
    int n;
} agree_list;

static char *agree_add(agree_list *a, const char *name) {
    if (a->n == AGREE_MAX) die("internal: more than %d fields to agree on", AGREE_MAX);
    snprintf(a->names[a->n], sizeof a->names[a->n], "%s", name);
    a->kv[2 * a->n] = a->names[a->n], a->kv[2 * a->n + 1] = a->vals[a->n];
    return a->vals[a->n++];
}

/* The model's fields as a checkpoint records them and the flag that sets
 * each (train and plan have them all, eval only --ctx and --heads). */
static const struct {
    const char *flag, *key;
} MODEL_FIELDS[] = {{"vocab", "vocab"},       {"ctx", "ctx"},           {"max-ctx", "max_ctx"},
                    {"layers", "layers"},     {"heads", "heads"},       {"dim", "dim"},
                    {"kv-heads", "kv_heads"}, {"ffn-hidden", "ffn_hidden"}, {"norm-eps", "norm_eps"},
                    {"rope-theta", "rope_theta"}, {"tied", "tied"}};

/* Flags whose value is compared as another field's: the preset (the kind
 * and the model's fields), --untied (--tied), Meta's width rule
 * (--ffn-hidden), --data-format (the data's tokens) and the validation
 * settings (compared with the validation data, once it is open:
 * agree_validation). */
static const char *const FOLDED[] = {"model", "untied", "multiple-of", "ffn-dim-multiplier", "data-format",
                                     "val-data", "eval-every", "eval-batches", NULL};

/* The model's field key as resolved (preset, config, flags, checkpoint;
 * "-" where the kind has none) into v[96]. */
static void model_field(const cli_model *m, const char *key, char *v) {
    cli_model_meta meta;
    cli_model_meta_fill(m, &meta);
    snprintf(v, 96, "-");
    for (int i = 0; i < meta.n; i += 2)
        if (strcmp(meta.kv[i], key) == 0) snprintf(v, 96, "%s", meta.kv[i + 1]);
}

/* The schedule the run follows: a built-in one by name, with its ranks
 * and stages per rank (the plans' task lists are compared by
 * pipit_compile). */
static void schedule_value(const pipit_schedule *sch, char *v) {
    if (!sch) {
        snprintf(v, 96, "none (one rank, sequential)");
        return;
    }
    int kind = pipit_schedule_get_kind(sch);
    snprintf(v, 96, "%s, %d ranks x %d stages each", kind >= 0 ? pipit_schedule_kind_name((pipit_schedule_kind)kind) : "a file",
             pipit_schedule_ranks(sch), pipit_schedule_virtual(sch));
}

/* The value flag f resolved to, as the run uses it (issue 25: one process
 * spelling out a default, --dtype f32 or --schedule 1f1b, agrees with one
 * relying on it): the defaults that stand for "unset" (NULL, 0, -1) are
 * replaced by what they mean. */
static void resolved_value(const session *s, const opts *o, const flag *f, char *v) {
    const char *n = f->name;
    for (int k = 0; k < NFLAGS(MODEL_FIELDS); k++)
        if (strcmp(n, MODEL_FIELDS[k].flag) == 0) {
            model_field(&s->cfg, MODEL_FIELDS[k].key, v);
            return;
        }
    if (listed(n, BY_CONTENT)) { /* the contents are compared below */
        snprintf(v, 96, "%s", *(const char *const *)f->ptr ? "given" : "not given");
    } else if (strcmp(n, "dtype") == 0) {
        snprintf(v, 96, "%s", cli_dtype(o->dtype, o->device) == PIPIT_BF16 ? "bf16" : "f32");
    } else if (strcmp(n, "bf16-policy") == 0) {
        snprintf(v, 96, "%s", cli_bf16_policy(o->bf16_policy) == PIPIT_BF16_ALL ? "all" : "autocast");
    } else if (strcmp(n, "schedule") == 0) {
        schedule_value(s->sched, v);
    } else if (strcmp(n, "pp") == 0) { /* a schedule file brings its own P */
        snprintf(v, 96, "%d", s->sched ? pipit_schedule_ranks(s->sched) : 1);
    } else if (strcmp(n, "virtual") == 0) { /* 0: the schedule's own */
        snprintf(v, 96, "%d", s->sched ? pipit_schedule_virtual(s->sched) : 1);
    } else if (strcmp(n, "stage-costs") == 0) {
        snprintf(v, 96, "%s", o->stage_costs ? o->stage_costs : "model");
    } else if (!strcmp(n, "lr-schedule") || !strcmp(n, "warmup") || !strcmp(n, "decay-steps") || !strcmp(n, "min-lr")) {
        pipit_lr_schedule ls = make_lr_schedule(o); /* -1: --steps, --lr / 10 */
        static const char *const kinds[] = {"constant", "cosine", "linear"};
        int constant = ls.kind == PIPIT_LR_CONSTANT;
        if (n[0] == 'l') snprintf(v, 96, "%s", kinds[ls.kind]);
        else if (n[0] == 'w') snprintf(v, 96, "%lld", (long long)ls.warmup);
        else if (constant) snprintf(v, 96, "-"); /* a constant schedule has neither */
        else if (n[0] == 'd') snprintf(v, 96, "%lld", (long long)ls.decay_steps);
        else snprintf(v, 96, "%.17g", ls.min_lr);
    } else if (f->type == FL_INT || f->type == FL_BOOL) {
        snprintf(v, 96, "%d", *(const int *)f->ptr);
    } else if (f->type == FL_U64) {
        snprintf(v, 96, "%llu", (unsigned long long)*(const uint64_t *)f->ptr);
    } else if (f->type == FL_DBL) {
        snprintf(v, 96, "%.17g", *(const double *)f->ptr);
    } else {
        snprintf(v, 96, "%s", *(const char *const *)f->ptr ? *(const char *const *)f->ptr : "(none)");
    }
}

static void agree_run(const session *s, const opts *o, const flag_cmd *c) {
    if (pipit_process_count() <= 1) return;
    static agree_list a;
    a.n = 0;
    /* the kind first: processes given a GPT-2 and a Llama checkpoint
     * differ in the kind's flags too, but the kind is what to tell them */
    snprintf(agree_add(&a, "the model kind"), 96, "%s", s->cfg.kind->name);
    for (int i = 0; i < c->n; i++) {
        const flag *f = &c->flags[i];
        if (listed(f->name, PER_PROCESS) || listed(f->name, FOLDED)) continue;
        char name[48];
        snprintf(name, sizeof name, "--%s", f->name);
        resolved_value(s, o, f, agree_add(&a, name));
    }
    /* the model's fields no flag of this command sets (eval's few flags
     * leave them to the checkpoint) */
    for (int k = 0; k < NFLAGS(MODEL_FIELDS); k++) {
        int has = 0;
        for (int i = 0; i < c->n && !has; i++) has = strcmp(c->flags[i].name, MODEL_FIELDS[k].flag) == 0;
        if (has) continue;
        char name[48];
        snprintf(name, sizeof name, "model %s", MODEL_FIELDS[k].key);
        model_field(&s->cfg, MODEL_FIELDS[k].key, agree_add(&a, name));
    }
    const pipit_rope_scaling *r = &s->cfg.rope_scaling; /* from the checkpoint or its config.json: no flag */
    snprintf(agree_add(&a, "model RoPE scaling (factor low high L)"), 96, "%.17g %.17g %.17g %lld",
             r->factor, r->low_freq_factor, r->high_freq_factor, (long long)r->original_max_position_embeddings);
    snprintf(agree_add(&a, "--data (its tokens)"), 96, "%lld tokens, crc32c %08x", (long long)pipit_data_tokens(s->data),
             pipit_data_checksum(s->data));
    snprintf(agree_add(&a, o->resume ? "--resume (its checksum)" : "--init (its checksum)"), 96, "%s",
             checkpoint_digest(s->ckpt));
    a.kv[2 * a.n] = NULL;
    char what[64];
    snprintf(what, sizeof what, "pipit %s", c->name);
    if (pipit_agree(what, a.kv)) die("%s", pipit_errmsg());
}

void agree_validation(const session *s, const opts *o, int K) {
    if (pipit_process_count() <= 1) return;
    static agree_list a;
    a.n = 0;
    char *v = agree_add(&a, "--val-data (its tokens)");
    if (o->val_data)
        snprintf(v, 96, "%lld tokens, crc32c %08x", (long long)pipit_data_tokens(s->val), pipit_data_checksum(s->val));
    else
        snprintf(v, 96, "not given");
    snprintf(agree_add(&a, "--eval-batches"), 96, "%d", K);
    v = agree_add(&a, "--eval-every");
    if (!K) snprintf(v, 96, "-"); /* no validation */
    else if (o->eval_every && o->eval_every < o->steps) snprintf(v, 96, "%d", o->eval_every);
    else snprintf(v, 96, "at the end"); /* 0, or every --steps or more steps: the last step's only */
    a.kv[2 * a.n] = NULL;
    if (pipit_agree("pipit train (validation)", a.kv)) die("%s", pipit_errmsg());
}

/* --mem-limit by the one rule (cli_mem_limit): for train and eval at most
 * what this process may use; plan runs nothing here, so its limit is the
 * target's (each world rank's) and this machine does not bound it. */
static double mem_limit_flag(const session *s, const opts *o, const flag_cmd *c) {
    if (s->plan_only) return cli_mem_limit(c, o->mem_limit, o->no_mem_check, 0, NULL);
    const char *which = NULL;
    double avail = pipit_mem_available(&which);
    char what[320];
    snprintf(what, sizeof what, "what this process may use, the limit being %s", which ? which : "unknown");
    return cli_mem_limit(c, o->mem_limit, o->no_mem_check, avail, what);
}

/* pipit_compile's memory admission, in the command line's words. */
static void check_compile(pipit_status st, const char *mflag) {
    if (st == PIPIT_STATUS_NOMEM && strstr(pipit_errmsg(), "world rank ") && strstr(pipit_errmsg(), " of memory but "))
        die("plan: %s\n  (--mem-limit is what each world rank of the planned job may hold: more --pp stages, --zero1 "
            "with --dp, --remat, --cp C (a sequence's activations over C ranks), a smaller --micro-batch or "
            "fewer --%s need less; --no-mem-check skips this check)",
            pipit_errmsg(), mflag);
    if (st == PIPIT_STATUS_NOMEM && strstr(pipit_errmsg(), " of memory but "))
        die("compile: %s\n  (on the command line: more --pp stages, --zero1 with --dp, --remat, --cp C (a sequence's "
            "activations over C ranks), a smaller --micro-batch or fewer --%s need less; --no-mem-check skips this check)",
            pipit_errmsg(), mflag);
    cli_check(st, "compile");
}

void cli_note_unverified(const pipit_checkpoint *ck, const char *flagname) {
    if (!pipit_checkpoint_verified(ck) && pipit_process_rank() == 0)
        fprintf(stderr, "pipit: note: --%s '%s' carries no checksums (written by an older pipit or another tool): "
                        "loaded without an integrity check\n",
                flagname, pipit_checkpoint_path(ck));
}

/* bf16 weights (--save-weights-only --dtype bf16, or another tool's)
 * become fp32 masters, exactly, with a note. */
void cli_note_bf16(const pipit_checkpoint *ck, const char *flagname) {
    int n = 0;
    for (int i = 0; i < pipit_checkpoint_num_tensors(ck); i++) {
        pipit_dtype dt;
        n += !pipit_checkpoint_tensor_dtype(ck, pipit_checkpoint_tensor_name(ck, i), &dt) && dt == PIPIT_BF16;
    }
    if (n && pipit_process_rank() == 0)
        fprintf(stderr, "pipit: note: --%s '%s' holds %d bf16 tensor%s: loaded into the fp32 master weights, widened "
                        "exactly (their low 16 bits start at zero)\n",
                flagname, pipit_checkpoint_path(ck), n, n == 1 ? "" : "s");
}

/* --ep against the mesh and the model (the library refuses these too, in its words). */
/* --recompute into o->remat (pipit_options.remat's values); --remat is
 * its "full". */
static void cli_resolve_recompute(opts *o) {
    if (!o->recompute) return;
    int r = (int)pipit_cli_recompute(o->recompute);
    if (o->remat && r != PIPIT_REMAT_FULL)
        die("--remat is --recompute full: it contradicts --recompute %s (give one of them)", o->recompute);
    o->remat = r;
}

static void check_ep(const opts *o) {
    if (o->ep < 1 || o->ep > 64) die("--ep must be in 1..64 (expert-parallel ranks; got %d)", o->ep);
    if (o->ep == 1) return;
    if (!o->experts)
        die("--ep %d splits the experts of mixture-of-experts layers: pass --experts N (or --model moe-tiny)", o->ep);
    if (o->dp % o->ep)
        die("--ep %d does not divide --dp %d: the experts split over groups of %d consecutive data-parallel replicas",
            o->ep, o->dp, o->ep);
    if (o->experts % o->ep)
        die("--ep %d does not divide --experts %d: each of the %d expert-parallel ranks holds an equal share of each "
            "MoE layer's experts", o->ep, o->experts, o->ep);
    if (o->tp > 1) die("--ep with --tp %d: expert and tensor parallelism together are not built (use one)", o->tp);
    if (o->reshard_after_forward)
        die("--ep with --reshard-after-forward: ZeRO-3's per-task gathers of the expert params are not built yet "
            "(--zero 3 without it gathers once per step)");
}

void open_model(session *s, opts *o, const flag_cmd *c, int M) {
    const char *mflag = s->mb_flag ? s->mb_flag : "microbatches";
    const char *cmd = c->name;
    cli_check_device(o->device, o->tf32); /* before any file is read */
    pipit_dtype dtype = cli_dtype(o->dtype, o->device);
    if (o->resume) {
        /* s->ckpt was opened by apply_resume; closed with the session */
        cli_note_unverified(s->ckpt, "resume");
        model_from_checkpoint(s->ckpt, o, c);
    } else if (o->init) {
        if (!s->ckpt) cli_check(pipit_checkpoint_open(o->init, &s->ckpt), "--init"); /* eval opens it first */
        cli_note_unverified(s->ckpt, "init");
        model_from_checkpoint(s->ckpt, o, c);
        if (!flags_seen(c, "ctx") && o->max_ctx && o->ctx > o->max_ctx) o->ctx = o->max_ctx; /* the preset's ctx */
        int masks = 0; /* Hugging Face files carry attention-mask buffers: not params */
        for (int i = 0; i < pipit_checkpoint_num_tensors(s->ckpt); i++) {
            const char *nm = pipit_checkpoint_tensor_name(s->ckpt, i);
            size_t n = strlen(nm);
            masks += (n >= 10 && strcmp(nm + n - 10, ".attn.bias") == 0) ||
                     (n >= 17 && strcmp(nm + n - 17, ".attn.masked_bias") == 0);
        }
        if (masks && pipit_process_rank() == 0)
            fprintf(stderr, "pipit: note: --init '%s': ignoring %d attention-mask buffer%s (attn.bias, attn.masked_bias)\n",
                    o->init, masks, masks == 1 ? "" : "s");
        cli_note_bf16(s->ckpt, "init");
    }
    check_model_flags(o, c);
    check_positive("ctx", o->ctx);
    check_positive("micro-batch", o->micro_batch);
    check_positive(mflag, M);
    check_positive("threads", o->threads);
    if (M > PIPIT_MAX_MICROBATCHES) die("--%s must be at most %d (got %d)", mflag, PIPIT_MAX_MICROBATCHES, M);
    if (o->threads > PIPIT_MAX_THREADS) die("--threads must be at most %d (got %d)", PIPIT_MAX_THREADS, o->threads);
    check_positive("pp", o->pp);
    check_positive("dp", o->dp);
    check_positive("tp", o->tp);
    cli_check_cp(o); /* tools/cp_feeds.c */
    if (o->tp > 64) die("--tp must be at most 64 (got %d)", o->tp);
    cli_resolve_recompute(o);
    if (o->sp && o->tp < 2)
        die("--sp cuts the sequence over a stage's tensor-parallel ranks: it needs --tp 2 or more (got --tp %d)", o->tp);
    if (o->sp && o->ctx % o->tp)
        die("--sp: --tp %d does not divide --ctx %d (each of a stage's %d ranks holds ctx/tp positions between the "
            "tensor-parallel matmuls)", o->tp, o->ctx, o->tp);
    if (o->zero1 && o->dp < 2) die("--zero1 shards the optimizer state over data-parallel replicas: it needs --dp 2 or more");
    check_ep(o);
    if (o->zero < 0 || o->zero > 3) die("--zero must be a ZeRO stage in 0..3 (got %d)", o->zero);
    if (o->zero1 && o->zero > 1) die("--zero1 is --zero 1: it contradicts --zero %d (give one of them)", o->zero);
    if (o->zero > 0 && o->dp < 2)
        die("--zero %d shards state over data-parallel replicas: it needs --dp 2 or more", o->zero);
    if (o->reshard_after_forward && o->zero != 3)
        die("--reshard-after-forward releases ZeRO-3's gathered parameters after each task: it needs --zero 3 (got "
            "--zero %d%s)", o->zero1 ? 1 : o->zero, o->zero1 ? " from --zero1" : "");
    if (o->virt < 0) die("--virtual must be >= 1 (got %d)", o->virt);
    if (o->max_ctx && o->max_ctx < o->ctx) {
        if (s->ckpt && !flags_seen(c, "max-ctx")) /* the limit came from the file, not from a flag */
            die("--ctx %d is longer than checkpoint '%s' allows: %s %d%s; pass --ctx %d or less", o->ctx,
                pipit_checkpoint_path(s->ckpt), strcmp(o->arch, "gpt2") ? "its max_position_embeddings is" : "its 'wpe.weight' has",
                o->max_ctx, strcmp(o->arch, "gpt2") ? "" : " rows (positions)", o->max_ctx);
        die("--max-ctx %d is smaller than --ctx %d", o->max_ctx, o->ctx);
    }
    int sP = pipit_schedule_ranks(s->sched), sS = pipit_schedule_stages(s->sched),
        sM = pipit_schedule_microbatches(s->sched);
    int stages = s->sched ? sS : o->pp * (o->virt ? o->virt : 1);
    if (s->sched && o->schedule && pipit_schedule_kind_from_name(o->schedule) < 0) {
        /* a schedule file brings its own layout; flags given must agree */
        if ((flags_seen(c, "pp") && o->pp != sP) || (flags_seen(c, "virtual") && o->pp * o->virt != sS))
            die("--schedule '%s' has %d rank%s and %d stage%s, but --pp %d --virtual %d give %d", o->schedule, sP,
                sP == 1 ? "" : "s", sS, sS == 1 ? "" : "s", o->pp, o->virt, o->pp * o->virt);
        if (sM != M)
            die("--schedule '%s' is written for %d microbatch%s, but --microbatches is %d", o->schedule, sM,
                sM == 1 ? "" : "es", M);
    }
    s->stages = stages;
    s->cfg = model_config(o, o->auto_stages ? 1 : stages);
    s->cfg.cp = o->cp;
    s->cfg.ep = o->ep;
    cli_check(s->cfg.kind->check(&s->cfg), cmd);
    check_tp(&s->cfg);
    if (o->tp > 1 && o->auto_stages)
        die("--auto-stages cuts a graph without tensor parallelism: pass --tp 1, or the even split by layers");
    check_auto_stages_flags(o, c);
    o->mem_limit = mem_limit_flag(s, o, c);
    admit_run(s, o, M, mflag);
    if (!s->data) /* eval opens it first */
        cli_check(pipit_data_open_spec(o->data, data_format(o->data_format), o->ctx, data_order(o->data_order), o->seed,
                                       &s->data),
                  "--data");
    if (pipit_data_max_token(s->data) >= o->vocab)
        die("--data '%s' holds token %d but the vocabulary has %d entries (raise --vocab)", o->data,
            pipit_data_max_token(s->data), o->vocab);
    agree_run(s, o, c);
    s->g = pipit_graph_new();
    if (!s->g) die("out of memory");
    s->loss = cli_moe_build(s->g, &s->cfg, &s->moe);
    cli_check(pipit_graph_status(s->g), "model");
    if (o->auto_stages) auto_stages(s, o, M);
    pipit_val loss = s->loss;
    pipit_options po = {.schedule = s->sched, .microbatches = M, .threads = o->threads,
                        .remat = o->remat, .no_a2a_overlap = o->no_a2a_overlap, .optimizer = make_optimizer(o),
                        .clip_norm = o->clip,
                        .data_parallel = o->dp * o->cp, .zero1 = o->zero1, .zero = o->zero,
                        .reshard_after_forward = o->reshard_after_forward, .tensor_parallel = o->tp,
                        .lr_schedule = make_lr_schedule(o),
                        .forward_only = s->forward_only, .device = o->device, .tf32 = o->tf32,
                        .mem_limit = o->mem_limit, .no_mem_check = o->no_mem_check,
                        .dtype = dtype, .bf16_policy = cli_bf16_policy(o->bf16_policy),
                        .plan_only = s->plan_only};
    if (!s->plan_only && !s->forward_only) po.outputs = s->moe.choice, po.noutputs = s->moe.n; /* --json's counts */
    if (o->clip < 0) die("--clip must be >= 0");
    check_compile(pipit_compile(s->g, loss, &po, &s->p), mflag);
    s->po = po;
    if (o->resume || s->plan_only) return; /* the caller loads params and optimizer state; a plan has no memory */
    if (s->ckpt) cli_check(pipit_checkpoint_load_into(s->p, s->ckpt), "--init");
    else cli_check(s->cfg.kind->init(s->p, &s->cfg, o->seed), "init");
}

void close_session(session *s) {
    pipit_program_free(s->vp);
    pipit_program_free(s->p);
    pipit_graph_free(s->g);
    cli_moe_free(&s->moe);
    pipit_schedule_free(s->sched);
    pipit_data_free(s->data);
    pipit_data_free(s->val);
    pipit_checkpoint_free(s->ckpt);
}

void open_schedule(session *s, const opts *o) {
    if (!o->schedule && o->pp <= 1 && o->virt <= 1) return; /* one rank, sequential */
    const char *def = o->virt > 1 ? "interleaved-1f1b" : "1f1b";
    cli_check(pipit_cli_schedule_open("schedule", o->schedule ? o->schedule : def, o->pp, o->virt, o->microbatches,
                                      &s->sched),
              "--schedule");
}
