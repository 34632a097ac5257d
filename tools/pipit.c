/*
 * pipit.c — the command line: `pipit train`, `pipit eval`, `pipit schedule`
 * and `pipit plan`. Parses flags from one table per command (so --help and
 * the errors for unknown flags and bad values come for free), builds GPT-2,
 * and drives the library. This is the only place that calls exit().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"
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
    int ctx, max_ctx, vocab, layers, heads, dim, micro_batch, microbatches, steps, threads, json;
    int pp, virt, remat, batches, profile, verbose, dp, zero1;
    double lr, wd, beta1, beta2, eps, clip;
    uint64_t seed;
    const char *data_format, *val_data; /* --data-format, --val-data; see docs/architecture.md §8 */
    double val_split;
    int eval_every, eval_batches;
} opts;

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

/* ------------------------------------------------------------------ train */

static const char *TRAIN_USAGE =
    "--data FILE --ctx T --layers L --heads H --dim C --micro-batch B --microbatches M --steps N --lr X [...]";
static const char *PLAN_USAGE =
    "--data FILE --ctx T --layers L --heads H --dim C --micro-batch B [--pp P --schedule S ...] [--json]";
static const char *PLAN_ABOUT =
    "Compiles the model as `pipit train` would (same model and pipeline flags) and prints, per rank,\n"
    "its stages, planned peak activation memory, the ops it runs and its instruction list; nothing runs.";

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
        {3 | IGN, {"lr", FL_DBL, &o->lr, "learning rate (default 3e-4)", 0}},
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
        {3 | IGN, {"save", FL_STR, &o->save, "write parameters to a safetensors checkpoint at the end", 0}},
        {3 | IGN, {"save-optimizer", FL_STR, &o->save_opt, "write the optimizer state and step at the end (resume with --init-optimizer)", 0}},
        {3 | IGN, {"init-optimizer", FL_STR, &o->init_opt, "load optimizer state and continue from its step (with --init)", 0}},
        {3, {"threads", FL_INT, &o->threads, "compute threads per rank (default 1)", 0}},
        {3, {"pp", FL_INT, &o->pp, "pipeline ranks P (default 1)", 0}},
        {3, {"dp", FL_INT, &o->dp, "data-parallel replicas D of the pipeline (default 1): P x D ranks, threads or MPI processes", 0}},
        {3, {"zero1", FL_BOOL, &o->zero1, "with --dp: shard the optimizer state over the replicas (ZeRO-1)", 0}},
        {3, {"virtual", FL_INT, &o->virt, "stages per rank V (default: the schedule's own; S = P*V)", 0}},
        {3, {"schedule", FL_STR, &o->schedule, "gpipe|1f1b|eager-1f1b|interleaved-1f1b|interleaved-gpipe|zb-h1|dualpipev|FILE", 0}},
        {3, {"remat", FL_BOOL, &o->remat, "recompute each stage's forward inside its backward", 0}},
        {1, {"json", FL_BOOL, &o->json, "one JSON object per line on stdout", 0}},
        {2, {"json", FL_BOOL, &o->json, "print the plan as one JSON object (ranks, memory, tasks, program, params)", 0}},
        {2, {"verbose", FL_BOOL, &o->verbose, "list every instruction (RUN, ACC, GRAD, UPDATE too)", 0}},
        {3 | IGN, {"trace", FL_STR, &o->trace, "write the last step as a Chrome/Perfetto trace (JSON), or an SVG timeline (FILE.svg)", 0}},
        {3 | IGN, {"profile", FL_BOOL, &o->profile, "print time per op and instruction kind, steps after the first (stderr)", 0}},
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
    o->virt = 0; /* 0: the schedule's own (1, or 2 for interleaved schedules and DualPipeV) */
    o->steps = -1;
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
} session;

