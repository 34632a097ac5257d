/*
 * attn_pairs.c — bf16 attention whose products run on the pairs kernel
 * (gemm_pairs.c: vdpbf16ps, two bf16 products into an fp32 lane) instead
 * of fp32 BLAS on widened panels. At GPT-2's 64 x 64 x 64 products one
 * single-threaded OpenBLAS call took 4.6 us and one pairs tile 1.3 (AMD
 * EPYC, one core): the blocked attention's seven products per head were
 * two thirds of its time.
 *
 * Per (batch, head), as the fp32 blocked kernel (kernels_impl.h) does:
 *   S = q k^T           bf16 x bf16 (the products exact), fp32 sums
 *   P = softmax(S scale) in fp32 (pipit__attn_softmax_block_f32)
 *   out = P v           rounded once
 * and backward, recomputing P: dv += P^T dO, dP = dO v^T, dS = P (dP -
 * rowsum(P dP)) scale in fp32, dq = dS k, dk += dS^T q. P and dS are fp32:
 * their products take each value as two bf16, hi = bf16(x) and lo =
 * bf16(x - hi) (x to about 2^-17 of itself), against the other operand's
 * value twice: K doubles, every product is still exact and summed in
 * fp32, so the attention keeps the fp32 panels' precision (pipit's
 * policy: docs/architecture.md, "Precision"; PyTorch's CPU autocast rounds
 * the probabilities to bf16 instead) at twice the pairs' work for those
 * four, the seven together still under half the fp32 BLAS time. A kv
 * head's dk and dv sum its query heads in head order in fp32 and are
 * rounded once.
 *
 * A (batch, head) pair is one thread's and every product is one pairs tile
 * whose sums do not depend on anything but the shapes: the bits never
 * depend on the thread count. Where the pairs kernel does not run
 * (pipit__gemm_bf16_pairs() == 0) or the shapes are past its limits, the
 * caller keeps the fp32 panels' way (kernels_bf16.c), on every thread
 * alike; a thread whose buffers cannot be had fails the op (the rank's
 * kernel error) rather than take that way alone.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"

/* One thread's buffers: P and dP in fp32; P and dS split into bf16 pairs
 * (Ps, dSs); the bf16 operands with each row twice (kd, vd: k and v of the
 * kv head, qd, od: q and dO of the query head); dk and dv sums in fp32;
 * the pairs tile's scratch. */
typedef struct {
    float *P, *dP, *dk, *dv;
    pipit__bf16 *Ps, *dSs, *kd, *vd, *qd, *od;
    void *tile;
    void *block;
} attn_buf;

/* n elements of size bytes, 64-byte aligned, added to total (0: overflow) */
static size_t add_bytes(size_t total, int64_t n, size_t size) {
    size_t b, t;
    if (total == 0 || n < 0 || __builtin_mul_overflow((size_t)n, size, &b) || __builtin_add_overflow(b, 63, &b) ||
        __builtin_add_overflow(total, b / 64 * 64, &t))
        return 0;
    return t;
}

static void *carve(char **at, int64_t n, size_t size) {
    char *p = *at;
    *at += ((size_t)n * size + 63) / 64 * 64;
    return p;
}

/* Longer sequences or wider heads take the fp32 panels' way (which has its
 * own limits): 2^24 positions of 4-byte scores squared is 2^50 bytes. */
#define MAX_SIDE ((int64_t)1 << 24)

/* The buffers for a's shapes (backward: bwd): 1; 0 when memory for them
 * cannot be had; -1 for shapes past this way's limits, their sizes
 * overflowing included (decided from the shapes: every thread alike). */
