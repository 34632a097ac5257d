/*
 * safetensors.c — safetensors reader (whole file in one aligned buffer,
 * JSON header parsed with cJSON, every field validated with messages that
 * name the file and the tensor; tensors must tile the data buffer, as in
 * the reference implementation) and atomic writer (hand-formatted header
 * so integers are exact, tmp file + fflush + fsync + rename). The writer
 * adds CRC-32C checksums to the metadata, one per tensor ("crc32c:NAME")
 * and one of the header ("crc32c"); the reader verifies them when present.
 */
#include "io/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/checked.h"
#include "util/common.h"
#include "util/crc32c.h"
#include "util/fileio.h"
#include "util/json.h"

/* JSON integers are doubles in cJSON: accept only exact ones up to 2^53. */
#define ST_MAX_INT 9007199254740992.0

typedef struct {
    pipit__st_tensor t;
    uint64_t begin, end; /* offsets in the data buffer */
} st_entry;

typedef struct {
    char *key, *value;
} st_meta;

struct pipit__st_file {
    unsigned char *mem;   /* whole file, at offset `pad` (64-byte aligned alloc) */
    int n;
    st_entry *e;          /* tensors sorted by data offset */
    int *by_name;         /* indices into e, sorted by name */
    int nmeta;
    st_meta *meta;        /* sorted by key */
    int checksummed;      /* its checksums were present and verified */
};

/* ------------------------------------------------------------- helpers */

static pipit_status st_fail(pipit_status s, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static pipit_status st_fail(pipit_status s, const char *path, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pipit__err(s, "safetensors file '%s': %s", path, msg);
}

static uint64_t load_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void store_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static int dtype_from_name(const char *s, pipit_dtype *dt) {
    if (strcmp(s, "F32") == 0) *dt = PIPIT_F32;
    else if (strcmp(s, "F64") == 0) *dt = PIPIT_F64;
    else if (strcmp(s, "I32") == 0) *dt = PIPIT_I32;
    else if (strcmp(s, "BF16") == 0) *dt = PIPIT_BF16;
    else return 0;
    return 1;
}

static const char *dtype_st_name(pipit_dtype dt) {
    switch (dt) {
    case PIPIT_F32: return "F32";
    case PIPIT_F64: return "F64";
    case PIPIT_I32: return "I32";
    case PIPIT_BF16: return "BF16";
    }
    return NULL;
}

/* 1 and *v if x is an exact non-negative integer <= 2^53; -1 if a negative
 * number; 0 otherwise. */
static int json_uint(const cJSON *x, uint64_t *v) {
    if (!cJSON_IsNumber(x)) return 0;
    double d = x->valuedouble;
    if (d < 0) return -1;
    if (!(d <= ST_MAX_INT)) return 0; /* also NaN */
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return 0;
    *v = u;
    return 1;
}

/* prod(shape) * elem; 0 on overflow (sets *ok = 0). */
static uint64_t shape_bytes(int ndim, const int64_t *shape, size_t elem, int *ok) {
    size_t b = elem;
    *ok = 1;
    for (int i = 0; i < ndim; i++) {
        if (!pipit__mul_size(b, (size_t)shape[i], &b)) {
            *ok = 0;
            return 0;
        }
    }
    return b;
}


/* ----------------------------------------------------------- checksums */

/* The metadata keys of the checksums: "crc32c" (the header) and
 * "crc32c:NAME" (tensor NAME's bytes). */
#define CRC_KEY "crc32c"
#define CRC_PREFIX "crc32c:"

static int is_crc_key(const char *key) { return strncmp(key, CRC_KEY, sizeof CRC_KEY - 1) == 0; }

static uint32_t crc_u64(uint32_t c, uint64_t v) {
    unsigned char b[8];
    store_le64(b, v);
    return pipit__crc32c(c, b, 8);
}

static uint32_t crc_str(uint32_t c, const char *s) { return pipit__crc32c(c, s, strlen(s) + 1); }

/* One tensor's part of the header checksum. */
static uint32_t crc_tensor_header(uint32_t c, const pipit__st_tensor *t, uint64_t begin, uint64_t end) {
    c = crc_str(c, t->name);
    c = crc_str(c, dtype_st_name(t->dtype));
    c = crc_u64(c, (uint64_t)t->ndim);
    for (int k = 0; k < t->ndim; k++) c = crc_u64(c, (uint64_t)t->shape[k]);
    return crc_u64(crc_u64(c, begin), end);
}

/* The value of a checksum key: exactly 8 lowercase hex digits. */
static int parse_crc(const char *v, uint32_t *out) {
    uint32_t x = 0;
    for (int i = 0; i < 8; i++) {
        char ch = v[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return 0;
        x = x << 4 | (uint32_t)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
    }
    *out = x;
    return v[8] == 0;
}

/* ------------------------------------------------------------- reading */

static int cmp_entry_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->t.name, y->t.name);
}

