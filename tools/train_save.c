/*
 * train_save.c — training checkpoints from the CLI's side: the metadata a
 * run writes (step, data position, model and training config), where the
 * saves go (--keep's numbered copies, stale temp files of killed runs, a
 * writable --save checked before step 0), and --resume, which reads the
 * run's config back and checks the flags against it.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"
#include "train_cli.h"

/* A weights-only checkpoint: the params and the model's fields; rounded to
 * bf16 when the run computes in bf16 (--dtype bf16: weights for inference
 * tools; a training checkpoint keeps the fp32 masters). */
void save_checkpoint(const pipit_program *p, const cli_model *c, const char *path, pipit_dtype dt) {
    cli_model_meta mm;
    cli_model_meta_fill(c, &mm);
    const char *meta[2 + NFLAGS(mm.kv) + 1] = {"format", "pt"};
    memcpy(meta + 2, mm.kv, sizeof(char *) * (size_t)mm.n);
    meta[2 + mm.n] = NULL;
    cli_check(pipit_checkpoint_save_as(p, path, meta, dt), "save");
}

/* The folder of path ("." when it has none) and its last component. */
static const char *path_dir(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, n, ".");
        return path;
    }
    snprintf(dir, n, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return slash + 1;
}

/* 1 and *v if s is "<prefix><digits>". */
static int digits_after(const char *s, const char *prefix, size_t plen, long long *v) {
    if (strncmp(s, prefix, plen) != 0 || !s[plen]) return 0;
    long long x = 0;
    for (const char *c = s + plen; *c; c++) {
        if (*c < '0' || *c > '9' || x > (long long)1e15) return 0;
        x = x * 10 + (*c - '0');
    }
    *v = x;
    return 1;
}

/* Removes "<path>.tmp.<pid>" files (the safetensors writer's temp names)
 * whose process is gone: what a killed save left. */
void remove_stale_temps(const char *path) {
    char dir[4096], pre[4200], full[8400];
    const char *base = path_dir(path, dir, sizeof dir);
    snprintf(pre, sizeof pre, "%s.tmp.", base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    long long pid;
    while ((e = readdir(d)))
        if (digits_after(e->d_name, pre, strlen(pre), &pid) && pid > 0 && pid != (long long)getpid() &&
            kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
            if (unlink(full) == 0) fprintf(stderr, "pipit: removed stale temporary file %s\n", full);
        }
    closedir(d);
}

/* Dies unless a file can be created (and removed) beside path: checked
 * before step 0 rather than found out after the last step. */
void check_writable(const char *flagname, const char *path) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) die("--%s '%s': cannot create a file there: %s", flagname, path, strerror(errno));
    close(fd);
    unlink(tmp);
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

static int cmp_desc(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* --keep N: the save just written at path also becomes "<path>.step<s>"
 * (a hard link, else a copy is skipped with a note); the newest N of those
 * stay, older ones are removed. */
static void keep_saves(const char *path, int64_t step, int keep) {
    if (keep < 1) return;
    char dir[4096], name[4200], pre[4200], full[8400];
    const char *base = path_dir(path, dir, sizeof dir);
    snprintf(name, sizeof name, "%s.step%lld", path, (long long)step);
    unlink(name);
    if (link(path, name) != 0) fprintf(stderr, "pipit: --keep: cannot link %s: %s\n", name, strerror(errno));
    snprintf(pre, sizeof pre, "%s.step", base);
    DIR *d = opendir(dir);
    if (!d) return;
    long long *steps = NULL, v;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (digits_after(e->d_name, pre, strlen(pre), &v)) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                long long *grown = realloc(steps, cap * sizeof *steps);
                if (!grown) break;
                steps = grown;
            }
            steps[n++] = v;
        }
    closedir(d);
    qsort(steps, n, sizeof *steps, cmp_desc);
    for (size_t i = (size_t)keep; i < n; i++) {
        snprintf(full, sizeof full, "%s.step%lld", path, steps[i]);
        unlink(full);
    }
    free(steps);
    fsync_dir(dir);
}

