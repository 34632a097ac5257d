/*
 * graph.c — graph lifecycle, the generic node builder and the public op
 * builders. Builders never fail loudly: the first error poisons the graph
 * (sticky status + message) and later builders return invalid values, so a
 * model can be written as straight-line code and checked once at compile.
 */
#include "ir/graph.h"

#include <math.h>
#include <string.h>

#include "util/checked.h"

pipit_graph *pipit_graph_new(void) {
    pipit_graph *g = pipit__calloc(1, sizeof *g);
    if (!g) {
        pipit__err(PIPIT_STATUS_NOMEM, "pipit_graph_new: out of memory");
        return NULL;
    }
    g->magic = PIPIT_GRAPH_MAGIC;
    g->cur_origin = -1;
    return g;
}

void pipit_graph_free(pipit_graph *g) {
    if (!g || g->magic != PIPIT_GRAPH_MAGIC) return;
    for (int32_t i = 0; i < g->n; i++) pipit__free(g->nodes[i].name);
    pipit__free(g->nodes);
    pipit__free(g->gradset);
    pipit__free(g->name_index);
    g->magic = 0;
    pipit__free(g);
}

/* A handle check naming the public function: MISUSE for NULL, a freed
 * graph or anything else without the graph magic. */
static int bad_graph(const pipit_graph *g, const char *fn) {
    if (!g) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: graph is NULL", fn);
        return 1;
    }
    if (g->magic != PIPIT_GRAPH_MAGIC) {
        pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid graph handle (freed, or not a pipit_graph)", fn);
        return 1;
    }
    return 0;
}

pipit_status pipit_graph_status(const pipit_graph *g) {
    if (bad_graph(g, __func__)) return PIPIT_STATUS_MISUSE;
    if (g->status != PIPIT_STATUS_OK) /* a failing call leaves its message, naming the call */
        pipit__err(g->status, "%s: the graph failed: %s", __func__, g->errmsg);
    return g->status;
}

const char *pipit_graph_errmsg(const pipit_graph *g) {
    if (bad_graph(g, __func__)) return "invalid graph handle";
    return g->errmsg;
}

void pipit__graph_fail(pipit_graph *g, pipit_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pipit__verr(s, fmt, ap);
    va_end(ap);
    if (g && g->status == PIPIT_STATUS_OK) {
        g->status = s;
        snprintf(g->errmsg, sizeof g->errmsg, "%s", pipit_errmsg());
    }
}

int64_t pipit__node_numel(const pipit__node *n) {
    int64_t k = 1;
    for (int i = 0; i < n->ndim; i++) k *= n->shape[i];
    return k;
}

int64_t pipit__node_rows(const pipit__node *n) {
    int64_t r = 1;
    for (int i = 0; i + 1 < n->ndim; i++) r *= n->shape[i];
    return r;
}

int64_t pipit__node_last_dim(const pipit__node *n) { return n->ndim ? n->shape[n->ndim - 1] : 1; }

pipit__mm_dims pipit__matmul_dims(const pipit__node *a, const pipit__node *b, const pipit__node *n) {
    pipit__mm_dims d = {(int)n->iattr[0], (int)n->iattr[1], b->ndim == 2 && a->ndim > 2, 1, 0, 0, 0};
    int ra = a->ndim, rb = b->ndim;
    d.M = d.ta ? a->shape[ra - 1] : a->shape[ra - 2];
    d.K = d.ta ? a->shape[ra - 2] : a->shape[ra - 1];
    d.N = d.tb ? b->shape[rb - 2] : b->shape[rb - 1];
    for (int i = 0; i + 2 < ra; i++) d.batch *= a->shape[i];
    return d;
}

int32_t pipit__alias_root(const pipit_graph *g, int32_t id) {
    while (pipit__ops[g->nodes[id].op].alias) id = g->nodes[id].in[0];
    return id;
}

size_t pipit__alias_offset(const pipit_graph *g, int32_t id) {
    size_t off = 0;
    for (; pipit__ops[g->nodes[id].op].alias; id = g->nodes[id].in[0])
        if (g->nodes[id].op == PIPIT_OP_VIEW)
            off += (size_t)g->nodes[id].fattr[1] * pipit__dtype_size((pipit_dtype)g->nodes[id].dtype);
    return off;
}

void pipit__bcast_plan(const pipit__node *out, int nin, const pipit__node *const *in, int64_t dims[4],
                       int64_t strides[][4]) {
    int nd = out->ndim, m = 0;
    int64_t d[PIPIT_MAX_DIMS], st[2][PIPIT_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        if (out->shape[i] == 1) continue; /* an axis of one element moves nothing */
        d[m] = out->shape[i];
        for (int k = 0; k < nin; k++) {
            int j = i - (nd - in[k]->ndim); /* trailing axes aligned; < 0: the operand lacks it */
            int64_t s = 1;
            for (int q = j + 1; j >= 0 && q < in[k]->ndim; q++) s *= in[k]->shape[q];
            st[k][m] = j < 0 || in[k]->shape[j] == 1 ? 0 : s;
        }
        int merge = m > 0; /* axis m-1 and m walk every operand as one axis */
        for (int k = 0; k < nin && merge; k++) merge = st[k][m - 1] == st[k][m] * d[m];
        if (merge) {
            d[m - 1] *= d[m];
            for (int k = 0; k < nin; k++) st[k][m - 1] = st[k][m];
        } else {
            m++;
        }
    }
    for (int i = 0; i < 4; i++) {
        int j = i - (4 - m);
        dims[i] = j < 0 ? 1 : d[j];
        for (int k = 0; k < nin; k++) strides[k][i] = j < 0 ? 0 : st[k][j];
    }
}

void pipit__axis_split(const pipit__node *n, int axis, int64_t *outer, int64_t *len, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= n->shape[i];
    for (int i = axis + 1; i < n->ndim; i++) *inner *= n->shape[i];
    *len = n->shape[axis];
}

int pipit__node_runs(const pipit__node *n) {
    return !(pipit__ops[n->op].flags & OPF_LEAF) && !pipit__ops[n->op].alias;
}

