/*
 * print_config.c — `pipit train --print-config` (and plan's): the resolved
 * settings as one JSON object whose keys are the flags' names, so that
 * `--config` takes it back as it is. Every flag of the command's table is
 * printed (walked from the table, so a new flag is printed without a word
 * here) except --config and --print-config themselves; "params", the
 * parameter count, is information: --config skips it.
 *
 * A flag is printed with its resolved value (the model's sizes, the lr
 * schedule's decay, a Llama's kv heads and MLP width), or left out when
 * leaving it out means the same: a string not set, a switch that is off,
 * and the numbers whose 0 means "not set" (below) — written out, a few of
 * those would ask for something else (--eval-every 0 is refused, and
 * --val-split 0 is a validation split of nothing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipit_llama.h"
#include "train_cli.h"

static void json_key(const char *k, int *first) {
    printf("%s\"%s\":", *first ? "{" : ",", k);
    *first = 0;
}
static void json_str(const char *k, const char *v, int *first) {
    if (!v) return;
    json_key(k, first);
    putchar('"');
    for (; *v; v++) {
        if (*v == '"' || *v == '\\') putchar('\\');
        if ((unsigned char)*v < 0x20) printf("\\u%04x", *v);
        else putchar(*v);
    }
    putchar('"');
}
static void json_num(const char *k, double v, int *first) {
    json_key(k, first);
    char buf[32];
    if (fabs(v) < 9007199254740992.0 && v == (double)(int64_t)v) /* integers as integers */
        snprintf(buf, sizeof buf, "%lld", (long long)v);
    else
        for (int digits = 6; digits <= 17; digits++) { /* the shortest text that reads back as v */
            snprintf(buf, sizeof buf, "%.*g", digits, v);
            if (strtod(buf, NULL) == v) break;
        }
    fputs(buf, stdout);
}

/* Numbers whose 0 is their "not set" (the default they stand for is
 * derived elsewhere): printed only when set. */
static const char *const UNSET_AT_0[] = {"val-split", "eval-every", "eval-batches", "virtual",
                                         "mem-limit", "stage-mem-limit", "peak-flops", "ffn-dim-multiplier"};
static int unset_at_0(const char *name) {
    for (int i = 0; i < NFLAGS(UNSET_AT_0); i++)
        if (strcmp(name, UNSET_AT_0[i]) == 0) return 1;
    return 0;
}

/* The Llama flags: printed for a Llama model only (refused for others). */
static int llama_only(const char *name) {
    static const char *const ll[] = {"kv-heads", "ffn-hidden", "multiple-of", "ffn-dim-multiplier",
                                     "norm-eps", "rope-theta", "tied", "untied"};
    for (int i = 0; i < NFLAGS(ll); i++)
        if (strcmp(name, ll[i]) == 0) return 1;
    return 0;
}

/* The resolved value of the flags that have one: 1 if `f` was printed (or
 * is to be left out), 0 to print its value as parsed. */
