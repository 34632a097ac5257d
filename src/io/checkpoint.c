/*
 * checkpoint.c — parameter save/load through safetensors. Saving gathers
 * each tensor into a pipit__st_tensor list and lets the safetensors writer
 * do the atomic tmp+fsync+rename; loading validates every tensor before the
 * first byte is copied, so a bad file never leaves a half-loaded model.
 */
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "pipit_io.h"
#include "util/bf16.h"
#include "util/common.h"

/* Tensors are seen under their "model" names: a Hugging Face
 * GPT2LMHeadModel file stores "transformer.wte.weight", pipit (and
 * GPT2Model) "wte.weight"; the "transformer." prefix is dropped when a file
 * is opened. Tensors no param asks for (attention-mask buffers
 * "h.N.attn.bias" / "h.N.attn.masked_bias", "lm_head.weight" tied to wte,
 * optimizer moments) are listed but never loaded. */
struct pipit_checkpoint {
    pipit__st_file *f;
    char *path;
    int n;
    const char **names; /* names[i]: tensor i's name without the prefix */
    int *by_name;       /* tensor indices sorted by names[] (binary search) */
};

static const char HF_PREFIX[] = "transformer.";

static const pipit__st_tensor *ck_find(const pipit_checkpoint *ck, const char *name) {
    int lo = 0, hi = ck->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(name, ck->names[ck->by_name[mid]]);
        if (c == 0) return pipit__st_get(ck->f, ck->by_name[mid]);
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

/* qsort has no context argument: the names being sorted, per thread. */
static _Thread_local const char *const *sort_names;

static int cmp_name_index(const void *a, const void *b) {
    return strcmp(sort_names[*(const int *)a], sort_names[*(const int *)b]);
}

static pipit_status map_names(pipit_checkpoint *ck) {
    ck->n = pipit__st_count(ck->f);
    ck->names = pipit__calloc((size_t)PIPIT_MAX(ck->n, 1), sizeof *ck->names);
    ck->by_name = pipit__calloc((size_t)PIPIT_MAX(ck->n, 1), sizeof *ck->by_name);
    if (!ck->names || !ck->by_name) return pipit__err(PIPIT_STATUS_NOMEM, "checkpoint '%s': out of memory", ck->path);
    size_t k = sizeof HF_PREFIX - 1;
    for (int i = 0; i < ck->n; i++) {
        const char *nm = pipit__st_get(ck->f, i)->name;
        ck->names[i] = strncmp(nm, HF_PREFIX, k) == 0 && nm[k] ? nm + k : nm;
        ck->by_name[i] = i;
    }
    sort_names = ck->names;
    qsort(ck->by_name, (size_t)ck->n, sizeof *ck->by_name, cmp_name_index);
    sort_names = NULL;
    for (int i = 1; i < ck->n; i++) /* "x" and "transformer.x" both: ambiguous */
        if (strcmp(ck->names[ck->by_name[i - 1]], ck->names[ck->by_name[i]]) == 0)
            return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': tensor '%s' is stored twice (with and without the '%s' prefix)",
                              ck->path, ck->names[ck->by_name[i]], HF_PREFIX);
    return PIPIT_STATUS_OK;
}

/* A metadata value that must be a count: decimal digits only (no sign, no
 * space, no exponent), at most max. FORMAT naming the key and the value. */
static pipit_status parse_count(const char *what, const char *path, const char *key, const char *v, uint64_t max,
                                uint64_t *out) {
    uint64_t x = 0;
    const char *why = *v ? NULL : "empty";
    for (const char *c = v; !why && *c; c++) {
        if (*c < '0' || *c > '9') why = *c == '-' ? "negative" : "not made of decimal digits";
        else if (x > (max - (uint64_t)(*c - '0')) / 10) why = "too large";
        else x = x * 10 + (uint64_t)(*c - '0');
    }
    if (why)
        return pipit__err(PIPIT_STATUS_FORMAT, "%s '%s': metadata '%s' is '%.40s', %s (a count of at most %llu)", what,
                          path, key, v, why, (unsigned long long)max);
    *out = x;
    return PIPIT_STATUS_OK;
}

/* io/ sees programs through the public API only: a handle for which
 * pipit_program_num_params gives 0 (every compiled program has a param)
 * is not a live program. */
