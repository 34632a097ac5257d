/*
 * ops_cuda.cu — the CUDA backend's kernel for every op of ir/ops.def, the
 * counterpart of backend/cpu/ops_cpu.c: each op reads its sizes off the node
 * exactly as the CPU op does and, from thread 0 of the rank's team only
 * (the other threads return: one launch covers the whole op), calls the
 * launchers of the kernel files (ops_cuda.cuh), which launch on the rank's
 * stream (pipit__cuda_stream):
 *   elementwise_cuda.cu  add/sub/mul/div (broadcasting), broadcast_to, scale,
 *                        bias_add, fill, unary functions and their gradients
 *   reduce_cuda.cu       sum_rows, sum, sum_to, max, softmax, cross-entropy
 *   norms_cuda.cu        layernorm, rmsnorm and their gradients
 *   rope_cuda.cu         rotary position embedding
 *   attention_cuda.cu    attention (packed GPT-2 and separate q, k, v)
 *   head_xent_cuda.cu    the fused LM head + cross-entropy
 * This file keeps GEMM (through pipit__cuda_gemm), permute, the embedding and
 * gather (forward and backward), slices and concatenation, and the table.
 * The math follows backend/cpu/kernels_impl.h expression by expression, in
 * f32 and f64, with the same accumulation types (double where the CPU sums
 * in double).
 *
 * bf16 (mixed precision, compile/autocast.c): the elementwise kernels, the
 * copies (permute, slices, concat, embed, gather, broadcast), cast and GEMM
 * take bf16 directly (pipit_cuda_bf16 loaded into fp32, rounded once on
 * store, as the CPU's bf16 kernels). The kernels that reduce (sums, max,
 * softmax, cross-entropy, norms, RoPE, attention, the embedding's backward)
 * run on fp32 copies of their bf16 inputs ("widened", below): the CPU's bf16
 * kernels compute in fp32 too, so this is the same math, at the cost of one
 * conversion pass each way through stream-ordered scratch.
 *
 * Determinism: no floating-point atomics. Every reduction has an order fixed
 * by the shapes: a thread or warp owns each output and loops in order, and
 * wider reductions are fixed-shape trees (partials per row chunk, summed in
 * chunk order). The embedding backward sorts (index, position) pairs with a
 * stable radix sort and sums each index's rows in position order, which is
 * the CPU's order, so its bits equal the CPU's.
 */
#include <cub/device/device_radix_sort.cuh>

#include <atomic>
#include <cmath>

#include "backend/cpu/cp.h"
#include "backend/cuda/moe_cuda.h"
#include "backend/cuda/ops_cuda.cuh"
#include "ir/graph.h"

#define KIN(i) (k->in_node[i])
#define DT(k) ((pipit_dtype)(k)->node->dtype)
#define NTH PIPIT_CUDA_THREADS

/* One launch per op, from thread 0 of the rank's team. */
#define ONLY_THREAD0(ith, nth) \
    do {                       \
        (void)(nth);           \
        if ((ith) != 0) return; \
    } while (0)

/* ------------------------------------------------------------ scratch */

/* Freed pool memory stays with the pool (instead of going back to the
 * driver at every synchronisation), once per device. */
static void keep_pool_memory(void) {
    static std::atomic<unsigned long long> done{0};
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
        (void)cudaGetLastError();
        return;
    }
    unsigned long long bit = 1ull << dev;
    if (done.load() & bit) return;
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    if (cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess ||
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess)
        (void)cudaGetLastError(); /* only slower without it */
    done.fetch_or(bit);
}

void *pipit__cuda_scratch(size_t bytes, const char *what) {
    keep_pool_memory();
    void *p = NULL;
    if (pipit__cuda_check(cudaMallocAsync(&p, bytes ? bytes : 1, pipit__cuda_stream()), what)) return NULL;
    return p;
}

void pipit__cuda_scratch_free(void *p, const char *what) {
    if (p) pipit__cuda_check(cudaFreeAsync(p, pipit__cuda_stream()), what);
}

/* ------------------------------------------------------------ elementwise */

/* Binary ops: inputs laid out as the output (same shape, or leading 1s)
 * take the flat kernel, others broadcast by the CPU's plan. */
static void binary(const pipit__kctx *k, int ith, int nth, int op) {
    ONLY_THREAD0(ith, nth);
    int64_t n = pipit__node_numel(k->node);
    if (pipit__node_numel(KIN(0)) == n && pipit__node_numel(KIN(1)) == n) {
        pipit__cuda_binary(DT(k), op, k->out, k->in[0], k->in[1], n);
        return;
    }
    int64_t dims[4], st[2][4];
    const pipit__node *const in[2] = {KIN(0), KIN(1)};
    pipit__bcast_plan(k->node, 2, in, dims, st);
    pipit__cuda_binary_bcast(DT(k), op, k->out, k->in[0], k->in[1], dims, st[0], st[1]);
}
static void cuda_ADD(const pipit__kctx *k, int ith, int nth) { binary(k, ith, nth, PIPIT_OP_ADD); }
static void cuda_SUB(const pipit__kctx *k, int ith, int nth) { binary(k, ith, nth, PIPIT_OP_SUB); }
static void cuda_MUL(const pipit__kctx *k, int ith, int nth) { binary(k, ith, nth, PIPIT_OP_MUL); }
static void cuda_DIV(const pipit__kctx *k, int ith, int nth) { binary(k, ith, nth, PIPIT_OP_DIV); }

