/*
 * test_sim.c — the cost model of pipit_sim.h against independent oracles:
 * Megatron-LM's published throughput (Narayanan et al., SC'21: Table 1 and
 * the 175B PTD-P runs), Meta's Llama 3 405B throughput (the Llama 3 paper's
 * Table 4), Megatron's closed-form FLOP count, hand-computed step times on
 * machines where only one term costs anything, and every bad input.
 */
#include <math.h>
#include "pipit.h"
#include "pipit_sim.h"
#include "test.h"

/* ------------------------------------------------------------ helpers */

/* Megatron-LM as of the SC'21 paper: the DP exchange after the pipeline
 * flush, blocking P2P, the softmax of the [s,s] scores through memory. */
static pipit_sim_config gpt(int layers, int hidden, int heads, int tp, int pp, int dp, int64_t batch) {
    return (pipit_sim_config){.layers = layers, .hidden = hidden, .heads = heads, .seq = 2048, .vocab = 51200,
                              .micro_batch = 1, .global_batch = batch, .recompute = PIPIT_RECOMPUTE_FULL,
                              .tp = tp, .pp = pp, .dp = dp, .schedule = PIPIT_SCHED_1F1B, .dp_after_flush = 1,
                              .blocking_p2p = 1, .unfused_attention = 1,
                              .scatter_gather_p2p = 1};
}

/* Runs cfg on hw; fills *sum; 0 on failure (message printed). */
static int sim(const pipit_sim_config *cfg, const pipit_hw *hw, pipit_sim_summary *sum) {
    pipit_sim_report *r = NULL;
    if (pipit_sim_run(cfg, hw, &r)) {
        fprintf(stderr, "sim failed: %s\n", pipit_errmsg());
        return 0;
    }
    pipit_sim_report_summary(r, sum);
    pipit_sim_report_free(r);
    return 1;
}

/* The smallest V >= 2 that splits a rank's layers evenly (interleaving). */
static int interleave_v(int layers, int pp) {
    int per = layers / pp;
    for (int v = 2; v <= per; v++)
        if (per % v == 0) return v;
    return 1;
}

/* ------------------------------------------------ Megatron reproduction */

/* Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
 * Clusters Using Megatron-LM", SC'21, Table 1 (A100-80GB, s = 2048,
 * V = 51200, full recomputation): params (B), heads, hidden, layers, t, p,
 * GPUs, batch, achieved TFLOP/s per GPU. */
static const struct {
    double billions;
    int heads, hidden, layers, tp, pp, gpus, batch;
    double published;
} TABLE1[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},       {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},      {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},    {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148}, {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163}, {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163},
};

PIPIT_TEST(sim_megatron_weak_scaling) {
    pipit_hw *hw = NULL;
    ASSERT_OK(pipit_hw_load("a100", &hw));
    printf("Megatron-LM weak scaling (SC'21 Table 1) on the a100 description, micro-batch 1, full recompute\n");
    printf("%8s %4s %4s %6s %5s  %9s  %11s %6s  %11s %6s\n", "params", "t", "p", "GPUs", "batch", "published",
           "1f1b", "err", "interleaved", "err");
    double worst = 0;
    for (size_t i = 0; i < sizeof TABLE1 / sizeof TABLE1[0]; i++) {
        int t = TABLE1[i].tp, p = TABLE1[i].pp, d = TABLE1[i].gpus / (t * p);
        pipit_sim_config c = gpt(TABLE1[i].layers, TABLE1[i].hidden, TABLE1[i].heads, t, p, d, TABLE1[i].batch);
        pipit_sim_summary plain, inter = {0};
        ASSERT_TRUE(sim(&c, hw, &plain));
        double pub = TABLE1[i].published, e1 = plain.tflops_per_gpu / pub - 1, e2 = 0;
        ASSERT_EQ_I64(plain.gpus, TABLE1[i].gpus);
        if (p > 1) { /* the paper's interleaved schedule, as a second reading */
            c.schedule = PIPIT_SCHED_INTERLEAVED_1F1B;
            c.virt = interleave_v(TABLE1[i].layers, p);
            ASSERT_TRUE(sim(&c, hw, &inter));
            e2 = inter.tflops_per_gpu / pub - 1;
        }
        printf("%7.1fB %4d %4d %6d %5d  %9.0f  %11.1f %+5.1f%%  ", TABLE1[i].billions, t, p, TABLE1[i].gpus,
               TABLE1[i].batch, pub, plain.tflops_per_gpu, 100 * e1);
        if (p > 1) printf("%8.1f V%d %+5.1f%%\n", inter.tflops_per_gpu, c.virt, 100 * e2);
        else printf("%11s %6s\n", "-", "");
        ASSERT_TRUE(fabs(e1) <= 0.15);
        ASSERT_TRUE(fabs(e2) <= 0.15);
        worst = fmax(worst, fmax(fabs(e1), fabs(e2)));
    }
    printf("worst error %.1f%% (bound 15%%)\n", 100 * worst);
    pipit_hw_free(hw);
}

