/*
 * test_bf16_shadow.c — the params' bf16 shadows (compile/lower.c
 * mark_shadows): in a bf16 program AdamW writes each updated fp32 param,
 * rounded to bf16, where the param's pre-loop cast puts it, and the next
 * step skips the cast.
 *   - The update kernels (backend/cpu/adamw.c: the AVX512-BF16 form where
 *     this CPU has it, and the portable one) against AdamW and the rounding
 *     written here: w, m, v and the shadow bit for bit on random values cut
 *     into unaligned thread slices, and the shadow's rounding over every
 *     bf16 upper half with lower halves at and around the tie (NaNs,
 *     infinities, subnormals, which vcvtneps2bf16 alone would flush).
 *   - Training: the same losses and final params, bit for bit, with the
 *     shadows and without them (PIPIT_BF16_SHADOW=0: every step casts), on
 *     one rank and pipelined on two, on 1 and 2 threads, through a
 *     pipit_program_set_param between steps (the next step must cast the
 *     new values, not reuse the old shadow) and a step without update.
 *   - Where there are none: SGD, ZeRO-1, fp32 programs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "gpt2_feeds.h"
#include "pipit_gpt2.h"
#include "runtime/program.h"
#include "test.h"

/* ------------------------------------------------------------ the kernels */

static uint16_t ref_narrow(float f) { /* round to nearest even by the dropped half; NaN quieted */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t hi = u >> 16, lo = u & 0xffffu;
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return (uint16_t)(hi | 0x40u);
    if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi++;
    return (uint16_t)hi;
}

/* torch.optim.AdamW's single-tensor step in fp32, one element at a time */
static void ref_adamw(const pipit__adamw_coef *c, float *w, const float *g, float *m, float *v, int64_t n) {
    float b1 = (float)c->b1, b2 = (float)c->b2, nb1 = (float)(1.0 - c->b1), nb2 = (float)(1.0 - c->b2);
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * (float)c->clip;
        m[i] = b1 * m[i] + nb1 * gi;
        v[i] = b2 * v[i] + nb2 * (gi * gi);
        float denom = sqrtf(v[i]) / (float)c->bc2_sqrt + (float)c->eps;
        w[i] = w[i] * (float)c->decay - (float)c->step_size * (m[i] / denom);
    }
}

typedef void (*adamw_bf16_fn)(const pipit__adamw_coef *, float *, const float *, float *, float *, pipit__bf16 *,
                              int64_t, int64_t);

static uint64_t rng = 88172645463325252ull;
static float rand_f(float scale) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return scale * ((float)(rng >> 40) * 0x1p-24f - 0.5f);
}

/* One kernel on [0, n) cut into three unaligned slices, against the
 * reference; returns the count of differing words. */
