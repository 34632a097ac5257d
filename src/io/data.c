/*
 * data.c — loads byte-level text files, uint16 GPT-2 token shards or
 * headerless uint16 token files (nanoGPT's train.bin) into memory (tokens
 * kept as uint8 or uint16, the files one after another in one buffer) and
 * cuts them into (input, target) sequences of T+1 tokens, in window order or
 * at seeded random offsets (a stateless hash of seed and sequence index, so
 * batches are reproducible whatever the batch size or call pattern). A
 * sequence never straddles two files: the windows (and random start
 * positions) of the files are numbered one file after the other, so one
 * file gives exactly the sequences it gave before multi-file streams.
 */
#include "io/data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/common.h"
#include "util/crc32c.h"
#include "util/fileio.h"

typedef struct {
    char *path;
    int64_t start; /* first token in the stream's buffer */
    int64_t n;     /* tokens of this file (part) */
    int64_t cw;    /* windows of the parts before this one */
    int64_t cs;    /* random start positions (n - T each) of the parts before */
} data_part;

struct pipit_data {
    int T;
    pipit__data_order order;
    uint64_t seed;
    int is_shard;       /* uint16 tokens (shard or u16), else bytes */
    int64_t n;          /* tokens, all parts */
    uint8_t *bytes;     /* text: the files */
    uint16_t *toks;     /* uint16: the tokens */
    int max_token;
    int nparts;
    data_part *parts;
    int64_t W, S;       /* windows; random start positions */
};

static uint32_t load_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void pipit__data_free(pipit__data *d) {
    if (!d) return;
    for (int i = 0; i < d->nparts; i++) pipit__free(d->parts[i].path);
    pipit__free(d->parts);
    pipit__free(d->bytes);
    pipit__free(d->toks);
    pipit__free(d);
}

const char *pipit__data_format_name(pipit_data_format f) {
    switch (f) {
    case PIPIT_DATA_AUTO: return "auto";
    case PIPIT_DATA_TEXT: return "text";
    case PIPIT_DATA_SHARD: return "shard";
    case PIPIT_DATA_U16: return "u16";
    }
    return "?";
}

/* One file's tokens, before they join the stream. */
typedef struct {
    int is_shard;
    int64_t n;
    uint8_t *bytes;
    uint16_t *toks;
    int max_token;
} file_load;

static int max_u16(const uint16_t *t, int64_t n) {
    int mx = 0;
    for (int64_t i = 0; i < n; i++)
        if (t[i] > mx) mx = t[i];
    return mx;
}

static int max_u8(const uint8_t *t, int64_t n) {
    int mx = 0;
    for (int64_t i = 0; i < n; i++)
        if (t[i] > mx) mx = t[i];
    return mx;
}

/* Reads count little-endian uint16 tokens at byte offset off. */
static pipit_status read_u16(const char *what, const char *path, int fd, uint64_t count, off_t off,
                             file_load *f) {
    f->is_shard = 1;
    f->n = (int64_t)count;
    f->toks = pipit__malloc(count ? (size_t)count * 2 : 1);
    if (!f->toks) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading %s '%s'", what, path);
    if (count && pipit__read_full(fd, f->toks, (size_t)count * 2, off) != 0)
        return pipit__err(PIPIT_STATUS_IO, "%s '%s': cannot read: %s", what, path, strerror(errno));
    for (uint64_t i = 0; i < count; i++) {
        const unsigned char *p = (const unsigned char *)&f->toks[i];
        f->toks[i] = (uint16_t)(p[0] | p[1] << 8); /* little-endian on disk */
    }
    f->max_token = max_u16(f->toks, f->n);
    return PIPIT_STATUS_OK;
}

