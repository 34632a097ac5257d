/*
 * test_graph_fuzz.c — random VALID graphs of the general op set, compiled
 * under every built-in schedule pipit has (and the sequential one), and for
 * a subset trained one step and compared bit for bit with the one-rank run
 * (issue 25 item 2: a valid graph must never end the process in an internal
 * assertion, nor fail to compile).
 *
 * A graph is built from a seed (splitmix64, deterministic): a chain of S
 * stages joined by pipit_yield, each stage a few random ops on [B,T,C]
 * activations -- matmul, add, mul, sub, div, slice, concat, split, softmax,
 * gather, transpose, reshape, layernorm, rmsnorm, attention (packed and
 * q/k/v, grouped-query), rope, reductions, unary ops -- reading values of
 * this stage and of earlier ones (non-adjacent stages too), params shared
 * by several stages, and values of params alone (the pre-loop region:
 * slices, views, transposes, products, concats of params) that several
 * stages read; i32 slices of the token ids, a bf16 detour, at times a
 * gradient transform (pipit_set_grad) reading another param's gradient and
 * an options.outputs value. The loss is a cross-entropy in the last stage.
 * Compiles vary remat (none, full, pointwise), bf16, forward-only, data parallelism and outputs; a
 * run compares loss, gradients, updated params and outputs with the same
 * step on one rank.
 *
 * PIPIT_FUZZ_GRAPHS=n raises the number of graphs (soak runs),
 * PIPIT_FUZZ_SEED=s moves the seeds, PIPIT_FUZZ_STAGES=k draws 1 to k
 * stages (default 4). An internal assertion aborts the process: the
 * SIGABRT handler names the graph and the schedule first.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "pipit.h"

#define SH(...) (int64_t[]){__VA_ARGS__}

enum { B = 2, T = 4, C = 8, H = 2, D = 4, NV = 11 };

/* ------------------------------------------------------------ the case */

static char fuzz_case[512]; /* what is being compiled or run: printed on abort */

static void on_abort(int sig) {
    static const char pre[] = "\ntest_graph_fuzz: aborted in ";
    ssize_t r = write(2, pre, sizeof pre - 1);
    r = write(2, fuzz_case, strlen(fuzz_case));
    r = write(2, "\n", 1);
    (void)r;
    signal(sig, SIG_DFL);
    raise(sig);
}

typedef struct {
    uint64_t s;
} rng;

