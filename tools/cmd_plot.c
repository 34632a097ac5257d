/*
 * cmd_plot.c — `pipit plot LOG.jsonl... --out curve.svg`: the curves of
 * one or more runs from their `pipit train --json` logs, as one SVG: the
 * training loss (solid) and validation loss (dashed, dots, in another
 * colour) against the step in the upper panel, the learning rate in the
 * lower one, a pair of colours per run and a legend naming the logs and
 * the series. Each panel's <g> carries its data and pixel ranges (data-x0
 * ... data-py1) and each curve is a <polyline> with data-run and
 * data-series, so a program can read the points back. Any finite values
 * draw (a loss of 1e20, +-1e308, steps 16 apart near 1e17): the scale is
 * computed in halves, so nothing overflows, and the ticks are counted, not
 * stepped to, so none is lost to rounding; a log is read in lines of at
 * most 1 MiB and 1 GiB in all.
 */
#include <cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "flags.h"

typedef struct {
    double *x, *y;
    int n, cap;
} series;

typedef struct {
    const char *path;
    series loss, val, lr;
} run_log;

static void add_point(series *s, double x, double y) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->x = realloc(s->x, sizeof *s->x * (size_t)s->cap);
        s->y = realloc(s->y, sizeof *s->y * (size_t)s->cap);
        if (!s->x || !s->y) die("out of memory");
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

static int number(const cJSON *o, const char *key, double *v) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble)) return 0;
    *v = j->valuedouble;
    return 1;
}

enum { MAX_LINE = 1 << 20, CHUNK = 1 << 16 };    /* a step line is some 200 bytes */
static const long long MAX_LOG_BYTES = 1ll << 30; /* some 5 million steps */

typedef struct {
    run_log *r;
    long lineno, skipped, first_skipped;
} log_reader;

/* One line (len bytes; its text in line only if it starts with '{'): a
 * step line's or validation line's numbers are kept. */
static void take_line(log_reader *lr, char *line, size_t len, int brace) {
    lr->lineno++;
    if (!len || !brace) return;
    line[len] = 0;
    /* 1: nothing may follow the object; a key given twice is ambiguous (cJSON
     * would read the first): such a line is not one of train's, skipped too */
    cJSON *o = cJSON_ParseWithOpts(line, NULL, 1);
    int twice = 0;
    for (const cJSON *a = o ? o->child : NULL; a && !twice; a = a->next)
        for (const cJSON *b = a->next; b && !twice; b = b->next)
            twice = a->string && b->string && strcmp(a->string, b->string) == 0;
    if (twice) cJSON_Delete(o), o = NULL;
    if (!o) {
        if (!lr->skipped++) lr->first_skipped = lr->lineno;
        return;
    }
    double step, v;
    if (number(o, "step", &step)) {
        if (number(o, "loss", &v)) add_point(&lr->r->loss, step, v);
        if (number(o, "val_loss", &v)) add_point(&lr->r->val, step, v);
        if (number(o, "lr", &v)) add_point(&lr->r->lr, step, v);
    }
    cJSON_Delete(o);
}

/* The step lines ("loss", "lr") and validation lines ("val_loss") of a log;
 * other lines (text, the summary, non-finite losses that are not JSON) are
 * skipped, and counted in a note. A line longer than MAX_LINE or a log
 * longer than MAX_LOG_BYTES (/dev/zero, /dev/urandom) is refused. */
static void read_log(run_log *r) {
    FILE *f = fopen(r->path, "r");
    if (!f) die("plot: cannot open '%s': %s", r->path, strerror(errno));
    char *line = malloc(MAX_LINE + 1), *buf = malloc(CHUNK);
    if (!line || !buf) die("out of memory");
    log_reader lr = {r, 0, 0, 0};
    size_t len = 0; /* the line so far */
    int brace = 0;  /* it starts with '{' (else its bytes are only counted) */
    long long total = 0;
    for (;;) {
        size_t got = fread(buf, 1, CHUNK, f), at = 0;
        if ((total += (long long)got) > MAX_LOG_BYTES)
            die("plot: '%s' is larger than 1 GiB: not a log of `pipit train --json` (a step line is some 200 bytes)",
                r->path);
        while (at < got) {
            const char *nl = memchr(buf + at, '\n', got - at);
            size_t seg = (nl ? (size_t)(nl - buf) : got) - at;
            if (seg > MAX_LINE - len)
                die("plot: '%s': line %ld is longer than 1 MiB: not a log of `pipit train --json` (its lines are "
                    "some 200 bytes)", r->path, lr.lineno + 1);
            if (!len && seg) brace = buf[at] == '{';
            if (brace) memcpy(line + len, buf + at, seg);
            len += seg;
            at += seg;
            if (nl) {
                take_line(&lr, line, len, brace);
                len = 0;
                at++;
            }
        }
        if (!got) break;
    }
    if (len) take_line(&lr, line, len, brace); /* the last line, without its newline */
    free(line);
    free(buf);
    int bad = ferror(f);
    fclose(f);
    if (bad) die("plot: cannot read '%s'", r->path);
    if (lr.skipped)
        fprintf(stderr, "pipit: note: plot: %s: skipped %ld line%s that %s not JSON (first: line %ld)\n", r->path,
                lr.skipped, lr.skipped == 1 ? "" : "s", lr.skipped == 1 ? "is" : "are", lr.first_skipped);
    if (!r->loss.n && !r->val.n)
        die("plot: '%s' has no step lines (a log of `pipit train --json`: {\"step\":s,\"loss\":x,...})", r->path);
}