void say_saved(const opts *o, const char *path, int64_t step) {
    if (pipit_process_rank() != 0) return;
    cli_bar_clear();
    fprintf(o->json ? stderr : stdout, "saved %s (step %lld)\n", path, (long long)step);
    fflush(o->json ? stderr : stdout);
}

/* The metadata of a training checkpoint: key, value pairs, numbers printed
 * into the list's own buffers. */
typedef struct {
    const char *kv[128];
    int n, k;
    char num[40][48];
} meta_list;

static void meta_str(meta_list *m, const char *key, const char *val) {
    if (m->n + 3 > (int)(sizeof m->kv / sizeof m->kv[0])) die("internal: checkpoint metadata list too small");
    m->kv[m->n++] = key;
    m->kv[m->n++] = val;
    m->kv[m->n] = NULL;
}

static void meta_num(meta_list *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void meta_num(meta_list *m, const char *key, const char *fmt, ...) {
    if (m->k == (int)(sizeof m->num / sizeof m->num[0])) die("internal: checkpoint metadata list too small");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->num[m->k], sizeof m->num[m->k], fmt, ap);
    va_end(ap);
    meta_str(m, key, m->num[m->k++]);
}

/* The training checkpoint: params, moments, and (metadata) the step, the
 * data position, the model and the training config. Collective. */
void save_train(const opts *o, const pipit_program *p, const cli_model *c, const char *path, run_pos r) {
    /* the schedule as resolved for this run, so a resume follows the same curve */
    pipit_lr_schedule ls = make_lr_schedule(o);
    int constant = ls.kind == PIPIT_LR_CONSTANT;
    meta_list m = {.n = 0};
    meta_str(&m, "format", "pt");
    cli_model_meta mm; /* "model" (the kind) and the model's fields */
    cli_model_meta_fill(c, &mm);
    for (int i = 0; i < mm.n; i += 2) meta_str(&m, mm.kv[i], mm.kv[i + 1]);
    meta_str(&m, "lr_schedule", o->lr_schedule);
    meta_num(&m, "warmup", "%d", o->warmup);
    meta_num(&m, "decay_steps", "%lld", constant ? -1LL : (long long)ls.decay_steps);
    meta_num(&m, "min_lr", "%.17g", constant ? -1.0 : ls.min_lr);
    meta_str(&m, "optimizer", o->optimizer);
    meta_num(&m, "lr", "%.17g", o->lr);
    meta_num(&m, "beta1", "%.17g", o->beta1);
    meta_num(&m, "beta2", "%.17g", o->beta2);
    meta_num(&m, "eps", "%.17g", o->eps);
    meta_num(&m, "weight_decay", "%.17g", o->wd);
    meta_num(&m, "clip", "%.17g", o->clip);
    meta_num(&m, "micro_batch", "%d", o->micro_batch);
    meta_num(&m, "microbatches", "%d", o->microbatches);
    meta_num(&m, "dp", "%d", o->dp);
    meta_num(&m, "tp", "%d", o->tp);
    meta_num(&m, "seed", "%llu", (unsigned long long)o->seed);
    meta_str(&m, "data", o->data);
    meta_str(&m, "data_order", o->data_order);
    meta_str(&m, "dtype", o->dtype ? o->dtype : "f32");
    meta_str(&m, "bf16_policy", o->bf16_policy ? o->bf16_policy : "autocast");
    meta_num(&m, "fused_head", "%d", o->fused_head);
    meta_num(&m, "doc_sep", "%d", o->doc_sep); /* -1: no packed documents */
    meta_num(&m, "doc_pos_reset", "%d", o->doc_pos_reset);
    meta_num(&m, "steps", "%lld", (long long)r.total);
    meta_num(&m, "data_pos", "%lld", (long long)r.data_pos);
    meta_num(&m, "save_every", "%d", o->save_every);
    meta_num(&m, "keep", "%d", o->keep);
    /* validation and logging, so that --resume alone validates and logs as the run did */
    meta_str(&m, "data_format", o->data_format ? o->data_format : "auto");
    meta_str(&m, "val_data", o->val_data ? o->val_data : "");
    meta_num(&m, "val_split", "%.17g", o->val_split);
    meta_num(&m, "eval_every", "%d", o->eval_every);
    meta_num(&m, "eval_batches", "%d", o->eval_batches);
    meta_num(&m, "log_every", "%d", o->log_every);
    cli_check(pipit_checkpoint_save_train(p, path, r.step, m.kv), "save");
    if (pipit_process_rank() == 0) keep_saves(path, r.step, o->keep);
    say_saved(o, path, r.step);
}

