/*
 * cmd_sim.c — `pipit sim`: the cost model and schedule simulator on a described
 * machine (pipit_sim.h): step time, TFLOP/s per GPU, MFU, bubble, memory
 * per rank and the messages on each link, for a transformer on a
 * tp x pp x dp mesh; nothing runs. `pipit sim --calibrate PROFILE` fits a
 * CPU description to a `pipit train --profile-out` file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "flags.h"
#include "pipit.h"
#include "pipit_llama.h"
#include "pipit_sim.h"

#include "commands.h"

/* --hw NAME|FILE, with the built-in names in the message of a typo. */
pipit_hw *pipit_cli_open_hw(const char *name);
pipit_hw *pipit_cli_open_hw(const char *name) {
    pipit_hw *hw = NULL;
    if (pipit_hw_load(name, &hw) == PIPIT_STATUS_OK) return hw;
    const char *cands[16];
    int n = 0;
    for (int i = 0; i < pipit_hw_builtin_count() && n < 16; i++) cands[n++] = pipit_hw_builtin_name(i);
    die("--hw: %s%s", pipit_errmsg(), cli_did_you_mean(name, cands, n, ""));
}

/* --schedule NAME: a built-in name (the cost model needs its generator). */
int pipit_cli_schedule_kind(const char *flagname, const char *name);
int pipit_cli_schedule_kind(const char *flagname, const char *name) {
    int kind = pipit_schedule_kind_from_name(name);
    if (kind >= 0) return kind;
    const char *cands[PIPIT_SCHED_COUNT];
    char names[256] = "";
    for (int k = 0; k < PIPIT_SCHED_COUNT; k++) {
        cands[k] = pipit_schedule_kind_name((pipit_schedule_kind)k);
        size_t u = strlen(names);
        snprintf(names + u, sizeof names - u, "%s%s", k ? ", " : "", cands[k]);
    }
    die("unknown schedule '%s' for --%s: expected one of %s%s", name, flagname, names,
        cli_did_you_mean(name, cands, PIPIT_SCHED_COUNT, ""));
}

pipit_recompute pipit_cli_recompute(const char *s) {
    if (strcmp(s, "none") == 0) return PIPIT_RECOMPUTE_NONE;
    if (strcmp(s, "full") == 0) return PIPIT_RECOMPUTE_FULL;
    if (strcmp(s, "pointwise") == 0) return PIPIT_RECOMPUTE_POINTWISE;
    die("bad value '%s' for --recompute: expected none, pointwise or full", s);
}

/* The CPU description fitted to the profile, with the links this job has
 * measured (under mpirun every process calls this; process 0 writes). */
static int calibrate(const char *profile, const char *out) {
    pipit_hw *hw = NULL;
    if (pipit_hw_calibrate(profile, &hw)) die("--calibrate: %s", pipit_errmsg());
    cli_measure_links(hw);
    if (pipit_process_rank() != 0) {
        pipit_hw_free(hw);
        return 0;
    }
    /* --out: written beside and renamed into place, so a failed write leaves no half file */
    char tmp[4096];
    if (out && snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid()) >= (int)sizeof tmp)
        die("--out: path too long");
    FILE *f = out ? fopen(tmp, "w") : stdout;
    if (!f) die("--out: cannot write '%s': %s", out, strerror(errno));
    pipit_status st = pipit_hw_write(f, hw);
    int bad_close = out && fclose(f);
    pipit_hw_free(hw);
    if (out && (st || bad_close || rename(tmp, out))) {
        int e = errno;
        remove(tmp);
        if (st) die("--calibrate: %s", pipit_errmsg());
        die("--out: writing '%s' failed: %s", out, strerror(e));
    }
    if (st) die("--calibrate: %s", pipit_errmsg());
    if (out) fprintf(stderr, "pipit: wrote the calibrated description to %s (use it with --hw %s)\n", out, out);
    return 0;
}