/* ------------------------------------------------------------------ SVG */

enum { W = 900, LEFT = 80, RIGHT = 30, PANEL_H = 260, GAP = 70, TOP = 50, MAX_TICKS = 50 };

/* A run's training and validation colours: matplotlib's tab20, paired so that
 * the two series of a run differ in hue (blue and orange, ...), runs 6 to
 * 10 in the lighter tones. */
static const char *const TRAIN_COLORS[] = {"#1f77b4", "#2ca02c", "#9467bd", "#e377c2", "#bcbd22",
                                           "#aec7e8", "#98df8a", "#c5b0d5", "#f7b6d2", "#dbdb8d"};
static const char *const VAL_COLORS[] = {"#ff7f0e", "#d62728", "#8c564b", "#7f7f7f", "#17becf",
                                         "#ffbb78", "#ff9896", "#c49c94", "#c7c7c7", "#9edae5"};

static void put_xml(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc((unsigned char)*s < 0x20 ? '?' : *s, f);
    }
}

/* A panel: a data box [x0, x1] x [y0, y1] (x0 < x1, y0 < y1, finite) drawn
 * in pixels [px0, px1] x [py1 (top), py0 (bottom)]. */
typedef struct {
    double x0, x1, y0, y1, px0, px1, py0, py1;
} panel;

/* Where v lies in [a, b], 0 .. 1: in halves, so that b - a may exceed
 * DBL_MAX (a = -1e308, b = 1e308); range() makes b / 2 - a / 2 > 0. */
static double frac(double v, double a, double b) { return (v / 2 - a / 2) / (b / 2 - a / 2); }
static double px(const panel *p, double x) { return p->px0 + frac(x, p->x0, p->x1) * (p->px1 - p->px0); }
static double py(const panel *p, double y) { return p->py0 - frac(y, p->y0, p->y1) * (p->py0 - p->py1); }

/* The ticks of [lo, hi] (lo < hi, finite) into t[MAX_TICKS + 1]: multiples
 * of 1, 2 or 5 x 10^k, about `want` of them, counted from the first rather
 * than stepped to (a step of 2 near 1e17 adds nothing to a double); values
 * that rounding made equal are kept once, -0 is 0. If the multiples are
 * not finite or too many, want + 1 evenly spaced values. *digits: the
 * significant digits that tell neighbours apart (at least `digits` as given). */
static int ticks(double lo, double hi, int want, double *t, int *digits) {
    double half = hi / 2 - lo / 2, raw = half / want * 2;
    double mag = pow(10, floor(log10(raw))), m = raw / mag;
    double dx = mag * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
    double k0 = ceil(lo / dx), k1 = floor(hi / dx);
    int n = 0, even = !(isfinite(dx) && dx > 0 && isfinite(k0) && isfinite(k1) && k1 >= k0 && k1 - k0 < MAX_TICKS);
    int count = even ? want + 1 : (int)(k1 - k0) + 1;
    for (int i = 0; i < count; i++) {
        double v = even ? 2 * (lo / 2 + half * i / want) : (k0 + i) * dx;
        if (v == 0) v = 0; /* not -0 */
        if (!(v >= lo && v <= hi) || (n && v <= t[n - 1])) continue;
        t[n++] = v;
    }
    /* digits: those of the largest magnitude down to those of the closest pair */
    double big = 0, gap = half;
    for (int i = 0; i < n; i++) {
        big = fmax(big, fabs(t[i]));
        if (i) gap = fmin(gap, t[i] / 2 - t[i - 1] / 2);
    }
    if (big > 0 && gap > 0) {
        double need = floor(log10(big)) - floor(log10(gap * 2)) + 1;
        if (need > *digits) *digits = need > 17 ? 17 : (int)need;
    }
    return n;
}

