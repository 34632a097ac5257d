/*
 * pairs_kernel.c — a prototype, not part of the build: how fast a pipit-owned
 * bf16 GEMM on AVX512-BF16 can be (issue 26; docs/benchmarks.md §14, "The way
 * forward"). Landed since, for every layout, as src/backend/cpu/gemm_pairs.c;
 * kept as the record of the measurement that led there. A 6 x 64 vdpbf16ps micro-kernel (24 zmm accumulators; a bf16
 * pair of A broadcast, four zmm of B pairs per pair of K), A read in place
 * (row-major, even K: its pairs are adjacent), B packed per 192-column tile
 * as [K/2][64] pairs, 64-column blocks outer and 6-row blocks inner so the
 * B sub-panel stays hot while the rows sweep past. Each output element is
 * one fp32 lane summed over K in order, so its bits depend on neither the
 * tiles' visiting order nor the thread count. One thread; prints GFLOP/s
 * for the warm micro-kernel and for whole GEMMs of GPT-2 124M's shapes with
 * the sums narrowed in the kernel's epilogue or in a second pass over an
 * fp32 tile. Compare with `build/bench_bf16` (oneDNN tiles and whole) on
 * the same core:
 *
 *   gcc -O2 -Wall -Wextra bench/proto/pairs_kernel.c -o /tmp/pairs_kernel
 *   taskset -c 0 /tmp/pairs_kernel; taskset -c 0 build/bench_bf16
 *
 * Rows beyond a multiple of 6 are left out of the count (1.6% at M = 256):
 * the landed kernel needs a remainder path, and the dW (op(A) = X^T) and dX
 * (op(B) = W^T) layouts their packing.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512bf16")))

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* 16 floats rounded to bf16 at p: util/bf16.h's rounding (nearest even, NaN quiet) */
TGT static inline void store_bf16(uint16_t *p, __m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
    __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                               _mm512_set1_epi32(0x7f800000));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, is_nan, nan)));
}

static inline uint32_t load32(const uint16_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

#define ROW_DECL(r) __m512 c##r##0, c##r##1, c##r##2, c##r##3
#define ROW_INIT(r)                                                                                     \
    c##r##0 = first ? _mm512_setzero_ps() : _mm512_loadu_ps(cf + (r) * ldcf);                          \
    c##r##1 = first ? _mm512_setzero_ps() : _mm512_loadu_ps(cf + (r) * ldcf + 16);                     \
    c##r##2 = first ? _mm512_setzero_ps() : _mm512_loadu_ps(cf + (r) * ldcf + 32);                     \
    c##r##3 = first ? _mm512_setzero_ps() : _mm512_loadu_ps(cf + (r) * ldcf + 48)
#define ROW_STEP(r)                                                                                     \
    do {                                                                                                \
        __m512bh a = (__m512bh)_mm512_set1_epi32((int)load32(a0 + (r) * lda + 2 * k));                  \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, a, b0), c##r##1 = _mm512_dpbf16_ps(c##r##1, a, b1);         \
        c##r##2 = _mm512_dpbf16_ps(c##r##2, a, b2), c##r##3 = _mm512_dpbf16_ps(c##r##3, a, b3);         \
    } while (0)
