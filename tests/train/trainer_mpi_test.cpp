// echo_train's loop end to end on a tiny model and a random indexed dataset (2 and 4 ranks):
// determinism, bit-for-bit resume, resume at another tp, and the bad-input errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

#include "../support/mpi_util.h"
#include "../support/test_util.h"
#include "core/error.h"
#include "data/indexed_dataset.h"
#include "dist/world.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checksums.h"
#include "train/trainer.h"
#include "trainer_test_util.h"

namespace echo::train {
namespace {

using echo::testing::expect_error;
using echo::testing::world_rank;
using echo::testing::world_size;

namespace fs = std::filesystem;

// A scratch directory shared by all ranks with random train and valid datasets over ids 0..56
// (63 is EOS).
std::string scratch_dir(const std::string& tag) {
  return echo::testing::make_scratch_datasets("echo_trainer", tag, 42, {"train", "valid"});
}

std::string config_text(const std::string& dir) {
  return "run: {seed: 7, out_dir: " + dir +
         "/run}\n"
         "model: {vocab_size: 64, vocab_pad_multiple: 16, hidden: 32, ffn: 48, layers: 2, heads: 4, kv_heads: 4,\n"
         "        head_dim: 8, tie_embeddings: true, init_std: 0.05}\n"
         "comm: {allreduce: echo, bits: 4, group_size: 32}\n"
         "optim: {lr: 3.0e-3, min_lr: 3.0e-4}\n"
         "schedule: {warmup_steps: 2}\n"
         "data: {train: " +
         dir + "/data/train, valid: " + dir +
         "/data/valid, seq_len: 16, eos_id: 63}\n"
         "train: {steps: 6, micro_batch: 2, global_batch: 8, eval_interval: 3, eval_batches: 2,\n"
         "        checkpoint_interval: 3, keep_checkpoints: 2, log_interval: 1000}\n";
}

config::Config make_config(const std::string& dir, int tp, std::vector<std::string> overrides = {}) {
  overrides.push_back("parallel.tp=" + std::to_string(tp));
  return config::parse_config(config_text(dir), "trainer_test.yaml", overrides, world_size());
}

TrainResult train(const config::Config& cfg, RunDirMode mode, int64_t stop_after = 0) {
  const dist::World world = dist::World::create(cfg.parallel.tp);
  Trainer trainer(cfg, world, mode);
  return trainer.run(stop_after);
}

// The deterministic part of each metrics line (timings removed).
std::vector<std::string> metric_lines(const std::string& out_dir) {
  std::vector<std::string> lines;
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* timing : {"step_ms", "tokens_per_s", "mfu"}) j.erase(timing);
    lines.push_back(j.dump());
  }
  return lines;
}

TEST(Trainer, SameConfigAndSeedGiveTheSameCurveAndLossFalls) {
  const std::string dir = scratch_dir("determinism");
  const int tp = world_size() >= 2 ? 2 : 1;
  auto a = make_config(dir, tp, {"run.out_dir=" + dir + "/a"});
  auto b = make_config(dir, tp, {"run.out_dir=" + dir + "/b"});
  const auto ra = train(a, RunDirMode::fresh);
  train(b, RunDirMode::fresh);
  EXPECT_EQ(ra.steps_done, 6);
  train(make_config(dir, tp, {"run.out_dir=" + dir + "/telemetry", "comm.telemetry_interval=3"}), RunDirMode::fresh);
  if (world_rank() == 0) {
    const auto la = metric_lines(dir + "/a"), lb = metric_lines(dir + "/b");
    ASSERT_EQ(la.size(), 8u) << "6 step lines and 2 eval lines";
    EXPECT_EQ(metric_lines(dir + "/telemetry").size(), 8u + 2 * 8) << "8 echo_site lines at steps 3 and 6";
    EXPECT_EQ(la, lb);
    const double first = nlohmann::json::parse(la[0])["loss"], val3 = nlohmann::json::parse(la[3])["val_loss"],
                 val6 = nlohmann::json::parse(la[7])["val_loss"];
    EXPECT_LT(ra.last_loss, first);
    EXPECT_LT(val6, val3);
  }
}

