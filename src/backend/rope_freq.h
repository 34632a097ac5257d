/*
 * rope_freq.h — RoPE's inverse frequencies, one definition for every
 * backend (the CPU's kernels.c and the CUDA backend's rope_cuda.cu include
 * it), so that both form the same bits. A ROPE node (src/ir/ops.c) carries
 * theta and, for rope_type "llama3" (pipit_rope_scaled), the scaling.
 *
 * f32 (and bf16, whose arithmetic is fp32): as transformers computes
 * inv_freq for a float32 model, every step a float32 tensor op rounded to
 * float32: 1 / theta ** (arange(0, D, 2).float() / D) (the power in double,
 * rounded once), then _compute_llama3_parameters, where the Python numbers
 * (2 pi, the factors, L / lo and L / hi in double) meet the tensor as
 * float32 scalars and `a / t` is t.reciprocal() * a. f64: the same steps in
 * double.
 *
 * In CUDA (the includer defines PIPIT_ROPE_FREQ_CUDA) the functions are
 * device functions and each operation is a round-to-nearest intrinsic, so
 * nvcc cannot fuse a multiply and an add into an FMA the CPU does not do.
 */
#ifndef PIPIT_ROPE_FREQ_H
#define PIPIT_ROPE_FREQ_H

#include <math.h>
#include <stdint.h>

typedef struct {
    double theta;
    double factor; /* llama3 scaling when > 0; then the three below */
    double low_freq_factor, high_freq_factor;
    int64_t original_max_ctx; /* original_max_position_embeddings */
} pipit__rope_freqs;

/* A ROPE node's frequencies (its fattr[0..3] and iattr[3]: src/ir/ops.c). */
static inline pipit__rope_freqs pipit__rope_freqs_of(const double fattr[4], int64_t original_max_ctx) {
    pipit__rope_freqs r = {fattr[0], fattr[1], fattr[2], fattr[3], original_max_ctx};
    return r;
}

#ifdef PIPIT_ROPE_FREQ_CUDA
#define RF_FN static __device__ __forceinline__
#define RF_FADD __fadd_rn
#define RF_FSUB __fsub_rn
#define RF_FMUL __fmul_rn
#define RF_FDIV __fdiv_rn
#define RF_DADD __dadd_rn
#define RF_DSUB __dsub_rn
#define RF_DMUL __dmul_rn
#define RF_DDIV __ddiv_rn
#else
#define RF_FN static inline
#define RF_FADD(a, b) ((a) + (b))
#define RF_FSUB(a, b) ((a) - (b))
#define RF_FMUL(a, b) ((a) * (b))
#define RF_FDIV(a, b) ((a) / (b))
#define RF_DADD RF_FADD
#define RF_DSUB RF_FSUB
#define RF_DMUL RF_FMUL
#define RF_DDIV RF_FDIV
#endif

#define PIPIT_ROPE_TWO_PI 6.283185307179586 /* Python's 2 * math.pi */

/* transformers' _compute_llama3_parameters on one frequency f, in float32:
 *   wavelen = 2 pi / f
 *   llama   = wavelen > L / lo ? f / factor : f
 *   s       = (L / wavelen - lo) / (hi - lo)
 *   smooth  = (1 - s) * llama / factor + s * llama
 *   medium  = !(wavelen < L / hi) && !(wavelen > L / lo)
 *   -> medium ? smooth : llama */
RF_FN float pipit__rope_llama3_f32(float f, pipit__rope_freqs r) {
    const float factor = (float)r.factor, lo = (float)r.low_freq_factor, L = (float)r.original_max_ctx;
    const float lo_wave = (float)((double)r.original_max_ctx / r.low_freq_factor);
    const float hi_wave = (float)((double)r.original_max_ctx / r.high_freq_factor);
    const float span = (float)(r.high_freq_factor - r.low_freq_factor);
    const float wave = RF_FMUL(RF_FDIV(1.0f, f), (float)PIPIT_ROPE_TWO_PI);
    const float llama = wave > lo_wave ? RF_FDIV(f, factor) : f;
    const float s = RF_FDIV(RF_FSUB(RF_FMUL(RF_FDIV(1.0f, wave), L), lo), span);
    const float smooth = RF_FADD(RF_FDIV(RF_FMUL(RF_FSUB(1.0f, s), llama), factor), RF_FMUL(s, llama));
    return !(wave < hi_wave) && !(wave > lo_wave) ? smooth : llama;
}

RF_FN double pipit__rope_llama3_f64(double f, pipit__rope_freqs r) {
    const double factor = r.factor, lo = r.low_freq_factor, L = (double)r.original_max_ctx;
    const double lo_wave = L / r.low_freq_factor, hi_wave = L / r.high_freq_factor;
    const double span = r.high_freq_factor - r.low_freq_factor;
    const double wave = RF_DMUL(RF_DDIV(1.0, f), PIPIT_ROPE_TWO_PI);
    const double llama = wave > lo_wave ? RF_DDIV(f, factor) : f;
    const double s = RF_DDIV(RF_DSUB(RF_DMUL(RF_DDIV(1.0, wave), L), lo), span);
    const double smooth = RF_DADD(RF_DDIV(RF_DMUL(RF_DSUB(1.0, s), llama), factor), RF_DMUL(s, llama));
    return !(wave < hi_wave) && !(wave > lo_wave) ? smooth : llama;
}

/* Inverse frequency i < D/2 of a head of D. */
RF_FN float pipit__rope_freq_f32(int64_t i, int64_t D, pipit__rope_freqs r) {
    const float e = RF_FDIV((float)(2 * i), (float)D);
    const float f = RF_FDIV(1.0f, (float)pow((double)(float)r.theta, (double)e));
    return r.factor > 0 ? pipit__rope_llama3_f32(f, r) : f;
}

RF_FN double pipit__rope_freq_f64(int64_t i, int64_t D, pipit__rope_freqs r) {
    const double f = RF_DDIV(1.0, pow(r.theta, RF_DDIV((double)(2 * i), (double)D)));
    return r.factor > 0 ? pipit__rope_llama3_f64(f, r) : f;
}

#undef RF_FN
#undef RF_FADD
#undef RF_FSUB
#undef RF_FMUL
#undef RF_FDIV
#undef RF_DADD
#undef RF_DSUB
#undef RF_DMUL
#undef RF_DDIV

#endif /* PIPIT_ROPE_FREQ_H */
