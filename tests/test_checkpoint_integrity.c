/*
 * test_checkpoint_integrity.c — checkpoints prove themselves (docs/refuses.md):
 * every single-bit flip anywhere in a small training checkpoint (length
 * prefix, header, metadata, tensor data) is refused on open, naming the
 * tensor when its data changed; bytes appended after the last tensor are
 * refused; a file without checksums (older pipit, other writers) still
 * loads, reported unverified; metadata counts are parsed strictly; an f64
 * model's training checkpoint round-trips bit for bit (params, moments,
 * update count) and training continues identically.
 */
#include <stdint.h>

#include "io/safetensors.h"
#include "pipit_io.h"
#include "test.h"
#include "util/crc32c.h"

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/integrity_%s", pipit_test_tmpdir(), name);
    return buf[k];
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return b;
}

static int spill(const char *path, const void *b, size_t n) {
    remove(path); /* a new file: ext4 flushes a truncated-and-rewritten one on close */
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = fwrite(b, 1, n, f) != n;
    return fclose(f) || bad ? -1 : 0;
}

/* loss = sum(gelu(x * w) + b) with params w [3] and b [3], in dtype dt. */
static pipit_program *small_program(pipit_graph **gout, pipit_dtype dt) {
    pipit_graph *g = *gout = pipit_graph_new();
    pipit_val x = pipit_input(g, "x", dt, 1, (int64_t[]){3});
    pipit_val w = pipit_param(g, "w", dt, 1, (int64_t[]){3});
    pipit_val b = pipit_param(g, "b", dt, 1, (int64_t[]){3});
    pipit_val loss = pipit_sum(g, pipit_add(g, pipit_gelu(g, pipit_mul(g, x, w)), b));
    pipit_program *p = NULL;
    if (pipit_compile(g, loss, &(pipit_options){.optimizer = pipit_adamw(0.1, 0.9, 0.95, 1e-8, 0.1)}, &p)) return NULL;
    return p;
}

static pipit_status step(pipit_program *p, pipit_dtype dt, pipit_metrics *m) {
    static const float x32[3] = {0.5f, -1.25f, 2.0f};
    static const double x64[3] = {0.5, -1.25, 2.0};
    pipit_feed f = {"x", dt == PIPIT_F64 ? (const void *)x64 : (const void *)x32, dt == PIPIT_F64 ? sizeof x64 : sizeof x32};
    return pipit_step(p, &f, 1, 1, m);
}

/* A small training checkpoint (after two updates) at `path`. */
static int make_checkpoint(const char *path) {
    pipit_graph *g;
    pipit_program *p = small_program(&g, PIPIT_F32);
    int ok = p && !step(p, PIPIT_F32, NULL) && !step(p, PIPIT_F32, NULL) &&
             !pipit_checkpoint_save_train(p, path, 2, (const char *const[]){"seed", "7", "data_pos", "16", NULL});
    pipit_program_free(p);
    pipit_graph_free(g);
    return ok;
}

PIPIT_TEST(integrity_every_bit_flip_refused) {
    const char *path = tpath("flip.st"), *bad = tpath("flip_bad.st");
    ASSERT_TRUE(make_checkpoint(path));
    size_t n;
    unsigned char *b = slurp(path, &n);
    ASSERT_TRUE(b != NULL);
    pipit_checkpoint *ck = NULL;
    ASSERT_OK(pipit_checkpoint_open(path, &ck));
    ASSERT_EQ_I64(pipit_checkpoint_verified(ck), 1);
    ASSERT_EQ_I64(pipit_checkpoint_num_tensors(ck), 6);
    pipit_checkpoint_free(ck);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    size_t data0 = 8 + (size_t)hlen;
    long accepted = 0, named = 0, flips = 0;
    for (size_t byte = 0; byte < n; byte++)
        for (int bit = 0; bit < 8; bit++) {
            b[byte] ^= (unsigned char)(1u << bit);
            ASSERT_TRUE(spill(bad, b, n) == 0);
            pipit_status s = pipit_checkpoint_open(bad, &ck);
            if (s == PIPIT_STATUS_OK) {
                if (accepted++ < 5) fprintf(stderr, "accepted: bit %d of byte %zu (of %zu)\n", bit, byte, n);
                pipit_checkpoint_free(ck);
            } else if (byte >= data0) { /* in tensor data: the message names the tensor */
                named += strstr(pipit_errmsg(), "checksum mismatch") && strstr(pipit_errmsg(), "tensor '");
            }
            b[byte] ^= (unsigned char)(1u << bit);
            flips++;
        }
    fprintf(stderr, "%ld single-bit flips over %zu bytes (%zu of header), %ld accepted\n", flips, n, data0, accepted);
    ASSERT_EQ_I64(accepted, 0);
    ASSERT_EQ_I64(named, (long)(n - data0) * 8);
    /* the untouched bytes still open */
    ASSERT_TRUE(spill(bad, b, n) == 0);
    ASSERT_OK(pipit_checkpoint_open(bad, &ck));
    pipit_checkpoint_free(ck);
    free(b);
}

