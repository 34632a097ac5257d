/*
 * gemm_onednn.c — GEMM through oneDNN's matmul primitive, one
 * single-threaded call per tile of C.
 *
 * C is cut into tiles by gemm.c's shape-only rule (pipit__gemm_tiles) and
 * the (batch item, tile) units are dealt to pipit's threads round-robin, as
 * for the other GEMMs; each unit is one oneDNN matmul over the whole K. A
 * primitive is made once per tile key (types, transposes, m, n, K, leading
 * dimensions, accumulate) and kept in a bounded cache shared by every
 * thread of the process (a mutex; beyond CACHE_MAX keys a primitive lives
 * for one call). So a tile's bits depend only on its key, never on the
 * thread count, the rank layout or which thread ran it.
 *
 * oneDNN's own threads: Debian's libdnnl is built on OpenMP (dnnl_version's
 * cpu_runtime). Every call here, primitive creation included, runs with the
 * calling thread's OpenMP thread count set to 1 (omp_set_num_threads,
 * looked up in the process, where libdnnl brought libgomp; restored after):
 * oneDNN then makes its primitives for one thread and runs them inline, no
 * OpenMP team is ever started. A runtime that is neither OpenMP nor
 * sequential (TBB, threadpool) is refused.
 *
 * Accumulate (C += A B) is a sum post-op: oneDNN adds the old C to the fp32
 * sum and rounds once to C's type, the one rounding the other bf16 GEMMs
 * make. Scratchpads are the caller's (scratchpad mode user), so concurrent
 * calls of one primitive share nothing.
 *
 * The code is type-generic (A and B of one type, C of another: f32 or
 * bf16); pipit runs it for bf16 (gemm_bf16.c, where oneDNN has a bf16
 * matmul that is not a reference one), and tests run the very same path in
 * f32 on any CPU (tests/test_onednn.c).
 */
#include <dlfcn.h>
#include <dnnl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "util/common.h"

#define CACHE_SLOTS 1024 /* open addressing; a power of 2 */
#define CACHE_MAX 512    /* keys kept (half the slots, so probes stay short) */
#define IMPL_LEN 64

typedef struct {
    int dab, dc, ta, tb, acc, bias; /* bias: a row of n values of type dab added before the rounding */
    int64_t m, n, K, lda, ldb, ldc;
} tile_key;

typedef struct {
    tile_key key;
    int used;
    int ok;                /* oneDNN has a non-reference implementation */
    dnnl_primitive_t prim; /* NULL unless ok */
    dnnl_memory_desc_t ma, mb, mc, ms, mbias;
    size_t scratch; /* bytes of the user scratchpad */
    char impl[IMPL_LEN];
} entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static entry *cache; /* CACHE_SLOTS entries, made on first use */
static int ncached;
static atomic_llong n_created, n_reused;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static const char *init_error; /* why oneDNN cannot be used at all, or NULL */
static dnnl_engine_t engine;
static void (*omp_set_threads)(int);
static int (*omp_max_threads)(void);

static void init(void) {
    const dnnl_version_t *v = dnnl_version();
    if (v->cpu_runtime == DNNL_RUNTIME_OMP) {
        void *set = dlsym(RTLD_DEFAULT, "omp_set_num_threads"), *get = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
        if (!set || !get) {
            init_error = "oneDNN runs on OpenMP, but omp_set_num_threads is not in the process: its thread count "
                         "could not be fixed to 1";
            return;
        }
        memcpy(&omp_set_threads, &set, sizeof set);
        memcpy(&omp_max_threads, &get, sizeof get);
    } else if (v->cpu_runtime != DNNL_RUNTIME_SEQ) {
        init_error = "oneDNN's CPU runtime is neither OpenMP nor sequential: its thread count cannot be fixed to 1";
        return;
    }
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) init_error = "oneDNN made no CPU engine";
}

/* The calling thread's OpenMP thread count set to 1; returns the old one. */
static int one_thread_begin(void) {
    if (!omp_set_threads) return 1;
    int old = omp_max_threads();
    if (old != 1) omp_set_threads(1);
    return old;
}

static void one_thread_end(int old) {
    if (omp_set_threads && old != 1) omp_set_threads(old);
}

