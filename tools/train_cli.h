/*
 * train_cli.h — what `pipit train`, `pipit plan` and `pipit eval` share:
 * the options behind their flags (train_options.c), the session that opens
 * the data, the model and the program (session.c), training checkpoints
 * and --resume (train_save.c) and validation (validation.c). Each command
 * itself is one cmd_*.c file.
 */
#ifndef PIPIT_TOOLS_TRAIN_CLI_H
#define PIPIT_TOOLS_TRAIN_CLI_H

#include "cli.h"
#include "flags.h"
#include "pipit.h"
#include "model.h"
#include "moe_counts.h"
#include "pipit_io.h"

/* Dies "<what>: <pipit_errmsg()>" on a failed call. */
void cli_check(pipit_status s, const char *what);

typedef struct {
    const char *data, *init, *save, *optimizer, *data_order, *schedule, *trace, *init_opt, *save_opt;
    const char *resume; /* --resume FILE */
    int save_every, keep, weights_only;
    int cp; /* --cp: context-parallel ranks C per sequence (tools/cp_feeds.c; 1: none) */
    int ctx, max_ctx, vocab, layers, heads, dim, micro_batch, microbatches, steps, threads, json;
    int pp, virt, remat, batches, profile, verbose, dp, zero1, tp;
    int sp; /* --sp: sequence parallelism over a stage's tp ranks */
    const char *recompute; /* --recompute none|pointwise|full (--remat: full) */
    int ep; /* --ep E: expert parallelism over E consecutive data-parallel replicas (1: none) */
    int no_a2a_overlap; /* --no-a2a-overlap: no overlapped pairs of tasks (pipit_options.no_a2a_overlap) */
    int zero; /* --zero N: the ZeRO stage (--zero1 spells 1) */
    int reshard_after_forward; /* --reshard-after-forward: ZeRO-3's params gathered per task, not per step */
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
    const char *dtype;  /* --dtype f32|bf16 (NULL: f32) */
    const char *bf16_policy; /* --bf16-policy autocast|all (NULL: autocast) */
    int fused_head;          /* --fused-head: the fused LM head + cross-entropy (pipit_gpt2_config.fused_head) */
    int doc_sep;             /* --doc-sep ID: packed documents, a new one after each token ID (-1: none) */
    int doc_pos_reset;       /* --doc-pos-reset: GPT-2's positions restart at 0 in each document */
    const char *profile_out; /* --profile-out FILE: the profile and the model as JSON (pipit sim --calibrate) */
    int auto_stages;          /* --auto-stages: pipit_partition cuts the stages */
    const char *stage_costs;  /* --stage-costs model|measured */
    double stage_mem_limit;   /* --stage-mem-limit BYTES per rank (0: none) */
    const char *arch;         /* the model kind (tools/model.h): the preset's, or the checkpoint's */
    int kv_heads, ffn_hidden, multiple_of, tied, untied; /* Llama: --kv-heads ... --tied / --untied */
    double ffn_dim_multiplier, norm_eps, rope_theta;
    pipit_rope_scaling rope_scaling; /* Llama: llama3 RoPE scaling from the checkpoint or its config.json (no flag) */
    /* Llama MoE (pipit_llama_config's experts fields): --experts --top-k
     * --capacity-factor --dropless --shared-experts --moe-every --router
     * --aux-loss */
    int experts, top_k, dropless, shared_experts, moe_every;
    double capacity_factor, aux_loss, balance_bias;
    const char *router;
    int attn_bias, moe_layout, shared_gate; /* Llama: Qwen2's q/k/v biases and HF's MoE layouts, from a checkpoint (no flag) */
    int route_unnormalized;                 /* Llama MoE: Qwen2-MoE's norm_topk_prob false, from a checkpoint (no flag) */
    int no_mem_check;         /* --no-mem-check: skip the memory admission */
    double mem_limit;         /* --mem-limit BYTES: the limit the admission uses (0: detected) */
    int resume_dp, resume_microbatches; /* --resume: the checkpoint's --dp and --microbatches */
    int resume_tp;                      /* --resume: the checkpoint's --tp (0: a file older than the 'tp' key) */
} opts;

enum { CMD_TRAIN = 1, CMD_PLAN = 2, IGN = 4 };

/* Options: defaults, then a --model preset, a --config file and the flags
 * (train_options.c). */
void default_opts(opts *o);
void apply_preset(opts *o, const char *name);
/* The value of --NAME in argv (--NAME V or --NAME=V; the last wins), or NULL. */
const char *prescan(int argc, char **argv, const char *name);
/* The flags of train (cmd = CMD_TRAIN) or plan (CMD_PLAN) bound to o, into out[cap]; returns their count. */
int train_plan_flags(opts *o, int cmd, flag *out, int cap);
extern const char *const TRAIN_USAGE, *const PLAN_USAGE, *const PLAN_ABOUT;
pipit_lr_schedule make_lr_schedule(const opts *o);
pipit_optimizer make_optimizer(const opts *o);
pipit_data_order data_order(const char *s);
pipit_data_format data_format(const char *s);
void check_positive(const char *name, int v);

