/*
 * gemm_pairs.c — one tile of the bf16 GEMM by vdpbf16ps (gemm_bf16.c deals
 * the tiles). vdpbf16ps adds two bf16 products into an fp32 lane, so both
 * operands are read as pairs along K: op(A)'s row i as the 32-bit pairs
 * (2k, 2k+1), broadcast one row at a time; op(B)'s column j packed as
 * bp[k][j] = (op(B)[2k][j], op(B)[2k+1][j]), 16 columns to a zmm.
 *
 * The micro-kernel forms 6 rows x 64 columns: 24 zmm accumulators, four
 * loads of B and six broadcasts of A per pair of K (the shape that keeps
 * two FMA-class pipes busy: 24 independent chains hide vdpbf16ps's latency,
 * one load or broadcast per 4 dot products leaves the load ports room). A
 * tile's 64-column blocks are the outer loop and its 6-row blocks the inner
 * one, so one block of packed B (at most KC_MAX pairs of K x 64: 256 KB; a
 * longer K is summed in chunks, the outermost loop) stays in L2 while the
 * rows of A stream past. op(B) = B is packed a chunk at a time across the
 * tile's whole width, so each of B's rows is read once as one run (a
 * weight not in cache was read 64 columns at a time at two thirds of the
 * transpose's rate). 455-532 GFLOP/s at GPT-2's shapes on one Zen 5 core,
 * 0.83-0.91 of the instruction's peak (docs/benchmarks.md §14). A large
 * result (the caller's stream) is written with non-temporal stores.
 *
 * How the operands are read, by layout (op(X) is X or its transpose):
 *   op(A) = A [m, K]: in place (a pair is two adjacent elements; an odd
 *     K's last element is read alone, as the pair (x, 0));
 *   op(A) = A^T, A [K, m] (weight gradients, X^T dY): packed k-major,
 *     ap[k][i] = (A[2k][i], A[2k+1][i]), the interleave that packs B;
 *   op(B) = B [K, n]: that interleave of rows 2k and 2k+1;
 *   op(B) = B^T, B [n, K] (input gradients, dY W^T): op(B)'s pairs are
 *     adjacent in B's rows, so packing is a 32-bit transpose (16 x 16
 *     blocks in registers).
 * Each element of C is one fp32 lane that starts at zero and takes K's
 * pairs in order, whatever the tile, the block or the thread (a chunked K
 * parks its partial sums in fp32): the bits depend on none of them, and
 * equal the emulated kernel's for normal values (tests run the packing
 * through it on any CPU; the instruction flushes subnormal inputs and
 * results, the emulation does not). The kernel's epilogue adds the bias and
 * the old C in fp32 and rounds once, in registers, as the other ways do.
 */
#include <stdint.h>
#include <string.h>

#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/gemm_store.h"
#include "backend/cpu/kernels.h"

#define ROWS 6  /* rows of the micro-kernel */
#define COLS 64 /* its columns: four zmm of fp32 */
/* The longest K summed in one pass, in pairs: a B block of 1024 x 64 pairs
 * is 256 KB, held in L2 while the rows of A stream past */
#ifndef KC_MAX
#define KC_MAX 1024
#endif

