/*
 * emit.c — instruction emission with buffer lifetime tracking. A buffer is
 * born at the instruction that writes it and dies after its last reader, so
 * the planner can reuse its bytes; peak bytes are therefore known at compile
 * time and equal what the runtime will touch.
 */
#include "compile/emit.h"

#include <string.h>

pipit_status pipit__emitter_init(pipit__emitter *e, pipit__plan *p, pipit__rank_plan *r) {
    memset(e, 0, sizeof *e);
    e->p = p;
    e->r = r;
    size_t n = (size_t)p->g->n * (size_t)p->M;
    e->buf_of = pipit__malloc(n * sizeof *e->buf_of);
    if (!e->buf_of) return e->status = pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
    memset(e->buf_of, 0xff, n * sizeof *e->buf_of);
    return PIPIT_STATUS_OK;
}

pipit__instr *pipit__emit_push(pipit__emitter *e) {
    pipit__rank_plan *r = e->r;
    if (r->n == r->cap) {
        int32_t cap = r->cap ? r->cap * 2 : 256;
        pipit__instr *ins = pipit__realloc(r->ins, (size_t)cap * sizeof *ins);
        if (!ins) {
            e->status = pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
            return NULL;
        }
        r->ins = ins;
        r->cap = cap;
    }
    pipit__instr *in = &r->ins[r->n++];
    memset(in, 0, sizeof *in);
    return in;
}

int32_t pipit__emit_buf(pipit__emitter *e, size_t size, int32_t at) {
    if (e->nbufs == e->capbufs) {
        int32_t cap = e->capbufs ? e->capbufs * 2 : 256;
        pipit__mp_buf *b = pipit__realloc(e->bufs, (size_t)cap * sizeof *b);
        if (b) e->bufs = b;
        pipit__loc *m = b ? pipit__realloc(e->moved, (size_t)cap * sizeof *m) : NULL;
        if (!m) {
            e->status = pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
            return -1;
        }
        e->moved = m;
        e->capbufs = cap;
    }
    e->moved[e->nbufs] = (pipit__loc){LOC_NONE, 0, 0};
    e->bufs[e->nbufs] = (pipit__mp_buf){.size = size, .first = at, .last = at, .hold = -1};
    return e->nbufs++;
}

static int input_slot(const pipit__plan *p, int32_t node) {
    for (int i = 0; i < p->ninputs; i++)
        if (p->inputs[i].node == node) return i;
    return -1;
}

static int param_index(const pipit__plan *p, int32_t node) {
    PIPIT_ASSERT(p->param_of[node] >= 0);
    return p->param_of[node];
}

/* Values that are the same for every microbatch live under microbatch 0:
 * pre-loop values and the post-loop region. */
static int mb_invariant(const pipit__plan *p, int32_t root) {
    if (root < p->gr.fwd_end) return p->gr.preloop[root];
    return (p->g->nodes[root].flags & NODE_POST) != 0;
}

/* Location of value `id` of microbatch mb, read by the instruction `at`:
 * its alias root's, with `off` the bytes a view starts into the root
 * (patching adds the root's own offset to it). */
static pipit__loc read_loc(pipit__emitter *e, int32_t id, int mb, int32_t at) {
    const pipit_graph *g = e->p->g;
    int32_t root = pipit__alias_root(g, id);
    size_t off = pipit__alias_offset(g, id);
    const pipit__node *n = &g->nodes[root];
    if (n->op == PIPIT_OP_PARAM) return (pipit__loc){LOC_PARAM, param_index(e->p, root), off};
    if (n->flags & NODE_GRADOF) return (pipit__loc){LOC_GRAD, param_index(e->p, (int32_t)n->iattr[0]), off};
    if (n->op == PIPIT_OP_INPUT && !(n->flags & NODE_POST)) {
        if (root == e->p->gr.seed) return (pipit__loc){LOC_SEED, root, 0};
        return (pipit__loc){LOC_FEED, input_slot(e->p, root), off};
    }
    if (mb_invariant(e->p, root)) mb = 0;
    int32_t b = e->buf_of[(size_t)root * (size_t)e->p->M + (size_t)mb];
    PIPIT_ASSERT(b >= 0); /* lowering emits producers before consumers */
    if (e->moved[b].kind != LOC_NONE) return (pipit__loc){e->moved[b].kind, e->moved[b].idx, e->moved[b].off + off};
    if (e->bufs[b].last < at) e->bufs[b].last = at;
    return (pipit__loc){LOC_ARENA, b, off};
}