/* Section 5.2 / Table 2 of the same paper: GPT-3 175B (96 layers, h = 12288,
 * 96 heads), batch 1536, PTD-P with t = 8, p = 12 (model-parallel size 96)
 * on 384 / 768 / 1536 GPUs: 153 / 149 / 141 TFLOP/s per GPU. */
PIPIT_TEST(sim_megatron_175b_ptdp) {
    pipit_hw *hw = NULL;
    ASSERT_OK(pipit_hw_load("a100", &hw));
    const int gpus[3] = {384, 768, 1536};
    const double published[3] = {153, 149, 141};
    double prev = 1e30;
    for (int i = 0; i < 3; i++) {
        pipit_sim_config c = gpt(96, 12288, 96, 8, 12, gpus[i] / 96, 1536);
        pipit_sim_summary u;
        ASSERT_TRUE(sim(&c, hw, &u));
        printf("175B PTD-P on %4d GPUs: published %3.0f, simulated %.1f TFLOP/s/GPU (%+.1f%%), bubble %.1f%%\n",
               gpus[i], published[i], u.tflops_per_gpu, 100 * (u.tflops_per_gpu / published[i] - 1), 100 * u.bubble);
        ASSERT_TRUE(fabs(u.tflops_per_gpu / published[i] - 1) <= 0.15);
        ASSERT_TRUE(u.tflops_per_gpu < prev); /* fewer microbatches per pipeline: a larger bubble */
        prev = u.tflops_per_gpu;
    }
    pipit_hw_free(hw);
}

/* Llama Team, AI @ Meta, "The Llama 3 Herd of Models", arXiv:2407.21783,
 * section 3.3.2, Table 4 (H100-80GB, bf16, seq 8192, 16M tokens a step, no
 * activation checkpointing): Llama 3 405B (126 layers, h = 16384, 128 heads,
 * 8 kv heads, SwiGLU of 53248, vocab 128256) at TP 8, PP 16 on 8,192 GPUs
 * (DP 64, 32 sequences per DP rank) and 16,384 GPUs (DP 128, 16): 430 and
 * 400 TFLOP/s per GPU. The pipeline as the text describes it: interleaved,
 * one layer fewer on the first and the last stage, the first chunk holding
 * only the embedding (so one layer a chunk: V = 8), asynchronous P2P; FSDP
 * as ZeRO-1 (the same gradient bytes), stage messages scattered over the
 * TP group and gathered after (scatter_gather_p2p). The model has no FSDP all-gathers,
 * document masks or stragglers: it overestimates both rows by about 12%; the
 * bound is 15%, and the drop from 8K to 16K GPUs (the bubble of fewer
 * microbatches) within one point of the published 7.0%. */
PIPIT_TEST(sim_llama3_405b_table4) {
    pipit_hw *hw = NULL;
    ASSERT_OK(pipit_hw_load("h100", &hw));
    const int dp[2] = {64, 128};
    const double published[2] = {430, 400};
    double got[2];
    for (int i = 0; i < 2; i++) {
        pipit_sim_config c = {.layers = 126, .hidden = 16384, .heads = 128, .kv_heads = 8, .ffn_hidden = 53248,
                              .gated_mlp = 1, .rope = 1, .ends_as_layers = 1, .seq = 8192, .vocab = 128256,
                              .micro_batch = 1, .global_batch = 2048, .tp = 8, .pp = 16, .dp = dp[i], .zero1 = 1,
                              .schedule = PIPIT_SCHED_INTERLEAVED_1F1B, .virt = 8,
                              .scatter_gather_p2p = 1}; /* Meta's stage messages: 1/t per GPU, as Megatron's */
        pipit_sim_summary u;
        ASSERT_TRUE(sim(&c, hw, &u));
        ASSERT_EQ_I64(u.gpus, 8 * 16 * dp[i]);
        got[i] = u.tflops_per_gpu;
        printf("Llama 3 405B on %5d GPUs: published %3.0f, simulated %.1f TFLOP/s/GPU (%+.1f%%), MFU %.1f%%, "
               "bubble %.1f%%\n", u.gpus, published[i], got[i], 100 * (got[i] / published[i] - 1), 100 * u.mfu,
               100 * u.bubble);
        ASSERT_TRUE(fabs(got[i] / published[i] - 1) <= 0.15);
    }
    ASSERT_NEAR_F64(got[1] / got[0], published[1] / published[0], 0.01);
    pipit_hw_free(hw);
}

/* GPT-3 175B on H100 (TP 8, PP 8, interleaved 1F1B, 64 microbatches per
 * pipeline): weak scaling from 128 to 1024 GPUs stays efficient (the DP
 * exchange grows only as 2(d-1)/d) and interleaving beats GPipe at equal
 * memory. A sanity check of `pipit sim --weak-scaling` (tests/test_cli_sim.sh). */
