/*
 * backend_cuda.c — the CUDA backend's vtable: device memory (cudaMalloc),
 * host <-> device copies, the per-rank streams and how a thread binds to
 * one, the sticky error and sync, and the executor's and post-loop's
 * primitives (kernels in prims_cuda.cu). GEMM is gemm_cuda.c, the op
 * kernels ops_cuda.cu.
 *
 * Streams: one per (world rank, device), created on the first bind and
 * kept for the process. Every launch and copy of a thread goes on the
 * stream of the rank it is bound to, so one rank's work runs in program
 * order and ranks sharing a GPU overlap. Copies to and from the host are
 * synchronous for the calling thread (queued on its stream, then waited
 * for), so the host side never sees a half-written buffer.
 *
 * Errors: a CUDA call that fails never aborts: its text becomes the sticky
 * error of the thread's context (the first one wins), and sync(rank), at
 * the end of the step and after the runtime's copies, returns it as a
 * status. PIPIT_CUDA_SYNC=1 waits after every op, so an asynchronous fault
 * is pinned to the op that caused it.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_prims.h"

#define MAX_PEER_DEVICES 64

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int n_devices;            /* after init */
static char init_error[256];     /* why there are none */
static int sync_each_op;         /* PIPIT_CUDA_SYNC=1 */

/* Every context ever bound, and the errors of threads bound to none. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pipit__cuda_ctx **ctxs;
static int nctx, capctx;
static char global_error[512];
static unsigned char peer_done[MAX_PEER_DEVICES][MAX_PEER_DEVICES];

static _Thread_local pipit__cuda_ctx *tl_ctx;
static _Thread_local int tl_device = -1;
static _Thread_local int tl_tf32;

static void init_impl(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(init_error, sizeof init_error, " (cudaGetDeviceCount: %s: %s)", cudaGetErrorName(e),
                 cudaGetErrorString(e));
        (void)cudaGetLastError();
        n = 0;
    }
    n_devices = n;
    const char *s = getenv("PIPIT_CUDA_SYNC");
    sync_each_op = s && *s && strcmp(s, "0") != 0;
}

static void cuda_init(void) { pthread_once(&init_once, init_impl); }

static int cuda_devices(void) {
    cuda_init();
    if (n_devices < 1)
        pipit__err(PIPIT_STATUS_RUNTIME, "no CUDA device found%s", init_error[0] ? init_error : "");
    return n_devices;
}

int pipit__cuda_tf32(void) { return tl_tf32; }

/* Keeps the first message in dst (a context's or the global slot). */
static void record(char *dst, const char *msg) {
    pthread_mutex_lock(&lock);
    if (!dst[0]) snprintf(dst, 512, "%s", msg);
    pthread_mutex_unlock(&lock);
}

int pipit__cuda_fail(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    record(tl_ctx ? tl_ctx->err : global_error, msg);
    return -1;
}