/* x reduced to the output's shape: the plan walks x, with the output's
 * strides (0 along the summed axes). */
static void cuda_SUM_TO(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t dims[4], so[1][4];
    pipit__bcast_plan(KIN(0), 1, &k->node, dims, so);
    pipit__cuda_sum_to(DT(k), k->out, k->in[0], dims, so[0], k->node->fattr[1]);
}

static void cuda_BROADCAST_TO(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t dims[4], sx[1][4];
    pipit__bcast_plan(k->node, 1, &KIN(0), dims, sx);
    pipit__cuda_broadcast(DT(k), k->out, k->in[0], dims, sx[0]);
}

/* Elementwise y = f(x), and fused gradients dx = f'(x or y) * d. */
#define CUDA_UNARY(NAME)                                                                   \
    static void cuda_##NAME(const pipit__kctx *k, int ith, int nth) {                      \
        ONLY_THREAD0(ith, nth);                                                            \
        pipit__cuda_unary(DT(k), PIPIT_OP_##NAME, k->out, k->in[0], pipit__node_numel(k->node)); \
    }
#define CUDA_UNARY_DX(NAME)                                                                \
    static void cuda_##NAME(const pipit__kctx *k, int ith, int nth) {                      \
        ONLY_THREAD0(ith, nth);                                                            \
        pipit__cuda_unary_dx(DT(k), PIPIT_OP_##NAME, k->out, k->in[0], k->in[1],           \
                             pipit__node_numel(k->node));                                  \
    }
CUDA_UNARY(NEG)
CUDA_UNARY(EXP)
CUDA_UNARY(LOG)
CUDA_UNARY(SQRT)
CUDA_UNARY(RSQRT)
CUDA_UNARY(ABS)
CUDA_UNARY(RELU)
CUDA_UNARY(SILU)
CUDA_UNARY(SIGMOID)
CUDA_UNARY(TANH)
CUDA_UNARY(GELU)
CUDA_UNARY_DX(SQRT_DX)
CUDA_UNARY_DX(RSQRT_DX)
CUDA_UNARY_DX(ABS_DX)
CUDA_UNARY_DX(RELU_DX)
CUDA_UNARY_DX(SILU_DX)
CUDA_UNARY_DX(SIGMOID_DX)
CUDA_UNARY_DX(TANH_DX)
CUDA_UNARY_DX(GELU_DX)
#undef CUDA_UNARY
#undef CUDA_UNARY_DX

/* alpha is fattr[0] rounded to the dtype first, as the CPU's cpu_SCALE does. */
static void cuda_SCALE(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_scale(DT(k), k->out, k->in[0], k->node->fattr[0], pipit__node_numel(k->node));
}

static void cuda_BIAS_ADD(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_bias_add(DT(k), k->out, k->in[0], k->in[1], pipit__node_rows(k->node), pipit__node_last_dim(k->node));
}

static void cuda_FILL(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_fill(DT(k), k->out, k->in[0], k->node->fattr[0], pipit__node_numel(k->node));
}

/* ------------------------------------------------------------ matmul */

/* The CPU's cpu_MATMUL argument for argument, through the backend GEMM. */
static void cuda_MATMUL(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *a = KIN(0), *b = KIN(1);
    pipit__mm_dims d = pipit__matmul_dims(a, b, k->node);
    int64_t lda = a->shape[a->ndim - 1], ldb = b->shape[b->ndim - 1];
    int64_t batch = d.batch, M = d.M;
    if (d.broadcast) { M *= batch; batch = 1; } /* rows of a flatten into M */
    int64_t sA = a->shape[a->ndim - 1] * a->shape[a->ndim - 2];
    int64_t sB = b->ndim == 2 ? 0 : b->shape[b->ndim - 1] * b->shape[b->ndim - 2];
    pipit__cuda_gemm(DT(k), d.ta, d.tb, batch, M, d.N, d.K, k->in[0], lda, sA, k->in[1], ldb, sB, k->out, d.N,
                     d.M * d.N, 0);
}

/* ------------------------------------------------------------ permute */

/* out dims and the x strides that walk them, right-aligned in 4 slots (the
 * CPU's pipit__permute layout). */
typedef struct {
    int64_t od[4], os[4];
} permute_geom;

template <class T>
__global__ void permute_kernel(T *out, const T *x, permute_geom g, int64_t n) {
    PIPIT_GRID_STRIDE(e, n) {
        int64_t i3 = e % g.od[3], r = e / g.od[3];
        int64_t i2 = r % g.od[2], i1 = r / g.od[2] % g.od[1], i0 = r / g.od[2] / g.od[1];
        out[e] = x[i0 * g.os[0] + i1 * g.os[1] + i2 * g.os[2] + i3 * g.os[3]];
    }
}

template <class T>
static void launch_permute(void *out, const void *x, permute_geom g, int64_t n) {
    if (n <= 0) return;
    permute_kernel<T><<<pipit_grid_for(n, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, (const T *)x, g, n);
}

