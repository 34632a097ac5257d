/*
 * test_onednn.c — the oneDNN GEMM path (src/backend/cpu/gemm_onednn.c).
 *
 * pipit runs it in bf16 where the CPU has bf16 arithmetic; the same code
 * (cache, tiles, strides, transposes, batches, accumulate) runs here in f32,
 * which oneDNN implements on every x86-64 CPU: against a double product of
 * the same values, bitwise across thread counts and concurrent callers, with
 * its primitive cache counted. The bf16 kind's choice is checked on this
 * CPU (and with ONEDNN_MAX_CPU_ISA in a child process); on a CPU with
 * AVX512-BF16 the bf16 oneDNN GEMM is checked against the double product and
 * the fp32-panels way.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "backend/cpu/kernels.h"
#include "pipit.h"
#include "test.h"

static uint64_t rng_state = 88172645463325252ull;
static double urand1(void) { /* [-1, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-52 - 1.0;
}

typedef struct {
    int ta, tb, acc;
    int64_t batch, M, N, K;
    int64_t pad;  /* added to every leading dimension (ld > width) */
    int bcast;    /* sB = 0: one B for the whole batch */
} mm_case;

/* Stored sizes of a case's operands: rows x ld, per batch item. */
typedef struct {
    int64_t rA, cA, lda, rB, cB, ldb, ldc, sA, sB, sC, nA, nB, nC;
} mm_layout;

static mm_layout layout(const mm_case *c) {
    mm_layout l;
    l.rA = c->ta ? c->K : c->M, l.cA = c->ta ? c->M : c->K, l.lda = l.cA + c->pad;
    l.rB = c->tb ? c->N : c->K, l.cB = c->tb ? c->K : c->N, l.ldb = l.cB + c->pad;
    l.ldc = c->N + c->pad;
    l.sA = l.rA * l.lda + c->pad, l.sB = c->bcast ? 0 : l.rB * l.ldb + c->pad, l.sC = c->M * l.ldc + c->pad;
    l.nA = c->batch * l.sA, l.nB = c->bcast ? l.rB * l.ldb : c->batch * l.sB, l.nC = c->batch * l.sC;
    return l;
}

/* ------------------------------------------------------------ f32 through oneDNN */

typedef struct {
    const mm_case *c;
    mm_layout l;
    const float *A, *B;
    float *C;
    int ith, nth, rc;
} f32_call;

static void f32_run(f32_call *k) {
    const mm_case *c = k->c;
    k->rc = pipit__gemm_onednn(PIPIT_F32, PIPIT_F32, c->ta, c->tb, c->batch, c->M, c->N, c->K, k->A, k->l.lda, k->l.sA,
                               k->B, k->l.ldb, k->l.sB, k->C, k->l.ldc, k->l.sC, c->acc, k->ith, k->nth);
}

static void *f32_thread(void *p) {
    f32_run(p);
    return NULL;
}

/* Runs the case on nth threads: sequentially by ith, or concurrently on
 * nth pthreads. Returns the largest return code. */
static int f32_gemm(const mm_case *c, const float *A, const float *B, float *C, int nth, int concurrent) {
    f32_call k[8];
    pthread_t t[8];
    int rc = 0;
    for (int i = 0; i < nth; i++) {
        k[i] = (f32_call){c, layout(c), A, B, C, i, nth, 0};
        if (concurrent) pthread_create(&t[i], NULL, f32_thread, &k[i]);
        else f32_run(&k[i]);
    }
    for (int i = 0; i < nth; i++) {
        if (concurrent) pthread_join(t[i], NULL);
        rc = k[i].rc > rc ? k[i].rc : rc;
    }
    return rc;
}

/* The case in f32 through oneDNN against the double product of the same
 * values: each element within fp32 accumulation, (K+2) 2^-24 of the sum of
 * the absolute terms; the padding around C untouched; the same bits on 2, 3
 * and 4 threads (sequential and concurrent) as on 1. */
