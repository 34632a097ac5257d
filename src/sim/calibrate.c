/*
 * calibrate.c — fits a CPU hardware description to a measured profile
 * (`pipit train --profile-out FILE`): the cost model's own counts for the
 * profiled model (GEMM FLOPs, attention FLOPs, elementwise bytes, found by
 * running it on machines where only one term costs anything) divided by
 * the measured seconds of the matching ops give the effective GEMM FLOP/s
 * at two sizes and the effective elementwise bandwidth. A profile of a
 * tensor-parallel run (--tp T) sums its T ranks' shares of the model (the
 * counts are the whole model's) and leaves out the all-reduces. docs/sim.md,
 * "Calibration", says what is measured and what is assumed.
 */
#include <cJSON.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "sim/sim.h"
#include "util/common.h"
#include "util/fileio.h"

typedef struct {
    pipit_sim_config cfg;
    int64_t steps;
    double step_s;
    double t_matmul, t_attn, t_elem, t_opt; /* measured seconds per step, summed over ranks */
} profile;

static pipit_status bad(const char *path, const char *what) {
    return pipit__err(PIPIT_STATUS_FORMAT, "profile '%s': %s (write it with `pipit train --profile-out FILE`)", path,
                      what);
}

static int get_int(const cJSON *o, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1 << 30 || v->valuedouble != floor(v->valuedouble))
        return 0;
    *out = (int)v->valuedouble;
    return 1;
}

/* A profile's microbatches per step: the fit simulates its step many times
 * (a fuzzed 15.5 million took the fuzzer's 25 s and more) */
#define PROFILE_MAX_MICROBATCHES 65536

static int read_model(const cJSON *root, profile *p) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    int mb = 0;
    pipit_sim_config *c = &p->cfg;
    if (!cJSON_IsObject(m) || !get_int(m, "layers", &c->layers) || !get_int(m, "dim", &c->hidden) ||
        !get_int(m, "heads", &c->heads) || !get_int(m, "ctx", &c->seq) || !get_int(m, "vocab", &c->vocab) ||
        !get_int(m, "micro_batch", &c->micro_batch) || !get_int(m, "microbatches", &mb))
        return 0;
    c->global_batch = (int64_t)c->micro_batch * mb;
    /* a Llama profile: SwiGLU at its width, grouped-query heads, RoPE */
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(m, "arch");
    if (cJSON_IsString(arch) && strcmp(arch->valuestring, "llama") == 0) {
        c->gated_mlp = c->rope = 1;
        if (!get_int(m, "kv_heads", &c->kv_heads) || !get_int(m, "ffn_hidden", &c->ffn_hidden)) return 0;
    }
    c->tp = c->pp = c->dp = 1;
    c->schedule = PIPIT_SCHED_GPIPE;
    c->dtype = "fp32";
    return 1;
}

/* A measured time: a finite number of seconds >= 0. */
static int seconds(const cJSON *v) { return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= 0; }

/* Adds one rank's op seconds into the measured classes; 0 and the key at
 * *why for a time that is not a time. */
static int add_rank(const cJSON *rank, profile *p, const char **why) {
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(rank, "ops");
    if (!cJSON_IsObject(rank) || (ops && !cJSON_IsObject(ops))) return *why = "ranks", 0;
    for (const cJSON *e = ops ? ops->child : NULL; e; e = e->next) {
        if (!seconds(e)) return *why = e->string, 0;
        double s = e->valuedouble;
        if (strcmp(e->string, "matmul") == 0) p->t_matmul += s;
        else if (!strcmp(e->string, "tp_copy") || !strcmp(e->string, "tp_sum") || !strcmp(e->string, "tp_max") ||
                 !strncmp(e->string, "sp_", 3))
            continue; /* the in-stage all-reduce (--tp; --sp's gather/scatter): the links' time, measured apart,
                       * not an elementwise op's */
        else if (strcmp(e->string, "attention") == 0 || strcmp(e->string, "attn_dqkv") == 0 ||
                 strcmp(e->string, "attention_qkv") == 0 || strcmp(e->string, "attn_qkv_d") == 0)
            p->t_attn += s;
        else p->t_elem += s;
    }
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(rank, "instructions");
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(ins, "optimizer update");
    if (opt && !seconds(opt)) return *why = "optimizer update", 0;
    if (opt) p->t_opt += opt->valuedouble;
    return 1;
}

