/*
 * cmd_train.c — `pipit train`: the step loop. Prints a line per step (or
 * JSON), validates, saves checkpoints (every K steps, at the end, and on
 * SIGINT / SIGTERM between steps), and writes traces and profiles. What
 * it opens and how it parses its flags is shared with plan and eval
 * (train_cli.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "cp_feeds.h"
#include "progress.h"
#include "pipit_inspect.h"
#include "train_cli.h"

static void print_step(const opts *o, int64_t step, const pipit_metrics *m, double tokens, double flops,
                       const cli_progress *pr, const cli_moe *moe) {
    double tps = tokens / (m->ms / 1e3);
    cli_bar_clear();
    if (o->json) {
        printf("{\"step\":%lld,\"loss\":%.9g,\"ms\":%.3f,\"tokens_per_s\":%.1f,\"grad_norm\":%.9g,"
               "\"gflops\":%.3f,\"peak_bytes\":%zu,\"bubble\":%.4f,\"lr\":%.9g",
               (long long)step, m->loss, m->ms, tps, m->grad_norm, flops * tokens / (m->ms / 1e3) / 1e9, m->peak_bytes,
               m->bubble, m->lr);
        cli_moe_json(moe, stdout);
        printf("}\n");
    } else {
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


/* --profile-out FILE: what `pipit sim --calibrate` reads: the model and
 * mesh, the profiled steps and their mean wall time, and the library's
 * per-rank profile (pipit_program_write_profile_json). */
static void write_profile(const opts *o, const session *s, int M, int64_t steps, double seconds) {
    FILE *f = fopen(o->profile_out, "w");
    if (!f) die("--profile-out: cannot write '%s': %s", o->profile_out, strerror(errno));
    const cli_model *c = &s->cfg;
    int kind = s->sched ? pipit_schedule_get_kind(s->sched) : PIPIT_SCHED_1F1B;
    const char *sched = kind >= 0 ? pipit_schedule_kind_name((pipit_schedule_kind)kind) : "custom";
    int virt = s->sched ? pipit_schedule_virtual(s->sched) : 1;
    fprintf(f,
            "{\"model\":{\"arch\":\"%s\",\"layers\":%d,\"dim\":%d,\"heads\":%d,\"ctx\":%d,\"vocab\":%d,\"micro_batch\":%d,"
            "\"microbatches\":%d,\"pp\":%d,\"tp\":%d,\"dp\":%d,\"threads\":%d,\"schedule\":\"%s\",\"virtual\":%d",
            c->kind->name, c->layers, c->dim, c->heads, c->ctx, c->vocab, c->batch, M, o->pp, o->tp, o->dp, o->threads,
            sched, virt);
    if (strcmp(c->kind->name, "llama") == 0) { /* what the cost model needs of a Llama: the kv heads, the MLP width */
        pipit_llama_config lc = cli_model_llama(c);
        fprintf(f, ",\"kv_heads\":%d,\"ffn_hidden\":%d", lc.kv_heads ? lc.kv_heads : lc.heads,
                pipit_llama_ffn_hidden(&lc));
    }
    fprintf(f, "},\"steps\":%lld,\"step_s\":%.9g,\"profile\":", (long long)steps,
            steps ? seconds / (double)steps : 0.0);
    pipit_status st = pipit_program_write_profile_json(f, s->p);
    fprintf(f, "}\n");
    if (fclose(f) || st) die("--profile-out: writing '%s' failed%s%s", o->profile_out, st ? ": " : "", st ? pipit_errmsg() : "");
}

/* ------------------------------------------------------------ the run */

/* What the step loop works with, opened once. */
typedef struct {
    train_args args;
    session s;
    int B, T, G;          /* micro-batch, ctx, microbatches per step of all replicas (M * D) */
    int speaker;          /* process 0 prints */
    int val_batches;      /* validation batches (0: none) */
    int profiling;        /* --profile or --profile-out */
    mb_buf *bufs;         /* G microbatch buffers and their feeds */
    pipit_feed *feeds;
    cli_cp_feeds cp;      /* --cp: the D x C replicas' chunks of the feeds (tools/cp_feeds.c) */
    cli_progress prog;
    int64_t first_step, last_step, data_pos; /* steps first .. last-1; the data stream's position at the first */
    char *default_save;   /* where an interrupted run without --save saves (NULL with --save) */
    double profiled_s;    /* wall time of the profiled steps (all but the first) */
    int64_t profiled_steps;
} train_run;