// Every TP sum (Echo's block sites, the fp32 embedding / LM-head / q-k-norm sums) moves over the
// shm workspace or over MPI with the same bits, so the curve cannot depend on comm.transport.
TEST(Trainer, TheTransportDoesNotChangeTheCurve) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string dir = scratch_dir("transport");
  for (const char* allreduce : {"echo", "exact_fp32"}) {
    const auto run = [&](const std::string& transport) {
      const std::string out = dir + "/" + allreduce + "-" + transport;
      train(make_config(dir, 2,
                        {"run.out_dir=" + out, "comm.transport=" + transport,
                         std::string("comm.allreduce=") + allreduce, "model.tie_embeddings=false"}),
            RunDirMode::fresh);
      return out;
    };
    const std::string over_mpi = run("mpi"), over_shm = run("shm");
    if (world_rank() == 0) {
      const auto a = metric_lines(over_mpi);
      ASSERT_EQ(a.size(), 8u) << allreduce;
      EXPECT_EQ(a, metric_lines(over_shm)) << allreduce;
    }
  }
}

TEST(Trainer, Int8S3rLinearsTrainAndResumeBitForBit) {
  const std::string dir = scratch_dir("int8");
  const int tp = world_size() >= 2 ? 2 : 1;
  const std::vector<std::string> int8 = {"linear.mode=int8", "linear.backward_rounding=s3r", "linear.ec=two_way"};
  auto with = [&](const std::string& out) {
    auto o = int8;
    o.push_back("run.out_dir=" + dir + "/" + out);
    return make_config(dir, tp, o);
  };
  const auto full = train(with("straight"), RunDirMode::fresh);
  train(with("split"), RunDirMode::fresh, 3);
  train(with("split"), RunDirMode::resume);
  if (world_rank() == 0) {
    const auto a = metric_lines(dir + "/straight");
    EXPECT_EQ(a, metric_lines(dir + "/split")) << "S3R thresholds are keyed by the step: resume draws the same";
    EXPECT_LT(full.last_loss, double(nlohmann::json::parse(a[0])["loss"]));
  }
}

TEST(Trainer, ResumeContinuesBitForBit) {
  const std::string dir = scratch_dir("resume");
  const int tp = world_size() >= 2 ? 2 : 1;
  train(make_config(dir, tp, {"run.out_dir=" + dir + "/straight"}), RunDirMode::fresh);
  const auto half = train(make_config(dir, tp, {"run.out_dir=" + dir + "/split"}), RunDirMode::fresh, 3);
  EXPECT_EQ(half.steps_done, 3);
  EXPECT_TRUE(half.stopped_by_signal);
  const auto rest = train(make_config(dir, tp, {"run.out_dir=" + dir + "/split"}), RunDirMode::resume);
  EXPECT_EQ(rest.steps_done, 6);
  if (world_rank() == 0) {
    EXPECT_EQ(metric_lines(dir + "/straight"), metric_lines(dir + "/split"));
  }
}