static pipit_status bad_program(const char *fn) {
    return pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid program handle (freed, or not a pipit_program)", fn);
}

/* A param read as f32 (or f64) into t, rounded to bf16 in place of it. */
static pipit_status narrow_to_bf16(pipit__st_tensor *t) {
    size_t n = t->nbytes / pipit__dtype_size(t->dtype);
    pipit__bf16 *h = pipit__malloc(sizeof *h * PIPIT_MAX(n, 1));
    if (!h) return pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
    for (size_t k = 0; k < n; k++)
        h[k] = t->dtype == PIPIT_F64 ? pipit__bf16_from_f64(((const double *)t->data)[k])
                                     : pipit__bf16_from_f32(((const float *)t->data)[k]);
    pipit__free((void *)t->data);
    t->data = h;
    t->dtype = PIPIT_BF16;
    t->nbytes = sizeof *h * n;
    return PIPIT_STATUS_OK;
}

static pipit_status checkpoint_save_impl(const pipit_program *p, const char *path, const char *const *meta,
                                         pipit_dtype dtype, const char *fn) {
    if (!p || !path) return pipit__err(PIPIT_STATUS_MISUSE, "%s: %s is NULL", fn, p ? "path" : "program");
    int n = pipit_program_num_params(p); /* a compiled program has params */
    if (n <= 0) return bad_program(fn);
    if (dtype != PIPIT_F32 && dtype != PIPIT_BF16)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "%s: dtype must be PIPIT_F32 (the params as declared) or PIPIT_BF16 (rounded), got %d", fn,
                          (int)dtype);
    pipit__st_tensor *t = pipit__calloc((size_t)PIPIT_MAX(n, 1), sizeof *t);
    if (!t) return pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
    pipit_status s = PIPIT_STATUS_OK;
    int made = 0;
    for (int i = 0; i < n && !s; i++, made++) {
        const char *name = pipit_program_param_name(p, i);
        t[i].name = (char *)name;
        s = pipit_program_param_shape(p, name, &t[i].ndim, t[i].shape);
        if (s) break;
        int64_t numel = 1;
        for (int k = 0; k < t[i].ndim; k++) numel *= t[i].shape[k];
        t[i].dtype = PIPIT_F32;
        t[i].nbytes = (size_t)numel * 4;
        void *buf = pipit__malloc(t[i].nbytes);
        if (!buf) {
            s = pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
            break;
        }
        t[i].data = buf;
        if (pipit_program_get_param(p, name, buf, t[i].nbytes)) {
            /* f64 params (gradient-check models) */
            pipit__free(buf);
            t[i].dtype = PIPIT_F64;
            t[i].nbytes = (size_t)numel * 8;
            buf = pipit__malloc(t[i].nbytes);
            t[i].data = buf;
            if (!buf) s = pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
            else s = pipit_program_get_param(p, name, buf, t[i].nbytes);
        }
        if (!s && dtype == PIPIT_BF16) s = narrow_to_bf16(&t[i]);
    }
    /* every process took part in the gathers; one writes the file */
    if (!s && pipit_process_rank() == 0) s = pipit__st_write(path, t, n, meta);
    for (int i = 0; i < made && i < n; i++) pipit__free((void *)t[i].data);
    pipit__free(t);
    return s;
}

pipit_status pipit_checkpoint_save(const pipit_program *p, const char *path, const char *const *meta) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(checkpoint_save_impl(p, path, meta, PIPIT_F32, __func__), gen0, __func__);
}

pipit_status pipit_checkpoint_save_as(const pipit_program *p, const char *path, const char *const *meta,
                                      pipit_dtype dtype) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(checkpoint_save_impl(p, path, meta, dtype, __func__), gen0, __func__);
}

