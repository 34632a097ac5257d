/*
 * gemm_amx.c — one tile of the bf16 GEMM by AMX's tile matrix multiply
 * (gemm_bf16.c deals the tiles; the default where the CPU has AMX-BF16).
 *
 * TDPBF16PS multiplies a 16 x 32 bf16 tile of op(A) (16 rows, 16 pairs of
 * K) by a 16 x 16-pair tile of op(B) (16 pairs of K, 16 columns, each pair
 * one 32-bit lane) into a 16 x 16 fp32 tile of C. The operands are read as
 * gemm_pairs.c reads them: op(B) packed as pairs along K, bp[k][j] =
 * (op(B)[2k][j], op(B)[2k+1][j]) (an AMX B tile is 16 of bp's rows, 64
 * bytes of each); op(A)'s rows in place where op(A) = A (an A tile is 16
 * rows of 64 bytes, A's row stride apart), or packed row-major as pairs
 * where op(A) = A^T. The micro-kernel holds 32 rows x 32 columns of C in
 * the four accumulator tiles, with two A and two B tiles: four products
 * per four loads. A tile's K is summed in chunks of at most KC pairs
 * (a multiple of 16), column blocks of 64 (B's packing, as in
 * gemm_pairs.c), their halves of 32 columns, and the rows 32 at a time;
 * the sums leave the tiles through memory, and one row group's rounding
 * runs a few rows a step among the next group's products; the lines of C
 * a group's sums go to are fetched for writing among that group's own
 * products (unless C is streamed: evicted lines stalled the epilogue).
 *
 * Edges: K's last partial step of 16 pairs, and an m that is not a
 * multiple of 16, are read from zero-padded copies (the tail of every row,
 * the last rows whole), and B's packing is padded with zero rows, so no
 * tile load reads past what the operands hold; padded columns are computed
 * and not stored.
 *
 * Bits: each element of C takes K's steps of 16 pairs in order, from zero,
 * whatever the tile, the block or the thread (chunks park their sums in
 * fp32 and the chunks are whole steps), so no bit depends on the thread
 * count. Inside one step the instruction's own summation is not the
 * sequential fp32 sum of its reference pseudo-code (on random inputs
 * ~60 % of results differ from every sequential order in their last bit,
 * measured on a Xeon with AMX): AMX results are compared with the others
 * within the bf16 bounds. The emulated kernel (tests, any CPU) runs the
 * same data movement with the emulated vdpbf16ps's sums (gemm_pairs.c):
 * its results equal that kernel's bit for bit.
 *
 * The tile state: the process asks Linux for it once (arch_prctl), and
 * every tile loads its configuration (oneDNN's AMX kernels may have set
 * another in between) and releases the state at its end.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/bf16_avx512.h"
#include "backend/cpu/gemm_store.h"
#include "backend/cpu/kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define AMX_X86 1
#define AMX_TGT __attribute__((target("amx-tile,amx-bf16")))
#define AVX_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define PFW_TGT __attribute__((target("prfchw")))
#else
#define AMX_X86 0
#endif

#define COLS 64   /* a column block: gemm_pairs.c's packing unit */
#define HALF 32   /* the micro-kernel's columns: two tiles */
#define STEP 16   /* pairs of K per tile product */
/* The most pairs of K summed per chunk: a 32-column half of B is then
 * 128 KB, in L2 while the rows stream past (chunks of 128-384 pairs, B's
 * half in L1, were slower: the partial sums' traffic cost more). */
#ifndef KC
#define KC 1024
#endif
#define OUT_LD 32 /* the epilogue's buffer: [32][32] fp32 */