// A resume with a larger train.global_batch goes on from the samples consumed (Megatron-LM's
// consumed_samples), not from step x the new batch. With a learning rate too small to move a
// weight, each step's loss is a function of its samples alone: steps 3 and 4 at global batch 16
// read what steps 3-4 and 5-6 of a run at 8 read, so their losses are those pairs' means.
// Reading from step x 16 (the old data position) would give samples 32-63 at step 3.
TEST(Trainer, AResumeWithAnotherGlobalBatchGoesOnFromTheSamplesConsumed) {
  const std::string dir = scratch_dir("consumed");
  const int tp = world_size() >= 2 ? 2 : 1;
  const auto cfg = [&](const std::string& run, int batch, int steps) {
    return make_config(dir, tp,
                       {"run.out_dir=" + dir + "/" + run, "comm.allreduce=exact_fp32", "optim.lr=1e-12",
                        "optim.min_lr=1e-12", "schedule.warmup_steps=0", "train.eval_interval=0",
                        "train.global_batch=" + std::to_string(batch), "train.steps=" + std::to_string(steps)});
  };
  const auto losses = [](const std::string& out_dir) {
    std::vector<double> out;
    for (const std::string& line : metric_lines(out_dir)) out.push_back(nlohmann::json::parse(line).at("loss"));
    return out;
  };
  const auto consumed = [&](const std::string& run, int step) {
    std::ifstream in(checkpoint_dir(dir + "/" + run, step) + "/trainer/trainer_state.json");
    return nlohmann::json::parse(in).at("consumed_samples").get<uint64_t>();
  };
  train(cfg("ref", 8, 6), RunDirMode::fresh);
  EXPECT_EQ(train(cfg("grown", 8, 6), RunDirMode::fresh, 2).steps_done, 2);
  // The same step-2 checkpoint with its trainer state edited: checksums dropped with the edit (a
  // checkpoint from before either existed), or re-hashed (a forged state that passes them).
  enum class Sums { dropped, rehashed };
  const auto edited_copy = [&](const std::string& run, const std::function<void(nlohmann::ordered_json&)>& edit,
                               Sums sums = Sums::dropped) {
    if (world_rank() == 0) {
      fs::copy(dir + "/grown", dir + "/" + run, fs::copy_options::recursive);
      const std::string ckpt = checkpoint_dir(dir + "/" + run, 2), state_path = ckpt + "/trainer/trainer_state.json";
      std::ifstream in(state_path);
      auto state = nlohmann::ordered_json::parse(in);
      edit(state);
      const std::string text = state.dump(2);
      std::ofstream(state_path) << text;
      const std::string sums_path = ckpt + "/trainer/checksums.json";
      if (sums == Sums::dropped) {
        fs::remove(sums_path);
      } else {
        std::ifstream sums_in(sums_path);
        const std::string sums_text((std::istreambuf_iterator<char>(sums_in)), std::istreambuf_iterator<char>());
        CheckpointChecksums parsed = parse_checksums(sums_text, sums_path);
        parsed.files.at("trainer/trainer_state.json") = xxh3_64(text);
        std::ofstream(sums_path, std::ios::trunc) << checksums_json(parsed);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  };
  edited_copy("legacy", [](nlohmann::ordered_json& state) {
    EXPECT_EQ(state.at("consumed_samples"), 16);
    state.erase("consumed_samples");
    state.erase("train_data_xxh3");  // as old: both came after checksums, which tell their removal
  });
  // A state that says 1 sample was consumed in 2 steps is refused.
  edited_copy(
      "forged", [](nlohmann::ordered_json& state) { state["consumed_samples"] = 1; }, Sums::rehashed);
  expect_error([&] { train(cfg("forged", 16, 4), RunDirMode::resume); },
               "its trainer state's 'consumed_samples' = 1 cannot be read in 'step' = 2 steps");
  EXPECT_EQ(train(cfg("grown", 16, 4), RunDirMode::resume).steps_done, 4);
  EXPECT_EQ(train(cfg("legacy", 16, 4), RunDirMode::resume).steps_done, 4);
  if (world_rank() == 0) {
    const std::vector<double> ref = losses(dir + "/ref");
    ASSERT_EQ(ref.size(), 6u);
    EXPECT_GT(std::fabs(ref[2] - ref[4]), 1e-3) << "the batches must differ for the test to tell them apart";
    for (const std::string run : {"grown", "legacy"}) {
      const std::vector<double> got = losses(dir + "/" + run);
      ASSERT_EQ(got.size(), 4u) << run;
      EXPECT_EQ(got[0], ref[0]) << run;
      EXPECT_EQ(got[1], ref[1]) << run;
      EXPECT_NEAR(got[2], (ref[2] + ref[3]) / 2, 1e-5) << run << ": step 3 reads samples 16-31";
      EXPECT_NEAR(got[3], (ref[4] + ref[5]) / 2, 1e-5) << run << ": step 4 reads samples 32-47";
      EXPECT_EQ(consumed(run, 4), 2u * 8 + 2u * 16) << run;
    }
    EXPECT_EQ(consumed("ref", 6), 6u * 8);
  }
}

// global_batch 16 gives every layout several micro-batches per step (tp = 2: 8 or 4, tp = 1: 4 or
// 2 at 2 or 4 ranks), so gradients accumulated over micro-batches are compared across tp too.
TEST(Trainer, ResumesAtADifferentTp) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string dir = scratch_dir("retp");
  const std::string out = "run.out_dir=" + dir + "/run";
  const auto cfg = [&](int tp, const std::string& out_dir) {
    return make_config(dir, tp, {out_dir, "comm.allreduce=exact_fp32", "train.global_batch=16"});
  };
  train(cfg(2, out), RunDirMode::fresh, 3);
  const auto r1 = train(cfg(1, out), RunDirMode::resume);
  EXPECT_EQ(r1.steps_done, 6);
  const auto ref = train(cfg(2, "run.out_dir=" + dir + "/ref"), RunDirMode::fresh);
  train(cfg(1, "run.out_dir=" + dir + "/tp1"), RunDirMode::fresh);
  if (world_rank() == 0) {
    const auto a = metric_lines(dir + "/run"), b = metric_lines(dir + "/ref"), c = metric_lines(dir + "/tp1");
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(a.front(), b.front()) << "the first half ran at the same tp";
    // tp = 1 and tp = 2 from scratch: the same training loss, gradient norm and validation loss
    // (over the same eval_batches global batches at every dp), step by step.
    ASSERT_EQ(c.size(), b.size());
    for (size_t i = 0; i < b.size(); ++i) {
      const auto jb = nlohmann::json::parse(b[i]), jc = nlohmann::json::parse(c[i]);
      for (const char* key : {"loss", "grad_norm", "val_loss"}) {
        if (!jb.contains(key)) continue;
        const double vb = jb[key], vc = jc.at(key);
        EXPECT_NEAR(vc, vb, 1e-4 * std::max(1.0, std::fabs(vb))) << key << " at line " << i << ": " << c[i];
      }
    }
  }
  EXPECT_NEAR(r1.last_loss, ref.last_loss, 1e-4)
      << "tp = 1 continues what tp = 2 started, within fp32 reduction-order noise";
}

TEST(Trainer, StartsFromAHuggingFaceCheckpointGivenByRunInitFrom) {
  const std::string dir = scratch_dir("init_from");
  const int tp = world_size() >= 2 ? 2 : 1;
  train(make_config(dir, tp, {"run.out_dir=" + dir + "/a"}), RunDirMode::fresh);
  const std::string weights = dir + "/a/checkpoints/step_00000006/model.safetensors";
  const auto fresh = train(make_config(dir, tp, {"run.out_dir=" + dir + "/b", "train.steps=1"}), RunDirMode::fresh);
  const auto warm =
      train(make_config(dir, tp, {"run.out_dir=" + dir + "/c", "train.steps=1", "run.init_from=" + weights}),
            RunDirMode::fresh);
  // The same first batch: a model that already trained 6 steps fits it better than a fresh one.
  EXPECT_LT(warm.last_loss, fresh.last_loss - 0.1);
  expect_error(
      [&] {
        train(make_config(dir, tp, {"run.out_dir=" + dir + "/d", "run.init_from=" + dir + "/none"}), RunDirMode::fresh);
      },
      dir + "/none");
}

TEST(Trainer, RefusesAnOutputDirectoryHoldingAnotherRun) {
  const std::string dir = scratch_dir("outdir");
  auto cfg = make_config(dir, 1, {"train.steps=1"});
  train(cfg, RunDirMode::fresh);
  expect_error([&] { train(cfg, RunDirMode::fresh); }, "already holds a run");
  EXPECT_EQ(train(cfg, RunDirMode::overwrite).steps_done, 1);
}

TEST(Trainer, BadDataIsNamed) {
  const std::string dir = scratch_dir("baddata");
  expect_error([&] { train(make_config(dir, 1, {"data.train=" + dir + "/data/nothing"}), RunDirMode::fresh); },
               dir + "/data/nothing.idx");
  // A vocabulary smaller than the ids in the data.
  expect_error(
      [&] {
        train(make_config(dir, 1, {"model.vocab_size=32", "run.out_dir=" + dir + "/v"}), RunDirMode::fresh);
      },
      "data/train");
}

TEST(Trainer, RefusesWhatThisVersionCannotDo) {
  const std::string dir = scratch_dir("unsupported");
  // Without a usable GPU (or without the CUDA backend in the build) run.device = cuda is refused by
  // name, INT8 linears included: they have CUDA kernels, so only the missing device stops them.
  if (cuda_device_count() == 0) {
    expect_error([&] { train(make_config(dir, 1, {"run.device=cuda"}), RunDirMode::fresh); }, "'run.device' = cuda");
    expect_error(
        [&] {
          train(make_config(dir, 1, {"run.device=cuda", "linear.mode=int8"}), RunDirMode::fresh);
        },
        "'run.device' = cuda");
  }
}

TEST(Trainer, NonFiniteTrainingStopsNamingTheStep) {
  const std::string dir = scratch_dir("nan");
  auto cfg =
      make_config(dir, world_size() >= 2 ? 2 : 1, {"optim.lr=1.0e30", "optim.min_lr=1.0e30", "optim.grad_clip=0"});
  // The first update already makes the weights absurd (5e29): caught at step 1, before the loss
  // of step 2 turns non-finite.
  expect_error([&] { train(cfg, RunDirMode::fresh); }, "the weights diverged at step 1");
}

// metrics.jsonl's tp_wire_bytes / tp_reduce_bytes (model::CommTpOps' count): the same at every
// step, twice as much with twice the micro-batches per rank, nothing added by the evaluations in
// between, and zero at tp = 1 (nothing is sent).
std::vector<std::pair<uint64_t, uint64_t>> traffic_per_step(const std::string& out_dir) {
  std::vector<std::pair<uint64_t, uint64_t>> steps;
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) steps.emplace_back(j.at("tp_wire_bytes"), j.at("tp_reduce_bytes"));
  }
  return steps;
}