size_t pipit__node_bytes(const pipit__node *n) {
    return (size_t)pipit__node_numel(n) * pipit__dtype_size((pipit_dtype)n->dtype);
}

const char *pipit__node_desc(const pipit_graph *g, const pipit__node *n, char *buf,
                             size_t len) {
    size_t used = (size_t)snprintf(buf, len, "%s(", pipit__ops[n->op].name);
    for (int i = 0; i < n->nin && used < len; i++) {
        const pipit__node *a = &g->nodes[n->in[i]];
        char s[96];
        used += (size_t)snprintf(buf + used, len - used, "%s%s %s", i ? ", " : "",
                                 pipit__dtype_name((pipit_dtype)a->dtype),
                                 pipit__shape_str(s, sizeof s, a->ndim, a->shape));
    }
    if (used < len) snprintf(buf + used, len - used, ")");
    return buf;
}

static int graph_ok(pipit_graph *g) {
    if (!g || g->magic != PIPIT_GRAPH_MAGIC) {
        pipit__err(PIPIT_STATUS_MISUSE, "invalid graph handle");
        return 0;
    }
    return g->status == PIPIT_STATUS_OK;
}

/* graph_ok for a public builder: a bad handle, or a graph an earlier call
 * poisoned, leaves a fresh message naming `fn` (the graph keeps its first
 * error; the thread's message repeats it). */
static int graph_ok_fn(pipit_graph *g, const char *fn) {
    if (bad_graph(g, fn)) return 0;
    if (g->status != PIPIT_STATUS_OK) {
        pipit__err(g->status, "%s: the graph already failed: %s", fn, g->errmsg);
        return 0;
    }
    return 1;
}

static int graph_reserve(pipit_graph *g) {
    if (g->n < g->cap) return 1;
    int32_t cap = g->cap ? g->cap * 2 : 64;
    pipit__node *nodes = pipit__realloc(g->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes) {
        pipit__graph_fail(g, PIPIT_STATUS_NOMEM, "graph: out of memory at %d nodes", g->n);
        return 0;
    }
    g->nodes = nodes;
    g->cap = cap;
    return 1;
}

int32_t pipit__node_add(pipit_graph *g, pipit__opcode op, int nin, const int32_t *in,
                        const double fattr[4], const int64_t iattr[4]) {
    if (!graph_ok(g)) return -1;
    const pipit__op_info *info = &pipit__ops[op];
    for (int i = 0; i < nin; i++) {
        if (in[i] < 0 || in[i] >= g->n) {
            pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: input %d is not a value of this graph",
                              info->name, i);
            return -1;
        }
    }
    /* The node is made in a local first: in, fattr and iattr may point into
     * g->nodes (a VJP passing its own node's attributes), which reserving
     * may move. */
    pipit__node made;
    memset(&made, 0, sizeof made);
    made.op = (uint16_t)op;
    made.nin = (uint8_t)nin;
    for (int i = 0; i < nin; i++) made.in[i] = in[i];
    if (fattr) memcpy(made.fattr, fattr, sizeof made.fattr);
    if (iattr) memcpy(made.iattr, iattr, sizeof made.iattr);
    if (!graph_reserve(g)) return -1;
    pipit__node *n = &g->nodes[g->n];
    *n = made;
    n->stage = -1;
    n->origin = g->cur_origin;
    n->flags = g->cur_flags;
    pipit_status s = info->shape(g, n);
    int64_t numel;
    if (s == PIPIT_STATUS_OK && !pipit__shape_numel(n->ndim, n->shape, &numel)) {
        char sh[96];
        s = pipit__err(PIPIT_STATUS_SHAPE,
                       "output shape %s has more than 2^48 elements (the limit of one tensor)",
                       pipit__shape_str(sh, sizeof sh, n->ndim, n->shape));
    }
    if (s != PIPIT_STATUS_OK) {
        char desc[512];
        pipit__node_desc(g, n, desc, sizeof desc);
        char why[1024];
        snprintf(why, sizeof why, "%s", pipit_errmsg());
        pipit__graph_fail(g, s, "%s: %s", desc, why);
        return -1;
    }
    return g->n++;
}

pipit_val pipit__val(pipit_graph *g, int32_t id) { return (pipit_val){g, id}; }

/* Validates a public value argument; poisons the graph if it is foreign. */
static int32_t val_id(pipit_graph *g, pipit_val v, const char *fn) {
    if (v.id < 0) return -1;
    if (v.g != g) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: value belongs to another graph", fn);
        return -1;
    }
    return v.id;
}

/* A node a public builder added (or -1: adding it poisoned the graph, and
 * then the message names the public function first). */
static pipit_val named(pipit_graph *g, int32_t id, const char *fn) {
    if (id < 0) {
        pipit__err_prefix("%s", fn);
        snprintf(g->errmsg, sizeof g->errmsg, "%s", pipit_errmsg());
    } else if (!g->nodes[id].api) { /* a new node (pipit_slice of a whole axis returns its input) */
        g->nodes[id].api = fn;
    }
    return (pipit_val){g, id};
}

static pipit_val build(pipit_graph *g, const char *fn, pipit__opcode op, int nin, const pipit_val *vin,
                       const double fattr[4], const int64_t iattr[4]) {
    int32_t in[PIPIT_MAX_IN];
    if (!graph_ok_fn(g, fn)) return (pipit_val){g, -1};
    for (int i = 0; i < nin; i++) {
        in[i] = val_id(g, vin[i], fn);
        if (in[i] < 0) {
            if (g->status == PIPIT_STATUS_OK)
                pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: input %d is an invalid value",
                                  fn, i);
            return (pipit_val){g, -1};
        }
    }
    return named(g, pipit__node_add(g, op, nin, in, fattr, iattr), fn);
}

pipit_val pipit__build(pipit_graph *g, const char *fn, pipit__opcode op, int nin, const pipit_val *vin,
                       const double fattr[4], const int64_t iattr[4]) {
    return build(g, fn, op, nin, vin, fattr, iattr);
}

