/*
 * test_backend.c — the backend seam: the CPU backend has a kernel for
 * exactly the ops that run (ir/ops.def), unknown backends are refused by
 * name, and its memory and post-loop primitives behave as the vtable says;
 * the device members (no-ops on the cpu), how "cuda" is found or refused by
 * this build, options.device / options.tf32 at compile, and which messages
 * carry device memory.
 */
#include <string.h>

#include "backend/backend.h"
#include "pipit_gpt2.h"
#include "runtime/transport.h"
#include "test.h"

PIPIT_TEST(backend_cpu_covers_op_table) {
    const pipit__backend *be = pipit__backend_find("cpu");
    ASSERT_TRUE(be != NULL);
    ASSERT_TRUE(strcmp(be->name, "cpu") == 0);
    for (int op = 0; op < PIPIT_OP_COUNT; op++) {
        pipit__node n = {0};
        n.op = (uint16_t)op;
        int runs = pipit__node_runs(&n);
        if (runs != (be->ops[op] != NULL)) fprintf(stderr, "op %s: runs=%d kernel=%p\n", pipit__ops[op].name, runs, (void *)be->ops[op]);
        ASSERT_EQ_I64(runs, be->ops[op] != NULL);
    }
}

PIPIT_TEST(backend_unknown_name) {
    ASSERT_TRUE(pipit__backend_find("tpu") == NULL);
    ASSERT_TRUE(strstr(pipit_errmsg(), "no backend named 'tpu'") != NULL);
    ASSERT_TRUE(pipit__backend_find(NULL) == NULL);
}

PIPIT_TEST(backend_cpu_memory_and_postloop) {
    const pipit__backend *be = pipit__backend_find("cpu");
    float *a = be->alloc(100 * sizeof(float));
    ASSERT_TRUE(a != NULL);
    ASSERT_EQ_I64((int64_t)((uintptr_t)a % 64), 0);
    for (int i = 0; i < 100; i++) ASSERT_TRUE(a[i] == 0.0f); /* zeroed */
    float host[100], back[100];
    for (int i = 0; i < 100; i++) host[i] = (float)i * 0.5f;
    be->upload(a, host, sizeof host);
    be->download(back, a, sizeof back);
    ASSERT_TRUE(memcmp(host, back, sizeof host) == 0);
    /* accumulate on two threads' slices: first copies, then adds */
    float *acc = be->alloc(100 * sizeof(float));
    for (int t = 0; t < 2; t++) be->accumulate(PIPIT_F32, PIPIT_F32, acc, a, 100, 1, t, 2);
    for (int t = 0; t < 3; t++) be->accumulate(PIPIT_F32, PIPIT_F32, acc, a, 100, 0, t, 3);
    for (int i = 0; i < 100; i++) ASSERT_TRUE(acc[i] == 2 * host[i]);
    /* sum of uses in use order, then the sum of squares by hand */
    void *srcs[2] = {a, acc};
    float *g = be->alloc(100 * sizeof(float));
    be->sum_uses(PIPIT_F32, g, srcs, 2, 0, 100);
    double ss = 0;
    for (int i = 0; i < 100; i++) {
        ASSERT_TRUE(g[i] == host[i] + 2 * host[i]);
        ss += (double)g[i] * g[i];
    }
    ASSERT_NEAR_F64(be->sumsq(PIPIT_F32, g, 0, 100), ss, 1e-9 * ss);
    be->sum_uses(PIPIT_F32, g, srcs, 0, 10, 20); /* no uses: zero */
    for (int i = 10; i < 20; i++) ASSERT_TRUE(g[i] == 0.0f);
    /* SGD: w -= lr * g * clip */
    be->sgd(PIPIT_F32, 0.5, 2.0, a, acc, 0, 100);
    for (int i = 0; i < 100; i++) ASSERT_TRUE(a[i] == (float)((double)host[i] - 0.5 * (2.0 * host[i] * 2.0)));
    be->free(a);
    be->free(acc);
    be->free(g);
    be->free(NULL);
}

PIPIT_TEST(backend_cpu_reserve_then_zero) {
    const pipit__backend *be = pipit__backend_find("cpu");
    ASSERT_TRUE(be->reserve != NULL && be->zero != NULL);
    unsigned char *a = be->reserve(1000);
    ASSERT_TRUE(a != NULL);
    ASSERT_EQ_I64((int64_t)((uintptr_t)a % 64), 0);
    memset(a, 0xab, 1000);
    be->zero(a, 1000);
    for (int i = 0; i < 1000; i++) ASSERT_TRUE(a[i] == 0);
    be->free(a);
    ASSERT_TRUE(be->reserve(SIZE_MAX - 8) == NULL); /* no wrap in the rounding */
}

/* ---- the device members and the cuda backend's place in the registry ---- */

PIPIT_TEST(backend_cpu_device_members) {
    const pipit__backend *be = pipit__backend_find("cpu");
    ASSERT_TRUE(be->host_memory == 1);
    ASSERT_TRUE(be->devices && be->devices() == 1);
    ASSERT_TRUE(be->bind && be->sync);
    be->bind(3, 0, 0); /* nothing to bind on the host */
    ASSERT_OK(be->sync(3));
    ASSERT_TRUE(be->sumsq_chunks == NULL); /* the runtime adds chunk by chunk, in cache */
}

