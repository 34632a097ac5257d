/*
 * test_limits.c — sizes that would overflow or exhaust memory are refused
 * with a message naming the value and the limit: tensor element counts
 * (2^48), memory blocks (2^56), microbatches (2^24), stages x microbatches,
 * threads, optimizer step counters (2^63-1); schedule files are checked in
 * time and memory proportional to what they hold; a program whose memory
 * does not fit fails before filling any of it.
 */
#include <stdint.h>
#include <string.h>

#include "io/safetensors.h"
#include "pipit.h"
#include "pipit_io.h"
#include "test.h"
#include "util/checked.h"
#include "util/common.h"

#define SH(...) ((int64_t[]){__VA_ARGS__})

/* ASan's and TSan's allocators abort on absurd sizes instead of failing */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LIMITS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LIMITS_ASAN 1
#endif
#endif

PIPIT_TEST(limits_checked_helpers) {
    int64_t r;
    ASSERT_TRUE(pipit__mul_i64(3, 4, &r) && r == 12);
    ASSERT_TRUE(!pipit__mul_i64(INT64_MAX, 2, &r));
    ASSERT_TRUE(!pipit__add_i64(INT64_MAX, 1, &r));
    size_t z;
    ASSERT_TRUE(!pipit__mul_size(SIZE_MAX, 2, &z));
    ASSERT_TRUE(pipit__add_align64(64, 1, &z) && z == 128);
    ASSERT_TRUE(!pipit__add_align64(0, SIZE_MAX - 10, &z));
    ASSERT_TRUE(pipit__shape_numel(2, SH(1 << 24, 1 << 24), &r) && r == (int64_t)1 << 48);
    ASSERT_TRUE(!pipit__shape_numel(2, SH((int64_t)1 << 40, (int64_t)1 << 40), &r));
    ASSERT_TRUE(!pipit__shape_numel(2, SH(((int64_t)1 << 62) + 4, 4), &r)); /* wraps to 16 unchecked */
    ASSERT_TRUE(!pipit__shape_numel(1, SH(-1), &r));
}

