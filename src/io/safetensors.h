/*
 * safetensors.h — read and write the safetensors checkpoint format
 * (8-byte little-endian header length, a JSON header, then raw data), the
 * format Hugging Face uses, so real GPT-2 weights load and our checkpoints
 * open elsewhere. Reading validates everything (offsets, sizes, overlaps,
 * duplicates); writing is atomic (tmp file, fsync, rename).
 */
#ifndef PIPIT_TRAIN_SAFETENSORS_H
#define PIPIT_TRAIN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "pipit.h"

/* One tensor. In a file read by pipit__st_read, `name` and `data` point into
 * memory owned by the file (valid until pipit__st_free). `data` is 64-byte
 * aligned when the tensor starts at data-buffer offset 0 mod 64 (always for
 * files written by pipit__st_write with 8-aligned sizes); files from other
 * writers may put tensors at any offset, so copy out with memcpy. */
typedef struct {
    char *name;
    pipit_dtype dtype;
    int ndim;
    int64_t shape[PIPIT_MAX_DIMS];
    size_t nbytes;
    const void *data;
} pipit__st_tensor;

/* Opaque: holds the whole file in memory, the tensors and the metadata. */
typedef struct pipit__st_file pipit__st_file;

/* Reads and validates a whole file. PIPIT_STATUS_IO if it cannot be read,
 * PIPIT_STATUS_FORMAT (message names the file and the tensor) if malformed:
 * a bad header, tensors that do not tile the data buffer (overlaps, holes,
 * trailing bytes), or a checksum that does not match; PIPIT_STATUS_NOMEM.
 * Supported dtypes: F32, F64, BF16, I32. */
pipit_status pipit__st_read(const char *path, pipit__st_file **out);
/* 1 if the file carried checksums (pipit__st_write's) and they matched;
 * 0 for a file without them (older pipit, other writers). */
int pipit__st_checksummed(const pipit__st_file *f);
/* Number of tensors; tensors are in file (data offset) order. */
int pipit__st_count(const pipit__st_file *f);
/* Tensor i (0 <= i < count), NULL if out of range. */
const pipit__st_tensor *pipit__st_get(const pipit__st_file *f, int i);
/* Tensor by name (binary search), NULL if absent. */
const pipit__st_tensor *pipit__st_find(const pipit__st_file *f, const char *name);
/* Value of a "__metadata__" entry, NULL if absent. */
const char *pipit__st_meta(const pipit__st_file *f, const char *key);
/* Accepts NULL. */
void pipit__st_free(pipit__st_file *f);

/* Writes `n` tensors (in the given order) atomically: to "<path>.tmp.<pid>"
 * in the same directory, fflush + fsync, then rename over `path`; on any
 * failure the tmp file is removed and `path` is untouched. The header is
 * padded with spaces to a multiple of 8 bytes. meta: NULL-terminated
 * key,value,key,value,... list, or NULL; the writer adds the checksums
 * "crc32c:NAME" (CRC-32C of tensor NAME's bytes, 8 hex digits) and
 * "crc32c" (of the header: every other metadata entry in key order, then
 * every tensor's name, dtype, shape and offsets in name order).
 * PIPIT_STATUS_INVALID for bad arguments (duplicate names or metadata
 * keys, a metadata key starting with "crc32c", nbytes !=
 * prod(shape)*dtype size, ...), PIPIT_STATUS_IO if writing fails. */
pipit_status pipit__st_write(const char *path, const pipit__st_tensor *tensors, int n,
                             const char *const *meta);

#endif
