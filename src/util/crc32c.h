/*
 * crc32c.h — CRC-32C (Castagnoli, the iSCSI / ext4 / safetensors-tooling
 * checksum): what checkpoints carry per tensor and for their header, so a
 * flipped bit is found on load. SSE4.2's crc32 instruction where the build
 * has it, a table otherwise; the same values either way.
 */
#ifndef PIPIT_CRC32C_H
#define PIPIT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC-32C over n more bytes: crc = 0 to start, and the result
 * of one call is the next call's crc (pipit__crc32c(0, "123456789", 9) is
 * 0xe3069283). */
uint32_t pipit__crc32c(uint32_t crc, const void *data, size_t n);

#endif
