/*
 * pipit.h — the core public header of pipit: MPMD pipeline-parallel training
 * (pipit_io.h, pipit_gpt2.h and pipit_inspect.h build on it).
 *
 * A user traces the loss of ONE microbatch as a graph (pipit_graph), marks
 * stage boundaries with pipit_yield, and compiles it with a schedule into a
 * pipit_program; pipit_step runs one training step (M microbatches, gradient
 * accumulation, clipping, optimizer update).
 *
 * Conventions
 *   - Every fallible call returns pipit_status. On failure a readable message
 *     is left in the thread-local pipit_errmsg() and, where a handle exists,
 *     on that handle (pipit_graph_errmsg, pipit_program_errmsg). Every
 *     failing call sets a fresh message naming the function (and, for a bad
 *     pointer, the argument); it never leaves an earlier failure's text.
 *   - Pointer arguments are checked: NULL (or a graph / program handle
 *     without its magic number: freed or garbage) is MISUSE, or INVALID
 *     where documented. Getters that return a value rather than a status
 *     return a neutral one (0, -1 where noted, NULL, an invalid pipit_val)
 *     and set the message.
 *   - Graph builders return pipit_val and never fail loudly: the first error
 *     (bad shape, bad dtype, ...) makes the graph "poisoned"; later builders
 *     return an invalid value and pipit_graph_status / pipit_compile report
 *     the first error with the op and the shapes involved (a builder called
 *     on a poisoned graph sets "<builder>: the graph already failed: <first
 *     error>" as the thread's message).
 *   - Every *_free accepts NULL. Strings returned by pipit are owned by pipit
 *     and stay valid until the owning handle is freed (or, for
 *     pipit_errmsg, until the next failing call on the same thread).
 *   - Thread safety: a handle may be used by one thread at a time.
 */
#ifndef PIPIT_H
#define PIPIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* PIPIT_API marks every public function. The library is compiled with
 * -fvisibility=hidden and PIPIT_BUILDING defined, so exactly the PIPIT_API
 * functions are exported from libpipit.so (internal pipit__* ones are not).
 * For clients it expands to nothing (a plain declaration). */
#ifndef PIPIT_API
#if defined(PIPIT_BUILDING) && (defined(__GNUC__) || defined(__clang__))
#define PIPIT_API __attribute__((visibility("default")))
#else
#define PIPIT_API
#endif
#endif

/* ---------------------------------------------------------------- status */

/* One list generates the enum and pipit_status_name (libuv's UV_ERRNO_MAP). */
#define PIPIT_STATUS_MAP(X)                                              \
    X(OK,        "ok")                                                   \
    X(INVALID,   "invalid argument")                                     \
    X(SHAPE,     "shape or dtype mismatch")                              \
    X(IO,        "i/o error")                                            \
    X(FORMAT,    "malformed file")                                       \
    X(NOMEM,     "out of memory")                                        \
    X(MISUSE,    "API misuse (NULL, freed or half-built handle)")       \
    X(SCHEDULE,  "invalid schedule")                                     \
    X(DEADLOCK,  "schedule would deadlock")                              \
    X(RUNTIME,   "runtime failure")                                      \
    X(INTERNAL,  "internal error")

typedef enum {
#define PIPIT_X_(name, text) PIPIT_STATUS_##name,
    PIPIT_STATUS_MAP(PIPIT_X_)
#undef PIPIT_X_
    PIPIT_STATUS_COUNT
} pipit_status;

/* Short text for a status code (static storage). */
PIPIT_API const char *pipit_status_name(pipit_status s);
/* The message of the last failure on this thread ("" if none). */
PIPIT_API const char *pipit_errmsg(void);

/* ------------------------------------------------------------- processes */

/* Ranks are threads of this process unless the program was started by an
 * MPI launcher (mpirun -np N ...; detected from its environment): then
 * every process runs one world rank, and pipit_init initialises MPI.
 * pipit_init is idempotent and optional (pipit_compile calls it; call it
 * first to learn the process rank early); argc/argv may be NULL.
 * pipit_finalize ends MPI (call it once, after freeing every program). */
PIPIT_API pipit_status pipit_init(int *argc, char ***argv);
PIPIT_API void pipit_finalize(void);
/* The library's version, CMake's project version ("0.1.0"; static
 * storage), and whether it was built with the MPI transport (1) or not (0). */
PIPIT_API const char *pipit_version(void);
PIPIT_API int pipit_have_mpi(void);
/* What build this is: the version and the source tree's commit
 * ("0.1.0+v0.1-42-g3e2bc6912345-dirty"; "+no-git" outside a git checkout),
 * fixed when the library is built. The processes of an MPI job must run
 * the same build (pipit_agree checks it). The environment variable
 * PIPIT_BUILD_ID, when set, replaces it (static storage). */
PIPIT_API const char *pipit_build_id(void);
/* How the CPU backend multiplies bf16 matrices in this process: "amx"
 * (pipit's tile kernel, where the CPU has AMX-BF16 and the OS grants its
 * tiles), "avx512bf16" (pipit's vdpbf16ps kernel, AVX512-BF16 without
 * AMX), "onednn (<oneDNN's implementation>)" or "fp32 panels"
 * (PIPIT_BF16_GEMM=amx|onednn|pairs|panels forces one where the CPU can
 * run it). Static storage; for benchmarks and logs. */
PIPIT_API const char *pipit_cpu_bf16_gemm(void);
/* Which kernels OpenBLAS (the CPU's f32 and f64 GEMMs) runs in this
 * process: its core name ("Haswell", "SkylakeX", ...), which OpenBLAS
 * picks when it is loaded from the CPU models it knows, or from the
 * environment variable OPENBLAS_CORETYPE. Static storage; for benchmarks
 * and logs. */
PIPIT_API const char *pipit_cpu_blas_kernels(void);
/* NULL, or one line of advice when OpenBLAS runs kernels narrower than
 * this CPU's vectors: an OpenBLAS older than the CPU (Debian 12's 0.3.21
 * on AMD Zen 4 / 5) runs its 256-bit Haswell or Zen kernels on a CPU with
 * AVX-512, where OPENBLAS_CORETYPE=SKYLAKEX picks its AVX-512 ones (1.9x
 * the sgemm rate measured on such an EPYC). Static storage. */
PIPIT_API const char *pipit_cpu_blas_advice(void);
/* 1 if this build has the cuda backend (configured with -DPIPIT_CUDA=ON),
 * else 0; whether the machine has a GPU is another matter
 * (pipit_cuda_device_count). */
PIPIT_API int pipit_have_cuda(void);
/* CUDA devices this process can use: 0 when there is none or the build
 * has no cuda backend (pipit_errmsg then says why). */
PIPIT_API int pipit_cuda_device_count(void);

/* Memory admission (docs/refuses.md): the bytes this process may still
 * use -- the smallest of its share of physical RAM (shared by the MPI
 * processes of this machine) and of the cgroup memory limit, less what it
 * holds already, and of RLIMIT_AS / RLIMIT_DATA less what it has mapped --
 * and, in *which (optional; thread-local text valid until the next call),
 * which limit that is. INFINITY when nothing limits it. pipit_compile
 * checks its programs against it (pipit_options.mem_limit, no_mem_check). */
PIPIT_API double pipit_mem_available(const char **which);