PIPIT_TEST(limits_param_elements) {
    pipit_graph *g = pipit_graph_new();
    pipit_val w = pipit_param(g, "w", PIPIT_F32, 2, SH((int64_t)1 << 40, (int64_t)1 << 40));
    ASSERT_TRUE(w.id < 0);
    ASSERT_EQ_I64(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("pipit_param 'w'");
    ASSERT_MSG_HAS("2^48 elements");
    pipit_graph_free(g);
}

PIPIT_TEST(limits_input_elements_wrap) {
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, SH(((int64_t)1 << 62) + 4, 4));
    ASSERT_TRUE(x.id < 0);
    ASSERT_EQ_I64(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("pipit_input 'x'");
    ASSERT_MSG_HAS("2^48 elements");
    pipit_graph_free(g);
}

/* Inputs within the limit whose op output is not (matmul, embed, reshape). */
PIPIT_TEST(limits_op_output_elements) {
    pipit_graph *g = pipit_graph_new();
    pipit_val a = pipit_param(g, "a", PIPIT_F32, 2, SH((int64_t)1 << 30, 1));
    pipit_val b = pipit_param(g, "b", PIPIT_F32, 2, SH(1, (int64_t)1 << 30));
    ASSERT_OK(pipit_graph_status(g));
    pipit_val c = pipit_matmul(g, a, b, 0, 0); /* [2^30, 2^30] = 2^60 elements */
    ASSERT_TRUE(c.id < 0);
    ASSERT_EQ_I64(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("matmul");
    ASSERT_MSG_HAS("2^48 elements");
    pipit_graph_free(g);

    g = pipit_graph_new();
    pipit_val t = pipit_param(g, "table", PIPIT_F32, 2, SH(4, (int64_t)1 << 30));
    pipit_val i = pipit_input(g, "idx", PIPIT_I32, 2, SH((int64_t)1 << 15, (int64_t)1 << 15));
    pipit_val e = pipit_embed(g, t, i); /* [2^15, 2^15, 2^30] */
    ASSERT_TRUE(e.id < 0);
    ASSERT_EQ_I64(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("embed");
    ASSERT_MSG_HAS("2^48 elements");
    pipit_graph_free(g);

    g = pipit_graph_new();
    pipit_val x = pipit_param(g, "x", PIPIT_F32, 1, SH(16));
    /* 2^62 * 4 * ... wraps to 16 unchecked; refused before the count comparison */
    pipit_val r = pipit_reshape(g, x, 3, SH((int64_t)1 << 62, 4, 1));
    ASSERT_TRUE(r.id < 0);
    ASSERT_EQ_I64(pipit_graph_status(g), PIPIT_STATUS_SHAPE);
    ASSERT_MSG_HAS("reshape");
    ASSERT_MSG_HAS("2^48 elements");
    pipit_graph_free(g);
}

/* x -> yield -> yield -> loss: three stages. */
static pipit_val three_stages(pipit_graph *g) {
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 2, SH(2, 4));
    pipit_val h = x;
    for (int s = 0; s < 3; s++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", s);
        h = pipit_matmul(g, h, pipit_param(g, name, PIPIT_F32, 2, SH(4, 4)), 0, 0);
        if (s < 2) h = pipit_yield(g, h);
    }
    return pipit_sum(g, h);
}

PIPIT_TEST(limits_sequential_microbatches) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = three_stages(g);
    ASSERT_OK(pipit_graph_status(g));
    pipit_program *p = NULL;
    /* 2 * 3 * 715827883 wraps an int to 2 */
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.microbatches = 715827883}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("microbatches must be in 1..16777216");
    ASSERT_MSG_HAS("715827883");
    ASSERT_TRUE(p == NULL);
    pipit_graph_free(g);
}

PIPIT_TEST(limits_sequential_stage_slots) {
    /* 8 stages x 2^24 microbatches = 2^27 tasks slots > 2^26 */
    pipit_graph *g = pipit_graph_new();
    pipit_val h = pipit_input(g, "x", PIPIT_F32, 2, SH(2, 4));
    for (int s = 0; s < 8; s++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", s);
        h = pipit_matmul(g, h, pipit_param(g, name, PIPIT_F32, 2, SH(4, 4)), 0, 0);
        if (s < 7) h = pipit_yield(g, h);
    }
    pipit_val loss = pipit_sum(g, h);
    pipit_program *p = NULL;
    /* the slot limit itself: without the memory admission, which refuses these 2^24 microbatches
     * first on a machine with less memory than their instruction lists */
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.microbatches = PIPIT_MAX_MICROBATCHES, .no_mem_check = 1},
                                &p),
                  PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("8 stages x 16777216 microbatches");
    ASSERT_MSG_HAS("stages x microbatches <= 67108864");
    pipit_graph_free(g);
}

PIPIT_TEST(limits_threads) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = three_stages(g);
    pipit_program *p = NULL;
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.threads = 257}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("threads must be in 1..256");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.data_parallel = 65}, &p), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("data_parallel must be in 1..64");
    pipit_graph_free(g);
}

/* Rewrites `from` to `to` (same length) in a file, bytes only: its
 * checksums no longer match. */
static int patch_file(const char *path, const char *from, const char *to) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *at = NULL;
    for (size_t i = 0; i + strlen(from) <= n && !at; i++)
        if (memcmp(buf + i, from, strlen(from)) == 0) at = buf + i;
    if (!at || strlen(from) != strlen(to)) return 0;
    memcpy(at, to, strlen(to));
    f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(buf, 1, n, f);
    fclose(f);
    return 1;
}

/* The optimizer-state file at path written again with metadata key = value
 * (and its other keys kept): a consistent file, checksums and all. */
