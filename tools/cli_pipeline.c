/*
 * cli_pipeline.c — `pipit schedule`: look at a schedule before anything
 * runs (its grid, bubble fraction and peak activations per rank, from the
 * simulator), or export it in the custom-schedule file format.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/schedule.h"
#include "pipit.h"
#include "inspect/timeline.h"

int pipit_cli_schedule(int argc, char **argv);

static int fail(const char *fmt, const char *arg) {
    fprintf(stderr, "pipit schedule: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 1;
}

static int parse_int(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !*s || *end || v < -1000000 || v > 1000000) return 0;
    *out = (int)v;
    return 1;
}

/* "F,B,W" -> three positive costs. */
static int parse_costs(const char *s, double c[3]) {
    char *end;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        c[i] = strtod(s, &end);
        if (errno || end == s || !(c[i] > 0)) return 0;
        if (i < 2 && *end != ',') return 0;
        s = end + (i < 2);
    }
    return *end == 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: pipit schedule --schedule NAME|FILE --pp P [--virtual V] --microbatches M\n"
               "                      [--costs F,B,W] [--format grid|file]\n\n"
               "  --schedule      gpipe|1f1b|eager-1f1b|interleaved-1f1b|interleaved-gpipe|zb-h1|dualpipev|FILE\n"
               "  --pp            pipeline ranks P\n"
               "  --virtual       stages per rank V (default: the schedule's own)\n"
               "  --microbatches  microbatches M\n"
               "  --costs         per-stage task costs F,B,W for the simulator (default 1,1,1)\n"
               "  --format        grid (default): table, bubble, peak activations; file: the text format;\n"
               "                  svg: the simulated timeline as an SVG picture\n");
}

int pipit_cli_schedule(int argc, char **argv) {
    const char *name = NULL, *format = "grid";
    int P = 0, V = 0, M = 0;
    double costs[3] = {1, 1, 1};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(a, "--", 2) != 0) return fail("unexpected argument '%s'", a);
        if (!v) return fail("%s needs a value", a);
        i++;
        if (!strcmp(a, "--schedule")) name = v;
        else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "--pp")) { if (!parse_int(v, &P)) return fail("bad value '%s' for --pp", v); }
        else if (!strcmp(a, "--virtual")) { if (!parse_int(v, &V)) return fail("bad value '%s' for --virtual", v); }
        else if (!strcmp(a, "--microbatches")) { if (!parse_int(v, &M)) return fail("bad value '%s' for --microbatches", v); }
        else if (!strcmp(a, "--costs")) { if (!parse_costs(v, costs)) return fail("bad value '%s' for --costs: expected F,B,W (positive numbers)", v); }
        else return fail("unknown flag '%s' (see pipit schedule --help)", a);
    }
    if (!name) return fail("%s", "--schedule is required");
    if (strcmp(format, "grid") && strcmp(format, "file") && strcmp(format, "svg"))
        return fail("bad value '%s' for --format: expected grid, file or svg", format);
    pipit_schedule *s = NULL;
    int kind = pipit_schedule_kind_from_name(name);
    pipit_status st;
    if (kind >= 0) {
        if (P < 1) return fail("%s", "--pp P (>= 1) is required for a built-in schedule");
        if (M < 1) return fail("%s", "--microbatches M (>= 1) is required for a built-in schedule");
        st = pipit_schedule_build((pipit_schedule_kind)kind, P, V, M, &s);
    } else {
        st = pipit_schedule_load(name, &s);
    }
    if (!st) st = pipit_schedule_check(s);
    if (st) {
        fprintf(stderr, "pipit schedule: %s\n", pipit_errmsg());
        pipit_schedule_free(s);
        return 1;
    }
    if (!strcmp(format, "file")) {
        pipit__schedule_write(stdout, s);
        pipit_schedule_free(s);
        return 0;
    }
    double *f = malloc(sizeof(double) * 3 * (size_t)s->S);
    if (!f) return fail("%s", "out of memory");
    for (int k = 0; k < s->S; k++) {
        f[k] = costs[0];
        f[s->S + k] = costs[1];
        f[2 * s->S + k] = costs[2];
    }
    pipit__sim_costs c = {.f = f, .b = f + s->S, .w = f + 2 * s->S};
    pipit__sim_result r;
    st = pipit__schedule_simulate(s, &c, &r);
    if (st) {
        free(f);
        pipit_schedule_free(s);
        return fail("%s", pipit_errmsg());
    }
    if (!strcmp(format, "svg")) {
        char title[128];
        snprintf(title, sizeof title, "%s: P=%d S=%d M=%d (simulated, bubble %.1f%%)", name, s->P, s->S, s->M,
                 100 * r.bubble);
        pipit__timeline_svg(stdout, title, s->P, s->ntasks, s->tasks, r.start, r.end);
    } else {
        pipit__schedule_print_grid(stdout, s, &r);
    }
    pipit__sim_result_free(&r);
    free(f);
    pipit_schedule_free(s);
    return 0;
}