static uint64_t next(rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int pick(rng *r, int n) { return (int)(next(r) % (uint64_t)n); }

/* ------------------------------------------------------------ the graph */

#define MAXV 256

typedef struct {
    pipit_graph *g;
    rng r;
    int nparams;
    /* activations [B,T,C] and their stages */
    pipit_val act[MAXV];
    int act_stage[MAXV], nact;
    /* values of params alone: matrices [C,C], vectors [C], tables [NV,C] */
    pipit_val mat[MAXV], vec[MAXV], tab[MAXV];
    int nmat, nvec, ntab;
    pipit_val x, idx, tgt; /* the inputs */
    pipit_val sq[MAXV];    /* the [C,C] params (gradient transforms) */
    int nsq;
} gen;

static pipit_val param(gen *G, int nd, const int64_t *shape) {
    char name[32];
    snprintf(name, sizeof name, "p%02d", G->nparams++);
    pipit_val p = pipit_param(G->g, name, PIPIT_F32, nd, shape);
    if (nd == 2 && shape[0] == C && shape[1] == C && G->nsq < MAXV) G->sq[G->nsq++] = p;
    return p;
}

static void push(pipit_val *pool, int *n, pipit_val v) {
    if (*n < MAXV) pool[(*n)++] = v;
}

/* A value of params alone of shape [C,C]: a new param, one already made
 * (shared by stages), or an op on params alone -- a view or a copy slice
 * of a larger param, a transpose, a product, a concat, a softmax, a
 * reshape round trip. */
static pipit_val mat_of(gen *G, int depth) {
    pipit_graph *g = G->g;
    int k = depth > 2 ? pick(&G->r, 2) : pick(&G->r, 11);
    if (k == 1 && G->nmat) return G->mat[pick(&G->r, G->nmat)];
    pipit_val m;
    switch (k) {
    case 2: m = pipit_slice(g, param(G, 2, SH(3 * C, C)), 0, C * pick(&G->r, 3), C); break; /* a view */
    case 3: m = pipit_slice(g, param(G, 2, SH(C, 2 * C)), 1, pick(&G->r, C + 1), C); break; /* a copy */
    case 4: m = pipit_transpose(g, mat_of(G, depth + 1), 0, 1); break;
    case 5: m = pipit_scale(g, pipit_tanh(g, mat_of(G, depth + 1)), 0.5); break;
    case 6: m = pipit_mul(g, mat_of(G, depth + 1), mat_of(G, depth + 1)); break;
    case 7: {
        pipit_val parts[2] = {pipit_slice(g, mat_of(G, depth + 1), 1, 0, C / 2), pipit_slice(g, mat_of(G, depth + 1), 1, C / 2, C / 2)};
        m = pipit_concat(g, 2, parts, 1);
        break;
    }
    case 8: m = pipit_softmax(g, mat_of(G, depth + 1)); break;
    case 9: {
        pipit_val f = pipit_reshape(g, mat_of(G, depth + 1), 2, SH(2, C * C / 2));
        m = pipit_reshape(g, pipit_sigmoid(g, f), 2, SH(C, C));
        break;
    }
    case 10: m = pipit_add(g, mat_of(G, depth + 1), param(G, 1, SH(C))); break; /* broadcast */
    default: m = param(G, 2, SH(C, C)); break;
    }
    push(G->mat, &G->nmat, m);
    return m;
}

/* [C]: a param, one made already, a row of a matrix of params, a reduction. */
static pipit_val vec_of(gen *G) {
    pipit_graph *g = G->g;
    int k = pick(&G->r, 5);
    if (k == 1 && G->nvec) return G->vec[pick(&G->r, G->nvec)];
    pipit_val v;
    if (k == 2) v = pipit_reshape(g, pipit_slice(g, mat_of(G, 1), 0, pick(&G->r, C), 1), 1, SH(C));
    else if (k == 3) v = pipit_add(g, pipit_reduce_mean(g, mat_of(G, 1), 0, 0), param(G, 1, SH(C)));
    else v = param(G, 1, SH(C));
    push(G->vec, &G->nvec, v);
    return v;
}

/* [NV,C] tables: a param (the tied embedding, read again by the head), or
 * rows of a larger one. */
static pipit_val tab_of(gen *G) {
    int k = pick(&G->r, 3);
    if (k == 1 && G->ntab) return G->tab[pick(&G->r, G->ntab)];
    pipit_val t = k == 2 ? pipit_slice(G->g, param(G, 2, SH(NV + 3, C)), 0, pick(&G->r, 4), NV) : param(G, 2, SH(NV, C));
    push(G->tab, &G->ntab, t);
    return t;
}

/* An activation: of this stage (cur) or of any earlier one. */
static pipit_val any_act(gen *G) { return G->act[pick(&G->r, G->nact)]; }

static void add_act(gen *G, pipit_val v, int stage) {
    if (G->nact < MAXV) {
        G->act[G->nact] = v;
        G->act_stage[G->nact++] = stage;
    }
}

/* One random op reading cur (so it stays in this stage) and maybe others. */
static pipit_val step_op(gen *G, pipit_val a, int stage) {
    pipit_graph *g = G->g;
    switch (pick(&G->r, 28)) {
    case 0: return pipit_matmul(g, a, mat_of(G, 0), 0, 0);
    case 1: return pipit_matmul_nt(g, a, mat_of(G, 0));
    case 2: return pipit_add(g, a, any_act(G));
    case 3: return pipit_mul(g, a, vec_of(G));
    case 4: return pipit_mul(g, a, pipit_sigmoid(g, any_act(G)));
    case 5: { /* halves of two values, maybe of two stages */
        pipit_val h[2] = {pipit_slice(g, a, -1, C / 2, C / 2), pipit_slice(g, any_act(G), -1, 0, C / 2)};
        return pipit_concat(g, 2, h, -1);
    }
    case 6: { /* a concat of three values (of up to three stages) */
        pipit_val h[3] = {pipit_slice(g, any_act(G), -1, 0, 2), pipit_slice(g, a, -1, 2, 2),
                          pipit_slice(g, any_act(G), -1, 4, 4)};
        return pipit_concat(g, 3, h, -1);
    }
    case 7: return pipit_softmax(g, pipit_add(g, a, any_act(G)));
    case 8: return pipit_add(g, a, pipit_gather(g, tab_of(G), G->idx));
    case 9: return pipit_add(g, a, pipit_embed(g, tab_of(G), G->idx));
    case 10: { /* [B,C,T] @ [T,T], back */
        pipit_val t = pipit_transpose(g, a, 1, 2);
        return pipit_transpose(g, pipit_matmul(g, t, param(G, 2, SH(T, T)), 0, 0), 1, 2);
    }
    case 11: { /* rows flattened: [B*T, C] */
        pipit_val f = pipit_reshape(g, a, 2, SH(B * T, C));
        return pipit_reshape(g, pipit_gelu(g, pipit_matmul(g, f, mat_of(G, 0), 0, 0)), 3, SH(B, T, C));
    }
    case 12: return pipit_layernorm(g, a, vec_of(G), vec_of(G), 1e-5);
    case 13: return pipit_rmsnorm(g, a, vec_of(G), 1e-5);
    case 14: { /* q from a, k and v from any stage; grouped-query at times */
        int kvh = pick(&G->r, 2) ? H : 1;
        pipit_val k = any_act(G), v = any_act(G);
        if (kvh == 1) k = pipit_slice(g, k, -1, 0, D), v = pipit_slice(g, v, -1, D, D);
        return pipit_attention_qkv(g, a, k, v, &(pipit_attention_opts){H, kvh, pick(&G->r, 2), 0});
    }
    case 15: {
        pipit_val qkv[3] = {a, any_act(G), any_act(G)};
        return pipit_attention(g, pipit_concat(g, 3, qkv, -1), H);
    }
    case 16: return pipit_rope(g, a, H, pick(&G->r, 2) ? 10000.0 : 500.0);
    case 17: return pipit_sub(g, a, pipit_reduce_max(g, a, -1, 1));
    case 18: {
        pipit_val den = pipit_add(g, pipit_exp(g, pipit_tanh(g, any_act(G))), pipit_exp(g, pipit_tanh(g, pipit_reduce_mean(g, a, 1, 1))));
        return pipit_div(g, a, den);
    }
    case 19: {
        pipit_val s[3];
        pipit_split(g, a, -1, 3, SH(2, 4, 2), s);
        pipit_val r[3] = {s[1], pipit_silu(g, s[0]), s[2]};
        return pipit_concat(g, 3, r, -1);
    }
    case 20: return pipit_bias_add(g, a, vec_of(G));
    case 21: return pipit_add(g, a, pipit_broadcast_to(g, pipit_reduce_sum(g, any_act(G), 0, 1), 3, SH(B, T, C)));
    case 22: return pipit_log_softmax(g, a);
    case 23: { /* token ids rolled by one position: i32 slices and a concat in the loop */
        pipit_val ids[2] = {pipit_slice(g, G->idx, 1, 1, T - 1), pipit_slice(g, G->idx, 1, 0, 1)};
        return pipit_add(g, a, pipit_gather(g, tab_of(G), pipit_concat(g, 2, ids, 1)));
    }
    case 24: /* a bf16 detour inside an f32 graph */
        return pipit_add(g, a, pipit_cast(g, pipit_silu(g, pipit_cast(g, any_act(G), PIPIT_BF16)), PIPIT_F32));
    case 25: /* a value of params alone behind a yield: it lives in stage 1 (so only from stage 1 on) */
        return stage >= 1 ? pipit_matmul(g, a, pipit_yield(g, mat_of(G, 0)), 0, 0) : pipit_gelu(g, a);
    case 26: /* the input behind a yield */
        return stage >= 1 ? pipit_mul(g, a, pipit_sigmoid(g, pipit_yield(g, G->x))) : pipit_silu(g, a);
    default: return pipit_tanh(g, pipit_add(g, a, G->x));
    }
}

/* Builds graph `seed` with S stages; returns its loss, and in *out a
 * per-microbatch value for options.outputs. */
static pipit_val build(pipit_graph *g, uint64_t seed, int S, pipit_val *out) {
    gen *G = calloc(1, sizeof *G);
    G->g = g;
    G->r.s = seed * 0x2545f4914f6cdd1dull + 1;
    G->x = pipit_input(g, "x", PIPIT_F32, 3, SH(B, T, C));
    G->idx = pipit_input(g, "idx", PIPIT_I32, 2, SH(B, T));
    G->tgt = pipit_input(g, "tgt", PIPIT_I32, 2, SH(B, T));
    int nops = 2 + pick(&G->r, 4);
    /* stage 0 reads the input or a gathered table */
    pipit_val cur = pick(&G->r, 2) ? pipit_matmul(g, G->x, mat_of(G, 0), 0, 0) : pipit_gather(g, tab_of(G), G->idx);
    add_act(G, cur, 0);
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < nops; i++) {
            cur = step_op(G, cur, s);
            add_act(G, cur, s);
        }
        if (s + 1 == S) break;
        /* at times an earlier value crosses by a yield of its own */
        if (pick(&G->r, 3) == 0) {
            int j = pick(&G->r, G->nact);
            if (G->act_stage[j] <= s) add_act(G, pipit_yield(g, G->act[j]), G->act_stage[j] + 1);
        }
        cur = pipit_yield(g, cur);
        if (s + 2 < S && pick(&G->r, 6) == 0) cur = pipit_yield(g, cur), s++; /* a stage of nothing but a yield */
        add_act(G, cur, s + 1);
        if (pick(&G->r, 4) == 0) (void)step_op(G, any_act(G), 0); /* at times a value nothing reads */
    }
    pipit_val logits = pick(&G->r, 2) ? pipit_matmul_nt(g, cur, tab_of(G)) : pipit_matmul(g, cur, param(G, 2, SH(C, NV)), 0, 0);
    pipit_val loss = pipit_xent_mean(g, logits, G->tgt);
    if (pick(&G->r, 2)) loss = pipit_add(g, loss, pipit_scale(g, pipit_mean(g, pipit_mul(g, cur, any_act(G))), 1e-2));
    if (pick(&G->r, 4) == 0) (void)param(G, 1, SH(3)); /* a param nothing reads */
    if (out) *out = any_act(G);
    if (G->nsq && pick(&G->r, 5) == 0) { /* a gradient transform reading another param and its gradient */
        pipit_val p = G->sq[pick(&G->r, G->nsq)], q = G->sq[pick(&G->r, G->nsq)];
        pipit_val d = pipit_add(g, pipit_grad_of(g, p), pipit_scale(g, pipit_transpose(g, pipit_grad_of(g, q), 0, 1), 0.25));
        pipit_set_grad(g, p, pipit_add(g, d, pipit_scale(g, q, 1e-3)));
    }
    free(G);
    return loss;
}