PIPIT_TEST(sim_gpt3_h100_weak_scaling) {
    pipit_hw *hw = NULL;
    ASSERT_OK(pipit_hw_load("h100", &hw));
    double base = 0;
    for (int d = 2; d <= 16; d *= 2) {
        pipit_sim_config c = gpt(96, 12288, 96, 8, 8, d, 64 * d);
        c.schedule = PIPIT_SCHED_INTERLEAVED_1F1B;
        pipit_sim_summary u;
        ASSERT_TRUE(sim(&c, hw, &u));
        if (d == 2) base = u.tflops_per_gpu;
        double eff = u.tflops_per_gpu / base;
        printf("H100 175B: %4d GPUs, %.1f TFLOP/s/GPU, weak-scaling efficiency %.3f\n", u.gpus, u.tflops_per_gpu, eff);
        ASSERT_TRUE(eff <= 1.0 + 1e-12 && eff > 0.9);
        ASSERT_TRUE(u.peak_bytes_per_rank < 80e9);
    }
    pipit_hw_free(hw);
}

/* ---------------------------------------------------- the FLOP formula */

/* Megatron's closed forms (Narayanan et al. 2021, eq. 3 and the text
 * before it): 96 B s l h^2 (1 + s/6h + V/16lh) with full recomputation,
 * 72 B s l h^2 (1 + s/6h + V/12lh) without. */
PIPIT_TEST(sim_model_flops_is_megatrons_formula) {
    pipit_hw *hw = NULL;
    ASSERT_OK(pipit_hw_load("a100", &hw));
    const int shapes[3][3] = {{24, 2304, 24}, {48, 8192, 64}, {96, 12288, 96}};
    for (int i = 0; i < 3; i++)
        for (int rc = 0; rc < 2; rc++) {
            pipit_sim_config c = gpt(shapes[i][0], shapes[i][1], shapes[i][2], 8, 2, 2, 64);
            c.recompute = rc ? PIPIT_RECOMPUTE_FULL : PIPIT_RECOMPUTE_NONE;
            pipit_sim_summary u;
            ASSERT_TRUE(sim(&c, hw, &u));
            double B = 64, s = 2048, l = c.layers, h = c.hidden, V = 51200;
            double want = rc ? 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
                             : 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
            ASSERT_NEAR_F64(u.model_flops / want, 1.0, 1e-12);
            ASSERT_NEAR_F64(u.tflops_per_gpu * 1e12 * u.step_s * u.gpus / want, 1.0, 1e-9);
            double no_rc = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
            ASSERT_NEAR_F64(u.mfu * u.step_s * u.gpus * 312e12 / no_rc, 1.0, 1e-9);
        }
    pipit_hw_free(hw);
}

/* ------------------------------------------------- hand-computed cases */

/* A machine where one term alone costs anything: compute at `peak` with
 * efficiency 1 for every GEMM, or links of bandwidth `link_bw`. */
static pipit_hw *toy_hw(double peak, double mem_bw, double link_bw) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"name\":\"toy\",\"peak_flops\":{\"fp32\":%g},\"train_dtype\":\"fp32\",\"gemm_efficiency\":[[1,1]],"
             "\"mem_bandwidth\":%g,\"mem_capacity\":1e12,\"gpus_per_node\":8,"
             "\"intra_node\":{\"bandwidth\":%g,\"latency\":0},\"inter_node\":{\"bandwidth\":%g,\"latency\":0}}",
             peak, mem_bw, link_bw, link_bw);
    pipit_hw *hw = NULL;
    if (pipit_hw_parse(json, "toy", &hw)) fprintf(stderr, "toy: %s\n", pipit_errmsg());
    return hw;
}

/* Unfused attention: the hand counts below take Megatron's three passes of
 * the whole square (flash-style pricing has its own case). */
static pipit_sim_config tiny(int tp, int pp, int dp) {
    return (pipit_sim_config){.layers = 4, .hidden = 64, .heads = 4, .seq = 16, .vocab = 128, .micro_batch = 2,
                              .global_batch = 8 * dp, .tp = tp, .pp = pp, .dp = dp, .schedule = PIPIT_SCHED_GPIPE,
                              .unfused_attention = 1};
}

/* Compute only, one GPU: the step is every GEMM FLOP over the peak:
 * 3 passes of (per layer 2T(4h^2 + 2*4h^2) + 4 b s^2 h) and of the logits 2ThV. */
PIPIT_TEST(sim_compute_only_step_is_flops_over_peak) {
    pipit_hw *hw = toy_hw(1e9, 1e300, 1e300);
    ASSERT_TRUE(hw != NULL);
    pipit_sim_config c = tiny(1, 1, 1);
    pipit_sim_summary u;
    ASSERT_TRUE(sim(&c, hw, &u));
    double B = 8, s = 16, h = 64, T = B * s;
    double layer = 2 * T * (4 * h * h + 8 * h * h) + 4 * B * s * s * h;
    double want = 3 * (4 * layer + 2 * T * h * 128) / 1e9;
    ASSERT_NEAR_F64(u.step_s / want, 1.0, 1e-9);
    ASSERT_NEAR_F64(u.bubble, 0.0, 1e-12);
    pipit_hw_free(hw);
}

/* Links only, tp = 2: per microbatch and layer two all-reduces forward and
 * two backward of T h 4 bytes (ring: 2 (t-1)/t bytes / bw), one each for
 * the embedding output and the logits' input gradient, and the
 * vocabulary-parallel cross-entropy's three of T x 4 bytes (row max, sum of
 * exponentials, target logit): the collectives pipit's runtime runs. */