/* Everything train, plan and eval share: data, model config, graph, program. */
typedef struct {
    pipit_data *data, *val;
    pipit_checkpoint *ckpt; /* --init, or --resume (opened by apply_resume) */
    pipit_graph *g;
    pipit_program *p;
    pipit_schedule *sched;
    cli_model cfg;
    int forward_only;    /* eval: a forward-only program (no backward, no gradient memory) */
    pipit_val loss;
    pipit_options po;    /* the program's options (the validation program reuses them) */
    pipit_program *vp;   /* train's validation: a forward-only program on the same graph */
    int stages;          /* pipeline stages (cfg.stages is 1 with --auto-stages: the graph is cut later) */
    const char *mb_flag; /* the flag that sets M: "microbatches" (NULL), or eval's "batches" */
    int plan_only;       /* plan: the plan only (pipit_options.plan_only), no weights, no admission of this machine */
    cli_moe moe;         /* a Llama MoE's router choices (program outputs) and its last step's tokens per expert */
} session;

/* session.c */
cli_model model_config(const opts *o, int stages);
/* Model sizes from a checkpoint (its kind, tensor shapes and metadata, and
 * for Llama the Hugging Face config.json beside it) into o; flags given
 * explicitly must agree with the file (heads, kv heads, rope theta and eps
 * of a config.json they override). */
void model_from_checkpoint(const pipit_checkpoint *ck, opts *o, const flag_cmd *c);
/* Dies for a Llama flag given to another model, or --tied with --untied. */
void check_model_flags(const opts *o, const flag_cmd *c);
/* Opens the schedule (when the flags ask for a pipeline), the data, the
 * model, the program, and loads --init or the initial weights (not
 * --resume's: the caller loads those). */
void open_schedule(session *s, const opts *o);
void open_model(session *s, opts *o, const flag_cmd *c, int M);
void close_session(session *s);
/* In an MPI job: the processes resolved the same validation (--val-data's
 * tokens, the batches K, --eval-every), or every one stops naming the field. */
void agree_validation(const session *s, const opts *o, int K);

/* Microbatch feeds for sequences first .. first+B-1. */
typedef struct {
    int32_t *tok, *tgt, *pos, *doc;
} mb_buf;
void fill_microbatch(const pipit_data *d, const cli_model *c, int64_t first, mb_buf *b, pipit_feed *f);
/* G microbatch buffers of B x T tokens each, and their CLI_MAX_FEEDS x G
 * feeds (microbatch m's at feeds + m * the model's nfeeds). */
mb_buf *mb_bufs_new(int G, int B, int T, pipit_feed **feeds);
void mb_bufs_free(mb_buf *bufs, int G, pipit_feed *feeds);

/* train_save.c: checkpoints and --resume. */
/* Where the run stands: written into the checkpoint's metadata. */
typedef struct {
    int64_t step, total, data_pos;
} run_pos;
void save_checkpoint(const pipit_program *p, const cli_model *c, const char *path, pipit_dtype dt);
void save_train(const opts *o, const pipit_program *p, const cli_model *c, const char *path, run_pos r);
void say_saved(const opts *o, const char *path, int64_t step);
void remove_stale_temps(const char *path);
void check_writable(const char *flagname, const char *path);
/* --resume FILE: opens it into *ck and takes the run's config from it
 * (the values it sets count as given flags). */
void apply_resume(opts *o, flag_cmd *c, pipit_checkpoint **ck, int64_t *step_out);
/* The resume line: where the run continues, and how a new --dp keeps the
 * checkpoint's global batch. */
void say_resumed(const opts *o, int64_t step);

/* validation.c */
void check_distinct(const pipit_data *d, const char *what, const char *spec, int64_t want, const char *ask,
                    int64_t per_batch, const char *batches_flag, int T);
int open_validation(session *s, opts *o, const flag_cmd *c, int G);
void open_validation_program(session *s);
struct cli_cp_feeds; /* tools/cp_feeds.h */
double run_validation(session *s, const opts *o, int K, int G, mb_buf *bufs, pipit_feed *feeds,
                      struct cli_cp_feeds *cp, int64_t step, int speaker);

/* The options of train / plan from argv: defaults < preset < config <
 * flags, --resume applied, the checks every command line needs. */
typedef struct {
    opts o;
    flag fl[96];
    flag_cmd c;
    const char *model, *config;
    int64_t resume_step;
    int legacy; /* --save writes the params only (--save-weights-only, --save-optimizer) */
} train_args;
void train_args_parse(train_args *a, session *s, int argc, char **argv, int plan);
/* --print-config: the resolved settings and the parameter count as one JSON line. */
void print_train_config(const train_args *a);

#endif
