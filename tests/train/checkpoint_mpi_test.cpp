// Checkpoints over MPI (2 and 4 ranks) with a tiny Qwen3 and random values: a checkpoint saved at
// any tp × dp holds the full tensors and loads back bit for bit at tp = 1 (each rank alone), 2 and
// the world size; moments and the optimizer step round trip; a resumed step equals the original
// step bitwise; incomplete checkpoints are never picked; keep_last prunes; mismatched models and a
// failing writer are refused on every rank; Hugging Face weights load from one file, from a
// sharded index and from BF16.
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "../model/model_test_util.h"
#include "../support/mpi_util.h"
#include "../support/test_data.h"
#include "../support/test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "checkpoint_test_util.h"
#include "core/half.h"
#include "dist/world.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/hf_weights.h"
#include "train/checkpoint/safetensors.h"
#include "train/checkpoint/shard_io.h"

namespace echo::train {

using echo::testing::error_of;
using echo::testing::kNoErrorThrown;
namespace {

using namespace echo::train::testing;
using echo::testing::world_rank;
using echo::testing::world_size;

namespace fs = std::filesystem;

// Saves `ref` as the checkpoint of `step` at tp = the world size, lets rank 0 alter its folder, and
// waits on every rank for that; returns the folder.
fs::path save_and_alter(const std::string& run_dir, const config::ModelConfig& cfg, const Reference& ref, int64_t step,
                        const std::function<void(const fs::path&)>& alter) {
  save_reference(run_dir, cfg, ref, world_size(), step);
  const fs::path ckpt = checkpoint_dir(run_dir, step);
  if (world_rank() == 0) alter(ckpt);
  MPI_Barrier(MPI_COMM_WORLD);
  return ckpt;
}

TEST_F(CheckpointTest, SavedFilesHoldFullHfTensorsAndTheState) {
  const int W = world_size();
  const auto cfg = ckpt_config();
  const Reference ref = make_reference(cfg, 1);
  save_reference(dir_, cfg, ref, W, 12);
  const std::string ckpt = checkpoint_dir(dir_, 12);
  EXPECT_EQ(fs::path(ckpt).filename(), "step_00000012");
  EXPECT_EQ(latest_checkpoint(dir_), ckpt);
  for (const char* f : {"model.safetensors", "trainer/optimizer.safetensors", "trainer/trainer_state.json",
                        "trainer/checksums.json", "config.json", "COMPLETE"})
    EXPECT_TRUE(fs::is_regular_file(fs::path(ckpt) / f)) << f;
  EXPECT_FALSE(fs::exists(ckpt + ".tmp"));
  // A clean Hugging Face folder: a loader that globs *.safetensors finds only the model.
  std::vector<std::string> top_level_safetensors;
  for (const auto& e : fs::directory_iterator(ckpt))
    if (e.path().extension() == ".safetensors") top_level_safetensors.push_back(e.path().filename());
  EXPECT_EQ(top_level_safetensors, std::vector<std::string>{"model.safetensors"});

  SafetensorsFile model(ckpt + "/model.safetensors");
  SafetensorsFile opt(ckpt + "/trainer/optimizer.safetensors");
  EXPECT_EQ(model.metadata().at("format"), "pt");
  EXPECT_EQ(model.names().size(), ref.specs.size());
  EXPECT_EQ(opt.names().size(), 2 * ref.specs.size());
  EXPECT_TRUE(model.contains("lm_head.weight"));
  EXPECT_TRUE(model.contains("model.layers.1.self_attn.q_norm.weight"));
  for (size_t i = 0; i < ref.specs.size(); ++i) {
    const std::string& name = ref.specs[i].name;
    SCOPED_TRACE(name);
    EXPECT_EQ(model.info(name).dtype, StDtype::f32);
    EXPECT_EQ(model.info(name).shape, ref.specs[i].full_shape);
    EXPECT_TRUE(same_bits(model.read_f32(name), ref.value[i]));
    EXPECT_TRUE(same_bits(opt.read_f32(name + ".exp_avg"), ref.exp_avg[i]));
    EXPECT_TRUE(same_bits(opt.read_f32(name + ".exp_avg_sq"), ref.exp_avg_sq[i]));
  }

  std::ifstream state_in(ckpt + "/trainer/trainer_state.json");
  const auto state = nlohmann::json::parse(state_in);
  EXPECT_EQ(state["step"], 12);
  EXPECT_EQ(state["data_position"], 1012u);
  EXPECT_EQ(state["seed"], 77u);
  EXPECT_EQ(state["tp"], W);
  EXPECT_EQ(state["dp"], 1);
  EXPECT_EQ(state["optimizer_step"], 112);
  EXPECT_EQ(state["model"]["hidden"], 32);
  EXPECT_EQ(state["model"]["vocab_size"], 64);
  EXPECT_EQ(state["model"]["tie_embeddings"], false);
  EXPECT_EQ(state["config_yaml"], config_yaml(cfg, W));

  std::ifstream hf_in(ckpt + "/config.json");
  const auto hf = nlohmann::json::parse(hf_in);
  EXPECT_EQ(hf["model_type"], "qwen3");
  EXPECT_EQ(hf["hidden_size"], 32);
  EXPECT_EQ(hf["intermediate_size"], 48);
  EXPECT_EQ(hf["num_attention_heads"], 8);
  EXPECT_EQ(hf["num_key_value_heads"], 4);
  EXPECT_EQ(hf["head_dim"], 8);
  EXPECT_EQ(hf["num_hidden_layers"], 2);
  EXPECT_EQ(hf["vocab_size"], 64);
  EXPECT_EQ(hf["rope_theta"], 10000.0);
  EXPECT_EQ(hf["max_position_embeddings"], 4096) << "the model's context, not data.seq_len";
  EXPECT_EQ(hf["tie_word_embeddings"], false);
  EXPECT_EQ(hf["eos_token_id"], 57) << "the data's EOS, for echo_eval on the folder as a Hugging Face one";
}

TEST_F(CheckpointTest, TiedModelWritesNoLmHead) {
  const auto cfg = ckpt_config(/*tied=*/true);
  const Reference ref = make_reference(cfg, 2);
  save_reference(dir_, cfg, ref, world_size(), 1);
  SafetensorsFile model(checkpoint_dir(dir_, 1) + "/model.safetensors");
  EXPECT_FALSE(model.contains("lm_head.weight"));
  EXPECT_TRUE(model.contains("model.embed_tokens.weight"));
  EXPECT_EQ(model.names().size(), ref.specs.size());
}

// Save at every tp the world allows (dp = world / tp), load at tp = 1 on each rank alone, at
// tp = 2 and at tp = world: all bitwise equal to the saved tensors.
TEST_F(CheckpointTest, AnySavedLayoutLoadsIntoAnyLayoutBitForBit) {
  const int W = world_size();
  const auto cfg = ckpt_config();
  for (int save_tp : {W, 2, 1}) {
    if (W % save_tp) continue;
    SCOPED_TRACE(fmt::format("saved at tp = {}", save_tp));
    const uint64_t seed = 10 + save_tp;
    const Reference ref = make_reference(cfg, seed);
    const std::string run = sub(fmt::format("run_tp{}", save_tp));
    save_reference(run, cfg, ref, save_tp, 5);
    const auto ckpt = latest_checkpoint(run);
    ASSERT_TRUE(ckpt.has_value());

    {  // tp = 1, each rank alone
      dist::World solo = dist::World::create(1, MPI_COMM_SELF);
      Shard s(cfg, 1, 0);
      s.params.init(999);
      const CheckpointMeta meta = load_checkpoint(*ckpt, s.params, &s.opt, solo);
      expect_matches(s, ref, true, 105);
      EXPECT_EQ(meta.step, 5);
      EXPECT_EQ(meta.data_position, 1005u);
      EXPECT_EQ(meta.seed, 77u);
      EXPECT_EQ(meta.tp, save_tp);
      EXPECT_EQ(meta.dp, W / save_tp);
      EXPECT_EQ(meta.config_yaml, config_yaml(cfg, save_tp));
    }
    for (int load_tp : {2, W}) {
      SCOPED_TRACE(fmt::format("loaded at tp = {}", load_tp));
      dist::World world = dist::World::create(load_tp);
      Shard s(cfg, load_tp, world.layout.tp_rank);
      load_checkpoint(*ckpt, s.params, &s.opt, world);
      expect_matches(s, ref, true, 105);
      Shard weights_only(cfg, load_tp, world.layout.tp_rank);  // opt == nullptr leaves the optimizer alone
      load_checkpoint(*ckpt, weights_only.params, nullptr, world);
      expect_matches(weights_only, ref, false, 0);
      EXPECT_EQ(weights_only.opt.step_count(), 0);
    }
  }
}

// One AdamW step, save, one more step; a fresh model resumed from the checkpoint takes the same
// second step bit for bit (loss, weights and moments).
TEST_F(CheckpointTest, ResumedTrainingStepIsBitwiseIdentical) {
  const int W = world_size();
  const auto cfg = ckpt_config();
  dist::World world = dist::World::create(W);
  const auto shape = model::make_model_shape(cfg, W, world.layout.tp_rank);
  model::ExactTpOps<float> ops(&world.tp);
  config::OptimConfig ocfg;
  const auto batch1 = model::testing::random_batch(2, 6, cfg.vocab_size, 21);
  const auto batch2 = model::testing::random_batch(2, 6, cfg.vocab_size, 22);
  auto train_step = [&](model::Qwen3Model<float>& m, AdamW& opt, const model::testing::TokenBatch& b) {
    m.params().zero_grads();
    const double loss = m.forward_backward(b.view());
    opt.step(m.params(), 1e-2, ocfg);
    return loss;
  };

  model::Qwen3Model<float> a(shape, ops);
  a.init_weights(3);
  AdamW opt_a(a.params());
  train_step(a, opt_a, batch1);
  save_checkpoint(dir_, a.params(), opt_a, {1, 6, 3, W, 1, config_yaml(cfg, W), std::nullopt, std::nullopt}, world, 2);
  const double loss_a = train_step(a, opt_a, batch2);

  model::Qwen3Model<float> b(shape, ops);
  b.init_weights(4);
  AdamW opt_b(b.params());
  const CheckpointMeta meta = load_checkpoint(*latest_checkpoint(dir_), b.params(), &opt_b, world);
  EXPECT_EQ(meta.step, 1);
  EXPECT_EQ(meta.data_position, 6u);
  EXPECT_EQ(opt_b.step_count(), 1);
  const double loss_b = train_step(b, opt_b, batch2);
  EXPECT_EQ(loss_a, loss_b);
  EXPECT_EQ(opt_a.step_count(), opt_b.step_count());
  for (size_t i = 0; i < a.params().size(); ++i) {
    SCOPED_TRACE(a.params()[i].spec->name);
    EXPECT_TRUE(same_bits(b.params()[i].value, a.params()[i].value));
    EXPECT_TRUE(same_bits(opt_b.exp_avg(i), opt_a.exp_avg(i)));
    EXPECT_TRUE(same_bits(opt_b.exp_avg_sq(i), opt_a.exp_avg_sq(i)));
  }
}

// A checkpoint of the layout before trainer/ existed (optimizer.safetensors and
// trainer_state.json beside the model) still resumes bit for bit; a bare model folder is refused
// naming what is missing.
TEST_F(CheckpointTest, OldLayoutStillLoadsAndABareModelFolderIsRefused) {
  const int W = world_size();
  const auto cfg = ckpt_config();
  const Reference ref = make_reference(cfg, 6);
  const fs::path ckpt = save_and_alter(dir_, cfg, ref, 7, [](const fs::path& ckpt) {
    for (const char* f : {"optimizer.safetensors", "trainer_state.json"}) fs::rename(ckpt / "trainer" / f, ckpt / f);
    fs::remove(ckpt / "trainer" / "checksums.json");  // that layout predates checksums
    fs::remove(ckpt / "trainer");
  });
  dist::World world = dist::World::create(W);
  {
    Shard s(cfg, W, world.layout.tp_rank);
    s.params.init(999);
    EXPECT_EQ(read_checkpoint_meta(ckpt).step, 7);
    EXPECT_EQ(load_checkpoint(ckpt, s.params, &s.opt, world).step, 7);
    expect_matches(s, ref, true, 107);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove(ckpt / "trainer_state.json");
  MPI_Barrier(MPI_COMM_WORLD);
  Shard s(cfg, W, world.layout.tp_rank);
  const std::string msg = error_of([&] { load_checkpoint(ckpt, s.params, &s.opt, world); });
  EXPECT_NE(msg.find("has no trainer/trainer_state.json"), std::string::npos) << msg;
}

TEST_F(CheckpointTest, IncompleteCheckpointsAreNeverPicked) {
  const int W = world_size();
  const auto cfg = ckpt_config();
  const Reference ref = make_reference(cfg, 3);
  EXPECT_EQ(latest_checkpoint(dir_), std::nullopt);  // no checkpoints directory at all
  save_reference(dir_, cfg, ref, W, 1, 5);
  save_reference(dir_, cfg, ref, W, 2, 5);
  if (world_rank() == 0) {
    // A crash after the rename but before COMPLETE, and one during the write.
    fs::copy(checkpoint_dir(dir_, 2), checkpoint_dir(dir_, 3));
    fs::remove(fs::path(checkpoint_dir(dir_, 3)) / "COMPLETE");
    fs::create_directories(checkpoint_dir(dir_, 4) + ".tmp");
    fs::create_directories(fs::path(dir_) / "checkpoints" / "step_x9");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_dir(dir_, 2));

  dist::World world = dist::World::create(W);
  Shard s(cfg, W, world.layout.tp_rank);
  const std::string msg = error_of([&] { load_checkpoint(checkpoint_dir(dir_, 3), s.params, &s.opt, world); });
  EXPECT_NE(msg.find("is incomplete (no COMPLETE marker)"), std::string::npos) << msg;

  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove(fs::path(checkpoint_dir(dir_, 2)) / "COMPLETE");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_dir(dir_, 1));

  // The next save removes the stale directories.
  save_reference(dir_, cfg, ref, W, 5, 5);
  for (int step : {2, 3}) EXPECT_FALSE(fs::exists(checkpoint_dir(dir_, step))) << step;
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_, 4) + ".tmp"));
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir_, 1)));
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_dir(dir_, 5));
}

