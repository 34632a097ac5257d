/*
 * schedule_io.c — the plain-text schedule format (parse, write, load) and the
 * grid printer that draws a simulated schedule like the tables of the GPipe
 * and 1F1B papers. The writer's output parses back to an equal schedule, so
 * built-in schedules can be exported, edited by hand and loaded again.
 */
#include "schedule/schedule.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>

/* ----------------------------------------------------------------- parse */

/* Growing task list of one rank line. */
typedef struct {
    pipit_task *t;
    int n, cap;
} task_vec;

typedef struct {
    const char *origin;
    int line;
    int *stage_rank, S;
    task_vec *ranks;
    int P, cap_ranks;
    int max_mb;
} parser;

static void parser_free(parser *p) {
    for (int r = 0; r < p->P; r++) pipit__free(p->ranks[r].t);
    pipit__free(p->ranks);
    pipit__free(p->stage_rank);
}

static pipit_status oom(void) {
    return pipit__err(PIPIT_STATUS_NOMEM, "out of memory reading a schedule");
}

/* Parses a decimal integer in [0, max] from *s, advancing it; -1 if none. */
static long parse_uint(const char **s, long max) {
    if (!isdigit((unsigned char)**s)) return -1;
    long v = 0;
    for (; isdigit((unsigned char)**s); (*s)++) {
        v = v * 10 + (**s - '0');
        if (v > max) v = max + 1; /* saturate: caller reports "too large" */
    }
    return v;
}

/* Next blank-separated token of *cur (NUL-terminated in place), or NULL. */
static char *next_token(char **cur) {
    char *s = *cur;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) return NULL;
    char *tok = s;
    while (*s && *s != ' ' && *s != '\t') s++;
    if (*s) *s++ = 0;
    *cur = s;
    return tok;
}

/* One token [F|B|W|BW]<stage>.<mb>; returns 0 and fills *t if well formed. */
static int parse_token(const char *tok, pipit_task *t, long *stage, long *mb) {
    const char *s = tok;
    int kind;
    if (s[0] == 'B' && s[1] == 'W') kind = PIPIT_TASK_BW, s += 2;
    else if (*s == 'F') kind = PIPIT_TASK_F, s++;
    else if (*s == 'B') kind = PIPIT_TASK_B, s++;
    else if (*s == 'W') kind = PIPIT_TASK_W, s++;
    else return -1;
    *stage = parse_uint(&s, INT_MAX);
    if (*stage < 0 || *s++ != '.') return -1;
    *mb = parse_uint(&s, INT_MAX);
    if (*mb < 0 || *s) return -1;
    t->kind = (uint8_t)kind;
    return 0;
}

static pipit_status parse_header(parser *p, char *rest) {
    int cap = 0;
    for (char *tok; (tok = next_token(&rest));) {
        const char *s = tok;
        long v = parse_uint(&s, INT_MAX);
        if (v < 0 || *s)
            return pipit__err(PIPIT_STATUS_FORMAT, "%s:%d: bad rank '%s' in stages: header",
                              p->origin, p->line, tok);
        if (v > PIPIT__SCHED_MAX_STAGES)
            return pipit__err(PIPIT_STATUS_FORMAT, "%s:%d: rank %s in stages: header is too large",
                              p->origin, p->line, tok);
        if (p->S >= PIPIT__SCHED_MAX_STAGES)
            return pipit__err(PIPIT_STATUS_FORMAT, "%s:%d: more than %d stages", p->origin,
                              p->line, PIPIT__SCHED_MAX_STAGES);
        if (p->S == cap) {
            cap = cap ? 2 * cap : 16;
            int *n = pipit__realloc(p->stage_rank, (size_t)cap * sizeof *n);
            if (!n) return oom();
            p->stage_rank = n;
        }
        p->stage_rank[p->S++] = (int)v;
    }
    if (p->S == 0)
        return pipit__err(PIPIT_STATUS_FORMAT, "%s:%d: stages: header lists no stages", p->origin,
                          p->line);
    return PIPIT_STATUS_OK;
}