static int attn_buf_get(attn_buf *b, const pipit__attn_dims *a, int bwd) {
    int64_t TT, TD, QD, Tm = PIPIT_MAX(a->Tq, a->Tk);
    if (Tm > MAX_SIDE || a->D > MAX_SIDE) return -1; /* the tile scratch's products stay far inside int64 */
    if (__builtin_mul_overflow(a->Tq, a->Tk, &TT) || __builtin_mul_overflow(a->Tk, a->D, &TD) ||
        __builtin_mul_overflow(a->Tq, a->D, &QD))
        return -1;
    /* the largest tile: m <= max(Tq, Tk), n <= max(Tk, D), K <= 2 max(Tq, Tk, D) */
    size_t tile = pipit__pairs_scratch_bytes(1, 0, Tm, PIPIT_MAX(a->Tk, a->D), 2 * PIPIT_MAX(Tm, a->D)); /* any layout */
    int64_t n32[] = {TT, bwd ? TT : 0, bwd ? TD : 0, bwd ? TD : 0};
    int64_t n16[] = {2 * TT, bwd ? 2 * TT : 0, bwd ? 2 * TD : 0, bwd ? 0 : 2 * TD, bwd ? 2 * QD : 0, bwd ? 2 * QD : 0};
    size_t total = 64;
    for (size_t i = 0; i < sizeof n32 / sizeof n32[0]; i++) total = add_bytes(total, n32[i], sizeof(float));
    for (size_t i = 0; i < sizeof n16 / sizeof n16[0]; i++) total = add_bytes(total, n16[i], sizeof(pipit__bf16));
    total = add_bytes(total, (int64_t)tile, 1);
    if (!total || !tile) return -1;
    char *at = malloc(total);
    if (!at) return 0;
    b->block = at;
    at = (char *)(((uintptr_t)at + 63) & ~(uintptr_t)63);
    b->P = carve(&at, n32[0], sizeof(float)), b->dP = carve(&at, n32[1], sizeof(float));
    b->dk = carve(&at, n32[2], sizeof(float)), b->dv = carve(&at, n32[3], sizeof(float));
    b->Ps = carve(&at, n16[0], sizeof(pipit__bf16)), b->dSs = carve(&at, n16[1], sizeof(pipit__bf16));
    b->kd = carve(&at, n16[2], sizeof(pipit__bf16)), b->vd = carve(&at, n16[3], sizeof(pipit__bf16));
    b->qd = carve(&at, n16[4], sizeof(pipit__bf16)), b->od = carve(&at, n16[5], sizeof(pipit__bf16));
    b->tile = at;
    return 1;
}

/* attn_buf_get for a thread with heads to do: 1 the buffers are ready; 0
 * the fp32 panels' way (shapes past the limits: every thread alike); -1
 * out of memory, the op failed: rather than let this thread alone take the
 * other way, whose last bits differ (the bits must not depend on which
 * thread got memory). */
static int buffers(attn_buf *b, const pipit__attn_dims *a, int bwd) {
    int got = attn_buf_get(b, a, bwd);
    if (got == 0) pipit__kernel_fail("attention (bf16): out of memory for its pairs tiles");
    return got == 0 ? -1 : got < 0 ? 0 : 1;
}

/* A failed op's output, as every kernel that could not run leaves it:
 * head h's rows [rows, D] of dst (row stride ld) zeroed. */
static void zero_head(pipit__bf16 *dst, int64_t ld, int64_t rows, int64_t D) {
    for (int64_t r = 0; r < rows; r++) memset(dst + r * ld, 0, sizeof *dst * (size_t)D);
}

/* x as the bf16 pair hi = bf16(x), lo = bf16(x - hi) (lo = 0 where x is
 * not finite: hi holds it), hi in the low half: the pair's order in
 * memory. Branch-free, so the loops below vectorise. */
static inline uint32_t split(float x) {
    pipit__bf16 hi = pipit__bf16_from_f32(x);
    float r = x - pipit__bf16_to_f32(hi); /* exact */
    uint32_t u, rb;
    memcpy(&u, &x, sizeof u);
    memcpy(&rb, &r, sizeof rb);
    rb &= -(uint32_t)((u & 0x7f800000u) != 0x7f800000u); /* integer select: no branch on a float */
    memcpy(&r, &rb, sizeof r);
    return (uint32_t)hi.bits | (uint32_t)pipit__bf16_from_f32(r).bits << 16;
}

/* dst [rows, 2 cols]: element (r, c) of x [rows, cols] as the adjacent
 * pair (hi, lo): op(A) of a product whose K is x's columns. */
static void split_cols(pipit__bf16 *dst, const float *restrict x, int64_t rows, int64_t cols) {
    uint32_t *restrict d = (uint32_t *)(void *)dst; /* 64-byte aligned (carve) */
    for (int64_t i = 0; i < rows * cols; i++) d[i] = split(x[i]);
}

