/*
 * presets.c — `--model NAME`: the standard GPT-2 sizes (124M, medium,
 * large, xl: vocab 50257, ctx 1024), `tiny`, the default, a model that
 * trains in seconds on a CPU, and the Llama family's `llama-tiny` (the
 * same size class as tiny), `llama-100m` and `moe-tiny` (a Mixtral-style
 * mixture of experts of the same class), `moe-100m` (Mixtral-style, 106.5M
 * params, 49.9M active) and `llama-50m` (the dense Llama of its active
 * size). Each brings the defaults that go with it (micro-batch, steps,
 * lr); explicit flags and --config keys override any field (precedence:
 * defaults < preset < config < flags).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* lr: tiny 1e-3; the GPT-2 sizes GPT-3's table (6e-4, 3e-4, 2.5e-4, 2e-4).
 * Llama: rms_norm_eps 1e-5 and rope_theta 10000 as Llama 2; llama-tiny's
 * MLP width is Meta's rule for dim 128 with multiple_of 32 (352); llama-100m
 * has GPT-2's vocabulary (its token shards train it as they are), GQA with
 * 3 query heads per key/value head and a tied head: 101.5M params. */
static const cli_preset PRESETS[] = {
    {"tiny", "gpt2", 256, 64, 4, 4, 128, 8, 100, 1e-3, "byte-level GPT-2, 0.8M params (the default)", 0, 0, 0, 0, 0, 0, 0},
    {"gpt2", "gpt2", 50257, 1024, 12, 12, 768, 1, 100, 6e-4, "GPT-2 124M", 0, 0, 0, 0, 0, 0, 0},
    {"gpt2-medium", "gpt2", 50257, 1024, 24, 16, 1024, 1, 100, 3e-4, "GPT-2 350M", 0, 0, 0, 0, 0, 0, 0},
    {"gpt2-large", "gpt2", 50257, 1024, 36, 20, 1280, 1, 100, 2.5e-4, "GPT-2 774M", 0, 0, 0, 0, 0, 0, 0},
    {"gpt2-xl", "gpt2", 50257, 1024, 48, 25, 1600, 1, 100, 2e-4, "GPT-2 1558M", 0, 0, 0, 0, 0, 0, 0},
    {"llama-tiny", "llama", 256, 64, 4, 4, 128, 8, 100, 1e-3, "byte-level Llama, GQA 4/2 heads, 0.8M params", 2, 352, 0,
     1e-5, 1e4, 0, 0},
    {"llama-100m", "llama", 50257, 1024, 10, 12, 768, 1, 100, 6e-4, "Llama 101.5M: L10 H12 KV4 C768 F2048, tied", 4,
     2048, 1, 1e-5, 1e4, 0, 0},
    /* Mixtral-style: 8 SwiGLU experts of width 144 per layer, top-2
     * (capacity factor 1.25 unless --dropless): 0.97M params, 0.31M active */
    {"moe-tiny", "llama", 256, 64, 4, 4, 64, 8, 100, 1e-3, "byte-level Mixtral-style MoE, 8 experts top-2, 1.0M params",
     2, 144, 0, 1e-5, 1e4, 8, 2},
    /* Mixtral-style at GPT-2's vocabulary (its token shards), tied: 8
     * experts of width 768 per layer, top-2, KV 2 of 8 heads (Mixtral's
     * 4:1): 106.5M params, 49.9M active per token (embedding, attention,
     * router and 2 of 8 experts); llama-50m is the dense Llama of the same
     * active size (F 1536 = 2 x 768: the same MLP FLOPs per token). */
    {"moe-100m", "llama", 50257, 1024, 8, 8, 512, 1, 100, 6e-4,
     "Mixtral-style MoE 106.5M, 49.9M active: L8 H8 KV2 C512, 8 experts F768 top-2, tied", 2, 768, 1, 1e-5, 1e4, 8, 2},
    {"llama-50m", "llama", 50257, 1024, 8, 8, 512, 1, 100, 6e-4,
     "Llama 49.9M: L8 H8 KV2 C512 F1536, tied (moe-100m's active size)", 2, 1536, 1, 1e-5, 1e4, 0, 0},
};

int cli_preset_count(void) { return (int)(sizeof PRESETS / sizeof PRESETS[0]); }

const cli_preset *cli_preset_at(int i) { return i >= 0 && i < cli_preset_count() ? &PRESETS[i] : NULL; }

const cli_preset *cli_preset_find(const char *name) {
    for (int i = 0; i < cli_preset_count(); i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}

const char *cli_preset_names(void) {
    static char buf[256];
    if (buf[0]) return buf;
    size_t k = 0;
    for (int i = 0; i < cli_preset_count() && k < sizeof buf; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i == 0 ? "" : i + 1 == cli_preset_count() ? " or " : ", ",
                              PRESETS[i].name);
    return buf;
}
