/*
 * cmd_plot.c — `pipit plot LOG.jsonl... --out curve.svg`: the curves of
 * one or more runs from their `pipit train --json` logs, as one SVG: the
 * training loss (solid) and validation loss (dashed, dots) against the
 * step in the upper panel, the learning rate in the lower one, a colour
 * per run and a legend naming the logs. Each panel's <g> carries its data
 * and pixel ranges (data-x0 ... data-py1) and each curve is a <polyline>
 * with data-run and data-series, so a program can read the points back.
 */
#include <cJSON.h>
#include <errno.h>
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

/* The step lines ("loss", "lr") and validation lines ("val_loss") of a log;
 * other lines (text, the summary, non-finite losses that are not JSON) are
 * skipped, and counted in a note. */
static void read_log(run_log *r) {
    FILE *f = fopen(r->path, "r");
    if (!f) die("plot: cannot open '%s': %s", r->path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, skipped = 0, first_skipped = 0;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        if (line[0] != '{') continue;
        cJSON *o = cJSON_Parse(line);
        double step, v;
        if (!o) {
            if (!skipped++) first_skipped = lineno;
            continue;
        }
        if (number(o, "step", &step)) {
            if (number(o, "loss", &v)) add_point(&r->loss, step, v);
            if (number(o, "val_loss", &v)) add_point(&r->val, step, v);
            if (number(o, "lr", &v)) add_point(&r->lr, step, v);
        }
        cJSON_Delete(o);
    }
    free(line);
    int bad = ferror(f);
    fclose(f);
    if (bad) die("plot: cannot read '%s'", r->path);
    if (skipped)
        fprintf(stderr, "pipit: note: plot: %s: skipped %ld line%s that %s not JSON (first: line %ld)\n", r->path, skipped,
                skipped == 1 ? "" : "s", skipped == 1 ? "is" : "are", first_skipped);
    if (!r->loss.n && !r->val.n)
        die("plot: '%s' has no step lines (a log of `pipit train --json`: {\"step\":s,\"loss\":x,...})", r->path);
}

/* ------------------------------------------------------------------ SVG */

enum { W = 900, LEFT = 80, RIGHT = 30, PANEL_H = 260, GAP = 70, TOP = 50 };

static const char *const COLORS[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                     "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

static void put_xml(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&') fputs("&amp;", f);
        else if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc((unsigned char)*s < 0x20 ? '?' : *s, f);
    }
}

/* A panel: a data box [x0, x1] x [y0, y1] drawn in pixels [px0, px1] x [py1 (top), py0 (bottom)]. */
typedef struct {
    double x0, x1, y0, y1, px0, px1, py0, py1;
} panel;

static double px(const panel *p, double x) { return p->px0 + (x - p->x0) / (p->x1 - p->x0) * (p->px1 - p->px0); }
static double py(const panel *p, double y) { return p->py0 - (y - p->y0) / (p->y1 - p->y0) * (p->py0 - p->py1); }

/* Ticks at multiples of 1, 2 or 5 x 10^k, about `want` of them over [lo, hi]. */
static double tick(double lo, double hi, int want) {
    double raw = (hi - lo) / want, mag = pow(10, floor(log10(raw))), m = raw / mag;
    return mag * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
}

static void axes(FILE *f, const panel *p, const char *name) {
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#888\"/>\n", p->px0,
            p->py1, p->px1 - p->px0, p->py0 - p->py1);
    double dx = tick(p->x0, p->x1, 8), dy = tick(p->y0, p->y1, 5);
    for (double x = ceil(p->x0 / dx) * dx; x <= p->x1 + dx * 1e-9; x += dx)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#eee\"/><text x=\"%.2f\" y=\"%.2f\" "
                   "text-anchor=\"middle\">%g</text>\n", px(p, x), p->py1, px(p, x), p->py0, px(p, x), p->py0 + 16, x);
    for (double y = ceil(p->y0 / dy) * dy; y <= p->y1 + dy * 1e-9; y += dy)
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#eee\"/><text x=\"%.2f\" y=\"%.2f\" "
                   "text-anchor=\"end\">%.4g</text>\n", p->px0, py(p, y), p->px1, py(p, y), p->px0 - 6, py(p, y) + 4, y);
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

/* The range of the chosen series over all runs, padded by 5% (a flat curve gets a unit of room). */
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
    if (*hi - *lo < 1e-12 * (fabs(*hi) + 1)) *lo -= 0.5, *hi += 0.5;
    if (!use_x) {
        double pad = (*hi - *lo) * 0.05;
        *lo -= pad;
        *hi += pad;
    }
}

static void write_panel_tag(FILE *f, const panel *p, const char *name) {
    fprintf(f, "<g class=\"panel\" data-name=\"%s\" data-x0=\"%.17g\" data-x1=\"%.17g\" data-y0=\"%.17g\" "
               "data-y1=\"%.17g\" data-px0=\"%.17g\" data-px1=\"%.17g\" data-py0=\"%.17g\" data-py1=\"%.17g\">\n",
            name, p->x0, p->x1, p->y0, p->y1, p->px0, p->px1, p->py0, p->py1);
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
        curve(f, &lp, &runs[r].loss, runs[r].path, "loss", COLORS[r % 10], 0);
        curve(f, &lp, &runs[r].val, runs[r].path, "val_loss", COLORS[r % 10], 1);
    }
    fprintf(f, "</g>\n");
    int y = TOP + PANEL_H + 50;
    if (has_lr) {
        panel rp = {x0, x1, 0, 0, LEFT, W - RIGHT, TOP + 2 * PANEL_H + GAP, TOP + PANEL_H + GAP};
        range(runs, n, 4, &rp.y0, &rp.y1, 0);
        write_panel_tag(f, &rp, "lr");
        axes(f, &rp, "learning rate");
        for (int r = 0; r < n; r++) curve(f, &rp, &runs[r].lr, runs[r].path, "lr", COLORS[r % 10], 0);
        fprintf(f, "</g>\n");
        y += GAP + PANEL_H;
    }
    for (int r = 0; r < n; r++, y += 22) { /* the legend: a line in the run's colour and its log's name */
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
                   "<text class=\"legend\" x=\"%d\" y=\"%d\">", LEFT, y, LEFT + 30, y, COLORS[r % 10], LEFT + 40, y + 4);
        put_xml(f, runs[r].path);
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