/* The schedule, model, validation and feed buffers; a step's global batch
 * is G = M * D microbatches of B sequences, replica d taking microbatches
 * d*M .. d*M+M-1. */
static void open_run(train_run *r) {
    opts *o = &r->args.o;
    open_schedule(&r->s, o);
    open_model(&r->s, o, &r->args.c, o->microbatches);
    r->B = o->micro_batch, r->T = o->ctx;
    /* M <= 2^24 and D <= 64 (checked at compile): G fits an int; B * T * G tokens per step must fit int64 */
    r->G = o->microbatches * o->dp;
    if ((int64_t)r->B * r->T > INT64_MAX / r->G / 4)
        die("--micro-batch %d x --ctx %d x %d microbatches is too large", r->B, r->T, r->G);
    r->speaker = pipit_process_rank() == 0;
    r->val_batches = open_validation(&r->s, o, &r->args.c, r->G);
    if (r->val_batches) open_validation_program(&r->s);
    r->bufs = mb_bufs_new(r->G, r->B, r->T, &r->feeds);
    cli_cp_feeds_open(&r->cp, o->cp, r->G, o->microbatches, cli_model_nfeeds(&r->s.cfg), r->B, r->T);
    r->profiling = o->profile || o->profile_out;
    if (r->profiling) cli_check(pipit_program_set_profile(r->s.p, 1), "--profile");
    r->prog.ranks = r->s.sched ? pipit_schedule_ranks(r->s.sched) : 1;
}

/* The MFU's peak: one rank's (--peak-flops, else the measured sgemm x
 * threads; on a GPU only a stated one) x P x T x D. */
static void set_peak(train_run *r, int on_gpu) {
    const opts *o = &r->args.o;
    double rank_peak = o->peak_flops > 0 ? o->peak_flops : on_gpu ? 0 : cli_sgemm_flops() * o->threads;
    r->prog.peak = rank_peak * r->prog.ranks * o->tp * o->dp * o->cp;
}

/* The header line: the model, the batch, the mesh and the MFU's peak. */
static void print_header(train_run *r) {
    const opts *o = &r->args.o;
    const session *s = &r->s;
    int on_gpu = o->device && strcmp(o->device, "cuda") == 0, ranks = r->prog.ranks * o->tp * o->dp * o->cp;
    set_peak(r, on_gpu);
    char what[160];
    cli_model_describe(&s->cfg, what, sizeof what);
    int kind = s->sched ? pipit_schedule_get_kind(s->sched) : -1;
    printf("pipit: %s, %lld params; B=%d M=%d; %d stage(s) on %d rank(s)%s%s; %d thread(s) per rank", what,
           (long long)s->cfg.kind->num_params(&s->cfg), r->B, o->microbatches, s->stages, r->prog.ranks,
           s->sched ? ", schedule " : "",
           !s->sched ? "" : kind >= 0 ? pipit_schedule_kind_name((pipit_schedule_kind)kind) : o->schedule, o->threads);
    if (o->tp > 1) printf("; x %d tensor-parallel ranks per stage", o->tp);
    if (o->dp > 1 && (o->zero1 || o->zero > 0)) printf("; x %d data-parallel replicas (ZeRO-%d)", o->dp, o->zero1 ? 1 : o->zero);
    else if (o->dp > 1) printf("; x %d data-parallel replicas", o->dp);
    if (o->cp > 1) printf("; x %d context-parallel ranks per sequence", o->cp);
    if (pipit_process_count() > 1) printf("; %d MPI processes", pipit_process_count());
    if (on_gpu)
        printf("; device cuda (%d GPU%s)%s", pipit_cuda_device_count(), pipit_cuda_device_count() == 1 ? "" : "s",
               o->tf32 ? ", TF32 GEMMs" : ", fp32 GEMMs");
    if (o->peak_flops > 0) printf("; MFU vs stated peak %.1f GFLOP/s per rank", r->prog.peak / ranks / 1e9);
    else if (on_gpu) printf("; MFU: pass --peak-flops (the GPU's dense peak for this precision)");
    else
        printf("; MFU vs measured sgemm peak %.1f GFLOP/s per rank (1-thread sgemm x %d thread(s))",
               r->prog.peak / ranks / 1e9, o->threads);
    if (ranks > 1 && r->prog.peak > 0) printf(" x %d ranks", ranks);
    if (!on_gpu && pipit_cpu_blas_advice()) printf("; %s", pipit_cpu_blas_advice());
    printf("\n");
}