/* --arch: llama is SwiGLU (at Meta's width unless one is given) and RoPE. */
static void cli_sim_arch(const flag_cmd *cmd, const char *arch, pipit_sim_config *c) {
    if (strcmp(arch, "gpt") == 0) return;
    if (strcmp(arch, "llama")) die("bad value '%s' for --arch: expected gpt or llama", arch);
    c->gated_mlp = c->rope = c->no_dropout = 1;
    if (flags_seen(cmd, "ffn-hidden") || flags_seen(cmd, "ffn-mult") || c->hidden < 1) return;
    pipit_llama_config lc = {.dim = c->hidden, .multiple_of = 256};
    c->ffn_hidden = pipit_llama_ffn_hidden(&lc);
}

static pipit_sim_summary run_summary(const pipit_sim_config *c, const pipit_hw *hw, const char *what) {
    pipit_sim_report *r = NULL;
    if (pipit_sim_run(c, hw, &r)) die("sim: %s: %s", what, pipit_errmsg());
    pipit_sim_summary u;
    pipit_sim_report_summary(r, &u);
    pipit_sim_report_free(r);
    return u;
}

/* --weak-scaling D1,D2,...: the same pipeline (microbatches per replica
 * fixed) on more replicas; efficiency = TFLOP/s per GPU over the first's. */
static void weak_scaling(const pipit_sim_config *c0, const pipit_hw *hw, const char *list, int json) {
    if (c0->global_batch % c0->dp)
        die("--weak-scaling keeps the batch per replica: --global-batch %lld is not divisible by --dp %d",
            (long long)c0->global_batch, c0->dp);
    int64_t per_replica = c0->global_batch / c0->dp;
    size_t len = strlen(list); /* "", "2,,4" and "2,4," have an empty item */
    if (!len || list[0] == ',' || list[len - 1] == ',' || strstr(list, ",,"))
        die("bad value '%s' for --weak-scaling: expected data-parallel sizes like 2,4,8,16 (an item is empty)", list);
    double base = 0;
    if (!json)
        printf("%6s %4s %8s %10s %14s %10s %11s\n", "GPUs", "dp", "batch", "step s", "TFLOP/s/GPU", "efficiency",
               "DP hidden");
    for (const char *p = list; *p;) {
        char *end;
        long d = strtol(p, &end, 10);
        if (end == p || d < 1 || d > 1 << 20 || (*end && *end != ','))
            die("bad value '%s' for --weak-scaling: expected data-parallel sizes like 2,4,8,16", list);
        pipit_sim_config c = *c0;
        c.dp = (int)d, c.global_batch = per_replica * d;
        pipit_sim_summary u = run_summary(&c, hw, "--weak-scaling");
        if (base == 0) base = u.tflops_per_gpu;
        if (json)
            printf("{\"gpus\":%d,\"dp\":%ld,\"global_batch\":%lld,\"step_s\":%.9g,\"tflops_per_gpu\":%.6g,"
                   "\"efficiency\":%.6g,\"dp_total_s\":%.9g,\"dp_exposed_s\":%.9g,\"dp_hidden\":%.6g}\n",
                   u.gpus, d, (long long)c.global_batch, u.step_s, u.tflops_per_gpu, u.tflops_per_gpu / base,
                   u.dp_total_s, u.dp_s, u.dp_hidden);
        else
            printf("%6d %4ld %8lld %10.4f %14.1f %10.3f %10.1f%%\n", u.gpus, d, (long long)c.global_batch, u.step_s,
                   u.tflops_per_gpu, u.tflops_per_gpu / base, 100 * u.dp_hidden);
        p = *end ? end + 1 : end;
    }
}

/* --vs-gpipe: GPipe holding no more memory than this schedule: the most
 * microbatches per flush M' (a divisor of M) whose peak fits, run as M/M'
 * flushes (gradients accumulate across them; one DP exchange and update). */
