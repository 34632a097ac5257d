/*
 * fileio.c — see fileio.h.
 */
#include "util/fileio.h"

#include "util/common.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int pipit__read_full(int fd, void *buf, size_t n, off_t off) {
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = EIO; /* the file ended (or shrank under us) */
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

pipit_status pipit__read_text(const char *path, const char *what, char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return pipit__err(PIPIT_STATUS_IO, "cannot open %s '%s': %s", what, path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = pipit__malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        if (cap > (64u << 20)) { /* JSON side files are a few kB */
            fclose(f);
            pipit__free(buf);
            return pipit__err(PIPIT_STATUS_FORMAT, "%s '%s' is larger than 64 MiB", what, path);
        }
        char *nb = pipit__realloc(buf, cap * 2);
        if (!nb) pipit__free(buf);
        buf = nb, cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return pipit__err(PIPIT_STATUS_NOMEM, "reading %s '%s': out of memory", what, path);
    if (err) {
        pipit__free(buf);
        return pipit__err(PIPIT_STATUS_IO, "reading %s '%s' failed", what, path);
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        pipit__free(buf);
        return pipit__err(PIPIT_STATUS_FORMAT, "%s '%s' holds a NUL byte: not JSON text", what, path);
    }
    *out = buf;
    return PIPIT_STATUS_OK;
}