// Saving a step that is already on disk (a resume from it, then a stop) replaces it with the new
// values in one exchange, leaving no .tmp behind; with keep_checkpoints 1 there was once a window
// in which the step existed nowhere complete.
TEST_F(CheckpointTest, SavingAStepAgainReplacesItWhole) {
  const int W = world_size();
  const auto cfg = ckpt_config();
  const Reference first = make_reference(cfg, 21), second = make_reference(cfg, 22);
  save_reference(dir_, cfg, first, W, 9, 1);
  save_reference(dir_, cfg, second, W, 9, 1);
  const std::string ckpt = checkpoint_dir(dir_, 9);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(fs::path(dir_) / "checkpoints")) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"step_00000009"});
  EXPECT_TRUE(fs::is_regular_file(fs::path(ckpt) / "COMPLETE"));
  dist::World world = dist::World::create(W);
  Shard s(cfg, W, world.layout.tp_rank);
  s.params.init(999);
  EXPECT_EQ(load_checkpoint(ckpt, s.params, &s.opt, world).step, 9);
  expect_matches(s, second, true, 109);
}

TEST_F(CheckpointTest, KeepLastDeletesOlderCheckpoints) {
  const int W = world_size();
  const auto cfg = ckpt_config(true);
  const Reference ref = make_reference(cfg, 4);
  for (int64_t step : {10, 20, 30, 40, 50}) save_reference(dir_, cfg, ref, W, step, 2);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(fs::path(dir_) / "checkpoints")) left.push_back(e.path().filename());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step_00000040", "step_00000050"}));
  // Saving an older step again (a resume from an older checkpoint) never deletes the new one.
  save_reference(dir_, cfg, ref, W, 45, 1);
  EXPECT_TRUE(fs::exists(fs::path(checkpoint_dir(dir_, 45)) / "COMPLETE"));
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_, 40)));
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_, 50)));
}

