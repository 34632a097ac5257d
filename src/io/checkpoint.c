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
#include "util/common.h"

struct pipit_checkpoint {
    pipit__st_file *f;
    char *path;
};

/* io/ sees programs through the public API only: a handle for which
 * pipit_program_num_params gives 0 (every compiled program has a param)
 * is not a live program. */
static pipit_status bad_program(const char *fn) {
    return pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid program handle (freed, or not a pipit_program)", fn);
}

pipit_status pipit_checkpoint_save(const pipit_program *p, const char *path, const char *const *meta) {
    if (!p || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_save: %s is NULL", p ? "path" : "program");
    int n = pipit_program_num_params(p); /* a compiled program has params */
    if (n <= 0) return bad_program(__func__);
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
    }
    /* every process took part in the gathers; one writes the file */
    if (!s && pipit_process_rank() == 0) s = pipit__st_write(path, t, n, meta);
    for (int i = 0; i < made && i < n; i++) pipit__free((void *)t[i].data);
    pipit__free(t);
    return s;
}

static pipit_status check_tensor(const pipit_program *p, const pipit__st_file *f, const char *path,
                                 const char *name, const pipit__st_tensor **out) {
    int nd;
    int64_t shape[PIPIT_MAX_DIMS];
    pipit_program_param_shape(p, name, &nd, shape);
    const pipit__st_tensor *t = pipit__st_find(f, name);
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
    if (t->dtype != PIPIT_F32)
        return pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': tensor '%s' is %s, expected f32", path, name,
                          pipit__dtype_name(t->dtype));
    *out = t;
    return PIPIT_STATUS_OK;
}

static pipit_status load_params(pipit_program *p, const pipit__st_file *f, const char *path) {
    int n = pipit_program_num_params(p);
    if (n <= 0) return bad_program("pipit_checkpoint_load_into");
    const pipit__st_tensor *t;
    for (int i = 0; i < n; i++) { /* validate everything first: all or nothing */
        pipit_status s = check_tensor(p, f, path, pipit_program_param_name(p, i), &t);
        if (s) return s;
    }
    for (int i = 0; i < n; i++) {
        const char *name = pipit_program_param_name(p, i);
        check_tensor(p, f, path, name, &t);
        void *buf = pipit__malloc(t->nbytes); /* file data may be unaligned */
        if (!buf) return pipit__err(PIPIT_STATUS_NOMEM, "checkpoint: out of memory");
        memcpy(buf, t->data, t->nbytes);
        pipit_status s = pipit_program_set_param(p, name, buf, t->nbytes);
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
    if (s) {
        pipit_checkpoint_free(ck);
        return pipit__err_fresh(s, gen0, __func__);
    }
    *out = ck;
    return PIPIT_STATUS_OK;
}

void pipit_checkpoint_free(pipit_checkpoint *ck) {
    if (!ck) return;
    pipit__st_free(ck->f);
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
    return pipit__st_count(ck->f);
}

const char *pipit_checkpoint_tensor_name(const pipit_checkpoint *ck, int i) {
    const pipit__st_tensor *t = ck ? pipit__st_get(ck->f, i) : NULL;
    if (!t) {
        if (!ck) pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_tensor_name: checkpoint is NULL");
        else pipit__err(PIPIT_STATUS_INVALID, "pipit_checkpoint_tensor_name: checkpoint '%s' has no tensor %d (it has %d)", ck->path, i,
                        pipit__st_count(ck->f));
        return NULL;
    }
    return t->name;
}

pipit_status pipit_checkpoint_tensor_shape(const pipit_checkpoint *ck, const char *name, int *ndim,
                                           int64_t *shape) {
    if (!ck || !name)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_tensor_shape: %s is NULL", ck ? "name" : "checkpoint");
    const pipit__st_tensor *t = pipit__st_find(ck->f, name);
    if (!t)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_checkpoint_tensor_shape: checkpoint '%s' has no tensor '%s'",
                          ck->path, name);
    if (ndim) *ndim = t->ndim;
    if (shape) memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    return PIPIT_STATUS_OK;
}

const char *pipit_checkpoint_meta(const pipit_checkpoint *ck, const char *key) {
    if (!ck || !key) {
        pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_meta: %s is NULL", ck ? "key" : "checkpoint");
        return NULL;
    }
    return pipit__st_meta(ck->f, key);
}

pipit_status pipit_checkpoint_load_into(pipit_program *p, const pipit_checkpoint *ck) {
    if (!p || !ck)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_load_into: %s is NULL", p ? "checkpoint" : "program");
    return load_params(p, ck->f, ck->path);
}

pipit_status pipit_checkpoint_load(pipit_program *p, const char *path) {
    if (!p || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_checkpoint_load: %s is NULL", p ? "path" : "program");
    pipit_checkpoint *ck = NULL;
    pipit_status s = pipit_checkpoint_open(path, &ck);
    if (!s) s = pipit_checkpoint_load_into(p, ck);
    pipit_checkpoint_free(ck);
    return s;
}

/* ---- optimizer state ---- */

static const char *const moment_suffix[2] = {".exp_avg", ".exp_avg_sq"};

pipit_status pipit_optimizer_save(const pipit_program *p, const char *path, int64_t next_step) {
    if (!p || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_optimizer_save: %s is NULL", p ? "path" : "program");
    int n = pipit_program_num_params(p);
    if (n <= 0) return bad_program(__func__);
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

static pipit_status meta_int(const pipit__st_file *f, const char *path, const char *key, int64_t *out) {
    const char *v = pipit__st_meta(f, key);
    if (!v || !*v)
        return pipit__err(PIPIT_STATUS_FORMAT, "optimizer state '%s': metadata '%s' missing or not a count", path, key);
    int64_t x = 0; /* strictly digits, no sign, no overflow */
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9')
            return pipit__err(PIPIT_STATUS_FORMAT, "optimizer state '%s': metadata '%s' is '%.40s', not a count", path,
                              key, v);
        if (x > (INT64_MAX - (*c - '0')) / 10)
            return pipit__err(PIPIT_STATUS_FORMAT, "optimizer state '%s': metadata '%s' = %.40s exceeds 2^63-1", path,
                              key, v);
        x = x * 10 + (*c - '0');
    }
    *out = x;
    return PIPIT_STATUS_OK;
}

pipit_status pipit_optimizer_load(pipit_program *p, const char *path, int64_t *next_step) {
    if (!p || !path || !next_step)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_optimizer_load: %s is NULL",
                          !p ? "program" : !path ? "path" : "next_step");
    if (pipit_program_num_params(p) <= 0) return bad_program(__func__);
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
