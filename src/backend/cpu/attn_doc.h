/*
 * attn_doc.h — attention over packed documents on the CPU (attn_doc.c):
 * the kernels of op attention_doc and its backward attn_doc_d.
 */
#ifndef PIPIT_CPU_ATTN_DOC_H
#define PIPIT_CPU_ATTN_DOC_H

#include "util/common.h"

/* qkv [B,T,(Hq+2Hkv)*D] (per row q | k | v), out [B,T,Hq*D], doc [B,T]. */
typedef struct {
    int64_t B, T, Hq, Hkv, D;
    int causal;
    double scale;
} pipit__attn_doc;

void pipit__attn_doc_fwd(pipit_dtype dt, void *out, const void *qkv, const int32_t *doc, const pipit__attn_doc *p,
                         int ith, int nth);
/* dqkv in qkv's layout from dout [B,T,Hq*D]. */
void pipit__attn_doc_bwd(pipit_dtype dt, void *dqkv, const void *qkv, const void *dout, const int32_t *doc,
                         const pipit__attn_doc *p, int ith, int nth);

#endif