static pipit_status load_shard(const char *path, int fd, uint64_t size, file_load *f) {
    const uint64_t hbytes = PIPIT_DATA_SHARD_HEADER_INTS * 4;
    if (size < hbytes)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "token shard '%s': truncated header: expected at least %llu bytes, "
                          "file has %llu%s",
                          path, (unsigned long long)hbytes, (unsigned long long)size,
                          " (a headerless uint16 file such as nanoGPT's train.bin needs format u16, "
                          "--data-format u16)");
    unsigned char hdr[PIPIT_DATA_SHARD_HEADER_INTS * 4];
    if (pipit__read_full(fd, hdr, sizeof hdr, 0) != 0)
        return pipit__err(PIPIT_STATUS_IO, "token shard '%s': cannot read: %s", path,
                          strerror(errno));
    uint32_t magic = load_le32(hdr), version = load_le32(hdr + 4), count = load_le32(hdr + 8);
    if (magic != PIPIT_DATA_SHARD_MAGIC)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "token shard '%s': bad magic %u (expected %d): not a uint16 token shard "
                          "(\".bin\" files must be token shards; a headerless uint16 file such as "
                          "nanoGPT's train.bin needs format u16, --data-format u16)",
                          path, magic, PIPIT_DATA_SHARD_MAGIC);
    if (version != 1)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "token shard '%s': unsupported version %u (only version 1, uint16 "
                          "GPT-2 tokens, is supported)",
                          path, version);
    if ((int32_t)count < 0)
        return pipit__err(PIPIT_STATUS_FORMAT, "token shard '%s': negative token count %d", path,
                          (int32_t)count);
    uint64_t want = hbytes + 2 * (uint64_t)count;
    if (size != want)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "token shard '%s': %s: header says %u tokens, so expected %llu bytes, "
                          "file has %llu",
                          path, size < want ? "truncated" : "trailing bytes", count,
                          (unsigned long long)want, (unsigned long long)size);
    return read_u16("token shard", path, fd, count, (off_t)hbytes, f);
}

static pipit_status load_file(const char *path, pipit_data_format fmt, int T, file_load *f) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pipit__err(PIPIT_STATUS_IO, "data file '%s': cannot open: %s", path,
                          strerror(errno));
    pipit_status st = PIPIT_STATUS_OK;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = pipit__err(PIPIT_STATUS_IO, "data file '%s': not a readable regular file", path);
        goto done;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size > (uint64_t)SIZE_MAX / 2) {
        st = pipit__err(PIPIT_STATUS_NOMEM, "data file '%s': too large", path);
        goto done;
    }
    if (fmt == PIPIT_DATA_AUTO) {
        int magic = 0;
        if (size >= 4) {
            unsigned char m4[4] = {0};
            if (pipit__read_full(fd, m4, 4, 0) != 0) {
                st = pipit__err(PIPIT_STATUS_IO, "data file '%s': cannot read: %s", path,
                                strerror(errno));
                goto done;
            }
            magic = load_le32(m4) == PIPIT_DATA_SHARD_MAGIC;
        }
        fmt = magic || ends_with(path, ".bin") ? PIPIT_DATA_SHARD : PIPIT_DATA_TEXT;
    }
    if (fmt == PIPIT_DATA_SHARD) {
        st = load_shard(path, fd, size, f);
    } else if (fmt == PIPIT_DATA_U16) {
        if (size % 2)
            st = pipit__err(PIPIT_STATUS_FORMAT,
                            "u16 token file '%s': %llu bytes is odd: not a headerless uint16 "
                            "token file",
                            path, (unsigned long long)size);
        else
            st = read_u16("u16 token file", path, fd, size / 2, 0, f);
    } else {
        f->n = (int64_t)size;
        f->bytes = pipit__malloc(size ? (size_t)size : 1);
        if (!f->bytes) {
            st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading '%s' (%llu bytes)", path,
                            (unsigned long long)size);
            goto done;
        }
        if (size && pipit__read_full(fd, f->bytes, (size_t)size, 0) != 0) {
            st = pipit__err(PIPIT_STATUS_IO, "data file '%s': cannot read: %s", path,
                            strerror(errno));
            goto done;
        }
        f->max_token = max_u8(f->bytes, f->n);
    }
    if (st == PIPIT_STATUS_OK && f->n < (int64_t)T + 1)
        st = pipit__err(PIPIT_STATUS_FORMAT,
                        "data file '%s' has %lld tokens (%s), too short for one sequence of "
                        "T+1 = %lld tokens (T = %d)",
                        path, (long long)f->n, f->is_shard ? "uint16 tokens" : "bytes",
                        (long long)T + 1, T);