/* qsort has no context argument: by_name sorting uses this file-scope
 * pointer only through a thread-local, so concurrent reads are safe. */
static _Thread_local const st_entry *sort_entries;

static int cmp_index_name(const void *a, const void *b) {
    return strcmp(sort_entries[*(const int *)a].t.name, sort_entries[*(const int *)b].t.name);
}

static int cmp_meta(const void *a, const void *b) {
    return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

void pipit__st_free(pipit__st_file *f) {
    if (!f) return;
    if (f->e)
        for (int i = 0; i < f->n; i++) pipit__free(f->e[i].t.name);
    for (int i = 0; i < f->nmeta; i++) {
        pipit__free(f->meta[i].key);
        pipit__free(f->meta[i].value);
    }
    pipit__free(f->e);
    pipit__free(f->by_name);
    pipit__free(f->meta);
    pipit__free_aligned(f->mem);
    pipit__free(f);
}

static pipit_status parse_metadata(const char *path, const cJSON *m, pipit__st_file *f) {
    if (!cJSON_IsObject(m))
        return st_fail(PIPIT_STATUS_FORMAT, path, "\"__metadata__\" is not a JSON object");
    int cnt = cJSON_GetArraySize(m);
    f->meta = pipit__calloc((size_t)cnt + 1, sizeof *f->meta);
    if (!f->meta) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
    for (const cJSON *kv = m->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv) || !kv->valuestring)
            return st_fail(PIPIT_STATUS_FORMAT, path,
                           "\"__metadata__\" entry '%s' is not a string", kv->string);
        st_meta *me = &f->meta[f->nmeta];
        me->key = pipit__strdup(kv->string);
        me->value = me->key ? pipit__strdup(kv->valuestring) : NULL;
        if (!me->key || !me->value) {
            pipit__free(me->key);
            pipit__free(me->value);
            me->key = me->value = NULL;
            return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
        }
        f->nmeta++;
    }
    qsort(f->meta, (size_t)f->nmeta, sizeof *f->meta, cmp_meta);
    for (int i = 1; i < f->nmeta; i++)
        if (strcmp(f->meta[i - 1].key, f->meta[i].key) == 0)
            return st_fail(PIPIT_STATUS_FORMAT, path, "duplicate \"__metadata__\" key '%s'",
                           f->meta[i].key);
    return PIPIT_STATUS_OK;
}

