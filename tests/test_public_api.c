/*
 * test_public_api.c — the public calls the CLI is built on (pipit.h
 * queries, pipit_io.h, pipit_gpt2.h, pipit_inspect.h): schedule getters,
 * the simulator against the textbook bubble, checkpoint save / open / load
 * round trips, GPT-2 config from a checkpoint, data batches equal to the
 * internal reader, plan JSON, and NULL arguments rejected with a message.
 */
#include <cjson/cJSON.h>

#include "io/data.h"
#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_inspect.h"
#include "pipit_io.h"
#include "test.h"
#include "util/common.h" /* pipit__set_errmsg */

static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/api_%s", pipit_test_tmpdir(), name);
    return buf[k];
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static pipit_gpt2_config tiny(int stages) {
    return (pipit_gpt2_config){.vocab = 32, .max_ctx = 8, .ctx = 8, .layers = 2, .heads = 2, .dim = 16,
                               .batch = 2, .stages = stages, .dtype = PIPIT_F32};
}

/* A compiled tiny GPT-2 (1 rank, or 2 ranks with 1F1B over M = 2). */
typedef struct {
    pipit_graph *g;
    pipit_program *p;
    pipit_schedule *s;
    pipit_gpt2_config c;
} model;

static int make_model(model *m, int pp, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->c = tiny(pp);
    m->g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(m->g, &m->c);
    if (pipit_graph_status(m->g)) return 0;
    if (pp > 1 && pipit_schedule_build(PIPIT_SCHED_1F1B, pp, 1, 2, &m->s)) return 0;
    pipit_options o = {.schedule = m->s, .microbatches = pp > 1 ? 2 : 1};
    return !pipit_compile(m->g, loss, &o, &m->p) && !pipit_gpt2_init(m->p, &m->c, seed);
}

static void free_model(model *m) {
    pipit_program_free(m->p);
    pipit_graph_free(m->g);
    pipit_schedule_free(m->s);
}

PIPIT_TEST(api_schedule_getters) {
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 4, &s));
    ASSERT_EQ_I64(pipit_schedule_ranks(s), 2);
    ASSERT_EQ_I64(pipit_schedule_stages(s), 2);
    ASSERT_EQ_I64(pipit_schedule_microbatches(s), 4);
    ASSERT_EQ_I64(pipit_schedule_virtual(s), 1);
    ASSERT_EQ_I64(pipit_schedule_get_kind(s), PIPIT_SCHED_1F1B);
    ASSERT_EQ_I64(pipit_schedule_split_bw(s), 0);
    ASSERT_EQ_I64(pipit_schedule_stage_rank(s, 0), 0);
    ASSERT_EQ_I64(pipit_schedule_stage_rank(s, 1), 1);
    ASSERT_EQ_I64(pipit_schedule_stage_rank(s, 2), -1);
    ASSERT_MSG_HAS("stage 2 out of range");
    int total = 0;
    for (int r = 0; r < 2; r++) {
        int n = pipit_schedule_num_tasks(s, r);
        ASSERT_EQ_I64(n, 8); /* F and BW for 4 microbatches */
        total += n;
        for (int i = 0; i < n; i++) {
            pipit_task t;
            ASSERT_OK(pipit_schedule_task(s, r, i, &t));
            ASSERT_EQ_I64(pipit_schedule_stage_rank(s, t.stage), r);
            ASSERT_TRUE(t.kind == PIPIT_TASK_F || t.kind == PIPIT_TASK_BW);
        }
    }
    ASSERT_EQ_I64(total, 16);
    pipit_task t;
    ASSERT_OK(pipit_schedule_task(s, 0, 0, &t));
    ASSERT_TRUE(t.kind == PIPIT_TASK_F && t.stage == 0 && t.mb == 0);
    ASSERT_STATUS(pipit_schedule_task(s, 0, 8, &t), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("rank 0 has 8 tasks");
    ASSERT_STATUS(pipit_schedule_task(s, 2, 0, &t), PIPIT_STATUS_INVALID);
    ASSERT_EQ_I64(pipit_schedule_num_tasks(s, -1), 0);

    /* the text format round-trips, and a loaded schedule is custom (-1) */
    const char *path = tpath("1f1b.sched");
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f);
    ASSERT_OK(pipit_schedule_write(f, s));
    fclose(f);
    pipit_schedule *l = NULL;
    ASSERT_OK(pipit_schedule_load(path, &l));
    ASSERT_EQ_I64(pipit_schedule_get_kind(l), -1);
    ASSERT_EQ_I64(pipit_schedule_num_tasks(l, 1), 8);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 8; i++) {
            pipit_task a, b;
            ASSERT_OK(pipit_schedule_task(s, r, i, &a));
            ASSERT_OK(pipit_schedule_task(l, r, i, &b));
            ASSERT_TRUE(a.kind == b.kind && a.stage == b.stage && a.mb == b.mb);
        }
    pipit_schedule_free(l);

    pipit_schedule *z = NULL; /* zero-bubble: split B and W */
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_ZB_H1, 2, 1, 4, &z));
    ASSERT_EQ_I64(pipit_schedule_split_bw(z), 1);
    ASSERT_EQ_I64(pipit_schedule_num_tasks(z, 0), 12);
    pipit_schedule_free(z);
    pipit_schedule_free(s);
}

