/*
 * crc32c.c — CRC-32C (crc32c.h): reflected polynomial 0x82f63b78, initial
 * and final XOR 0xffffffff. With SSE4.2 (x86-64-v2 and later, which the
 * build's -march enables) eight bytes per crc32 instruction, several GB/s,
 * so verifying a checkpoint costs little next to reading it; otherwise a
 * byte-at-a-time table built once.
 */
#include "util/crc32c.h"

#include <string.h>

#ifdef __SSE4_2__
#include <nmmintrin.h>

static uint32_t update(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8); /* unaligned: tensors of other writers start anywhere */
        c64 = _mm_crc32_u64(c64, w);
    }
    c = (uint32_t)c64;
    for (; n; p++, n--) c = _mm_crc32_u8(c, *p);
    return c;
}
#else
#include <pthread.h>

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        table[i] = c;
    }
}

static uint32_t update(uint32_t c, const unsigned char *p, size_t n) {
    pthread_once(&table_once, make_table);
    for (; n; p++, n--) c = table[(c ^ *p) & 0xff] ^ (c >> 8);
    return c;
}
#endif

uint32_t pipit__crc32c(uint32_t crc, const void *data, size_t n) {
    return ~update(~crc, (const unsigned char *)data, n);
}