/* Parses one tensor entry into f->e[f->n] (name already set). */
static pipit_status parse_tensor(const char *path, const cJSON *x, st_entry *e,
                                 uint64_t data_len) {
    const char *name = e->t.name;
    if (!cJSON_IsObject(x))
        return st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': entry is not a JSON object", name);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(x, "dtype");
    if (!dt) return st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': missing \"dtype\"", name);
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': \"dtype\" is not a string", name);
    if (!dtype_from_name(dt->valuestring, &e->t.dtype))
        return st_fail(PIPIT_STATUS_FORMAT, path,
                       "tensor '%s': dtype '%s' unsupported (pipit reads F32, F64, BF16, I32)", name,
                       dt->valuestring);

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(x, "shape");
    if (!sh) return st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': missing \"shape\"", name);
    if (!cJSON_IsArray(sh))
        return st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': \"shape\" is not an array", name);
    int ndim = cJSON_GetArraySize(sh);
    if (ndim > PIPIT_MAX_DIMS)
        return st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': ndim %d > %d unsupported", name,
                       ndim, PIPIT_MAX_DIMS);
    e->t.ndim = ndim;
    int k = 0;
    for (const cJSON *d = sh->child; d; d = d->next, k++) {
        uint64_t v;
        int r = json_uint(d, &v);
        if (r < 0)
            return st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': negative dimension %g in shape",
                           name, d->valuedouble);
        if (r == 0)
            return st_fail(PIPIT_STATUS_FORMAT, path,
                           "tensor '%s': shape entry %d is not a non-negative integer", name, k);
        e->t.shape[k] = (int64_t)v;
    }

    const cJSON *of = cJSON_GetObjectItemCaseSensitive(x, "data_offsets");
    if (!of)
        return st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': missing \"data_offsets\"", name);
    uint64_t b = 0, en = 0;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || json_uint(of->child, &b) != 1 ||
        json_uint(of->child->next, &en) != 1)
        return st_fail(PIPIT_STATUS_FORMAT, path,
                       "tensor '%s': \"data_offsets\" must be [begin, end] (non-negative integers)",
                       name);
    if (b > en)
        return st_fail(PIPIT_STATUS_FORMAT, path,
                       "tensor '%s': data_offsets [%llu, %llu] have begin > end", name,
                       (unsigned long long)b, (unsigned long long)en);
    if (en > data_len)
        return st_fail(PIPIT_STATUS_FORMAT, path,
                       "tensor '%s': data_offsets [%llu, %llu] out of range of the data buffer "
                       "(%llu bytes)",
                       name, (unsigned long long)b, (unsigned long long)en,
                       (unsigned long long)data_len);
    int ok;
    uint64_t want = shape_bytes(ndim, e->t.shape, pipit__dtype_size(e->t.dtype), &ok);
    if (!ok || want != en - b) {
        char sbuf[128];
        pipit__shape_str(sbuf, sizeof sbuf, ndim, e->t.shape);
        return st_fail(PIPIT_STATUS_FORMAT, path,
                       "tensor '%s': data_offsets [%llu, %llu] give %llu bytes but shape %s of %s "
                       "needs %s%llu",
                       name, (unsigned long long)b, (unsigned long long)en,
                       (unsigned long long)(en - b), sbuf, dt->valuestring, ok ? "" : "more than ",
                       (unsigned long long)(ok ? want : UINT64_MAX));
    }
    e->begin = b;
    e->end = en;
    e->t.nbytes = (size_t)(en - b);
    return PIPIT_STATUS_OK;
}