static uint32_t load32(const uint16_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t pair16(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

/* The 32-bit lanes from 64-byte boundaries: packed panels start aligned. */
static uint32_t *align64(void *p) { return (uint32_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* The pairs of K summed per pass: at most KC_MAX, in equal chunks. */
static int64_t chunk_pairs(int64_t K2) {
    int64_t nk = (K2 + KC_MAX - 1) / KC_MAX;
    return (K2 + nk - 1) / nk;
}

/* op(B) = B [K, n] is packed a chunk of K at a time across the tile's whole
 * width, its n columns (rounded up to blocks) one run: 0.14 ns a cold
 * element where 64 columns at a time took 0.16 (the transpose: 0.11) */
static int64_t pad_cols(int64_t n) { return (n + COLS - 1) / COLS * COLS; }

/* The k-major A's row stride, in pairs: a whole number of 64-byte lines,
 * and an odd one, so that the lines one block of rows reads down K fall in
 * every L1 set (at 768 rows, 48 lines apart, they fell in 4 of 64 and
 * missed L1 at every step). */
static int64_t a_pack_stride(int64_t m) {
    int64_t ld = (m + 15) / 16 * 16;
    return ld / 16 % 2 ? ld : ld + 16;
}

static int64_t lines(int64_t lanes) { return (lanes + 15) / 16 * 16; } /* 32-bit lanes to whole 64-byte lines */

/* A tile's scratch, in 32-bit lanes from its first 64-byte line: A^T's
 * packed pairs (op(A) = A^T only), B's packed chunk (op(B) = B: the
 * tile's whole width; B^T: one block of COLS), the bias widened, every
 * column block's sums between K's chunks. Each area only grows with m, n
 * and K (B's is sized for KC_MAX pairs once K is chunked: a chunk of a
 * longer K can be shorter), so the bytes for the largest tile hold every
 * smaller one (attention's tiles share one scratch). */
typedef struct {
    int64_t b, bias, part, end;
} pairs_layout;

static pairs_layout layout_of(int ta, int tb, int64_t m, int64_t n, int64_t K) {
    int64_t K2 = (PIPIT_MAX(K, 1) + 1) / 2, kc = chunk_pairs(K2);
    pairs_layout l;
    l.b = lines(ta ? a_pack_stride(m) * K2 : 0);
    l.bias = l.b + lines(PIPIT_MIN(K2, KC_MAX) * (tb ? COLS : pad_cols(n)));
    l.part = l.bias + lines(COLS);
    l.end = l.part + (kc < K2 ? m * pad_cols(n) : m * COLS);
    return l;
}

size_t pipit__pairs_scratch_bytes(int ta, int tb, int64_t mt, int64_t nt, int64_t K) {
    return (size_t)(layout_of(ta, tb, mt, nt, K).end + 16) * 4; /* + the start's alignment */
}

/* A's packed pairs up to 512 KB: GPT-2's LM head dW (op(A) = dlogits^T,
 * 50257 rows) packed 3200 rows at a time read 1.6 MB per column block. */
#define A_PACK_BYTES ((int64_t)512 << 10)

int64_t pipit__pairs_cols(int64_t nt, int64_t K) {
    int64_t kc = chunk_pairs((PIPIT_MAX(K, 1) + 1) / 2), fit = A_PACK_BYTES / (4 * kc) / COLS * COLS;
    return PIPIT_MIN(nt, PIPIT_MAX(fit, COLS));
}

int64_t pipit__pairs_rows(int64_t mt, int64_t K) {
    int64_t K2 = (PIPIT_MAX(K, 1) + 1) / 2, fit = A_PACK_BYTES / (4 * K2) / ROWS * ROWS;
    return PIPIT_MIN(mt, PIPIT_MAX(fit, 8 * ROWS));
}

/* ------------------------------------------------------------ kernels */

/* Where a block's sums go: C's element (r, j) of the block at c (row
 * stride ldc), for j < cols; fp32 C (c32) plus the old C when accumulating,
 * or bf16 C: plus the bias (bias[j], fp32, NULL: none), plus the old C,
 * rounded once. A long K is summed in chunks (the B block of each stays in
 * L2): the sums start from the fp32 partials part [r][COLS] unless first,
 * and go back there unless last; fp32 partials change no bit. */
typedef struct {
    void *c;
    int64_t ldc;
    const float *bias;
    float *part;
    int c32, accumulate, cols, first, last, stream;
} pair_out;

static float bf16_bits_to_f32(uint32_t bits16) { return pipit__bf16_to_f32((pipit__bf16){(uint16_t)bits16}); }

static void out_scalar(const pair_out *o, int64_t r, int64_t j, float v) {
    pipit__gemm_store1(o->c, o->ldc, o->c32, o->bias, o->accumulate, r, j, v);
}

/* rows x COLS sums: the pair of op(A) row r at a + r*rs + k*ks (in bf16
 * elements), k < K2, dotted with bp [k][COLS] (row stride ldb); tail: one
 * more pair, (a[r*rs + K2*ks], 0), the last element of an odd K read in
 * place (bp's row K2 holds its pairs (b, 0)). */
typedef void (*pair_kernel)(const uint16_t *a, int64_t rs, int64_t ks, int64_t K2, int tail, const uint32_t *bp,
                            int64_t ldb, const pair_out *o, int rows);

static uint32_t a_pair(const uint16_t *a, int64_t k, int64_t K2) { return k < K2 ? load32(a) : a[0]; }

/* vdpbf16ps as the instruction set reference states it, lane by lane (the
 * odd products first): tests run the packing through it. */
static void kernel_emulated(const uint16_t *a, int64_t rs, int64_t ks, int64_t K2, int tail, const uint32_t *bp,
                            int64_t ldb, const pair_out *o, int rows) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < o->cols; j++) {
            float acc = o->first ? 0.0f : o->part[r * COLS + j];
            for (int64_t k = 0; k < K2 + tail; k++) {
                uint32_t x = a_pair(a + r * rs + k * ks, k, K2), y = bp[k * ldb + j];
                acc += bf16_bits_to_f32(x >> 16) * bf16_bits_to_f32(y >> 16);
                acc += bf16_bits_to_f32(x & 0xffff) * bf16_bits_to_f32(y & 0xffff);
            }
            if (o->last)
                out_scalar(o, r, j, acc);
            else
                o->part[r * COLS + j] = acc;
        }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PAIRS_X86 1
#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

/* out_scalar on the 16 columns 16q.. of row r */
TGT static inline __attribute__((always_inline)) void out16(const pair_out *o, int64_t r, int q, __m512 v) {
    int w = o->cols - 16 * q;
    if (w > 0) pipit__gemm_store16(o->c, o->ldc, o->c32, o->bias, o->accumulate, o->stream, r, 16 * q, w, v);
}

/* Row r's 64 sums in the usual case, a whole block not added into: the
 * flags tested once a row and one subnormal test for its four vectors
 * (vfpclassps; vcvtneps2bf16 reads a subnormal as zero, so those rows take
 * the exact rounding), where out16 takes ~35 instructions a vector (8 % of
 * a K = 256 tile's time). Any other case takes out16: the same bits. */
TGT static inline __attribute__((always_inline)) void out_row(const pair_out *o, int64_t r, __m512 v0, __m512 v1,
                                                              __m512 v2, __m512 v3) {
    __m512 v[4] = {v0, v1, v2, v3};
    if (o->cols == COLS && !o->accumulate && o->c32) {
        float *c = (float *)o->c + r * o->ldc;
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
            if (o->stream) _mm512_stream_ps(c + 16 * q, v[q]);
            else _mm512_storeu_ps(c + 16 * q, v[q]);
        }
        return;
    }
    if (o->cols == COLS && !o->accumulate) {
        __mmask16 sub = 0;
        _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
            if (o->bias) v[q] = _mm512_add_ps(v[q], _mm512_loadu_ps(o->bias + 16 * q));
            sub |= _mm512_fpclass_ps_mask(v[q], 0x20); /* 0x20: subnormal */
        }
        __m256i *c = (__m256i *)(void *)((uint16_t *)o->c + r * o->ldc);
        _Pragma("GCC unroll 4") for (int q = 0; !sub && q < 4; q++) {
            __m256i h = (__m256i)_mm512_cvtneps_pbh(v[q]);
            if (o->stream) _mm256_stream_si256(c + q, h);
            else _mm256_storeu_si256(c + q, h);
        }
        if (!sub) return;
    }
    out16(o, r, 0, v0), out16(o, r, 1, v1), out16(o, r, 2, v2), out16(o, r, 3, v3);
}

#define ACC(r) __m512 c##r##0 = part_in(o, R, r, 0), c##r##1 = part_in(o, R, r, 1), c##r##2 = part_in(o, R, r, 2), \
                     c##r##3 = part_in(o, R, r, 3)
#define STEP(r, LOAD)                                                                                 \
    if (R > (r)) {                                                                                    \
        __m512bh x = (__m512bh)_mm512_set1_epi32((int)LOAD(a + (r) * rs));                            \
        c##r##0 = _mm512_dpbf16_ps(c##r##0, x, b0), c##r##1 = _mm512_dpbf16_ps(c##r##1, x, b1);      \
        c##r##2 = _mm512_dpbf16_ps(c##r##2, x, b2), c##r##3 = _mm512_dpbf16_ps(c##r##3, x, b3);      \
    }
#define OUT(r)                                                                                        \
    if (R > (r) && o->last) {                                                                         \
        out_row(o, r, c##r##0, c##r##1, c##r##2, c##r##3);                                            \
    } else if (R > (r)) {                                                                             \
        _mm512_storeu_ps(o->part + (r) * COLS, c##r##0), _mm512_storeu_ps(o->part + (r) * COLS + 16, c##r##1); \
        _mm512_storeu_ps(o->part + (r) * COLS + 32, c##r##2), _mm512_storeu_ps(o->part + (r) * COLS + 48, c##r##3); \
    }

/* row r's accumulator q at the start of a chunk */
TGT static inline __attribute__((always_inline)) __m512 part_in(const pair_out *o, int R, int r, int q) {
    return R > r && !o->first ? _mm512_loadu_ps(o->part + r * COLS + 16 * q) : _mm512_setzero_ps();
}

/* R rows (a constant where inlined: the unused accumulators vanish) */
TGT static inline __attribute__((always_inline)) void kernel_r(int R, const uint16_t *a, int64_t rs, int64_t ks,
                                                               int64_t K2, int tail, const uint32_t *bp,
                                                               int64_t ldb, const pair_out *out) {
    const pair_out local = *out, *o = &local; /* C's stores may alias anything, a local they cannot: no reloads */
    ACC(0);
    ACC(1);
    ACC(2);
    ACC(3);
    ACC(4);
    ACC(5);
    for (int64_t k = 0; k < K2 + tail; k++, a += ks, bp += ldb) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp), b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
        __m512bh b2 = (__m512bh)_mm512_loadu_si512(bp + 32), b3 = (__m512bh)_mm512_loadu_si512(bp + 48);
        if (k < K2) {
            STEP(0, load32) STEP(1, load32) STEP(2, load32) STEP(3, load32) STEP(4, load32) STEP(5, load32)
        } else {
            STEP(0, *) STEP(1, *) STEP(2, *) STEP(3, *) STEP(4, *) STEP(5, *)
        }
    }
    OUT(0) OUT(1) OUT(2) OUT(3) OUT(4) OUT(5)
}

#define KERNEL_R(R)                                                                                                \
    TGT static void kernel##R(const uint16_t *a, int64_t rs, int64_t ks, int64_t K2, int tail, const uint32_t *bp, \
                              int64_t ldb, const pair_out *o) {                                                    \
        kernel_r(R, a, rs, ks, K2, tail, bp, ldb, o);                                                              \
    }
KERNEL_R(1)
KERNEL_R(2)
KERNEL_R(3)
KERNEL_R(4)
KERNEL_R(5)
KERNEL_R(6)

static void kernel_avx512(const uint16_t *a, int64_t rs, int64_t ks, int64_t K2, int tail, const uint32_t *bp,
                          int64_t ldb, const pair_out *o, int rows) {
    switch (rows) {
    case 6: kernel6(a, rs, ks, K2, tail, bp, ldb, o); break;
    case 5: kernel5(a, rs, ks, K2, tail, bp, ldb, o); break;
    case 4: kernel4(a, rs, ks, K2, tail, bp, ldb, o); break;
    case 3: kernel3(a, rs, ks, K2, tail, bp, ldb, o); break;
    case 2: kernel2(a, rs, ks, K2, tail, bp, ldb, o); break;
    default: kernel1(a, rs, ks, K2, tail, bp, ldb, o); break;
    }
}
#else
#define PAIRS_X86 0
#define kernel_avx512 kernel_emulated /* never chosen off x86-64 */
#endif

/* ------------------------------------------------------------ packing */

/* dst [K2][ldp] = the pairs (x[2k][j], x[2k+1][j]) for j < w, x [K, w] of
 * row stride ld; zero for w <= j < wp and for the missing row of an odd K.
 * B's rows as op(B) = B, and A's as op(A) = A^T. */
static void interleave_rows(const uint16_t *x, int64_t ld, int64_t K, int64_t w, int64_t wp, uint32_t *dst,
                            int64_t ldp, int vector);

static void interleave_rows_scalar(const uint16_t *x, int64_t ld, int64_t K, int64_t w, int64_t wp, uint32_t *dst,
                                   int64_t ldp, int64_t j0) {
    for (int64_t k = 0; 2 * k < K; k++) {
        const uint16_t *r0 = x + 2 * k * ld, *r1 = 2 * k + 1 < K ? r0 + ld : NULL;
        for (int64_t j = j0; j < w; j++) dst[k * ldp + j] = pair16(r0[j], r1 ? r1[j] : 0);
        int64_t z = PIPIT_MAX(j0, w);
        if (z < wp) memset(dst + k * ldp + z, 0, (size_t)(wp - z) * sizeof *dst); /* the padding */
    }
}

#if PAIRS_X86
#define AHEAD 16 /* rows: 0.142 -> 0.121 ns a cold element (8 to L1: 0.122, 12: 0.13, none: 0.142) */
TGT static void interleave_rows_avx512(const uint16_t *x, int64_t ld, int64_t K, int64_t w16, uint32_t *dst,
                                       int64_t ldp) {
    /* 32 columns at a time: one two-source permute per 16 pairs */
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                            37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    for (int64_t k = 0; 2 * k + 1 < K; k++) {
        const uint16_t *r0 = x + 2 * k * ld, *r1 = r0 + ld;
        int64_t j = 0;
        if (2 * k + AHEAD + 1 < K) /* the rows 16 ahead into L2: a cold B's rows are runs apart */
            for (int64_t q = 0; q < w16 + 32; q += 32) {
                _mm_prefetch((const char *)(r0 + AHEAD * ld + q), _MM_HINT_T1);
                _mm_prefetch((const char *)(r1 + AHEAD * ld + q), _MM_HINT_T1);
            }
        for (; j + 32 <= w16; j += 32) {
            __m512i a = _mm512_loadu_si512(r0 + j), b = _mm512_loadu_si512(r1 + j);
            _mm512_storeu_si512(dst + k * ldp + j, _mm512_permutex2var_epi16(a, lo_idx, b));
            _mm512_storeu_si512(dst + k * ldp + j + 16, _mm512_permutex2var_epi16(a, hi_idx, b));
        }
        for (; j < w16; j += 16) {
            __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r0 + j)));
            __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(r1 + j)));
            _mm512_storeu_si512(dst + k * ldp + j, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}