static int check_f32(const mm_case *c) {
    mm_layout l = layout(c);
    float *A = malloc(sizeof *A * (size_t)l.nA), *B = malloc(sizeof *B * (size_t)l.nB);
    float *C0 = malloc(sizeof *C0 * (size_t)l.nC), *C = malloc(sizeof *C * (size_t)l.nC);
    float *C2 = malloc(sizeof *C2 * (size_t)l.nC);
    for (int64_t i = 0; i < l.nA; i++) A[i] = (float)urand1();
    for (int64_t i = 0; i < l.nB; i++) B[i] = (float)urand1();
    for (int64_t i = 0; i < l.nC; i++) C0[i] = (float)urand1();
    memcpy(C, C0, sizeof *C * (size_t)l.nC);
    int bad = 0, rc = f32_gemm(c, A, B, C, 1, 0);
    if (rc != 0) {
        fprintf(stderr, "onednn f32 ta=%d tb=%d %lldx%lldx%lld: returned %d (no implementation)\n", c->ta, c->tb,
                (long long)c->M, (long long)c->N, (long long)c->K, rc);
        bad = 1;
    }
    for (int64_t b = 0; b < c->batch && !bad; b++)
        for (int64_t i = 0; i < c->M && !bad; i++)
            for (int64_t j = 0; j < c->N + c->pad && !bad; j++) {
                int64_t at = b * l.sC + i * l.ldc + j;
                if (j >= c->N) { /* padding */
                    if (memcmp(&C[at], &C0[at], sizeof *C)) {
                        fprintf(stderr, "onednn f32: padding C[%lld][%lld][%lld] was written\n", (long long)b,
                                (long long)i, (long long)j);
                        bad = 1;
                    }
                    continue;
                }
                double ref = c->acc ? C0[at] : 0, mag = fabs(ref);
                for (int64_t k = 0; k < c->K; k++) {
                    double a = A[b * l.sA + (c->ta ? k * l.lda + i : i * l.lda + k)];
                    double x = B[b * l.sB + (c->tb ? j * l.ldb + k : k * l.ldb + j)];
                    ref += a * x, mag += fabs(a * x);
                }
                if (!(fabs(C[at] - ref) <= (double)(c->K + 2) * 0x1p-24 * mag + 1e-30)) {
                    fprintf(stderr, "onednn f32 ta=%d tb=%d acc=%d %lldx%lldx%lld: C[%lld][%lld][%lld] = %.9g, "
                                    "expected %.9g\n",
                            c->ta, c->tb, c->acc, (long long)c->M, (long long)c->N, (long long)c->K, (long long)b,
                            (long long)i, (long long)j, C[at], ref);
                    bad = 1;
                }
            }
    for (int nth = 2; nth <= 4 && !bad; nth++)
        for (int conc = 0; conc < 2 && !bad; conc++) {
            memcpy(C2, C0, sizeof *C2 * (size_t)l.nC);
            f32_gemm(c, A, B, C2, nth, conc);
            if (memcmp(C, C2, sizeof *C * (size_t)l.nC)) {
                fprintf(stderr, "onednn f32 %lldx%lldx%lld: %d threads (%s) differ from one\n", (long long)c->M,
                        (long long)c->N, (long long)c->K, nth, conc ? "concurrent" : "in turn");
                bad = 1;
            }
        }
    free(A), free(B), free(C0), free(C), free(C2);
    return bad;
}

static const mm_case f32_cases[] = {
    /* ta tb acc batch M N K pad bcast */
    {0, 0, 0, 1, 5, 7, 3, 0, 0},     {1, 0, 0, 1, 17, 33, 9, 2, 0},   {0, 1, 1, 1, 64, 40, 31, 1, 0},
    {1, 1, 0, 1, 33, 65, 2, 3, 0},   {1, 1, 1, 2, 13, 11, 19, 0, 0},  {0, 0, 1, 3, 7, 9, 5, 4, 0},
    {0, 1, 0, 2, 9, 70, 12, 0, 1},   {1, 0, 1, 3, 6, 10, 21, 5, 1},   {0, 1, 0, 1, 1, 1, 1, 0, 0},
    {0, 0, 0, 1, 300, 260, 130, 3, 0}, /* 4 tile shapes (gemm.c's rule) */
    {1, 1, 1, 2, 300, 260, 66, 1, 0},  /* the same, transposed, accumulating, batched */
};

