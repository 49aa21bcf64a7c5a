// What the trainer guards at start-up and on every step (2 and 4 ranks, tiny model): token ids
// against the true vocabulary, data.eos_id and model.vocab_size against the data's sidecar, a
// diverging run that must not be saved, the run directory after a failed start or a failed
// --resume, what a --resume may change, metrics after a resume, a stop signal that arrives during
// start-up or during a checkpoint save, and a plan beyond the host's memory.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "../support/log_capture.h"
#include "../support/mpi_util.h"
#include "../support/test_util.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/tensor.h"
#include "data/indexed_dataset.h"
#include "dist/world.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/safetensors.h"
#include "train/divergence.h"
#include "train/resume_check.h"
#include "train/stop_signal.h"
#include "train/trainer.h"
#include "trainer_test_util.h"

namespace echo::train {
namespace {

using echo::testing::expect_error;
using echo::testing::world_rank;
using echo::testing::world_size;

namespace fs = std::filesystem;

// A scratch directory shared by all ranks with a random dataset over ids 0..62 that contains 62
// (63 is the EOS).
std::string scratch_dir(const std::string& tag) {
  return echo::testing::make_scratch_datasets("echo_guard", tag, 11, {"train"}, [](int d, std::vector<int32_t>& doc) {
    if (d == 17) doc[2] = 62;
  });
}

int tp() { return world_size() >= 2 ? 2 : 1; }

config::Config make_config(const std::string& dir, std::vector<std::string> overrides = {}) {
  const std::string text =
      "run: {seed: 7, out_dir: " + dir + "/run}\n"
      "model: {vocab_size: 64, vocab_pad_multiple: 16, hidden: 32, ffn: 48, layers: 2, heads: 4, kv_heads: 4,\n"
      "        head_dim: 8, tie_embeddings: true, init_std: 0.05}\n"
      "comm: {allreduce: echo, bits: 4, group_size: 32}\n"
      "optim: {lr: 3.0e-3, min_lr: 3.0e-4}\n"
      "schedule: {warmup_steps: 2}\n"
      "data: {train: " + dir + "/data/train, valid: '', seq_len: 16, eos_id: 63}\n"
      "train: {steps: 4, micro_batch: 2, global_batch: 8, eval_interval: 0, eval_batches: 1,\n"
      "        checkpoint_interval: 2, keep_checkpoints: 2, log_interval: 1000}\n";
  overrides.push_back("parallel.tp=" + std::to_string(tp()));
  return config::parse_config(text, "guard_test.yaml", overrides, world_size());
}

TrainResult train(const config::Config& cfg, RunDirMode mode) {
  const dist::World world = dist::World::create(cfg.parallel.tp);
  Trainer trainer(cfg, world, mode);
  return trainer.run();
}

using echo::testing::read_file;

// Every rank must have finished with the run directory before rank 0 changes it.
void sync() { MPI_Barrier(MPI_COMM_WORLD); }

// Makes the checkpoint at `ckpt` one from before checksums existed (rank 0 writes; the caller
// syncs): no trainer/checksums.json, and its trainer state `state_text` (read by every rank before
// any rank writes) without the fields written only since (consumed_samples, train_data_xxh3),
// which tell a removed checksums file. Returns the state as written.
std::string as_written_before_checksums(const std::string& ckpt, const std::string& state_text) {
  auto state = nlohmann::json::parse(state_text);
  state.erase("consumed_samples");
  state.erase("train_data_xxh3");
  if (world_rank() == 0) {
    fs::remove(ckpt + "/trainer/checksums.json");
    std::ofstream(ckpt + "/trainer/trainer_state.json") << state.dump(2);
  }
  return state.dump(2);
}

// Ids in [vocab_size, padded rows) are rows of the embedding that no tokenizer emits.
TEST(TrainerGuard, TokenIdsAreCheckedAgainstTheTrueVocabulary) {
  const std::string dir = scratch_dir("vocab");
  // vocab 62 pads to 64 rows: the data's id 62 fits the rows but not the vocabulary.
  expect_error([&] { train(make_config(dir, {"model.vocab_size=62", "data.eos_id=61"}), RunDirMode::fresh); },
               "token id 62 is out of range [0, 62) ('model.vocab_size' = 62)");
  expect_error([&] { train(make_config(dir, {"model.vocab_size=63"}), RunDirMode::fresh); },
               "'data.eos_id' = 63 must be < 'model.vocab_size' = 63");
  // Input errors read as plain messages: no internal "[at file:line]".
  for (const std::string& set : {std::string("model.vocab_size=62"), "data.train=" + dir + "/none"}) {
    const std::string got = echo::testing::kind_and_what_of(
        [&] { train(make_config(dir, {set, "data.eos_id=61"}), RunDirMode::fresh); });
    EXPECT_EQ(got.rfind("input: ", 0), 0u) << set << ": " << got;
    EXPECT_EQ(got.find("[at "), std::string::npos) << set << ": " << got;
  }
  EXPECT_EQ(train(make_config(dir), RunDirMode::fresh).steps_done, 4);
}

// The data is checked before the model is built and loaded: with the default config that costs a
// minute and gigabytes, which a typo in data.train used to cost before its error. Here the model
// steps that would fail are run.init_from (a folder that does not exist) and the memory plan (a
// model no host holds); the data's error comes first.
TEST(TrainerGuard, TheDataIsCheckedBeforeTheModelIsBuilt) {
  const std::string dir = scratch_dir("order");
  const std::string missing_init = "run.init_from=" + dir + "/no_such_model";
  const std::string model_error = echo::testing::kind_and_what_of([&] {
    train(make_config(dir, {missing_init}), RunDirMode::fresh);
  });
  EXPECT_NE(model_error.find(dir + "/no_such_model"), std::string::npos) << model_error;
  sync();
  expect_error([&] { train(make_config(dir, {missing_init, "data.train=" + dir + "/data/typo"}), RunDirMode::fresh); },
               "/data/typo.idx does not exist");
  // And before the memory plan is checked (the model is allocated right after it): a model far
  // beyond any host's memory with a data typo is refused for the typo.
  sync();
  const std::vector<std::string> huge = {"model.hidden=4096", "model.ffn=1048576", "model.layers=10"};
  std::vector<std::string> huge_with_typo = huge;
  huge_with_typo.push_back("data.train=" + dir + "/data/typo");
  expect_error([&] { train(make_config(dir, huge_with_typo), RunDirMode::fresh); }, "/data/typo.idx does not exist");
  sync();
  expect_error([&] { train(make_config(dir, huge), RunDirMode::fresh); }, "does not fit in this host's memory");
}

// Each rank reads data.train itself (a copy on each node's disk is allowed): a stale copy on one
// node trained its ranks on other tokens with no word. Here rank 0 and the others are given
// different data at their data.train; every rank refuses, naming the hashes.
TEST(TrainerGuard, DataThatDiffersBetweenRanksIsRefused) {
  if (world_size() < 2) return;  // the same on every rank: nothing to compare
  const std::string dir = scratch_dir("ranks_a");
  const std::string other = echo::testing::make_scratch_datasets("echo_guard", "ranks_b", 12, {"train"});
  const std::string data = world_rank() == 0 ? dir + "/data/train" : other + "/data/train";
  expect_error(
      [&] {
        train(make_config(dir, {"data.train=" + data, "run.out_dir=" + dir + "/run"}), RunDirMode::fresh);
      },
      " is not the same data on every rank: rank 0 reads content hash ");
  sync();
  EXPECT_EQ(train(make_config(dir), RunDirMode::fresh).steps_done, 4);
}

// Sequences longer than model.max_position_embeddings trained silently, and the checkpoints'
// config.json then told transformers the model handles fewer positions than it was trained on.
TEST(TrainerGuard, SequencesLongerThanTheContextAreRefused) {
  const std::string dir = scratch_dir("context");
  expect_error([&] { train(make_config(dir, {"model.max_position_embeddings=8"}), RunDirMode::fresh); },
               "'data.seq_len' = 16 is longer than the model's context, 8 positions ('model.max_position_embeddings')");
  sync();
  EXPECT_EQ(train(make_config(dir, {"model.max_position_embeddings=16"}), RunDirMode::fresh).steps_done, 4);
}

// A plan beyond the host's memory is refused at start-up in words, before the model is allocated
// (before, the CPU backend ran for most of a minute into std::bad_alloc or the OOM killer).
// Hidden 4096, FFN 2^20 and 10 layers over tp 2 put 10 x 3 x 4096 x 2^19 MLP parameters on each
// rank: 960 GiB of weights, gradients and moments, just under the 1 TiB per rank the config allows
// (a long data.seq_len would do too, but not on the test's short data). Only a host with more
// MemAvailable than that could hold it, and there the refusal cannot be shown this way.
TEST(TrainerGuard, APlanBeyondTheHostsMemoryIsRefusedBeforeTheModelIsBuilt) {
  const std::optional<size_t> available = host_memory_available_bytes();
  ASSERT_TRUE(available.has_value()) << "no MemAvailable in /proc/meminfo on this Linux host";
  if (*available > (size_t{960} << 30)) GTEST_SKIP() << "this host's MemAvailable could hold the largest plan";
  const std::string dir = scratch_dir("hostmem");
  reset_host_memory_peak();
  const size_t live_before = host_memory_stats().live;
  const auto start = std::chrono::steady_clock::now();
  const std::string got = echo::testing::kind_and_what_of(
      [&] {
        train(make_config(dir, {"model.hidden=4096", "model.ffn=1048576", "model.layers=10"}), RunDirMode::fresh);
      });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(got.rfind("input: ", 0), 0u) << got;
  // The test's ranks all run on this host, so all of them share its memory.
  for (const std::string& needle :
       {std::string("training this model (per rank: weights 240."), std::string("optimizer 480."),
        std::string("does not fit in this host's memory"), std::to_string(world_size()) + " rank(s) on this node",
        std::string("MemAvailable is"), std::string("train.micro_batch"), std::string("data.seq_len")})
    EXPECT_NE(got.find(needle), std::string::npos) << "expected '" << needle << "' in: " << got;
  EXPECT_LT(host_memory_stats().peak - live_before, size_t{64} << 20) << "tensors were allocated before the check";
  EXPECT_LT(seconds, 20.0) << "the refusal took " << seconds << " s";
  sync();
}

// The sidecar echo_prep writes beside a dataset (data/dataset_meta.h): a data.eos_id or a
// model.vocab_size of another tokenizer is refused in words (before, either trained silently on
// the wrong separator while the id lay inside the vocabulary), a malformed sidecar is refused
// naming it, train and valid of two tokenizers are refused, and matching data trains.
TEST(TrainerGuard, TheDatasetSidecarIsChecked) {
  const std::string dir = echo::testing::make_scratch_datasets("echo_guard", "meta", 11, {"train", "valid"});
  const std::string train_prefix = dir + "/data/train", valid_prefix = dir + "/data/valid";
  using echo::testing::write_scratch_sidecar;
  write_scratch_sidecar(train_prefix, 64, 62);
  std::string msg = echo::testing::kind_and_what_of([&] { train(make_config(dir), RunDirMode::fresh); });
  EXPECT_EQ(msg.rfind("input: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("data.train (" + train_prefix + ") was prepared with tokenizer 'test-tokenizer.json' (vocab 64, "
                     "eos 62: special added token \"<|test|>\"), as its sidecar '" + train_prefix + ".meta.json'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("'data.eos_id' = 63 (data.eos_id of the config) is not the EOS the data was prepared with, 62"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("pass --set data.eos_id=62"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("[at "), std::string::npos) << msg;

  write_scratch_sidecar(train_prefix, 70, 63);
  expect_error([&] { train(make_config(dir), RunDirMode::fresh); },
               "'model.vocab_size' = 64 is smaller than the vocabulary of the tokenizer the data was prepared with (70)");

  write_scratch_sidecar(train_prefix, 64, 63);
  write_scratch_sidecar(valid_prefix, 64, 63, std::string(64, 'b'));
  const std::vector<std::string> with_valid = {"data.valid=" + valid_prefix, "train.eval_interval=2"};
  expect_error([&] { train(make_config(dir, with_valid), RunDirMode::fresh); },
               "data.train (" + train_prefix + ") and data.valid (" + valid_prefix +
                   ") were prepared with different tokenizers");

  sync();
  if (world_rank() == 0) std::ofstream(train_prefix + ".meta.json", std::ios::trunc) << "{\"format\": ";
  sync();
  expect_error([&] { train(make_config(dir), RunDirMode::fresh); },
               "dataset sidecar '" + train_prefix + ".meta.json' is not valid JSON");

  write_scratch_sidecar(train_prefix, 64, 63);
  write_scratch_sidecar(valid_prefix, 64, 63);
  const TrainResult bare = train(make_config(dir, with_valid), RunDirMode::fresh);
  EXPECT_EQ(bare.steps_done, 4);

  // The same documents stored with their EOS train bit for bit alike: packed as stored, not with a
  // second EOS after each document. Without sidecars (Megatron's --append-eod) because every
  // checked document ends in the EOS; then with sidecars that say append_eos (echo_prep).
  const std::string stored = echo::testing::make_scratch_datasets(
      "echo_guard", "stored", 11, {"train", "valid"}, [](int, std::vector<int32_t>& doc) { doc.push_back(63); });
  const std::vector<std::string> stored_valid = {"data.valid=" + stored + "/data/valid", "train.eval_interval=2"};
  const TrainResult detected = train(make_config(stored, stored_valid), RunDirMode::fresh);
  EXPECT_EQ(detected.last_loss, bare.last_loss);
  sync();
  const auto detected_metrics = read_file(stored + "/run/metrics.jsonl");
  for (const char* split : {"/data/train", "/data/valid"})
    write_scratch_sidecar(stored + split, 64, 63, std::string(64, 'a'), /*append_eos=*/true);
  const TrainResult same = train(make_config(stored, stored_valid), RunDirMode::overwrite);
  EXPECT_EQ(same.last_loss, bare.last_loss);
  sync();
  // Every logged training and validation loss, in order (the timings differ).
  const auto losses = [](const std::string& metrics_jsonl) {
    std::vector<std::string> out;
    std::istringstream lines(metrics_jsonl);
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      for (const char* key : {"loss", "val_loss"})
        if (j.contains(key)) out.push_back(std::string(key) + "=" + j[key].dump());
    }
    return out;
  };
  const auto bare_losses = losses(read_file(dir + "/run/metrics.jsonl"));
  EXPECT_GE(bare_losses.size(), 6u);  // 4 steps, 2 validations
  EXPECT_EQ(losses(read_file(stored + "/run/metrics.jsonl")), bare_losses);
  EXPECT_EQ(losses(detected_metrics), bare_losses) << "without sidecars";
}

// run.out_dir: ~/x made a folder named '~' in the working directory; refused before anything is made.
TEST(TrainerGuard, AnOutDirStartingWithTildeIsRefused) {
  const std::string dir = scratch_dir("tilde");
  const std::string out = "~/echo_tilde_" + std::to_string(::getpid());
  expect_error([&] { train(make_config(dir, {"run.out_dir=" + out}), RunDirMode::fresh); },
               "'run.out_dir' = " + out + " starts with '~'");
  EXPECT_FALSE(fs::exists("~")) << "no folder named '~' in the working directory";
}

// Below the weight bound a run goes on, but is told once when it learns nothing (a zero gradient
// norm) and once when its loss passes twice a uniform prediction's, ln(vocab).
TEST(TrainerGuard, DivergenceWarningsAreGivenOnceEach) {
  using ::testing::ElementsAre;
  using ::testing::StartsWith;
  DivergenceWarnings w(384);  // ln(384) = 5.9506
  EXPECT_TRUE(w.after_step(1, 5.99, 4.2).empty());
  EXPECT_TRUE(w.after_step(2, 11.90, 3.0).empty()) << "just below 2 ln(384) = 11.9013";
  EXPECT_THAT(w.after_step(3, 2246.5, 130.0),
              ElementsAre(StartsWith("the loss 2246.5000 at step 3 is more than twice ln(384) = 5.9506, the loss of a "
                                     "uniform prediction")));
  EXPECT_TRUE(w.after_step(4, 7432.0, 250.0).empty()) << "said once";
  EXPECT_THAT(w.after_step(5, 5.95, 0.0), ElementsAre(StartsWith("the gradient norm is exactly 0 at step 5")));
  EXPECT_TRUE(w.after_step(6, 5.95, 0.0).empty()) << "said once";
  DivergenceWarnings fresh(384);
  EXPECT_TRUE(fresh.after_step(1, 5.95, 1e-300).empty()) << "tiny is not zero";
  // Both in one step: both are said.
  EXPECT_THAT(fresh.after_step(2, 100.0, 0.0),
              ElementsAre(StartsWith("the gradient norm is exactly 0"), StartsWith("the loss 100.0000 at step 2")));
}

// optim.lr = 100 (the run, exact all-reduce): decay multiplies the weights by -9 a step
// while the loss stays finite. The run must stop at the first step whose weights are absurd,
// before it is saved, and keep the checkpoint before it (keep_checkpoints = 1).
TEST(TrainerGuard, ADivergingRunStopsBeforeSavingABadStep) {
  const std::string dir = scratch_dir("diverge");
  const auto cfg = make_config(dir, {"optim.lr=1.0e2", "optim.min_lr=1.0e2", "comm.allreduce=exact", "train.steps=30",
                                     "train.checkpoint_interval=1", "train.keep_checkpoints=1"});
  const std::string msg = echo::testing::error_of([&] { train(cfg, RunDirMode::fresh); });
  ASSERT_NE(msg.find("the weights diverged at step "), std::string::npos) << msg;
  EXPECT_EQ(msg.find("[check "), std::string::npos) << "a diverged run is not a bug: " << msg;
  const int64_t bad = std::stoll(msg.substr(msg.find("at step ") + 8));
  EXPECT_LT(bad, 10) << msg;
  sync();
  const auto ckpt = latest_checkpoint(cfg.run.out_dir);
  ASSERT_TRUE(ckpt.has_value()) << "the checkpoint before the bad step must survive";
  EXPECT_EQ(*ckpt, checkpoint_dir(cfg.run.out_dir, bad - 1));
  EXPECT_NE(msg.find("the last good checkpoint " + *ckpt + " is kept"), std::string::npos) << msg;
  SafetensorsFile model(*ckpt + "/model.safetensors");
  double max_abs = 0;
  for (const auto& name : model.names())
    for (float w : model.read_f32(name)) max_abs = std::isfinite(w) ? std::max(max_abs, double(std::fabs(w))) : INFINITY;
  EXPECT_LE(max_abs, kMaxSaneWeight) << "the kept checkpoint is healthy";
  if (world_rank() == 0) {
    std::ifstream in(cfg.run.out_dir + "/metrics.jsonl");
    int64_t last = 0;
    for (std::string line; std::getline(in, line);) last = nlohmann::json::parse(line)["step"];
    EXPECT_EQ(last, bad - 1) << "the bad step is not logged as a step";
  }
}

TEST(TrainerGuard, AFailedStartLeavesNothingThatBlocksTheRerun) {
  const std::string dir = scratch_dir("failstart");
  const auto good = make_config(dir);
  expect_error([&] { train(make_config(dir, {"data.train=" + dir + "/data/missing"}), RunDirMode::fresh); },
               "run `bash scripts/get_data.sh`");
  sync();
  // Nothing at all is left: the folder the start-up made (with its lock file) goes again, and so
  // do the missing parents it made; a folder that was there stays, with what it held.
  EXPECT_FALSE(fs::exists(good.run.out_dir)) << "the refused start-up made the run directory";
  const std::string missing_data = "data.train=" + dir + "/data/missing";
  expect_error(
      [&] {
        train(make_config(dir, {"run.out_dir=" + dir + "/deep/er/run", missing_data}), RunDirMode::fresh);
      },
      "run `bash scripts/get_data.sh`");
  sync();
  EXPECT_FALSE(fs::exists(dir + "/deep")) << "the parents the start-up made";
  // Spelled with a trailing '/', and through a level it made and left by "..": only the levels it
  // made go (an existing empty folder of the user's stays).
  expect_error(
      [&] {
        train(make_config(dir, {"run.out_dir=" + dir + "/deep2/er/run/", missing_data}), RunDirMode::fresh);
      },
      "run `bash scripts/get_data.sh`");
  if (world_rank() == 0) fs::create_directories(dir + "/users_empty");
  sync();
  expect_error(
      [&] {
        train(make_config(dir, {"run.out_dir=" + dir + "/made/../users_empty", missing_data}), RunDirMode::fresh);
      },
      "run `bash scripts/get_data.sh`");
  sync();
  EXPECT_FALSE(fs::exists(dir + "/deep2"));
  EXPECT_FALSE(fs::exists(dir + "/made"));
  EXPECT_TRUE(fs::is_directory(dir + "/users_empty")) << "a folder that was there stays, even empty";
  EXPECT_FALSE(fs::exists(dir + "/users_empty/.echo_train.lock"));
  if (world_rank() == 0) {
    fs::create_directories(dir + "/own");
    std::ofstream(dir + "/own/notes.txt") << "the user's";
  }
  sync();
  expect_error(
      [&] {
        train(make_config(dir, {"run.out_dir=" + dir + "/own/", missing_data}), RunDirMode::fresh);
      },
      "run `bash scripts/get_data.sh`");
  sync();
  EXPECT_EQ(read_file(dir + "/own/notes.txt"), "the user's");
  EXPECT_FALSE(fs::exists(dir + "/own/.echo_train.lock"));
  EXPECT_EQ(train(good, RunDirMode::fresh).steps_done, 4) << "the rerun is not refused";
  sync();
  EXPECT_TRUE(fs::exists(good.run.out_dir + "/.echo_train.lock")) << "a run that wrote its directory keeps the file";
  EXPECT_TRUE(fs::exists(good.run.out_dir + "/config.yaml"));
}

TEST(TrainerGuard, AResumeRefusesAnotherModelOrDataAndKeepsTheConfig) {
  const std::string dir = scratch_dir("resume");
  train(make_config(dir), RunDirMode::fresh);
  sync();
  const std::string config_path = dir + "/run/config.yaml", before = read_file(config_path);
  ASSERT_FALSE(before.empty());
  expect_error([&] { train(make_config(dir, {"model.tie_embeddings=false", "train.steps=6"}), RunDirMode::resume); },
               "'model.tie_embeddings': true -> false");
  // The model is compared before the data is opened and hashed (a full scan of a large dataset):
  // with data.train naming nothing, the changed model key is still what is refused.
  expect_error(
      [&] {
        train(make_config(dir, {"model.tie_embeddings=false", "data.train=" + dir + "/data/missing", "train.steps=6"}),
              RunDirMode::resume);
      },
      "'model.tie_embeddings': true -> false");
  expect_error(
      [&] {
        train(make_config(dir, {"data.seq_len=8", "train.steps=6"}), RunDirMode::resume);
      },
      "'data.seq_len': 16 -> 8); resume with the checkpoint's values, or start a new run in another "
      "run.out_dir with run.init_from pointing at the checkpoint (--overwrite of this run deletes its "
      "checkpoints: copy the checkpoint out first)");
  // The changes a resume allows are named with what they do to the samples read from here on.
  {
    const config::Config saved = make_config(dir);
    config::Config now = saved;
    now.train.global_batch *= 2;
    now.run.seed += 1;
    const std::vector<std::string> lines = check_resume_config(saved, now, "ckpt");
    ASSERT_EQ(lines.size(), 2u);
    const std::string both = lines[0] + "\n" + lines[1];
    EXPECT_NE(both.find("-> " + std::to_string(now.train.global_batch) +
                        " (the data goes on from the samples the checkpoint consumed, none skipped or read again"),
              std::string::npos)
        << both;
    EXPECT_NE(both.find("'run.seed': " + std::to_string(saved.run.seed) + " -> " + std::to_string(now.run.seed) +
                        " (the seed draws the order of the samples in each epoch"),
              std::string::npos)
        << both;
  }
  sync();
  EXPECT_EQ(read_file(config_path), before) << "a failed --resume must not rewrite config.yaml";
  // Anything else may change: the run continues (with a warning) and records the new config.
  EXPECT_EQ(train(make_config(dir, {"run.seed=8", "train.steps=6"}), RunDirMode::resume).steps_done, 6);
  sync();
  EXPECT_NE(read_file(config_path).find("seed: 8"), std::string::npos);
  // data.train is compared by its content hash: another spelling of the same prefix resumes, and
  // so does a copy under another path (moved data: it was refused as "another model or data"); a
  // copy with one token changed is other data, and so is the data rewritten in place.
  EXPECT_EQ(train(make_config(dir, {"data.train=" + dir + "/data/./train", "train.steps=8"}), RunDirMode::resume)
                .steps_done,
            8);
  sync();
  const auto copy_data = [&](const std::string& to, bool change_a_token) {
    if (world_rank() == 0) {
      fs::create_directories(dir + "/" + to);
      for (const char* ext : {".bin", ".idx"})
        fs::copy_file(dir + "/data/train" + ext, dir + "/" + to + "/train" + ext, fs::copy_options::overwrite_existing);
      if (change_a_token) {
        std::fstream bin(dir + "/" + to + "/train.bin", std::ios::in | std::ios::out | std::ios::binary);
        int32_t token = 0;
        bin.seekg(40);
        bin.read(reinterpret_cast<char*>(&token), sizeof token);
        token = (token + 1) % 50;  // still a valid id
        bin.seekp(40);
        bin.write(reinterpret_cast<const char*>(&token), sizeof token);
      }
    }
    sync();
  };
  copy_data("copy", false);
  EXPECT_EQ(
      train(make_config(dir, {"data.train=" + dir + "/copy/train", "train.steps=10"}), RunDirMode::resume).steps_done,
      10);
  copy_data("edited", true);
  expect_error(
      [&] {
        train(make_config(dir, {"data.train=" + dir + "/edited/train", "train.steps=12"}), RunDirMode::resume);
      },
      "the run was trained with another model or data ('data.train': " + dir + "/copy/train -> " + dir +
          "/edited/train (content hash ");
  copy_data("copy", true);  // the run's data, rewritten in place
  expect_error(
      [&] {
        train(make_config(dir, {"data.train=" + dir + "/copy/train", "train.steps=12"}), RunDirMode::resume);
      },
      "('data.train': " + dir + "/copy/train holds other data than when the checkpoint was saved (content hash ");
  // The same file under another spelling is still the run's data rewritten in place, not moved.
  expect_error(
      [&] {
        train(make_config(dir, {"data.train=" + dir + "/./copy/train", "train.steps=12"}), RunDirMode::resume);
      },
      "('data.train': " + dir + "/./copy/train holds other data than when the checkpoint was saved (content hash ");
  // A prefix that names nothing is named as missing, not as other data.
  expect_error(
      [&] {
        train(make_config(dir, {"data.train=" + dir + "/nowhere/train", "train.steps=10"}), RunDirMode::resume);
      },
      dir + "/nowhere/train.idx does not exist");
}

// Paths longer than the file system allows (ENAMETOOLONG) are named in our words, as input errors;
// run.out_dir and run.init_from used to end in "filesystem error: status: File name too long [...]".
TEST(TrainerGuard, OverlongPathsAreInputErrors) {
  const std::string dir = scratch_dir("overlong");
  const std::string too_long = dir + "/" + std::string(5000, 'a');
  // Over PATH_MAX as a whole: refused before anything is made, by the checkpoint paths it implies.
  const std::string whole = echo::testing::kind_and_what_of(
      [&] { train(make_config(dir, {"run.out_dir=" + too_long}), RunDirMode::fresh); });
  EXPECT_EQ(whole.rfind(fmt::format("input: 'run.out_dir' is {} bytes long: a checkpoint's files would be named "
                                    "by paths of up to {} bytes",
                                    too_long.size(), too_long.size() + 60),
                        0),
            0u)
      << whole;
  // One name over NAME_MAX in a short path: the file system's refusal, in our words.
  const std::string long_name = dir + "/" + std::string(300, 'a');
  EXPECT_EQ(echo::testing::kind_and_what_of(
                [&] { train(make_config(dir, {"run.out_dir=" + long_name}), RunDirMode::fresh); }),
            "input: cannot use 'run.out_dir' = " + long_name + ": File name too long");
  const std::string init = echo::testing::kind_and_what_of(
      [&] { train(make_config(dir, {"run.init_from=" + too_long}), RunDirMode::fresh); });
  EXPECT_EQ(init.rfind("input: cannot load Hugging Face weights: cannot open safetensors file '" + too_long + "': ", 0),
            0u)
      << init;
  EXPECT_EQ(init.find("filesystem error"), std::string::npos) << init;
}

// The file system's root is no run directory (a run there wrote its files among /etc and /usr),
// however spelled; refused before anything is written.
TEST(TrainerGuard, TheRootIsNoRunDirectory) {
  const std::string dir = scratch_dir("root");
  for (const std::string root : {"/", "//", "/tmp/..", "/./"}) {
    EXPECT_EQ(echo::testing::kind_and_what_of(
                  [&] { train(make_config(dir, {"run.out_dir=" + root, "train.steps=1"}), RunDirMode::fresh); }),
              "input: 'run.out_dir' = " + root +
                  " is the file system's root: a run writes config.yaml, metrics.jsonl, checkpoints/ and a lock "
                  "file there; give it a folder of its own");
  }
  EXPECT_FALSE(fs::exists("/metrics.jsonl"));
  EXPECT_FALSE(fs::exists("/.echo_train.lock"));
}

// --overwrite replaces the old run only once start-up has succeeded: a start that fails (here a
// typo in data.train) keeps the old run's checkpoints and metrics.
TEST(TrainerGuard, AFailedOverwriteKeepsTheOldRun) {
  const std::string dir = scratch_dir("overwrite");
  const auto first = make_config(dir);
  train(first, RunDirMode::fresh);
  sync();
  const std::string metrics = first.run.out_dir + "/metrics.jsonl", before = read_file(metrics);
  ASSERT_FALSE(before.empty());
  expect_error([&] { train(make_config(dir, {"data.train=" + dir + "/data/typo"}), RunDirMode::overwrite); },
               "/data/typo.idx does not exist");
  sync();
  EXPECT_EQ(read_file(metrics), before) << "a failed --overwrite must keep the old metrics";
  EXPECT_EQ(latest_checkpoint(first.run.out_dir), checkpoint_dir(first.run.out_dir, 4))
      << "a failed --overwrite must keep the old checkpoints";
  sync();
  // Its own checkpoint as run.init_from (what the refused --resume advises) would be deleted once
  // read: refused before anything changes, naming the key. Also data inside checkpoints/.
  const std::string own = checkpoint_dir(first.run.out_dir, 4);
  expect_error([&] { train(make_config(dir, {"run.init_from=" + own}), RunDirMode::overwrite); },
               "'run.init_from' = " + own + " lies in " + first.run.out_dir +
                   "/checkpoints, which --overwrite deletes once start-up has succeeded");
  expect_error(
      [&] {
        train(make_config(dir, {"data.valid=" + first.run.out_dir + "/checkpoints/valid"}), RunDirMode::overwrite);
      },
      "'data.valid' = " + first.run.out_dir + "/checkpoints/valid lies in " + first.run.out_dir + "/checkpoints");
  sync();
  EXPECT_EQ(read_file(metrics), before);
  EXPECT_TRUE(fs::exists(own + "/model.safetensors"));
  sync();
  // A good --overwrite replaces it: none of the old checkpoints (step 4) survives a 2-step run,
  // and what echo did not name in checkpoints/ (a user's step_best, notes) is kept.
  const std::string checkpoints = first.run.out_dir + "/checkpoints";
  if (world_rank() == 0) {
    fs::create_directories(checkpoints + "/step_best");
    std::ofstream(checkpoints + "/step_best/model.safetensors") << "mine";
    std::ofstream(checkpoints + "/notes.txt") << "notes";
  }
  sync();
  EXPECT_EQ(train(make_config(dir, {"train.steps=2"}), RunDirMode::overwrite).steps_done, 2);
  sync();
  EXPECT_EQ(latest_checkpoint(first.run.out_dir), checkpoint_dir(first.run.out_dir, 2));
  EXPECT_FALSE(fs::exists(own));
  EXPECT_EQ(read_file(checkpoints + "/step_best/model.safetensors"), "mine");
  EXPECT_EQ(read_file(checkpoints + "/notes.txt"), "notes");
}

// A --resume refused with exactly `expected` (kind and message) that keeps the run's metrics
// (`metrics_before`) and the unfinished checkpoint `kept`.
void expect_refused_resume(const config::Config& cfg, const std::string& expected, const std::string& metrics_before,
                           const std::string& kept) {
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { train(cfg, RunDirMode::resume); }), expected);
  sync();
  EXPECT_EQ(read_file(cfg.run.out_dir + "/metrics.jsonl"), metrics_before) << "the refused --resume must keep the metrics";
  EXPECT_TRUE(fs::exists(kept + "/model.safetensors"));
}

// --resume in a run whose checkpoints are all incomplete (a lost COMPLETE marker) or whose
// checkpoints/ is not a directory is refused: starting from step 0 would drop every metrics line
// and, at the first save, delete the checkpoint.
TEST(TrainerGuard, AResumeWithoutACompleteCheckpointKeepsWhatIsThere) {
  const std::string dir = scratch_dir("unfinished");
  const auto cfg = make_config(dir, {"train.steps=2"});
  train(cfg, RunDirMode::fresh);
  sync();
  const std::string metrics = cfg.run.out_dir + "/metrics.jsonl", before = read_file(metrics);
  const std::string ckpt = checkpoint_dir(cfg.run.out_dir, 2);
  if (world_rank() == 0) fs::remove(ckpt + "/COMPLETE");
  sync();
  expect_refused_resume(cfg, "input: cannot resume the run in " + cfg.run.out_dir +
                                 ": it has no complete checkpoint, only " + ckpt +
                                 " without a COMPLETE marker (not fully written, or damaged); move it away to start "
                                 "over from step 0 with --resume, or pass --overwrite to replace the run",
                        before, ckpt);
  sync();  // every rank has looked before rank 0 removes it
  if (world_rank() == 0) {
    fs::remove_all(cfg.run.out_dir + "/checkpoints");
    std::ofstream(cfg.run.out_dir + "/checkpoints") << "not a directory\n";
  }
  sync();
  expect_error([&] { train(cfg, RunDirMode::resume); },
               "cannot resume the run in " + cfg.run.out_dir + ": " + cfg.run.out_dir +
                   "/checkpoints is not a directory");
  sync();
  EXPECT_EQ(read_file(metrics), before);
}

// The newest step directory without its COMPLETE marker, beside an older complete one, is refused
// by name: resuming from the older one would retrain those steps, drop their metrics and, at that
// step's save, overwrite the damaged directory (which once happened silently).
TEST(TrainerGuard, AResumeDoesNotPassOverANewerUnfinishedCheckpoint) {
  const std::string dir = scratch_dir("newer_unfinished");
  const auto cfg = make_config(dir);  // checkpoints at steps 2 and 4
  train(cfg, RunDirMode::fresh);
  sync();
  const std::string before = read_file(cfg.run.out_dir + "/metrics.jsonl");
  const std::string older = checkpoint_dir(cfg.run.out_dir, 2), newer = checkpoint_dir(cfg.run.out_dir, 4);
  if (world_rank() == 0) fs::remove(newer + "/COMPLETE");
  sync();
  expect_refused_resume(cfg, "input: cannot resume the run in " + cfg.run.out_dir + ": " + newer +
                                 " is newer than its latest complete checkpoint " + older +
                                 " but has no COMPLETE marker (not fully written, or damaged); move it away to "
                                 "resume from step 2, or pass --overwrite to replace the run",
                        before, newer);
  sync();  // every rank has looked before rank 0 moves it
  // Moved away, as the message says: the run resumes from step 2 and trains to 4.
  if (world_rank() == 0) fs::rename(newer, dir + "/step_4.damaged");
  sync();
  EXPECT_EQ(train(cfg, RunDirMode::resume).steps_done, 4);
  sync();
  EXPECT_EQ(latest_checkpoint(cfg.run.out_dir), newer);
}

// A directory at <out_dir>/config.yaml, where the run writes its effective config once start-up
// has succeeded, is refused with the run directory's checks, before any start-up work; it used
// to fail only at the end of start-up, at the rename, leaving config.yaml.tmp behind.
TEST(TrainerGuard, ADirectoryAtConfigYamlIsRefusedBeforeStartUp) {
  const std::string dir = scratch_dir("config_dir");
  const auto cfg = make_config(dir, {"train.steps=2"});
  train(cfg, RunDirMode::fresh);
  sync();
  const std::string config = cfg.run.out_dir + "/config.yaml";
  const std::string metrics = cfg.run.out_dir + "/metrics.jsonl", before = read_file(metrics);
  if (world_rank() == 0) {
    fs::remove(config);
    fs::create_directory(config);
  }
  sync();
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { train(make_config(dir, {"train.steps=3"}), RunDirMode::resume); }),
            "input: cannot use 'run.out_dir' = " + cfg.run.out_dir + ": " + config +
                " is a directory, where the run writes its effective config; move it away");
  sync();
  for (const auto& e : fs::directory_iterator(cfg.run.out_dir))  // no temp file of config.yaml left
    EXPECT_EQ(e.path().filename().string().rfind("config.yaml.tmp", 0), std::string::npos) << e.path();
  EXPECT_TRUE(fs::is_directory(config));
  EXPECT_EQ(read_file(metrics), before);
}

// Checkpoint faults are the user's input: plain messages, no "[at file:line]", and a trainer state
// whose numbers cannot be right (a negative step or optimizer step, a step that is not the
// directory's) is refused before any tensor is read instead of resuming at step -5 or diverging.
TEST(TrainerGuard, ABrokenCheckpointIsRefusedAsAnInputError) {
  const std::string dir = scratch_dir("broken");
  const auto cfg = make_config(dir, {"train.steps=2", "train.keep_checkpoints=1"});
  train(cfg, RunDirMode::fresh);
  sync();
  const std::string ckpt = checkpoint_dir(cfg.run.out_dir, 2), state_path = ckpt + "/trainer/trainer_state.json";
  std::string good_state = read_file(state_path);
  const auto resume = [&] {
    return echo::testing::kind_and_what_of([&] { train(make_config(dir, {"train.steps=3"}), RunDirMode::resume); });
  };
  const auto resume_with = [&](const std::string& key, const nlohmann::json& value) {
    sync();
    if (world_rank() == 0) {
      auto state = nlohmann::json::parse(good_state);
      state[key] = value;
      std::ofstream(state_path) << state.dump(2);
    }
    sync();
    return resume();
  };
  // The checkpoint's checksums catch any edit first.
  EXPECT_EQ(resume_with("step", -5).rfind("input: '" + ckpt + "': trainer/trainer_state.json does not match its checksum", 0),
            0u);
  // Without them (a checkpoint from before they existed) the values themselves are checked.
  sync();
  good_state = as_written_before_checksums(ckpt, good_state);
  const std::string malformed = "input: trainer state '" + state_path + "' is malformed: ";
  EXPECT_EQ(resume_with("step", -5), malformed + "'step' = -5 is negative");
  EXPECT_EQ(resume_with("optimizer_step", -7), malformed + "'optimizer_step' = -7 is negative");
  EXPECT_EQ(resume_with("step", 7), malformed + "'step' = 7 but the checkpoint directory is step_00000002");
  EXPECT_EQ(resume_with("dp", 0), malformed + "'dp' = 0 must be >= 1");
  EXPECT_EQ(resume_with("dp", int64_t{1} << 40), malformed + "'dp' = 1099511627776 is over 2147483647");
  EXPECT_EQ(resume_with("step", 2.0), malformed + "'step' = 2.0 is not an integer");
  EXPECT_EQ(resume_with("optimizer_step", int64_t{1} << 62),
            "input: checkpoint '" + ckpt + "': its trainer state's 'optimizer_step' = 4611686018427387904 is not its "
            "'step' = 2 (the trainer steps the optimizer once per step): not a state this trainer wrote");
  // 0 restarted AdamW's bias correction silently (the resumed run differed from one never stopped).
  EXPECT_EQ(resume_with("optimizer_step", 0),
            "input: checkpoint '" + ckpt + "': its trainer state's 'optimizer_step' = 0 is not its "
            "'step' = 2 (the trainer steps the optimizer once per step): not a state this trainer wrote");
  EXPECT_EQ(resume_with("data_position", uint64_t{18446744073709551615u}),
            "input: checkpoint '" + ckpt + "': its trainer state's 'data_position' = 18446744073709551615 is not its "
            "'step' = 2 (the trainer resumes the data at the step's batch and writes the two equal): not a state this "
            "trainer wrote");
  sync();
  if (world_rank() == 0) {
    std::ofstream(state_path) << good_state;
    fs::resize_file(ckpt + "/model.safetensors", 5000);
  }
  sync();
  const std::string got = resume();
  EXPECT_EQ(got.rfind("input: cannot load checkpoint: safetensors file '" + ckpt + "/model.safetensors': ", 0), 0u)
      << got;
  EXPECT_NE(got.find("(truncated file?)"), std::string::npos) << got;
  EXPECT_EQ(got.find("[at "), std::string::npos) << got;
}

// Two echo_train on one run directory (a requeued job while the first still runs): the second is
// refused before it reads or truncates anything. It used to resume, truncate metrics.jsonl under
// the first (whose later lines went to the replaced file) and prune its checkpoints.
TEST(TrainerGuard, ARunDirectoryInUseIsRefused) {
  const std::string dir = scratch_dir("locked");
  const auto cfg = make_config(dir);
  train(cfg, RunDirMode::fresh);
  sync();
  const std::string metrics = cfg.run.out_dir + "/metrics.jsonl", before = read_file(metrics);
  {
    RunDirLock other;  // what a running echo_train holds (rank 0 of it)
    int rank0_pid = ::getpid();
    MPI_Bcast(&rank0_pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (world_rank() == 0) {
      EXPECT_EQ(other.acquire(cfg.run.out_dir), "");
    }
    sync();
    for (const RunDirMode mode : {RunDirMode::resume, RunDirMode::overwrite, RunDirMode::fresh}) {
      const std::string msg =
          echo::testing::kind_and_what_of([&] { train(make_config(dir, {"train.steps=6"}), mode); });
      // The holder is rank 0 of this test (the message reaches every rank as rank 0 wrote it).
      EXPECT_EQ(msg.rfind("input: 'run.out_dir' = " + cfg.run.out_dir + " is in use by another echo_train (pid " +
                              std::to_string(rank0_pid),
                          0),
                0u)
          << msg;
      EXPECT_NE(msg.find("(it holds the lock on " + cfg.run.out_dir +
                         "/.echo_train.lock); wait for it to end, stop it, or use another run.out_dir"),
                std::string::npos)
          << msg;
    }
    sync();
    // Someone deletes the lock file as "stale": the directory's own lock still refuses the run.
    if (world_rank() == 0) {
      ASSERT_TRUE(fs::remove(cfg.run.out_dir + "/.echo_train.lock"));
    }
    sync();
    const std::string msg =
        echo::testing::kind_and_what_of([&] { train(make_config(dir, {"train.steps=6"}), RunDirMode::overwrite); });
    EXPECT_EQ(msg, "input: 'run.out_dir' = " + cfg.run.out_dir +
                       " is in use by another echo_train (it holds the lock on " + cfg.run.out_dir +
                       "); wait for it to end, stop it, or use another run.out_dir");
    sync();
    EXPECT_EQ(read_file(metrics), before) << "the refused runs must not touch the run";
  }
  sync();  // the other run ended: its lock is gone
  EXPECT_EQ(train(make_config(dir, {"train.steps=6"}), RunDirMode::resume).steps_done, 6);
}

// A run's files are named with one slash whatever run.out_dir ends with (the log said
// "runs/a//metrics.jsonl"); nothing else about the name is changed.
TEST(TrainerGuard, RunFilesAreNamedWithOneSlash) {
  EXPECT_EQ(run_file("runs/a", "metrics.jsonl"), "runs/a/metrics.jsonl");
  EXPECT_EQ(run_file("runs/a/", "metrics.jsonl"), "runs/a/metrics.jsonl");
  EXPECT_EQ(run_file("runs/a///", "config.yaml"), "runs/a/config.yaml");
  EXPECT_EQ(run_file("runs/link/../a/", "config.yaml"), "runs/link/../a/config.yaml");
  EXPECT_EQ(run_file("/", "config.yaml"), "/config.yaml");
}

// A run directory deleted or moved while its run lives is noticed by the lock's holder (the run
// then stops instead of making the folder again without its lock); ranks without the lock see
// nothing. run_control_test.sh case 11 runs it under echo_train.
TEST(TrainerGuard, ALockNoticesItsRunDirectoryLost) {
  const echo::testing::ScratchDir scratch;  // this rank's own: nothing collective here
  const std::string dir = scratch.path("run"), moved = dir + ".moved";
  fs::create_directories(dir);
  EXPECT_EQ(RunDirLock().lost(dir), "") << "an unheld lock judges nothing";
  RunDirLock lock;
  ASSERT_EQ(lock.acquire(dir), "");
  EXPECT_EQ(lock.lost(dir), "");
  const std::string head = "the run directory " + dir + " ", tail = " while this run was writing it: stopping";
  fs::rename(dir, moved);
  EXPECT_EQ(lock.lost(dir).rfind(head + "was moved away or deleted" + tail, 0), 0u) << lock.lost(dir);
  fs::rename(moved, dir);
  EXPECT_EQ(lock.lost(dir), "") << "moved back, it is the locked directory again";
  fs::rename(dir, moved);
  fs::create_directory(dir);
  EXPECT_EQ(lock.lost(dir).rfind(head + "now names another directory", 0), 0u) << lock.lost(dir);
  fs::remove(dir);
  fs::remove_all(moved);
  EXPECT_EQ(lock.lost(dir).rfind(head + "was deleted" + tail, 0), 0u) << lock.lost(dir);
}

// A link planted at the lock file's name (a shared directory, a run as root): refused, and the
// file it names is neither truncated nor given a pid. It used to be overwritten even by a run that
// then failed.
TEST(TrainerGuard, ALockFileThatIsALinkIsRefusedAndItsTargetKept) {
  const std::string dir = scratch_dir("lock_link");
  const auto cfg = make_config(dir);
  const std::string victim = dir + "/victim.txt", lock = cfg.run.out_dir + "/.echo_train.lock";
  if (world_rank() == 0) {
    fs::create_directories(cfg.run.out_dir);
    std::ofstream(victim) << "precious\n";
    fs::create_symlink(victim, lock);
  }
  sync();
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { train(cfg, RunDirMode::fresh); }),
            "input: the run directory's lock file " + lock +
                " is a symbolic link: echo_train writes its pid there and follows no link; remove it");
  sync();
  EXPECT_EQ(read_file(victim), "precious\n");
  if (world_rank() == 0) {
    fs::remove(lock);
    ASSERT_EQ(::mkfifo(lock.c_str(), 0600), 0);
  }
  sync();
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { train(cfg, RunDirMode::fresh); }),
            "input: the run directory's lock file " + lock +
                " is not a regular file: echo_train writes its pid there and follows no link; remove it");
  sync();
  if (world_rank() == 0) {  // a hard link is a regular file too, and its target would be truncated
    fs::remove(lock);
    fs::create_hard_link(victim, lock);
  }
  sync();
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { train(cfg, RunDirMode::fresh); }),
            "input: the run directory's lock file " + lock +
                " is a file with 2 hard links: echo_train writes its pid there and follows no link; remove it");
  sync();
  EXPECT_EQ(read_file(victim), "precious\n");
}