#define ROW_OUT(r)                                                                                      \
    do {                                                                                                \
        if (c) {                                                                                        \
            store_bf16(c + (r) * ldc, c##r##0), store_bf16(c + (r) * ldc + 16, c##r##1);                \
            store_bf16(c + (r) * ldc + 32, c##r##2), store_bf16(c + (r) * ldc + 48, c##r##3);           \
        } else {                                                                                        \
            _mm512_storeu_ps(cf + (r) * ldcf, c##r##0), _mm512_storeu_ps(cf + (r) * ldcf + 16, c##r##1); \
            _mm512_storeu_ps(cf + (r) * ldcf + 32, c##r##2);                                            \
            _mm512_storeu_ps(cf + (r) * ldcf + 48, c##r##3);                                            \
        }                                                                                               \
    } while (0)

/* 6 rows of A (bf16, row stride lda, pairs 0..K2) times bp [K2][ldb] pairs,
 * 64 columns: into c (bf16, narrowed here) or, c NULL, the fp32 tile cf. */
TGT static void kernel_6x64(const uint16_t *a0, int64_t lda, int64_t K2, const uint32_t *bp, int64_t ldb, float *cf,
                            int64_t ldcf, uint16_t *c, int64_t ldc) {
    const int first = 1;
    ROW_DECL(0);
    ROW_DECL(1);
    ROW_DECL(2);
    ROW_DECL(3);
    ROW_DECL(4);
    ROW_DECL(5);
    ROW_INIT(0);
    ROW_INIT(1);
    ROW_INIT(2);
    ROW_INIT(3);
    ROW_INIT(4);
    ROW_INIT(5);
    for (int64_t k = 0; k < K2; k++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp + k * ldb), b1 = (__m512bh)_mm512_loadu_si512(bp + k * ldb + 16);
        __m512bh b2 = (__m512bh)_mm512_loadu_si512(bp + k * ldb + 32), b3 = (__m512bh)_mm512_loadu_si512(bp + k * ldb + 48);
        ROW_STEP(0);
        ROW_STEP(1);
        ROW_STEP(2);
        ROW_STEP(3);
        ROW_STEP(4);
        ROW_STEP(5);
    }
    ROW_OUT(0);
    ROW_OUT(1);
    ROW_OUT(2);
    ROW_OUT(3);
    ROW_OUT(4);
    ROW_OUT(5);
}

/* bp [K2][ldp] = pairs of rows 2k, 2k+1 of B's first n columns (n a
 * multiple of 16 here; the landed version pads with zeros) */
TGT static void pack_b(const uint16_t *b, int64_t ldb, int64_t K, int64_t n, int64_t ldp, uint32_t *bp) {
    for (int64_t k = 0; k < K / 2; k++) {
        const uint16_t *r0 = b + 2 * k * ldb, *r1 = r0 + ldb;
        for (int64_t j = 0; j < n; j += 16) {
            __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r0 + j)));
            __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r1 + j)));
            _mm512_storeu_si512(bp + k * ldp + j, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

/* C [M,N] = A [M,K] B [K,N], all bf16; 192-column tiles; in_kernel: the
 * epilogue narrows, else an fp32 tile and a second pass. */
TGT static void gemm(int64_t M, int64_t N, int64_t K, const uint16_t *A, const uint16_t *B, uint16_t *C, uint32_t *bp,
                     float *cf, int in_kernel) {
    const int64_t nt = 192, n64 = 192;
    for (int64_t j0 = 0; j0 < N; j0 += nt) {
        pack_b(B + j0, N, K, nt, n64, bp);
        for (int64_t j = 0; j < n64; j += 64)
            for (int64_t i = 0; i + 6 <= M; i += 6)
                kernel_6x64(A + i * K, K, K / 2, bp + j, n64, cf + i * n64 + j, n64,
                            in_kernel ? C + i * N + j0 + j : NULL, N);
        for (int64_t i = 0; !in_kernel && i < M / 6 * 6; i++)
            for (int64_t j = 0; j < nt; j += 16) store_bf16(C + i * N + j0 + j, _mm512_loadu_ps(cf + i * n64 + j));
    }
}

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512bw")) {
        printf("pairs_kernel: this CPU has no AVX512-BF16; nothing to measure\n");
        return 77;
    }
    const int64_t shapes[3][3] = {{256, 3072, 768}, {256, 768, 3072}, {256, 2304, 768}};
    const int64_t MK = 256 * 3072, KN = 3072 * 3072;
    uint16_t *A = malloc(MK * 2), *B = malloc(KN * 2), *C = malloc(256 * 3072 * 2);
    uint32_t *bp = aligned_alloc(64, 1536 * 192 * 4);
    float *cf = aligned_alloc(64, 256 * 192 * 4);
    if (!A || !B || !C || !bp || !cf) return 1;
    for (int64_t i = 0; i < MK; i++) A[i] = (uint16_t)(0x3f80 + i % 7);
    for (int64_t i = 0; i < KN; i++) B[i] = (uint16_t)(0x3f00 + i % 5);
    { /* the micro-kernel alone on warm panels: 6-row blocks of a 256 x 192 tile, K 768 */
        double best = 0;
        pack_b(B, 192, 768, 192, 192, bp);
        for (int rep = 0; rep < 10; rep++) {
            double t0 = now();
            for (int it = 0; it < 10; it++)
                for (int64_t j = 0; j < 192; j += 64)
                    for (int64_t i = 0; i + 6 <= 256; i += 6)
                        kernel_6x64(A + i * 768, 768, 384, bp + j, 192, cf + i * 192 + j, 192, NULL, 0);
            double g = 10 * 2.0 * 252 * 192 * 768 / (now() - t0) / 1e9;
            best = g > best ? g : best;
        }
        printf("micro-kernel 6x64, warm 252x192x768 panels: %.1f GFLOP/s\n", best);
    }
    for (int s = 0; s < 3; s++)
        for (int in_kernel = 1; in_kernel >= 0; in_kernel--) {
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            double best = 0;
            for (int rep = 0; rep < 8; rep++) {
                double t0 = now();
                for (int it = 0; it < 3; it++) gemm(M, N, K, A, B, C, bp, cf, in_kernel);
                double g = 3 * 2.0 * (double)(M / 6 * 6) * (double)N * (double)K / (now() - t0) / 1e9;
                best = g > best ? g : best;
            }
            printf("GEMM %ldx%ldx%ld, %s: %.1f GFLOP/s\n", (long)M, (long)N, (long)K,
                   in_kernel ? "narrowed in the epilogue" : "fp32 tile, then narrowed", best);
        }
    free(A), free(B), free(C), free(bp), free(cf);
    return 0;
}
