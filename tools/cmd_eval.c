/*
 * cmd_eval.c — `pipit eval`: the mean loss of a checkpoint on sequential
 * windows of a file, with a forward-only program (no backward, no
 * gradient memory); evaluation never wraps around a short file. The
 * window, micro-batch, batch count and packed documents (--doc-sep,
 * --doc-pos-reset) default to what the checkpoint and the file say (flags
 * override).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "commands.h"
#include "cp_feeds.h"
#include "train_cli.h"

/* What the flags leave out, from the checkpoint (its training ctx and
 * micro-batch; else its positions and 1) and the file (up to 8 batches). */
static void eval_defaults(session *s, opts *o, const flag_cmd *c) {
    cli_check(pipit_checkpoint_open(o->init, &s->ckpt), "--init");
    model_from_checkpoint(s->ckpt, o, c); /* the kind and its positions (open_model reads it again) */
    if (!flags_seen(c, "ctx")) {
        o->ctx = (int)meta_i64(s->ckpt, "init", "ctx", 1, o->max_ctx ? o->max_ctx : INT32_MAX, o->max_ctx);
        if (o->ctx < 1)
            die("checkpoint '%s' records neither its training ctx nor its positions (max_position_embeddings): pass "
                "--ctx", o->init);
    }
    if (!flags_seen(c, "micro-batch")) o->micro_batch = (int)meta_i64(s->ckpt, "init", "micro_batch", 1, 1 << 20, 1);
    if (!flags_seen(c, "doc-sep")) { /* packed documents as trained (train_save.c); --doc-sep overrides both */
        o->doc_sep = (int)meta_i64(s->ckpt, "init", "doc_sep", -1, INT32_MAX, -1);
        if (!flags_seen(c, "doc-pos-reset"))
            o->doc_pos_reset = (int)meta_i64(s->ckpt, "init", "doc_pos_reset", 0, 1, 0);
    }
    if (flags_seen(c, "batches") || o->ctx < 1 || o->micro_batch < 1) return; /* open_model reports bad values */
    cli_check(pipit_data_open_spec(o->data, data_format(o->data_format), o->ctx, PIPIT_DATA_SEQUENTIAL, o->seed,
                                   &s->data),
              "--data");
    int64_t k = pipit_data_windows(s->data) / o->micro_batch;
    o->batches = (int)(k < 1 ? 1 : k > 8 ? 8 : k); /* fewer than one batch: check_distinct says so */
}

int cmd_eval(int argc, char **argv) {
    opts o;
    default_opts(&o);
    o.data_order = "sequential";
    flag fl[] = {
        {"init", FL_STR, &o.init, "safetensors checkpoint to evaluate", 0},
        {"data", FL_STR, &o.data, "text file (bytes) or uint16 token shard; several: 'a.bin,b.bin' or a glob", 0},
        {"data-format", FL_STR, &o.data_format, "auto (default)|text|shard|u16 (headerless uint16)", 0},
        {"ctx", FL_INT, &o.ctx, "sequence length T (default: the checkpoint's training ctx, else its positions)", 0},
        {"micro-batch", FL_INT, &o.micro_batch, "sequences per batch B (default: the checkpoint's, else 1)", 0},
        {"batches", FL_INT, &o.batches, "batches K: evaluates sequences 0 .. K*B-1 (default: up to 8, as the file "
                                        "allows)", 0},
        {"heads", FL_INT, &o.heads, "attention heads (default: from the checkpoint's metadata or config.json)", 0},
        {"threads", FL_INT, &o.threads, "compute threads (default 1; cpu only)", 0},
        {"device", FL_STR, &o.device, "cpu (default) or cuda", 0},
        {"tf32", FL_BOOL, &o.tf32, "with --device cuda: GEMMs on TF32 tensor cores", 0},
        {"dtype", FL_STR, &o.dtype, "compute precision: f32 (default) or bf16", 0},
        {"fused-head", FL_BOOL, &o.fused_head, "the fused LM head + cross-entropy (as train's; the same parameters, "
                                               "so any checkpoint; default: matmul + cross-entropy)", 0},
        {"doc-sep", FL_INT, &o.doc_sep, "packed documents, as train's: token ID ends a document (default: the checkpoint's, else none)", 0},
        {"doc-pos-reset", FL_BOOL, &o.doc_pos_reset, "with --doc-sep: GPT-2's positions restart per document (default: the checkpoint's)", 0},
        {"cp", FL_INT, &o.cp, "context-parallel ranks C per sequence, as train's (default 1; checkpoints do not "
                              "depend on C)", 0},
        {"json", FL_BOOL, &o.json, "print {\"loss\":x,\"tokens\":n}", 0},
        {"no-mem-check", FL_BOOL, &o.no_mem_check, "skip the memory admission (docs/refuses.md)", 0},
        {"mem-limit", FL_DBL, &o.mem_limit, "bytes the memory admission allows (default: detected)", 0},
    };
    flag_cmd c = {"eval", "--init FILE --data FILE [--ctx T --micro-batch B --batches K] [--json]", NULL, fl,
                  NFLAGS(fl)};
    flags_parse(&c, argc, argv);
    flags_require(&c, (const char *const[]){"init", "data", NULL});
    if (flags_seen(&c, "batches")) check_positive("batches", o.batches);
    session s = {.forward_only = 1, .mb_flag = "batches"};
    eval_defaults(&s, &o, &c);
    open_model(&s, &o, &c, o.batches);
    int B = o.micro_batch, T = o.ctx, K = o.batches;
    char ask[64];
    snprintf(ask, sizeof ask, "--batches %d x --micro-batch %d", K, B);
    check_distinct(s.data, "--data", o.data, (int64_t)K * B, ask, B, "--batches", T);
    int nf = cli_model_nfeeds(&s.cfg);
    pipit_feed *feeds;
    mb_buf *bufs = mb_bufs_new(K, B, T, &feeds);
    for (int k = 0; k < K; k++) fill_microbatch(s.data, &s.cfg, (int64_t)k * B, &bufs[k], feeds + nf * k);
    pipit_metrics met;
    cli_cp_feeds cp; /* --cp: the C replicas' chunks of each batch (tools/cp_feeds.c) */
    cli_cp_feeds_open(&cp, o.cp, K, K, nf, B, T);
    const pipit_feed *fed = cp.C > 1 ? cli_cp_feeds_cut(&cp, feeds, B, T) : feeds;
    if (pipit_step_feeds(s.p, fed, (int64_t)K * (cp.C > 1 ? cp.C : 1) * nf, nf, 0, &met))
        die("eval: %s", pipit_program_errmsg(s.p));
    cli_cp_feeds_close(&cp);
    long long tokens = (long long)B * T * K;
    if (o.json) printf("{\"loss\":%.9g,\"tokens\":%lld}\n", met.loss, tokens);
    else printf("eval loss %.6f over %lld tokens\n", met.loss, tokens);
    mb_bufs_free(bufs, K, feeds);
    close_session(&s);
    return 0;
}
