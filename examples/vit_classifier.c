/*
 * vit_classifier.c — a model that is not a language model: a small Vision
 * Transformer that classifies synthetic images, pipelined over two ranks
 * (threads) with interleaved 1F1B (two stages per rank), on the public
 * headers alone.
 *
 *   build/vit_classifier [--steps N] [--schedule NAME] [--check]
 *
 * Each 16x16 image holds one line segment (horizontal, vertical, or on
 * either diagonal) at a random place over noise; its class is the line's
 * direction, which no single 4x4 patch shows on its own. The model: patch
 * embedding by reshape + transpose + matmul, a class token, a learned
 * position embedding, four pre-norm blocks of non-causal multi-head
 * attention and a GELU MLP, a linear head on the class token and softmax
 * cross-entropy over the classes. It prints the loss and the accuracy on
 * each step's fresh images (measured before the step's update, so the
 * images are unseen) and exits non-zero unless the loss halves (the
 * last ten steps' mean against the first).
 * --check trains a second copy on one rank, sequentially, from the same
 * weights and images, and exits non-zero unless every step's loss and
 * every final parameter are bitwise equal to the pipelined run's.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipit.h"

enum {
    IMG = 16,              /* image side */
    PATCH = 4,             /* patch side */
    GRID = IMG / PATCH,    /* patches per side */
    NPATCH = GRID * GRID,  /* 16 patches */
    PDIM = PATCH * PATCH,  /* pixels per patch */
    TOK = NPATCH + 1,      /* the class token, then the patches */
    DIM = 32,
    HEADS = 4,
    FFN = 64,
    BLOCKS = 4,
    CLASSES = 4,
    B = 16,                /* images per microbatch */
    M = 4,                 /* microbatches per step */
    RANKS = 2,
    LINE = 6               /* pixels of a line segment */
};

static void check(pipit_status s, const char *what) {
    if (s != PIPIT_STATUS_OK) {
        fprintf(stderr, "vit_classifier: %s: %s\n", what, pipit_errmsg());
        exit(1);
    }
}

/* Uniform in [0, 1): a 32-bit xorshift (plain C11, the same numbers on
 * every machine). The state must not be 0. */
static float uniform(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)(*s >> 8) * 0x1.0p-24f;
}

static int below(uint32_t *s, int n) { return (int)(uniform(s) * (float)n); }

/* One image of class c: noise in [0, 0.3), and a segment of LINE pixels
 * at 1.0 in direction c (0 -, 1 |, 2 \, 3 /) starting where it fits. */
static void make_image(uint32_t *s, int c, float *img) {
    static const int dr[CLASSES] = {0, 1, 1, 1}, dc[CLASSES] = {1, 0, 1, -1};
    for (int i = 0; i < IMG * IMG; i++) img[i] = 0.3f * uniform(s);
    int span = IMG - LINE + 1;
    int r = dr[c] ? below(s, span) : below(s, IMG);
    int col = dc[c] > 0 ? below(s, span) : dc[c] < 0 ? LINE - 1 + below(s, span) : below(s, IMG);
    for (int k = 0; k < LINE; k++) img[(r + k * dr[c]) * IMG + col + k * dc[c]] = 1.0f;
}

/* The images and labels of step `step`'s microbatches: a function of the
 * step alone, so two runs see the same data. */
static void make_step(int step, float (*img)[B * IMG * IMG], int32_t (*lab)[B]) {
    uint32_t s = 0x9e3779b9u ^ (uint32_t)(step + 1) * 2654435761u;
    for (int m = 0; m < M; m++)
        for (int i = 0; i < B; i++) {
            lab[m][i] = below(&s, CLASSES);
            make_image(&s, lab[m][i], img[m] + i * IMG * IMG);
        }
}

/* x [..., in] @ name.weight [in, out] + name.bias [out] */
/* names are < 64 characters (block() writes them into 64 bytes): room for
 * the suffix, so that no compiler sees a cut (-Wformat-truncation at -O3) */
static pipit_val dense(pipit_graph *g, pipit_val x, const char *name, int in, int out) {
    char wn[64 + 8], bn[64 + 8];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    pipit_val w = pipit_param(g, wn, PIPIT_F32, 2, (int64_t[]){in, out});
    pipit_val b = pipit_param(g, bn, PIPIT_F32, 1, (int64_t[]){out});
    return pipit_bias_add(g, pipit_matmul(g, x, w, 0, 0), b);
}