// The trainer refuses a run.out_dir for which longest_checkpoint_path exceeds PATH_MAX: every file a
// save writes (here under its final name; while written it sits in the step's .tmp folder) must be
// within that length, or a new, longer file name would pass the check and fail at the save.
TEST_F(CheckpointTest, EverySavedPathFitsTheLongestCheckpointPath) {
  const int W = world_size();
  const auto cfg = ckpt_config();
  const Reference ref = make_reference(cfg, 3);
  save_reference(dir_, cfg, ref, W, 12, 1);
  const std::string longest = longest_checkpoint_path(dir_, 12);
  const std::string final_dir = checkpoint_dir(dir_, 12);
  size_t files = 0, longest_seen = 0;
  for (const auto& e : fs::recursive_directory_iterator(final_dir)) {
    const std::string rel = e.path().string().substr(final_dir.size());
    const size_t while_written = final_dir.size() + std::string(".tmp").size() + rel.size();
    EXPECT_LE(while_written, longest.size()) << e.path();
    longest_seen = std::max(longest_seen, while_written);
    ++files;
  }
  EXPECT_GE(files, 5u);  // model, config.json, COMPLETE, trainer/ and its files
  EXPECT_EQ(longest_seen, longest.size()) << "the optimizer file is the longest name: " << longest;
  // Steps past 8 digits lengthen it.
  EXPECT_EQ(longest_checkpoint_path(dir_, 1234567890).size(), longest.size() + 2);
}

