/*
 * test_safetensors.c — safetensors reader/writer: bitwise round trip with
 * metadata, a file assembled byte by byte (as an independent writer would),
 * every malformed-header case rejected with a message naming the file and
 * the tensor, atomic writes (no partial file, no tmp left), and OOM sweeps.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "io/safetensors.h"
#include "util/common.h"

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", pipit_test_tmpdir(), name);
    return buf[k];
}

static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* Length prefix + header text (as given, unpadded) + `datalen` data bytes
 * taken from `data` (zeros if NULL). */
static int write_st_raw(const char *path, const char *json, const void *data, size_t datalen) {
    size_t hl = strlen(json);
    unsigned char *b = calloc(1, 8 + hl + datalen);
    if (!b) return -1;
    put_le64(b, hl);
    memcpy(b + 8, json, hl);
    if (data) memcpy(b + 8 + hl, data, datalen);
    int r = write_bytes(path, b, 8 + hl + datalen);
    free(b);
    return r;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = b ? fread(b, 1, (size_t)sz, f) : 0;
    fclose(f);
    return b;
}

/* Number of directory entries whose name contains ".tmp.". */
static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int c = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) c++;
    closedir(d);
    return c;
}

PIPIT_TEST(safetensors_roundtrip) {
    float a[6] = {1.5f, -2.25f, 3e-30f, -0.0f, 1e30f, 7.0f};
    double b[4] = {1.0 / 3.0, -1e300, 2.5, 0.0};
    int32_t c[4] = {INT32_MIN, -1, 0, INT32_MAX};
    float s = 42.0f;
    pipit__st_tensor t[5] = {
        {(char *)"h.0.attn.c_attn.weight", PIPIT_F32, 2, {2, 3}, sizeof a, a},
        {(char *)"b64", PIPIT_F64, 1, {4}, sizeof b, b},
        {(char *)"ids \"quoted\"\\", PIPIT_I32, 4, {2, 2, 1, 1}, sizeof c, c},
        {(char *)"scalar", PIPIT_F32, 0, {0}, sizeof s, &s},
        {(char *)"empty", PIPIT_F32, 2, {0, 5}, 0, NULL},
    };
    const char *meta[] = {"format", "pt", "step", "12", "note", "tab\there \"q\"", NULL};
    const char *p = tpath("rt.safetensors");
    ASSERT_OK(pipit__st_write(p, t, 5, meta));
    ASSERT_EQ_I64(count_tmp(pipit_test_tmpdir()), 0);

    size_t fn = 0;
    unsigned char *raw = slurp(p, &fn);
    ASSERT_TRUE(raw);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | raw[i];
    int pad_ok = hl % 8 == 0 && fn == 8 + hl + sizeof a + sizeof b + sizeof c + sizeof s;
    int data_ok = pad_ok && memcmp(raw + 8 + hl, a, sizeof a) == 0;
    free(raw);
    ASSERT_TRUE(pad_ok);
    ASSERT_TRUE(data_ok);

    pipit__st_file *f = NULL;
    ASSERT_OK(pipit__st_read(p, &f));
    ASSERT_EQ_I64(pipit__st_count(f), 5);
    for (int i = 0; i < 5; i++) {
        const pipit__st_tensor *r = pipit__st_find(f, t[i].name);
        if (!r) pipit__st_free(f);
        ASSERT_TRUE(r);
        int same = strcmp(r->name, t[i].name) == 0 && r->dtype == t[i].dtype &&
                   r->ndim == t[i].ndim && r->nbytes == t[i].nbytes &&
                   (t[i].nbytes == 0 || memcmp(r->data, t[i].data, t[i].nbytes) == 0);
        for (int k = 0; k < t[i].ndim; k++) same = same && r->shape[k] == t[i].shape[k];
        if (!same) pipit__st_free(f);
        ASSERT_TRUE(same);
    }
    /* Tensors come back in data-offset order: the written order here. */
    int order_ok = strcmp(pipit__st_get(f, 0)->name, "h.0.attn.c_attn.weight") == 0 &&
                   strcmp(pipit__st_get(f, 4)->name, "empty") == 0 &&
                   pipit__st_get(f, 5) == NULL && pipit__st_get(f, -1) == NULL;
    int meta_ok = pipit__st_meta(f, "format") && strcmp(pipit__st_meta(f, "format"), "pt") == 0 &&
                  strcmp(pipit__st_meta(f, "step"), "12") == 0 &&
                  strcmp(pipit__st_meta(f, "note"), "tab\there \"q\"") == 0 &&
                  pipit__st_meta(f, "nope") == NULL && pipit__st_find(f, "nope") == NULL;
    int aligned = ((uintptr_t)pipit__st_get(f, 0)->data % 64) == 0;

    /* Writing back what we read gives the identical file. */
    pipit__st_tensor back[5];
    for (int i = 0; i < 5; i++) back[i] = *pipit__st_get(f, i);
    const char *p2 = tpath("rt2.safetensors");
    pipit_status s2 = pipit__st_write(p2, back, 5, meta);
    pipit__st_free(f);
    ASSERT_TRUE(order_ok);
    ASSERT_TRUE(meta_ok);
    ASSERT_TRUE(aligned);
    ASSERT_OK(s2);
    size_t n1 = 0, n2 = 0;
    unsigned char *r1 = slurp(p, &n1), *r2 = slurp(p2, &n2);
    int same = r1 && r2 && n1 == n2;
    same = same && memcmp(r1, r2, n1) == 0;
    free(r1);
    free(r2);
    ASSERT_TRUE(same);
}

