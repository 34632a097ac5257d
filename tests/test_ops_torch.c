/*
 * test_ops_torch.c — the general op set in f32 against PyTorch: each case
 * builds y from f32 params, runs one step of loss = sum(y * R), and writes
 * the params, R, y and every param's gradient to files; tests/ops_torch.py
 * recomputes y and the gradients with torch, written as Hugging Face's
 * Llama code computes them (inv_freq and cos / sin of RoPE in float32,
 * rotate_half, LlamaRMSNorm, repeat_kv + softmax attention), and compares.
 * Skipped when python3 cannot import torch.
 */
#include <sys/wait.h>

#include "backend/rope_freq.h"
#include "pipit.h"
#include "test.h"

#define F32 PIPIT_F32
#define SH(...) (int64_t[]){__VA_ARGS__}

/* A param times an input of ones, so y is per-microbatch (an output). */
static int nones;
static struct {
    char name[32];
    size_t bytes;
} ones[8];
static pipit_val prm(pipit_graph *g, const char *n, int nd, const int64_t *s) {
    int64_t cnt = 1;
    for (int i = 0; i < nd; i++) cnt *= s[i];
    snprintf(ones[nones].name, sizeof ones[nones].name, "ones_%s", n);
    ones[nones].bytes = sizeof(float) * (size_t)cnt;
    return pipit_mul(g, pipit_param(g, n, F32, nd, s), pipit_input(g, ones[nones++].name, F32, nd, s));
}

static pipit_val c_rope(pipit_graph *g) { return pipit_rope(g, prm(g, "x", 3, SH(2, 7, 24)), 3, 10000.0); }
static pipit_val c_rope_ex(pipit_graph *g) {
    return pipit_rope_ex(g, prm(g, "x", 4, SH(1, 5, 2, 16)), 2, 500000.0, 3);
}
static pipit_val c_rope_long(pipit_graph *g) { return pipit_rope(g, prm(g, "x", 3, SH(1, 1000, 64)), 1, 10000.0); }
static pipit_val c_rope_llama3(pipit_graph *g) {
    return pipit_rope_scaled(g, prm(g, "x", 3, SH(2, 9, 2 * 128)), 2, 500000.0, 9000,
                             &(pipit_rope_scaling){8.0, 1.0, 4.0, 8192});
}
static pipit_val c_rmsnorm(pipit_graph *g) { return pipit_rmsnorm(g, prm(g, "x", 3, SH(3, 5, 64)), prm(g, "w", 1, SH(64)), 1e-6); }
static pipit_val attn(pipit_graph *g, int64_t T, int64_t S, int hq, int hkv, int causal, double scale) {
    pipit_val q = prm(g, "q", 3, SH(2, T, hq * 8)), k = prm(g, "k", 3, SH(2, S, hkv * 8)), v = prm(g, "v", 3, SH(2, S, hkv * 8));
    return pipit_attention_qkv(g, q, k, v, &(pipit_attention_opts){hq, hkv, causal, scale});
}
static pipit_val c_attn_gqa(pipit_graph *g) { return attn(g, 6, 6, 4, 2, 1, 0); }
static pipit_val c_attn_cross(pipit_graph *g) { return attn(g, 4, 9, 2, 1, 0, 0.3); }
static pipit_val x433(pipit_graph *g) { return prm(g, "x", 2, SH(4, 33)); }
static pipit_val c_silu(pipit_graph *g) { return pipit_silu(g, x433(g)); }
static pipit_val c_sigmoid(pipit_graph *g) { return pipit_sigmoid(g, x433(g)); }
static pipit_val c_tanh(pipit_graph *g) { return pipit_tanh(g, x433(g)); }
static pipit_val c_softmax(pipit_graph *g) { return pipit_softmax(g, x433(g)); }
static pipit_val c_log_softmax(pipit_graph *g) { return pipit_log_softmax(g, x433(g)); }
static pipit_val c_swiglu(pipit_graph *g) { return pipit_mul(g, pipit_silu(g, x433(g)), prm(g, "u", 2, SH(4, 33))); }
static pipit_val c_bcast(pipit_graph *g) { /* (a - b) / exp(c) * d + a: every binary op, broadcast both ways */
    pipit_val a = prm(g, "a", 3, SH(2, 3, 5)), b = prm(g, "b", 2, SH(3, 1)), c = prm(g, "c", 1, SH(5));
    pipit_val d = prm(g, "d", 3, SH(2, 1, 5));
    return pipit_add(g, pipit_mul(g, pipit_div(g, pipit_sub(g, a, b), pipit_exp(g, c)), d), a);
}
static pipit_val c_reduce(pipit_graph *g) { /* sum, mean and max along axes, broadcast back */
    pipit_val x = prm(g, "x", 3, SH(3, 4, 5));
    pipit_val s = pipit_reduce_sum(g, x, 0, 0), m = pipit_reduce_mean(g, x, -1, 1), mx = pipit_reduce_max(g, x, 1, 1);
    return pipit_add(g, pipit_mul(g, pipit_add(g, x, m), mx), s);
}

