/*
 * presets.c — `--model NAME`: the standard GPT-2 sizes (124M, medium,
 * large, xl: vocab 50257, ctx 1024) and `tiny`, the default, a model that
 * trains in seconds on a CPU. Each brings the defaults that go with it
 * (micro-batch, steps, lr); explicit flags and --config keys override any
 * field (precedence: defaults < preset < config < flags).
 */
#include <string.h>

#include "cli.h"

/* lr: tiny 1e-3; the GPT-2 sizes GPT-3's table (6e-4, 3e-4, 2.5e-4, 2e-4). */
static const cli_preset PRESETS[] = {
    {"tiny", 256, 64, 4, 4, 128, 8, 100, 1e-3, "byte-level, 0.8M params (the default)"},
    {"gpt2", 50257, 1024, 12, 12, 768, 1, 100, 6e-4, "GPT-2 124M"},
    {"gpt2-medium", 50257, 1024, 24, 16, 1024, 1, 100, 3e-4, "GPT-2 350M"},
    {"gpt2-large", 50257, 1024, 36, 20, 1280, 1, 100, 2.5e-4, "GPT-2 774M"},
    {"gpt2-xl", 50257, 1024, 48, 25, 1600, 1, 100, 2e-4, "GPT-2 1558M"},
};

int cli_preset_count(void) { return (int)(sizeof PRESETS / sizeof PRESETS[0]); }

const cli_preset *cli_preset_at(int i) { return i >= 0 && i < cli_preset_count() ? &PRESETS[i] : NULL; }

const cli_preset *cli_preset_find(const char *name) {
    for (int i = 0; i < cli_preset_count(); i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}
