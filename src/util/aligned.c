/*
 * aligned.c — pipit__malloc_aligned / pipit__free_aligned: the CPU
 * backend's blocks (parameters, gradients, moments, the activation arena,
 * feeds, ZeRO's full blocks) and safetensors' file images.
 *
 * Blocks of PIPIT__MAP_MIN bytes and more are mapped by pipit itself
 * (anonymous mmap, munmap on free), smaller ones come from malloc. So a
 * large block's placement does not depend on the process that loaded the
 * library: glibc's malloc raises its mmap threshold as large blocks are
 * freed (up to 32 MiB), and a caller may have set it, or turned mmap off
 * (mallopt, MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES=glibc.malloc.mmap_max=0),
 * so the same malloc call can land in a fresh mapping in the CLI and on the
 * brk heap of a python3 process, or the other way round
 * (docs/benchmarks.md section 17). Here every large block is a fresh,
 * page-aligned, zero-filled-on-demand mapping, in the CLI and in Python
 * alike, and goes back to the system when freed.
 *
 * Both kinds carry a 64-byte header just before the pointer (the pointer
 * stays 64-byte aligned; in a mapping it sits 64 bytes past a page start,
 * where glibc's own mmapped posix_memalign(64) blocks sat), holding a magic
 * number for the kind and the mapping's length: free checks it, so a
 * pointer that is not one of these aborts instead of corrupting memory.
 *
 * AddressSanitizer sees the malloc'd ones as any heap block; for a mapping,
 * the header and the slack between the (64-byte rounded) block and the
 * mapping's end are poisoned, so a read or write past the block's end
 * within its last page is reported, and unpoisoned again before munmap.
 * LeakSanitizer does not scan mappings: pipit__mapped_blocks() counts the
 * live ones (and pipit__mapped_bytes() their bytes), so a test can check
 * that freeing a program, a session or a file gives every mapping back
 * (tests/test_aligned_alloc.c).
 */
#include "util/aligned.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define PIPIT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PIPIT_ASAN 1
#endif
#endif
#ifdef PIPIT_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define HDR 64
#define MAGIC_HEAP UINT64_C(0x70697069745f6870) /* "pipit_hp" */
#define MAGIC_MAP UINT64_C(0x70697069745f6d70)  /* "pipit_mp" */

typedef struct {
    uint64_t magic;
    uint64_t map_len; /* the mapping's bytes (MAGIC_MAP) */
} block_header;

static _Atomic long live_maps;
static _Atomic size_t live_map_bytes;

long pipit__mapped_blocks(void) { return atomic_load(&live_maps); }
size_t pipit__mapped_bytes(void) { return atomic_load(&live_map_bytes); }

static size_t page_size(void) {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

void *pipit__malloc_aligned(size_t n) {
    if (pipit__alloc_should_fail()) return NULL;
    size_t page = page_size();
    if (n > SIZE_MAX / 2 - HDR - page) return NULL; /* no wrap below, and no such block exists */
    size_t body = n ? (n + 63) / 64 * 64 : 64;
    unsigned char *base;
    block_header h = {MAGIC_HEAP, 0};
    if (body >= PIPIT__MAP_MIN) {
        size_t len = (HDR + body + page - 1) / page * page;
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        base = m;
        h = (block_header){MAGIC_MAP, len};
        atomic_fetch_add(&live_maps, 1);
        atomic_fetch_add(&live_map_bytes, len);
        POISON(base + HDR + body, len - HDR - body);
    } else {
        void *m = NULL;
        if (posix_memalign(&m, 64, HDR + body) != 0) return NULL;
        base = m;
    }
    *(block_header *)base = h;
    POISON(base, HDR);
    return base + HDR;
}

void pipit__free_aligned(void *p) {
    if (!p) return;
    unsigned char *base = (unsigned char *)p - HDR;
    UNPOISON(base, HDR);
    block_header h = *(block_header *)base;
    if (h.magic == MAGIC_HEAP) {
        ((block_header *)base)->magic = 0;
        free(base);
        return;
    }
    PIPIT_ASSERT(h.magic == MAGIC_MAP && "pipit__free_aligned of a block it did not allocate (or freed twice)");
    UNPOISON(base, h.map_len);
    ((block_header *)base)->magic = 0;
    atomic_fetch_sub(&live_maps, 1);
    atomic_fetch_sub(&live_map_bytes, (size_t)h.map_len);
    int rc = munmap(base, (size_t)h.map_len);
    PIPIT_ASSERT(rc == 0);
}