typedef struct {
    const char *name;
    pipit_val (*build)(pipit_graph *g);
} tcase;
static const tcase tcases[] = {
    {"rope", c_rope},       {"rope_ex", c_rope_ex},   {"rope_long", c_rope_long},     {"rope_llama3", c_rope_llama3},
    {"rmsnorm", c_rmsnorm},
    {"attn_gqa", c_attn_gqa}, {"attn_cross", c_attn_cross}, {"silu", c_silu},         {"sigmoid", c_sigmoid},
    {"tanh", c_tanh},       {"softmax", c_softmax},   {"log_softmax", c_log_softmax}, {"swiglu", c_swiglu},
    {"bcast", c_bcast},     {"reduce", c_reduce},
};

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

/* One tensor: "<case>.<name>" raw f32 plus a line "<name> ndim d0 d1 .." in <case>.meta. */
static int dump(const char *dir, const char *cs, FILE *meta, const char *name, const float *v, int nd,
                const int64_t *shape) {
    char path[1024];
    int64_t n = 1;
    fprintf(meta, "%s %d", name, nd);
    for (int i = 0; i < nd; i++) fprintf(meta, " %lld", (long long)shape[i]), n *= shape[i];
    fprintf(meta, "\n");
    snprintf(path, sizeof path, "%s/%s.%s", dir, cs, name);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(v, sizeof(float), (size_t)n, f) == (size_t)n;
    return fclose(f) == 0 && ok;
}

/* Param i of p: its name, rank and shape; returns its element count. */
static int64_t param_dims(const pipit_program *p, int i, const char **name, int *nd, int64_t *shape) {
    int64_t n = 1;
    *name = pipit_program_param_name(p, i);
    pipit_program_param_shape(p, *name, nd, shape);
    for (int k = 0; k < *nd; k++) n *= shape[k];
    return n;
}

/* Runs case c and writes its tensors; 0 on any failure. */
static int run_case(const tcase *c, const char *dir) {
    pipit_graph *g = pipit_graph_new();
    nones = 0;
    pipit_val y = c->build(g);
    int nd = pipit_val_ndim(y);
    int64_t shape[4], n = 1;
    for (int i = 0; i < nd; i++) shape[i] = pipit_val_dim(y, i), n *= shape[i];
    pipit_val r = pipit_input(g, "R", F32, nd, shape);
    pipit_val loss = pipit_sum(g, pipit_mul(g, y, r));
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.outputs = &y, .noutputs = 1}, &p)) {
        fprintf(stderr, "%s: %s\n", c->name, pipit_errmsg());
        pipit_graph_free(g);
        return 0;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.meta", dir, c->name);
    FILE *meta = fopen(path, "w");
    int ok = meta != NULL;
    float *R = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) R[i] = frand();
    for (int i = 0; ok && i < pipit_program_num_params(p); i++) {
        const char *name;
        int pnd;
        int64_t ps[4], pn = param_dims(p, i, &name, &pnd, ps);
        float *w = malloc(sizeof(float) * (size_t)pn);
        for (int64_t k = 0; k < pn; k++) w[k] = 2 * frand();
        ok = !pipit_program_set_param(p, name, w, sizeof(float) * (size_t)pn) && dump(dir, c->name, meta, name, w, pnd, ps);
        free(w);
    }
    pipit_metrics m;
    pipit_feed feeds[9] = {{"R", R, sizeof(float) * (size_t)n}};
    size_t most = 0;
    for (int i = 0; i < nones; i++) most = ones[i].bytes > most ? ones[i].bytes : most;
    float *one = malloc(most);
    for (size_t i = 0; i < most / sizeof(float); i++) one[i] = 1;
    for (int i = 0; i < nones; i++) feeds[1 + i] = (pipit_feed){ones[i].name, one, ones[i].bytes};
    ok = ok && !pipit_step(p, feeds, 1 + nones, 0, &m) && !pipit_program_get_output(p, y, 0, out, sizeof(float) * (size_t)n);
    free(one);
    ok = ok && dump(dir, c->name, meta, "R", R, nd, shape) && dump(dir, c->name, meta, "y", out, nd, shape);
    for (int i = 0; ok && i < pipit_program_num_params(p); i++) {
        const char *name;
        int pnd;
        int64_t ps[4], pn = param_dims(p, i, &name, &pnd, ps);
        float *gr = malloc(sizeof(float) * (size_t)pn);
        char gname[80];
        snprintf(gname, sizeof gname, "grad_%s", name);
        ok = !pipit_program_get_grad(p, name, gr, sizeof(float) * (size_t)pn) && dump(dir, c->name, meta, gname, gr, pnd, ps);
        free(gr);
    }
    if (meta) fclose(meta);
    free(R), free(out);
    pipit_program_free(p);
    pipit_graph_free(g);
    return ok;
}