static void open_model(session *s, opts *o, const flag_cmd *c, int M) {
    const char *cmd = c->name;
    if (o->init) {
        check_status(pipit_checkpoint_open(o->init, &s->ckpt), "--init");
        config_from_checkpoint(s->ckpt, o, c);
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
    s->cfg = model_config(o, stages);
    check_status(pipit_gpt2_check(&s->cfg), cmd);
    check_status(pipit_data_open_spec(o->data, data_format(o->data_format), o->ctx, data_order(o->data_order),
                                      o->seed, &s->data),
                 "--data");
    if (pipit_data_max_token(s->data) >= o->vocab)
        die("--data '%s' holds token %d but the vocabulary has %d entries (raise --vocab)", o->data,
            pipit_data_max_token(s->data), o->vocab);
    s->g = pipit_graph_new();
    if (!s->g) die("out of memory");
    pipit_val loss = pipit_gpt2_build(s->g, &s->cfg);
    check_status(pipit_graph_status(s->g), "model");
    pipit_options po = {.schedule = s->sched, .microbatches = M, .threads = o->threads,
                        .remat = o->remat, .optimizer = make_optimizer(o), .clip_norm = o->clip,
                        .data_parallel = o->dp, .zero1 = o->zero1};
    if (o->clip < 0) die("--clip must be >= 0");
    check_status(pipit_compile(s->g, loss, &po, &s->p), "compile");
    if (s->ckpt) check_status(pipit_checkpoint_load_into(s->p, s->ckpt), "--init");
    else check_status(pipit_gpt2_init(s->p, &s->cfg, o->seed), "init");
}

static void close_session(session *s) {
    pipit_program_free(s->p);
    pipit_graph_free(s->g);
    pipit_schedule_free(s->sched);
    pipit_data_free(s->data);
    pipit_data_free(s->val);
    pipit_checkpoint_free(s->ckpt);
}

static void print_step(const opts *o, int64_t step, const pipit_metrics *m, double tokens, double flops) {
    double tps = tokens / (m->ms / 1e3);
    if (o->json)
        printf("{\"step\":%lld,\"loss\":%.9g,\"ms\":%.3f,\"tokens_per_s\":%.1f,\"grad_norm\":%.9g,"
               "\"gflops\":%.3f,\"peak_bytes\":%zu,\"bubble\":%.4f}\n",
               (long long)step, m->loss, m->ms, tps, m->grad_norm, flops * tokens / (m->ms / 1e3) / 1e9, m->peak_bytes,
               m->bubble);
    else
        printf("step %4lld  loss %.6f  grad norm %.4f  %8.1f ms  %9.0f tok/s  %.2f GFLOP/s\n", (long long)step, m->loss,
               m->grad_norm, m->ms, tps, flops * tokens / (m->ms / 1e3) / 1e9);
    fflush(stdout);
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

/* Mean loss over validation batches 0 .. K-1 (sequential windows, each a
 * step's G microbatches), without updating: pipit_step(update = 0) runs the
 * backward too (a forward-only schedule does not exist yet). */
static void run_validation(session *s, const opts *o, int K, int G, mb_buf *bufs, pipit_feed *feeds, int64_t step,
                           int speaker) {
    double sum = 0;
    int B = o->micro_batch;
    for (int k = 0; k < K; k++) {
        for (int m = 0; m < G; m++)
            fill_microbatch(s->val, &s->cfg, ((int64_t)k * G + m) * B, &bufs[m], feeds + 3 * m);
        pipit_metrics met;
        if (pipit_step(s->p, feeds, 3, 0, &met)) die("validation at step %lld: %s", (long long)step, pipit_program_errmsg(s->p));
        sum += met.loss;
    }
    long long tokens = (long long)K * G * B * o->ctx;
    if (!speaker) return;
    if (o->json) printf("{\"step\":%lld,\"val_loss\":%.9g,\"val_tokens\":%lld}\n", (long long)step, sum / K, tokens);
    else printf("step %4lld  val loss %.6f over %lld tokens\n", (long long)step, sum / K, tokens);
    fflush(stdout);
}

static int cmd_train_or_plan(int argc, char **argv, int plan) {
    opts o;
    default_opts(&o);
    flag fl[48];
    flag_cmd c = {plan ? "plan" : "train", plan ? PLAN_USAGE : TRAIN_USAGE, plan ? PLAN_ABOUT : NULL, fl,
                  train_plan_flags(&o, plan ? CMD_PLAN : CMD_TRAIN, fl, NFLAGS(fl))};
    if (plan) o.steps = 0;
    flags_parse(&c, argc, argv);
    static const char *const need_init[] = {"data", "ctx", "micro-batch", NULL};
    static const char *const need_new[] = {"data", "ctx", "layers", "heads", "dim", "micro-batch", NULL};
    flags_require(&c, o.init ? need_init : need_new);
    if (!plan) flags_require(&c, (const char *const[]){"steps", NULL});
    if (plan) o.steps = 0;
    if (o.steps < 0) die("--steps must be >= 0 (got %d)", o.steps);
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
    mb_buf *bufs = calloc((size_t)G, sizeof *bufs);
    pipit_feed *feeds = calloc((size_t)G * 3, sizeof *feeds);
    if (!bufs || !feeds) die("out of memory");
    for (int m = 0; m < G; m++) {
        bufs[m].tok = malloc(sizeof(int32_t) * (size_t)B * T);
        bufs[m].tgt = malloc(sizeof(int32_t) * (size_t)B * T);
        bufs[m].pos = malloc(sizeof(int32_t) * (size_t)B * T);
        if (!bufs[m].tok || !bufs[m].tgt || !bufs[m].pos) die("out of memory");
    }
    if (o.profile) check_status(pipit_program_set_profile(s.p, 1), "--profile");
    if (!o.json && speaker) {
        printf("pipit: GPT-2 L=%d H=%d C=%d V=%d T=%d, %lld params; B=%d M=%d; %d stage(s) on %d rank(s)%s%s; "
               "%d thread(s) per rank",
               s.cfg.layers, s.cfg.heads, s.cfg.dim, s.cfg.vocab, T, (long long)pipit_gpt2_num_params(&s.cfg), B, M,
               s.cfg.stages, s.sched ? pipit_schedule_ranks(s.sched) : 1, s.sched ? ", schedule " : "",
               s.sched ? (pipit_schedule_get_kind(s.sched) >= 0
                              ? pipit_schedule_kind_name((pipit_schedule_kind)pipit_schedule_get_kind(s.sched))
                              : o.schedule)
                       : "",
               o.threads);
        if (o.dp > 1) printf("; x %d data-parallel replicas%s", o.dp, o.zero1 ? " (ZeRO-1)" : "");
        if (pipit_process_count() > 1) printf("; %d MPI processes", pipit_process_count());
        printf("\n");
    }
    double flops = pipit_gpt2_flops_per_token(&s.cfg);
    int64_t first_step = 0; /* a resumed run continues the data stream where it stopped */
    if (o.init_opt) {
        if (!o.init) die("--init-optimizer needs --init (the weights it belongs to)");
        check_status(pipit_optimizer_load(s.p, o.init_opt, &first_step), "--init-optimizer");
    }
    /* 64-bit step counter; the data offset (step * G + m) * B must fit too */
    if (first_step > INT64_MAX / ((int64_t)G * B) - o.steps)
        die("--init-optimizer: step %lld is too large to continue %d more steps of %d x %d sequences",
            (long long)first_step, o.steps, G, B);
    for (int64_t step = first_step; step < first_step + o.steps; step++) {
        for (int m = 0; m < G; m++)
            fill_microbatch(s.data, &s.cfg, ((int64_t)step * G + m) * B, &bufs[m], feeds + 3 * m);
        pipit_metrics met;
        pipit_status st = pipit_step(s.p, feeds, 3, 1, &met);
        if (st) die("step %lld: %s", (long long)step, pipit_program_errmsg(s.p));
        if (speaker) print_step(&o, step, &met, (double)B * T * G, flops);
        if (val_batches && ((o.eval_every && (step + 1) % o.eval_every == 0) || step + 1 == first_step + o.steps))
            run_validation(&s, &o, val_batches, G, bufs, feeds, step, speaker);
        if (o.profile && step == first_step && o.steps > 1) /* the first step pays page faults: leave it out */
            check_status(pipit_program_set_profile(s.p, 1), "--profile"); /* resets the counters */
    }
    if (o.save) save_checkpoint(s.p, &s.cfg, o.save); /* collective under MPI: process 0 writes */
    if (o.save_opt) check_status(pipit_optimizer_save(s.p, o.save_opt, first_step + o.steps), "--save-optimizer");
    if (o.trace && speaker) check_status(pipit_program_write_trace(s.p, o.trace), "--trace");
    if (o.profile && speaker) check_status(pipit_program_print_profile(stderr, s.p), "--profile");
    for (int m = 0; m < G; m++) {
        free(bufs[m].tok);
        free(bufs[m].tgt);
        free(bufs[m].pos);
    }
    free(bufs);
    free(feeds);
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
        {"threads", FL_INT, &o.threads, "compute threads (default 1)", 0},
        {"json", FL_BOOL, &o.json, "print {\"loss\":x,\"tokens\":n}", 0},
    };
    flag_cmd c = {"eval", "--init FILE --data FILE --ctx T --micro-batch B --batches K [--json]", NULL, fl,
                  NFLAGS(fl)};
    flags_parse(&c, argc, argv);
    flags_require(&c, (const char *const[]){"init", "data", "ctx", "micro-batch", "batches", NULL});
    check_positive("batches", o.batches);
    session s = {0};
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
            "  eval      mean loss of a checkpoint on sequential windows of a file\n"
            "  schedule  print a pipeline schedule's grid, bubble and peak activations\n"
            "  plan      print the per-rank programs and planned memory (train's model flags; --json: as JSON)\n\n"
            "`pipit <command> --help` lists each command's flags.\n");
}

int pipit_cli_schedule(int argc, char **argv);

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
    if (strcmp(cmd, "train") == 0 || strcmp(cmd, "plan") == 0 || strcmp(cmd, "eval") == 0) {
        /* under mpirun each process runs one world rank */
        if (pipit_init(&argc, &argv)) die("%s", pipit_errmsg());
        if (strcmp(cmd, "eval") == 0) rc = cmd_eval(argc - 2, argv + 2);
        else rc = cmd_train_or_plan(argc - 2, argv + 2, strcmp(cmd, "plan") == 0);
        pipit_finalize();
        return rc;
    }
    if (strcmp(cmd, "schedule") == 0) return pipit_cli_schedule(argc - 2, argv + 2);
    fprintf(stderr, "pipit: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