// Overwrites the first value of tensor `name` in a safetensors file (rank 0 only).
void poison_first_value(const std::string& file, const std::string& name, float value) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), sizeof header_len);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const auto offset = nlohmann::json::parse(header)[name]["data_offsets"][0].get<uint64_t>();
  f.seekp(static_cast<std::streamoff>(8 + header_len + offset));
  f.write(reinterpret_cast<const char*>(&value), sizeof value);
}

// A checkpoint whose values cannot have been saved by the trainer (a NaN weight, a negative second
// moment) is refused when it is read, naming the file and tensor. It used to load: echo_eval
// printed "loss nan", and a resume failed at its first step blaming that step and calling the
// corrupt checkpoint "the last good checkpoint".
TEST(TrainerGuard, ACheckpointHoldingImpossibleValuesIsRefused) {
  const std::string dir = scratch_dir("poisoned");
  const auto cfg = make_config(dir, {"train.steps=2"});
  train(cfg, RunDirMode::fresh);
  sync();
  const std::string ckpt = checkpoint_dir(cfg.run.out_dir, 2);
  const std::string model = ckpt + "/model.safetensors", opt = ckpt + "/trainer/optimizer.safetensors";
  const std::string shard = " (element 0 of the shard of tp rank 0 of " + std::to_string(tp()) + "): the file is corrupt";
  const auto resume = [&] {
    return echo::testing::kind_and_what_of([&] { train(make_config(dir, {"train.steps=3"}), RunDirMode::resume); });
  };
  const std::string model_bytes = read_file(model);
  const std::string state_text = read_file(ckpt + "/trainer/trainer_state.json");
  sync();
  if (world_rank() == 0) poison_first_value(model, "model.embed_tokens.weight", NAN);
  sync();
  std::string got = resume();
  // The checkpoint's checksums catch the change first (checkpoint_checksums_mpi_test covers them);
  // without them (a checkpoint from before they existed) the values themselves are checked.
  EXPECT_NE(got.find("tensor 'model.embed_tokens.weight' in model.safetensors does not match its checksum"),
            std::string::npos)
      << got;
  sync();
  as_written_before_checksums(ckpt, state_text);
  sync();
  got = resume();
  EXPECT_EQ(got.rfind("input: cannot load checkpoint: '" + model + "': tensor 'model.embed_tokens.weight' holds a NaN" +
                          shard,
                      0),
            0u)
      << got;
  sync();
  if (world_rank() == 0) {
    std::ofstream(model, std::ios::binary) << model_bytes;
    poison_first_value(opt, "model.embed_tokens.weight.exp_avg_sq", -1.0f);
  }
  sync();
  got = resume();
  EXPECT_EQ(got.rfind("input: cannot load checkpoint: '" + opt +
                          "': tensor 'model.embed_tokens.weight.exp_avg_sq' holds -1, a negative second moment" + shard,
                      0),
            0u)
      << got;
}

