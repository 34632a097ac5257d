/*
 * test_aligned_alloc.c — pipit__malloc_aligned (util/aligned.c): blocks of
 * PIPIT__MAP_MIN bytes and more are pipit's own mappings, smaller ones
 * malloc's; both 64-byte aligned and writable to their rounded end; an
 * injected failure maps nothing; and every mapping a program, a file or a
 * training session takes is given back when it is freed (the leak check of
 * the mapped blocks, which LeakSanitizer does not scan). Under ASan the
 * slack past a mapped block's end is poisoned.
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "pipit_gpt2.h"
#include "pipit_io.h"
#include "test.h"
#include "util/aligned.h"

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifdef TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

PIPIT_TEST(aligned_alloc_maps_large_blocks) {
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    long m0 = pipit__mapped_blocks();
    size_t b0 = pipit__mapped_bytes();
    /* small: malloc'd, nothing mapped */
    unsigned char *s = pipit__malloc_aligned(1000);
    ASSERT_TRUE(s != NULL);
    ASSERT_EQ_I64((int64_t)((uintptr_t)s % 64), 0);
    ASSERT_EQ_I64(pipit__mapped_blocks(), m0);
    memset(s, 0xab, 1024); /* the rounded end is the caller's */
    /* one byte under the threshold after rounding: still malloc */
    unsigned char *u = pipit__malloc_aligned(PIPIT__MAP_MIN - 64);
    ASSERT_TRUE(u != NULL);
    ASSERT_EQ_I64(pipit__mapped_blocks(), m0);
    /* rounds up to the threshold: mapped, one page-rounded mapping whose
     * block sits 64 bytes past its start */
    unsigned char *l = pipit__malloc_aligned(PIPIT__MAP_MIN - 63);
    ASSERT_TRUE(l != NULL);
    ASSERT_EQ_I64((int64_t)((uintptr_t)l % 64), 0);
    ASSERT_EQ_I64((int64_t)((uintptr_t)(l - 64) % page), 0);
    ASSERT_EQ_I64(pipit__mapped_blocks(), m0 + 1);
    ASSERT_EQ_I64((int64_t)(pipit__mapped_bytes() - b0), (int64_t)((PIPIT__MAP_MIN + 64 + page - 1) / page * page));
    for (size_t i = 0; i < PIPIT__MAP_MIN; i++) ASSERT_TRUE(l[i] == 0); /* fresh: zero-filled */
    memset(l, 0x5a, PIPIT__MAP_MIN);
#ifdef TEST_ASAN
    ASSERT_TRUE(!__asan_address_is_poisoned(l + PIPIT__MAP_MIN - 1));
    ASSERT_TRUE(__asan_address_is_poisoned(l + PIPIT__MAP_MIN)); /* past the block, within its page */
    ASSERT_TRUE(__asan_address_is_poisoned(l - 1));               /* the header */
#endif
    unsigned char *big = pipit__malloc_aligned((size_t)64 << 20);
    ASSERT_TRUE(big != NULL);
    ASSERT_EQ_I64(pipit__mapped_blocks(), m0 + 2);
    big[((size_t)64 << 20) - 1] = 1;
    pipit__free_aligned(big);
    pipit__free_aligned(l);
    pipit__free_aligned(u);
    pipit__free_aligned(s);
    pipit__free_aligned(NULL);
    ASSERT_EQ_I64(pipit__mapped_blocks(), m0);
    ASSERT_EQ_I64((int64_t)pipit__mapped_bytes(), (int64_t)b0);
    /* failure injection and sizes no mapping can hold: NULL, nothing mapped */
    pipit__alloc_fail_after(1);
    ASSERT_TRUE(pipit__malloc_aligned((size_t)8 << 20) == NULL);
    pipit__alloc_fail_after(-1);
    ASSERT_TRUE(pipit__malloc_aligned(SIZE_MAX) == NULL);
    ASSERT_TRUE(pipit__malloc_aligned(SIZE_MAX - 64) == NULL);
    ASSERT_EQ_I64(pipit__mapped_blocks(), m0);
}

/* A GPT-2 whose parameter, gradient, moment blocks are over the threshold:
 * compiled, stepped, saved and loaded, then freed; every mapping it took is
 * given back. */
PIPIT_TEST(aligned_alloc_program_gives_back_its_mappings) {
    long m0 = pipit__mapped_blocks();
    size_t b0 = pipit__mapped_bytes();
    pipit_gpt2_config c = {.vocab = 512, .max_ctx = 16, .ctx = 16, .layers = 1, .heads = 2, .dim = 128, .batch = 2,
                           .stages = 1, .dtype = PIPIT_F32};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_program *p = NULL;
    ASSERT_OK(pipit_compile(g, loss, &(pipit_options){.optimizer = pipit_adamw(1e-3, 0.9, 0.95, 1e-8, 0.1)}, &p));
    ASSERT_OK(pipit_gpt2_init(p, &c, 1));
    ASSERT_TRUE(pipit__mapped_blocks() >= m0 + 4); /* at least parameters, gradients, two moments */
    int32_t tok[32], tgt[32], pos[32];
    for (int i = 0; i < 32; i++) tok[i] = (i * 7) % 512, tgt[i] = (i * 11 + 3) % 512;
    pipit_feed f[3];
    ASSERT_OK(pipit_gpt2_feeds(&c, tok, tgt, pos, f));
    pipit_metrics m;
    ASSERT_OK(pipit_step_feeds(p, f, 3, 3, 1, &m));
    ASSERT_TRUE(m.loss > 0 && m.loss < 100);
    const char *path = pipit_test_path("aligned_alloc.ckpt");
    ASSERT_OK(pipit_checkpoint_save(p, path, NULL));
    long before_open = pipit__mapped_blocks();
    pipit_checkpoint *ck = NULL;
    ASSERT_OK(pipit_checkpoint_open(path, &ck)); /* the file's image (over 1 MiB): a mapping */
    ASSERT_EQ_I64(pipit__mapped_blocks(), before_open + 1);
    pipit_checkpoint_free(ck);
    ASSERT_EQ_I64(pipit__mapped_blocks(), before_open);
    ASSERT_OK(pipit_checkpoint_load(p, path));
    ASSERT_EQ_I64(pipit__mapped_blocks(), before_open);
    pipit_program_free(p);
    pipit_graph_free(g);
    ASSERT_EQ_I64(pipit__mapped_blocks(), m0);
    ASSERT_EQ_I64((int64_t)pipit__mapped_bytes(), (int64_t)b0);
}
