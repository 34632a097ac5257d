/*
 * gemm_bf16.c — GEMM on bf16 operands, accumulated in fp32 and rounded
 * once per element of C. C is cut into tiles by gemm.c's shape-only rule
 * and tiles are dealt to threads, as for f32; a tile is formed in one of
 * four ways, chosen once per process:
 *   fp32 panels (any CPU): the tile's rows of op(A) and columns of op(B)
 *     are converted to fp32 (exactly) and one single-threaded cblas_sgemm
 *     forms it: bf16 at the fp32 BLAS's speed, less the conversions;
 *   avx512bf16 (the default on CPUs that have AVX512-BF16 and no AMX):
 *     operands read as bf16 pairs along K and a micro-kernel of vdpbf16ps
 *     (two bf16 products added into an fp32 lane) forms 6 x 64 blocks of
 *     it (gemm_pairs.c);
 *   amx (the default where the CPU has AMX-BF16 and Linux grants the
 *     process its tiles): TDPBF16PS on the same packed pairs, 32 x 32 of C
 *     in four accumulator tiles (gemm_amx.c);
 *   onednn (the default where oneDNN has an AMX bf16 matmul and pipit's
 *     AMX way cannot run; chosen too where it has a bf16 matmul that is
 *     not a reference one and the CPU lacks AVX512-BF16): each tile one
 *     single-threaded oneDNN matmul, its primitive cached per tile shape
 *     (gemm_onednn.c); the way above that this CPU has runs the shapes
 *     oneDNN lacks.
 * The ways differ in the last bits (their sums run in other orders); none
 * depends on the thread count. PIPIT_BF16_GEMM=amx|onednn|pairs|panels forces
 * one (refused with a line on stderr where the CPU cannot run it). The
 * avx512bf16 kernel is compiled with target attributes, so the build needs
 * no -mavx512* flag; the pair packing around it is tested on every machine
 * through an emulated micro-kernel (tests/test_bf16.c), the oneDNN path in
 * f32 (tests/test_onednn.c).
 */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/kernels.h"

enum { KIND_UNSET = 0, KIND_PANELS, KIND_AVX512, KIND_EMULATED, KIND_ONEDNN, KIND_AMX, KIND_AMX_EMULATED };

static _Atomic int gemm_kind;

/* The current kernel: where oneDNN is chosen, the way of the shapes it has
 * no implementation for. */
static int fallback_kind(void) { return pipit__cpu_has_avx512bf16() ? KIND_AVX512 : KIND_PANELS; }

/* The line on stderr about PIPIT_BF16_GEMM, once per process (tests choose
 * again and again). */
static _Atomic int said;
#define SAY(...) (atomic_exchange(&said, 1) ? (void)0 : (void)fprintf(stderr, __VA_ARGS__))

/* The default, by speed: where AMX runs, pipit's AMX tiles (GPT-2 124M's
 * bf16 step on a 5th-generation Xeon: 808 ms on one core against 1003
 * through oneDNN's tiles, in runs minutes apart, docs/benchmarks.md §14);
 * on AVX512-BF16 without AMX, pipit's pairs kernel (GPT-2 124M's bf16 step
 * 2-3% faster than through oneDNN's tiles: its GEMMs 0.82-0.95 of the
 * vdpbf16ps peak against oneDNN tiles' 0.80-0.90, docs/benchmarks.md §14);
 * where oneDNN has an AMX kernel and pipit's cannot run (the OS refused
 * pipit the tiles, or no AVX512-BF16 for its rounding), oneDNN; otherwise
 * oneDNN where it has a bf16 matmul that is not a reference one, else fp32
 * panels. */
static int default_kind(const char *why_not_onednn) {
    if (!pipit__cpu_amx_why_not()) return KIND_AMX;
    const char *impl = why_not_onednn ? NULL : pipit__onednn_bf16_impl();
    if (impl && strstr(impl, "amx")) return KIND_ONEDNN;
    if (pipit__cpu_has_avx512bf16()) return KIND_AVX512;
    return why_not_onednn ? KIND_PANELS : KIND_ONEDNN;
}