/* Where the run starts: --resume continues the checkpoint's step and data
 * position (--steps is the total), --init-optimizer its optimizer's step
 * (--steps more), else step 0. The data offset (step * G + m) * B of every
 * step to run must fit int64. */
static void start_position(train_run *r) {
    const opts *o = &r->args.o;
    int64_t per_step = (int64_t)r->G * r->B;
    r->first_step = 0;
    if (o->resume) {
        cli_check(pipit_checkpoint_load_train(r->s.p, r->s.ckpt, &r->first_step), "--resume");
        r->data_pos = meta_i64(r->s.ckpt, "resume", "data_pos", 0, INT64_MAX, INT64_MIN);
        r->last_step = o->steps;
        if (r->speaker) say_resumed(o, r->first_step);
        if (r->last_step - r->first_step > (INT64_MAX - r->data_pos) / per_step)
            die("--resume: data position %lld is too large to continue", (long long)r->data_pos);
        return;
    }
    if (o->init_opt) {
        if (!o->init) die("--init-optimizer needs --init (the weights it belongs to)");
        cli_check(pipit_optimizer_load(r->s.p, o->init_opt, &r->first_step), "--init-optimizer");
    }
    if (r->first_step > INT64_MAX / per_step - o->steps)
        die("--init-optimizer: step %lld is too large to continue %d more steps of %d x %d sequences",
            (long long)r->first_step, o->steps, r->G, r->B);
    r->last_step = r->first_step + o->steps;
    r->data_pos = r->first_step * per_step;
}

/* The save paths are checked now, not after the last step (a killed run's
 * temp files there are removed); an interrupted run without --save saves
 * beside --data. SIGINT / SIGTERM are caught in a one-process run. */
static void prepare_saves(train_run *r) {
    const opts *o = &r->args.o;
    if (o->save) {
        if (pipit_process_rank() == 0) remove_stale_temps(o->save);
        check_writable("save", o->save);
    }
    if (o->save_opt) check_writable("save-optimizer", o->save_opt);
    if (o->profile_out && r->speaker) check_writable("profile-out", o->profile_out);
    if (!o->save) {
        r->default_save = malloc(strlen(o->data) + 32);
        if (!r->default_save) die("out of memory");
        sprintf(r->default_save, "%s.pipit.safetensors", o->data);
    }
    if (pipit_process_count() == 1) install_signals();
}

/* Where step `step` stands (the data position of its first sequence). */
static run_pos position(const train_run *r, int64_t step) {
    return (run_pos){step, r->last_step, r->data_pos + (step - r->first_step) * r->G * r->B};
}

/* Nothing left allocated at exit (the sanitizer build checks). */
static void close_run(train_run *r) {
    mb_bufs_free(r->bufs, r->G, r->feeds);
    cli_cp_feeds_close(&r->cp);
    free(r->default_save);
    close_session(&r->s);
}

/* A signal arrived: between steps, so the checkpoint holds whole steps;
 * saves and exits 128 + the signal. */
static void save_interrupted(train_run *r, int64_t step) {
    const opts *o = &r->args.o;
    int sig = g_signal;
    const char *path = o->save ? o->save : r->default_save;
    cli_bar_clear();
    if (!o->save && r->speaker) fprintf(stderr, "pipit: no --save given: saving to %s\n", path);
    save_train(o, r->s.p, &r->s.cfg, path, position(r, step));
    fprintf(stderr, "pipit: interrupted at step %lld; saved %s; resume with: pipit train --resume %s\n",
            (long long)step, path, path);
    close_run(r);
    exit(128 + sig);
}

/* One step: its G microbatches, the update, the step line, validation when
 * due, the bar; the profile's counters leave out the first step. */