/* ------------------------------------------------------------ running */

typedef struct {
    pipit_status status; /* of the step */
    char msg[512];
    int n;
    double loss;
    char **names;
    float **param, **grad;
    size_t *bytes;
    float *out; /* options.outputs' value for every microbatch, or NULL */
    size_t out_bytes;
} result;

static void result_free(result *r) {
    for (int i = 0; i < r->n; i++) {
        free(r->names[i]);
        free(r->param[i]);
        free(r->grad[i]);
    }
    free(r->names);
    free(r->param);
    free(r->grad);
    free(r->bytes);
    free(r->out);
    memset(r, 0, sizeof *r);
}

static void init_params(pipit_program *p) {
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = 0;
        pipit_program_param_numel(p, name, &n);
        uint32_t h = 2166136261u;
        for (const char *c = name; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
        float *w = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++) {
            h = h * 1664525u + 1013904223u;
            w[k] = 0.8f * ((float)(h >> 8) / 16777216.0f - 0.5f);
        }
        pipit_program_set_param(p, name, w, sizeof(float) * (size_t)n);
        free(w);
    }
}

/* One step (update on) over nmb = M x D microbatches of fixed feeds; with
 * an output, its value for every microbatch. */
static pipit_status run_step(pipit_program *p, int nmb, pipit_val outv, result *out) {
    float *x = malloc(sizeof(float) * B * T * C * (size_t)nmb);
    int32_t *ix = malloc(sizeof(int32_t) * 2 * B * T * (size_t)nmb);
    pipit_feed *f = malloc(sizeof(pipit_feed) * 3 * (size_t)nmb);
    uint32_t h = 12345;
    for (int m = 0; m < nmb; m++) {
        float *xm = x + (size_t)m * B * T * C;
        int32_t *im = ix + (size_t)m * 2 * B * T, *tm = im + B * T;
        for (int i = 0; i < B * T * C; i++) h = h * 1664525u + 1013904223u, xm[i] = (float)(h >> 8) / 16777216.0f - 0.5f;
        for (int i = 0; i < B * T; i++) h = h * 1664525u + 1013904223u, im[i] = (int32_t)((h >> 8) % NV), tm[i] = (int32_t)((h >> 16) % NV);
        f[3 * m] = (pipit_feed){"x", xm, sizeof(float) * B * T * C};
        f[3 * m + 1] = (pipit_feed){"idx", im, sizeof(int32_t) * B * T};
        f[3 * m + 2] = (pipit_feed){"tgt", tm, sizeof(int32_t) * B * T};
    }
    pipit_metrics met;
    pipit_status s = pipit_step_feeds(p, f, 3 * (int64_t)nmb, 3, 1, &met);
    free(x);
    free(ix);
    free(f);
    if (s) return s;
    out->loss = met.loss;
    out->n = pipit_program_num_params(p);
    out->names = calloc((size_t)out->n, sizeof *out->names);
    out->param = calloc((size_t)out->n, sizeof *out->param);
    out->grad = calloc((size_t)out->n, sizeof *out->grad);
    out->bytes = calloc((size_t)out->n, sizeof *out->bytes);
    for (int i = 0; i < out->n && !s; i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n = 0;
        pipit_program_param_numel(p, name, &n);
        out->names[i] = strdup(name);
        out->bytes[i] = sizeof(float) * (size_t)n;
        out->param[i] = malloc(out->bytes[i]);
        out->grad[i] = malloc(out->bytes[i]);
        s = pipit_program_get_param(p, name, out->param[i], out->bytes[i]);
        if (!s) s = pipit_program_get_grad(p, name, out->grad[i], out->bytes[i]);
    }
    if (!s && outv.g) {
        size_t one = sizeof(float) * B * T * C;
        out->out_bytes = one * (size_t)nmb;
        out->out = malloc(out->out_bytes);
        for (int m = 0; m < nmb && !s; m++) s = pipit_program_get_output(p, outv, m, (char *)out->out + one * (size_t)m, one);
    }
    return s;
}

