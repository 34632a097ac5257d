/*
 * ops_cuda.cu — the CUDA backend's kernel for every op of ir/ops.def, the
 * counterpart of backend/cpu/ops_cpu.c: each op reads its sizes off the node
 * exactly as the CPU op does, and launches on the rank's stream
 * (pipit__cuda_stream) from thread 0 of the rank's team only (the other
 * threads return: one launch covers the whole op). The math follows
 * backend/cpu/kernels_impl.h expression by expression, in f32 and f64, with
 * the same accumulation types (double where the CPU sums in double).
 *
 * Determinism: no floating-point atomics. Every reduction has an order fixed
 * by the shapes: a thread or warp owns each output and loops in order, and
 * wider reductions are fixed-shape trees (partials per row chunk, summed in
 * chunk order). The embedding backward sorts (index, position) pairs with a
 * stable radix sort and sums each index's rows in position order, which is
 * the CPU's order, so its bits equal the CPU's. Attention: attention_cuda.cu.
 */
#include <cub/device/device_radix_sort.cuh>

#include <atomic>
#include <cmath>

#include "backend/cuda/ops_cuda.cuh"
#include "ir/graph.h"

#define KIN(i) (k->in_node[i])
#define F64(k) ((k)->node->dtype == PIPIT_F64)

/* Runs launcher fn<double> or fn<float> by the output's dtype. */
#define BY_DTYPE(k, fn, ...)                 \
    do {                                     \
        if (F64(k)) fn<double>(__VA_ARGS__); \
        else fn<float>(__VA_ARGS__);         \
    } while (0)

/* One launch per op, from thread 0 of the rank's team. */
#define ONLY_THREAD0(ith, nth) \
    do {                       \
        (void)(nth);           \
        if ((ith) != 0) return; \
    } while (0)

static const int kThreads = 256;

/* Blocks for a grid-stride loop over n items (the loop covers any rest). */
static unsigned grid_for(int64_t n, int per_block) {
    int64_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b > (1 << 20) ? (1 << 20) : b);
}

#define GRID_STRIDE(i, n)                                                         \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

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

template <class T>
__global__ void add_kernel(T *out, const T *a, const T *b, int64_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
template <class T>
__global__ void mul_kernel(T *out, const T *a, const T *b, int64_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}
template <class T>
__global__ void scale_kernel(T *out, const T *a, T alpha, int64_t n) {
    GRID_STRIDE(i, n) out[i] = alpha * a[i];
}
/* out, x [rows, C]; bias [C] */
template <class T>
__global__ void bias_add_kernel(T *out, const T *x, const T *bias, int64_t n, int64_t C) {
    GRID_STRIDE(i, n) out[i] = x[i] + bias[i % C];
}
/* out [n] = scalar[0] * scale, rounded once as on the CPU */
template <class T>
__global__ void fill_kernel(T *out, const T *scalar, double scale, int64_t n) {
    T v = (T)((double)scalar[0] * scale);
    GRID_STRIDE(i, n) out[i] = v;
}

template <class T>
static void launch_binary(int op, void *out, const void *a, const void *b, int64_t n) {
    if (n <= 0) return;
    unsigned g = grid_for(n, kThreads);
    if (op == PIPIT_OP_ADD)
        add_kernel<T><<<g, kThreads, 0, pipit__cuda_stream()>>>((T *)out, (const T *)a, (const T *)b, n);
    else
        mul_kernel<T><<<g, kThreads, 0, pipit__cuda_stream()>>>((T *)out, (const T *)a, (const T *)b, n);
}

static void cuda_ADD(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_binary, PIPIT_OP_ADD, k->out, k->in[0], k->in[1], pipit__node_numel(k->node));
    PIPIT_CUDA_LAUNCHED("add");
}

static void cuda_MUL(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_binary, PIPIT_OP_MUL, k->out, k->in[0], k->in[1], pipit__node_numel(k->node));
    PIPIT_CUDA_LAUNCHED("mul");
}

