/*
 * gemm_cuda.c — the CUDA backend's GEMM through cuBLASLt.
 *
 * Row-major onto column-major: a row-major matrix with row stride ld is
 * the column-major matrix of its transpose with leading dimension ld, so
 * C = op(A) op(B) (row major) is C^T = op(B)^T op(A)^T (column major):
 * cuBLASLt's "A" is our B and its "B" is our A, m = N, n = M, k = K, and
 * every transpose flag carries over as it is. Batches are strided (a
 * stride of 0 broadcasts); accumulate is beta = 1.
 *
 * Determinism: the algorithm of each shape key (dtype, transposes, batch,
 * M, N, K, leading dimensions, batch strides, operand alignments, TF32,
 * device) comes from the heuristic once and is cached for the process, so
 * every call of a shape runs the same kernel, whatever ran before or runs
 * beside it. The heuristic is always told the same fixed workspace
 * (PIPIT_CUDA_LT_WORKSPACE, one block per stream) and is allowed no split-K
 * reduction (CUBLASLT_REDUCTION_SCHEME_NONE: each dot product is computed
 * in one sequence by one thread block, never summed across blocks in
 * arrival order). Alignments enter the key capped at 16 bytes, the most any
 * kernel needs, so two runs whose buffers are both 16-byte aligned (the
 * memory planner aligns every buffer to 64) pick the same algorithm even
 * when the buffers sit at different addresses.
 * Compute types: fp32 (CUBLAS_COMPUTE_32F, and no tensor-core
 * implementation: CUBLASLT_MATMUL_PREF_IMPL_MASK) unless the program asked
 * for TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32); f64:
 * CUBLAS_COMPUTE_64F; bf16 (A, B, C and D all bf16, the CPU's
 * pipit__gemm_bf16 contract): CUBLAS_COMPUTE_32F with fp32 alpha and beta,
 * tensor cores allowed (a product of two bf16 values is exact in fp32), so
 * each element is summed in fp32 (C read into it when accumulating) and
 * rounded once to bf16 on store. The same key, cache, workspace and
 * no-split-K rules hold.
 */
#include <pthread.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"

typedef struct {
    int device, dt, ta, tb, tf32;
    int align_a, align_b, align_c;
    int pad; /* keys are compared with memcmp: every byte is set */
    int64_t batch, M, N, K, lda, ldb, ldc, sA, sB, sC;
} gemm_key;

typedef struct {
    gemm_key key;
    int used;
    int found; /* 0: the heuristic offered no algorithm for this key */
    cublasLtMatmulAlgo_t algo;
} gemm_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static gemm_entry *cache;
static size_t cache_cap, cache_n;

static uint64_t key_hash(const gemm_key *k) {
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The slot of key k (its entry, or the empty slot where it goes); cache
 * lock held, capacity > count. */
static gemm_entry *slot_of(gemm_entry *tab, size_t cap, const gemm_key *k) {
    size_t i = (size_t)(key_hash(k) & (cap - 1));
    while (tab[i].used && memcmp(&tab[i].key, k, sizeof *k) != 0) i = (i + 1) & (cap - 1);
    return &tab[i];
}

/* Room for one more entry (load under 1/2); 0 when out of memory. */
static int cache_reserve(void) {
    if (2 * (cache_n + 1) <= cache_cap) return 1;
    size_t cap = cache_cap ? 2 * cache_cap : 64;
    gemm_entry *tab = pipit__calloc(cap, sizeof *tab);
    if (!tab) return 0;
    for (size_t i = 0; i < cache_cap; i++)
        if (cache[i].used) *slot_of(tab, cap, &cache[i].key) = cache[i];
    pipit__free(cache);
    cache = tab;
    cache_cap = cap;
    return 1;
}

/* The alignment of p (and of every batch's p + b * stride), capped at 16. */
static int align_of(const void *p, int64_t batch, int64_t stride, size_t es) {
    uintptr_t a = (uintptr_t)p | 16;
    if (batch > 1) a |= (uintptr_t)((uint64_t)stride * es) | 16;
    return (int)(a & (~a + 1));
}

static int lt_check(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    return pipit__cuda_fail("gemm: %s: %s", what, cublasLtGetStatusString(st));
}

/* The context's cuBLASLt handle and workspace (made on first use). */
static int ctx_lt(pipit__cuda_ctx *c) {
    if (c->lt && c->workspace) return 0;
    if (!c->lt && lt_check(cublasLtCreate(&c->lt), "cublasLtCreate")) return -1;
    if (!c->workspace &&
        pipit__cuda_check(cudaMalloc(&c->workspace, PIPIT_CUDA_LT_WORKSPACE), "gemm workspace (cudaMalloc)"))
        return -1;
    return 0;
}

/* Descriptors of one product. */
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
} gemm_desc;

static void desc_free(gemm_desc *d) {
    if (d->op) cublasLtMatmulDescDestroy(d->op);
    if (d->a) cublasLtMatrixLayoutDestroy(d->a);
    if (d->b) cublasLtMatrixLayoutDestroy(d->b);
    if (d->c) cublasLtMatrixLayoutDestroy(d->c);
}

