/*
 * pipit.c — the command line: `pipit train`, `pipit eval`, `pipit schedule`
 * and `pipit plan`. Parses flags from one table per command (so --help and
 * the errors for unknown flags and bad values come for free), builds GPT-2,
 * and drives the library. This is the only place that calls exit().
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "flags.h"
#include "progress.h"
#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_inspect.h"
#include "pipit_io.h"

/* tools/cli_pipeline.c */
pipit_status pipit_cli_schedule_open(const char *flagname, const char *name, int P, int V, int M, pipit_schedule **out);

static void check_status(pipit_status s, const char *what) {
    if (s) die("%s: %s", what, pipit_errmsg());
}

/* ------------------------------------------------------------ model setup */

typedef struct {
    const char *data, *init, *save, *optimizer, *data_order, *schedule, *trace, *init_opt, *save_opt;
    const char *resume; /* --resume FILE */
    int save_every, keep, weights_only;
    int ctx, max_ctx, vocab, layers, heads, dim, micro_batch, microbatches, steps, threads, json;
    int pp, virt, remat, batches, profile, verbose, dp, zero1;
    double lr, wd, beta1, beta2, eps, clip;
    const char *model, *config, *lr_schedule;
    int warmup, decay_steps, log_every, print_config;
    double min_lr;
    uint64_t seed;
    const char *data_format, *val_data; /* --data-format, --val-data; see docs/architecture.md §8 */
    double val_split;
    int eval_every, eval_batches;
    double peak_flops; /* --peak-flops: one rank's FLOP/s for MFU (0: measure sgemm) */
    int json_summary;
    const char *device; /* --device cpu|cuda */
    int tf32;           /* --tf32 */
    const char *profile_out; /* --profile-out FILE: the profile and the model as JSON (pipit sim --calibrate) */
    int auto_stages;          /* --auto-stages: pipit_partition cuts the stages */
    const char *stage_costs;  /* --stage-costs model|measured */
    double stage_mem_limit;   /* --stage-mem-limit BYTES per rank (0: none) */
} opts;

/* --resume FILE, opened while the flags are applied (apply_resume), then
 * owned by the session. */
static pipit_checkpoint *g_resume_ck;

/* Model sizes from a checkpoint's tensor shapes (and heads from its
 * metadata); flags given explicitly must agree with the file. */
static void config_from_checkpoint(const pipit_checkpoint *ck, opts *o, const flag_cmd *c) {
    const char *path = pipit_checkpoint_path(ck);
    pipit_gpt2_config f = {0};
    check_status(pipit_gpt2_config_from_checkpoint(ck, &f), "--init");
    struct { const char *flag; int *dst; int64_t v; } from_file[] = {
        {"vocab", &o->vocab, f.vocab}, {"dim", &o->dim, f.dim},
        {"max-ctx", &o->max_ctx, f.max_ctx}, {"layers", &o->layers, f.layers}};
    for (int i = 0; i < 4; i++) {
        if (flags_seen(c, from_file[i].flag) && *from_file[i].dst != from_file[i].v)
            die("--%s %d disagrees with checkpoint '%s' (%lld)", from_file[i].flag, *from_file[i].dst, path,
                (long long)from_file[i].v);
        *from_file[i].dst = (int)from_file[i].v;
    }
    if (f.heads && flags_seen(c, "heads") && o->heads != f.heads)
        die("--heads %d disagrees with checkpoint '%s' (%d)", o->heads, path, f.heads);
    if (!flags_seen(c, "heads")) {
        if (!f.heads) die("checkpoint '%s' does not record its head count: pass --heads", path);
        o->heads = f.heads;
    }
}

static pipit_gpt2_config model_config(const opts *o, int stages) {
    return (pipit_gpt2_config){o->vocab, o->max_ctx ? o->max_ctx : o->ctx, o->ctx, o->layers, o->heads,
                               o->dim, o->micro_batch, stages, PIPIT_F32};
}

static void save_checkpoint(const pipit_program *p, const pipit_gpt2_config *c, const char *path) {
    char heads[16], layers[16];
    snprintf(heads, sizeof heads, "%d", c->heads);
    snprintf(layers, sizeof layers, "%d", c->layers);
    const char *meta[] = {"format", "pt", "model", "gpt2", "heads", heads, "layers", layers, NULL};
    check_status(pipit_checkpoint_save(p, path, meta), "save");
}

/* Microbatch feeds for sequences first .. first+B-1. */
typedef struct {
    int32_t *tok, *tgt, *pos;
} mb_buf;

static void fill_microbatch(const pipit_data *d, const pipit_gpt2_config *c, int64_t first, mb_buf *b,
                            pipit_feed *f) {
    check_status(pipit_data_batch(d, first, c->batch, b->tok, b->tgt), "--data");
    check_status(pipit_gpt2_feeds(c, b->tok, b->tgt, b->pos, f), "feeds");
}

/* G microbatch buffers of B x T tokens each, and their 3 G feeds. */
static mb_buf *mb_bufs_new(int G, int B, int T, pipit_feed **feeds) {
    mb_buf *bufs = calloc((size_t)G, sizeof *bufs);
    *feeds = calloc((size_t)G * 3, sizeof **feeds);
    if (!bufs || !*feeds) die("out of memory");
    for (int m = 0; m < G; m++) {
        bufs[m].tok = malloc(sizeof(int32_t) * (size_t)B * T);
        bufs[m].tgt = malloc(sizeof(int32_t) * (size_t)B * T);
        bufs[m].pos = malloc(sizeof(int32_t) * (size_t)B * T);
        if (!bufs[m].tok || !bufs[m].tgt || !bufs[m].pos) die("out of memory");
    }
    return bufs;
}

static void mb_bufs_free(mb_buf *bufs, int G, pipit_feed *feeds) {
    for (int m = 0; m < G; m++) {
        free(bufs[m].tok);
        free(bufs[m].tgt);
        free(bufs[m].pos);
    }
    free(bufs);
    free(feeds);
}

/* ------------------------------------------------------------------ train */

static const char *TRAIN_USAGE =
    "--data FILE [--model tiny|gpt2|gpt2-medium|gpt2-large|gpt2-xl] [--config FILE] [--ctx T --layers L --heads H\n"
    "       --dim C --micro-batch B --microbatches M --steps N --lr X --lr-schedule cosine --warmup K ...]\n\n"
    "With --data alone it trains the `tiny` preset (ctx 64, 4 layers, 4 heads, dim 128, micro-batch 8,\n"
    "100 steps, lr 1e-3). Precedence: defaults < --model preset < --config file < flags. A command line\n"
    "that sizes the model itself (--layers/--heads/--dim without --model or --config) names its --steps.";
static const char *PLAN_USAGE =
    "--data FILE [--model NAME] [--config FILE] [--ctx T --layers L ...] [--pp P --schedule S ...] [--json]";
static const char *PLAN_ABOUT =
    "Compiles the model as `pipit train` would (same model and pipeline flags) and prints, per rank,\n"
    "its stages, planned peak activation memory, the ops it runs and its instruction list; nothing runs.\n"
    "`pipit plan --search --global-batch G` ranks schedules instead (see pipit plan --search --help).";

enum { CMD_TRAIN = 1, CMD_PLAN = 2, IGN = 4 };

/* The flags of train and plan in one table; `cmds` says which commands take
 * each. Plan accepts every train flag, so a train command line works as is;
 * IGN marks those plan ignores (its help says so). */