// A run that died after logging steps 4 and 5 but saved only step 3's checkpoint: the resume
// logs 4 and 5 again, so the old lines go.
TEST(TrainerGuard, MetricsAfterAResumeHoldEachStepOnce) {
  const std::string dir = scratch_dir("metrics");
  const auto first = make_config(dir, {"train.steps=5", "train.checkpoint_interval=3", "train.keep_checkpoints=5"});
  train(first, RunDirMode::fresh);
  sync();
  if (world_rank() == 0) fs::remove_all(checkpoint_dir(first.run.out_dir, 5));
  sync();
  train(make_config(dir, {"train.steps=6", "train.checkpoint_interval=3"}), RunDirMode::resume);
  if (world_rank() == 0) {
    std::vector<int64_t> steps;
    std::ifstream in(first.run.out_dir + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) steps.push_back(nlohmann::json::parse(line)["step"]);
    EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  }
}

// Rank 0 alone writes the run directory at start-up; when that fails (here metrics.jsonl is a
// directory) every rank must raise it, not wait for rank 0 in the first step's collectives.
TEST(TrainerGuard, ARank0WriteFailureAtStartUpEndsEveryRank) {
  const std::string dir = scratch_dir("rank0write");
  const auto first = make_config(dir, {"train.steps=2"});
  train(first, RunDirMode::fresh);
  sync();
  const std::string metrics = first.run.out_dir + "/metrics.jsonl";
  if (world_rank() == 0) {
    fs::remove(metrics);
    fs::create_directory(metrics);
  }
  sync();
  const std::string got = echo::testing::kind_and_what_of(
      [&] { train(make_config(dir, {"train.steps=3"}), RunDirMode::resume); });
  const std::string expected = "run: cannot write the metrics file '" + metrics + "'";
  EXPECT_EQ(got.rfind(expected, 0), 0u) << got;
  if (world_size() > 1 && world_rank() > 0) {
    EXPECT_NE(got.find("(reported by rank 0 of " + std::to_string(world_size()) + ")"), std::string::npos) << got;
  }
  sync();
  if (world_rank() == 0) {
    EXPECT_TRUE(fs::is_directory(metrics));  // nothing else was written over it
  }
}

