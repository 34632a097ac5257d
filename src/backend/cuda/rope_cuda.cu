/*
 * rope_cuda.cu — rotary position embedding, Hugging Face's rotate-half
 * convention (the CPU's pipit__rope): x, out [B,T,H*D]; for each head and
 * i < D/2, with a = (pos0 + t) * f_i and f_i = theta^(-2i/D) (llama3-scaled
 * when the node says so),
 *   out[i]       = x[i] cos a - x[i + D/2] sin a
 *   out[i + D/2] = x[i + D/2] cos a + x[i] sin a
 * (sin negated for the inverse rotation, the gradient). Two kernels: the
 * cos / sin table [T, D/2] into scratch (formed as the CPU forms them: f_i
 * by backend/rope_freq.h, the CPU's own definition, in the element type as
 * transformers does for f32, the angle rounded to the type, cos and sin in
 * double rounded once), then one thread per rotated pair. Every output
 * element is one thread's: deterministic.
 */
#include <cmath>

#include "backend/cuda/ops_cuda.cuh"

#define NTH PIPIT_CUDA_THREADS

__device__ __forceinline__ float rope_freq(float, int64_t i, int64_t D, pipit__rope_freqs rf) {
    return pipit__rope_freq_f32(i, D, rf);
}
__device__ __forceinline__ double rope_freq(double, int64_t i, int64_t D, pipit__rope_freqs rf) {
    return pipit__rope_freq_f64(i, D, rf);
}

/* cs, sn [Tn, half] */
template <class T>
__global__ void rope_table_kernel(T *cs, T *sn, int64_t Tn, int64_t half, int64_t D, int64_t pos0,
                                  pipit__rope_freqs rf, int inverse) {
    PIPIT_GRID_STRIDE(e, Tn * half) {
        const int64_t t = e / half, i = e % half;
        const T a = (T)(pos0 + t) * rope_freq((T)0, i, D, rf);
        cs[e] = (T)cos((double)a);
        sn[e] = inverse ? -(T)sin((double)a) : (T)sin((double)a);
    }
}

/* One thread per pair (b, t, h, i); i is the fastest index, so a warp
 * reads consecutive elements of each half. */
template <class T>
__global__ void rope_kernel(T *out, const T *x, const T *cs, const T *sn, int64_t BT, int64_t Tn, int64_t H,
                            int64_t D) {
    const int64_t half = D / 2;
    PIPIT_GRID_STRIDE(e, BT * H * half) {
        const int64_t i = e % half, r = e / half, bt = r / H, t = bt % Tn;
        const int64_t at = bt * H * D + r % H * D + i; /* x[b, t, h, i] */
        const T u = x[at], v = x[at + half], c = cs[t * half + i], s = sn[t * half + i];
        out[at] = u * c - v * s;
        out[at + half] = v * c + u * s;
    }
}

template <class T>
static void rope(void *out, const void *x, int64_t B, int64_t Tn, int64_t H, int64_t D, int64_t pos0,
                 pipit__rope_freqs rf, int inverse) {
    const int64_t half = D / 2;
    cudaStream_t s = pipit__cuda_stream();
    T *tab = (T *)pipit__cuda_scratch((size_t)(2 * Tn * half) * sizeof(T), "rope: scratch");
    if (!tab) return;
    rope_table_kernel<T><<<pipit_grid_for(Tn * half, NTH), NTH, 0, s>>>(tab, tab + Tn * half, Tn, half, D, pos0,
                                                                       rf, inverse);
    if (!PIPIT_CUDA_LAUNCHED("rope: table")) {
        rope_kernel<T><<<pipit_grid_for(B * Tn * H * half, NTH), NTH, 0, s>>>((T *)out, (const T *)x, tab,
                                                                             tab + Tn * half, B * Tn, Tn, H, D);
        PIPIT_CUDA_LAUNCHED("rope");
    }
    pipit__cuda_scratch_free(tab, "rope: scratch");
}

void pipit__cuda_rope(pipit_dtype dt, void *out, const void *x, int64_t B, int64_t T, int64_t H, int64_t D,
                      int64_t pos0, pipit__rope_freqs rf, int inverse) {
    if (B <= 0 || T <= 0 || H <= 0 || D < 2) return;
    PIPIT_BY_WIDE(dt, rope, out, x, B, T, H, D, pos0, rf, inverse);
}