static pipit_status check_tensor(const pipit_program *p, const pipit_checkpoint *ck, const char *path,
                                 const char *name, const pipit__st_tensor **out) {
    int nd;
    int64_t shape[PIPIT_MAX_DIMS];
    pipit_program_param_shape(p, name, &nd, shape);
    const pipit__st_tensor *t = ck_find(ck, name);
    if (!t)
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': tensor '%s' is missing", path, name);
    int same = t->ndim == nd;
    for (int k = 0; same && k < nd; k++) same = t->shape[k] == shape[k];
    if (!same) {
        char a[96], b[96];
        return pipit__err(PIPIT_STATUS_SHAPE, "checkpoint '%s': tensor '%s': expected %s, file has %s", path,
                          name, pipit__shape_str(a, sizeof a, nd, shape),
                          pipit__shape_str(b, sizeof b, t->ndim, t->shape));
    }
    pipit_dtype want = PIPIT_F32;
    pipit_program_param_dtype(p, name, &want);
    if (t->dtype != want && !(t->dtype == PIPIT_BF16 && want == PIPIT_F32)) /* bf16 widens exactly */
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': tensor '%s' is %s, the param is %s", path, name,
                          pipit__dtype_name(t->dtype), pipit__dtype_name(want));
    *out = t;
    return PIPIT_STATUS_OK;
}

static pipit_status load_params(pipit_program *p, const pipit_checkpoint *ck, const char *path) {
    int n = pipit_program_num_params(p);
    if (n <= 0) return bad_program("pipit_checkpoint_load_into");
    const pipit__st_tensor *t;
    for (int i = 0; i < n; i++) { /* validate everything first: all or nothing */
        pipit_status s = check_tensor(p, ck, path, pipit_program_param_name(p, i), &t);
        if (s) return s;
    }
    for (int i = 0; i < n; i++) {
        const char *name = pipit_program_param_name(p, i);
        check_tensor(p, ck, path, name, &t);
        int widen = t->dtype == PIPIT_BF16; /* into an fp32 master, exactly */
        size_t n16 = t->nbytes / 2, bytes = widen ? n16 * sizeof(float) : t->nbytes;
        void *buf = pipit__malloc(PIPIT_MAX(bytes, 1)); /* file data may be unaligned */
        if (!buf) return pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
        if (!widen) memcpy(buf, t->data, t->nbytes);
        for (size_t k = 0; widen && k < n16; k++) {
            pipit__bf16 h;
            memcpy(&h, (const char *)t->data + 2 * k, sizeof h);
            ((float *)buf)[k] = pipit__bf16_to_f32(h);
        }
        pipit_status s = pipit_program_set_param(p, name, buf, bytes);
        pipit__free(buf);
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

/* ---- opened checkpoints ---- */

pipit_status pipit_checkpoint_open(const char *path, pipit_checkpoint **out) {
    if (!path || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_open: %s is NULL", path ? "out" : "path");
    *out = NULL;
    pipit_checkpoint *ck = pipit__calloc(1, sizeof *ck);
    if (!ck || !(ck->path = pipit__strdup(path))) {
        pipit__free(ck);
        return pipit__err(PIPIT_STATUS_NOMEM, "checkpoint '%s': out of memory", path);
    }
    unsigned long gen0 = pipit__err_gen();
    pipit_status s = pipit__st_read(path, &ck->f);
    if (!s) s = map_names(ck);
    if (s) {
        pipit_checkpoint_free(ck);
        if (pipit__err_gen() == gen0) return pipit__err_fresh(s, gen0, __func__);
        pipit__err_prefix("%s", __func__);
        return s;
    }
    *out = ck;
    return PIPIT_STATUS_OK;
}

void pipit_checkpoint_free(pipit_checkpoint *ck) {
    if (!ck) return;
    pipit__st_free(ck->f);
    pipit__free(ck->names);
    pipit__free(ck->by_name);
    pipit__free(ck->path);
    pipit__free(ck);
}

const char *pipit_checkpoint_path(const pipit_checkpoint *ck) {
    if (!ck) pipit__err(PIPIT_STATUS_MISUSE, "%s: checkpoint is NULL", __func__);
    return ck ? ck->path : NULL;
}

int pipit_checkpoint_num_tensors(const pipit_checkpoint *ck) {
    if (!ck) {
        pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_num_tensors: checkpoint is NULL");
        return 0;
    }
    return ck->n;
}

const char *pipit_checkpoint_tensor_name(const pipit_checkpoint *ck, int i) {
    const pipit__st_tensor *t = ck ? pipit__st_get(ck->f, i) : NULL;
    if (!t) {
        if (!ck) pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_tensor_name: checkpoint is NULL");
        else pipit__err(PIPIT_STATUS_INVALID, "pipit_checkpoint_tensor_name: checkpoint '%s' has no tensor %d (it has %d)", ck->path, i,
                        pipit__st_count(ck->f));
        return NULL;
    }
    return ck->names[i];
}

static pipit_status checkpoint_tensor_shape_impl(const pipit_checkpoint *ck, const char *name, int *ndim,
                                                 int64_t *shape) {
    if (!ck || !name)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_tensor_shape: %s is NULL", ck ? "name" : "checkpoint");
    const pipit__st_tensor *t = ck_find(ck, name);
    if (!t)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_checkpoint_tensor_shape: checkpoint '%s' has no tensor '%s'",
                          ck->path, name);
    if (ndim) *ndim = t->ndim;
    if (shape) memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    return PIPIT_STATUS_OK;
}

pipit_status pipit_checkpoint_tensor_shape(const pipit_checkpoint *ck, const char *name, int *ndim,
                                           int64_t *shape) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(checkpoint_tensor_shape_impl(ck, name, ndim, shape), gen0, __func__);
}

pipit_status pipit_checkpoint_tensor_dtype(const pipit_checkpoint *ck, const char *name, pipit_dtype *out) {
    if (!ck || !name || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_tensor_dtype: %s is NULL",
                          !ck ? "checkpoint" : !name ? "name" : "out");
    const pipit__st_tensor *t = ck_find(ck, name);
    if (!t)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_checkpoint_tensor_dtype: checkpoint '%s' has no tensor '%s'",
                          ck->path, name);
    *out = t->dtype;
    return PIPIT_STATUS_OK;
}