PIPIT_TEST(ops_torch_oracle) {
    const char *py = getenv("ORACLE_PYTHON") ? getenv("ORACLE_PYTHON") : "/usr/bin/python3";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s -c 'import torch, numpy' >/dev/null 2>&1", py);
    if (system(cmd) != 0) PIPIT_SKIP("%s cannot import torch and numpy", py);
    const char *dir = pipit_test_tmpdir();
    for (size_t i = 0; i < sizeof tcases / sizeof tcases[0]; i++) ASSERT_TRUE(run_case(&tcases[i], dir));
    snprintf(cmd, sizeof cmd, "%s %s/ops_torch.py %s", py, pipit_test_srcdir(), dir);
    for (size_t i = 0; i < sizeof tcases / sizeof tcases[0]; i++) {
        size_t len = strlen(cmd);
        snprintf(cmd + len, sizeof cmd - len, " %s", tcases[i].name);
    }
    int st = system(cmd);
    ASSERT_TRUE(st != -1 && WIFEXITED(st));
    ASSERT_EQ_I64(WEXITSTATUS(st), 0);
}

/* RoPE's inverse frequencies as every backend forms them
 * (backend/rope_freq.h) are transformers' float32 values bit for bit:
 * plain, and rope_type "llama3" at Llama 3.1's and 3.2's settings and at a
 * head of 6 with a frequency in each band (ops_torch.py --freqs forms them
 * with torch from the published rule). */
PIPIT_TEST(rope_freqs_torch_bitwise) {
    const char *py = getenv("ORACLE_PYTHON") ? getenv("ORACLE_PYTHON") : "/usr/bin/python3";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s -c 'import torch, numpy' >/dev/null 2>&1", py);
    if (system(cmd) != 0) PIPIT_SKIP("%s cannot import torch and numpy", py);
    static const struct {
        double theta;
        int64_t D;
        pipit_rope_scaling s;
    } cases[] = {{10000, 128, {0, 0, 0, 0}},
                 {500000, 128, {8, 1, 4, 8192}},
                 {500000, 64, {32, 1, 4, 8192}},
                 {500, 6, {8, 1, 4, 128}},
                 {1e6, 96, {16, 0.5, 3, 4096}}};
    const char *path = pipit_test_path("freqs.txt");
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pipit__rope_freqs r = {cases[k].theta, cases[k].s.factor, cases[k].s.low_freq_factor, cases[k].s.high_freq_factor,
                               cases[k].s.original_max_position_embeddings};
        fprintf(f, "%.17g %lld %.17g %.17g %.17g %lld", r.theta, (long long)cases[k].D, r.factor, r.low_freq_factor,
                r.high_freq_factor, (long long)r.original_max_ctx);
        for (int64_t i = 0; i < cases[k].D / 2; i++) {
            float v = pipit__rope_freq_f32(i, cases[k].D, r);
            uint32_t bits;
            memcpy(&bits, &v, sizeof bits);
            fprintf(f, " %08x", bits);
        }
        fprintf(f, "\n");
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s %s/ops_torch.py --freqs %s", py, pipit_test_srcdir(), path);
    int st = system(cmd);
    ASSERT_TRUE(st != -1 && WIFEXITED(st));
    ASSERT_EQ_I64(WEXITSTATUS(st), 0);
}