static pipit_status push_task(task_vec *v, pipit_task t) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 64;
        pipit_task *n = pipit__realloc(v->t, (size_t)cap * sizeof *n);
        if (!n) return oom();
        v->t = n;
        v->cap = cap;
    }
    v->t[v->n++] = t;
    return PIPIT_STATUS_OK;
}

static pipit_status add_token(parser *p, task_vec *v, const char *tok) {
    pipit_task t;
    long stage, mb;
    if (parse_token(tok, &t, &stage, &mb))
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "%s:%d: bad token '%s' (expected F<s>.<m>, B<s>.<m>, W<s>.<m> or "
                          "BW<s>.<m>)",
                          p->origin, p->line, tok);
    if (stage >= p->S)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "%s:%d: token '%s' names stage %ld, but the stages: header lists %d "
                          "stages (0..%d)",
                          p->origin, p->line, tok, stage, p->S, p->S - 1);
    if (mb >= PIPIT__SCHED_MAX_MB)
        return pipit__err(PIPIT_STATUS_FORMAT, "%s:%d: token '%s': microbatch %ld is too large",
                          p->origin, p->line, tok, mb);
    t.stage = (int16_t)stage;
    t.mb = (int32_t)mb;
    if ((long)p->S * (mb + 1) > PIPIT__SCHED_MAX_SLOTS)
        return pipit__err(PIPIT_STATUS_FORMAT, "%s:%d: token '%s': schedule too large",
                          p->origin, p->line, tok);
    p->max_mb = PIPIT_MAX(p->max_mb, (int)mb);
    return push_task(v, t);
}

static pipit_status parse_rank_line(parser *p, char *text) {
    if (p->P == p->cap_ranks) {
        int cap = p->cap_ranks ? 2 * p->cap_ranks : 8;
        task_vec *n = pipit__realloc(p->ranks, (size_t)cap * sizeof *n);
        if (!n) return oom();
        p->ranks = n;
        p->cap_ranks = cap;
    }
    task_vec *v = &p->ranks[p->P++];
    memset(v, 0, sizeof *v);
    for (char *tok; (tok = next_token(&text));) {
        pipit_status st = add_token(p, v, tok);
        if (st) return st;
    }
    return PIPIT_STATUS_OK;
}

/* Strips the comment and surrounding blanks of one line in place. */
static char *clean_line(char *line) {
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    while (isspace((unsigned char)*line)) line++;
    size_t n = strlen(line);
    while (n && isspace((unsigned char)line[n - 1])) line[--n] = 0;
    return line;
}

static pipit_status parse_line(parser *p, char *line, int *header_line) {
    line = clean_line(line);
    if (!*line) return PIPIT_STATUS_OK;
    if (!p->stage_rank) {
        if (strncmp(line, "stages:", 7) != 0)
            return pipit__err(PIPIT_STATUS_FORMAT,
                              "%s:%d: expected the 'stages:' header first, got '%.40s'",
                              p->origin, p->line, line);
        *header_line = p->line;
        return parse_header(p, line + 7);
    }
    if (strncmp(line, "stages:", 7) == 0)
        return pipit__err(PIPIT_STATUS_FORMAT, "%s:%d: second 'stages:' header", p->origin,
                          p->line);
    return parse_rank_line(p, line);
}

/* Checks the parsed pieces against each other and moves them into *out. */
static pipit_status parser_finish(parser *p, int header_line, pipit_schedule **out) {
    int max_rank = 0;
    if (!p->stage_rank)
        return pipit__err(PIPIT_STATUS_FORMAT, "%s: no 'stages:' header", p->origin);
    for (int s = 0; s < p->S; s++) max_rank = PIPIT_MAX(max_rank, p->stage_rank[s]);
    if (p->P != max_rank + 1)
        return pipit__err(PIPIT_STATUS_FORMAT,
                          "%s:%d: the stages: header uses ranks 0..%d, so %d rank lines must "
                          "follow, found %d",
                          p->origin, header_line, max_rank, max_rank + 1, p->P);
    if (p->max_mb < 0) return pipit__err(PIPIT_STATUS_FORMAT, "%s: no tasks", p->origin);
    pipit_schedule *s = pipit__schedule_alloc(p->P, p->S, p->max_mb + 1);
    if (!s) return oom();
    memcpy(s->stage_rank, p->stage_rank, (size_t)p->S * sizeof(int));
    for (int r = 0; r < p->P; r++) {
        s->tasks[r] = p->ranks[r].t; /* ownership moves to the schedule */
        s->ntasks[r] = p->ranks[r].n;
        p->ranks[r].t = NULL;
    }
    pipit__schedule_infer_meta(s);
    *out = s;
    return PIPIT_STATUS_OK;
}

