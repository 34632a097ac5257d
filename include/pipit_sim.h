/*
 * pipit_sim.h — what a training run will cost before it runs: a cost model
 * of GPT-2/GPT-3/Llama-like transformers (FLOPs and bytes per layer, per
 * pass) on a described machine (peak FLOP/s, a GEMM efficiency curve,
 * memory bandwidth and capacity, links within and across nodes), tensor
 * parallelism as an analytic term, data parallelism as the gradient
 * exchange the runtime does, and the pipeline through the schedule
 * simulator (pipit_inspect.h). docs/sim.md has every formula and its source.
 * Same conventions as pipit.h: handles are opaque, every fallible call
 * returns a pipit_status and leaves a message (pipit_errmsg).
 */
#ifndef PIPIT_SIM_H
#define PIPIT_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "pipit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- hardware */

typedef struct pipit_hw pipit_hw;

/* A hardware description by built-in name ("a100", "h100", "h200", "cpu":
 * the files of data/hw/, compiled in) or by the path of a JSON file
 * (docs/sim.md lists the keys). FORMAT with the key named for a malformed
 * file, INVALID for an unknown name that is not a file either. */
PIPIT_API pipit_status pipit_hw_load(const char *name_or_path, pipit_hw **out);
/* The same from JSON text; `what` names it in messages. */
PIPIT_API pipit_status pipit_hw_parse(const char *json, const char *what, pipit_hw **out);
PIPIT_API void pipit_hw_free(pipit_hw *hw);
PIPIT_API const char *pipit_hw_name(const pipit_hw *hw);
/* Number of built-in descriptions and the name of the i-th ("a100", ...). */
PIPIT_API int pipit_hw_builtin_count(void);
PIPIT_API const char *pipit_hw_builtin_name(int i);
/* Dense peak FLOP/s of the training dtype ("fp32", "bf16", ...). */
PIPIT_API double pipit_hw_peak_flops(const pipit_hw *hw, const char *dtype);
/* Memory of one device in bytes (0 for NULL). */
PIPIT_API double pipit_hw_mem_capacity(const pipit_hw *hw);
/* Writes the description as JSON (the format pipit_hw_load reads). */
PIPIT_API pipit_status pipit_hw_write(FILE *f, const pipit_hw *hw);

/* The links of a description: a node's devices (ranks) talk over the
 * intra-node link, nodes over the inter-node one (bandwidth in bytes/s,
 * latency in seconds). */
typedef struct {
    double intra_bw, intra_lat;
    double inter_bw, inter_lat;
    int gpus_per_node;          /* devices (ranks) per node */
} pipit_hw_links;

PIPIT_API pipit_status pipit_hw_get_links(const pipit_hw *hw, pipit_hw_links *out);
/* Sets the fields of l that are >= 0 (gpus_per_node: >= 1) and keeps the
 * others: INVALID naming the field for a bandwidth of 0 or a non-finite
 * number, nothing changed then. */
PIPIT_API pipit_status pipit_hw_set_links(pipit_hw *hw, const pipit_hw_links *l);
/* Parses a comma list of key=value into *out (fields not named: -1, and
 * gpus_per_node 0, so pipit_hw_set_links keeps them): inter=BW[:LAT],
 * intra=BW[:LAT], inter-bw, inter-lat, intra-bw, intra-lat, gpus-per-node.
 * A bandwidth is bytes/s with an optional unit (12.5e6, 5GB, 100Mbit,
 * 1Gbit), a latency seconds (2e-6, 50us, 1ms). INVALID naming the item. */
PIPIT_API pipit_status pipit_hw_parse_links(const char *spec, pipit_hw_links *out);

/* Puts measured links into a description (after pipit_probe_links): the
 * links it measured, gpus_per_node = the processes on one host (with one
 * process: THREADS_PER_NODE, every rank of a threaded run shares the
 * node), and a line in "sources" saying what was measured and what kept
 * its assumed value. */
#define PIPIT_HW_THREADS_PER_NODE 4096
PIPIT_API pipit_status pipit_hw_apply_probe(pipit_hw *hw, const pipit_link_probe *probe);

/* Fits the CPU description to a profile written by `pipit train --profile
 * --profile-out FILE` (pipit_program_write_profile_json): effective GEMM
 * FLOP/s by size from the matmul ops, elementwise bandwidth from the rest. */
PIPIT_API pipit_status pipit_hw_calibrate(const char *profile_path, pipit_hw **out);

/* ---------------------------------------------------------------- model */

/* What the backward recomputes (pipit_options.remat's values): nothing;
 * each layer's forward (Megatron's full recomputation); or the pointwise
 * activations whose inputs are kept anyway (GELU's output, SwiGLU's
 * silu(gate) and product: the MLP keeps half the width-F values). */