static pipit_status parse_header(const char *path, pipit__st_file *f, const char *hdr,
                                 size_t hlen, const unsigned char *data, uint64_t data_len) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, hlen, &end, 0);
    if (!root) {
        long pos = end && end >= hdr ? (long)(end - hdr) : -1;
        return st_fail(PIPIT_STATUS_FORMAT, path, "header is not valid JSON (error near byte %ld of %zu)",
                       pos, hlen);
    }
    pipit_status st = PIPIT_STATUS_OK;
    for (const char *p = end; p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st = st_fail(PIPIT_STATUS_FORMAT, path,
                         "header has trailing bytes after the JSON object (byte %ld of %zu)",
                         (long)(p - hdr), hlen);
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        st = st_fail(PIPIT_STATUS_FORMAT, path, "header is not a JSON object");
        goto done;
    }
    int cnt = cJSON_GetArraySize(root);
    f->e = pipit__calloc((size_t)cnt + 1, sizeof *f->e);
    f->by_name = pipit__calloc((size_t)cnt + 1, sizeof *f->by_name);
    if (!f->e || !f->by_name) {
        st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
        goto done;
    }
    int have_meta = 0;
    for (const cJSON *x = root->child; x; x = x->next) {
        if (strcmp(x->string, "__metadata__") == 0) {
            if (have_meta++) {
                st = st_fail(PIPIT_STATUS_FORMAT, path, "duplicate \"__metadata__\" entry");
                goto done;
            }
            if ((st = parse_metadata(path, x, f)) != PIPIT_STATUS_OK) goto done;
            continue;
        }
        char dup[256]; /* in an entry: cJSON would read the first "dtype" and ignore the second */
        int nomem = 0;
        if (pipit__json_dup_key_path(x, dup, sizeof dup, &nomem) || nomem) {
            st = nomem ? pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path)
                       : st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': key \"%s\" appears twice", x->string, dup);
            goto done;
        }
        st_entry *e = &f->e[f->n];
        e->t.name = pipit__strdup(x->string);
        if (!e->t.name) {
            st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
            goto done;
        }
        f->n++;
        if ((st = parse_tensor(path, x, e, data_len)) != PIPIT_STATUS_OK) goto done;
    }

    /* File order by offset; names must be unique; non-empty tensors must
     * not overlap. */
    qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_entry_offset);
    for (int i = 0; i < f->n; i++) {
        f->e[i].t.data = data + f->e[i].begin;
        f->by_name[i] = i;
    }
    sort_entries = f->e;
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_index_name);
    sort_entries = NULL;
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->e[f->by_name[i - 1]].t.name, f->e[f->by_name[i]].t.name) == 0) {
            st = st_fail(PIPIT_STATUS_FORMAT, path, "duplicate tensor name '%s'",
                         f->e[f->by_name[i]].t.name);
            goto done;
        }
    /* The tensors tile the data buffer, in offset order: no overlap, no
     * hole, nothing after the last (the reference implementation refuses
     * the same; bytes no tensor owns would be covered by no checksum). */
    uint64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        st_entry *e = &f->e[i];
        if (e->begin < pos) {
            const st_entry *prev = &f->e[i - 1];
            st = st_fail(PIPIT_STATUS_FORMAT, path, "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                         prev->t.name, (unsigned long long)prev->begin, (unsigned long long)prev->end, e->t.name,
                         (unsigned long long)e->begin, (unsigned long long)e->end);
            goto done;
        }
        if (e->begin > pos) {
            st = st_fail(PIPIT_STATUS_FORMAT, path,
                         "bytes [%llu, %llu) of the data buffer belong to no tensor (before '%s'): the tensors must "
                         "follow each other without gaps",
                         (unsigned long long)pos, (unsigned long long)e->begin, e->t.name);
            goto done;
        }
        pos = e->end;
    }
    if (pos != data_len) {
        st = st_fail(PIPIT_STATUS_FORMAT, path,
                     "%llu trailing bytes after the last tensor (the tensors end at byte %llu of the %llu-byte data "
                     "buffer): a truncated header or bytes appended to the file",
                     (unsigned long long)(data_len - pos), (unsigned long long)pos, (unsigned long long)data_len);
        goto done;
    }
done:
    cJSON_Delete(root);
    return st;
}

/* The checksums of a file that has them: the header's over the metadata
 * (every key but "crc32c", in key order) and each tensor's name, dtype,
 * shape and offsets (in name order), then every tensor's bytes. A file
 * without any is accepted unverified (older pipit, other writers). */
