// qwen3_reference_test's Hugging Face reference check under tensor parallelism (2 and 4 ranks):
// the same random Hugging Face folder, loaded with load_hf_weights' collective form into a model
// sharded over tp = 2 (and tp = 4 where the configuration divides) with the exact fp32
// all-reduce, gives the long-double reference's loss, final hidden state and log-probabilities to
// the tolerances of tp = 1. With 4 ranks and tp = 2 the two data-parallel replicas each check.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "../support/mpi_util.h"
#include "../support/scratch_dir.h"
#include "comm/exact_all_reduce.h"
#include "dist/world.h"
#include "model/model_shape.h"
#include "model/qwen3_model.h"
#include "model/tp_ops.h"
#include "qwen3_reference_checks.h"
#include "train/checkpoint/hf_weights.h"

namespace echo::model {
namespace {

namespace hf = testing::hf;
using namespace testing;  // the cases, seed, shape, tolerances and helpers of qwen3_reference_checks.h

bool tp_divides(const hf::Qwen3Config& c, int tp) {
  return c.num_attention_heads % tp == 0 && c.num_key_value_heads % tp == 0 && c.intermediate_size % tp == 0 &&
         c.vocab_size % tp == 0;
}

class HfQwen3ReferenceTp : public ::testing::TestWithParam<testing::ReferenceCase> {};

TEST_P(HfQwen3ReferenceTp, MatchesTheReferenceAtTp2And4) {
  const testing::ReferenceCase& c = GetParam();
  const hf::StateDict weights = hf::random_state_dict(c.config, kSeed, c.scales);
  const testing::Windows windows = testing::random_windows(kBatch, kSeq, c.config.vocab_size, kSeed + 1);
  const testing::ReferenceResult reference = testing::reference_result(c.config, weights, windows);
  // Every rank writes its own copy of the folder (the same bytes): no shared directory to agree on.
  const echo::testing::ScratchDir dir;
  hf::write_hf_folder(dir.str(), c.config, weights);
  const config::ModelConfig model_config = testing::echo_model_config(dir.str());

  int checked = 0;
  for (const int tp : {2, 4}) {
    if (echo::testing::world_size() % tp || !tp_divides(c.config, tp)) continue;
    ++checked;
    const dist::World world = dist::World::create(tp);
    comm::ExactAllReduce exact(world.tp, comm::ExactPrecision::fp32);
    CommTpOps ops(world.tp, exact);
    Qwen3Model<float> model(make_model_shape(model_config, tp, world.layout.tp_rank), ops);
    train::load_hf_weights(dir.str(), model.params(), world);

    const double loss = model.forward(windows.view(), false);
    const double loss_rel = std::fabs(loss - reference.loss) / reference.loss;
    EXPECT_LE(loss_rel, kLossRelTol) << "tp=" << tp << ": echo " << loss << " vs reference " << reference.loss;
    // The residual stream is whole on every rank after each block's all-reduce.
    const double hidden_diff = max_abs_diff(model.final_hidden(), reference.hidden);
    EXPECT_LE(hidden_diff, kHiddenRelTol * max_abs(reference.hidden)) << "tp=" << tp;
    const double log_prob_diff = max_abs_diff(testing::echo_log_probs(model, windows), reference.log_probs);
    EXPECT_LE(log_prob_diff, kLogProbAbsTol) << "tp=" << tp;
    if (echo::testing::world_rank() == 0)
      std::printf(
          "[ tp=%d     ] %s: loss echo %.9f reference %.9f (relative %.2e); hidden max |d| %.2e; "
          "log-prob max |d| %.2e\n",
          tp, c.name, loss, reference.loss, loss_rel, hidden_diff, log_prob_diff);
  }
  if (checked == 0 && echo::testing::world_rank() == 0)
    std::printf("[ skipped  ] %s: no tp in {2, 4} divides both the world (%d ranks) and the model\n", c.name,
                echo::testing::world_size());
}

INSTANTIATE_TEST_SUITE_P(Qwen3, HfQwen3ReferenceTp, ::testing::ValuesIn(testing::reference_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace echo::model