static int print_resolved(const flag *f, const opts *o, const cli_model *mc,
                          const pipit_lr_schedule *ls, int *first) {
    static const char *const kinds[] = {"constant", "cosine", "linear"};
    const char *k = f->name;
    int llama = strcmp(mc->kind->name, "llama") == 0;
    if (strcmp(k, "config") == 0 || strcmp(k, "print-config") == 0) return 1;
    if (llama_only(k) && !llama) return 1;
    static const char *const moe[] = {"experts", "top-k", "capacity-factor", "dropless", "shared-experts",
                                      "moe-every", "router", "aux-loss", "balance-bias"};
    for (int i = 0; i < NFLAGS(moe); i++) /* MoE: printed resolved for an MoE model only */
        if (strcmp(k, moe[i]) == 0) {
            if (!mc->experts || (i == 2 && mc->dropless)) return 1;
            if (i == 1) json_num(k, mc->top_k, first);
            else if (i == 2) json_num(k, mc->capacity_factor, first);
            else if (i == 5) json_num(k, mc->moe_every > 1 ? mc->moe_every : 1, first);
            else if (i == 6) json_str(k, mc->router ? "sigmoid" : "softmax", first);
            else return 0;
            return 1;
        }
    if (strcmp(k, "model") == 0) return 1; /* printed first */
    const struct {
        const char *k;
        double v;
    } sizes[] = {{"vocab", mc->vocab}, {"ctx", mc->ctx}, {"max-ctx", mc->max_ctx}, {"layers", mc->layers},
                 {"heads", mc->heads}, {"dim", mc->dim}, {"micro-batch", mc->batch},
                 {"warmup", (double)ls->warmup}, {"kv-heads", mc->kv_heads ? mc->kv_heads : mc->heads}};
    for (int i = 0; i < NFLAGS(sizes); i++)
        if (strcmp(k, sizes[i].k) == 0) return json_num(k, sizes[i].v, first), 1;
    if (strcmp(k, "ffn-hidden") == 0) {
        pipit_llama_config lc = {.dim = mc->dim, .ffn_hidden = mc->ffn_hidden, .multiple_of = mc->multiple_of,
                                 .ffn_dim_multiplier = mc->ffn_dim_multiplier};
        return json_num(k, pipit_llama_ffn_hidden(&lc), first), 1;
    }
    if (strcmp(k, "tied") == 0 || strcmp(k, "untied") == 0) { /* the one that holds (both would contradict) */
        if ((strcmp(k, "tied") == 0) == (mc->tied != 0)) json_key(k, first), printf("true");
        return 1;
    }
    if (strcmp(k, "lr-schedule") == 0) return json_str(k, kinds[ls->kind], first), 1;
    if (strcmp(k, "decay-steps") == 0 || strcmp(k, "min-lr") == 0) { /* a constant schedule takes neither */
        if (ls->kind != PIPIT_LR_CONSTANT)
            json_num(k, k[0] == 'd' ? (double)ls->decay_steps : ls->min_lr, first);
        return 1;
    }
    if (strcmp(k, "doc-sep") == 0 && o->doc_sep < 0) return 1; /* -1: none, as leaving it out */
    if (strcmp(k, "dtype") == 0) return json_str(k, o->dtype ? o->dtype : "f32", first), 1;
    if (strcmp(k, "bf16-policy") == 0) return json_str(k, o->bf16_policy ? o->bf16_policy : "autocast", first), 1;
    /* --stage-costs and --stage-mem-limit are refused without --auto-stages */
    if ((strcmp(k, "stage-costs") == 0 || strcmp(k, "stage-mem-limit") == 0) && !o->auto_stages) return 1;
    return 0;
}

void print_train_config(const train_args *a) {
    const opts *o = &a->o;
    check_model_flags(o, &a->c);
    cli_model mc = model_config(o, 1);
    pipit_lr_schedule ls = make_lr_schedule(o);
    int first = 1;
    json_str("model", a->model ? a->model : "tiny", &first); /* first: what the rest is relative to */
    for (int i = 0; i < a->c.n; i++) {
        const flag *f = &a->c.flags[i];
        if (print_resolved(f, o, &mc, &ls, &first)) continue;
        switch (f->type) {
        case FL_INT:
            if (*(const int *)f->ptr != 0 || !unset_at_0(f->name)) json_num(f->name, *(const int *)f->ptr, &first);
            break;
        case FL_DBL:
            if (*(const double *)f->ptr != 0 || !unset_at_0(f->name)) json_num(f->name, *(const double *)f->ptr, &first);
            break;
        case FL_U64:
            json_key(f->name, &first);
            printf("%llu", (unsigned long long)*(const uint64_t *)f->ptr);
            break;
        case FL_STR: json_str(f->name, *(const char *const *)f->ptr, &first); break;
        case FL_BOOL:
            if (*(const int *)f->ptr) json_key(f->name, &first), printf("true");
            break;
        }
    }
    int64_t params = mc.kind->num_params(&mc);
    if (params <= 0) die("--print-config: %s", pipit_errmsg());
    json_num("params", (double)params, &first);
    printf("}\n");
}
