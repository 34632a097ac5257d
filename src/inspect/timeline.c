/*
 * timeline.c — SVG timelines (see timeline.h). Plain SVG 1.1 with a title
 * per box, so hovering in a browser names the task and its times.
 */
#include "inspect/timeline.h"

#include <math.h>
#include <string.h>

#include "schedule/schedule.h"

static const char *kind_color(int kind) {
    static const char *c[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759"};
    return kind >= 0 && kind < 4 ? c[kind] : "#999999";
}

/* Writes text with XML's five special characters escaped (a title holds a
 * user's path: "a&b<c" must not break the file). Control characters other
 * than tab and newline are not allowed in XML 1.0 at all: written as '?'. */
static void put_xml(FILE *f, const char *s) {
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(c < 0x20 && c != '\t' && c != '\n' ? '?' : c, f);
        }
    }
}

/* A "nice" tick step (1, 2 or 5 x 10^k) giving about `want` ticks over span. */
static double tick_step(double span, int want) {
    double raw = span / want, p = 1;
    while (p * 10 <= raw) p *= 10;
    while (p > raw) p /= 10;
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

void pipit__timeline_svg(FILE *f, const char *title, int P, const int *ntasks, pipit_task *const *tasks,
                         double *const *start, double *const *end) {
    double t0 = 1e300, t1 = 0;
    int most = 0; /* tasks on the busiest rank: the picture widens with them */
    for (int r = 0; r < P; r++) {
        if (ntasks[r] > most) most = ntasks[r];
        for (int i = 0; i < ntasks[r]; i++) {
            if (start[r][i] < t0) t0 = start[r][i];
            if (end[r][i] > t1) t1 = end[r][i];
        }
    }
    if (t0 > t1) t0 = 0; /* no tasks */
    if (t1 <= t0) t1 = t0 + 1;
    /* about 20 px a task (a microbatch number fits a box), within 1100 .. 4000 px */
    double width = most * 20.0;
    width = width < 1100 ? 1100 : width > 4000 ? 4000 : width;
    const double left = 70, row = 28, top = 40, axis = top + row * P + 4;
    double sx = width / (t1 - t0);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n", left + width + 40, axis + 70);
    fprintf(f, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">", left);
    put_xml(f, title);
    fputs("</text>\n", f);
    /* time axis: a line under the rows, ticks with labels, faint grid lines */
    double step = tick_step(t1 - t0, (int)(width / 100));
    fprintf(f, "<g class=\"axis\" stroke=\"#555\" stroke-width=\"1\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
               "y2=\"%.1f\"/></g>\n", left, axis, left + width, axis);
    for (double t = ceil(t0 / step - 1e-9) * step; t <= t1 + step * 1e-9; t += step) {
        double x = left + (t - t0) * sx;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#ddd\" stroke-width=\"0.5\"/>"
                   "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#555\"/>"
                   "<text class=\"tick\" x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%.4g</text>\n",
                x, top - 4, x, axis, x, axis, x, axis + 5, x, axis + 17, fabs(t) < step * 1e-6 ? 0.0 : t);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">time</text>\n", left - 8, axis + 17);
    for (int r = 0; r < P; r++) {
        double y = top + r * row;
        fprintf(f, "<text x=\"5\" y=\"%.1f\">rank %d</text>\n", y + row * 0.6, r);
        for (int i = 0; i < ntasks[r]; i++) {
            char name[32];
            pipit__task_str(name, sizeof name, tasks[r][i]);
            double x = left + (start[r][i] - t0) * sx, w = (end[r][i] - start[r][i]) * sx;
            fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\" "
                       "stroke-width=\"0.5\"><title>%s rank %d: %.4g-%.4g</title></rect>\n",
                    x, y, w > 0.5 ? w : 0.5, row - 6, kind_color(tasks[r][i].kind), name, r, start[r][i], end[r][i]);
            /* the name if it fits the box, else the microbatch alone (the
             * colour says the kind), else nothing: the title names it */
            char mb[16];
            snprintf(mb, sizeof mb, "%d", (int)tasks[r][i].mb);
            const char *label = w > 6.0 * (double)strlen(name) + 4 ? name : w > 6.0 * (double)strlen(mb) + 3 ? mb : NULL;
            if (label)
                fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"white\" font-size=\"10\">%s</text>\n", x + 2,
                        y + row * 0.55, label);
        }
    }
    double y = axis + 45;
    static const char *kinds[] = {"F forward", "B backward (input grads)", "W weight grads", "BW backward (both)"};
    static const double kx[] = {0, 90, 270, 385};
    fprintf(f, "<g class=\"legend\">\n");
    for (int k = 0; k < 4; k++)
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                left + kx[k], y - 10, kind_color(k), left + kx[k] + 16, y, kinds[k]);
    fprintf(f, "</g>\n<text x=\"%.0f\" y=\"%.0f\">time %.6g .. %.6g</text>\n", left + 540, y, t0, t1);
    fprintf(f, "</svg>\n");
}