static void vs_gpipe(const pipit_sim_config *c0, const pipit_hw *hw, const pipit_sim_summary *mine, int json) {
    int M = mine->microbatches;
    for (int m = M; m >= 1; m--) {
        if (M % m) continue;
        pipit_sim_config c = *c0;
        c.schedule = PIPIT_SCHED_GPIPE, c.virt = 1, c.global_batch = c0->global_batch / M * m;
        pipit_sim_summary g = run_summary(&c, hw, "--vs-gpipe");
        if (g.peak_bytes_per_rank > mine->peak_bytes_per_rank && m > 1) continue;
        double step = (double)(M / m) * g.pipeline_s + g.dp_s + g.optimizer_s;
        double gain = step / mine->step_s - 1;
        if (json)
            printf("{\"gpipe_microbatches_per_flush\":%d,\"gpipe_flushes\":%d,\"gpipe_step_s\":%.9g,"
                   "\"gpipe_peak_bytes_per_rank\":%.9g,\"step_s\":%.9g,\"gain\":%.6g}\n",
                   m, M / m, step, g.peak_bytes_per_rank, mine->step_s, gain);
        else
            printf("GPipe at equal memory: %d flush%s of %d microbatches, %.2f GiB peak, step %.4f s; this schedule's "
                   "step %.4f s is %.1f%% faster\n",
                   M / m, M / m == 1 ? "" : "es", m, g.peak_bytes_per_rank / (1024.0 * 1024 * 1024), step,
                   mine->step_s, 100 * gain);
        return;
    }
}