const char *pipit_checkpoint_meta(const pipit_checkpoint *ck, const char *key) {
    if (!ck || !key) {
        pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_meta: %s is NULL", ck ? "key" : "checkpoint");
        return NULL;
    }
    return pipit__st_meta(ck->f, key);
}

pipit_status pipit_checkpoint_meta_count(const pipit_checkpoint *ck, const char *key, uint64_t max, uint64_t *out) {
    if (!ck || !key || !out)
        return pipit__err(PIPIT_STATUS_MISUSE, "%s: %s is NULL", __func__, !ck ? "checkpoint" : !key ? "key" : "out");
    const char *v = pipit__st_meta(ck->f, key);
    if (!v) return pipit__err(PIPIT_STATUS_INVALID, "%s: checkpoint '%s' has no metadata '%s'", __func__, ck->path, key);
    pipit_status s = parse_count("checkpoint", ck->path, key, v, max, out);
    if (s) pipit__err_prefix("%s", __func__);
    return s;
}

int pipit_checkpoint_verified(const pipit_checkpoint *ck) {
    if (!ck) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: checkpoint is NULL", __func__);
        return 0;
    }
    return pipit__st_checksummed(ck->f);
}

static pipit_status checkpoint_load_into_impl(pipit_program *p, const pipit_checkpoint *ck) {
    if (!p || !ck)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_load_into: %s is NULL", p ? "checkpoint" : "program");
    return load_params(p, ck, ck->path);
}

pipit_status pipit_checkpoint_load_into(pipit_program *p, const pipit_checkpoint *ck) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(checkpoint_load_into_impl(p, ck), gen0, __func__);
}

static pipit_status checkpoint_load_impl(pipit_program *p, const char *path) {
    if (!p || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_load: %s is NULL", p ? "path" : "program");
    pipit_checkpoint *ck = NULL;
    pipit_status s = pipit_checkpoint_open(path, &ck);
    if (!s) s = pipit_checkpoint_load_into(p, ck);
    pipit_checkpoint_free(ck);
    return s;
}

pipit_status pipit_checkpoint_load(pipit_program *p, const char *path) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(checkpoint_load_impl(p, path), gen0, __func__);
}

/* ---- optimizer state ---- */

static const char *const moment_suffix[2] = {".exp_avg", ".exp_avg_sq"};