/* 0 when got has ref's bits: loss, every gradient, every updated param,
 * the outputs. */
static int compare(const result *ref, const result *got, const char *what) {
    if (ref->n != got->n || memcmp(&ref->loss, &got->loss, sizeof ref->loss)) {
        fprintf(stderr, "%s: loss %.17g vs one rank %.17g (%d vs %d params)\n", what, got->loss, ref->loss, got->n, ref->n);
        return 1;
    }
    if (got->out && (!ref->out || ref->out_bytes != got->out_bytes || memcmp(ref->out, got->out, got->out_bytes))) {
        fprintf(stderr, "%s: options.outputs differ from one rank's\n", what);
        return 1;
    }
    for (int i = 0; i < got->n; i++) {
        int j = 0;
        while (j < ref->n && strcmp(ref->names[j], got->names[i])) j++;
        if (j == ref->n) {
            fprintf(stderr, "%s: param %s not in the one-rank program\n", what, got->names[i]);
            return 1;
        }
        for (int pass = 0; pass < 2; pass++) { /* the gradient first: AdamW's first step is lr x sign(g) */
            const float *a = pass ? ref->param[j] : ref->grad[j], *b = pass ? got->param[i] : got->grad[i];
            if (memcmp(a, b, got->bytes[i]) == 0) continue;
            for (size_t k = 0; k < got->bytes[i] / 4; k++)
                if (memcmp(&a[k], &b[k], 4)) {
                    fprintf(stderr, "%s: %s of %s[%zu]: %.9g vs one rank %.9g\n", what, pass ? "value" : "gradient",
                            got->names[i], k, b[k], a[k]);
                    break;
                }
            return 1;
        }
    }
    return 0;
}

