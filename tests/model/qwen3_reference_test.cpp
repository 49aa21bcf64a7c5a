// echo's whole Qwen3 forward pass against Hugging Face Qwen3 (transformers' modeling_qwen3.py),
// rewritten independently in long double (hf_qwen3_reference.h). The op tests check RoPE,
// RMSNorm, attention, SwiGLU and cross-entropy one at a time; this checks how they compose.
//
// Random weights (fixed seed, norm weights around 1) in Hugging Face names and layout are written
// as a Hugging Face folder (config.json + model.safetensors, by the test's own writer) and loaded
// the way echo_eval loads one: config.json through config_from_hf, then load_hf_weights. So the
// config mapping (rope_theta, rms_norm_eps, head_dim, tie_word_embeddings), the safetensors
// reader, the weight layout and the forward pass are all under test. Compared, on 3 sequences of
// 7 tokens: the loss; the final hidden state (before model.norm) elementwise; and the
// log-probability of every vocabulary id at every position, which sees the logits up to the
// per-row constant no softmax sees.
//
// Each of these changes to the reference makes the suite fail (tried one at a time, by hand):
// interleaved RoPE pairs instead of rotate_half; RoPE's sign flipped; rope_theta fixed at 1e6;
// positions reversed within each sequence; q_norm/k_norm after RoPE instead of before; query head
// h reading kv head h % kv_heads instead of h / (heads / kv_heads) (the 4/2 and 8/4 cases: for 4/1
// and 2/2 the two agree); no causal mask; the attention scale 1/head_dim instead of
// 1/sqrt(head_dim); silu on up_proj instead of gate_proj; rms_norm_eps fixed at 1e-6; eps added
// outside the square root; the final norm's weight ignored; the untied lm_head ignored (logits
// from embed_tokens); the loss without the label shift; ignored labels counted in the mean.
// Positions running on across the batch instead of restarting per sequence is NOT caught, and
// cannot be by any forward check: RoPE attention scores depend only on position differences.

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "../support/scratch_dir.h"
#include "model/model_shape.h"
#include "model/qwen3_model.h"
#include "model/tp_ops.h"
#include "qwen3_reference_checks.h"
#include "train/checkpoint/hf_weights.h"

namespace echo::model {
namespace {

namespace hf = testing::hf;
using namespace testing;  // the cases, seed, shape, tolerances and helpers of qwen3_reference_checks.h

class HfQwen3Reference : public ::testing::TestWithParam<testing::ReferenceCase> {
 protected:
  void SetUp() override {
    const testing::ReferenceCase& c = GetParam();
    weights_ = hf::random_state_dict(c.config, kSeed, c.scales);
    hf::write_hf_folder(dir_.str(), c.config, weights_);
    windows_ = testing::random_windows(kBatch, kSeq, c.config.vocab_size, kSeed + 1);
    reference_ = testing::reference_result(c.config, weights_, windows_);
    const ModelShape shape = make_model_shape(testing::echo_model_config(dir_.str()), 1, 0);
    model_ = std::make_unique<Qwen3Model<float>>(shape, tp_);
    train::load_hf_weights(dir_.str(), model_->params());
  }

  echo::testing::ScratchDir dir_;
  hf::StateDict weights_;
  testing::Windows windows_;
  testing::ReferenceResult reference_;
  ExactTpOps<float> tp_;
  std::unique_ptr<Qwen3Model<float>> model_;
};

TEST_P(HfQwen3Reference, LossMatches) {
  const double loss = model_->forward(windows_.view(), false);
  const double rel = std::fabs(loss - reference_.loss) / reference_.loss;
  std::printf("[ loss     ] %s: echo %.9f, reference %.9f, relative difference %.2e\n", GetParam().name, loss,
              reference_.loss, rel);
  EXPECT_LE(rel, kLossRelTol) << "echo " << loss << " vs Hugging Face reference " << reference_.loss;
}

// Labels of -100 are left out of the mean by both (HF's ignore_index, echo's kIgnoreIndex).
TEST_P(HfQwen3Reference, LossWithIgnoredLabelsMatches) {
  std::vector<int32_t> labels = windows_.ids, targets = windows_.targets;
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t : {int64_t{0}, b + 2}) {  // echo's target t is HF's label t + 1 of the window
      targets[b * kSeq + t] = kIgnoreIndex;
      labels[b * (kSeq + 1) + t + 1] = hf::kIgnoreLabel;
    }
  const hf::ForwardOutput out = hf::Qwen3Reference(GetParam().config, weights_).forward(windows_.ids, kBatch, kSeq + 1);
  const double ref = static_cast<double>(hf::causal_lm_loss(out.logits, labels, kBatch, kSeq + 1));
  const double loss = model_->forward({windows_.tokens.data(), targets.data(), kBatch, kSeq}, false);
  std::printf("[ ignored  ] %s: echo %.9f, reference %.9f\n", GetParam().name, loss, ref);
  EXPECT_LE(std::fabs(loss - ref) / ref, kLossRelTol) << "echo " << loss << " vs Hugging Face reference " << ref;
}

TEST_P(HfQwen3Reference, FinalHiddenStateMatchesElementwise) {
  model_->forward(windows_.view(), false);
  const double diff = max_abs_diff(model_->final_hidden(), reference_.hidden), scale = max_abs(reference_.hidden);
  std::printf("[ hidden   ] %s: max |echo - reference| %.2e, max |reference| %.2f\n", GetParam().name, diff, scale);
  EXPECT_LE(diff, kHiddenRelTol * scale);
}

TEST_P(HfQwen3Reference, LogProbsMatchAtEveryPositionAndId) {
  const std::vector<double> log_probs = testing::echo_log_probs(*model_, windows_);
  const double diff = max_abs_diff(log_probs, reference_.log_probs);
  std::printf("[ log-prob ] %s: max |echo - reference| %.2e over %zu values, max |reference| %.2f\n", GetParam().name,
              diff, log_probs.size(), max_abs(reference_.log_probs));
  EXPECT_LE(diff, kLogProbAbsTol);
}

INSTANTIATE_TEST_SUITE_P(Qwen3, HfQwen3Reference, ::testing::ValuesIn(testing::reference_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace echo::model