PIPIT_TEST(sim_tp_allreduces_megatron_count) {
    double bw = 1e9;
    pipit_hw *hw = toy_hw(1e300, 1e300, bw);
    ASSERT_TRUE(hw != NULL);
    pipit_sim_config c = tiny(2, 1, 1);
    pipit_sim_summary u;
    ASSERT_TRUE(sim(&c, hw, &u));
    double T = 2 * 16, ar = 2.0 * 1 / 2 * T * 64 * 4 / bw, xent = 3 * (2.0 * 1 / 2 * T * 4 / bw);
    double want = 4 /* microbatches */ * ((4 /* layers */ * 4 + 2) * ar + xent);
    ASSERT_NEAR_F64(u.step_s / want, 1.0, 1e-9);
    ASSERT_NEAR_F64(u.tp_s_all_per_mb / ((4 * 4 + 2) * ar + xent), 1.0, 1e-9); /* pp 1: all of them, one GPU */
    c.recompute = PIPIT_RECOMPUTE_FULL; /* the recomputed forward repeats its two */
    ASSERT_TRUE(sim(&c, hw, &u));
    ASSERT_NEAR_F64(u.step_s / (4 * ((4 * 6 + 2) * ar + xent)), 1.0, 1e-9);
    pipit_hw_free(hw);
}

/* Links only, dp = 4: after the loop, a ring all-reduce of every gradient
 * (4-byte elements): 2 (d-1)/d x params x 4 / bw. Params of GPT with tied
 * embeddings: l (12h^2 + 13h) + V h + s h + 2h. */
PIPIT_TEST(sim_dp_exchange_is_a_ring_allreduce_of_the_gradients) {
    double bw = 1e9;
    pipit_hw *hw = toy_hw(1e300, 1e300, bw);
    ASSERT_TRUE(hw != NULL);
    pipit_sim_config c = tiny(1, 1, 4);
    pipit_sim_summary u;
    ASSERT_TRUE(sim(&c, hw, &u));
    double h = 64, params = 4 * (12 * h * h + 13 * h) + 128 * h + 16 * h + 2 * h;
    ASSERT_NEAR_F64(u.dp_s / (2.0 * 3 / 4 * params * 4 / bw), 1.0, 1e-9);
    ASSERT_NEAR_F64(u.step_s / u.dp_s, 1.0, 1e-9);
    /* fp32: weights, gradients and Adam's two moments, 16 bytes a parameter;
     * ZeRO-1 keeps a quarter of the moments (8 bytes) on each replica */
    ASSERT_TRUE(u.peak_bytes_per_rank > 16 * params);
    c.zero1 = 1;
    pipit_sim_summary z;
    ASSERT_TRUE(sim(&c, hw, &z));
    ASSERT_NEAR_F64(u.peak_bytes_per_rank - z.peak_bytes_per_rank, 8 * params * 3 / 4, 1e-6);
    pipit_hw_free(hw);
}

/* Compute only, 4 pipeline ranks, 8 microbatches: GPipe's bubble is at
 * least the equal-stage (P-1)/(M+P-1) (the last stage carries the head, so
 * the stages are not equal), 1F1B holds fewer activations. */
PIPIT_TEST(sim_pipeline_bubble_follows_schedule) {
    pipit_hw *hw = toy_hw(1e9, 1e300, 1e300);
    ASSERT_TRUE(hw != NULL);
    pipit_sim_config c = tiny(1, 4, 1);
    c.layers = 8;
    c.global_batch = 16; /* M = 8 */
    pipit_sim_summary g, f;
    ASSERT_TRUE(sim(&c, hw, &g));
    ASSERT_TRUE(g.bubble >= 3.0 / 11 - 1e-9);
    ASSERT_EQ_I64(g.microbatches, 8);
    c.schedule = PIPIT_SCHED_1F1B;
    ASSERT_TRUE(sim(&c, hw, &f));
    ASSERT_TRUE(f.bubble >= 3.0 / 11 - 1e-9);
    ASSERT_TRUE(f.peak_bytes_per_rank < g.peak_bytes_per_rank);
    pipit_hw_free(hw);
}

/* Compute only, flash-style attention with grouped-query heads (4 query,
 * 2 kv heads of 16) and a SwiGLU MLP of width 96: per layer and microbatch
 * the dense GEMMs 2T(h(h + 2 kvw) + h^2 + 3Fh) three times (forward, input
 * and weight gradients) and the score/context products 2 b a s^2 hd seven
 * times (two forward; the backward recomputes the scores: five), each on
 * the causal (s+1)/2s of the square; the logits 2ThV three times. */
