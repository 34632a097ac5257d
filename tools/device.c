/*
 * device.c — the CLI's --device, --tf32, --dtype and --mem-limit: checked
 * before anything is built, so a wrong choice costs no time and names the
 * flag.
 */
#include <string.h>

#include "cli.h"
#include "pipit.h"
#include "progress.h"

void cli_check_device(const char *device, int tf32) {
    static const char *const names[] = {"cpu", "cuda"};
    int cuda = device && strcmp(device, "cuda") == 0;
    if (device && !cuda && strcmp(device, "cpu") != 0)
        die("bad value '%s' for --device: expected cpu or cuda%s", device, cli_did_you_mean(device, names, 2, ""));
    if (tf32 && !cuda) die("--tf32 needs --device cuda (TF32 is a tensor-core mode of NVIDIA GPUs; cpu GEMMs are fp32)");
    if (!cuda) return;
    if (!pipit_have_cuda()) die("--device cuda: this build has no cuda backend (configure with -DPIPIT_CUDA=ON)");
    if (pipit_cuda_device_count() < 1) die("--device cuda: %s", pipit_errmsg());
}

pipit_dtype cli_dtype(const char *dtype, const char *device) {
    static const char *const names[] = {"f32", "bf16"};
    if (!dtype || strcmp(dtype, "f32") == 0) return PIPIT_F32;
    if (strcmp(dtype, "bf16") != 0)
        die("bad value '%s' for --dtype: expected f32 or bf16%s", dtype, cli_did_you_mean(dtype, names, 2, ""));
    if (device && strcmp(device, "cuda") == 0 && !pipit_have_cuda()) /* the library names the backend otherwise */
        die("--dtype bf16 --device cuda: this build has no cuda backend (configure with -DPIPIT_CUDA=ON)");
    return PIPIT_BF16;
}

pipit_bf16_policy cli_bf16_policy(const char *policy) {
    static const char *const names[] = {"autocast", "all"};
    if (!policy || strcmp(policy, "autocast") == 0) return PIPIT_BF16_AUTOCAST;
    if (strcmp(policy, "all") != 0)
        die("bad value '%s' for --bf16-policy: expected autocast or all%s", policy,
            cli_did_you_mean(policy, names, 2, ""));
    return PIPIT_BF16_ALL;
}

double cli_mem_limit(const flag_cmd *c, double given, int no_mem_check, double machine, const char *machine_what) {
    if (!flags_seen(c, "mem-limit")) return 0;
    const double most = 72057594037927936.0; /* 2^56: one rank's memory at most (the runtime's bound) */
    if (!(given >= 1 && given <= most))
        die("--mem-limit must be a number of bytes from 1 to 2^56 (got %g): leave the flag out for the default", given);
    if (machine > 0 && given > machine && !no_mem_check) {
        char a[32], b[32];
        die("--mem-limit %g (%s) is above %s: %s; lower it, or pass --no-mem-check to use it anyway", given,
            cli_bytes(a, sizeof a, given), machine_what, cli_bytes(b, sizeof b, machine));
    }
    return given;
}