typedef enum { PIPIT_RECOMPUTE_NONE = 0, PIPIT_RECOMPUTE_FULL = 1, PIPIT_RECOMPUTE_POINTWISE = 2 } pipit_recompute;
/* "none", "full", "pointwise"; "unknown" (and the message set) for a
 * value outside the enum. */
PIPIT_API const char *pipit_recompute_name(pipit_recompute r);

typedef struct {
    /* the model: a decoder-only transformer. layers need not divide into
     * the pp x virtual stages: as pipit's model builders cut them, the first
     * (layers mod stages) stages get one layer more */
    int layers, hidden, heads, seq, vocab;
    int ends_as_layers;     /* 1: cut as if the embedding and the head were a layer each (Llama 3's
                               pipeline: the first and the last stage hold one layer fewer) */
    double ffn_mult;        /* MLP width / hidden (0: 4, GPT) */
    int gated_mlp;          /* 1: SwiGLU (Llama: three MLP matrices), 0: GELU (GPT) */
    int kv_heads;           /* key/value heads of grouped-query attention, dividing heads (0: = heads) */
    int ffn_hidden;         /* the MLP width F itself (0: ffn_mult x hidden); not with ffn_mult */
    int rope;               /* 1: rotary positions, no position table (Llama); 0: learned positions (GPT) */
    int unfused_attention;  /* 1: the [s,s] scores through memory and the whole square computed (Megatron-LM
                               2021's softmax kernels); 0: flash-style as pipit's kernels: no s^2 traffic or
                               storage, only the causal half, the backward recomputing the scores */
    int micro_batch;        /* sequences per microbatch b */
    int64_t global_batch;   /* sequences per step B = b * M * dp */
    pipit_recompute recompute;
    /* the mesh */
    int tp, pp, dp;
    int schedule;           /* pipit_schedule_kind */
    int virt;               /* stages per pipeline rank (0: the schedule's own) */
    int zero1;              /* the ZeRO stage over dp: 0 none, 1 the optimizer state, 2 and the gradients,
                               3 and the parameters (as options.zero; 2 and 3 hold the full blocks during a
                               step, so their peak is stage 1's plus the kept shards) */
    const char *dtype;      /* "bf16", "fp16", "fp32", "tf32" (NULL: the hardware's train_dtype) */
    /* how the runtime communicates (0: as pipit does) */
    int dp_after_flush;     /* 1: the DP exchange starts after the rank's last task (Megatron-LM 2021);
                               0: each layer's share as soon as the backward has made it */
    int blocking_p2p;       /* 1: a stage message occupies its sender (Megatron's blocking P2P);
                               0: it occupies its link (zero-copy sends, background progress) */
    int scatter_gather_p2p; /* tp > 1: 1: a stage message is cut into tp parts, one per GPU, all-gathered
                               after (Megatron's scatter/gather); 0: each GPU sends its counterpart the
                               whole activation (pipit's tensor-parallel stages) */
    double eager_limit;     /* bytes: a stage message larger than this is a rendezvous (MPI's protocol
                               above its eager limit; Open MPI over TCP: 65536): it moves once its
                               receiver waits for it and a reply has crossed back (pipit_sim_costs,
                               pulled); 0: every message leaves when sent */
    /* the sequence (docs/sim.md, "Sequence and context parallelism") */
    int sp;                 /* 1 (with tp > 1): Megatron's sequence parallelism: the norms, residual adds and
                               dropouts hold 1/tp of the sequence, each all-reduce an all-gather + reduce-scatter
                               of the same bytes, stage messages 1/tp per GPU; seq / cp divisible by tp */
    int cp;                 /* context-parallel ranks c in each stage (0 or 1: none): the mesh is
                               pp x tp x cp x dp (GPUs t c p d, tp then cp innermost); each rank holds 2 of the
                               sequence's 2c chunks (s/c tokens), all-gathers K and V per layer forward and
                               reduce-scatters their gradients backward; parameters replicated over cp, their
                               gradients reduced (ZeRO: sharded) over cp x dp; seq divisible by 2c */
    /* mixture of experts (experts 0: every MLP dense), as the Llama builder's (pipit_llama.h) */
    int experts;            /* routed experts E of each MoE layer */
    int top_k;              /* experts per token, 1..E (0: 2) */
    int shared_experts;     /* always-on experts beside the routed ones */
    int moe_every;          /* layer l (from 0) is MoE when (l + 1) % moe_every == 0 (0 or 1: every layer) */
    double capacity_factor; /* slots per expert ceil(F x tokens x k / E), at most the tokens (0: 1.25) */
    int dropless;           /* 1: every expert has a slot per token (capacity = tokens), as pipit's --dropless */
    int ep;                 /* expert-parallel ranks (0 or 1: none): each MoE layer's experts split over ep ranks
                               of the dp group (ep divides dp and E); tokens exchanged by all-to-all */
    int expert_ffn;         /* width of one expert (0: the MLP width, as pipit's builder) */
    int no_dropout;         /* 1: no dropout (Llama): no masks kept, no dropout in the residual adds' traffic */
    int reshard_after_forward; /* with zero1 = 3 (INVALID otherwise): ZeRO-3 per task, as
                               options.reshard_after_forward: a 32-bit dtype's params are gathered one at a
                               time before each task that reads them (F, B, BW; not W), inside the task, and
                               the peak holds the most gathered at once instead of the full block; a 16-bit
                               dtype's loop reads its 16-bit copies (no gathers, the same peak as stage 3) */
} pipit_sim_config;

