/*
 * backend.h — the seam between the runtime and the kernels. The op table
 * (ir/) says what an op is; a backend says how to run it on one kind of
 * device: it owns that device's memory (alloc, free, copies to and from
 * the host), a run table with one kernel per op of ir/ops.def, GEMM, and
 * the few primitives the executor and the post-loop need beyond the ops
 * (accumulate, copy, per-use gradient sums, sums of squares, optimizer
 * updates). The runtime talks to this vtable only, never to a backend's
 * kernels directly; `cpu` is the one backend today.
 *
 * Thread contract (as in ggml): the runtime calls every kernel and
 * primitive taking (ith, nth) once on each of the nth threads of a rank's
 * team; each computes its own static slice, and results never depend on
 * nth. Those taking a range [a, b) work on that range only.
 */
#ifndef PIPIT_BACKEND_H
#define PIPIT_BACKEND_H

#include "ir/graph.h"
#include "util/bf16.h"

#ifdef __cplusplus
extern "C" { /* the CUDA backend (.cu files) includes this header from C++ */
#endif

/* Everything a kernel needs to run one node: the node (sizes, attributes),
 * its inputs' nodes, and resolved pointers into backend memory. */
typedef struct pipit__kctx {
    const pipit__node *node;
    const pipit__node *in_node[PIPIT_MAX_IN];
    void *out;
    const void *in[PIPIT_MAX_IN];
    int shard;  /* the rank's index t among its stage's T tensor-parallel ranks (vocab-parallel ops) */
    int cp;     /* the rank's index c in its context-parallel group (ROPE_CP, ATTENTION_CP; ir/cp.h) */
    int acc_f32; /* MATMUL (bf16): out is an fp32 accumulator, written (1) or added into (2) in fp32 */
    int epi_bias; /* MATMUL (bf16): in[2] is a bias [N] added to each row before the rounding */
} pipit__kctx;

typedef void (*pipit__op_kernel)(const pipit__kctx *k, int ith, int nth);

/* AdamW coefficients of one step and param, computed once by the runtime. */
typedef struct {
    double b1, b2, step_size, bc2_sqrt, eps, decay, clip;
} pipit__adamw_coef;

typedef struct pipit__backend {
    const char *name;
    /* Once per process before any kernel runs (idempotent). */
    void (*init)(void);
    /* Device memory: zeroed and 64-byte aligned, NULL when out of memory. */
    void *(*alloc)(size_t bytes);
    /* Same, but the contents are unspecified and the memory is not touched,
     * so a program can reserve all its blocks, and only once every one of
     * them succeeded zero them (zero: the first n bytes of a reserved or
     * allocated block). A model that does not fit thus fails before filling
     * any memory. Free either kind with free. */
    void *(*reserve)(size_t bytes);
    void (*zero)(void *ptr, size_t n);
    void (*free)(void *ptr);
    /* Host <-> device copies (feeds, losses, parameters, checkpoints). */
    void (*upload)(void *dst, const void *host, size_t n);
    void (*download)(void *host, const void *src, size_t n);
    /* [PIPIT_OP_COUNT] one kernel per op; NULL exactly for the ops that run
     * no kernel (leaves and aliases, see pipit__node_runs, and the
     * tensor-parallel collectives, OPF_COLL: instructions of the runtime). */
    const pipit__op_kernel *ops;
    /* C[b] = op(A[b]) @ op(B[b]) (+ C[b] if accumulate) for b < batch, row
     * major with row strides lda/ldb/ldc and batch strides sA/sB/sC (sB = 0
     * broadcasts B); dt is F32 or F64. */
    void (*gemm)(pipit_dtype dt, int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                 const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, void *C,
                 int64_t ldc, int64_t sC, int accumulate, int ith, int nth);
    /* acc[n] = x[n] (first) or acc[n] += x[n]: one microbatch's gradient;
     * acc has dtype dt, x has xdt: dt itself, or bf16 into an f32 acc
     * (converted exactly, then added in fp32). */
    void (*accumulate)(pipit_dtype dt, pipit_dtype xdt, void *acc, const void *x, int64_t n, int first, int ith,
                       int nth);
    /* dst = src, n bytes (gradient transforms). */
    void (*copy)(void *dst, const void *src, size_t n, int ith, int nth);
    /* dst[a, b) = ((srcs[0] + srcs[1]) + srcs[2]) ...; zero when nsrcs = 0
     * (a param no loss depends on). srcs[0] may be dst. */
    void (*sum_uses)(pipit_dtype dt, void *dst, void *const *srcs, int nsrcs, int64_t a, int64_t b);
    /* Sum of squares of x[a, b) in double, in a fixed order. */
    double (*sumsq)(pipit_dtype dt, const void *x, int64_t a, int64_t b);
    /* Updates of w[lo, hi) from gradient g scaled by the clip factor. */
    void (*adamw)(pipit_dtype dt, const pipit__adamw_coef *c, void *w, const void *g, void *m, void *v,
                  int64_t lo, int64_t hi);
    void (*sgd)(pipit_dtype dt, double lr, double clip, void *w, const void *g, int64_t lo, int64_t hi);
    /* adamw of an fp32 param that also writes shadow[lo, hi) = the new w
     * rounded to bf16 as the cast kernel rounds (a param's bf16 copy that
     * the next step reads instead of casting: lower.c mark_shadows); NULL:
     * no shadows on this backend. */
    void (*adamw_bf16)(const pipit__adamw_coef *c, float *w, const float *g, float *m, float *v,
                       pipit__bf16 *shadow, int64_t lo, int64_t hi);

    /* ---- devices (added with the cuda backend; on cpu: host memory and
     * no-ops, so the CPU path does exactly what it did before) ---- */
    /* 1: backend memory is host memory the runtime may read and write in
     * place (feeds are used where they lie, the transports memcpy). 0: only
     * upload, download and copy touch it; feeds are uploaded into a device
     * block of the rank, messages go through download/upload, and a rank's
     * team is one thread (kernels launch the whole op from ith == 0 and the
     * device does the parallel work). */
    int host_memory;
    /* 1: every kernel, GEMM and accumulate takes bf16 (options.dtype
     * PIPIT_BF16 runs here); 0: compiling a bf16 program is refused. */
    int bf16;
    /* Devices ranks can be placed on (cpu: 1), after init; 0 when none can
     * be used, with the reason as this thread's message. */
    int (*devices)(void);
    /* Called on each thread of world rank `rank`'s team before it runs
     * anything in a step, and on any thread before the runtime touches that
     * rank's memory (allocation, parameters, outputs): device is rank mod
     * devices(); tf32 is the program's options.tf32. cpu: nothing. cuda: the
     * thread's current device and the rank's stream (created on first use),
     * which every later call of this thread uses. */
    void (*bind)(int rank, int device, int tf32);
    /* Waits for everything rank `rank` has queued and returns the first
     * error since its last sync (PIPIT_STATUS_RUNTIME, the message naming
     * the failing op), clearing it. cpu: always OK. */
    pipit_status (*sync)(int rank);
    /* Optional (NULL: the runtime calls sumsq per chunk). For chunks c in
     * [c0, c1) of `chunk` elements of x[0, n): out[c - c0] = sumsq(dt, x,
     * c * chunk, min((c + 1) * chunk, n)), the same bits, in one pass: a
     * device backend returns many partial sums for one synchronisation. */
    void (*sumsq_chunks)(pipit_dtype dt, const void *x, int64_t n, int64_t chunk, int64_t c0, int64_t c1,
                         double *out);
} pipit__backend;

/* The backend called `name` ("cpu", "cuda" in a build with
 * -DPIPIT_CUDA=ON); NULL (with a message listing the known ones, or
 * saying how to build the cuda one) when there is none by that name. */
const pipit__backend *pipit__backend_find(const char *name);

/* Makes `be` findable by its name besides the built-in backends (one at a
 * time; NULL removes it). For tests: tests/test_device_sim.c runs the
 * runtime on a simulated device backend. Not thread-safe. */
void pipit__backend_register(const pipit__backend *be);

#ifdef __cplusplus
}
#endif

#endif
