/*
 * emit.h — building a rank's instruction list: each emitted instruction
 * names its operands by (value, microbatch); the emitter turns them into
 * locations, tracks each arena buffer's lifetime, and finally plans the
 * arena (memplan) so every buffer has a fixed offset before the first step.
 */
#ifndef PIPIT_EMIT_H
#define PIPIT_EMIT_H

#include "compile/plan.h"
#include "compile/memplan.h"

typedef struct {
    pipit__plan *p;
    pipit__rank_plan *r;
    int32_t *buf_of;      /* [graph nodes * M]: arena buffer of (node, mb), -1 none */
    pipit__mp_buf *bufs;
    pipit__loc *moved;    /* [capbufs]: where a relocated buffer's value lives (LOC_NONE: in the arena) */
    int32_t nbufs, capbufs;
    pipit_status status;
} pipit__emitter;

pipit_status pipit__emitter_init(pipit__emitter *e, pipit__plan *p, pipit__rank_plan *r);
void pipit__emit_run(pipit__emitter *e, int32_t node, int mb);
/* An EP all-to-all node in two halves (runtime/ep.c): the start reads its
 * input (returns the instruction's index, -1 on failure), the finish
 * (given that index) writes its output; post = 1 (both): other
 * instructions come between them, so the receives are posted at the start;
 * slot: the task's place in its overlapped pair (0, 1; 0 outside one),
 * part of the messages' tags. */
int32_t pipit__emit_a2a_start(pipit__emitter *e, int32_t node, int mb, int post, int slot);
void pipit__emit_a2a_finish(pipit__emitter *e, int32_t node, int mb, int32_t start, int post, int slot);
/* acc (of dtype acc_dt) = or += contrib (of its node's dtype: bf16 is added into fp32) */
void pipit__emit_acc(pipit__emitter *e, int32_t contrib, int mb, pipit__loc acc, int first, pipit_dtype acc_dt);
void pipit__emit_loss(pipit__emitter *e, int32_t loss, int mb);
void pipit__emit_send(pipit__emitter *e, int32_t node, int mb, int dst);
void pipit__emit_recv(pipit__emitter *e, int32_t node, int mb, int src);
/* Keeps (node, mb)'s buffer alive here (the end of the list): an output. */
void pipit__emit_output(pipit__emitter *e, int32_t node, int mb);
void pipit__emit_mark(pipit__emitter *e, int task, int end);
/* Whether (node, mb) already has a buffer on this rank. */
int pipit__emit_has(const pipit__emitter *e, int32_t node, int mb);
/* Low-level: a new zeroed instruction; a new arena buffer born at `at`. */
pipit__instr *pipit__emit_push(pipit__emitter *e);
int32_t pipit__emit_buf(pipit__emitter *e, size_t size, int32_t at);
void pipit__emit_touch(pipit__emitter *e, int32_t b, int32_t at);
void pipit__emit_bind(pipit__emitter *e, int32_t node, int32_t b);
/* Makes the kernel that computed (node, mb) write straight into dst, if no
 * instruction has read its arena buffer yet (returns 1); the caller must
 * know that none will. */
int pipit__emit_retarget(pipit__emitter *e, int32_t node, int mb, pipit__loc dst);
/* The same, and the kernel writes its value into dst as fp32 (first) or
 * adds it there in fp32 (the instruction's acc_f32; lower.c fuses_wgrad). */
int pipit__emit_retarget_f32(pipit__emitter *e, int32_t node, int mb, pipit__loc dst, int first);
/* BIAS_ADD node of microbatch mb (its matmul input's only reader) runs in
 * the epilogue of that matmul's kernel, if that kernel's output is still
 * unread (returns 1; lower.c find_bias_epi): no instruction of its own. */
int pipit__emit_fuse_bias(pipit__emitter *e, int32_t node, int mb);
/* The same for a value that is still read after: its kernel writes it at
 * dst, and every later reader of (node, mb) reads it there (returns 1). */
int pipit__emit_relocate(pipit__emitter *e, int32_t node, int mb, pipit__loc dst);
/* Copies value (node, 0) into a new arena buffer (returned); copies arena
 * buffer b to dst. */
int32_t pipit__emit_snapshot(pipit__emitter *e, int32_t node);
void pipit__emit_copy_out(pipit__emitter *e, int32_t b, pipit__loc dst, size_t bytes);
/* Plans the arena, patches offsets, frees the emitter's scratch. */
pipit_status pipit__emitter_finish(pipit__emitter *e);

#endif