static void cuda_PERMUTE(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *x = KIN(0);
    int nd = x->ndim; /* 0..4; a scalar copies its one element */
    if (nd > 4) return;
    permute_geom g = {{1, 1, 1, 1}, {0, 0, 0, 0}};
    int64_t xstride[4], st = 1;
    for (int i = nd - 1; i >= 0; i--) {
        xstride[i] = st;
        st *= x->shape[i];
    }
    for (int i = 0; i < nd; i++) {
        int p = (int)k->node->iattr[i];
        g.od[4 - nd + i] = x->shape[p];
        g.os[4 - nd + i] = xstride[p];
    }
    PIPIT_BY_DTYPE(DT(k), launch_permute, k->out, k->in[0], g, pipit__node_numel(x));
    PIPIT_CUDA_LAUNCHED("permute");
}

/* ------------------------------------------------------------ embedding */

/* out [n, C] = rows idx[n] - off of table [V, C]. The runtime checks
 * indices on the host; one out of range anyway gives a NaN row, not a
 * fault -- except in a vocab-parallel shard (vp: rows [off, off + V) of
 * the vocabulary), where another shard's index reads zeros (the CPU's
 * pipit__embed_vp). */
template <class T>
__global__ void embed_kernel(T *out, const T *table, const int32_t *idx, int64_t n, int64_t V, int64_t C, int64_t off,
                             int vp) {
    PIPIT_GRID_STRIDE(e, n * C) {
        int64_t i = e / C, c = e % C, v = (int64_t)idx[i] - off;
        out[e] = v >= 0 && v < V ? table[v * C + c] : vp ? (T)0.0f : (T)NAN;
    }
}

template <class T>
static void launch_embed(void *out, const void *table, const int32_t *idx, int64_t n, int64_t V, int64_t C,
                         int64_t off, int vp) {
    if (n * C <= 0) return;
    embed_kernel<T><<<pipit_grid_for(n * C, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, (const T *)table, idx,
                                                                                  n, V, C, off, vp);
}

static void cuda_EMBED(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t cnt = pipit__node_numel(KIN(1)), C = KIN(0)->shape[1], V = KIN(0)->shape[0];
    int vp = k->node->iattr[1] != 0;
    PIPIT_BY_DTYPE(DT(k), launch_embed, k->out, k->in[0], (const int32_t *)k->in[1], cnt, V, C, vp ? k->shard * V : 0,
                   vp);
    PIPIT_CUDA_LAUNCHED("embed");
}

__global__ void iota_kernel(int32_t *v, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) v[i] = (int32_t)i;
}

/* Block (p, column chunk): if sorted position p starts the run of its
 * index v, dtable[v, c] = sum of dout[pos, c] over the run, positions
 * ascending (the stable sort kept them so), accumulated in T from 0: the
 * CPU's order and type, so the same bits. Other blocks return at once. */
template <class T>
__global__ void embed_runs_kernel(T *dtable, const int32_t *keys, const int32_t *pos, const T *dout, int64_t n,
                                  int64_t V, int64_t C, int64_t off) {
    int64_t p = blockIdx.x, c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    int32_t key = keys[p];
    int64_t v = (int64_t)key - off; /* a vocab-parallel shard's row (off = 0 otherwise) */
    if ((p > 0 && keys[p - 1] == key) || v < 0 || v >= V || c >= C) return;
    T acc = 0;
    for (int64_t q = p; q < n && keys[q] == key; q++) acc += dout[(int64_t)pos[q] * C + c];
    dtable[v * C + c] = acc;
}

/* dtable [V, C] = scatter-add of dout [n, C] rows by idx [n] - first_row
 * (the CPU's pipit__embed_dtable; with first_row a vocab-parallel shard's,
 * pipit__embed_dtable_vp): zero, sort (idx, position) pairs stably, one
 * sum per distinct index of the shard. */
template <class T>
static void launch_embed_dtable(void *dtable, const int32_t *idx, const void *dout, int64_t n, int64_t V,
                                int64_t C, int64_t first_row) {
    cudaStream_t s = pipit__cuda_stream();
    if (V * C <= 0) return;
    if (pipit__cuda_check(cudaMemsetAsync(dtable, 0, (size_t)(V * C) * sizeof(T), s), "embed_dtable")) return;
    if (n <= 0 || C <= 0) return;
    if (n > INT32_MAX || (C + 127) / 128 > 65535) {
        pipit__cuda_check(cudaErrorInvalidValue, "embed_dtable: more than 2^31 indices or 8M columns");
        return;
    }
    size_t tmp_bytes = 0;
    if (pipit__cuda_check(cub::DeviceRadixSort::SortPairs(NULL, tmp_bytes, idx, (int32_t *)NULL, (const int32_t *)NULL,
                                                          (int32_t *)NULL, (int)n, 0, 32, s),
                          "embed_dtable: sort size"))
        return;
    size_t ints = (size_t)n * sizeof(int32_t), off = (3 * ints + 255) / 256 * 256;
    char *buf = (char *)pipit__cuda_scratch(off + tmp_bytes, "embed_dtable: scratch");
    if (!buf) return;
    int32_t *keys = (int32_t *)buf, *pos_in = (int32_t *)(buf + ints), *pos = (int32_t *)(buf + 2 * ints);
    iota_kernel<<<pipit_grid_for(n, NTH), NTH, 0, s>>>(pos_in, n);
    if (!PIPIT_CUDA_LAUNCHED("embed_dtable: iota") &&
        !pipit__cuda_check(cub::DeviceRadixSort::SortPairs(buf + off, tmp_bytes, idx, keys, pos_in, pos, (int)n, 0,
                                                           32, s),
                           "embed_dtable: sort")) {
        dim3 grid((unsigned)n, (unsigned)((C + 127) / 128));
        embed_runs_kernel<T><<<grid, 128, 0, s>>>((T *)dtable, keys, pos, (const T *)dout, n, V, C, first_row);
        PIPIT_CUDA_LAUNCHED("embed_dtable");
    }
    pipit__cuda_scratch_free(buf, "embed_dtable: scratch");
}

