/*
 * validation.c — held-out loss during `pipit train`: --val-data or
 * --val-split opens the validation stream, a forward-only program on the
 * training graph computes it (the training params copied in by name), and
 * evaluation never wraps around a short file (check_distinct, also eval's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_feeds.h"
#include "progress.h"
#include "train_cli.h"

/* Dies unless `want` sequences (sequential order, from 0) are distinct
 * windows of d: evaluation never wraps around a short file. */
void check_distinct(const pipit_data *d, const char *what, const char *spec, int64_t want, const char *ask,
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
static int open_validation_data(session *s, opts *o, const flag_cmd *c, int G) {
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
        cli_check(pipit_data_open_spec(o->val_data, data_format(o->data_format), o->ctx, PIPIT_DATA_SEQUENTIAL, 0,
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
        cli_check(pipit_data_split(s->data, nval, &s->val), "--val-split");
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

int open_validation(session *s, opts *o, const flag_cmd *c, int G) {
    int K = open_validation_data(s, o, c, G);
    agree_validation(s, o, K); /* in an MPI job: the processes validate alike, or stop */
    return K;
}

/* The forward-only program validation runs: the same graph, schedule and
 * mesh as training (a forward-only compile leaves the graph alone and
 * needs no gradient memory). */
void open_validation_program(session *s) {
    pipit_options po = s->po;
    po.forward_only = 1;
    cli_check(pipit_compile(s->g, s->loss, &po, &s->vp), "compile (validation)");
}

/* The training program's params, by name, into the validation program
 * (collective in an MPI job, as get_param is). */
static void copy_params_to_validation(session *s) {
    for (int i = 0; i < pipit_program_num_params(s->p); i++) {
        const char *name = pipit_program_param_name(s->p, i);
        int64_t n = 0;
        cli_check(pipit_program_param_numel(s->p, name, &n), "validation");
        float *buf = malloc(sizeof(float) * (size_t)n);
        if (!buf) die("out of memory");
        cli_check(pipit_program_get_param(s->p, name, buf, sizeof(float) * (size_t)n), "validation");
        cli_check(pipit_program_set_param(s->vp, name, buf, sizeof(float) * (size_t)n), "validation");
        free(buf);
    }
}

/* Mean loss over validation batches 0 .. K-1 (sequential windows, each a
 * step's G microbatches), with the forward-only program (the same losses,
 * bit for bit, as pipit_step(update = 0) on the training program). Under
 * --cp (cp->C > 1) each batch is cut into the D x C replicas' chunks as a
 * training step's are (tools/cp_feeds.c; cp's buffers are reused, the
 * step that filled them being done). */
double run_validation(session *s, const opts *o, int K, int G, mb_buf *bufs, pipit_feed *feeds,
                      struct cli_cp_feeds *cp, int64_t step, int speaker) {
    double sum = 0;
    int B = o->micro_batch;
    int nf = cli_model_nfeeds(&s->cfg);
    copy_params_to_validation(s);
    for (int k = 0; k < K; k++) {
        for (int m = 0; m < G; m++)
            fill_microbatch(s->val, &s->cfg, ((int64_t)k * G + m) * B, &bufs[m], feeds + nf * m);
        pipit_metrics met;
        const pipit_feed *fed = cp->C > 1 ? cli_cp_feeds_cut(cp, feeds, B, o->ctx) : feeds;
        if (pipit_step_feeds(s->vp, fed, (int64_t)G * (cp->C > 1 ? cp->C : 1) * nf, nf, 0, &met))
            die("validation at step %lld: %s", (long long)step, pipit_program_errmsg(s->vp));
        sum += met.loss;
    }
    long long tokens = (long long)K * G * B * o->ctx;
    if (!speaker) return sum / K;
    cli_bar_clear();
    if (o->json) printf("{\"step\":%lld,\"val_loss\":%.9g,\"val_tokens\":%lld}\n", (long long)step, sum / K, tokens);
    else printf("step %4lld  val loss %.6f over %lld tokens\n", (long long)step, sum / K, tokens);
    fflush(stdout);
    return sum / K;
}