typedef struct {
    double step_s;              /* simulated time of one optimizer step */
    double tflops_per_gpu;      /* model FLOPs as Megatron counts them (recompute included) / step / GPUs */
    double mfu;                 /* model FLOPs without recompute / step / GPUs / peak (PaLM's MFU) */
    double hfu;                 /* tflops_per_gpu / peak */
    double bubble;              /* the pipeline's idle fraction (schedule simulator) */
    double peak_bytes_per_rank; /* the largest rank's planned peak memory */
    double model_flops;         /* per step, Megatron's formula (recompute counted) */
    double pipeline_s;          /* the simulated pipeline loop (makespan) */
    double dp_s, optimizer_s;   /* exposed data-parallel exchange and optimizer after the loop */
    double tp_s_per_mb;         /* tensor-parallel all-reduce time in one microbatch's F+B of a stage */
    int microbatches, virt, stages, gpus;
    double dp_total_s;          /* the whole data-parallel exchange of the step's slowest rank */
    double dp_hidden;           /* the share of it that overlaps the backward: 1 - dp_s / dp_total_s */
    double tp_s_all_per_mb;     /* every tensor-parallel all-reduce of one microbatch over all stages (the
                                   layers', the embedding's, the head's, the cross-entropy's): with pp 1,
                                   what each GPU spends in them per microbatch */
    double cp_s_per_mb;         /* context parallelism: K/V all-gather (forward) + reduce-scatter (backward) seconds
                                   of one microbatch in the fullest stage */
    double cp_bytes_per_layer;  /* bytes one GPU receives in a layer's K/V all-gather: (c-1)/c b s 2 kvw e / t */
    double a2a_s_per_mb;        /* MoE all-to-all (dispatch + combine, forward and backward) seconds of one
                                   microbatch in the fullest stage */
    double a2a_bytes_per_layer; /* bytes one GPU sends to other ranks in one all-to-all of a MoE layer */
    double params_total;        /* the model's parameters (every expert) */
    double params_active;       /* those one token goes through (k routed + shared experts) */
    double expert_slots;        /* capacity: slots per expert of one rank's microbatch (0: dense) */
    double tflops_causal;       /* tflops_per_gpu with the attention's causal half of the s^2 square counted (what
                                   flash-style kernels execute) instead of Megatron's whole square */
    double mfu_causal;          /* mfu, counted so */
} pipit_sim_summary;

typedef struct pipit_sim_report pipit_sim_report;

/* Checks the config (divisibility, mesh, memory-independent limits) and
 * simulates one step. INVALID with a message naming the flag's quantity
 * ("heads 12 is not divisible by tp 8") for an impossible config. */
PIPIT_API pipit_status pipit_sim_run(const pipit_sim_config *cfg, const pipit_hw *hw, pipit_sim_report **out);
PIPIT_API void pipit_sim_report_free(pipit_sim_report *r);
PIPIT_API pipit_status pipit_sim_report_summary(const pipit_sim_report *r, pipit_sim_summary *out);
/* Per pipeline rank: peak bytes, busy seconds (-1 for a rank out of range). */
PIPIT_API double pipit_sim_report_rank_peak_bytes(const pipit_sim_report *r, int rank);
PIPIT_API double pipit_sim_report_rank_busy(const pipit_sim_report *r, int rank);
/* The report as one JSON object (docs/sim.md), or readable text. */
PIPIT_API pipit_status pipit_sim_report_write_json(FILE *f, const pipit_sim_report *r);
PIPIT_API pipit_status pipit_sim_report_print(FILE *f, const pipit_sim_report *r);

#ifdef __cplusplus
}
#endif
#endif /* PIPIT_SIM_H */
