// Learning rate at a step: linear warmup to optim.lr over schedule.warmup_steps, then
// cosine (or linear) decay to optim.min_lr at the last step, or constant.
#pragma once

#include <cstdint>

#include "core/config/config.h"

namespace echo::train {

double learning_rate(const config::OptimConfig& optim, const config::ScheduleConfig& schedule, int64_t step,
                     int64_t total_steps);

}  // namespace echo::train