PIPIT_TEST(backend_cuda_by_name) {
    const pipit__backend *be = pipit__backend_find("cuda");
#ifdef PIPIT_HAVE_CUDA
    ASSERT_TRUE(be != NULL);
    ASSERT_TRUE(strcmp(be->name, "cuda") == 0);
    ASSERT_TRUE(be->host_memory == 0);
    ASSERT_TRUE(be->bind && be->sync && be->devices && be->sumsq_chunks);
    ASSERT_TRUE(pipit_have_cuda() == 1);
    be->init();
    ASSERT_TRUE(be->devices() == pipit_cuda_device_count());
    /* a kernel exactly where the cpu has one (pipit_cuda_tests checks it
     * too, but skips as a whole without a GPU; this runs everywhere) */
    const pipit__backend *cpu = pipit__backend_find("cpu");
    for (int op = 0; op < PIPIT_OP_COUNT; op++)
        if ((cpu->ops[op] != NULL) != (be->ops[op] != NULL))
            PIPIT_FAIL_("op %s: cpu kernel %d, cuda kernel %d", pipit__ops[op].name, cpu->ops[op] != NULL,
                        be->ops[op] != NULL);
#else
    ASSERT_TRUE(be == NULL);
    ASSERT_MSG_HAS("this build has no cuda backend (configure with -DPIPIT_CUDA=ON)");
    ASSERT_TRUE(pipit_have_cuda() == 0);
    ASSERT_TRUE(pipit_cuda_device_count() == 0);
    ASSERT_MSG_HAS("configure with -DPIPIT_CUDA=ON");
#endif
    ASSERT_TRUE(pipit__backend_find("gpu") == NULL); /* the list names what this build has */
    ASSERT_MSG_HAS("this build has: cpu");
}

/* options.device and options.tf32 at compile: unknown devices, a device
 * this build or machine lacks, TF32 on the cpu. */
static pipit_status compile_on(const char *device, int tf32) {
    pipit_gpt2_config c = {.vocab = 32, .max_ctx = 8, .ctx = 8, .layers = 1, .heads = 2, .dim = 16, .batch = 2,
                           .stages = 1, .dtype = PIPIT_F32};
    pipit_graph *g = pipit_graph_new();
    pipit_val loss = pipit_gpt2_build(g, &c);
    pipit_program *p = NULL;
    pipit_status s = pipit_compile(g, loss, &(pipit_options){.device = device, .tf32 = tf32}, &p);
    pipit_program_free(p);
    pipit_graph_free(g);
    return s;
}

PIPIT_TEST(compile_device_option) {
    ASSERT_OK(compile_on(NULL, 0));
    ASSERT_OK(compile_on("", 0));
    ASSERT_OK(compile_on("cpu", 0));
    ASSERT_STATUS(compile_on("tpu", 0), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("no backend named 'tpu'");
    ASSERT_STATUS(compile_on("cpu", 1), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.tf32 needs options.device \"cuda\"");
    ASSERT_STATUS(compile_on(NULL, 1), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(compile_on("cpu", 2), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("options.tf32 must be 0");
#ifndef PIPIT_HAVE_CUDA
    ASSERT_STATUS(compile_on("cuda", 0), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("this build has no cuda backend (configure with -DPIPIT_CUDA=ON)");
#else
    if (pipit_cuda_device_count() == 0) {
        ASSERT_STATUS(compile_on("cuda", 0), PIPIT_STATUS_RUNTIME);
        ASSERT_MSG_HAS("no CUDA device found");
        ASSERT_STATUS(compile_on("cuda", 1), PIPIT_STATUS_RUNTIME);
    }
#endif
}

/* Which messages carry backend memory (moved by the backend's download /
 * upload on a device backend) and which carry host doubles. */
PIPIT_TEST(transport_tags_on_device) {
    ASSERT_TRUE(pipit__tag_on_device(pipit__tag(PIPIT_TAG_VALUE, 5, 3)));
    ASSERT_TRUE(pipit__tag_on_device(pipit__tag(PIPIT_TAG_ACC, 5, 1)));
    ASSERT_TRUE(pipit__tag_on_device(pipit__tag(PIPIT_TAG_DP_REDUCE, 2, 1)));
    ASSERT_TRUE(pipit__tag_on_device(pipit__tag(PIPIT_TAG_DP_GRAD, 2, 1)));
    ASSERT_TRUE(pipit__tag_on_device(pipit__tag(PIPIT_TAG_DP_PARAM, 2, 1)));
    ASSERT_TRUE(!pipit__tag_on_device(pipit__tag(PIPIT_TAG_NORM, 2, 0)));
    ASSERT_TRUE(!pipit__tag_on_device(pipit__tag(PIPIT_TAG_LOSS, 0, 0)));
    ASSERT_TRUE(!pipit__tag_on_device(pipit__tag(PIPIT_TAG_DP_SUMSQ, 2, 1)));
}
