/*
 * test_oom.c — allocation-failure sweeps over the public entry points that
 * had none (tests/test_api_errors.c sweeps build + compile + step of a
 * small model; test_safetensors.c, test_data.c and test_schedule.c the
 * internal readers): for k = 1, 2, ... the k-th allocation fails
 * (pipit__alloc_fail_after), until the call goes through without reaching
 * allocation k. Every failure must be PIPIT_STATUS_NOMEM with an "out of
 * memory" message, leave *out NULL, never crash and never leak (the ASan
 * pass runs with detect_leaks=1). cJSON's own allocations (the safetensors
 * header) do not go through pipit's allocator and are not swept.
 */
#include <stdio.h>
#include <string.h>

#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_io.h"
#include "pipit_partition.h"
#include "test.h"
#include "util/common.h"

static pipit_gpt2_config tiny(int stages) {
    return (pipit_gpt2_config){.vocab = 8, .max_ctx = 4, .ctx = 4, .layers = 2, .heads = 1, .dim = 4,
                               .batch = 1, .stages = stages, .dtype = PIPIT_F32};
}

/* A compiled tiny GPT-2: 2 stages on 2 ranks (1F1B, M = 2) when stages = 2. */
typedef struct {
    pipit_graph *g;
    pipit_schedule *s;
    pipit_program *p;
} model;

static void model_free(model *m) {
    pipit_program_free(m->p);
    pipit_schedule_free(m->s);
    pipit_graph_free(m->g);
    memset(m, 0, sizeof *m);
}

static pipit_status model_make(model *m, int stages) {
    memset(m, 0, sizeof *m);
    pipit_gpt2_config c = tiny(stages);
    m->g = pipit_graph_new();
    if (!m->g) return PIPIT_STATUS_NOMEM;
    pipit_val loss = pipit_gpt2_build(m->g, &c);
    pipit_status s = pipit_graph_status(m->g);
    if (s) pipit__set_errmsg(pipit_graph_errmsg(m->g));
    if (!s && stages > 1) s = pipit_schedule_build(PIPIT_SCHED_1F1B, stages, 1, 2, &m->s);
    pipit_options o = {.schedule = m->s, .microbatches = stages > 1 ? 2 : 1};
    if (!s) s = pipit_compile(m->g, loss, &o, &m->p);
    if (!s && !m->p) s = PIPIT_STATUS_INTERNAL;
    if (s && m->p) s = PIPIT_STATUS_INTERNAL; /* a failed compile leaves *out NULL */
    if (!s) s = pipit_gpt2_init(m->p, &c, 7);
    return s;
}

/* ---- the swept calls: each does its work and frees what it made ---- */

static model loaded; /* the model the load cases load into (made without injection) */
static char ck_path[512], opt_path[512], shard_path[512], text_path[512], sched_path[512],
    out_path[512];

static pipit_status case_gpt2_pipelined(void) {
    model m;
    pipit_status s = model_make(&m, 2);
    model_free(&m);
    return s;
}

static pipit_status case_data_open(void) {
    const char *paths[2] = {shard_path, text_path};
    for (int i = 0; i < 2; i++) {
        pipit_data *d = (pipit_data *)1;
        pipit_status s = pipit_data_open(paths[i], 4, i ? PIPIT_DATA_SEQUENTIAL : PIPIT_DATA_RANDOM, 3, &d);
        if (s && d) return PIPIT_STATUS_INTERNAL;
        pipit_data_free(d);
        if (s) return s;
    }
    return PIPIT_STATUS_OK;
}

static pipit_status case_schedule_load(void) {
    pipit_schedule *sc = (pipit_schedule *)1;
    pipit_status s = pipit_schedule_load(sched_path, &sc);
    if (s && sc) return PIPIT_STATUS_INTERNAL;
    if (!s) s = pipit_schedule_check(sc);
    pipit_schedule_free(sc);
    return s;
}

static pipit_status case_checkpoint_open(void) {
    pipit_checkpoint *ck = (pipit_checkpoint *)1;
    pipit_status s = pipit_checkpoint_open(ck_path, &ck);
    if (s && ck) return PIPIT_STATUS_INTERNAL;
    if (!s) {
        pipit_gpt2_config c = {0};
        s = pipit_gpt2_config_from_checkpoint(ck, &c);
        if (!s) s = pipit_checkpoint_load_into(loaded.p, ck);
    }
    pipit_checkpoint_free(ck);
    return s;
}

static pipit_status case_checkpoint_load(void) { return pipit_checkpoint_load(loaded.p, ck_path); }

static pipit_status case_checkpoint_save(void) { return pipit_checkpoint_save(loaded.p, out_path, NULL); }

static pipit_status case_optimizer_save(void) { return pipit_optimizer_save(loaded.p, out_path, 5); }

static pipit_status case_optimizer_load(void) {
    int64_t next = 0;
    return pipit_optimizer_load(loaded.p, opt_path, &next);
}