static int train_plan_flags(opts *o, int cmd, flag *out, int cap) {
    const struct {
        int cmds;
        flag f;
    } all[] = {
        {3, {"data", FL_STR, &o->data, "training text (bytes are tokens) or uint16 token shard (.bin); several: "
                                       "'a.bin,b.bin' or a glob 'shards/*.bin' (sorted by path)", 0}},
        {3, {"data-format", FL_STR, &o->data_format, "auto (default: shard if .bin or magic, else text)|text|shard|u16 "
                                                     "(headerless uint16, nanoGPT's train.bin)", 0}},
        {3 | IGN, {"val-data", FL_STR, &o->val_data, "validation data (same format and spec as --data)", 0}},
        {3 | IGN, {"val-split", FL_DBL, &o->val_split, "hold out the last fraction F of --data's windows as validation", 0}},
        {3 | IGN, {"eval-every", FL_INT, &o->eval_every, "validation loss every K steps and at the end (default: at the end)", 0}},
        {3 | IGN, {"eval-batches", FL_INT, &o->eval_batches, "validation batches of M x B sequences (default: up to 4)", 0}},
        {3, {"ctx", FL_INT, &o->ctx, "sequence length T", 0}},
        {3, {"max-ctx", FL_INT, &o->max_ctx, "rows of wpe (default: --ctx)", 0}},
        {3, {"vocab", FL_INT, &o->vocab, "vocabulary size V (default 256: bytes)", 0}},
        {3, {"layers", FL_INT, &o->layers, "transformer blocks L", 0}},
        {3, {"heads", FL_INT, &o->heads, "attention heads H", 0}},
        {3, {"dim", FL_INT, &o->dim, "model width C", 0}},
        {3, {"micro-batch", FL_INT, &o->micro_batch, "sequences per microbatch B", 0}},
        {3, {"microbatches", FL_INT, &o->microbatches, "microbatches per step M (default 1)", 0}},
        {3 | IGN, {"steps", FL_INT, &o->steps, "optimizer steps (0 with --save writes the initial weights)", 0}},
        {3 | IGN, {"lr", FL_DBL, &o->lr, "peak learning rate (default: the preset's; tiny 1e-3)", 0}},
        {3 | IGN, {"lr-schedule", FL_STR, &o->lr_schedule, "constant (default), cosine or linear decay after the warm-up", 0}},
        {3 | IGN, {"warmup", FL_INT, &o->warmup, "linear warm-up over the first K steps: lr*t/K for step t <= K (default 0)", 0}},
        {3 | IGN, {"decay-steps", FL_INT, &o->decay_steps, "cosine/linear: step where --min-lr is reached (default: --steps)", 0}},
        {3 | IGN, {"min-lr", FL_DBL, &o->min_lr, "cosine/linear: the lr after the decay (default: --lr / 10)", 0}},
        {3 | IGN, {"log-every", FL_INT, &o->log_every, "print every K-th step's line (steps 0, K, 2K, ...; the last always; default 1)", 0}},
        {3, {"model", FL_STR, &o->model, "preset: tiny (default), gpt2 (124M), gpt2-medium, gpt2-large, gpt2-xl", 0}},
        {3, {"config", FL_STR, &o->config, "JSON object of flags without --, e.g. {\"layers\": 6, \"lr\": 6e-4}", 0}},
        {3, {"print-config", FL_BOOL, &o->print_config, "print the resolved settings and the parameter count as JSON; run nothing", 0}},
        {3, {"weight-decay", FL_DBL, &o->wd, "AdamW decoupled weight decay on 2-D params (default 0)", 0}},
        {3 | IGN, {"beta1", FL_DBL, &o->beta1, "AdamW beta1 (default 0.9)", 0}},
        {3 | IGN, {"beta2", FL_DBL, &o->beta2, "AdamW beta2 (default 0.95)", 0}},
        {3 | IGN, {"eps", FL_DBL, &o->eps, "AdamW epsilon (default 1e-8)", 0}},
        {3, {"clip", FL_DBL, &o->clip, "clip gradients to this global norm (default: off)", 0}},
        {3, {"optimizer", FL_STR, &o->optimizer, "adamw (default) or sgd", 0}},
        {3 | IGN, {"seed", FL_U64, &o->seed, "seed for init and random data order (default 1)", 0}},
        {3 | IGN, {"data-order", FL_STR, &o->data_order, "random (default) or sequential", 0}},
        {1, {"init", FL_STR, &o->init, "load parameters from a safetensors checkpoint", 0}},
        {2, {"init", FL_STR, &o->init, "plan for a checkpoint's model (sizes from the file)", 0}},
        {3 | IGN, {"save", FL_STR, &o->save, "write a training checkpoint (params, optimizer state, config; one safetensors file) at the end", 0}},
        {3 | IGN, {"save-every", FL_INT, &o->save_every, "also save every K steps (to the --save path)", 0}},
        {3 | IGN, {"keep", FL_INT, &o->keep, "keep the last N saves as FILE.step<s> besides FILE (default: only FILE)", 0}},
        {3 | IGN, {"save-weights-only", FL_BOOL, &o->weights_only, "--save writes the params only (a plain checkpoint)", 0}},
        {1, {"resume", FL_STR, &o->resume, "continue a training checkpoint (config from the file; --steps: the new total)", 0}},
        {3 | IGN, {"save-optimizer", FL_STR, &o->save_opt, "write the optimizer state and step at the end (resume with --init-optimizer); --save then writes the params only", 0}},
        {3 | IGN, {"init-optimizer", FL_STR, &o->init_opt, "load optimizer state and continue from its step (with --init)", 0}},
        {3, {"threads", FL_INT, &o->threads, "compute threads per rank (default 1; cpu only)", 0}},
        {3, {"device", FL_STR, &o->device, "cpu (default) or cuda: where the ranks run (rank r on GPU r mod the GPUs)", 0}},
        {3, {"tf32", FL_BOOL, &o->tf32, "with --device cuda: GEMMs on TF32 tensor cores (default: full fp32)", 0}},
        {3, {"pp", FL_INT, &o->pp, "pipeline ranks P (default 1)", 0}},
        {3, {"dp", FL_INT, &o->dp, "data-parallel replicas D of the pipeline (default 1): P x D ranks, threads or MPI processes", 0}},
        {3, {"zero1", FL_BOOL, &o->zero1, "with --dp: shard the optimizer state over the replicas (ZeRO-1)", 0}},
        {3, {"virtual", FL_INT, &o->virt, "stages per rank V (default: the schedule's own; S = P*V)", 0}},
        {3, {"schedule", FL_STR, &o->schedule, "gpipe|1f1b|eager-1f1b|interleaved-1f1b|interleaved-gpipe|zb-h1|dualpipev|zb-h2|zb-v|interleaved-zb|FILE", 0}},
        {3, {"remat", FL_BOOL, &o->remat, "recompute each stage's forward inside its backward", 0}},
        {3, {"auto-stages", FL_BOOL, &o->auto_stages, "cut the stages where the predicted forward+backward cost is "
                                                      "balanced (pipit_partition, docs/partition.md) instead of evenly by layers", 0}},
        {3, {"stage-costs", FL_STR, &o->stage_costs, "with --auto-stages: model (default: FLOPs at 50 GFLOP/s, bytes "
                                                     "at 10 GB/s, exp/tanh at 3e8/s) or measured (scale by a profile of 2 sequential steps first; one process only)", 0}},
        {3, {"stage-mem-limit", FL_DBL, &o->stage_mem_limit, "with --auto-stages: bytes per rank the stages must fit "
                                                             "(params, grads, optimizer state, activations; 0: no limit)", 0}},
        {1, {"json", FL_BOOL, &o->json, "one JSON object per line on stdout", 0}},
        {2, {"json", FL_BOOL, &o->json, "print the plan as one JSON object (ranks, memory, tasks, program, params)", 0}},
        {2, {"verbose", FL_BOOL, &o->verbose, "list every instruction (RUN, ACC, GRAD, UPDATE too)", 0}},
        {3 | IGN, {"trace", FL_STR, &o->trace, "write the last step as a Chrome/Perfetto trace (JSON), or an SVG timeline (FILE.svg)", 0}},
        {3 | IGN, {"profile", FL_BOOL, &o->profile, "print time per op and instruction kind, steps after the first (stderr)", 0}},
        {3 | IGN, {"peak-flops", FL_DBL, &o->peak_flops, "one rank's peak FLOP/s for the MFU on step lines (default: measured sgemm x threads)", 0}},
        {1, {"profile-out", FL_STR, &o->profile_out, "profile as --profile does and write it with the model as JSON "
                                                     "to FILE (for `pipit sim --calibrate FILE`)", 0}},
        {1, {"json-summary", FL_BOOL, &o->json_summary, "with --json: end with one {\"summary\":{...}} line", 0}},
    };
    int n = 0;
    for (int i = 0; i < NFLAGS(all); i++)
        if (all[i].cmds & cmd) {
            if (n == cap) die("internal: flag table too small");
            out[n] = all[i].f;
            if (cmd == CMD_PLAN && (all[i].cmds & IGN)) out[n].help = "(train only: accepted and ignored)";
            n++;
        }
    return n;
}

static void default_opts(opts *o) {
    memset(o, 0, sizeof *o);
    o->vocab = 256;
    o->microbatches = 1;
    o->lr = 3e-4;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->optimizer = "adamw";
    o->data_order = "random";
    o->seed = 1;
    o->threads = 1;
    o->pp = 1;
    o->dp = 1;
    o->virt = 0; /* 0: the schedule's own (1, or 2 for interleaved schedules, DualPipeV and ZB-V) */
    o->steps = -1;
    o->log_every = 1;
    o->lr_schedule = "constant";
    o->min_lr = -1;      /* -1: --lr / 10 */
    o->decay_steps = -1; /* -1: --steps */
}

