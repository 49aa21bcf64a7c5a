#include "train/step_memory.h"

#include <fmt/format.h>

#include "comm/echo/device_state_bytes.h"
#include "model/tp_plan.h"
#include "quant/int8_linear.h"

namespace echo::train {

model::MemoryPlan plan_step_memory(const config::Config& cfg, const model::ModelShape& shape, backend::Backend& backend,
                                   model::Pass pass) {
  model::MemoryPlanInput in;
  in.master = DType::f32;
  in.activation = backend.activation_dtype(DType::f32);
  in.statistic = backend.statistic_dtype(DType::f32);
  in.micro_batch = cfg.train.micro_batch;
  in.seq = cfg.data.seq_len;
  in.pass = pass;
  in.workspace = backend.workspace_bytes(cfg.train.micro_batch, cfg.data.seq_len, shape.hidden, shape.heads_local(),
                                         shape.kv_heads_local(), shape.head_dim);
  const auto int8 = quant::Int8LinearConfig::from(cfg.linear, cfg.run.seed);
  if (int8.mode == config::LinearMode::int8) {
    in.int8_projections = cfg.linear.projection_list();
    // Called only inside plan_memory below, while `backend` is alive.
    in.int8_scratch = [&backend, int8, seq = cfg.data.seq_len](int64_t rows, int64_t k, int64_t n) {
      return backend.int8_scratch_bytes(int8, rows, k, n, seq);
    };
  }
  if (backend.device() == Device::cuda)
    in.all_reduce_state = comm::device_echo_state_bytes(
        cfg.comm, shape.tp, static_cast<size_t>(cfg.train.micro_batch) * cfg.data.seq_len * shape.hidden,
        pass == model::Pass::evaluation);
  return model::plan_memory(shape, model::make_qwen3_plan(shape), in);
}

model::MemoryPlan reserve_step_memory(const config::Config& cfg, const model::ModelShape& shape,
                                      backend::Backend& backend, model::Pass pass, const std::string& what,
                                      const std::string& levers) {
  model::MemoryPlan plan = plan_step_memory(cfg, shape, backend, pass);
  backend.reserve(plan.total(), fmt::format("{} (per rank: {})", what, plan.describe()), levers);
  return plan;
}

}  // namespace echo::train
