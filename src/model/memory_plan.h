// What one rank allocates to train a Qwen3Model, in bytes, from the shapes alone (docs/design.md
// §2.1, Memory): the trainer checks it against the device's free memory before anything is
// allocated, so a model that cannot fit is refused at start-up, naming the bytes, instead of
// failing in the middle of step 1. The activation term is the exact peak of the live tensors
// of one micro-batch's forward + backward as Qwen3Model allocates them (or of an evaluation's
// forward), INT8 linears' saved operands included; memory_plan_test measures the CPU backend's
// real peak and asserts it equals this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/model_shape.h"
#include "model/pass.h"
#include "model/tp_plan.h"
#include "quant/int8_linear.h"

namespace echo::model {

struct MemoryPlan {
  int64_t local_parameters = 0;  // this rank's shard of every parameter (tied weights once)
  size_t weights = 0;            // master weights
  size_t gradients = 0;          // 0 for evaluation: the model allocates none
  size_t compute_copies = 0;     // weights in the activation dtype; 0 when they alias the masters
  size_t optimizer = 0;          // AdamW first and second moments (f32)
  size_t activations = 0;        // peak of one micro-batch's forward + backward (evaluation: forward)
  size_t int8_operands = 0;      // X̂, Ŵ and their scales, saved by every INT8 projection's forward
                                 // (evaluation: one layer's, inside activations, so 0 here)
  size_t workspace = 0;          // the backend's own scratch (CUDA: attention scores, INT8 scratch)
  size_t all_reduce_state = 0;   // the TP all-reduce's device state (MemoryPlanInput)
  size_t total() const {
    return weights + gradients + compute_copies + optimizer + activations + int8_operands + workspace +
           all_reduce_state;
  }
  // "weights 1.2 GiB, gradients ..., total 9.8 GiB"
  std::string describe() const;
};

struct MemoryPlanInput {
  DType master = DType::f32, activation = DType::f32, statistic = DType::f32;
  int64_t micro_batch = 1, seq = 1;
  Pass pass = Pass::training;
  size_t workspace = 0;    // from Backend::workspace_bytes
  // What the block sites' all-reduce keeps on the device (comm/echo/device_state_bytes.h; 0 on the
  // CPU backend, whose Echo state is host memory outside the backend's tensors).
  size_t all_reduce_state = 0;
  // The block projections that run in INT8 (linear.projections under linear.mode: int8; empty:
  // none), and the backend's scratch for one of them beyond its saved operands
  // (Backend::int8_scratch_bytes; unset: none).
  std::vector<std::string> int8_projections;
  std::function<quant::Int8LinearScratch(int64_t rows, int64_t in, int64_t out)> int8_scratch;
};

MemoryPlan plan_memory(const ModelShape& shape, const Qwen3Plan& plan, const MemoryPlanInput& in);

}  // namespace echo::model