static pipit_status verify_checksums(const char *path, pipit__st_file *f) {
    const char *hv = pipit__st_meta(f, CRC_KEY);
    if (!hv) {
        for (int i = 0; i < f->nmeta; i++)
            if (is_crc_key(f->meta[i].key))
                return st_fail(PIPIT_STATUS_FORMAT, path,
                               "metadata has the tensor checksum '%s' but no header checksum \"" CRC_KEY "\"",
                               f->meta[i].key);
        return PIPIT_STATUS_OK;
    }
    uint32_t want, got = 0;
    if (!parse_crc(hv, &want))
        return st_fail(PIPIT_STATUS_FORMAT, path, "metadata \"" CRC_KEY "\" is '%.40s', not 8 lowercase hex digits", hv);
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[i].key, CRC_KEY) != 0) got = crc_str(crc_str(got, f->meta[i].key), f->meta[i].value);
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->e[f->by_name[i]];
        got = crc_tensor_header(got, &e->t, e->begin, e->end);
    }
    if (got != want)
        return st_fail(PIPIT_STATUS_FORMAT, path,
                       "header checksum mismatch (crc32c %08x, the file says %s): its metadata or a tensor's name, "
                       "dtype, shape or offsets changed after it was written",
                       got, hv);
    for (int i = 0; i < f->nmeta; i++) /* every tensor checksum names a tensor */
        if (strncmp(f->meta[i].key, CRC_PREFIX, sizeof CRC_PREFIX - 1) == 0 &&
            !pipit__st_find(f, f->meta[i].key + sizeof CRC_PREFIX - 1))
            return st_fail(PIPIT_STATUS_FORMAT, path, "metadata '%s' is the checksum of a tensor the file lacks",
                           f->meta[i].key);
    for (int i = 0; i < f->n; i++) {
        const pipit__st_tensor *t = &f->e[i].t;
        size_t klen = sizeof CRC_PREFIX + strlen(t->name);
        char *key = pipit__malloc(klen);
        if (!key) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s'", path);
        snprintf(key, klen, CRC_PREFIX "%s", t->name);
        const char *v = pipit__st_meta(f, key);
        pipit__free(key);
        uint32_t tw;
        if (!v || !parse_crc(v, &tw))
            return st_fail(PIPIT_STATUS_FORMAT, path, "tensor '%s': its checksum (metadata \"" CRC_PREFIX "%s\") is %s",
                           t->name, t->name, v ? "not 8 lowercase hex digits" : "missing");
        uint32_t tg = pipit__crc32c(0, t->data, t->nbytes);
        if (tg != tw)
            return st_fail(PIPIT_STATUS_FORMAT, path,
                           "tensor '%s': checksum mismatch (crc32c of its %zu bytes is %08x, the file says %08x): its "
                           "data changed after it was written",
                           t->name, t->nbytes, tg, tw);
    }
    f->checksummed = 1;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__st_read(const char *path, pipit__st_file **out) {
    if (!out || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit__st_read: NULL %s", path ? "out" : "path");
    *out = NULL;
    pipit_status st = PIPIT_STATUS_OK;
    pipit__st_file *f = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return st_fail(PIPIT_STATUS_IO, path, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = st_fail(PIPIT_STATUS_IO, path, "cannot stat: %s", strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = st_fail(PIPIT_STATUS_IO, path, "not a regular file");
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        st = st_fail(PIPIT_STATUS_FORMAT, path,
                     "file is %llu bytes, shorter than the 8-byte header length",
                     (unsigned long long)size);
        goto fail;
    }
    unsigned char lenb[8];
    if (pipit__read_full(fd, lenb, 8, 0) != 0) {
        st = st_fail(PIPIT_STATUS_IO, path, "cannot read: %s", strerror(errno));
        goto fail;
    }
    uint64_t hlen = load_le64(lenb);
    if (hlen > size - 8) {
        st = st_fail(PIPIT_STATUS_FORMAT, path,
                     "header length %llu larger than the file (%llu bytes)",
                     (unsigned long long)hlen, (unsigned long long)size);
        goto fail;
    }
    if (size > (uint64_t)SIZE_MAX - 128) {
        st = st_fail(PIPIT_STATUS_NOMEM, path, "file too large (%llu bytes)",
                     (unsigned long long)size);
        goto fail;
    }
    f = pipit__calloc(1, sizeof *f);
    /* Pad so the data buffer (at 8 + hlen) lands 64-byte aligned. */
    size_t pad = (size_t)((64 - (8 + hlen) % 64) % 64);
    if (f) f->mem = pipit__malloc_aligned(pad + (size_t)size);
    if (!f || !f->mem) {
        st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s' (%llu bytes)", path,
                        (unsigned long long)size);
        goto fail;
    }
    unsigned char *file = f->mem + pad;
    if (pipit__read_full(fd, file, (size_t)size, 0) != 0) {
        st = st_fail(PIPIT_STATUS_IO, path, "cannot read: %s", strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    st = parse_header(path, f, (const char *)file + 8, (size_t)hlen, file + 8 + hlen,
                      size - 8 - hlen);
    if (st == PIPIT_STATUS_OK) st = verify_checksums(path, f);
    if (st != PIPIT_STATUS_OK) goto fail;
    *out = f;
    return PIPIT_STATUS_OK;
fail:
    if (fd >= 0) close(fd);
    pipit__st_free(f);
    return st;
}

int pipit__st_count(const pipit__st_file *f) { return f ? f->n : 0; }

int pipit__st_checksummed(const pipit__st_file *f) { return f ? f->checksummed : 0; }

const pipit__st_tensor *pipit__st_get(const pipit__st_file *f, int i) {
    if (!f || i < 0 || i >= f->n) return NULL;
    return &f->e[i].t;
}

const pipit__st_tensor *pipit__st_find(const pipit__st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const st_entry *e = &f->e[f->by_name[mid]];
        int c = strcmp(name, e->t.name);
        if (c == 0) return &e->t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *pipit__st_meta(const pipit__st_file *f, const char *key) {
    if (!f || !key) return NULL;
    int lo = 0, hi = f->nmeta - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(key, f->meta[mid].key);
        if (c == 0) return f->meta[mid].value;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

/* ------------------------------------------------------------- writing */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = pipit__realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_putu(strbuf *b, uint64_t v) {
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    sb_put(b, tmp, (size_t)k);
}

/* A JSON string literal (UTF-8 passed through; quotes, backslash and
 * control characters escaped). */
static void sb_json_str(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_put(b, esc, 6);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static pipit_status check_write_args(const char *path, const pipit__st_tensor *t, int n,
                                     const char *const *meta) {
    if (n < 0 || (n > 0 && !t))
        return st_fail(PIPIT_STATUS_INVALID, path, "bad tensor list (n = %d)", n);
    for (int i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (!name) return st_fail(PIPIT_STATUS_INVALID, path, "tensor %d has no name", i);
        if (strcmp(name, "__metadata__") == 0)
            return st_fail(PIPIT_STATUS_INVALID, path, "tensor name '__metadata__' is reserved");
        if (!dtype_st_name(t[i].dtype))
            return st_fail(PIPIT_STATUS_INVALID, path, "tensor '%s': bad dtype %d", name,
                           (int)t[i].dtype);
        if (t[i].ndim < 0 || t[i].ndim > PIPIT_MAX_DIMS)
            return st_fail(PIPIT_STATUS_INVALID, path, "tensor '%s': ndim %d out of range 0..%d",
                           name, t[i].ndim, PIPIT_MAX_DIMS);
        for (int k = 0; k < t[i].ndim; k++)
            if (t[i].shape[k] < 0)
                return st_fail(PIPIT_STATUS_INVALID, path, "tensor '%s': negative dimension %lld",
                               name, (long long)t[i].shape[k]);
        int ok;
        uint64_t want = shape_bytes(t[i].ndim, t[i].shape, pipit__dtype_size(t[i].dtype), &ok);
        if (!ok || want != (uint64_t)t[i].nbytes) {
            char sbuf[128];
            pipit__shape_str(sbuf, sizeof sbuf, t[i].ndim, t[i].shape);
            return st_fail(PIPIT_STATUS_INVALID, path,
                           "tensor '%s': nbytes %zu does not match shape %s of %s", name,
                           t[i].nbytes, sbuf, dtype_st_name(t[i].dtype));
        }
        if (t[i].nbytes > 0 && !t[i].data)
            return st_fail(PIPIT_STATUS_INVALID, path, "tensor '%s': NULL data", name);
    }
    if (meta)
        for (int i = 0; meta[i]; i += 2) {
            if (!meta[i + 1])
                return st_fail(PIPIT_STATUS_INVALID, path, "metadata key '%s' has no value",
                               meta[i]);
            if (is_crc_key(meta[i]))
                return st_fail(PIPIT_STATUS_INVALID, path,
                               "metadata key '%s' is reserved (keys starting with \"" CRC_KEY "\" hold the checksums)",
                               meta[i]);
            for (int j = 0; j < i; j += 2) /* a file with a key twice would not be readable */
                if (strcmp(meta[j], meta[i]) == 0)
                    return st_fail(PIPIT_STATUS_INVALID, path, "metadata key '%s' given twice", meta[i]);
        }
    /* Duplicate names. */
    if (n > 1) {
        const char **names = pipit__malloc((size_t)n * sizeof *names);
        if (!names) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory writing '%s'", path);
        for (int i = 0; i < n; i++) names[i] = t[i].name;
        qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
        for (int i = 1; i < n; i++)
            if (strcmp(names[i - 1], names[i]) == 0) {
                pipit_status s =
                    st_fail(PIPIT_STATUS_INVALID, path, "duplicate tensor name '%s'", names[i]);
                pipit__free(names);
                return s;
            }
        pipit__free(names);
    }
    return PIPIT_STATUS_OK;
}

static void fsync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd); /* best effort: makes the rename durable */
    close(fd);
}

/* The metadata the file gets: the caller's entries, then each tensor's
 * checksum, then the header's. *owned holds the strings made here. */
typedef struct {
    const char **kv; /* key, value, ..., NULL */
    char *owned;
} st_out_meta;

static int cmp_kv_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const pipit__st_tensor *const *)a)->name, (*(const pipit__st_tensor *const *)b)->name);
}