typedef struct {
    int kind, P, V, M, remat, bf16, fwd, dp, out, run;
} config;

/* Compiles graph `seed` (S stages) under cfg (kind < 0: no schedule, one
 * rank); with cfg->run, runs one step into out (its status and message
 * there). 0 or the compile's status. */
static pipit_status compile_one(uint64_t seed, int S, const config *cfg, pipit_schedule *sch, result *out) {
    snprintf(fuzz_case, sizeof fuzz_case,
             "graph seed %llu (S=%d): %s P=%d V=%d M=%d remat=%d dtype=%s forward_only=%d dp=%d outputs=%d%s",
             (unsigned long long)seed, S, cfg->kind < 0 ? "one rank" : pipit_schedule_kind_name((pipit_schedule_kind)cfg->kind),
             cfg->P, cfg->V, cfg->M, cfg->remat, cfg->bf16 ? "bf16" : "f32", cfg->fwd, cfg->dp, cfg->out,
             cfg->run ? " (run)" : "");
    pipit_graph *g = pipit_graph_new();
    pipit_val outv;
    pipit_val loss = build(g, seed, S, &outv);
    if (pipit_graph_status(g)) {
        fprintf(stderr, "%s: the generator built an invalid graph: %s\n", fuzz_case, pipit_graph_errmsg(g));
        pipit_graph_free(g);
        return PIPIT_STATUS_INTERNAL;
    }
    pipit_options o = {.schedule = sch, .microbatches = cfg->M, .remat = cfg->remat, .forward_only = cfg->fwd,
                       .data_parallel = cfg->dp, .dtype = cfg->bf16 ? PIPIT_BF16 : PIPIT_F32,
                       .optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1), .clip_norm = 1.0,
                       .outputs = cfg->out ? &outv : NULL, .noutputs = cfg->out};
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(g, loss, &o, &p);
    if (s) fprintf(stderr, "%s: compile: %s\n", fuzz_case, pipit_errmsg());
    if (!s && cfg->run) {
        init_params(p);
        out->status = run_step(p, cfg->M * (cfg->dp > 1 ? cfg->dp : 1), cfg->out ? outv : (pipit_val){0}, out);
        if (out->status) snprintf(out->msg, sizeof out->msg, "%s", pipit_errmsg());
    }
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 ? dflt : x;
}