/* ---- shape queries ---- */

static const pipit__node *val_node(pipit_val v) {
    if (!v.g || v.g->magic != PIPIT_GRAPH_MAGIC || v.id < 0 || v.id >= v.g->n) return NULL;
    return &v.g->nodes[v.id];
}

/* val_node for a public query: NULL with a message naming `fn`. */
static const pipit__node *val_node_fn(pipit_val v, const char *fn) {
    const pipit__node *n = val_node(v);
    if (n) return n;
    if (!v.g) pipit__err(PIPIT_STATUS_INVALID, "%s: invalid value (its graph is NULL)", fn);
    else if (v.g->magic != PIPIT_GRAPH_MAGIC)
        pipit__err(PIPIT_STATUS_MISUSE, "%s: invalid graph handle in the value (freed, or not a pipit_graph)", fn);
    else pipit__err(PIPIT_STATUS_INVALID, "%s: invalid value (id %d; a builder failed?)", fn, (int)v.id);
    return NULL;
}

int pipit_val_ndim(pipit_val v) {
    const pipit__node *n = val_node_fn(v, __func__);
    return n ? n->ndim : 0;
}

int64_t pipit_val_dim(pipit_val v, int axis) {
    const pipit__node *n = val_node_fn(v, __func__);
    if (!n) return 0;
    int a = axis < 0 ? axis + n->ndim : axis;
    if (a < 0 || a >= n->ndim) {
        pipit__err(PIPIT_STATUS_INVALID, "%s: axis %d out of range for rank %d", __func__, axis, n->ndim);
        return 0;
    }
    return n->shape[a];
}

pipit_dtype pipit_val_dtype(pipit_val v) {
    const pipit__node *n = val_node_fn(v, __func__);
    return n ? (pipit_dtype)n->dtype : PIPIT_F32;
}

/* ---- names ---- */

static uint64_t name_hash(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void name_index_put(int32_t *index, int32_t cap, const pipit__node *nodes, int32_t id) {
    size_t mask = (size_t)cap - 1, k = (size_t)name_hash(nodes[id].name) & mask;
    while (index[k] >= 0) k = (k + 1) & mask;
    index[k] = id;
}

/* Room for one more name: the table at most half full (doubling). 0 on OOM. */
static int name_index_reserve(pipit_graph *g) {
    if (2 * ((int64_t)g->name_count + 1) <= g->name_cap) return 1;
    int32_t cap = g->name_cap ? 2 * g->name_cap : 64;
    if (cap <= 0 || cap > (1 << 30)) return 0;
    int32_t *index = pipit__malloc(sizeof *index * (size_t)cap);
    if (!index) return 0;
    for (int32_t k = 0; k < cap; k++) index[k] = -1;
    for (int32_t k = 0; k < g->name_cap; k++)
        if (g->name_index[k] >= 0) name_index_put(index, cap, g->nodes, g->name_index[k]);
    pipit__free(g->name_index);
    g->name_index = index;
    g->name_cap = cap;
    return 1;
}

static int32_t name_scan(const pipit_graph *g, const char *name) {
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].name && strcmp(g->nodes[i].name, name) == 0) return i;
    return -1;
}

int32_t pipit__graph_find_name(pipit_graph *g, const char *name) {
    for (; g->name_upto < g->n; g->name_upto++) { /* index the nodes added since the last lookup */
        if (!g->nodes[g->name_upto].name) continue;
        if (!name_index_reserve(g)) return name_scan(g, name); /* out of memory: slow but right */
        name_index_put(g->name_index, g->name_cap, g->nodes, g->name_upto);
        g->name_count++;
    }
    if (!g->name_cap) return -1;
    size_t mask = (size_t)g->name_cap - 1, k = (size_t)name_hash(name) & mask;
    for (; g->name_index[k] >= 0; k = (k + 1) & mask)
        if (strcmp(g->nodes[g->name_index[k]].name, name) == 0) return g->name_index[k];
    return -1;
}

void pipit__graph_truncate(pipit_graph *g, int32_t n) {
    for (int32_t i = n; i < g->n; i++) {
        pipit__free(g->nodes[i].name);
        g->nodes[i].name = NULL;
    }
    g->n = n;
    pipit__graph_names_moved(g); /* the index may hold ids >= n */
}

void pipit__graph_names_moved(pipit_graph *g) {
    pipit__free(g->name_index);
    g->name_index = NULL;
    g->name_cap = g->name_count = g->name_upto = 0;
}

/* ---- leaves ---- */

/* A leaf node; `what` is the public call that adds it, for its messages. */
static pipit_val leaf(pipit_graph *g, const char *what, pipit__opcode op, const char *name, pipit_dtype dt,
                      int ndim, const int64_t *shape) {
    if (!graph_ok_fn(g, what)) return (pipit_val){g, -1};
    if (!name || !*name) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: name is %s (a name is required)", what,
                          name ? "empty" : "NULL");
        return (pipit_val){g, -1};
    }
    if (ndim < 0 || ndim > PIPIT_MAX_DIMS) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "%s '%s': rank %d not in 0..%d", what, name,
                          ndim, PIPIT_MAX_DIMS);
        return (pipit_val){g, -1};
    }
    if (ndim > 0 && !shape) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s '%s': shape is NULL (ndim %d)", what, name, ndim);
        return (pipit_val){g, -1};
    }
    if ((unsigned)dt > PIPIT_BF16 || (op == PIPIT_OP_PARAM && dt == PIPIT_I32)) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "%s '%s': dtype %d not allowed", what, name,
                          (int)dt);
        return (pipit_val){g, -1};
    }
    if (op == PIPIT_OP_PARAM && dt == PIPIT_BF16) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE,
                          "%s '%s': params are fp32 masters, never bf16: declare it PIPIT_F32 and compile with "
                          "pipit_options.dtype = PIPIT_BF16 (or pipit_cast it to bf16 in the graph)",
                          what, name);
        return (pipit_val){g, -1};
    }
    if (pipit__graph_find_name(g, name) >= 0) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: name '%s' is already used", what, name);
        return (pipit_val){g, -1};
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) {
            pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "%s '%s': dimension %d is %lld (must be > 0)",
                              what, name, i, (long long)shape[i]);
            return (pipit_val){g, -1};
        }
    }
    int64_t numel;
    if (!pipit__shape_numel(ndim, shape, &numel)) {
        char sh[96];
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE,
                          "%s '%s': shape %s has more than 2^48 elements (the limit of one tensor)",
                          what, name, pipit__shape_str(sh, sizeof sh, ndim, shape));
        return (pipit_val){g, -1};
    }
    int64_t iattr[4] = {0};
    int32_t id = pipit__node_add(g, op, 0, NULL, NULL, iattr);
    if (id < 0) return (pipit_val){g, -1};
    pipit__node *n = &g->nodes[id];
    n->dtype = (uint8_t)dt;
    n->ndim = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++) n->shape[i] = shape[i];
    n->name = pipit__strdup(name);
    n->api = what;
    if (!n->name) {
        g->n--;
        pipit__graph_fail(g, PIPIT_STATUS_NOMEM, "%s: out of memory", what);
        return (pipit_val){g, -1};
    }
    return (pipit_val){g, id};
}