PIPIT_TEST(api_simulate_gpipe_bubble) {
    const int P = 4, M = 8;
    pipit_schedule *s = NULL;
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_GPIPE, P, 1, M, &s));
    pipit_sim_result *r = NULL;
    ASSERT_OK(pipit_schedule_simulate(s, NULL, &r)); /* unit costs: F = 1, BW = 2 */
    ASSERT_EQ_I64(pipit_sim_result_ranks(r), P);
    ASSERT_NEAR_F64(pipit_sim_result_bubble(r), (double)(P - 1) / (M + P - 1), 1e-12);
    ASSERT_NEAR_F64(pipit_sim_result_step_time(r), 3.0 * (M + P - 1), 1e-12);
    for (int k = 0; k < P; k++) {
        ASSERT_NEAR_F64(pipit_sim_result_busy(r, k), 3.0 * M, 1e-12);
        ASSERT_EQ_I64(pipit_sim_result_peak_live(r, k), M); /* GPipe keeps every microbatch */
        ASSERT_NEAR_F64(pipit_sim_result_peak_bytes(r, k), M, 1e-12);
        double prev_end = 0;
        for (int i = 0; i < pipit_schedule_num_tasks(s, k); i++) {
            double a, b;
            ASSERT_OK(pipit_sim_result_task(r, k, i, &a, &b));
            ASSERT_TRUE(a >= prev_end && b > a);
            prev_end = b;
        }
    }
    ASSERT_STATUS(pipit_sim_result_task(r, P, 0, NULL, NULL), PIPIT_STATUS_INVALID);
    /* explicit costs: twice as slow, same bubble */
    double f[4] = {2, 2, 2, 2}, b[4] = {2, 2, 2, 2}, w[4] = {2, 2, 2, 2};
    pipit_sim_costs c = {.f = f, .b = b, .w = w};
    pipit_sim_result *r2 = NULL;
    ASSERT_OK(pipit_schedule_simulate(s, &c, &r2));
    ASSERT_NEAR_F64(pipit_sim_result_step_time(r2), 6.0 * (M + P - 1), 1e-12);
    ASSERT_NEAR_F64(pipit_sim_result_bubble(r2), (double)(P - 1) / (M + P - 1), 1e-12);

    const char *path = tpath("gpipe.svg");
    FILE *out = fopen(path, "w");
    ASSERT_TRUE(out);
    ASSERT_OK(pipit_schedule_write_svg(out, s, r, "gpipe"));
    ASSERT_OK(pipit_schedule_print_grid(out, s, r));
    fclose(out);
    char *text = slurp(path);
    ASSERT_TRUE(text && strstr(text, "<svg") && strstr(text, "rank 3"));
    free(text);
    pipit_schedule *other = NULL; /* a result only draws with its own schedule */
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_GPIPE, 2, 1, M, &other));
    ASSERT_STATUS(pipit_schedule_print_grid(stdout, other, r), PIPIT_STATUS_INVALID);
    pipit_schedule_free(other);
    pipit_sim_result_free(r2);
    pipit_sim_result_free(r);
    pipit_schedule_free(s);
}