PIPIT_TEST(integrity_trailing_bytes_refused) {
    const char *path = tpath("trail.st"), *bad = tpath("trail_bad.st");
    ASSERT_TRUE(make_checkpoint(path));
    size_t n;
    unsigned char *b = slurp(path, &n);
    ASSERT_TRUE(b != NULL);
    unsigned char *more = calloc(1, n + 5);
    memcpy(more, b, n);
    pipit_checkpoint *ck = NULL;
    for (size_t extra = 1; extra <= 5; extra += 4) {
        ASSERT_TRUE(spill(bad, more, n + extra) == 0);
        ASSERT_STATUS(pipit_checkpoint_open(bad, &ck), PIPIT_STATUS_FORMAT);
        ASSERT_MSG_HAS("trailing bytes after the last tensor");
        ASSERT_MSG_HAS("pipit_checkpoint_open");
    }
    /* one byte short: the last tensor runs past the end of the file */
    ASSERT_TRUE(spill(bad, b, n - 1) == 0);
    ASSERT_STATUS(pipit_checkpoint_open(bad, &ck), PIPIT_STATUS_FORMAT);
    free(more);
    free(b);
}

/* The file at `path` rewritten by hand without its checksum keys: what an
 * older pipit wrote (f32 tensors, in file order). */
static int strip_checksums(const char *path, const char *out) {
    pipit__st_file *f = NULL;
    if (pipit__st_read(path, &f)) return 0;
    char h[8192];
    int k = snprintf(h, sizeof h, "{\"__metadata__\":{");
    const char *keys[] = {"pipit", "step", "opt_steps", "seed", "data_pos"};
    for (int i = 0; i < 5; i++)
        k += snprintf(h + k, sizeof h - (size_t)k, "%s\"%s\":\"%s\"", i ? "," : "", keys[i], pipit__st_meta(f, keys[i]));
    size_t off = 0;
    for (int i = 0; i < pipit__st_count(f); i++) {
        const pipit__st_tensor *t = pipit__st_get(f, i);
        k += snprintf(h + k, sizeof h - (size_t)k, "},\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[%zu,%zu]",
                      t->name, (long long)t->shape[0], off, off + t->nbytes);
        off += t->nbytes;
    }
    k += snprintf(h + k, sizeof h - (size_t)k, "}}");
    while (k % 8) h[k++] = ' ';
    unsigned char *b = malloc(8 + (size_t)k + off);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)k >> (8 * i));
    memcpy(b + 8, h, (size_t)k);
    for (int i = 0, o = 0; i < pipit__st_count(f); o += (int)pipit__st_get(f, i)->nbytes, i++)
        memcpy(b + 8 + k + o, pipit__st_get(f, i)->data, pipit__st_get(f, i)->nbytes);
    int ok = spill(out, b, 8 + (size_t)k + off) == 0;
    free(b);
    pipit__st_free(f);
    return ok;
}