/* dst [2 rows, cols]: row r of x as rows 2r (hi) and 2r + 1 (lo): op(A) =
 * dst^T of a product whose K is x's rows. */
static void split_rows(pipit__bf16 *dst, const float *restrict x, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        uint16_t *restrict hi = &dst[2 * r * cols].bits, *restrict lo = &dst[(2 * r + 1) * cols].bits;
        for (int64_t c = 0; c < cols; c++) {
            uint32_t p = split(x[r * cols + c]);
            hi[c] = (uint16_t)p, lo[c] = (uint16_t)(p >> 16);
        }
    }
}

/* dst [2 rows, cols] = each row of x (row stride ld) twice: the other
 * operand of a split one */
static void dup_rows(pipit__bf16 *dst, const pipit__bf16 *x, int64_t ld, int64_t rows, int64_t cols) {
    size_t bytes = (size_t)cols * sizeof *dst;
    for (int64_t r = 0; r < rows; r++) {
        memcpy(dst + 2 * r * cols, x + r * ld, bytes);
        memcpy(dst + (2 * r + 1) * cols, x + r * ld, bytes);
    }
}

/* P = softmax(q_h k_g^T scale) in fp32; q_h [Tq, D] of row stride ldq, k_g
 * [Tk, D] of row stride ldk. */
static void probs(attn_buf *b, const pipit__bf16 *qh, const pipit__bf16 *kg, const pipit__attn_dims *a, int avx512) {
    pipit__pairs_tile(0, 1, a->Tq, a->Tk, a->D, qh, a->ldq, kg, a->ldk, NULL, b->P, 1, a->Tk, 0, 0, b->tile, avx512);
    float scale = (float)a->scale;
    int64_t n = a->Tq * a->Tk;
    for (int64_t i = 0; i < n; i++) b->P[i] *= scale;
    pipit__attn_softmax_block_f32(b->P, a);
}

int pipit__attn_pairs_fwd(pipit__bf16 *out, const pipit__bf16 *q, const pipit__bf16 *k, const pipit__bf16 *v,
                          const pipit__attn_dims *a, int ith, int nth) {
    int way = pipit__gemm_bf16_pairs(), avx512 = way == 1;
    int64_t D = a->D, Tq = a->Tq, Tk = a->Tk, rep = a->Hq / a->Hkv, lo, hi, have = -1;
    if (!way) return 0;
    pipit__range(a->B * a->Hq, ith, nth, &lo, &hi);
    if (hi <= lo) return 1;
    attn_buf b;
    int got = buffers(&b, a, 0);
    for (int64_t bh = lo; got < 0 && bh < hi; bh++) /* failed: this thread's heads zeroed */
        zero_head(out + bh / a->Hq * Tq * a->ldo + bh % a->Hq * D, a->ldo, Tq, D);
    if (got != 1) return got < 0; /* failed (done), or the panels' way */
    for (int64_t bh = lo; bh < hi; bh++) {
        int64_t bi = bh / a->Hq, h = bh % a->Hq, g = h / rep;
        if (bi * a->Hkv + g != have) { /* v twice per row, once per kv head */
            dup_rows(b.vd, v + bi * Tk * a->ldv + g * D, a->ldv, Tk, D);
            have = bi * a->Hkv + g;
        }
        probs(&b, q + bi * Tq * a->ldq + h * D, k + bi * Tk * a->ldk + g * D, a, avx512);
        split_cols(b.Ps, b.P, Tq, Tk);
        pipit__pairs_tile(0, 0, Tq, D, 2 * Tk, b.Ps, 2 * Tk, b.vd, D, NULL, out + bi * Tq * a->ldo + h * D, 0, a->ldo, 0,
                          0, b.tile, avx512);
    }
    free(b.block);
    return 1;
}

/* dst [rows, cols] of row stride ld = src [rows, cols] (packed), rounded */
static void store_rows(pipit__bf16 *dst, int64_t ld, const float *src, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) pipit__bf16_narrow_n(dst + r * ld, src + r * cols, cols);
}

/* The backward of query head h of kv head g at batch row bi (b->kd, b->vd
 * hold k_g and v_g twice per row): dq's head written, dk and dv's fp32 sums
 * added to (first: written). */
