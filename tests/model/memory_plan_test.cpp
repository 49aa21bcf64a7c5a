// model::plan_memory against what the CPU backend really allocates: the parameter and gradient
// bytes, and the peak of live tensor bytes over a forward + backward, measured with the
// host allocation counter, must equal the plan exactly, in several shapes (GQA, tied and untied
// embeddings, batch and sequence), and so must an evaluation forward's peak. This is what the
// CUDA start-up check relies on.
#include "model/memory_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/test_util.h"
#include "model/tp_ops.h"
#include "model_test_util.h"

namespace echo::model {
namespace {

struct Case {
  int layers, heads, kv_heads, hidden, ffn;
  bool tied;
  int64_t batch, seq;
  int vocab = 32;
};

class MemoryPlanMatchesTheCpuBackend : public ::testing::TestWithParam<Case> {};

TEST_P(MemoryPlanMatchesTheCpuBackend, ParametersAndPeakActivations) {
  const Case c = GetParam();
  config::ModelConfig cfg = testing::tiny_config(c.layers, c.heads, c.kv_heads);
  cfg.hidden = c.hidden;
  cfg.ffn = c.ffn;
  cfg.tie_embeddings = c.tied;
  cfg.vocab_size = c.vocab;
  const ModelShape shape = make_model_shape(cfg, 1, 0);
  ExactTpOps<float> solo;
  auto cpu = backend::make_backend(Device::cpu);
  MemoryPlanInput in;
  in.micro_batch = c.batch;
  in.seq = c.seq;
  const MemoryPlan plan = plan_memory(shape, make_qwen3_plan(shape), in);

  const size_t before_model = host_memory_stats().live;
  Qwen3Model<float> model(shape, solo, cpu.get());
  model.init_weights(3);
  const size_t after_model = host_memory_stats().live;
  EXPECT_EQ(after_model - before_model, plan.weights + plan.gradients + plan.compute_copies);
  EXPECT_EQ(plan.compute_copies, 0u) << "the CPU backend computes on the master weights";

  // Two micro-batches: after the first, only its final hidden state stays alive, and the next
  // forward drops it first; the plan counts from a model holding no pass.
  const size_t final_hidden = static_cast<size_t>(c.batch * c.seq * shape.hidden) * sizeof(float);
  for (int step = 0; step < 2; ++step) {
    const auto batch = testing::random_batch(c.batch, c.seq, shape.vocab, 40 + step);
    const size_t idle = host_memory_stats().live - (step == 0 ? 0 : final_hidden);
    EXPECT_EQ(idle, after_model) << "step " << step << ": nothing else outlives a pass";
    reset_host_memory_peak();
    model.forward_backward(batch.view());
    const HostMemoryStats after = host_memory_stats();
    EXPECT_EQ(after.peak - idle, plan.activations) << "step " << step << ": " << plan.describe();
    EXPECT_EQ(after.live, idle + final_hidden) << "after backward only the final hidden state stays";
  }
  // An evaluation forward (no backward) keeps one layer's saved tensors at a time: its peak is
  // the evaluation plan's, and below a training pass's; a model built for evaluation holds no
  // gradients.
  in.pass = Pass::evaluation;
  const MemoryPlan eval = plan_memory(shape, make_qwen3_plan(shape), in);
  EXPECT_EQ(eval.optimizer, 0u);
  EXPECT_EQ(eval.gradients, 0u);
  EXPECT_EQ(eval.weights, plan.weights);
  const auto batch = testing::random_batch(c.batch, c.seq, shape.vocab, 99);
  reset_host_memory_peak();
  const size_t idle = host_memory_stats().live - final_hidden;
  const double loss = model.forward(batch.view(), false);
  EXPECT_EQ(host_memory_stats().peak - idle, eval.activations) << eval.describe();
  EXPECT_LT(eval.activations, plan.activations);
  // The same loss as a forward that keeps every layer's tensors for a backward.
  EXPECT_EQ(model.forward(batch.view(), true), loss);

  const size_t before_eval_model = host_memory_stats().live;
  Qwen3Model<float> evaluator(shape, solo, cpu.get(), Pass::evaluation);
  evaluator.init_weights(3);
  const size_t eval_idle = host_memory_stats().live;
  EXPECT_EQ(eval_idle - before_eval_model, eval.weights + eval.gradients + eval.compute_copies);
  reset_host_memory_peak();
  EXPECT_EQ(evaluator.forward(batch.view(), false), loss) << "the same weights give the same loss";
  EXPECT_EQ(host_memory_stats().peak - eval_idle, eval.activations) << eval.describe();
  // Refused before the forward allocates anything.
  const size_t before_refusal = host_memory_stats().live;
  reset_host_memory_peak();
  EXPECT_THAT(echo::testing::error_of([&] { evaluator.forward_backward(batch.view()); }),
              ::testing::HasSubstr("forward_backward() of a model built for evaluation, which has no gradients"));
  EXPECT_EQ(host_memory_stats().peak, before_refusal);
  EXPECT_THAT(echo::testing::error_of([&] { evaluator.forward(batch.view(), true); }),
              ::testing::HasSubstr("a forward for backward() of a model built for evaluation, which has no gradients"));
  EXPECT_THAT(echo::testing::error_of([&] { evaluator.backward(); }),
              ::testing::HasSubstr("backward() of a model built for evaluation, which has no gradients"));
  EXPECT_THAT(echo::testing::error_of([&] { evaluator.params().zero_grads(); }),
              ::testing::HasSubstr("parameters built for evaluation, which have no gradients"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MemoryPlanMatchesTheCpuBackend,
                         ::testing::Values(Case{2, 4, 2, 16, 24, false, 2, 8},   // GQA, FFN wider
                                           Case{3, 2, 2, 32, 40, true, 3, 5},    // MHA, tied, odd seq
                                           Case{1, 4, 1, 16, 64, false, 1, 16},  // MQA, FFN-heavy
                                           Case{2, 8, 4, 16, 16, true, 2, 7},    // attention-heavy
                                           // The logits outweigh a layer, as in real models: an
                                           // evaluation's peak is at the head.
                                           Case{2, 4, 2, 16, 24, false, 2, 8, 1000}));

// INT8 linears save X̂, Ŵ and their scales from forward to their layer's backward: with some or all
// projections in int8 the CPU's peak must still equal the plan, activations plus INT8 operands.
TEST(MemoryPlan, Int8OperandsAreCountedExactly) {
  config::ModelConfig cfg = testing::tiny_config(2, 4, 2);
  cfg.hidden = 24;
  cfg.ffn = 40;
  const ModelShape shape = make_model_shape(cfg, 1, 0);
  quant::Int8LinearConfig q;
  q.mode = config::LinearMode::int8;
  q.rounding = config::BackwardRounding::s3r;
  q.thresholds = config::ThresholdMode::per_token;
  q.ec = config::EcMode::two_way;
  q.seed = 5;
  const int64_t batch = 2, seq = 6, n = batch * seq;
  const std::vector<std::vector<std::string>> choices = {{"q", "k", "v", "o", "gate", "up", "down"}, {"v", "down"}};
  for (const auto& names : choices) {
    ExactTpOps<float> solo;
    auto cpu = backend::make_backend(Device::cpu);
    MemoryPlanInput in;
    in.micro_batch = batch;
    in.seq = seq;
    in.int8_projections = names;
    const MemoryPlan plan = plan_memory(shape, make_qwen3_plan(shape), in);
    // Worked by hand: (rows·in + out·in) int8 bytes and (rows + out) f32 scales per projection.
    const int64_t H = 24, F = 40, qd = 4 * cfg.head_dim, kvd = 2 * cfg.head_dim;
    const auto saved = [&](int64_t i, int64_t o) { return static_cast<size_t>(n * i + o * i + 4 * (n + o)); };
    const size_t per_layer = names.size() == 7 ? saved(H, qd) + 2 * saved(H, kvd) + saved(qd, H) + 2 * saved(H, F) +
                                                     saved(F, H)
                                               : saved(H, kvd) + saved(F, H);
    EXPECT_EQ(plan.int8_operands, 2 * per_layer);
    EXPECT_EQ(plan.workspace, 0u) << "no int8_scratch given";

    Qwen3Model<float> model(shape, solo, cpu.get());
    model.set_int8_linear(q, names);
    model.init_weights(3);
    const size_t idle = host_memory_stats().live;
    reset_host_memory_peak();
    model.forward_backward(testing::random_batch(batch, seq, shape.vocab, 41).view());
    EXPECT_EQ(host_memory_stats().peak - idle, plan.activations + plan.int8_operands) << plan.describe();
    // An evaluation forward holds one layer's operands at a time, counted inside its activations.
    in.pass = Pass::evaluation;
    const MemoryPlan eval = plan_memory(shape, make_qwen3_plan(shape), in);
    EXPECT_EQ(eval.int8_operands, 0u);
    const size_t eval_idle = host_memory_stats().live - static_cast<size_t>(n * H) * sizeof(float);
    reset_host_memory_peak();
    model.forward(testing::random_batch(batch, seq, shape.vocab, 42).view(), false);
    EXPECT_EQ(host_memory_stats().peak - eval_idle, eval.activations) << eval.describe();
  }
  // The backend's scratch enters the workspace: the largest transient plus the largest kept.
  MemoryPlanInput in;
  in.micro_batch = batch;
  in.seq = seq;
  in.workspace = 7;
  in.int8_projections = {"gate", "o"};
  in.int8_scratch = [](int64_t rows, int64_t i, int64_t o) {
    return quant::Int8LinearScratch{static_cast<size_t>(rows * o), static_cast<size_t>(i)};
  };
  const MemoryPlan p = plan_memory(shape, make_qwen3_plan(shape), in);
  EXPECT_EQ(p.workspace, 7 + static_cast<size_t>(std::max(n * 40, n * 24)) + 4 * cfg.head_dim);
}

TEST(MemoryPlan, DevicePrecisionAndWorkspaceAddUp) {
  const ModelShape shape = make_model_shape(testing::tiny_config(2, 4, 2), 2, 1);
  MemoryPlanInput in;
  in.activation = DType::bf16;
  in.micro_batch = 2;
  in.seq = 8;
  in.workspace = 1000;
  const MemoryPlan p = plan_memory(shape, make_qwen3_plan(shape), in);
  const size_t np = static_cast<size_t>(p.local_parameters);
  EXPECT_EQ(p.weights, 4 * np);
  EXPECT_EQ(p.compute_copies, 2 * np) << "bf16 copies of the fp32 masters";
  EXPECT_EQ(p.optimizer, 8 * np);
  EXPECT_EQ(p.total(), p.weights + p.gradients + p.compute_copies + p.optimizer + p.activations + 1000);
  EXPECT_EQ(p.describe().find("all-reduce state"), std::string::npos) << "none: not named";
  // The all-reduce's device state (CUDA Echo) adds up, in training and in an evaluation.
  in.all_reduce_state = 3 * 1024;
  const MemoryPlan with_state = plan_memory(shape, make_qwen3_plan(shape), in);
  EXPECT_EQ(with_state.total(), p.total() + 3 * 1024);
  EXPECT_NE(with_state.describe().find(", all-reduce state 3.00 KiB; total "), std::string::npos)
      << with_state.describe();
  in.pass = Pass::evaluation;
  const MemoryPlan eval = plan_memory(shape, make_qwen3_plan(shape), in);
  EXPECT_EQ(eval.optimizer, 0u);
  EXPECT_EQ(eval.all_reduce_state, 3u * 1024);
  EXPECT_EQ(echo::format_bytes(512), "512 B");
  EXPECT_EQ(echo::format_bytes(3 * 1024), "3.00 KiB");
  EXPECT_EQ(echo::format_bytes(size_t{5} << 30), "5.00 GiB");
}

}  // namespace
}  // namespace echo::model