/* The preset's fields, over the defaults (flags and --config come later). */
static void apply_preset(opts *o, const char *name) {
    const cli_preset *pr = cli_preset_find(name);
    if (!pr) {
        const char *names[16];
        int n = 0;
        for (int i = 0; i < cli_preset_count() && n < 16; i++) names[n++] = cli_preset_at(i)->name;
        die("unknown --model '%s': expected tiny, gpt2, gpt2-medium, gpt2-large or gpt2-xl%s", name,
            cli_did_you_mean(name, names, n, ""));
    }
    o->vocab = pr->vocab;
    o->ctx = pr->ctx;
    o->layers = pr->layers;
    o->heads = pr->heads;
    o->dim = pr->dim;
    o->micro_batch = pr->micro_batch;
    o->steps = pr->steps;
    o->lr = pr->lr;
}

/* The value of --NAME in argv (--NAME V or --NAME=V; the last wins), or
 * NULL: --model and --config are needed before the flags are parsed. */
static const char *prescan(int argc, char **argv, const char *name) {
    const char *v = NULL;
    size_t n = strlen(name);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, n) != 0) continue;
        if (a[2 + n] == '=') v = a + 3 + n;
        else if (a[2 + n] == 0 && i + 1 < argc) v = argv[++i];
    }
    return v;
}

/* --lr-schedule, --warmup, --decay-steps, --min-lr as the library's schedule. */
static pipit_lr_schedule make_lr_schedule(const opts *o) {
    pipit_lr_schedule ls = {0};
    if (o->warmup < 0) die("--warmup must be >= 0 (got %d)", o->warmup);
    ls.warmup = o->warmup;
    if (strcmp(o->lr_schedule, "constant") == 0) {
        if (o->decay_steps >= 0 || o->min_lr >= 0)
            die("--decay-steps and --min-lr apply to --lr-schedule cosine or linear (the schedule is constant)");
        return ls;
    }
    if (strcmp(o->lr_schedule, "cosine") == 0) ls.kind = PIPIT_LR_COSINE;
    else if (strcmp(o->lr_schedule, "linear") == 0) ls.kind = PIPIT_LR_LINEAR;
    else
        die("bad value '%s' for --lr-schedule: expected constant, cosine or linear%s", o->lr_schedule,
            cli_did_you_mean(o->lr_schedule, (const char *const[]){"constant", "cosine", "linear"}, 3, ""));
    if (o->min_lr < 0 && o->min_lr != -1) die("--min-lr must be >= 0 (got %g)", o->min_lr);
    ls.min_lr = o->min_lr >= 0 ? o->min_lr : o->lr / 10;
    if (o->decay_steps >= 0) {
        if (o->decay_steps <= o->warmup)
            die("--decay-steps %d must be greater than --warmup %d", o->decay_steps, o->warmup);
        ls.decay_steps = o->decay_steps;
    } else if (o->steps > o->warmup) {
        ls.decay_steps = o->steps;
    } else if (o->steps == 0) {
        ls.decay_steps = ls.warmup + 1; /* nothing runs: any valid schedule */
    } else {
        die("--lr-schedule %s decays after the warm-up, but --warmup %d leaves none of --steps %d: lower --warmup or "
            "pass --decay-steps",
            o->lr_schedule, o->warmup, o->steps);
    }
    return ls;
}

static pipit_optimizer make_optimizer(const opts *o) {
    if (strcmp(o->optimizer, "adamw") == 0) return pipit_adamw(o->lr, o->beta1, o->beta2, o->eps, o->wd);
    if (strcmp(o->optimizer, "sgd") == 0) {
        if (o->wd != 0) die("--weight-decay applies to --optimizer adamw only");
        return pipit_sgd(o->lr);
    }
    die("bad value '%s' for --optimizer: expected adamw or sgd", o->optimizer);
}

static pipit_data_order data_order(const char *s) {
    if (strcmp(s, "random") == 0) return PIPIT_DATA_RANDOM;
    if (strcmp(s, "sequential") == 0) return PIPIT_DATA_SEQUENTIAL;
    die("bad value '%s' for --data-order: expected random or sequential", s);
}

static pipit_data_format data_format(const char *s) {
    if (!s || strcmp(s, "auto") == 0) return PIPIT_DATA_AUTO;
    if (strcmp(s, "text") == 0) return PIPIT_DATA_TEXT;
    if (strcmp(s, "shard") == 0) return PIPIT_DATA_SHARD;
    if (strcmp(s, "u16") == 0) return PIPIT_DATA_U16;
    die("bad value '%s' for --data-format: expected auto, text, shard or u16", s);
}

static void check_positive(const char *name, int v) {
    if (v < 1) die("--%s must be >= 1 (got %d)", name, v);
}

/* Everything train and eval share: data, model config, graph, program. */
typedef struct {
    pipit_data *data, *val;
    pipit_checkpoint *ckpt;
    pipit_graph *g;
    pipit_program *p;
    pipit_schedule *sched;
    pipit_gpt2_config cfg;
    int forward_only;    /* eval: a forward-only program (no backward, no gradient memory) */
    pipit_val loss;
    pipit_options po;    /* the program's options (the validation program reuses them) */
    pipit_program *vp;   /* train's validation: a forward-only program on the same graph */
    int stages;          /* pipeline stages (cfg.stages is 1 with --auto-stages: the graph is cut later) */
} session;

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
    pipit_val loss = pipit_gpt2_build(g, &s->cfg);
    pipit_options po = {.microbatches = M, .threads = o->threads, .optimizer = make_optimizer(o)};
    pipit_program *p = NULL;
    check_status(pipit_compile(g, loss, &po, &p), "--stage-costs measured");
    check_status(pipit_gpt2_init(p, &s->cfg, o->seed), "--stage-costs measured");
    pipit_feed *feeds;
    mb_buf *bufs = mb_bufs_new(M, s->cfg.batch, s->cfg.ctx, &feeds);
    for (int m = 0; m < M; m++) fill_microbatch(s->data, &s->cfg, (int64_t)m * s->cfg.batch, &bufs[m], feeds + 3 * m);
    for (int step = 0; step < 2; step++) {
        check_status(pipit_program_set_profile(p, 1), "--stage-costs measured"); /* resets: step 2 alone counts */
        if (pipit_step(p, feeds, 3, 0, NULL)) die("--stage-costs measured: %s", pipit_program_errmsg(p));
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
    pipit_gpt2_config cfg = s->cfg;
    /* fixed rates, not a timing: every MPI process must choose the same cuts */
    cli_auto_stages a = {.sched = s->sched, .stages = s->stages, .mem_limit = o->stage_mem_limit, .profile = prof,
                         .remat = o->remat,
                         .print = !o->json && pipit_process_rank() == 0};
    cli_auto_stages_apply(&a, &cfg, s->g, &s->loss);
    pipit_program_free(prof);
    pipit_graph_free(pg);
}

