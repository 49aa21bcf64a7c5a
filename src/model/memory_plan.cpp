#include "model/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "core/tensor.h"

namespace echo::model {

namespace {
// Sizes in elements of the tensors Qwen3Model allocates (qwen3_model.cpp); keep in step with it.
struct ActivationCounts {
  int64_t per_layer_act = 0, per_layer_stat = 0;  // saved by layer_forward for backward
  int64_t backward_transient = 0;                 // the larger of a layer's MLP and attention scratch
};

ActivationCounts count_activations(const ModelShape& s, int64_t n) {
  const int64_t H = s.hidden, D = s.head_dim, F = s.ffn_local();
  const int64_t hq = s.heads_local(), hkv = s.kv_heads_local();
  ActivationCounts c;
  // x_in, h1, x_mid, h2 | q_raw, q, attn | k_raw, k, v | gate, up, act
  c.per_layer_act = 4 * n * H + 3 * n * hq * D + 3 * n * hkv * D + 3 * n * F;
  // rstd1, rstd2 | q_rstd, lse | k_rstd
  c.per_layer_stat = 2 * n + 2 * n * hq + n * hkv;
  // MLP backward: dact, dgate, dup, dh, dnorm; the attention half frees the layer's MLP
  // activations (3nF + 2nH, as large as that scratch) before dattn, dq, dk, dv, dq_raw, dk_raw.
  c.backward_transient = std::max(3 * n * F + 2 * n * H, 3 * n * hq * D + 3 * n * hkv * D);
  return c;
}

// (in, out) of each block projection on this rank, in linear.projections' name order.
struct ProjectionDims {
  const char* name;
  int64_t in, out;
};

// Those of the projections named in `int8` (linear.projections under linear.mode: int8).
std::vector<ProjectionDims> int8_projection_dims(const ModelShape& s, const std::vector<std::string>& int8) {
  const int64_t H = s.hidden, F = s.ffn_local(), q = s.q_dim_local(), kv = s.kv_dim_local();
  std::vector<ProjectionDims> dims;
  for (const ProjectionDims& d :
       {ProjectionDims{"q", H, q}, ProjectionDims{"k", H, kv}, ProjectionDims{"v", H, kv}, ProjectionDims{"o", q, H},
        ProjectionDims{"gate", H, F}, ProjectionDims{"up", H, F}, ProjectionDims{"down", F, H}})
    if (std::find(int8.begin(), int8.end(), d.name) != int8.end()) dims.push_back(d);
  return dims;
}

// The backend's INT8 scratch beyond the saved operands: one call at a time, so the largest
// transient plus the largest kept.
size_t int8_scratch_bytes(const std::vector<ProjectionDims>& dims, int64_t n,
                          const std::function<quant::Int8LinearScratch(int64_t, int64_t, int64_t)>& scratch) {
  if (!scratch) return 0;
  size_t transient = 0, kept = 0;
  for (const ProjectionDims& d : dims) {
    const quant::Int8LinearScratch s = scratch(n, d.in, d.out);
    transient = std::max(transient, s.transient);
    kept = std::max(kept, s.kept);
  }
  return transient + kept;
}
}  // namespace

MemoryPlan plan_memory(const ModelShape& shape, const Qwen3Plan& plan, const MemoryPlanInput& in) {
  MemoryPlan p;
  p.local_parameters = local_parameter_count(plan, shape.tp);
  const size_t np = static_cast<size_t>(p.local_parameters);
  const size_t m = dtype_size(in.master), a = dtype_size(in.activation), st = dtype_size(in.statistic);
  p.weights = np * m;
  p.gradients = in.pass == Pass::training ? np * m : 0;
  p.compute_copies = in.activation == in.master ? 0 : np * a;
  p.optimizer = in.pass == Pass::training ? 2 * np * dtype_size(DType::f32) : 0;

  const int64_t n = in.micro_batch * in.seq, H = shape.hidden, V = shape.vocab_local();
  const ActivationCounts c = count_activations(shape, n);
  const std::vector<ProjectionDims> int8_dims = int8_projection_dims(shape, in.int8_projections);
  p.workspace = in.workspace + int8_scratch_bytes(int8_dims, n, in.int8_scratch);
  p.all_reduce_state = in.all_reduce_state;
  // X̂, Ŵ and their scales, saved by one layer's INT8 projections in forward.
  size_t layer_int8 = 0;
  for (const ProjectionDims& d : int8_dims) layer_int8 += quant::int8_saved_bytes(n, d.in, d.out);
  // The pass's loss accumulator (one f64) and the batch (tokens, targets, positions).
  const size_t batch = dtype_size(DType::f64) + static_cast<size_t>(3 * n) * dtype_size(DType::i32);
  if (in.pass == Pass::evaluation) {
    // Inside a layer, at its end: the residual stream, the layer's saved tensors (its INT8
    // projections' operands among them) and the o and down outputs not yet added in. After the
    // last layer: the residual stream (the final hidden state), the final norm's output and rstd,
    // the logits and their log-sum-exps.
    const size_t in_layer =
        static_cast<size_t>(3 * n * H + c.per_layer_act) * a + static_cast<size_t>(c.per_layer_stat) * st + layer_int8;
    const size_t at_head = static_cast<size_t>(2 * n * H + n * V) * a + static_cast<size_t>(2 * n) * st;
    p.activations = batch + std::max(in_layer, at_head);
    return p;
  }
  // Alive through backward: the loss accumulator and the batch, the residual stream (kept as the
  // final hidden state), every layer's saved tensors, the final norm's output and rstd, the logits
  // and their log-sum-exps.
  const size_t held = batch + static_cast<size_t>(n * H + shape.layers * c.per_layer_act + n * H + n * V) * a +
                      static_cast<size_t>(shape.layers * c.per_layer_stat + 2 * n) * st;
  // The backward peak, in its first (top) layer: dlogits, dh, dx, the per-layer q/k-norm
  // gradients (master dtype) and one layer's scratch. It exceeds the forward's in every shape.
  p.activations = held + static_cast<size_t>(n * V + 2 * n * H + c.backward_transient) * a +
                  static_cast<size_t>(2 * shape.layers * shape.head_dim) * m;

  // INT8 projections keep their saved operands until their layer's backward ends, so every
  // layer's are alive at the backward peak.
  p.int8_operands = static_cast<size_t>(shape.layers) * layer_int8;
  return p;
}

std::string MemoryPlan::describe() const {
  return fmt::format(
      "weights {}, gradients {}, {}optimizer {}, activations {}, {}workspace {}{}; total {}", format_bytes(weights),
      format_bytes(gradients), compute_copies ? fmt::format("compute copies {}, ", format_bytes(compute_copies)) : "",
      format_bytes(optimizer), format_bytes(activations),
      int8_operands ? fmt::format("INT8 operands {}, ", format_bytes(int8_operands)) : "", format_bytes(workspace),
      all_reduce_state ? fmt::format(", all-reduce state {}", format_bytes(all_reduce_state)) : "",
      format_bytes(total()));
}

}  // namespace echo::model
