#include "model/memory_plan.h"

#include <algorithm>
#include <fmt/format.h>

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

std::vector<ProjectionDims> projection_dims(const ModelShape& s) {
  const int64_t H = s.hidden, F = s.ffn_local(), q = s.q_dim_local(), kv = s.kv_dim_local();
  return {{"q", H, q}, {"k", H, kv}, {"v", H, kv}, {"o", q, H}, {"gate", H, F}, {"up", H, F}, {"down", F, H}};
}
}  // namespace

MemoryPlan plan_memory(const ModelShape& shape, const Qwen3Plan& plan, const MemoryPlanInput& in) {
  MemoryPlan p;
  p.local_parameters = local_parameter_count(plan, shape.tp);
  const size_t np = static_cast<size_t>(p.local_parameters);
  const size_t m = dtype_size(in.master), a = dtype_size(in.activation), st = dtype_size(in.statistic);
  p.weights = np * m;
  p.gradients = np * m;
  p.compute_copies = in.activation == in.master ? 0 : np * a;
  p.optimizer = in.optimizer ? 2 * np * dtype_size(DType::f32) : 0;

  const int64_t n = in.micro_batch * in.seq, H = shape.hidden, V = shape.vocab_local();
  const ActivationCounts c = count_activations(shape, n);
  // Alive through backward: the step's loss accumulator (one f64), the batch (tokens, targets,
  // positions), the residual stream (kept as the final hidden state), every layer's saved
  // tensors, the final norm's output and rstd, the logits and their log-sum-exps.
  const size_t held = dtype_size(DType::f64) + static_cast<size_t>(3 * n) * dtype_size(DType::i32) +
                      static_cast<size_t>(n * H + shape.layers * c.per_layer_act + n * H + n * V) * a +
                      static_cast<size_t>(shape.layers * c.per_layer_stat + 2 * n) * st;
  // The backward peak, in its first (top) layer: dlogits, dh, dx, the per-layer q/k-norm
  // gradients (master dtype) and one layer's scratch. It exceeds the forward's in every shape.
  p.activations = held + static_cast<size_t>(n * V + 2 * n * H + c.backward_transient) * a +
                  static_cast<size_t>(2 * shape.layers * shape.head_dim) * m;
  p.workspace = in.workspace;

  // INT8 projections save X̂, Ŵ and their scales in forward until their layer's backward ends, so
  // every layer's are alive at the backward peak; the scratch of one call at a time comes on top.
  size_t transient = 0, kept = 0;
  for (const ProjectionDims& d : projection_dims(shape)) {
    if (std::find(in.int8_projections.begin(), in.int8_projections.end(), d.name) == in.int8_projections.end())
      continue;
    p.int8_operands += static_cast<size_t>(shape.layers) * quant::int8_saved_bytes(n, d.in, d.out);
    if (in.int8_scratch) {
      const quant::Int8LinearScratch s = in.int8_scratch(n, d.in, d.out);
      transient = std::max(transient, s.transient);
      kept = std::max(kept, s.kept);
    }
  }
  p.workspace += transient + kept;
  return p;
}

std::string MemoryPlan::describe() const {
  return fmt::format("weights {}, gradients {}, {}optimizer {}, activations {}, {}workspace {}; total {}",
                     format_bytes(weights), format_bytes(gradients),
                     compute_copies ? fmt::format("compute copies {}, ", format_bytes(compute_copies)) : "",
                     format_bytes(optimizer), format_bytes(activations),
                     int8_operands ? fmt::format("INT8 operands {}, ", format_bytes(int8_operands)) : "",
                     format_bytes(workspace), format_bytes(total()));
}

}  // namespace echo::model