pipit_val pipit_input(pipit_graph *g, const char *name, pipit_dtype dt, int ndim,
                      const int64_t *shape) {
    return leaf(g, __func__, PIPIT_OP_INPUT, name, dt, ndim, shape);
}

pipit_val pipit_param(pipit_graph *g, const char *name, pipit_dtype dt, int ndim,
                      const int64_t *shape) {
    return leaf(g, __func__, PIPIT_OP_PARAM, name, dt, ndim, shape);
}

pipit_val pipit__param_as(pipit_graph *g, const char *fn, const char *name, pipit_dtype dt, int ndim,
                          const int64_t *shape) {
    return leaf(g, fn, PIPIT_OP_PARAM, name, dt, ndim, shape);
}

/* ---- ops ---- */

/* A table sharded along its rows over the stage's T ranks makes the
 * embedding vocab-parallel (iattr[1] = 1): rank t holds rows t*V/T ..,
 * and an index outside its shard reads zeros (ir/tp.c). */
pipit_val pipit_embed(pipit_graph *g, pipit_val table, pipit_val idx) {
    int64_t iattr[4] = {0, graph_ok(g) && val_node(table) && table.g == g && pipit__tp_rows_sharded(g, table.id), 0, 0};
    return build(g, __func__, PIPIT_OP_EMBED, 2, (pipit_val[]){table, idx}, NULL, iattr);
}
pipit_val pipit_add(pipit_graph *g, pipit_val a, pipit_val b) {
    return build(g, __func__, PIPIT_OP_ADD, 2, (pipit_val[]){a, b}, NULL, NULL);
}
pipit_val pipit_mul(pipit_graph *g, pipit_val a, pipit_val b) {
    return build(g, __func__, PIPIT_OP_MUL, 2, (pipit_val[]){a, b}, NULL, NULL);
}
pipit_val pipit_scale(pipit_graph *g, pipit_val a, double alpha) {
    return build(g, __func__, PIPIT_OP_SCALE, 1, &a, (double[4]){alpha, 0}, NULL);
}
pipit_val pipit_cast(pipit_graph *g, pipit_val x, pipit_dtype dt) {
    const pipit__node *n = x.g == g && g && g->magic == PIPIT_GRAPH_MAGIC && x.id >= 0 && x.id < g->n ? &g->nodes[x.id]
                                                                                                   : NULL;
    if (n && n->dtype == (uint8_t)dt && g->status == PIPIT_STATUS_OK) return x; /* already dt: x itself */
    return build(g, __func__, PIPIT_OP_CAST, 1, &x, NULL, (int64_t[4]){(int64_t)dt, 0, 0, 0});
}
pipit_val pipit_matmul(pipit_graph *g, pipit_val a, pipit_val b, int trans_a, int trans_b) {
    const pipit__node *na = val_node(a), *nb = val_node(b);
    if (trans_a && graph_ok(g) && a.g == g && b.g == g && na && nb && na->ndim > 2 && nb->ndim == 2) {
        /* a [...,K,M] against a broadcast 2-D b: the kernel takes a's rows as
         * one [R, K] matrix, which a's transposed layout is not; so a is
         * transposed first (a copy: its gradient is the inverse permute) */
        int64_t perm[4] = {0, 1, 2, 3};
        perm[na->ndim - 2] = na->ndim - 1;
        perm[na->ndim - 1] = na->ndim - 2;
        a = build(g, __func__, PIPIT_OP_PERMUTE, 1, &a, NULL, perm);
        trans_a = 0;
    }
    int64_t iattr[4] = {trans_a != 0, trans_b != 0, 0, 0};
    return build(g, __func__, PIPIT_OP_MATMUL, 2, (pipit_val[]){a, b}, NULL, iattr);
}
pipit_val pipit_matmul_nt(pipit_graph *g, pipit_val a, pipit_val b) {
    int64_t iattr[4] = {0, 1, 0, 0};
    return build(g, __func__, PIPIT_OP_MATMUL, 2, (pipit_val[]){a, b}, NULL, iattr);
}
pipit_val pipit_bias_add(pipit_graph *g, pipit_val x, pipit_val bias) {
    return build(g, __func__, PIPIT_OP_BIAS_ADD, 2, (pipit_val[]){x, bias}, NULL, NULL);
}
pipit_val pipit_layernorm(pipit_graph *g, pipit_val x, pipit_val w, pipit_val b, double eps) {
    return build(g, __func__, PIPIT_OP_LAYERNORM, 3, (pipit_val[]){x, w, b}, (double[4]){eps, 0}, NULL);
}
pipit_val pipit_gelu(pipit_graph *g, pipit_val x) {
    return build(g, __func__, PIPIT_OP_GELU, 1, &x, NULL, NULL);
}
pipit_val pipit_attention(pipit_graph *g, pipit_val qkv, int heads) {
    int64_t iattr[4] = {heads, 0, 0, 0};
    return build(g, __func__, PIPIT_OP_ATTENTION, 1, &qkv, NULL, iattr);
}
pipit_val pipit_xent_mean(pipit_graph *g, pipit_val logits, pipit_val targets) {
    pipit_val rows = build(g, __func__, PIPIT_OP_XENT_ROWS, 2, (pipit_val[]){logits, targets}, NULL, NULL);
    if (rows.id < 0) return rows;
    return build(g, __func__, PIPIT_OP_SUM, 1, &rows,
                 (double[4]){1.0 / (double)pipit__node_numel(&g->nodes[rows.id]), 0}, NULL);
}
pipit_val pipit_sum(pipit_graph *g, pipit_val x) {
    return build(g, __func__, PIPIT_OP_SUM, 1, &x, (double[4]){1.0, 0}, NULL);
}
pipit_val pipit_mean(pipit_graph *g, pipit_val x) {
    const pipit__node *n = val_node(x);
    double inv = n ? 1.0 / (double)pipit__node_numel(n) : 1.0;
    return build(g, __func__, PIPIT_OP_SUM, 1, &x, (double[4]){inv, 0}, NULL);
}
pipit_val pipit_reshape(pipit_graph *g, pipit_val x, int ndim, const int64_t *shape) {
    int64_t iattr[4] = {0};
    if (!graph_ok_fn(g, __func__)) return (pipit_val){g, -1};
    if (ndim < 0 || ndim > PIPIT_MAX_DIMS) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "pipit_reshape: rank %d not in 0..%d", ndim, PIPIT_MAX_DIMS);
        return (pipit_val){g, -1};
    }
    if (ndim > 0 && !shape) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "pipit_reshape: shape is NULL (ndim %d)", ndim);
        return (pipit_val){g, -1};
    }
    for (int i = 0; i < ndim; i++) iattr[i] = shape[i];
    /* Rank travels in fattr[0] so iattr holds the full shape. */
    return build(g, __func__, PIPIT_OP_RESHAPE, 1, &x, (double[4]){(double)ndim, 0}, iattr);
}
pipit_val pipit_transpose(pipit_graph *g, pipit_val x, int axis0, int axis1) {
    if (!graph_ok_fn(g, __func__)) return (pipit_val){g, -1};
    const pipit__node *n = val_node(x);
    if (!n || x.g != g) /* build names the bad value */
        return build(g, __func__, PIPIT_OP_PERMUTE, 1, &x, NULL, (int64_t[4]){0, 1, 2, 3});
    int nd = n->ndim;
    if (axis0 < 0) axis0 += nd;
    if (axis1 < 0) axis1 += nd;
    if (axis0 < 0 || axis0 >= nd || axis1 < 0 || axis1 >= nd) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "pipit_transpose: axes %d,%d out of range for rank %d",
                          axis0, axis1, nd);
        return (pipit_val){g, -1};
    }
    int64_t perm[4] = {0, 1, 2, 3};
    perm[axis0] = axis1;
    perm[axis1] = axis0;
    return build(g, __func__, PIPIT_OP_PERMUTE, 1, &x, NULL, perm);
}
pipit_val pipit_yield(pipit_graph *g, pipit_val x) {
    return build(g, __func__, PIPIT_OP_YIELD, 1, &x, NULL, NULL);
}