static void bwd_head(attn_buf *b, pipit__bf16 *dq, const pipit__bf16 *q, const pipit__bf16 *k, const pipit__bf16 *v,
                     const pipit__bf16 *dout, const pipit__attn_dims *a, int64_t bi, int64_t h, int64_t g, int first,
                     int avx512) {
    int64_t D = a->D, Tq = a->Tq, Tk = a->Tk;
    const pipit__bf16 *qh = q + bi * Tq * a->ldq + h * D, *dO = dout + bi * Tq * a->ldo + h * D;
    const pipit__bf16 *kg = k + bi * Tk * a->ldk + g * D, *vg = v + bi * Tk * a->ldv + g * D;
    probs(b, qh, kg, a, avx512);
    dup_rows(b->qd, qh, a->ldq, Tq, D);
    dup_rows(b->od, dO, a->ldo, Tq, D);
    /* dv (+)= P^T dO; dP = dO v^T */
    split_rows(b->Ps, b->P, Tq, Tk);
    pipit__pairs_tile(1, 0, Tk, D, 2 * Tq, b->Ps, Tk, b->od, D, NULL, b->dv, 1, D, !first, 0, b->tile, avx512);
    pipit__pairs_tile(0, 1, Tq, Tk, D, dO, a->ldo, vg, a->ldv, NULL, b->dP, 1, Tk, 0, 0, b->tile, avx512);
    pipit__attn_dsoftmax_block_f32(b->dP, b->P, a); /* dS, into dP */
    /* dq = dS k; dk (+)= dS^T q */
    split_cols(b->dSs, b->dP, Tq, Tk);
    pipit__pairs_tile(0, 0, Tq, D, 2 * Tk, b->dSs, 2 * Tk, b->kd, D, NULL, dq + bi * Tq * a->ldq + h * D, 0, a->ldq, 0,
                      0, b->tile, avx512);
    split_rows(b->dSs, b->dP, Tq, Tk);
    pipit__pairs_tile(1, 0, Tk, D, 2 * Tq, b->dSs, Tk, b->qd, D, NULL, b->dk, 1, D, !first, 0, b->tile, avx512);
}

int pipit__attn_pairs_bwd(pipit__bf16 *dq, pipit__bf16 *dk, pipit__bf16 *dv, const pipit__bf16 *q, const pipit__bf16 *k,
                          const pipit__bf16 *v, const pipit__bf16 *dout, const pipit__attn_dims *a, int ith, int nth) {
    int way = pipit__gemm_bf16_pairs(), avx512 = way == 1;
    int64_t D = a->D, Tk = a->Tk, rep = a->Hq / a->Hkv, lo, hi;
    if (!way) return 0;
    pipit__range(a->B * a->Hkv, ith, nth, &lo, &hi);
    if (hi <= lo) return 1;
    attn_buf b;
    int got = buffers(&b, a, 1);
    for (int64_t bg = lo; got < 0 && bg < hi; bg++) { /* failed: this thread's kv heads and their query heads zeroed */
        int64_t bi = bg / a->Hkv, g = bg % a->Hkv;
        zero_head(dk + bi * Tk * a->ldk + g * D, a->ldk, Tk, D), zero_head(dv + bi * Tk * a->ldv + g * D, a->ldv, Tk, D);
        for (int64_t h = g * rep; h < (g + 1) * rep; h++) zero_head(dq + bi * a->Tq * a->ldq + h * D, a->ldq, a->Tq, D);
    }
    if (got != 1) return got < 0; /* failed (done), or the panels' way */
    for (int64_t bg = lo; bg < hi; bg++) {
        int64_t bi = bg / a->Hkv, g = bg % a->Hkv;
        dup_rows(b.kd, k + bi * Tk * a->ldk + g * D, a->ldk, Tk, D);
        for (int64_t h = g * rep; h < (g + 1) * rep; h++)
            bwd_head(&b, dq, q, k, v, dout, a, bi, h, g, h == g * rep, avx512);
        store_rows(dk + bi * Tk * a->ldk + g * D, a->ldk, b.dk, Tk, D);
        store_rows(dv + bi * Tk * a->ldv + g * D, a->ldv, b.dv, Tk, D);
    }
    free(b.block);
    return 1;
}