// config.json's max_position_embeddings is the model's context: model.max_position_embeddings, or
// that of the checkpoint run.init_from names, never data.seq_len (16 here).
TEST(TrainerGuard, ConfigJsonCarriesTheModelsContextNotTheTrainingLength) {
  const std::string dir = scratch_dir("context");
  const auto a = make_config(dir, {"run.out_dir=" + dir + "/a", "train.steps=2"});
  train(a, RunDirMode::fresh);
  const std::string ckpt_a = checkpoint_dir(a.run.out_dir, 2);
  const auto context_of = [](const std::string& ckpt) {
    std::ifstream in(ckpt + "/config.json");
    return nlohmann::json::parse(in)["max_position_embeddings"].get<int64_t>();
  };
  EXPECT_EQ(context_of(ckpt_a), 40960) << "the Qwen3 default";
  sync();
  if (world_rank() == 0) {  // a base model with another context
    std::ifstream in(ckpt_a + "/config.json");
    auto hf = nlohmann::json::parse(in);
    hf["max_position_embeddings"] = 32768;
    std::ofstream(ckpt_a + "/config.json") << hf.dump(2);
  }
  sync();
  const auto b = make_config(dir, {"run.out_dir=" + dir + "/b", "train.steps=2", "run.init_from=" + ckpt_a});
  train(b, RunDirMode::fresh);
  EXPECT_EQ(context_of(checkpoint_dir(b.run.out_dir, 2)), 32768) << "taken from run.init_from";
  const auto c = make_config(dir, {"run.out_dir=" + dir + "/c", "train.steps=2", "model.max_position_embeddings=4096"});
  train(c, RunDirMode::fresh);
  EXPECT_EQ(context_of(checkpoint_dir(c.run.out_dir, 2)), 4096);
}