static void open_model(session *s, opts *o, const flag_cmd *c, int M) {
    const char *cmd = c->name;
    cli_check_device(o->device, o->tf32); /* before any file is read */
    if (o->resume) {
        s->ckpt = g_resume_ck; /* opened by apply_resume; closed with the session */
        g_resume_ck = NULL;
        config_from_checkpoint(s->ckpt, o, c);
    } else if (o->init) {
        check_status(pipit_checkpoint_open(o->init, &s->ckpt), "--init");
        config_from_checkpoint(s->ckpt, o, c);
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
    }
    check_positive("ctx", o->ctx);
    check_positive("micro-batch", o->micro_batch);
    check_positive("microbatches", M);
    check_positive("threads", o->threads);
    if (M > PIPIT_MAX_MICROBATCHES) die("--microbatches must be at most %d (got %d)", PIPIT_MAX_MICROBATCHES, M);
    if (o->threads > PIPIT_MAX_THREADS) die("--threads must be at most %d (got %d)", PIPIT_MAX_THREADS, o->threads);
    check_positive("pp", o->pp);
    check_positive("dp", o->dp);
    if (o->zero1 && o->dp < 2) die("--zero1 shards the optimizer state over data-parallel replicas: it needs --dp 2 or more");
    if (o->virt < 0) die("--virtual must be >= 1 (got %d)", o->virt);
    if (o->max_ctx && o->max_ctx < o->ctx) {
        if (s->ckpt && !flags_seen(c, "max-ctx")) /* the limit came from the file, not from a flag */
            die("--ctx %d is longer than checkpoint '%s' allows: its 'wpe.weight' has %d rows (positions); pass "
                "--ctx %d or less",
                o->ctx, pipit_checkpoint_path(s->ckpt), o->max_ctx, o->max_ctx);
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
    check_status(pipit_gpt2_check(&s->cfg), cmd);
    check_auto_stages_flags(o, c);
    check_status(pipit_data_open_spec(o->data, data_format(o->data_format), o->ctx, data_order(o->data_order),
                                      o->seed, &s->data),
                 "--data");
    if (pipit_data_max_token(s->data) >= o->vocab)
        die("--data '%s' holds token %d but the vocabulary has %d entries (raise --vocab)", o->data,
            pipit_data_max_token(s->data), o->vocab);
    s->g = pipit_graph_new();
    if (!s->g) die("out of memory");
    s->loss = pipit_gpt2_build(s->g, &s->cfg);
    check_status(pipit_graph_status(s->g), "model");
    if (o->auto_stages) auto_stages(s, o, M);
    pipit_val loss = s->loss;
    pipit_options po = {.schedule = s->sched, .microbatches = M, .threads = o->threads,
                        .remat = o->remat, .optimizer = make_optimizer(o), .clip_norm = o->clip,
                        .data_parallel = o->dp, .zero1 = o->zero1, .lr_schedule = make_lr_schedule(o),
                        .forward_only = s->forward_only, .device = o->device, .tf32 = o->tf32};
    if (o->clip < 0) die("--clip must be >= 0");
    check_status(pipit_compile(s->g, loss, &po, &s->p), "compile");
    s->po = po;
    if (o->resume) return; /* the caller loads params and optimizer state */
    if (s->ckpt) check_status(pipit_checkpoint_load_into(s->p, s->ckpt), "--init");
    else check_status(pipit_gpt2_init(s->p, &s->cfg, o->seed), "init");
}

static void close_session(session *s) {
    pipit_program_free(s->vp);
    pipit_program_free(s->p);
    pipit_graph_free(s->g);
    pipit_schedule_free(s->sched);
    pipit_data_free(s->data);
    pipit_data_free(s->val);
    pipit_checkpoint_free(s->ckpt);
}

static void print_step(const opts *o, int64_t step, const pipit_metrics *m, double tokens, double flops,
                       const cli_progress *pr) {
    double tps = tokens / (m->ms / 1e3);
    if (o->json)
        printf("{\"step\":%lld,\"loss\":%.9g,\"ms\":%.3f,\"tokens_per_s\":%.1f,\"grad_norm\":%.9g,"
               "\"gflops\":%.3f,\"peak_bytes\":%zu,\"bubble\":%.4f,\"lr\":%.9g}\n",
               (long long)step, m->loss, m->ms, tps, m->grad_norm, flops * tokens / (m->ms / 1e3) / 1e9, m->peak_bytes,
               m->bubble, m->lr);
    else {
        printf("step %4lld  loss %.6f  grad norm %.4f  lr %.4e  %8.1f ms  %9.0f tok/s  %.2f GFLOP/s", (long long)step,
               m->loss, m->grad_norm, m->lr, m->ms, tps, flops * tokens / (m->ms / 1e3) / 1e9);
        cli_progress_fields(stdout, pr, step, m, flops * tokens / (m->ms / 1e3));
        printf("\n");
    }
    fflush(stdout);
}


/* ------------------------------------------------- save, resume, signals */

/* SIGINT / SIGTERM: the step running finishes, the run saves and exits
 * 128 + signal. Single-process runs only (under mpirun the processes could
 * see the signal between different steps, and saving is collective). */
static volatile sig_atomic_t g_signal;
static void on_signal(int sig) { g_signal = sig; }

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND; /* a second signal ends the run at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The folder of path ("." when it has none) and its last component. */
static const char *path_dir(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, n, ".");
        return path;
    }
    snprintf(dir, n, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return slash + 1;
}

/* 1 and *v if s is "<prefix><digits>". */
static int digits_after(const char *s, const char *prefix, size_t plen, long long *v) {
    if (strncmp(s, prefix, plen) != 0 || !s[plen]) return 0;
    long long x = 0;
    for (const char *c = s + plen; *c; c++) {
        if (*c < '0' || *c > '9' || x > (long long)1e15) return 0;
        x = x * 10 + (*c - '0');
    }
    *v = x;
    return 1;
}

/* Removes "<path>.tmp.<pid>" files (the safetensors writer's temp names)
 * whose process is gone: what a killed save left. */
static void remove_stale_temps(const char *path) {
    char dir[4096], pre[4200], full[8400];
    const char *base = path_dir(path, dir, sizeof dir);
    snprintf(pre, sizeof pre, "%s.tmp.", base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    long long pid;
    while ((e = readdir(d)))
        if (digits_after(e->d_name, pre, strlen(pre), &pid) && pid > 0 && pid != (long long)getpid() &&
            kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
            if (unlink(full) == 0) fprintf(stderr, "pipit: removed stale temporary file %s\n", full);
        }
    closedir(d);
}

/* Dies unless a file can be created (and removed) beside path: checked
 * before step 0 rather than found out after the last step. */
static void check_writable(const char *flagname, const char *path) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) die("--%s '%s': cannot create a file there: %s", flagname, path, strerror(errno));
    close(fd);
    unlink(tmp);
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

static int cmp_desc(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* --keep N: the save just written at path also becomes "<path>.step<s>"
 * (a hard link, else a copy is skipped with a note); the newest N of those
 * stay, older ones are removed. */
static void keep_saves(const char *path, int64_t step, int keep) {
    if (keep < 1) return;
    char dir[4096], name[4200], pre[4200], full[8400];
    const char *base = path_dir(path, dir, sizeof dir);
    snprintf(name, sizeof name, "%s.step%lld", path, (long long)step);
    unlink(name);
    if (link(path, name) != 0) fprintf(stderr, "pipit: --keep: cannot link %s: %s\n", name, strerror(errno));
    snprintf(pre, sizeof pre, "%s.step", base);
    DIR *d = opendir(dir);
    if (!d) return;
    long long *steps = NULL, v;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (digits_after(e->d_name, pre, strlen(pre), &v)) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                long long *grown = realloc(steps, cap * sizeof *steps);
                if (!grown) break;
                steps = grown;
            }
            steps[n++] = v;
        }
    closedir(d);
    qsort(steps, n, sizeof *steps, cmp_desc);
    for (size_t i = (size_t)keep; i < n; i++) {
        snprintf(full, sizeof full, "%s.step%lld", path, steps[i]);
        unlink(full);
    }
    free(steps);
    fsync_dir(dir);
}

static void say_saved(const opts *o, const char *path, int64_t step) {
    if (pipit_process_rank() != 0) return;
    fprintf(o->json ? stderr : stdout, "saved %s (step %lld)\n", path, (long long)step);
    fflush(o->json ? stderr : stdout);
}

/* Where the run stands: written into the checkpoint's metadata. */
typedef struct {
    int64_t step, total, data_pos;
} run_pos;

/* The metadata of a training checkpoint: key, value pairs, numbers printed
 * into the list's own buffers. */
typedef struct {
    const char *kv[72];
    int n, k;
    char num[32][48];
} meta_list;

static void meta_str(meta_list *m, const char *key, const char *val) {
    if (m->n + 3 > (int)(sizeof m->kv / sizeof m->kv[0])) die("internal: checkpoint metadata list too small");
    m->kv[m->n++] = key;
    m->kv[m->n++] = val;
    m->kv[m->n] = NULL;
}

static void meta_num(meta_list *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_num(meta_list *m, const char *key, const char *fmt, ...) {
    if (m->k == (int)(sizeof m->num / sizeof m->num[0])) die("internal: checkpoint metadata list too small");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->num[m->k], sizeof m->num[m->k], fmt, ap);
    va_end(ap);
    meta_str(m, key, m->num[m->k++]);
}

/* The training checkpoint: params, moments, and (metadata) the step, the
 * data position, the model and the training config. Collective. */
