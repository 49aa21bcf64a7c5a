// CUDA kernels of Echo's per-site element math around the quantized all-reduce (docs/design.md
// §8-§9): the compensator apply x' = x + c with the group-max reduction of backward rescaling, the
// power-of-two scaling, and the un-scaling with the compensator update and the output write.
// Every element goes through the ECHO_HD functions of compensator_math.h, rescale.h and
// core/half.h that the CPU reference (src/comm/echo/) calls, so the values are bitwise those of
// the CPU. Plain C++ can include this header (no CUDA syntax).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "comm/echo/compensator_math.h"

namespace echo::cuda {

// Reads x[0, n) (f32, or bf16 widened exactly to f32 when x_bf16) and writes
//   x_comp[i] = compensate(x[i], m1[i], m2[i], *coeffs)   (coeffs == nullptr: x_comp[i] = x[i]);
//   (unless x_comp is null: a pass for max_bits only);
//   y[i] = x_comp[i]·2^0, as the CPU writes it, unless y is null; y may alias x when x is f32;
//   max_bits (unless null): atomically raised to the bits of max |x_comp| (a non-finite entry as
//   +inf), which for non-negative floats orders like the value; the caller zeroes it first.
void echo_compensate(const void* x, bool x_bf16, size_t n, const float* m1, const float* m2,
                     const comm::CompensatorCoeffs* coeffs, float* x_comp, float* y, uint32_t* max_bits,
                     cudaStream_t stream);

// *exponent = rescale_exponent(group max |x'|) (rescale.h) from *max_bits (the bits of a
// non-negative float, already reduced over the group), on the device: no wait. A non-finite max
// gives 0 and atomicMin(fault, fault_key), for the caller to raise later.
void echo_rescale_exponent(const uint32_t* max_bits, int* exponent, unsigned long long fault_key,
                           unsigned long long* fault, cudaStream_t stream);

// y[i] = scale_pow2(x[i], e) (rescale.h; exactly ldexpf); e is *e_device when that is not null.
void echo_scale_pow2(const float* x, size_t n, int e, float* y, cudaStream_t stream, const int* e_device = nullptr);

// v = e != 0 ? scale_pow2(y[i], -e) : y[i]; with coeffs, compensator_update(x_comp[i], v,
// num_ranks, m1[i], m2[i], *coeffs); then out[i] = v (f32), or v rounded once to bf16 when
// out_bf16. out may be y itself as f32 (each thread rewrites its own element); any other overlap
// is refused (a bf16 thread i's 2 bytes lie in the float of thread i/2, a shifted f32 out in
// another thread's element, which may not have been read yet). e is *e_device when that is not null.
void echo_finish(const float* y, size_t n, int e, const float* x_comp, float num_ranks, float* m1, float* m2,
                 const comm::CompensatorCoeffs* coeffs, void* out, bool out_bf16, cudaStream_t stream,
                 const int* e_device = nullptr);

// The fused site's finish (docs/design.md §7, fused compensator; FusedEchoSite::finish on CPU):
// echo_finish where x' is not stored but recomputed from the input x (f32, or bf16 widened) and
// the not yet updated m1, m2: v = scale_pow2(y[i], -e) (y[i] when e == 0); with coeffs,
// compensator_update(compensate(x[i], m1[i], m2[i]), v, ...); then x[i] = v (rounded once to bf16
// when x_bf16). In place in x; y is a tile buffer. e is *e_device when that is not null.
void echo_finish_recompute(const float* y, size_t n, int e, void* x, bool x_bf16, float num_ranks, float* m1,
                           float* m2, const comm::CompensatorCoeffs* coeffs, cudaStream_t stream,
                           const int* e_device = nullptr);

}  // namespace echo::cuda
