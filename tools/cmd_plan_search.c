/*
 * cmd_plan_search.c — `pipit plan --search`: every schedule x V x microbatch
 * size x recompute (x ZeRO stage when dp > 1, stage 3 also with
 * reshard_after_forward) (x pp x tp x dp for a GPU count) that fits the
 * memory limit,
 * simulated with the cost model (pipit_sim.h) and ranked by step time; the
 * best few are printed with bubble and memory, and the rejected ones
 * counted by reason (each one with --verbose), with the vocabulary padding
 * that would let the tensor-parallel degrees it rejected through.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "flags.h"
#include "pipit.h"
#include "pipit_sim.h"

#include "commands.h"
/* tools/cmd_sim.c */
pipit_hw *pipit_cli_open_hw(const char *name);

enum { R_LAYERS, R_TP, R_SEQ, R_SCHEDULE, R_MEMORY, R_OTHER, R_COUNT };
static const char *const REASON[R_COUNT] = {
    "more stages (pp x V) than layers", "heads, kv heads, hidden or vocab not divisible by tp",
    "seq not divisible by 2 x cp (or, with sp, seq / cp by tp)",
    "the schedule does not accept this P, V, M", "over the memory limit", "other"};

typedef struct {
    pipit_sim_config c;
    pipit_sim_summary u;
    int order; /* enumeration order: ties keep it */
} candidate;

typedef struct {
    candidate *fit;
    int nfit, cap, ncand, rejected[R_COUNT], verbose;
    double mem_limit;
    int64_t vocab_lcm; /* lcm of the tp degrees rejected for the vocabulary alone (1: none) */
    int vocab_tps[32], nvocab_tps; /* those degrees, as met (the first 32) */
} search;

static const char *remat_name(const pipit_sim_config *c) { return pipit_recompute_name(c->recompute); }

static int cp1(const pipit_sim_config *c) { return c->cp > 1 ? c->cp : 1; }
static int ep1(const pipit_sim_config *c) { return c->ep > 1 ? c->ep : 1; }

/* the ZeRO column: the stage, "3r" for ZeRO-3 with --reshard-after-forward */
static const char *zero_name(const pipit_sim_config *c) {
    static const char *const Z[] = {"0", "1", "2", "3"};
    return c->reshard_after_forward ? "3r" : Z[c->zero1 & 3];
}