int32_t pipit__emit_snapshot(pipit__emitter *e, int32_t node) {
    if (e->status) return -1;
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return -1;
    int32_t at = e->r->n - 1;
    in->kind = INS_COPY;
    in->bytes = pipit__node_bytes(&e->p->g->nodes[node]);
    in->in[0] = read_loc(e, node, 0, at);
    int32_t b = pipit__emit_buf(e, in->bytes, at);
    in->out = (pipit__loc){LOC_ARENA, b, 0};
    return b;
}

void pipit__emit_copy_out(pipit__emitter *e, int32_t b, pipit__loc dst, size_t bytes) {
    if (e->status || b < 0) return;
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return;
    in->kind = INS_COPY;
    in->bytes = bytes;
    in->in[0] = (pipit__loc){LOC_ARENA, b, 0};
    pipit__emit_touch(e, b, e->r->n - 1);
    in->out = dst;
}

/* Points the one kernel that writes (node, mb) -- a buffer nobody has read
 * yet -- at dst and frees its arena slot; returns the buffer, or -1 (and
 * changes nothing) when there is no such sole write. */
static int32_t redirect_sole_write(pipit__emitter *e, int32_t node, int mb, pipit__loc dst) {
    if (e->status) return -1;
    int32_t b = e->buf_of[(size_t)node * (size_t)e->p->M + (size_t)mb];
    if (b < 0 || e->bufs[b].last != e->bufs[b].first) return -1; /* absent, or already read */
    pipit__instr *w = &e->r->ins[e->bufs[b].first];
    if (w->kind != INS_RUN || w->node != node) return -1;
    w->out = dst;
    e->bufs[b].size = 0; /* the arena slot is not needed any more */
    return b;
}

/* redirect_sole_write, and (node, mb) is nobody's to read any more; returns
 * the buffer (its first instruction is the kernel), or -1. */
static int32_t retarget(pipit__emitter *e, int32_t node, int mb, pipit__loc dst) {
    int32_t b = redirect_sole_write(e, node, mb, dst);
    if (b >= 0) e->buf_of[(size_t)node * (size_t)e->p->M + (size_t)mb] = -1;
    return b;
}

int pipit__emit_retarget(pipit__emitter *e, int32_t node, int mb, pipit__loc dst) {
    return retarget(e, node, mb, dst) >= 0;
}

int pipit__emit_retarget_f32(pipit__emitter *e, int32_t node, int mb, pipit__loc dst, int first) {
    int32_t b = retarget(e, node, mb, dst);
    if (b < 0) return 0;
    e->r->ins[e->bufs[b].first].acc_f32 = first ? 1 : 2;
    return 1;
}

int pipit__emit_fuse_bias(pipit__emitter *e, int32_t node, int mb) {
    if (e->status) return 0;
    const pipit__node *n = &e->p->g->nodes[node];
    int32_t r = n->in[0];
    int32_t b = e->buf_of[(size_t)r * (size_t)e->p->M + (size_t)mb];
    if (b < 0 || e->bufs[b].last != e->bufs[b].first || e->moved[b].kind != LOC_NONE) return 0;
    int32_t w = e->bufs[b].first;
    pipit__instr *in = &e->r->ins[w];
    if (in->kind != INS_RUN || in->node != r || in->acc_f32 || in->epi) return 0;
    in->in[2] = read_loc(e, n->in[1], mb, w);
    in->epi = 1;
    e->buf_of[(size_t)node * (size_t)e->p->M + (size_t)mb] = b; /* the matmul's kernel writes the sum */
    e->buf_of[(size_t)r * (size_t)e->p->M + (size_t)mb] = -1;   /* and its own value is never seen */
    return 1;
}