/* The default kind, or the one PIPIT_BF16_GEMM=amx|onednn|pairs|panels forces
 * (refused, with a line on stderr, where this CPU cannot run it). */
static int kind_of_cpu(void) {
    const char *e = getenv("PIPIT_BF16_GEMM");
    if (e && *e && strcmp(e, "panels") == 0) return KIND_PANELS;
    if (e && *e && strcmp(e, "amx") == 0) {
        if (!pipit__cpu_amx_why_not()) return KIND_AMX;
        SAY("pipit: PIPIT_BF16_GEMM=amx refused: %s; choosing by the CPU\n", pipit__cpu_amx_why_not());
        e = NULL;
    }
    if (e && *e && strcmp(e, "pairs") == 0) {
        if (pipit__cpu_has_avx512bf16()) return KIND_AVX512;
        SAY("pipit: PIPIT_BF16_GEMM=pairs refused: this CPU has no AVX512-BF16; using fp32 panels\n");
        return KIND_PANELS;
    }
    const char *why = pipit__onednn_bf16_why_not();
    if (e && *e && strcmp(e, "onednn") == 0) {
        if (!why) return KIND_ONEDNN;
        SAY("pipit: PIPIT_BF16_GEMM=onednn refused: %s; using %s\n", why,
            fallback_kind() == KIND_AVX512 ? "avx512bf16" : "fp32 panels");
        return fallback_kind();
    }
    if (e && *e)
        SAY("pipit: PIPIT_BF16_GEMM=%s is none of amx, onednn, pairs, panels; choosing by the CPU\n", e);
    return default_kind(why);
}

static int current_kind(void) {
    int k = atomic_load(&gemm_kind);
    if (k == KIND_UNSET) {
        k = kind_of_cpu();
        atomic_store(&gemm_kind, k);
    }
    return k;
}

const char *pipit__gemm_bf16_kind(void) {
    switch (current_kind()) {
    case KIND_AMX: return "amx";
    case KIND_AMX_EMULATED: return "amx tiles (emulated TDPBF16PS, tests only)";
    case KIND_AVX512: return "avx512bf16";
    case KIND_EMULATED: return "bf16 pairs (emulated vdpbf16ps, tests only)";
    case KIND_ONEDNN: return pipit__onednn_bf16_name();
    default: return "fp32 panels";
    }
}

void pipit__gemm_bf16_set_kind(int kind) { atomic_store(&gemm_kind, kind); }

int pipit__gemm_bf16_onednn(void) { return current_kind() == KIND_ONEDNN; }

int pipit__gemm_bf16_direct(void) {
    int k = current_kind();
    return k == KIND_ONEDNN || k == KIND_AVX512 || k == KIND_AMX;
}

int pipit__gemm_bf16_pairs(void) {
    int k = current_kind();
    if (k == KIND_AVX512 || k == KIND_AMX || (k == KIND_ONEDNN && pipit__cpu_has_avx512bf16())) return 1;
    return k == KIND_EMULATED || k == KIND_AMX_EMULATED ? 2 : 0;
}

/* ------------------------------------------------------------ scratch */

/* The tiles' buffers (panels, packed pairs, partial sums) are the calling
 * thread's, kept from one GEMM to the next up to SCRATCH_KEEP bytes: the
 * largest (GPT-2 124M's LM head backward at 256 tokens: 90 MB of fp32
 * panels) is beyond glibc's mmap threshold, so a fresh malloc of it is a
 * fresh mapping, 22,000 page faults and ~2% of a bf16 step (perf, AMD
 * EPYC). Keeping it costs no peak memory (the step needed it anyway) but
 * holds it between steps; larger buffers are freed after their GEMM, as
 * before; a thread's kept buffer is freed when the thread exits. */
#define SCRATCH_KEEP ((size_t)256 << 20)

