// CUDA INT8 linear layer with S3R-EC (docs/design.md §11): the twin of quant::linear_forward /
// quant::linear_backward (src/quant/int8_linear.h, CPU reference src/backend/cpu/int8_linear.cpp)
// on device tensors and a stream. Plain C++ (no CUDA syntax), so host code and tests include it.
//
// Dtypes: x, y, dy, dx are f32 or bf16 (the CUDA backend's activations are bf16); w is f32 or bf16
// (the model passes its f32 master weight); dw_accum is f32. Every operand is a contiguous cuda
// tensor matched by element count (x: rows * in with in = w.dim(1)). bf16 values are read exactly
// and results are rounded once (round to nearest even) to bf16 at the end, so a bf16 call equals
// the CPU reference run on the same values widened to f32, then rounded.
//
// Numerics against the CPU reference (same element math: quant/s3r_math.h, core/hd.h *_rn):
//  * bit-identical: the row scales s_x, s_w, the codes X̂, Ŵ (saved), y, max |G'|, Δ, the gradient
//    codes Q (every rounding rule and threshold sharing), E = ΔQ − G', the EC means r_t, c_b, m_b
//    (double, the CPU's summation order), and dx, dw when EC is off (the int8 GEMMs are exact and
//    the epilogues do the CPU's fp32 operations in its order). NOTE: with column-style TP over a
//    device reducer (NCCL), the row sums behind r_t are summed in NCCL's order, which at tp >= 3
//    need not be MPI's: r_t then matches to double rounding, not bit for bit;
//  * with EC on, dx and dw differ from the CPU by rounding only: the CPU applies the rank-(B + 1)
//    corrections through OpenBLAS sgemm (fp32, an order of its own), the kernels form the same
//    fp32 factors (R = [c_b; 1]·Ŵ and N = [xsum_b; u]·X̂ rounded to f32 as the CPU's are, L and M
//    element by element as the CPU) but accumulate in double and add the correction to the
//    epilogue's fp32 value in double, rounding once (a few fp32 ulps of the result).
//
// int8 GEMMs: dX = Q·Ŵ and dW = Q^T·X̂ are not the TN layout cuBLASLt's IMMA kernels take; they are
// handed to cuda::gemm_s8s32 as they are, which packs them into zero-padded k-contiguous copies in
// the GemmContext's scratch (kernels/gemm.cuh). The forward X̂·Ŵ^T is TN and runs in place when
// in is a multiple of 4 and out too (else gemm_s8s32 pads).
//
// Synchronization: the forward waits once for its NaN/Inf flags, the backward once for max |G'|
// with its flag (Δ is a launch argument). TP adds host round trips through ctx.tp on host doubles,
// exactly as the CPU reduces: the row-parallel forward's row maxima of x and w, the column-parallel
// backward's Δ (no extra wait) and EC row sums with the channel count. A trace adds one wait.
// Reductions run in a fixed order (no float atomics), so results repeat bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "deferred_faults.cuh"
#include "gemm.cuh"
#include "quant/int8_linear.h"

namespace echo::cuda {

// Optional host copies of a backward's intermediates (tests, diagnostics). Filling it costs a
// wait and device-to-host copies of (rows, out) tensors.
struct Int8LinearTrace {
  float g_amax = 0, delta = 0;
  std::vector<int8_t> q;  // (rows, out)  Q
  std::vector<float> e;   // (rows, out)  E = ΔQ − G'
  // The structured error's means (EC only), as quant::StructuredError holds them.
  std::vector<double> row_mean;    // (rows)
  std::vector<double> col_mean;    // (rows / seq_len, out)
  std::vector<double> grand_mean;  // (rows / seq_len)
};

// What one call of (rows, in, out) needs beyond its saved operands (Backend::int8_scratch_bytes):
// the larger of the forward's and the backward's stream-ordered scratch (both products of the
// backward, EC as cfg says, examples of seq_len rows), and what the GemmContext keeps for the
// largest of its three int8 products. Kept in step with the Scratch objects below.
quant::Int8LinearScratch int8_linear_scratch_bytes(const quant::Int8LinearConfig& cfg, int64_t rows, int64_t in,
                                                   int64_t out, int64_t seq_len);

// y (rows, out) = x (rows, in) · w^T in INT8 (cfg.mode must be int8); fills `saved` with cuda
// tensors (reused when they already have the right shape and device). A NaN or infinity in x or w
// is an echo::Error naming the operand and its row: at once (a wait) without `faults`, else noted
// in `faults` for the backend to raise once per step (no wait unless a row-parallel TP max needs
// the host).
void int8_linear_forward(GemmContext& gemm, const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx,
                         const Tensor& x, const Tensor& w, Tensor& y, quant::Int8LinearSaved& saved,
                         cudaStream_t stream, DeferredFaults* faults = nullptr);

// dx (rows, in) (+)= dL/dX and dw_accum (out, in) += dL/dW for dy (rows, out), from the forward's
// `saved`; either output may be null. A NaN or infinity in G' = diag(s_x)·dy·diag(s_w) is an
// echo::Error. `trace`, when given, receives host copies of Δ, Q, E and the EC means. With
// `faults`, no trace and no column-parallel TP max, Δ stays on the device and a fault is noted in
// `faults` (no wait); otherwise max |G'| comes back to the host and a fault raises at once.
void int8_linear_backward(GemmContext& gemm, const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx,
                          const Tensor& dy, const quant::Int8LinearSaved& saved, Tensor* dx, bool accumulate_dx,
                          Tensor* dw_accum, cudaStream_t stream, Int8LinearTrace* trace = nullptr,
                          DeferredFaults* faults = nullptr);

}  // namespace echo::cuda
