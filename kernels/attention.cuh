// CUDA causal GQA attention, forward and backward, with the semantics of Backend::attention_forward
// / attention_backward and cpu::attention_forward / attention_backward (backend/ops.h): scale
// 1/sqrt(d), q, out: (batch, seq, n_q, d), k, v: (batch, seq, n_kv, d), query head h reads kv
// head h / (n_q / n_kv), lse: (batch, n_q, seq) f32. Plain C++ (no CUDA syntax).
//
// Design (correctness first, scores materialized): per batch entry b and per position r of a
// query head inside its group (h = g * group + r), one strided-batched cuBLASLt GEMM over the n_kv
// kv heads g computes the f32 scores of those n_kv query heads; a masked softmax kernel (fp32 math,
// one block per row) turns them into P and the log-sum-exp; GEMMs take P to the outputs. The
// backward recomputes P from lse, dP = dO V^T, dS = P * (dP - rowsum(dO * O)) * scale, then
// dQ = dS K, dK += dS^T Q, dV += P^T dO. dK / dV sum the group's query heads in head order
// (r = 0, 1, ...) through beta = 1 GEMMs (bf16: into f32 accumulators, rounded once at the end):
// deterministic, no atomics.
//
// Dtypes: all f32, or bf16 q, k, v, out, dout, dq, dk, dv; scores, softmax and lse are f32 in
// both. P and dS are rounded to the GEMM dtype (bf16) before their products.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"
#include "gemm.cuh"

namespace echo::cuda {

// Bytes of device workspace forward and backward need (any dtype, contiguous, on the device):
// two (n_kv, seq, seq) f32 score buffers, for bf16 two bf16 copies of them and two
// (seq, n_kv, d) f32 accumulators, plus alignment slack. Independent of batch (looped).
// dtype: that of q (f32 or bf16). About 384 MiB at seq 2048, n_kv 8, bf16.
size_t attention_workspace_bytes(int64_t batch, int64_t seq, int64_t n_q, int64_t n_kv, int64_t d, DType dtype);

// out (overwritten) = causal softmax(q k^T / sqrt(d)) v per head; lse[b, h, i] = log-sum-exp of
// row i's scaled scores. All tensors contiguous cuda tensors; workspace holds at least
// attention_workspace_bytes(...). Work is issued on `stream`; the workspace may be reused once
// it is done.
void attention_forward(GemmContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse,
                       Tensor& workspace, cudaStream_t stream);

// dq, dk, dv overwritten; out and lse are the forward's. dk, dv sum over the query heads sharing a
// kv head, in head order.
void attention_backward(GemmContext& ctx, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& workspace,
                        cudaStream_t stream);

}  // namespace echo::cuda