/* Strict numbers from a checkpoint's metadata: what save_train printed,
 * nothing else ("-1" for an unsigned seed, "1e3", " 7" or "7x" are errors). */
static int parse_i64(const char *v, int64_t lo, int64_t hi, int64_t *out) {
    const char *c = v + (*v == '-' && lo < 0);
    int64_t x = 0;
    if (!*c) return 0;
    for (; *c; c++)
        if (*c < '0' || *c > '9' || __builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *c - '0', &x)) return 0;
    if (*v == '-') x = -x;
    if (x < lo || x > hi) return 0;
    *out = x;
    return 1;
}

static int parse_u64(const char *v, uint64_t *out) {
    uint64_t x = 0;
    if (!*v) return 0;
    for (const char *c = v; *c; c++)
        if (*c < '0' || *c > '9' || __builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, (uint64_t)(*c - '0'), &x))
            return 0;
    *out = x;
    return 1;
}

static int parse_f64(const char *v, double *out) {
    char *end = NULL;
    if (!*v || isspace((unsigned char)*v)) return 0;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *end || !isfinite(x)) return 0;
    *out = x;
    return 1;
}

int64_t meta_i64(const pipit_checkpoint *ck, const char *flagname, const char *key, int64_t lo, int64_t hi,
                 int64_t absent) {
    const char *v = pipit_checkpoint_meta(ck, key);
    int64_t x;
    if (!v && absent != INT64_MIN) return absent;
    if (!v) die("--%s: checkpoint '%s' lacks metadata '%s'", flagname, pipit_checkpoint_path(ck), key);
    if (!parse_i64(v, lo, hi, &x))
        die("--%s: checkpoint '%s': metadata '%s' is '%.40s', not an integer in %lld .. %lld", flagname,
            pipit_checkpoint_path(ck), key, v, (long long)lo, (long long)hi);
    return x;
}

/* One key of the training config in a checkpoint and the flag it stands for. */
typedef struct {
    const char *flag, *key;
    flag_type type;
    void *dst;
    int layout;       /* may differ from the file (layout, paths, run length, logging) */
    int64_t lo, hi;   /* integers: the range save_train writes */
    const char *none; /* optional key (older files lack it); this value means "not set" */
} resume_key;

/* The file's value of k (strictly parsed) into *dst unless the flag was
 * given; a given flag that differs dies, unless it is a layout flag. */
static void resume_one(opts *o, flag_cmd *c, const pipit_checkpoint *file, const resume_key *k) {
    const char *path = o->resume, *v = pipit_checkpoint_meta(file, k->key);
    if (!v && k->none) return;
    if (!v) die("--resume: checkpoint '%s' lacks metadata '%s'", path, k->key);
    char given[64];
    int same = 1, seen = flags_seen(c, k->flag), ok = 1;
    switch (k->type) {
    case FL_INT: {
        int64_t x = 0;
        ok = parse_i64(v, k->lo, k->hi, &x);
        snprintf(given, sizeof given, "%d", *(int *)k->dst);
        same = *(int *)k->dst == (int)x;
        if (ok && !seen) *(int *)k->dst = (int)x;
        break;
    }
    case FL_U64: {
        uint64_t x = 0;
        ok = parse_u64(v, &x);
        snprintf(given, sizeof given, "%llu", (unsigned long long)*(uint64_t *)k->dst);
        same = *(uint64_t *)k->dst == x;
        if (ok && !seen) *(uint64_t *)k->dst = x;
        break;
    }
    case FL_DBL: {
        double x = 0;
        ok = parse_f64(v, &x);
        snprintf(given, sizeof given, "%.17g", *(double *)k->dst);
        same = *(double *)k->dst == x;
        if (ok && !seen) *(double *)k->dst = x;
        break;
    }
    default: {
        const char *cur = *(const char **)k->dst;
        snprintf(given, sizeof given, "%.60s", cur ? cur : "");
        same = cur && strcmp(cur, v) == 0;
        if (!seen) *(const char **)k->dst = v; /* the checkpoint stays open */
        break;
    }
    }
    if (!ok && k->type == FL_INT)
        die("--resume: checkpoint '%s': metadata '%s' is '%.40s', not an integer in %lld .. %lld", path, k->key, v,
            (long long)k->lo, (long long)k->hi);
    if (!ok)
        die("--resume: checkpoint '%s': metadata '%s' is '%.40s', not %s", path, k->key, v,
            k->type == FL_U64 ? "a non-negative integer" : "a number");
    if (seen && !same && !k->layout)
        die("--%s %s contradicts checkpoint '%s' (%s %s)", k->flag, given, path, k->key, v);
    /* a setting the file has counts as given: validation and logging then
     * behave as in the run that saved it */
    if (!seen && k->none && strcmp(v, k->none) != 0) flags_set_seen(c, k->flag);
}