done:
    close(fd);
    if (st != PIPIT_STATUS_OK) {
        pipit__free(f->bytes);
        pipit__free(f->toks);
        f->bytes = NULL;
        f->toks = NULL;
    }
    return st;
}

/* Cumulative windows and start positions of the parts, and max_token. */
static void index_parts(pipit__data *d) {
    int64_t cw = 0, cs = 0, n = 0;
    int mx = 0;
    for (int i = 0; i < d->nparts; i++) {
        data_part *p = &d->parts[i];
        p->cw = cw;
        p->cs = cs;
        cw += (p->n - 1) / d->T;
        cs += p->n - d->T;
        n += p->n;
        int m = d->is_shard ? max_u16(d->toks + p->start, p->n) : max_u8(d->bytes + p->start, p->n);
        if (m > mx) mx = m;
    }
    d->W = cw;
    d->S = cs;
    d->n = n;
    d->max_token = mx;
}

static pipit_status check_args(const char *what, int T, pipit__data_order order) {
    if (T < 1)
        return pipit__err(PIPIT_STATUS_INVALID, "data '%s': sequence length T = %d must be >= 1",
                          what, T);
    if (order != PIPIT_DATA_RANDOM && order != PIPIT_DATA_SEQUENTIAL)
        return pipit__err(PIPIT_STATUS_INVALID, "data '%s': bad order %d", what, (int)order);
    return PIPIT_STATUS_OK;
}

pipit_status pipit__data_open_files(const char *const *paths, int npaths, pipit_data_format fmt,
                                    int T, pipit__data_order order, uint64_t seed,
                                    pipit__data **out) {
    if (!out || !paths)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit__data_open_files: NULL %s",
                          paths ? "out" : "paths");
    *out = NULL;
    if (npaths < 1)
        return pipit__err(PIPIT_STATUS_INVALID, "data: %d files given (need at least one)", npaths);
    for (int i = 0; i < npaths; i++)
        if (!paths[i]) return pipit__err(PIPIT_STATUS_MISUSE, "pipit__data_open_files: paths[%d] is NULL", i);
    pipit_status st = check_args(paths[0], T, order);
    if (st) return st;
    if (fmt < PIPIT_DATA_AUTO || fmt > PIPIT_DATA_U16)
        return pipit__err(PIPIT_STATUS_INVALID, "data '%s': bad format %d", paths[0], (int)fmt);
    pipit__data *d = pipit__calloc(1, sizeof *d);
    file_load *fl = pipit__calloc((size_t)npaths, sizeof *fl);
    if (d) d->parts = pipit__calloc((size_t)npaths, sizeof *d->parts);
    if (!d || !fl || !d->parts) {
        st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory opening '%s'", paths[0]);
        goto fail;
    }
    d->T = T;
    d->order = order;
    d->seed = seed;
    int64_t total = 0;
    for (int i = 0; i < npaths; i++) {
        if ((st = load_file(paths[i], fmt, T, &fl[i])) != PIPIT_STATUS_OK) goto fail;
        if (fl[i].is_shard != fl[0].is_shard) {
            st = pipit__err(PIPIT_STATUS_FORMAT,
                            "data files '%s' (%s) and '%s' (%s) differ in kind: one stream takes "
                            "text files or uint16 token files, not both",
                            paths[0], fl[0].is_shard ? "uint16 tokens" : "text", paths[i],
                            fl[i].is_shard ? "uint16 tokens" : "text");
            goto fail;
        }
        d->parts[i].path = pipit__strdup(paths[i]);
        if (!d->parts[i].path) {
            st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory opening '%s'", paths[i]);
            goto fail;
        }
        d->nparts = i + 1;
        d->parts[i].start = total;
        d->parts[i].n = fl[i].n;
        total += fl[i].n;
    }
    d->is_shard = fl[0].is_shard;
    if (npaths == 1) { /* one file: its buffer is the stream's */
        d->bytes = fl[0].bytes;
        d->toks = fl[0].toks;
        fl[0].bytes = NULL;
        fl[0].toks = NULL;
    } else {
        size_t es = d->is_shard ? 2 : 1;
        if ((uint64_t)total > SIZE_MAX / es) {
            st = pipit__err(PIPIT_STATUS_NOMEM, "data: %d files are too large together", npaths);
            goto fail;
        }
        void *buf = pipit__malloc((size_t)total * es);
        if (!buf) {
            st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory joining %d data files", npaths);
            goto fail;
        }
        if (d->is_shard) d->toks = buf;
        else d->bytes = buf;
        for (int i = 0; i < npaths; i++)
            memcpy((char *)buf + (size_t)d->parts[i].start * es,
                   d->is_shard ? (void *)fl[i].toks : (void *)fl[i].bytes, (size_t)fl[i].n * es);
    }
    index_parts(d);
    for (int i = 0; i < npaths; i++) {
        pipit__free(fl[i].bytes);
        pipit__free(fl[i].toks);
    }
    pipit__free(fl);
    *out = d;
    return PIPIT_STATUS_OK;