/* Every built-in schedule for S = P x V stages, at M = P and 2P (or what
 * the kind accepts), for graph `seed`; options varied by the seed; with
 * `run`, some of the programs also run one step, compared with the same
 * step on one rank (same M, D and dtype). Returns the number of failures. */
static int fuzz_graph(uint64_t seed, int S, int run, int *compiled, int *ran, int *kinds) {
    int bad = 0;
    rng r = {seed ^ 0x5eedull};
    enum { MAXM = 17 };
    result ref[MAXM][2][2] = {{{{0}}}}; /* [M][bf16][dp > 1] one-rank runs, made on demand */
    int have_ref[MAXM][2][2] = {{{0}}};
    config c0 = {.kind = -1, .P = 1, .V = S, .M = 2};
    if (compile_one(seed, S, &c0, NULL, NULL)) bad++;
    (*compiled)++;
    for (int kind = 0; kind < PIPIT_SCHED_COUNT; kind++)
        for (int P = 1; P <= S; P++) {
            if (S % P) continue;
            int nv = S / P;
            for (int mi = 0; mi < 2; mi++) {
                int M = mi ? 2 * P : P;
                pipit_schedule *sch = NULL;
                if (M >= MAXM || pipit_schedule_build((pipit_schedule_kind)kind, P, nv, M, &sch)) continue;
                if (pipit_schedule_stages(sch) != S) { /* the kind fixed its own V */
                    pipit_schedule_free(sch);
                    continue;
                }
                config c = {.kind = kind, .P = P, .V = nv, .M = M, .remat = pick(&r, 6) % 3, .bf16 = pick(&r, 5) == 0,
                            .fwd = pick(&r, 8) == 0, .dp = pick(&r, 6) == 0 ? 2 : 1, .out = pick(&r, 4) == 0};
                c.run = run && !c.fwd && pick(&r, 2) == 0;
                result got = {0};
                pipit_status s = compile_one(seed, S, &c, sch, c.run ? &got : NULL);
                (*compiled)++;
                kinds[kind]++;
                if (s) bad++;
                if (!s && c.run) {
                    char what[sizeof fuzz_case];
                    memcpy(what, fuzz_case, sizeof what);
                    result *rf = &ref[M][c.bf16][c.dp > 1];
                    if (!have_ref[M][c.bf16][c.dp > 1]) {
                        config cr = {.kind = -1, .P = 1, .V = S, .M = M, .bf16 = c.bf16, .dp = c.dp, .out = 1, .run = 1};
                        if (compile_one(seed, S, &cr, NULL, rf)) bad++;
                        have_ref[M][c.bf16][c.dp > 1] = 1;
                    }
                    /* the same step: the same bits, or the same refusal (a
                     * non-finite gradient norm skips the update everywhere) */
                    if (rf->status != got.status) {
                        fprintf(stderr, "%s: step %s (%s), one rank %s (%s)\n", what, pipit_status_name(got.status),
                                got.msg, pipit_status_name(rf->status), rf->msg);
                        bad++;
                    } else if (!got.status) {
                        bad += compare(rf, &got, what);
                        (*ran)++;
                    }
                }
                result_free(&got);
                pipit_schedule_free(sch);
            }
        }
    for (int i = 0; i < MAXM; i++)
        for (int k = 0; k < 2; k++)
            for (int d = 0; d < 2; d++) result_free(&ref[i][k][d]);
    return bad;
}