static int64_t round16(int64_t x) { return (x + 15) / 16 * 16; }
static int64_t pad_cols(int64_t n) { return (n + HALF - 1) / HALF * HALF; } /* B's packed width: whole halves */
static int64_t lines(int64_t lanes) { return (lanes + 15) / 16 * 16; } /* 32-bit lanes to whole 64-byte lines */
static uint32_t *align64(void *p) { return (uint32_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

/* Pairs per chunk: equal chunks of at most KC, each whole steps. */
static int64_t chunk_pairs(int64_t K2) {
    int64_t nk = (K2 + KC - 1) / KC;
    return round16((K2 + nk - 1) / nk);
}

/* ------------------------------------------------------------ scratch */

/* A tile's scratch, in 32-bit lanes from its first 64-byte line: where
 * op(A) = A^T, its packed rows [m16][K2p] and the k-major pairs they are
 * transposed from [K2][m16]; where op(A) = A, the tail step of every row
 * [m16][16] and the last partial group of rows [16][kc]; B's packed chunk
 * [kc][width]; the bias widened; the sums between chunks [m16][width];
 * the epilogue's two [32][32]. Every area grows with m, n and K. */
typedef struct {
    int64_t at, tmp, tail, rows, b, bias, part, out, end;
} amx_layout;

static amx_layout layout_of(int ta, int tb, int64_t m, int64_t n, int64_t K) {
    int64_t K2 = (PIPIT_MAX(K, 1) + 1) / 2, kc = chunk_pairs(K2), m16 = round16(m), width = tb ? COLS : pad_cols(n);
    amx_layout l;
    l.at = 0;
    l.tmp = l.at + lines(ta ? m16 * round16(K2) : 0);
    l.tail = l.tmp + lines(ta ? K2 * m16 : 0);
    l.rows = l.tail + lines(ta ? 0 : m16 * STEP);
    l.b = l.rows + lines(ta ? 0 : STEP * kc);
    l.bias = l.b + lines(PIPIT_MIN(round16(K2), kc) * width);
    l.part = l.bias + lines(COLS);
    l.out = l.part + lines(kc < K2 ? m16 * ((n + COLS - 1) / COLS * COLS) : 0); /* [m16][COLS] a column block */
    l.end = l.out + lines(2 * 2 * STEP * OUT_LD); /* two groups' sums: one rounded while the next is formed */
    return l;
}

size_t pipit__amx_scratch_bytes(int ta, int tb, int64_t mt, int64_t nt, int64_t K) {
    return (size_t)(layout_of(ta, tb, mt, nt, K).end + 16) * 4; /* + the start's alignment */
}

/* ------------------------------------------------------------ epilogue */

/* Where a half's sums go: C's rows from c (row stride ldc), cols of them;
 * fp32 C (c32) plus the old C when accumulating, or bf16 C: plus the bias
 * (fp32, NULL: none), plus the old C, rounded once. */
typedef struct {
    void *c;
    int64_t ldc;
    const float *bias;
    int c32, accumulate, cols, stream;
} amx_out;

/* rows r0 .. r1 of the sums s ([rows][OUT_LD]) to C */
static void store_rows_scalar(const amx_out *o, const float *s, int r0, int r1) {
    for (int r = r0; r < r1; r++)
        for (int j = 0; j < o->cols; j++)
            pipit__gemm_store1(o->c, o->ldc, o->c32, o->bias, o->accumulate, r, j, s[r * OUT_LD + j]);
}

#if AMX_X86
/* store_rows_scalar's results, 16 columns a vector */
AVX_TGT static inline __attribute__((always_inline)) void store16(const amx_out *o, const float *s, int64_t r, int q) {
    int w = o->cols - 16 * q;
    if (w > 0)
        pipit__gemm_store16(o->c, o->ldc, o->c32, o->bias, o->accumulate, o->stream, r, 16 * q, w,
                            _mm512_loadu_ps(s + r * OUT_LD + 16 * q));
}

/* The usual case first, a bf16 C not added into, 32 columns: a row is two
 * loads, the bias, two roundings and two stores (its flags read once: C's
 * stores may alias anything, a local they cannot). */
AVX_TGT static void store_rows_avx512(const amx_out *out, const float *s, int r0, int r1) {
    const amx_out local = *out, *o = &local;
    if (!o->c32 && !o->accumulate && !o->stream && o->cols == HALF) {
        __m512 b0 = o->bias ? _mm512_loadu_ps(o->bias) : _mm512_setzero_ps();
        __m512 b1 = o->bias ? _mm512_loadu_ps(o->bias + 16) : _mm512_setzero_ps();
        for (int r = r0; r < r1; r++) {
            __m512 v0 = _mm512_loadu_ps(s + r * OUT_LD), v1 = _mm512_loadu_ps(s + r * OUT_LD + 16);
            if (o->bias) v0 = _mm512_add_ps(v0, b0), v1 = _mm512_add_ps(v1, b1);
            uint16_t *c = (uint16_t *)o->c + r * o->ldc;
            _mm256_storeu_si256((__m256i *)c, pipit__bf16_round16(v0));
            _mm256_storeu_si256((__m256i *)(c + 16), pipit__bf16_round16(v1));
        }
        return;
    }
    for (int r = r0; r < r1; r++) {
        store16(o, s, r, 0);
        store16(o, s, r, 1);
    }
}
#endif

/* ------------------------------------------------------------ kernels */

/* One call: 16 or 32 rows (groups) x 32 columns of C over steps of K.
 * Group g's A tile of step s: at a[g] + ast[g] s (row stride sa[g]) while
 * s < inplace[g], later at tail[g] (64-byte rows). B's step s: 16 rows of
 * b from row 16 s (row stride sb bytes), columns 0-15 at +0, 16-31 at
 * +64. The sums start at zero (first) or from part (fp32 [rows][COLS]),
 * and go back to part (not last) or to out ([rows][OUT_LD]). The previous
 * group's sums (pend_s, pend_rows rows, to pend's place), if any, are
 * rounded and stored a few rows a step, between the tile products, which
 * run on their own unit meanwhile. */
typedef struct {
    const char *a[2], *tail[2];
    int64_t sa[2], ast[2], inplace[2]; /* ast: bytes from one step's A tile to the next */
    const char *b;
    int64_t sb, steps;
    int groups, first, last, pend_rows;
    float *part, *out;
    const amx_out *pend;
    const float *pend_s;
    /* C's lines this call's sums go to, fetched for writing among its
     * products (NULL: none): rows of bytes from pf, pf_ld apart */
    const char *pf;
    int64_t pf_ld;
    int pf_rows, pf_bytes;
} amx_job;

static const char *a_step(const amx_job *j, int g, int64_t s, int64_t *stride) {
    if (s < j->inplace[g]) {
        *stride = j->sa[g];
        return j->a[g] + j->ast[g] * s;
    }
    *stride = 64;
    return j->tail[g];
}

static float bf16_bits_to_f32(uint32_t bits16) { return pipit__bf16_to_f32((pipit__bf16){(uint16_t)bits16}); }

/* The job with gemm_pairs.c's emulated vdpbf16ps per pair (odd product
 * first): the same sums as its emulated kernel. */
static void run_emulated(const amx_job *j) {
    for (int r = 0; r < STEP * j->groups; r++)
        for (int c = 0; c < HALF; c++) {
            int g = r / STEP;
            float acc = j->first ? 0.0f : j->part[r * COLS + c];
            for (int64_t s = 0; s < j->steps; s++) {
                int64_t sa;
                const char *a = a_step(j, g, s, &sa) + (r % STEP) * sa;
                for (int k = 0; k < STEP; k++) {
                    uint32_t x, y;
                    memcpy(&x, a + 4 * k, 4);
                    memcpy(&y, j->b + (STEP * s + k) * j->sb + 4 * c, 4);
                    acc += bf16_bits_to_f32(x >> 16) * bf16_bits_to_f32(y >> 16);
                    acc += bf16_bits_to_f32(x & 0xffff) * bf16_bits_to_f32(y & 0xffff);
                }
            }
            if (j->last)
                j->out[r * OUT_LD + c] = acc;
            else
                j->part[r * COLS + c] = acc;
        }
    if (j->pend) store_rows_scalar(j->pend, j->pend_s, 0, j->pend_rows);
}

#if defined(__x86_64__) && defined(__GNUC__)

/* The palette: every tile 16 rows of 64 bytes (0-3 C, 4-5 A, 6-7 B). */
typedef struct __attribute__((packed, aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* ldtilecfg through an operand that covers the whole configuration
 * (_tile_loadconfig's reads only a pointer's worth: gcc 12 dropped the
 * stores that set it up). */
AMX_TGT static void tiles_begin(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = STEP;
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

AMX_TGT static void tiles_end(void) { _tile_release(); }

/* The lines of rows r0 .. r1 of C's part that j's sums go to, for writing
 * (PREFETCHW): where C's lines were evicted since their last use (a
 * gradient accumulated microbatch after microbatch, an activation in the
 * arena), the epilogue's loads and stores wait for them otherwise. */
PFW_TGT static void fetch_c_rows(const amx_job *j, int r0, int r1) {
    for (int r = r0; r < r1; r++) {
        uintptr_t a = (uintptr_t)(j->pf + r * j->pf_ld), end = a + (uintptr_t)j->pf_bytes;
        for (a &= ~(uintptr_t)63; a < end; a += 64) __builtin_prefetch((const void *)a, 1, 3);
    }
}

AMX_TGT static inline __attribute__((always_inline)) void run_groups(const amx_job *j, int G) {
    if (j->first) {
        _tile_zero(0);
        _tile_zero(1);
        if (G == 2) {
            _tile_zero(2);
            _tile_zero(3);
        }
    } else {
        _tile_loadd(0, j->part, COLS * 4);
        _tile_loadd(1, j->part + 16, COLS * 4);
        if (G == 2) {
            _tile_loadd(2, j->part + STEP * COLS, COLS * 4);
            _tile_loadd(3, j->part + STEP * COLS + 16, COLS * 4);
        }
    }
    const char *b = j->b;
    int per = j->pend ? (int)((j->pend_rows + j->steps - 1) / j->steps) : 0, done = 0; /* pending rows a step */
    int pf_per = (int)((j->pf_rows + j->steps - 1) / j->steps), pf_done = 0; /* C's rows fetched a step */
    for (int64_t s = 0; s < j->steps; s++, b += STEP * j->sb) {
        int64_t s0, s1;
        const char *a0 = a_step(j, 0, s, &s0);
        _tile_loadd(6, b, j->sb);
        _tile_loadd(7, b + 64, j->sb);
        _tile_loadd(4, a0, s0);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (G == 2) {
            const char *a1 = a_step(j, 1, s, &s1);
            _tile_loadd(5, a1, s1);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        if (done < j->pend_rows) {
            int r1 = done + per < j->pend_rows ? done + per : j->pend_rows;
            store_rows_avx512(j->pend, j->pend_s, done, r1);
            done = r1;
        }
        if (pf_done < j->pf_rows) {
            int r1 = pf_done + pf_per < j->pf_rows ? pf_done + pf_per : j->pf_rows;
            fetch_c_rows(j, pf_done, r1);
            pf_done = r1;
        }
    }
    if (done < j->pend_rows) store_rows_avx512(j->pend, j->pend_s, done, j->pend_rows);
    float *d = j->last ? j->out : j->part;
    int64_t ld = j->last ? OUT_LD : COLS;
    _tile_stored(0, d, ld * 4);
    _tile_stored(1, d + 16, ld * 4);
    if (G == 2) {
        _tile_stored(2, d + STEP * ld, ld * 4);
        _tile_stored(3, d + STEP * ld + 16, ld * 4);
    }
}

AMX_TGT static void run_amx(const amx_job *j) {
    if (j->groups == 2) run_groups(j, 2);
    else run_groups(j, 1);
}

/* Linux grants the tile data state on request (arch_prctl), per process. */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static const char *amx_why;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    unsigned a, b, c, d; /* leaf 7 (checked to exist): EDX bit 22 AMX-BF16, bit 24 AMX-TILE */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 22 & 1)) {
        amx_why = "this CPU has no AMX-BF16";
        return;
    }
    if (!pipit__cpu_has_avx512bf16()) { /* the epilogue's rounding */
        amx_why = "this CPU has AMX-BF16 but no AVX512-BF16";
        return;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0)
        amx_why = "the OS did not grant the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM; Linux 5.16 or later)";
}

const char *pipit__cpu_amx_why_not(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_why;
}
#else
const char *pipit__cpu_amx_why_not(void) { return "AMX is x86-64 only"; }
#endif

/* ------------------------------------------------------------ packing */

/* op(A) = A^T, A [K, m]: at [m16][K2p] = the pairs (A[2k][i], A[2k+1][i]),
 * zero past m and past K; by way of the k-major pairs tmp [K2][m16]. */
static void pack_a_t(int64_t m, int64_t K, const uint16_t *a, int64_t lda, uint32_t *at, uint32_t *tmp, int vec) {
    int64_t K2 = (K + 1) / 2, m16 = round16(m), K2p = round16(K2);
    pipit__pairs_interleave(a, lda, K, m, m16, tmp, m16, vec);
    pipit__pairs_transpose((const uint16_t *)tmp, 2 * m16, K2, 2 * m16, at, K2p, vec, 0);
}

/* op(A) = A: the elements k0 .. K of rows i < m (at most 32), zero-padded
 * to 16 pairs a row: tail [m16][16] (the rows past m zero). */
static void pack_tail(int64_t m, int64_t K, const uint16_t *a, int64_t lda, int64_t k0, uint32_t *tail) {
    int64_t m16 = round16(m);
    memset(tail, 0, (size_t)(m16 * STEP) * 4);
    for (int64_t i = 0; i < m; i++) memcpy(tail + i * STEP, a + i * lda + k0, (size_t)(K - k0) * 2);
}

/* op(A) = A: rows i0 .. m (fewer than 16), elements k0 .. k1 (or K),
 * zero-padded to 16 rows and kp pairs: rows [16][kp]. */
static void pack_rows(int64_t i0, int64_t m, int64_t K, const uint16_t *a, int64_t lda, int64_t k0, int64_t k1,
                      int64_t kp, uint32_t *rows) {
    memset(rows, 0, (size_t)(STEP * kp) * 4);
    for (int64_t i = i0; i < m; i++)
        memcpy(rows + (i - i0) * kp, a + i * lda + k0, (size_t)(PIPIT_MIN(k1, K) - k0) * 2);
}

/* ------------------------------------------------------------ a tile */

static void run_job(const amx_job *j, int amx) {
#if AMX_X86
    if (amx) {
        run_amx(j);
        return;
    }
#endif
    (void)amx;
    run_emulated(j);
}

/* The sums of the row group at i (up to 32 rows) to C's columns from j0.
 * Called after the next group's tile products are issued: the rounding
 * and stores of one group run while the tiles multiply the next. */
static void store_group(const amx_out *o, const float *s, int rows, int amx) {
#if AMX_X86
    if (amx) {
        store_rows_avx512(o, s, 0, rows);
        return;
    }
#endif
    (void)amx;
    store_rows_scalar(o, s, 0, rows);
}

/* The A side of one chunk (pairs p0 .. p1 of K): where each row group's
 * tiles are read and how many steps it reads in place. */
typedef struct {
    int ta;
    int64_t m, K, K2p, lda, p0, steps, inplace;
    const uint16_t *a;
    const uint32_t *at, *tail, *rows;
} a_side;

/* s for the chunk p0 .. p1; where op(A) = A in place, the chunk's last
 * partial step (tail) and its last rows short of 16 (rows) copied. */
static void a_chunk(a_side *s, int64_t p0, int64_t p1, uint32_t *tail, uint32_t *rows) {
    s->p0 = p0, s->steps = (p1 - p0 + STEP - 1) / STEP;
    s->inplace = (PIPIT_MIN(p1, s->K / 2) - p0) / STEP; /* whole steps of whole pairs */
    s->tail = NULL;
    if (s->ta) return;
    if (s->inplace < s->steps) {
        pack_tail(s->m, s->K, s->a, s->lda, 2 * (p0 + STEP * s->inplace), tail);
        s->tail = tail;
    }
    if (s->m % STEP) pack_rows(s->m / STEP * STEP, s->m, s->K, s->a, s->lda, 2 * p0, 2 * p1, STEP * s->steps, rows);
}

static void group_of(const a_side *s, int64_t i, int g, amx_job *j) {
    j->ast[g] = 64;
    if (s->ta) { /* packed, zero-padded: every step in place */
        j->a[g] = (const char *)(s->at + i * s->K2p + s->p0), j->sa[g] = s->K2p * 4, j->inplace[g] = s->steps;
        j->tail[g] = NULL;
    } else if (i + STEP > s->m) { /* the last rows, copied whole */
        j->a[g] = (const char *)s->rows, j->sa[g] = STEP * s->steps * 4, j->inplace[g] = s->steps, j->tail[g] = NULL;
    } else {
        j->a[g] = (const char *)(s->a + i * s->lda + 2 * s->p0), j->sa[g] = s->lda * 2, j->inplace[g] = s->inplace;
        j->tail[g] = s->tail ? (const char *)(s->tail + i * STEP) : NULL;
    }
}

/* One half (32 columns from j0 of C) over the chunk, its row groups in
 * order: jb holds B's half and the chunk's flags, part the half's sums
 * between chunks, out two groups' buffers for the epilogue: each group's
 * sums are rounded and stored during the next group's products. */
static void run_half(const a_side *as, amx_job *jb, const amx_out *o, void *c, int64_t ldc, size_t ec, int64_t j0,
                     float *part, float *out, int amx) {
    int64_t m = as->m;
    amx_out prev = *o; /* where the group whose sums wait in the other buffer goes */
    jb->pend = NULL, jb->pend_rows = 0;
    for (int64_t i = 0, t = 0; i < m; i += 2 * STEP, t ^= 1) {
        jb->groups = i + STEP < m ? 2 : 1;
        group_of(as, i, 0, jb);
        if (jb->groups == 2) group_of(as, i + STEP, 1, jb);
        jb->part = part + i * COLS;
        jb->out = out + t * 2 * STEP * OUT_LD;
        jb->pf = NULL, jb->pf_rows = 0;
        if (jb->last && !o->stream) { /* streamed lines are written whole, unread */
            jb->pf = (const char *)c + (size_t)(i * ldc + j0) * ec, jb->pf_ld = ldc * (int64_t)ec;
            jb->pf_rows = (int)PIPIT_MIN(2 * STEP, m - i), jb->pf_bytes = o->cols * (int)ec;
        }
        run_job(jb, amx);
        if (!jb->last) continue;
        prev.c = (char *)c + (size_t)(i * ldc + j0) * ec;
        jb->pend = &prev, jb->pend_s = jb->out, jb->pend_rows = (int)PIPIT_MIN(2 * STEP, m - i);
    }
    if (jb->pend) store_group(jb->pend, jb->pend_s, jb->pend_rows, amx);
}

void pipit__amx_tile(int ta, int tb, int64_t m, int64_t n, int64_t K, const pipit__bf16 *a, int64_t lda,
                     const pipit__bf16 *b, int64_t ldb, const pipit__bf16 *bias, void *c, int c32, int64_t ldc,
                     int accumulate, int stream, void *scratch, int amx) {
    amx = amx && AMX_X86;
    size_t ec = c32 ? sizeof(float) : sizeof(pipit__bf16);
    stream = stream && amx && !accumulate && (uintptr_t)c % 64 == 0 && (size_t)ldc * ec % 64 == 0; /* whole lines */
    int64_t K2 = (K + 1) / 2, kc = chunk_pairs(K2), m16 = round16(m), width = tb ? COLS : pad_cols(n);
    amx_layout l = layout_of(ta, tb, m, n, K);
    uint32_t *base = align64(scratch), *bp = base + l.b;
    float *bias_f = (float *)(base + l.bias), *part = (float *)(base + l.part), *out = (float *)(base + l.out);
    a_side as = {ta, m, K, round16(K2), lda, 0, 0, 0, (const uint16_t *)a, base + l.at, NULL, base + l.rows};
    if (ta) pack_a_t(m, K, (const uint16_t *)a, lda, base + l.at, base + l.tmp, amx);
#if AMX_X86
    if (amx) tiles_begin();
#endif
    for (int64_t p0 = 0; p0 < K2; p0 += kc) { /* a long K a chunk at a time: B's block stays in L2 */
        int64_t p1 = PIPIT_MIN(K2, p0 + kc), k0 = 2 * p0, kn = PIPIT_MIN(K, 2 * p1) - k0, len = p1 - p0;
        a_chunk(&as, p0, p1, base + l.tail, base + l.rows);
        size_t pad = (size_t)((STEP * as.steps - len) * width) * 4; /* B's rows past the chunk: zero */
        if (!tb) {
            pipit__pairs_interleave((const uint16_t *)b + k0 * ldb, ldb, kn, n, width, bp, width, amx);
            memset(bp + len * width, 0, pad);
        }
        for (int64_t j0 = 0; j0 < n; j0 += COLS) {
            int cols = (int)PIPIT_MIN(COLS, n - j0);
            if (bias && p1 == K2) pipit__bf16_widen_n(bias_f, bias + j0, cols);
            if (tb) {
                pipit__pairs_transpose((const uint16_t *)b + j0 * ldb + k0, ldb, cols, kn, bp, COLS, amx, n - j0);
                memset(bp + len * width, 0, pad);
            }
            float *pj = part + (kc < K2 ? j0 * m16 : 0); /* this block's sums between chunks */
            for (int h = 0; h * HALF < cols; h++) {
                amx_out o = {NULL, ldc, bias ? bias_f + h * HALF : NULL, c32, accumulate,
                             (int)PIPIT_MIN(HALF, cols - h * HALF), stream};
                amx_job jb = {.b = (const char *)(bp + (tb ? 0 : j0) + h * HALF), .sb = width * 4,
                              .steps = as.steps, .first = p0 == 0, .last = p1 == K2};
                run_half(&as, &jb, &o, c, ldc, ec, j0 + h * HALF, pj + h * HALF, out, amx);
            }
        }
    }
#if AMX_X86
    if (amx) tiles_end();
    if (stream) _mm_sfence(); /* the streamed lines visible before the pool's barrier says C is done */
#endif
}