int pipit__cuda_check(cudaError_t e, const char *what) {
    pipit__cuda_ctx *c = tl_ctx;
    if (e == cudaSuccess) {
        if (c) c->last_op = what;
        cuda_init();
        if (!sync_each_op) return 0;
        e = cudaStreamSynchronize(c ? c->stream : (cudaStream_t)0);
        if (e == cudaSuccess) return 0;
    }
    (void)cudaGetLastError(); /* a non-sticky error must not be reported again by the next launch's check */
    return pipit__cuda_fail("%s: %s (%s)", what ? what : "(unnamed op)", cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Peer access between `device` and every device that already has a
 * context (both ways), where the hardware allows it: device-to-device
 * copies between ranks on different GPUs then go over NVLink / PCIe
 * directly. Called with the lock held, on `device`. */
static void enable_peers(int device) {
    if (device >= MAX_PEER_DEVICES) return;
    for (int i = 0; i < nctx; i++) {
        int d = ctxs[i]->device;
        if (d == device || d >= MAX_PEER_DEVICES || peer_done[device][d]) continue;
        peer_done[device][d] = peer_done[d][device] = 1;
        int can = 0;
        if (cudaDeviceCanAccessPeer(&can, device, d) == cudaSuccess && can) {
            (void)cudaDeviceEnablePeerAccess(d, 0);
            if (cudaSetDevice(d) == cudaSuccess) (void)cudaDeviceEnablePeerAccess(device, 0);
            (void)cudaSetDevice(device);
        }
        (void)cudaGetLastError(); /* "already enabled" and "not supported" are fine */
    }
}

/* The context of (rank, device), created on first use; NULL (error
 * recorded) if its stream cannot be made. The thread is on `device`. */
static pipit__cuda_ctx *ctx_get(int rank, int device) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nctx; i++)
        if (ctxs[i]->rank == rank && ctxs[i]->device == device) {
            pipit__cuda_ctx *c = ctxs[i];
            pthread_mutex_unlock(&lock);
            return c;
        }
    pipit__cuda_ctx *c = NULL;
    char msg[512] = "";
    if (nctx == capctx) {
        int cap = capctx ? 2 * capctx : 16;
        pipit__cuda_ctx **bigger = pipit__realloc(ctxs, (size_t)cap * sizeof *bigger);
        if (!bigger) snprintf(msg, sizeof msg, "out of memory for the context of rank %d", rank);
        else ctxs = bigger, capctx = cap;
    }
    if (!msg[0] && !(c = pipit__calloc(1, sizeof *c)))
        snprintf(msg, sizeof msg, "out of memory for the context of rank %d", rank);
    if (c) {
        c->rank = rank;
        c->device = device;
        cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            snprintf(msg, sizeof msg, "cannot create the stream of rank %d on device %d: %s (%s)", rank, device,
                     cudaGetErrorName(e), cudaGetErrorString(e));
            pipit__free(c);
            c = NULL;
        } else {
            enable_peers(device);
            ctxs[nctx++] = c;
        }
    }
    if (msg[0] && !global_error[0]) snprintf(global_error, sizeof global_error, "%s", msg);
    pthread_mutex_unlock(&lock);
    return c;
}

static void cuda_bind(int rank, int device, int tf32) {
    tl_tf32 = tf32 != 0;
    if (tl_ctx && tl_ctx->rank == rank && tl_ctx->device == device && tl_device == device) return;
    cuda_init();
    if (tl_device != device) {
        cudaError_t e = cudaSetDevice(device);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            tl_ctx = NULL;
            tl_device = -1;
            pipit__cuda_fail("rank %d: cudaSetDevice(%d): %s (%s)", rank, device, cudaGetErrorName(e),
                             cudaGetErrorString(e));
            return;
        }
        tl_device = device;
    }
    tl_ctx = ctx_get(rank, device);
}

pipit__cuda_ctx *pipit__cuda_ctx_current(void) {
    if (!tl_ctx) {
        int d = 0;
        if (cudaGetDevice(&d) != cudaSuccess) {
            (void)cudaGetLastError();
            d = 0;
        }
        cuda_bind(-1, d, tl_tf32);
    }
    return tl_ctx;
}

cudaStream_t pipit__cuda_stream(void) {
    pipit__cuda_ctx *c = pipit__cuda_ctx_current();
    return c ? c->stream : (cudaStream_t)0;
}

double *pipit__cuda_scratch(pipit__cuda_ctx *c, size_t n) {
    if (!c) return NULL;
    if (c->scratch_n >= n) return c->scratch;
    size_t want = n < ((size_t)1 << 16) ? (size_t)1 << 16 : n;
    if (c->scratch) { /* a kernel queued earlier may still read it */
        (void)cudaStreamSynchronize(c->stream);
        (void)cudaFree(c->scratch);
        c->scratch = NULL;
        c->scratch_n = 0;
    }
    if (pipit__cuda_check(cudaMalloc((void **)&c->scratch, want * sizeof(double)), "scratch for partial sums")) {
        c->scratch = NULL;
        return NULL;
    }
    c->scratch_n = want;
    return c->scratch;
}

