/*
 * cli.h — the CLI's helpers besides the flag parser: "did you mean"
 * suggestions (tools/suggest.c), model presets (tools/presets.c),
 * --config files (tools/config.c) and text files and tokenizers
 * (tools/text_files.c).
 */
#ifndef PIPIT_TOOLS_CLI_H
#define PIPIT_TOOLS_CLI_H

#include "flags.h"
#include "model.h"
#include "pipit_io.h"
#include "pipit_sim.h"
#include "pipit_text.h"

/* A candidate `word` may have meant (compared lower-case, '_' as '-'):
 * the one another trainer's name for it stands for (--batch-size ->
 * micro-batch, n_layer -> layers, learning_rate -> lr: nanoGPT, llm.c,
 * Hugging Face, Megatron names), else the closest by edit distance
 * (optimal string alignment: insertions, deletions, substitutions, swaps
 * of neighbours) if close enough to be a typo (distance 1 for words of up
 * to 4 characters, else 2), else the one candidate sharing a '-'-separated
 * word of 3+ letters with it (or the candidate that is such a word);
 * NULL otherwise. */
const char *cli_suggest(const char *word, const char *const *cands, int n);
/* "; did you mean 'x'?" for a close candidate, else "" (static storage). */
const char *cli_did_you_mean(const char *word, const char *const *cands, int n, const char *prefix);

/* --inter-node-bw BW, --inter-node-lat S, --intra-node-bw BW,
 * --intra-node-lat S, --gpus-per-node N and --link SPEC (pipit_hw_parse_links
 * syntax: bandwidths in bytes/s or with a unit, 100Mbit, 5GB; latencies in
 * s or with a unit, 50us): link constants over the hardware description's,
 * --link first, then the single flags (tools/links.c). */
typedef struct pipit_hw pipit_hw;
typedef struct {
    const char *inter_bw, *inter_lat, *intra_bw, *intra_lat, *gpus_per_node, *spec;
} cli_links;
#define CLI_LINK_FLAGS(l)                                                                                        \
    {"inter-node-bw", FL_STR, &(l).inter_bw, "bandwidth between nodes, bytes/s or with a unit (12.5e6, 100Mbit)", 0}, \
    {"inter-node-lat", FL_STR, &(l).inter_lat, "latency between nodes, s or with a unit (50us)", 0},             \
    {"intra-node-bw", FL_STR, &(l).intra_bw, "bandwidth inside a node, bytes/s or with a unit (300GB)", 0},     \
    {"intra-node-lat", FL_STR, &(l).intra_lat, "latency inside a node, s or with a unit (2us)", 0},             \
    {"gpus-per-node", FL_STR, &(l).gpus_per_node, "devices (ranks) per node", 0},                                \
    {"link", FL_STR, &(l).spec, "all at once: inter=BW[:LAT],intra=BW[:LAT],gpus-per-node=N", 0}
void cli_apply_links(pipit_hw *hw, const cli_links *l);
/* pipit sim --calibrate: the links this job has (pipit_probe_links;
 * collective under mpirun) into hw, and a line on stderr saying what. */
void cli_measure_links(pipit_hw *hw);

/* A named model: its kind, sizes and the defaults that go with them. */
typedef struct {
    const char *name;
    const char *arch; /* the model kind: "gpt2" or "llama" (tools/model.h) */
    int vocab, ctx, layers, heads, dim, micro_batch, steps;
    double lr;
    const char *about;
    int kv_heads, ffn_hidden, tied; /* Llama only */
    double norm_eps, rope_theta;
    int experts, top_k; /* Llama MoE (0: dense) */
} cli_preset;

/* The preset called `name`, or NULL (then cli_preset_names lists them). */
const cli_preset *cli_preset_find(const char *name);
/* "tiny, gpt2, ... or llama-100m" (static storage). */
const char *cli_preset_names(void);
int cli_preset_count(void);
const cli_preset *cli_preset_at(int i);

/* Reads --config FILE (a JSON object of flag names without "--" and their
 * values: numbers, strings, booleans) into the flags of c: each key sets
 * its flag and marks it seen, as if given on the command line before the
 * real flags. Keys in `skip` (NULL-terminated) are left alone. Dies naming
 * the file and the key for an unknown key (with a suggestion), a value of
 * the wrong type, or malformed JSON. */
void cli_config_apply(flag_cmd *c, const char *path, const char *const *skip);
/* The string value of `key` in the config file, or NULL (dies on a file
 * that is not a JSON object, or a non-string value). */