int cmd_sim(int argc, char **argv) {
    pipit_sim_config c = {.micro_batch = 1, .tp = 1, .pp = 1, .dp = 1, .ffn_mult = 0};
    const char *hw_name = NULL, *schedule = "1f1b", *recompute = "none", *cal = NULL, *out = NULL, *arch = "gpt";
    int json = 0, gpipe = 0;
    const char *scaling = NULL;
    cli_links links = {0};
    uint64_t global = 0;
    flag fl[] = {
        {"layers", FL_INT, &c.layers, "transformer layers L", 0},
        {"hidden", FL_INT, &c.hidden, "hidden size h", 0},
        {"heads", FL_INT, &c.heads, "attention heads a", 0},
        {"seq", FL_INT, &c.seq, "sequence length s", 0},
        {"vocab", FL_INT, &c.vocab, "vocabulary size V", 0},
        {"arch", FL_STR, &arch, "gpt (default: GELU MLP of 4 x hidden, learned positions) or llama (SwiGLU of "
                                "--ffn-hidden, default Meta's rule 256 x ceil(int(8h/3) / 256); RoPE)", 0},
        {"ffn-mult", FL_DBL, &c.ffn_mult, "MLP width / hidden (default 4)", 0},
        {"ffn-hidden", FL_INT, &c.ffn_hidden, "MLP width F (instead of --ffn-mult)", 0},
        {"swiglu", FL_BOOL, &c.gated_mlp, "gated MLP (Llama: three matrices) instead of GELU (GPT)", 0},
        {"ends-as-layers", FL_BOOL, &c.ends_as_layers, "cut the stages as if the embedding and the head were a "
                                                        "layer each (Llama 3: the first and last stage one layer fewer)", 0},
        {"kv-heads", FL_INT, &c.kv_heads, "key/value heads of grouped-query attention, dividing --heads (default: --heads)", 0},
        {"unfused-attention", FL_BOOL, &c.unfused_attention, "the [s,s] scores through memory, the whole square "
                                                              "computed (Megatron-LM 2021) instead of flash-style "
                                                              "kernels as pipit's", 0},
        {"micro-batch", FL_INT, &c.micro_batch, "sequences per microbatch b (default 1)", 0},
        {"global-batch", FL_U64, &global, "sequences per step B = b x M x dp", 0},
        {"tp", FL_INT, &c.tp, "tensor-parallel GPUs per stage t (default 1)", 0},
        {"pp", FL_INT, &c.pp, "pipeline ranks p (default 1)", 0},
        {"dp", FL_INT, &c.dp, "data-parallel replicas d (default 1)", 0},
        {"schedule", FL_STR, &schedule, "a built-in schedule name (default 1f1b)", 0},
        {"virtual", FL_INT, &c.virt, "stages per pipeline rank V (default: the schedule's own)", 0},
        {"recompute", FL_STR, &recompute, "none (default), pointwise (GELU/SiLU outputs and their products again in the backward) or full activation recomputation", 0},
        {"zero1", FL_BOOL, &c.zero1, "shard the optimizer state over dp (ZeRO-1)", 0},
        {"zero", FL_INT, &c.zero1, "ZeRO stage 0..3 over dp (2: and the gradients, 3: and the parameters)", 0},
        {"reshard-after-forward", FL_BOOL, &c.reshard_after_forward, "with --zero 3: each param gathered per "
                                                                       "task that reads it (as train's flag)", 0},
        {"dp-after-flush", FL_BOOL, &c.dp_after_flush, "the DP exchange after each rank's last task (Megatron-LM 2021) "
                                                        "instead of during the backward", 0},
        {"blocking-p2p", FL_BOOL, &c.blocking_p2p, "stage messages occupy their sender (Megatron's blocking P2P) "
                                                    "instead of their link", 0},
        {"eager-limit", FL_DBL, &c.eager_limit, "bytes: a stage message larger than this moves only once its "
                                                 "receiver waits for it (MPI rendezvous; Open MPI over TCP: 65536); "
                                                 "default 0: every message leaves when sent", 0},
        {"scatter-gather-p2p", FL_BOOL, &c.scatter_gather_p2p, "with --tp: each GPU sends 1/t of a stage message and the "
                                                                "next stage all-gathers it (Megatron) instead of the whole", 0},
        {"sp", FL_BOOL, &c.sp, "with --tp: sequence parallelism (Megatron): norms, residuals and dropouts hold 1/t of "
                               "the sequence, all-reduces become all-gather + reduce-scatter, stage messages 1/t", 0},
        {"cp", FL_INT, &c.cp, "context-parallel ranks c per stage (default 1): each holds 2 of the sequence's 2c chunks, "
                              "K and V all-gathered per layer; GPUs = t x c x p x d", 0},
        {"experts", FL_INT, &c.experts, "MoE: routed experts E per MoE layer (default 0: dense)", 0},
        {"top-k", FL_INT, &c.top_k, "MoE: experts per token, 1..--experts (default 2)", 0},
        {"shared-experts", FL_INT, &c.shared_experts, "MoE: always-on experts beside the routed ones (default 0)", 0},
        {"moe-every", FL_INT, &c.moe_every, "MoE: every K-th layer's MLP is MoE (default 1: all)", 0},
        {"capacity-factor", FL_DBL, &c.capacity_factor, "MoE: slots per expert = ceil(F x tokens x k / E) (default 1.25)", 0},
        {"dropless", FL_BOOL, &c.dropless, "MoE: every expert has a slot for every token (pipit's --dropless)", 0},
        {"expert-ffn-hidden", FL_INT, &c.expert_ffn, "MoE: width of one expert (default: the MLP width)", 0},
        {"ep", FL_INT, &c.ep, "MoE: expert-parallel ranks, dividing --dp and --experts (default 1)", 0},
        {"no-dropout", FL_BOOL, &c.no_dropout, "no dropout masks kept or written (--arch llama sets it)", 0},
        {"dtype", FL_STR, &c.dtype, "training dtype fp32|tf32|bf16|fp16 (default: the hardware's)", 0},
        {"hw", FL_STR, &hw_name, "a100|h100|h200|cpu or a hardware JSON file (docs/sim.md)", 0},
        CLI_LINK_FLAGS(links),
        {"json", FL_BOOL, &json, "print one JSON object", 0},
        {"weak-scaling", FL_STR, &scaling, "D1,D2,...: the same pipeline on dp = D1, D2, ... (microbatches per replica fixed): "
                                           "TFLOP/s per GPU and efficiency over the first", 0},
        {"vs-gpipe", FL_BOOL, &gpipe, "also print GPipe at equal memory (flushes of fewer microbatches) and the gain over it", 0},
        {"calibrate", FL_STR, &cal, "fit the CPU description to a `pipit train --profile-out` file and measure the "
                                    "links (under mpirun: between its processes); print it", 0},
        {"out", FL_STR, &out, "with --calibrate: write the description to FILE", 0},
    };
    flag_cmd cmd = {"sim",
                    "--layers L --hidden H --heads A [--kv-heads K] --seq S --vocab V [--arch gpt|llama]\n"
                    "       --micro-batch b --global-batch B\n"
                    "       --tp t --pp p --dp d --schedule NAME [--virtual v] [--recompute none|pointwise|full] --hw NAME|FILE [--json]\n"
                    "       [--sp] [--cp c] [--experts E --top-k k --shared-experts S --moe-every N --capacity-factor F\n"
                    "        | --dropless] [--expert-ffn-hidden F] [--ep e]\n"
                    "       [--link inter=BW[:LAT],intra=BW[:LAT],gpus-per-node=N | --inter-node-bw BW ...]\n"
                    "   or: pipit sim --calibrate PROFILE [--out FILE]",
                    "Predicts one training step (time, TFLOP/s per GPU, MFU, bubble, memory per rank, link traffic)\n"
                    "from a cost model and the schedule simulator; nothing runs. docs/sim.md has the formulas.",
                    fl, NFLAGS(fl)};
    flags_parse(&cmd, argc, argv);
    if (cal) {
        for (int i = 0; i < cmd.n; i++)
            if (fl[i].seen && strcmp(fl[i].name, "calibrate") && strcmp(fl[i].name, "out"))
                die("sim: --calibrate takes only --out (got --%s)", fl[i].name);
        return calibrate(cal, out);
    }
    if (out) die("sim: --out goes with --calibrate");
    flags_require(&cmd, (const char *const[]){"layers", "hidden", "heads", "seq", "vocab", "global-batch", "hw", NULL});
    if (global > (uint64_t)INT64_MAX) die("--global-batch %llu is too large", (unsigned long long)global);
    c.global_batch = (int64_t)global;
    if (flags_seen(&cmd, "cp") && c.cp < 1) die("--cp must be >= 1 (got %d)", c.cp);
    if (flags_seen(&cmd, "ep") && c.ep < 1) die("--ep must be >= 1 (got %d)", c.ep);
    if (flags_seen(&cmd, "experts") && c.experts < 1) die("--experts must be >= 1 (got %d; leave it out for a dense model)", c.experts);
    if (flags_seen(&cmd, "capacity-factor") && !(c.capacity_factor > 0))
        die("--capacity-factor must be > 0 (got %g): slots per expert = ceil(F x tokens x k / E)", c.capacity_factor);
    cli_sim_arch(&cmd, arch, &c);
    c.schedule = pipit_cli_schedule_kind("schedule", schedule);
    c.recompute = pipit_cli_recompute(recompute);
    pipit_hw *hw = pipit_cli_open_hw(hw_name);
    cli_apply_links(hw, &links);
    if (scaling) {
        weak_scaling(&c, hw, scaling, json);
        pipit_hw_free(hw);
        return 0;
    }
    pipit_sim_report *r = NULL;
    if (pipit_sim_run(&c, hw, &r)) die("sim: %s", pipit_errmsg());
    pipit_status st = json ? pipit_sim_report_write_json(stdout, r) : pipit_sim_report_print(stdout, r);
    if (st) die("sim: %s", pipit_errmsg());
    pipit_sim_summary mine;
    pipit_sim_report_summary(r, &mine);
    pipit_sim_report_free(r);
    if (gpipe) {
        if (!json) printf("\n");
        vs_gpipe(&c, hw, &mine, json);
    }
    pipit_hw_free(hw);
    return 0;
}