static pipit_status cuda_sync(int rank) {
    cuda_init();
    pipit__cuda_ctx *mine[MAX_PEER_DEVICES];
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nctx && n < MAX_PEER_DEVICES; i++)
        if (ctxs[i]->rank == rank) mine[n++] = ctxs[i];
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++) {
        cudaError_t e = cudaStreamSynchronize(mine[i]->stream);
        if (e == cudaSuccess) continue;
        (void)cudaGetLastError();
        char msg[512];
        snprintf(msg, sizeof msg,
                 "%s (%s), found when waiting for rank %d's stream; the last op queued was '%s' (errors of "
                 "kernels are asynchronous: run with PIPIT_CUDA_SYNC=1 to stop at the op that caused it)",
                 cudaGetErrorName(e), cudaGetErrorString(e), rank,
                 mine[i]->last_op ? mine[i]->last_op : "(none)");
        record(mine[i]->err, msg);
    }
    char first[512] = "";
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n; i++) {
        if (!first[0] && mine[i]->err[0]) snprintf(first, sizeof first, "%s", mine[i]->err);
        mine[i]->err[0] = 0;
    }
    if (!first[0] && global_error[0]) snprintf(first, sizeof first, "%s", global_error);
    global_error[0] = 0;
    pthread_mutex_unlock(&lock);
    if (first[0]) return pipit__err(PIPIT_STATUS_RUNTIME, "cuda: %s", first);
    return PIPIT_STATUS_OK;
}

/* ---- memory ---- */

/* cudaMalloc's blocks are 256-byte aligned (the vtable asks for 64). */
static void *cuda_reserve(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes < 256 ? 256 : bytes);
    if (e == cudaSuccess) return p;
    (void)cudaGetLastError();
    if (e != cudaErrorMemoryAllocation) /* not a plain out-of-memory: keep the reason */
        pipit__cuda_fail("cudaMalloc(%zu): %s (%s)", bytes, cudaGetErrorName(e), cudaGetErrorString(e));
    return NULL;
}

static void cuda_zero(void *p, size_t n) {
    if (n) pipit__cuda_check(cudaMemsetAsync(p, 0, n, pipit__cuda_stream()), "zero");
}

static void *cuda_alloc(size_t bytes) {
    void *p = cuda_reserve(bytes);
    if (!p) return NULL;
    cudaStream_t s = pipit__cuda_stream();
    if (pipit__cuda_check(cudaMemsetAsync(p, 0, bytes < 256 ? 256 : bytes, s), "alloc (zero)") == 0)
        pipit__cuda_check(cudaStreamSynchronize(s), "alloc (zero)");
    return p;
}

static void cuda_free(void *p) {
    if (p) pipit__cuda_check(cudaFree(p), "free");
}

/* A copy on the thread's stream, waited for. Host memory the copy could
 * not fill is set to all ones bits (NaN in f32 and f64), never left stale. */
static void copy_sync(void *dst, const void *src, size_t n, const char *what, void *host_dst) {
    if (!n) return;
    cudaStream_t s = pipit__cuda_stream();
    if (pipit__cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s), what) == 0 &&
        pipit__cuda_check(cudaStreamSynchronize(s), what) == 0)
        return;
    if (host_dst) memset(host_dst, 0xff, n);
}

static void cuda_upload(void *dst, const void *host, size_t n) { copy_sync(dst, host, n, "upload", NULL); }

static void cuda_download(void *host, const void *src, size_t n) { copy_sync(host, src, n, "download", host); }

/* ---- the executor's and post-loop's primitives ---- */

static void cuda_gemm(pipit_dtype dt, int ta, int tb, int64_t batch, int64_t M, int64_t N, int64_t K,
                      const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, void *C,
                      int64_t ldc, int64_t sC, int accumulate, int ith, int nth) {
    (void)nth;
    if (ith == 0) pipit__cuda_gemm(dt, ta, tb, batch, M, N, K, A, lda, sA, B, ldb, sB, C, ldc, sC, accumulate);
}

static void cuda_accumulate(pipit_dtype dt, pipit_dtype xdt, void *acc, const void *x, int64_t n, int first, int ith,
                            int nth) {
    (void)nth;
    if (ith != 0 || n <= 0) return;
    cudaStream_t s = pipit__cuda_stream();
    if (xdt == PIPIT_BF16 && dt == PIPIT_F32) /* a bf16 contribution into its fp32 accumulator */
        pipit__cuda_check(pipit__cuda_launch_add_bf16(acc, x, n, first, s), "accumulate (bf16)");
    else if (first)
        pipit__cuda_check(cudaMemcpyAsync(acc, x, (size_t)n * pipit__dtype_size(dt), cudaMemcpyDefault, s),
                          "accumulate (first)");
    else
        pipit__cuda_check(pipit__cuda_launch_add(dt == PIPIT_F64, acc, x, n, s), "accumulate");
}

static void cuda_copy(void *dst, const void *src, size_t n, int ith, int nth) {
    (void)nth;
    if (ith != 0 || !n || dst == src) return;
    pipit__cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, pipit__cuda_stream()), "copy");
}