PIPIT_TEST(integrity_old_format_loads_unverified) {
    const char *path = tpath("new.st"), *old = tpath("old.st");
    ASSERT_TRUE(make_checkpoint(path));
    ASSERT_TRUE(strip_checksums(path, old));
    pipit_checkpoint *ck = NULL, *ckn = NULL;
    ASSERT_OK(pipit_checkpoint_open(old, &ck));
    ASSERT_OK(pipit_checkpoint_open(path, &ckn));
    ASSERT_EQ_I64(pipit_checkpoint_verified(ck), 0);
    ASSERT_EQ_I64(pipit_checkpoint_verified(ckn), 1);
    ASSERT_TRUE(pipit_checkpoint_meta(ck, "crc32c") == NULL);
    /* it loads, and gives the same state as the verified file */
    pipit_graph *g1, *g2;
    pipit_program *p1 = small_program(&g1, PIPIT_F32), *p2 = small_program(&g2, PIPIT_F32);
    int64_t s1 = -1, s2 = -1;
    ASSERT_OK(pipit_checkpoint_load_train(p1, ck, &s1));
    ASSERT_OK(pipit_checkpoint_load_train(p2, ckn, &s2));
    ASSERT_EQ_I64(s1, 2);
    ASSERT_EQ_I64(s2, 2);
    float a[3], c[3];
    ASSERT_OK(pipit_program_get_param(p1, "w", a, sizeof a));
    ASSERT_OK(pipit_program_get_param(p2, "w", c, sizeof c));
    ASSERT_TRUE(memcmp(a, c, sizeof a) == 0);
    pipit_checkpoint_free(ckn);
    ckn = NULL;
    /* half a set of checksums is not "old": refused */
    const char *half = tpath("half.st");
    size_t n;
    unsigned char *b = slurp(path, &n);
    char *hk = strstr((char *)b + 8, "\"crc32c\":");
    ASSERT_TRUE(hk != NULL);
    hk[1] = 'x'; /* "xrc32c": no header checksum, tensor checksums left */
    ASSERT_TRUE(spill(half, b, n) == 0);
    ASSERT_STATUS(pipit_checkpoint_open(half, &ckn), PIPIT_STATUS_FORMAT);
    free(b);
    pipit_checkpoint_free(ck);
    pipit_checkpoint_free(ckn);
    pipit_program_free(p1);
    pipit_program_free(p2);
    pipit_graph_free(g1);
    pipit_graph_free(g2);
    ASSERT_EQ_I64(pipit_checkpoint_verified(NULL), 0);
    ASSERT_MSG_HAS("pipit_checkpoint_verified: checkpoint is NULL");
}

