// FLOPs per token, MFU with fp32 and int8 parts, and the progress line.
#include <gtest/gtest.h>

#include "train/metrics.h"

namespace echo::train {

TEST(Metrics, FlopsPerTokenIs6NPlusAttention) {
  model::ModelShape s;
  s.layers = 28;
  s.heads = 16;
  s.head_dim = 128;
  // Qwen3-0.6B-like: 6·N + 12·L·heads·head_dim·seq
  EXPECT_DOUBLE_EQ(flops_per_token(s, 600'000'000, 2048), 6.0 * 6e8 + 12.0 * 28 * 16 * 128 * 2048);
}

TEST(Metrics, MfuWeighsInt8WorkAgainstTheInt8Peak) {
  DevicePeak peak{100.0, 400.0, "test"};
  EXPECT_DOUBLE_EQ(mfu(50.0, 0.0, 1.0, peak, 1), 0.5);
  EXPECT_DOUBLE_EQ(mfu(50.0, 0.0, 1.0, peak, 2), 0.25) << "two nodes have twice the peak";
  // 20 fp32 FLOPs take 0.2 s at peak, 200 int8 ops 0.5 s: 0.7 s of ideal time in 1 s.
  EXPECT_DOUBLE_EQ(mfu(20.0, 200.0, 1.0, peak, 1), 0.7);
  const DevicePeak cpu = cpu_peak();
  EXPECT_GT(cpu.flops_per_s, 0);
  EXPECT_DOUBLE_EQ(cpu.int8_ops_per_s, 4 * cpu.flops_per_s);
  EXPECT_NE(cpu.description.find("GFLOP/s"), std::string::npos);
}

TEST(Metrics, ProgressLineShowsStepLossRateAndEta) {
  StepMetrics m{120, 3.45678, 3e-4, 0.5, 12345, 250, 0.1};
  const std::string line = progress_line(m, 1000, 3723);
  EXPECT_EQ(line, "step    120/1000 | loss 3.4568 | lr 3.00e-04 | grad 0.500 | 12.3k tok/s | 250 ms | ETA 01:02:03");
}

}  // namespace echo::train