/* The checkpoint's global batch is M x D microbatches: a new --dp keeps it
 * by changing --microbatches (given or not), or is refused. */
static void keep_global_batch(opts *o, const flag_cmd *c) {
    int64_t global = (int64_t)o->resume_microbatches * o->resume_dp;
    check_positive("dp", o->dp);
    if (o->dp == o->resume_dp && o->microbatches == o->resume_microbatches) return;
    if (!flags_seen(c, "microbatches") && global % o->dp == 0) {
        o->microbatches = (int)(global / o->dp);
        return;
    }
    if ((int64_t)o->microbatches * o->dp == global) return;
    die("--resume: --dp %d x --microbatches %d is not the global batch of checkpoint '%s' (--dp %d x --microbatches %d "
        "= %lld microbatches of --micro-batch %d)%s",
        o->dp, o->microbatches, o->resume, o->resume_dp, o->resume_microbatches, (long long)global, o->micro_batch,
        flags_seen(c, "microbatches") ? ""
                                      : ": pick a --dp that divides it (the microbatches per replica follow)");
}

/* --resume FILE: the model and training config come from the file; a flag
 * given as well must agree with it, except the layout flags (--pp, --tp,
 * --virtual, --schedule, --dp with --microbatches keeping the global
 * batch, --zero1, --threads, --remat, --recompute, --device, --tf32), --data and
 * --val-data (the same data may have moved), --steps (the new total),
 * --save, --save-every, --keep and the logging and validation cadence
 * (--log-every, --eval-every, --eval-batches). */