pipit_status pipit__schedule_parse(const char *text, const char *origin, pipit_schedule **out) {
    if (!out) return pipit__err(PIPIT_STATUS_MISUSE, "schedule parse: out is NULL");
    *out = NULL;
    if (!text) return pipit__err(PIPIT_STATUS_MISUSE, "schedule parse: text is NULL");
    parser p = {origin ? origin : "<schedule>", 0, NULL, 0, NULL, 0, 0, -1};
    char *copy = pipit__strdup(text);
    if (!copy) return oom();
    pipit_status st = PIPIT_STATUS_OK;
    int header_line = 0;
    for (char *line = copy, *next; line && !st; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        p.line++;
        char *cr = strchr(line, '\r');
        if (cr) *cr = 0;
        st = parse_line(&p, line, &header_line);
    }
    if (!st) st = parser_finish(&p, header_line, out);
    parser_free(&p);
    pipit__free(copy);
    return st;
}

static pipit_status schedule_load_impl(const char *path, pipit_schedule **out) {
    if (!out || !path) return pipit__err(PIPIT_STATUS_MISUSE, "pipit_schedule_load: %s is NULL", out ? "path" : "out");
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return pipit__err(PIPIT_STATUS_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 4096, n = 0, got;
    char *buf = pipit__malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *b = pipit__realloc(buf, cap * 2);
            if (!b) pipit__free(buf);
            buf = b;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return oom();
    if (err) {
        pipit__free(buf);
        return pipit__err(PIPIT_STATUS_IO, "error reading '%s'", path);
    }
    buf[n] = 0;
    if (memchr(buf, 0, n)) {
        pipit__free(buf);
        return pipit__err(PIPIT_STATUS_FORMAT, "%s: binary data (NUL byte) in a schedule file",
                          path);
    }
    pipit_status st = pipit__schedule_parse(buf, path, out);
    pipit__free(buf);
    return st;
}

pipit_status pipit_schedule_load(const char *path, pipit_schedule **out) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(schedule_load_impl(path, out), gen0, __func__);
}

/* ----------------------------------------------------------------- write */

pipit_status pipit__schedule_write(FILE *f, const pipit_schedule *s) {
    if (!f || !s || !s->stage_rank || !s->ntasks || !s->tasks)
        return pipit__err(PIPIT_STATUS_MISUSE, "schedule write: NULL argument");
    fprintf(f, "# pipit schedule: %s, P=%d S=%d M=%d\n",
            s->kind >= 0 ? pipit_schedule_kind_name((pipit_schedule_kind)s->kind) : "custom",
            s->P, s->S, s->M);
    fprintf(f, "stages:");
    for (int st = 0; st < s->S; st++) fprintf(f, " %d", s->stage_rank[st]);
    fputc('\n', f);
    for (int r = 0; r < s->P; r++) {
        for (int i = 0; i < s->ntasks[r]; i++) {
            char a[32];
            fprintf(f, "%s%s", i ? " " : "", pipit__task_str(a, sizeof a, s->tasks[r][i]));
        }
        fputc('\n', f);
    }
    return ferror(f) ? pipit__err(PIPIT_STATUS_IO, "error writing a schedule") : PIPIT_STATUS_OK;
}

/* ------------------------------------------------------------------ grid */

#define GRID_MAX_COLS 240

/* Column width: the longest task name, so every cell lines up. */
static int label_width(const pipit_schedule *s) {
    int w = 1;
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->ntasks[r]; i++) {
            char a[32];
            w = PIPIT_MAX(w, (int)strlen(pipit__task_str(a, sizeof a, s->tasks[r][i])));
        }
    return w;
}

