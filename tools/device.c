/*
 * device.c — the CLI's --device and --tf32: checked before anything is
 * built, so a wrong choice costs no time and names the flag.
 */
#include <string.h>

#include "cli.h"
#include "pipit.h"

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