static void describe(char *buf, size_t n, const pipit_sim_config *c) {
    snprintf(buf, n, "%s pp=%d V=%d M=%lld b=%d tp=%d%s cp=%d dp=%d ep=%d zero=%s remat=%s",
             pipit_schedule_kind_name((pipit_schedule_kind)c->schedule), c->pp, c->virt,
             (long long)(c->global_batch / ((int64_t)c->micro_batch * c->dp)), c->micro_batch, c->tp,
             c->sp ? "+sp" : "", cp1(c), c->dp, ep1(c), zero_name(c), remat_name(c));
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

/* The smallest vocabulary >= V that every degree the search rejected for
 * the vocabulary alone divides: padding V with unused rows (as nanoGPT's
 * 50304 for GPT-2's 50257) lets them through. */
static int64_t padded_vocab(int64_t V, int64_t lcm) { return (V + lcm - 1) / lcm * lcm; }

static void reject(search *s, const pipit_sim_config *c, int why, const char *detail) {
    s->rejected[why]++;
    if (!s->verbose) return;
    char d[128];
    describe(d, sizeof d, c);
    printf("rejected  %-44s %s%s%s\n", d, REASON[why], detail ? ": " : "", detail ? detail : "");
}

/* Simulates one candidate, keeps it when it fits; returns its peak
 * (HUGE_VAL when it was not simulated). A candidate whose peak is not below
 * below_peak is dropped without a trace (reshard_after_forward where it
 * lowers nothing: a 16-bit dtype's loop reads its copies). */
static double try_one(search *s, const pipit_sim_config *c, const pipit_hw *hw, double below_peak) {
    s->ncand++;
    if (c->pp * c->virt > c->layers) return reject(s, c, R_LAYERS, NULL), HUGE_VAL;
    if (c->heads % c->tp || c->hidden % c->tp || (c->kv_heads ? c->kv_heads : c->heads) % c->tp)
        return reject(s, c, R_TP, NULL), HUGE_VAL;
    if (c->seq % (cp1(c) > 1 ? 2 * cp1(c) : 1) || (c->sp && (c->seq / cp1(c)) % c->tp))
        return reject(s, c, R_SEQ, NULL), HUGE_VAL;
    if (c->vocab % c->tp) { /* only the vocabulary: padding it would allow this tp */
        int seen = 0;
        for (int i = 0; i < s->nvocab_tps; i++) seen |= s->vocab_tps[i] == c->tp;
        if (!seen && s->nvocab_tps < 32) s->vocab_tps[s->nvocab_tps++] = c->tp;
        if (s->vocab_lcm < (int64_t)1 << 40) s->vocab_lcm = s->vocab_lcm / gcd64(s->vocab_lcm, c->tp) * c->tp;
        char d[96];
        snprintf(d, sizeof d, "vocab %d is not a multiple of tp %d (--vocab %lld would be)", c->vocab, c->tp,
                 (long long)padded_vocab(c->vocab, c->tp));
        return reject(s, c, R_TP, d), HUGE_VAL;
    }
    pipit_sim_report *r = NULL;
    pipit_status st = pipit_sim_run(c, hw, &r);
    if (st) return reject(s, c, st == PIPIT_STATUS_SCHEDULE ? R_SCHEDULE : R_OTHER, pipit_errmsg()), HUGE_VAL;
    candidate k = {.c = *c, .order = s->ncand};
    pipit_sim_report_summary(r, &k.u);
    pipit_sim_report_free(r);
    if (!(k.u.peak_bytes_per_rank < below_peak)) return s->ncand--, HUGE_VAL;
    if (k.u.peak_bytes_per_rank > s->mem_limit) {
        char d[64];
        snprintf(d, sizeof d, "%.3g GB > %.3g GB", k.u.peak_bytes_per_rank / 1e9, s->mem_limit / 1e9);
        reject(s, c, R_MEMORY, d);
        return k.u.peak_bytes_per_rank;
    }
    if (s->nfit == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        candidate *nf = realloc(s->fit, sizeof *nf * (size_t)cap);
        if (!nf) die("out of memory");
        s->fit = nf, s->cap = cap;
    }
    s->fit[s->nfit++] = k;
    return k.u.peak_bytes_per_rank;
}

static int by_step(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->u.step_s != y->u.step_s) return x->u.step_s < y->u.step_s ? -1 : 1;
    /* as fast: the one that holds less (ZeRO-1 before 2 and 3, whose peaks add the kept shards; ZeRO-3
     * with reshard_after_forward holds less than all of them, and is slower: its gathers per task) */
    if (x->u.peak_bytes_per_rank != y->u.peak_bytes_per_rank)
        return x->u.peak_bytes_per_rank < y->u.peak_bytes_per_rank ? -1 : 1;
    return x->order - y->order;
}

/* schedule x V x micro-batch x recompute (x ZeRO stage when dp > 1) for one
 * (tp, dp); a recompute or ZeRO stage < 0 is searched, else fixed. */