// run.init_from's config.json is read as echo_eval reads it and compared with the model section:
// before, only its max_position_embeddings was looked at, so rope_theta 10000 or gelu trained
// silently with the YAML's values, and a context of 2^31 passed start-up and failed the first
// checkpoint save (the training lost).
TEST(TrainerGuard, InitFromRefusesTheConfigJsonOfAnotherModel) {
  const std::string dir = scratch_dir("init_config");
  const auto a = make_config(dir, {"run.out_dir=" + dir + "/a", "train.steps=2"});
  train(a, RunDirMode::fresh);
  sync();
  const std::string ckpt_a = checkpoint_dir(a.run.out_dir, 2), hf_config = ckpt_a + "/config.json";
  const std::string original = read_file(hf_config);
  const auto start_with = [&](const nlohmann::json& change) {
    sync();
    if (world_rank() == 0) {
      auto hf = nlohmann::json::parse(original);
      hf.update(change);
      std::ofstream(hf_config) << hf.dump(2);
    }
    sync();
    return echo::testing::kind_and_what_of([&] {
      train(make_config(dir, {"run.out_dir=" + dir + "/b", "train.steps=2", "run.init_from=" + ckpt_a}),
            RunDirMode::fresh);
    });
  };
  const std::string what = "input: run.init_from's config '" + hf_config + "': ";
  std::string got = start_with({{"rope_theta", 10000}});
  EXPECT_EQ(got.rfind(what + "'rope_theta' = 10000, but the config's model.rope_base = 1000000", 0), 0u) << got;
  EXPECT_NE(got.find("pass --set model.rope_base=10000"), std::string::npos) << got;
  got = start_with({{"num_key_value_heads", 2}});
  EXPECT_EQ(got.rfind(what + "'num_key_value_heads' = 2, but the config's model.kv_heads = 4", 0), 0u) << got;
  got = start_with({{"hidden_act", "gelu"}});
  EXPECT_EQ(got.rfind(what + "'hidden_act' = \"gelu\" is not silu", 0), 0u) << got;
  got = start_with({{"max_position_embeddings", 2147483648}});
  EXPECT_EQ(got.rfind(what + "'max_position_embeddings' = 2147483648 is out of range [1, 1073741824]", 0), 0u) << got;
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir + "/b", 2))) << "refused at start-up, before any step";
  // A run started from the folder before it changed resumes: its checkpoint's weights replace
  // run.init_from's, and its context is the one it recorded (the check once refused such a
  // resume with a --set that the resume check then refused as another model).
  sync();
  if (world_rank() == 0) std::ofstream(hf_config) << original;
  sync();
  const auto c = make_config(dir, {"run.out_dir=" + dir + "/c", "train.steps=2", "run.init_from=" + ckpt_a});
  train(c, RunDirMode::fresh);
  const std::string recorded = read_file(checkpoint_dir(c.run.out_dir, 2) + "/config.json");
  sync();
  if (world_rank() == 0) {
    auto hf = nlohmann::json::parse(original);
    hf.update({{"rope_theta", 10000}, {"max_position_embeddings", 77}});
    std::ofstream(hf_config) << hf.dump(2);
  }
  sync();
  EXPECT_EQ(train(make_config(dir, {"run.out_dir=" + dir + "/c", "train.steps=4", "run.init_from=" + ckpt_a}),
                  RunDirMode::resume)
                .steps_done,
            4);
  sync();
  const auto context = [](const std::string& text) { return nlohmann::json::parse(text)["max_position_embeddings"]; };
  EXPECT_EQ(context(read_file(checkpoint_dir(c.run.out_dir, 4) + "/config.json")), context(recorded));
}

