/*
 * test_attn_pairs.c — bf16 attention with its products on pairs tiles
 * (attn_pairs.c) against the fp32 blocked attention (fp32 BLAS) run on the
 * same bf16 values widened, each output rounded once to bf16: the oracle
 * is an independent implementation of the same mathematics.
 *
 * attn_pairs.c claims the fp32 panels' precision (P and dS split into two
 * bf16 each, every product exact, fp32 sums), so its bf16 outputs must be
 * the correctly rounded fp32 values except where the fp32 value lies
 * within the two ways' last-bit differences of a rounding boundary: at
 * most one bf16 ulp apart anywhere, and equal for all but a few percent
 * of the elements. Rounding P or dS to one bf16 (what PyTorch's autocast
 * does) moves a third or more of them and fails. Also: the bits at 1 and 3
 * threads, and the vdpbf16ps kernel against its emulation (where the CPU
 * has AVX512-BF16), over causal, full and offset (context-parallel) masks,
 * grouped-query heads, an odd head size and odd lengths. Out of memory
 * for its buffers (RLIMIT_AS, in a child) the op fails with a message
 * and zeroed outputs instead of taking the fp32 panels' way on one thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/kernels.h"
#include "test.h"

typedef struct {
    int64_t B, Tq, Tk, Hq, Hkv, D;
    int causal;
} attn_case;

static uint64_t rng = 0x9e3779b97f4a7c15u;
static float urand_pm(float amp) { /* uniform in [-amp, amp), a bf16 value */
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    float u = (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    return pipit__bf16_to_f32(pipit__bf16_from_f32(u * amp));
}

typedef struct {
    pipit__attn_dims a;
    int64_t nq, nk; /* elements of q (and out, dout) and of k (and v) */
    pipit__bf16 *q, *k, *v, *dout;
} problem;

static int problem_make(problem *p, const attn_case *c) {
    p->a = (pipit__attn_dims){c->B,         c->Tq,       c->Tk,       c->Hq,     c->Hkv,
                              c->D,         c->Hq * c->D, c->Hkv * c->D, c->Hkv * c->D, c->Hq * c->D,
                              c->causal,    1.0 / sqrt((double)c->D)};
    p->nq = c->B * c->Tq * c->Hq * c->D, p->nk = c->B * c->Tk * c->Hkv * c->D;
    p->q = malloc(sizeof *p->q * (size_t)p->nq), p->dout = malloc(sizeof *p->dout * (size_t)p->nq);
    p->k = malloc(sizeof *p->k * (size_t)p->nk), p->v = malloc(sizeof *p->v * (size_t)p->nk);
    if (!p->q || !p->dout || !p->k || !p->v) return 0;
    for (int64_t i = 0; i < p->nq; i++) p->q[i] = pipit__bf16_from_f32(urand_pm(2.0f));
    for (int64_t i = 0; i < p->nq; i++) p->dout[i] = pipit__bf16_from_f32(urand_pm(1.0f));
    for (int64_t i = 0; i < p->nk; i++) p->k[i] = pipit__bf16_from_f32(urand_pm(2.0f));
    for (int64_t i = 0; i < p->nk; i++) p->v[i] = pipit__bf16_from_f32(urand_pm(1.0f));
    return 1;
}

static void problem_free(problem *p) { free(p->q), free(p->k), free(p->v), free(p->dout); }

static float *widened(const pipit__bf16 *x, int64_t n) {
    float *f = malloc(sizeof *f * (size_t)n);
    if (f) pipit__bf16_widen_n(f, x, n);
    return f;
}

/* The bf16 outputs out, dq, dk, dv (one block: nq + nq + nk + nk) by the
 * bf16 kernels at nth threads. */
static void run_bf16(const problem *p, pipit__bf16 *o, int nth) {
    pipit__bf16 *dq = o + p->nq, *dk = dq + p->nq, *dv = dk + p->nk;
    for (int t = 0; t < nth; t++) pipit__attn_fwd_bf16(o, p->q, p->k, p->v, &p->a, t, nth);
    for (int t = 0; t < nth; t++) pipit__attn_bwd_bf16(dq, dk, dv, p->q, p->k, p->v, p->dout, &p->a, t, nth);
}