int pipit__emit_relocate(pipit__emitter *e, int32_t node, int mb, pipit__loc dst) {
    int32_t b = redirect_sole_write(e, node, mb, dst);
    if (b < 0) return 0;
    e->moved[b] = dst; /* read_loc sends the readers there */
    return 1;
}

/* Gives (node, 0) the arena buffer b (post-loop gradient leaves). */
void pipit__emit_bind(pipit__emitter *e, int32_t node, int32_t b) {
    e->buf_of[(size_t)node * (size_t)e->p->M] = b;
}

void pipit__emit_run(pipit__emitter *e, int32_t node, int mb) {
    if (e->status) return;
    const pipit__node *n = &e->p->g->nodes[node];
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return;
    int32_t at = e->r->n - 1;
    in->kind = (pipit__ops[n->op].flags & OPF_COLL) ? INS_TP : INS_RUN; /* collectives: the runtime's */
    in->node = node;
    in->mb = mb;
    in->numel = pipit__node_numel(n);
    for (int k = 0; k < n->nin; k++) in->in[k] = read_loc(e, n->in[k], mb, at);
    int32_t b = pipit__emit_buf(e, pipit__node_bytes(n), at);
    if (b < 0) return;
    e->buf_of[(size_t)node * (size_t)e->p->M + (size_t)mb] = b;
    in->out = (pipit__loc){LOC_ARENA, b, 0};
}

int32_t pipit__emit_a2a_start(pipit__emitter *e, int32_t node, int mb, int post, int slot) {
    if (e->status) return -1;
    const pipit__node *n = &e->p->g->nodes[node];
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return -1;
    int32_t at = e->r->n - 1;
    in->kind = INS_A2A_START;
    in->first = (uint8_t)post;
    in->param = slot;
    in->node = node;
    in->mb = mb;
    in->numel = pipit__node_numel(n);
    in->in[0] = read_loc(e, n->in[0], mb, at); /* staged on the host here: the input may die at once */
    return at;
}

void pipit__emit_a2a_finish(pipit__emitter *e, int32_t node, int mb, int32_t start, int post, int slot) {
    if (e->status) return;
    const pipit__node *n = &e->p->g->nodes[node];
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return;
    int32_t at = e->r->n - 1;
    in->kind = INS_A2A_FINISH;
    in->first = (uint8_t)post;
    in->param = slot;
    in->node = node;
    in->mb = mb;
    in->use = start;
    in->numel = pipit__node_numel(n);
    if (e->p->E == 1) in->in[0] = read_loc(e, n->in[0], mb, at); /* E = 1: the identity copies it */
    int32_t b = pipit__emit_buf(e, pipit__node_bytes(n), at);
    if (b < 0) return;
    e->buf_of[(size_t)node * (size_t)e->p->M + (size_t)mb] = b;
    in->out = (pipit__loc){LOC_ARENA, b, 0};
}

void pipit__emit_acc(pipit__emitter *e, int32_t contrib, int mb, pipit__loc acc, int first, pipit_dtype acc_dt) {
    if (e->status) return;
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return;
    in->kind = INS_ACC;
    in->dtype = (uint8_t)acc_dt;
    in->node = contrib;
    in->mb = mb;
    in->first = (uint8_t)first;
    in->numel = pipit__node_numel(&e->p->g->nodes[contrib]);
    in->in[0] = read_loc(e, contrib, mb, e->r->n - 1);
    in->out = acc;
}

void pipit__emit_loss(pipit__emitter *e, int32_t loss, int mb) {
    if (e->status) return;
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return;
    in->kind = INS_LOSS;
    in->node = loss;
    in->mb = mb;
    in->in[0] = read_loc(e, loss, mb, e->r->n - 1);
}

void pipit__emit_send(pipit__emitter *e, int32_t node, int mb, int dst) {
    if (e->status) return;
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return;
    in->kind = INS_SEND;
    in->node = node;
    in->mb = mb;
    in->peer = dst;
    in->bytes = pipit__node_bytes(&e->p->g->nodes[node]);
    in->in[0] = read_loc(e, node, mb, e->r->n - 1);
}