static pipit_val norm(pipit_graph *g, pipit_val x, const char *name) {
    char wn[64 + 8], bn[64 + 8];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    pipit_val w = pipit_param(g, wn, PIPIT_F32, 1, (int64_t[]){DIM});
    pipit_val b = pipit_param(g, bn, PIPIT_F32, 1, (int64_t[]){DIM});
    return pipit_layernorm(g, x, w, b, 1e-6);
}

/* images [B, IMG, IMG] -> patches [B, NPATCH, PDIM], row-major over the
 * grid, each patch's pixels row-major: split the rows into (grid row,
 * pixel row) and the columns into (grid column, pixel column), then swap
 * pixel row with grid column. Four axes at most: B and the grid row share
 * the first. */
static pipit_val patchify(pipit_graph *g, pipit_val img) {
    pipit_val x = pipit_reshape(g, img, 4, (int64_t[]){B * GRID, PATCH, GRID, PATCH});
    x = pipit_transpose(g, x, 1, 2); /* [B*GRID, GRID, PATCH, PATCH] */
    return pipit_reshape(g, x, 3, (int64_t[]){B, NPATCH, PDIM});
}

/* Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x)). Attention
 * is bidirectional: every token sees every other (causal = 0). */
static pipit_val block(pipit_graph *g, pipit_val x, int l) {
    char n[64];
    snprintf(n, sizeof n, "blocks.%d.norm1", l);
    pipit_val h = norm(g, x, n);
    pipit_val qkv[3];
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, "blocks.%d.attn.%c", l, "qkv"[i]);
        qkv[i] = dense(g, h, n, DIM, DIM);
    }
    h = pipit_attention_qkv(g, qkv[0], qkv[1], qkv[2], &(pipit_attention_opts){.heads = HEADS, .causal = 0});
    snprintf(n, sizeof n, "blocks.%d.attn.proj", l);
    x = pipit_add(g, x, dense(g, h, n, DIM, DIM));
    snprintf(n, sizeof n, "blocks.%d.norm2", l);
    h = norm(g, x, n);
    snprintf(n, sizeof n, "blocks.%d.mlp.fc1", l);
    h = pipit_gelu(g, dense(g, h, n, DIM, FFN));
    snprintf(n, sizeof n, "blocks.%d.mlp.fc2", l);
    return pipit_add(g, x, dense(g, h, n, FFN, DIM));
}

/* The loss of one microbatch, cut into `stages` stages of whole blocks;
 * *logits gets the [B, CLASSES] logits. */
static pipit_val build(pipit_graph *g, int stages, pipit_val *logits) {
    pipit_val img = pipit_input(g, "images", PIPIT_F32, 3, (int64_t[]){B, IMG, IMG});
    pipit_val lab = pipit_input(g, "labels", PIPIT_I32, 1, (int64_t[]){B});
    pipit_val x = dense(g, patchify(g, img), "patch_embed", PDIM, DIM);
    /* the class token, one per image: an op on a param alone, so it runs
     * once per step before the microbatch loop */
    pipit_val cls = pipit_param(g, "cls_token", PIPIT_F32, 3, (int64_t[]){1, 1, DIM});
    x = pipit_concat(g, 2, (pipit_val[]){pipit_broadcast_to(g, cls, 3, (int64_t[]){B, 1, DIM}), x}, 1);
    x = pipit_add(g, x, pipit_param(g, "pos_embed", PIPIT_F32, 2, (int64_t[]){TOK, DIM})); /* broadcast over B */
    for (int l = 0; l < BLOCKS; l++) {
        x = block(g, x, l);
        if ((l + 1) % (BLOCKS / stages) == 0 && l + 1 < BLOCKS) x = pipit_yield(g, x);
    }
    x = pipit_slice(g, norm(g, x, "norm"), 1, 0, 1); /* the class token: [B, 1, DIM] */
    x = pipit_reshape(g, x, 2, (int64_t[]){B, DIM});
    *logits = dense(g, x, "head", DIM, CLASSES);
    return pipit_xent_mean(g, *logits, lab);
}

/* Weights by name, so both runs get the same whatever the order of their
 * params: norms' weights 1, biases 0, the rest uniform with variance
 * 1/fan-in (the class token and positions: 0.02), from a seed of the name. */
