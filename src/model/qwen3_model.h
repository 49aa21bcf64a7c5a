// Qwen3 decoder (docs/design.md §5) with Megatron tensor parallelism, written once over
// backend::Backend (activations, weights and gradients are the backend's tensors; no device
// is named here):
// pre-norm blocks h += Attn(RMSNorm(h)); h += MLP(RMSNorm(h)); final RMSNorm; LM head;
// vocab-parallel cross-entropy. Forward keeps the activations backward needs and backward
// frees them. Every TP collective goes through TpOps; sites are numbered in visiting order
// (forward: 2l after attention, 2l+1 after the MLP; backward: the last layer's MLP first).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "model/parameters.h"
#include "model/tp_ops.h"
#include "quant/int8_linear.h"

namespace echo::model {

constexpr int32_t kIgnoreIndex = -100;

// tokens, targets: (batch, seq) row-major host arrays; targets may hold kIgnoreIndex. They go to
// the backend's device once per forward.
struct Batch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t num_tokens() const { return batch * seq; }
};

template <class T>
class Qwen3Model {
 public:
  // backend == nullptr: the model owns a CPU backend (tests, tools). `backend` must outlive it.
  // Pass::evaluation: no gradients are allocated and backward() is refused.
  Qwen3Model(const ModelShape& shape, TpOps<T>& tp, backend::Backend* backend = nullptr, Pass pass = Pass::training);

  void init_weights(uint64_t seed) { params_.init(seed); }
  ParameterSet<T>& params() { return params_; }
  const Qwen3Plan& plan() const { return plan_; }
  const ModelShape& shape() const { return shape_; }

  // Mean cross-entropy over the counted targets (same value on every TP rank). With
  // keep_activations the step's activations stay for backward(). This one reads the loss back
  // (a wait on a device backend).
  double forward(const Batch& batch, bool keep_activations = true);
  // The same forward without a wait: loss_acc (an f64 scalar from loss_accumulator()) += the
  // loss / divisor, so the trainer adds a step's micro-batches up on the device and reads once.
  void forward(const Batch& batch, bool keep_activations, Tensor& loss_acc, double divisor);
  Tensor loss_accumulator() { return be_.zeros({1}, DType::f64); }
  // The accumulated loss on the host: the one wait of a step (or of an evaluation), which also
  // raises any fault the backend or the all-reduces noted without waiting
  // (Backend::raise_deferred_faults, comm::AllReduce::raise_deferred_faults), all of them in one
  // error when several were noted (a NaN from one site reaches the next: none may hide the cause).
  double read_loss(const Tensor& loss_acc) {
    const double loss = *be_.to_host(loss_acc).template data<double>();
    raise_all({[&] { be_.raise_deferred_faults(); }, [&] { tp_.raise_deferred_faults(); }});
    return loss;
  }
  // Accumulates the gradients of the last forward's loss (times loss_scale, e.g. 1/micro-batches)
  // into params().grad and frees the activations. After every backward params().grad holds the
  // full gradient so far on every rank: the q_norm/k_norm shares of this call are summed over TP
  // before they are added, so any number of micro-batches accumulates correctly.
  void backward(T loss_scale = T(1));
  double forward_backward(const Batch& batch, T loss_scale = T(1));
  void forward_backward(const Batch& batch, T loss_scale, Tensor& loss_acc, double divisor);

  // A host copy of the final hidden state (after the last block, before the final norm) of the
  // last forward.
  std::vector<T> final_hidden() const { return final_hidden_.to(Device::cpu).template to_vector<T>(); }
  backend::Backend& backend() { return be_; }

  // The block projections (q, k, v, o, gate, up, down) in INT8 with S3R-EC (docs/design.md §11)
  // instead of fp32; the embedding and the LM head stay in full precision, as in the paper.
  // `projections` names the ones that run in int8 (linear.projections; empty = all seven).
  // fp32 models only.
  void set_int8_linear(const quant::Int8LinearConfig& cfg, const std::vector<std::string>& projections = {});
  // Where the next forward/backward sits, for the S3R threshold counters: the optimizer step
  // and the global index of this rank's first token among the step's tokens (DP rank and
  // micro-batch), so every TP/DP layout draws the same thresholds.
  void set_position(uint32_t step, int64_t token_offset) {
    step_ = step;
    token_offset_ = token_offset;
  }

 private:
  // The block projections, in the order of their S3R site ids.
  enum Proj : int { kQ, kK, kV, kO, kGate, kUp, kDown, kNumProj };
  struct LayerActs {
    Tensor x_in, h1, rstd1, q_raw, k_raw, q_rstd, k_rstd, q, k, v, attn, lse;
    Tensor x_mid, h2, rstd2, gate, up, act;
    std::array<quant::Int8LinearSaved, kNumProj> int8;  // empty unless INT8 linears are on
  };
  // y (rows, out) = x (rows, in) · W^T for projection `proj` (parameter w) of layer l, in the
  // backend's precision or INT8.
  void project(int64_t l, Proj proj, const Tensor& x, size_t w, Tensor& y, LayerActs& a);
  // dW += dy^T · x and dx (+)= dy · W for the same projection.
  void project_backward(int64_t l, Proj proj, const Tensor& dy, const Tensor& x, size_t w, Tensor& dx,
                        bool accumulate_dx, LayerActs& a);
  // A contiguous activation of the backend's dtype (statistics: the dtype of rstd and lse).
  Tensor act(std::vector<int64_t> shape) { return be_.empty(std::move(shape), act_dtype_); }
  Tensor stat(std::vector<int64_t> shape) { return be_.empty(std::move(shape), stat_dtype_); }
  Tensor copy_of(const Tensor& x) {
    Tensor c = act(x.shape());
    be_.copy(c, x);
    return c;
  }
  quant::LinearContext linear_context(int64_t l, Proj proj, int64_t out) const;
  void layer_forward(int64_t l, Tensor& x, LayerActs& a);
  void layer_backward(int64_t l, Tensor& dx, LayerActs& a, int& site);
  void check_batch(const Batch& batch) const;
  // Drops what a forward saved (batch, activations, logits) except the final hidden state.
  void release_forward_state();
  // This backward's q_norm (k = false) or k_norm gradient of layer l, before the TP sum.
  Tensor norm_grad(int64_t l, bool k) {
    return norm_grads_.slice(0, 2 * l + (k ? 1 : 0), 2 * l + (k ? 2 : 1)).view({shape_.head_dim});
  }

  std::unique_ptr<backend::Backend> owned_backend_;  // when none was given
  backend::Backend& be_;
  DType act_dtype_, stat_dtype_;
  ModelShape shape_;
  Qwen3Plan plan_;
  ParameterSet<T> params_;
  TpOps<T>& tp_;

  // Saved by forward for backward.
  Batch batch_;
  Tensor tokens_, targets_, positions_;  // on the backend's device
  std::vector<LayerActs> acts_;
  Tensor final_hidden_, final_norm_out_, final_rstd_, logits_, ce_lse_;
  Tensor norm_grads_;  // (2 * layers, head_dim): per layer [q_norm | k_norm] of the current backward
  int64_t count_ = 0;
  bool have_acts_ = false;
  std::optional<quant::Int8LinearConfig> int8_;
  std::array<bool, kNumProj> int8_proj_{};
  uint32_t step_ = 0;
  int64_t token_offset_ = 0;
};

}  // namespace echo::model
