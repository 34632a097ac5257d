/*
 * fileio.h — small POSIX file helpers shared by the readers (data,
 * safetensors): whole reads that survive EINTR and short reads.
 */
#ifndef PIPIT_FILEIO_H
#define PIPIT_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

/* Reads exactly n bytes at offset off. Returns 0, or -1 with errno set
 * (EIO if the file ended early). */
int pipit__read_full(int fd, void *buf, size_t n, off_t off);

#endif
