/*
 * timeline.c — SVG timelines (see timeline.h). Plain SVG 1.1 with a title
 * per box, so hovering in a browser names the task and its times.
 */
#include "inspect/timeline.h"

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

void pipit__timeline_svg(FILE *f, const char *title, int P, const int *ntasks, pipit_task *const *tasks,
                         double *const *start, double *const *end) {
    double t0 = 1e300, t1 = 0;
    for (int r = 0; r < P; r++)
        for (int i = 0; i < ntasks[r]; i++) {
            if (start[r][i] < t0) t0 = start[r][i];
            if (end[r][i] > t1) t1 = end[r][i];
        }
    if (t1 <= t0) t1 = t0 + 1;
    const double left = 70, width = 1100, row = 28, top = 40;
    double sx = width / (t1 - t0);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n", left + width + 20, top + row * P + 40);
    fprintf(f, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">", left);
    put_xml(f, title);
    fputs("</text>\n", f);
    for (int r = 0; r < P; r++) {
        double y = top + r * row;
        fprintf(f, "<text x=\"5\" y=\"%.1f\">rank %d</text>\n", y + row * 0.6, r);
        for (int i = 0; i < ntasks[r]; i++) {
            char name[32];
            pipit__task_str(name, sizeof name, tasks[r][i]);
            double x = left + (start[r][i] - t0) * sx, w = (end[r][i] - start[r][i]) * sx;
            fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\" "
                       "stroke-width=\"0.5\"><title>%s: %.6g .. %.6g</title></rect>\n",
                    x, y, w > 0.5 ? w : 0.5, row - 6, kind_color(tasks[r][i].kind), name, start[r][i], end[r][i]);
            if (w > 6.5 * (double)strlen(name) + 4) /* the label fits the box */
                fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"white\">%s</text>\n", x + 2, y + row * 0.55, name);
        }
    }
    double y = top + row * P + 20;
    static const char *kinds[] = {"F", "B", "W", "BW"};
    for (int k = 0; k < 4; k++)
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                left + k * 60.0, y - 10, kind_color(k), left + k * 60.0 + 16, y, kinds[k]);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">time %.6g .. %.6g</text>\n", left + 260, y, t0, t1);
    fprintf(f, "</svg>\n");
}