static void init_params(pipit_program *p) {
    for (int i = 0; i < pipit_program_num_params(p); i++) {
        const char *name = pipit_program_param_name(p, i);
        int nd;
        int64_t shape[4], n = 1;
        check(pipit_program_param_shape(p, name, &nd, shape), "param shape");
        for (int k = 0; k < nd; k++) n *= shape[k];
        uint32_t seed = 2166136261u; /* FNV-1a of the name */
        for (const char *c = name; *c; c++) seed = (seed ^ (uint8_t)*c) * 16777619u;
        seed |= 1;
        size_t len = strlen(name);
        int is_bias = len > 5 && strcmp(name + len - 5, ".bias") == 0;
        int is_norm = strstr(name, "norm") != NULL;
        float a = nd == 2 && strcmp(name, "pos_embed") ? sqrtf(3.0f / (float)shape[0]) : 0.02f * sqrtf(3.0f);
        float *v = malloc(sizeof(float) * (size_t)n);
        if (!v) check(PIPIT_STATUS_NOMEM, "init");
        for (int64_t k = 0; k < n; k++)
            v[k] = is_bias ? 0.0f : is_norm ? 1.0f : (2.0f * uniform(&seed) - 1.0f) * a;
        check(pipit_program_set_param(p, name, v, sizeof(float) * (size_t)n), "set param");
        free(v);
    }
}

/* Correct predictions among the step's M*B images (argmax of the logits
 * the step's forward computed). */
static int correct(const pipit_program *p, pipit_val logits, int32_t (*lab)[B]) {
    int ok = 0;
    for (int m = 0; m < M; m++) {
        float z[B * CLASSES];
        check(pipit_program_get_output(p, logits, m, z, sizeof z), "logits");
        for (int i = 0; i < B; i++) {
            int best = 0;
            for (int c = 1; c < CLASSES; c++)
                if (z[i * CLASSES + c] > z[i * CLASSES + best]) best = c;
            ok += best == lab[m][i];
        }
    }
    return ok;
}

/* Stages per rank the schedule runs: two where it interleaves. */
static int virtual_stages(pipit_schedule_kind kind) {
    switch (kind) {
    case PIPIT_SCHED_INTERLEAVED_1F1B:
    case PIPIT_SCHED_INTERLEAVED_GPIPE:
    case PIPIT_SCHED_INTERLEAVED_ZB:
    case PIPIT_SCHED_DUALPIPEV:
    case PIPIT_SCHED_ZB_V:
    case PIPIT_SCHED_V_HALF:
    case PIPIT_SCHED_V_MIN: return 2;
    default: return 1;
    }
}

typedef struct {
    double *loss;   /* [steps] */
    float **params; /* [nparams] final values, by the program's param order */
    char **names;
    int64_t *numel;
    int nparams;
} run_result;

/* Trains the model cut for schedule `kind` for `steps` steps: on RANKS
 * ranks with that schedule when `pipelined`, else on one rank with no
 * schedule (the same graph, every stage in turn); prints the curve when
 * `verbose`. */
static void train(pipit_schedule_kind kind, int pipelined, int steps, int verbose, run_result *out) {
    int V = virtual_stages(kind);
    pipit_graph *g = pipit_graph_new();
    if (!g) check(PIPIT_STATUS_NOMEM, "graph");
    pipit_val logits;
    pipit_val loss = build(g, RANKS * V, &logits);
    check(pipit_graph_status(g), "build");
    pipit_schedule *sched = NULL;
    if (pipelined) check(pipit_schedule_build(kind, RANKS, V, M, &sched), "schedule");
    pipit_program *p = NULL;
    check(pipit_compile(g, loss,
                        &(pipit_options){.schedule = sched, .microbatches = M,
                                         .optimizer = pipit_adamw(5e-3, 0.9, 0.99, 1e-8, 0.01),
                                         .clip_norm = 1.0, .outputs = &logits, .noutputs = 1},
                        &p),
          "compile");
    init_params(p);
    static float img[M][B * IMG * IMG];
    static int32_t lab[M][B];
    pipit_feed feeds[2 * M];
    for (int step = 0; step < steps; step++) {
        make_step(step, img, lab);
        for (int m = 0; m < M; m++) {
            feeds[2 * m] = (pipit_feed){"images", img[m], sizeof img[m]};
            feeds[2 * m + 1] = (pipit_feed){"labels", lab[m], sizeof lab[m]};
        }
        pipit_metrics met;
        check(pipit_step(p, feeds, 2, 1, &met), "step");
        out->loss[step] = met.loss;
        if (verbose && (step % 10 == 0 || step == steps - 1))
            printf("step %4d  loss %.4f  accuracy %5.1f%%  bubble %4.1f%%\n", step, met.loss,
                   100.0 * correct(p, logits, lab) / (M * B), 100 * met.bubble);
    }
    out->nparams = pipit_program_num_params(p);
    out->params = calloc((size_t)out->nparams, sizeof *out->params);
    out->names = calloc((size_t)out->nparams, sizeof *out->names);
    out->numel = calloc((size_t)out->nparams, sizeof *out->numel);
    if (!out->params || !out->names || !out->numel) check(PIPIT_STATUS_NOMEM, "results");
    for (int i = 0; i < out->nparams; i++) {
        const char *name = pipit_program_param_name(p, i);
        int64_t n;
        check(pipit_program_param_numel(p, name, &n), "param size");
        out->numel[i] = n;
        out->names[i] = malloc(strlen(name) + 1);
        out->params[i] = malloc(sizeof(float) * (size_t)n);
        if (!out->names[i] || !out->params[i]) check(PIPIT_STATUS_NOMEM, "results");
        strcpy(out->names[i], name);
        check(pipit_program_get_param(p, name, out->params[i], sizeof(float) * (size_t)n), "get param");
    }
    pipit_program_free(p);
    pipit_schedule_free(sched);
    pipit_graph_free(g);
}

