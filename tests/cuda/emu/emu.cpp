/*
 * emu/emu.cpp — the host side of the CUDA emulation (see cuda_runtime.h):
 * launches (every block in order), barriers, shuffles, stream-ordered memory
 * as malloc, and a stand-in for the parts of the CUDA backend that cuda-core
 * writes (stream, sticky error, GEMM through the CPU's GEMM, memory as host
 * memory), so tests/cuda/test_cuda_ops.c runs unchanged against the emulated
 * kernels.
 *
 * A block's threads run as fibers (ucontext) on the launching thread by
 * default: a thread runs until it waits at a barrier (__syncthreads, a warp
 * shuffle) or returns, and a barrier opens once every live thread it
 * counts has arrived. Context switches stay in user space, where real
 * threads paid two futex round trips per thread per barrier (the pass spent
 * 20 of its 25 CPU minutes in the kernel). Under ThreadSanitizer
 * (PIPIT_EMU_SAN="-fsanitize=thread", to find data races between a block's
 * threads) or with PIPIT_EMU_THREADS=1, the threads are real threads.
 */
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <ucontext.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

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


/* ------------------------------------------------------------ fibers */

namespace {
enum fiber_state { F_RUN, F_BLOCK_BAR, F_WARP_BAR, F_DONE };
struct fiber {
    ucontext_t ctx;
    char *stack = nullptr;
    size_t size = 0;
    fiber_state state = F_RUN;
    void *fake_stack = nullptr; /* ASan's fake stack while switched out */
};
/* One launch's scheduler, on the launching thread's stack. */
struct scheduler {
    ucontext_t main;
    const void *main_bottom = nullptr;
    size_t main_size = 0;
    std::vector<fiber> f;
    const std::function<void()> *body = nullptr;
    fiber *cur = nullptr;
    warp_state *warps = nullptr;
};
thread_local scheduler *sched;

/* Stack of a fiber: ASan frames are large, kernels keep small arrays; the
 * lowest page is a guard, so an overflow faults instead of corrupting. */
const size_t FIBER_STACK = 256 * 1024, GUARD = 4096;

void switch_begin(void **fake, const void *bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}
void switch_end(void *fake, const void **bottom_old, size_t *size_old) {
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_finish_switch_fiber(fake, bottom_old, size_old);
#else
    (void)fake, (void)bottom_old, (void)size_old;
#endif
}

void fiber_entry(void) {
    scheduler *s = sched;
    fiber *me = s->cur;
    switch_end(nullptr, &s->main_bottom, &s->main_size);
    (*s->body)();
    me->state = F_DONE;
    switch_begin(nullptr, s->main_bottom, s->main_size); /* nullptr: this fiber's fake stack dies */
    setcontext(&s->main);
}

/* Called by a fiber: wait in `st` until the scheduler releases it. */
void fiber_wait(fiber_state st) {
    scheduler *s = sched;
    fiber *me = s->cur;
    me->state = st;
    switch_begin(&me->fake_stack, s->main_bottom, s->main_size);
    swapcontext(&me->ctx, &s->main);
    switch_end(me->fake_stack, &s->main_bottom, &s->main_size);
}

void fiber_resume(scheduler *s, unsigned t, const dim3 &block) {
    fiber *f = &s->f[t];
    s->cur = f;
    threadIdx = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
    my_lane = t % 32;
    my_warp = &s->warps[t / 32];
    void *fake = nullptr;
    switch_begin(&fake, f->stack + GUARD, f->size - GUARD);
    swapcontext(&s->main, &f->ctx);
    switch_end(fake, nullptr, nullptr);
}

/* Every fiber runs until it waits or returns; then the barriers whose live
 * threads have all arrived open (a warp's before the block's). */
/* A fresh start of fiber f at fiber_entry (its own function: getcontext
 * returns twice as setjmp does, so no caller's loop variable lives across it). */
__attribute__((noinline)) void fiber_start(fiber *f) {
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack + GUARD;
    f->ctx.uc_stack.ss_size = f->size - GUARD;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, fiber_entry, 0);
    f->state = F_RUN;
}