static void cuda_sum_uses(pipit_dtype dt, void *dst, void *const *srcs, int nsrcs, int64_t a, int64_t b) {
    if (b <= a) return;
    cudaStream_t s = pipit__cuda_stream();
    size_t es = pipit__dtype_size(dt);
    if (nsrcs == 0)
        pipit__cuda_check(cudaMemsetAsync((char *)dst + a * es, 0, (size_t)(b - a) * es, s), "gradient sum (zero)");
    else
        pipit__cuda_check(pipit__cuda_launch_sum_uses(dt == PIPIT_F64, dst, srcs, nsrcs, a, b, s), "gradient sum");
}

/* Sum of squares of x[a, b): NaN if anything failed (the update is then
 * skipped everywhere, and the step reports the CUDA error). */
static double cuda_sumsq(pipit_dtype dt, const void *x, int64_t a, int64_t b) {
    int64_t n = b - a;
    if (n <= 0) return 0.0;
    pipit__cuda_ctx *c = pipit__cuda_ctx_current();
    double *scr = pipit__cuda_scratch(c, (size_t)pipit__cuda_sumsq_partials(n) + 1);
    if (!scr) return NAN;
    const char *xa = (const char *)x + (size_t)a * pipit__dtype_size(dt);
    if (pipit__cuda_check(pipit__cuda_launch_sumsq(dt == PIPIT_F64, xa, n, scr + 1, scr, c->stream), "sum of squares"))
        return NAN;
    double r = NAN;
    copy_sync(&r, scr, sizeof r, "sum of squares (download)", &r);
    return r;
}

static void cuda_sumsq_chunks(pipit_dtype dt, const void *x, int64_t n, int64_t chunk, int64_t c0, int64_t c1,
                              double *out) {
    if (c1 <= c0) return;
    if (chunk > PIPIT_CUDA_SUMSQ_SEG) { /* not the runtime's chunk: one two-level sum per chunk */
        for (int64_t c = c0; c < c1; c++) out[c - c0] = cuda_sumsq(dt, x, c * chunk, PIPIT_MIN((c + 1) * chunk, n));
        return;
    }
    size_t bytes = sizeof(double) * (size_t)(c1 - c0);
    pipit__cuda_ctx *c = pipit__cuda_ctx_current();
    double *scr = pipit__cuda_scratch(c, (size_t)(c1 - c0));
    if (!scr ||
        pipit__cuda_check(pipit__cuda_launch_sumsq_chunks(dt == PIPIT_F64, x, n, chunk, c0, c1, scr, c->stream),
                          "sum of squares")) {
        memset(out, 0xff, bytes);
        return;
    }
    copy_sync(out, scr, bytes, "sum of squares (download)", out);
}

static void cuda_adamw(pipit_dtype dt, const pipit__adamw_coef *c, void *w, const void *g, void *m, void *v,
                       int64_t lo, int64_t hi) {
    pipit__cuda_adamw_args a = {c->b1, c->b2, c->step_size, c->bc2_sqrt, c->eps, c->decay, c->clip};
    pipit__cuda_check(pipit__cuda_launch_adamw(dt == PIPIT_F64, &a, w, g, m, v, lo, hi, pipit__cuda_stream()),
                      "adamw");
}

static void cuda_sgd(pipit_dtype dt, double lr, double clip, void *w, const void *g, int64_t lo, int64_t hi) {
    pipit__cuda_check(pipit__cuda_launch_sgd(dt == PIPIT_F64, lr, clip, w, g, lo, hi, pipit__cuda_stream()), "sgd");
}

const pipit__backend pipit__backend_cuda = {
    .name = "cuda",
    .init = cuda_init,
    .alloc = cuda_alloc,
    .reserve = cuda_reserve,
    .zero = cuda_zero,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .ops = pipit__cuda_ops,
    .gemm = cuda_gemm,
    .accumulate = cuda_accumulate,
    .copy = cuda_copy,
    .sum_uses = cuda_sum_uses,
    .sumsq = cuda_sumsq,
    .adamw = cuda_adamw,
    .sgd = cuda_sgd,
    .host_memory = 0,
    .bf16 = 1,
    .devices = cuda_devices,
    .bind = cuda_bind,
    .sync = cuda_sync,
    .sumsq_chunks = cuda_sumsq_chunks,
};