/* One time unit per column: the shortest task, so unit costs give the
 * textbook one-cell-per-task table; capped so huge ratios stay printable. */
static double grid_quantum(const pipit_schedule *s, const pipit__sim_result *res) {
    double q = 0;
    for (int r = 0; r < s->P; r++)
        for (int i = 0; i < s->ntasks[r]; i++) {
            double d = res->end[r][i] - res->start[r][i];
            if (d > 1e-12 && (q == 0 || d < q)) q = d;
        }
    if (q > 0 && res->step_time / q > GRID_MAX_COLS) q = res->step_time / GRID_MAX_COLS;
    return q;
}

/* A task's name goes in the cell holding its start, '~' in the cells it
 * continues through, '.' where the rank idles. */
static void print_row(FILE *f, const pipit_schedule *s, const pipit__sim_result *res, int r,
                      int ncols, double q, int w) {
    int i = 0, shown = -1;
    fprintf(f, "rank %-3d|", r);
    for (int col = 0; col < ncols; col++) {
        double mid = (col + 0.5) * q;
        while (i < s->ntasks[r] && res->end[r][i] <= mid) i++;
        char a[32];
        const char *cell = ".";
        if (i < s->ntasks[r] && res->start[r][i] <= mid) {
            cell = shown == i ? "~" : pipit__task_str(a, sizeof a, s->tasks[r][i]);
            shown = i;
        }
        /* pad every cell but the last, so rows carry no trailing blanks */
        fprintf(f, " %-*s", col + 1 < ncols ? w : 0, cell);
    }
    fputc('\n', f);
}

static void print_stats(FILE *f, const pipit_schedule *s, const pipit__sim_result *res) {
    fprintf(f, "step time %g, bubble %.1f%%\n", res->step_time, 100.0 * res->bubble);
    /* peak live: the most (stage, microbatch) activations a rank holds at
     * once; their bytes only when the costs priced them (under unit costs
     * the "bytes" would be the same count again) */
    for (int r = 0; r < s->P; r++) {
        fprintf(f, "rank %d: busy %g, bubble %.1f%%, peak live %d (stage, microbatch) activation%s", r, res->busy[r],
                100.0 * res->rank_bubble[r], res->peak_live[r], res->peak_live[r] == 1 ? "" : "s");
        if (res->has_bytes) fprintf(f, ", %g bytes", res->peak_bytes[r]);
        fputc('\n', f);
    }
    /* with V stages per rank a stage holds 1/V of a rank's layers: the
     * peak in whole-rank microbatches (the unit of 1F1B's P, and of the
     * controllable-memory papers' (P+2)/2 and (P+4)/3) is live / V */
    if (s->V > 1) {
        fprintf(f, "peak in flight per rank (live activations / V=%d, in microbatches):", s->V);
        for (int r = 0; r < s->P; r++) fprintf(f, " %g", (double)res->peak_live[r] / s->V);
        fputc('\n', f);
    }
}

void pipit__schedule_print_grid(FILE *f, const pipit_schedule *s, const pipit__sim_result *res) {
    if (!f || !s || !res || res->P != s->P) return;
    double q = grid_quantum(s, res);
    int w = label_width(s);
    double cols = q > 0 ? ceil(res->step_time / q - 1e-9) : 0; /* <= GRID_MAX_COLS + 1 when finite */
    int ncols = cols > 0 && cols <= GRID_MAX_COLS + 1 ? (int)cols : 0;
    if (ncols > 0) {
        fprintf(f, "time    |");
        for (int col = 0; col < ncols; col++) {
            char t[32];
            snprintf(t, sizeof t, "%g", col * q);
            fprintf(f, " %-*.*s", col + 1 < ncols ? w : 0, w, t); /* cut long fractions */
        }
        fputc('\n', f);
        for (int r = 0; r < s->P; r++) print_row(f, s, res, r, ncols, q, w);
    } else {
        fprintf(f, "(empty timeline)\n");
    }
    print_stats(f, s, res);
}