PIPIT_TEST(sim_flash_gqa_swiglu_compute_count) {
    pipit_hw *hw = toy_hw(1e9, 1e300, 1e300);
    ASSERT_TRUE(hw != NULL);
    pipit_sim_config c = tiny(1, 1, 1);
    c.unfused_attention = 0, c.kv_heads = 2, c.gated_mlp = 1, c.ffn_hidden = 96, c.rope = 1;
    pipit_sim_summary u;
    ASSERT_TRUE(sim(&c, hw, &u));
    double b = 2, s = 16, h = 64, a = 4, hd = 16, kvw = 32, F = 96, T = b * s, M = 4;
    double dense = 3 * 2 * T * (h * (h + 2 * kvw) + h * h + 3 * F * h);
    double attn = 7 * 2 * b * a * s * s * hd * (s + 1) / (2 * s);
    double want = M * (4 * (dense + attn) + 3 * 2 * T * h * 128) / 1e9;
    ASSERT_NEAR_F64(u.step_s / want, 1.0, 1e-9);
    /* model FLOPs stay Megatron's: the whole square, three passes, kv-wide k and v */
    double mf = 3 * M * (4 * (2 * T * (2 * h * h + 2 * h * kvw + 3 * F * h) + 4 * b * s * s * h) + 2 * T * h * 128);
    ASSERT_NEAR_F64(u.model_flops / mf, 1.0, 1e-12);
    pipit_hw_free(hw);
}

/* Flash-style attention keeps nothing of size s^2 between forward and
 * backward: against the unfused kernels a layer keeps b a s^2 (2e + 1)
 * bytes fewer (Korthikanti's softmax output and dropout mask), and with
 * grouped-query heads k and v are kv wide. GPipe on one rank holds all M
 * microbatches of all 4 layers. */
PIPIT_TEST(sim_flash_memory_has_no_scores) {
    pipit_hw *hw = toy_hw(1e9, 1e9, 1e9);
    ASSERT_TRUE(hw != NULL);
    pipit_sim_config c = tiny(1, 1, 1);
    pipit_sim_summary unfused, flash, gqa;
    ASSERT_TRUE(sim(&c, hw, &unfused));
    c.unfused_attention = 0;
    ASSERT_TRUE(sim(&c, hw, &flash));
    double e = 4, sq = 2 * 4 * 16 * 16, T = 32, h = 64;
    ASSERT_NEAR_F64(unfused.peak_bytes_per_rank - flash.peak_bytes_per_rank, 4 * 4 * sq * (2 * e + 1), 1e-6);
    c.kv_heads = 1; /* k and v 16 wide instead of 64: activations 2 T (64 - 16) e fewer a layer, and the
                       params 2 h (64 - 16) + 2 (64 - 16) fewer a layer, 16 bytes each (fp32 weights,
                       gradients, Adam's two moments) */
    ASSERT_TRUE(sim(&c, hw, &gqa));
    double params = 4 * (2 * h * 48 + 2 * 48);
    ASSERT_NEAR_F64(flash.peak_bytes_per_rank - gqa.peak_bytes_per_rank, 16 * 2 * T * 48 * e + 16 * params, 1e-6);
    pipit_hw_free(hw);
}

/* Layers that do not divide into the stages are cut as pipit's builders
 * cut them: 5 layers over 2 ranks, the first stage gets 3. Compute only,
 * GPipe: a rank is busy M x (its layers' F + B + W) (+ the head on the last). */
PIPIT_TEST(sim_uneven_layers_as_the_builders_cut) {
    pipit_hw *hw = toy_hw(1e9, 1e300, 1e300);
    ASSERT_TRUE(hw != NULL);
    pipit_sim_config c = tiny(1, 2, 1);
    c.layers = 5;
    pipit_sim_report *r = NULL;
    ASSERT_OK(pipit_sim_run(&c, hw, &r));
    double b = 2, s = 16, h = 64, T = b * s, M = 4;
    double layer = 3 * (2 * T * 12 * h * h + 4 * b * s * s * h) / 1e9, head = 3 * 2 * T * h * 128 / 1e9;
    ASSERT_NEAR_F64(pipit_sim_report_rank_busy(r, 0) / (M * 3 * layer), 1.0, 1e-9);
    ASSERT_NEAR_F64(pipit_sim_report_rank_busy(r, 1) / (M * (2 * layer + head)), 1.0, 1e-9);
    pipit_sim_report_free(r);
    pipit_hw_free(hw);
}

/* ------------------------------------------------------------- errors */