/* Ranks agree or stop (docs/refuses.md). kv: NULL-terminated name, value,
 * name, value, ... list of what must be the same in every process (a
 * configuration, a data spec; values compared as text). In an MPI job
 * every process sends its build (pipit_version, pipit_build_id) and its
 * list to every other one, and every process returns the same result:
 * INVALID, with a message naming `what`, the first field that differs and
 * which processes hold which value ("--lr: processes 0, 2 have '0.001';
 * process 1 has '0.002'"), or OK. Collective: every process calls it at
 * the same point, with the same field names in the same order. One
 * process: OK at once. pipit_compile does the same with its plan. */
PIPIT_API pipit_status pipit_agree(const char *what, const char *const *kv);

/* This process's rank and the number of processes: 0 and 1 without MPI. */
PIPIT_API int pipit_process_rank(void);
PIPIT_API int pipit_process_count(void);

/* What the links between ranks measure (pipit_probe_links): a ping-pong
 * through pipit's own transport, 8 bytes for the latency (half a round
 * trip) and 4 MiB for the bandwidth (bytes over half a round trip). */
typedef struct {
    int processes;               /* MPI processes (1: ranks are threads of this process) */
    int hosts;                   /* distinct hosts among them */
    int per_host;                /* the most processes on one host (1 for threads) */
    double intra_bw, intra_lat;  /* two ranks on one host (bytes/s, s); 0: not measured */
    double inter_bw, inter_lat;  /* two ranks on different hosts; 0: not measured (one host) */
} pipit_link_probe;

/* Measures the links this job has: with one process, between two threads
 * through the threads transport; under MPI (collective: every process calls
 * it), between process 0 and the first process on its host, and process 0
 * and the first process on another host, through the MPI transport; hosts
 * are told apart by name and address. Every process gets the same result.
 * Takes about a second. RUNTIME if a transport cannot be opened. */
PIPIT_API pipit_status pipit_probe_links(pipit_link_probe *out);

/* ----------------------------------------------------------------- types */

/* Element types. PIPIT_BF16 is bfloat16, the upper 16 bits of an IEEE
 * fp32 (8-bit exponent, 7 stored mantissa bits): a storage type. Kernels
 * load it into fp32, compute in fp32 and round to nearest even when they
 * store; parameters are never bf16 (they are fp32 masters: see
 * pipit_options.dtype). */
typedef enum { PIPIT_F32 = 0, PIPIT_F64 = 1, PIPIT_I32 = 2, PIPIT_BF16 = 3 } pipit_dtype;
/* Which values a bf16 program keeps in bf16 (pipit_options.bf16_policy). */
typedef enum { PIPIT_BF16_AUTOCAST = 0, PIPIT_BF16_ALL = 1 } pipit_bf16_policy;

/* pipit_options.remat: what the backward recomputes (see there). */
typedef enum { PIPIT_REMAT_NONE = 0, PIPIT_REMAT_FULL = 1, PIPIT_REMAT_POINTWISE = 2 } pipit_remat;

#define PIPIT_MAX_DIMS 4
/* Size limits (docs/ops.md "Limits"): elements of one tensor, microbatches
 * per step, stages of a schedule, compute threads per rank. Larger values
 * are refused with a message naming the limit, never wrapped. */
#define PIPIT_MAX_ELEMENTS ((int64_t)1 << 48)
#define PIPIT_MAX_MICROBATCHES (1 << 24)
#define PIPIT_MAX_STAGES 32767
#define PIPIT_MAX_THREADS 256

typedef struct pipit_graph pipit_graph;
typedef struct pipit_program pipit_program;
typedef struct pipit_schedule pipit_schedule;

/* A value in a graph: a small handle (graph + node index). id < 0 = invalid. */
typedef struct {
    pipit_graph *g;
    int32_t id;
} pipit_val;

/* ----------------------------------------------------------------- graph */

/* Creates an empty graph. Returns NULL (and sets pipit_errmsg) on OOM. */
PIPIT_API pipit_graph *pipit_graph_new(void);
PIPIT_API void pipit_graph_free(pipit_graph *g);
/* First error raised while building (PIPIT_STATUS_OK if none). */
PIPIT_API pipit_status pipit_graph_status(const pipit_graph *g);
PIPIT_API const char *pipit_graph_errmsg(const pipit_graph *g);

/* Shape queries on a value (0 / NULL for an invalid value). */
PIPIT_API int pipit_val_ndim(pipit_val v);
PIPIT_API int64_t pipit_val_dim(pipit_val v, int axis);
PIPIT_API pipit_dtype pipit_val_dtype(pipit_val v);

/* Leaves: per-microbatch data inputs, and trainable parameters (by name). */
PIPIT_API pipit_val pipit_input(pipit_graph *g, const char *name, pipit_dtype dt,
                                int ndim, const int64_t *shape);
PIPIT_API pipit_val pipit_param(pipit_graph *g, const char *name, pipit_dtype dt,
                                int ndim, const int64_t *shape);

/* Ops. Shapes follow numpy conventions; see docs/ops.md. Float ops take f32
 * or f64 (all float inputs of an op share one dtype). A bad shape, axis or
 * dtype poisons the graph with a message naming the builder, the op and
 * the input shapes, e.g. "pipit_sub: sub(f32 [2,3], f32 [4]): shapes do
 * not broadcast ...". */
PIPIT_API pipit_val pipit_embed(pipit_graph *g, pipit_val table /*[V,C]*/,
                                pipit_val idx /*i32 [...]*/);     /* -> [...,C] */
/* Rows of table [N, ...] (any rank >= 1) by i32 indices [...] in [0, N)
 * -> [..., table's trailing axes]; pipit_step refuses an index outside. */
PIPIT_API pipit_val pipit_gather(pipit_graph *g, pipit_val table, pipit_val idx);
/* Elementwise a + b, a - b, a * b, a / b with NumPy broadcasting: shapes are
 * aligned at their last axis and each pair of dimensions is equal or one of
 * them is 1 (a missing leading axis counts as 1); the output has the larger
 * rank. The gradient of a broadcast input sums over the axes it was
 * broadcast along, in a fixed order (docs/ops.md). */
PIPIT_API pipit_val pipit_add(pipit_graph *g, pipit_val a, pipit_val b);
PIPIT_API pipit_val pipit_sub(pipit_graph *g, pipit_val a, pipit_val b);
PIPIT_API pipit_val pipit_mul(pipit_graph *g, pipit_val a, pipit_val b);
PIPIT_API pipit_val pipit_div(pipit_graph *g, pipit_val a, pipit_val b);
/* x repeated to `shape` (rank ndim <= 4) by the same broadcasting rule. */
PIPIT_API pipit_val pipit_broadcast_to(pipit_graph *g, pipit_val x, int ndim, const int64_t *shape);
/* Elementwise functions, same shape: -x, e^x, ln x, sqrt x, 1/sqrt x, |x|,
 * max(x, 0), x sigmoid(x) (SiLU / swish), 1/(1+e^-x), tanh x. */
