/*
 * session.c — what train, plan and eval open before a step runs: the
 * schedule, the data, the GPT-2 graph (cut by --auto-stages if asked), the
 * compiled program and its first weights, and the microbatch buffers that
 * feed it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "progress.h"
#include "train_cli.h"

/* tools/cmd_schedule.c */
pipit_status pipit_cli_schedule_open(const char *flagname, const char *name, int P, int V, int M, pipit_schedule **out);

/* Model sizes from a checkpoint's tensor shapes (and heads from its
 * metadata); flags given explicitly must agree with the file. */
static void config_from_checkpoint(const pipit_checkpoint *ck, opts *o, const flag_cmd *c) {
    const char *path = pipit_checkpoint_path(ck);
    pipit_gpt2_config f = {0};
    cli_check(pipit_gpt2_config_from_checkpoint(ck, &f), "--init");
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

pipit_gpt2_config model_config(const opts *o, int stages) {
    return (pipit_gpt2_config){o->vocab, o->max_ctx ? o->max_ctx : o->ctx, o->ctx, o->layers, o->heads,
                               o->dim, o->micro_batch, stages, PIPIT_F32};
}

/* Microbatch feeds for sequences first .. first+B-1. */
void fill_microbatch(const pipit_data *d, const pipit_gpt2_config *c, int64_t first, mb_buf *b,
                            pipit_feed *f) {
    cli_check(pipit_data_batch(d, first, c->batch, b->tok, b->tgt), "--data");
    cli_check(pipit_gpt2_feeds(c, b->tok, b->tgt, b->pos, f), "feeds");
}

/* G microbatch buffers of B x T tokens each, and their 3 G feeds. */
mb_buf *mb_bufs_new(int G, int B, int T, pipit_feed **feeds) {
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

void mb_bufs_free(mb_buf *bufs, int G, pipit_feed *feeds) {
    for (int m = 0; m < G; m++) {
        free(bufs[m].tok);
        free(bufs[m].tgt);
        free(bufs[m].pos);
    }
    free(bufs);
    free(feeds);
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
    pipit_val loss = pipit_gpt2_build(g, &s->cfg);
    pipit_options po = {.microbatches = M, .threads = o->threads, .optimizer = make_optimizer(o)};
    pipit_program *p = NULL;
    cli_check(pipit_compile(g, loss, &po, &p), "--stage-costs measured");
    cli_check(pipit_gpt2_init(p, &s->cfg, o->seed), "--stage-costs measured");
    pipit_feed *feeds;
    mb_buf *bufs = mb_bufs_new(M, s->cfg.batch, s->cfg.ctx, &feeds);
    for (int m = 0; m < M; m++) fill_microbatch(s->data, &s->cfg, (int64_t)m * s->cfg.batch, &bufs[m], feeds + 3 * m);
    for (int step = 0; step < 2; step++) {
        cli_check(pipit_program_set_profile(p, 1), "--stage-costs measured"); /* resets: step 2 alone counts */
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

/* Memory admission at the start (docs/refuses.md): the model's state and
 * a step's feeds against what this process may use, before the data, the
 * graph or the plan exist (pipit_compile checks the exact plan again). */
static void admit_run(const session *s, const opts *o, int M, const char *mflag) {
    if (o->no_mem_check) return;
    if (!(o->mem_limit >= 0 && o->mem_limit < 1e300)) die("--mem-limit must be a number of bytes >= 0 (got %g)", o->mem_limit);
    const pipit_gpt2_config *cfg = &s->cfg;
    int procs = pipit_process_count(), D = o->dp, P = s->stages / (o->virt > 1 ? o->virt : 1);
    double params = (double)pipit_gpt2_num_params(cfg), moments = s->forward_only ? 0 : 8 * params;
    if (o->zero1) moments /= D;
    double state = params * (s->forward_only ? 4 : 8) + moments; /* f32 params (+ grads, 2 moments) */
    state = procs > 1 ? state / (P > 1 ? P : 1) : state * D; /* a process holds one rank; threads hold them all */
    double feeds = 12.0 * cfg->batch * cfg->ctx * M * (procs > 1 ? 1 : D); /* tokens, targets, positions: i32 */
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

/* pipit_compile's memory admission, in the command line's words. */
static void check_compile(pipit_status st, const char *mflag) {
    if (st == PIPIT_STATUS_NOMEM && strstr(pipit_errmsg(), " of memory but "))
        die("compile: %s\n  (on the command line: more --pp stages, --zero1 with --dp, --remat, a smaller --micro-batch "
            "or fewer --%s need less; --no-mem-check skips this check)",
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

void open_model(session *s, opts *o, const flag_cmd *c, int M) {
    const char *mflag = s->mb_flag ? s->mb_flag : "microbatches";
    const char *cmd = c->name;
    cli_check_device(o->device, o->tf32); /* before any file is read */
    pipit_dtype dtype = cli_dtype(o->dtype, o->device);
    if (o->resume) {
        /* s->ckpt was opened by apply_resume; closed with the session */
        cli_note_unverified(s->ckpt, "resume");
        config_from_checkpoint(s->ckpt, o, c);
    } else if (o->init) {
        if (!s->ckpt) cli_check(pipit_checkpoint_open(o->init, &s->ckpt), "--init"); /* eval opens it first */
        cli_note_unverified(s->ckpt, "init");
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
        cli_note_bf16(s->ckpt, "init");
    }
    check_positive("ctx", o->ctx);
    check_positive("micro-batch", o->micro_batch);
    check_positive(mflag, M);
    check_positive("threads", o->threads);
    if (M > PIPIT_MAX_MICROBATCHES) die("--%s must be at most %d (got %d)", mflag, PIPIT_MAX_MICROBATCHES, M);
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
    cli_check(pipit_gpt2_check(&s->cfg), cmd);
    check_auto_stages_flags(o, c);
    admit_run(s, o, M, mflag);
    if (!s->data) /* eval opens it first */
        cli_check(pipit_data_open_spec(o->data, data_format(o->data_format), o->ctx, data_order(o->data_order), o->seed,
                                       &s->data),
                  "--data");
    if (pipit_data_max_token(s->data) >= o->vocab)
        die("--data '%s' holds token %d but the vocabulary has %d entries (raise --vocab)", o->data,
            pipit_data_max_token(s->data), o->vocab);
    s->g = pipit_graph_new();
    if (!s->g) die("out of memory");
    s->loss = pipit_gpt2_build(s->g, &s->cfg);
    cli_check(pipit_graph_status(s->g), "model");
    if (o->auto_stages) auto_stages(s, o, M);
    pipit_val loss = s->loss;
    pipit_options po = {.schedule = s->sched, .microbatches = M, .threads = o->threads,
                        .remat = o->remat, .optimizer = make_optimizer(o), .clip_norm = o->clip,
                        .data_parallel = o->dp, .zero1 = o->zero1, .lr_schedule = make_lr_schedule(o),
                        .forward_only = s->forward_only, .device = o->device, .tf32 = o->tf32,
                        .mem_limit = o->mem_limit, .no_mem_check = o->no_mem_check,
                        .dtype = dtype};
    if (o->clip < 0) die("--clip must be >= 0");
    check_compile(pipit_compile(s->g, loss, &po, &s->p), mflag);
    s->po = po;
    if (o->resume) return; /* the caller loads params and optimizer state */
    if (s->ckpt) cli_check(pipit_checkpoint_load_into(s->p, s->ckpt), "--init");
    else cli_check(pipit_gpt2_init(s->p, &s->cfg, o->seed), "init");
}

void close_session(session *s) {
    pipit_program_free(s->vp);
    pipit_program_free(s->p);
    pipit_graph_free(s->g);
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
