/*
 * cp_cuda.cu — context parallelism on the CUDA backend: ROPE_CP,
 * ATTENTION_CP and ATTN_CP_D run the CPU's kernels (backend/cpu/cp.c) on
 * host copies of their device inputs and copy the output back, after the
 * rank's stream has drained. Correct and the CPU's bits (the parity cases
 * hold exactly), not fast: a device kernel (the attention kernel's key
 * loop over the visible prefix) is future work (docs/architecture.md).
 */
#include <cstdlib>
#include <cstring>

#include "backend/cpu/cp.h"
#include "backend/cuda/cuda_backend.h"
#include "ir/graph.h"

static size_t bytes_of(const pipit__node *n) {
    return (size_t)pipit__node_numel(n) * pipit__dtype_size((pipit_dtype)n->dtype);
}

static void on_host(const pipit__kctx *k, int ith, int nth, pipit__op_kernel cpu, const char *what) {
    (void)nth;
    if (ith != 0) return;
    if (pipit__cuda_check(cudaStreamSynchronize(pipit__cuda_stream()), what)) return;
    pipit__kctx h = *k;
    void *bufs[PIPIT_MAX_IN + 1] = {nullptr};
    int n = k->node->nin, ok = 1;
    for (int j = 0; j < n && ok; j++) {
        size_t b = bytes_of(k->in_node[j]);
        bufs[j] = std::malloc(b ? b : 1);
        if (!bufs[j]) ok = 0;
        else if (pipit__cuda_check(cudaMemcpy(bufs[j], k->in[j], b, cudaMemcpyDeviceToHost), what)) ok = 0;
        h.in[j] = bufs[j];
    }
    size_t ob = bytes_of(k->node);
    if (ok) ok = (bufs[n] = std::malloc(ob ? ob : 1)) != nullptr;
    if (!ok && bufs[n] == nullptr) pipit__cuda_check(cudaErrorMemoryAllocation, what);
    if (ok) {
        h.out = bufs[n];
        cpu(&h, 0, 1);
        pipit__cuda_check(cudaMemcpy(k->out, h.out, ob, cudaMemcpyHostToDevice), what);
    }
    for (int j = 0; j <= n; j++) std::free(bufs[j]);
}

extern "C" void pipit__cuda_ROPE_CP(const pipit__kctx *k, int ith, int nth) {
    on_host(k, ith, nth, pipit__cpu_ROPE_CP, "rope_cp (host copy)");
}
extern "C" void pipit__cuda_ATTENTION_CP(const pipit__kctx *k, int ith, int nth) {
    on_host(k, ith, nth, pipit__cpu_ATTENTION_CP, "attention_cp (host copy)");
}
extern "C" void pipit__cuda_ATTN_CP_D(const pipit__kctx *k, int ith, int nth) {
    on_host(k, ith, nth, pipit__cpu_ATTN_CP_D, "attn_cp_d (host copy)");
}
extern "C" void pipit__cuda_ATTENTION_CP_DOC(const pipit__kctx *k, int ith, int nth) {
    on_host(k, ith, nth, pipit__cpu_ATTENTION_CP_DOC, "attention_cp_doc (host copy)");
}
extern "C" void pipit__cuda_ATTN_CP_DOC_D(const pipit__kctx *k, int ith, int nth) {
    on_host(k, ith, nth, pipit__cpu_ATTN_CP_DOC_D, "attn_cp_doc_d (host copy)");
}