PIPIT_TEST(integrity_metadata_counts_strict) {
    /* a consistent file (its checksums match) whose counts are not counts */
    float z[3] = {0};
    pipit__st_tensor t[] = {{(char *)"w", PIPIT_F32, 1, {3}, sizeof z, z}, {(char *)"b", PIPIT_F32, 1, {3}, sizeof z, z},
                            {(char *)"opt.m.w", PIPIT_F32, 1, {3}, sizeof z, z},
                            {(char *)"opt.v.w", PIPIT_F32, 1, {3}, sizeof z, z},
                            {(char *)"opt.m.b", PIPIT_F32, 1, {3}, sizeof z, z},
                            {(char *)"opt.v.b", PIPIT_F32, 1, {3}, sizeof z, z}};
    const struct { const char *v, *why; } cases[] = {
        {"-1", "'-1', negative"}, {"1e20", "'1e20', not made of decimal digits"},
        {"9223372036854775808", "too large"}, {"12a", "not made of decimal digits"}, {"", "'', empty"},
        {" 3", "not made of decimal digits"}, {"+3", "not made of decimal digits"}};
    pipit_graph *g;
    pipit_program *p = small_program(&g, PIPIT_F32);
    ASSERT_TRUE(p != NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = tpath("counts.st");
        const char *meta[] = {"pipit", "train", "step", cases[i].v, "opt_steps", "1", "seed", cases[i].v, NULL};
        ASSERT_OK(pipit__st_write(path, t, 6, meta));
        pipit_checkpoint *ck = NULL;
        ASSERT_OK(pipit_checkpoint_open(path, &ck));
        int64_t step = -7;
        ASSERT_STATUS(pipit_checkpoint_load_train(p, ck, &step), PIPIT_STATUS_FORMAT);
        ASSERT_MSG_HAS("metadata 'step' is ");
        ASSERT_MSG_HAS(cases[i].why);
        ASSERT_EQ_I64(step, -7);
        uint64_t seed = 99;
        ASSERT_STATUS(pipit_checkpoint_meta_count(ck, "seed", INT64_MAX, &seed), PIPIT_STATUS_FORMAT);
        ASSERT_MSG_HAS("pipit_checkpoint_meta_count: checkpoint '");
        ASSERT_MSG_HAS("metadata 'seed' is ");
        ASSERT_EQ_I64(seed, 99);
        pipit_checkpoint_free(ck);
    }
    /* the largest seed there is, and a bound */
    const char *path = tpath("counts.st");
    const char *meta[] = {"pipit", "train", "step", "5", "opt_steps", "1", "seed", "18446744073709551615", NULL};
    ASSERT_OK(pipit__st_write(path, t, 6, meta));
    pipit_checkpoint *ck = NULL;
    ASSERT_OK(pipit_checkpoint_open(path, &ck));
    uint64_t v = 0;
    ASSERT_OK(pipit_checkpoint_meta_count(ck, "seed", UINT64_MAX, &v));
    ASSERT_TRUE(v == UINT64_MAX);
    ASSERT_STATUS(pipit_checkpoint_meta_count(ck, "seed", INT64_MAX, &v), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("too large (a count of at most 9223372036854775807)");
    ASSERT_STATUS(pipit_checkpoint_meta_count(ck, "data_pos", INT64_MAX, &v), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("has no metadata 'data_pos'");
    int64_t step = 0;
    ASSERT_OK(pipit_checkpoint_load_train(p, ck, &step));
    ASSERT_EQ_I64(step, 5);
    pipit_checkpoint_free(ck);
    pipit_program_free(p);
    pipit_graph_free(g);
}

PIPIT_TEST(integrity_f64_training_round_trip) {
    const char *path = tpath("f64.st");
    pipit_graph *ga, *gb;
    pipit_program *a = small_program(&ga, PIPIT_F64), *b = small_program(&gb, PIPIT_F64);
    ASSERT_TRUE(a && b);
    pipit_metrics ma, mb;
    ASSERT_OK(step(a, PIPIT_F64, &ma));
    ASSERT_OK(step(a, PIPIT_F64, &ma));
    ASSERT_OK(pipit_checkpoint_save_train(a, path, 2, NULL));
    pipit_checkpoint *ck = NULL;
    ASSERT_OK(pipit_checkpoint_open(path, &ck));
    int nd;
    int64_t sh[4];
    ASSERT_OK(pipit_checkpoint_tensor_shape(ck, "opt.v.w", &nd, sh));
    int64_t next = 0;
    ASSERT_OK(pipit_checkpoint_load_train(b, ck, &next));
    pipit_checkpoint_free(ck);
    ASSERT_EQ_I64(next, 2);
    ASSERT_EQ_I64(pipit_program_opt_steps(b), 2);
    const char *names[] = {"w", "b"};
    for (int i = 0; i < 2; i++) {
        double x[3], y[3];
        ASSERT_OK(pipit_program_get_param(a, names[i], x, sizeof x));
        ASSERT_OK(pipit_program_get_param(b, names[i], y, sizeof y));
        ASSERT_TRUE(memcmp(x, y, sizeof x) == 0);
        for (int w = 0; w < 2; w++) {
            ASSERT_OK(pipit_program_get_opt_state(a, names[i], w, x, sizeof x));
            ASSERT_OK(pipit_program_get_opt_state(b, names[i], w, y, sizeof y));
            ASSERT_TRUE(memcmp(x, y, sizeof x) == 0);
        }
    }
    /* and training continues identically */
    ASSERT_OK(step(a, PIPIT_F64, &ma));
    ASSERT_OK(step(b, PIPIT_F64, &mb));
    ASSERT_TRUE(ma.loss == mb.loss);
    double x[3], y[3];
    ASSERT_OK(pipit_program_get_param(a, "w", x, sizeof x));
    ASSERT_OK(pipit_program_get_param(b, "w", y, sizeof y));
    ASSERT_TRUE(memcmp(x, y, sizeof x) == 0);
    /* a plain checkpoint of the f64 model loads too; into an f32 model it is refused by dtype */
    ASSERT_OK(pipit_checkpoint_save(a, path, NULL));
    ASSERT_OK(pipit_checkpoint_load(b, path));
    pipit_graph *gc;
    pipit_program *c = small_program(&gc, PIPIT_F32);
    ASSERT_STATUS(pipit_checkpoint_load(c, path), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("tensor 'w' is f64, the param is f32");
    pipit_program_free(a);
    pipit_program_free(b);
    pipit_program_free(c);
    pipit_graph_free(ga);
    pipit_graph_free(gb);
    pipit_graph_free(gc);
}

PIPIT_TEST(integrity_crc32c_known_values) {
    /* the standard check value, and a bit-at-a-time reference on odd lengths and offsets */
    ASSERT_EQ_I64(pipit__crc32c(0, "123456789", 9), 0xe3069283u);
    ASSERT_EQ_I64(pipit__crc32c(0, "", 0), 0);
    unsigned char buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (unsigned char)(i * 37 + 11);
    for (int off = 0; off < 9; off++)
        for (int len = 0; len < 290; len += 7) {
            uint32_t c = 0xffffffffu;
            for (int i = 0; i < len; i++) {
                c ^= buf[off + i];
                for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            }
            c = ~c;
            uint32_t split = pipit__crc32c(pipit__crc32c(0, buf + off, (size_t)len / 3), buf + off + len / 3,
                                           (size_t)(len - len / 3));
            if (pipit__crc32c(0, buf + off, (size_t)len) != c || split != c)
                PIPIT_FAIL_("crc32c of %d bytes at offset %d: %08x, reference %08x", len, off,
                            pipit__crc32c(0, buf + off, (size_t)len), c);
        }
}