static void cuda_EMBED_DTABLE(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t V = k->node->shape[0];
    PIPIT_BY_WIDE(DT(k), launch_embed_dtable, k->out, (const int32_t *)k->in[0], k->in[1], pipit__node_numel(KIN(0)), V,
                  k->node->shape[1], k->node->iattr[1] ? k->shard * V : 0);
}

/* ------------------------------------------------- tensor parallelism */

/* The vocab-parallel cross-entropy's target logit of this shard's classes
 * [off, off + V): out[r] = z[r, y[r] - off], 0 for another shard's target;
 * and its gradient dz [rows, V] = d[r] at that class, 0 elsewhere (the
 * CPU's pipit__tp_pick and pipit__tp_pick_dx: copies, the same bits). */
template <class T>
__global__ void tp_pick_kernel(T *out, const T *z, const int32_t *y, int64_t rows, int64_t V, int64_t off) {
    PIPIT_GRID_STRIDE(r, rows) {
        int64_t v = (int64_t)y[r] - off;
        out[r] = v >= 0 && v < V ? z[r * V + v] : (T)0.0f;
    }
}

template <class T>
__global__ void tp_pick_dx_kernel(T *dz, const int32_t *y, const T *d, int64_t rows, int64_t V, int64_t off) {
    PIPIT_GRID_STRIDE(e, rows * V) {
        int64_t r = e / V;
        dz[e] = (int64_t)y[r] - off == e % V ? d[r] : (T)0.0f;
    }
}

template <class T>
static void launch_tp_pick(void *out, const void *z, const int32_t *y, int64_t rows, int64_t V, int64_t off) {
    if (rows <= 0) return;
    tp_pick_kernel<T><<<pipit_grid_for(rows, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, (const T *)z, y, rows,
                                                                                      V, off);
}

template <class T>
static void launch_tp_pick_dx(void *dz, const int32_t *y, const void *d, int64_t rows, int64_t V, int64_t off) {
    if (rows * V <= 0) return;
    tp_pick_dx_kernel<T><<<pipit_grid_for(rows * V, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)dz, y,
                                                                                             (const T *)d, rows, V, off);
}

static void cuda_TP_PICK(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t V = pipit__node_last_dim(KIN(0));
    PIPIT_BY_DTYPE(DT(k), launch_tp_pick, k->out, k->in[0], (const int32_t *)k->in[1], pipit__node_rows(KIN(0)), V,
                   k->shard * V);
    PIPIT_CUDA_LAUNCHED("tp_pick");
}

static void cuda_TP_PICK_DX(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t V = k->node->iattr[0];
    PIPIT_BY_DTYPE(DT(k), launch_tp_pick_dx, k->out, (const int32_t *)k->in[0], k->in[1], pipit__node_numel(KIN(0)), V,
                   k->shard * V);
    PIPIT_CUDA_LAUNCHED("tp_pick_dx");
}

/* The embedding generalised: rows of numel(table) / N elements. */
static void cuda_GATHER(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t V = KIN(0)->shape[0], C = pipit__node_numel(KIN(0)) / V;
    PIPIT_BY_DTYPE(DT(k), launch_embed, k->out, k->in[0], (const int32_t *)k->in[1], pipit__node_numel(KIN(1)), V, C,
                   0, 0);
    PIPIT_CUDA_LAUNCHED("gather");
}

static void cuda_GATHER_DTABLE(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t V = k->node->shape[0];
    PIPIT_BY_WIDE(DT(k), launch_embed_dtable, k->out, (const int32_t *)k->in[0], k->in[1], pipit__node_numel(KIN(0)),
                  V, pipit__node_numel(k->node) / V, 0);
}

/* ------------------------------------------------------------ reductions */

static void cuda_SUM_ROWS(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_sum_rows(DT(k), k->out, k->in[0], pipit__node_rows(KIN(0)), pipit__node_last_dim(KIN(0)));
}

static void cuda_SUM(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_sum_all(DT(k), k->out, k->in[0], pipit__node_numel(KIN(0)), k->node->fattr[0]);
}

/* x [outer, n, inner] around the axis; the max keeps it as 1. */
static void cuda_MAX(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t outer, n, inner;
    pipit__axis_split(KIN(0), (int)k->node->iattr[0], &outer, &n, &inner);
    pipit__cuda_max_axis(DT(k), k->out, k->in[0], outer, n, inner);
}

static void cuda_MAX_DX(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t outer, n, inner;
    pipit__axis_split(k->node, (int)k->node->iattr[0], &outer, &n, &inner);
    pipit__cuda_max_dx(DT(k), k->out, k->in[0], k->in[1], outer, n, inner);
}