fail:
    if (fl)
        for (int i = 0; i < npaths; i++) {
            pipit__free(fl[i].bytes);
            pipit__free(fl[i].toks);
        }
    pipit__free(fl);
    pipit__data_free(d);
    return st;
}

pipit_status pipit__data_open(const char *path, int T, pipit__data_order order, uint64_t seed,
                              pipit__data **out) {
    if (!out || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit__data_open: NULL %s", path ? "out" : "path");
    return pipit__data_open_files(&path, 1, PIPIT_DATA_AUTO, T, order, seed, out);
}

/* ---- lists and globs */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static pipit_status push_path(char ***v, int *n, int *cap, const char *s) {
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        char **nv = pipit__realloc(*v, sizeof **v * (size_t)nc);
        if (!nv) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory listing data files");
        *v = nv;
        *cap = nc;
    }
    if (!((*v)[*n] = pipit__strdup(s)))
        return pipit__err(PIPIT_STATUS_NOMEM, "out of memory listing data files");
    (*n)++;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__data_expand(const char *spec, char ***paths_out, int *n_out) {
    *paths_out = NULL;
    *n_out = 0;
    char **v = NULL;
    int n = 0, cap = 0;
    pipit_status st = PIPIT_STATUS_OK;
    struct stat sb;
    if (!*spec) return pipit__err(PIPIT_STATUS_INVALID, "data: empty file list");
    if (stat(spec, &sb) == 0) { /* an existing file is itself, commas and '*' included */
        if ((st = push_path(&v, &n, &cap, spec))) goto fail;
        *paths_out = v;
        *n_out = n;
        return PIPIT_STATUS_OK;
    }
    char *copy = pipit__strdup(spec);
    if (!copy) return pipit__err(PIPIT_STATUS_NOMEM, "out of memory listing data files");
    for (char *item = copy, *next; item; item = next) {
        char *comma = strchr(item, ',');
        next = comma ? comma + 1 : NULL;
        if (comma) *comma = 0;
        if (!*item) {
            st = pipit__err(PIPIT_STATUS_INVALID, "data '%s': empty name in the comma-separated list",
                            spec);
            break;
        }
        if (!strpbrk(item, "*?[")) {
            if ((st = push_path(&v, &n, &cap, item))) break;
            continue;
        }
        glob_t g;
        memset(&g, 0, sizeof g);
        int r = glob(item, 0, NULL, &g);
        if (r == GLOB_NOMATCH) {
            st = pipit__err(PIPIT_STATUS_IO, "no file matches the pattern '%s'", item);
        } else if (r != 0) {
            st = pipit__err(PIPIT_STATUS_IO, "cannot expand the pattern '%s'%s", item,
                            r == GLOB_NOSPACE ? ": out of memory" : ": read error");
        } else {
            for (size_t k = 0; k < g.gl_pathc && !st; k++) st = push_path(&v, &n, &cap, g.gl_pathv[k]);
        }
        globfree(&g);
        if (st) break;
    }
    pipit__free(copy);
    if (st) goto fail;
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    for (int i = 1; i < n; i++)
        if (strcmp(v[i - 1], v[i]) == 0) {
            st = pipit__err(PIPIT_STATUS_INVALID, "data '%s': file '%s' is listed twice", spec, v[i]);
            goto fail;
        }
    *paths_out = v;
    *n_out = n;
    return PIPIT_STATUS_OK;
fail:
    for (int i = 0; i < n; i++) pipit__free(v[i]);
    pipit__free(v);
    return st;
}

pipit_status pipit__data_open_spec(const char *spec, pipit_data_format fmt, int T,
                                   pipit__data_order order, uint64_t seed, pipit__data **out) {
    if (!out || !spec)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit__data_open_spec: NULL %s", spec ? "out" : "spec");
    *out = NULL;
    char **v = NULL;
    int n = 0;
    pipit_status st = pipit__data_expand(spec, &v, &n);
    if (st) return st;
    st = pipit__data_open_files((const char *const *)v, n, fmt, T, order, seed, out);
    for (int i = 0; i < n; i++) pipit__free(v[i]);
    pipit__free(v);
    return st;
}

/* ---- split */

pipit_status pipit__data_split(pipit__data *d, int64_t val_windows, pipit__data **val) {
    *val = NULL;
    if (val_windows < 1 || val_windows >= d->W)
        return pipit__err(PIPIT_STATUS_INVALID,
                          "data '%s': cannot split %lld validation windows off %lld (need 1 .. W-1: "
                          "both parts at least one window)",
                          d->parts[0].path, (long long)val_windows, (long long)d->W);
    const int64_t T = d->T, s = d->W - val_windows;
    const size_t es = d->is_shard ? 2 : 1;
    pipit__data *v = pipit__calloc(1, sizeof *v);
    if (v) v->parts = pipit__calloc((size_t)d->nparts, sizeof *v->parts);
    pipit_status st = PIPIT_STATUS_OK;
    if (!v || !v->parts) goto nomem;
    v->T = d->T;
    v->order = PIPIT_DATA_SEQUENTIAL;
    v->is_shard = d->is_shard;
    int64_t total = 0;
    for (int pass = 0; pass < 2; pass++) { /* 0: count, 1: copy */
        if (pass == 1) {
            void *buf = pipit__malloc((size_t)total * es);
            if (!buf) goto nomem;
            if (v->is_shard) v->toks = buf;
            else v->bytes = buf;
        }
        int k = 0;
        int64_t at = 0;
        for (int i = 0; i < d->nparts; i++) {
            const data_part *p = &d->parts[i];
            int64_t Wi = (p->n - 1) / T, lo = (s > p->cw ? s - p->cw : 0);
            if (lo >= Wi) continue;
            int64_t cnt = (Wi - lo) * T + 1;
            if (pass == 0) {
                total += cnt;
                continue;
            }
            data_part *q = &v->parts[k++];
            if (!(q->path = pipit__strdup(p->path))) goto nomem;
            v->nparts = k;
            q->start = at;
            q->n = cnt;
            memcpy((char *)(v->is_shard ? (void *)v->toks : (void *)v->bytes) + (size_t)at * es,
                   (const char *)(d->is_shard ? (const void *)d->toks : (const void *)d->bytes) +
                       (size_t)(p->start + lo * T) * es,
                   (size_t)cnt * es);
            at += cnt;
        }
    }
    /* the head: parts wholly before s stay, the one holding s ends at its window s */
    int keep = 0;
    for (int i = 0; i < d->nparts; i++) {
        data_part *p = &d->parts[i];
        if (p->cw >= s) {
            pipit__free(p->path);
            p->path = NULL;
            continue;
        }
        int64_t Wi = (p->n - 1) / T;
        if (p->cw + Wi > s) p->n = (s - p->cw) * T + 1;
        d->parts[keep++] = *p;
    }
    d->nparts = keep;
    index_parts(d);
    index_parts(v);
    *val = v;
    return PIPIT_STATUS_OK;
nomem:
    st = pipit__err(PIPIT_STATUS_NOMEM, "out of memory splitting data '%s'", d->parts[0].path);
    pipit__data_free(v);
    return st;
}

/* ---- getters and batches */

int64_t pipit__data_windows(const pipit__data *d) { return d ? d->W : 0; }
int64_t pipit__data_tokens(const pipit__data *d) { return d ? d->n : 0; }
int pipit__data_vocab_hint(const pipit__data *d) { return d && d->is_shard ? 50257 : 256; }
int pipit__data_max_token(const pipit__data *d) { return d ? d->max_token : 0; }
int pipit__data_files(const pipit__data *d) { return d ? d->nparts : 0; }
const char *pipit__data_file(const pipit__data *d, int i) {
    return d && i >= 0 && i < d->nparts ? d->parts[i].path : NULL;
}

/* The last part whose cumulative count (cw or cs) is <= x. */
static const data_part *find_part(const pipit__data *d, int64_t x, int by_windows) {
    int lo = 0, hi = d->nparts - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((by_windows ? d->parts[mid].cw : d->parts[mid].cs) <= x) lo = mid;
        else hi = mid - 1;
    }
    return &d->parts[lo];
}