static void run_step(train_run *r, int64_t step, double flops) {
    const opts *o = &r->args.o;
    int nf = cli_model_nfeeds(&r->s.cfg), last = step == r->last_step - 1;
    double tokens = (double)r->B * r->T * r->G;
    run_pos at = position(r, step);
    for (int m = 0; m < r->G; m++)
        fill_microbatch(r->s.data, &r->s.cfg, at.data_pos + (int64_t)m * r->B, &r->bufs[m], r->feeds + nf * m);
    pipit_metrics met;
    if (r->s.cfg.balance_bias > 0) cli_moe_bias_load(&r->s.moe, r->s.p); /* the first time: init or the file's */
    const pipit_feed *feeds = r->cp.C > 1 ? cli_cp_feeds_cut(&r->cp, r->feeds, r->B, r->T) : r->feeds;
    if (pipit_step_feeds(r->s.p, feeds, (int64_t)r->G * (r->cp.C > 1 ? r->cp.C : 1) * nf, nf, 1, &met))
        die("step %lld: %s", (long long)step, pipit_program_errmsg(r->s.p));
    cli_progress_step(&r->prog, &met, tokens);
    if (r->s.moe.n && (o->json || r->s.cfg.balance_bias > 0)) cli_moe_count(&r->s.moe, r->s.p, r->G); /* collective */
    if (r->s.moe.n && r->s.cfg.balance_bias > 0) cli_moe_balance(&r->s.moe, r->s.p, r->s.cfg.balance_bias);
    if (r->speaker && (step % o->log_every == 0 || last)) print_step(o, step, &met, tokens, flops, &r->prog, &r->s.moe);
    if (r->val_batches && ((o->eval_every && (step + 1) % o->eval_every == 0) || step + 1 == r->last_step))
        cli_progress_val(&r->prog, step,
                         run_validation(&r->s, o, r->val_batches, r->G, r->bufs, r->feeds, &r->cp, step,
                                        r->speaker));
    if (r->speaker && !last) cli_bar_draw(&r->prog, step, met.loss);
    if (step > r->first_step || r->last_step - r->first_step == 1) r->profiled_s += met.ms / 1e3, r->profiled_steps++;
    if (r->profiling && step == r->first_step && r->last_step - r->first_step > 1) /* the first step pays page faults */
        cli_check(pipit_program_set_profile(r->s.p, 1), "--profile");                /* resets the counters */
}

/* The steps, with --save-every's saves between them and a signal's save. */
static void train_loop(train_run *r) {
    const opts *o = &r->args.o;
    double flops = r->s.cfg.kind->flops_per_token(&r->s.cfg);
    r->prog.first = r->first_step;
    r->prog.last = r->last_step;
    r->prog.t_start = cli_now();
    cli_bar_enable(r->speaker, o->json);
    for (int64_t step = r->first_step;; step++) {
        if (g_signal) save_interrupted(r, step);
        if (step > r->first_step && o->save_every && step % o->save_every == 0 && step < r->last_step)
            save_train(o, r->s.p, &r->s.cfg, o->save, position(r, step));
        if (step >= r->last_step) break;
        run_step(r, step, flops);
    }
}

/* After the last step: the checkpoint (collective under MPI: process 0
 * writes), the optimizer state, the trace and profiles, the summary. */
static void finish_run(train_run *r) {
    const opts *o = &r->args.o;
    if (o->save && r->args.legacy) {
        save_checkpoint(r->s.p, &r->s.cfg, o->save, r->s.po.dtype);
        if (!o->json) say_saved(o, o->save, r->last_step);
    } else if (o->save) {
        save_train(o, r->s.p, &r->s.cfg, o->save, position(r, r->last_step));
    }
    if (o->save_opt) cli_check(pipit_optimizer_save(r->s.p, o->save_opt, r->last_step), "--save-optimizer");
    if (o->trace && r->speaker) cli_check(pipit_program_write_trace(r->s.p, o->trace), "--trace");
    if (o->profile && r->speaker) cli_check(pipit_program_print_profile(stderr, r->s.p), "--profile");
    if (o->profile_out && r->speaker) write_profile(o, &r->s, o->microbatches, r->profiled_steps, r->profiled_s);
    if (r->speaker && (!o->json || o->json_summary)) cli_progress_summary(stdout, &r->prog, o->json, o->save);
}

int cmd_train(int argc, char **argv) {
    train_run r = {0};
    train_args_parse(&r.args, &r.s, argc, argv, 0);
    if (r.args.o.print_config) {
        print_train_config(&r.args);
        close_session(&r.s);
        return 0;
    }
    open_run(&r);
    if (!r.args.o.json && r.speaker) print_header(&r);
    start_position(&r);
    prepare_saves(&r);
    train_loop(&r);
    finish_run(&r);
    close_run(&r);
    return 0;
}