// The warning for a foreign step_* folder names what is wrong with the name: it said "step_ and 8
// or more digits" of step_00000000000000000020 and step_99999999999999999999, which have them.
TEST(CheckpointNames, AForeignStepNameIsToldWhatIsWrong) {
  EXPECT_EQ(foreign_step_reason("step_best").reason, "not step_ followed by digits");
  EXPECT_EQ(foreign_step_reason("step_").reason, "not step_ followed by digits");
  EXPECT_EQ(foreign_step_reason("step_99").reason, "2 digits, where echo writes at least 8");
  EXPECT_EQ(foreign_step_reason("step_000000003").reason, "zeros before the step, where echo writes step_00000003");
  EXPECT_EQ(foreign_step_reason("step_00000000000000000020").reason, "zeros before the step, where echo writes step_00000020");
  EXPECT_EQ(foreign_step_reason("step_0000000000").reason, "zeros before the step, where echo writes step_00000000");
  EXPECT_EQ(foreign_step_reason("step_99999999999999999999").reason, "a step of 20 digits, beyond any run's train.steps");
  EXPECT_EQ(foreign_step_reason("step_0001000000000000000000").reason, "a step of 19 digits, beyond any run's train.steps");
  // Only a step no run reaches is beyond renaming.
  for (const char* name : {"step_best", "step_99", "step_000000003", "step_0000000000"})
    EXPECT_TRUE(foreign_step_reason(name).renamable) << name;
  for (const char* name : {"step_99999999999999999999", "step_0001000000000000000000"})
    EXPECT_FALSE(foreign_step_reason(name).renamable) << name;
}

