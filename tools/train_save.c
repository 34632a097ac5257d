/*
 * train_save.c — training checkpoints from the CLI's side: the metadata a
 * run writes (step, data position, model and training config), where the
 * saves go (--keep's numbered copies, stale temp files of killed runs, a
 * writable --save checked before step 0), and --resume, which reads the
 * run's config back and checks the flags against it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_cli.h"

/* A weights-only checkpoint: the params and the model's fields. */
void save_checkpoint(const pipit_program *p, const cli_model *c, const char *path) {
    cli_model_meta mm;
    cli_model_meta_fill(c, &mm);
    const char *meta[2 + NFLAGS(mm.kv) + 1] = {"format", "pt"};
    memcpy(meta + 2, mm.kv, sizeof(char *) * (size_t)mm.n);
    meta[2 + mm.n] = NULL;
    cli_check(pipit_checkpoint_save(p, path, meta), "save");
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
    fprintf(o->json ? stderr : stdout, "saved %s (step %lld)\n", path, (long long)step);
    fflush(o->json ? stderr : stdout);
}

/* The metadata of a training checkpoint: key, value pairs, numbers printed
 * into the list's own buffers. */
typedef struct {
    const char *kv[96];
    int n, k;
    char num[32][48];
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
    meta_num(&m, "seed", "%llu", (unsigned long long)o->seed);
    meta_str(&m, "data", o->data);
    meta_str(&m, "data_order", o->data_order);
    meta_num(&m, "steps", "%lld", (long long)r.total);
    meta_num(&m, "data_pos", "%lld", (long long)r.data_pos);
    meta_num(&m, "save_every", "%d", o->save_every);
    meta_num(&m, "keep", "%d", o->keep);
    cli_check(pipit_checkpoint_save_train(p, path, r.step, m.kv), "save");
    if (pipit_process_rank() == 0) keep_saves(path, r.step, o->keep);
    say_saved(o, path, r.step);
}

/* --resume FILE: the model and training config come from the file; a flag
 * given as well must agree with it, except the layout flags (--pp,
 * --virtual, --schedule, --dp, --zero1, --threads, --remat, --device,
 * --tf32), --data (the
 * same data may have moved), --steps (the new total), --save, --save-every
 * and --keep. */
