/*
 * trace.c — the last step as a Chrome / Perfetto trace: one track per rank,
 * one complete event ("ph":"X") per task, microseconds from step start.
 * Open it at ui.perfetto.dev or chrome://tracing. A path ending in .svg
 * gets an SVG timeline instead.
 */
#include <stdio.h>
#include <unistd.h>

#include <string.h>

#include "runtime/program.h"
#include "schedule/schedule.h"
#include "inspect/timeline.h"

static const char *kind_name(int k) {
    static const char *names[] = {"forward", "backward (input grads)", "backward (weight grads)", "backward"};
    return k >= 0 && k < 4 ? names[k] : "task";
}

static int write_events(FILE *f, const pipit_program *p) {
    fprintf(f, "{\"traceEvents\":[\n");
    int first = 1;
    for (int i = 0; i < p->nlocal; i++) { /* the world ranks this process ran */
        int r = p->local[i];
        fprintf(f, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                first ? "" : ",\n", r, r);
        first = 0;
        const pipit__rank_plan *rp = &p->plan.ranks[r % p->plan.nranks];
        const pipit__rank_state *rs = &p->rs[r];
        for (int t = 0; t < rp->ntasks; t++) {
            char name[32];
            pipit__task_str(name, sizeof name, rp->tasks[t]);
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                       "\"args\":{\"stage\":%d,\"microbatch\":%d}}",
                    name, kind_name(rp->tasks[t].kind), r, rs->t_start[t] * 1e6,
                    (rs->t_end[t] - rs->t_start[t]) * 1e6, rp->tasks[t].stage, rp->tasks[t].mb);
        }
    }
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");
    return ferror(f) ? -1 : 0;
}

static pipit_status program_write_trace_impl(const pipit_program *p, const char *path) {
    if (!p) return pipit__err(PIPIT_STATUS_MISUSE, "%s: program is NULL", "pipit_program_write_trace");
    if (p->magic != PIPIT_PROGRAM_MAGIC)
        return pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid program handle (freed, or not a pipit_program)", "pipit_program_write_trace");
    if (!path) return pipit__err(PIPIT_STATUS_INVALID, "%s: path is NULL", "pipit_program_write_trace");
    pipit_status runnable = pipit__check_runnable(p, "pipit_program_write_trace");
    if (runnable) return runnable;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return pipit__err(PIPIT_STATUS_IO, "trace '%s': cannot create: %m", path);
    size_t n = strlen(path);
    int bad = 0;
    if (n > 4 && strcmp(path + n - 4, ".svg") == 0) { /* an SVG timeline instead of JSON */
        size_t n_ = (size_t)p->nlocal;
        int *nt = pipit__calloc(n_, sizeof *nt);
        pipit_task **tk = pipit__calloc(n_, sizeof *tk);
        double **st = pipit__calloc(n_, sizeof *st), **en = pipit__calloc(n_, sizeof *en);
        if (nt && tk && st && en) {
            for (int i = 0; i < p->nlocal; i++) {
                int r = p->local[i];
                nt[i] = p->plan.ranks[r % p->plan.nranks].ntasks;
                tk[i] = p->plan.ranks[r % p->plan.nranks].tasks;
                st[i] = p->rs[r].t_start;
                en[i] = p->rs[r].t_end;
            }
            pipit__timeline_svg(f, "pipit step (measured, seconds)", p->nlocal, nt, tk, st, en);
        } else {
            bad = 1;
        }
        pipit__free(nt), pipit__free(tk), pipit__free(st), pipit__free(en);
    } else {
        bad = write_events(f, p);
    }
    bad |= fflush(f) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        remove(tmp);
        return pipit__err(PIPIT_STATUS_IO, "trace '%s': write failed", path);
    }
    return PIPIT_STATUS_OK;
}

pipit_status pipit_program_write_trace(const pipit_program *p, const char *path) {
    unsigned long gen0 = pipit__err_gen();
    return pipit__err_fresh(program_write_trace_impl(p, path), gen0, __func__);
}
