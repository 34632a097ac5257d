/*
 * models.h — what the model builders (gpt2.c, llama.c) share: the even
 * split of blocks over stages, the seeded per-name normal init that makes
 * an init independent of the pipeline layout, and the reading of small
 * integers from checkpoint metadata. Internal to src/models.
 */
#ifndef PIPIT_MODELS_H
#define PIPIT_MODELS_H

#include <stdint.h>

#include "pipit.h"
#include "pipit_io.h"

/* First layer of stage s of `layers` blocks split evenly over `stages`
 * (the first layers mod stages stages get one more); -1 and a message
 * naming fn for a NULL config (cfg_null) or s outside 0..stages. */
int pipit__models_first_layer(int cfg_null, int layers, int stages, int s, const char *fn);

/* How one param is initialised: every element the constant `value`
 * (std = 0), or drawn from N(0, std). */
typedef struct {
    double std, value;
} pipit__init_rule;

/* Sets every param of p from its rule (rule(name, ndim, ctx)), each
 * tensor's normal stream seeded by seed ^ hash(name): the same weights
 * whatever the pipeline layout. fn names the caller in messages. */
pipit_status pipit__models_init(pipit_program *p, pipit_dtype dt, uint64_t seed,
                                pipit__init_rule (*rule)(const char *name, int ndim, const void *ctx),
                                const void *ctx, const char *fn);

/* Metadata `key` of ck as a positive int: 1 and *out when present and
 * valid, 0 when absent; -1 (FORMAT set, naming the file and the key) for
 * anything but digits up to INT32_MAX. */
int pipit__models_meta_count(const pipit_checkpoint *ck, const char *key, int *out);
/* Metadata `key` as a positive finite number: 1, 0 (absent) or -1 as above. */
int pipit__models_meta_positive(const pipit_checkpoint *ck, const char *key, double *out);

#endif