// Only the names echo writes are checkpoints to it: a user's copy named step_99 (once taken for
// the latest checkpoint, then refused for its step) or step_6 (once counted toward keep_last and
// deleted by the next save) is left alone and listed by foreign_step_dirs.
TEST_F(CheckpointTest, DirectoriesEchoDidNotNameAreNeitherPickedNorPruned) {
  const int W = world_size();
  const auto cfg = ckpt_config();
  const Reference ref = make_reference(cfg, 7);
  save_reference(dir_, cfg, ref, W, 2, 1);
  const fs::path root = fs::path(dir_) / "checkpoints";
  if (world_rank() == 0)
    for (const char* name : {"step_99", "step_6", "step_000000003", "step_best"})
      fs::copy(checkpoint_dir(dir_, 2), root / name, fs::copy_options::recursive);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_dir(dir_, 2));
  EXPECT_EQ(foreign_step_dirs(dir_), (std::vector<std::string>{"step_000000003", "step_6", "step_99", "step_best"}));
  EXPECT_EQ(unfinished_checkpoints(dir_), std::vector<std::string>{});
  MPI_Barrier(MPI_COMM_WORLD);
  save_reference(dir_, cfg, ref, W, 4, 1);  // keep_last 1: step 2 goes, the copies stay
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_, 2)));
  for (const char* name : {"step_99", "step_6", "step_000000003", "step_best"})
    EXPECT_TRUE(fs::exists(root / name / "COMPLETE")) << name;
  EXPECT_EQ(latest_checkpoint(dir_), checkpoint_dir(dir_, 4));
  // Names echo writes for steps past 8 digits stay checkpoints.
  EXPECT_EQ(fs::path(checkpoint_dir(dir_, 123456789)).filename(), "step_123456789");
}