int64_t pipit__data_offset(const pipit__data *d, int64_t k) {
    if (!d) return 0;
    if (d->order == PIPIT_DATA_SEQUENTIAL) {
        int64_t w = k % d->W;
        if (w < 0) w += d->W;
        const data_part *p = find_part(d, w, 1);
        return p->start + (w - p->cw) * d->T;
    }
    uint64_t h = splitmix64(d->seed ^ splitmix64((uint64_t)k));
    int64_t r = (int64_t)(h % (uint64_t)d->S); /* S >= 1: every part has n - T >= 1 */
    const data_part *p = find_part(d, r, 0);
    return p->start + (r - p->cs);
}

void pipit__data_batch(const pipit__data *d, int64_t first, int B, int32_t *inputs,
                       int32_t *targets) {
    if (!d || B <= 0) return;
    const int T = d->T;
    for (int b = 0; b < B; b++) {
        int64_t o = pipit__data_offset(d, (int64_t)((uint64_t)first + (uint64_t)b)); /* wraps, never UB */
        int32_t *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        if (d->is_shard) {
            const uint16_t *s = d->toks + o;
            for (int t = 0; t < T; t++) {
                in[t] = s[t];
                tg[t] = s[t + 1];
            }
        } else {
            const uint8_t *s = d->bytes + o;
            for (int t = 0; t < T; t++) {
                in[t] = s[t];
                tg[t] = s[t + 1];
            }
        }
    }
}