void run_block(scheduler *s, unsigned nt, const dim3 &block) {
    for (unsigned t = 0; t < nt; t++) fiber_start(&s->f[t]);
    for (;;) {
        for (unsigned t = 0; t < nt; t++)
            if (s->f[t].state == F_RUN) fiber_resume(s, t, block);
        unsigned live = 0, at_block = 0, opened = 0;
        for (unsigned w0 = 0; w0 < nt; w0 += 32) {
            unsigned w1 = std::min(nt, w0 + 32), live_w = 0, at_warp = 0;
            for (unsigned t = w0; t < w1; t++) {
                live_w += s->f[t].state != F_DONE;
                at_warp += s->f[t].state == F_WARP_BAR;
                at_block += s->f[t].state == F_BLOCK_BAR;
            }
            live += live_w;
            if (at_warp && at_warp == live_w) {
                for (unsigned t = w0; t < w1; t++) s->f[t].state = F_RUN;
                opened++;
            }
        }
        if (live == 0) return;
        if (opened) continue;
        if (at_block != live) {
            fprintf(stderr, "emu: deadlock: %u of a block's %u live threads wait at __syncthreads, the others at a "
                            "warp shuffle their whole warp does not reach\n", at_block, live);
            abort();
        }
        for (unsigned t = 0; t < nt; t++)
            if (s->f[t].state == F_BLOCK_BAR) s->f[t].state = F_RUN;
    }
}

void launch_fibers(dim3 grid, dim3 block, unsigned nt, const std::function<void()> &body) {
    scheduler s;
    s.body = &body;
    s.f.resize(nt);
    std::vector<warp_state> warps((nt + 31) / 32);
    s.warps = warps.data();
    for (auto &f : s.f) {
        f.size = FIBER_STACK;
        void *m = mmap(nullptr, f.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "emu: cannot map a fiber stack\n");
            abort();
        }
        mprotect(m, GUARD, PROT_NONE);
        f.stack = (char *)m;
    }
    scheduler *outer = sched;
    sched = &s;
    blockDim = block;
    gridDim = grid;
    uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    for (uint64_t b = 0; b < nblocks; b++) {
        blockIdx = {(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / grid.x / grid.y)};
        run_block(&s, nt, block);
    }
    sched = outer;
    for (auto &f : s.f) munmap(f.stack, f.size);
}

bool use_threads(void) {
#if defined(__SANITIZE_THREAD__)
    return true;
#else
    static const bool env = getenv("PIPIT_EMU_THREADS") && atoi(getenv("PIPIT_EMU_THREADS")) != 0;
    return env;
#endif
}
} // namespace

void __syncthreads(void) {
    if (sched) fiber_wait(F_BLOCK_BAR);
    else block_bar->wait();
}

static void warp_wait(warp_state *w) {
    if (sched) fiber_wait(F_WARP_BAR);
    else w->bar.wait();
}

uint64_t pipit_emu_shfl(uint64_t bits, unsigned src_xor) {
    warp_state *w = my_warp;
    w->slot[my_lane] = bits;
    warp_wait(w);
    uint64_t got = w->slot[(my_lane ^ src_xor) & 31];
    warp_wait(w);
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
    if (!use_threads()) {
        launch_fibers(grid, block, nt, body);
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
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind) {
    if (n) memcpy(dst, src, n);
    return cudaSuccess;
}
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

/* Set field by field on an empty table: a field added to pipit__backend
 * stays empty here instead of shifting the ones after it (gemm .. sgd,
 * adamw_bf16, host_memory, devices, bind, sync, sumsq_chunks: unused by the
 * parity test). */
static pipit__backend emu_backend(void) {
    pipit__backend b = {};
    b.name = "cuda", b.init = emu_init, b.alloc = emu_alloc, b.reserve = emu_alloc, b.free = emu_free;
    b.upload = emu_upload, b.download = emu_download, b.ops = pipit__cuda_ops, b.bf16 = 1;
    return b;
}
const pipit__backend pipit__backend_cuda = emu_backend();
}