static int layout(cublasLtMatrixLayout_t *l, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                  int64_t batch, int64_t stride) {
    if (lt_check(cublasLtMatrixLayoutCreate(l, type, (uint64_t)rows, (uint64_t)cols, ld), "layout")) return -1;
    if (batch > 1) {
        int32_t bc = (int32_t)batch;
        if (lt_check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc),
                     "batch count") ||
            lt_check(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                      sizeof stride),
                     "batch stride"))
            return -1;
    }
    return 0;
}

/* The column-major problem of key k: cuBLASLt A = our B, its B = our A. */
static int desc_make(const gemm_key *k, gemm_desc *d) {
    memset(d, 0, sizeof *d);
    int f64 = k->dt == PIPIT_F64;
    cudaDataType_t type = f64 ? CUDA_R_64F : k->dt == PIPIT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cudaDataType_t scale = f64 ? CUDA_R_64F : CUDA_R_32F; /* alpha, beta: fp32 for bf16 too */
    cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (lt_check(cublasLtMatmulDescCreate(&d->op, compute, scale), "matmul descriptor")) return -1;
    cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (lt_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), "transa") ||
        lt_check(cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), "transb"))
        return -1;
    /* our B: [K,N] row major (column-major N x K), or [N,K] transposed (K x N) */
    if (layout(&d->a, type, k->tb ? k->K : k->N, k->tb ? k->N : k->K, k->ldb, k->batch, k->sB)) return -1;
    /* our A: [M,K] row major (K x M), or [K,M] transposed (M x K) */
    if (layout(&d->b, type, k->ta ? k->M : k->K, k->ta ? k->K : k->M, k->lda, k->batch, k->sA)) return -1;
    /* C: [M,N] row major = N x M column major */
    return layout(&d->c, type, k->N, k->M, k->ldc, k->batch, k->sC);
}

/* The heuristic's first choice for key k under the fixed preferences;
 * fp32 (not TF32) also excludes tensor-core implementations (emulations of
 * fp32 on other number formats) unless nothing else exists. */
static int query_algo_impl(pipit__cuda_ctx *c, const gemm_key *k, const gemm_desc *d, int no_tensor_ops,
                           cublasLtMatmulAlgo_t *algo) {
    cublasLtMatmulPreference_t pref = NULL;
    if (lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference")) return -1;
    uint64_t impl = no_tensor_ops ? ~(uint64_t)CUBLASLT_NUMERICAL_IMPL_FLAGS_TENSOR_OP_MASK : ~(uint64_t)0;
    uint64_t ws = PIPIT_CUDA_LT_WORKSPACE;
    uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    uint32_t al_a = (uint32_t)k->align_b, al_b = (uint32_t)k->align_a, al_c = (uint32_t)k->align_c; /* Lt's A = our B */
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        const void *value;
        size_t size;
    } prefs[] = {
        {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws},
        {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme, sizeof scheme},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c}, /* D is C */
        {CUBLASLT_MATMUL_PREF_IMPL_MASK, &impl, sizeof impl},
    };
    int bad = 0;
    for (size_t i = 0; !bad && i < sizeof prefs / sizeof prefs[0]; i++)
        bad = lt_check(cublasLtMatmulPreferenceSetAttribute(pref, prefs[i].attr, prefs[i].value, prefs[i].size),
                       "preference");
    int found = 0;
    if (!bad) {
        cublasLtMatmulHeuristicResult_t res;
        int count = 0;
        memset(&res, 0, sizeof res);
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->lt, d->op, d->a, d->b, d->c, d->c, pref, 1, &res, &count);
        if (st == CUBLAS_STATUS_SUCCESS && count > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
            *algo = res.algo;
            found = 1;
        } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
            bad = lt_check(st, "cublasLtMatmulAlgoGetHeuristic");
        }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return bad ? -1 : found;
}

static int query_algo(pipit__cuda_ctx *c, const gemm_key *k, const gemm_desc *d, cublasLtMatmulAlgo_t *algo) {
    int strict = k->dt == PIPIT_F32 && !k->tf32;
    int found = query_algo_impl(c, k, d, strict, algo);
    return found == 0 && strict ? query_algo_impl(c, k, d, 0, algo) : found;
}

/* The cached algorithm of k (querying it the first time): 1 found, 0 none
 * exists, -1 error. */
static int algo_for(pipit__cuda_ctx *c, const gemm_key *k, const gemm_desc *d, cublasLtMatmulAlgo_t *algo) {
    pthread_mutex_lock(&cache_lock);
    gemm_entry *e = cache_cap ? slot_of(cache, cache_cap, k) : NULL;
    if (e && e->used) {
        int found = e->found;
        if (found) *algo = e->algo;
        pthread_mutex_unlock(&cache_lock);
        return found;
    }
    /* Queried under the lock: each shape once, even when ranks race to it. */
    int found = query_algo(c, k, d, algo);
    if (found >= 0 && cache_reserve()) {
        e = slot_of(cache, cache_cap, k);
        e->key = *k;
        e->used = 1;
        e->found = found;
        if (found) e->algo = *algo;
        cache_n++;
    }
    pthread_mutex_unlock(&cache_lock);
    return found;
}