static void enumerate_pipeline(search *s, pipit_sim_config c, const pipit_hw *hw, int recompute, int zero, int sp,
                               int ep) {
    if (c.global_batch % c.dp) return;
    /* sequence parallelism searched at tp > 1 (unless fixed); expert
     * parallelism over the divisors of dp that divide the experts (unless
     * fixed): each a copy of the rest of the search */
    if (sp < 0 && c.tp > 1) {
        enumerate_pipeline(s, c, hw, recompute, zero, 0, ep);
        enumerate_pipeline(s, c, hw, recompute, zero, 1, ep);
        return;
    }
    c.sp = sp > 0 && c.tp > 1;
    if (ep < 0 && c.experts > 0) {
        for (int e = 1; e <= c.dp; e++)
            if (c.dp % e == 0 && c.experts % e == 0) enumerate_pipeline(s, c, hw, recompute, zero, c.sp, e);
        return;
    }
    c.ep = ep > 0 ? ep : 1;
    int64_t per_replica = c.global_batch / c.dp;
    int z0 = zero >= 0 ? zero : 0, z1 = zero >= 0 ? zero : c.dp > 1 ? 3 : 0;
    int r0 = recompute >= 0 ? recompute : 0, r1 = recompute >= 0 ? recompute : PIPIT_RECOMPUTE_POINTWISE;
    for (int k = 0; k < PIPIT_SCHED_COUNT; k++)
        for (int v = 1; v <= c.layers / c.pp; v++)
            for (int64_t b = 1; b <= per_replica && b <= 1 << 16; b++) {
                if (per_replica % b) continue;
                for (int r = r0; r <= r1; r++)
                    for (int z = z0; z <= z1; z++) {
                        c.schedule = k, c.virt = v, c.micro_batch = (int)b;
                        c.recompute = (pipit_recompute)r, c.zero1 = z, c.reshard_after_forward = 0;
                        double peak = try_one(s, &c, hw, HUGE_VAL);
                        /* ZeRO-3 per task (--reshard-after-forward): where it lowers the peak */
                        if (z == 3 && c.dp * cp1(&c) > 1 && peak < HUGE_VAL) {
                            c.reshard_after_forward = 1;
                            try_one(s, &c, hw, peak);
                        }
                    }
            }
}

/* "2, 4, 8": the tp degrees rejected for the vocabulary alone. */
static void vocab_note(const search *s, char *out, size_t n) {
    size_t u = 0;
    out[0] = 0;
    for (int i = 0; i < s->nvocab_tps && u + 16 < n; i++)
        u += (size_t)snprintf(out + u, n - u, "%s%d", i ? ", " : "", s->vocab_tps[i]);
}

