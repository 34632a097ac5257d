/*
 * head_xent.h — the CPU kernels of the fused LM head + cross-entropy
 * (head_xent.c; the op's definition is ir/ops.c, its chunking
 * ir/head_xent.h). h [N, d], W [V, d] (this shard's rows: classes
 * [off, off + V)), targets [N]; A is the arithmetic type (fp32 for bf16).
 *   head_xent:     st [3, N] = (log-sum-exp, target logit: 0 off the shard,
 *                  lse's rounding error)
 *   head_xent_bwd: out = [G partial dh [N, d] of A | dW [V, d]] from
 *                  sd [6, N] = (st, then d lse, d target logit, unused)
 *   head_xent_dh:  dh [n] = the G partials of bwd added in group order
 */
#ifndef PIPIT_CPU_HEAD_XENT_H
#define PIPIT_CPU_HEAD_XENT_H

#include <stdint.h>

#include "util/bf16.h"

#define PIPIT_HX_DECLS(T, A, S)                                                                                     \
    void pipit__head_xent_##S(A *st, const T *h, const T *W, const int32_t *t, int64_t N, int64_t V, int64_t d,    \
                              int64_t off, int ith, int nth);                                                       \
    void pipit__head_xent_bwd_##S(T *out, const T *h, const T *W, const int32_t *t, const A *sd, int64_t N,        \
                                  int64_t V, int64_t d, int64_t off, int64_t G, int ith, int nth);                 \
    void pipit__head_xent_dh_##S(T *dh, const T *bwd, int64_t G, int64_t n, int ith, int nth);

PIPIT_HX_DECLS(float, float, f32)
PIPIT_HX_DECLS(double, double, f64)
PIPIT_HX_DECLS(pipit__bf16, float, bf16)

/* Tests: 1 runs the f32 kernels' logits GEMMs through oneDNN in f32 (the
 * code the bf16 kernels run where the bf16 GEMM kind is oneDNN), 0 (the
 * default) through pipit__gemm_f32. */
void pipit__head_xent_f32_onednn(int on);

#endif
