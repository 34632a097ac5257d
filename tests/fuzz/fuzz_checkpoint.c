/*
 * fuzz_checkpoint.c — libFuzzer target: checkpoints and optimizer state
 * loaded into a model. A tiny pipelined GPT-2 (2 stages on 2 ranks, 1F1B)
 * is compiled once; each input is written to a file and goes through
 * pipit_checkpoint_open, the queries, pipit_gpt2_config_from_checkpoint,
 * pipit_checkpoint_load_into and pipit_optimizer_load.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "pipit.h"
#include "pipit_gpt2.h"
#include "pipit_io.h"
#include "util/common.h"

static pipit_program *model(void) {
    static pipit_graph *g;
    static pipit_schedule *s;
    static pipit_program *p;
    if (p) return p;
    pipit_gpt2_config c = {.vocab = 8, .max_ctx = 4, .ctx = 4, .layers = 2, .heads = 1, .dim = 4,
                           .batch = 1, .stages = 2, .dtype = PIPIT_F32};
    g = pipit_graph_new();
    PIPIT_ASSERT(g);
    pipit_val loss = pipit_gpt2_build(g, &c);
    PIPIT_ASSERT(pipit_graph_status(g) == PIPIT_STATUS_OK);
    PIPIT_ASSERT(pipit_schedule_build(PIPIT_SCHED_1F1B, 2, 1, 2, &s) == PIPIT_STATUS_OK);
    pipit_options o = {.schedule = s, .microbatches = 2};
    PIPIT_ASSERT(pipit_compile(g, loss, &o, &p) == PIPIT_STATUS_OK);
    PIPIT_ASSERT(pipit_gpt2_init(p, &c, 1) == PIPIT_STATUS_OK);
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pipit_program *p = model();
    const char *path = pipit_fuzz_file("in.safetensors", data, size);
    if (!path) return 0;
    pipit_checkpoint *ck = NULL;
    pipit_status s = pipit_checkpoint_open(path, &ck);
    if (s == PIPIT_STATUS_OK) {
        int n = pipit_checkpoint_num_tensors(ck);
        PIPIT_ASSERT(n >= 0 && pipit_checkpoint_tensor_name(ck, n) == NULL);
        for (int i = 0; i < n; i++) {
            const char *name = pipit_checkpoint_tensor_name(ck, i);
            int nd = -1;
            int64_t shape[PIPIT_MAX_DIMS];
            PIPIT_ASSERT(name && pipit_checkpoint_tensor_shape(ck, name, &nd, shape) == PIPIT_STATUS_OK);
            PIPIT_ASSERT(nd >= 0 && nd <= PIPIT_MAX_DIMS);
        }
        (void)pipit_checkpoint_meta(ck, "heads");
        pipit_gpt2_config c = {0};
        (void)pipit_gpt2_config_from_checkpoint(ck, &c);
        s = pipit_checkpoint_load_into(p, ck);
        if (getenv("PIPIT_FUZZ_VERBOSE")) fprintf(stderr, "load_into: %s %s\n", pipit_status_name(s), pipit_errmsg());
        PIPIT_ASSERT(s == PIPIT_STATUS_OK || pipit_errmsg()[0] != 0);
        pipit_checkpoint_free(ck);
    } else {
        PIPIT_ASSERT(ck == NULL && pipit_errmsg()[0] != 0);
    }
    int64_t next = -1;
    s = pipit_optimizer_load(p, path, &next);
    if (getenv("PIPIT_FUZZ_VERBOSE")) fprintf(stderr, "optimizer_load: %s %s\n", pipit_status_name(s), pipit_errmsg());
    PIPIT_ASSERT(s != PIPIT_STATUS_OK || next >= 0);
    return 0;
}