#endif

static void interleave_rows(const uint16_t *x, int64_t ld, int64_t K, int64_t w, int64_t wp, uint32_t *dst,
                            int64_t ldp, int vector) {
    int64_t w16 = 0;
#if PAIRS_X86
    if (vector && K >= 2) {
        w16 = w / 16 * 16;
        interleave_rows_avx512(x, ld, K, w16, dst, ldp);
        if (K % 2) /* the last pair of an odd K: its own scalar pass */
            interleave_rows_scalar(x + (K - 1) * ld, ld, 1, w16, w16, dst + K / 2 * ldp, ldp, 0);
    }
#else
    (void)vector;
#endif
    interleave_rows_scalar(x, ld, K, w, wp, dst, ldp, w16);
}

/* bp [K2][ldp] = the pairs (x[j][2k], x[j][2k+1]) for j < n, x [n, K] of row
 * stride ld (op(B) = B^T); zero for n <= j < ldp and past an odd K. */
static void transpose_pairs_scalar(const uint16_t *x, int64_t ld, int64_t n, int64_t K, uint32_t *bp, int64_t ldp,
                                   int64_t j0, int64_t k0) {
    int64_t K2 = (K + 1) / 2;
    for (int64_t k = 0; k < K2; k++)
        for (int64_t j = k < k0 ? j0 : 0; j < ldp; j++) {
            uint16_t lo = j < n ? x[j * ld + 2 * k] : 0, hi = j < n && 2 * k + 1 < K ? x[j * ld + 2 * k + 1] : 0;
            bp[k * ldp + j] = pair16(lo, hi);
        }
}