static pipit_status optimizer_save_impl(const pipit_program *p, const char *path, int64_t next_step) {
    if (!p || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_optimizer_save: %s is NULL", p ? "path" : "program");
    int n = pipit_program_num_params(p);
    if (n <= 0) return bad_program("pipit_optimizer_save");
    pipit__st_tensor *t = pipit__calloc((size_t)PIPIT_MAX(2 * n, 1), sizeof *t);
    if (!t) return pipit__err(PIPIT_STATUS_NOMEM, "optimizer state: out of memory");
    pipit_status s = PIPIT_STATUS_OK;
    int made = 0;
    for (int i = 0; i < n && !s; i++) {
        const char *name = pipit_program_param_name(p, i);
        for (int w = 0; w < 2 && !s; w++, made++) {
            pipit__st_tensor *x = &t[2 * i + w];
            size_t len = strlen(name) + strlen(moment_suffix[w]) + 1;
            x->name = pipit__malloc(len);
            s = x->name ? pipit_program_param_shape(p, name, &x->ndim, x->shape)
                        : pipit__err(PIPIT_STATUS_NOMEM, "optimizer state: out of memory");
            if (s) break;
            snprintf(x->name, len, "%s%s", name, moment_suffix[w]);
            int64_t numel = 1;
            for (int k = 0; k < x->ndim; k++) numel *= x->shape[k];
            x->dtype = PIPIT_F32;
            x->nbytes = (size_t)numel * 4;
            void *buf = pipit__malloc(x->nbytes);
            x->data = buf;
            s = buf ? pipit_program_get_opt_state(p, name, w, buf, x->nbytes)
                    : pipit__err(PIPIT_STATUS_NOMEM, "optimizer state: out of memory");
        }
    }
    char steps[32], next[32];
    snprintf(steps, sizeof steps, "%lld", (long long)pipit_program_opt_steps(p));
    snprintf(next, sizeof next, "%lld", (long long)next_step);
    const char *meta[] = {"format", "pipit-optimizer", "opt_steps", steps, "next_step", next, NULL};
    if (!s && pipit_process_rank() == 0) s = pipit__st_write(path, t, 2 * n, meta);
    for (int i = 0; i < made && i < 2 * n; i++) {
        pipit__free(t[i].name);
        pipit__free((void *)t[i].data);
    }
    pipit__free(t);
    return s;
}

pipit_status pipit_optimizer_save(const pipit_program *p, const char *path, int64_t next_step) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(optimizer_save_impl(p, path, next_step), gen0, __func__);
}

static pipit_status meta_int(const pipit__st_file *f, const char *path, const char *key, int64_t *out) {
    const char *v = pipit__st_meta(f, key);
    if (!v) return pipit__err(PIPIT_STATUS_FORMAT, "optimizer state '%s': metadata '%s' is missing", path, key);
    uint64_t x;
    pipit_status s = parse_count("optimizer state", path, key, v, INT64_MAX, &x);
    if (!s) *out = (int64_t)x;
    return s;
}

static pipit_status optimizer_load_impl(pipit_program *p, const char *path, int64_t *next_step) {
    if (!p || !path || !next_step)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_optimizer_load: %s is NULL",
                          !p ? "program" : !path ? "path" : "next_step");
    if (pipit_program_num_params(p) <= 0) return bad_program("pipit_optimizer_load");
    pipit__st_file *f = NULL;
    pipit_status s = pipit__st_read(path, &f);
    int64_t steps = 0;
    if (!s) s = meta_int(f, path, "opt_steps", &steps);
    if (!s) s = meta_int(f, path, "next_step", next_step);
    int n = pipit_program_num_params(p);
    for (int pass = 0; pass < 2 && !s; pass++) /* validate everything, then load */
        for (int i = 0; i < n && !s; i++) {
            const char *name = pipit_program_param_name(p, i);
            for (int w = 0; w < 2 && !s; w++) {
                char key[512];
                snprintf(key, sizeof key, "%s%s", name, moment_suffix[w]);
                const pipit__st_tensor *t = pipit__st_find(f, key);
                int nd;
                int64_t shape[PIPIT_MAX_DIMS];
                pipit_program_param_shape(p, name, &nd, shape);
                int same = t && t->dtype == PIPIT_F32 && t->ndim == nd;
                for (int k = 0; same && k < nd; k++) same = t->shape[k] == shape[k];
                if (!same) {
                    s = pipit__err(PIPIT_STATUS_FORMAT, "optimizer state '%s': tensor '%s' is missing or not f32 of the param's shape",
                                   path, key);
                    break;
                }
                if (pass == 1) {
                    void *buf = pipit__malloc(t->nbytes);
                    if (!buf) s = pipit__err(PIPIT_STATUS_NOMEM, "optimizer state: out of memory");
                    else {
                        memcpy(buf, t->data, t->nbytes);
                        s = pipit_program_set_opt_state(p, name, w, buf, t->nbytes);
                        pipit__free(buf);
                    }
                }
            }
        }
    if (!s) s = pipit_program_set_opt_steps(p, steps);
    pipit__st_free(f);
    return s;
}