/* alpha is fattr[0] rounded to T first, as the CPU's cpu_SCALE does. */
static void cuda_SCALE(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t n = pipit__node_numel(k->node);
    if (n <= 0) return;
    unsigned g = grid_for(n, kThreads);
    cudaStream_t s = pipit__cuda_stream();
    if (F64(k))
        scale_kernel<double><<<g, kThreads, 0, s>>>((double *)k->out, (const double *)k->in[0], k->node->fattr[0], n);
    else
        scale_kernel<float><<<g, kThreads, 0, s>>>((float *)k->out, (const float *)k->in[0], (float)k->node->fattr[0], n);
    PIPIT_CUDA_LAUNCHED("scale");
}

template <class T>
static void launch_bias_add(void *out, const void *x, const void *bias, int64_t rows, int64_t C) {
    int64_t n = rows * C;
    if (n <= 0) return;
    bias_add_kernel<T><<<grid_for(n, kThreads), kThreads, 0, pipit__cuda_stream()>>>((T *)out, (const T *)x,
                                                                                    (const T *)bias, n, C);
}

static void cuda_BIAS_ADD(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_bias_add, k->out, k->in[0], k->in[1], pipit__node_rows(k->node), pipit__node_last_dim(k->node));
    PIPIT_CUDA_LAUNCHED("bias_add");
}

template <class T>
static void launch_fill(void *out, const void *scalar, double scale, int64_t n) {
    if (n <= 0) return;
    fill_kernel<T><<<grid_for(n, kThreads), kThreads, 0, pipit__cuda_stream()>>>((T *)out, (const T *)scalar,
                                                                                scale, n);
}

static void cuda_FILL(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_fill, k->out, k->in[0], k->node->fattr[0], pipit__node_numel(k->node));
    PIPIT_CUDA_LAUNCHED("fill");
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
    pipit__cuda_gemm((pipit_dtype)k->node->dtype, d.ta, d.tb, batch, M, d.N, d.K, k->in[0], lda, sA, k->in[1], ldb,
                     sB, k->out, d.N, d.M * d.N, 0);
}

/* ------------------------------------------------------------ permute */

/* out dims and the x strides that walk them, right-aligned in 4 slots (the
 * CPU's pipit__permute layout). */
typedef struct {
    int64_t od[4], os[4];
} permute_geom;

template <class T>
__global__ void permute_kernel(T *out, const T *x, permute_geom g, int64_t n) {
    GRID_STRIDE(e, n) {
        int64_t i3 = e % g.od[3], r = e / g.od[3];
        int64_t i2 = r % g.od[2], i1 = r / g.od[2] % g.od[1], i0 = r / g.od[2] / g.od[1];
        out[e] = x[i0 * g.os[0] + i1 * g.os[1] + i2 * g.os[2] + i3 * g.os[3]];
    }
}

template <class T>
static void launch_permute(void *out, const void *x, permute_geom g, int64_t n) {
    if (n <= 0) return;
    permute_kernel<T><<<grid_for(n, kThreads), kThreads, 0, pipit__cuda_stream()>>>((T *)out, (const T *)x, g, n);
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
    BY_DTYPE(k, launch_permute, k->out, k->in[0], g, pipit__node_numel(x));
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
    GRID_STRIDE(e, n * C) {
        int64_t i = e / C, c = e % C, v = (int64_t)idx[i] - off;
        out[e] = v >= 0 && v < V ? table[v * C + c] : vp ? (T)0 : (T)NAN;
    }
}

template <class T>
static void launch_embed(void *out, const void *table, const int32_t *idx, int64_t n, int64_t V, int64_t C,
                         int64_t off, int vp) {
    if (n * C <= 0) return;
    embed_kernel<T><<<grid_for(n * C, kThreads), kThreads, 0, pipit__cuda_stream()>>>((T *)out, (const T *)table,
                                                                                     idx, n, V, C, off, vp);
}