static _Thread_local struct {
    void *p;
    size_t bytes;
} scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_key_make(void) { scratch_key_ok = pthread_key_create(&scratch_key, free) == 0; }

/* A buffer of at least bytes for this thread, or NULL; give it back with
 * scratch_put. Not re-entrant (one GEMM at a time per thread). */
static void *scratch_get(size_t bytes) {
    if (scratch.p && scratch.bytes >= bytes) return scratch.p;
    if (bytes > SCRATCH_KEEP) return malloc(bytes);
    pthread_once(&scratch_once, scratch_key_make);
    if (!scratch_key_ok) return malloc(bytes);
    free(scratch.p);
    scratch.p = malloc(bytes);
    scratch.bytes = scratch.p ? bytes : 0;
    pthread_setspecific(scratch_key, scratch.p); /* freed at the thread's exit */
    return scratch.p;
}

static void scratch_put(void *p) {
    if (p != scratch.p) free(p);
}

/* ------------------------------------------------------------ fp32 panels */

static int64_t cdiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

/* Element off of C, bf16 or (c32) fp32. */
static void *c_tile(void *C, int c32, int64_t off) {
    return c32 ? (void *)((float *)C + off) : (void *)((pipit__bf16 *)C + off);
}

/* dst [r, c] (row stride c) = src [r, c] of row stride ld, widened */
static void widen(float *dst, const pipit__bf16 *src, int64_t r, int64_t c, int64_t ld) {
    for (int64_t i = 0; i < r; i++) pipit__bf16_widen_n(dst + i * c, src + i * ld, c);
}

/* cf [r, c] of row stride c0 += bias [c] on every row (none: bias NULL) */
static void add_bias(float *cf, int64_t c0, const pipit__bf16 *bias, int64_t r, int64_t c) {
    for (int64_t i = 0; bias && i < r; i++)
        for (int64_t j = 0; j < c; j++) cf[i * c0 + j] += pipit__bf16_to_f32(bias[j]);
}

/* dst [r, c] of row stride ld = src [r, c0] (row stride c0, first c columns), rounded */
static void narrow(pipit__bf16 *dst, int64_t ld, const float *src, int64_t r, int64_t c, int64_t c0) {
    for (int64_t i = 0; i < r; i++) pipit__bf16_narrow_n(dst + i * ld, src + i * c0, c);
}

/* One tile [m, n] of C from the fp32 panels af (op(A)'s m rows, stored as
 * in A: [m, K] or [K, m], packed) and bf (op(B)'s n columns: [K, n] or
 * [n, K]); cf holds m*n floats. An fp32 C (c32) is formed in place. */
static void tile_panels(int ta, int tb, int64_t m, int64_t n, int64_t K, const float *af, const float *bf,
                        const pipit__bf16 *bias, void *cv, int c32, int64_t ldc, int accumulate, float *cf) {
    if (c32) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m,
                    (blasint)n, (blasint)K, 1.0f, af, (blasint)(ta ? m : K), bf, (blasint)(tb ? K : n),
                    accumulate ? 1.0f : 0.0f, cv, (blasint)ldc);
        return;
    }
    pipit__bf16 *c = cv;
    if (accumulate) widen(cf, c, m, n, ldc);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n,
                (blasint)K, 1.0f, af, (blasint)(ta ? m : K), bf, (blasint)(tb ? K : n), accumulate ? 1.0f : 0.0f, cf,
                (blasint)n);
    add_bias(cf, n, bias, m, n);
    narrow(c, ldc, cf, m, n, n);
}

/* The calling thread's tiles (u = ith, ith + nth, ... of batch * tiles,
 * row-major within a batch: the deal of gemm.c) in one of two orders:
 * idx -> u, row block by row block (0) or column block by column block (1). */
static int64_t panels_tile(int colmajor, int64_t idx, int64_t tiles, int64_t tm, int64_t tn) {
    if (!colmajor) return idx;
    int64_t b = idx / tiles, r = idx % tiles;
    return b * tiles + r % tm * tn + r / tm;
}