PIPIT_TEST(graph_fuzz_compile_every_schedule) {
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_abort;
    sigaction(SIGABRT, &sa, &old);
    long ngraphs = env_long("PIPIT_FUZZ_GRAPHS", 24);
    uint64_t base = (uint64_t)env_long("PIPIT_FUZZ_SEED", 1);
    long maxS = env_long("PIPIT_FUZZ_STAGES", 4);
    if (maxS < 1 || maxS > 16) maxS = 4;
    int bad = 0, compiled = 0, ran = 0, kinds[PIPIT_SCHED_COUNT] = {0};
    for (long i = 0; i < ngraphs; i++) {
        uint64_t seed = base + (uint64_t)i; /* PIPIT_FUZZ_SEED=seed PIPIT_FUZZ_GRAPHS=1 replays one */
        int S = 1 + (int)(seed % (uint64_t)maxS); /* 1 to 4 stages (P x V) unless PIPIT_FUZZ_STAGES */
        bad += fuzz_graph(seed, S, seed % 3 == 1, &compiled, &ran, kinds);
    }
    sigaction(SIGABRT, &old, NULL);
    fprintf(stderr, "%ld graphs: %d compiles, %d steps compared bit for bit with one rank\n", ngraphs, compiled, ran);
    ASSERT_EQ_I64(bad, 0);
    ASSERT_TRUE(ran > 0);
    for (int k = 0; k < PIPIT_SCHED_COUNT; k++)
        if (!kinds[k]) PIPIT_FAIL_("schedule %s never compiled", pipit_schedule_kind_name((pipit_schedule_kind)k));
}