/* ---- general ops: elementwise, broadcasting, reductions, slicing ---- */

pipit_val pipit_sub(pipit_graph *g, pipit_val a, pipit_val b) {
    return build(g, __func__, PIPIT_OP_SUB, 2, (pipit_val[]){a, b}, NULL, NULL);
}
pipit_val pipit_div(pipit_graph *g, pipit_val a, pipit_val b) {
    return build(g, __func__, PIPIT_OP_DIV, 2, (pipit_val[]){a, b}, NULL, NULL);
}
#define UNARY_BUILDER(name, OP) \
    pipit_val pipit_##name(pipit_graph *g, pipit_val x) { return build(g, __func__, PIPIT_OP_##OP, 1, &x, NULL, NULL); }
UNARY_BUILDER(neg, NEG)
UNARY_BUILDER(exp, EXP)
UNARY_BUILDER(log, LOG)
UNARY_BUILDER(sqrt, SQRT)
UNARY_BUILDER(rsqrt, RSQRT)
UNARY_BUILDER(abs, ABS)
UNARY_BUILDER(relu, RELU)
UNARY_BUILDER(silu, SILU)
UNARY_BUILDER(sigmoid, SIGMOID)
UNARY_BUILDER(tanh, TANH)
UNARY_BUILDER(softmax, SOFTMAX)
UNARY_BUILDER(log_softmax, LOG_SOFTMAX)
#undef UNARY_BUILDER

/* "f32 [2,3]": a value's dtype and shape, for builders' own messages. */
static const char *arg_desc(const pipit__node *n, char *buf, size_t len) {
    char sh[96];
    snprintf(buf, len, "%s %s", pipit__dtype_name((pipit_dtype)n->dtype),
             pipit__shape_str(sh, sizeof sh, n->ndim, n->shape));
    return buf;
}

/* The node of a builder's first argument, whose shape the builder reads
 * before building (axes, defaults); NULL when the graph already failed or
 * the value is bad: the caller then lets build() report it. */
static const pipit__node *arg_node(pipit_graph *g, pipit_val x, const char *fn) {
    if (!graph_ok_fn(g, fn)) return NULL;
    const pipit__node *n = val_node(x);
    return n && x.g == g ? n : NULL;
}

/* axis (negative: from the end) as 0..ndim-1 of n; -1 after poisoning the
 * graph with a message naming fn, the op and the shape. */
static int norm_axis(pipit_graph *g, const pipit__node *n, int axis, const char *fn, const char *op) {
    int a = axis < 0 ? axis + n->ndim : axis;
    if (a >= 0 && a < n->ndim) return a;
    char d[128];
    pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "%s: %s(%s): axis %d out of range for rank %d", fn, op,
                      arg_desc(n, d, sizeof d), axis, n->ndim);
    return -1;
}

