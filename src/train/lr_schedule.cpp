// Warmup + decay, as Megatron-LM and llm.c do it (step is 0-based).
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace echo::train {

double learning_rate(const config::OptimConfig& optim, const config::ScheduleConfig& schedule, int64_t step,
                     int64_t total_steps) {
  const int64_t warmup = schedule.warmup_steps;
  if (step < warmup) return optim.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (schedule.decay == config::LrDecay::constant) return optim.lr;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - 1 - warmup);
  const double progress = std::clamp(static_cast<double>(step - warmup) / decay_steps, 0.0, 1.0);
  const double shape = schedule.decay == config::LrDecay::cosine
                           ? 0.5 * (1.0 + std::cos(std::numbers::pi * progress))
                           : 1.0 - progress;
  return optim.min_lr + (optim.lr - optim.min_lr) * shape;
}

}  // namespace echo::train