static void save_train(const opts *o, const pipit_program *p, const pipit_gpt2_config *c, const char *path,
                       run_pos r) {
    /* the schedule as resolved for this run, so a resume follows the same curve */
    pipit_lr_schedule ls = make_lr_schedule(o);
    int constant = ls.kind == PIPIT_LR_CONSTANT;
    meta_list m = {.n = 0};
    meta_str(&m, "format", "pt");
    meta_str(&m, "model", "gpt2");
    meta_str(&m, "lr_schedule", o->lr_schedule);
    meta_num(&m, "warmup", "%d", o->warmup);
    meta_num(&m, "decay_steps", "%lld", constant ? -1LL : (long long)ls.decay_steps);
    meta_num(&m, "min_lr", "%.17g", constant ? -1.0 : ls.min_lr);
    meta_num(&m, "vocab", "%d", c->vocab);
    meta_num(&m, "ctx", "%d", c->ctx);
    meta_num(&m, "max_ctx", "%d", c->max_ctx);
    meta_num(&m, "layers", "%d", c->layers);
    meta_num(&m, "heads", "%d", c->heads);
    meta_num(&m, "dim", "%d", c->dim);
    meta_str(&m, "optimizer", o->optimizer);
    meta_num(&m, "lr", "%.17g", o->lr);
    meta_num(&m, "beta1", "%.17g", o->beta1);
    meta_num(&m, "beta2", "%.17g", o->beta2);
    meta_num(&m, "eps", "%.17g", o->eps);
    meta_num(&m, "weight_decay", "%.17g", o->wd);
    meta_num(&m, "clip", "%.17g", o->clip);
    meta_num(&m, "micro_batch", "%d", o->micro_batch);
    meta_num(&m, "microbatches", "%d", o->microbatches);
    meta_num(&m, "dp", "%d", o->dp);
    meta_num(&m, "seed", "%llu", (unsigned long long)o->seed);
    meta_str(&m, "data", o->data);
    meta_str(&m, "data_order", o->data_order);
    meta_num(&m, "steps", "%lld", (long long)r.total);
    meta_num(&m, "data_pos", "%lld", (long long)r.data_pos);
    meta_num(&m, "save_every", "%d", o->save_every);
    meta_num(&m, "keep", "%d", o->keep);
    check_status(pipit_checkpoint_save_train(p, path, r.step, m.kv), "save");
    if (pipit_process_rank() == 0) keep_saves(path, r.step, o->keep);
    say_saved(o, path, r.step);
}

/* --resume FILE: the model and training config come from the file; a flag
 * given as well must agree with it, except the layout flags (--pp,
 * --virtual, --schedule, --dp, --zero1, --threads, --remat, --device,
 * --tf32), --data (the
 * same data may have moved), --steps (the new total), --save, --save-every
 * and --keep. */
static void apply_resume(opts *o, const flag_cmd *c, int64_t *step_out) {
    const char *path = o->resume;
    if (o->init || o->init_opt || o->save_opt || o->weights_only)
        die("--resume continues a training checkpoint: it takes no --%s", o->init ? "init" : o->init_opt ? "init-optimizer"
                                                                          : o->save_opt ? "save-optimizer" : "save-weights-only");
    check_status(pipit_checkpoint_open(path, &g_resume_ck), "--resume");
    const char *kind = pipit_checkpoint_meta(g_resume_ck, "pipit");
    if (!kind || strcmp(kind, "train") != 0)
        die("--resume: '%s' is not a training checkpoint (it holds weights only: start from it with --init)", path);
    const struct {
        const char *flag, *key;
        flag_type type;
        void *dst;
        int layout; /* may differ from the file */
    } tab[] = {
        {"vocab", "vocab", FL_INT, &o->vocab, 0}, {"ctx", "ctx", FL_INT, &o->ctx, 0},
        {"max-ctx", "max_ctx", FL_INT, &o->max_ctx, 0}, {"layers", "layers", FL_INT, &o->layers, 0},
        {"heads", "heads", FL_INT, &o->heads, 0}, {"dim", "dim", FL_INT, &o->dim, 0},
        {"micro-batch", "micro_batch", FL_INT, &o->micro_batch, 0},
        {"microbatches", "microbatches", FL_INT, &o->microbatches, 0},
        {"optimizer", "optimizer", FL_STR, &o->optimizer, 0}, {"lr", "lr", FL_DBL, &o->lr, 0},
        {"beta1", "beta1", FL_DBL, &o->beta1, 0}, {"beta2", "beta2", FL_DBL, &o->beta2, 0},
        {"eps", "eps", FL_DBL, &o->eps, 0}, {"weight-decay", "weight_decay", FL_DBL, &o->wd, 0},
        {"clip", "clip", FL_DBL, &o->clip, 0}, {"seed", "seed", FL_U64, &o->seed, 0},
        {"data-order", "data_order", FL_STR, &o->data_order, 0}, {"data", "data", FL_STR, &o->data, 1},
        {"lr-schedule", "lr_schedule", FL_STR, &o->lr_schedule, 0}, {"warmup", "warmup", FL_INT, &o->warmup, 0},
        {"decay-steps", "decay_steps", FL_INT, &o->decay_steps, 0}, {"min-lr", "min_lr", FL_DBL, &o->min_lr, 0},
        {"dp", "dp", FL_INT, &o->dp, 1}, {"steps", "steps", FL_INT, &o->steps, 1},
        {"save-every", "save_every", FL_INT, &o->save_every, 1}, {"keep", "keep", FL_INT, &o->keep, 1},
    };
    for (int i = 0; i < NFLAGS(tab); i++) {
        const char *v = pipit_checkpoint_meta(g_resume_ck, tab[i].key);
        if (!v) die("--resume: checkpoint '%s' lacks metadata '%s'", path, tab[i].key);
        char *end = NULL, given[64];
        errno = 0;
        int same = 1, seen = flags_seen(c, tab[i].flag);
        switch (tab[i].type) {
        case FL_INT: {
            long x = strtol(v, &end, 10);
            if (x < -2147483647L || x > 2147483647L) errno = ERANGE;
            snprintf(given, sizeof given, "%d", *(int *)tab[i].dst);
            same = *(int *)tab[i].dst == (int)x;
            if (!seen) *(int *)tab[i].dst = (int)x;
            break;
        }
        case FL_U64: {
            unsigned long long x = strtoull(v, &end, 10);
            snprintf(given, sizeof given, "%llu", (unsigned long long)*(uint64_t *)tab[i].dst);
            same = *(uint64_t *)tab[i].dst == (uint64_t)x;
            if (!seen) *(uint64_t *)tab[i].dst = (uint64_t)x;
            break;
        }
        case FL_DBL: {
            double x = strtod(v, &end);
            snprintf(given, sizeof given, "%.17g", *(double *)tab[i].dst);
            same = *(double *)tab[i].dst == x;
            if (!seen) *(double *)tab[i].dst = x;
            break;
        }
        default:
        {
            const char *cur = *(const char **)tab[i].dst;
            snprintf(given, sizeof given, "%.60s", cur ? cur : "");
            same = cur && strcmp(cur, v) == 0;
            if (!seen) *(const char **)tab[i].dst = v; /* the checkpoint stays open */
            break;
        }
        }
        if (errno || (end && (end == v || *end)))
            die("--resume: checkpoint '%s': metadata '%s' is '%.40s', not a number", path, tab[i].key, v);
        if (seen && !same && !tab[i].layout)
            die("--%s %s contradicts checkpoint '%s' (%s %s)", tab[i].flag, given, path, tab[i].key, v);
    }
    const char *st = pipit_checkpoint_meta(g_resume_ck, "step");
    long long step = st ? strtoll(st, NULL, 10) : -1;
    if (step < 0) die("--resume: checkpoint '%s' lacks its step", path);
    if (o->steps < step)
        die("--steps %d: checkpoint '%s' is at step %lld already (--steps is the total with --resume)", o->steps, path,
            step);
    if (!o->save) o->save = path;
    *step_out = step;
}

/* ------------------------------------------------------------ validation */

/* Dies unless `want` sequences (sequential order, from 0) are distinct
 * windows of d: evaluation never wraps around a short file. */
static void check_distinct(const pipit_data *d, const char *what, const char *spec, int64_t want, const char *ask,
                           int64_t per_batch, const char *batches_flag, int T) {
    int64_t W = pipit_data_windows(d);
    if (want <= W) return;
    if (W / per_batch >= 1)
        die("%s = %lld sequences, but %s '%s' has only %lld distinct sequences of T+1 = %d tokens (evaluation does "
            "not wrap around): pass %s %lld or fewer",
            ask, (long long)want, what, spec, (long long)W, T + 1, batches_flag, (long long)(W / per_batch));
    die("%s = %lld sequences, but %s '%s' has only %lld distinct sequences of T+1 = %d tokens, fewer than one "
        "batch of %lld (evaluation does not wrap around)",
        ask, (long long)want, what, spec, (long long)W, T + 1, (long long)per_batch);
}

