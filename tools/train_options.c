/*
 * train_options.c — the options of `pipit train` and `pipit plan`: one flag
 * table for both, the defaults and presets under it, the lr schedule and
 * optimizer the flags describe, and the parse that applies them in order
 * (defaults < --model preset < --config file < flags).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipit_llama.h"
#include "train_cli.h"

void cli_check(pipit_status s, const char *what) {
    if (s) die("%s: %s", what, pipit_errmsg());
}

const char *const TRAIN_USAGE =
    "--data FILE [--model tiny|gpt2|gpt2-medium|gpt2-large|gpt2-xl|llama-tiny|llama-100m] [--config FILE]\n"
    "       [--ctx T --layers L --heads H --kv-heads K --ffn-hidden F --rope-theta X --norm-eps X --tied|--untied\n"
    "       --dim C --micro-batch B --microbatches M --steps N --lr X --lr-schedule cosine --warmup K ...]\n\n"
    "With --data alone it trains the `tiny` preset (ctx 64, 4 layers, 4 heads, dim 128, micro-batch 8,\n"
    "100 steps, lr 1e-3). Precedence: defaults < --model preset < --config file < flags. A command line\n"
    "that sizes the model itself (--layers/--heads/--dim without --model or --config) names its --steps.";
const char *const PLAN_USAGE =
    "--data FILE [--model NAME] [--config FILE] [--ctx T --layers L ...] [--pp P --schedule S ...] [--json]";
const char *const PLAN_ABOUT =
    "Compiles the model as `pipit train` would (same model and pipeline flags) and prints, per rank,\n"
    "its stages, planned peak activation memory, the ops it runs and its instruction list; nothing runs.\n"
    "`pipit plan --search --global-batch G` ranks schedules instead (see pipit plan --search --help).";


/* The flags of train and plan in one table; `cmds` says which commands take
 * each. Plan accepts every train flag, so a train command line works as is;
 * IGN marks those plan ignores (its help says so). */