static void cuda_EMBED(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t cnt = pipit__node_numel(KIN(1)), C = KIN(0)->shape[1], V = KIN(0)->shape[0];
    int vp = k->node->iattr[1] != 0;
    BY_DTYPE(k, launch_embed, k->out, k->in[0], (const int32_t *)k->in[1], cnt, V, C, vp ? k->shard * V : 0, vp);
    PIPIT_CUDA_LAUNCHED("embed");
}

__global__ void iota_kernel(int32_t *v, int64_t n) {
    GRID_STRIDE(i, n) v[i] = (int32_t)i;
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
    iota_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(pos_in, n);
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
    BY_DTYPE(k, launch_embed_dtable, k->out, (const int32_t *)k->in[0], k->in[1], pipit__node_numel(KIN(0)), V,
             k->node->shape[1], k->node->iattr[1] ? k->shard * V : 0);
}

/* ------------------------------------------------- tensor parallelism */

/* The vocab-parallel cross-entropy's target logit of this shard's classes
 * [off, off + V): out[r] = z[r, y[r] - off], 0 for another shard's target;
 * and its gradient dz [rows, V] = d[r] at that class, 0 elsewhere (the
 * CPU's pipit__tp_pick and pipit__tp_pick_dx: copies, the same bits). */
template <class T>
__global__ void tp_pick_kernel(T *out, const T *z, const int32_t *y, int64_t rows, int64_t V, int64_t off) {
    GRID_STRIDE(r, rows) {
        int64_t v = (int64_t)y[r] - off;
        out[r] = v >= 0 && v < V ? z[r * V + v] : (T)0;
    }
}

template <class T>
__global__ void tp_pick_dx_kernel(T *dz, const int32_t *y, const T *d, int64_t rows, int64_t V, int64_t off) {
    GRID_STRIDE(e, rows * V) {
        int64_t r = e / V;
        dz[e] = (int64_t)y[r] - off == e % V ? d[r] : (T)0;
    }
}

template <class T>
static void launch_tp_pick(void *out, const void *z, const int32_t *y, int64_t rows, int64_t V, int64_t off) {
    if (rows <= 0) return;
    tp_pick_kernel<T><<<grid_for(rows, kThreads), kThreads, 0, pipit__cuda_stream()>>>((T *)out, (const T *)z, y, rows,
                                                                                      V, off);
}

template <class T>
static void launch_tp_pick_dx(void *dz, const int32_t *y, const void *d, int64_t rows, int64_t V, int64_t off) {
    if (rows * V <= 0) return;
    tp_pick_dx_kernel<T><<<grid_for(rows * V, kThreads), kThreads, 0, pipit__cuda_stream()>>>((T *)dz, y,
                                                                                             (const T *)d, rows, V, off);
}

static void cuda_TP_PICK(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t V = pipit__node_last_dim(KIN(0));
    BY_DTYPE(k, launch_tp_pick, k->out, k->in[0], (const int32_t *)k->in[1], pipit__node_rows(KIN(0)), V,
             k->shard * V);
    PIPIT_CUDA_LAUNCHED("tp_pick");
}

static void cuda_TP_PICK_DX(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    int64_t V = k->node->iattr[0];
    BY_DTYPE(k, launch_tp_pick_dx, k->out, (const int32_t *)k->in[0], k->in[1], pipit__node_numel(KIN(0)), V,
             k->shard * V);
    PIPIT_CUDA_LAUNCHED("tp_pick_dx");
}

/* ------------------------------------------------------------ column sums */

/* Column sums over rows with a fixed two-level tree (sum_rows, layernorm
 * dw): block (x, y) covers 32 columns and the row chunk y; its 8 row lanes
 * each sum every 8th row of the chunk in order (double), then lane 0 adds
 * the 8 lanes in order. The chunk partials are summed in chunk order by
 * colsum_final. The tree depends only on (rows, C). */
#define COLSUM_LANES 8
#define COLSUM_MAX_CHUNKS 1024