PIPIT_TEST(api_checkpoint_roundtrip) {
    model a, b;
    ASSERT_TRUE(make_model(&a, 1, 1));
    ASSERT_TRUE(make_model(&b, 1, 2));
    const char *path = tpath("ck.safetensors");
    const char *meta[] = {"heads", "2", "note", "hello", NULL};
    ASSERT_OK(pipit_checkpoint_save(a.p, path, meta));
    pipit_checkpoint *ck = NULL;
    ASSERT_OK(pipit_checkpoint_open(path, &ck));
    ASSERT_TRUE(strcmp(pipit_checkpoint_path(ck), path) == 0);
    ASSERT_EQ_I64(pipit_checkpoint_num_tensors(ck), pipit_program_num_params(a.p));
    for (int i = 0; i < pipit_checkpoint_num_tensors(ck); i++) {
        const char *name = pipit_checkpoint_tensor_name(ck, i);
        ASSERT_TRUE(name);
        int nd, pnd;
        int64_t sh[PIPIT_MAX_DIMS], psh[PIPIT_MAX_DIMS];
        ASSERT_OK(pipit_checkpoint_tensor_shape(ck, name, &nd, sh));
        ASSERT_OK(pipit_program_param_shape(a.p, name, &pnd, psh));
        ASSERT_EQ_I64(nd, pnd);
        for (int k = 0; k < nd; k++) ASSERT_EQ_I64(sh[k], psh[k]);
    }
    ASSERT_TRUE(pipit_checkpoint_tensor_name(ck, 10000) == NULL);
    int nd;
    int64_t sh[PIPIT_MAX_DIMS];
    ASSERT_OK(pipit_checkpoint_tensor_shape(ck, "wte.weight", &nd, sh));
    ASSERT_TRUE(nd == 2 && sh[0] == 32 && sh[1] == 16);
    ASSERT_STATUS(pipit_checkpoint_tensor_shape(ck, "nope", &nd, sh), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("'nope'");
    ASSERT_TRUE(strcmp(pipit_checkpoint_meta(ck, "heads"), "2") == 0);
    ASSERT_TRUE(strcmp(pipit_checkpoint_meta(ck, "note"), "hello") == 0);
    ASSERT_TRUE(pipit_checkpoint_meta(ck, "absent") == NULL);

    /* GPT-2 sizes from the file */
    pipit_gpt2_config c = {0};
    ASSERT_OK(pipit_gpt2_config_from_checkpoint(ck, &c));
    ASSERT_TRUE(c.vocab == 32 && c.dim == 16 && c.max_ctx == 8 && c.layers == 2 && c.heads == 2);

    /* load_into makes b's params equal to a's */
    const char *name = "h.1.mlp.c_fc.weight";
    int64_t numel = 0;
    pipit_dtype dt = PIPIT_F64;
    ASSERT_OK(pipit_program_param_numel(a.p, name, &numel));
    ASSERT_OK(pipit_program_param_dtype(a.p, name, &dt));
    ASSERT_EQ_I64(numel, 16 * 64);
    ASSERT_EQ_I64(dt, PIPIT_F32);
    ASSERT_STATUS(pipit_program_param_numel(a.p, "nope", &numel), PIPIT_STATUS_INVALID);
    float *x = malloc(sizeof(float) * (size_t)numel), *y = malloc(sizeof(float) * (size_t)numel);
    ASSERT_OK(pipit_program_get_param(a.p, name, x, sizeof(float) * (size_t)numel));
    ASSERT_OK(pipit_program_get_param(b.p, name, y, sizeof(float) * (size_t)numel));
    ASSERT_TRUE(memcmp(x, y, sizeof(float) * (size_t)numel) != 0); /* different seeds */
    ASSERT_OK(pipit_checkpoint_load_into(b.p, ck));
    ASSERT_OK(pipit_program_get_param(b.p, name, y, sizeof(float) * (size_t)numel));
    ASSERT_TRUE(memcmp(x, y, sizeof(float) * (size_t)numel) == 0);
    pipit_checkpoint_free(ck);

    /* by path; and the saved file of b equals a's byte for byte */
    ASSERT_OK(pipit_gpt2_init(b.p, &b.c, 3));
    ASSERT_OK(pipit_checkpoint_load(b.p, path));
    const char *path2 = tpath("ck2.safetensors");
    ASSERT_OK(pipit_checkpoint_save(b.p, path2, meta));
    char *t1 = slurp(path), *t2 = slurp(path2);
    ASSERT_TRUE(t1 && t2 && strcmp(t1, t2) == 0);
    free(t1), free(t2);

    /* optimizer state */
    const char *opath = tpath("ck.opt");
    ASSERT_OK(pipit_program_set_opt_steps(a.p, 5));
    ASSERT_OK(pipit_optimizer_save(a.p, opath, 7));
    int64_t next = -1;
    ASSERT_OK(pipit_optimizer_load(b.p, opath, &next));
    ASSERT_EQ_I64(next, 7);
    ASSERT_EQ_I64(pipit_program_opt_steps(b.p), 5);
    ASSERT_STATUS(pipit_optimizer_load(b.p, path, &next), PIPIT_STATUS_FORMAT); /* a weights file */
    ASSERT_STATUS(pipit_checkpoint_open(tpath("missing.st"), &ck), PIPIT_STATUS_IO);
    ASSERT_TRUE(ck == NULL);
    free(x), free(y);
    free_model(&a);
    free_model(&b);
}

/* Saves a program whose params are `names` (shapes [4,2] for "wte."/"wpe."
 * names, [2] otherwise) with metadata `meta`. */
static int save_fake(const char *path, const char *const *names, int n) {
    pipit_graph *g = pipit_graph_new();
    pipit_val acc = {g, -1};
    for (int i = 0; i < n; i++) {
        int two = strncmp(names[i], "wte.", 4) == 0 || strncmp(names[i], "wpe.", 4) == 0;
        int64_t shape[2] = {two ? 4 : 2, 2};
        pipit_val v = pipit_sum(g, pipit_param(g, names[i], PIPIT_F32, two ? 2 : 1, two ? shape : shape + 1));
        acc = acc.id < 0 ? v : pipit_add(g, acc, v);
    }
    pipit_program *p = NULL;
    pipit_options o = {0};
    int ok = !pipit_compile(g, acc, &o, &p) && !pipit_checkpoint_save(p, path, NULL);
    pipit_program_free(p);
    pipit_graph_free(g);
    return ok;
}

PIPIT_TEST(api_config_from_checkpoint_errors) {
    const char *nowte = tpath("nowte.st");
    ASSERT_TRUE(save_fake(nowte, (const char *const[]){"w", "b"}, 2));
    pipit_checkpoint *ck = NULL;
    ASSERT_OK(pipit_checkpoint_open(nowte, &ck));
    pipit_gpt2_config c = tiny(1), before = c;
    ASSERT_STATUS(pipit_gpt2_config_from_checkpoint(ck, &c), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("no 2-D 'wte.weight'");
    ASSERT_MSG_HAS(nowte);
    ASSERT_TRUE(memcmp(&c, &before, sizeof c) == 0); /* untouched on failure */
    ASSERT_TRUE(!strstr(pipit_errmsg(), "--")); /* describes the file, not CLI flags */
    pipit_checkpoint_free(ck);

    const char *noblocks = tpath("noblocks.st");
    ASSERT_TRUE(save_fake(noblocks, (const char *const[]){"wte.weight", "wpe.weight"}, 2));
    ASSERT_OK(pipit_checkpoint_open(noblocks, &ck));
    ASSERT_STATUS(pipit_gpt2_config_from_checkpoint(ck, &c), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("h.0.ln_1.weight");
    pipit_checkpoint_free(ck);

    const char *noheads = tpath("noheads.st");
    ASSERT_TRUE(save_fake(noheads, (const char *const[]){"wte.weight", "wpe.weight", "h.0.ln_1.weight"}, 3));
    ASSERT_OK(pipit_checkpoint_open(noheads, &ck));
    ASSERT_OK(pipit_gpt2_config_from_checkpoint(ck, &c));
    ASSERT_TRUE(c.vocab == 4 && c.dim == 2 && c.max_ctx == 4 && c.layers == 1 && c.heads == 0);
    pipit_checkpoint_free(ck);
}

PIPIT_TEST(api_data_batch_matches_internal) {
    const char *path = tpath("data.txt");
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f);
    for (int i = 0; i < 997; i++) fputc((i * 31 + i / 7) % 251, f);
    fclose(f);
    enum { T = 9, B = 5 };
    for (int order = 0; order < 2; order++) {
        pipit_data *d = NULL;
        pipit__data *e = NULL;
        ASSERT_OK(pipit_data_open(path, T, (pipit_data_order)order, 42, &d));
        ASSERT_OK(pipit__data_open(path, T, (pipit__data_order)order, 42, &e));
        ASSERT_EQ_I64(pipit_data_tokens(d), 997);
        ASSERT_EQ_I64(pipit_data_windows(d), pipit__data_windows(e));
        ASSERT_EQ_I64(pipit_data_max_token(d), pipit__data_max_token(e));
        ASSERT_EQ_I64(pipit_data_vocab_hint(d), 256);
        for (int64_t k = -3; k < 40; k++) ASSERT_EQ_I64(pipit_data_offset(d, k), pipit__data_offset(e, k));
        int32_t in1[B * T], tg1[B * T], in2[B * T], tg2[B * T];
        for (int64_t first = 0; first < 50; first += 7) {
            ASSERT_OK(pipit_data_batch(d, first, B, in1, tg1));
            pipit__data_batch(e, first, B, in2, tg2);
            ASSERT_TRUE(memcmp(in1, in2, sizeof in1) == 0 && memcmp(tg1, tg2, sizeof tg1) == 0);
            for (int i = 0; i < B * T; i++)
                if (i % T + 1 < T) ASSERT_EQ_I64(tg1[i], in1[i + 1]); /* targets are shifted inputs */
        }
        ASSERT_OK(pipit_data_batch(d, 0, 0, NULL, NULL)); /* B = 0 writes nothing */
        ASSERT_STATUS(pipit_data_batch(d, 0, -1, in1, tg1), PIPIT_STATUS_INVALID);
        pipit_data_free(d);
        pipit__data_free(e);
    }
    pipit_data *d = NULL;
    ASSERT_STATUS(pipit_data_open(path, 0, PIPIT_DATA_RANDOM, 1, &d), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_data_open(tpath("absent.txt"), 4, PIPIT_DATA_RANDOM, 1, &d), PIPIT_STATUS_IO);
    ASSERT_MSG_HAS("absent.txt");

    /* GPT-2 feeds: positions 0..T-1 per row, and the three names */
    pipit_gpt2_config c = tiny(1);
    int32_t tok[16] = {0}, tgt[16] = {0}, pos[16];
    pipit_feed fd[3];
    ASSERT_OK(pipit_gpt2_feeds(&c, tok, tgt, pos, fd));
    for (int i = 0; i < 16; i++) ASSERT_EQ_I64(pos[i], i % 8);
    ASSERT_TRUE(!strcmp(fd[0].name, PIPIT_GPT2_TOKENS) && fd[0].data == tok);
    ASSERT_TRUE(!strcmp(fd[1].name, PIPIT_GPT2_TARGETS) && fd[1].data == tgt);
    ASSERT_TRUE(!strcmp(fd[2].name, PIPIT_GPT2_POSITIONS) && fd[2].data == pos);
}

PIPIT_TEST(api_plan_json_and_last_step) {
    model m;
    ASSERT_TRUE(make_model(&m, 2, 1));
    ASSERT_EQ_I64(pipit_program_num_ranks(m.p), 2);
    const char *path = tpath("plan.json");
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f);
    ASSERT_OK(pipit_program_write_plan_json(f, m.p));
    fclose(f);
    char *text = slurp(path);
    ASSERT_TRUE(text);
    cJSON *root = cJSON_Parse(text);
    free(text);
    ASSERT_TRUE(root);
    cJSON *ranks = cJSON_GetObjectItem(root, "ranks"), *params = cJSON_GetObjectItem(root, "params");
    ASSERT_TRUE(cJSON_IsArray(ranks) && cJSON_IsArray(params));
    ASSERT_EQ_I64(cJSON_GetArraySize(ranks), 2);
    ASSERT_EQ_I64(cJSON_GetArraySize(params), pipit_program_num_params(m.p));
    for (int r = 0; r < 2; r++) {
        cJSON *o = cJSON_GetArrayItem(ranks, r);
        ASSERT_EQ_I64(cJSON_GetObjectItem(o, "rank")->valuedouble, r);
        ASSERT_TRUE(cJSON_GetObjectItem(o, "arena_bytes")->valuedouble > 0);
        ASSERT_EQ_I64(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tasks")), 4); /* F, BW x M = 2 */
    }
    ASSERT_EQ_I64(cJSON_GetObjectItem(root, "stages")->valuedouble, 2);
    cJSON_Delete(root);

    /* one step: the measured timeline and the profile */
    ASSERT_OK(pipit_program_set_profile(m.p, 1));
    int32_t tok[2][16], tgt[2][16], pos[2][16];
    pipit_feed fd[6];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 16; i++) tok[k][i] = (i * 5 + k) % 32, tgt[k][i] = (i * 3 + 1) % 32;
        ASSERT_OK(pipit_gpt2_feeds(&m.c, tok[k], tgt[k], pos[k], fd + 3 * k));
    }
    pipit_metrics met;
    ASSERT_OK(pipit_step(m.p, fd, 3, 1, &met));
    ASSERT_TRUE(pipit_program_step_wall(m.p) > 0);
    for (int r = 0; r < 2; r++) {
        pipit_rank_step rs;
        ASSERT_OK(pipit_program_last_step(m.p, r, &rs));
        ASSERT_EQ_I64(rs.ntasks, pipit_schedule_num_tasks(m.s, r));
        for (int i = 0; i < rs.ntasks; i++) {
            pipit_task t;
            ASSERT_OK(pipit_schedule_task(m.s, r, i, &t));
            ASSERT_TRUE(rs.tasks[i].kind == t.kind && rs.tasks[i].stage == t.stage && rs.tasks[i].mb == t.mb);
            ASSERT_TRUE(rs.start[i] <= rs.end[i] && rs.end[i] <= pipit_program_step_wall(m.p));
        }
        ASSERT_TRUE(rs.busy > 0 && rs.recv_wait >= 0);
    }
    ASSERT_STATUS(pipit_program_last_step(m.p, 2, &(pipit_rank_step){0}), PIPIT_STATUS_INVALID);
    const char *ppath = tpath("profile.txt");
    f = fopen(ppath, "w");
    ASSERT_TRUE(f);
    ASSERT_OK(pipit_program_print_profile(f, m.p));
    ASSERT_OK(pipit_program_print_plan(f, m.p, 0));
    fclose(f);
    text = slurp(ppath);
    ASSERT_TRUE(text && strstr(text, "profile rank 1") && strstr(text, "matmul") &&
                strstr(text, "planned peak activations"));
    free(text);
    /* turning it on again resets the counters; the rank then reports 0 s */
    ASSERT_OK(pipit_program_set_profile(m.p, 1));
    f = fopen(ppath, "w");
    ASSERT_OK(pipit_program_print_profile(f, m.p));
    fclose(f);
    text = slurp(ppath);
    ASSERT_TRUE(text && strstr(text, "profile rank 0: 0.000 s") && !strstr(text, "matmul"));
    free(text);
    ASSERT_OK(pipit_program_set_profile(m.p, 0));
    free_model(&m);
}