PIPIT_TEST(onednn_f32_matches_double) {
    pipit__gemm_init();
    int bad = 0;
    for (size_t i = 0; i < sizeof f32_cases / sizeof f32_cases[0]; i++) bad += check_f32(&f32_cases[i]);
    ASSERT_EQ_I64(bad, 0);
    /* K = 0 is left to the caller (1); an empty C is done (0) */
    float a[1] = {0}, b[1] = {0}, cc[12];
    ASSERT_EQ_I64(pipit__gemm_onednn(PIPIT_F32, PIPIT_F32, 0, 0, 1, 4, 3, 0, a, 1, 0, b, 3, 0, cc, 3, 0, 0, 0, 1), 1);
    ASSERT_EQ_I64(pipit__gemm_onednn(PIPIT_F32, PIPIT_F32, 0, 0, 1, 0, 3, 2, a, 2, 0, b, 3, 0, cc, 3, 0, 0, 0, 1), 0);
}

static int count_tasks(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* Each tile shape's primitive is made once and reused, also when several
 * threads meet a new shape at once; and oneDNN never starts threads of its
 * own (its OpenMP count is 1 inside pipit's calls). */
PIPIT_TEST(onednn_cache_reuses_primitives) {
    pipit__gemm_init();
    /* a shape no other test meets: 4 tile shapes */
    mm_case c = {0, 1, 0, 1, 300, 260, 123, 0, 0};
    mm_layout l = layout(&c);
    float *A = malloc(sizeof *A * (size_t)l.nA), *B = malloc(sizeof *B * (size_t)l.nB);
    float *C = malloc(sizeof *C * (size_t)l.nC), *C2 = malloc(sizeof *C2 * (size_t)l.nC);
    for (int64_t i = 0; i < l.nA; i++) A[i] = (float)urand1();
    for (int64_t i = 0; i < l.nB; i++) B[i] = (float)urand1();
    int tasks = count_tasks();
    int64_t made0, reused0, made1, reused1, made2, reused2;
    pipit__onednn_stats(&made0, &reused0);
    ASSERT_EQ_I64(f32_gemm(&c, A, B, C, 4, 1), 0); /* 4 threads meet the 4 new shapes at once */
    pipit__onednn_stats(&made1, &reused1);
    ASSERT_EQ_I64(made1 - made0, 4);           /* each made once ... */
    ASSERT_EQ_I64(reused1 - reused0, 4 * 4 - 4); /* ... every other look-up found it */
    ASSERT_EQ_I64(f32_gemm(&c, A, B, C2, 1, 0), 0);
    pipit__onednn_stats(&made2, &reused2);
    ASSERT_EQ_I64(made2 - made1, 0);
    ASSERT_EQ_I64(reused2 - reused1, 4);
    ASSERT_TRUE(memcmp(C, C2, sizeof *C * (size_t)l.nC) == 0);
    ASSERT_EQ_I64(count_tasks(), tasks); /* no OpenMP team left behind */
    free(A), free(B), free(C), free(C2);
}

/* ------------------------------------------------------------ the bf16 kind */

/* kinds of pipit__gemm_bf16_set_kind: 1 fp32 panels, 2 avx512bf16, 3 emulated pairs, 4 oneDNN */

static float bf16_rand(void) { return pipit__bf16_to_f32(pipit__bf16_from_f64(urand1())); }

/* C = op(A) op(B) (+ C) in bf16 by the current kind: within one rounding
 * (2^-8) plus fp32 accumulation of the double product, the same bits on 1,
 * 2 and 3 threads; *out gets the result (nC elements, malloc'd). */
static int check_bf16(const mm_case *c, uint64_t seed, pipit__bf16 **out) {
    mm_layout l = layout(c);
    rng_state = seed;
    pipit__bf16 *A = malloc(sizeof *A * (size_t)l.nA), *B = malloc(sizeof *B * (size_t)l.nB);
    pipit__bf16 *C0 = malloc(sizeof *C0 * (size_t)l.nC), *C = malloc(sizeof *C * (size_t)l.nC);
    pipit__bf16 *C2 = malloc(sizeof *C2 * (size_t)l.nC);
    for (int64_t i = 0; i < l.nA; i++) A[i] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t i = 0; i < l.nB; i++) B[i] = pipit__bf16_from_f32(bf16_rand());
    for (int64_t i = 0; i < l.nC; i++) C0[i] = pipit__bf16_from_f32(bf16_rand());
    memcpy(C, C0, sizeof *C * (size_t)l.nC);
    pipit__gemm_bf16(c->ta, c->tb, c->batch, c->M, c->N, c->K, A, l.lda, l.sA, B, l.ldb, l.sB, C, l.ldc, l.sC, c->acc,
                     0, 1);
    int bad = 0;
    for (int64_t b = 0; b < c->batch && !bad; b++)
        for (int64_t i = 0; i < c->M && !bad; i++)
            for (int64_t j = 0; j < c->N && !bad; j++) {
                int64_t at = b * l.sC + i * l.ldc + j;
                double ref = c->acc ? pipit__bf16_to_f32(C0[at]) : 0, mag = fabs(ref);
                for (int64_t k = 0; k < c->K; k++) {
                    double a = pipit__bf16_to_f32(A[b * l.sA + (c->ta ? k * l.lda + i : i * l.lda + k)]);
                    double x = pipit__bf16_to_f32(B[b * l.sB + (c->tb ? j * l.ldb + k : k * l.ldb + j)]);
                    ref += a * x, mag += fabs(a * x);
                }
                double got = pipit__bf16_to_f32(C[at]);
                if (!(fabs(got - ref) <= 0x1p-8 * fabs(ref) + (c->K + 2) * 0x1p-24 * mag + 1e-30)) {
                    fprintf(stderr, "gemm %s %lldx%lldx%lld: C[%lld][%lld][%lld] = %.9g, expected %.9g\n",
                            pipit__gemm_bf16_kind(), (long long)c->M, (long long)c->N, (long long)c->K, (long long)b,
                            (long long)i, (long long)j, got, ref);
                    bad = 1;
                }
            }
    for (int nth = 2; nth <= 3 && !bad; nth++) {
        memcpy(C2, C0, sizeof *C2 * (size_t)l.nC);
        for (int t = 0; t < nth; t++)
            pipit__gemm_bf16(c->ta, c->tb, c->batch, c->M, c->N, c->K, A, l.lda, l.sA, B, l.ldb, l.sB, C2, l.ldc,
                             l.sC, c->acc, t, nth);
        if (memcmp(C, C2, sizeof *C * (size_t)l.nC)) {
            fprintf(stderr, "gemm %s: %d threads differ from one\n", pipit__gemm_bf16_kind(), nth);
            bad = 1;
        }
    }
    free(A), free(B), free(C0), free(C2);
    *out = C;
    return bad;
}

/* Where oneDNN has no bf16 matmul (this CPU without AVX512-BF16) the kind
 * refuses and the fallback runs, bit for bit; where it has one, the default
 * is oneDNN with AMX and pipit's pairs kernel without (the faster), and
 * every case through the oneDNN kind and through fp32 panels is within the
 * bf16 bound of the same double product, and nth-invariant. */
PIPIT_TEST(onednn_bf16_kind) {
    pipit__gemm_init();
    pipit__gemm_bf16_set_kind(0);
    const char *why = pipit__onednn_bf16_why_not(), *kind = pipit__gemm_bf16_kind();
    int have = why == NULL;
    const char *forced = getenv("PIPIT_BF16_GEMM");
    if ((!forced || !*forced) && !have) ASSERT_TRUE(strncmp(kind, "onednn", 6) != 0);
    if ((!forced || !*forced) && !pipit__cpu_amx_why_not()) /* the default by speed: pipit's AMX kernel where it runs */
        ASSERT_TRUE(strcmp(kind, "amx") == 0);
    else if ((!forced || !*forced) && have) { /* else oneDNN with AMX, else pipit's pairs kernel */
        int amx = strstr(pipit__onednn_bf16_impl(), "amx") != NULL;
        ASSERT_TRUE(strcmp(kind, amx ? pipit__onednn_bf16_name() : "avx512bf16") == 0);
    }
    if (have) {
        ASSERT_TRUE(pipit__onednn_bf16_impl() && strncmp(pipit__onednn_bf16_impl(), "ref", 3) != 0);
    } else {
        ASSERT_TRUE(pipit__onednn_bf16_impl() == NULL);
        printf("oneDNN bf16 matmul refused here: %s (the chosen kind: %s)\n", why, kind);
    }
    int bad = 0;
    for (size_t i = 0; i < sizeof f32_cases / sizeof f32_cases[0]; i++) {
        const mm_case *c = &f32_cases[i];
        mm_layout l = layout(c);
        pipit__bf16 *viaonednn, *panels;
        pipit__gemm_bf16_set_kind(4);
        bad += check_bf16(c, 1234 + i, &viaonednn);
        pipit__gemm_bf16_set_kind(1);
        bad += check_bf16(c, 1234 + i, &panels);
        if (!have) { /* it fell back: the fallback's bits (panels on this CPU unless it has the pairs kernel) */
            pipit__gemm_bf16_set_kind(0);
            pipit__bf16 *fb;
            bad += check_bf16(c, 1234 + i, &fb);
            if (memcmp(viaonednn, fb, sizeof *fb * (size_t)l.nC)) {
                fprintf(stderr, "oneDNN kind without oneDNN: not the fallback's bits\n");
                bad++;
            }
            free(fb);
        } else { /* both within the bound of the same double product (check_bf16); how often they differ */
            int64_t differ = 0;
            for (int64_t k = 0; k < l.nC; k++) differ += viaonednn[k].bits != panels[k].bits;
            printf("%lldx%lldx%lld: oneDNN and fp32 panels differ in %lld of %lld elements\n", (long long)c->M,
                   (long long)c->N, (long long)c->K, (long long)differ, (long long)l.nC);
        }
        free(viaonednn), free(panels);
    }
    pipit__gemm_bf16_set_kind(0);
    ASSERT_EQ_I64(bad, 0);
    if (!have) printf("this CPU has no bf16 matmul in oneDNN: its bf16 path ran as the fallback only\n");
}

/* ONEDNN_MAX_CPU_ISA below AVX512-BF16 makes oneDNN refuse the bf16 kind,
 * and PIPIT_BF16_GEMM=onednn then says so on stderr and runs the fallback:
 * in a child process (oneDNN reads the variable once). */
PIPIT_TEST(onednn_max_isa_forces_fallback) {
    if (getenv("PIPIT_TEST_ONEDNN_CHILD")) {
        const char *why = pipit__onednn_bf16_why_not();
        ASSERT_TRUE(why && strstr(why, "ISA"));
        ASSERT_TRUE(strncmp(pipit__gemm_bf16_kind(), "onednn", 6) != 0);
        mm_case c = {1, 0, 1, 2, 9, 70, 12, 1, 0};
        pipit__bf16 *out;
        pipit__gemm_init();
        ASSERT_EQ_I64(check_bf16(&c, 99, &out), 0);
        free(out);
        return;
    }
    char err[512];
    snprintf(err, sizeof err, "%s", pipit_test_path("onednn_child.err"));
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        if (!freopen(err, "w", stderr)) _exit(3);
        setenv("PIPIT_TEST_ONEDNN_CHILD", "1", 1);
        setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE", 1);
        setenv("PIPIT_BF16_GEMM", "onednn", 1);
        execl("/proc/self/exe", "pipit_tests", "onednn_max_isa_forces_fallback", (char *)NULL);
        _exit(4);
    }
    int st = 0;
    ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
    FILE *f = fopen(err, "r");
    char text[4096] = {0};
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) PIPIT_FAIL_("the child failed (status %d): %s", st, text);
    ASSERT_TRUE(strstr(text, "PIPIT_BF16_GEMM=onednn refused") != NULL);
    ASSERT_TRUE(strstr(text, "ONEDNN_MAX_CPU_ISA") != NULL);
}

