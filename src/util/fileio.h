/*
 * fileio.h — small POSIX file helpers shared by the readers (data,
 * safetensors, JSON side files): whole reads that survive EINTR and short
 * reads, and whole text files.
 */
#ifndef PIPIT_FILEIO_H
#define PIPIT_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

#include "pipit.h"

/* Reads exactly n bytes at offset off. Returns 0, or -1 with errno set
 * (EIO if the file ended early). */
int pipit__read_full(int fd, void *buf, size_t n, off_t off);

/* The whole of a text file (NUL-terminated; free with pipit__free), at most
 * 64 MiB; `what` names it in messages ("hardware file"). IO, FORMAT (too
 * large, a NUL byte), NOMEM. */
pipit_status pipit__read_text(const char *path, const char *what, char **out);

#endif