void apply_resume(opts *o, const flag_cmd *c, pipit_checkpoint **ck, int64_t *step_out) {
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
    int llama = strcmp(arch, "llama") == 0;
    o->arch = arch; /* the checkpoint stays open */
    const struct {
        const char *flag, *key;
        flag_type type;
        void *dst;
        int layout; /* may differ from the file; 2: a Llama field (absent for GPT-2) */
    } tab[] = {
        {"kv-heads", "kv_heads", FL_INT, &o->kv_heads, 2}, {"ffn-hidden", "ffn_hidden", FL_INT, &o->ffn_hidden, 2},
        {"norm-eps", "norm_eps", FL_DBL, &o->norm_eps, 2}, {"rope-theta", "rope_theta", FL_DBL, &o->rope_theta, 2},
        {"tied", "tied", FL_INT, &o->tied, 2},
        {"vocab", "vocab", FL_INT, &o->vocab, 0}, {"ctx", "ctx", FL_INT, &o->ctx, 0},
        {"max-ctx", "max_ctx", FL_INT, &o->max_ctx, 0}, {"layers", "layers", FL_INT, &o->layers, 0},
        {"heads", "heads", FL_INT, &o->heads, 0}, {"dim", "dim", FL_INT, &o->dim, 0},
        {"micro-batch", "micro_batch", FL_INT, &o->micro_batch, 0},
        {"microbatches", "microbatches", FL_INT, &o->microbatches, 0},
        {"optimizer", "optimizer", FL_STR, &o->optimizer, 0}, {"lr", "lr", FL_DBL, &o->lr, 0},
        {"beta1", "beta1", FL_DBL, &o->beta1, 0}, {"beta2", "beta2", FL_DBL, &o->beta2, 0},
        {"eps", "eps", FL_DBL, &o->eps, 0}, {"weight-decay", "weight_decay", FL_DBL, &o->wd, 0},
        {"clip", "clip", FL_DBL, &o->clip, 0}, {"seed", "seed", FL_U64, &o->seed, 0},
        {"data-order", "data_order", FL_STR, &o->data_order, 0}, {"data", "data", FL_STR, &o->data, 1},
        {"lr-schedule", "lr_schedule", FL_STR, &o->lr_schedule, 0}, {"warmup", "warmup", FL_INT, &o->warmup, 0},
        {"decay-steps", "decay_steps", FL_INT, &o->decay_steps, 0}, {"min-lr", "min_lr", FL_DBL, &o->min_lr, 0},
        {"dp", "dp", FL_INT, &o->dp, 1}, {"steps", "steps", FL_INT, &o->steps, 1},
        {"save-every", "save_every", FL_INT, &o->save_every, 1}, {"keep", "keep", FL_INT, &o->keep, 1},
    };
    if (llama && o->untied) o->tied = 0, o->untied = 0; /* "tied" below is the one switch: --untied is tied 0 */
    for (int i = 0; i < NFLAGS(tab); i++) {
        if (tab[i].layout == 2 && !llama) continue;
        const char *v = pipit_checkpoint_meta(file, tab[i].key);
        if (!v) die("--resume: checkpoint '%s' lacks metadata '%s'", path, tab[i].key);
        char *end = NULL, given[64];
        errno = 0;
        int same = 1, seen = flags_seen(c, tab[i].flag) || (tab[i].dst == &o->tied && flags_seen(c, "untied"));
        switch (tab[i].type) {
        case FL_INT: {
            long x = strtol(v, &end, 10);
            if (x < -2147483647L || x > 2147483647L) errno = ERANGE;
            snprintf(given, sizeof given, "%d", *(int *)tab[i].dst);
            same = *(int *)tab[i].dst == (int)x;
            if (!seen) *(int *)tab[i].dst = (int)x;
            break;
        }
        case FL_U64: {
            unsigned long long x = strtoull(v, &end, 10);
            snprintf(given, sizeof given, "%llu", (unsigned long long)*(uint64_t *)tab[i].dst);
            same = *(uint64_t *)tab[i].dst == (uint64_t)x;
            if (!seen) *(uint64_t *)tab[i].dst = (uint64_t)x;
            break;
        }
        case FL_DBL: {
            double x = strtod(v, &end);
            snprintf(given, sizeof given, "%.17g", *(double *)tab[i].dst);
            same = *(double *)tab[i].dst == x;
            if (!seen) *(double *)tab[i].dst = x;
            break;
        }
        default:
        {
            const char *cur = *(const char **)tab[i].dst;
            snprintf(given, sizeof given, "%.60s", cur ? cur : "");
            same = cur && strcmp(cur, v) == 0;
            if (!seen) *(const char **)tab[i].dst = v; /* the checkpoint stays open */
            break;
        }
        }
        if (errno || (end && (end == v || *end)))
            die("--resume: checkpoint '%s': metadata '%s' is '%.40s', not a number", path, tab[i].key, v);
        if (seen && !same && tab[i].layout != 1)
            die("--%s %s contradicts checkpoint '%s' (%s %s)", tab[i].flag, given, path, tab[i].key, v);
    }
    const char *st = pipit_checkpoint_meta(file, "step");
    long long step = st ? strtoll(st, NULL, 10) : -1;
    if (step < 0) die("--resume: checkpoint '%s' lacks its step", path);
    if (o->steps < step)
        die("--steps %d: checkpoint '%s' is at step %lld already (--steps is the total with --resume)", o->steps, path,
            step);
    if (!o->save) o->save = path;
    *step_out = step;
}