/* The fp32-panels GEMM. A thread keeps the fp32 panel of op(A)'s rows and
 * the one of op(B)'s columns it converted last and converts again only when
 * a tile needs other rows or columns (the source address and size say
 * which: a batch-shared operand is converted once); it visits its tiles row
 * block by row block or column block by column block, whichever converts
 * fewer elements. The order and the reuse change no bit: each tile is the
 * same cblas_sgemm on the same fp32 values as when every tile converted
 * its own panels. s holds mt*K + K*nt + mt*nt floats. */
static void gemm_panels(int ta, int tb, int64_t batch, int64_t M, int64_t N, int64_t K, const pipit__bf16 *A,
                        int64_t lda, int64_t sA, const pipit__bf16 *B, int64_t ldb, int64_t sB, const pipit__bf16 *bias,
                        void *C, int c32, int64_t ldc, int64_t sC, int accumulate, int ith, int nth, int64_t mt,
                        int64_t nt, float *s) {
    int64_t tm = cdiv(M, mt), tn = cdiv(N, nt), tiles = tm * tn, total = batch * tiles;
    float *af = s, *bf = af + mt * K, *cf = bf + K * nt;
    int64_t best = 0, cost[2] = {0, 0};
    for (int o = 0; o < 2; o++) { /* elements each order converts */
        const void *ka = NULL, *kb = NULL;
        for (int64_t idx = 0; idx < total; idx++) {
            int64_t u = panels_tile(o, idx, tiles, tm, tn);
            if (u % nth != ith) continue;
            int64_t b = u / tiles, t = u % tiles, i0 = t / tn * mt, j0 = t % tn * nt;
            const pipit__bf16 *a = A + b * sA + (ta ? i0 : i0 * lda), *bb = B + b * sB + (tb ? j0 * ldb : j0);
            if (a != ka) cost[o] += PIPIT_MIN(mt, M - i0) * K, ka = a;
            if (bb != kb) cost[o] += PIPIT_MIN(nt, N - j0) * K, kb = bb;
        }
    }
    best = cost[1] < cost[0];
    const pipit__bf16 *ka = NULL, *kb = NULL; /* the panels af and bf hold */
    for (int64_t idx = 0; idx < total; idx++) {
        int64_t u = panels_tile((int)best, idx, tiles, tm, tn);
        if (u % nth != ith) continue;
        int64_t b = u / tiles, t = u % tiles, i0 = t / tn * mt, j0 = t % tn * nt;
        int64_t m = PIPIT_MIN(mt, M - i0), n = PIPIT_MIN(nt, N - j0);
        void *c = c_tile(C, c32, b * sC + i0 * ldc + j0); /* tile [m,n] of C[b] */
        const pipit__bf16 *a = A + b * sA + (ta ? i0 : i0 * lda), *bb = B + b * sB + (tb ? j0 * ldb : j0);
        if (a != ka) { /* within a row block, m is the same for every tile */
            if (ta) widen(af, a, K, m, lda);
            else widen(af, a, m, K, lda);
            ka = a;
        }
        if (bb != kb) {
            if (tb) widen(bf, bb, n, K, ldb);
            else widen(bf, bb, K, n, ldb);
            kb = bb;
        }
        tile_panels(ta, tb, m, n, K, af, bf, bias ? bias + j0 : NULL, c, c32, ldc, accumulate, cf);
    }
}

/* ------------------------------------------------------------ the GEMM */

/* From how many bytes a C is written around the caches (streaming stores:
 * no read for ownership of its lines, and they do not evict what the next
 * ops read). A bf16 C is an activation or its gradient, read by the next
 * op: streamed only beyond STREAM_BYTES, the L3 of a Zen 5 CCD (the LM
 * head's outputs). An fp32 C is, in a bf16 step, a weight's gradient, read
 * first by the post-loop after the whole backward (an fp32 program's GEMMs
 * are OpenBLAS's): streamed beyond STREAM_BYTES_F32, an L2. Into lines the
 * step had long evicted, the write-allocate reads stalled the stores:
 * GPT-2 124M's fc dW (9.4 MB) took 3.5 ms, 1.25 ms streamed; the bf16
 * step's GEMMs 332 -> 227 ms on one core (docs/benchmarks.md §14). */