/* Issue 25 item 2, as reported: s = slice(W) (params alone, computed before
 * the loop) read by stage 0 and feeding t = f(s), read by another rank.
 * Compiles under every schedule without V and trains one step bit for bit
 * as one rank; it ended in "internal error b >= 0" (emit.c) before. */
static pipit_val item2_build(pipit_graph *g, int S) {
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 3, SH(B, T, C));
    pipit_val tgt = pipit_input(g, "tgt", PIPIT_I32, 2, SH(B, T));
    pipit_input(g, "idx", PIPIT_I32, 2, SH(B, T)); /* fed by run_step, read by none */
    pipit_val W = pipit_param(g, "W", PIPIT_F32, 2, SH(3 * C, C));
    pipit_val s = pipit_slice(g, W, 0, C, C);             /* a view of W, pre-loop */
    pipit_val t = pipit_scale(g, pipit_tanh(g, s), 0.5);  /* of s alone, pre-loop */
    pipit_val h = pipit_matmul(g, x, s, 0, 0);            /* stage 0 reads s */
    for (int k = 1; k < S; k++) h = pipit_matmul(g, pipit_yield(g, h), t, 0, 0); /* later stages read t */
    pipit_val logits = pipit_matmul(g, h, pipit_param(g, "head", PIPIT_F32, 2, SH(C, NV)), 0, 0);
    return pipit_xent_mean(g, logits, tgt);
}

static pipit_status item2_run(int S, pipit_schedule *sch, int M, result *out) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = item2_build(g, S);
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(g, loss, &(pipit_options){.schedule = sch, .microbatches = M,
                                                             .optimizer = pipit_adamw(1e-2, 0.9, 0.95, 1e-8, 0.1)}, &p);
    if (!s) {
        init_params(p);
        s = run_step(p, M, (pipit_val){0}, out);
    }
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

PIPIT_TEST(compile_preloop_value_read_across_ranks) {
    int n = 0;
    for (int P = 2; P <= 4; P++) {
        result ref = {0};
        ASSERT_OK(item2_run(P, NULL, 2 * P, &ref));
        for (int kind = 0; kind < PIPIT_SCHED_COUNT; kind++) {
            pipit_schedule *sch = NULL;
            if (pipit_schedule_build((pipit_schedule_kind)kind, P, 1, 2 * P, &sch)) continue;
            if (pipit_schedule_stages(sch) != P) {
                pipit_schedule_free(sch);
                continue;
            }
            result got = {0};
            snprintf(fuzz_case, sizeof fuzz_case, "%s P=%d", pipit_schedule_kind_name((pipit_schedule_kind)kind), P);
            pipit_status s = item2_run(P, sch, 2 * P, &got);
            pipit_schedule_free(sch);
            if (s) fprintf(stderr, "%s: %s\n", fuzz_case, pipit_errmsg());
            ASSERT_OK(s);
            ASSERT_EQ_I64(compare(&ref, &got, fuzz_case), 0);
            result_free(&got);
            n++;
        }
        result_free(&ref);
    }
    ASSERT_TRUE(n >= 12);
}