PIPIT_TEST(sim_rejects_bad_configs) {
    pipit_hw *hw = NULL;
    ASSERT_OK(pipit_hw_load("a100", &hw));
    pipit_sim_report *r = NULL;
    pipit_sim_config c = gpt(24, 2304, 24, 1, 1, 1, 8);
    c.tp = 5;
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("heads 24 is not divisible by tp 5");
    c = gpt(24, 2304, 24, 1, 25, 1, 25);
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("layers 24 cannot be split into pp 25");
    c = gpt(24, 2304, 24, 1, 2, 1, 8);
    c.schedule = PIPIT_SCHED_INTERLEAVED_1F1B, c.virt = 13;
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("pp 2 x virtual 13");
    c = gpt(24, 2304, 24, 1, 1, 1, 8);
    c.kv_heads = 5; /* grouped-query: kv heads divide heads, and tp divides them */
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("heads 24 is not a multiple of kv heads 5");
    c.kv_heads = 2, c.tp = 4;
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("kv heads 2 is not divisible by tp 4");
    c.kv_heads = -1, c.tp = 1;
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("kv heads must be >= 1");
    c.kv_heads = 0, c.ffn_hidden = 5000, c.ffn_mult = 3;
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("not both");
    c.ffn_mult = 0, c.ffn_hidden = 5001, c.tp = 2;
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("MLP width 5001 is not a whole multiple of tp 2");
    c = gpt(24, 2304, 24, 1, 1, 3, 8);
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("global batch 8 is not divisible by micro-batch 1 x dp 3");
    c = gpt(24, 2304, 24, 16, 1, 1, 8);
    c.heads = 32, c.hidden = 2304 + 256; /* divisible, but 16 GPUs of TP span two nodes */
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("spans more than one node");
    c = gpt(24, 2304, 24, 1, 4, 1, 6); /* M = 6 is not a multiple of P = 4 */
    c.schedule = PIPIT_SCHED_INTERLEAVED_1F1B;
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_SCHEDULE);
    c = gpt(24, 2304, 24, 1, 2, 1, 8);
    const double bad_limits[] = {-1, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        c.eager_limit = bad_limits[i];
        ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
        ASSERT_MSG_HAS("eager limit must be a finite number >= 0 bytes");
    }
    c = gpt(24, 2304, 24, 1, 1, 1, 8);
    c.dtype = "int8";
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("unknown dtype 'int8'");
    c.dtype = NULL, c.seq = 0;
    ASSERT_STATUS(pipit_sim_run(&c, hw, &r), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("seq must be >= 1");
    ASSERT_TRUE(r == NULL);
    ASSERT_STATUS(pipit_sim_run(NULL, hw, &r), PIPIT_STATUS_MISUSE);
    pipit_hw_free(hw);
}