PIPIT_API pipit_val pipit_neg(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_exp(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_log(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_sqrt(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_rsqrt(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_abs(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_relu(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_silu(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_sigmoid(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_tanh(pipit_graph *g, pipit_val x);
/* Sum, mean or max along one axis (negative: from the end); keepdim != 0
 * keeps the axis as size 1, else it is dropped. The max's gradient goes to
 * the first maximal element along the axis. */
PIPIT_API pipit_val pipit_reduce_sum(pipit_graph *g, pipit_val x, int axis, int keepdim);
PIPIT_API pipit_val pipit_reduce_mean(pipit_graph *g, pipit_val x, int axis, int keepdim);
PIPIT_API pipit_val pipit_reduce_max(pipit_graph *g, pipit_val x, int axis, int keepdim);
/* Softmax and log-softmax along the last axis (max-shifted: stable). */
PIPIT_API pipit_val pipit_softmax(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_log_softmax(pipit_graph *g, pipit_val x);
/* x[start : start + length] along axis (negative: from the end). A range
 * that is contiguous in memory (every axis before `axis` has size 1) is a
 * view of x's bytes, no copy. */
PIPIT_API pipit_val pipit_slice(pipit_graph *g, pipit_val x, int axis, int64_t start, int64_t length);
/* The n values xs[0..n) joined along axis: equal shapes but along it. */
PIPIT_API pipit_val pipit_concat(pipit_graph *g, int n, const pipit_val *xs, int axis);
/* x cut along axis into n pieces of sizes[0..n) (>= 1 each, adding up to
 * the axis) into out[0..n). Returns the graph's status: OK, or the first
 * error (then out[] holds invalid values); INVALID for a NULL out. */
PIPIT_API pipit_status pipit_split(pipit_graph *g, pipit_val x, int axis, int n, const int64_t *sizes,
                                   pipit_val *out);
/* RMSNorm over the last axis as Hugging Face Llama's: w * (x / sqrt(mean(x^2)
 * + eps)); x [...,C], w [C]; the mean of squares and the reciprocal root in
 * double, rounded once to x's dtype. */
PIPIT_API pipit_val pipit_rmsnorm(pipit_graph *g, pipit_val x, pipit_val w, double eps);
/* Rotary position embedding, Hugging Face's rotate-half convention: x
 * [B,T,heads*D] (or [B,T,heads,D]), D even; position of row t is t (+
 * position_offset), angle(t, i) = t * theta^(-2i/D) for i < D/2;
 * out = x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1) over each
 * head's halves. f32 graphs form the angles as transformers does in f32. */
PIPIT_API pipit_val pipit_rope(pipit_graph *g, pipit_val x, int heads, double theta);
PIPIT_API pipit_val pipit_rope_ex(pipit_graph *g, pipit_val x, int heads, double theta,
                                  int64_t position_offset);
/* RoPE with its inverse frequencies f_i = theta^(-2i/D) rescaled as
 * Hugging Face's rope_type "llama3" (Llama 3.1 and later;
 * transformers' _compute_llama3_parameters), with wavelength w_i = 2 pi / f_i,
 * L = original_max_position_embeddings, lo = low_freq_factor, hi =
 * high_freq_factor:
 *   w_i < L / hi:   f_i unchanged (high frequencies)
 *   w_i > L / lo:   f_i / factor  (low frequencies)
 *   otherwise:      (1 - s) f_i / factor + s f_i,  s = (L / w_i - lo) / (hi - lo)
 * formed in float32 for f32 and bf16 graphs as transformers forms them (in
 * double for f64). A NULL `scaling`, or one of all zeros, is pipit_rope_ex;
 * otherwise factor > 0, 0 < lo < hi and 1 <= L <= 2^31-1 (SHAPE naming the
 * value). */
typedef struct {
    double factor;           /* "factor": divides the low frequencies (8 for Llama 3.1, 32 for 3.2) */
    double low_freq_factor;  /* "low_freq_factor" (1 in Llama 3.1) */
    double high_freq_factor; /* "high_freq_factor" (4 in Llama 3.1), > low_freq_factor */
    int64_t original_max_position_embeddings; /* L (8192 in Llama 3.1) */
} pipit_rope_scaling;
PIPIT_API pipit_val pipit_rope_scaled(pipit_graph *g, pipit_val x, int heads, double theta,
                                      int64_t position_offset, const pipit_rope_scaling *scaling);
PIPIT_API pipit_val pipit_scale(pipit_graph *g, pipit_val a, double alpha);
/* x converted to float dtype dt (f32, f64 or bf16), rounded to nearest
 * even; its gradient is converted back to x's dtype. A cast of a param is
 * an op on params alone: it runs once per step, before the microbatch loop,
 * and a cast to bf16 accumulates its gradient into the param's fp32
 * gradient directly (docs/architecture.md "Precision"). */
PIPIT_API pipit_val pipit_cast(pipit_graph *g, pipit_val x, pipit_dtype dt);
/* a [...,M,K] @ b [K,N] (broadcast) or b [...,K,N] (batched, same batch).
 * trans_a / trans_b transpose the last two axes of a / b first (trans_a
 * with a broadcast b and a of rank > 2 copies a transposed, then
 * multiplies: docs/ops.md). */
PIPIT_API pipit_val pipit_matmul(pipit_graph *g, pipit_val a, pipit_val b,
                                 int trans_a, int trans_b);
/* a @ b^T: the tied language-model head, logits = h @ wte^T. */
PIPIT_API pipit_val pipit_matmul_nt(pipit_graph *g, pipit_val a, pipit_val b);
PIPIT_API pipit_val pipit_bias_add(pipit_graph *g, pipit_val x /*[...,N]*/,
                                   pipit_val bias /*[N]*/);
PIPIT_API pipit_val pipit_layernorm(pipit_graph *g, pipit_val x, pipit_val w,
                                    pipit_val b, double eps);
PIPIT_API pipit_val pipit_gelu(pipit_graph *g, pipit_val x); /* tanh approx. */
/* Fused causal self-attention: qkv [B,T,3C] (q | k | v), heads H -> [B,T,C]. */
PIPIT_API pipit_val pipit_attention(pipit_graph *g, pipit_val qkv, int heads);
/* Attention with separate q [B,T,heads*D], k and v [B,S,kv_heads*D]:
 * softmax(q k^T * scale) v per head -> [B,T,heads*D]. Grouped-query:
 * kv_heads divides heads and q head h reads kv head h / (heads/kv_heads)
 * (kv_heads 0: = heads). causal != 0 masks keys after the query (needs
 * S == T). scale 0: 1/sqrt(D). Flash-style: the backward recomputes the
 * probabilities, no [T,S] tensor is kept between forward and backward. */
typedef struct {
    int heads, kv_heads, causal;
    double scale;
} pipit_attention_opts;
PIPIT_API pipit_val pipit_attention_qkv(pipit_graph *g, pipit_val q, pipit_val k, pipit_val v,
                                        const pipit_attention_opts *o);
/* Packed documents: attention where no token attends across a document
 * boundary. qkv [B,T,(heads+2*kv_heads)*D] holds per row q | k | v (GPT-2's
 * packed qkv when kv_heads = heads; concat(q, k, v) along the last axis
 * otherwise); doc i32 [B,T] is each token's document id, non-decreasing
 * along every sequence (pipit_step refuses a fed sequence that decreases,
 * naming the input, microbatch and position). A query sees the keys of its
 * own document only (and, causal, not later ones). Options as
 * pipit_attention_qkv's (scale 0: 1/sqrt(D)). One document per sequence
 * gives pipit_attention's (kv_heads = heads, causal) bits. -> [B,T,heads*D]. */
PIPIT_API pipit_val pipit_attention_docs(pipit_graph *g, pipit_val qkv, pipit_val doc,
                                         const pipit_attention_opts *o);
/* Packed documents in the model builders (pipit_gpt2.h, pipit_llama.h),
 * set before building as the tensor-parallel T: on = 1 makes them declare
 * the input "documents" (i32 [B,T]) and mask attention by it
 * (pipit_attention_docs); 0 (a new graph's): one sequence, the graph as
 * before. INVALID for another value; MISUSE for a bad handle.
 * pipit_graph_documents: the setting (0 for a bad handle). */
PIPIT_API pipit_status pipit_graph_set_documents(pipit_graph *g, int on);
PIPIT_API int pipit_graph_documents(const pipit_graph *g);
/* Softmax cross-entropy, mean over all rows: logits [...,V], targets i32 [...]. */
PIPIT_API pipit_val pipit_xent_mean(pipit_graph *g, pipit_val logits, pipit_val targets);
/* The LM head and its cross-entropy fused: the mean over rows of the
 * softmax cross-entropy of the logits h W^T, for h [..., d], W [V, d]
 * (the head's weight as a tied embedding or lm_head stores it) and
 * targets i32 [...] in [0, V): pipit_xent_mean(g, pipit_matmul(g, h, W, 0,
 * 1), targets) to rounding, but the [rows, V] logits and their gradient
 * are never stored. The forward walks the vocabulary in chunks and keeps
 * one log-sum-exp and one target logit per row; the backward recomputes
 * each chunk's logits once and forms dh and dW from them (4 head GEMMs'
 * work where the unfused head does 3). f32, f64 or bf16 h and W (one
 * dtype; bf16: logits, sums and losses in fp32, dh and dW rounded once).
 * Targets outside [0, V) are refused by the step, as pipit_xent_mean's. */
PIPIT_API pipit_val pipit_head_xent_mean(pipit_graph *g, pipit_val h, pipit_val W, pipit_val targets);
PIPIT_API pipit_val pipit_sum(pipit_graph *g, pipit_val x);   /* -> scalar */
PIPIT_API pipit_val pipit_mean(pipit_graph *g, pipit_val x);  /* -> scalar */
PIPIT_API pipit_val pipit_reshape(pipit_graph *g, pipit_val x, int ndim,
                                  const int64_t *shape);
/* Swaps two axes. */
PIPIT_API pipit_val pipit_transpose(pipit_graph *g, pipit_val x, int axis0, int axis1);
/* Stage boundary: identity whose output lives one pipeline stage later. */
PIPIT_API pipit_val pipit_yield(pipit_graph *g, pipit_val x);

/* Post-loop ops. pipit_grad_of is the accumulated gradient of `param` after
 * the microbatch loop (summed over microbatches and uses, before clipping).
 * Ops on it and on params form the post-loop region, which runs once per
 * step on the ranks that hold the param; pipit_set_grad makes one of its
 * values the gradient that clipping and the optimizer use (a custom
 * gradient transform). Every transform sees the untransformed gradients.
 * Post-loop ops may not read graph inputs or values the step computes. */
PIPIT_API pipit_val pipit_grad_of(pipit_graph *g, pipit_val param);
PIPIT_API pipit_status pipit_set_grad(pipit_graph *g, pipit_val param, pipit_val grad);

/* ---------------------------------------------------- tensor parallelism */

/* The local mesh (DESIGN 2.6, docs/architecture.md "The local mesh"): with
 * options.tensor_parallel = T > 1 every pipeline stage runs on T world
 * ranks, and the graph describes ONE of them (SPMD): each rank runs the
 * same per-rank program on its own shard of the sharded parameters, and
 * the T ranks meet in two ops that are each other's gradient (Megatron's
 * f and g):
 *   pipit_tp_copy(x)  identity forward, all-reduce of the gradient backward
 *                     (enter a region of sharded work: before a
 *                     column-parallel matmul);
 *   pipit_tp_sum(x)   all-reduce forward, identity backward (leave it:
 *                     after a row-parallel matmul, a vocab-parallel
 *                     embedding).
 * Their all-reduce adds the T values in rank order, ((x0 + x1) + x2) ...,
 * so for a fixed T the bits do not depend on message arrival, threads vs
 * MPI processes, the schedule, P or D. The graph's T is set once, before
 * the first sharded param or collective (pipit_graph_set_tensor_parallel;
 * default 1, where every collective is an identity).
 *
 * A sharded param is declared with its FULL shape; the graph holds the
 * local shard: `axis` cut into T equal parts (rank t holds part t), or,
 * with parts = k > 1, the axis is k equal blocks each cut into T (rank t
 * holds part t of every block: GPT-2's packed [C, 3C] q|k|v projection is
 * parts = 3). Sharded params may feed only ops with a sharded rule --
 * matmul (either of its last two axes: column- or row-parallel), bias_add
 * (the bias of a column-parallel output) and embed (rows: vocab-parallel,
 * an index of another rank's shard reads zeros) -- anything else is
 * refused by pipit_compile, naming the param and the op. Everything the
 * program says about params speaks FULL tensors: pipit_program_param_shape,
 * _numel, get/set_param, get_grad and the optimizer state gather and split
 * the shards by name and axis, so checkpoints and inits are the same
 * whatever T (pipit_io.h files load under any P x T x D).
 *
 * A two-layer MLP, column-parallel then row-parallel (examples/tp_mlp.c):
 *
 *   pipit_graph_set_tensor_parallel(g, T);
 *   pipit_val x  = pipit_input(g, "x", PIPIT_F32, 2, (int64_t[]){B, C});
 *   pipit_val w1 = pipit_param_sharded(g, "w1", PIPIT_F32, 2, (int64_t[]){C, F}, 1, 1);  // columns
 *   pipit_val b1 = pipit_param_sharded(g, "b1", PIPIT_F32, 1, (int64_t[]){F}, 0, 1);
 *   pipit_val w2 = pipit_param_sharded(g, "w2", PIPIT_F32, 2, (int64_t[]){F, C}, 0, 1);  // rows
 *   pipit_val b2 = pipit_param(g, "b2", PIPIT_F32, 1, (int64_t[]){C});                   // replicated
 *   pipit_val h  = pipit_gelu(g, pipit_bias_add(g, pipit_matmul(g, pipit_tp_copy(g, x), w1, 0, 0), b1));
 *   pipit_val y  = pipit_bias_add(g, pipit_tp_sum(g, pipit_matmul(g, h, w2, 0, 0)), b2);  // [B, C] on every rank
 *   ... pipit_compile(g, loss, &(pipit_options){.tensor_parallel = T, ...}, &p);
 *
 * pipit_graph_set_tensor_parallel: INVALID for T outside 1..64 or a change
 * of T once the graph holds sharded params or collectives; MISUSE for a bad
 * handle. pipit_graph_tensor_parallel: the graph's T (0 for a bad handle). */
PIPIT_API pipit_status pipit_graph_set_tensor_parallel(pipit_graph *g, int T);
PIPIT_API int pipit_graph_tensor_parallel(const pipit_graph *g);
/* A param of full shape `shape` sharded along `axis` (negative: from the
 * end) in `parts` blocks over the graph's T ranks; its value in the graph
 * has the local shape (axis divided by T). Poisons the graph (SHAPE) when
 * the axis does not split into parts x T, naming the param. */
PIPIT_API pipit_val pipit_param_sharded(pipit_graph *g, const char *name, pipit_dtype dt, int ndim,
                                        const int64_t *shape, int axis, int parts);
PIPIT_API pipit_val pipit_tp_copy(pipit_graph *g, pipit_val x);
PIPIT_API pipit_val pipit_tp_sum(pipit_graph *g, pipit_val x);
/* Element-wise max over the T ranks (rank order; ties are equal bits), no
 * gradient: its output counts as a constant in the backward. */
PIPIT_API pipit_val pipit_tp_max(pipit_graph *g, pipit_val x);
/* The vocab-parallel cross-entropy: logits [..., V/T] are this rank's
 * classes [t V/T, (t+1) V/T) (a vocab-parallel head: h @ W_shard^T),
 * targets i32 [...] global ids in [0, V); the mean over rows of
 * log sum exp - target logit, where the row max, the sum of exponentials
 * and the target logit are each reduced over the T ranks (no rank holds a
 * full row). With T = 1 it equals pipit_xent_mean to rounding. */
PIPIT_API pipit_val pipit_tp_xent_mean(pipit_graph *g, pipit_val logits, pipit_val targets);
/* The vocab-parallel pipit_head_xent_mean: W [V/T, d] is this rank's
 * shard of rows (pipit_param_sharded along axis 0: classes [t V/T,
 * (t+1) V/T)), h the head's input as every rank holds it (through
 * pipit_tp_copy), targets global ids in [0, V). Each rank forms the
 * log-sum-exp and target logit over its classes with the fused op; they
 * are combined as pipit_tp_xent_mean combines its sums (three
 * all-reduces of one number per row). With T = 1 it equals
 * pipit_head_xent_mean to rounding. */
PIPIT_API pipit_val pipit_tp_head_xent_mean(pipit_graph *g, pipit_val h, pipit_val W, pipit_val targets);

/* Sequence parallelism (Megatron's, beside tensor parallelism;
 * docs/architecture.md "The local mesh"): between the tensor-parallel
 * matmuls (norms, residual adds) rank t of a stage holds block t of the
 * sequence axis instead of the whole sequence. Three ops along `axis`
 * (negative: from the end) over the graph's T ranks, blocks in rank order:
 *   pipit_sp_gather(x)   all-gather: the axis T times longer, rank t's x as
 *                        block t (enter a column-parallel matmul); its
 *                        gradient is the reduce-scatter;
 *   pipit_sp_scatter(x)  reduce-scatter: the axis T times shorter, rank t
 *                        gets the sum of every rank's block t, added in
 *                        rank order (the same bits pipit_tp_sum gives those
 *                        elements; leave a row-parallel matmul); its
 *                        gradient is the all-gather;
 *   pipit_sp_split(x)    rank t's block t of a value every rank holds (no
 *                        message); its gradient is the all-gather.
 * The scatter and the split need the axis to divide by T (SHAPE
 * otherwise, naming the axis); at T = 1 all three are the identity. A
 * param read inside the sequence-parallel region (a norm's weight) gets a
 * partial gradient on each rank: read it through pipit_tp_copy, whose
 * gradient is their sum.
 * pipit_graph_set_sequence_parallel(g, 1) tells the model builders
 * (pipit_gpt2_build, pipit_llama_build) to build this way: the stream,
 * norms and residual adds hold [B, S/T, d], pipeline messages 1/T of the
 * activation, and the results equal the T-rank run without it to
 * rounding (1e-6; the norms' weight gradients add T partial sums). on is
 * 0 or 1 (INVALID otherwise), MISUSE for a bad handle;
 * pipit_graph_sequence_parallel: the setting (0 for a bad handle). */
PIPIT_API pipit_status pipit_graph_set_sequence_parallel(pipit_graph *g, int on);
PIPIT_API int pipit_graph_sequence_parallel(const pipit_graph *g);
PIPIT_API pipit_val pipit_sp_gather(pipit_graph *g, pipit_val x, int axis);
PIPIT_API pipit_val pipit_sp_scatter(pipit_graph *g, pipit_val x, int axis);
PIPIT_API pipit_val pipit_sp_split(pipit_graph *g, pipit_val x, int axis);

/* ------------------------------------------------------------- schedules */

typedef enum {
    PIPIT_TASK_F = 0,  /* forward of (stage, microbatch) */
    PIPIT_TASK_B = 1,  /* backward: input gradients only */
    PIPIT_TASK_W = 2,  /* backward: weight gradients only */
    PIPIT_TASK_BW = 3  /* fused backward */
} pipit_task_kind;

typedef struct {
    uint8_t kind;      /* pipit_task_kind */
    int16_t stage;
    int32_t mb;
} pipit_task;

/* Built-in schedule generators. P = pipeline ranks, V = stages per rank.
 * They validate nothing about M until pipit_schedule_build is called. */
typedef enum {
    PIPIT_SCHED_GPIPE = 0,
    PIPIT_SCHED_1F1B,
    PIPIT_SCHED_EAGER_1F1B,
    PIPIT_SCHED_INTERLEAVED_1F1B,
    PIPIT_SCHED_INTERLEAVED_GPIPE,
    PIPIT_SCHED_ZB_H1,
    PIPIT_SCHED_DUALPIPEV,
    PIPIT_SCHED_ZB_H2,          /* zero bubble H2: B/W split, 2P-1 in flight */
    PIPIT_SCHED_ZB_V,           /* zero bubble V: stages r and 2P-1-r, B/W split */
    PIPIT_SCHED_INTERLEAVED_ZB, /* interleaved 1F1B with B/W split (PyTorch's) */
    PIPIT_SCHED_V_HALF,         /* controllable memory: ZB-V's placement, (P+2)/2 in flight */
    PIPIT_SCHED_V_MIN,          /* controllable memory: ZB-V's placement, (P+4)/3 in flight */
    PIPIT_SCHED_COUNT
} pipit_schedule_kind;

/* Builds a built-in schedule for P ranks, V stages per rank, M microbatches.
 * PIPIT_STATUS_SCHEDULE with a message when M or V violate its constraints. */
PIPIT_API pipit_status pipit_schedule_build(pipit_schedule_kind kind, int P, int V,
                                            int M, pipit_schedule **out);
/* Parses a name ("gpipe", "1f1b", ...) into a kind; -1 if unknown. */
PIPIT_API int pipit_schedule_kind_from_name(const char *name);
PIPIT_API const char *pipit_schedule_kind_name(pipit_schedule_kind kind);
/* A custom schedule: S stages, stage_rank[S] maps stages to P ranks, and
 * per rank an ordered task list. Copies its inputs. Checked by
 * pipit_schedule_check, not here. */
PIPIT_API pipit_status pipit_schedule_custom(int P, int S, int M, const int *stage_rank,
                                             const int *ntasks, const pipit_task *const *tasks,
                                             pipit_schedule **out);
/* Reads the text format (docs/schedules.md). */
PIPIT_API pipit_status pipit_schedule_load(const char *path, pipit_schedule **out);
/* Checks completeness, placement and freedom from deadlock. */
PIPIT_API pipit_status pipit_schedule_check(const pipit_schedule *s);
PIPIT_API void pipit_schedule_free(pipit_schedule *s);

/* Inspection (src/schedule/schedule_query.c). A NULL or out-of-range
 * argument gives 0 (or -1 where noted) and sets pipit_errmsg. */
PIPIT_API int pipit_schedule_ranks(const pipit_schedule *s);        /* P */
PIPIT_API int pipit_schedule_stages(const pipit_schedule *s);       /* S */
PIPIT_API int pipit_schedule_microbatches(const pipit_schedule *s); /* M */
/* V = S / P when every rank holds the same number of stages, else 0. */
PIPIT_API int pipit_schedule_virtual(const pipit_schedule *s);
/* The built-in kind it was built as, or -1 for a custom or loaded one
 * (not pipit_schedule_kind: that name is the enum type). */
PIPIT_API int pipit_schedule_get_kind(const pipit_schedule *s);
/* 1 if it uses separate B and W tasks (zero-bubble style), else 0. */
PIPIT_API int pipit_schedule_split_bw(const pipit_schedule *s);
/* Rank that owns `stage` (0 <= stage < S), -1 if out of range. */
PIPIT_API int pipit_schedule_stage_rank(const pipit_schedule *s, int stage);
/* Length of rank's task list (0 <= rank < P). */
PIPIT_API int pipit_schedule_num_tasks(const pipit_schedule *s, int rank);
/* Task i of rank's list, in execution order. MISUSE for NULL, INVALID for
 * an index out of range. */
PIPIT_API pipit_status pipit_schedule_task(const pipit_schedule *s, int rank, int i, pipit_task *out);

/* ------------------------------------------------------- optimizer, step */

typedef enum { PIPIT_OPT_ADAMW = 0, PIPIT_OPT_SGD = 1 } pipit_optimizer_kind;

typedef struct {
    pipit_optimizer_kind kind;
    double lr, beta1, beta2, eps, weight_decay;
} pipit_optimizer;

PIPIT_API pipit_optimizer pipit_adamw(double lr, double beta1, double beta2, double eps,
                                      double weight_decay);
PIPIT_API pipit_optimizer pipit_sgd(double lr);

/* Learning-rate schedule: a linear warm-up, then constant, cosine or
 * linear decay (the shape of nanoGPT's get_lr). The update of optimizer
 * step t (1-based: the t-th update since the start, pipit_program_opt_steps()
 * after it, so a resumed run continues the schedule) uses lr(t), with
 * lr = optimizer.lr, K = warmup, N = decay_steps, it = t - 1:
 *   t <= K (warmup, any kind):  lr * t / K = lr*(it+1)/K, so update K runs
 *                               at lr (llm.c's and build-nanogpt's warm-up;
 *                               nanoGPT's train.py divides by K + 1,
 *                               lr*(it+1)/(K+1) for it < K, and reaches lr
 *                               one update later, at it = K)
 *   CONSTANT, t > K:            lr                (exactly: the bits of a
 *                                                  run without a schedule)
 *   COSINE / LINEAR, t > K:     r = (it - K) / (N - K);
 *                               it > N: min_lr;
 *                               else min_lr + c * (lr - min_lr), with
 *                               c = 0.5 * (1 + cos(pi * r))  (COSINE)
 *                               c = 1 - r                    (LINEAR)
 * AdamW's weight decay uses lr(t) too (as PyTorch's schedulers do). The
 * zero value is a constant lr without warmup (as before schedules). */
typedef enum { PIPIT_LR_CONSTANT = 0, PIPIT_LR_COSINE = 1, PIPIT_LR_LINEAR = 2 } pipit_lr_kind;

typedef struct {
    pipit_lr_kind kind;
    int64_t warmup;       /* K >= 0 warm-up steps (0: none) */
    int64_t decay_steps;  /* N > K for COSINE / LINEAR: the step where min_lr
                             is reached; 0 for CONSTANT */
    double min_lr;        /* in [0, lr], finite, for COSINE / LINEAR; 0 for CONSTANT */
} pipit_lr_schedule;

/* lr(step) of the formula above for base learning rate `lr`. Checks
 * nothing but its arguments: NULL s, step < 1, an unknown kind,
 * decay_steps <= warmup for a decaying kind, an lr that is not a finite
 * number >= 0, or (decaying kinds) a min_lr outside [0, lr] give 0 and set
 * the message (a NaN or negative rate is never returned). */
PIPIT_API double pipit_lr_at(const pipit_lr_schedule *s, double lr, int64_t step);

/* Compile options: every zero field means "default". */
typedef struct {
    pipit_schedule *schedule;   /* NULL: one rank, sequential (borrowed) */
    int microbatches;           /* M, default 1 */
    int threads;                /* compute threads per rank, default 1 */
    /* What the backward recomputes instead of keeping from the forward
     * (pipit_remat; the same bits either way):
     * PIPIT_REMAT_NONE (0) keeps every value a backward reads;
     * PIPIT_REMAT_FULL (1) keeps only each stage's inputs and runs the
     *   stage's forward again inside its backward (about +1/3 compute);
     * PIPIT_REMAT_POINTWISE (2) recomputes the cheap elementwise values
     *   whose inputs the backward keeps anyway: GELU/SiLU outputs from
     *   their inputs, a product of two such values, and their casts
     *   (SwiGLU keeps its gate and up, not silu(gate) nor the product;
     *   GPT-2's MLP keeps the GELU's input only); no matmul runs twice. */
    int remat;
    pipit_optimizer optimizer;  /* default: AdamW(3e-4, .9, .95, 1e-8, 0) */
    double clip_norm;           /* 0: no clipping */
    /* Data parallelism: D replicas of the pipeline (world ranks w = d*P + p,
     * threads of this process or one MPI process each). Replica d runs
     * microbatches d*M .. d*M+M-1 of the step's M*D; gradients are summed
     * over the replicas in replica order, so every replica keeps bitwise
     * equal parameters. Default 1. */
    int data_parallel;
    int zero1;                  /* D > 1: optimizer state sharded over the replicas (ZeRO-1) */
    /* ZeRO stage over the D replicas (0..3; D = 1 or forward_only: no effect).
     * 1: AdamW moments and the update sharded (zero1 = 1 spells the same).
     * 2: also the gradients: each replica keeps its reduced shard between
     *    steps; the full-size gradient block exists only during a step.
     * 3: also the parameters: each replica keeps its shard between steps;
     *    the stage's full parameters are all-gathered before the microbatch
     *    loop and released when it ends (at the step's end if the post-loop
     *    reads a param).
     * Bitwise the same results as ZeRO-1. zero1 = 1 with zero 2 or 3 is
     * INVALID (contradictory). */
    int zero;
    /* 1 with zero = 3 only (INVALID otherwise; no effect at D = 1 or
     * forward_only): memory over speed. Each param of the stage is
     * all-gathered right before the first instruction of a task (the
     * pre-loop, one microbatch's F, B or W) that reads it and released right
     * after that task's last read of it, so a rank holds the gathered
     * params of the layers it is running, not the whole stage, and gathers
     * each once per task instead of once per step (torchtitan's
     * reshard_after_forward; under dtype bf16 the loop reads the pre-loop's
     * bf16 copies, so the fp32 params are released after the pre-loop).
     * The cpu backend releases the pages; INVALID on a device backend.
     * Bitwise the same results. */
    int reshard_after_forward;
    /* Tensor parallelism: T world ranks per pipeline stage (the graph's T,
     * pipit_graph_set_tensor_parallel; a mismatch is INVALID). World rank
     * w = (d*P + p)*T + t runs rank t of pipeline rank p of replica d: the
     * T ranks of a stage are consecutive, so `mpirun --map-by` keeps them
     * on one host. Default 1. */
    int tensor_parallel;
    pipit_lr_schedule lr_schedule; /* zero: constant optimizer.lr */
    /* Forward-only (inference / evaluation) program: no autodiff, only the
     * schedule's F tasks (with no schedule: each microbatch's forward in
     * order), no gradient, accumulator or optimizer memory; pipit_step
     * computes the loss only (update must be 0). The graph is left as it
     * was, so it may also be compiled for training (before or after).
     * pipit_program_get_grad and the optimizer-state calls return INVALID. */
    int forward_only;
    /* Values to keep for pipit_program_get_output after each step (borrowed
     * for the call only): per-microbatch values of the step (not params,
     * inputs or values of params alone). Their arena buffers stay alive to
     * the end of the step. Training programs accept them too. */
    const pipit_val *outputs;
    int noutputs;
    /* Where the program runs (borrowed for the call only): NULL, "" or
     * "cpu" (the default) for the CPU backend; "cuda" for NVIDIA GPUs, in
     * a build configured with -DPIPIT_CUDA=ON (docs/cuda.md). On "cuda",
     * world rank w runs on GPU w mod (number of GPUs); parameters,
     * gradients, optimizer state and activations live in device memory;
     * feeds, losses and the pipit_program_get_* / set_* calls copy to and
     * from the host. options.threads is ignored there (one host thread per
     * rank queues its work). INVALID for an unknown device or one this
     * build lacks; RUNTIME when the machine has no CUDA device. */
    const char *device;
    /* device "cuda" only: GEMMs on TF32 tensor cores (fp32 storage and
     * accumulation, products of inputs rounded to 10-bit mantissas;
     * docs/cuda.md states the error bound). 0 (default): full fp32. INVALID
     * with the cpu backend. */
    int tf32;
    /* Memory admission (docs/refuses.md): before it allocates a rank's
     * memory (and, as a lower bound, before it plans), pipit_compile adds
     * up what this process will hold -- parameters, gradients, optimizer
     * moments, accumulators, activation arenas and its own plan on the
     * CPU backend, and the feeds of one step, which the caller holds --
     * and refuses with NOMEM, naming the need, the limit and the largest
     * consumers, when that is more than the process may use: the smallest
     * of physical RAM (shared by the MPI processes of the machine), the
     * cgroup memory limit and RLIMIT_AS / RLIMIT_DATA less what is mapped
     * already. mem_limit > 0: this many bytes instead of the detected
     * limit. no_mem_check = 1: no admission (an allocation that fails is
     * still NOMEM, but the kernel may end the process instead). */
    double mem_limit;
    int no_mem_check;
    /* Compute precision (docs/architecture.md "Precision"). PIPIT_F32 (0,
     * the default): every value as the graph declares it. PIPIT_BF16: mixed
     * precision on a graph built in f32 -- the params stay fp32 masters (as
     * do gradients, their data-parallel sums, the norm, the optimizer and
     * checkpoints), and the program runs a bf16 copy of the graph: each param
     * a bf16 op reads cast to bf16 once per step before the microbatch loop
     * (on the ranks that read it), f32 inputs cast where a bf16 op reads
     * them, the activations bf16 or fp32 as options.bf16_policy says (bf16
     * values are computed in fp32 by the kernels and rounded once); per-row
     * losses and the loss stay f32, and each microbatch's gradient is added
     * into fp32 accumulators. The graph is left as it was (the program owns the copy),
     * so it may be compiled again in either precision; pipit_program_get_output
     * returns f32 values converted from their bf16 copies. INVALID for another
     * dtype, an f64 param the loss depends on, or a backend without bf16
     * kernels. */
    pipit_dtype dtype;
    /* With dtype PIPIT_BF16, which values are bf16 (the table in
     * docs/architecture.md "Precision"). PIPIT_BF16_AUTOCAST (0, the
     * default) tracks fp32 as PyTorch's autocast does: matmul and attention
     * inputs and outputs and the stage-to-stage messages are bf16; the
     * residual stream (from the embedding on: an add of fp32 and bf16 is
     * fp32), the norms, softmax and the losses stay fp32. PIPIT_BF16_ALL (1)
     * makes every activation bf16 (the policy before: the least memory,
     * furthest from fp32). Ignored with PIPIT_F32; INVALID for another value. */
    pipit_bf16_policy bf16_policy;
    /* 1: plan only (`pipit plan`: planning a job bigger than this machine).
     * pipit_compile builds and checks the plan as for a run (stages,
     * schedule, memory plan, every rank's program) but allocates no rank
     * memory, opens no transport and needs no MPI launch of P x T x D
     * processes. The program can be inspected (pipit_program_print_plan,
     * pipit_program_write_plan_json, the param queries, num_ranks), not
     * run: pipit_step, the get/set calls of params, gradients, optimizer
     * state and outputs, profiles and traces return INVALID. The memory
     * admission then checks this process for the plan alone and, with
     * mem_limit > 0, every world rank against mem_limit (what each would
     * hold: its blocks and its process's feeds). 0 (default): a program
     * that runs. */
    int plan_only;
    /* Expert parallelism (E > 1): by default, where a rank's task list has
     * a forward and a backward of different microbatches side by side (F
     * then B/BW, or B/BW then F), each containing an all-to-all, and the
     * schedule stays deadlock-free with the two run as one, they are
     * lowered as an overlapped pair: each task runs up to its next
     * all-to-all's start, then the other does, so one microbatch's blocks
     * move while the other computes (DualPipeV's overlapped chunks,
     * Megatron's combined 1F1B). The same bits either way. 1: no pairs
     * (every all-to-all ends before the rank computes on); INVALID for
     * another value. */
    int no_a2a_overlap;
} pipit_options;

/* Differentiates `loss` (a scalar) w.r.t. every param, infers stages from
 * the yields, checks the schedule against them, plans memory and builds the
 * per-rank programs; ops on params alone become the pre-loop region (run
 * once per step). The backward is appended to `g`, so a graph is compiled
 * once (again: PIPIT_STATUS_MISUSE) and must outlive the program.
 * Errors: the graph's build error; INVALID (no param, loss not in the last
 * stage, bad options); SCHEDULE (stage count, microbatches, checker);
 * DEADLOCK; NOMEM. The message names the problem. */
PIPIT_API pipit_status pipit_compile(pipit_graph *g, pipit_val loss,
                                     const pipit_options *opt, pipit_program **out);
PIPIT_API void pipit_program_free(pipit_program *p);
PIPIT_API const char *pipit_program_errmsg(const pipit_program *p);

/* Parameters, addressed by name. Data is copied in / out (f32 row-major).
 * In a multi-process (MPI) job the get_* calls below are collective: every
 * process calls them in the same order and every process receives the
 * data from the rank that holds it; set_* write the copies this process's
 * ranks hold (pass the same data everywhere). */
PIPIT_API int pipit_program_num_params(const pipit_program *p);
PIPIT_API const char *pipit_program_param_name(const pipit_program *p, int i);
PIPIT_API pipit_status pipit_program_param_shape(const pipit_program *p, const char *name,
                                                 int *ndim, int64_t *shape);
/* Declared dtype and element count of a param (src/runtime/program_query.c). */
PIPIT_API pipit_status pipit_program_param_dtype(const pipit_program *p, const char *name,
                                                 pipit_dtype *out);
PIPIT_API pipit_status pipit_program_param_numel(const pipit_program *p, const char *name,
                                                 int64_t *out);
PIPIT_API pipit_status pipit_program_set_param(pipit_program *p, const char *name,
                                               const void *data, size_t nbytes);
PIPIT_API pipit_status pipit_program_get_param(const pipit_program *p, const char *name,
                                               void *data, size_t nbytes);
/* Gradient of the last step, by name: accumulated over microbatches and
 * uses, after any pipit_set_grad transform, before clipping. */
PIPIT_API pipit_status pipit_program_get_grad(const pipit_program *p, const char *name,
                                              void *data, size_t nbytes);

/* Copies output `v` (one of options.outputs) of microbatch mb (0 <= mb <
 * M x D) as computed by the last step into data (nbytes = its size).
 * INVALID for a value that is not an output, an mb out of range, a wrong
 * size, or before the first step. Collective in an MPI job (as get_param). */
PIPIT_API pipit_status pipit_program_get_output(const pipit_program *p, pipit_val v, int mb, void *data,
                                                size_t nbytes);
/* 1 for a forward-only program (options.forward_only), else 0. */
PIPIT_API int pipit_program_forward_only(const pipit_program *p);

/* Optimizer state, for checkpoints that resume exactly: per param the
 * AdamW first and second moments (which = 0: exp_avg, 1: exp_avg_sq), and
 * the number of updates taken (bias correction). Setting writes every
 * holder's copy. */
PIPIT_API pipit_status pipit_program_get_opt_state(const pipit_program *p, const char *name, int which,
                                                   void *data, size_t nbytes);
PIPIT_API pipit_status pipit_program_set_opt_state(pipit_program *p, const char *name, int which,
                                                   const void *data, size_t nbytes);
PIPIT_API int64_t pipit_program_opt_steps(const pipit_program *p);
PIPIT_API pipit_status pipit_program_set_opt_steps(pipit_program *p, int64_t steps);

/* One microbatch's inputs: one buffer per pipit_input, by name. nbytes is
 * required and must equal the input's declared size (numel x dtype size):
 * pipit_step refuses a feed of another size with INVALID, before it reads
 * any data. */
typedef struct {
    const char *name;
    const void *data;      /* dtype and shape as declared by pipit_input */
    size_t nbytes;         /* bytes at data */
} pipit_feed;

typedef struct {
    double loss;           /* mean loss over all microbatches */
    double grad_norm;      /* global norm before clipping */
    double ms;             /* wall time of the step */
    size_t peak_bytes;     /* peak activation bytes (max over ranks) */
    double bubble;         /* measured: 1 - sum of rank busy time / (ranks x wall time) */
    double lr;             /* learning rate of this step's update, lr(t) of the
                              schedule (update = 0: of the next update) */
} pipit_metrics;

/* One training step. feeds[m*nfeed .. m*nfeed+nfeed-1] are microbatch m's
 * inputs (M*D*nfeed entries for M microbatches and D replicas; each input
 * exactly once per microbatch, extra names are ignored; in a multi-process
 * job only this process's replica's entries are read, the others may hold
 * NULL data). The array's length is not known here: pipit_step_feeds
 * takes it and refuses a short one. The loss is the mean over all M*D
 * microbatches. update = 0 computes loss and grads only.
 * INVALID for a missing or repeated feed, NULL data, an nbytes other than
 * the input's size, or an index outside what its embedding or loss
 * accepts (all checked before anything runs); RUNTIME with
 * "rank k failed: ..." if a rank fails, after which the parameters may be
 * partly updated: reload a checkpoint. */
PIPIT_API pipit_status pipit_step(pipit_program *p, const pipit_feed *feeds, int nfeed,
                                  int update, pipit_metrics *metrics);
/* pipit_step told how many entries the feed array has: nfeeds_total must
 * be exactly M x D x nfeed (INVALID before anything runs otherwise, naming
 * both counts), so an array laid out for fewer microbatches or replicas
 * (a D > 1 program given M microbatches' feeds) is refused instead of read
 * past its end. Otherwise the same call as pipit_step, which stays for
 * callers that know their array is long enough. */
PIPIT_API pipit_status pipit_step_feeds(pipit_program *p, const pipit_feed *feeds, int64_t nfeeds_total, int nfeed,
                                        int update, pipit_metrics *metrics);

/* Profiling: on != 0 starts accumulating the time of every op and
 * instruction kind over the following steps, from zero (calling it again
 * with on != 0 resets the counters, e.g. to leave out a warm-up step);
 * on = 0 stops accumulating and keeps the counters. Print them with
 * pipit_program_print_profile (pipit_inspect.h). */
PIPIT_API pipit_status pipit_program_set_profile(pipit_program *p, int on);

/* The last step as measured, per world rank (src/runtime/program_query.c).
 * Times are seconds from the start of the step. num_ranks is the number of
 * world ranks, P x T x D; this process ran pipit_process_count() == 1 ? all of
 * them : only rank pipit_process_rank(). */
PIPIT_API int pipit_program_num_ranks(const pipit_program *p);
/* Wall time of the last step (thread start to join: the microbatch loop
 * and the post-loop), in seconds; 0 before the first step. */
PIPIT_API double pipit_program_step_wall(const pipit_program *p);

typedef struct {
    int ntasks;               /* the rank's task list (the schedule's order) */
    const pipit_task *tasks;  /* [ntasks] */
    const double *start;      /* [ntasks] when each task started */
    const double *end;        /* [ntasks] when each task ended */
    double busy;              /* compute seconds: task time minus receive
                                 waits, plus the post-loop */
    double recv_wait;         /* seconds blocked in receives of activations
                                 and gradients inside tasks (the loop) */
} pipit_rank_step;

/* Fills *out for a world rank this process ran (INVALID for another
 * process's). The arrays are owned by the program and overwritten by the
 * next pipit_step. */
PIPIT_API pipit_status pipit_program_last_step(const pipit_program *p, int rank, pipit_rank_step *out);

/* The bytes a world rank this process runs holds now (INVALID for another
 * process's, or a plan-only program), by kind: its live parameter,
 * gradient or AdamW-moment blocks (both moments), as the runtime keeps
 * them at the time of the call. Between steps that is what stays: under
 * options.zero 2 (D > 1) the replica's gradient shards (on host memory
 * the pages past them are given back to the system), under 3 also its
 * parameter shards; during a step (a callback) the full blocks too. A
 * shard is whole 16384-element chunks of each param, 64-byte aligned. */
typedef enum { PIPIT_HELD_PARAMS, PIPIT_HELD_GRADS, PIPIT_HELD_MOMENTS } pipit_held_kind;
PIPIT_API pipit_status pipit_program_held_bytes(const pipit_program *p, int rank, pipit_held_kind kind, size_t *bytes);

/* Writes the last step as a Chrome / Perfetto trace (JSON, one track per
 * world rank this process ran, one slice per task), or as an SVG timeline
 * when `path` ends in ".svg"; atomically. PIPIT_STATUS_IO on failure. */
PIPIT_API pipit_status pipit_program_write_trace(const pipit_program *p, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* PIPIT_H */