/* --val-data / --val-split: opens (or splits off) the validation stream and
 * fixes the number of validation batches; 0 when there is no validation. */
static int open_validation(session *s, opts *o, const flag_cmd *c, int G) {
    int has_split = flags_seen(c, "val-split");
    if (o->val_data && has_split) die("--val-data and --val-split are alternatives: pass one");
    if (!o->val_data && !has_split) {
        if (flags_seen(c, "eval-every") || flags_seen(c, "eval-batches"))
            die("--%s needs validation data: pass --val-data FILE or --val-split F",
                flags_seen(c, "eval-every") ? "eval-every" : "eval-batches");
        return 0;
    }
    if (flags_seen(c, "eval-every")) check_positive("eval-every", o->eval_every);
    if (flags_seen(c, "eval-batches")) check_positive("eval-batches", o->eval_batches);
    const char *name = o->val_data ? o->val_data : o->data;
    if (o->val_data) {
        check_status(pipit_data_open_spec(o->val_data, data_format(o->data_format), o->ctx, PIPIT_DATA_SEQUENTIAL, 0,
                                          &s->val),
                     "--val-data");
        if (pipit_data_max_token(s->val) >= o->vocab)
            die("--val-data '%s' holds token %d but the vocabulary has %d entries (raise --vocab)", o->val_data,
                pipit_data_max_token(s->val), o->vocab);
    } else {
        if (!(o->val_split > 0 && o->val_split < 1)) die("--val-split must be between 0 and 1 (got %g)", o->val_split);
        int64_t W = pipit_data_windows(s->data);
        int64_t nval = (int64_t)((double)W * o->val_split);
        if ((double)nval < (double)W * o->val_split) nval++; /* ceil */
        if (nval >= W)
            die("--val-split %g of --data '%s' leaves no training windows (it has %lld of T+1 = %d tokens)",
                o->val_split, o->data, (long long)W, o->ctx + 1);
        check_status(pipit_data_split(s->data, nval, &s->val), "--val-split");
    }
    int64_t per = (int64_t)G * o->micro_batch, W = pipit_data_windows(s->val);
    int K = o->eval_batches;
    if (!flags_seen(c, "eval-batches")) K = (int)(W / per < 4 ? W / per : 4);
    char ask[96];
    snprintf(ask, sizeof ask, "--eval-batches %d x %d microbatches x --micro-batch %d", K ? K : 1, G, o->micro_batch);
    check_distinct(s->val, o->val_data ? "--val-data" : "--val-split of --data", name, (int64_t)(K ? K : 1) * per,
                   ask, per, "--eval-batches", o->ctx);
    return K;
}

/* The forward-only program validation runs: the same graph, schedule and
 * mesh as training (a forward-only compile leaves the graph alone and
 * needs no gradient memory). */
static void open_validation_program(session *s) {
    pipit_options po = s->po;
    po.forward_only = 1;
    check_status(pipit_compile(s->g, s->loss, &po, &s->vp), "compile (validation)");
}

/* The training program's params, by name, into the validation program
 * (collective in an MPI job, as get_param is). */
static void copy_params_to_validation(session *s) {
    for (int i = 0; i < pipit_program_num_params(s->p); i++) {
        const char *name = pipit_program_param_name(s->p, i);
        int64_t n = 0;
        check_status(pipit_program_param_numel(s->p, name, &n), "validation");
        float *buf = malloc(sizeof(float) * (size_t)n);
        if (!buf) die("out of memory");
        check_status(pipit_program_get_param(s->p, name, buf, sizeof(float) * (size_t)n), "validation");
        check_status(pipit_program_set_param(s->vp, name, buf, sizeof(float) * (size_t)n), "validation");
        free(buf);
    }
}

/* Mean loss over validation batches 0 .. K-1 (sequential windows, each a
 * step's G microbatches), with the forward-only program (the same losses,
 * bit for bit, as pipit_step(update = 0) on the training program). */
static double run_validation(session *s, const opts *o, int K, int G, mb_buf *bufs, pipit_feed *feeds, int64_t step,
                             int speaker) {
    double sum = 0;
    int B = o->micro_batch;
    copy_params_to_validation(s);
    for (int k = 0; k < K; k++) {
        for (int m = 0; m < G; m++)
            fill_microbatch(s->val, &s->cfg, ((int64_t)k * G + m) * B, &bufs[m], feeds + 3 * m);
        pipit_metrics met;
        if (pipit_step(s->vp, feeds, 3, 0, &met)) die("validation at step %lld: %s", (long long)step, pipit_program_errmsg(s->vp));
        sum += met.loss;
    }
    long long tokens = (long long)K * G * B * o->ctx;
    if (!speaker) return sum / K;
    if (o->json) printf("{\"step\":%lld,\"val_loss\":%.9g,\"val_tokens\":%lld}\n", (long long)step, sum / K, tokens);
    else printf("step %4lld  val loss %.6f over %lld tokens\n", (long long)step, sum / K, tokens);
    fflush(stdout);
    return sum / K;
}

/* --profile-out FILE: what `pipit sim --calibrate` reads: the model and
 * mesh, the profiled steps and their mean wall time, and the library's
 * per-rank profile (pipit_program_write_profile_json). */
static void write_profile(const opts *o, const session *s, int M, int64_t steps, double seconds) {
    FILE *f = fopen(o->profile_out, "w");
    if (!f) die("--profile-out: cannot write '%s': %s", o->profile_out, strerror(errno));
    const pipit_gpt2_config *c = &s->cfg;
    int kind = s->sched ? pipit_schedule_get_kind(s->sched) : PIPIT_SCHED_1F1B;
    const char *sched = kind >= 0 ? pipit_schedule_kind_name((pipit_schedule_kind)kind) : "custom";
    int virt = s->sched ? pipit_schedule_virtual(s->sched) : 1;
    fprintf(f,
            "{\"model\":{\"layers\":%d,\"dim\":%d,\"heads\":%d,\"ctx\":%d,\"vocab\":%d,\"micro_batch\":%d,"
            "\"microbatches\":%d,\"pp\":%d,\"dp\":%d,\"threads\":%d,\"schedule\":\"%s\",\"virtual\":%d},\"steps\":%lld,"
            "\"step_s\":%.9g,\"profile\":",
            c->layers, c->dim, c->heads, c->ctx, c->vocab, c->batch, M, o->pp, o->dp, o->threads,
            sched, virt, (long long)steps, steps ? seconds / (double)steps : 0.0);
    pipit_status st = pipit_program_write_profile_json(f, s->p);
    fprintf(f, "}\n");
    if (fclose(f) || st) die("--profile-out: writing '%s' failed%s%s", o->profile_out, st ? ": " : "", st ? pipit_errmsg() : "");
}

