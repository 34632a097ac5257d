/*
 * emu/emu.cpp — the host side of the CUDA emulation (see cuda_runtime.h):
 * launches (every block in order, its threads as real threads), barriers,
 * shuffles, stream-ordered memory as malloc, and a stand-in for the parts of
 * the CUDA backend that cuda-core writes (stream, sticky error, GEMM through
 * the CPU's GEMM, memory as host memory), so tests/cuda/test_cuda_ops.c
 * runs unchanged against the emulated kernels.
 */
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

extern "C" {
#include "backend/cpu/kernels.h"
}
#include "backend/cuda/cuda_backend.h"

thread_local uint3 threadIdx, blockIdx;
thread_local dim3 blockDim, gridDim;

namespace {
/* A barrier whose count can be reset between blocks and that a thread
 * leaves when it exits (as an exited CUDA thread stops counting). */
struct emu_barrier {
    std::mutex mu;
    std::condition_variable cv;
    int expected = 0, arrived = 0;
    unsigned long gen = 0;
    void reset(int n) {
        std::lock_guard<std::mutex> g(mu);
        expected = n;
        arrived = 0;
    }
    void release() {
        arrived = 0;
        gen++;
        cv.notify_all();
    }
    void wait() {
        std::unique_lock<std::mutex> l(mu);
        unsigned long g = gen;
        if (++arrived == expected) release();
        else cv.wait(l, [&] { return gen != g; });
    }
    void drop() {
        std::lock_guard<std::mutex> g(mu);
        if (--expected > 0 && arrived == expected) release();
    }
};
struct warp_state {
    uint64_t slot[32];
    emu_barrier bar;
};
thread_local emu_barrier *block_bar;
thread_local warp_state *my_warp;
thread_local unsigned my_lane;
std::mutex err_mu;
cudaError_t last_error = cudaSuccess;   /* cudaGetLastError's */
cudaError_t sticky = cudaSuccess;       /* pipit__cuda_check's, until the next sync */
char sticky_msg[512];

void set_last(cudaError_t e) {
    std::lock_guard<std::mutex> g(err_mu);
    last_error = e;
}
} // namespace

void __syncthreads(void) { block_bar->wait(); }

uint64_t pipit_emu_shfl(uint64_t bits, unsigned src_xor) {
    warp_state *w = my_warp;
    w->slot[my_lane] = bits;
    w->bar.wait();
    uint64_t got = w->slot[(my_lane ^ src_xor) & 31];
    w->bar.wait();
    return got;
}

/* One thread per thread of a block, kept for the whole launch: the blocks
 * run one after another, with every thread at the gate between two blocks
 * (so __shared__ statics serve one block at a time). */
void pipit_emu_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t s, const std::function<void()> &body) {
    (void)s;
    unsigned nt = block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
        grid.z > 65535 || smem > 48 * 1024) {
        fprintf(stderr, "emu: bad launch configuration grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y, grid.z,
                block.x, block.y, block.z);
        set_last(cudaErrorInvalidConfiguration);
        return;
    }
    unsigned nw = (nt + 31) / 32;
    uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    emu_barrier bar, gate;
    gate.reset((int)nt);
    std::vector<warp_state> warps(nw);
    auto reset_block = [&] {
        bar.reset((int)nt);
        for (unsigned w = 0; w < nw; w++) warps[w].bar.reset((int)std::min(32u, nt - 32 * w));
    };
    reset_block();
    std::vector<std::thread> th;
    th.reserve(nt);
    for (unsigned t = 0; t < nt; t++)
        th.emplace_back([&, t] {
            threadIdx = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
            blockDim = block;
            gridDim = grid;
            block_bar = &bar;
            my_warp = &warps[t / 32];
            my_lane = t % 32;
            for (uint64_t b = 0; b < nblocks; b++) {
                blockIdx = {(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                            (unsigned)(b / grid.x / grid.y)};
                body();
                my_warp->bar.drop(); /* an exited thread leaves both barriers */
                bar.drop();
                gate.wait(); /* the block is done */
                if (t == 0) reset_block();
                gate.wait(); /* the next block's barriers are ready */
            }
        });
    for (auto &x : th) x.join();
}

extern "C" {
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaGetDevice(int *dev) { *dev = 0; return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaStreamSynchronize(nullptr); }
cudaError_t cudaStreamSynchronize(cudaStream_t) {
    std::lock_guard<std::mutex> g(err_mu);
    cudaError_t e = sticky;
    sticky = cudaSuccess;
    return e;
}
cudaError_t cudaGetLastError(void) {
    std::lock_guard<std::mutex> g(err_mu);
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return sticky_msg[0] ? sticky_msg : "unspecified launch failure";
    }
}
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) {
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t) { free(p); return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) { memset(p, v, n); return cudaSuccess; }
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int) { *pool = nullptr; return cudaSuccess; }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void *) { return cudaSuccess; }

/* ---- what cuda-core's backend_cuda provides, as host stand-ins ---- */

cudaStream_t pipit__cuda_stream(void) { return nullptr; }

int pipit__cuda_check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    std::lock_guard<std::mutex> g(err_mu);
    if (sticky == cudaSuccess) {
        snprintf(sticky_msg, sizeof sticky_msg, "%s: CUDA error %d", what, (int)e);
        sticky = e == cudaErrorInvalidConfiguration ? e : cudaErrorLaunchFailure;
    }
    fprintf(stderr, "emu: %s: CUDA error %d\n", what, (int)e);
    return -1;
}

void pipit__cuda_gemm(pipit_dtype dt, int trans_a, int trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                      const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, void *C,
                      int64_t ldc, int64_t sC, int accumulate) {
    if (dt == PIPIT_F64)
        pipit__gemm_f64(trans_a, trans_b, batch, M, N, K, (const double *)A, lda, sA, (const double *)B, ldb, sB,
                        (double *)C, ldc, sC, accumulate, 0, 1);
    else if (dt == PIPIT_BF16) /* the same bf16 contract as cuBLASLt's: fp32 sums, rounded once */
        pipit__gemm_bf16(trans_a, trans_b, batch, M, N, K, (const pipit__bf16 *)A, lda, sA, (const pipit__bf16 *)B,
                         ldb, sB, (pipit__bf16 *)C, ldc, sC, accumulate, 0, 1);
    else
        pipit__gemm_f32(trans_a, trans_b, batch, M, N, K, (const float *)A, lda, sA, (const float *)B, ldb, sB,
                        (float *)C, ldc, sC, accumulate, 0, 1);
}

static void emu_init(void) { pipit__gemm_init(); }
static void *emu_alloc(size_t n) { return pipit__calloc(1, n ? n : 1); }
static void emu_free(void *p) { pipit__free(p); }
static void emu_upload(void *dst, const void *host, size_t n) { memcpy(dst, host, n); }
static void emu_download(void *host, const void *src, size_t n) { memcpy(host, src, n); }

const pipit__backend pipit__backend_cuda = {
    "cuda", emu_init, emu_alloc, emu_alloc, NULL, emu_free, emu_upload, emu_download, pipit__cuda_ops,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    0, 1, NULL, NULL, NULL, NULL, /* host_memory, bf16, devices, bind, sync, sumsq_chunks: unused by the parity test */
};
}