/* Row-wise along the last axis: y from x, or dx from y and d. */
static void softmax(const pipit__kctx *k, int ith, int nth, int op) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_softmax(DT(k), op, k->out, k->in[0], k->node->nin > 1 ? k->in[1] : NULL, pipit__node_rows(k->node),
                        pipit__node_last_dim(k->node));
}
static void cuda_SOFTMAX(const pipit__kctx *k, int ith, int nth) { softmax(k, ith, nth, PIPIT_OP_SOFTMAX); }
static void cuda_SOFTMAX_DX(const pipit__kctx *k, int ith, int nth) { softmax(k, ith, nth, PIPIT_OP_SOFTMAX_DX); }
static void cuda_LOG_SOFTMAX(const pipit__kctx *k, int ith, int nth) { softmax(k, ith, nth, PIPIT_OP_LOG_SOFTMAX); }
static void cuda_LOG_SOFTMAX_DX(const pipit__kctx *k, int ith, int nth) {
    softmax(k, ith, nth, PIPIT_OP_LOG_SOFTMAX_DX);
}

static void cuda_XENT_ROWS(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_xent_rows(DT(k), k->out, k->in[0], (const int32_t *)k->in[1], pipit__node_rows(KIN(0)),
                          pipit__node_last_dim(KIN(0)));
}

static void cuda_XENT_DLOGITS(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_xent_dlogits(DT(k), k->out, k->in[0], (const int32_t *)k->in[1], k->in[2], pipit__node_rows(KIN(0)),
                             pipit__node_last_dim(KIN(0)));
}

/* ------------------------------------------------------------ norms */

#define CUDA_NORM(NAME, fn, ...)                                                                      \
    static void cuda_##NAME(const pipit__kctx *k, int ith, int nth) {                                 \
        ONLY_THREAD0(ith, nth);                                                                       \
        fn(DT(k), k->out, __VA_ARGS__, pipit__node_rows(k->node), pipit__node_last_dim(k->node),      \
           k->node->fattr[0]);                                                                        \
    }
CUDA_NORM(LAYERNORM, pipit__cuda_layernorm, k->in[0], k->in[1], k->in[2])
CUDA_NORM(LN_DX, pipit__cuda_layernorm_dx, k->in[0], k->in[1], k->in[2])
CUDA_NORM(RMSNORM, pipit__cuda_rmsnorm, k->in[0], k->in[1])
CUDA_NORM(RMS_DX, pipit__cuda_rmsnorm_dx, k->in[0], k->in[1], k->in[2])
#undef CUDA_NORM

/* dw [C]: the rows are x's (the output is one row). */
static void cuda_LN_DW(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_layernorm_dw(DT(k), k->out, k->in[0], k->in[1], pipit__node_rows(KIN(0)), pipit__node_last_dim(KIN(0)),
                             k->node->fattr[0]);
}

static void cuda_RMS_DW(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_rmsnorm_dw(DT(k), k->out, k->in[0], k->in[1], pipit__node_rows(KIN(0)), pipit__node_last_dim(KIN(0)),
                           k->node->fattr[0]);
}

/* ------------------------------------------------------------ rope */

/* x [B,T,H*D] or [B,T,H,D]: the same memory. */
static void cuda_ROPE(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *n = k->node;
    int64_t B = n->shape[0], T = n->shape[1], H = n->iattr[0], D = pipit__node_numel(n) / (B * T) / H;
    pipit__cuda_rope(DT(k), k->out, k->in[0], B, T, H, D, n->iattr[1], pipit__rope_freqs_of(n->fattr, n->iattr[3]),
                     (int)n->iattr[2]);
}

/* ------------------------------------------------------------ attention */

/* GPT-2's packed layout: qkv [B,T,3C] = q | k | v, H heads of C/H, causal,
 * scale 1/sqrt(C/H) (the CPU's packed attn dims). */
static pipit_cuda_attn packed_dims(int64_t B, int64_t T, int64_t C, int64_t H) {
    int64_t D = C / H;
    return pipit_cuda_attn{B, T, T, H, H, D, 3 * C, 3 * C, 3 * C, C, 1, 1.0 / sqrt((double)D), nullptr};
}

static void cuda_ATTENTION(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *n = k->node;
    int64_t C = n->shape[2];
    pipit_cuda_attn a = packed_dims(n->shape[0], n->shape[1], C, n->iattr[0]);
    size_t es = pipit__dtype_size(DT(k));
    const char *qkv = (const char *)k->in[0];
    pipit__cuda_attn_fwd(DT(k), k->out, qkv, qkv + C * es, qkv + 2 * C * es, &a);
}

static void cuda_ATTN_DQKV(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *d = KIN(1);
    int64_t C = d->shape[2];
    pipit_cuda_attn a = packed_dims(d->shape[0], d->shape[1], C, k->node->iattr[0]);
    size_t es = pipit__dtype_size(DT(k));
    const char *qkv = (const char *)k->in[0];
    char *dqkv = (char *)k->out;
    pipit__cuda_attn_bwd(DT(k), dqkv, dqkv + C * es, dqkv + 2 * C * es, qkv, qkv + C * es, qkv + 2 * C * es,
                         k->in[1], &a);
}

/* The problem of an attention_qkv node (or of its backward, which reads
 * the same q, k, v as inputs 0..2): the CPU's qkv_dims. */
static pipit_cuda_attn qkv_dims(const pipit__kctx *k) {
    const pipit__node *q = KIN(0), *kv = KIN(1);
    int64_t Hq = k->node->iattr[0], Hkv = k->node->iattr[1], D = q->shape[2] / Hq;
    return pipit_cuda_attn{q->shape[0], q->shape[1], kv->shape[1], Hq,     Hkv, D, Hq * D, Hkv * D, Hkv * D,
                           Hq * D,      (int)k->node->iattr[2], k->node->fattr[0], nullptr};
}

