/*
 * pipit.c — the command line: `pipit train`, `pipit eval`, `pipit schedule`
 * and `pipit plan`. Parses flags from one table per command (so --help and
 * the errors for unknown flags and bad values come for free), builds GPT-2,
 * and drives the library. This is the only place that calls exit().
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "inspect/plan_print.h"
#include "runtime/program.h"
#include "schedule/schedule.h"
#include "pipit.h"
#include "io/checkpoint.h"
#include "io/data.h"
#include "util/common.h"

/* ------------------------------------------------------------------ flags */

typedef enum { FL_INT, FL_U64, FL_DBL, FL_STR, FL_BOOL } flag_type;

typedef struct {
    const char *name;
    flag_type type;
    void *ptr;
    const char *help;
    int seen;
} flag;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pipit: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void print_help(const char *cmd, const char *usage, const flag *fl, int n) {
    printf("usage: pipit %s %s\n\nflags:\n", cmd, usage);
    for (int i = 0; i < n; i++) printf("  --%-16s %s\n", fl[i].name, fl[i].help);
    printf("  --%-16s %s\n", "help", "show this help");
}

static void parse_value(flag *f, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case FL_INT: {
        long x = strtol(v, &end, 10);
        if (errno || !*v || *end || x < -2147483647L || x > 2147483647L)
            die("bad value '%s' for --%s: expected an integer", v, f->name);
        *(int *)f->ptr = (int)x;
        break;
    }
    case FL_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || !*v || *end || *v == '-') die("bad value '%s' for --%s: expected a non-negative integer", v, f->name);
        *(uint64_t *)f->ptr = x;
        break;
    }
    case FL_DBL: {
        double x = strtod(v, &end);
        if (errno || !*v || *end || !isfinite(x)) die("bad value '%s' for --%s: expected a number", v, f->name);
        *(double *)f->ptr = x;
        break;
    }
    case FL_STR: *(const char **)f->ptr = v; break;
    case FL_BOOL: break;
    }
}

static void parse_flags(const char *cmd, const char *usage, flag *fl, int n, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_help(cmd, usage, fl, n);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0) die("%s: unexpected argument '%s' (see pipit %s --help)", cmd, a, cmd);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        flag *f = NULL;
        for (int k = 0; k < n; k++)
            if (strlen(fl[k].name) == len && strncmp(fl[k].name, name, len) == 0) f = &fl[k];
        if (!f) die("%s: unknown flag '%s' (see pipit %s --help)", cmd, a, cmd);
        f->seen = 1;
        if (f->type == FL_BOOL) {
            if (eq) die("--%s takes no value", f->name);
            *(int *)f->ptr = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) die("--%s needs a value", f->name);
        parse_value(f, v);
    }
}

static int flag_seen(const flag *fl, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(fl[i].name, name) == 0) return fl[i].seen;
    return 0;
}

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void check_status(pipit_status s, const char *what) {
    if (s) die("%s: %s", what, pipit_errmsg());
}

/* ------------------------------------------------------------ model setup */

typedef struct {
    const char *data, *init, *save, *optimizer, *data_order, *schedule, *trace, *init_opt, *save_opt;
    int ctx, max_ctx, vocab, layers, heads, dim, micro_batch, microbatches, steps, threads, json;
    int pp, virt, remat, batches, profile;
    double lr, wd, beta1, beta2, eps, clip;
    uint64_t seed;
} opts;

/* Reads model sizes from a checkpoint's tensor shapes (and heads from its
 * metadata); flags given explicitly must agree with the file. */
