/*
 * sim.h — the cost model behind pipit_sim.h: the hardware description
 * (hw.c), per-stage task costs and memory of a transformer on a mesh
 * (cost.c), and the step simulation and report (sim.c).
 */
#ifndef PIPIT_SIM_INTERNAL_H
#define PIPIT_SIM_INTERNAL_H

#include "pipit_sim.h"

#define PIPIT_HW_MAX_CURVE 32

enum { HW_FP32 = 0, HW_TF32, HW_BF16, HW_FP16, HW_NDTYPES };

struct pipit_hw {
    char name[64];
    char *about;                 /* free text, kept for pipit_hw_write */
    char *sources_json;          /* the "sources" array as JSON text (or NULL) */
    double peak[HW_NDTYPES];     /* dense FLOP/s; 0 = not given */
    int train_dtype;             /* HW_* */
    int ncurve;                  /* GEMM efficiency by smallest dimension */
    double curve_dim[PIPIT_HW_MAX_CURVE], curve_eff[PIPIT_HW_MAX_CURVE];
    double mem_bw, mem_eff, mem_cap;
    int gpus_per_node;
    double intra_bw, intra_lat, inter_bw, inter_lat;
    double kernel_overhead;      /* seconds added per kernel launch */
};

/* The first key that appears twice in one object of a JSON document
 * (cJSON keeps both and finds the first: the second would be silently
 * ignored), as a path "a.b" into buf; NULL when every key is unique. */
struct cJSON;
const char *pipit__json_dup_key(const struct cJSON *root, char *buf, size_t n);
/* "fp32" -> HW_FP32, ...; -1 if unknown. */
int pipit__hw_dtype(const char *name);
const char *pipit__hw_dtype_name(int d);
/* Fraction of peak a GEMM whose smallest dimension is `dim` reaches
 * (log-linear between the curve's points, clamped at its ends). */
double pipit__hw_gemm_eff(const pipit_hw *hw, double dim);
/* Seconds of an m x n x k GEMM (2mnk FLOPs) in dtype d, `batch` of them. */
double pipit__hw_gemm_time(const pipit_hw *hw, int d, double batch, double m, double n, double k);
/* Seconds to stream `bytes` through memory (elementwise kernels). */
double pipit__hw_mem_time(const pipit_hw *hw, double bytes);
/* Ring all-reduce of `bytes` over n ranks on the given link. */
double pipit__hw_allreduce_time(double bytes, int n, double bw, double lat);
/* Ring all-gather (or reduce-scatter) of `bytes` in all over n ranks:
 * (n-1)/n bytes / bw + (n-1) latencies, half an all-reduce. */
double pipit__hw_allgather_time(double bytes, int n, double bw, double lat);

/* Per-stage costs of one microbatch (seconds, bytes) and what the report
 * needs besides the pipeline. */
typedef struct {
    int S, P, V, M, dtype, esize;
    double *f, *b, *w;           /* [S] task seconds */
    double *act;                 /* [S] bytes a (stage, mb) keeps from F to its backward */
    double *work;                /* [S] transient bytes while one task of the stage runs */
    double *params;              /* [S] parameters of stage s on one GPU of its TP group */
    double *eparams;             /* [S] of which expert parameters (sharded over ep, reduced over cp dp / ep) */
    double *layers;              /* [S] transformer layers of stage s */
    double *accum;               /* [S] gradient accumulators stage s holds all step (the tied embedding's head use) */
    double dpbuf;                /* bytes of every rank's data-parallel exchange buffer (0 without c d > 1) */
    double comm;                 /* latency of one stage-to-stage message (the simulator's edge cost) */
    double p2p_xfer;             /* seconds the sender spends moving one message */
    double p2p_bytes;            /* bytes of one stage-to-stage message per GPU */
    int p2p_inter;               /* 1 if pipeline neighbours sit on different nodes */
    double tp_s_per_mb;          /* TP all-reduce seconds in F+B of one layer-stage (max stage) */
    double tp_bytes_per_step;    /* all-reduce bytes per GPU per step from TP */
    double tp_s_model_per_mb;    /* every TP all-reduce of one microbatch, all stages (what one rank of a P = 1
                                    run spends in them: calibration) */
    double peak;                 /* dense FLOP/s of the dtype */
    double ffn;                  /* the MLP width F */
    double cp_s_per_mb, cp_bytes_per_layer;   /* context parallelism's K/V collectives */
    double a2a_s_per_mb, a2a_bytes_per_layer; /* MoE all-to-all */
    double params_total, params_active, slots;
    int cp, ep;                  /* resolved (>= 1) */
} pipit__sim_model;

/* M = global batch / (micro-batch x dp), or INVALID naming the numbers. */
pipit_status pipit__sim_microbatches(const pipit_sim_config *cfg, int64_t *M);
/* Validates cfg against itself and hw and fills the model (free with
 * pipit__sim_model_free). head_with_first: the last stage shares the first
 * stage's rank (P = 1, DualPipeV), so the tied embedding is held once. */
pipit_status pipit__sim_model_build(const pipit_sim_config *cfg, const pipit_hw *hw, int V, int head_with_first,
                                    pipit__sim_model *m);
void pipit__sim_model_free(pipit__sim_model *m);
/* Megatron's model FLOPs per step: 72 or 96 B s l h^2 (1 + s/6h + V/(12|16) l h),
 * generalised to any MLP width (docs/sim.md). recompute counts the extra forward. */
double pipit__sim_model_flops(const pipit_sim_config *cfg, int count_recompute);
/* The same with `square` of the s^2 attention term counted (1: Megatron's
 * whole square; 0.5: the causal half). */
double pipit__sim_model_flops_x(const pipit_sim_config *cfg, int count_recompute, double square);
/* The score and context GEMM FLOPs of one pipeline replica's step as the
 * cost model prices them (flash-style: the causal half, the backward's
 * recomputed scores), what calibration divides the attention time into. */
double pipit__sim_attn_flops(const pipit_sim_config *cfg);
/* The model's parameters, all and those a token uses (MoE: k routed + the
 * shared experts), as the memory model counts them (docs/sim.md). */
void pipit__sim_param_counts(const pipit_sim_config *cfg, double *total, double *active);

#endif