static int set_meta(const char *path, const char *key, const char *value) {
    pipit__st_file *f = NULL;
    if (pipit__st_read(path, &f)) return 0;
    int n = pipit__st_count(f);
    pipit__st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    for (int i = 0; i < n; i++) t[i] = *pipit__st_get(f, i);
    const char *keys[] = {"format", "opt_steps", "next_step"}, *meta[7];
    for (int i = 0; i < 3; i++) {
        meta[2 * i] = keys[i];
        meta[2 * i + 1] = strcmp(keys[i], key) == 0 ? value : pipit__st_meta(f, keys[i]);
    }
    meta[6] = NULL;
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int ok = pipit__st_write(tmp, t, n, meta) == PIPIT_STATUS_OK && rename(tmp, path) == 0;
    free(t);
    pipit__st_free(f);
    return ok;
}

PIPIT_TEST(limits_optimizer_step) {
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = three_stages(g);
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, NULL, &p));
    char path[512];
    snprintf(path, sizeof path, "%s/limits.opt", pipit_test_tmpdir());
    /* 2^31 - 1 and larger: kept exactly (64-bit) */
    ASSERT_OK(pipit_program_set_opt_steps(p, INT32_MAX));
    ASSERT_OK(pipit_optimizer_save(p, path, (int64_t)INT32_MAX + 5));
    ASSERT_OK(pipit_program_set_opt_steps(p, 0));
    int64_t next = 0;
    ASSERT_OK(pipit_optimizer_load(p, path, &next));
    ASSERT_EQ_I64(next, (int64_t)INT32_MAX + 5);
    ASSERT_EQ_I64(pipit_program_opt_steps(p), INT32_MAX);
    /* the counter at 2^63-1 cannot advance */
    ASSERT_OK(pipit_program_set_opt_steps(p, INT64_MAX));
    float x[8] = {0};
    pipit_feed feed = {"x", x, sizeof x};
    ASSERT_STATUS(pipit_step(p, &feed, 1, 1, NULL), PIPIT_STATUS_INVALID);
    ASSERT_TRUE(strstr(pipit_program_errmsg(p), "2^63-1") != NULL);
    ASSERT_EQ_I64(pipit_program_opt_steps(p), INT64_MAX);
    ASSERT_OK(pipit_step(p, &feed, 1, 0, NULL)); /* no update: fine */
    /* a step past int64, a sign, a non-digit: refused, not truncated */
    ASSERT_OK(pipit_program_set_opt_steps(p, 1000000000000000000LL)); /* 19 digits */
    ASSERT_OK(pipit_optimizer_save(p, path, 7));
    /* bytes changed after writing: the checksum finds it first */
    ASSERT_TRUE(patch_file(path, "1000000000000000000", "9999999999999999999"));
    ASSERT_STATUS(pipit_optimizer_load(p, path, &next), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("header checksum mismatch");
    /* a file that was written so: the count itself is refused */
    ASSERT_OK(pipit_optimizer_save(p, path, 7));
    ASSERT_TRUE(set_meta(path, "opt_steps", "9999999999999999999"));
    ASSERT_STATUS(pipit_optimizer_load(p, path, &next), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("metadata 'opt_steps' is '9999999999999999999', too large (a count of at most 9223372036854775807)");
    ASSERT_TRUE(set_meta(path, "opt_steps", "+999999999999999999"));
    ASSERT_STATUS(pipit_optimizer_load(p, path, &next), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("not made of decimal digits");
    ASSERT_TRUE(set_meta(path, "opt_steps", "99999999999999999 9"));
    ASSERT_STATUS(pipit_optimizer_load(p, path, &next), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("not made of decimal digits");
    ASSERT_OK(pipit_optimizer_save(p, path, 7));
    ASSERT_TRUE(set_meta(path, "next_step", "-7"));
    ASSERT_STATUS(pipit_optimizer_load(p, path, &next), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("metadata 'next_step' is '-7', negative");
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(limits_schedule_file_small_and_fast) {
    char path[512];
    snprintf(path, sizeof path, "%s/tiny.sched", pipit_test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("stages: 0 0 0 0\nF3.16777215\n", f); /* 28 bytes */
    fclose(f);
    double t0 = pipit__now();
    pipit_schedule *s = NULL;
    pipit_status st = pipit_schedule_load(path, &s);
    if (st == PIPIT_STATUS_OK) st = pipit_schedule_check(s);
    double dt = pipit__now() - t0;
    ASSERT_EQ_I64(st, PIPIT_STATUS_SCHEDULE);
    ASSERT_MSG_HAS("missing task F0.0");
    ASSERT_MSG_HAS("1 tasks cannot cover 4 stages x 16777216 microbatches");
    ASSERT_TRUE(dt < 0.5); /* was seconds and ~2 GB of tables */
    /* no table of S * M entries: the second allocation of the check would
     * be one if it existed; fail every allocation after the first few */
    for (long k = 1; k <= 3; k++) {
        pipit__alloc_fail_after(k);
        st = pipit_schedule_check(s);
        pipit__alloc_fail_after(-1);
        ASSERT_TRUE(st == PIPIT_STATUS_SCHEDULE || st == PIPIT_STATUS_NOMEM);
    }
    pipit_schedule_free(s);
}

/* The memory of a program that does not fit is refused before any of it
 * is filled: the blocks are reserved untouched first and the message names
 * the part that failed and the total. */
PIPIT_TEST(limits_program_memory_refused_before_filling) {
    /* injection: some reservation fails; the message names that part and the total */
    int saw_blocks = 0, ok = 0;
    for (long k = 1; k < 4000 && !ok; k++) {
        pipit_graph *g = pipit_graph_new();
        pipit_val loss = three_stages(g);
        pipit_program *p = NULL;
        pipit__alloc_fail_after(k);
        pipit_status st = pipit_compile(g, loss, NULL, &p);
        pipit__alloc_fail_after(-1);
        if (st == PIPIT_STATUS_OK) ok = 1;
        else if (strstr(pipit_errmsg(), "its gradients") && strstr(pipit_errmsg(), "bytes in all")) saw_blocks++;
        else if (strstr(pipit_errmsg(), "its optimizer second moments")) saw_blocks++;
        pipit_program_free(p);
        pipit_graph_free(g);
    }
    ASSERT_TRUE(ok);
    ASSERT_EQ_I64(saw_blocks, 2);
#ifndef LIMITS_ASAN
    /* a param of 2^46 floats (256 TiB): refused at once by the memory
     * admission (1 PiB with its gradient and moments), before planning;
     * without the admission, by the failed reservation, nothing filled */
    pipit_graph *g = pipit_graph_new();
    pipit_val x = pipit_input(g, "x", PIPIT_F32, 1, SH(4));
    pipit_val w = pipit_param(g, "big", PIPIT_F32, 1, SH((int64_t)1 << 46));
    pipit_val loss = pipit_sum(g, pipit_add(g, pipit_sum(g, x), pipit_sum(g, w)));
    ASSERT_OK(pipit_graph_status(g));
    pipit_program *p = NULL;
    double t0 = pipit__now();
    ASSERT_STATUS(pipit_compile(g, loss, NULL, &p), PIPIT_STATUS_NOMEM);
    ASSERT_MSG_HAS("pipit_compile: this program needs 1.0 PiB of memory but ");
    ASSERT_MSG_HAS("parameters with their gradients and optimizer moments (at least) 1.0 PiB");
    ASSERT_STATUS(pipit_compile(g, loss, &(pipit_options){.no_mem_check = 1}, &p), PIPIT_STATUS_NOMEM);
    ASSERT_MSG_HAS("its parameters (281474976710656 bytes) failed");
    ASSERT_MSG_HAS("bytes in all");
    ASSERT_TRUE(pipit__now() - t0 < 5.0);
    pipit_graph_free(g);
#endif
}