/* The same by the fp32 blocked kernels on the widened values, rounded once */
static int run_f32(const problem *p, pipit__bf16 *o) {
    int64_t n = 2 * (p->nq + p->nk);
    float *q = widened(p->q, p->nq), *k = widened(p->k, p->nk), *v = widened(p->v, p->nk);
    float *dout = widened(p->dout, p->nq), *r = malloc(sizeof *r * (size_t)n);
    int ok = q && k && v && dout && r;
    if (ok) {
        pipit__attn_fwd_f32(r, q, k, v, &p->a, 0, 1);
        pipit__attn_bwd_f32(r + p->nq, r + 2 * p->nq, r + 2 * p->nq + p->nk, q, k, v, dout, &p->a, 0, 1);
        pipit__bf16_narrow_n(o, r, n);
    }
    free(q), free(k), free(v), free(dout), free(r);
    return ok;
}

/* Elements of x [n] apart from ref at all (moved), and farther than one
 * bf16 ulp and than 2^-14 of ref's largest magnitude (far: the fp32 sums
 * of the two ways run in other orders, so a value that cancels to far
 * below the others keeps only their absolute error). */
static void compare(const pipit__bf16 *x, const pipit__bf16 *ref, int64_t n, int64_t *far, int64_t *moved) {
    float big = 0;
    for (int64_t i = 0; i < n; i++) big = fmaxf(big, fabsf(pipit__bf16_to_f32(ref[i])));
    for (int64_t i = 0; i < n; i++) {
        int32_t a = x[i].bits, b = ref[i].bits; /* same sign: adjacent values are adjacent integers */
        if (a == b) continue;
        (*moved)++;
        float d = fabsf(pipit__bf16_to_f32(x[i]) - pipit__bf16_to_f32(ref[i]));
        if (((a ^ b) & 0x8000 || abs(a - b) > 1) && d > 0x1p-14f * big && (*far)++ < 5)
            fprintf(stderr, "  element %lld: %g against %g\n", (long long)i, pipit__bf16_to_f32(x[i]),
                    pipit__bf16_to_f32(ref[i]));
    }
}

static const attn_case cases[] = {
    {2, 37, 37, 4, 2, 24, 1},  /* causal, grouped-query heads, odd length */
    {1, 20, 50, 3, 3, 16, 0},  /* full mask, Tk != Tq */
    {2, 13, 40, 2, 1, 7, 1},   /* odd head size (odd K), causal at an offset (context parallelism) */
    {1, 64, 64, 4, 4, 64, 1},  /* GPT-2's head */
};

/* kinds of pipit__gemm_bf16_set_kind: 2 avx512bf16, 3 the emulated instruction */
static void check_kind(int kind) {
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        problem p;
        ASSERT_TRUE(problem_make(&p, &cases[c]));
        int64_t n = 2 * (p.nq + p.nk), far = 0, moved = 0;
        pipit__bf16 *ref = malloc(sizeof *ref * (size_t)n), *one = malloc(sizeof *one * (size_t)n);
        pipit__bf16 *three = malloc(sizeof *three * (size_t)n);
        ASSERT_TRUE(ref && one && three);
        pipit__gemm_bf16_set_kind(kind);
        ASSERT_EQ_I64(pipit__gemm_bf16_pairs(), kind == 2 ? 1 : 2);
        run_bf16(&p, one, 1);
        run_bf16(&p, three, 3);
        ASSERT_TRUE(memcmp(one, three, sizeof *one * (size_t)n) == 0); /* thread count: the same bits */
        ASSERT_TRUE(run_f32(&p, ref));
        int64_t at[] = {0, p.nq, 2 * p.nq, 2 * p.nq + p.nk, n}; /* out, dq, dk, dv */
        for (int t = 0; t < 4; t++) compare(one + at[t], ref + at[t], at[t + 1] - at[t], &far, &moved);
        printf("kind %d case %zu: %lld of %lld elements one ulp from the rounded fp32 attention, %lld farther\n", kind,
               c, (long long)moved, (long long)n, (long long)far);
        ASSERT_EQ_I64(far, 0);
        ASSERT_TRUE(moved * 100 <= 3 * n);
        free(ref), free(one), free(three);
        problem_free(&p);
    }
    pipit__gemm_bf16_set_kind(0);
}

PIPIT_TEST(bf16_attn_pairs_emulated_is_fp32_attention_rounded) {
    pipit__gemm_init();
    check_kind(3);
}

