// backend::Backend: the one table of ops the model, the INT8 linear and the trainer call
// (docs/design.md §2). One per rank, made from run.device; the model code is written once and
// names no device. Ops take Tensor views (pointer, dtype, device, shape, strides) and run in
// order on the backend's stream; a tensor of the wrong dtype, device or shape is an echo::Error
// naming the op. Implementations: backend/cpu (exact reference: f32, and f64 for the gradient
// tests) and backend/cuda (bf16 activations, fp32 accumulation, master weights and optimizer).
//
// Shapes use the model's names: rows = tokens (or tokens * heads for the per-head norms),
// (batch, seq, heads, head_dim) for attention, vocab_local rows of the vocab-parallel tables.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/adamw_math.h"
#include "backend/tp_reducer.h"
#include "core/tensor.h"
#include "quant/int8_linear.h"

namespace echo::backend {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  virtual std::string device_model() const = 0;  // "cpu", "NVIDIA H200" (for the MFU peak)
  // The dtype of activations and of the weight copies the ops read, for master weights of
  // `master` (CPU: master itself, f32 or f64; CUDA: bf16), and of the per-row statistics saved
  // for backward (RMSNorm's rstd, the log-sum-exps; CPU: master; CUDA: f32). Gradients, master
  // weights and optimizer state are always `master`.
  virtual DType activation_dtype(DType master) const = 0;
  virtual DType statistic_dtype(DType master) const = 0;

  // ---- Memory and transfers -------------------------------------------------------------------
  // A contiguous tensor on this backend's device (uninitialised / zero-filled).
  virtual Tensor empty(std::vector<int64_t> shape, DType dtype) = 0;
  Tensor zeros(std::vector<int64_t> shape, DType dtype);
  // dst (this device) <- src (host or this device), same dtype and numel; dst contiguous.
  virtual void copy_from(Tensor& dst, const Tensor& src) = 0;
  // A host copy of src (the only op that waits for the stream).
  virtual Tensor to_host(const Tensor& src) = 0;
  // Waits until every op issued so far has finished.
  virtual void synchronize() = 0;
  // Raises (echo::Error) the first fault an op noted without waiting since the last call (CUDA:
  // a NaN or infinity in an INT8 linear's operand; kernels/deferred_faults.cuh), and clears it.
  // The trainer calls it once per step with the loss; the CPU raises in the op itself.
  virtual void raise_deferred_faults() = 0;
  // Scratch the backend allocates by itself for a layer over (batch, seq) tokens of `hidden`
  // with (heads, kv_heads, head_dim) attention, in the activation dtype of f32 master weights, the
  // trainer's (CUDA: the materialized attention scores, bf16, and the largest RMSNorm backward's
  // partial sums; CPU: the (seq, seq) f32 score matrices of one head at a time, on the heap).
  virtual size_t workspace_bytes(int64_t batch, int64_t seq, int64_t hidden, int64_t heads, int64_t kv_heads,
                                 int64_t head_dim) const = 0;
  // The scratch one INT8 linear call of (rows, in, out) takes beyond its saved operands
  // (model/memory_plan.h); seq_len is the example length EC groups rows by. CPU: its heap buffers
  // (G', Q, E and an int32 GEMM result), so reserve()'s host check counts them.
  virtual quant::Int8LinearScratch int8_scratch_bytes(const quant::Int8LinearConfig& cfg, int64_t rows, int64_t in,
                                                      int64_t out, int64_t seq_len) const = 0;
  // Start-up check (model/memory_plan.h): `bytes` (described by `what`) must fit in the
  // device's free memory, else an InputError names both; the CUDA backend then keeps that much
  // in its memory pool, so step 1 allocates from it. CPU: the ranks on the node share its memory,
  // so `bytes` times their count, plus headroom, must fit in MemAvailable (core/host_memory.h);
  // nothing is set aside, and an unreadable MemAvailable is a warning, not a refusal. `levers`
  // says what the user can lower in their program's own terms ("a smaller train.micro_batch ..."
  // for echo_train, "a smaller --micro-batch ..." for echo_eval), for this refusal and for a
  // later out-of-memory error (CUDA).
  virtual void reserve(size_t bytes, const std::string& what, const std::string& levers) = 0;
  // The most bytes of this backend's tensors in use at once so far (for the log against the plan).
  virtual size_t peak_bytes_in_use() const = 0;
  // For that log line: whether the tensors so far came from what reserve() set aside ("" when the
  // backend has no pool; CUDA: the pool's reserved bytes against the reservation).
  virtual std::string memory_pool_note() const = 0;

  // ---- GEMM -----------------------------------------------------------------------------------
  // c = alpha * op(a) * op(b) + beta * c on 2-D views; op(a) is (m, k): a is (m, k), or (k, m)
  // when trans_a; op(b) is (k, n). Each view's row stride is its leading dimension, so one head
  // of a (tokens, heads, head_dim) tensor can be an operand. beta == 0 overwrites c unread.
  virtual void gemm(bool trans_a, bool trans_b, double alpha, const Tensor& a, const Tensor& b, double beta,
                    Tensor& c) = 0;

