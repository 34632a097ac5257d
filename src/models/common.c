/*
 * common.c — the pieces gpt2.c and llama.c share (models.h): the even stage
 * split, the per-name seeded normal init (splitmix64 streams and Box-Muller,
 * so any pipeline layout sets the same bits) and metadata numbers.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/models.h"
#include "util/common.h"

int pipit__models_first_layer(int cfg_null, int layers, int stages, int s, const char *fn) {
    if (cfg_null) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: config is NULL", fn);
        return -1;
    }
    if (stages < 1 || layers < 1 || s < 0 || s > stages) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: stage %d not in 0..%d (layers %d)", fn, s, stages, layers);
        return -1;
    }
    /* Even split; the first L mod S stages get one layer more. */
    int base = layers / stages, extra = layers % stages;
    return s * base + (s < extra ? s : extra);
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double normal(uint64_t *s) {
    double u1 = ((double)(splitmix(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(splitmix(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

pipit_status pipit__models_init(pipit_program *p, pipit_dtype dt, uint64_t seed,
                                pipit__init_rule (*rule)(const char *name, int ndim, const void *ctx),
                                const void *ctx, const char *fn) {
    int np = pipit_program_num_params(p); /* a compiled program has params */
    if (np <= 0) return pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid program handle (freed, or not a pipit_program)", fn);
    if (dt != PIPIT_F32 && dt != PIPIT_F64)
        return pipit__err(PIPIT_STATUS_INVALID, "%s: config dtype %d is not f32 or f64", fn, (int)dt);
    size_t es = dt == PIPIT_F64 ? 8 : 4;
    for (int i = 0; i < np; i++) {
        const char *name = pipit_program_param_name(p, i);
        int nd;
        int64_t shape[PIPIT_MAX_DIMS], n = 1;
        pipit_status s = pipit_program_param_shape(p, name, &nd, shape);
        if (s) return s;
        for (int k = 0; k < nd; k++) n *= shape[k]; /* the program checked the count */
        void *buf = pipit__malloc((size_t)n * es);
        if (!buf) return pipit__err(PIPIT_STATUS_NOMEM, "%s: out of memory for '%s'", fn, name);
        pipit__init_rule r = rule(name, nd, ctx);
        uint64_t st = seed ^ name_hash(name);
        for (int64_t k = 0; k < n; k++) {
            double v = r.std > 0 ? r.std * normal(&st) : r.value;
            if (dt == PIPIT_F64) ((double *)buf)[k] = v;
            else ((float *)buf)[k] = (float)v;
        }
        s = pipit_program_set_param(p, name, buf, (size_t)n * es);
        pipit__free(buf);
        if (s) {
            pipit__err_prefix("%s (config dtype %s)", fn, dt == PIPIT_F64 ? "f64" : "f32");
            return s;
        }
    }
    return PIPIT_STATUS_OK;
}

int pipit__models_meta_count(const pipit_checkpoint *ck, const char *key, int *out) {
    const char *h = pipit_checkpoint_meta(ck, key);
    if (!h) return 0;
    char *end = NULL;
    errno = 0;
    long v = *h >= '0' && *h <= '9' ? strtol(h, &end, 10) : 0; /* digits only: no sign, no spaces */
    if (v < 1 || errno || *end || v > INT32_MAX) {
        pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': metadata '%s' is '%s', not a positive count",
                   pipit_checkpoint_path(ck), key, h);
        return -1;
    }
    *out = (int)v;
    return 1;
}

int pipit__models_meta_positive(const pipit_checkpoint *ck, const char *key, double *out) {
    const char *h = pipit_checkpoint_meta(ck, key);
    if (!h) return 0;
    char *end = NULL;
    errno = 0;
    double v = strtod(h, &end);
    if (end == h || *end || errno || !(v > 0) || !isfinite(v)) {
        pipit__err(PIPIT_STATUS_FORMAT, "checkpoint '%s': metadata '%s' is '%s', not a positive number",
                   pipit_checkpoint_path(ck), key, h);
        return -1;
    }
    *out = v;
    return 1;
}

/* ---- tensor parallelism ---- */

pipit_status pipit__models_tp_check(const char *model, int T, const pipit__tp_count *counts, int n) {
    for (int i = 0; T > 1 && i < n; i++) {
        if (counts[i].value % T == 0) continue;
        int best = 1; /* the largest T' <= T dividing every count */
        for (int t = T; t > 1 && best == 1; t--) {
            int ok = 1;
            for (int j = 0; j < n && ok; j++) ok = counts[j].value % t == 0;
            if (ok) best = t;
        }
        return pipit__err(PIPIT_STATUS_INVALID,
                          "%s: tensor parallelism %d does not divide %s %lld (each of the %d ranks of a stage holds "
                          "an equal share); %d divides every split size",
                          model, T, counts[i].name, (long long)counts[i].value, T, best);
    }
    return PIPIT_STATUS_OK;
}

pipit_val pipit__models_param(pipit_graph *g, pipit_dtype dt, int T, const char *name, int nd, int64_t d0, int64_t d1,
                              int axis, int parts) {
    int64_t shape[2] = {d0, d1};
    if (T > 1 && axis >= 0) return pipit_param_sharded(g, name, dt, nd, shape, axis, parts);
    return pipit_param(g, name, dt, nd, shape);
}

pipit_val pipit__models_tp_copy(pipit_graph *g, int T, pipit_val x) {
    return T <= 1 ? x : pipit__models_sp(g) ? pipit_sp_gather(g, x, 1) : pipit_tp_copy(g, x);
}
pipit_val pipit__models_tp_sum(pipit_graph *g, int T, pipit_val x) {
    return T <= 1 ? x : pipit__models_sp(g) ? pipit_sp_scatter(g, x, 1) : pipit_tp_sum(g, x);
}

/* ---- sequence parallelism ---- */

int pipit__models_sp(pipit_graph *g) { return pipit_graph_tensor_parallel(g) > 1 && pipit_graph_sequence_parallel(g); }
pipit_val pipit__models_sp_param(pipit_graph *g, pipit_val w) { return pipit__models_sp(g) ? pipit_tp_copy(g, w) : w; }
pipit_val pipit__models_sp_split(pipit_graph *g, pipit_val x) { return pipit__models_sp(g) ? pipit_sp_split(g, x, 1) : x; }

pipit_status pipit__models_sp_check(const char *model, pipit_graph *g, int ctx) {
    int T = pipit_graph_tensor_parallel(g);
    if (!pipit__models_sp(g) || ctx % T == 0) return PIPIT_STATUS_OK;
    return pipit__err(PIPIT_STATUS_INVALID,
                      "%s: sequence parallelism over T = %d ranks does not divide the sequence (ctx %d): each rank "
                      "holds ctx/T positions between the tensor-parallel matmuls",
                      model, T, ctx);
}

pipit_val pipit__models_head_loss(pipit_graph *g, int T, int fused, pipit_val h, pipit_val W, pipit_val targets,
                                  pipit_val *logits) {
    if (!fused) { /* the matmul head (the default): the graph before the fused head, bit for bit */
        pipit_val lg = pipit_matmul_nt(g, h, W); /* this rank's classes with T > 1 */
        pipit_val loss = T > 1 ? pipit_tp_xent_mean(g, lg, targets) : pipit_xent_mean(g, lg, targets);
        if (logits && loss.id >= 0) *logits = lg;
        return loss;
    }
    pipit_val lg = logits ? pipit_matmul_nt(g, h, W) : (pipit_val){g, -1};
    pipit_val loss = T > 1 ? pipit_tp_head_xent_mean(g, h, W, targets) : pipit_head_xent_mean(g, h, W, targets);
    if (logits && loss.id >= 0) *logits = lg;
    return loss;
}