static int64_t colsum_chunk(int64_t rows) {
    int64_t chunk = (rows + COLSUM_MAX_CHUNKS - 1) / COLSUM_MAX_CHUNKS;
    return chunk < 256 ? 256 : chunk;
}

template <class T, class F>
__global__ void colsum_partial(F f, int64_t rows, int64_t C, int64_t chunk, double *part, T *out) {
    __shared__ double sh[COLSUM_LANES][33];
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double acc = 0;
    if (c < C)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += COLSUM_LANES) acc += f(r, c);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    double s = sh[0][threadIdx.x];
    for (int y = 1; y < COLSUM_LANES; y++) s += sh[y][threadIdx.x];
    if (out) out[c] = (T)s; /* a single chunk: no second level */
    else part[blockIdx.y * C + c] = s;
}

template <class T>
__global__ void colsum_final(const double *part, int64_t nchunk, int64_t C, T *out) {
    GRID_STRIDE(c, C) {
        double s = part[c];
        for (int64_t y = 1; y < nchunk; y++) s += part[y * C + c];
        out[c] = (T)s;
    }
}

/* out [C] = sum over r < rows of f(r, c) (a double), by the tree above. */
template <class T, class F>
static void colsum(T *out, F f, int64_t rows, int64_t C, const char *what) {
    cudaStream_t s = pipit__cuda_stream();
    if (C <= 0) return;
    if (rows <= 0) {
        pipit__cuda_check(cudaMemsetAsync(out, 0, (size_t)C * sizeof(T), s), what);
        return;
    }
    int64_t chunk = colsum_chunk(rows), nchunk = (rows + chunk - 1) / chunk;
    if ((C + 31) / 32 > INT32_MAX) {
        pipit__cuda_check(cudaErrorInvalidValue, what);
        return;
    }
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)nchunk), block(32, COLSUM_LANES);
    if (nchunk == 1) {
        colsum_partial<T, F><<<grid, block, 0, s>>>(f, rows, C, chunk, NULL, out);
        PIPIT_CUDA_LAUNCHED(what);
        return;
    }
    double *part = (double *)pipit__cuda_scratch((size_t)(nchunk * C) * sizeof(double), what);
    if (!part) return;
    colsum_partial<T, F><<<grid, block, 0, s>>>(f, rows, C, chunk, part, (T *)NULL);
    if (!PIPIT_CUDA_LAUNCHED(what)) {
        colsum_final<T><<<grid_for(C, kThreads), kThreads, 0, s>>>(part, nchunk, C, out);
        PIPIT_CUDA_LAUNCHED(what);
    }
    pipit__cuda_scratch_free(part, what);
}

template <class T>
struct col_of_x { /* sum_rows: x[r, c] */
    const T *x;
    int64_t C;
    __device__ double operator()(int64_t r, int64_t c) const { return (double)x[r * C + c]; }
};

template <class T>
static void launch_sum_rows(void *out, const void *x, int64_t rows, int64_t C) {
    colsum<T>((T *)out, col_of_x<T>{(const T *)x, C}, rows, C, "sum_rows");
}

static void cuda_SUM_ROWS(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_sum_rows, k->out, k->in[0], pipit__node_rows(KIN(0)), pipit__node_last_dim(KIN(0)));
}

/* ------------------------------------------------------------ sum */

#define SUM_THREADS 1024

/* out [1] = (T)(scale * sum of x [n]) in double: one block, thread t sums
 * x[t], x[t+1024], ... in order, then a fixed halving tree. */
template <class T>
__global__ void sum_all_kernel(T *out, const T *x, int64_t n, double scale) {
    __shared__ double sh[SUM_THREADS];
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += SUM_THREADS) s += (double)x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = SUM_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (T)(sh[0] * scale);
}

template <class T>
static void launch_sum_all(void *out, const void *x, int64_t n, double scale) {
    sum_all_kernel<T><<<1, SUM_THREADS, 0, pipit__cuda_stream()>>>((T *)out, (const T *)x, n, scale);
}