/* ------------------------------------------------- OpenBLAS's kernels */

/* 1 when /proc/cpuinfo's flags hold what OpenBLAS's SkylakeX kernels need
 * (read independently of the library's cpuid check). */
static int cpuinfo_has_avx512_skx(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    char line[8192];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0) continue;
        found = strstr(line, " avx512f ") && strstr(line, " avx512bw ") && strstr(line, " avx512dq ") &&
                strstr(line, " avx512vl ");
    }
    fclose(f);
    return found;
}

/* Advice exactly where OpenBLAS runs its 256-bit kernels (Haswell, Zen) on
 * a CPU with AVX-512; forced both ways through OPENBLAS_CORETYPE in child
 * processes (OpenBLAS reads it when it is loaded). */
PIPIT_TEST(blas_advice_follows_the_kernels) {
    const char *want = getenv("PIPIT_TEST_BLAS_CHILD");
    int skx = cpuinfo_has_avx512_skx();
    if (skx < 0) PIPIT_SKIP("no /proc/cpuinfo flags line");
    const char *k = pipit_cpu_blas_kernels(), *advice = pipit_cpu_blas_advice();
    int narrow = strcasecmp(k, "haswell") == 0 || strcasecmp(k, "zen") == 0;
    printf("OpenBLAS kernels %s, AVX-512 (F, BW, DQ, VL) %s: advice %s\n", k, skx ? "yes" : "no",
           advice ? advice : "none");
    ASSERT_EQ_I64(advice != NULL, narrow && skx);
    if (want) { /* the child: OpenBLAS took the forced kernels */
        ASSERT_TRUE(strcasecmp(k, want) == 0);
        return;
    }
    const char *force[2] = {"Haswell", "SkylakeX"};
    for (int i = 0; i < (skx ? 2 : 1); i++) { /* SkylakeX kernels only where the CPU can run them */
        fflush(stdout), fflush(stderr);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
            setenv("PIPIT_TEST_BLAS_CHILD", force[i], 1);
            setenv("OPENBLAS_CORETYPE", force[i], 1);
            execl("/proc/self/exe", "pipit_tests", "blas_advice_follows_the_kernels", (char *)NULL);
            _exit(4);
        }
        int st = 0;
        ASSERT_TRUE(waitpid(pid, &st, 0) == pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) PIPIT_FAIL_("the child with OPENBLAS_CORETYPE=%s failed (status %d)", force[i], st);
    }
}