// echo_train installs its StopSignal before start-up; a signal then must not be lost (nor kill
// the ranks): the run stops before its first step, and the directory is free for the rerun.
TEST(TrainerGuard, ASignalDuringStartUpStopsBeforeTheFirstStep) {
  const std::string dir = scratch_dir("signal");
  const auto cfg = make_config(dir);
  {
    const StopSignal outer;
    if (world_rank() == 0) std::raise(SIGUSR1);
    const auto r = train(cfg, RunDirMode::fresh);
    EXPECT_TRUE(r.stopped_by_signal);
    EXPECT_EQ(r.steps_done, 0);
  }
  sync();
  EXPECT_FALSE(latest_checkpoint(cfg.run.out_dir).has_value());
  EXPECT_EQ(train(cfg, RunDirMode::fresh).steps_done, 4) << "nothing was trained: the rerun is not refused";
  sync();
  // An --overwrite interrupted in start-up keeps the old run: its checkpoints, metrics and config
  // (it once deleted them, having trained nothing).
  const std::string metrics = read_file(cfg.run.out_dir + "/metrics.jsonl"),
                    config = read_file(cfg.run.out_dir + "/config.yaml");
  sync();
  {
    const StopSignal outer;
    if (world_rank() == 0) std::raise(SIGUSR1);
    const auto r = train(make_config(dir, {"optim.lr=1.0e-3"}), RunDirMode::overwrite);
    EXPECT_TRUE(r.stopped_by_signal);
    EXPECT_EQ(r.steps_run, 0);
  }
  sync();
  EXPECT_EQ(latest_checkpoint(cfg.run.out_dir), checkpoint_dir(cfg.run.out_dir, 4));
  EXPECT_EQ(read_file(cfg.run.out_dir + "/metrics.jsonl"), metrics);
  EXPECT_EQ(read_file(cfg.run.out_dir + "/config.yaml"), config);
}

