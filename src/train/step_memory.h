// One rank's memory for training steps of a config's model (model/memory_plan.h) on a backend:
// the plan the trainer checks before its first tensor, shared with echo_model_bench so that a
// batch that cannot fit is refused with the same message instead of failing in an allocation.
#pragma once

#include "backend/backend.h"
#include "core/config/config.h"
#include "model/memory_plan.h"
#include "model/model_shape.h"

namespace echo::train {

// micro_batch sequences of seq_len tokens (cfg.train.micro_batch, cfg.data.seq_len), fp32
// masters, the backend's activation and statistic dtypes and scratch, the INT8 projections of
// cfg.linear; training steps (with AdamW moments) or evaluation forwards (`pass`).
model::MemoryPlan plan_step_memory(const config::Config& cfg, const model::ModelShape& shape, backend::Backend& backend,
                                   model::Pass pass);

// plan_step_memory, then Backend::reserve of its total: an InputError naming `what`, the plan's
// parts and `levers` (what the user can lower, in the program's own terms) when one rank's share
// does not fit.
model::MemoryPlan reserve_step_memory(const config::Config& cfg, const model::ModelShape& shape,
                                      backend::Backend& backend, model::Pass pass, const std::string& what,
                                      const std::string& levers);

}  // namespace echo::train