void pipit__emit_recv(pipit__emitter *e, int32_t node, int mb, int src) {
    if (e->status) return;
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return;
    int32_t at = e->r->n - 1;
    in->kind = INS_RECV;
    in->node = node;
    in->mb = mb;
    in->peer = src;
    in->bytes = pipit__node_bytes(&e->p->g->nodes[node]);
    int32_t b = pipit__emit_buf(e, in->bytes, at);
    if (b < 0) return;
    e->buf_of[(size_t)node * (size_t)e->p->M + (size_t)mb] = b;
    in->out = (pipit__loc){LOC_ARENA, b, 0};
}

void pipit__emit_output(pipit__emitter *e, int32_t node, int mb) {
    if (e->status) return;
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return;
    in->kind = INS_OUTPUT;
    in->node = node;
    in->mb = mb;
    in->bytes = pipit__node_bytes(&e->p->g->nodes[node]);
    in->in[0] = read_loc(e, node, mb, e->r->n - 1);
}

void pipit__emit_mark(pipit__emitter *e, int task, int end) {
    if (e->status) return;
    pipit__instr *in = pipit__emit_push(e);
    if (!in) return;
    in->kind = INS_MARK;
    in->task = task;
    in->first = (uint8_t)end;
    in->node = 0;
}

int pipit__emit_has(const pipit__emitter *e, int32_t node, int mb) {
    return e->buf_of[(size_t)node * (size_t)e->p->M + (size_t)mb] >= 0;
}

static void patch(pipit__loc *l, const pipit__mp_buf *bufs) {
    if (l->kind == LOC_ARENA) l->off += bufs[l->idx].offset; /* after a view's own offset */
}

/* Extends arena buffer b's life to instruction `at` (post-loop readers). */
void pipit__emit_touch(pipit__emitter *e, int32_t b, int32_t at) {
    if (e->bufs[b].last < at) e->bufs[b].last = at;
}

/* A param's bf16 shadow (lower.c mark_shadows) keeps its bytes from one
 * step to the next: its buffer holds its arena slot from the first
 * instruction to the last, so no other buffer is ever placed there. */
static void pin_shadows(pipit__emitter *e) {
    for (int32_t i = 0; i < e->r->n; i++) {
        pipit__instr *in = &e->r->ins[i];
        if (!in->shadow) continue;
        pipit__mp_buf *b = &e->bufs[in->out.idx];
        if (in->out.kind != LOC_ARENA || e->moved[in->out.idx].kind != LOC_NONE || !b->size) { /* redirected */
            in->shadow = 0;
            continue;
        }
        b->first = 0;
        b->hold = e->r->n - 1;
    }
}

pipit_status pipit__emitter_finish(pipit__emitter *e) {
    pipit_status s = e->status;
    if (!s) {
        pin_shadows(e);
        size_t peak = pipit__memplan(e->bufs, e->nbufs);
        if (peak == (size_t)-1) s = pipit__err(PIPIT_STATUS_NOMEM, "compile: out of memory");
        else if (peak == PIPIT__MEMPLAN_TOO_LARGE)
            s = pipit__err(PIPIT_STATUS_INVALID,
                           "compile: rank %d's activation arena exceeds 2^56 bytes (the limit of one memory block)",
                           e->r->rank);
        e->r->arena_bytes = peak;
        e->r->naive_bytes = pipit__memplan_naive(e->bufs, e->nbufs);
        for (int32_t i = 0; !s && i < e->r->n; i++) {
            pipit__instr *in = &e->r->ins[i];
            patch(&in->out, e->bufs);
            for (int k = 0; k < PIPIT_MAX_IN; k++) patch(&in->in[k], e->bufs);
            for (int u = 0; in->srcs && u < e->p->params[in->param].nuses; u++) patch(&in->srcs[u], e->bufs);
        }
    }
    pipit__free(e->buf_of);
    e->buf_of = NULL;
    pipit__free(e->moved);
    e->moved = NULL;
    /* the rank keeps its buffers' lifetimes: memory statistics read them */
    pipit__free(e->r->bufs);
    e->r->bufs = e->bufs;
    e->r->nbufs = e->nbufs;
    e->bufs = NULL;
    return s;
}