static void cuda_ATTENTION_QKV(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit_cuda_attn a = qkv_dims(k);
    pipit__cuda_attn_fwd(DT(k), k->out, k->in[0], k->in[1], k->in[2], &a);
}

/* The output is [dq | dk | dv], flat. */
static void cuda_ATTN_QKV_D(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit_cuda_attn a = qkv_dims(k);
    size_t es = pipit__dtype_size(DT(k));
    int64_t nq = pipit__node_numel(KIN(0)), nk = pipit__node_numel(KIN(1));
    char *d = (char *)k->out;
    pipit__cuda_attn_bwd(DT(k), d, d + nq * es, d + (nq + nk) * es, k->in[0], k->in[1], k->in[2], k->in[3], &a);
}

/* Packed documents: qkv [B,T,(Hq+2Hkv)*D] (per row q | k | v), doc [B,T]
 * (input 1 of the forward, 2 of the backward), the CPU's doc_dims. */
static pipit_cuda_attn doc_dims(const pipit__kctx *k, int doc_in) {
    const pipit__node *x = KIN(0), *n = k->node;
    int64_t Hq = n->iattr[0], Hkv = n->iattr[1], D = x->shape[2] / (Hq + 2 * Hkv), ld = (Hq + 2 * Hkv) * D;
    return pipit_cuda_attn{x->shape[0],     x->shape[1], x->shape[1], Hq, Hkv, D, ld, ld, ld, Hq * D, (int)n->iattr[2],
                           n->fattr[0], (const int32_t *)k->in[doc_in]};
}

static void cuda_ATTENTION_DOC(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit_cuda_attn a = doc_dims(k, 1);
    size_t es = pipit__dtype_size(DT(k));
    const char *x = (const char *)k->in[0];
    pipit__cuda_attn_fwd(DT(k), k->out, x, x + a.Hq * a.D * es, x + (a.Hq + a.Hkv) * a.D * es, &a);
}

/* dqkv in qkv's layout. */
static void cuda_ATTN_DOC_D(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit_cuda_attn a = doc_dims(k, 2);
    size_t es = pipit__dtype_size(DT(k)), ko = (size_t)(a.Hq * a.D) * es, vo = (size_t)((a.Hq + a.Hkv) * a.D) * es;
    const char *x = (const char *)k->in[0];
    char *d = (char *)k->out;
    pipit__cuda_attn_bwd(DT(k), d, d + ko, d + vo, x, x + ko, x + vo, k->in[1], &a);
}

/* ------------------------------------------------------------ slices, concat */

/* out [rows, ow] columns [oc, oc+w) = x [rows, xw] columns [xc, xc+w) */
template <class T>
__global__ void copy_cols_kernel(T *out, int64_t ow, int64_t oc, const T *x, int64_t xw, int64_t xc, int64_t rows,
                                 int64_t w) {
    PIPIT_GRID_STRIDE(e, rows * w) {
        int64_t r = e / w, c = e % w;
        out[r * ow + oc + c] = x[r * xw + xc + c];
    }
}

/* out [rows, ow]: x [rows, w] at columns [oc, oc+w), zeros elsewhere */
template <class T>
__global__ void pad_cols_kernel(T *out, int64_t ow, int64_t oc, const T *x, int64_t rows, int64_t w) {
    PIPIT_GRID_STRIDE(e, rows * ow) {
        int64_t r = e / ow, c = e % ow;
        out[e] = c >= oc && c < oc + w ? x[r * w + c - oc] : (T)0;
    }
}

template <class T>
static void launch_copy_cols(void *out, int64_t ow, int64_t oc, const void *x, int64_t xw, int64_t xc, int64_t rows,
                             int64_t w) {
    if (rows * w <= 0) return;
    copy_cols_kernel<T><<<pipit_grid_for(rows * w, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, ow, oc,
                                                                                        (const T *)x, xw, xc, rows, w);
}

template <class T>
static void launch_pad_cols(void *out, int64_t ow, int64_t oc, const void *x, int64_t rows, int64_t w) {
    if (rows * ow <= 0) return;
    pad_cols_kernel<T><<<pipit_grid_for(rows * ow, NTH), NTH, 0, pipit__cuda_stream()>>>((T *)out, ow, oc,
                                                                                        (const T *)x, rows, w);
}

/* Around the axis every tensor is [outer, axis * inner]: slices, padding
 * and concatenation copy column ranges of those rows (the CPU's calls). */
static void cuda_SLICE(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t outer, n, inner, len = k->node->iattr[2];
    pipit__axis_split(KIN(0), (int)k->node->iattr[0], &outer, &n, &inner);
    PIPIT_BY_DTYPE(DT(k), launch_copy_cols, k->out, len * inner, 0, k->in[0], n * inner, k->node->iattr[1] * inner,
                   outer, len * inner);
    PIPIT_CUDA_LAUNCHED("slice");
}

static void cuda_SLICE_DX(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t outer, full, inner, len = KIN(0)->shape[k->node->iattr[0]];
    pipit__axis_split(k->node, (int)k->node->iattr[0], &outer, &full, &inner);
    PIPIT_BY_DTYPE(DT(k), launch_pad_cols, k->out, full * inner, k->node->iattr[1] * inner, k->in[0], outer,
                   len * inner);
    PIPIT_CUDA_LAUNCHED("slice_dx");
}