TEST(Trainer, TpTrafficIsCountedPerStepAndMicroBatch) {
  const std::string dir = scratch_dir("traffic");
  const int dp = world_size() / 2;
  const auto run = [&](const std::string& out, int tp, int micro_batches, int eval_interval) {
    const int global = 2 * micro_batches * world_size() / tp;  // micro_batch 2 per rank
    train(make_config(dir, tp,
                      {"run.out_dir=" + dir + "/" + out, "train.global_batch=" + std::to_string(global),
                       "train.eval_interval=" + std::to_string(eval_interval), "train.checkpoint_interval=0"}),
          RunDirMode::fresh);
  };
  run("one", 2, 1, 0);
  run("two", 2, 2, 0);
  run("two_eval", 2, 2, 1);
  run("tp1", 1, 1, 0);
  if (world_rank() != 0) return;
  const auto one = traffic_per_step(dir + "/one"), two = traffic_per_step(dir + "/two"),
             two_eval = traffic_per_step(dir + "/two_eval"), tp1 = traffic_per_step(dir + "/tp1");
  ASSERT_EQ(one.size(), 6u);
  ASSERT_EQ(two.size(), 6u);
  EXPECT_GT(one[0].first, 0u);
  EXPECT_GT(one[0].second, 0u);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i], one[0]) << "step " << i + 1 << ", dp " << dp;
    EXPECT_EQ(two[i].first, 2 * one[0].first) << "step " << i + 1;
    EXPECT_EQ(two[i].second, 2 * one[0].second) << "step " << i + 1;
  }
  EXPECT_EQ(two_eval, two) << "an evaluation's all-reduces were counted in a step";
  ASSERT_EQ(tp1.size(), 6u);
  for (const auto& t : tp1) EXPECT_EQ(t, std::make_pair(uint64_t{0}, uint64_t{0}));
}

}  // namespace
}  // namespace echo::train
