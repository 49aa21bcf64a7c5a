// CUDA entry points of the element-wise, normalization, embedding, loss, optimizer and step
// reduction ops of backend::Backend (src/backend/backend.h, docs/design.md §2): the same names
// and argument order, plus the stream the kernels are queued on. The CPU reference is
// src/backend/cpu/*.cpp (backend/ops.h); one .cu per op family with the same stem.
// Plain C++ can include this header (no CUDA syntax), so the backend and the tests call it directly.
//
// Dtypes (the CUDA precision policy): activation operands (x, out, dout, dx, gate, up, logits,
// dlogits), RMSNorm weights and the embedding table are f32 or bf16, one dtype per call; the
// saved statistics (rstd, lse) and the accumulators (dw_accum, dtable_accum) are f32; tokens,
// targets and positions are i32; AdamW tensors are f32. Every tensor must be a contiguous cuda
// tensor; a wrong dtype, device or size is an echo::Error naming the op and the tensor. As on the
// CPU backend, operands are matched by element count (x of RMSNorm is read as (numel / dim, dim)
// with dim its last extent); RoPE's x, the logits and the tables must have the rank shown.
// Arithmetic is fp32 (double where the CPU reference uses double: RoPE angles, cross-entropy),
// results are rounded once to the output dtype, and every op gives the same bits on every run.
// Only cross_entropy_forward (and cross_entropy_accumulate across ranks) waits for the stream
// (the loss comes back to the host).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/adamw_math.h"
#include "backend/tp_reducer.h"
#include "core/tensor.h"

namespace echo::cuda {

// ---- RMSNorm (rmsnorm.cu) ------------------------------------------------------------------------
// x, out: (rows, dim)  w: (dim)  rstd: f32 (rows). out[r] = x[r] * rstd[r] * w, rstd = 1/sqrt(mean(x^2) + eps).
void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& out, Tensor& rstd, cudaStream_t stream);
// dx (rows, dim) overwritten; dw_accum: f32 (dim) += sum over rows of dout * x * rstd (a fixed-order
// two-pass reduction over rows).
void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                      Tensor& dw_accum, cudaStream_t stream);
// The scratch rmsnorm_backward takes from the pool for (rows, dim): its pass-1 partial sums.
size_t rmsnorm_backward_scratch_bytes(int64_t rows, int64_t dim);

// ---- RoPE, rotate-half (rope.cu) -------------------------------------------------------------------
// x: (tokens, heads, head_dim) in place, head_dim even; positions: i32 (tokens). Angles, cos, sin
// and the rotation in double, rounded once.
void rope_forward(Tensor& x, const Tensor& positions, double base, cudaStream_t stream);
void rope_backward(Tensor& dx, const Tensor& positions, double base, cudaStream_t stream);

// ---- SwiGLU (swiglu.cu) ------------------------------------------------------------------------------
// All operands of one size and dtype.
void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out, cudaStream_t stream);
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup,
                     cudaStream_t stream);

// ---- Vocab-parallel embedding (embedding.cu) ---------------------------------------------------------
// tokens: i32 (n)  table: (vocab_local, hidden)  out: (n, hidden), the table's dtype; zero rows for
// tokens outside [vocab_begin, vocab_begin + vocab_local).
// NOTE: a negative token gets a zero row here (the CPU throws): checking would cost a synchronization.
void embedding_forward(const Tensor& tokens, const Tensor& table, int64_t vocab_begin, Tensor& out,
                       cudaStream_t stream);
// dtable_accum: f32 (vocab_local, hidden) += dout (n, hidden) rows of the tokens this shard holds,
// each table row summing its tokens in token order, as the CPU does: the same f32 bits.
void embedding_backward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, Tensor& dtable_accum,
                        cudaStream_t stream);

// ---- Vocab-parallel cross-entropy (cross_entropy.cu) --------------------------------------------------
// logits: (tokens, vocab_local)  targets: i32 (tokens)  lse: f32 (tokens). Returns the mean over
// counted targets of lse - logit[target], in double, the same value on every rank; waits for the
// stream (once for the statistics, once more for the lse copy). A counted target no shard owns (negative or beyond the
// vocabulary) is an error on every rank of the TP group, raised after both reducer calls.
double cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_begin, int32_t ignore_index,
                             const backend::TpReducer& reducer, Tensor& lse, cudaStream_t stream);
// The same loss without a wait when the reducer is local (tp = 1): lse is written and loss_acc (an
// f64 scalar on the device) += loss / divisor by kernels. With a reducer across ranks it is
// cross_entropy_forward above (waits) plus a kernel that adds the returned loss.
void cross_entropy_accumulate(const Tensor& logits, const Tensor& targets, int64_t vocab_begin, int32_t ignore_index,
                              const backend::TpReducer& reducer, Tensor& lse, double divisor, Tensor& loss_acc,
                              cudaStream_t stream);
// dlogits (the logits' shape and dtype) = (softmax - onehot(target)) * dloss / count for counted
// tokens, zero rows for ignored ones, in double rounded once.
// NOTE: unlike the CPU, count is not checked against the counted targets (that needs the targets
// on the host); the caller passes the forward's count.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t vocab_begin,
                            int32_t ignore_index, int64_t count, double dloss, Tensor& dlogits, cudaStream_t stream);

// ---- Elementwise (elementwise.cu) ---------------------------------------------------------------------
// y += x; y and x of one size, each f32 or bf16 (e.g. a bf16 gradient into an f32 one), fp32 add.
void add_inplace(Tensor& y, const Tensor& x, cudaStream_t stream);
// y = x, same size and dtype (any dtype), the same bytes.
void copy(Tensor& y, const Tensor& x, cudaStream_t stream);
// y = x converted to y's dtype, rounded once: any pair of f32, bf16, f16, plus f32 <-> f64.
void cast(Tensor& y, const Tensor& x, cudaStream_t stream);
// y = value rounded once to y's dtype (f32, bf16, f16, f64).
void fill(Tensor& y, double value, cudaStream_t stream);
// y *= factor: f32 and bf16 multiply by factor rounded to float (as the CPU's gradient clip and DP
// average do), bf16 results rounded once; f64 in double.
void scale(Tensor& y, double factor, cudaStream_t stream);

// ---- Optimizer (adamw.cu) ---------------------------------------------------------------------------------
// One AdamW update per element through backend::adamw_update, so the bits equal the CPU's.
// w, g, m, v: f32, one size.
void adamw_step(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, float decay, const backend::AdamWScalars& s,
                cudaStream_t stream);

// ---- Step reductions (reductions.cu) ------------------------------------------------------------------------
// acc: an f64 one-element cuda tensor. x: f32 or bf16. Fixed-order reductions (the order depends
// only on numel), so the bits repeat; the sum's order differs from the CPU's element order.
// acc += sum of x^2 (each square exact in double).
void accumulate_sum_squares(const Tensor& x, Tensor& acc, cudaStream_t stream);
// acc = max(acc, max |x|), or +inf once any element of x is not finite.
void accumulate_max_abs(const Tensor& x, Tensor& acc, cudaStream_t stream);

}  // namespace echo::cuda
