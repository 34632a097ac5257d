/*
 * memlimit.c — memory admission (memlimit.h): the budget from sysconf,
 * /proc/self/cgroup with cgroup v2's memory.max or v1's
 * memory.limit_in_bytes (the smallest on the path to the root), and
 * getrlimit against /proc/self/statm; the refusal that lists the need's
 * largest consumers. Linux files that are absent simply impose nothing.
 */
#include "util/memlimit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "util/common.h"

char *pipit__bytes_str(char *buf, size_t n, double bytes) {
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    double v = bytes;
    while (v >= 1024 && u < 6) v /= 1024, u++;
    if (u == 0) snprintf(buf, n, "%.0f bytes", v);
    else snprintf(buf, n, "%.1f %s", v, unit[u]);
    return buf;
}

/* A number of bytes in a one-line file ("max" or absent: no limit). */
static double read_limit(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return INFINITY;
    char line[64] = "";
    double v = INFINITY;
    if (fgets(line, sizeof line, f) && line[0] >= '0' && line[0] <= '9') {
        v = strtod(line, NULL);
        if (v >= 4.6e18) v = INFINITY; /* cgroup v1 writes "no limit" as ~2^63 */
    }
    fclose(f);
    return v;
}

/* The smallest limit in `file` from the cgroup `dir` up to the root of
 * the hierarchy mounted at `mount`; the root's own when the path is not
 * visible (a container's cgroup namespace). */
static double cgroup_walk(const char *mount, const char *dir, const char *file) {
    char path[768];
    double best = INFINITY;
    char d[512];
    snprintf(d, sizeof d, "%s", dir);
    for (;;) {
        snprintf(path, sizeof path, "%s%s/%s", mount, strcmp(d, "/") ? d : "", file);
        best = fmin(best, read_limit(path));
        char *slash = strrchr(d, '/');
        if (!slash || slash == d) break;
        *slash = 0;
    }
    snprintf(path, sizeof path, "%s/%s", mount, file);
    return fmin(best, read_limit(path));
}

static double cgroup_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return INFINITY;
    char line[1024];
    double best = INFINITY;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *a = *b = 0;
        const char *ctrl = a + 1, *dir = b + 1;
        if (strcmp(line, "0") == 0 && !*ctrl) /* cgroup v2 */
            best = fmin(best, cgroup_walk("/sys/fs/cgroup", dir, "memory.max"));
        else if (strstr(ctrl, "memory")) /* cgroup v1 */
            best = fmin(best, cgroup_walk("/sys/fs/cgroup/memory", dir, "memory.limit_in_bytes"));
    }
    fclose(f);
    return best;
}

/* Field k (0: size, 1: resident, 5: data) of /proc/self/statm, in bytes; 0 if unknown. */
static double statm_bytes(int k) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long v[7] = {0};
    int got = fscanf(f, "%lu %lu %lu %lu %lu %lu %lu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return got == 7 && page > 0 ? (double)v[k] * (double)page : 0;
}

static void take(pipit__mem_budget *b, double bytes, const char *fmt, double shown, double used) {
    if (!(bytes < b->bytes)) return;
    char s[32], u[32];
    b->bytes = fmax(bytes, 0);
    snprintf(b->why, sizeof b->why, fmt, pipit__bytes_str(s, sizeof s, shown), pipit__bytes_str(u, sizeof u, used));
}

void pipit__mem_budget_get(pipit__mem_budget *b, double already, double override) {
    b->bytes = INFINITY;
    snprintf(b->why, sizeof b->why, "no limit found");
    if (override > 0) {
        take(b, override, "the limit set by the caller (%s)%.0s", override, 0);
        return;
    }
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local = ls ? atoi(ls) : 1;
    if (local < 1) local = 1;
    /* RAM and the cgroup: this process's share, less what it holds (resident) besides the need's own */
    double held = fmax(statm_bytes(1) - already, 0);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) {
        double ram = (double)pages * (double)page;
        take(b, ram / local - held,
             local > 1 ? "this process's share of physical RAM (%s among the job's processes on this machine; %s "
                         "held by this process already)"
                       : "physical RAM (%s, of which this process holds %s already)",
             ram, held);
    }
    double cg = cgroup_limit();
    if (isfinite(cg))
        take(b, cg / local - held,
             local > 1 ? "this process's share of the cgroup memory limit (%s; %s held by this process already)"
                       : "the cgroup memory limit (%s, of which this process holds %s already)",
             cg, held);
    /* an rlimit counts what is mapped already; `already` of it is the need's own */
    const struct { int res; int statm; const char *name; } rl[] = {{RLIMIT_AS, 0, "RLIMIT_AS"},
                                                                  {RLIMIT_DATA, 5, "RLIMIT_DATA"}};
    for (int i = 0; i < 2; i++) {
        struct rlimit r;
        if (getrlimit(rl[i].res, &r) != 0 || r.rlim_cur == RLIM_INFINITY) continue;
        double used = fmax(statm_bytes(rl[i].statm) - already, 0), lim = (double)r.rlim_cur;
        char fmt[128];
        snprintf(fmt, sizeof fmt, "%s (%%s, of which %%s is in use already)", rl[i].name);
        take(b, lim - used, fmt, lim, used);
    }
}

static int by_bytes_desc(const void *a, const void *b) {
    double x = ((const pipit__mem_item *)a)->bytes, y = ((const pipit__mem_item *)b)->bytes;
    return (x < y) - (x > y);
}

pipit_status pipit__mem_admit(const char *who, const pipit__mem_item *items, int n, double already,
                              double override, const char *advice) {
    double need = 0;
    for (int i = 0; i < n; i++) need += items[i].bytes;
    pipit__mem_budget b;
    pipit__mem_budget_get(&b, already, override);
    if (need <= b.bytes) return PIPIT_STATUS_OK;
    pipit__mem_item sorted[16];
    int k = PIPIT_MIN(n, 16);
    memcpy(sorted, items, sizeof *items * (size_t)k);
    qsort(sorted, (size_t)k, sizeof *sorted, by_bytes_desc);
    char list[512] = "", s[32], a[32];
    for (int i = 0, shown = 0; i < k && shown < 4; i++) {
        if (!(sorted[i].bytes > 0) || (shown && sorted[i].bytes < need / 100)) continue; /* the ones that matter */
        size_t u = strlen(list);
        snprintf(list + u, sizeof list - u, "%s%s %s", shown++ ? ", " : "", sorted[i].what,
                 pipit__bytes_str(s, sizeof s, sorted[i].bytes));
    }
    return pipit__err(PIPIT_STATUS_NOMEM, "%s needs %s of memory but %s is available, the limit being %s; the largest: "
                      "%s%s%s",
                      who, pipit__bytes_str(s, sizeof s, need), pipit__bytes_str(a, sizeof a, b.bytes), b.why, list,
                      advice && *advice ? "; " : "", advice ? advice : "");
}

double pipit_mem_available(const char **which) {
    static _Thread_local pipit__mem_budget b;
    pipit__mem_budget_get(&b, 0, 0);
    if (which) *which = b.why;
    return b.bytes;
}