static pipit_status checksum_meta(const char *path, const pipit__st_tensor *t, int n, const char *const *meta,
                                  st_out_meta *out) {
    int m = 0;
    while (meta && meta[2 * m]) m++;
    size_t names = 0;
    for (int i = 0; i < n; i++) names += sizeof CRC_PREFIX + strlen(t[i].name) + 9;
    out->kv = pipit__calloc((size_t)(2 * (m + n + 1) + 1), sizeof *out->kv);
    out->owned = pipit__malloc(names + 9);
    const char **pairs = pipit__calloc((size_t)(m + n) + 1, 2 * sizeof *pairs);
    const pipit__st_tensor **byname = pipit__calloc((size_t)n + 1, sizeof *byname);
    uint64_t *off = pipit__calloc((size_t)n + 1, sizeof *off);
    pipit_status st = PIPIT_STATUS_OK;
    if (!out->kv || !out->owned || !pairs || !byname || !off) {
        st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory writing '%s'", path);
        goto done;
    }
    int k = 0;
    for (int i = 0; i < m; i++) out->kv[k++] = meta[2 * i], out->kv[k++] = meta[2 * i + 1];
    char *w = out->owned;
    for (int i = 0; i < n; i++) { /* "crc32c:NAME" "xxxxxxxx", computed from the bytes to be written */
        out->kv[k++] = w;
        w += sprintf(w, CRC_PREFIX "%s", t[i].name) + 1;
        out->kv[k++] = w;
        w += sprintf(w, "%08x", pipit__crc32c(0, t[i].data, t[i].nbytes)) + 1;
        off[i + 1] = off[i] + t[i].nbytes;
        byname[i] = &t[i];
    }
    memcpy(pairs, out->kv, sizeof *pairs * (size_t)k);
    qsort(pairs, (size_t)k / 2, 2 * sizeof *pairs, cmp_kv_key);
    uint32_t c = 0;
    for (int i = 0; i < k; i++) c = crc_str(c, pairs[i]);
    qsort(byname, (size_t)n, sizeof *byname, cmp_tensor_name);
    for (int i = 0; i < n; i++) {
        size_t at = (size_t)(byname[i] - t);
        c = crc_tensor_header(c, byname[i], off[at], off[at + 1]);
    }
    out->kv[k++] = CRC_KEY;
    out->kv[k++] = w;
    sprintf(w, "%08x", c);
    out->kv[k] = NULL;
done:
    pipit__free(pairs);
    pipit__free(byname);
    pipit__free(off);
    return st;
}

