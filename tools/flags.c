/*
 * flags.c — see flags.h. The only place besides main() that calls exit().
 */
#include "flags.h"
#include "cli.h"
#include "pipit.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tests/fuzz/fuzz_flags.c compiles this file with -DPIPIT_FLAGS_EXIT=<its
 * own noreturn function>, so that a rejected argument (or --help) returns to
 * the fuzzer (longjmp) instead of ending the process. The CLI build does not
 * define it: exit() as always. */
#ifdef PIPIT_FLAGS_EXIT
void PIPIT_FLAGS_EXIT(int status) __attribute__((noreturn));
#define exit PIPIT_FLAGS_EXIT
#endif

/* The whole line goes out in one write: under mpirun, stderr is unbuffered
 * and mpirun's own notices (another process has exited) would otherwise
 * land between the prefix and the message. */
void die(const char *fmt, ...) {
    char line[4096];
    int n = pipit_process_count() > 1 /* say which process of an MPI job speaks */
                ? snprintf(line, sizeof line, "pipit (process %d of %d): ", pipit_process_rank(),
                           pipit_process_count())
                : snprintf(line, sizeof line, "pipit: ");
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
    exit(1);
}

void flags_print_help(const flag_cmd *c) {
    printf("usage: pipit %s %s\n\n", c->name, c->usage);
    if (c->about) printf("%s\n\n", c->about);
    printf("flags:\n");
    for (int i = 0; i < c->n; i++) printf("  --%-16s %s\n", c->flags[i].name, c->flags[i].help);
    printf("  --%-16s %s\n", "help", "show this help");
}

static void parse_value(const flag *f, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case FL_INT: {
        long x = strtol(v, &end, 10);
        if (errno || !*v || *end || x < -2147483647L || x > 2147483647L)
            die("bad value '%s' for --%s: expected an integer", v, f->name);
        *(int *)f->ptr = (int)x;
        break;
    }
    case FL_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || !*v || *end || *v == '-') die("bad value '%s' for --%s: expected a non-negative integer", v, f->name);
        *(uint64_t *)f->ptr = x;
        break;
    }
    case FL_DBL: {
        double x = strtod(v, &end);
        if (!*v || *end || isnan(x) || (!errno && !isfinite(x)))
            die("bad value '%s' for --%s: expected a number", v, f->name);
        /* a number all the same: say which numbers a double holds (a
         * subnormal one, ERANGE with x != 0, is read as it is; the flag's
         * own range is checked where it is used) */
        if (errno == ERANGE && !isfinite(x))
            die("bad value '%s' for --%s: out of range for a double (magnitudes up to %.1e)", v, f->name, DBL_MAX);
        if (errno == ERANGE && x == 0)
            die("bad value '%s' for --%s: too close to 0 for a double (the smallest nonzero magnitude is %.1e)", v,
                f->name, DBL_TRUE_MIN);
        *(double *)f->ptr = x;
        break;
    }
    case FL_STR: *(const char **)f->ptr = v; break;
    case FL_BOOL: break;
    }
}

/* The value given with argument a (`--name=v` or `--name v`), "" for none. */
static const char *value_at(int argc, char **argv, int i) {
    const char *eq = strchr(argv[i] + 2, '=');
    return eq ? eq + 1 : i + 1 < argc ? argv[i + 1] : "";
}

/* A flag given twice is an error, never a silent override: names both. */
static void die_twice(const flag *f, int argc, char **argv, int i) {
    size_t len = strlen(f->name);
    for (int j = 0; j < i; j++) {
        const char *a = argv[j];
        if (strncmp(a, "--", 2) || strncmp(a + 2, f->name, len) || (a[2 + len] && a[2 + len] != '=')) continue;
        if (f->type == FL_BOOL) die("--%s given twice", f->name);
        die("--%s given twice ('%s' and '%s')", f->name, value_at(argc, argv, j), value_at(argc, argv, i));
    }
    /* set before this command line (a --config file): the command line wins */
}

void flags_parse(flag_cmd *c, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            flags_print_help(c);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0) die("%s: unexpected argument '%s' (see pipit %s --help)", c->name, a, c->name);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        flag *f = NULL;
        for (int k = 0; k < c->n; k++)
            if (strlen(c->flags[k].name) == len && strncmp(c->flags[k].name, name, len) == 0) f = &c->flags[k];
        if (!f) {
            const char *names[128];
            int nn = 0;
            for (int k = 0; k < c->n && nn < 128; k++) names[nn++] = c->flags[k].name;
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word ? len : sizeof word - 1), name);
            die("%s: unknown flag '%s' (see pipit %s --help)%s", c->name, a, c->name,
                cli_did_you_mean(word, names, nn, "--"));
        }
        if (f->seen) die_twice(f, argc, argv, i);
        f->seen = 1;
        if (f->type == FL_BOOL) {
            if (eq) die("--%s takes no value", f->name);
            *(int *)f->ptr = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) die("--%s needs a value", f->name);
        parse_value(f, v);
    }
}

int flags_seen(const flag_cmd *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->flags[i].name, name) == 0) return c->flags[i].seen;
    return 0;
}

void flags_set_seen(flag_cmd *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->flags[i].name, name) == 0) c->flags[i].seen = 1;
}

void flags_require(const flag_cmd *c, const char *const *names) {
    for (; *names; names++)
        if (!flags_seen(c, *names)) die("%s: --%s is required (see pipit %s --help)", c->name, *names, c->name);
}