/* One cublasLtMatmul for key k (batch <= INT32_MAX); 0 none exists. */
static int gemm_lt(pipit__cuda_ctx *c, const gemm_key *k, const void *A, const void *B, void *C, int accumulate) {
    gemm_desc d;
    int rc = -1;
    if (desc_make(k, &d) == 0) {
        cublasLtMatmulAlgo_t algo;
        rc = algo_for(c, k, &d, &algo);
        if (rc == 1) {
            double one64 = 1.0, beta64 = accumulate ? 1.0 : 0.0;
            float one32 = 1.0f, beta32 = accumulate ? 1.0f : 0.0f;
            int f64 = k->dt == PIPIT_F64;
            const void *alpha = f64 ? (const void *)&one64 : (const void *)&one32;
            const void *beta = f64 ? (const void *)&beta64 : (const void *)&beta32;
            if (lt_check(cublasLtMatmul(c->lt, d.op, alpha, B, d.a, A, d.b, beta, C, d.c, C, d.c, &algo, c->workspace,
                                        PIPIT_CUDA_LT_WORKSPACE, c->stream),
                         "cublasLtMatmul"))
                rc = -1;
            else
                (void)pipit__cuda_check(cudaSuccess, "gemm");
        }
    }
    desc_free(&d);
    return rc;
}

void pipit__cuda_gemm(pipit_dtype dt, int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                      const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, void *C,
                      int64_t ldc, int64_t sC, int accumulate) {
    if (batch <= 0 || M <= 0 || N <= 0) return;
    pipit__cuda_ctx *c = pipit__cuda_ctx_current();
    if (!c) return;
    size_t es = pipit__dtype_size(dt);
    if (K <= 0) { /* an empty sum: C = 0, or C unchanged */
        for (int64_t b = 0; !accumulate && b < batch; b++)
            if (pipit__cuda_check(cudaMemset2DAsync((char *)C + (size_t)(b * sC) * es, (size_t)ldc * es, 0,
                                                    (size_t)N * es, (size_t)M, c->stream),
                                  "gemm (K = 0)"))
                return;
        return;
    }
    if (ctx_lt(c)) return;
    /* A broadcast B over row-contiguous batches is one taller product. */
    if (batch > 1 && sB == 0 && !trans_a && sA == M * lda && sC == M * ldc) {
        M *= batch;
        batch = 1;
        sA = sC = 0;
    }
    for (int64_t b0 = 0; b0 < batch;) {
        int64_t nb = PIPIT_MIN(batch - b0, (int64_t)0x7fffffff);
        gemm_key k;
        memset(&k, 0, sizeof k);
        k.device = c->device;
        k.dt = dt == PIPIT_F64 || dt == PIPIT_BF16 ? dt : PIPIT_F32;
        k.ta = trans_a != 0;
        k.tb = trans_b != 0;
        k.tf32 = k.dt == PIPIT_F32 && pipit__cuda_tf32();
        k.batch = nb;
        k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
        k.sA = nb > 1 ? sA : 0, k.sB = nb > 1 ? sB : 0, k.sC = nb > 1 ? sC : 0;
        const char *a = (const char *)A + (size_t)(b0 * sA) * es, *bb = (const char *)B + (size_t)(b0 * sB) * es;
        char *cc = (char *)C + (size_t)(b0 * sC) * es;
        k.align_a = align_of(a, nb, sA, es);
        k.align_b = align_of(bb, nb, sB, es);
        k.align_c = align_of(cc, nb, sC, es);
        int rc = gemm_lt(c, &k, a, bb, cc, accumulate);
        if (rc < 0) return;
        if (rc == 0 && nb > 1) { /* no batched algorithm (a stride cuBLASLt refuses): one product per batch */
            for (int64_t b = 0; b < nb; b++)
                pipit__cuda_gemm(dt, trans_a, trans_b, 1, M, N, K, a + (size_t)(b * sA) * es, lda, 0,
                                 bb + (size_t)(b * sB) * es, ldb, 0, cc + (size_t)(b * sC) * es, ldc, 0, accumulate);
        } else if (rc == 0) {
            pipit__cuda_fail("gemm: cuBLASLt has no algorithm for %s%s [%lld,%lld] x [%lld,%lld] (trans %d%d, ld "
                             "%lld %lld %lld)",
                             pipit__dtype_name((pipit_dtype)k.dt), k.tf32 ? " (tf32)" : "", (long long)M, (long long)K,
                             (long long)K, (long long)N, trans_a, trans_b, (long long)lda, (long long)ldb,
                             (long long)ldc);
            return;
        }
        b0 += nb;
    }
}