/* ---- public API (pipit_io.h) ---- */

pipit_status pipit_data_open(const char *path, int T, pipit_data_order order, uint64_t seed, pipit_data **out) {
    if (!out || !path)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_data_open: %s is NULL", path ? "out" : "path");
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(pipit__data_open(path, T, order, seed, out), gen0, __func__);
}

pipit_status pipit_data_open_files(const char *const *paths, int n, pipit_data_format format, int T,
                                   pipit_data_order order, uint64_t seed, pipit_data **out) {
    if (!out || !paths)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_data_open_files: %s is NULL", paths ? "out" : "paths");
    *out = NULL;
    for (int i = 0; i < n; i++)
        if (!paths[i]) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_data_open_files: paths[%d] is NULL", i);
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(pipit__data_open_files(paths, n, format, T, order, seed, out), gen0, __func__);
}

pipit_status pipit_data_open_spec(const char *spec, pipit_data_format format, int T, pipit_data_order order,
                                  uint64_t seed, pipit_data **out) {
    if (!out || !spec)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_data_open_spec: %s is NULL", spec ? "out" : "spec");
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(pipit__data_open_spec(spec, format, T, order, seed, out), gen0, __func__);
}

pipit_status pipit_data_split(pipit_data *d, int64_t val_windows, pipit_data **val) {
    if (!d || !val)
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_data_split: %s is NULL", d ? "val" : "data");
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(pipit__data_split(d, val_windows, val), gen0, __func__);
}