static void free_result(run_result *r) {
    for (int i = 0; i < r->nparams; i++) free(r->params[i]), free(r->names[i]);
    free(r->params);
    free(r->names);
    free(r->numel);
    free(r->loss);
}

/* 0 when both runs have the same losses and parameters, bit for bit;
 * otherwise names the first difference. */
static int compare(const run_result *a, const run_result *b, int steps) {
    for (int s = 0; s < steps; s++)
        if (memcmp(&a->loss[s], &b->loss[s], sizeof(double))) {
            fprintf(stderr, "vit_classifier: step %d loss: pipelined %.17g, one rank %.17g\n", s, a->loss[s],
                    b->loss[s]);
            return 1;
        }
    for (int i = 0; i < a->nparams; i++) {
        int j = 0;
        while (j < b->nparams && strcmp(a->names[i], b->names[j])) j++;
        if (j == b->nparams || a->numel[i] != b->numel[j]) {
            fprintf(stderr, "vit_classifier: param '%s' is not in the one-rank run as it is here\n", a->names[i]);
            return 1;
        }
        for (int64_t k = 0; k < a->numel[i]; k++)
            if (memcmp(&a->params[i][k], &b->params[j][k], sizeof(float))) {
                fprintf(stderr, "vit_classifier: param '%s'[%lld]: pipelined %.9g, one rank %.9g\n", a->names[i],
                        (long long)k, a->params[i][k], b->params[j][k]);
                return 1;
            }
    }
    return 0;
}

int main(int argc, char **argv) {
    int steps = 100, verify = 0, kind = PIPIT_SCHED_INTERLEAVED_1F1B;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0) {
            verify = 1;
        } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            steps = atoi(argv[++i]);
            if (steps < 1) {
                fprintf(stderr, "vit_classifier: --steps must be >= 1 (got '%s')\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--schedule") == 0 && i + 1 < argc) {
            kind = pipit_schedule_kind_from_name(argv[++i]);
            if (kind < 0) {
                fprintf(stderr, "vit_classifier: unknown schedule '%s'\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: vit_classifier [--steps N] [--schedule NAME] [--check]\n");
            return 2;
        }
    }
    printf("ViT: %d blocks, dim %d, %d heads, %d patches of %dx%d + a class token; %s on %d ranks, %d "
           "microbatches of %d images\n",
           BLOCKS, DIM, HEADS, NPATCH, PATCH, PATCH, pipit_schedule_kind_name((pipit_schedule_kind)kind), RANKS, M, B);
    run_result piped = {.loss = calloc((size_t)steps, sizeof(double))};
    if (!piped.loss) check(PIPIT_STATUS_NOMEM, "losses");
    train((pipit_schedule_kind)kind, 1, steps, 1, &piped);
    /* the last ten steps' mean, against the first step's loss */
    int tail = steps < 10 ? steps : 10;
    double first = piped.loss[0], last = 0;
    for (int s = steps - tail; s < steps; s++) last += piped.loss[s] / tail;
    printf("loss %.4f -> %.4f (mean of the last %d steps)\n", first, last, tail);
    fflush(stdout);
    int status = last < first / 2 ? 0 : 1;
    if (status) fprintf(stderr, "vit_classifier: the loss did not halve in %d steps\n", steps);
    if (verify) {
        run_result one = {.loss = calloc((size_t)steps, sizeof(double))};
        if (!one.loss) check(PIPIT_STATUS_NOMEM, "losses");
        train((pipit_schedule_kind)kind, 0, steps, 0, &one);
        int diff = compare(&piped, &one, steps);
        printf("one rank, sequential: %s\n", diff ? "DIFFERENT" : "every loss and parameter bitwise equal");
        status |= diff;
        free_result(&one);
    }
    free_result(&piped);
    return status;
}