/* Where OpenBLAS fell back to its generic kernels, the backend's start
 * chooses them again while OpenBLAS's pool threads, started when it was
 * loaded, may still be running their own start-up (every process of this
 * binary does so in a constructor, at the earliest moment). Before the pool
 * was joined first, 2 to 8 of these 600 starts crashed on a 5th-generation
 * Xeon (OpenBLAS 0.3.21 does not know it). Where OpenBLAS knows the CPU
 * nothing is chosen again: skipped. */
PIPIT_TEST(blas_kernels_chosen_again_while_its_threads_start) {
    enum { batches = 600, at_once = 1 };
    if (!pipit__blas_chosen_again() && !getenv("OPENBLAS_CORETYPE"))
        PIPIT_SKIP("OpenBLAS knows this CPU (kernels %s): a start chooses nothing again", pipit_cpu_blas_kernels());
    int crashed = 0, failed = 0;
    for (int b = 0; b < batches; b++) {
        pid_t pids[at_once];
        fflush(stdout), fflush(stderr);
        for (int i = 0; i < at_once; i++) {
            pids[i] = fork();
            ASSERT_TRUE(pids[i] >= 0);
            if (pids[i] == 0) {
                int null = open("/dev/null", O_WRONLY);
                if (null >= 0) dup2(null, 1), dup2(null, 2);
                unsetenv("OPENBLAS_CORETYPE"); /* a start that chooses the kernels again */
                execl("/proc/self/exe", "pipit_tests", "integrity_crc32c_known_values", (char *)NULL);
                _exit(4);
            }
        }
        for (int i = 0; i < at_once; i++) {
            int st = 0;
            ASSERT_TRUE(waitpid(pids[i], &st, 0) == pids[i]);
            crashed += WIFSIGNALED(st);
            failed += WIFEXITED(st) && WEXITSTATUS(st) != 0;
        }
    }
    printf("OpenBLAS kernels %s: %d starts, %d crashed, %d failed\n", pipit_cpu_blas_kernels(), batches * at_once,
           crashed, failed);
    ASSERT_EQ_I64(crashed, 0);
    ASSERT_EQ_I64(failed, 0);
}