static pipit_val invalid(pipit_graph *g) { return (pipit_val){g, -1}; }

/* A target shape argument: rank in 0..4 and a non-NULL array. */
static int shape_arg(pipit_graph *g, int ndim, const int64_t *shape, const char *fn) {
    if (ndim < 0 || ndim > PIPIT_MAX_DIMS) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "%s: rank %d not in 0..%d", fn, ndim, PIPIT_MAX_DIMS);
        return 0;
    }
    if (ndim > 0 && !shape) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: shape is NULL (ndim %d)", fn, ndim);
        return 0;
    }
    return 1;
}

pipit_val pipit_broadcast_to(pipit_graph *g, pipit_val x, int ndim, const int64_t *shape) {
    if (!graph_ok_fn(g, __func__) || !shape_arg(g, ndim, shape, __func__)) return invalid(g);
    int64_t iattr[4] = {0};
    for (int i = 0; i < ndim; i++) iattr[i] = shape[i];
    return build(g, __func__, PIPIT_OP_BROADCAST_TO, 1, &x, (double[4]){ndim, 0}, iattr);
}

/* Reductions along one axis: SUM_TO (or MAX) keeping the axis as 1, then a
 * reshape (no copy) that drops it unless keepdim. */
static pipit_val reduce_axis(pipit_graph *g, pipit_val x, int axis, int keepdim, int mean, pipit__opcode op,
                             const char *fn) {
    const pipit__node *n = arg_node(g, x, fn);
    if (!n) return build(g, fn, op, 1, &x, (double[4]){0, 1}, NULL); /* names the bad value */
    int a = norm_axis(g, n, axis, fn, op == PIPIT_OP_MAX ? "max" : mean ? "mean" : "sum");
    if (a < 0) return invalid(g);
    int nd = n->ndim;
    int64_t keep[4] = {0}, drop[4] = {0};
    for (int i = 0, j = 0; i < nd; i++) {
        keep[i] = i == a ? 1 : n->shape[i];
        if (i != a) drop[j++] = n->shape[i];
    }
    double scale = mean ? 1.0 / (double)n->shape[a] : 1.0;
    pipit_val r = op == PIPIT_OP_MAX ? build(g, fn, op, 1, &x, NULL, (int64_t[4]){a, 0, 0, 0})
                                     : build(g, fn, op, 1, &x, (double[4]){nd, scale}, keep);
    return keepdim || r.id < 0 ? r : pipit_reshape(g, r, nd - 1, drop);
}
pipit_val pipit_reduce_sum(pipit_graph *g, pipit_val x, int axis, int keepdim) {
    return reduce_axis(g, x, axis, keepdim, 0, PIPIT_OP_SUM_TO, __func__);
}
pipit_val pipit_reduce_mean(pipit_graph *g, pipit_val x, int axis, int keepdim) {
    return reduce_axis(g, x, axis, keepdim, 1, PIPIT_OP_SUM_TO, __func__);
}
pipit_val pipit_reduce_max(pipit_graph *g, pipit_val x, int axis, int keepdim) {
    return reduce_axis(g, x, axis, keepdim, 0, PIPIT_OP_MAX, __func__);
}

int32_t pipit__slice(pipit_graph *g, int32_t x, int axis, int64_t start, int64_t len) {
    pipit__node n = g->nodes[x];
    int64_t outer, dim, inner;
    pipit__axis_split(&n, axis, &outer, &dim, &inner);
    if (start == 0 && len == dim) return x;
    int64_t iattr[4] = {axis, start, len, 0};
    if (outer != 1) return pipit__node_add(g, PIPIT_OP_SLICE, 1, &x, NULL, iattr);
    n.shape[axis] = len;
    int64_t shape[4] = {0};
    memcpy(shape, n.shape, sizeof(int64_t) * n.ndim);
    return pipit__node_add(g, PIPIT_OP_VIEW, 1, &x, (double[4]){n.ndim, (double)(start * inner)}, shape);
}

/* Checks axis and range of a slice of n; the axis (0..ndim-1) or -1. */
static int slice_arg(pipit_graph *g, const pipit__node *n, int axis, int64_t start, int64_t len, const char *fn) {
    int a = norm_axis(g, n, axis, fn, "slice");
    if (a < 0) return -1;
    int64_t dim = n->shape[a];
    if (start < 0 || len < 1 || start > dim || len > dim - start) {
        char d[128];
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE,
                          "%s: slice(%s): range [%lld, %lld+%lld) is not inside axis %d of size %lld (start >= 0, "
                          "length >= 1)",
                          fn, arg_desc(n, d, sizeof d), (long long)start, (long long)start, (long long)len, a,
                          (long long)dim);
        return -1;
    }
    return a;
}

pipit_val pipit_slice(pipit_graph *g, pipit_val x, int axis, int64_t start, int64_t length) {
    const pipit__node *n = arg_node(g, x, __func__);
    if (!n) return build(g, __func__, PIPIT_OP_SLICE, 1, &x, NULL, NULL);
    int a = slice_arg(g, n, axis, start, length, __func__);
    if (a < 0) return invalid(g);
    return named(g, pipit__slice(g, x.id, a, start, length), __func__);
}

pipit_status pipit_split(pipit_graph *g, pipit_val x, int axis, int n, const int64_t *sizes, pipit_val *out) {
    if (!out) {
        if (!bad_graph(g, __func__))
            pipit__graph_fail(g, PIPIT_STATUS_INVALID, "pipit_split: out is NULL (room for %d values needed)", n);
        return g && g->magic == PIPIT_GRAPH_MAGIC ? g->status : PIPIT_STATUS_MISUSE;
    }
    for (int i = 0; i < n; i++) out[i] = invalid(g);
    const pipit__node *xn = arg_node(g, x, __func__);
    if (!xn) {
        build(g, __func__, PIPIT_OP_SLICE, 1, &x, NULL, NULL);
        return g && g->magic == PIPIT_GRAPH_MAGIC ? g->status : PIPIT_STATUS_MISUSE;
    }
    if (n < 1 || !sizes) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "pipit_split: %d pieces%s", n,
                          n < 1 ? " (at least 1 is needed)" : " but sizes is NULL");
        return g->status;
    }
    int a = norm_axis(g, xn, axis, __func__, "split");
    if (a < 0) return g->status;
    int64_t total = 0, dim = xn->shape[a];
    for (int i = 0; i < n && total <= dim; i++) total = sizes[i] < 1 ? -1 : total + sizes[i];
    if (total != dim) {
        char d[128];
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE,
                          "pipit_split: split(%s): %d sizes must be >= 1 and add up to axis %d's %lld", 
                          arg_desc(xn, d, sizeof d), n, a, (long long)dim);
        return g->status;
    }
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        out[i] = pipit_slice(g, x, a, at, sizes[i]);
        at += sizes[i];
    }
    return g->status;
}