pipit_status pipit_optimizer_load(pipit_program *p, const char *path, int64_t *next_step) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(optimizer_load_impl(p, path, next_step), gen0, __func__);
}

/* ---- one-file training checkpoints ---- */

static const char *const train_prefix[2] = {"opt.m.", "opt.v."};
static const char *const train_keys[] = {"pipit", "step", "opt_steps", NULL};

/* Reads param `name` (which < 0) or its moment `which` into x (name, shape,
 * dtype, a fresh buffer). Collective under MPI, like the getters. */
static pipit_status gather(const pipit_program *p, const char *name, int which, pipit__st_tensor *x) {
    const char *pre = which < 0 ? "" : train_prefix[which];
    size_t len = strlen(pre) + strlen(name) + 1;
    x->name = pipit__malloc(len);
    if (!x->name) return pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
    snprintf(x->name, len, "%s%s", pre, name);
    pipit_status s = pipit_program_param_shape(p, name, &x->ndim, x->shape);
    if (s) return s;
    int64_t numel = 1;
    for (int k = 0; k < x->ndim; k++) numel *= x->shape[k];
    for (int w = 4; w <= 8; w += 4) { /* f32, else f64 params (gradient-check models) */
        x->dtype = w == 4 ? PIPIT_F32 : PIPIT_F64;
        x->nbytes = (size_t)numel * (size_t)w;
        pipit__free((void *)x->data);
        void *buf = pipit__malloc(x->nbytes);
        x->data = buf;
        if (!buf) return pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
        s = which < 0 ? pipit_program_get_param(p, name, buf, x->nbytes)
                      : pipit_program_get_opt_state(p, name, which, buf, x->nbytes);
        if (!s) return s;
    }
    return s;
}

static pipit_status checkpoint_save_train_impl(const pipit_program *p, const char *path, int64_t next_step,
                                               const char *const *meta) {
    if (!p || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_save_train: %s is NULL", p ? "path" : "program");
    int n = pipit_program_num_params(p);
    if (n <= 0) return bad_program("pipit_checkpoint_save_train");
    if (next_step < 0)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_checkpoint_save_train: next_step must be >= 0 (got %lld)",
                          (long long)next_step);
    int nmeta = 0;
    for (; meta && meta[2 * nmeta]; nmeta++)
        if (!meta[2 * nmeta + 1])
            return pipit__err(PIPIT_STATUS_INVALID, "pipit_checkpoint_save_train: metadata '%s' has no value",
                              meta[2 * nmeta]);
    pipit__st_tensor *t = pipit__calloc((size_t)3 * (size_t)n, sizeof *t);
    const char **m = pipit__calloc((size_t)2 * (size_t)nmeta + 2 * 3 + 1, sizeof *m);
    pipit_status s = t && m ? PIPIT_STATUS_OK : pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
    if (!s) {
        unsigned long gen0 = pipit__err_gen();
        for (int i = 0; i < n && !s; i++) s = gather(p, pipit_program_param_name(p, i), -1, &t[i]);
        for (int i = 0; i < n && !s; i++)
            for (int w = 0; w < 2 && !s; w++) s = gather(p, pipit_program_param_name(p, i), w, &t[n + 2 * i + w]);
        if (s) s = pipit__err_fresh(s, gen0, "pipit_checkpoint_save_train");
    }
    char step[32], steps[32];
    snprintf(step, sizeof step, "%lld", (long long)next_step);
    snprintf(steps, sizeof steps, "%lld", (long long)pipit_program_opt_steps(p));
    if (!s) {
        int k = 0;
        for (int i = 0; i < nmeta; i++) { /* the reserved keys are this function's */
            int reserved = 0;
            for (int r = 0; train_keys[r]; r++) reserved |= strcmp(meta[2 * i], train_keys[r]) == 0;
            if (!reserved) m[k++] = meta[2 * i], m[k++] = meta[2 * i + 1];
        }
        const char *own[] = {"pipit", "train", "step", step, "opt_steps", steps};
        for (int i = 0; i < 6; i++) m[k++] = own[i];
        m[k] = NULL;
        if (pipit_process_rank() == 0) s = pipit__st_write(path, t, 3 * n, m);
    }
    for (int i = 0; t && i < 3 * n; i++) {
        pipit__free(t[i].name);
        pipit__free((void *)t[i].data);
    }
    pipit__free(t);
    pipit__free(m);
    return s;
}

