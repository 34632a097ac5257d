/*
 * agree.c — ranks agree or stop (agree.h, pipit_agree): two all-gathers.
 * First a fixed-size head per process (format, version, build id, how far
 * it got and its message if it failed, the count and names of its fields),
 * then, when the heads allow it, every field as (hash of the value, the
 * name, the value's first characters). Each process reads the same records
 * and so reaches the same verdict and the same message.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/agree.h"
#include "util/common.h"

#define AGREE_MAGIC 0x7069706974616731ull /* "pipitag1": the record format */
enum { NAME_LEN = 48, TEXT_LEN = 80, MAX_FIELDS = 4096 };

typedef struct {
    uint64_t magic;
    int32_t status;       /* this process's status before the exchange */
    int32_t nfields;
    uint64_t names;       /* hash of every field name, in order */
    char version[32], build[96];
    char message[512];    /* a failed process's message */
} agree_head;

typedef struct {
    uint64_t hash;        /* of the whole value */
    char name[NAME_LEN];
    char text[TEXT_LEN];  /* its beginning, for messages */
} agree_field;

static uint64_t fnv(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull; /* a terminator: "ab","c" differs from "a","bc" */
}

static void copy(char *dst, size_t n, const char *src) { snprintf(dst, n, "%s", src ? src : ""); }

/* Appends to out[n] at *u, never past its end. */
static void app(char *out, size_t n, size_t *u, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void app(char *out, size_t n, size_t *u, const char *fmt, ...) {
    if (*u + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out + *u, n - *u, fmt, ap);
    va_end(ap);
    *u = k < 0 ? *u : PIPIT_MIN(*u + (size_t)k, n - 1);
}

/* "processes 0, 2 have 'X'; process 1 has 'Y'": the records of the procs
 * processes (stride `size` from `base`) grouped by `key`, each group shown
 * with the text at `text_off` of its first record. */
static void groups(char *out, size_t n, int procs, const void *base, size_t size, size_t text_off,
                   uint64_t (*key)(const void *)) {
    enum { MAX_GROUPS = 6, MAX_LISTED = 8 };
    const char *rec[MAX_GROUPS];
    int ngroups = 0;
    size_t u = 0;
    out[0] = 0;
    for (int a = 0; a < procs; a++) {
        const char *ra = (const char *)base + (size_t)a * size;
        int seen = 0;
        for (int g = 0; g < ngroups && !seen; g++) seen = key(rec[g]) == key(ra);
        if (seen) continue;
        if (ngroups == MAX_GROUPS) {
            app(out, n, &u, "; and more");
            break;
        }
        rec[ngroups++] = ra;
        int members = 0, listed = 0;
        for (int b = a; b < procs; b++) members += key((const char *)base + (size_t)b * size) == key(ra);
        app(out, n, &u, "%s%s ", ngroups > 1 ? "; " : "", members > 1 ? "processes" : "process");
        for (int b = a; b < procs && listed < MAX_LISTED; b++)
            if (key((const char *)base + (size_t)b * size) == key(ra)) app(out, n, &u, "%s%d", listed++ ? ", " : "", b);
        if (members > listed) app(out, n, &u, " and %d more", members - listed);
        app(out, n, &u, " %s '%s'", members > 1 ? "have" : "has", ra + text_off);
    }
}

static uint64_t key_field(const void *r) { return ((const agree_field *)r)->hash; }
static uint64_t key_version(const void *r) { return fnv(0xcbf29ce484222325ull, ((const agree_head *)r)->version); }
static uint64_t key_build(const void *r) { return fnv(0xcbf29ce484222325ull, ((const agree_head *)r)->build); }
static uint64_t key_names(const void *r) { return ((const agree_head *)r)->names ^ (uint64_t)((const agree_head *)r)->nfields; }

/* The verdict on the heads alone: a build, a failure or a field list that differs. */
static pipit_status judge_heads(const char *what, const agree_head *h, int procs) {
    char list[1400];
    const struct {
        const char *field;
        uint64_t (*key)(const void *);
        size_t off;
    } same[] = {{"the pipit version", key_version, offsetof(agree_head, version)},
                {"the build (pipit_build_id)", key_build, offsetof(agree_head, build)}};
    for (int k = 0; k < 2; k++)
        for (int a = 1; a < procs; a++)
            if (same[k].key(&h[a]) != same[k].key(&h[0])) {
                groups(list, sizeof list, procs, h, sizeof *h, same[k].off, same[k].key);
                return pipit__err(PIPIT_STATUS_INVALID,
                                  "%s: the %d processes of this job run different builds: %s differs: %s; every "
                                  "process must run the same pipit",
                                  what, procs, same[k].field, list);
            }
    for (int a = 0; a < procs; a++)
        if (h[a].status != PIPIT_STATUS_OK)
            return pipit__err((pipit_status)h[a].status, "%s: process %d of %d failed: %s", what, a, procs,
                              h[a].message);
    for (int a = 1; a < procs; a++)
        if (key_names(&h[a]) != key_names(&h[0]))
            return pipit__err(PIPIT_STATUS_INVALID,
                              "%s: the processes of this job check different lists of fields (%d fields on process "
                              "0, %d on process %d): they run different programs",
                              what, h[0].nfields, h[a].nfields, a);
    return PIPIT_STATUS_OK;
}

/* This process's head and fields from its status and kv. */
static pipit_status fill(pipit_status local, const char *const *kv, agree_head *head, agree_field **fields) {
    memset(head, 0, sizeof *head);
    head->magic = AGREE_MAGIC;
    copy(head->version, sizeof head->version, pipit_version());
    copy(head->build, sizeof head->build, pipit_build_id());
    int n = 0;
    while (kv && kv[2 * n] && n < MAX_FIELDS) n++;
    *fields = pipit__calloc((size_t)n + 1, sizeof **fields);
    if (!*fields && !local) local = pipit__err(PIPIT_STATUS_NOMEM, "out of memory");
    for (int i = 0; *fields && i < n && !local; i++)
        if (!kv[2 * i + 1]) local = pipit__err(PIPIT_STATUS_INVALID, "field '%s' has no value (NULL)", kv[2 * i]);
    head->status = (int32_t)local;
    if (local) { /* its message goes to the others; its fields do not matter */
        copy(head->message, sizeof head->message, pipit_errmsg());
        return local;
    }
    head->nfields = n;
    head->names = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        agree_field *f = &(*fields)[i];
        head->names = fnv(head->names, kv[2 * i]);
        f->hash = fnv(0xcbf29ce484222325ull, kv[2 * i + 1]);
        copy(f->name, sizeof f->name, kv[2 * i]);
        copy(f->text, sizeof f->text, kv[2 * i + 1]);
        if (strlen(kv[2 * i + 1]) >= TEXT_LEN) memcpy(f->text + TEXT_LEN - 4, "...", 4);
    }
    return PIPIT_STATUS_OK;
}