// A signal that arrives while a periodic checkpoint is written stops the run at that step: it
// once trained one more step and saved it too. The hook raises SIGUSR1 on rank 0 right after the
// step-2 save (checkpoint_interval 2 of 4 steps), before the loop's stop check.
TEST(TrainerGuard, ASignalDuringAPeriodicSaveStopsAtThatStep) {
  const std::string dir = scratch_dir("signal_in_save");
  const auto cfg = make_config(dir);
  std::vector<int64_t> saved;
  TrainResult r;
  {
    const dist::World world = dist::World::create(cfg.parallel.tp);
    Trainer trainer(cfg, world, RunDirMode::fresh);
    trainer.after_each_save([&saved](int64_t step) {
      saved.push_back(step);
      if (step == 2 && world_rank() == 0) std::raise(SIGUSR1);
    });
    r = trainer.run();
  }
  EXPECT_TRUE(r.stopped_by_signal);
  EXPECT_EQ(r.steps_done, 2);
  EXPECT_EQ(saved, std::vector<int64_t>{2}) << "the step-2 checkpoint is saved once, and no later one";
  sync();
  EXPECT_EQ(latest_checkpoint(cfg.run.out_dir), checkpoint_dir(cfg.run.out_dir, 2));
  // Without a signal the same run saves at 2 and 4 (the hook sees every save).
  const std::string dir2 = scratch_dir("no_signal_in_save");
  const auto cfg2 = make_config(dir2);
  saved.clear();
  {
    const dist::World world = dist::World::create(cfg2.parallel.tp);
    Trainer trainer(cfg2, world, RunDirMode::fresh);
    trainer.after_each_save([&saved](int64_t step) { saved.push_back(step); });
    r = trainer.run();
  }
  EXPECT_FALSE(r.stopped_by_signal);
  EXPECT_EQ(r.steps_done, 4);
  EXPECT_EQ(saved, (std::vector<int64_t>{2, 4}));
  sync();
}