static void print_best(const search *s, int top, int json, int vocab) {
    int n = s->nfit < top ? s->nfit : top;
    char tps[256];
    vocab_note(s, tps, sizeof tps);
    if (json) {
        printf("{\"candidates\":%d,\"fit\":%d,\"rejected\":{", s->ncand, s->nfit);
        for (int i = 0; i < R_COUNT; i++) printf("%s\"%s\":%d", i ? "," : "", REASON[i], s->rejected[i]);
        if (s->vocab_lcm > 1)
            printf("},\"vocab_padding\":{\"vocab\":%lld,\"tp\":[%s]", (long long)padded_vocab(vocab, s->vocab_lcm),
                   tps);
        printf("},\"best\":[");
        for (int i = 0; i < n; i++) {
            const candidate *k = &s->fit[i];
            printf("%s{\"schedule\":\"%s\",\"pp\":%d,\"virtual\":%d,\"microbatches\":%d,\"micro_batch\":%d,\"tp\":%d,"
                   "\"sp\":%s,\"cp\":%d,\"dp\":%d,\"ep\":%d,\"zero\":%d,\"reshard_after_forward\":%s,"
                   "\"recompute\":\"%s\",\"step_s\":%.9g,"
                   "\"bubble\":%.6g,\"peak_bytes_per_rank\":%.9g,\"tflops_per_gpu\":%.6g}",
                   i ? "," : "", pipit_schedule_kind_name((pipit_schedule_kind)k->c.schedule), k->c.pp, k->c.virt,
                   k->u.microbatches, k->c.micro_batch, k->c.tp, k->c.sp ? "true" : "false", cp1(&k->c), k->c.dp,
                   ep1(&k->c), k->c.zero1, k->c.reshard_after_forward ? "true" : "false", remat_name(&k->c),
                   k->u.step_s, k->u.bubble, k->u.peak_bytes_per_rank,
                   k->u.tflops_per_gpu);
        }
        printf("]}\n");
        return;
    }
    printf("%d candidates: %d fit, %d rejected\n", s->ncand, s->nfit, s->ncand - s->nfit);
    for (int i = 0; i < R_COUNT; i++)
        if (s->rejected[i]) printf("  %6d  %s\n", s->rejected[i], REASON[i]);
    if (s->vocab_lcm > 1)
        printf("  note: tp %s divide%s everything but the vocabulary (%d): --vocab %lld (padded with %lld unused rows) "
               "would allow %s\n",
               tps, strchr(tps, ',') ? "" : "s", vocab, (long long)padded_vocab(vocab, s->vocab_lcm),
               (long long)(padded_vocab(vocab, s->vocab_lcm) - vocab), strchr(tps, ',') ? "them" : "it");
    if (!n) return; /* the caller says why, and fails */
    /* the best, then the runner-ups: what else fits, each with its peak and step time */
    printf("\n%4s  %-18s %3s %3s %5s %4s %3s %2s %3s %4s %3s %4s %5s %10s %8s %10s %12s\n", "rank", "schedule", "pp", "V",
           "M", "b", "tp", "sp", "cp", "dp", "ep", "zero", "remat", "step s", "bubble", "peak GB", "TFLOP/s/GPU");
    for (int i = 0; i < n; i++) {
        const candidate *k = &s->fit[i];
        printf("%4d  %-18s %3d %3d %5d %4d %3d %2s %3d %4d %3d %4s %5s %10.5g %7.1f%% %10.4g %12.4g\n", i + 1,
               pipit_schedule_kind_name((pipit_schedule_kind)k->c.schedule), k->c.pp, k->c.virt, k->u.microbatches,
               k->c.micro_batch, k->c.tp, k->c.sp ? "y" : "n", cp1(&k->c), k->c.dp, ep1(&k->c), zero_name(&k->c),
               remat_name(&k->c), k->u.step_s, 100 * k->u.bubble, k->u.peak_bytes_per_rank / 1e9, k->u.tflops_per_gpu);
    }
    if (n > 1) printf("(rank 1 is the plan; 2..%d are the runner-ups that fit, by step time)\n", n);
    for (int i = 0; i < n; i++)
        if (s->fit[i].c.reshard_after_forward) {
            printf("(zero 3r: ZeRO-3 with --reshard-after-forward, each param gathered per task that reads it)\n");
            break;
        }
}