#if PAIRS_X86
/* 16 x 16 32-bit lanes: r[i] holds row i; on return r[i] holds column i. */
TGT static inline __attribute__((always_inline)) void transpose16(__m512i r[16]) {
    __m512i t[16];
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    _Pragma("GCC unroll 16") for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    _Pragma("GCC unroll 16") for (int i = 0; i < 4; i++) { /* 128-bit blocks: rows i, i+4 and i+8, i+12 */
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    _Pragma("GCC unroll 16") for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* The full 16 x 16 blocks: columns j < n16, pairs k < k16; x's rows
 * below ahead may be prefetched (the tile's next columns too: a block of
 * 16 rows of B^T is 16 streams, more than the hardware prefetcher follows). */
TGT static void transpose_pairs_avx512(const uint16_t *x, int64_t ld, int64_t n16, int64_t k16, uint32_t *bp,
                                       int64_t ldp, int64_t ahead) {
    __m512i r[16];
    for (int64_t j = 0; j < n16; j += 16)
        for (int64_t k = 0; k < k16; k += 16) {
            _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(x + (j + i) * ld + 2 * k);
            for (int i = 0; i < 16 && j + 16 + i < ahead; i++) /* the next 16 columns' lines: 16 streams at once */
                _mm_prefetch((const char *)(x + (j + 16 + i) * ld + 2 * k), _MM_HINT_T0);
            transpose16(r);
            _Pragma("GCC unroll 16") for (int i = 0; i < 16; i++) _mm512_storeu_si512(bp + (k + i) * ldp + j, r[i]);
        }
}
#endif

static void transpose_pairs(const uint16_t *x, int64_t ld, int64_t n, int64_t K, uint32_t *bp, int64_t ldp,
                            int vector, int64_t ahead) {
    int64_t n16 = 0, k16 = 0;
#if PAIRS_X86
    if (vector) {
        n16 = n / 16 * 16, k16 = K / 32 * 16; /* whole pairs only */
        transpose_pairs_avx512(x, ld, n16, k16, bp, ldp, ahead);
    }
#else
    (void)vector, (void)ahead;
#endif
    transpose_pairs_scalar(x, ld, n, K, bp, ldp, n16, k16);
}

/* The packings for gemm_amx.c, whose tiles read pairs as these lay them out. */
void pipit__pairs_interleave(const uint16_t *x, int64_t ld, int64_t K, int64_t w, int64_t wp, uint32_t *dst,
                             int64_t ldp, int vector) {
    interleave_rows(x, ld, K, w, wp, dst, ldp, vector && PAIRS_X86);
}

void pipit__pairs_transpose(const uint16_t *x, int64_t ld, int64_t n, int64_t K, uint32_t *bp, int64_t ldp,
                            int vector, int64_t ahead) {
    transpose_pairs(x, ld, n, K, bp, ldp, vector && PAIRS_X86, ahead);
}

/* ------------------------------------------------------------ a tile */

static void store_fence(void) {
#if PAIRS_X86
    _mm_sfence();
#endif
}

/* op(A)'s rows as the kernel reads them: *pa, the row stride *rs and the
 * pair stride *ks, in bf16 elements, *K2 whole pairs and *tail (an odd K's
 * last element read alone); ap holds what needs packing. */
static void rows_of_a(int ta, int64_t m, int64_t K, const uint16_t *a, int64_t lda, uint32_t *ap, int avx512,
                      const uint16_t **pa, int64_t *rs, int64_t *ks, int64_t *K2, int *tail) {
    if (ta) { /* A [K, m]: k-major pairs, row i is lane i; an odd K's last pair (x, 0) */
        int64_t ld = a_pack_stride(m);
        interleave_rows(a, lda, K, m, m, ap, ld, avx512);
        *pa = (const uint16_t *)ap, *rs = 2, *ks = 2 * ld, *K2 = (K + 1) / 2, *tail = 0;
    } else { /* in place */
        *pa = a, *rs = lda, *ks = 2, *K2 = K / 2, *tail = (int)(K % 2);
    }
}

void pipit__pairs_tile(int ta, int tb, int64_t m, int64_t n, int64_t K, const pipit__bf16 *a, int64_t lda,
                       const pipit__bf16 *b, int64_t ldb, const pipit__bf16 *bias, void *c, int c32, int64_t ldc,
                       int accumulate, int stream, void *scratch, int avx512) {
    avx512 = avx512 && PAIRS_X86;
    size_t ec = c32 ? sizeof(float) : sizeof(pipit__bf16);
    stream = stream && avx512 && !accumulate && (uintptr_t)c % 64 == 0 && (size_t)ldc * ec % 64 == 0; /* whole lines */
    int64_t K2 = (K + 1) / 2, kc = chunk_pairs(K2), ldp = tb ? COLS : pad_cols(n);
    pairs_layout l = layout_of(ta, tb, m, n, K);
    uint32_t *ap = align64(scratch), *bp = ap + l.b;
    float *bias_f = (float *)(ap + l.bias), *part = (float *)(ap + l.part);
    const uint16_t *pa, *pb = (const uint16_t *)b;
    int64_t rs, ks, Ka;
    int tail;
    rows_of_a(ta, m, K, (const uint16_t *)a, lda, ap, avx512, &pa, &rs, &ks, &Ka, &tail);
    pair_kernel kern = avx512 ? kernel_avx512 : kernel_emulated;
    for (int64_t p0 = 0; p0 < K2; p0 += kc) { /* a long K a chunk at a time: B's block stays in L2 */
        int64_t p1 = PIPIT_MIN(K2, p0 + kc), k0 = 2 * p0, kn = PIPIT_MIN(K, 2 * p1) - k0;
        int64_t whole = PIPIT_MIN(p1, Ka) - p0; /* the pairs read whole; an odd K's tail is in the last chunk */
        if (!tb) interleave_rows(pb + k0 * ldb, ldb, kn, n, ldp, bp, ldp, avx512);
        for (int64_t j = 0; j < n; j += COLS) {
            int cols = (int)PIPIT_MIN(COLS, n - j);
            if (bias && p1 == K2) pipit__bf16_widen_n(bias_f, bias + j, cols);
            if (tb) transpose_pairs(pb + j * ldb + k0, ldb, cols, kn, bp, COLS, avx512, n - j);
            pair_out o = {NULL, ldc, bias ? bias_f : NULL, NULL, c32, accumulate, cols, p0 == 0, p1 == K2, stream};
            float *pj = part + (kc < K2 ? j * m : 0); /* this block's sums between chunks */
            const uint32_t *bj = bp + (tb ? 0 : j);
            for (int64_t i = 0; i < m; i += ROWS) {
                o.c = (char *)c + (size_t)(i * ldc + j) * ec, o.part = pj + i * COLS;
                kern(pa + i * rs + p0 * ks, rs, ks, whole, p1 > Ka ? tail : 0, bj, ldp, &o, (int)PIPIT_MIN(ROWS, m - i));
            }
        }
    }
    if (stream) store_fence(); /* the streamed lines visible before the pool's barrier says C is done */
}