static void cuda_SUM(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_sum_all, k->out, k->in[0], pipit__node_numel(KIN(0)), k->node->fattr[0]);
    PIPIT_CUDA_LAUNCHED("sum");
}

/* ------------------------------------------------------------ layernorm */

/* One warp per row of [rows, C]; 8 rows per block. */
#define LN_ROWS_PER_BLOCK 8

/* Mean and 1/sqrt(var + eps) of row x [C] in double, two passes (the
 * CPU's ln_stats), lane-strided partials and a fixed butterfly; rounded
 * to T. Every lane returns the same bits. */
template <class T>
__device__ void ln_stats(const T *x, int64_t C, double eps, int lane, T *mean, T *rstd) {
    double s = 0;
    for (int64_t c = lane; c < C; c += 32) s += (double)x[c];
    double m = pipit_group_sum(s, 32) / (double)C;
    double v = 0;
    for (int64_t c = lane; c < C; c += 32) {
        double d = (double)x[c] - m;
        v += d * d;
    }
    v = pipit_group_sum(v, 32);
    *mean = (T)m;
    *rstd = (T)(1.0 / sqrt(v / (double)C + eps));
}

template <class T>
__global__ void layernorm_kernel(T *out, const T *x, const T *w, const T *b, int64_t rows, int64_t C, double eps) {
    int64_t r = (int64_t)blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return; /* whole warps leave together */
    const T *xr = x + r * C;
    T *o = out + r * C;
    T m, rs;
    ln_stats(xr, C, eps, lane, &m, &rs);
    for (int64_t c = lane; c < C; c += 32) o[c] = (xr[c] - m) * rs * w[c] + b[c];
}

/* dx = rstd * (g - mean(g) - xhat * mean(g*xhat)), g = dout*w (the CPU's
 * pipit__layernorm_dx; both means from double sums). */
template <class T>
__global__ void layernorm_dx_kernel(T *dx, const T *x, const T *w, const T *dout, int64_t rows, int64_t C,
                                    double eps) {
    int64_t r = (int64_t)blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const T *xr = x + r * C, *dr = dout + r * C;
    T *o = dx + r * C;
    T m, rs;
    ln_stats(xr, C, eps, lane, &m, &rs);
    double sg = 0, sgx = 0;
    for (int64_t c = lane; c < C; c += 32) {
        T xh = (xr[c] - m) * rs, g = dr[c] * w[c];
        sg += (double)g;
        sgx += (double)g * (double)xh;
    }
    sg = pipit_group_sum(sg, 32);
    sgx = pipit_group_sum(sgx, 32);
    T mg = (T)(sg / (double)C), mgx = (T)(sgx / (double)C);
    for (int64_t c = lane; c < C; c += 32) {
        T xh = (xr[c] - m) * rs, g = dr[c] * w[c];
        o[c] = rs * (g - mg - xh * mgx);
    }
}

/* Row statistics alone (for layernorm dw): mean[r], rstd[r]. */
template <class T>
__global__ void ln_stats_kernel(T *mean, T *rstd, const T *x, int64_t rows, int64_t C, double eps) {
    int64_t r = (int64_t)blockIdx.x * LN_ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;
    T m, rs;
    ln_stats(x + r * C, C, eps, lane, &m, &rs);
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

static unsigned ln_grid(int64_t rows) { return (unsigned)((rows + LN_ROWS_PER_BLOCK - 1) / LN_ROWS_PER_BLOCK); }

template <class T>
static void launch_layernorm(void *out, const void *x, const void *w, const void *b, int64_t rows, int64_t C,
                             double eps) {
    if (rows <= 0 || C <= 0) return;
    layernorm_kernel<T><<<ln_grid(rows), 32 * LN_ROWS_PER_BLOCK, 0, pipit__cuda_stream()>>>(
        (T *)out, (const T *)x, (const T *)w, (const T *)b, rows, C, eps);
}

static void cuda_LAYERNORM(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_layernorm, k->out, k->in[0], k->in[1], k->in[2], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), k->node->fattr[0]);
    PIPIT_CUDA_LAUNCHED("layernorm");
}