pipit_status pipit__agree(const char *what, pipit_status local, const char *const *kv) {
    int procs = pipit_process_count();
    if (procs <= 1) return local;
    agree_head head;
    agree_field *mine = NULL, *all = NULL;
    fill(local, kv, &head, &mine);
    agree_head *heads = pipit__calloc((size_t)procs, sizeof *heads);
    /* an allocation that fails here fails on this process alone: nothing to exchange with; stop */
    pipit_status s = heads ? pipit__proc_allgather(&head, sizeof head, heads)
                           : pipit__err(PIPIT_STATUS_NOMEM, "%s: out of memory for the agreement", what);
    if (!s) s = judge_heads(what, heads, procs);
    int n = s ? 0 : head.nfields;
    if (!s) {
        all = pipit__calloc((size_t)procs * (size_t)n + 1, sizeof *all);
        s = all ? pipit__proc_allgather(mine, sizeof *mine * (size_t)n, all)
                : pipit__err(PIPIT_STATUS_NOMEM, "%s: out of memory for the agreement", what);
    }
    for (int i = 0; !s && i < n; i++) {
        int differ = 0;
        for (int a = 1; a < procs; a++) differ |= all[(size_t)a * n + i].hash != all[i].hash;
        if (!differ) continue;
        char list[1400];
        agree_field *col = pipit__calloc((size_t)procs, sizeof *col);
        if (!col) {
            s = pipit__err(PIPIT_STATUS_NOMEM, "%s: out of memory for the agreement", what);
            break;
        }
        for (int a = 0; a < procs; a++) col[a] = all[(size_t)a * n + i];
        groups(list, sizeof list, procs, col, sizeof *col, offsetof(agree_field, text), key_field);
        pipit__free(col);
        s = pipit__err(PIPIT_STATUS_INVALID, "%s: the %d processes of this job disagree on %s: %s; every process must "
                       "get the same value", what, procs, all[i].name, list);
    }
    pipit__free(mine);
    pipit__free(all);
    pipit__free(heads);
    return s;
}

pipit_status pipit_agree(const char *what, const char *const *kv) {
    unsigned long gen0 = pipit__err_gen();
    /* a bad argument is this process's failure: it still takes part, so the others learn it */
    pipit_status local = what ? PIPIT_STATUS_OK : pipit__err(PIPIT_STATUS_MISUSE, "pipit_agree: what is NULL");
    for (int i = 0; !local && kv && kv[2 * i]; i++)
        if (!kv[2 * i + 1])
            local = pipit__err(PIPIT_STATUS_INVALID, "pipit_agree: field '%s' has no value (NULL)", kv[2 * i]);
    char who[160];
    snprintf(who, sizeof who, "pipit_agree (%s)", what ? what : "NULL");
    return pipit__err_fresh(pipit__agree(who, local, kv), gen0, __func__);
}