#define STREAM_BYTES ((uint64_t)32 << 20)
#define STREAM_BYTES_F32 ((uint64_t)2 << 20)

/* The pairs kernel's tiles where op(A) = A^T (weight gradients): no bit
 * of it depends on the tiles, so they are cut for its packing, not by
 * gemm.c's rule: as many rows as keep A^T's packed pairs L2-sized
 * (pipit__pairs_rows), as many columns as keep B's (pipit__pairs_cols),
 * and as many tiles for every thread. Each tile packs its rows of A^T
 * and its columns of B: gemm.c's 384 x 384 tiles of GPT-2's 768 x 3072 x
 * 256 packed A eight times and B twice (~9 % of that GEMM's time on one
 * core at the packing's 0.06 ns an element); three 768 x 1024 tiles pack
 * A three times and B once. */
static void pairs_tiles_ta(int64_t M, int64_t N, int64_t K, int nth, int64_t rows, int64_t *mt, int64_t *nt,
                           int64_t *tn, int64_t *tiles) {
    nth = PIPIT_MAX(nth, 1);
    *mt = pipit__pairs_rows(M, K);
    if (*mt < M) *mt = PIPIT_MAX(rows, *mt / rows * rows); /* whole groups of the micro-kernel's rows */
    int64_t tm = cdiv(M, *mt), tn_ = PIPIT_MAX(cdiv(N, pipit__pairs_cols(N, K)), cdiv(nth, tm));
    while (tn_ < N && (tm * tn_) % nth) tn_++; /* every thread as many tiles (GPT-2's dW at 2 threads had 3) */
    *nt = cdiv(cdiv(N, tn_), 64) * 64;
    *tn = cdiv(N, *nt);
    *tiles = tm * *tn;
}

/* The GEMM on bf16 operands into a bf16 C or (c32) an fp32 C; bias (bf16
 * C only, or NULL): a row added in fp32 before the rounding. */
