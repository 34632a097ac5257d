/*
 * test_backend.c — the backend seam: the CPU backend has a kernel for
 * exactly the ops that run (ir/ops.def), unknown backends are refused by
 * name, and its memory and post-loop primitives behave as the vtable says.
 */
#include <string.h>

#include "backend/backend.h"
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
    for (int t = 0; t < 2; t++) be->accumulate(PIPIT_F32, acc, a, 100, 1, t, 2);
    for (int t = 0; t < 3; t++) be->accumulate(PIPIT_F32, acc, a, 100, 0, t, 3);
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
