/*
 * flags.h — the command line's one flag parser, driven by a table per
 * command: `--name value` and `--name=value` for every flag of every
 * command, --help generated from the table, and the same messages for an
 * unknown flag, a missing value or a bad number everywhere.
 */
#ifndef PIPIT_TOOLS_FLAGS_H
#define PIPIT_TOOLS_FLAGS_H

#include <stdint.h>

typedef enum { FL_INT, FL_U64, FL_DBL, FL_STR, FL_BOOL } flag_type;

typedef struct {
    const char *name;   /* without the leading "--" */
    flag_type type;
    void *ptr;          /* int, uint64_t, double, const char * or int (bool) */
    const char *help;
    int seen;           /* set by flags_parse */
} flag;

typedef struct {
    const char *name;   /* "train", "schedule", ... */
    const char *usage;  /* the synopsis after "pipit <name> " */
    const char *about;  /* one paragraph printed before the flags, or NULL */
    flag *flags;
    int n;
} flag_cmd;

/* Prints "pipit: <message>" to stderr and exits with status 1. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Parses argv[0 .. argc-1] into the table; --help / -h prints the help and
 * exits 0; anything wrong dies with a message naming the flag, a flag given
 * twice too ("--data given twice ('a' and 'b')"). */
void flags_parse(flag_cmd *c, int argc, char **argv);
void flags_print_help(const flag_cmd *c);
/* 1 if the flag was given on the command line. */
int flags_seen(const flag_cmd *c, const char *name);
/* Counts a flag as given (a value taken from a file that stands for it). */
void flags_set_seen(flag_cmd *c, const char *name);
/* Dies "<cmd>: --<name> is required" for the first one not given. */
void flags_require(const flag_cmd *c, const char *const *names);

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif
