/*
 * lowering.h — the state lower.c builds per-rank programs with, shared with
 * the files that lower parts of them: lower_dp.c (the data-parallel
 * exchange, in the loop and after it) and fences.c (where each zero-copy
 * send hands its buffer back). Internal to compile/.
 */
#ifndef PIPIT_LOWERING_H
#define PIPIT_LOWERING_H

#include "compile/emit.h"
#include "compile/stages.h"

/* Where a param's data-parallel exchange stands on the rank being lowered. */
enum { DP_NONE = 0, DP_RS_SENT, DP_REDUCED /* and, unless ZeRO-1, sent back */, DP_GATHERED };

typedef struct {
    pipit__plan *p;
    const pipit__staging *st;
    const int *stage_rank;
    uint64_t *consumer_ranks; /* [n] loop values: bit q = a loop node on rank q reads it */
    uint8_t *sole_acc;        /* [n] 1: the value's only reader is one gradient accumulation */
    uint8_t *tail_acc;        /* [n] 1: one gradient accumulation reads the value's tail, the rest only
                                 its head (a fused head's [partials | dW]; lower.c tail_lead) */
    uint8_t *bias_epi;        /* [n] 1: BIAS_ADD j runs in the epilogue of the matmul it reads (lower.c) */
    int32_t *acc_first;       /* [n + 1] the loop uses whose contribution's root is node j are */
    int32_t *acc_tgt, *acc_use; /*   (acc_tgt[k], acc_use[k]) for k in [acc_first[j], acc_first[j+1]) */
    int *early_rank;          /* [nparams] the rank that alone holds param i and exchanges it in the loop, or -1 */
    uint8_t *dp_state;        /* [nranks * nparams] DP_*, kept from a rank's loop for its post-loop */
    /* the rank being lowered (lower_dp.c: pipit__dp_begin_rank resets them) */
    int *left;                /* [ntargets] its last-microbatch contributions still to come */
    int32_t *order;           /* [nparams] params exchanged in its loop, in the order they were final */
    double *mark;             /* [nparams] gradient elements final when i's exchange last advanced */
    int norder, rs_next, ag_next;
    double final_elems;       /* gradient elements final so far on this rank */
} lowering;

/* A new post-loop style instruction (kind, param, use, peer); NULL when
 * out of memory (the emitter's status says so). */
pipit__instr *pipit__lower_post(pipit__emitter *e, int kind, int param, int use, int peer);
/* Where use u of target i accumulates on rank q. */
pipit__loc pipit__lower_use_loc(const pipit__plan *p, int i, int u, int q);
/* GRADSUM of target i on rank me: its per-use sums added in use order;
 * recv_buf[u]: the arena buffer use u was received into (NULL: all local). */
void pipit__lower_gradsum(pipit__plan *p, pipit__emitter *e, int i, int me, const int32_t *recv_buf);

static inline int pipit__has_rank(uint64_t set, int q) { return (int)(set >> q & 1); }

/* lower_dp.c — data parallelism. */
/* PIPIT_BENCH_DP_SERIAL=1: every exchange after the loop, one param at a time. */
int pipit__dp_serial(void);
/* ZeRO-1 without gradient transforms: replicas keep only their shard of the summed gradient. */
int pipit__dp_sharded_grads(const pipit__plan *p);
/* Which params a rank exchanges in its loop (L->early_rank); needs use_ranks. */
pipit_status pipit__dp_find_early(lowering *L);
/* Before lowering rank me's loop. */
pipit_status pipit__dp_begin_rank(lowering *L, int me);
/* Use u of target i accumulated microbatch mb's contribution on rank me:
 * the last one of a param exchanged in the loop starts its exchange. */
void pipit__dp_after_acc(lowering *L, pipit__emitter *e, int i, int mb, int me);
/* After the loop: what the loop did not finish, every held param's
 * reduce-scatter and all-gather (all sends of a phase before its receives). */
void pipit__dp_reduce(lowering *L, pipit__emitter *e, int me);
/* After the update: ZeRO-1's parameter all-gather. */
void pipit__dp_update(lowering *L, pipit__emitter *e, int me);
/* Checks that the params exchanged in the loop have their rank as only holder. */
pipit_status pipit__dp_check_early(const lowering *L);

/* fences.c — places the fence of every zero-copy send and proves the
 * programs deadlock-free with them (docs/architecture.md, "Zero-copy sends"). */
pipit_status pipit__place_fences(lowering *L, pipit__emitter *em);

#endif
