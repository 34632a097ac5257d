/*
 * aligned.h — internals of pipit__malloc_aligned / pipit__free_aligned
 * (declared in util/common.h; aligned.c says why large blocks are mapped).
 */
#ifndef PIPIT_UTIL_ALIGNED_H
#define PIPIT_UTIL_ALIGNED_H

#include "util/common.h"

/* Blocks of this many bytes and more (after rounding to 64) are mapped by
 * pipit (mmap / munmap), smaller ones come from malloc. */
#define PIPIT__MAP_MIN ((size_t)1 << 20)

/* The mappings pipit__malloc_aligned holds now, and their bytes (page
 * rounded): what a leak check of the large blocks reads. */
long pipit__mapped_blocks(void);
size_t pipit__mapped_bytes(void);

/* 1 if failure injection (pipit__alloc_fail_after) fails this allocation. */
int pipit__alloc_should_fail(void);

#endif