// A signal that arrives inside a step (a step can outlast a scheduler's grace period) stops the
// run after the micro-batch in progress: the step is dropped before its optimizer update, the last
// finished step is saved (or its checkpoint kept), and the resume retrains the dropped step into
// the curve of a run never stopped.
TEST(TrainerGuard, ASignalInsideAStepDropsItAndTheResumeRetrainsIt) {
  const auto curve = [](const std::string& out_dir) {
    std::vector<std::string> lines;
    std::ifstream in(out_dir + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      for (const char* timing : {"step_ms", "tokens_per_s", "mfu"}) j.erase(timing);
      lines.push_back(j.dump());
    }
    return lines;
  };
  std::string log;  // this rank's log of the last interrupted run
  const auto interrupted = [&log](const config::Config& cfg, int64_t signal_step, std::vector<int64_t>& saved) {
    const dist::World world = dist::World::create(cfg.parallel.tp);
    Trainer trainer(cfg, world, RunDirMode::fresh);
    trainer.after_each_save([&saved](int64_t step) { saved.push_back(step); });
    trainer.after_each_micro_batch([signal_step](int64_t step, int micro) {
      if (step == signal_step && micro == 0 && world_rank() == 0) std::raise(SIGUSR1);
    });
    const echo::testing::LogCapture capture;
    const TrainResult r = trainer.run();
    log = capture.text();
    return r;
  };
  const std::string dir = scratch_dir("signal_in_step");
  // Step 4 of 4 is interrupted; step 3 was not saved (checkpoint_interval 2): it is saved now.
  const auto cfg = make_config(dir);
  std::vector<int64_t> saved;
  TrainResult r = interrupted(cfg, 4, saved);
  EXPECT_TRUE(r.stopped_by_signal);
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_EQ(saved, (std::vector<int64_t>{2, 3}));
  // Rank 0 got the signal; the others stop on its word.
  const std::string said = world_rank() == 0 ? "stopping in step 4 on signal 10: the step is dropped before its "
                                               "optimizer update; checkpoint of step 3 saved"
                                             : "stopping in step 4 on a signal to another rank: the step is dropped";
  EXPECT_NE(log.find(said), std::string::npos) << log;
  sync();
  EXPECT_EQ(latest_checkpoint(cfg.run.out_dir), checkpoint_dir(cfg.run.out_dir, 3));
  EXPECT_EQ(curve(cfg.run.out_dir).size(), 3u) << "the dropped step is not logged";
  EXPECT_EQ(train(cfg, RunDirMode::resume).steps_done, 4);
  sync();
  const auto straight = make_config(dir, {"run.out_dir=" + dir + "/straight"});
  EXPECT_EQ(train(straight, RunDirMode::fresh).steps_done, 4);
  sync();
  const auto expected = curve(straight.run.out_dir);
  ASSERT_EQ(expected.size(), 4u);
  EXPECT_EQ(curve(cfg.run.out_dir), expected) << "the resume retrains the dropped step bit for bit";
  // Step 3 is interrupted right after the step-2 checkpoint: nothing new is saved, that one is kept.
  const auto early = make_config(dir, {"run.out_dir=" + dir + "/early"});
  saved.clear();
  r = interrupted(early, 3, saved);
  EXPECT_TRUE(r.stopped_by_signal);
  EXPECT_EQ(r.steps_done, 2);
  EXPECT_EQ(saved, std::vector<int64_t>{2});
  sync();
  EXPECT_EQ(latest_checkpoint(early.run.out_dir), checkpoint_dir(early.run.out_dir, 2));
  EXPECT_EQ(train(early, RunDirMode::resume).steps_done, 4);
  sync();
  EXPECT_EQ(curve(early.run.out_dir), expected);
  // A run's very first step interrupted: nothing was trained, nothing is saved, and the folder
  // holds no run (no metrics line, no checkpoint): a fresh start is not refused.
  const auto first = make_config(dir, {"run.out_dir=" + dir + "/first"});
  saved.clear();
  r = interrupted(first, 1, saved);
  EXPECT_TRUE(r.stopped_by_signal);
  EXPECT_EQ(r.steps_done, 0);
  EXPECT_TRUE(saved.empty());
  if (world_rank() == 0) {
    EXPECT_NE(log.find("stopping in step 1 on signal 10: the step is dropped before its optimizer update; nothing "
                       "was trained to save"),
              std::string::npos)
        << log;
  }
  sync();
  EXPECT_FALSE(latest_checkpoint(first.run.out_dir).has_value());
  EXPECT_EQ(train(first, RunDirMode::fresh).steps_done, 4) << "not refused as a run to resume or overwrite";
  sync();
  EXPECT_EQ(curve(first.run.out_dir), expected);
}

// A --resume of a run already at train.steps trains nothing and changes nothing, saying so.
TEST(TrainerGuard, AResumePastTrainStepsTrainsNothing) {
  const std::string dir = scratch_dir("past_steps");
  const auto cfg = make_config(dir);
  train(cfg, RunDirMode::fresh);
  sync();
  const std::string metrics = read_file(cfg.run.out_dir + "/metrics.jsonl"),
                    config = read_file(cfg.run.out_dir + "/config.yaml");
  sync();
  std::string log;
  TrainResult r;
  {
    const echo::testing::LogCapture capture;
    r = train(make_config(dir, {"train.steps=2"}), RunDirMode::resume);
    log = capture.text();
  }
  EXPECT_EQ(r.steps_done, 4);
  EXPECT_EQ(r.steps_run, 0);
  EXPECT_FALSE(r.stopped_by_signal);
  EXPECT_NE(log.find("nothing to train: the run is at step 4 and train.steps = 2; set train.steps above 4 to continue "
                     "it"),
            std::string::npos)
      << log;
  sync();
  EXPECT_EQ(read_file(cfg.run.out_dir + "/metrics.jsonl"), metrics);
  EXPECT_EQ(read_file(cfg.run.out_dir + "/config.yaml"), config) << "nothing trained: the config is the run's";
  EXPECT_EQ(latest_checkpoint(cfg.run.out_dir), checkpoint_dir(cfg.run.out_dir, 4));
}

}  // namespace
}  // namespace echo::train