int cmd_plan_search(int argc, char **argv) {
    const char *model = "tiny", *hw_name = "cpu", *recompute = NULL;
    int layers = 0, heads = 0, kv_heads = 0, dim = 0, ctx = 0, vocab = 0, pp = 1, dp = 1, gpus = 0, top = 5, json = 0;
    int on = 0, verbose = 0, zero1 = 0, zero = -1, no_mem_check = 0, sp = 0, no_sp = 0, cp = 0, ep = 0;
    int experts = -1, top_k = 0, shared = 0, moe_every = 0, dropless = 0;
    double capacity = 0;
    uint64_t global = 0;
    double mem_limit = 0, eager_limit = 0;
    cli_links links = {0};
    flag fl[] = {
        {"search", FL_BOOL, &on, "rank schedule x V x microbatch size x recompute (x ZeRO stage at dp > 1, x sp at tp > 1, x ep "
                             "with --experts, x pp x tp x cp x dp with --gpus) by "
                             "simulated step time", 0},
        {"global-batch", FL_U64, &global, "sequences per step G = micro-batch x M x dp", 0},
        {"mem-limit", FL_DBL, &mem_limit, "bytes a rank may hold (default: the memory of one device of --hw; at "
                                          "most that without --no-mem-check)", 0},
        {"no-mem-check", FL_BOOL, &no_mem_check, "rank every candidate whatever its memory (no --mem-limit is "
                                                 "checked)", 0},
        {"hw", FL_STR, &hw_name, "a100|h100|h200|cpu (default) or a hardware JSON file", 0},
        CLI_LINK_FLAGS(links),
        {"eager-limit", FL_DBL, &eager_limit, "bytes: stage messages above it are MPI rendezvous (as pipit sim)", 0},
        {"model", FL_STR, &model, "preset: tiny (default), gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-tiny, llama-100m", 0},
        {"layers", FL_INT, &layers, "transformer blocks L (default: the preset's)", 0},
        {"heads", FL_INT, &heads, "attention heads (default: the preset's)", 0},
        {"kv-heads", FL_INT, &kv_heads, "key/value heads of grouped-query attention, dividing --heads (default: the "
                                        "preset's, else --heads)", 0},
        {"dim", FL_INT, &dim, "model width (default: the preset's)", 0},
        {"ctx", FL_INT, &ctx, "sequence length (default: the preset's)", 0},
        {"vocab", FL_INT, &vocab, "vocabulary size (default: the preset's)", 0},
        {"pp", FL_INT, &pp, "pipeline ranks P (default 1; with --gpus: searched unless given)", 0},
        {"dp", FL_INT, &dp, "data-parallel replicas (default 1; with --gpus: searched)", 0},
        {"gpus", FL_INT, &gpus, "search pp x tp x dp = GPUS too (pp fixed when --pp is given)", 0},
        {"recompute", FL_STR, &recompute, "none or full (default: both searched)", 0},
        {"zero1", FL_BOOL, &zero1, "shard the optimizer state over dp (= --zero 1)", 0},
        {"zero", FL_INT, &zero, "ZeRO stage 0..3 (default: 0..3 searched when dp > 1, 0 at dp 1; stage 3 also "
                                "with --reshard-after-forward, where that lowers the peak: zero 3r)", 0},
        {"sp", FL_BOOL, &sp, "sequence parallelism at every tp > 1 (default: searched, with and without)", 0},
        {"no-sp", FL_BOOL, &no_sp, "no sequence parallelism (default: searched)", 0},
        {"cp", FL_INT, &cp, "context-parallel ranks per stage (default 1; with --gpus: searched over the divisors "
                            "c with seq % 2c = 0)", 0},
        {"experts", FL_INT, &experts, "MoE: routed experts per MoE layer (default: the preset's, 0 dense)", 0},
        {"top-k", FL_INT, &top_k, "MoE: experts per token (default: the preset's, else 2)", 0},
        {"shared-experts", FL_INT, &shared, "MoE: always-on experts (default 0)", 0},
        {"moe-every", FL_INT, &moe_every, "MoE: every K-th layer's MLP is MoE (default 1)", 0},
        {"capacity-factor", FL_DBL, &capacity, "MoE: slots per expert = ceil(F x tokens x k / E) (default 1.25)", 0},
        {"dropless", FL_BOOL, &dropless, "MoE: a slot per token in every expert", 0},
        {"ep", FL_INT, &ep, "MoE: expert-parallel ranks (default: searched over the divisors of dp and the experts)", 0},
        {"top", FL_INT, &top, "how many of the best to print (default 5)", 0},
        {"verbose", FL_BOOL, &verbose, "print every rejected combination and why", 0},
        {"json", FL_BOOL, &json, "print one JSON object", 0},
    };
    flag_cmd c = {"plan", "--search --global-batch G [--mem-limit BYTES] [--hw NAME|FILE] [--model NAME | --layers L ...]\n"
                          "       [--kv-heads K] [--pp P] [--dp D | --gpus N] [--recompute none|full] [--zero N] [--top K]\n"
                          "       [--sp | --no-sp] [--cp C] [--experts E --top-k k --shared-experts S --moe-every N\n"
                          "        --capacity-factor F | --dropless] [--ep E]\n"
                          "       [--verbose] [--json]\n"
                          "       [--link inter=BW[:LAT],intra=BW[:LAT],gpus-per-node=N | --inter-node-bw BW ...] [--eager-limit BYTES]",
                  "Searches schedule x V x microbatch size x recompute (x ZeRO stage at dp > 1, x pp x tp x dp\n"
                  "with --gpus) with the cost model of `pipit sim`, ranks what fits by simulated step time (the\n"
                  "runner-ups listed with their peak memory), says why the rest were rejected (and which --vocab\n"
                  "padding would let a tp through); nothing runs.",
                  fl, NFLAGS(fl)};
    flags_parse(&c, argc, argv);
    flags_require(&c, (const char *const[]){"global-batch", NULL});
    const cli_preset *pr = cli_preset_find(model);
    if (!pr) die("unknown --model '%s': expected %s", model, cli_preset_names());
    if (global < 1 || global > (1u << 30)) die("--global-batch must be in [1, 2^30] (got %llu)", (unsigned long long)global);
    if (top < 1) die("--top must be >= 1 (got %d)", top);
    if (!(eager_limit >= 0)) die("--eager-limit must be >= 0 bytes (got %g)", eager_limit);
    const struct { const char *flag; int v; } pos[] = {{"pp", pp}, {"dp", dp}, {"layers", layers}, {"heads", heads},
                                                      {"dim", dim}, {"ctx", ctx}, {"vocab", vocab}, {"gpus", gpus},
                                                      {"kv-heads", kv_heads}};
    for (int i = 0; i < NFLAGS(pos); i++) /* given flags only: 0 means "the preset's" for the model's */
        if (flags_seen(&c, pos[i].flag) && pos[i].v < 1) die("--%s must be >= 1 (got %d)", pos[i].flag, pos[i].v);
    if (gpus && flags_seen(&c, "dp")) die("--gpus searches dp: do not give --dp too");
    if (flags_seen(&c, "zero") && (zero < 0 || zero > 3)) die("--zero must be 0, 1, 2 or 3 (got %d)", zero);
    if (flags_seen(&c, "zero") && zero1 && zero != 1) die("--zero1 is --zero 1: do not give --zero %d too", zero);
    if (zero1) zero = 1;
    int remat = recompute ? (int)pipit_cli_recompute(recompute) : -1;
    if (gpus && flags_seen(&c, "pp") && gpus % pp) die("--gpus %d is not a multiple of --pp %d", gpus, pp);
    if (sp && no_sp) die("--sp and --no-sp: give one (neither: both searched)");
    if (flags_seen(&c, "cp") && cp < 1) die("--cp must be >= 1 (got %d)", cp);
    if (gpus && flags_seen(&c, "cp") && gpus % cp) die("--gpus %d is not a multiple of --cp %d", gpus, cp);
    if (flags_seen(&c, "experts") && experts < 0) die("--experts must be >= 0 (got %d)", experts);
    int E = experts >= 0 ? experts : pr->experts;
    {
        const char *moe_only[] = {"top-k", "shared-experts", "moe-every", "capacity-factor", "dropless", "ep"};
        for (int i = 0; i < NFLAGS(moe_only); i++)
            if (!E && flags_seen(&c, moe_only[i])) die("--%s is a mixture-of-experts flag: give --experts too", moe_only[i]);
    }
    int K = top_k ? top_k : pr->top_k ? pr->top_k : 2;
    if (E && (K < 1 || K > E)) die("--top-k must be in 1..--experts %d (got %d)", E, K);
    if (shared < 0 || moe_every < 0) die("--%s must be >= 0 (got %d)", shared < 0 ? "shared-experts" : "moe-every",
                                         shared < 0 ? shared : moe_every);
    if (flags_seen(&c, "capacity-factor") && !(capacity > 0)) die("--capacity-factor must be > 0 (got %g)", capacity);
    if (flags_seen(&c, "ep") && (ep < 1 || E % ep))
        die("--ep %d must be >= 1 and divide --experts %d (each rank holds whole experts)", ep, E);
    if (flags_seen(&c, "ep") && !gpus && dp % ep) die("--ep %d does not divide --dp %d (the expert-parallel ranks are "
                                                      "taken from the data-parallel group)", ep, dp);
    pipit_hw *hw = pipit_cli_open_hw(hw_name);
    cli_apply_links(hw, &links);
    char what[160];
    snprintf(what, sizeof what, "the memory of one device of --hw %s", hw_name);
    search s = {.verbose = verbose, .vocab_lcm = 1,
                .mem_limit = cli_mem_limit(&c, mem_limit, no_mem_check, pipit_hw_mem_capacity(hw), what)};
    int llama = strcmp(pr->arch, "llama") == 0;
    if (E && !llama) die("--experts: the MoE layers are the Llama builder's: give a Llama --model (llama-tiny, moe-tiny ...)");
    int H = heads ? heads : pr->heads, KV = kv_heads ? kv_heads : llama ? pr->kv_heads : 0;
    if (KV && H % KV) die("--kv-heads %d does not divide --heads %d (each key/value head serves --heads / --kv-heads query heads)", KV, H);
    pipit_sim_config base = {.layers = layers ? layers : pr->layers, .hidden = dim ? dim : pr->dim,
                             .heads = H, .seq = ctx ? ctx : pr->ctx,
                             .vocab = vocab ? vocab : pr->vocab, .global_batch = (int64_t)global,
                             /* a Llama preset: SwiGLU at its width, grouped-query heads, RoPE */
                             .gated_mlp = llama, .ffn_hidden = llama ? pr->ffn_hidden : 0,
                             .kv_heads = KV, .rope = llama, .no_dropout = llama,
                             .cp = cp > 1 ? cp : 1, .experts = E, .top_k = E ? K : 0, .shared_experts = E ? shared : 0,
                             .moe_every = E ? moe_every : 0, .capacity_factor = E ? capacity : 0,
                             .dropless = E ? dropless : 0,
                             .pp = pp, .tp = 1, .dp = dp,
                             .eager_limit = eager_limit};
    if (!flags_seen(&c, "mem-limit")) s.mem_limit = pipit_hw_mem_capacity(hw);
    if (no_mem_check) s.mem_limit = HUGE_VAL; /* as train's: no memory check at all */
    int spm = sp ? 1 : no_sp ? 0 : -1, epm = flags_seen(&c, "ep") ? ep : -1;
    if (gpus) { /* pp x tp x cp x dp = gpus: pp searched over the divisors unless given, cp unless given */
        for (int p = 1; p <= gpus; p++) {
            if (gpus % p || (flags_seen(&c, "pp") && p != pp)) continue;
            for (int t = 1; t <= gpus / p; t++)
                for (int k = 1; (gpus / p) % t == 0 && k <= gpus / p / t; k++) {
                    if ((gpus / p / t) % k || (flags_seen(&c, "cp") && k != cp)) continue;
                    if (k > 1 && base.seq % (2 * k)) continue; /* no such cut of the sequence */
                    base.pp = p, base.tp = t, base.cp = k, base.dp = gpus / p / t / k;
                    if (epm > 0 && base.dp % epm) continue;
                    enumerate_pipeline(&s, base, hw, remat, zero, spm, epm);
                }
        }
    } else {
        enumerate_pipeline(&s, base, hw, remat, zero, spm, epm);
    }
    if (s.nfit) qsort(s.fit, (size_t)s.nfit, sizeof *s.fit, by_step); /* s.fit is NULL when nothing fits */
    print_best(&s, top, json, base.vocab);
    free(s.fit);
    pipit_hw_free(hw);
    if (!s.nfit) /* an answer of nothing is not a success: scripts must see it */
        die("plan --search: none of the %d candidates fits (raise --mem-limit, add --pp or --gpus, or see --verbose)",
            s.ncand);
    return 0;
}