static void cuda_CONCAT(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int ax = (int)k->node->iattr[0];
    int64_t outer, all, inner, at = 0;
    pipit__axis_split(k->node, ax, &outer, &all, &inner);
    for (int j = 0; j < k->node->nin; j++) {
        int64_t n = KIN(j)->shape[ax];
        PIPIT_BY_DTYPE(DT(k), launch_copy_cols, k->out, all * inner, at * inner, k->in[j], n * inner, 0, outer,
                       n * inner);
        at += n;
    }
    PIPIT_CUDA_LAUNCHED("concat");
}

/* ------------------------------------------------------------ cast, bf16 */

/* out[i] = x[i] converted: exact when widening, else rounded once to
 * nearest even (bf16 from f64 correctly, as util/bf16.h). */
template <class O, class X>
__global__ void convert_kernel(O *out, const X *x, int64_t n) {
    PIPIT_GRID_STRIDE(i, n) out[i] = (O)(pipit_arith<X>)x[i];
}

template <class O, class X>
static void launch_convert_as(void *out, const void *x, int64_t n) {
    convert_kernel<O, X><<<pipit_grid_for(n, NTH), NTH, 0, pipit__cuda_stream()>>>((O *)out, (const X *)x, n);
}

template <class O>
static void launch_convert(void *out, pipit_dtype xdt, const void *x, int64_t n) {
    if (xdt == PIPIT_F64) launch_convert_as<O, double>(out, x, n);
    else if (xdt == PIPIT_BF16) launch_convert_as<O, pipit_cuda_bf16>(out, x, n);
    else launch_convert_as<O, float>(out, x, n);
}

/* out [n] (odt) = x [n] (xdt); the same dtype copies the bits (the CPU's
 * pipit__convert). */
static void convert(pipit_dtype odt, void *out, pipit_dtype xdt, const void *x, int64_t n) {
    if (n <= 0 || (odt == xdt && out == x)) return;
    if (odt == xdt) PIPIT_BY_DTYPE(odt, launch_copy_cols, out, n, 0, x, n, 0, 1, n);
    else PIPIT_BY_DTYPE(odt, launch_convert, out, xdt, x, n);
    PIPIT_CUDA_LAUNCHED("cast");
}

static void cuda_CAST(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    convert(DT(k), k->out, (pipit_dtype)KIN(0)->dtype, k->in[0], pipit__node_numel(k->node));
}

static int has_bf16(const pipit__kctx *k) {
    int any = k->node->dtype == PIPIT_BF16;
    for (int j = 0; j < k->node->nin; j++) any |= k->in_node[j]->dtype == PIPIT_BF16;
    return any;
}

/* Runs fp32 kernel `f32` for bf16 op k: each bf16 input widened exactly
 * into an fp32 copy, the kernel run on copies of the nodes with dtype f32,
 * a bf16 output rounded once from its fp32 result (an fp32 output, as
 * xent_rows' and sum's of bf16 values, is written in place). Scratch comes
 * from the stream-ordered pool and goes back after the last reader. */
static void run_widened(const pipit__kctx *k, pipit__op_kernel f32) {
    pipit__node node = *k->node, in[PIPIT_MAX_IN];
    pipit__kctx w = *k;
    void *tmp[PIPIT_MAX_IN + 1] = {NULL};
    const char *what = pipit__ops[node.op].name;
    int ok = 1;
    w.node = &node;
    for (int j = 0; j < node.nin; j++) {
        in[j] = *k->in_node[j];
        w.in_node[j] = &in[j];
        if (in[j].dtype != PIPIT_BF16) continue;
        int64_t n = pipit__node_numel(&in[j]);
        in[j].dtype = PIPIT_F32;
        w.in[j] = tmp[j] = pipit__cuda_scratch((size_t)n * sizeof(float), what);
        if (tmp[j]) convert(PIPIT_F32, tmp[j], PIPIT_BF16, k->in[j], n);
        ok = ok && tmp[j];
    }
    int64_t n = pipit__node_numel(&node);
    if (node.dtype == PIPIT_BF16) {
        node.dtype = PIPIT_F32;
        w.out = tmp[node.nin] = pipit__cuda_scratch((size_t)n * sizeof(float), what);
        ok = ok && tmp[node.nin];
    }
    if (ok) {
        f32(&w, 0, 1);
        if (w.out != k->out) convert(PIPIT_BF16, k->out, PIPIT_F32, w.out, n);
    }
    for (int j = 0; j <= node.nin; j++) pipit__cuda_scratch_free(tmp[j], what);
}

/* The table entry of an op whose kernels take f32 / f64 only: bf16 runs
 * widened. The #define after it points the table (below) at the wrapper. */
#define WIDENED(NAME)                                                    \
    static void wide_##NAME(const pipit__kctx *k, int ith, int nth) {    \
        if (!has_bf16(k)) cuda_##NAME(k, ith, nth);                      \
        else if (ith == 0) run_widened(k, cuda_##NAME);                  \
    }