template <class T>
static void launch_layernorm_dx(void *dx, const void *x, const void *w, const void *dout, int64_t rows, int64_t C,
                                double eps) {
    if (rows <= 0 || C <= 0) return;
    layernorm_dx_kernel<T><<<ln_grid(rows), 32 * LN_ROWS_PER_BLOCK, 0, pipit__cuda_stream()>>>(
        (T *)dx, (const T *)x, (const T *)w, (const T *)dout, rows, C, eps);
}

static void cuda_LN_DX(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_layernorm_dx, k->out, k->in[0], k->in[1], k->in[2], pipit__node_rows(k->node),
             pipit__node_last_dim(k->node), k->node->fattr[0]);
    PIPIT_CUDA_LAUNCHED("ln_dx");
}

template <class T>
struct col_of_dw { /* layernorm dw: dout[r,c] * xhat[r,c], formed in T as the CPU does */
    const T *x, *dout, *mean, *rstd;
    int64_t C;
    __device__ double operator()(int64_t r, int64_t c) const {
        int64_t i = r * C + c;
        return (double)(dout[i] * ((x[i] - mean[r]) * rstd[r]));
    }
};

template <class T>
static void launch_layernorm_dw(void *dw, const void *x, const void *dout, int64_t rows, int64_t C, double eps) {
    if (C <= 0) return;
    if (rows <= 0) {
        colsum<T>((T *)dw, col_of_x<T>{(const T *)x, C}, 0, C, "ln_dw"); /* zeros */
        return;
    }
    T *stats = (T *)pipit__cuda_scratch((size_t)(2 * rows) * sizeof(T), "ln_dw: scratch");
    if (!stats) return;
    ln_stats_kernel<T><<<ln_grid(rows), 32 * LN_ROWS_PER_BLOCK, 0, pipit__cuda_stream()>>>(
        stats, stats + rows, (const T *)x, rows, C, eps);
    if (!PIPIT_CUDA_LAUNCHED("ln_dw: stats"))
        colsum<T>((T *)dw, col_of_dw<T>{(const T *)x, (const T *)dout, stats, stats + rows, C}, rows, C, "ln_dw");
    pipit__cuda_scratch_free(stats, "ln_dw: scratch");
}

static void cuda_LN_DW(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_layernorm_dw, k->out, k->in[0], k->in[1], pipit__node_rows(KIN(0)),
             pipit__node_last_dim(KIN(0)), k->node->fattr[0]);
}

/* ------------------------------------------------------------ GELU */

/* GPT-2's tanh GELU in the CPU's form: 0.5x(1 + tanh(u)) = x / (1 + exp(-2u)),
 * u = sqrt(2/pi)(x + 0.044715x^3), the same expressions in T. */
#define GELU_S2PI ((T)0.79788456080286535588) /* sqrt(2/pi) */
#define GELU_K ((T)0.044715)

template <class T>
__global__ void gelu_kernel(T *out, const T *x, int64_t n) {
    GRID_STRIDE(i, n) {
        T v = x[i];
        T u = GELU_S2PI * (v + GELU_K * v * v * v);
        out[i] = v / ((T)1 + pipit_dexp((T)-2 * u));
    }
}

/* dx = dout * (sg + 2x sg(1 - sg) du/dx), sg = sigmoid(2u) */
template <class T>
__global__ void gelu_dx_kernel(T *dx, const T *x, const T *dout, int64_t n) {
    GRID_STRIDE(i, n) {
        T v = x[i];
        T sg = (T)1 / ((T)1 + pipit_dexp((T)-2 * GELU_S2PI * (v + GELU_K * v * v * v)));
        T du = GELU_S2PI * ((T)1 + (T)3 * GELU_K * v * v);
        T d = sg + (T)2 * v * sg * ((T)1 - sg) * du;
        dx[i] = d * dout[i];
    }
}
#undef GELU_S2PI
#undef GELU_K