PIPIT_TEST(sim_hw_files_load_and_reject) {
    pipit_hw *hw = NULL;
    const char *names[] = {"a100", "h100", "h200", "cpu"};
    for (int i = 0; i < 4; i++) {
        ASSERT_OK(pipit_hw_load(names[i], &hw));
        ASSERT_TRUE(strcmp(pipit_hw_name(hw), names[i]) == 0);
        pipit_hw_free(hw);
    }
    ASSERT_OK(pipit_hw_load("a100", &hw));
    ASSERT_NEAR_F64(pipit_hw_peak_flops(hw, "bf16"), 312e12, 1);  /* A100 data sheet, dense */
    ASSERT_NEAR_F64(pipit_hw_peak_flops(hw, "tf32"), 156e12, 1);
    ASSERT_NEAR_F64(pipit_hw_peak_flops(hw, "fp32"), 19.5e12, 1);
    /* written and read back: the same description */
    char path[512];
    snprintf(path, sizeof path, "%s/hw_roundtrip.json", pipit_test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    ASSERT_OK(pipit_hw_write(f, hw));
    fclose(f);
    pipit_hw *back = NULL;
    ASSERT_OK(pipit_hw_load(path, &back));
    pipit_sim_config c = gpt(48, 8192, 64, 8, 2, 2, 64);
    pipit_sim_summary a, b;
    ASSERT_TRUE(sim(&c, hw, &a));
    ASSERT_TRUE(sim(&c, back, &b));
    ASSERT_NEAR_F64(a.step_s, b.step_s, 0);
    pipit_hw_free(back);
    pipit_hw_free(hw);
    ASSERT_STATUS(pipit_hw_load("a101", &hw), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("unknown hardware 'a101'");
    const struct { const char *json, *msg; } bad[] = {
        {"[1,2]", "not a JSON object"},
        {"{\"name\":\"x\"", "not a JSON object"},
        {"{\"name\":\"x\",\"peak_flops\":{\"fp32\":1e12},\"train_dtype\":\"fp32\",\"gemm_efficiency\":[[1,1]],"
         "\"mem_capacity\":1,\"intra_node\":{\"bandwidth\":1},\"inter_node\":{\"bandwidth\":1}}",
         "\"mem_bandwidth\" is missing"},
        {"{\"name\":\"x\",\"peak_flops\":{\"fp32\":1e12},\"train_dtype\":\"bf16\",\"gemm_efficiency\":[[1,1]],"
         "\"mem_bandwidth\":1,\"mem_capacity\":1,\"intra_node\":{\"bandwidth\":1},\"inter_node\":{\"bandwidth\":1}}",
         "\"train_dtype\""},
        {"{\"name\":\"x\",\"peak_flops\":{\"fp32\":1e12},\"train_dtype\":\"fp32\",\"gemm_efficiency\":[[8,0.5],[4,0.9]],"
         "\"mem_bandwidth\":1,\"mem_capacity\":1,\"intra_node\":{\"bandwidth\":1},\"inter_node\":{\"bandwidth\":1}}",
         "increasing dimensions"},
        {"{\"name\":\"x\",\"peak_flops\":{\"fp32\":-1},\"train_dtype\":\"fp32\",\"gemm_efficiency\":[[1,1]],"
         "\"mem_bandwidth\":1,\"mem_capacity\":1,\"intra_node\":{\"bandwidth\":1},\"inter_node\":{\"bandwidth\":1}}",
         "non-negative number"},
        {"{\"name\":\"x\",\"peak_flops\":{\"fp32\":1},\"train_dtype\":\"fp32\",\"gemm_efficiency\":[[1,1]],"
         "\"mem_bandwidth\":1,\"mem_capacity\":1,\"intra_node\":{\"latency\":1},\"inter_node\":{\"bandwidth\":1}}",
         "\"bandwidth\" is missing"},
        {"{\"name\":\"a\\\"b\",\"peak_flops\":{\"fp32\":1}}", "letters, digits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_STATUS(pipit_hw_parse(bad[i].json, "t.json", &hw), PIPIT_STATUS_FORMAT);
        ASSERT_MSG_HAS(bad[i].msg);
        ASSERT_TRUE(hw == NULL);
    }
}

/* ---------------------------------------------------------- calibration */

static void write_profile(const char *path, double t_mm, double t_attn, double t_elem) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    /* two ranks: the fit adds them; a --tp run's all-reduces (tp_sum,
     * tp_max: the links' time, waiting included) and --sp's all-gathers and
     * reduce-scatters are left out of the fit */
    fprintf(f,
            "{\"model\":{\"layers\":4,\"dim\":128,\"heads\":4,\"ctx\":64,\"vocab\":256,\"micro_batch\":8,"
            "\"microbatches\":4,\"pp\":2},\"steps\":2,\"step_s\":0.1,\"profile\":{\"ranks\":["
            "{\"rank\":0,\"ops\":{\"matmul\":%.17g,\"attention\":%.17g,\"layernorm\":%.17g},\"instructions\":{}},"
            "{\"rank\":1,\"ops\":{\"matmul\":%.17g,\"attn_dqkv\":%.17g,\"gelu\":%.17g,\"tp_sum\":1.5,\"tp_max\":0.5,"
            "\"sp_gather\":0.7,\"sp_scatter\":0.3,\"sp_split\":0.1},"
            "\"instructions\":{}}]}}\n",
            t_mm, t_attn, t_elem, t_mm, t_attn, t_elem);
    fclose(f);
}

/* The fitted peak is the GEMM FLOPs outside attention (Megatron's count:
 * 3 passes of 2T(4h^2 + 8h^2) per layer and 2ThV for the logits) over the
 * matmul seconds; and the description reproduces the profile: one rank
 * simulating the profiled model is busy exactly the measured op time. */
PIPIT_TEST(sim_calibration_fits_the_profile) {
    char path[512];
    snprintf(path, sizeof path, "%s/profile.json", pipit_test_tmpdir());
    double t_mm = 0.02, t_attn = 0.004, t_elem = 0.006; /* per rank, over 2 steps */
    write_profile(path, t_mm, t_attn, t_elem);
    pipit_hw *hw = NULL;
    ASSERT_OK(pipit_hw_calibrate(path, &hw));
    double T = 8 * 64, h = 128, f_mm = 4 * (4 * 3 * 2 * T * 12 * h * h + 3 * 2 * T * h * 256);
    double per_step_mm = 2 * t_mm / 2;
    double peak = pipit_hw_peak_flops(hw, "fp32");
    /* seven score/context products a layer (two forward, five backward), the causal (s+1)/2s of each */
    double attn_rate = 7 * 2.0 * 8 * 64 * 64 * 128 * (65.0 / 128) * 4 * 4 / (2 * t_attn / 2);
    ASSERT_NEAR_F64(fmax(f_mm / per_step_mm, attn_rate) / peak, 1.0, 1e-9);
    pipit_sim_config c = {.layers = 4, .hidden = 128, .heads = 4, .seq = 64, .vocab = 256, .micro_batch = 8,
                          .global_batch = 32, .tp = 1, .pp = 1, .dp = 1, .schedule = PIPIT_SCHED_GPIPE};
    pipit_sim_report *r = NULL;
    ASSERT_OK(pipit_sim_run(&c, hw, &r));
    ASSERT_NEAR_F64(pipit_sim_report_rank_busy(r, 0) / (t_mm + t_attn + t_elem), 1.0, 1e-9);
    pipit_sim_report_free(r);
    pipit_hw_free(hw);
    FILE *f = fopen(path, "w");
    fputs("{\"model\":{\"layers\":4},\"steps\":1}", f);
    fclose(f);
    ASSERT_STATUS(pipit_hw_calibrate(path, &hw), PIPIT_STATUS_FORMAT);
    ASSERT_MSG_HAS("\"model\" lacks");
    ASSERT_STATUS(pipit_hw_calibrate("/nonexistent/p.json", &hw), PIPIT_STATUS_IO);
    ASSERT_MSG_HAS("cannot open profile");
}

/* ---------------------------------------------- links and DP overlap */

/* Link specs: units, single keys, what is left alone, and bad items. */
PIPIT_TEST(sim_link_spec) {
    pipit_hw_links l;
    ASSERT_OK(pipit_hw_parse_links("inter=100Mbit:50us,intra=5GB,gpus-per-node=4", &l));
    ASSERT_NEAR_F64(l.inter_bw, 12.5e6, 1e-6);
    ASSERT_NEAR_F64(l.inter_lat, 50e-6, 1e-15);
    ASSERT_NEAR_F64(l.intra_bw, 5e9, 1e-3);
    ASSERT_TRUE(l.intra_lat < 0); /* not given: kept */
    ASSERT_EQ_I64(l.gpus_per_node, 4);
    ASSERT_OK(pipit_hw_parse_links("inter-lat=1ms,intra-bw=2e9,intra-lat=0", &l));
    ASSERT_TRUE(l.inter_bw < 0 && l.gpus_per_node == 0);
    ASSERT_NEAR_F64(l.inter_lat, 1e-3, 1e-15);
    ASSERT_NEAR_F64(l.intra_lat, 0, 0);
    pipit_hw *hw = toy_hw(1e9, 1e9, 1e9);
    ASSERT_TRUE(hw != NULL);
    ASSERT_OK(pipit_hw_set_links(hw, &l));
    pipit_hw_links got;
    ASSERT_OK(pipit_hw_get_links(hw, &got));
    ASSERT_NEAR_F64(got.inter_bw, 1e9, 0); /* kept */
    ASSERT_NEAR_F64(got.inter_lat, 1e-3, 1e-15);
    ASSERT_NEAR_F64(got.intra_bw, 2e9, 0);
    ASSERT_EQ_I64(got.gpus_per_node, 8);
    ASSERT_STATUS(pipit_hw_parse_links("inter=fast", &l), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("link inter 'fast': expected a bandwidth > 0");
    ASSERT_STATUS(pipit_hw_parse_links("inter=1G:5parsecs", &l), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("expected a latency >= 0");
    ASSERT_STATUS(pipit_hw_parse_links("inter-bw=0", &l), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_hw_parse_links("wan=1G", &l), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("unknown key 'wan'");
    ASSERT_STATUS(pipit_hw_parse_links("gpus-per-node=0", &l), PIPIT_STATUS_INVALID);
    ASSERT_STATUS(pipit_hw_parse_links("inter", &l), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("is not key=value");
    pipit_hw_links nan_bw = {-1, -1, 0, -1, 0};
    ASSERT_STATUS(pipit_hw_set_links(hw, &nan_bw), PIPIT_STATUS_INVALID);
    ASSERT_MSG_HAS("inter-node bandwidth 0");
    pipit_hw_free(hw);
}

/* A slower inter-node link makes a pipeline across nodes slower, and one
 * inside a node does not care. */
PIPIT_TEST(sim_links_change_the_step) {
    pipit_hw *hw = toy_hw(1e9, 1e10, 1e9);
    ASSERT_TRUE(hw != NULL);
    pipit_sim_config c = tiny(1, 2, 1);
    pipit_sim_summary fast, slow, inside;
    ASSERT_TRUE(sim(&c, hw, &fast));
    pipit_hw_links l;
    ASSERT_OK(pipit_hw_parse_links("inter=1e5:1ms,gpus-per-node=1", &l));
    ASSERT_OK(pipit_hw_set_links(hw, &l));
    ASSERT_TRUE(sim(&c, hw, &slow));
    ASSERT_OK(pipit_hw_parse_links("gpus-per-node=2", &l));
    ASSERT_OK(pipit_hw_set_links(hw, &l));
    ASSERT_TRUE(sim(&c, hw, &inside));
    ASSERT_TRUE(slow.step_s > 1.5 * fast.step_s);
    ASSERT_NEAR_F64(inside.step_s, fast.step_s, 1e-12 * fast.step_s);
    pipit_hw_free(hw);
}

/* The DP exchange runs during the last backward: with compute that takes
 * time, part of it is hidden, and exactly the hidden part is missing from
 * the step; with compute free (every share ready at once) none is. */
PIPIT_TEST(sim_dp_exchange_overlaps_the_backward) {
    pipit_hw *hw = toy_hw(1e8, 1e300, 1e9);
    ASSERT_TRUE(hw != NULL);
    pipit_sim_config c = tiny(1, 1, 4);
    pipit_sim_summary u;
    ASSERT_TRUE(sim(&c, hw, &u));
    ASSERT_TRUE(u.dp_hidden > 0.25 && u.dp_hidden < 1);
    ASSERT_NEAR_F64(u.dp_s, (1 - u.dp_hidden) * u.dp_total_s, 1e-9 * u.dp_total_s);
    ASSERT_NEAR_F64(u.step_s, u.pipeline_s + u.dp_s + u.optimizer_s, 1e-9 * u.step_s);
    double h = 64, params = 4 * (12 * h * h + 13 * h) + 128 * h + 16 * h + 2 * h;
    ASSERT_TRUE(u.dp_total_s >= 2.0 * 3 / 4 * params * 4 / 1e9); /* the whole gradient, in shares */
    c.dp_after_flush = 1; /* Megatron-LM 2021: all of it after the last task, nothing hidden */
    pipit_sim_summary m;
    ASSERT_TRUE(sim(&c, hw, &m));
    ASSERT_NEAR_F64(m.dp_hidden, 0, 1e-12);
    ASSERT_NEAR_F64(m.dp_s, 2.0 * 3 / 4 * params * 4 / 1e9, 1e-9);
    ASSERT_TRUE(m.step_s > u.step_s);
    pipit_hw_free(hw);
}