static int64_t check_kernel(adamw_bf16_fn fn, const pipit__adamw_coef *c, const float *w0, const float *g,
                            const float *m0, const float *v0, int64_t n) {
    size_t fb = sizeof(float) * (size_t)n;
    float *w = malloc(fb), *m = malloc(fb), *v = malloc(fb), *rw = malloc(fb), *rm = malloc(fb), *rv = malloc(fb);
    pipit__bf16 *s = malloc(sizeof *s * (size_t)(n + 1));
    memcpy(w, w0, fb), memcpy(rw, w0, fb), memcpy(m, m0, fb), memcpy(rm, m0, fb), memcpy(v, v0, fb), memcpy(rv, v0, fb);
    pipit__bf16 *sh = s + 1; /* 2 bytes past an aligned block: the kernel's head loop runs */
    int64_t cut[4] = {0, n / 3 + 5, 2 * n / 3 + 1, n};
    for (int t = 0; t < 3; t++) fn(c, w, g, m, v, sh, cut[t], cut[t + 1]);
    ref_adamw(c, rw, g, rm, rv, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += memcmp(&w[i], &rw[i], 4) != 0 || memcmp(&m[i], &rm[i], 4) != 0 || memcmp(&v[i], &rv[i], 4) != 0 ||
               sh[i].bits != ref_narrow(rw[i]);
    free(w), free(m), free(v), free(rw), free(rm), free(rv), free(s);
    return bad;
}

PIPIT_TEST(bf16_shadow_adamw_writes_the_cast_bits) {
    enum { N = 10007 };
    static float w[N], g[N], m[N], v[N];
    for (int i = 0; i < N; i++) w[i] = rand_f(0.2f), g[i] = rand_f(1e-2f), m[i] = rand_f(1e-3f), v[i] = fabsf(rand_f(1e-5f));
    w[7] = 0x1p-130f, w[8] = -0x1p-149f, g[9] = 0, m[9] = 0, v[9] = 0, w[10] = -0.0f; /* subnormals, zeros */
    pipit__adamw_coef c = {0.9, 0.95, 3e-4 / (1 - 0.9 * 0.9), sqrt(1 - 0.95 * 0.95), 1e-8, 1 - 3e-4 * 0.1, 0.75};
    adamw_bf16_fn fns[2] = {pipit__adamw_f32_bf16, pipit__adamw_f32_bf16_portable};
    for (int f = 0; f < 2; f++) ASSERT_EQ_I64(check_kernel(fns[f], &c, w, g, m, v, N), 0);

    /* the rounding alone: step 0 and no decay leave w as it is */
    static const uint16_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
    enum { NL = sizeof lows / sizeof lows[0], NS = 65536 * NL };
    float *sw = malloc(sizeof *sw * NS), *z = calloc(NS, sizeof *z), *z2 = calloc(NS, sizeof *z2),
          *z3 = calloc(NS, sizeof *z3);
    ASSERT_TRUE(sw && z && z2 && z3);
    for (int i = 0; i < NS; i++) {
        uint32_t u = (uint32_t)(i / NL) << 16 | lows[i % NL];
        memcpy(&sw[i], &u, sizeof u);
    }
    pipit__adamw_coef pass = {0.9, 0.95, 0.0, 1.0, 1e-8, 1.0, 1.0};
    for (int f = 0; f < 2; f++) {
        memset(z2, 0, sizeof *z2 * NS), memset(z3, 0, sizeof *z3 * NS);
        ASSERT_EQ_I64(check_kernel(fns[f], &pass, sw, z, z2, z3, NS), 0);
    }
    free(sw), free(z), free(z2), free(z3);
}

/* ------------------------------------------------------------ training */

enum { TV = 64, TT = 8, TL = 4, TH = 2, TC = 16, TB = 2, M = 2 };

static pipit_status shadow_program(int stages, int shadows, pipit_options o, pipit_graph **g, pipit_program **p) {
    pipit_gpt2_config c = {TV, TT, TT, TL, TH, TC, TB, stages, PIPIT_F32, 0};
    *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(*g, &c);
    setenv("PIPIT_BF16_SHADOW", shadows ? "1" : "0", 1);
    pipit_status s = pipit_compile(*g, loss, &o, p);
    unsetenv("PIPIT_BF16_SHADOW");
    if (!s) s = pipit_gpt2_init(*p, &c, 11);
    return s;
}

static int ranks_with_shadows(const pipit_program *p) {
    int n = 0;
    for (int i = 0; i < p->nlocal; i++) n += p->rs[p->local[i]].has_shadows;
    return n;
}

static int shadows_current(const pipit_program *p) {
    for (int i = 0; i < p->nlocal; i++)
        if (!p->rs[p->local[i]].shadow_ok) return 0;
    return 1;
}

typedef struct {
    double loss[6];
    float *params; /* every param, concatenated in index order */
    size_t bytes;
} run_result;

static pipit_status step(pipit_program *p, int k, int update, run_result *r) {
    int32_t buf[3 * M * TB * TT];
    pipit_feed feeds[3 * M];
    test_gpt2_feeds(M, k, TB, TT, TV, buf, feeds);
    pipit_metrics mt;
    pipit_status s = pipit_step(p, feeds, 3, update, &mt);
    r->loss[k] = mt.loss;
    return s;
}

/* Six steps: two, half of one weight replaced, one, one without update, two. */
static void train(int stages, int threads, int shadows, run_result *r) {
    pipit_schedule *sch = NULL;
    if (stages > 1) ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, stages, 1, M, &sch));
    pipit_graph *g;
    pipit_program *p;
    ASSERT_OK(shadow_program(stages, shadows,
                             (pipit_options){.schedule = sch, .microbatches = M, .threads = threads, .dtype = PIPIT_BF16},
                             &g, &p));
    ASSERT_EQ_I64(ranks_with_shadows(p), shadows ? p->nlocal : 0);
    ASSERT_OK(step(p, 0, 1, r));
    ASSERT_EQ_I64(shadows_current(p), shadows);
    ASSERT_OK(step(p, 1, 1, r));
    const char *name = "h.1.mlp.c_fc.weight";
    int64_t n = 0;
    ASSERT_OK(pipit_program_param_numel(p, name, &n));
    float *x = malloc(sizeof *x * (size_t)n);
    ASSERT_OK(pipit_program_get_param(p, name, x, sizeof *x * (size_t)n));
    for (int64_t i = 0; i < n; i += 2) x[i] *= -0.5f;
    ASSERT_OK(pipit_program_set_param(p, name, x, sizeof *x * (size_t)n));
    free(x);
    ASSERT_EQ_I64(shadows_current(p), 0); /* the next step casts the new values */
    ASSERT_OK(step(p, 2, 1, r));
    ASSERT_OK(step(p, 3, 0, r));
    ASSERT_EQ_I64(shadows_current(p), shadows);
    ASSERT_OK(step(p, 4, 1, r));
    ASSERT_OK(step(p, 5, 1, r));
    r->bytes = 0;
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        int64_t k = 0;
        ASSERT_OK(pipit_program_param_numel(p, pipit_program_param_name(p, i), &k));
        r->bytes += sizeof(float) * (size_t)k;
    }
    r->params = malloc(r->bytes);
    size_t at = 0;
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        int64_t k = 0;
        pipit_program_param_numel(p, pipit_program_param_name(p, i), &k);
        ASSERT_OK(pipit_program_get_param(p, pipit_program_param_name(p, i), (char *)r->params + at,
                                          sizeof(float) * (size_t)k));
        at += sizeof(float) * (size_t)k;
    }
    pipit_program_free(p), pipit_graph_free(g);
    pipit_schedule_free(sch);
}