template <class T>
static void launch_gelu(void *out, const void *x, int64_t n) {
    if (n <= 0) return;
    gelu_kernel<T><<<grid_for(n, kThreads), kThreads, 0, pipit__cuda_stream()>>>((T *)out, (const T *)x, n);
}

template <class T>
static void launch_gelu_dx(void *dx, const void *x, const void *dout, int64_t n) {
    if (n <= 0) return;
    gelu_dx_kernel<T><<<grid_for(n, kThreads), kThreads, 0, pipit__cuda_stream()>>>((T *)dx, (const T *)x,
                                                                                  (const T *)dout, n);
}

static void cuda_GELU(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_gelu, k->out, k->in[0], pipit__node_numel(k->node));
    PIPIT_CUDA_LAUNCHED("gelu");
}

static void cuda_GELU_DX(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_gelu_dx, k->out, k->in[0], k->in[1], pipit__node_numel(k->node));
    PIPIT_CUDA_LAUNCHED("gelu_dx");
}

/* ------------------------------------------------------------ attention */

static void cuda_ATTENTION(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *n = k->node;
    pipit__cuda_attention((pipit_dtype)n->dtype, k->out, k->in[0], n->shape[0], n->shape[1], n->shape[2],
                          n->iattr[0]);
}

static void cuda_ATTN_DQKV(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    const pipit__node *d = KIN(1);
    pipit__cuda_attention_dqkv((pipit_dtype)k->node->dtype, k->out, k->in[0], k->in[1], d->shape[0], d->shape[1],
                               d->shape[2], k->node->iattr[0]);
}

/* ------------------------------------------------------------ cross-entropy */

#define XENT_THREADS 256

/* Block-wide max and double sum with a fixed tree: warp butterflies, then
 * the warps' values in warp order (every thread gets the result). */
template <class V>
__device__ V block_max(V v, V *sh) {
    v = pipit_group_max(v, 32);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    V m = sh[0];
    for (int w = 1; w < XENT_THREADS / 32; w++) m = sh[w] > m ? sh[w] : m;
    __syncthreads(); /* sh is reused by the caller's next reduction */
    return m;
}

__device__ double block_sum(double v, double *sh) {
    v = pipit_group_sum(v, 32);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    double s = sh[0];
    for (int w = 1; w < XENT_THREADS / 32; w++) s += sh[w];
    __syncthreads();
    return s;
}

/* Max of row x [V] (V >= 1) over the block. */
template <class T>
__device__ T row_max(const T *x, int64_t V, T *sh) {
    T m = x[0];
    for (int64_t j = threadIdx.x; j < V; j += XENT_THREADS) m = x[j] > m ? x[j] : m;
    return block_max(m, sh);
}

/* loss[r] = logsumexp(logits[r,:]) - logits[r, t]: max subtracted, the sum
 * of exponentials in double (the CPU's pipit__xent_rows); one block a row. */
template <class T>
__global__ void xent_rows_kernel(T *loss, const T *logits, const int32_t *targets, int64_t V) {
    __shared__ T shm[XENT_THREADS / 32];
    __shared__ double shs[XENT_THREADS / 32];
    int64_t r = blockIdx.x;
    const T *x = logits + r * V;
    T m = row_max(x, V, shm);
    double s = 0;
    for (int64_t j = threadIdx.x; j < V; j += XENT_THREADS) s += (double)pipit_dexp(x[j] - m);
    s = block_sum(s, shs);
    if (threadIdx.x != 0) return;
    int32_t t = targets[r];
    loss[r] = t >= 0 && t < V ? (T)((double)m + log(s) - (double)x[t]) : (T)NAN;
}