TEST_F(CheckpointTest, MismatchedModelsAreRefusedOnEveryRank) {
  const int W = world_size();
  const Reference ref = make_reference(ckpt_config(), 5);
  save_reference(dir_, ckpt_config(), ref, W, 1);
  const std::string ckpt = checkpoint_dir(dir_, 1);
  dist::World world = dist::World::create(W);

  Shard narrow(ckpt_config(false, /*hidden=*/16), W, world.layout.tp_rank);
  narrow.params.init(1);
  const std::vector<float> before = narrow.params[0].value_vector();
  std::string msg = error_of([&] { load_checkpoint(ckpt, narrow.params, &narrow.opt, world); });
  EXPECT_NE(msg.find("tensor 'model.embed_tokens.weight' has shape [64, 32] but the model expects [64, 16]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("more problems"), std::string::npos) << msg;
  EXPECT_TRUE(same_bits(narrow.params[0].value, before));  // nothing was modified

  Shard tied(ckpt_config(true), W, world.layout.tp_rank);
  msg = error_of([&] { load_checkpoint(ckpt, tied.params, nullptr, world); });
  EXPECT_NE(msg.find("holds tensor 'lm_head.weight' [64, 32] that the model does not have"), std::string::npos) << msg;

  config::ModelConfig deeper = ckpt_config();
  deeper.layers = 3;
  Shard deep(deeper, W, world.layout.tp_rank);
  msg = error_of([&] { load_checkpoint(ckpt, deep.params, nullptr, world); });
  EXPECT_NE(msg.find("has no tensor 'model.layers.2.input_layernorm.weight' (the model expects shape [32])"),
            std::string::npos)
      << msg;

  // A config_yaml describing another model is refused before anything is written.
  Shard s(ckpt_config(), W, world.layout.tp_rank);
  msg = error_of([&] {
    save_checkpoint(dir_, s.params, s.opt,
                    {2, 0, 0, W, 1, config_yaml(ckpt_config(false, 16), W), std::nullopt, std::nullopt}, world, 3);
  });
  EXPECT_NE(msg.find("describes another model"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_, 2) + ".tmp"));
}

// The writer (rank 0) cannot create the directory; every rank gets its error instead of hanging.
TEST_F(CheckpointTest, AWriterFailureIsReportedOnEveryRank) {
  const int W = world_size();
  if (world_rank() == 0) std::ofstream(sub("a_file")) << "x";
  MPI_Barrier(MPI_COMM_WORLD);
  dist::World world = dist::World::create(W);
  Shard s(ckpt_config(), W, world.layout.tp_rank);
  const std::string msg = error_of([&] { save_checkpoint(sub("a_file/run"), s.params, s.opt, {}, world, 3); });
  EXPECT_NE(msg.find("cannot start checkpoint"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reported by rank 0"), std::string::npos) << msg;
  // The file system's refusal, not a bug: a run error without a source location.
  const std::string kind =
      echo::testing::kind_and_what_of([&] { save_checkpoint(sub("a_file/run"), s.params, s.opt, {}, world, 3); });
  EXPECT_EQ(kind.rfind("run: cannot start checkpoint", 0), 0u) << kind;
  EXPECT_EQ(kind.find("[at "), std::string::npos) << kind;
}

// Gathering in small chunks covers every element of row- and vocab-parallel tensors exactly once.
TEST_F(CheckpointTest, ChunkedGatherAssemblesFullTensors) {
  const int W = world_size();
  dist::World world = dist::World::create(W);
  const Reference ref = make_reference(ckpt_config(), 6);
  for (size_t i = 0; i < ref.specs.size(); ++i) {
    const auto& spec = ref.specs[i];
    const std::vector<float> local = shard_of(ref.value[i], spec, W, world.layout.tp_rank);
    for (int64_t chunk : {int64_t{1}, int64_t{50}, kGatherChunkElems}) {
      std::vector<float> full(ref.value[i].size(), 0.0f);
      std::vector<int> hits(full.size(), 0);
      gather_full_tensor(
          spec, local, world.tp,
          [&](int64_t off, std::span<const float> v) {
            ASSERT_LE(off + static_cast<int64_t>(v.size()), static_cast<int64_t>(full.size()));
            for (size_t k = 0; k < v.size(); ++k) full[off + k] = v[k], ++hits[off + k];
          },
          chunk);
      if (world.layout.tp_rank != 0) continue;
      SCOPED_TRACE(fmt::format("{} chunk {}", spec.name, chunk));
      EXPECT_TRUE(same_bits(full, ref.value[i]));
      EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), static_cast<long>(hits.size()));
    }
  }
}

// ---- Hugging Face weights ------------------------------------------------------------------------

std::vector<StTensorSpec> hf_specs(const Reference& ref, StDtype dtype, size_t begin, size_t step) {
  std::vector<StTensorSpec> out;
  for (size_t i = begin; i < ref.specs.size(); i += step)
    out.push_back({ref.specs[i].name, dtype, ref.specs[i].full_shape});
  return out;
}

std::vector<std::span<const float>> hf_values(const Reference& ref, size_t begin, size_t step) {
  std::vector<std::span<const float>> out;
  for (size_t i = begin; i < ref.specs.size(); i += step) out.emplace_back(ref.value[i]);
  return out;
}

Reference rounded_to_bf16(Reference ref) {
  for (auto& v : ref.value)
    for (auto& x : v) x = round_to_bf16(x);
  return ref;
}

TEST_F(CheckpointTest, LoadsHuggingFaceWeightsFromAFileAnIndexAndBf16) {
  const int W = world_size();
  const auto cfg = ckpt_config(/*tied=*/true);
  const Reference ref = make_reference(cfg, 7);
  if (world_rank() == 0) {
    // Single F32 file, with a tied lm_head copy and an old RoPE buffer that are both ignored.
    auto specs = hf_specs(ref, StDtype::f32, 0, 1);
    auto values = hf_values(ref, 0, 1);
    const std::vector<float> junk(64 * 32, 9.0f), inv_freq(4, 1.0f);
    specs.push_back({"lm_head.weight", StDtype::f32, {64, 32}});
    values.emplace_back(junk);
    specs.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", StDtype::f32, {4}});
    values.emplace_back(inv_freq);
    write_safetensors(sub("single.safetensors"), specs, values, {{"format", "pt"}});
    // Two BF16 shards and their index, as transformers' save_pretrained lays them out.
    fs::create_directories(sub("sharded"));
    const char* files[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
    for (size_t k = 0; k < 2; ++k) {
      write_safetensors(sub(std::string("sharded/") + files[k]), hf_specs(ref, StDtype::bf16, k, 2),
                        hf_values(ref, k, 2), {{"format", "pt"}});
      for (size_t i = k; i < ref.specs.size(); i += 2) index["weight_map"][ref.specs[i].name] = files[k];
    }
    std::ofstream(sub("sharded/model.safetensors.index.json")) << index.dump(2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  dist::World world = dist::World::create(W);
  const Reference ref_bf16 = rounded_to_bf16(ref);

  Shard a(cfg, W, world.layout.tp_rank);
  load_hf_weights(sub("single.safetensors"), a.params, world);
  expect_matches(a, ref, false, 0);

  for (const std::string& path : {sub("sharded"), sub("sharded/model.safetensors.index.json")}) {
    SCOPED_TRACE(path);
    Shard b(cfg, W, world.layout.tp_rank);
    load_hf_weights(path, b.params, world);
    expect_matches(b, ref_bf16, false, 0);
  }

  Shard solo(cfg, 1, 0);  // the single-process form, at tp = 1
  load_hf_weights(sub("sharded"), solo.params);
  expect_matches(solo, ref_bf16, false, 0);
  Shard sharded(cfg, W, world.layout.tp_rank);
  EXPECT_NE(error_of([&] { load_hf_weights(sub("single.safetensors"), sharded.params); }).find("at tp = 1"),
            std::string::npos);
}

// A checkpoint whose model.safetensors was replaced by a BF16 copy (no checksums.json to catch
// it): a resume would train on from rounded master weights, so it is refused by name; echo_eval's
// load (no optimizer) reads the BF16 values.
TEST_F(CheckpointTest, AResumeRefusesTensorsThatAreNotF32) {
  const int W = world_size();
  const auto cfg = ckpt_config();
  const Reference ref = make_reference(cfg, 8);
  const fs::path ckpt = save_and_alter(dir_, cfg, ref, 4, [&](const fs::path& ckpt) {
    fs::remove(ckpt / "trainer" / "checksums.json");
    write_safetensors((ckpt / "model.safetensors").string(), hf_specs(ref, StDtype::bf16, 0, 1), hf_values(ref, 0, 1),
                      {{"format", "pt"}});
  });
  dist::World world = dist::World::create(W);
  Shard s(cfg, W, world.layout.tp_rank);
  s.params.init(3);
  const std::vector<float> before = s.params[0].value_vector();
  const std::string msg = error_of([&] { load_checkpoint(ckpt, s.params, &s.opt, world); });
  EXPECT_NE(msg.find("tensor 'model.embed_tokens.weight' is BF16, but echo writes every tensor of a checkpoint as F32"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("run.init_from"), std::string::npos) << msg;
  EXPECT_TRUE(same_bits(s.params[0].value, before));  // nothing was loaded

  Shard e(cfg, W, world.layout.tp_rank);
  EXPECT_EQ(load_checkpoint(ckpt, e.params, nullptr, world).step, 4);
  expect_matches(e, rounded_to_bf16(ref), false, 0);
  MPI_Barrier(MPI_COMM_WORLD);

  // The same for the moments: an optimizer file with one F16 tensor, the model file echo's.
  const fs::path moments = save_and_alter(dir_, cfg, ref, 5, [&](const fs::path& ckpt) {
    fs::remove(ckpt / "trainer" / "checksums.json");
    SafetensorsFile saved((ckpt / "trainer" / "optimizer.safetensors").string());
    std::vector<StTensorSpec> specs;
    std::vector<std::vector<float>> values;
    for (const std::string& name : saved.names()) {
      specs.push_back({name, specs.empty() ? StDtype::f16 : StDtype::f32, saved.info(name).shape});
      values.push_back(saved.read_f32(name));
    }
    const std::vector<std::span<const float>> spans(values.begin(), values.end());
    write_safetensors((ckpt / "trainer" / "optimizer.safetensors").string() + ".new", specs, spans, {{"format", "pt"}});
    fs::rename((ckpt / "trainer" / "optimizer.safetensors").string() + ".new",
               ckpt / "trainer" / "optimizer.safetensors");
  });
  Shard m(cfg, W, world.layout.tp_rank);
  const std::string moments_msg = error_of([&] { load_checkpoint(moments, m.params, &m.opt, world); });
  EXPECT_NE(moments_msg.find("optimizer.safetensors': tensor '"), std::string::npos) << moments_msg;
  EXPECT_NE(moments_msg.find("' is F16, but echo writes every tensor of a checkpoint as F32: the file was replaced, "
                             "and a resume would train on with rounded AdamW moments"),
            std::string::npos)
      << moments_msg;
}

TEST_F(CheckpointTest, HuggingFaceMismatchesAreRefused) {
  const int W = world_size();
  const auto tied_cfg = ckpt_config(/*tied=*/true);
  const Reference ref = make_reference(tied_cfg, 8);
  if (world_rank() == 0) {
    write_safetensors(sub("tied.safetensors"), hf_specs(ref, StDtype::f32, 0, 1), hf_values(ref, 0, 1));
    // An index that points a tensor at the wrong shard.
    fs::create_directories(sub("badindex"));
    write_safetensors(sub("badindex/a.safetensors"), hf_specs(ref, StDtype::f32, 0, 1), hf_values(ref, 0, 1));
    nlohmann::json index = {
        {"weight_map", {{"model.norm.weight", "a.safetensors"}, {"extra.weight", "a.safetensors"}}}};
    std::ofstream(sub("badindex/model.safetensors.index.json")) << index.dump();
    // Indexes naming files outside their folder, each of which exists and holds the tensor.
    for (const std::string name : {"up", "absolute"}) {
      fs::create_directories(sub("outside_" + name));
      const std::string target = name == "up" ? "../tied.safetensors" : sub("tied.safetensors");
      std::ofstream(sub("outside_" + name + "/model.safetensors.index.json"))
          << nlohmann::json{{"weight_map", {{"model.norm.weight", target}}}}.dump();
    }
    // A Hugging Face cache snapshot whose blob was removed: model.safetensors links nowhere.
    fs::create_directories(sub("dangling"));
    fs::create_symlink("../../blobs/gone", sub("dangling/model.safetensors"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  dist::World world = dist::World::create(W);

  Shard untied(ckpt_config(false), W, world.layout.tp_rank);
  std::string msg = error_of([&] { load_hf_weights(sub("tied.safetensors"), untied.params, world); });
  EXPECT_NE(msg.find("has no lm_head.weight but the model has tie_embeddings = false"), std::string::npos) << msg;

  Shard narrow(ckpt_config(true, 16), W, world.layout.tp_rank);
  msg = error_of([&] { load_hf_weights(sub("tied.safetensors"), narrow.params, world); });
  EXPECT_NE(msg.find("tensor 'model.embed_tokens.weight' has shape [64, 32] but the model expects [64, 16]"),
            std::string::npos)
      << msg;

  Shard s(tied_cfg, W, world.layout.tp_rank);
  msg = error_of([&] { load_hf_weights(sub("badindex"), s.params, world); });
  EXPECT_NE(msg.find("maps tensor 'extra.weight'"), std::string::npos) << msg;
  for (const auto& [dir, target] : {std::pair<std::string, std::string>{"outside_up", "../tied.safetensors"},
                                    {"outside_absolute", sub("tied.safetensors")}}) {
    msg = error_of([&] { load_hf_weights(sub(dir), s.params, world); });
    EXPECT_NE(msg.find("maps tensor 'model.norm.weight' to '" + target + "', which is not a file in its folder"),
              std::string::npos)
        << msg;
  }
  msg = error_of([&] { load_hf_weights(sub("dangling"), s.params, world); });
  EXPECT_NE(msg.find("cannot open safetensors file '" + sub("dangling/model.safetensors") +
                     "': it is a symbolic link to '../../blobs/gone', which does not exist"),
            std::string::npos)
      << msg;
  msg = error_of([&] { load_hf_weights(sub("nothing_here"), s.params, world); });
  EXPECT_NE(msg.find("cannot open safetensors file"), std::string::npos) << msg;
}

}  // namespace
}  // namespace echo::train