pipit_status pipit_checkpoint_save_train(const pipit_program *p, const char *path, int64_t next_step,
                                         const char *const *meta) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(checkpoint_save_train_impl(p, path, next_step, meta), gen0, __func__);
}

static pipit_status train_count(const pipit_checkpoint *ck, const char *key, int64_t *out) {
    const char *v = pipit__st_meta(ck->f, key);
    if (!v) return pipit__err(PIPIT_STATUS_FORMAT, "training checkpoint '%s': metadata '%s' is missing", ck->path, key);
    uint64_t x;
    pipit_status s = parse_count("training checkpoint", ck->path, key, v, INT64_MAX, &x);
    if (!s) *out = (int64_t)x;
    return s;
}

static pipit_status checkpoint_load_train_impl(pipit_program *p, const pipit_checkpoint *ck, int64_t *next_step) {
    if (!p || !ck || !next_step)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_load_train: %s is NULL",
                          !p ? "program" : !ck ? "checkpoint" : "next_step");
    int n = pipit_program_num_params(p);
    if (n <= 0) return bad_program("pipit_checkpoint_load_train");
    const char *kind = pipit__st_meta(ck->f, "pipit");
    if (!kind || strcmp(kind, "train") != 0)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "pipit_checkpoint_load_train: '%s' is not a training checkpoint (no \"pipit\": \"train\" "
                          "metadata: weights only)", ck->path);
    int64_t step = 0, steps = 0;
    pipit_status s = train_count(ck, "step", &step);
    if (!s) s = train_count(ck, "opt_steps", &steps);
    if (s) return s;
    const pipit__st_tensor *t;
    char key[600];
    for (int pass = 0; pass < 2; pass++) /* validate everything, then load: all or nothing */
        for (int i = 0; i < n; i++) {
            const char *name = pipit_program_param_name(p, i);
            for (int w = 0; w < 2; w++) {
                snprintf(key, sizeof key, "%s%s", train_prefix[w], name);
                int nd;
                int64_t shape[PIPIT_MAX_DIMS];
                pipit_program_param_shape(p, name, &nd, shape);
                pipit_dtype dt = PIPIT_F32;
                pipit_program_param_dtype(p, name, &dt);
                t = ck_find(ck, key);
                int same = t && t->dtype == dt && t->ndim == nd;
                for (int k = 0; same && k < nd; k++) same = t->shape[k] == shape[k];
                if (!same)
                    return pipit__err(PIPIT_STATUS_FORMAT,
                                      "training checkpoint '%s': tensor '%s' is missing or not %s of the param's shape",
                                      ck->path, key, pipit__dtype_name(dt));
                if (pass == 1) {
                    void *buf = pipit__malloc(t->nbytes);
                    if (!buf) return pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
                    memcpy(buf, t->data, t->nbytes);
                    s = pipit_program_set_opt_state(p, name, w, buf, t->nbytes);
                    pipit__free(buf);
                    if (s) return s;
                }
            }
            if (pass == 0 && (s = check_tensor(p, ck, ck->path, name, &t))) return s;
        }
    if ((s = load_params(p, ck, ck->path))) return s;
    if ((s = pipit_program_set_opt_steps(p, steps))) return s;
    *next_step = step;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_checkpoint_load_train(pipit_program *p, const pipit_checkpoint *ck, int64_t *next_step) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(checkpoint_load_train_impl(p, ck, next_step), gen0, __func__);
}