static void config_from_checkpoint(const pipit__st_file *f, const char *path, opts *o, flag *fl, int n) {
    const pipit__st_tensor *wte = pipit__st_find(f, "wte.weight"), *wpe = pipit__st_find(f, "wpe.weight");
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        die("checkpoint '%s': no 2-D 'wte.weight' and 'wpe.weight': not a GPT-2 checkpoint", path);
    int L = 0;
    char name[64];
    for (;; L++) {
        snprintf(name, sizeof name, "h.%d.ln_1.weight", L);
        if (!pipit__st_find(f, name)) break;
    }
    if (L == 0) die("checkpoint '%s': tensor 'h.0.ln_1.weight' is missing: no transformer blocks", path);
    struct { const char *flag; int *dst; int64_t v; } from_file[] = {
        {"vocab", &o->vocab, wte->shape[0]}, {"dim", &o->dim, wte->shape[1]},
        {"max-ctx", &o->max_ctx, wpe->shape[0]}, {"layers", &o->layers, L}};
    for (int i = 0; i < 4; i++) {
        if (flag_seen(fl, n, from_file[i].flag) && *from_file[i].dst != from_file[i].v)
            die("--%s %d disagrees with checkpoint '%s' (%lld)", from_file[i].flag, *from_file[i].dst, path,
                (long long)from_file[i].v);
        *from_file[i].dst = (int)from_file[i].v;
    }
    const char *h = pipit__st_meta(f, "heads");
    if (h && flag_seen(fl, n, "heads") && o->heads != atoi(h))
        die("--heads %d disagrees with checkpoint '%s' (%s)", o->heads, path, h);
    if (!flag_seen(fl, n, "heads")) {
        if (!h) die("checkpoint '%s' does not record its head count: pass --heads", path);
        o->heads = atoi(h);
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
    check_status(pipit__checkpoint_save(p, path, meta), "save");
}

/* Microbatch feeds for sequences first .. first+B-1. */
typedef struct {
    int32_t *tok, *tgt, *pos;
} mb_buf;

static void fill_microbatch(const pipit__data *d, int64_t first, int B, int T, mb_buf *b, pipit_feed *f) {
    pipit__data_batch(d, first, B, b->tok, b->tgt);
    for (int i = 0; i < B * T; i++) b->pos[i] = i % T;
    f[0] = (pipit_feed){PIPIT_GPT2_TOKENS, b->tok};
    f[1] = (pipit_feed){PIPIT_GPT2_TARGETS, b->tgt};
    f[2] = (pipit_feed){PIPIT_GPT2_POSITIONS, b->pos};
}

/* ------------------------------------------------------------------ train */

static const char *TRAIN_USAGE =
    "--data FILE --ctx T --layers L --heads H --dim C --micro-batch B --microbatches M --steps N --lr X [...]";

static flag *train_flags(opts *o, int *n) {
    static flag fl[48];
    flag f[] = {
        {"data", FL_STR, &o->data, "training text (bytes are tokens) or uint16 token shard (.bin)", 0},
        {"ctx", FL_INT, &o->ctx, "sequence length T", 0},
        {"max-ctx", FL_INT, &o->max_ctx, "rows of wpe (default: --ctx)", 0},
        {"vocab", FL_INT, &o->vocab, "vocabulary size V (default 256: bytes)", 0},
        {"layers", FL_INT, &o->layers, "transformer blocks L", 0},
        {"heads", FL_INT, &o->heads, "attention heads H", 0},
        {"dim", FL_INT, &o->dim, "model width C", 0},
        {"micro-batch", FL_INT, &o->micro_batch, "sequences per microbatch B", 0},
        {"microbatches", FL_INT, &o->microbatches, "microbatches per step M (default 1)", 0},
        {"steps", FL_INT, &o->steps, "optimizer steps (0 with --save writes the initial weights)", 0},
        {"lr", FL_DBL, &o->lr, "learning rate (default 3e-4)", 0},
        {"weight-decay", FL_DBL, &o->wd, "AdamW decoupled weight decay on 2-D params (default 0)", 0},
        {"beta1", FL_DBL, &o->beta1, "AdamW beta1 (default 0.9)", 0},
        {"beta2", FL_DBL, &o->beta2, "AdamW beta2 (default 0.95)", 0},
        {"eps", FL_DBL, &o->eps, "AdamW epsilon (default 1e-8)", 0},
        {"clip", FL_DBL, &o->clip, "clip gradients to this global norm (default: off)", 0},
        {"optimizer", FL_STR, &o->optimizer, "adamw (default) or sgd", 0},
        {"seed", FL_U64, &o->seed, "seed for init and random data order (default 1)", 0},
        {"data-order", FL_STR, &o->data_order, "random (default) or sequential", 0},
        {"init", FL_STR, &o->init, "load parameters from a safetensors checkpoint", 0},
        {"save", FL_STR, &o->save, "write parameters to a safetensors checkpoint at the end", 0},
        {"save-optimizer", FL_STR, &o->save_opt, "write the optimizer state and step at the end (resume with --init-optimizer)", 0},
        {"init-optimizer", FL_STR, &o->init_opt, "load optimizer state and continue from its step (with --init)", 0},
        {"threads", FL_INT, &o->threads, "compute threads per rank (default 1)", 0},
        {"pp", FL_INT, &o->pp, "pipeline ranks P (default 1)", 0},
        {"virtual", FL_INT, &o->virt, "stages per rank V (default: the schedule's own; S = P*V)", 0},
        {"schedule", FL_STR, &o->schedule, "gpipe|1f1b|eager-1f1b|interleaved-1f1b|interleaved-gpipe|zb-h1|dualpipev|FILE", 0},
        {"remat", FL_BOOL, &o->remat, "recompute each stage's forward inside its backward", 0},
        {"json", FL_BOOL, &o->json, "one JSON object per line on stdout", 0},
        {"trace", FL_STR, &o->trace, "write the last step as a Chrome/Perfetto trace (JSON), or an SVG timeline (FILE.svg)", 0},
        {"profile", FL_BOOL, &o->profile, "print time per op and instruction kind, steps after the first (stderr)", 0},
    };
    _Static_assert(sizeof f <= sizeof fl, "train flag table too small");
    memcpy(fl, f, sizeof f);
    *n = NFLAGS(f);
    return fl;
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
    o->virt = 0; /* 0: the schedule's own (1, or 2 for interleaved schedules and DualPipeV) */
    o->steps = -1;
}

static void require(const flag *fl, int n, const char *cmd, const char *const *names) {
    for (; *names; names++)
        if (!flag_seen(fl, n, *names)) die("%s: --%s is required (see pipit %s --help)", cmd, *names, cmd);
}

static pipit_optimizer make_optimizer(const opts *o) {
    if (strcmp(o->optimizer, "adamw") == 0) return pipit_adamw(o->lr, o->beta1, o->beta2, o->eps, o->wd);
    if (strcmp(o->optimizer, "sgd") == 0) {
        if (o->wd != 0) die("--weight-decay applies to --optimizer adamw only");
        return pipit_sgd(o->lr);
    }
    die("bad value '%s' for --optimizer: expected adamw or sgd", o->optimizer);
}

static pipit__data_order data_order(const char *s) {
    if (strcmp(s, "random") == 0) return PIPIT_DATA_RANDOM;
    if (strcmp(s, "sequential") == 0) return PIPIT_DATA_SEQUENTIAL;
    die("bad value '%s' for --data-order: expected random or sequential", s);
}

static void check_positive(const char *name, int v) {
    if (v < 1) die("--%s must be >= 1 (got %d)", name, v);
}

/* Everything train and eval share: data, model config, graph, program. */
typedef struct {
    pipit__data *data;
    pipit__st_file *ckpt;
    pipit_graph *g;
    pipit_program *p;
    pipit_schedule *sched;
    pipit_gpt2_config cfg;
} session;

static void open_model(session *s, opts *o, flag *fl, int n, const char *cmd, int M) {
    if (o->init) {
        check_status(pipit__st_read(o->init, &s->ckpt), "--init");
        config_from_checkpoint(s->ckpt, o->init, o, fl, n);
    }
    check_positive("ctx", o->ctx);
    check_positive("micro-batch", o->micro_batch);
    check_positive("microbatches", M);
    check_positive("threads", o->threads);
    check_positive("pp", o->pp);
    if (o->virt < 0) die("--virtual must be >= 1 (got %d)", o->virt);
    if (o->max_ctx && o->max_ctx < o->ctx) die("--max-ctx %d is smaller than --ctx %d", o->max_ctx, o->ctx);
    int stages = s->sched ? s->sched->S : o->pp * (o->virt ? o->virt : 1);
    if (s->sched && o->schedule && pipit_schedule_kind_from_name(o->schedule) < 0) {
        /* a schedule file brings its own layout; flags given must agree */
        if ((flag_seen(fl, n, "pp") && o->pp != s->sched->P) ||
            (flag_seen(fl, n, "virtual") && o->pp * o->virt != s->sched->S))
            die("--schedule '%s' has %d ranks and %d stages, but --pp %d --virtual %d give %d", o->schedule,
                s->sched->P, s->sched->S, o->pp, o->virt, o->pp * o->virt);
        if (s->sched->M != M)
            die("--schedule '%s' is written for %d microbatches, but --microbatches is %d", o->schedule,
                s->sched->M, M);
    }
    s->cfg = model_config(o, stages);
    check_status(pipit_gpt2_check(&s->cfg), cmd);
    check_status(pipit__data_open(o->data, o->ctx, data_order(o->data_order), o->seed, &s->data), "--data");
    if (pipit__data_max_token(s->data) >= o->vocab)
        die("--data '%s' holds token %d but the vocabulary has %d entries (raise --vocab)", o->data,
            pipit__data_max_token(s->data), o->vocab);
    s->g = pipit_graph_new();
    if (!s->g) die("out of memory");
    pipit_val loss = pipit_gpt2_build(s->g, &s->cfg);
    check_status(pipit_graph_status(s->g), "model");
    pipit_options po = {.schedule = s->sched, .microbatches = M, .threads = o->threads,
                        .remat = o->remat, .optimizer = make_optimizer(o), .clip_norm = o->clip};
    if (o->clip < 0) die("--clip must be >= 0");
    check_status(pipit_compile(s->g, loss, &po, &s->p), "compile");
    if (s->ckpt) check_status(pipit__checkpoint_load(s->p, s->ckpt, o->init), "--init");
    else check_status(pipit_gpt2_init(s->p, &s->cfg, o->seed), "init");
}

static void close_session(session *s) {
    pipit_program_free(s->p);
    pipit_graph_free(s->g);
    pipit_schedule_free(s->sched);
    pipit__data_free(s->data);
    pipit__st_free(s->ckpt);
}

static void print_step(const opts *o, int step, const pipit_metrics *m, double tokens, double flops) {
    double tps = tokens / (m->ms / 1e3);
    if (o->json)
        printf("{\"step\":%d,\"loss\":%.9g,\"ms\":%.3f,\"tokens_per_s\":%.1f,\"grad_norm\":%.9g,"
               "\"gflops\":%.3f,\"peak_bytes\":%zu,\"bubble\":%.4f}\n",
               step, m->loss, m->ms, tps, m->grad_norm, flops * tokens / (m->ms / 1e3) / 1e9, m->peak_bytes,
               m->bubble);
    else
        printf("step %4d  loss %.6f  grad norm %.4f  %8.1f ms  %9.0f tok/s  %.2f GFLOP/s\n", step, m->loss,
               m->grad_norm, m->ms, tps, flops * tokens / (m->ms / 1e3) / 1e9);
    fflush(stdout);
}

static int cmd_train_or_plan(int argc, char **argv, int plan) {
    opts o;
    default_opts(&o);
    int n;
    flag *fl = train_flags(&o, &n);
    const char *cmd = plan ? "plan" : "train";
    if (plan) o.steps = 0;
    parse_flags(cmd, TRAIN_USAGE, fl, n, argc, argv);
    static const char *const need_init[] = {"data", "ctx", "micro-batch", NULL};
    static const char *const need_new[] = {"data", "ctx", "layers", "heads", "dim", "micro-batch", NULL};
    require(fl, n, cmd, o.init ? need_init : need_new);
    if (!plan) require(fl, n, cmd, (const char *const[]){"steps", NULL});
    if (plan) o.steps = 0;
    if (o.steps < 0) die("--steps must be >= 0 (got %d)", o.steps);
    session s = {0};
    if (o.schedule || o.pp > 1 || o.virt > 1) {
        const char *def = o.virt > 1 ? "interleaved-1f1b" : "1f1b";
        int kind = pipit_schedule_kind_from_name(o.schedule ? o.schedule : def);
        if (kind >= 0) check_status(pipit_schedule_build(kind, o.pp, o.virt, o.microbatches, &s.sched), "--schedule");
        else check_status(pipit_schedule_load(o.schedule, &s.sched), "--schedule");
    }
    open_model(&s, &o, fl, n, cmd, o.microbatches);
    if (plan) {
        pipit__plan_print(stdout, s.p, o.json); /* --json doubles as "verbose" here */
        close_session(&s);
        return 0;
    }
    int B = o.micro_batch, T = o.ctx, M = o.microbatches;
    mb_buf *bufs = calloc((size_t)M, sizeof *bufs);
    pipit_feed *feeds = calloc((size_t)M * 3, sizeof *feeds);
    if (!bufs || !feeds) die("out of memory");
    for (int m = 0; m < M; m++) {
        bufs[m].tok = malloc(sizeof(int32_t) * (size_t)B * T);
        bufs[m].tgt = malloc(sizeof(int32_t) * (size_t)B * T);
        bufs[m].pos = malloc(sizeof(int32_t) * (size_t)B * T);
        if (!bufs[m].tok || !bufs[m].tgt || !bufs[m].pos) die("out of memory");
    }
    s.p->profile = o.profile;
    if (!o.json)
        printf("pipit: GPT-2 L=%d H=%d C=%d V=%d T=%d, %lld params; B=%d M=%d; %d stage(s) on %d rank(s)%s%s; "
               "%d thread(s) per rank\n",
               s.cfg.layers, s.cfg.heads, s.cfg.dim, s.cfg.vocab, T, (long long)pipit_gpt2_num_params(&s.cfg), B, M,
               s.cfg.stages, s.sched ? s.sched->P : 1, s.sched ? ", schedule " : "",
               s.sched ? (s.sched->kind >= 0 ? pipit_schedule_kind_name((pipit_schedule_kind)s.sched->kind) : o.schedule) : "",
               o.threads);
    double flops = pipit_gpt2_flops_per_token(&s.cfg);
    int64_t first_step = 0; /* a resumed run continues the data stream where it stopped */
    if (o.init_opt) {
        if (!o.init) die("--init-optimizer needs --init (the weights it belongs to)");
        check_status(pipit__optimizer_load(s.p, o.init_opt, &first_step), "--init-optimizer");
    }
    for (int step = (int)first_step; step < (int)first_step + o.steps; step++) {
        for (int m = 0; m < M; m++)
            fill_microbatch(s.data, ((int64_t)step * M + m) * B, B, T, &bufs[m], feeds + 3 * m);
        pipit_metrics met;
        pipit_status st = pipit_step(s.p, feeds, 3, 1, &met);
        if (st) die("step %d: %s", step, pipit_program_errmsg(s.p));
        print_step(&o, step, &met, (double)B * T * M, flops);
        if (o.profile && step == first_step && o.steps > 1) /* the first step pays page faults: leave it out */
            for (int r = 0; r < s.p->plan.nranks; r++) memset(s.p->rs[r].prof, 0, sizeof s.p->rs[r].prof);
    }
    if (o.save) save_checkpoint(s.p, &s.cfg, o.save);
    if (o.save_opt) check_status(pipit__optimizer_save(s.p, o.save_opt, first_step + o.steps), "--save-optimizer");
    if (o.trace) check_status(pipit_program_write_trace(s.p, o.trace), "--trace");
    if (o.profile) pipit__profile_print(stderr, s.p);
    for (int m = 0; m < M; m++) {
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
        {"data", FL_STR, &o.data, "text file (bytes) or uint16 token shard", 0},
        {"ctx", FL_INT, &o.ctx, "sequence length T", 0},
        {"micro-batch", FL_INT, &o.micro_batch, "sequences per batch B", 0},
        {"batches", FL_INT, &o.batches, "batches K: evaluates sequences 0 .. K*B-1", 0},
        {"heads", FL_INT, &o.heads, "attention heads (default: from the checkpoint's metadata)", 0},
        {"threads", FL_INT, &o.threads, "compute threads (default 1)", 0},
        {"json", FL_BOOL, &o.json, "print {\"loss\":x,\"tokens\":n}", 0},
    };
    int n = NFLAGS(fl);
    parse_flags("eval", "--init FILE --data FILE --ctx T --micro-batch B --batches K [--json]", fl, n, argc, argv);
    require(fl, n, "eval", (const char *const[]){"init", "data", "ctx", "micro-batch", "batches", NULL});
    check_positive("batches", o.batches);
    session s = {0};
    open_model(&s, &o, fl, n, "eval", o.batches);
    int B = o.micro_batch, T = o.ctx, K = o.batches;
    int32_t *buf = malloc(sizeof(int32_t) * 3 * (size_t)B * T * K);
    pipit_feed *feeds = calloc((size_t)K * 3, sizeof *feeds);
    if (!buf || !feeds) die("out of memory");
    for (int k = 0; k < K; k++) {
        mb_buf b = {buf + (size_t)3 * k * B * T, buf + (size_t)(3 * k + 1) * B * T, buf + (size_t)(3 * k + 2) * B * T};
        fill_microbatch(s.data, (int64_t)k * B, B, T, &b, feeds + 3 * k);
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
            "  plan      print the per-rank programs and planned memory (train flags; --json lists every op)\n\n"
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
    if (strcmp(cmd, "train") == 0) return cmd_train_or_plan(argc - 2, argv + 2, 0);
    if (strcmp(cmd, "plan") == 0) return cmd_train_or_plan(argc - 2, argv + 2, 1);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc - 2, argv + 2);
    if (strcmp(cmd, "schedule") == 0) return pipit_cli_schedule(argc - 2, argv + 2);
    fprintf(stderr, "pipit: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