pipit_status pipit__st_write(const char *path, const pipit__st_tensor *tensors, int n,
                             const char *const *meta) {
    if (!path) return pipit__err(PIPIT_STATUS_MISUSE, "pipit__st_write: NULL path");
    pipit_status st = check_write_args(path, tensors, n, meta);
    if (st != PIPIT_STATUS_OK) return st;
    st_out_meta om = {0};
    if ((st = checksum_meta(path, tensors, n, meta, &om)) != PIPIT_STATUS_OK) {
        pipit__free(om.kv);
        pipit__free(om.owned);
        return st;
    }
    meta = om.kv;

    /* Header. */
    strbuf h = {0};
    sb_puts(&h, "{");
    int first = 1;
    if (meta && meta[0]) {
        sb_puts(&h, "\"__metadata__\":{");
        for (int i = 0; meta[i]; i += 2) {
            if (i) sb_puts(&h, ",");
            sb_json_str(&h, meta[i]);
            sb_puts(&h, ":");
            sb_json_str(&h, meta[i + 1]);
        }
        sb_puts(&h, "}");
        first = 0;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!first) sb_puts(&h, ",");
        first = 0;
        sb_json_str(&h, tensors[i].name);
        sb_puts(&h, ":{\"dtype\":\"");
        sb_puts(&h, dtype_st_name(tensors[i].dtype));
        sb_puts(&h, "\",\"shape\":[");
        for (int k = 0; k < tensors[i].ndim; k++) {
            if (k) sb_puts(&h, ",");
            sb_putu(&h, (uint64_t)tensors[i].shape[k]);
        }
        sb_puts(&h, "],\"data_offsets\":[");
        sb_putu(&h, off);
        sb_puts(&h, ",");
        off += tensors[i].nbytes;
        sb_putu(&h, off);
        sb_puts(&h, "]}");
    }
    sb_puts(&h, "}");
    while (!h.oom && h.len % 8 != 0) sb_puts(&h, " ");
    pipit__free(om.kv);
    pipit__free(om.owned);
    if (h.oom) {
        pipit__free(h.p);
        return pipit__err(PIPIT_STATUS_NOMEM, "out of memory writing '%s'", path);
    }

    size_t tlen = strlen(path) + 32;
    char *tmp = pipit__malloc(tlen);
    if (!tmp) {
        pipit__free(h.p);
        return pipit__err(PIPIT_STATUS_NOMEM, "out of memory writing '%s'", path);
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());

    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        st = st_fail(PIPIT_STATUS_IO, path, "cannot create '%s': %s", tmp, strerror(errno));
        goto out;
    }
    unsigned char lenb[8];
    store_le64(lenb, (uint64_t)h.len);
    int err = fwrite(lenb, 1, 8, fp) != 8 || fwrite(h.p, 1, h.len, fp) != h.len;
    for (int i = 0; i < n && !err; i++)
        if (tensors[i].nbytes > 0 &&
            fwrite(tensors[i].data, 1, tensors[i].nbytes, fp) != tensors[i].nbytes)
            err = 1;
    if (!err && fflush(fp) != 0) err = 1;
    if (!err && fsync(fileno(fp)) != 0) err = 1;
    int saved = errno;
    if (fclose(fp) != 0 && !err) {
        err = 1;
        saved = errno;
    }
    if (err) {
        unlink(tmp);
        st = st_fail(PIPIT_STATUS_IO, path, "cannot write '%s': %s", tmp, strerror(saved));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        st = st_fail(PIPIT_STATUS_IO, path, "cannot rename '%s' into place: %s", tmp,
                     strerror(saved));
        goto out;
    }
    fsync_parent_dir(path);
out:
    pipit__free(tmp);
    pipit__free(h.p);
    return st;
}