static pipit_status parse_profile(const char *path, const char *text, profile *p) {
    cJSON *root = cJSON_ParseWithOpts(text, NULL, 1); /* 1: nothing may follow the object */
    pipit_status st = PIPIT_STATUS_OK;
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(root, "steps");
    const cJSON *step_s = cJSON_GetObjectItemCaseSensitive(root, "step_s");
    const cJSON *prof = cJSON_GetObjectItemCaseSensitive(root, "profile");
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(prof, "ranks");
    char dup[256], msg[320];
    const char *why = NULL;
    if (!cJSON_IsObject(root)) st = bad(path, "not a JSON object (or text follows it)");
    else if (pipit__json_dup_key(root, dup, sizeof dup))
        st = (snprintf(msg, sizeof msg, "key \"%s\" appears twice (which one was meant?)", dup), bad(path, msg));
    else if (!read_model(root, p))
        st = bad(path, "\"model\" lacks layers, dim, heads, ctx, vocab, micro_batch or microbatches (or, for arch "
                       "llama, kv_heads or ffn_hidden)");
    else if (p->cfg.micro_batch > 0 && p->cfg.global_batch / p->cfg.micro_batch > PROFILE_MAX_MICROBATCHES)
        st = bad(path, "\"microbatches\" is more than 65536: no measured step has that many (the fit simulates each "
                       "profile's step many times)");
    else if (!cJSON_IsNumber(steps) || !(steps->valuedouble >= 1 && steps->valuedouble <= 9007199254740992.0) ||
             steps->valuedouble != floor(steps->valuedouble))
        st = bad(path, "\"steps\" must be a whole number in 1 .. 2^53"); /* before any conversion to an integer */
    else if (step_s && !seconds(step_s)) st = bad(path, "\"step_s\" must be a finite number of seconds >= 0");
    else if (!cJSON_IsArray(ranks) || cJSON_GetArraySize(ranks) < 1) st = bad(path, "\"profile\" has no \"ranks\"");
    if (!st) {
        p->steps = (int64_t)steps->valuedouble;
        p->step_s = step_s ? step_s->valuedouble : 0;
        for (const cJSON *r = ranks->child; r && !st; r = r->next)
            if (!add_rank(r, p, &why))
                st = (snprintf(msg, sizeof msg, "\"%s\" in \"profile.ranks\" is not a finite number of seconds >= 0",
                               why), bad(path, msg));
    }
    if (!st) {
        double n = (double)p->steps;
        p->t_matmul /= n, p->t_attn /= n, p->t_elem /= n, p->t_opt /= n;
        if (!(p->t_matmul > 0) || !(p->t_elem > 0)) st = bad(path, "no time in matmul or in elementwise ops");
    }
    cJSON_Delete(root);
    return st;
}

/* A machine on which only compute (peak 1 FLOP/s) or only memory (1 B/s)
 * costs anything: the busy time of one rank is then the count itself. */
static void probe_hw(pipit_hw *hw, int compute) {
    memset(hw, 0, sizeof *hw);
    snprintf(hw->name, sizeof hw->name, "probe");
    hw->peak[HW_FP32] = compute ? 1.0 : 1e300;
    hw->train_dtype = HW_FP32;
    hw->ncurve = 1, hw->curve_dim[0] = 1, hw->curve_eff[0] = 1;
    hw->mem_bw = compute ? 1e300 : 1.0;
    hw->mem_eff = 1, hw->mem_cap = 1e300, hw->gpus_per_node = 1;
    hw->intra_bw = hw->inter_bw = 1e300;
}

static pipit_status count(const pipit_sim_config *c, int compute, double *out) {
    pipit_hw hw;
    probe_hw(&hw, compute);
    pipit_sim_report *r = NULL;
    pipit_status st = pipit_sim_run(c, &hw, &r);
    if (st) return st;
    *out = pipit_sim_report_rank_busy(r, 0);
    pipit_sim_report_free(r);
    return PIPIT_STATUS_OK;
}

/* Effective rates -> the description: peak = the faster of the two GEMM
 * classes, the curve through both sizes. */