PIPIT_TEST(bf16_shadow_training_is_the_casts_bits) {
    static const int layouts[][2] = {{1, 1}, {1, 2}, {2, 1}}; /* stages, threads */
    for (int l = 0; l < 3; l++) {
        run_result with = {0}, without = {0};
        train(layouts[l][0], layouts[l][1], 1, &with);
        train(layouts[l][0], layouts[l][1], 0, &without);
        ASSERT_TRUE(with.params && without.params && with.bytes == without.bytes);
        ASSERT_TRUE(memcmp(with.loss, without.loss, sizeof with.loss) == 0);
        ASSERT_TRUE(memcmp(with.params, without.params, with.bytes) == 0);
        for (int k = 0; k < 6; k++) ASSERT_TRUE(isfinite(with.loss[k]));
        free(with.params), free(without.params);
    }
}

/* Only AdamW without ZeRO writes every element of a rank's param, and only
 * a bf16 program casts params. */
PIPIT_TEST(bf16_shadow_only_where_the_update_writes_it) {
    pipit_graph *g;
    pipit_program *p;
    ASSERT_OK(shadow_program(1, 1, (pipit_options){.dtype = PIPIT_BF16, .optimizer = pipit_sgd(0.1)}, &g, &p));
    ASSERT_EQ_I64(ranks_with_shadows(p), 0);
    pipit_program_free(p), pipit_graph_free(g);
    ASSERT_OK(shadow_program(1, 1, (pipit_options){.dtype = PIPIT_BF16, .data_parallel = 2, .zero1 = 1}, &g, &p));
    ASSERT_EQ_I64(ranks_with_shadows(p), 0);
    pipit_program_free(p), pipit_graph_free(g);
    ASSERT_OK(shadow_program(1, 1, (pipit_options){.dtype = PIPIT_BF16, .data_parallel = 2}, &g, &p));
    ASSERT_EQ_I64(ranks_with_shadows(p), 2);
    pipit_program_free(p), pipit_graph_free(g);
    ASSERT_OK(shadow_program(1, 1, (pipit_options){0}, &g, &p));
    ASSERT_EQ_I64(ranks_with_shadows(p), 0);
    pipit_program_free(p), pipit_graph_free(g);
}