static int cmd_train_or_plan(int argc, char **argv, int plan) {
    opts o;
    default_opts(&o);
    flag fl[64];
    flag_cmd c = {plan ? "plan" : "train", plan ? PLAN_USAGE : TRAIN_USAGE, plan ? PLAN_ABOUT : NULL, fl,
                  train_plan_flags(&o, plan ? CMD_PLAN : CMD_TRAIN, fl, NFLAGS(fl))};
    /* defaults < preset < config < flags */
    const char *config = prescan(argc, argv, "config"), *model = prescan(argc, argv, "model");
    if (!model && config) model = cli_config_string(config, "model");
    apply_preset(&o, model ? model : "tiny");
    if (config) cli_config_apply(&c, config, (const char *const[]){"model", NULL});
    if (plan) o.steps = 0;
    flags_parse(&c, argc, argv);
    int sized = flags_seen(&c, "layers") || flags_seen(&c, "heads") || flags_seen(&c, "dim");
    int64_t resume_step = 0;
    if (o.resume) apply_resume(&o, &c, &resume_step);
    else if (!o.print_config) flags_require(&c, (const char *const[]){"data", NULL});
    /* a model sized on the command line (no preset, no config) names its run length, as before presets */
    if (!plan && !o.print_config && !o.resume && sized && !model && !config && !o.init)
        flags_require(&c, (const char *const[]){"steps", NULL});
    int legacy = o.weights_only || o.save_opt; /* --save writes the params only */
    if (o.save_every < 0) die("--save-every must be >= 0 (got %d)", o.save_every);
    if (o.keep < 0) die("--keep must be >= 0 (got %d)", o.keep);
    if (!plan && o.save_every && !o.save) die("--save-every needs --save FILE (where to save)");
    if (!plan && o.save_every && legacy)
        die("--save-every writes training checkpoints: it does not combine with --%s",
            o.weights_only ? "save-weights-only" : "save-optimizer");
    if (plan) o.steps = 0;
    if (o.steps < 0) die("--steps must be >= 0 (got %d)", o.steps);
    if (o.log_every < 1) die("--log-every must be >= 1 (got %d)", o.log_every);
    if (!(o.peak_flops >= 0 && o.peak_flops < 1e300)) die("--peak-flops must be a positive number of FLOP/s (got %g)", o.peak_flops);
    if (o.print_config) {
        pipit_gpt2_config mc = model_config(&o, 1);
        pipit_lr_schedule ls = make_lr_schedule(&o);
        static const char *const kinds[] = {"constant", "cosine", "linear"};
        printf("{\"model\":\"%s\",\"vocab\":%d,\"ctx\":%d,\"max_ctx\":%d,\"layers\":%d,\"heads\":%d,\"dim\":%d,"
               "\"micro_batch\":%d,\"microbatches\":%d,\"steps\":%d,\"lr\":%.9g,\"lr_schedule\":\"%s\","
               "\"warmup\":%lld,\"decay_steps\":%lld,\"min_lr\":%.9g,\"optimizer\":\"%s\",\"pp\":%d,\"dp\":%d,"
               "\"log_every\":%d,\"params\":%lld}\n",
               model ? model : "tiny", mc.vocab, mc.ctx, mc.max_ctx, mc.layers, mc.heads, mc.dim, mc.batch,
               o.microbatches, o.steps, o.lr, kinds[ls.kind], (long long)ls.warmup, (long long)ls.decay_steps,
               ls.min_lr, o.optimizer, o.pp, o.dp, o.log_every, (long long)pipit_gpt2_num_params(&mc));
        return 0;
    }
    session s = {0};
    if (o.schedule || o.pp > 1 || o.virt > 1) {
        const char *def = o.virt > 1 ? "interleaved-1f1b" : "1f1b";
        check_status(pipit_cli_schedule_open("schedule", o.schedule ? o.schedule : def, o.pp, o.virt, o.microbatches,
                                             &s.sched),
                     "--schedule");
    }
    open_model(&s, &o, &c, o.microbatches);
    if (plan && pipit_process_rank() != 0) {
        close_session(&s);
        return 0;
    }
    if (plan) {
        if (o.json) check_status(pipit_program_write_plan_json(stdout, s.p), "plan");
        else check_status(pipit_program_print_plan(stdout, s.p, o.verbose), "plan");
        close_session(&s);
        return 0;
    }
    /* a step's global batch: G = M * D microbatches of B sequences, replica d
     * taking microbatches d*M .. d*M+M-1 */
    int B = o.micro_batch, T = o.ctx, M = o.microbatches;
    /* M <= 2^24 and D <= 64 (checked at compile): G fits an int; B * T * G tokens per step must fit int64 */
    int G = M * o.dp;
    if ((int64_t)B * T > INT64_MAX / G / 4) die("--micro-batch %d x --ctx %d x %d microbatches is too large", B, T, G);
    int speaker = pipit_process_rank() == 0; /* one process prints */
    int val_batches = open_validation(&s, &o, &c, G);
    if (val_batches) open_validation_program(&s);
    pipit_feed *feeds;
    mb_buf *bufs = mb_bufs_new(G, B, T, &feeds);
    int profiling = o.profile || o.profile_out;
    if (profiling) check_status(pipit_program_set_profile(s.p, 1), "--profile");
    cli_progress prog = {0};
    prog.ranks = s.sched ? pipit_schedule_ranks(s.sched) : 1;
    int on_gpu = o.device && strcmp(o.device, "cuda") == 0;
    if (!o.json && speaker) { /* MFU against the whole run's peak: one rank's x P x D */
        /* on a GPU only a stated peak: the CPU's sgemm says nothing about it */
        double rank_peak = o.peak_flops > 0 ? o.peak_flops : on_gpu ? 0 : cli_sgemm_flops() * o.threads;
        prog.peak = rank_peak * prog.ranks * o.dp;
    }
    if (!o.json && speaker) {
        printf("pipit: GPT-2 L=%d H=%d C=%d V=%d T=%d, %lld params; B=%d M=%d; %d stage(s) on %d rank(s)%s%s; "
               "%d thread(s) per rank",
               s.cfg.layers, s.cfg.heads, s.cfg.dim, s.cfg.vocab, T, (long long)pipit_gpt2_num_params(&s.cfg), B, M,
               s.stages, s.sched ? pipit_schedule_ranks(s.sched) : 1, s.sched ? ", schedule " : "",
               s.sched ? (pipit_schedule_get_kind(s.sched) >= 0
                              ? pipit_schedule_kind_name((pipit_schedule_kind)pipit_schedule_get_kind(s.sched))
                              : o.schedule)
                       : "",
               o.threads);
        if (o.dp > 1) printf("; x %d data-parallel replicas%s", o.dp, o.zero1 ? " (ZeRO-1)" : "");
        if (pipit_process_count() > 1) printf("; %d MPI processes", pipit_process_count());
        if (on_gpu) printf("; device cuda (%d GPU%s)%s", pipit_cuda_device_count(),
                           pipit_cuda_device_count() == 1 ? "" : "s", o.tf32 ? ", TF32 GEMMs" : ", fp32 GEMMs");
        if (o.peak_flops > 0)
            printf("; MFU vs stated peak %.1f GFLOP/s per rank", prog.peak / (prog.ranks * o.dp) / 1e9);
        else if (on_gpu)
            printf("; MFU: pass --peak-flops (the GPU's dense peak for this precision)");
        else
            printf("; MFU vs measured sgemm peak %.1f GFLOP/s per rank (1-thread sgemm x %d thread(s))",
                   prog.peak / (prog.ranks * o.dp) / 1e9, o.threads);
        if (prog.ranks * o.dp > 1 && prog.peak > 0) printf(" x %d ranks", prog.ranks * o.dp);
        printf("\n");
    }
    double flops = pipit_gpt2_flops_per_token(&s.cfg);
    int64_t first_step = 0, last_step, data_pos; /* a resumed run continues the data stream where it stopped */
    if (o.resume) {
        check_status(pipit_checkpoint_load_train(s.p, s.ckpt, &first_step), "--resume");
        const char *dp = pipit_checkpoint_meta(s.ckpt, "data_pos");
        char *end = NULL;
        data_pos = dp ? strtoll(dp, &end, 10) : -1;
        if (!dp || *end || data_pos < 0) die("--resume: checkpoint '%s' lacks its data position", o.resume);
        last_step = o.steps; /* the total */
        if (last_step - first_step > (INT64_MAX - data_pos) / ((int64_t)G * B))
            die("--resume: data position %lld is too large to continue", (long long)data_pos);
    } else {
        if (o.init_opt) {
            if (!o.init) die("--init-optimizer needs --init (the weights it belongs to)");
            check_status(pipit_optimizer_load(s.p, o.init_opt, &first_step), "--init-optimizer");
        }
        /* 64-bit step counter; the data offset (step * G + m) * B must fit too */
        if (first_step > INT64_MAX / ((int64_t)G * B) - o.steps)
            die("--init-optimizer: step %lld is too large to continue %d more steps of %d x %d sequences",
                (long long)first_step, o.steps, G, B);
        last_step = first_step + o.steps;
        data_pos = first_step * G * B;
    }
    /* the save path is checked now, not after the last step; a killed
     * run's temp files there are removed */
    if (o.save) {
        if (pipit_process_rank() == 0) remove_stale_temps(o.save);
        check_writable("save", o.save);
    }
    if (o.save_opt) check_writable("save-optimizer", o.save_opt);
    if (o.profile_out && speaker) check_writable("profile-out", o.profile_out);
    char *default_save = NULL; /* where an interrupted run without --save saves */
    if (!o.save) {
        default_save = malloc(strlen(o.data) + 32);
        if (!default_save) die("out of memory");
        sprintf(default_save, "%s.pipit.safetensors", o.data);
    }
    const char *int_path = o.save ? o.save : default_save;
    if (pipit_process_count() == 1) install_signals();
    prog.first = first_step;
    prog.last = last_step;
    prog.t_start = cli_now();
    double profiled_s = 0; /* wall time of the profiled steps (all but the first) */
    int64_t profiled_steps = 0;
    for (int64_t step = first_step;; step++) {
        run_pos at = {step, last_step, data_pos + (step - first_step) * G * B};
        if (g_signal) { /* between steps: the checkpoint holds whole steps */
            int sig = g_signal;
            if (!o.save && speaker) fprintf(stderr, "pipit: no --save given: saving to %s\n", int_path);
            save_train(&o, s.p, &s.cfg, int_path, at);
            fprintf(stderr, "pipit: interrupted at step %lld; saved %s; resume with: pipit train --resume %s\n",
                    (long long)step, int_path, int_path);
            exit(128 + sig);
        }
        if (step > first_step && o.save_every && step % o.save_every == 0 && step < last_step)
            save_train(&o, s.p, &s.cfg, o.save, at);
        if (step >= last_step) break;
        for (int m = 0; m < G; m++)
            fill_microbatch(s.data, &s.cfg, at.data_pos + (int64_t)m * B, &bufs[m], feeds + 3 * m);
        pipit_metrics met;
        pipit_status st = pipit_step(s.p, feeds, 3, 1, &met);
        if (st) die("step %lld: %s", (long long)step, pipit_program_errmsg(s.p));
        int last = step == last_step - 1;
        cli_progress_step(&prog, &met, (double)B * T * G);
        if (speaker && (step % o.log_every == 0 || last)) print_step(&o, step, &met, (double)B * T * G, flops, &prog);
        if (val_batches && ((o.eval_every && (step + 1) % o.eval_every == 0) || step + 1 == last_step))
            cli_progress_val(&prog, step, run_validation(&s, &o, val_batches, G, bufs, feeds, step, speaker));
        if (step > first_step || last_step - first_step == 1) profiled_s += met.ms / 1e3, profiled_steps++;
        if (profiling && step == first_step && last_step - first_step > 1) /* the first step pays page faults: leave it out */
            check_status(pipit_program_set_profile(s.p, 1), "--profile"); /* resets the counters */
    }
    run_pos end = {last_step, last_step, data_pos + (last_step - first_step) * G * B};
    if (o.save && legacy) { /* collective under MPI: process 0 writes */
        save_checkpoint(s.p, &s.cfg, o.save);
        if (!o.json) say_saved(&o, o.save, last_step);
    } else if (o.save) save_train(&o, s.p, &s.cfg, o.save, end);
    if (o.save_opt) check_status(pipit_optimizer_save(s.p, o.save_opt, last_step), "--save-optimizer");
    free(default_save);
    if (o.trace && speaker) check_status(pipit_program_write_trace(s.p, o.trace), "--trace");
    if (o.profile && speaker) check_status(pipit_program_print_profile(stderr, s.p), "--profile");
    if (o.profile_out && speaker) write_profile(&o, &s, G / o.dp, profiled_steps, profiled_s);
    if (speaker && (!o.json || o.json_summary)) cli_progress_summary(stdout, &prog, o.json, o.save);
    mb_bufs_free(bufs, G, feeds);
    close_session(&s);
    return 0;
}

