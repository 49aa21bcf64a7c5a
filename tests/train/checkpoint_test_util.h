// Shared by the checkpoint tests: a tiny Qwen3 whose sizes divide by 1, 2 and 4 ranks, random full
// tensors and moments (never zeros), one rank's model state, bitwise comparison, and a fixture with
// a fresh directory shared by all ranks.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "../support/mpi_util.h"
#include "../support/test_data.h"
#include "backend/cpu/cpu_backend.h"
#include "dist/world.h"
#include "train/adamw.h"
#include "train/checkpoint/checkpoint.h"

namespace echo::train::testing {

using echo::testing::world_rank;
using echo::testing::world_size;

namespace fs = std::filesystem;

// heads, kv_heads, ffn and the padded vocab (64) divide by 1, 2 and 4.
inline config::ModelConfig ckpt_config(bool tied = false, int hidden = 32) {
  config::ModelConfig c = model::testing::tiny_config(2, 8, 4);
  c.hidden = hidden;
  c.ffn = 48;
  c.vocab_size = 60;
  c.vocab_pad_multiple = 16;
  c.tie_embeddings = tied;
  c.init_std = 0.1;
  return c;
}

inline std::string config_yaml(const config::ModelConfig& m, int tp) {
  config::Config c;
  c.model = m;
  c.parallel.tp = tp;
  c.data.seq_len = 16;
  c.data.eos_id = 57;  // inside the vocabulary, and not a default: config.json must carry it
  c.model.max_position_embeddings = 4096;  // config.json must take this, not the 16 trained on
  return config::to_yaml(c);
}

// A fresh directory under /tmp shared by all ranks (rank 0 creates it), removed at the end.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char buf[256] = {};
    if (world_rank() == 0) {
      char tmpl[] = "/tmp/echo_checkpoint_test_XXXXXX";
      ASSERT_NE(mkdtemp(tmpl), nullptr);
      std::strncpy(buf, tmpl, sizeof buf - 1);
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    dir_ = buf;
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir_);
  }
  std::string sub(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
};

// One rank's model state, built in place (ParameterSet keeps pointers to the shape and plan).
struct Shard {
  backend::CpuBackend backend;
  model::ModelShape shape;
  model::Qwen3Plan plan;
  model::ParameterSet<float> params;
  AdamW opt;
  Shard(const config::ModelConfig& cfg, int tp, int tp_rank)
      : shape(model::make_model_shape(cfg, tp, tp_rank)),
        plan(model::make_qwen3_plan(shape)),
        params(plan, shape, backend),
        opt(params) {}
};

// Full tensors of every parameter and both moments, random (norms included, so a replicated
// tensor taken from the wrong place would show).
struct Reference {
  std::vector<model::ParamSpec> specs;
  std::vector<std::vector<float>> value, exp_avg, exp_avg_sq;
};

inline Reference make_reference(const config::ModelConfig& cfg, uint64_t seed) {
  Reference ref;
  ref.specs = model::make_qwen3_plan(model::make_model_shape(cfg, 1, 0)).params;
  for (size_t i = 0; i < ref.specs.size(); ++i) {
    const size_t n = static_cast<size_t>(ref.specs[i].local_numel(1));
    ref.value.push_back(echo::testing::random_normal(n, seed, 3 * i));
    ref.exp_avg.push_back(echo::testing::random_normal(n, seed, 3 * i + 1, 0.0f, 0.01f));
    auto v = echo::testing::random_normal(n, seed, 3 * i + 2, 0.0f, 1e-4f);
    for (auto& x : v) x = std::abs(x);
    ref.exp_avg_sq.push_back(std::move(v));
  }
  return ref;
}

inline std::vector<float> shard_of(const std::vector<float>& full, const model::ParamSpec& spec, int tp, int tp_rank) {
  std::vector<float> out(static_cast<size_t>(spec.local_numel(tp)));
  for (size_t e = 0; e < out.size(); ++e) out[e] = full[spec.global_index(static_cast<int64_t>(e), tp, tp_rank)];
  return out;
}

inline void fill(Shard& s, const Reference& ref, int64_t opt_step) {
  ASSERT_EQ(s.params.size(), ref.specs.size());
  for (size_t i = 0; i < ref.specs.size(); ++i) {
    ASSERT_EQ(s.params[i].spec->name, ref.specs[i].name);
    std::ranges::copy(shard_of(ref.value[i], ref.specs[i], s.shape.tp, s.shape.tp_rank),
                      s.params[i].host_value().begin());
    std::ranges::copy(shard_of(ref.exp_avg[i], ref.specs[i], s.shape.tp, s.shape.tp_rank),
                      host_span<float>(s.opt.exp_avg(i)).begin());
    std::ranges::copy(shard_of(ref.exp_avg_sq[i], ref.specs[i], s.shape.tp, s.shape.tp_rank),
                      host_span<float>(s.opt.exp_avg_sq(i)).begin());
  }
  s.opt.set_step_count(opt_step);
}

// Bitwise equality, reporting the first difference instead of whole vectors.
inline ::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult same_bits(const Tensor& got, const std::vector<float>& want) {
  return same_bits(got.to_vector<float>(), want);
}
inline ::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  return same_bits(got.to_vector<float>(), want.to_vector<float>());
}

inline void expect_matches(const Shard& s, const Reference& ref, bool with_opt, int64_t opt_step) {
  for (size_t i = 0; i < ref.specs.size(); ++i) {
    SCOPED_TRACE(ref.specs[i].name);
    const int tp = s.shape.tp, r = s.shape.tp_rank;
    EXPECT_TRUE(same_bits(s.params[i].value, shard_of(ref.value[i], ref.specs[i], tp, r)));
    if (!with_opt) continue;
    EXPECT_TRUE(same_bits(s.opt.exp_avg(i), shard_of(ref.exp_avg[i], ref.specs[i], tp, r)));
    EXPECT_TRUE(same_bits(s.opt.exp_avg_sq(i), shard_of(ref.exp_avg_sq[i], ref.specs[i], tp, r)));
  }
  if (with_opt) {
    EXPECT_EQ(s.opt.step_count(), opt_step);
  }
}

// Saves `ref` from a tp × (world / tp) layout as checkpoint `step` of run_dir.
inline void save_reference(const std::string& run_dir, const config::ModelConfig& cfg, const Reference& ref, int tp,
                    int64_t step, int keep_last = 3) {
  dist::World world = dist::World::create(tp);
  Shard s(cfg, tp, world.layout.tp_rank);
  fill(s, ref, step + 100);
  CheckpointMeta meta{step,        1000 + static_cast<uint64_t>(step), 77, 0, 0, config_yaml(cfg, tp), std::nullopt,
                      std::nullopt};
  save_checkpoint(run_dir, s.params, s.opt, meta, world, keep_last);
}

}  // namespace echo::train::testing