static void axes(FILE *f, const panel *p, const char *name) {
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#888\"/>\n", p->px0,
            p->py1, p->px1 - p->px0, p->py0 - p->py1);
    double t[MAX_TICKS + 1];
    int digits = 6, n = ticks(p->x0, p->x1, 8, t, &digits);
    for (int i = 0; i < n; i++)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#eee\"/><text class=\"tick\" "
                   "x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%.*g</text>\n",
                px(p, t[i]), p->py1, px(p, t[i]), p->py0, px(p, t[i]), p->py0 + 16, digits, t[i]);
    digits = 4;
    n = ticks(p->y0, p->y1, 5, t, &digits);
    for (int i = 0; i < n; i++)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#eee\"/><text class=\"tick\" "
                   "x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">%.*g</text>\n",
                p->px0, py(p, t[i]), p->px1, py(p, t[i]), p->px0 - 6, py(p, t[i]) + 4, digits, t[i]);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" font-weight=\"bold\">%s</text>\n", p->px0, p->py1 - 8, name);
    fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">step</text>\n", (p->px0 + p->px1) / 2, p->py0 + 34);
}

static void curve(FILE *f, const panel *p, const series *s, const char *run, const char *name, const char *color,
                  int dashed) {
    if (!s->n) return;
    fprintf(f, "<polyline data-run=\"");
    put_xml(f, run);
    fprintf(f, "\" data-series=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", name, color,
            dashed ? " stroke-dasharray=\"6,4\"" : "");
    for (int i = 0; i < s->n; i++) fprintf(f, "%s%.2f,%.2f", i ? " " : "", px(p, s->x[i]), py(p, s->y[i]));
    fprintf(f, "\"/>\n");
    if (dashed) /* validation points are few: a dot each */
        for (int i = 0; i < s->n; i++)
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"2.5\" fill=\"%s\"/>\n", px(p, s->x[i]), py(p, s->y[i]), color);
}

/* The range of the chosen series over all runs (finite values: read_log
 * keeps no other), in which every point draws at a finite pixel: a flat
 * curve (for the y axis: flat to 12 digits) gets room around it, a unit
 * or 1% of its size, and the y axis 5% more each side, within +-DBL_MAX. */
static void range(const run_log *runs, int n, int which, double *lo, double *hi, int use_x) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int r = 0; r < n; r++) {
        const series *all[3] = {&runs[r].loss, &runs[r].val, &runs[r].lr};
        for (int k = 0; k < 3; k++) {
            if (!(which >> k & 1)) continue;
            for (int i = 0; i < all[k]->n; i++) {
                double v = use_x ? all[k]->x[i] : all[k]->y[i];
                if (v < *lo) *lo = v;
                if (v > *hi) *hi = v;
            }
        }
    }
    if (!(*lo <= *hi)) *lo = 0, *hi = 1;
    double mid = *lo / 2 + *hi / 2, half = *hi / 2 - *lo / 2;
    if (!(half > 0) || (!use_x && half < 0.5e-12 * (fabs(mid) + 1))) {
        double room = fmax(0.5, fabs(mid) * 0.01);
        *lo = fmax(mid - room, -DBL_MAX);
        *hi = fmin(mid + room, DBL_MAX);
        half = *hi / 2 - *lo / 2;
    }
    if (!use_x) {
        *lo = fmax(*lo - half * 0.1, -DBL_MAX);
        *hi = fmin(*hi + half * 0.1, DBL_MAX);
    }
}

static void write_panel_tag(FILE *f, const panel *p, const char *name) {
    fprintf(f, "<g class=\"panel\" data-name=\"%s\" data-x0=\"%.17g\" data-x1=\"%.17g\" data-y0=\"%.17g\" "
               "data-y1=\"%.17g\" data-px0=\"%.17g\" data-px1=\"%.17g\" data-py0=\"%.17g\" data-py1=\"%.17g\">\n",
            name, p->x0, p->x1, p->y0, p->y1, p->px0, p->px1, p->py0, p->py1);
}

/* A legend key: a stretch of a series' line (and its dot) and its name. */
static void key(FILE *f, int x, int y, const char *run, const char *name, const char *color, int dashed,
                const char *label) {
    fprintf(f, "<line class=\"key\" data-run=\"");
    put_xml(f, run);
    fprintf(f, "\" data-series=\"%s\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"%s/>",
            name, x, y, x + 30, y, color, dashed ? " stroke-dasharray=\"6,4\"" : "");
    if (dashed) fprintf(f, "<circle cx=\"%d\" cy=\"%d\" r=\"2.5\" fill=\"%s\"/>", x + 15, y, color);
    fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", x + 36, y + 4, label);
}