void apply_resume(opts *o, flag_cmd *c, pipit_checkpoint **ck, int64_t *step_out) {
    const char *path = o->resume;
    if (o->init || o->init_opt || o->save_opt || o->weights_only)
        die("--resume continues a training checkpoint: it takes no --%s", o->init ? "init" : o->init_opt ? "init-optimizer"
                                                                          : o->save_opt ? "save-optimizer" : "save-weights-only");
    cli_check(pipit_checkpoint_open(path, ck), "--resume");
    const pipit_checkpoint *file = *ck;
    const char *kind = pipit_checkpoint_meta(file, "pipit");
    if (!kind || strcmp(kind, "train") != 0)
        die("--resume: '%s' is not a training checkpoint (it holds weights only: start from it with --init)", path);
    const char *arch = pipit_checkpoint_meta(file, "model");
    if (!arch || !cli_model_kind_find(arch))
        die("--resume: checkpoint '%s': metadata 'model' is '%s', not gpt2 or llama", path, arch ? arch : "(absent)");
    if (o->model && strcmp(o->arch, arch) != 0)
        die("--model %s contradicts checkpoint '%s' (model %s)", o->model, path, arch);
    o->arch = arch; /* the checkpoint stays open */
    enum { BIG = 1 << 30 };
    const resume_key tab[] = {
        {"vocab", "vocab", FL_INT, &o->vocab, 0, 1, BIG, NULL}, {"ctx", "ctx", FL_INT, &o->ctx, 0, 1, BIG, NULL},
        {"max-ctx", "max_ctx", FL_INT, &o->max_ctx, 0, 1, BIG, NULL},
        {"layers", "layers", FL_INT, &o->layers, 0, 1, BIG, NULL}, {"heads", "heads", FL_INT, &o->heads, 0, 1, BIG, NULL},
        {"dim", "dim", FL_INT, &o->dim, 0, 1, BIG, NULL},
        {"micro-batch", "micro_batch", FL_INT, &o->micro_batch, 0, 1, BIG, NULL},
        {"microbatches", "microbatches", FL_INT, &o->microbatches, 1, 1, PIPIT_MAX_MICROBATCHES, NULL},
        {"optimizer", "optimizer", FL_STR, &o->optimizer, 0, 0, 0, NULL}, {"lr", "lr", FL_DBL, &o->lr, 0, 0, 0, NULL},
        {"beta1", "beta1", FL_DBL, &o->beta1, 0, 0, 0, NULL}, {"beta2", "beta2", FL_DBL, &o->beta2, 0, 0, 0, NULL},
        {"eps", "eps", FL_DBL, &o->eps, 0, 0, 0, NULL}, {"weight-decay", "weight_decay", FL_DBL, &o->wd, 0, 0, 0, NULL},
        {"clip", "clip", FL_DBL, &o->clip, 0, 0, 0, NULL}, {"seed", "seed", FL_U64, &o->seed, 0, 0, 0, NULL},
        {"data-order", "data_order", FL_STR, &o->data_order, 0, 0, 0, NULL},
        {"dtype", "dtype", FL_STR, &o->dtype, 0, 0, 0, "f32"}, /* older files ran in f32 */
        {"bf16-policy", "bf16_policy", FL_STR, &o->bf16_policy, 0, 0, 0, ""}, /* older files: as given */
        {"fused-head", "fused_head", FL_INT, &o->fused_head, 0, 0, 1, "0"}, /* older files: as given */
        {"doc-sep", "doc_sep", FL_INT, &o->doc_sep, 0, -1, BIG, "-1"},           /* older files: as given */
        {"doc-pos-reset", "doc_pos_reset", FL_INT, &o->doc_pos_reset, 0, 0, 1, "0"},
        {"data", "data", FL_STR, &o->data, 1, 0, 0, NULL},
        {"lr-schedule", "lr_schedule", FL_STR, &o->lr_schedule, 0, 0, 0, NULL},
        {"warmup", "warmup", FL_INT, &o->warmup, 0, 0, BIG, NULL},
        {"decay-steps", "decay_steps", FL_INT, &o->decay_steps, 0, -1, BIG, NULL}, /* -1: constant lr */
        {"min-lr", "min_lr", FL_DBL, &o->min_lr, 0, 0, 0, NULL},
        {"dp", "dp", FL_INT, &o->dp, 1, 1, BIG, NULL},
        {"tp", "tp", FL_INT, &o->tp, 1, 1, BIG, ""}, /* older files lack it: --tp as given (default 1) */
        {"steps", "steps", FL_INT, &o->steps, 1, 0, INT32_MAX, NULL},
        {"save-every", "save_every", FL_INT, &o->save_every, 1, 0, INT32_MAX, NULL},
        {"keep", "keep", FL_INT, &o->keep, 1, 0, INT32_MAX, NULL},
        {"data-format", "data_format", FL_STR, &o->data_format, 0, 0, 0, "auto"},
        {"val-data", "val_data", FL_STR, &o->val_data, 1, 0, 0, ""},
        {"val-split", "val_split", FL_DBL, &o->val_split, 0, 0, 0, "0"},
        {"eval-every", "eval_every", FL_INT, &o->eval_every, 1, 0, INT32_MAX, "0"},
        {"eval-batches", "eval_batches", FL_INT, &o->eval_batches, 1, 0, INT32_MAX, "0"},
        {"log-every", "log_every", FL_INT, &o->log_every, 1, 1, INT32_MAX, "1"},
    };
    for (int i = 0; i < NFLAGS(tab); i++) resume_one(o, c, file, &tab[i]);
    if (strcmp(arch, "llama") == 0) { /* the Llama fields (--untied is tied 0) */
        const resume_key ll[] = {
            {"kv-heads", "kv_heads", FL_INT, &o->kv_heads, 0, 1, BIG, NULL},
            {"ffn-hidden", "ffn_hidden", FL_INT, &o->ffn_hidden, 0, 1, BIG, NULL},
            {"norm-eps", "norm_eps", FL_DBL, &o->norm_eps, 0, 0, 0, NULL},
            {"rope-theta", "rope_theta", FL_DBL, &o->rope_theta, 0, 0, 0, NULL},
            {flags_seen(c, "untied") ? "untied" : "tied", "tied", FL_INT, &o->tied, 0, 0, 1, NULL},
            /* mixture of experts: a dense file records none (its MoE flags as given); "0" as not given */
            {"experts", "experts", FL_INT, &o->experts, 0, 1, BIG, ""},
            {"top-k", "top_k", FL_INT, &o->top_k, 0, 1, BIG, ""},
            {"capacity-factor", "capacity_factor", FL_DBL, &o->capacity_factor, 0, 0, 0, "0"},
            {"dropless", "dropless", FL_INT, &o->dropless, 0, 0, 1, "0"},
            {"shared-experts", "shared_experts", FL_INT, &o->shared_experts, 0, 0, BIG, "0"},
            {"moe-every", "moe_every", FL_INT, &o->moe_every, 0, 0, BIG, "0"},
            {"router", "router", FL_STR, &o->router, 0, 0, 0, ""},
            {"aux-loss", "aux_loss", FL_DBL, &o->aux_loss, 0, 0, 0, "0"},
            {"balance-bias", "balance_bias", FL_DBL, &o->balance_bias, 0, 0, 0, "0"},
        };
        if (o->untied) o->tied = 0, o->untied = 0;
        for (int i = 0; i < NFLAGS(ll); i++) resume_one(o, c, file, &ll[i]);
    }
    if (o->val_data && !o->val_data[0]) o->val_data = NULL;
    if (o->data_format && strcmp(o->data_format, "auto") == 0 && !flags_seen(c, "data-format")) o->data_format = NULL;
    /* the layout the file was written under (--dp and --microbatches hold
     * the ones asked for, else the file's) */
    o->resume_dp = (int)meta_i64(file, "resume", "dp", 1, BIG, INT64_MIN);
    o->resume_microbatches = (int)meta_i64(file, "resume", "microbatches", 1, PIPIT_MAX_MICROBATCHES, INT64_MIN);
    keep_global_batch(o, c);
    /* T: the file's unless --tp was given (a layout flag: the resume line
     * says when it changes); a file written before pipit recorded T has no
     * 'tp' key and runs at --tp as given (default 1), as it did then */
    o->resume_tp = (int)meta_i64(file, "resume", "tp", 1, BIG, 0);
    int64_t step = meta_i64(file, "resume", "step", 0, INT64_MAX, INT64_MIN);
    if (o->steps < step)
        die("--steps %d: checkpoint '%s' is at step %lld already (--steps is the total with --resume)", o->steps, path,
            (long long)step);
    if (!o->save) o->save = path;
    *step_out = step;
}

void say_resumed(const opts *o, int64_t step) {
    if (pipit_process_rank() != 0) return;
    FILE *f = o->json ? stderr : stdout;
    fprintf(f, "pipit: resuming '%s' at step %lld of %d", o->resume, (long long)step, o->steps);
    if (o->dp != o->resume_dp)
        fprintf(f, "; --dp %d x --microbatches %d keeps its global batch of %lld microbatches (it ran --dp %d x "
                   "--microbatches %d)",
                o->dp, o->microbatches, (long long)o->dp * o->microbatches, o->resume_dp, o->resume_microbatches);
    if (o->resume_tp && o->tp != o->resume_tp)
        fprintf(f, "; the layout changed: --tp %d (it ran --tp %d), so the losses follow the uninterrupted run "
                   "within rounding, not bit for bit",
                o->tp, o->resume_tp);
    fputc('\n', f);
    fflush(f);
}