static void gemm_bf16(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, const pipit__bf16 *A,
                      int64_t lda, int64_t sA, const pipit__bf16 *B, int64_t ldb, int64_t sB, const pipit__bf16 *bias,
                      void *C, int c32, int64_t ldc, int64_t sC, int accumulate, int ith, int nth) {
    if (batch <= 0 || M <= 0 || N <= 0) return;
    PIPIT_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX);
    int64_t mt, nt;
    pipit__gemm_tiles(M, N, K, &mt, &nt);
    int64_t tn = cdiv(N, nt), tiles = cdiv(M, mt) * tn;
    int kind = current_kind();
    if (kind == KIND_ONEDNN) { /* the whole GEMM, unless oneDNN lacks one of its tile shapes */
        if (!pipit__gemm_onednn_bias(PIPIT_BF16, c32 ? PIPIT_F32 : PIPIT_BF16, trans_a, trans_b, batch, M, N, K, A, lda,
                                     sA, B, ldb, sB, bias, C, ldc, sC, accumulate, ith, nth))
            return;
        kind = fallback_kind();
    }
    int amx = kind == KIND_AMX || kind == KIND_AMX_EMULATED;
    if (kind != KIND_PANELS && trans_a) pairs_tiles_ta(M, N, K, nth, amx ? 32 : 6, &mt, &nt, &tn, &tiles);
    int64_t Kp = PIPIT_MAX(K, 1);
    uint64_t c_bytes = (uint64_t)batch * (uint64_t)M * (uint64_t)N * (c32 ? 4u : 2u);
    int stream = !accumulate && c_bytes >= (c32 ? STREAM_BYTES_F32 : STREAM_BYTES);
    size_t bytes = kind == KIND_PANELS ? (size_t)(mt * Kp + Kp * nt + mt * nt) * 4
                   : amx               ? pipit__amx_scratch_bytes(trans_a, trans_b, mt, nt, K)
                                       : pipit__pairs_scratch_bytes(trans_a, trans_b, mt, nt, K);
    void *s = ith < batch * tiles ? scratch_get(bytes) : NULL;
    if (kind == KIND_PANELS && K > 0 && s) {
        gemm_panels(trans_a, trans_b, batch, M, N, K, A, lda, sA, B, ldb, sB, bias, C, c32, ldc, sC, accumulate, ith, nth,
                    mt, nt, s);
        scratch_put(s);
        return;
    }
    for (int64_t u = ith; u < batch * tiles; u += nth) {
        int64_t b = u / tiles, t = u % tiles;
        int64_t i0 = t / tn * mt, j0 = t % tn * nt;
        int64_t m = PIPIT_MIN(mt, M - i0), n = PIPIT_MIN(nt, N - j0);
        void *c = c_tile(C, c32, b * sC + i0 * ldc + j0); /* tile [m,n] of C[b] */
        if (K <= 0 || !s) {
            size_t ec = c32 ? sizeof(float) : sizeof(pipit__bf16);
            for (int64_t i = 0; !accumulate && i < m; i++) memset((char *)c + (size_t)(i * ldc) * ec, 0, (size_t)n * ec);
            for (int64_t i = 0; bias && i < m; i++) /* an empty sum: 0 + bias, as the BIAS_ADD would */
                for (int64_t j = 0; j < n; j++)
                    ((pipit__bf16 *)c)[i * ldc + j] = pipit__bf16_from_f32(0.0f + pipit__bf16_to_f32(bias[j0 + j]));
            continue;
        }
        const pipit__bf16 *a = A + b * sA + (trans_a ? i0 : i0 * lda);
        const pipit__bf16 *bb = B + b * sB + (trans_b ? j0 * ldb : j0);
        if (amx)
            pipit__amx_tile(trans_a, trans_b, m, n, K, a, lda, bb, ldb, bias ? bias + j0 : NULL, c, c32, ldc, accumulate,
                            stream, s, kind == KIND_AMX);
        else
            pipit__pairs_tile(trans_a, trans_b, m, n, K, a, lda, bb, ldb, bias ? bias + j0 : NULL, c, c32, ldc,
                              accumulate, stream, s, kind == KIND_AVX512);
    }
    if (!s && K > 0 && ith < batch * tiles) pipit__kernel_fail("matmul (bf16): out of memory for its fp32 tiles");
    scratch_put(s);
}

void pipit__gemm_bf16(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K, const pipit__bf16 *A,
                      int64_t lda, int64_t sA, const pipit__bf16 *B, int64_t ldb, int64_t sB, pipit__bf16 *C,
                      int64_t ldc, int64_t sC, int accumulate, int ith, int nth) {
    gemm_bf16(trans_a, trans_b, batch, M, N, K, A, lda, sA, B, ldb, sB, NULL, C, 0, ldc, sC, accumulate, ith, nth);
}

void pipit__gemm_bf16_f32(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                          const pipit__bf16 *A, int64_t lda, int64_t sA, const pipit__bf16 *B, int64_t ldb, int64_t sB,
                          float *C, int64_t ldc, int64_t sC, int accumulate, int ith, int nth) {
    gemm_bf16(trans_a, trans_b, batch, M, N, K, A, lda, sA, B, ldb, sB, NULL, C, 1, ldc, sC, accumulate, ith, nth);
}

void pipit__gemm_bf16_bias(int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                           const pipit__bf16 *A, int64_t lda, int64_t sA, const pipit__bf16 *B, int64_t ldb, int64_t sB,
                           const pipit__bf16 *bias, pipit__bf16 *C, int64_t ldc, int64_t sC, int ith, int nth) {
    gemm_bf16(trans_a, trans_b, batch, M, N, K, A, lda, sA, B, ldb, sB, bias, C, 0, ldc, sC, 0, ith, nth);
}
