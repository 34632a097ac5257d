/*
 * graph.h — the graph IR: SSA nodes with static shapes and dtypes, kept in
 * one growable array owned by the graph (no per-node free), and the op table
 * interface generated from ops.def.
 */
#ifndef PIPIT_GRAPH_H
#define PIPIT_GRAPH_H

#include "util/common.h"

#ifdef __cplusplus
extern "C" { /* the CUDA backend (.cu files) includes this header from C++ */
#endif

#define OPF_LEAF  1
#define OPF_NOVJP 2
#define OPF_COLL  4 /* an in-stage collective (tensor parallelism): lowered to an instruction, no kernel */
/* Run again in the backward for the VJPs that read the output, rather than
 * kept from the forward (autodiff.c): a gather whose input is 1/T of it. */
#define OPF_REFETCH 8

typedef enum {
#define X(NAME, str, arity, nondiff, alias, flags) PIPIT_OP_##NAME,
#include "ir/ops.def"
#undef X
    PIPIT_OP_COUNT
} pipit__opcode;

#define PIPIT_MAX_IN 4 /* attention_qkv's backward reads q, k, v and dout */

/* Node flags. */
#define NODE_BWD 1        /* created by autodiff */
#define NODE_BWD_YIELD 2  /* a backward yield: moves one stage earlier */
#define NODE_POST 4       /* backward of the pre-loop region: runs once after the loop */
#define NODE_GRADOF 8     /* INPUT leaf: the accumulated gradient of param iattr[0] */

typedef struct {
    uint16_t op;               /* pipit__opcode */
    uint8_t dtype;             /* pipit_dtype */
    uint8_t ndim;              /* 0 = scalar */
    uint8_t nin;
    uint8_t flags;             /* NODE_* */
    int32_t in[PIPIT_MAX_IN];  /* input node ids */
    int64_t shape[PIPIT_MAX_DIMS];
    double fattr[4];           /* SCALE alpha; norm eps; FILL / SUM_TO scale; RESHAPE, VIEW ... rank;
                                  VIEW element offset (exact: < 2^53); ROPE theta and llama3 scaling;
                                  attention scale */
    int64_t iattr[4];          /* MATMUL trans; heads; PERMUTE perm; EMBED_DTABLE V; axis, start,
                                  length; a target shape (RESHAPE, VIEW, SUM_TO, BROADCAST_TO, ...) */
    char *name;                /* INPUT / PARAM name (owned) */
    int32_t stage;             /* pipeline stage, -1 until inferred */
    int32_t origin;            /* forward node whose VJP created this node (-1) */
    const char *api;           /* the public call that added it ("pipit_slice"; static text), or NULL
                                  (autodiff's and other internal nodes): messages name it */
} pipit__node;

#define PIPIT_GRAPH_MAGIC 0x70697067u

struct pipit_graph {
    uint32_t magic;
    pipit__node *nodes;
    int32_t n, cap;
    pipit_status status;       /* first build error */
    char errmsg[1024];
    int32_t cur_origin;        /* set by autodiff while emitting a VJP */
    int32_t ngradset;          /* pipit_set_grad: param -> value pairs */
    int32_t (*gradset)[2];
    uint8_t cur_flags;
    int32_t tp;                /* tensor-parallel ranks per stage the graph describes one of (0: 1) */
    int32_t documents;         /* 1: the model builders pack documents (pipit_graph_set_documents) */
    int32_t sp;                /* 1: the model builders cut the sequence over T (pipit_graph_set_sequence_parallel) */
    int32_t cp;                /* context-parallel ranks the graph describes one of (0: 1; ir/cp.h) */
    int32_t ep;                /* expert-parallel ranks the graph describes one of (0: 1; ir/ep.c) */
    /* Named nodes by name (open addressing, ids, -1 empty), kept lazily:
     * nodes [0, name_upto) are in it; see pipit__graph_find_name. */
    int32_t *name_index;
    int32_t name_cap, name_count, name_upto;
};

/* Op table entry: what an op is, generated from ops.def + the functions in
 * ops.c. Kernels are not here: each backend keeps its own run table keyed
 * by the same opcodes (src/backend/). */
typedef struct {
    const char *name;
    int arity;
    unsigned nondiff;   /* bitmask of inputs without gradient */
    int alias;          /* output aliases input 0 */
    int flags;
    /* Fills node->dtype/ndim/shape from inputs and attrs; on a bad shape
     * returns PIPIT_STATUS_SHAPE with a message naming the op and shapes. */
    pipit_status (*shape)(const pipit_graph *g, pipit__node *n);
    /* Emits the gradients of the inputs given dout (ids; -1 = none). */
    void (*vjp)(pipit_graph *g, int32_t node, int32_t dout, int32_t *din);
} pipit__op_info;

extern const pipit__op_info pipit__ops[PIPIT_OP_COUNT];

/* The dtype gradients of dt values accumulate in (over microbatches, uses
 * and replicas), and the dtype of per-row losses and of sums to a scalar
 * of dt values: fp32 for bf16, dt itself otherwise. */
static inline pipit_dtype pipit__acc_dtype(pipit_dtype dt) { return dt == PIPIT_BF16 ? PIPIT_F32 : dt; }

static inline pipit__node *pipit__node_at(const pipit_graph *g, int32_t id) {
    return &g->nodes[id];
}
int64_t pipit__node_numel(const pipit__node *n);
size_t pipit__node_bytes(const pipit__node *n);
/* Rows of a [..., C] tensor (the product of all but the last axis) and C. */
int64_t pipit__node_rows(const pipit__node *n);
int64_t pipit__node_last_dim(const pipit__node *n);
/* Follows aliasing ops (reshape, yield, view) to the node that owns the bytes. */
int32_t pipit__alias_root(const pipit_graph *g, int32_t id);
/* Where value id starts inside its alias root's bytes: the sum of the
 * element offsets of the views on the way, in bytes (0 without a view). */
size_t pipit__alias_offset(const pipit_graph *g, int32_t id);
/* Whether node n runs: not a leaf, not an alias of its input (it has an
 * output buffer and an instruction). */
int pipit__node_runs(const pipit__node *n);
/* Whether it runs a backend kernel: it runs and is no collective (OPF_COLL). */
static inline int pipit__node_has_kernel(const pipit__node *n) {
    return pipit__node_runs(n) && !(pipit__ops[n->op].flags & OPF_COLL);
}

/* A matmul node's problem: a [..., M, K] (or [..., K, M] with trans_a) @
 * b [K, N] (broadcast) or b [..., K, N] (batched, same leading dims);
 * trans_b stores b as [.., N, K]. */
typedef struct {
    int ta, tb, broadcast;
    int64_t batch, M, N, K;
} pipit__mm_dims;
pipit__mm_dims pipit__matmul_dims(const pipit__node *a, const pipit__node *b, const pipit__node *n);

/* A broadcast binary op (NumPy rules, trailing axes aligned) or SUM_TO /
 * BROADCAST_TO, as a loop nest a kernel can run: `out` (for SUM_TO the
 * larger tensor, its input) is dims[0..4) (size-1 axes dropped, adjacent
 * axes merged where every operand allows, padded on the left with 1s), and
 * strides[k] walks operand k over them, 0 along the axes it is broadcast
 * along. Fills nin operands' strides; the kernels of every backend share it. */
void pipit__bcast_plan(const pipit__node *out, int nin, const pipit__node *const *in, int64_t dims[4],
                       int64_t strides[][4]);
/* A tensor seen as [outer, n, inner] around axis `axis` (0 <= axis < ndim). */
void pipit__axis_split(const pipit__node *n, int axis, int64_t *outer, int64_t *len, int64_t *inner);

/* Generic builder: appends a node (after validating inputs and running the
 * shape rule). On error the graph is poisoned and an invalid id (-1) is
 * returned. fattr/iattr may be NULL, else all 4 of each are copied (the
 * bounds make GCC refuse a shorter array: pass (double[4]){a, b}). */
int32_t pipit__node_add(pipit_graph *g, pipit__opcode op, int nin, const int32_t *in,
                        const double fattr[4], const int64_t iattr[4]);
pipit_val pipit__val(pipit_graph *g, int32_t id);
/* Records the first build error on the graph (and the thread). */
void pipit__graph_fail(pipit_graph *g, pipit_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "matmul(a [2,3], b [4,5])"-style description of a node's inputs. */
const char *pipit__node_desc(const pipit_graph *g, const pipit__node *n, char *buf, size_t len);

/* A public builder's node: validates the values (poisoning the graph with
 * a message naming fn), adds the node, names fn in its error. */
pipit_val pipit__build(pipit_graph *g, const char *fn, pipit__opcode op, int nin, const pipit_val *vin,
                       const double fattr[4], const int64_t iattr[4]);

/* pipit_param, its messages naming fn (pipit_param_sharded's refusals
 * name pipit_param_sharded). */
pipit_val pipit__param_as(pipit_graph *g, const char *fn, const char *name, pipit_dtype dt, int ndim,
                          const int64_t *shape);

/* Tensor parallelism (ir/tp.c). A sharded PARAM keeps its local shape;
 * iattr[0] = axis + 1 (0: replicated), iattr[1] = parts (the axis is
 * `parts` equal blocks, each cut into T shards: GPT-2's packed q|k|v). */
static inline int pipit__param_shard_axis(const pipit__node *n) {
    return n->op == PIPIT_OP_PARAM ? (int)n->iattr[0] - 1 : -1;
}
/* Expert parallelism (ir/ep.c): an expert param (iattr[2] = 1) holds the
 * 1/E block of its axis 0 that its replica's EP rank owns. */
static inline int pipit__param_experts(const pipit__node *n) { return n->op == PIPIT_OP_PARAM && n->iattr[2] == 1; }
static inline int pipit__graph_ep(const pipit_graph *g) { return g->ep > 0 ? g->ep : 1; }
/* The graph's T (1 when never set). */
static inline int pipit__graph_tp(const pipit_graph *g) { return g->tp > 0 ? g->tp : 1; }
/* Whether value `table` is a param sharded along its rows (axis 0): an
 * embedding of it is vocab-parallel. */
int pipit__tp_rows_sharded(const pipit_graph *g, int32_t table);
/* Checks every forward op that reads a sharded param against the ops that
 * have a sharded rule (matmul, bias_add, embed); INVALID naming the param,
 * the op and the axis otherwise. */
pipit_status pipit__tp_check_uses(const pipit_graph *g, int32_t fwd_end);

/* Internal builders for backward-only ops (used by VJP rules). */
int32_t pipit__fill(pipit_graph *g, int32_t scalar, int ndim, const int64_t *shape, double scale);
/* x[start : start+len] along axis (already checked): x itself for the
 * whole axis, a VIEW (no copy) when the range is contiguous in memory
 * (every axis before `axis` has size 1), else a SLICE (a copy). */
int32_t pipit__slice(pipit_graph *g, int32_t x, int axis, int64_t start, int64_t len);
/* x converted to float dtype dt: a CAST node, or x itself when it has dt. */
int32_t pipit__cast(pipit_graph *g, int32_t x, pipit_dtype dt);
/* A copy of g's nodes [0, n) (names, gradient transforms and status too),
 * for a program to rewrite without touching the user's graph
 * (compile/autocast.c); NULL when out of memory (message set). */
pipit_graph *pipit__graph_clone(const pipit_graph *g, int32_t n);

/* The node named `name` (params, inputs, gradient leaves), -1 if none:
 * a hash lookup, so declaring N params costs O(N), not O(N^2). */
int32_t pipit__graph_find_name(pipit_graph *g, const char *name);

/* Drops nodes [n, g->n) and their names (a failed compile's rollback). */
void pipit__graph_truncate(pipit_graph *g, int32_t n);

/* Node ids changed (a pass renumbered g->nodes): the name index is rebuilt
 * at the next lookup. */
void pipit__graph_names_moved(pipit_graph *g);

#ifdef __cplusplus
}
#endif

#endif