static void write_svg(FILE *f, const run_log *runs, int n) {
    int has_lr = 0;
    for (int r = 0; r < n; r++) has_lr |= runs[r].lr.n > 0;
    double x0, x1;
    range(runs, n, 7, &x0, &x1, 1);
    int legend_h = 22 * (n + 1);
    int height = TOP + PANEL_H + (has_lr ? GAP + PANEL_H : 0) + 50 + legend_h;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, height);
    panel lp = {x0, x1, 0, 0, LEFT, W - RIGHT, TOP + PANEL_H, TOP};
    range(runs, n, 3, &lp.y0, &lp.y1, 0);
    write_panel_tag(f, &lp, "loss");
    axes(f, &lp, "loss (solid: training, dashed: validation)");
    for (int r = 0; r < n; r++) {
        curve(f, &lp, &runs[r].loss, runs[r].path, "loss", TRAIN_COLORS[r % 10], 0);
        curve(f, &lp, &runs[r].val, runs[r].path, "val_loss", VAL_COLORS[r % 10], 1);
    }
    fprintf(f, "</g>\n");
    int y = TOP + PANEL_H + 50;
    if (has_lr) {
        panel rp = {x0, x1, 0, 0, LEFT, W - RIGHT, TOP + 2 * PANEL_H + GAP, TOP + PANEL_H + GAP};
        range(runs, n, 4, &rp.y0, &rp.y1, 0);
        write_panel_tag(f, &rp, "lr");
        axes(f, &rp, "learning rate");
        for (int r = 0; r < n; r++) curve(f, &rp, &runs[r].lr, runs[r].path, "lr", TRAIN_COLORS[r % 10], 0);
        fprintf(f, "</g>\n");
        y += GAP + PANEL_H;
    }
    for (int r = 0; r < n; r++, y += 22) { /* the legend: per run its series' keys, then its log's name */
        const run_log *u = &runs[r];
        if (u->loss.n || u->lr.n)
            key(f, LEFT, y, u->path, u->loss.n ? "loss" : "lr", TRAIN_COLORS[r % 10], 0,
                u->loss.n && u->lr.n ? "training, lr" : u->loss.n ? "training" : "lr");
        if (u->val.n) key(f, LEFT + 120, y, u->path, "val_loss", VAL_COLORS[r % 10], 1, "validation");
        fprintf(f, "<text class=\"legend\" x=\"%d\" y=\"%d\">", LEFT + 240, y + 4);
        put_xml(f, u->path);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}

int cmd_plot(int argc, char **argv) {
    const char *out = NULL;
    flag fl[] = {{"out", FL_STR, &out, "the SVG file to write", 0}};
    flag_cmd c = {"plot", "LOG.jsonl... --out curve.svg",
                  "Plots the logs of `pipit train --json` runs (step lines and validation lines) as one SVG: loss "
                  "and validation loss against the step, and the learning rate below, a colour per run.",
                  fl, NFLAGS(fl)};
    /* the logs are the arguments that are not flags */
    char **flags = malloc(sizeof *flags * (size_t)(argc + 1));
    const char **logs = malloc(sizeof *logs * (size_t)(argc + 1));
    if (!flags || !logs) die("out of memory");
    int nf = 0, nl = 0;
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1]) { /* a flag, and its value unless it says --flag=value */
            flags[nf++] = argv[i];
            int bare = strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 || strchr(argv[i], '=');
            if (!bare && i + 1 < argc) flags[nf++] = argv[++i];
        } else {
            logs[nl++] = argv[i];
        }
    }
    flags_parse(&c, nf, flags);
    flags_require(&c, (const char *const[]){"out", NULL});
    if (!nl) die("plot: give one or more logs of `pipit train --json` (see pipit plot --help)");
    run_log *runs = calloc((size_t)nl, sizeof *runs);
    if (!runs) die("out of memory");
    for (int i = 0; i < nl; i++) {
        runs[i].path = logs[i];
        read_log(&runs[i]);
    }
    FILE *f = fopen(out, "w");
    if (!f) die("--out: cannot write '%s': %s", out, strerror(errno));
    write_svg(f, runs, nl);
    if (fclose(f) != 0) die("--out: writing '%s' failed: %s", out, strerror(errno));
    for (int i = 0; i < nl; i++) {
        series *all[3] = {&runs[i].loss, &runs[i].val, &runs[i].lr};
        for (int k = 0; k < 3; k++) free(all[k]->x), free(all[k]->y);
    }
    free(runs);
    free(flags);
    free(logs);
    return 0;
}