/* Every NULL handle or output is an error with a message, never a crash. */
#define ASSERT_NULL_ERR(call, status)                                 \
    do {                                                              \
        pipit__set_errmsg("");                                        \
        ASSERT_STATUS(call, status);                                  \
        ASSERT_TRUE(pipit_errmsg()[0] != 0);                          \
    } while (0)

PIPIT_TEST(api_null_arguments) {
    pipit_schedule *s = NULL;
    pipit_task t;
    ASSERT_NULL_ERR(pipit_schedule_task(NULL, 0, 0, &t), PIPIT_STATUS_MISUSE);
    ASSERT_OK(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &s));
    ASSERT_NULL_ERR(pipit_schedule_task(s, 0, 0, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_EQ_I64(pipit_schedule_ranks(NULL), 0);
    ASSERT_MSG_HAS("NULL schedule");
    ASSERT_EQ_I64(pipit_schedule_get_kind(NULL), -1);
    pipit_sim_result *r = NULL;
    ASSERT_NULL_ERR(pipit_schedule_simulate(NULL, NULL, &r), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_schedule_simulate(s, NULL, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_schedule_write(NULL, s), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_schedule_print_grid(stdout, s, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_schedule_write_svg(stdout, NULL, NULL, "x"), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_sim_result_task(NULL, 0, 0, NULL, NULL), PIPIT_STATUS_MISUSE);
    pipit_sim_result_free(NULL);
    pipit_schedule_free(s);

    pipit_dtype dt;
    int64_t n;
    pipit_rank_step rs;
    ASSERT_NULL_ERR(pipit_program_param_dtype(NULL, "x", &dt), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_program_param_numel(NULL, "x", &n), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_program_set_profile(NULL, 1), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_program_last_step(NULL, 0, &rs), PIPIT_STATUS_MISUSE);
    ASSERT_EQ_I64(pipit_program_num_ranks(NULL), 0);
    ASSERT_NULL_ERR(pipit_program_print_plan(stdout, NULL, 0), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_program_write_plan_json(NULL, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_program_print_profile(stdout, NULL), PIPIT_STATUS_MISUSE);
    model m;
    ASSERT_TRUE(make_model(&m, 1, 1));
    ASSERT_NULL_ERR(pipit_program_param_dtype(m.p, NULL, &dt), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_program_param_numel(m.p, "wte.weight", NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_program_last_step(m.p, 0, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_program_write_plan_json(NULL, m.p), PIPIT_STATUS_MISUSE);

    pipit_checkpoint *ck = NULL;
    ASSERT_NULL_ERR(pipit_checkpoint_save(NULL, "x", NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_checkpoint_save(m.p, NULL, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_checkpoint_load(NULL, "x"), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_checkpoint_open(NULL, &ck), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_checkpoint_open("x", NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_checkpoint_load_into(m.p, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_checkpoint_tensor_shape(NULL, "x", NULL, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_optimizer_save(NULL, "x", 0), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_optimizer_load(m.p, "x", NULL), PIPIT_STATUS_MISUSE);
    ASSERT_TRUE(pipit_checkpoint_meta(NULL, "k") == NULL);
    ASSERT_TRUE(pipit_checkpoint_tensor_name(NULL, 0) == NULL);
    ASSERT_EQ_I64(pipit_checkpoint_num_tensors(NULL), 0);
    pipit_checkpoint_free(NULL);

    pipit_data *d = NULL;
    int32_t buf[4];
    ASSERT_NULL_ERR(pipit_data_open(NULL, 4, PIPIT_DATA_RANDOM, 1, &d), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_data_open("x", 4, PIPIT_DATA_RANDOM, 1, NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_data_batch(NULL, 0, 1, buf, buf), PIPIT_STATUS_MISUSE);
    pipit_data_free(NULL);

    pipit_gpt2_config c = tiny(1);
    pipit_feed fd[3];
    ASSERT_NULL_ERR(pipit_gpt2_check(NULL), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_gpt2_init(NULL, &c, 1), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_gpt2_config_from_checkpoint(NULL, &c), PIPIT_STATUS_MISUSE);
    ASSERT_NULL_ERR(pipit_gpt2_feeds(&c, buf, buf, NULL, fd), PIPIT_STATUS_MISUSE);
    ASSERT_EQ_I64(pipit_gpt2_num_params(NULL), 0);
    free_model(&m);
}