  // ---- RMSNorm --------------------------------------------------------------------------------
  // out[r, :] = x[r, :] * rstd[r] * w, rstd[r] = 1 / sqrt(mean(x[r, :]^2) + eps).
  // x, out: (rows, dim)  w: (dim)  rstd: (rows), saved for backward.
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, Tensor& out, Tensor& rstd) = 0;
  // dx (rows, dim) overwritten; dw_accum (dim) += sum over rows of dout * x * rstd.
  virtual void rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                                Tensor& dw_accum) = 0;

  // ---- RoPE (rotate-half, Hugging Face Qwen3) --------------------------------------------------
  // x: (tokens, heads, head_dim), in place; positions: i32 (tokens) on this device.
  virtual void rope_forward(Tensor& x, const Tensor& positions, double base) = 0;
  virtual void rope_backward(Tensor& dx, const Tensor& positions, double base) = 0;

  // ---- Causal GQA attention, scale 1/sqrt(head_dim) --------------------------------------------
  // q, out: (batch, seq, n_q, d)  k, v: (batch, seq, n_kv, d)  lse: (batch, n_q, seq).
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, Tensor& lse) = 0;
  // dq, dk, dv overwritten; dk, dv sum over the query heads sharing a kv head.
  virtual void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, Tensor& dq, Tensor& dk, Tensor& dv) = 0;

  // ---- SwiGLU: out = silu(gate) * up, elementwise ----------------------------------------------
  virtual void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  virtual void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate,
                               Tensor& dup) = 0;

  // ---- Vocab-parallel embedding ------------------------------------------------------------------
  // tokens: i32 (n); table: (vocab_local, hidden) holding rows [vocab_begin, vocab_begin + vocab_local);
  // out: (n, hidden), zero rows for tokens another shard holds.
  virtual void embedding_forward(const Tensor& tokens, const Tensor& table, int64_t vocab_begin, Tensor& out) = 0;
  // dtable_accum[tokens[i] - vocab_begin, :] += dout[i, :] for the tokens this shard holds, in token order.
  virtual void embedding_backward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin,
                                  Tensor& dtable_accum) = 0;

  // ---- Vocab-parallel cross-entropy ----------------------------------------------------------------
  // The mean over counted targets of lse[t] - logit[t, target[t]] over the full vocabulary (the TP
  // reductions through `reducer`), the same value on every rank; lse (tokens) saved for backward.
  // logits: (tokens, vocab_local)  targets: i32 (tokens), global ids or ignore_index.
  // The loss is not returned: loss_acc (an f64 scalar on this device) += loss / divisor, so a
  // step's micro-batches add up on the device and the host reads the sum once (CUDA with a local
  // reducer never waits here; a reducer across ranks is host-staged and waits).
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                                     int32_t ignore_index, const TpReducer& reducer, Tensor& lse, double divisor,
                                     Tensor& loss_acc) = 0;
  // dlogits = (softmax - onehot(target)) * dloss / count for counted tokens, 0 rows for ignored ones.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                      int64_t vocab_begin, int32_t ignore_index, int64_t count, double dloss,
                                      Tensor& dlogits) = 0;

  // ---- Elementwise --------------------------------------------------------------------------------
  virtual void add_inplace(Tensor& y, const Tensor& x) = 0;  // y += x
  virtual void copy(Tensor& y, const Tensor& x) = 0;         // y = x, same dtype
  virtual void cast(Tensor& y, const Tensor& x) = 0;         // y = x converted to y's dtype, rounded once
  virtual void fill(Tensor& y, double value) = 0;
  virtual void scale(Tensor& y, double factor) = 0;  // y *= factor rounded to y's dtype

  // ---- Optimizer and step reductions ---------------------------------------------------------------
  // One AdamW update of w with gradient g and moments m, v (all f32, same shape); decay is
  // 1 - lr * weight_decay (1 for parameters without decay). Element math: train/adamw_math.h.
  virtual void adamw_step(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, float decay, const AdamWScalars& s) = 0;
  // acc (f64 scalar on this device) += sum of x^2, in element order.
  virtual void accumulate_sum_squares(const Tensor& x, Tensor& acc) = 0;
  // acc (f64 scalar) = max(acc, max |x|), or +inf once any element of x is not finite.
  virtual void accumulate_max_abs(const Tensor& x, Tensor& acc) = 0;

  // ---- INT8 linear with S3R-EC (docs/design.md §11) ------------------------------------------------
  // y (rows, out) = x (rows, in) · w^T (w: (out, in)) in INT8, keeping in `saved` what backward
  // needs; the rounding, thresholds and EC as in quant/int8_linear.h (f32 operands).
  virtual void int8_linear_forward(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx, const Tensor& x,
                                   const Tensor& w, Tensor& y, quant::Int8LinearSaved& saved) = 0;
  // dx (rows, in) (+)= dL/dX and dw_accum (out, in) += dL/dW for dy (rows, out); either may be null.
  virtual void int8_linear_backward(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx,
                                    const Tensor& dy, const quant::Int8LinearSaved& saved, Tensor* dx,
                                    bool accumulate_dx, Tensor* dw_accum) = 0;
};

// Where a rank's backend runs on its node (dist::node_place): the GPU it takes, and how many
// ranks share the node's memory (the CPU backend's reserve() checks the host's memory for all).
struct BackendPlace {
  int device_index = 0;   // CUDA: which GPU (the rank's local rank)
  int ranks_on_node = 1;  // CPU: ranks sharing this host's memory
};

// The backend of run.device ("cpu" | "cuda") at `place`.
// A build without the CUDA backend names the build option in its error.
std::unique_ptr<Backend> make_backend(Device device, BackendPlace place = {});

}  // namespace echo::backend