static void fill_hw(pipit_hw *hw, const profile *p, double r_mm, double dim_mm, double r_attn, double dim_attn,
                    double bw) {
    snprintf(hw->name, sizeof hw->name, "cpu");
    hw->train_dtype = HW_FP32;
    if (r_attn > 0 && dim_attn < dim_mm) {
        double peak = fmax(r_mm, r_attn);
        hw->peak[HW_FP32] = peak;
        hw->ncurve = 2;
        hw->curve_dim[0] = dim_attn, hw->curve_eff[0] = r_attn / peak;
        hw->curve_dim[1] = dim_mm, hw->curve_eff[1] = r_mm / peak;
    } else {
        hw->peak[HW_FP32] = r_mm;
        hw->ncurve = 1, hw->curve_dim[0] = dim_mm, hw->curve_eff[0] = 1;
    }
    hw->mem_bw = bw, hw->mem_eff = 1;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE), cpus = sysconf(_SC_NPROCESSORS_ONLN);
    hw->mem_cap = pages > 0 && psize > 0 ? (double)pages * (double)psize : 8e9;
    hw->gpus_per_node = cpus > 0 ? (int)cpus : 1;
    /* ranks are threads of one process: a message is a malloc + memcpy and a
     * condition-variable wake-up (assumed 20 us); across machines, MPI over
     * TCP (assumed 1 GB/s, 50 us: not measured by a single-process profile) */
    hw->intra_bw = bw, hw->intra_lat = 2e-5;
    hw->inter_bw = 1e9, hw->inter_lat = 5e-5;
    (void)p;
}

static char *about_text(const char *path, const profile *p) {
    char buf[512];
    snprintf(buf, sizeof buf,
             "this machine, calibrated by `pipit sim --calibrate %s` from %lld profiled steps of %s (%d layers, dim "
             "%d, %d heads, ctx %d, vocab %d, micro-batch %d, %lld microbatches; measured step %.4f s)",
             path, (long long)p->steps, p->cfg.gated_mlp ? "Llama" : "GPT-2", p->cfg.layers, p->cfg.hidden,
             p->cfg.heads, p->cfg.seq, p->cfg.vocab, p->cfg.micro_batch, (long long)(p->cfg.global_batch / p->cfg.micro_batch), p->step_s);
    return pipit__strdup(buf);
}

static pipit_status fit(const char *path, const profile *p, pipit_hw **out) {
    double flops = 0, bytes = 0;
    pipit_status st = count(&p->cfg, 1, &flops);
    if (!st) st = count(&p->cfg, 0, &bytes);
    if (st) return st;
    const pipit_sim_config *c = &p->cfg;
    double f_attn = pipit__sim_attn_flops(c); /* scores and context, as the kernels compute them */
    double f_mm = flops - f_attn;
    double r_attn = p->t_attn > 0 ? f_attn / p->t_attn : 0;
    if (!(f_mm > 0)) return bad(path, "the model has no GEMM work outside attention");
    double dim_mm = fmin((double)c->micro_batch * c->seq, (double)c->hidden), dim_attn = (double)c->hidden / c->heads;
    pipit_hw *hw = pipit__calloc(1, sizeof *hw);
    if (!hw) return pipit__err(PIPIT_STATUS_NOMEM, "calibrate: out of memory");
    fill_hw(hw, p, f_mm / p->t_matmul, dim_mm, r_attn, dim_attn, bytes / p->t_elem);
    double rates[] = {hw->peak[HW_FP32], hw->mem_bw, hw->curve_eff[0]};
    for (int i = 0; i < 3; i++)
        if (!(rates[i] > 0) || !isfinite(rates[i])) { /* a description the cost model cannot use: say so here */
            pipit_hw_free(hw);
            return bad(path, "its times give no usable rate (a GEMM rate or a bandwidth of 0 or infinity): are the "
                             "times in seconds, and of this model?");
        }
    hw->about = about_text(path, p);
    hw->sources_json = pipit__strdup(
        "[\"measured: matmul seconds over the cost model's GEMM FLOPs (outside attention) give the peak at the "
        "layers' smallest GEMM dimension; attention + attn_dqkv seconds over 12 b s^2 h per layer give the point at "
        "the head dimension; all other ops' seconds over the cost model's elementwise bytes give mem_bandwidth\"]");
    if (!hw->about || !hw->sources_json) {
        pipit_hw_free(hw);
        return pipit__err(PIPIT_STATUS_NOMEM, "calibrate: out of memory");
    }
    *out = hw;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_hw_calibrate(const char *profile_path, pipit_hw **out) {
    if (!profile_path || !out) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_hw_calibrate: NULL %s", out ? "path" : "out");
    *out = NULL;
    unsigned long gen0 = pipit__err_gen();
    char *text = NULL;
    pipit_status st = pipit__read_text(profile_path, "profile", &text);
    profile p = {0};
    if (!st) st = parse_profile(profile_path, text, &p);
    pipit__free(text);
    if (!st) st = fit(profile_path, &p, out);
    return st ? pipit__err_fresh(st, gen0, __func__) : PIPIT_STATUS_OK;
}