/* ------------------------------------------------------------------- eval */

static int cmd_eval(int argc, char **argv) {
    opts o;
    default_opts(&o);
    o.data_order = "sequential";
    flag fl[] = {
        {"init", FL_STR, &o.init, "safetensors checkpoint to evaluate", 0},
        {"data", FL_STR, &o.data, "text file (bytes) or uint16 token shard; several: 'a.bin,b.bin' or a glob", 0},
        {"data-format", FL_STR, &o.data_format, "auto (default)|text|shard|u16 (headerless uint16)", 0},
        {"ctx", FL_INT, &o.ctx, "sequence length T", 0},
        {"micro-batch", FL_INT, &o.micro_batch, "sequences per batch B", 0},
        {"batches", FL_INT, &o.batches, "batches K: evaluates sequences 0 .. K*B-1", 0},
        {"heads", FL_INT, &o.heads, "attention heads (default: from the checkpoint's metadata)", 0},
        {"threads", FL_INT, &o.threads, "compute threads (default 1; cpu only)", 0},
        {"device", FL_STR, &o.device, "cpu (default) or cuda", 0},
        {"tf32", FL_BOOL, &o.tf32, "with --device cuda: GEMMs on TF32 tensor cores", 0},
        {"json", FL_BOOL, &o.json, "print {\"loss\":x,\"tokens\":n}", 0},
    };
    flag_cmd c = {"eval", "--init FILE --data FILE --ctx T --micro-batch B --batches K [--json]", NULL, fl,
                  NFLAGS(fl)};
    flags_parse(&c, argc, argv);
    flags_require(&c, (const char *const[]){"init", "data", "ctx", "micro-batch", "batches", NULL});
    check_positive("batches", o.batches);
    session s = {.forward_only = 1};
    open_model(&s, &o, &c, o.batches);
    int B = o.micro_batch, T = o.ctx, K = o.batches;
    char ask[64];
    snprintf(ask, sizeof ask, "--batches %d x --micro-batch %d", K, B);
    check_distinct(s.data, "--data", o.data, (int64_t)K * B, ask, B, "--batches", T);
    int32_t *buf = malloc(sizeof(int32_t) * 3 * (size_t)B * T * K);
    pipit_feed *feeds = calloc((size_t)K * 3, sizeof *feeds);
    if (!buf || !feeds) die("out of memory");
    for (int k = 0; k < K; k++) {
        mb_buf b = {buf + (size_t)3 * k * B * T, buf + (size_t)(3 * k + 1) * B * T, buf + (size_t)(3 * k + 2) * B * T};
        fill_microbatch(s.data, &s.cfg, (int64_t)k * B, &b, feeds + 3 * k);
    }
    pipit_metrics met;
    if (pipit_step(s.p, feeds, 3, 0, &met)) die("eval: %s", pipit_program_errmsg(s.p));
    long long tokens = (long long)B * T * K;
    if (o.json) printf("{\"loss\":%.9g,\"tokens\":%lld}\n", met.loss, tokens);
    else printf("eval loss %.6f over %lld tokens\n", met.loss, tokens);
    free(buf);
    free(feeds);
    close_session(&s);
    return 0;
}

/* ------------------------------------------------------------------- main */

static void usage(FILE *f) {
    fprintf(f,
            "usage: pipit <command> [flags]\n\n"
            "commands:\n"
            "  train     train GPT-2 on a text file or token shard\n"
            "  eval      mean loss of a checkpoint on sequential windows of a file (forward only)\n"
            "  sample    generate tokens from a checkpoint (byte-level models print bytes)\n"
            "  schedule  print a pipeline schedule's grid, bubble and peak activations\n"
            "  plan      print the per-rank programs and planned memory (train's model flags; --json: as JSON);\n"
            "            plan --search: rank schedule x V x microbatch size (x tp x dp) by simulated step time\n"
            "  sim       predict step time, TFLOP/s, MFU, bubble and memory of a model on a mesh of GPUs (cost model)\n"
            "  version   print the version and whether MPI is built in (also --version)\n\n"
            "`pipit <command> --help` lists each command's flags.\n");
}

int pipit_cli_schedule(int argc, char **argv);
int pipit_cli_sample(int argc, char **argv);
int pipit_cli_sim(int argc, char **argv);
int pipit_cli_plan_search(int argc, char **argv);

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    int rc = -1;
    if (strcmp(cmd, "plan") == 0)
        for (int i = 2; i < argc; i++)
            if (strcmp(argv[i], "--search") == 0) return pipit_cli_plan_search(argc - 2, argv + 2);
    if (strcmp(cmd, "train") == 0 || strcmp(cmd, "plan") == 0 || strcmp(cmd, "eval") == 0) {
        /* under mpirun each process runs one world rank */
        if (pipit_init(&argc, &argv)) die("%s", pipit_errmsg());
        if (strcmp(cmd, "eval") == 0) rc = cmd_eval(argc - 2, argv + 2);
        else rc = cmd_train_or_plan(argc - 2, argv + 2, strcmp(cmd, "plan") == 0);
        pipit_finalize();
        return rc;
    }
    if (strcmp(cmd, "schedule") == 0) return pipit_cli_schedule(argc - 2, argv + 2);
    if (strcmp(cmd, "sample") == 0) return pipit_cli_sample(argc - 2, argv + 2);
    if (strcmp(cmd, "sim") == 0) return pipit_cli_sim(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("pipit %s (%s, %s)\n", pipit_version(), pipit_have_mpi() ? "MPI built in" : "no MPI",
               pipit_have_cuda() ? "CUDA built in" : "no CUDA");
        return 0;
    }
    static const char *const cmds[] = {"train", "eval", "sample", "schedule", "plan", "sim", "version", "help"};
    fprintf(stderr, "pipit: unknown command '%s'%s\n", cmd, cli_did_you_mean(cmd, cmds, NFLAGS(cmds), ""));
    usage(stderr);
    return 2;
}
