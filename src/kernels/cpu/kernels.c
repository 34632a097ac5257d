/*
 * kernels.c — every non-GEMM CPU kernel, for float and double.
 *
 * The bodies live in kernels_impl.h, a template included once per type
 * (T = element type, S = name suffix). Reductions use fixed lane counts and
 * fixed orders, and threads split only the non-reduced axis, so bits never
 * depend on the thread count.
 */

/* GCC 12's -O2 only vectorises loops whose trip count is a multiple of the
 * vector width; the dynamic cost model lets it vectorise plain loops with
 * remainders. It never reassociates floating point, so bits are unchanged. */
#pragma GCC optimize("vect-cost-model=dynamic")

#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "util/common.h"

#define T float
#define S f32
#define EXP expf
#define LOG logf
#define TANH tanhf
#define SQRT sqrtf
#include "kernels/cpu/kernels_impl.h"
#undef T
#undef S
#undef EXP
#undef LOG
#undef TANH
#undef SQRT

#define T double
#define S f64
#define EXP exp
#define LOG log
#define TANH tanh
#define SQRT sqrt
#include "kernels/cpu/kernels_impl.h"
#undef T
#undef S
#undef EXP
#undef LOG
#undef TANH
#undef SQRT
