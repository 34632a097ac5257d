/*
 * progress.c — step lines and the end-of-run summary (see progress.h).
 */
#include "progress.h"

#include <cblas.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double cli_sgemm_flops(void) {
    enum { N = 512 };
    float *a = malloc(sizeof(float) * N * N * 3);
    if (!a) return 0;
    float *b = a + N * N, *c = b + N * N;
    for (int i = 0; i < N * N; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
        c[i] = 0;
    }
    openblas_set_num_threads(1); /* the library's setting: its ranks and threads split the work */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, a, N, b, N, 0, c, N); /* warm up */
    double best = 0, t_end = cli_now() + 0.2;
    do { /* the fastest call: the ceiling, not the average */
        double t = cli_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1, a, N, b, N, 0, c, N);
        double dt = cli_now() - t;
        if (dt > 0 && 2.0 * N * N * N / dt > best) best = 2.0 * N * N * N / dt;
    } while (cli_now() < t_end);
    free(a);
    return best;
}

void cli_progress_step(cli_progress *p, const pipit_metrics *m, double tokens) {
    p->steps++;
    p->tokens += tokens;
    p->step_s += m->ms / 1e3;
}

void cli_progress_val(cli_progress *p, int64_t step, double loss) {
    if (!p->have_val || loss < p->best_val) {
        p->best_val = loss;
        p->best_val_step = step;
    }
    p->have_val = 1;
}

/* "m:ss" or "h:mm:ss" */
static void put_duration(FILE *f, double s) {
    if (!(s >= 0) || s > 1e9) {
        fputs("?", f);
        return;
    }
    long long t = (long long)(s + 0.5);
    if (t >= 3600) fprintf(f, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    else fprintf(f, "%lld:%02lld", t / 60, t % 60);
}

void cli_progress_fields(FILE *f, const cli_progress *p, int64_t step, const pipit_metrics *m, double flops_per_s) {
    double elapsed = cli_now() - p->t_start;
    int64_t done = step + 1 - p->first, left = p->last - step - 1;
    fprintf(f, "  [%lld/%lld ", (long long)(step + 1), (long long)p->last);
    put_duration(f, elapsed);
    fputs(" eta ", f);
    put_duration(f, done > 0 ? elapsed / (double)done * (double)left : -1);
    fputc(']', f);
    if (p->peak > 0) fprintf(f, "  MFU %.2f%%", 100 * flops_per_s / p->peak);
    if (p->ranks > 1) fprintf(f, "  bubble %.1f%%", 100 * m->bubble);
    fprintf(f, "  peak %.2f MiB/rank", (double)m->peak_bytes / (1024.0 * 1024.0));
}

static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static FILE *bar; /* where the bar is drawn (NULL: nowhere) */
static int bar_shown;

void cli_bar_enable(int on, int json) {
    bar = NULL;
    if (!on) return;
    if (!json && isatty(STDOUT_FILENO)) bar = stdout; /* between the step lines */
    else if (isatty(STDERR_FILENO)) bar = stderr;    /* stdout is a file or a pipe (train --json > run.jsonl) */
}

void cli_bar_clear(void) {
    if (!bar_shown) return;
    fputs("\r\033[K", bar);
    fflush(bar);
    bar_shown = 0;
}

void cli_bar_draw(const cli_progress *p, int64_t step, double loss) {
    if (!bar) return;
    struct winsize ws;
    int cols = ioctl(fileno(bar), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
    double elapsed = cli_now() - p->t_start;
    int64_t done = step + 1 - p->first, total = p->last - p->first;
    char tail[128];
    FILE *t = fmemopen(tail, sizeof tail, "w");
    if (!t) return;
    fprintf(t, " %lld/%lld ", (long long)(step + 1), (long long)p->last);
    put_duration(t, elapsed);
    fputs(" eta ", t);
    put_duration(t, done > 0 ? elapsed / (double)done * (double)(p->last - step - 1) : -1);
    fprintf(t, "  loss %.4f", loss);
    fclose(t);
    int width = cols - (int)strlen(tail) - 3; /* "[" "]" and a column spare: no wrap */
    if (width > 60) width = 60;
    cli_bar_clear();
    if (width >= 5) {
        int full = total > 0 ? (int)((double)done / (double)total * width) : width;
        fputc('[', bar);
        for (int i = 0; i < width; i++) fputc(i < full ? '#' : '.', bar);
        fputc(']', bar);
    }
    fputs(tail, bar);
    fflush(bar);
    bar_shown = 1;
}

void cli_progress_summary(FILE *f, const cli_progress *p, int json, const char *checkpoint) {
    cli_bar_clear();
    double wall = cli_now() - p->t_start, tps = p->step_s > 0 ? p->tokens / p->step_s : 0;
    if (json) {
        fprintf(f, "{\"summary\":{\"steps\":%lld,\"tokens\":%.0f,\"wall_s\":%.3f,\"tokens_per_s\":%.1f,",
                (long long)p->steps, p->tokens, wall, tps);
        if (p->have_val) fprintf(f, "\"best_val_loss\":%.9g,\"best_val_step\":%lld,", p->best_val, (long long)p->best_val_step);
        else fputs("\"best_val_loss\":null,\"best_val_step\":null,", f);
        fputs("\"checkpoint\":", f);
        if (checkpoint) put_json_string(f, checkpoint);
        else fputs("null", f);
        fputs("}}\n", f);
    } else {
        fprintf(f, "done: %lld steps, %.0f tokens in ", (long long)p->steps, p->tokens);
        put_duration(f, wall);
        fprintf(f, " (%.2f s), mean %.0f tok/s", wall, tps);
        if (p->have_val) fprintf(f, "; best val loss %.6f (step %lld)", p->best_val, (long long)p->best_val_step);
        if (checkpoint) fprintf(f, "; checkpoint %s", checkpoint);
        else fputs("; no checkpoint (no --save)", f);
        fputc('\n', f);
    }
    fflush(f);
}

char *cli_bytes(char *buf, size_t n, double bytes) {
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024 && u < 6) bytes /= 1024, u++;
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}