static int null_data(const pipit_data *d, const char *fn) {
    if (d) return 0;
    pipit__err(PIPIT_STATUS_MISUSE, "%s: data is NULL", fn);
    return 1;
}

void pipit_data_free(pipit_data *d) { pipit__data_free(d); }
int64_t pipit_data_tokens(const pipit_data *d) { return null_data(d, __func__) ? 0 : pipit__data_tokens(d); }
int64_t pipit_data_windows(const pipit_data *d) { return null_data(d, __func__) ? 0 : pipit__data_windows(d); }
int pipit_data_max_token(const pipit_data *d) { return null_data(d, __func__) ? 0 : pipit__data_max_token(d); }
int pipit_data_vocab_hint(const pipit_data *d) { return null_data(d, __func__) ? 0 : pipit__data_vocab_hint(d); }
int pipit_data_files(const pipit_data *d) { return null_data(d, __func__) ? 0 : pipit__data_files(d); }

uint32_t pipit_data_checksum(const pipit_data *d) {
    if (null_data(d, __func__)) return 0;
    size_t es = d->is_shard ? 2 : 1;
    const char *buf = d->is_shard ? (const char *)d->toks : (const char *)d->bytes;
    uint32_t c = 0;
    for (int i = 0; i < d->nparts; i++)
        c = pipit__crc32c(c, buf + (size_t)d->parts[i].start * es, (size_t)d->parts[i].n * es);
    return c;
}
const char *pipit_data_file(const pipit_data *d, int i) {
    if (null_data(d, __func__)) return NULL;
    const char *s = pipit__data_file(d, i);
    if (!s) pipit__err(PIPIT_STATUS_INVALID, "pipit_data_file: index %d outside 0 .. %d", i, d->nparts - 1);
    return s;
}
int64_t pipit_data_offset(const pipit_data *d, int64_t k) {
    return null_data(d, __func__) ? 0 : pipit__data_offset(d, k);
}

pipit_status pipit_data_batch(const pipit_data *d, int64_t first, int B, int32_t *inputs, int32_t *targets) {
    if (!d || ((!inputs || !targets) && B > 0))
        return pipit__err(PIPIT_STATUS_MISUSE, "pipit_data_batch: %s is NULL",
                          !d ? "data" : !inputs ? "inputs" : "targets");
    if (B < 0) return pipit__err(PIPIT_STATUS_INVALID, "pipit_data_batch: batch size B = %d is negative", B);
    if (first > INT64_MAX - B)
        return pipit__err(PIPIT_STATUS_INVALID, "pipit_data_batch: sequence index %lld + B = %d exceeds 2^63-1",
                          (long long)first, B);
    pipit__data_batch(d, first, B, inputs, targets);
    return PIPIT_STATUS_OK;
}