static dnnl_data_type_t dnnl_type(int dt) { return dt == PIPIT_BF16 ? dnnl_bf16 : dnnl_f32; }

static uint64_t key_hash(const tile_key *k) {
    int64_t f[12] = {k->dab, k->dc, k->ta, k->tb, k->acc, k->bias, k->m, k->n, k->K, k->lda, k->ldb, k->ldc};
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 12; i++) h = (h ^ (uint64_t)f[i]) * 1099511628211ull;
    return h ^ h >> 29;
}

static int key_eq(const tile_key *a, const tile_key *b) {
    return a->dab == b->dab && a->dc == b->dc && a->ta == b->ta && a->tb == b->tb && a->acc == b->acc &&
           a->bias == b->bias &&
           a->m == b->m && a->n == b->n && a->K == b->K && a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc;
}

/* Fills e for e->key: the primitive where oneDNN has one that is not a
 * reference implementation (e->ok), else e->ok = 0 with the reason in
 * e->impl. Returns -1 only on a failure that may pass (out of memory). */
static int make(entry *e) {
    const tile_key *k = &e->key;
    dnnl_dims_t da = {k->m, k->K}, db = {k->K, k->n}, dc = {k->m, k->n};
    /* op(A) [m,K]: stored [m,K] (row stride lda) or [K,m]; op(B) [K,n]: stored [K,n] or [n,K] */
    dnnl_dims_t sa = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1}, sb = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1};
    dnnl_dims_t sc = {k->ldc, 1}, dbias = {1, k->n}, sbias = {k->n, 1};
    e->ok = 0;
    e->prim = NULL;
    snprintf(e->impl, IMPL_LEN, "none");
    if (dnnl_memory_desc_init_by_strides(&e->ma, 2, da, dnnl_type(k->dab), sa) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&e->mb, 2, db, dnnl_type(k->dab), sb) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&e->mc, 2, dc, dnnl_type(k->dc), sc) != dnnl_success ||
        (k->bias && dnnl_memory_desc_init_by_strides(&e->mbias, 2, dbias, dnnl_type(k->dab), sbias) != dnnl_success))
        return 0;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &e->ma, &e->mb, k->bias ? &e->mbias : NULL, &e->mc) != dnnl_success) return 0;
    dnnl_primitive_attr_t attr;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return -1;
    dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && k->acc) {
        dnnl_post_ops_t po;
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) {
            st = dnnl_post_ops_append_sum(po, 1.0f);
            if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
            dnnl_post_ops_destroy(po);
        }
    }
    dnnl_primitive_desc_t pd = NULL;
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st == dnnl_out_of_memory) return -1;
    if (st != dnnl_success) return 0; /* unimplemented here: e->ok = 0 */
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(e->impl, IMPL_LEN, "%s", impl ? impl : "?");
    int ref = !impl || strncmp(impl, "ref", 3) == 0;
    const dnnl_memory_desc_t *ms = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (ms) e->ms = *ms;
    e->scratch = ms ? dnnl_memory_desc_get_size(ms) : 0;
    st = ref ? dnnl_success : dnnl_primitive_create(&e->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st == dnnl_out_of_memory) return -1;
    e->ok = !ref && st == dnnl_success;
    return 0;
}

/* The entry of k, made if new. Cached entries live as long as the process;
 * when the cache is full, *tmp is filled instead and returned (the caller
 * frees it with drop). NULL on out of memory. */