int train_plan_flags(opts *o, int cmd, flag *out, int cap) {
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
        {3, {"kv-heads", FL_INT, &o->kv_heads, "Llama: key/value heads (grouped-query attention; divides --heads)", 0}},
        {3, {"ffn-hidden", FL_INT, &o->ffn_hidden, "Llama: MLP width F (intermediate_size; 0: Meta's rule from --multiple-of)", 0}},
        {3, {"multiple-of", FL_INT, &o->multiple_of, "Llama, --ffn-hidden 0: round Meta's 8C/3 up to a multiple of this (default 256)", 0}},
        {3, {"ffn-dim-multiplier", FL_DBL, &o->ffn_dim_multiplier, "Llama, --ffn-hidden 0: Meta's ffn_dim_multiplier (default: none)", 0}},
        {3, {"norm-eps", FL_DBL, &o->norm_eps, "Llama: RMSNorm epsilon (rms_norm_eps; presets 1e-5)", 0}},
        {3, {"rope-theta", FL_DBL, &o->rope_theta, "Llama: RoPE base theta (presets 10000)", 0}},
        {3, {"tied", FL_BOOL, &o->tied, "Llama: the lm head is the embedding (tie_word_embeddings)", 0}},
        {3, {"untied", FL_BOOL, &o->untied, "Llama: a separate lm_head.weight (llama-tiny's default)", 0}},
        {3, {"experts", FL_INT, &o->experts, "Llama: routed experts E per MoE layer (mixture of experts; moe-tiny 8)", 0}},
        {3, {"top-k", FL_INT, &o->top_k, "Llama MoE: experts per token, 1..--experts (default 2, at most E)", 0}},
        {3, {"capacity-factor", FL_DBL, &o->capacity_factor, "Llama MoE: slots per expert = ceil(F x tokens x k / E), "
                                                            "later tokens dropped (default 1.25)", 0}},
        {3, {"dropless", FL_BOOL, &o->dropless, "Llama MoE: every expert holds all the microbatch's tokens: none dropped", 0}},
        {3, {"shared-experts", FL_INT, &o->shared_experts, "Llama MoE: always-on experts beside the routed ones (default 0)", 0}},
        {3, {"moe-every", FL_INT, &o->moe_every, "Llama MoE: every K-th layer's MLP is MoE (default 1: all)", 0}},
        {3, {"router", FL_STR, &o->router, "Llama MoE: softmax (default: softmax then top-k, Mixtral) or sigmoid "
                                           "(sigmoid then top-k, normalised: DeepSeek-V3)", 0}},
        {3, {"aux-loss", FL_DBL, &o->aux_loss, "Llama MoE: coefficient of the Switch/Mixtral load-balancing loss "
                                               "(default 0: off)", 0}},
        {3, {"balance-bias", FL_DBL, &o->balance_bias, "Llama MoE: auxiliary-loss-free balance (DeepSeek-V3): a "
                                                       "routing-only bias per expert, after each step moved by COEF "
                                                       "toward the mean token count, centred (default 0: off)", 0}},
        {3, {"micro-batch", FL_INT, &o->micro_batch, "sequences per microbatch B", 0}},
        {3, {"microbatches", FL_INT, &o->microbatches, "microbatches per step M (default 1)", 0}},
        {3 | IGN, {"steps", FL_INT, &o->steps, "optimizer steps (0 with --save writes the initial weights)", 0}},
        {3 | IGN, {"lr", FL_DBL, &o->lr, "peak learning rate (default: the preset's; tiny 1e-3)", 0}},
        {3 | IGN, {"lr-schedule", FL_STR, &o->lr_schedule, "constant (default), cosine or linear decay after the warm-up", 0}},
        {3 | IGN, {"warmup", FL_INT, &o->warmup, "linear warm-up over the first K steps: lr*t/K for step t <= K (default 0)", 0}},
        {3 | IGN, {"decay-steps", FL_INT, &o->decay_steps, "cosine/linear: step where --min-lr is reached (default: --steps)", 0}},
        {3 | IGN, {"min-lr", FL_DBL, &o->min_lr, "cosine/linear: the lr after the decay (default: --lr / 10)", 0}},
        {3 | IGN, {"log-every", FL_INT, &o->log_every, "print every K-th step's line (steps 0, K, 2K, ...; the last always; default 1)", 0}},
        {3, {"model", FL_STR, &o->model, "preset: tiny (default), gpt2 (124M), gpt2-medium, gpt2-large, gpt2-xl, "
                                          "llama-tiny, llama-50m, llama-100m, moe-tiny, moe-100m (the kind comes with it)", 0}},
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
        {3, {"dtype", FL_STR, &o->dtype, "compute precision: f32 (default) or bf16 (fp32 master weights, gradients "
                                         "and optimizer; bf16 activations and stage messages)", 0}},
        {3, {"bf16-policy", FL_STR, &o->bf16_policy, "with --dtype bf16, which values are bf16: autocast (default: "
                                                     "matmuls and attention bf16, residual stream, norms and losses "
                                                     "fp32, as PyTorch's autocast) or all (every activation bf16)", 0}},
        {3, {"fused-head", FL_BOOL, &o->fused_head, "the fused LM head + cross-entropy (default: matmul, then "
                                                    "cross-entropy): the [B*T, V] logits never stored but recomputed "
                                                    "in the backward; f32: less activation memory, a slower step "
                                                    "(GPT-2 124M: -39% arena, +12% time); bf16: no saving", 0}},
        {3, {"doc-sep", FL_INT, &o->doc_sep, "packed documents: token ID ends a document (it is the document's "
                                             "last token); attention never crosses a boundary (default: none)", 0}},
        {3, {"doc-pos-reset", FL_BOOL, &o->doc_pos_reset, "with --doc-sep: GPT-2's positions restart at 0 in each "
                                                          "document (Llama: RoPE is relative, nothing to reset)", 0}},
        {3, {"pp", FL_INT, &o->pp, "pipeline ranks P (default 1)", 0}},
        {3, {"cp", FL_INT, &o->cp, "context-parallel ranks C per sequence (default 1): the sequence cut into 2C "
                                   "chunks, rank c holding chunks c and 2C-1-c; K and V all-gathered for attention; "
                                   "P x T x D x C ranks; 2C divides --ctx", 0}},
        {3, {"dp", FL_INT, &o->dp, "data-parallel replicas D of the pipeline (default 1): P x D ranks, threads or MPI processes", 0}},
        {3, {"zero1", FL_BOOL, &o->zero1, "with --dp: shard the optimizer state over the replicas (ZeRO-1)", 0}},
        {3, {"zero", FL_INT, &o->zero, "with --dp: ZeRO stage 0..3 over the replicas: 1 optimizer state (--zero1), 2 "
                                       "also the gradients, 3 also the parameters (gathered once per step); bitwise "
                                       "the same results", 0}},
        {3, {"reshard-after-forward", FL_BOOL, &o->reshard_after_forward, "with --zero 3: gather each param for "
                                                                          "each task (a microbatch's F, B or W) that "
                                                                          "reads it and release it after, not once per "
                                                                          "step: less memory, more messages; bitwise "
                                                                          "the same results (cpu only)", 0}},
        {3, {"ep", FL_INT, &o->ep, "Llama MoE: expert-parallel ranks E (default 1): each MoE layer's experts split "
                                   "over E consecutive data-parallel replicas, tokens sent to their experts' owners "
                                   "(an all-to-all); E divides --dp and --experts", 0}},
        {3, {"no-a2a-overlap", FL_BOOL, &o->no_a2a_overlap, "with --ep: every all-to-all ends before the rank "
                                                            "computes on (default: a forward and a backward of two "
                                                            "microbatches side by side run as an overlapped pair, one's "
                                                            "all-to-all moving while the other computes; the same bits)", 0}},
        {3, {"tp", FL_INT, &o->tp, "tensor-parallel ranks T per pipeline stage (default 1): P x T x D ranks, a "
                                   "stage's T consecutive; T divides --heads and --vocab (Llama: --kv-heads and the MLP "
                                   "width too)", 0}},
        {3, {"sp", FL_BOOL, &o->sp, "with --tp: sequence parallelism (Megatron's): the norms and residuals between "
                                    "the tensor-parallel matmuls, and the stage messages, hold 1/T of the sequence "
                                    "(all-gather / reduce-scatter instead of all-reduce); --tp divides --ctx", 0}},
        {3, {"virtual", FL_INT, &o->virt, "stages per rank V (default: the schedule's own; S = P*V)", 0}},
        {3, {"schedule", FL_STR, &o->schedule, "gpipe|1f1b|eager-1f1b|interleaved-1f1b|interleaved-gpipe|zb-h1|dualpipev|zb-h2|zb-v|interleaved-zb|v-half|v-min|FILE", 0}},
        {3, {"remat", FL_BOOL, &o->remat, "recompute each stage's forward inside its backward (--recompute full)", 0}},
        {3, {"recompute", FL_STR, &o->recompute, "what the backward computes again instead of keeping: none (default), "
                                                 "pointwise (GELU/SiLU outputs and their products: the MLP keeps half "
                                                 "its width-F values, no matmul twice) or full (= --remat)", 0}},
        {3, {"auto-stages", FL_BOOL, &o->auto_stages, "cut the stages where the predicted forward+backward cost is "
                                                      "balanced (pipit_partition, docs/partition.md) instead of evenly by layers", 0}},
        {3, {"stage-costs", FL_STR, &o->stage_costs, "with --auto-stages: model (default: FLOPs at 50 GFLOP/s, bytes "
                                                     "at 10 GB/s, exp/tanh at 3e8/s) or measured (scale by a profile of 2 sequential steps first; one process only)", 0}},
        {3, {"stage-mem-limit", FL_DBL, &o->stage_mem_limit, "with --auto-stages: bytes per rank the stages must fit "
                                                             "(params, grads, optimizer state, activations; 0: no limit)", 0}},
        {3, {"no-mem-check", FL_BOOL, &o->no_mem_check, "skip the memory admission (pipit refuses a run that needs "
                                                         "more memory than the process may use: docs/refuses.md)", 0}},
        {3, {"mem-limit", FL_DBL, &o->mem_limit, "bytes the memory admission allows (default: the smallest of RAM, "
                                                 "the cgroup limit and RLIMIT_AS)", 0}},
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

void default_opts(opts *o) {
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
    o->tp = 1;
    o->cp = 1;
    o->ep = 1;
    o->virt = 0; /* 0: the schedule's own (1, or 2 for interleaved schedules, DualPipeV and ZB-V) */
    o->steps = -1;
    o->log_every = 1;
    o->lr_schedule = "constant";
    o->min_lr = -1;      /* -1: --lr / 10 */
    o->decay_steps = -1; /* -1: --steps */
    o->arch = "gpt2";
    o->multiple_of = 256; /* Meta's default */
    o->doc_sep = -1;      /* no packed documents */
}

/* The preset's fields, over the defaults (flags and --config come later). */
void apply_preset(opts *o, const char *name) {
    const cli_preset *pr = cli_preset_find(name);
    if (!pr) {
        const char *names[16];
        int n = 0;
        for (int i = 0; i < cli_preset_count() && n < 16; i++) names[n++] = cli_preset_at(i)->name;
        die("unknown --model '%s': expected %s%s", name, cli_preset_names(), cli_did_you_mean(name, names, n, ""));
    }
    o->arch = pr->arch;
    o->kv_heads = pr->kv_heads;
    o->ffn_hidden = pr->ffn_hidden;
    o->tied = pr->tied;
    o->norm_eps = pr->norm_eps;
    o->rope_theta = pr->rope_theta;
    o->experts = pr->experts;
    o->top_k = pr->top_k;
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
const char *prescan(int argc, char **argv, const char *name) {
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
pipit_lr_schedule make_lr_schedule(const opts *o) {
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
    if (ls.min_lr > o->lr) /* the "decay" would raise the lr */
        die("--min-lr %g is above --lr %g: --lr-schedule %s decays from --lr down to --min-lr", ls.min_lr, o->lr,
            o->lr_schedule);
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

pipit_optimizer make_optimizer(const opts *o) {
    if (strcmp(o->optimizer, "adamw") == 0) return pipit_adamw(o->lr, o->beta1, o->beta2, o->eps, o->wd);
    if (strcmp(o->optimizer, "sgd") == 0) {
        if (o->wd != 0) die("--weight-decay applies to --optimizer adamw only");
        return pipit_sgd(o->lr);
    }
    die("bad value '%s' for --optimizer: expected adamw or sgd", o->optimizer);
}

pipit_data_order data_order(const char *s) {
    if (strcmp(s, "random") == 0) return PIPIT_DATA_RANDOM;
    if (strcmp(s, "sequential") == 0) return PIPIT_DATA_SEQUENTIAL;
    die("bad value '%s' for --data-order: expected random or sequential", s);
}

pipit_data_format data_format(const char *s) {
    if (!s || strcmp(s, "auto") == 0) return PIPIT_DATA_AUTO;
    if (strcmp(s, "text") == 0) return PIPIT_DATA_TEXT;
    if (strcmp(s, "shard") == 0) return PIPIT_DATA_SHARD;
    if (strcmp(s, "u16") == 0) return PIPIT_DATA_U16;
    die("bad value '%s' for --data-format: expected auto, text, shard or u16", s);
}

void check_positive(const char *name, int v) {
    if (v < 1) die("--%s must be >= 1 (got %d)", name, v);
}


/* The numbers a command line (or --config) gave, each against its own
 * domain, with the flag's name: before the library sees them under its
 * option names. -1 stays the "unset" of --min-lr and --decay-steps only
 * when it comes from a --resume file (constant schedules store it). */
static void check_numbers(const opts *o, const flag_cmd *c) {
    if (flags_seen(c, "min-lr") && o->min_lr < 0) die("--min-lr must be >= 0 (got %g)", o->min_lr);
    if (flags_seen(c, "decay-steps") && o->decay_steps < 0)
        die("--decay-steps must be > --warmup (a step number; got %d)", o->decay_steps);
    const struct { const char *flag; double v, lo, hi; int hi_open; } r[] = {
        {"lr", o->lr, 0, HUGE_VAL, 0},           {"beta1", o->beta1, 0, 1, 1},
        {"beta2", o->beta2, 0, 1, 1},            {"eps", o->eps, 0, HUGE_VAL, 0},
        {"weight-decay", o->wd, 0, HUGE_VAL, 0}, {"clip", o->clip, 0, HUGE_VAL, 0},
    };
    for (int i = 0; i < NFLAGS(r); i++)
        if (!(r[i].v >= r[i].lo && (r[i].hi_open ? r[i].v < r[i].hi : r[i].v <= r[i].hi)))
            die("--%s must be %s (got %g)", r[i].flag, r[i].hi_open ? "in [0, 1)" : "a number >= 0", r[i].v);
}

void train_args_parse(train_args *a, session *s, int argc, char **argv, int plan) {
    opts *o = &a->o;
    default_opts(o);
    a->c = (flag_cmd){plan ? "plan" : "train", plan ? PLAN_USAGE : TRAIN_USAGE, plan ? PLAN_ABOUT : NULL, a->fl,
                      train_plan_flags(o, plan ? CMD_PLAN : CMD_TRAIN, a->fl, NFLAGS(a->fl))};
    flag_cmd *c = &a->c;
    /* defaults < preset < config < flags */
    a->config = prescan(argc, argv, "config");
    a->model = prescan(argc, argv, "model");
    if (!a->model && a->config) a->model = cli_config_string(a->config, "model");
    apply_preset(o, a->model ? a->model : "tiny");
    if (a->config) cli_config_apply(c, a->config, (const char *const[]){"model", "params", NULL});
    if (plan) o->steps = 0;
    flags_parse(c, argc, argv);
    o->model = a->model; /* a preset chosen (flag or config file) fixes the model's kind */
    int sized = flags_seen(c, "layers") || flags_seen(c, "heads") || flags_seen(c, "dim");
    a->resume_step = 0;
    if (o->resume) apply_resume(o, c, &s->ckpt, &a->resume_step);
    else if (!o->print_config) flags_require(c, (const char *const[]){"data", NULL});
    /* a model sized on the command line (no preset, no config) names its run length, as before presets */
    if (!plan && !o->print_config && !o->resume && sized && !a->model && !a->config && !o->init)
        flags_require(c, (const char *const[]){"steps", NULL});
    a->legacy = o->weights_only || o->save_opt; /* --save writes the params only */
    if (o->save_every < 0) die("--save-every must be >= 0 (got %d)", o->save_every);
    if (o->keep < 0) die("--keep must be >= 0 (got %d)", o->keep);
    if (!plan && o->save_every && !o->save) die("--save-every needs --save FILE (where to save)");
    if (!plan && o->save_every && a->legacy)
        die("--save-every writes training checkpoints: it does not combine with --%s",
            o->weights_only ? "save-weights-only" : "save-optimizer");
    if (plan) o->steps = 0;
    if (o->steps < 0) die("--steps must be >= 0 (got %d)", o->steps);
    if (o->log_every < 1) die("--log-every must be >= 1 (got %d)", o->log_every);
    if (!(o->peak_flops >= 0 && o->peak_flops < 1e300))
        die("--peak-flops must be a positive number of FLOP/s (got %g)", o->peak_flops);
    check_numbers(o, c);
}