pipit_val pipit_concat(pipit_graph *g, int n, const pipit_val *xs, int axis) {
    if (!graph_ok_fn(g, __func__)) return invalid(g);
    if (n < 1 || !xs) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "pipit_concat: %d inputs%s", n,
                          n < 1 ? " (at least 1 is needed)" : " but xs is NULL");
        return invalid(g);
    }
    const pipit__node *x0 = arg_node(g, xs[0], __func__);
    if (!x0) return build(g, __func__, PIPIT_OP_CONCAT, 1, xs, NULL, NULL);
    int a = norm_axis(g, x0, axis, __func__, "concat");
    if (a < 0) return invalid(g);
    /* up to PIPIT_MAX_IN inputs per node; more are chained: (acc, x_k, ...) */
    pipit_val acc = xs[0];
    int k = 1;
    do {
        pipit_val in[PIPIT_MAX_IN] = {acc};
        int m = 1;
        while (k < n && m < PIPIT_MAX_IN) in[m++] = xs[k++];
        acc = build(g, __func__, PIPIT_OP_CONCAT, m, in, NULL, (int64_t[4]){a, 0, 0, 0});
    } while (acc.id >= 0 && k < n);
    return acc;
}

pipit_val pipit_gather(pipit_graph *g, pipit_val table, pipit_val idx) {
    return build(g, __func__, PIPIT_OP_GATHER, 2, (pipit_val[]){table, idx}, NULL, NULL);
}

pipit_val pipit_rmsnorm(pipit_graph *g, pipit_val x, pipit_val w, double eps) {
    return build(g, __func__, PIPIT_OP_RMSNORM, 2, (pipit_val[]){x, w}, (double[4]){eps, 0}, NULL);
}

static pipit_val rope(pipit_graph *g, pipit_val x, int heads, double theta, int64_t pos0, const pipit_rope_scaling *s,
                      const char *fn) {
    const pipit_rope_scaling none = {0};
    if (!s) s = &none;
    return build(g, fn, PIPIT_OP_ROPE, 1, &x, (double[4]){theta, s->factor, s->low_freq_factor, s->high_freq_factor},
                 (int64_t[4]){heads, pos0, 0, s->original_max_position_embeddings});
}
pipit_val pipit_rope(pipit_graph *g, pipit_val x, int heads, double theta) {
    return rope(g, x, heads, theta, 0, NULL, __func__);
}
pipit_val pipit_rope_ex(pipit_graph *g, pipit_val x, int heads, double theta, int64_t position_offset) {
    return rope(g, x, heads, theta, position_offset, NULL, __func__);
}
pipit_val pipit_rope_scaled(pipit_graph *g, pipit_val x, int heads, double theta, int64_t position_offset,
                            const pipit_rope_scaling *scaling) {
    return rope(g, x, heads, theta, position_offset, scaling, __func__);
}

pipit_val pipit_attention_qkv(pipit_graph *g, pipit_val q, pipit_val k, pipit_val v,
                              const pipit_attention_opts *o) {
    if (!graph_ok_fn(g, __func__)) return invalid(g);
    if (!o) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "pipit_attention_qkv: options are NULL");
        return invalid(g);
    }
    int kv = o->kv_heads ? o->kv_heads : o->heads;
    double scale = o->scale;
    const pipit__node *qn = arg_node(g, q, __func__);
    if (scale == 0 && qn && qn->ndim == 3 && o->heads > 0 && qn->shape[2] % o->heads == 0)
        scale = 1.0 / sqrt((double)(qn->shape[2] / o->heads)); /* as pipit_attention's 1/sqrt(D) */
    return build(g, __func__, PIPIT_OP_ATTENTION_QKV, 3, (pipit_val[]){q, k, v}, (double[4]){scale, 0},
                 (int64_t[4]){o->heads, kv, o->causal != 0, 0});
}

pipit_val pipit_attention_docs(pipit_graph *g, pipit_val qkv, pipit_val doc, const pipit_attention_opts *o) {
    if (!graph_ok_fn(g, __func__)) return invalid(g);
    if (!o) {
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "pipit_attention_docs: options are NULL");
        return invalid(g);
    }
    int kv = o->kv_heads ? o->kv_heads : o->heads;
    double scale = o->scale;
    const pipit__node *xn = arg_node(g, qkv, __func__);
    if (scale == 0 && xn && xn->ndim == 3 && o->heads > 0 && kv > 0 && xn->shape[2] % (o->heads + 2 * kv) == 0)
        scale = 1.0 / sqrt((double)(xn->shape[2] / (o->heads + 2 * kv)));
    return build(g, __func__, PIPIT_OP_ATTENTION_DOC, 2, (pipit_val[]){qkv, doc}, (double[4]){scale, 0},
                 (int64_t[4]){o->heads, kv, o->causal != 0, 0});
}

int32_t pipit__fill(pipit_graph *g, int32_t scalar, int ndim, const int64_t *shape,
                    double scale) {
    int64_t iattr[4] = {0};
    for (int i = 0; i < ndim; i++) iattr[i] = shape[i];
    return pipit__node_add(g, PIPIT_OP_FILL, 1, &scalar, (double[4]){scale, (double)ndim}, iattr);
}

