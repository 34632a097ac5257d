/*
 * fuzz_safetensors.c — libFuzzer target: the safetensors reader
 * (pipit__st_read) on arbitrary bytes. A file it accepts must be
 * self-consistent: every tensor findable by name, its bytes readable, and
 * writing it back then reading that gives the same tensors.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "io/safetensors.h"
#include "util/common.h"

static volatile uint64_t sink; /* keeps touch() from being optimised away */

static uint64_t touch(const void *p, size_t n) { /* reads every byte (ASan checks) */
    const unsigned char *b = p;
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h = h * 31 + b[i];
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = pipit_fuzz_file("in.safetensors", data, size);
    if (!path) return 0;
    pipit__st_file *f = NULL;
    pipit_status s = pipit__st_read(path, &f);
    if (s) {
        PIPIT_ASSERT(f == NULL);
        PIPIT_ASSERT(pipit_errmsg()[0] != 0);
        return 0;
    }
    int n = pipit__st_count(f);
    PIPIT_ASSERT(n >= 0);
    PIPIT_ASSERT(pipit__st_get(f, n) == NULL && pipit__st_get(f, -1) == NULL);
    pipit__st_tensor *copy = pipit__calloc((size_t)(n ? n : 1), sizeof *copy);
    PIPIT_ASSERT(copy);
    for (int i = 0; i < n; i++) {
        const pipit__st_tensor *t = pipit__st_get(f, i);
        PIPIT_ASSERT(t && t->name);
        PIPIT_ASSERT(t->ndim >= 0 && t->ndim <= PIPIT_MAX_DIMS);
        PIPIT_ASSERT(pipit__st_find(f, t->name) == t);
        sink += touch(t->name, strlen(t->name));
        if (t->nbytes) sink += touch(t->data, t->nbytes);
        copy[i] = *t;
    }
    (void)pipit__st_meta(f, "format");
    (void)pipit__st_meta(f, "");
    (void)pipit__st_find(f, "");
    /* Round trip (metadata not compared: the reader exposes no listing). */
    const char *out = pipit_fuzz_file("out.safetensors", NULL, 0);
    if (out && pipit__st_write(out, copy, n, NULL) == PIPIT_STATUS_OK) {
        pipit__st_file *g = NULL;
        s = pipit__st_read(out, &g);
        if (s) {
            fprintf(stderr, "re-reading a written file failed: %s\n", pipit_errmsg());
            PIPIT_ASSERT(!"a file pipit__st_write wrote must read back");
        }
        PIPIT_ASSERT(pipit__st_count(g) == n);
        for (int i = 0; i < n; i++) {
            const pipit__st_tensor *a = &copy[i], *b = pipit__st_find(g, a->name);
            PIPIT_ASSERT(b && b->dtype == a->dtype && b->ndim == a->ndim && b->nbytes == a->nbytes);
            PIPIT_ASSERT(memcmp(b->shape, a->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0);
            PIPIT_ASSERT(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
        }
        pipit__st_free(g);
    }
    pipit__free(copy);
    pipit__st_free(f);
    return 0;
}
