/*
 * cuda_gate.c — the gate of pipit_cuda_tests (tests/main.c): without a
 * usable CUDA device every GPU test is skipped, with one clear line.
 */
#include <stdio.h>

#include <cuda_runtime.h>

int pipit_cuda_test_gate(void);

int pipit_cuda_test_gate(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) return 0;
    if (e != cudaSuccess)
        printf("no CUDA device: skipped (cudaGetDeviceCount: %s: %s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
    else
        printf("no CUDA device: skipped\n");
    fflush(stdout);
    return 1;
}