static const entry *lookup(const tile_key *k, entry *tmp) {
    pthread_mutex_lock(&cache_lock);
    if (!cache) cache = calloc(CACHE_SLOTS, sizeof *cache);
    entry *e = NULL;
    if (cache) {
        for (uint64_t i = key_hash(k);; i++) {
            entry *s = &cache[i & (CACHE_SLOTS - 1)];
            if (!s->used) break;
            if (key_eq(&s->key, k)) {
                e = s;
                break;
            }
        }
    }
    if (e) {
        atomic_fetch_add(&n_reused, 1);
    } else {
        int keep = cache && ncached < CACHE_MAX;
        if (keep)
            for (uint64_t i = key_hash(k);; i++)
                if (!cache[i & (CACHE_SLOTS - 1)].used) {
                    e = &cache[i & (CACHE_SLOTS - 1)];
                    break;
                }
        if (!keep) e = tmp;
        memset(e, 0, sizeof *e);
        e->key = *k;
        if (make(e) < 0) {
            e = NULL;
        } else {
            atomic_fetch_add(&n_created, 1);
            if (keep) e->used = 1, ncached++;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return e;
}

static void drop(const entry *e, const entry *tmp) {
    if (e == tmp && e->prim) dnnl_primitive_destroy(e->prim);
}

/* One tile: C = op(A) op(B) (+ bias) (+ C) by e's primitive; 0 on success. */
static int run(const entry *e, dnnl_stream_t stream, const void *a, const void *b, const void *bias, void *c,
               void *scratch) {
    dnnl_memory_t m[5] = {NULL, NULL, NULL, NULL, NULL};
    int ok = dnnl_memory_create(&m[0], &e->ma, engine, (void *)a) == dnnl_success &&
             dnnl_memory_create(&m[1], &e->mb, engine, (void *)b) == dnnl_success &&
             dnnl_memory_create(&m[2], &e->mc, engine, c) == dnnl_success &&
             (!e->scratch || dnnl_memory_create(&m[3], &e->ms, engine, scratch) == dnnl_success) &&
             (!e->key.bias || dnnl_memory_create(&m[4], &e->mbias, engine, (void *)bias) == dnnl_success);
    if (ok) {
        dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
        int n = 3;
        if (e->scratch) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m[3]};
        if (e->key.bias) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, m[4]};
        ok = dnnl_primitive_execute(e->prim, stream, n, args) == dnnl_success &&
             dnnl_stream_wait(stream) == dnnl_success;
    }
    for (int i = 0; i < 5; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    return ok ? 0 : -1;
}

static int64_t cdiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

int pipit__gemm_onednn_bias(pipit_dtype dab, pipit_dtype dc, int trans_a, int trans_b, int64_t batch, int64_t M,
                            int64_t N, int64_t K, const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb,
                            int64_t sB, const void *bias, void *C, int64_t ldc, int64_t sC, int accumulate, int ith,
                            int nth) {
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    if (K <= 0 || (dab != PIPIT_F32 && dab != PIPIT_BF16) || (dc != PIPIT_F32 && dc != PIPIT_BF16)) return 1;
    pthread_once(&init_once, init);
    if (init_error) return 1;
    int64_t mt, nt;
    pipit__gemm_tiles(M, N, K, &mt, &nt);
    int64_t tm = cdiv(M, mt), tn = cdiv(N, nt), tiles = tm * tn;
    if (ith >= batch * tiles) return 0; /* no unit here, whichever way the others go */
    size_t ea = pipit__dtype_size(dab), ec = pipit__dtype_size(dc);
    int old = one_thread_begin();
    /* The (up to 4) tile shapes: [full row?][full column?]. Every thread
     * makes the same choice, from all of them: oneDNN only if each has an
     * implementation. */
    const entry *ent[2][2] = {{NULL, NULL}, {NULL, NULL}};
    entry tmp[2][2];
    int missing = 0, failed = 0;
    size_t scratch = 0;
    for (int r = 0; r < 2; r++)
        for (int q = 0; q < 2; q++) {
            int64_t m = r ? M - (tm - 1) * mt : mt, n = q ? N - (tn - 1) * nt : nt;
            if ((r && m == mt) || (q && n == nt)) continue; /* the same as the full tile */
            tile_key key = {(int)dab, (int)dc, trans_a, trans_b, accumulate, bias != NULL, m, n, K, lda, ldb, ldc};
            ent[r][q] = lookup(&key, &tmp[r][q]);
            if (!ent[r][q]) failed = 1;
            else if (!ent[r][q]->ok) missing = 1;
            else scratch = PIPIT_MAX(scratch, ent[r][q]->scratch);
        }
    void *s = NULL;
    dnnl_stream_t stream = NULL;
    if (!missing && !failed) {
        s = scratch ? malloc(scratch) : NULL;
        if ((scratch && !s) || dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
            failed = 1;
    }
    for (int64_t u = ith; !missing && u < batch * tiles; u += nth) {
        int64_t b = u / tiles, t = u % tiles;
        int64_t i0 = t / tn * mt, j0 = t % tn * nt;
        int64_t m = PIPIT_MIN(mt, M - i0), n = PIPIT_MIN(nt, N - j0);
        char *c = (char *)C + (size_t)(b * sC + i0 * ldc + j0) * ec; /* tile [m,n] of C[b] */
        const char *a = (const char *)A + (size_t)(b * sA + (trans_a ? i0 : i0 * lda)) * ea;
        const char *bb = (const char *)B + (size_t)(b * sB + (trans_b ? j0 * ldb : j0)) * ea;
        const entry *e = ent[m != mt][n != nt];
        const char *bj = bias ? (const char *)bias + (size_t)j0 * ea : NULL; /* the tile's columns of the bias */
        if (failed || run(e, stream, a, bb, bj, c, s) != 0) {
            failed = 1;
            for (int64_t i = 0; !accumulate && i < m; i++) memset(c + (size_t)(i * ldc) * ec, 0, (size_t)n * ec);
        }
    }
    if (stream) dnnl_stream_destroy(stream);
    free(s);
    for (int r = 0; r < 2; r++)
        for (int q = 0; q < 2; q++)
            if (ent[r][q]) drop(ent[r][q], &tmp[r][q]);
    one_thread_end(old);
    if (failed && !missing) pipit__kernel_fail("matmul (oneDNN): out of memory, or oneDNN failed to run a tile");
    return missing;
}

int pipit__gemm_onednn(pipit_dtype dab, pipit_dtype dc, int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N,
                       int64_t K, const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB,
                       void *C, int64_t ldc, int64_t sC, int accumulate, int ith, int nth) {
    return pipit__gemm_onednn_bias(dab, dc, trans_a, trans_b, batch, M, N, K, A, lda, sA, B, ldb, sB, NULL, C, ldc, sC,
                                   accumulate, ith, nth);
}

static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;
static const char *bf16_why_not;
static char bf16_impl[IMPL_LEN];
static char bf16_name[IMPL_LEN + 32] = "onednn (unavailable here: the fallback runs)";

/* A bf16 matmul of a GPT-2-sized tile (bf16 in and out, accumulating: the
 * shape the training step runs most) must have a non-reference
 * implementation, on an ISA with bf16 arithmetic. */
static void bf16_probe(void) {
    pthread_once(&init_once, init);
    if (init_error) {
        bf16_why_not = init_error;
        return;
    }
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) {
        bf16_why_not = "oneDNN's effective ISA has no AVX512-BF16 (the CPU lacks it, or ONEDNN_MAX_CPU_ISA caps it)";
        return;
    }
    int old = one_thread_begin();
    entry e;
    memset(&e, 0, sizeof e);
    e.key = (tile_key){PIPIT_BF16, PIPIT_BF16, 0, 0, 1, 0, 256, 192, 768, 768, 3072, 3072};
    int r = make(&e);
    one_thread_end(old);
    if (r < 0) {
        bf16_why_not = "out of memory while asking oneDNN for a bf16 matmul";
    } else if (!e.ok) {
        static char why[128];
        snprintf(why, sizeof why, "oneDNN has only a reference bf16 matmul here (%s)", e.impl);
        bf16_why_not = why;
    } else {
        snprintf(bf16_impl, sizeof bf16_impl, "%s", e.impl);
        snprintf(bf16_name, sizeof bf16_name, "onednn (%s)", e.impl);
        dnnl_primitive_destroy(e.prim);
    }
}

const char *pipit__onednn_bf16_why_not(void) {
    pthread_once(&bf16_once, bf16_probe);
    return bf16_why_not;
}

const char *pipit__onednn_bf16_impl(void) {
    pthread_once(&bf16_once, bf16_probe);
    return bf16_why_not ? NULL : bf16_impl;
}

const char *pipit__onednn_bf16_name(void) {
    pthread_once(&bf16_once, bf16_probe);
    return bf16_name;
}

void pipit__onednn_stats(int64_t *created, int64_t *reused) {
    *created = atomic_load(&n_created);
    *reused = atomic_load(&n_reused);
}

const char *pipit_cpu_bf16_gemm(void) { return pipit__gemm_bf16_kind(); }