int32_t pipit__cast(pipit_graph *g, int32_t x, pipit_dtype dt) {
    if (g->nodes[x].dtype == (uint8_t)dt) return x;
    return pipit__node_add(g, PIPIT_OP_CAST, 1, &x, NULL, (int64_t[4]){(int64_t)dt, 0, 0, 0});
}

pipit_graph *pipit__graph_clone(const pipit_graph *g, int32_t n) {
    pipit_graph *c = pipit_graph_new();
    if (!c) return NULL;
    int32_t ngs = 0;
    for (int32_t i = 0; i < g->ngradset; i++) ngs += g->gradset[i][0] < n && g->gradset[i][1] < n;
    c->nodes = pipit__malloc(sizeof *c->nodes * (size_t)PIPIT_MAX(n, 1));
    c->gradset = ngs ? pipit__malloc(sizeof *c->gradset * (size_t)ngs) : NULL;
    if (!c->nodes || (ngs && !c->gradset)) goto oom;
    c->cap = PIPIT_MAX(n, 1);
    for (int32_t i = 0; i < n; i++) {
        c->nodes[i] = g->nodes[i];
        c->nodes[i].name = NULL;
        c->n = i + 1; /* pipit_graph_free frees the names copied so far */
        if (g->nodes[i].name && !(c->nodes[i].name = pipit__strdup(g->nodes[i].name))) goto oom;
    }
    for (int32_t i = 0; i < g->ngradset; i++)
        if (g->gradset[i][0] < n && g->gradset[i][1] < n) {
            c->gradset[c->ngradset][0] = g->gradset[i][0];
            c->gradset[c->ngradset++][1] = g->gradset[i][1];
        }
    c->status = g->status;
    memcpy(c->errmsg, g->errmsg, sizeof c->errmsg);
    c->tp = g->tp;
    c->ep = g->ep;
    c->documents = g->documents;
    c->sp = g->sp;
    c->cp = g->cp;
    return c;
oom:
    pipit_graph_free(c);
    pipit__err(PIPIT_STATUS_NOMEM, "graph: out of memory copying %d nodes", (int)n);
    return NULL;
}

/* ---- post-loop ---- */

static int32_t param_arg(pipit_graph *g, pipit_val param, const char *what) {
    if (!graph_ok_fn(g, what)) return -1;
    int32_t id = val_id(g, param, what);
    if (id < 0 || g->nodes[id].op != PIPIT_OP_PARAM) {
        if (g->status == PIPIT_STATUS_OK)
            pipit__graph_fail(g, PIPIT_STATUS_INVALID, "%s: the first argument must be a pipit_param", what);
        return -1;
    }
    return id;
}

pipit_val pipit_grad_of(pipit_graph *g, pipit_val param) {
    int32_t pid = param_arg(g, param, "pipit_grad_of");
    if (pid < 0) return (pipit_val){g, -1};
    for (int32_t i = 0; i < g->n; i++) /* one leaf per param */
        if ((g->nodes[i].flags & NODE_GRADOF) && g->nodes[i].iattr[0] == pid) return (pipit_val){g, i};
    char name[256];
    snprintf(name, sizeof name, "@grad:%s", g->nodes[pid].name);
    int64_t shape[PIPIT_MAX_DIMS]; /* a copy: adding the leaf may move the node array */
    memcpy(shape, g->nodes[pid].shape, sizeof shape);
    pipit_val v = leaf(g, "pipit_grad_of", PIPIT_OP_INPUT, name, (pipit_dtype)g->nodes[pid].dtype,
                       g->nodes[pid].ndim, shape);
    if (v.id >= 0) {
        g->nodes[v.id].flags |= NODE_GRADOF;
        g->nodes[v.id].iattr[0] = pid;
    }
    return v;
}

pipit_status pipit_set_grad(pipit_graph *g, pipit_val param, pipit_val grad) {
    int32_t pid = param_arg(g, param, "pipit_set_grad");
    int32_t gid = pid < 0 ? -1 : val_id(g, grad, "pipit_set_grad");
    if (pid >= 0 && gid < 0 && g->status == PIPIT_STATUS_OK)
        pipit__graph_fail(g, PIPIT_STATUS_INVALID, "pipit_set_grad: the gradient is an invalid value");
    if (gid < 0) {
        if (!g || g->magic != PIPIT_GRAPH_MAGIC) return PIPIT_STATUS_MISUSE; /* message set by param_arg */
        return g->status ? g->status : pipit__err(PIPIT_STATUS_INVALID, "pipit_set_grad: invalid gradient");
    }
    const pipit__node *p = &g->nodes[pid], *v = &g->nodes[gid];
    char a[96], b[96];
    int same = p->ndim == v->ndim && p->dtype == v->dtype;
    for (int i = 0; same && i < p->ndim; i++) same = p->shape[i] == v->shape[i];
    if (!same) {
        pipit__graph_fail(g, PIPIT_STATUS_SHAPE, "pipit_set_grad '%s': the gradient is %s %s, the param %s %s", p->name,
                          pipit__dtype_name((pipit_dtype)v->dtype), pipit__shape_str(a, sizeof a, v->ndim, v->shape),
                          pipit__dtype_name((pipit_dtype)p->dtype), pipit__shape_str(b, sizeof b, p->ndim, p->shape));
        return g->status;
    }
    for (int32_t i = 0; i < g->ngradset; i++)
        if (g->gradset[i][0] == pid) {
            pipit__graph_fail(g, PIPIT_STATUS_INVALID, "pipit_set_grad '%s': the gradient is already set", p->name);
            return g->status;
        }
    int32_t(*gs)[2] = pipit__realloc(g->gradset, sizeof *gs * (size_t)(g->ngradset + 1));
    if (!gs) {
        pipit__graph_fail(g, PIPIT_STATUS_NOMEM, "pipit_set_grad: out of memory");
        return g->status;
    }
    g->gradset = gs;
    g->gradset[g->ngradset][0] = pid;
    g->gradset[g->ngradset][1] = gid;
    g->ngradset++;
    return PIPIT_STATUS_OK;
}