/* 1 if an injected failure is still pending: the call made fewer than k
 * allocations. Consumes the injection either way. */
static int injection_pending(long k) {
    int pending = 0;
    for (long i = 0; i < k && !pending; i++) {
        void *q = pipit__malloc(1);
        if (!q) pending = 1;
        pipit__free(q);
    }
    return pending;
}

/* Build, partition into 2 stages for 1F1B, apply: the graph rewritten. */
static pipit_status case_partition(void) {
    pipit_gpt2_config c = tiny(1);
    pipit_graph *g = pipit_graph_new();
    if (!g) return PIPIT_STATUS_NOMEM;
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_schedule *sch = NULL;
    pipit_partition_result *pt = NULL;
    pipit_status s = pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &sch);
    pipit_partition_options o = {.schedule = sch};
    if (!s) s = pipit_partition(g, loss, &o, &pt);
    if (!s) s = pipit_partition_apply(pt, g, &loss, 1);
    pipit_partition_free(pt);
    pipit_schedule_free(sch);
    pipit_graph_free(g);
    return s;
}

/* Sweeps one call; returns the number of failures it reported. */
static int sweep(const char *name, pipit_status (*fn)(void)) {
    const long LIMIT = 50000;
    int fails = 0;
    long k;
    for (k = 1; k <= LIMIT; k++) {
        pipit__alloc_fail_after(k);
        pipit_status s = fn();
        int pending = injection_pending(k);
        pipit__alloc_fail_after(-1);
        if (pending) {
            if (s != PIPIT_STATUS_OK) {
                fprintf(stderr, "%s: without a failed allocation: %s (%s)\n", name, pipit_status_name(s),
                        pipit_errmsg());
                fails++;
            }
            break;
        }
        if (s == PIPIT_STATUS_OK) continue; /* a graceful fallback: fine */
        if (s != PIPIT_STATUS_NOMEM) {
            fprintf(stderr, "%s: allocation %ld failing: %s (%s), expected NOMEM\n", name, k,
                    pipit_status_name(s), pipit_errmsg());
            fails++;
        } else if (!strstr(pipit_errmsg(), "out of memory")) {
            fprintf(stderr, "%s: allocation %ld failing: NOMEM with message \"%s\"\n", name, k,
                    pipit_errmsg());
            fails++;
        }
        if (fails > 5) break;
    }
    fprintf(stderr, "%s: %ld allocation(s) swept, %d failure(s)\n", name, k - 1, fails);
    if (k > LIMIT) fails++;
    return fails;
}

static void tmp(char *buf, const char *name) {
    snprintf(buf, 512, "%s/oom_%s", pipit_test_tmpdir(), name);
}

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) != 0 || w != n ? -1 : 0;
}

PIPIT_TEST(alloc_failure_sweeps) {
    tmp(ck_path, "ck.safetensors");
    tmp(opt_path, "opt.safetensors");
    tmp(shard_path, "shard.bin");
    tmp(text_path, "text.txt");
    tmp(sched_path, "sched.txt");
    tmp(out_path, "out.safetensors");
    ASSERT_OK(model_make(&loaded, 2));
    ASSERT_OK(pipit_checkpoint_save(loaded.p, ck_path, NULL));
    ASSERT_OK(pipit_optimizer_save(loaded.p, opt_path, 3));
    int32_t hdr[256] = {20240520, 1, 40};
    uint16_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (uint16_t)(i * 7);
    unsigned char shard[1024 + 80];
    memcpy(shard, hdr, sizeof hdr); /* little-endian host */
    memcpy(shard + 1024, toks, sizeof toks);
    ASSERT_TRUE(write_file(shard_path, shard, sizeof shard) == 0);
    const char *text = "a small text file, long enough for T = 4\n";
    ASSERT_TRUE(write_file(text_path, text, strlen(text)) == 0);
    const char *sched = "# 1F1B, P = 2, M = 3\nstages: 0 1\nF0.0 F0.1 BW0.0 F0.2 BW0.1 BW0.2\n"
                        "F1.0 BW1.0 F1.1 BW1.1 F1.2 BW1.2\n";
    ASSERT_TRUE(write_file(sched_path, sched, strlen(sched)) == 0);

    int fails = 0;
    fails += sweep("gpt2 build + 2-rank compile + init", case_gpt2_pipelined);
    fails += sweep("pipit_data_open (shard, text)", case_data_open);
    fails += sweep("pipit_schedule_load", case_schedule_load);
    fails += sweep("gpt2 build + pipit_partition + apply", case_partition);
    fails += sweep("pipit_checkpoint_open + config + load_into", case_checkpoint_open);
    fails += sweep("pipit_checkpoint_load", case_checkpoint_load);
    fails += sweep("pipit_checkpoint_save", case_checkpoint_save);
    fails += sweep("pipit_optimizer_save", case_optimizer_save);
    fails += sweep("pipit_optimizer_load", case_optimizer_load);
    model_free(&loaded);
    ASSERT_EQ_I64(fails, 0);
}
