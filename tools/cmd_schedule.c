/*
 * cmd_schedule.c — `pipit schedule`: look at a schedule before anything
 * runs (its grid, bubble fraction and peak activations per rank, from the
 * simulator), or export it in the custom-schedule file format.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "flags.h"
#include "pipit.h"
#include "pipit_inspect.h"

#include "commands.h"
pipit_status pipit_cli_schedule_open(const char *flagname, const char *name, int P, int V, int M, pipit_schedule **out);

/* --schedule NAME|FILE: a built-in name, or a file that exists; anything
 * else lists the names (a typo of a name is not "cannot open"). */
pipit_status pipit_cli_schedule_open(const char *flagname, const char *name, int P, int V, int M, pipit_schedule **out) {
    int kind = pipit_schedule_kind_from_name(name);
    if (kind >= 0) return pipit_schedule_build((pipit_schedule_kind)kind, P, V, M, out);
    FILE *f = fopen(name, "r");
    if (!f && errno == ENOENT) {
        char names[256] = "";
        for (int k = 0; k < PIPIT_SCHED_COUNT; k++) {
            size_t u = strlen(names);
            snprintf(names + u, sizeof names - u, "%s%s", k ? ", " : "", pipit_schedule_kind_name((pipit_schedule_kind)k));
        }
        const char *cands[PIPIT_SCHED_COUNT];
        for (int k = 0; k < PIPIT_SCHED_COUNT; k++) cands[k] = pipit_schedule_kind_name((pipit_schedule_kind)k);
        die("unknown schedule '%s' for --%s: expected one of %s, or a schedule file (no file '%s' exists)%s", name,
            flagname, names, name, cli_did_you_mean(name, cands, PIPIT_SCHED_COUNT, ""));
    }
    if (f) fclose(f);
    return pipit_schedule_load(name, out);
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

static void check_status(pipit_status s) {
    if (s) die("schedule: %s", pipit_errmsg());
}

int cmd_schedule(int argc, char **argv) {
    const char *name = NULL, *format = "grid", *costs_arg = NULL;
    int P = 0, V = 0, M = 0;
    double costs[3] = {1, 1, 1};
    flag fl[] = {
        {"schedule", FL_STR, &name, "gpipe|1f1b|eager-1f1b|interleaved-1f1b|interleaved-gpipe|zb-h1|dualpipev|zb-h2|zb-v|interleaved-zb|v-half|v-min|FILE", 0},
        {"pp", FL_INT, &P, "pipeline ranks P", 0},
        {"virtual", FL_INT, &V, "stages per rank V (default: the schedule's own)", 0},
        {"microbatches", FL_INT, &M, "microbatches M", 0},
        {"costs", FL_STR, &costs_arg, "per-stage task costs F,B,W for the simulator (default 1,1,1)", 0},
        {"format", FL_STR, &format, "grid (default): table, bubble, peak activations; file: the text format; "
                                    "svg: the simulated timeline as an SVG picture", 0},
    };
    flag_cmd c = {"schedule", "--schedule NAME|FILE --pp P [--virtual V] --microbatches M [--costs F,B,W] "
                              "[--format grid|file|svg]",
                  "Prints a pipeline schedule's grid, bubble and peak activations (from the simulator), or\n"
                  "exports it in the custom-schedule file format; nothing runs.",
                  fl, NFLAGS(fl)};
    flags_parse(&c, argc, argv);
    flags_require(&c, (const char *const[]){"schedule", NULL});
    if (costs_arg && !parse_costs(costs_arg, costs))
        die("bad value '%s' for --costs: expected F,B,W (positive numbers)", costs_arg);
    if (strcmp(format, "grid") && strcmp(format, "file") && strcmp(format, "svg"))
        die("bad value '%s' for --format: expected grid, file or svg", format);
    pipit_schedule *s = NULL;
    if (pipit_schedule_kind_from_name(name) >= 0) {
        if (P < 1) die("schedule: --pp P (>= 1) is required for a built-in schedule");
        if (M < 1) die("schedule: --microbatches M (>= 1) is required for a built-in schedule");
    }
    check_status(pipit_cli_schedule_open("schedule", name, P, V, M, &s));
    check_status(pipit_schedule_check(s));
    if (!strcmp(format, "file")) {
        check_status(pipit_schedule_write(stdout, s));
        pipit_schedule_free(s);
        return 0;
    }
    int S = pipit_schedule_stages(s);
    double *f = malloc(sizeof(double) * 3 * (size_t)S);
    if (!f) die("out of memory");
    for (int k = 0; k < S; k++) {
        f[k] = costs[0];
        f[S + k] = costs[1];
        f[2 * S + k] = costs[2];
    }
    pipit_sim_costs sc = {.f = f, .b = f + S, .w = f + 2 * S};
    pipit_sim_result *r = NULL;
    check_status(pipit_schedule_simulate(s, &sc, &r));
    if (!strcmp(format, "svg")) {
        /* the whole name, however long (a path), never cut inside a character */
        const char *fmt = "%s: P=%d S=%d M=%d (simulated, bubble %.1f%%)";
        int P1 = pipit_schedule_ranks(s), M1 = pipit_schedule_microbatches(s);
        double bub = 100 * pipit_sim_result_bubble(r);
        size_t len = (size_t)snprintf(NULL, 0, fmt, name, P1, S, M1, bub) + 1;
        char *title = malloc(len);
        if (!title) die("out of memory");
        snprintf(title, len, fmt, name, P1, S, M1, bub);
        check_status(pipit_schedule_write_svg(stdout, s, r, title));
        free(title);
    } else {
        check_status(pipit_schedule_print_grid(stdout, s, r));
    }
    pipit_sim_result_free(r);
    free(f);
    pipit_schedule_free(s);
    return 0;
}