PIPIT_TEST(bf16_attn_pairs_vdpbf16ps_is_fp32_attention_rounded) {
    pipit__gemm_init();
    if (!pipit__cpu_has_avx512bf16()) {
        printf("this CPU has no AVX512-BF16: its kernel was not run (the emulated one was)\n");
        return;
    }
    check_kind(2);
}

/* The vdpbf16ps kernel gives its emulation's bits (normal values). */
PIPIT_TEST(bf16_attn_pairs_vdpbf16ps_is_its_emulation) {
    pipit__gemm_init();
    if (!pipit__cpu_has_avx512bf16()) {
        printf("this CPU has no AVX512-BF16: nothing to compare\n");
        return;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        problem p;
        ASSERT_TRUE(problem_make(&p, &cases[c]));
        int64_t n = 2 * (p.nq + p.nk);
        pipit__bf16 *x = malloc(sizeof *x * (size_t)n), *e = malloc(sizeof *e * (size_t)n);
        ASSERT_TRUE(x && e);
        pipit__gemm_bf16_set_kind(2);
        run_bf16(&p, x, 2);
        pipit__gemm_bf16_set_kind(3);
        run_bf16(&p, e, 2);
        ASSERT_TRUE(memcmp(x, e, sizeof *x * (size_t)n) == 0);
        free(x), free(e);
        problem_free(&p);
    }
    pipit__gemm_bf16_set_kind(0);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ATTN_SANITIZER 1 /* their shadow memory needs terabytes of address space: no RLIMIT_AS */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ATTN_SANITIZER 1
#endif
#endif

#ifndef ATTN_SANITIZER
/* In a child under RLIMIT_AS (what is mapped + 32 MiB): one 4096-position
 * head needs 64 MiB of fp32 scores, so its buffers cannot be had. The
 * attention must fail with a message (the rank's kernel error), not take
 * the fp32 panels' way on this thread alone (other last bits than the
 * threads that got memory). Exit 0 when it does. */
static int oom_child(void) {
    pipit__gemm_init();
    pipit__gemm_bf16_set_kind(3);
    pipit__kernel_bind(0);
    problem p;
    attn_case c = {1, 4096, 4096, 1, 1, 16, 1};
    if (!problem_make(&p, &c)) return 2;
    pipit__bf16 *out = malloc(sizeof *out * (size_t)p.nq), *dk = malloc(sizeof *dk * (size_t)p.nk);
    pipit__bf16 *dv = malloc(sizeof *dv * (size_t)p.nk);
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!out || !dk || !dv || !f || fscanf(f, "%lu", &pages) != 1) return 3;
    fclose(f);
    struct rlimit r;
    r.rlim_cur = r.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)32 << 20);
    if (setrlimit(RLIMIT_AS, &r) != 0) return 4;
    memset(out, 0x7f, sizeof *out * (size_t)p.nq), memset(dk, 0x7f, sizeof *dk * (size_t)p.nk);
    memset(dv, 0x7f, sizeof *dv * (size_t)p.nk);
    if (pipit__attn_pairs_fwd(out, p.q, p.k, p.v, &p.a, 0, 1) != 1) return 5; /* done: failed, not the panels */
    const char *why = pipit__kernel_take_error(0);
    if (!why || !strstr(why, "out of memory")) return 6;
    fprintf(stderr, "failed as it should: %s\n", why);
    for (int64_t i = 0; i < p.nq; i++)
        if (out[i].bits) return 9; /* a failed kernel's output is zeroed */
    memset(out, 0x7f, sizeof *out * (size_t)p.nq);
    if (pipit__attn_pairs_bwd(out, dk, dv, p.q, p.k, p.v, p.dout, &p.a, 0, 1) != 1) return 7;
    why = pipit__kernel_take_error(0);
    if (!why || !strstr(why, "out of memory")) return 8;
    for (int64_t i = 0; i < p.nq; i++)
        if (out[i].bits) return 10;
    for (int64_t i = 0; i < p.nk; i++)
        if (dk[i].bits || dv[i].bits) return 11;
    return 0;
}
#endif

PIPIT_TEST(bf16_attn_pairs_out_of_memory_fails) {
#ifdef ATTN_SANITIZER
    PIPIT_SKIP("RLIMIT_AS cannot be set under a sanitizer (its shadow memory needs terabytes of address space)");
#else
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) _exit(oom_child());
    int st = 0;
    ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
    ASSERT_TRUE(WIFEXITED(st));
    ASSERT_EQ_I64(WEXITSTATUS(st), 0);
#endif
}