WIDENED(EMBED_DTABLE)
WIDENED(GATHER_DTABLE)
WIDENED(SUM_TO)
WIDENED(SUM_ROWS)
WIDENED(SUM)
WIDENED(MAX)
WIDENED(MAX_DX)
WIDENED(SOFTMAX)
WIDENED(SOFTMAX_DX)
WIDENED(LOG_SOFTMAX)
WIDENED(LOG_SOFTMAX_DX)
WIDENED(XENT_ROWS)
WIDENED(XENT_DLOGITS)
WIDENED(LAYERNORM)
WIDENED(LN_DX)
WIDENED(LN_DW)
WIDENED(RMSNORM)
WIDENED(RMS_DX)
WIDENED(RMS_DW)
WIDENED(ROPE)
WIDENED(ATTENTION)
WIDENED(ATTN_DQKV)
WIDENED(ATTENTION_QKV)
WIDENED(ATTN_QKV_D)
WIDENED(ATTENTION_DOC)
WIDENED(ATTN_DOC_D)
#undef WIDENED
#define cuda_EMBED_DTABLE wide_EMBED_DTABLE
#define cuda_GATHER_DTABLE wide_GATHER_DTABLE
#define cuda_SUM_TO wide_SUM_TO
#define cuda_SUM_ROWS wide_SUM_ROWS
#define cuda_SUM wide_SUM
#define cuda_MAX wide_MAX
#define cuda_MAX_DX wide_MAX_DX
#define cuda_SOFTMAX wide_SOFTMAX
#define cuda_SOFTMAX_DX wide_SOFTMAX_DX
#define cuda_LOG_SOFTMAX wide_LOG_SOFTMAX
#define cuda_LOG_SOFTMAX_DX wide_LOG_SOFTMAX_DX
#define cuda_XENT_ROWS wide_XENT_ROWS
#define cuda_XENT_DLOGITS wide_XENT_DLOGITS
#define cuda_LAYERNORM wide_LAYERNORM
#define cuda_LN_DX wide_LN_DX
#define cuda_LN_DW wide_LN_DW
#define cuda_RMSNORM wide_RMSNORM
#define cuda_RMS_DX wide_RMS_DX
#define cuda_RMS_DW wide_RMS_DW
#define cuda_ROPE wide_ROPE
#define cuda_ATTENTION wide_ATTENTION
#define cuda_ATTN_DQKV wide_ATTN_DQKV
#define cuda_ATTENTION_QKV wide_ATTENTION_QKV
#define cuda_ATTN_QKV_D wide_ATTN_QKV_D
#define cuda_ATTENTION_DOC wide_ATTENTION_DOC
#define cuda_ATTN_DOC_D wide_ATTN_DOC_D

/* ------------------------------------------------ fused head + cross-entropy */

/* h [N, d], W [V, d] (head_xent_cuda.cu; the CPU's cpu_HEAD_XENT*): bf16
 * is handled inside (fp32 logits and sums), never widened here. Vocab
 * parallel (iattr[0]): this rank's classes are [shard V, shard V + V). */
static void cuda_HEAD_XENT(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *w = KIN(1);
    int64_t V = w->shape[0], d = w->shape[1], off = k->node->iattr[0] ? k->shard * V : 0;
    pipit__cuda_head_xent((pipit_dtype)w->dtype, k->out, k->in[0], k->in[1], (const int32_t *)k->in[2],
                          pipit__node_numel(KIN(2)), V, d, off);
}

static void cuda_HEAD_XENT_BWD(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *w = KIN(1);
    int64_t V = w->shape[0], d = w->shape[1], off = k->node->iattr[0] ? k->shard * V : 0;
    pipit__cuda_head_xent_bwd(DT(k), k->out, k->in[0], k->in[1], (const int32_t *)k->in[2], k->in[3],
                              pipit__node_numel(KIN(2)), V, d, off, k->node->iattr[1]);
}

static void cuda_HEAD_XENT_DH(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    pipit__cuda_head_xent_dh(DT(k), k->out, k->in[0], k->node->iattr[0], pipit__node_numel(k->node));
}

/* ------------------------------------------------------------ the table */

/* Leaves are bound from outside; reshape, view and yield alias their input. */
#define cuda_INPUT nullptr
#define cuda_PARAM nullptr
#define cuda_RESHAPE nullptr
#define cuda_VIEW nullptr
#define cuda_YIELD nullptr
/* The tensor-parallel collectives are the runtime's instructions (INS_TP). */
#define cuda_TP_COPY nullptr
#define cuda_TP_SUM nullptr
#define cuda_TP_MAX nullptr
#define cuda_SP_GATHER nullptr /* sequence parallelism (runtime/sp.c) */
#define cuda_SP_SCATTER nullptr
#define cuda_SP_SPLIT nullptr
#define cuda_CP_GATHER nullptr /* context parallelism's gather/scatter pair (runtime/cp.c) */
#define cuda_CP_SCATTER nullptr
#define cuda_ROPE_CP pipit__cuda_ROPE_CP /* context parallelism: the CPU's kernels on host copies (cp_cuda.cu) */
#define cuda_ATTENTION_CP pipit__cuda_ATTENTION_CP
#define cuda_ATTN_CP_D pipit__cuda_ATTN_CP_D
#define cuda_ATTENTION_CP_DOC pipit__cuda_ATTENTION_CP_DOC
#define cuda_ATTN_CP_DOC_D pipit__cuda_ATTN_CP_DOC_D
#define cuda_EP_A2A nullptr /* expert parallelism's all-to-all pair (runtime/ep.c) */
#define cuda_EP_A2A_REV nullptr

/* Generated from ops.def in its order (C++ has no designated array
 * initialisers), so an op without a CUDA kernel is a compile error here. */
extern "C" const pipit__op_kernel pipit__cuda_ops[PIPIT_OP_COUNT] = {
#define X(NAME, str, arity, nondiff, alias, flags) cuda_##NAME,
#include "ir/ops.def"
#undef X
};