PIPIT_TEST(safetensors_hand_written) {
    /* As an independent writer would lay it out: keys unsorted, metadata
     * last, header length not a multiple of 8, data order differs from
     * header order. */
    const char *json = "{\"b\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [8, 16]},"
                       " \"a\": {\"dtype\": \"F32\", \"shape\": [1, 2], \"data_offsets\": [0, 8]},"
                       " \"__metadata__\": {\"format\": \"pt\"}}  ";
    unsigned char data[16];
    float av[2] = {1.5f, -2.0f};
    int32_t bv[2] = {7, -9};
    /* little-endian, byte by byte */
    uint32_t u;
    for (int i = 0; i < 2; i++) {
        memcpy(&u, &av[i], 4);
        for (int k = 0; k < 4; k++) data[4 * i + k] = (unsigned char)(u >> (8 * k));
        u = (uint32_t)bv[i];
        for (int k = 0; k < 4; k++) data[8 + 4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    const char *p = tpath("hand.safetensors");
    ASSERT_TRUE(write_st_raw(p, json, data, sizeof data) == 0);
    pipit__st_file *f = NULL;
    ASSERT_OK(pipit__st_read(p, &f));
    const pipit__st_tensor *a = pipit__st_get(f, 0), *b = pipit__st_find(f, "b");
    float ar[2] = {0};
    int32_t br[2] = {0};
    int ok = pipit__st_count(f) == 2 && a && strcmp(a->name, "a") == 0 && a->dtype == PIPIT_F32 &&
             a->ndim == 2 && a->shape[0] == 1 && a->shape[1] == 2 && a->nbytes == 8 && b &&
             b->dtype == PIPIT_I32 && b->ndim == 1 && b->shape[0] == 2 && b->nbytes == 8 &&
             strcmp(pipit__st_meta(f, "format"), "pt") == 0;
    if (ok) {
        memcpy(ar, a->data, 8);
        memcpy(br, b->data, 8);
    }
    pipit__st_free(f);
    ASSERT_TRUE(ok);
    ASSERT_TRUE(ar[0] == 1.5f && ar[1] == -2.0f);
    ASSERT_TRUE(br[0] == 7 && br[1] == -9);
}

/* Writes `json` + datalen zero bytes to NAME and expects FORMAT with a
 * message containing NAME and `needle`. */
#define EXPECT_BAD(name, json, datalen, needle)                                  \
    do {                                                                         \
        const char *p_ = tpath(name);                                            \
        ASSERT_TRUE(write_st_raw(p_, json, NULL, datalen) == 0);                 \
        pipit__st_file *f_ = (pipit__st_file *)1;                                \
        ASSERT_STATUS(pipit__st_read(p_, &f_), PIPIT_STATUS_FORMAT);              \
        ASSERT_TRUE(f_ == NULL);                                                 \
        ASSERT_MSG_HAS(name);                                                    \
        ASSERT_MSG_HAS(needle);                                                  \
    } while (0)

#define W_GOOD "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"

PIPIT_TEST(safetensors_bad_files) {
    pipit__st_file *f = NULL;
    /* Missing file: IO. */
    ASSERT_STATUS(pipit__st_read(tpath("missing.safetensors"), &f), PIPIT_STATUS_IO);
    ASSERT_MSG_HAS("missing.safetensors");
    ASSERT_STATUS(pipit__st_read(pipit_test_tmpdir(), &f), PIPIT_STATUS_IO);
    ASSERT_MSG_HAS("not a regular file");
    /* Shorter than 8 bytes. */
    const char *p = tpath("short.safetensors");
    ASSERT_TRUE(write_bytes(p, "\x05\0\0", 3) == 0);
    ASSERT_STATUS(pipit__st_read(p, &f), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("short.safetensors");
    ASSERT_MSG_HAS("shorter than the 8-byte");
    /* Header length larger than the file. */
    unsigned char big[12] = {0};
    put_le64(big, 1000);
    memcpy(big + 8, "{}  ", 4);
    p = tpath("biglen.safetensors");
    ASSERT_TRUE(write_bytes(p, big, sizeof big) == 0);
    ASSERT_STATUS(pipit__st_read(p, &f), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("biglen.safetensors");
    ASSERT_MSG_HAS("header length 1000 larger than the file");
    /* Huge length (would overflow naive arithmetic). */
    put_le64(big, UINT64_MAX);
    ASSERT_TRUE(write_bytes(p, big, sizeof big) == 0);
    ASSERT_STATUS(pipit__st_read(p, &f), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("larger than the file");

    EXPECT_BAD("notjson.st", "{\"w\": {\"dtype\": ", 0, "not valid JSON");
    EXPECT_BAD("garbage.st", "{}xyz", 0, "trailing bytes");
    EXPECT_BAD("notobj.st", "[1, 2]", 0, "not a JSON object");
    EXPECT_BAD("entry.st", "{\"w\": 3}", 0, "tensor 'w': entry is not a JSON object");
    EXPECT_BAD("nodtype.st", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "tensor 'w': missing \"dtype\"");
    EXPECT_BAD("noshape.st", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8,
               "tensor 'w': missing \"shape\"");
    EXPECT_BAD("nooffs.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
               "tensor 'w': missing \"data_offsets\"");
    EXPECT_BAD("dtnum.st", "{\"w\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "\"dtype\" is not a string");
    EXPECT_BAD("shapestr.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}",
               8, "\"shape\" is not an array");
    EXPECT_BAD("shapefrac.st",
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8,
               "shape entry 0 is not a non-negative integer");
    EXPECT_BAD("f16.st", "{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
               "tensor 'w': dtype 'F16' unsupported");
    EXPECT_BAD("ndim5.st",
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
               "tensor 'w': ndim 5 > 4");
    EXPECT_BAD("negdim.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
               "tensor 'w': negative dimension");
    EXPECT_BAD("offs1.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
               "\"data_offsets\" must be [begin, end]");
    EXPECT_BAD("offsneg.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}",
               8, "\"data_offsets\" must be [begin, end]");
    EXPECT_BAD("offsrev.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
               "tensor 'w': data_offsets [8, 0] have begin > end");
    EXPECT_BAD("offsout.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               8, "tensor 'w': data_offsets [4, 12] out of range of the data buffer (8 bytes)");
    EXPECT_BAD("size.st", "{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
               "tensor 'w': data_offsets [0, 8] give 8 bytes but shape [2] of F64 needs 16");
    EXPECT_BAD("sizeovf.st",
               "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,4294967296],"
               "\"data_offsets\":[0,8]}}",
               8, "needs more than");
    EXPECT_BAD("overlap.st",
               "{\"w\":{" W_GOOD "},\"v\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "tensors 'w' [0, 8) and 'v' [4, 8) overlap");
    EXPECT_BAD("dup.st", "{\"w\":{" W_GOOD "},\"w\":{" W_GOOD "}}", 8, "duplicate tensor name 'w'");
    EXPECT_BAD("metaobj.st", "{\"__metadata__\":[1],\"w\":{" W_GOOD "}}", 8,
               "\"__metadata__\" is not a JSON object");
    EXPECT_BAD("metaval.st", "{\"__metadata__\":{\"step\":12},\"w\":{" W_GOOD "}}", 8,
               "\"__metadata__\" entry 'step' is not a string");
    EXPECT_BAD("metadup.st", "{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0,
               "duplicate \"__metadata__\" key 'a'");
    /* a key twice inside an entry: cJSON would read the first dtype and never the second */
    EXPECT_BAD("keydup.st", "{\"w\":{" W_GOOD ",\"dtype\":\"F64\"}}", 8, "tensor 'w': key \"dtype\" appears twice");

    /* The tensors must tile the data buffer, as the reference reader
     * demands: no hole between tensors, nothing after the last. */
    EXPECT_BAD("hole.st",
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"v\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]}}",
               12, "bytes [4, 8) of the data buffer belong to no tensor (before 'v')");
    EXPECT_BAD("lead.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
               "bytes [0, 4) of the data buffer belong to no tensor (before 'w')");
    EXPECT_BAD("trail.st", "{\"w\":{" W_GOOD "}}", 9, "1 trailing bytes after the last tensor");
    EXPECT_BAD("trailempty.st", "{}", 3, "3 trailing bytes after the last tensor");

    /* Accepted edge cases: empty header object, zero-sized tensors (in
     * file order, anywhere in the tiling). */
    p = tpath("edge.st");
    ASSERT_TRUE(write_st_raw(p, "{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                                "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                                "\"v\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}",
                             NULL, 8) == 0);
    ASSERT_OK(pipit__st_read(p, &f));
    int n = pipit__st_count(f);
    pipit__st_free(f);
    ASSERT_EQ_I64(n, 3);
    p = tpath("empty.st");
    ASSERT_TRUE(write_st_raw(p, "{}", NULL, 0) == 0);
    ASSERT_OK(pipit__st_read(p, &f));
    n = pipit__st_count(f);
    pipit__st_free(f);
    ASSERT_EQ_I64(n, 0);
}

PIPIT_TEST(safetensors_write_invalid) {
    float a[2] = {1, 2};
    pipit__st_tensor t[2] = {
        {(char *)"w", PIPIT_F32, 1, {2}, sizeof a, a},
        {(char *)"w", PIPIT_F32, 1, {2}, sizeof a, a},
    };
    const char *p = tpath("inv.safetensors");
    ASSERT_STATUS(pipit__st_write(p, t, 2, NULL), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("duplicate tensor name 'w'");
    t[1].name = (char *)"v";
    t[1].nbytes = 4;
    ASSERT_STATUS(pipit__st_write(p, t, 2, NULL), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("tensor 'v': nbytes 4 does not match shape [2]");
    t[1].nbytes = 8;
    t[1].ndim = 5;
    ASSERT_STATUS(pipit__st_write(p, t, 2, NULL), PIPIT_STATUS_INVALID);
    t[1].ndim = 1;
    t[1].name = (char *)"__metadata__";
    ASSERT_STATUS(pipit__st_write(p, t, 2, NULL), PIPIT_STATUS_INVALID);
    t[1].name = (char *)"v";
    const char *meta[] = {"k", NULL};
    ASSERT_STATUS(pipit__st_write(p, t, 2, meta), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("metadata key 'k' has no value");
    ASSERT_TRUE(access(p, F_OK) != 0);
    ASSERT_EQ_I64(count_tmp(pipit_test_tmpdir()), 0);
}

PIPIT_TEST(safetensors_atomic_write) {
    float big[1000];
    for (int i = 0; i < 1000; i++) big[i] = (float)i;
    float small[2] = {5, 6};
    pipit__st_tensor tb = {(char *)"w", PIPIT_F32, 1, {1000}, sizeof big, big};
    pipit__st_tensor ts = {(char *)"w", PIPIT_F32, 1, {2}, sizeof small, small};

    /* Non-existent directory: IO, nothing created. */
    const char *p = tpath("no/such/dir/x.safetensors");
    ASSERT_STATUS(pipit__st_write(p, &ts, 1, NULL), PIPIT_STATUS_IO);
    ASSERT_MSG_HAS("x.safetensors");
    ASSERT_TRUE(access(tpath("no"), F_OK) != 0);

    /* A "directory" that is a regular file: ENOTDIR, even for root. */
    const char *plain = tpath("plainfile");
    ASSERT_TRUE(write_bytes(plain, "x", 1) == 0);
    char under[600];
    snprintf(under, sizeof under, "%s/x.safetensors", plain);
    ASSERT_STATUS(pipit__st_write(under, &ts, 1, NULL), PIPIT_STATUS_IO);
    ASSERT_MSG_HAS("plainfile/x.safetensors");

    /* Read-only directory (root ignores permissions: skip that part). */
    const char *ro = tpath("readonly");
    ASSERT_TRUE(mkdir(ro, 0700) == 0 || errno == EEXIST);
    char rop[600];
    snprintf(rop, sizeof rop, "%s/x.safetensors", ro);
    if (geteuid() != 0) {
        ASSERT_TRUE(chmod(ro, 0500) == 0);
        pipit_status s = pipit__st_write(rop, &ts, 1, NULL);
        int gone = access(rop, F_OK) != 0 && count_tmp(ro) == 0;
        chmod(ro, 0700);
        ASSERT_STATUS(s, PIPIT_STATUS_IO);
        ASSERT_TRUE(gone);
    }

    /* Over an existing, larger file: replaced whole. */
    p = tpath("over.safetensors");
    ASSERT_OK(pipit__st_write(p, &tb, 1, NULL));
    ASSERT_OK(pipit__st_write(p, &ts, 1, NULL));
    ASSERT_EQ_I64(count_tmp(pipit_test_tmpdir()), 0);
    pipit__st_file *f = NULL;
    ASSERT_OK(pipit__st_read(p, &f));
    const pipit__st_tensor *w = pipit__st_find(f, "w");
    int ok = pipit__st_count(f) == 1 && w && w->shape[0] == 2 && memcmp(w->data, small, 8) == 0;
    pipit__st_free(f);
    ASSERT_TRUE(ok);
    size_t n = 0;
    unsigned char *raw = slurp(p, &n);
    uint64_t hl = 0;
    for (int i = 7; raw && i >= 0; i--) hl = (hl << 8) | raw[i];
    free(raw);
    ASSERT_EQ_I64(n, 8 + hl + 8);

    /* A path that is a directory: rename fails, old directory untouched,
     * tmp removed. */
    ASSERT_STATUS(pipit__st_write(ro, &ts, 1, NULL), PIPIT_STATUS_IO);
    ASSERT_EQ_I64(count_tmp(pipit_test_tmpdir()), 0);
    struct stat sb;
    ASSERT_TRUE(stat(ro, &sb) == 0 && S_ISDIR(sb.st_mode));
}

PIPIT_TEST(safetensors_oom_sweep) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    int32_t c[2] = {1, 2};
    pipit__st_tensor t[2] = {
        {(char *)"a", PIPIT_F32, 2, {2, 3}, sizeof a, a},
        {(char *)"c", PIPIT_I32, 1, {2}, sizeof c, c},
    };
    const char *meta[] = {"format", "pt", NULL};
    const char *p = tpath("oom.safetensors");
    int done = 0;
    for (long k = 1; k < 200 && !done; k++) {
        pipit__alloc_fail_after(k);
        pipit_status s = pipit__st_write(p, t, 2, meta);
        pipit__alloc_fail_after(-1);
        if (s == PIPIT_STATUS_OK) done = 1;
        else ASSERT_STATUS(s, PIPIT_STATUS_NOMEM);
    }
    ASSERT_TRUE(done);
    ASSERT_EQ_I64(count_tmp(pipit_test_tmpdir()), 0);
    done = 0;
    for (long k = 1; k < 200 && !done; k++) {
        pipit__st_file *f = NULL;
        pipit__alloc_fail_after(k);
        pipit_status s = pipit__st_read(p, &f);
        pipit__alloc_fail_after(-1);
        if (s == PIPIT_STATUS_OK) {
            done = pipit__st_count(f) == 2 ? 1 : -1;
            pipit__st_free(f);
        } else {
            ASSERT_TRUE(f == NULL);
            ASSERT_STATUS(s, PIPIT_STATUS_NOMEM);
        }
    }
    ASSERT_EQ_I64(done, 1);
}
