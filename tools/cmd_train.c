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
#include "progress.h"
#include "pipit_inspect.h"
#include "train_cli.h"

static void print_step(const opts *o, int64_t step, const pipit_metrics *m, double tokens, double flops,
                       const cli_progress *pr) {
    double tps = tokens / (m->ms / 1e3);
    cli_bar_clear();
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

int cmd_train(int argc, char **argv) {
    train_args args;
    session s = {0};
    train_args_parse(&args, &s, argc, argv, 0);
    opts *o = &args.o;
    flag_cmd *c = &args.c;
    int legacy = args.legacy;
    if (o->print_config) {
        print_train_config(&args);
        close_session(&s);
        return 0;
    }
    open_schedule(&s, o);
    open_model(&s, o, c, o->microbatches);
    /* a step's global batch: G = M * D microbatches of B sequences, replica d
     * taking microbatches d*M .. d*M+M-1 */
    int B = o->micro_batch, T = o->ctx, M = o->microbatches;
    /* M <= 2^24 and D <= 64 (checked at compile): G fits an int; B * T * G tokens per step must fit int64 */
    int G = M * o->dp;
    if ((int64_t)B * T > INT64_MAX / G / 4) die("--micro-batch %d x --ctx %d x %d microbatches is too large", B, T, G);
    int speaker = pipit_process_rank() == 0; /* one process prints */
    int val_batches = open_validation(&s, o, c, G);
    if (val_batches) open_validation_program(&s);
    pipit_feed *feeds;
    mb_buf *bufs = mb_bufs_new(G, B, T, &feeds);
    int profiling = o->profile || o->profile_out;
    if (profiling) cli_check(pipit_program_set_profile(s.p, 1), "--profile");
    cli_progress prog = {0};
    prog.ranks = s.sched ? pipit_schedule_ranks(s.sched) : 1;
    int on_gpu = o->device && strcmp(o->device, "cuda") == 0;
    if (!o->json && speaker) { /* MFU against the whole run's peak: one rank's x P x T x D */
        /* on a GPU only a stated peak: the CPU's sgemm says nothing about it */
        double rank_peak = o->peak_flops > 0 ? o->peak_flops : on_gpu ? 0 : cli_sgemm_flops() * o->threads;
        prog.peak = rank_peak * prog.ranks * o->tp * o->dp;
    }
    if (!o->json && speaker) {
        char what[160];
        cli_model_describe(&s.cfg, what, sizeof what);
        printf("pipit: %s, %lld params; B=%d M=%d; %d stage(s) on %d rank(s)%s%s; %d thread(s) per rank", what,
               (long long)s.cfg.kind->num_params(&s.cfg), B, M,
               s.stages, s.sched ? pipit_schedule_ranks(s.sched) : 1, s.sched ? ", schedule " : "",
               s.sched ? (pipit_schedule_get_kind(s.sched) >= 0
                              ? pipit_schedule_kind_name((pipit_schedule_kind)pipit_schedule_get_kind(s.sched))
                              : o->schedule)
                       : "",
               o->threads);
        if (o->tp > 1) printf("; x %d tensor-parallel ranks per stage", o->tp);
        if (o->dp > 1) printf("; x %d data-parallel replicas%s", o->dp, o->zero1 ? " (ZeRO-1)" : "");
        if (pipit_process_count() > 1) printf("; %d MPI processes", pipit_process_count());
        if (on_gpu) printf("; device cuda (%d GPU%s)%s", pipit_cuda_device_count(),
                           pipit_cuda_device_count() == 1 ? "" : "s", o->tf32 ? ", TF32 GEMMs" : ", fp32 GEMMs");
        if (o->peak_flops > 0)
            printf("; MFU vs stated peak %.1f GFLOP/s per rank", prog.peak / (prog.ranks * o->tp * o->dp) / 1e9);
        else if (on_gpu)
            printf("; MFU: pass --peak-flops (the GPU's dense peak for this precision)");
        else
            printf("; MFU vs measured sgemm peak %.1f GFLOP/s per rank (1-thread sgemm x %d thread(s))",
                   prog.peak / (prog.ranks * o->tp * o->dp) / 1e9, o->threads);
        if (prog.ranks * o->tp * o->dp > 1 && prog.peak > 0) printf(" x %d ranks", prog.ranks * o->tp * o->dp);
        printf("\n");
    }
    double flops = s.cfg.kind->flops_per_token(&s.cfg);
    int nf = s.cfg.kind->nfeeds;
    int64_t first_step = 0, last_step, data_pos; /* a resumed run continues the data stream where it stopped */
    if (o->resume) {
        cli_check(pipit_checkpoint_load_train(s.p, s.ckpt, &first_step), "--resume");
        data_pos = meta_i64(s.ckpt, "resume", "data_pos", 0, INT64_MAX, INT64_MIN);
        last_step = o->steps; /* the total */
        if (speaker) say_resumed(o, first_step);
        if (last_step - first_step > (INT64_MAX - data_pos) / ((int64_t)G * B))
            die("--resume: data position %lld is too large to continue", (long long)data_pos);
    } else {
        if (o->init_opt) {
            if (!o->init) die("--init-optimizer needs --init (the weights it belongs to)");
            cli_check(pipit_optimizer_load(s.p, o->init_opt, &first_step), "--init-optimizer");
        }
        /* 64-bit step counter; the data offset (step * G + m) * B must fit too */
        if (first_step > INT64_MAX / ((int64_t)G * B) - o->steps)
            die("--init-optimizer: step %lld is too large to continue %d more steps of %d x %d sequences",
                (long long)first_step, o->steps, G, B);
        last_step = first_step + o->steps;
        data_pos = first_step * G * B;
    }
    /* the save path is checked now, not after the last step; a killed
     * run's temp files there are removed */
    if (o->save) {
        if (pipit_process_rank() == 0) remove_stale_temps(o->save);
        check_writable("save", o->save);
    }
    if (o->save_opt) check_writable("save-optimizer", o->save_opt);
    if (o->profile_out && speaker) check_writable("profile-out", o->profile_out);
    char *default_save = NULL; /* where an interrupted run without --save saves */
    if (!o->save) {
        default_save = malloc(strlen(o->data) + 32);
        if (!default_save) die("out of memory");
        sprintf(default_save, "%s.pipit.safetensors", o->data);
    }
    const char *int_path = o->save ? o->save : default_save;
    if (pipit_process_count() == 1) install_signals();
    prog.first = first_step;
    prog.last = last_step;
    prog.t_start = cli_now();
    cli_bar_enable(speaker, o->json);
    double profiled_s = 0; /* wall time of the profiled steps (all but the first) */
    int64_t profiled_steps = 0;
    for (int64_t step = first_step;; step++) {
        run_pos at = {step, last_step, data_pos + (step - first_step) * G * B};
        if (g_signal) { /* between steps: the checkpoint holds whole steps */
            int sig = g_signal;
            cli_bar_clear();
            if (!o->save && speaker) fprintf(stderr, "pipit: no --save given: saving to %s\n", int_path);
            save_train(o, s.p, &s.cfg, int_path, at);
            fprintf(stderr, "pipit: interrupted at step %lld; saved %s; resume with: pipit train --resume %s\n",
                    (long long)step, int_path, int_path);
            mb_bufs_free(bufs, G, feeds); /* nothing left allocated at exit (the sanitizer build checks) */
            free(default_save);
            close_session(&s);
            exit(128 + sig);
        }
        if (step > first_step && o->save_every && step % o->save_every == 0 && step < last_step)
            save_train(o, s.p, &s.cfg, o->save, at);
        if (step >= last_step) break;
        for (int m = 0; m < G; m++)
            fill_microbatch(s.data, &s.cfg, at.data_pos + (int64_t)m * B, &bufs[m], feeds + nf * m);
        pipit_metrics met;
        pipit_status st = pipit_step_feeds(s.p, feeds, (int64_t)G * nf, nf, 1, &met);
        if (st) die("step %lld: %s", (long long)step, pipit_program_errmsg(s.p));
        int last = step == last_step - 1;
        cli_progress_step(&prog, &met, (double)B * T * G);
        if (speaker && (step % o->log_every == 0 || last)) print_step(o, step, &met, (double)B * T * G, flops, &prog);
        if (val_batches && ((o->eval_every && (step + 1) % o->eval_every == 0) || step + 1 == last_step))
            cli_progress_val(&prog, step, run_validation(&s, o, val_batches, G, bufs, feeds, step, speaker));
        if (speaker && !last) cli_bar_draw(&prog, step, met.loss);
        if (step > first_step || last_step - first_step == 1) profiled_s += met.ms / 1e3, profiled_steps++;
        if (profiling && step == first_step && last_step - first_step > 1) /* the first step pays page faults: leave it out */
            cli_check(pipit_program_set_profile(s.p, 1), "--profile"); /* resets the counters */
    }
    run_pos end = {last_step, last_step, data_pos + (last_step - first_step) * G * B};
    if (o->save && legacy) { /* collective under MPI: process 0 writes */
        save_checkpoint(s.p, &s.cfg, o->save, s.po.dtype);
        if (!o->json) say_saved(o, o->save, last_step);
    } else if (o->save) save_train(o, s.p, &s.cfg, o->save, end);
    if (o->save_opt) cli_check(pipit_optimizer_save(s.p, o->save_opt, last_step), "--save-optimizer");
    free(default_save);
    if (o->trace && speaker) cli_check(pipit_program_write_trace(s.p, o->trace), "--trace");
    if (o->profile && speaker) cli_check(pipit_program_print_profile(stderr, s.p), "--profile");
    if (o->profile_out && speaker) write_profile(o, &s, G / o->dp, profiled_steps, profiled_s);
    if (speaker && (!o->json || o->json_summary)) cli_progress_summary(stdout, &prog, o->json, o->save);
    mb_bufs_free(bufs, G, feeds);
    close_session(&s);
    return 0;
}
