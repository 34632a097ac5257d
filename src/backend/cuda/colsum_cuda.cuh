/*
 * colsum_cuda.cuh — column sums over rows with a fixed two-level tree, for
 * every kernel that reduces over rows (sum_rows, sum_to, layernorm and
 * RMSNorm weight gradients): reduce_cuda.cu and norms_cuda.cu include it.
 * A functor f(r, c) gives the double that row r adds to column c, so one
 * tree serves every layout. The tree depends only on (rows, C): never on
 * timing, the grid the hardware runs or the device.
 */
#ifndef PIPIT_COLSUM_CUDA_CUH
#define PIPIT_COLSUM_CUDA_CUH

#include "backend/cuda/ops_cuda.cuh"

/* Block (x, y) covers 32 columns and the row chunk y; its 8 row lanes each
 * sum every 8th row of the chunk in order (double), then lane 0 adds the 8
 * lanes in order. The chunk partials are summed in chunk order by
 * colsum_final. */
#define COLSUM_LANES 8
#define COLSUM_MAX_CHUNKS 1024

static inline int64_t colsum_chunk(int64_t rows) {
    int64_t chunk = (rows + COLSUM_MAX_CHUNKS - 1) / COLSUM_MAX_CHUNKS;
    return chunk < 256 ? 256 : chunk;
}

/* out (one chunk) or part [nchunk, C] (several) */
template <class T, class F>
__global__ void colsum_partial(F f, int64_t rows, int64_t C, int64_t chunk, double scale, double *part, T *out) {
    __shared__ double sh[COLSUM_LANES][33];
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double acc = 0;
    if (c < C)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += COLSUM_LANES) acc += f(r, c);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    double s = sh[0][threadIdx.x];
    for (int y = 1; y < COLSUM_LANES; y++) s += sh[y][threadIdx.x];
    if (out) out[c] = (T)(s * scale); /* a single chunk: no second level */
    else part[blockIdx.y * C + c] = s;
}

template <class T>
__global__ void colsum_final(const double *part, int64_t nchunk, int64_t C, double scale, T *out) {
    PIPIT_GRID_STRIDE(c, C) {
        double s = part[c];
        for (int64_t y = 1; y < nchunk; y++) s += part[y * C + c];
        out[c] = (T)(s * scale);
    }
}

/* out [C] = (T)(scale * sum over r < rows of f(r, c)), by the tree above;
 * zeros for rows = 0. */
template <class T, class F>
static void colsum(T *out, F f, int64_t rows, int64_t C, double scale, const char *what) {
    cudaStream_t s = pipit__cuda_stream();
    if (C <= 0) return;
    if (rows <= 0) {
        pipit__cuda_check(cudaMemsetAsync(out, 0, (size_t)C * sizeof(T), s), what);
        return;
    }
    int64_t chunk = colsum_chunk(rows), nchunk = (rows + chunk - 1) / chunk;
    if ((C + 31) / 32 > INT32_MAX) {
        pipit__cuda_check(cudaErrorInvalidValue, what);
        return;
    }
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)nchunk), block(32, COLSUM_LANES);
    if (nchunk == 1) {
        colsum_partial<T, F><<<grid, block, 0, s>>>(f, rows, C, chunk, scale, NULL, out);
        PIPIT_CUDA_LAUNCHED(what);
        return;
    }
    double *part = (double *)pipit__cuda_scratch((size_t)(nchunk * C) * sizeof(double), what);
    if (!part) return;
    colsum_partial<T, F><<<grid, block, 0, s>>>(f, rows, C, chunk, scale, part, (T *)NULL);
    if (!PIPIT_CUDA_LAUNCHED(what)) {
        colsum_final<T><<<pipit_grid_for(C, PIPIT_CUDA_THREADS), PIPIT_CUDA_THREADS, 0, s>>>(part, nchunk, C,
                                                                                             scale, out);
        PIPIT_CUDA_LAUNCHED(what);
    }
    pipit__cuda_scratch_free(part, what);
}

#endif