/* dlogits[r,:] = dloss[r] * (softmax(x[r,:]) - onehot(t)): g = exp(x - m)
 * rounded to T, its double sum, f = dloss/sum, g*f, minus dloss at t (the
 * CPU's pipit__xent_dlogits). Each thread rescales the elements it wrote. */
template <class T>
__global__ void xent_dlogits_kernel(T *dlogits, const T *logits, const int32_t *targets, const T *dloss, int64_t V) {
    __shared__ T shm[XENT_THREADS / 32];
    __shared__ double shs[XENT_THREADS / 32];
    int64_t r = blockIdx.x;
    const T *x = logits + r * V;
    T *g = dlogits + r * V;
    T m = row_max(x, V, shm);
    double s = 0;
    for (int64_t j = threadIdx.x; j < V; j += XENT_THREADS) {
        T e = pipit_dexp(x[j] - m);
        g[j] = e;
        s += (double)e;
    }
    s = block_sum(s, shs);
    int32_t t = targets[r];
    T dl = dloss[r], f = (T)((double)dl / s);
    int ok = t >= 0 && t < V;
    for (int64_t j = threadIdx.x; j < V; j += XENT_THREADS) {
        T v = g[j] * f;
        if (j == t) v -= dl;
        g[j] = ok ? v : (T)NAN;
    }
}

template <class T>
static void launch_xent_rows(void *loss, const void *logits, const int32_t *targets, int64_t rows, int64_t V) {
    if (rows <= 0) return;
    if (V <= 0 || rows > INT32_MAX) {
        pipit__cuda_check(cudaErrorInvalidValue, "xent_rows: empty rows or more than 2^31 rows");
        return;
    }
    xent_rows_kernel<T><<<(unsigned)rows, XENT_THREADS, 0, pipit__cuda_stream()>>>((T *)loss, (const T *)logits,
                                                                                  targets, V);
}

template <class T>
static void launch_xent_dlogits(void *dlogits, const void *logits, const int32_t *targets, const void *dloss,
                                int64_t rows, int64_t V) {
    if (rows <= 0 || V <= 0) return;
    if (rows > INT32_MAX) {
        pipit__cuda_check(cudaErrorInvalidValue, "xent_dlogits: more than 2^31 rows");
        return;
    }
    xent_dlogits_kernel<T><<<(unsigned)rows, XENT_THREADS, 0, pipit__cuda_stream()>>>(
        (T *)dlogits, (const T *)logits, targets, (const T *)dloss, V);
}

static void cuda_XENT_ROWS(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_xent_rows, k->out, k->in[0], (const int32_t *)k->in[1], pipit__node_rows(KIN(0)),
             pipit__node_last_dim(KIN(0)));
    PIPIT_CUDA_LAUNCHED("xent_rows");
}

static void cuda_XENT_DLOGITS(const pipit__kctx *k, int ith, int nth) {
    ONLY_THREAD0(ith, nth);
    BY_DTYPE(k, launch_xent_dlogits, k->out, k->in[0], (const int32_t *)k->in[1], k->in[2],
             pipit__node_rows(KIN(0)), pipit__node_last_dim(KIN(0)));
    PIPIT_CUDA_LAUNCHED("xent_dlogits");
}

/* ------------------------------------------------------------ the table */

/* Leaves are bound from outside; reshape and yield alias their input. */
#define cuda_INPUT nullptr
#define cuda_PARAM nullptr
#define cuda_RESHAPE nullptr
#define cuda_YIELD nullptr
/* The tensor-parallel collectives are the runtime's instructions (INS_TP). */
#define cuda_TP_COPY nullptr
#define cuda_TP_SUM nullptr
#define cuda_TP_MAX nullptr

/* Generated from ops.def in its order (C++ has no designated array
 * initialisers), so an op without a CUDA kernel is a compile error here. */
extern "C" const pipit__op_kernel pipit__cuda_ops[PIPIT_OP_COUNT] = {
#define X(NAME, str, arity, nondiff, alias, flags) cuda_##NAME,
#include "ir/ops.def"
#undef X
};