const char *cli_config_string(const char *path, const char *key);

/* --auto-stages (tools/auto_stages.c): cuts the yield-free model graph g
 * of cfg into `stages` stages for `sched` (NULL: one rank) with
 * pipit_partition (modelled costs at the default rates, or scaled by
 * `profile`, a profiled program of the same model; mem_limit bytes per
 * rank, 0: none),
 * rewrites g and *loss, and with `print` prints the cuts and per-stage
 * predicted costs, and the even split's for comparison. Dies with the
 * partition's message if it cannot. */
typedef struct {
    const pipit_schedule *sched;
    int stages;
    double mem_limit;
    const pipit_program *profile;
    int remat;
    int print;
} cli_auto_stages;
void cli_auto_stages_apply(const cli_auto_stages *a, const cli_model *cfg, pipit_graph *g, pipit_val *loss);

/* A note on stderr (process 0) when checkpoint ck, opened for --<flagname>,
 * carried no checksums (older pipit, Hugging Face and other writers): it
 * loads without an integrity check (tools/session.c). */
void cli_note_unverified(const pipit_checkpoint *ck, const char *flagname);
/* Notes (process 0, stderr) that a checkpoint's bf16 tensors load widened into fp32 masters. */
void cli_note_bf16(const pipit_checkpoint *ck, const char *flagname);

/* --device and --tf32 (tools/device.c): dies for a device other than cpu
 * or cuda ("did you mean"), --device cuda in a build without the cuda
 * backend or on a machine without a CUDA device, and --tf32 without
 * --device cuda. NULL is cpu. */
void cli_check_device(const char *device, int tf32);
/* --dtype: NULL or "f32" is PIPIT_F32, "bf16" PIPIT_BF16 (mixed precision:
 * pipit_options.dtype); dies naming the flag for anything else. */
pipit_dtype cli_dtype(const char *dtype, const char *device);
/* --bf16-policy: NULL or "autocast" is PIPIT_BF16_AUTOCAST, "all"
 * PIPIT_BF16_ALL (pipit_options.bf16_policy); dies naming the flag for
 * anything else. */
pipit_bf16_policy cli_bf16_policy(const char *policy);

/* --mem-limit BYTES (tools/device.c): one rule for every command that
 * takes it (train, eval, plan, plan --search). Not given (flag or
 * --config): 0, the caller's default. Given: a finite number of bytes from
 * 1 to 2^56 (0 is no limit: leave the flag out for the default), and,
 * where the command has a machine (`machine` > 0 bytes: what this process
 * may use for train and eval, one device of --hw for plan --search;
 * `machine_what` says which), at most that unless no_mem_check
 * (--no-mem-check). Dies naming the flag otherwise; returns the limit. */
double cli_mem_limit(const flag_cmd *c, double given, int no_mem_check, double machine, const char *machine_what);

/* tools/train_save.c. */
/* A checkpoint's metadata integer `key` in lo .. hi, strictly (digits, a
 * '-' only where lo < 0), or `absent` when the file lacks the key
 * (INT64_MIN: the key is required); dies naming --flagname, the file, the
 * key and the value. */
int64_t meta_i64(const pipit_checkpoint *ck, const char *flagname, const char *key, int64_t lo, int64_t hi,
                 int64_t absent);

/* tools/text_files.c. The whole file (dies naming --flagname and the path). */
char *cli_read_file(const char *flagname, const char *path, size_t *len);
/* A list of files: one existing file as is, else a comma-separated list of
 * paths and glob(3) patterns, in the order given (each pattern's matches
 * sorted); dies on an empty item or a pattern with no match. */
typedef struct {
    char **path;
    int n;
} cli_paths;
void cli_paths_expand(cli_paths *p, const char *flagname, const char *spec);
void cli_paths_free(cli_paths *p);
/* --tokenizer FILE [--merges FILE]: a tokenizer.json, GPT-2's vocab.json
 * with merges.txt, or a folder holding either; dies with the library's
 * message. */
pipit_tokenizer *cli_tokenizer_open(const char *path, const char *merges);
/* The ids of text[0 .. len-1] (*n of them; malloc'd); dies naming `what`. */
int32_t *cli_encode(const pipit_tokenizer *t, const char *what, const char *text, size_t len, size_t *n);

/* --recompute's value: none, pointwise or full (tools/cmd_sim.c); dies
 * naming the flag otherwise. The same numbers as pipit_options.remat. */
pipit_recompute pipit_cli_recompute(const char *s);

#endif
