// echo_eval's library path (train/checkpoint_eval.h) on a checkpoint the Trainer wrote (2 and 4
// ranks): the trainer's logged val_loss reproduced, tp = 1 / 2 / 4 agreeing with the exact fp32
// all-reduce, the same weights read as a Hugging Face folder, bad inputs refused in words, and the
// data's sidecar (its tokenizer's EOS and vocabulary) checked against the checkpoint's settings.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "../support/log_capture.h"
#include "../support/mpi_util.h"
#include "../support/test_util.h"
#include "core/error.h"
#include "dist/world.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint_eval.h"
#include "train/trainer.h"
#include "trainer_test_util.h"

namespace echo::train {
namespace {

using echo::testing::world_rank;
using echo::testing::world_size;
namespace fs = std::filesystem;

// The trainer test's tiny model (echo 4-bit, compensator on) with 2 global batches of validation.
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

// Trained once per process: every test reads the same run.
struct TrainedRun {
  std::string dir;
  int tp = 1;
  std::map<int64_t, double> val_loss;  // step -> logged val_loss
};

const TrainedRun& trained_run() {
  static TrainedRun run = [] {
    TrainedRun r;
    r.dir = echo::testing::make_scratch_datasets("echo_eval", "run", 42, {"train", "valid"});
    // dp = 2 at 4 ranks: the trainer's eval splits each global batch over DP ranks, and so must echo_eval.
    r.tp = world_size() >= 2 ? 2 : 1;
    const config::Config cfg = config::parse_config(config_text(r.dir), "eval_test.yaml",
                                                    {"parallel.tp=" + std::to_string(r.tp)}, world_size());
    {
      const dist::World world = dist::World::create(cfg.parallel.tp);
      Trainer trainer(cfg, world, RunDirMode::fresh);
      trainer.run();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    std::ifstream in(r.dir + "/run/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("val_loss")) r.val_loss[j["step"].get<int64_t>()] = j["val_loss"].get<double>();
    }
    return r;
  }();
  return run;
}

EvalReport eval(const std::string& checkpoint, int tp, std::vector<std::string> overrides = {},
                const std::string& data = "") {
  EvalRequest req;
  req.checkpoint = checkpoint;
  req.tp = tp;
  req.overrides = std::move(overrides);
  req.data = data;
  return evaluate_checkpoint(req);
}

// A Hugging Face folder at `hf` holding the checkpoint's model.safetensors and config.json (made
// by rank 0, seen by all).
std::string hf_folder_of(const std::string& ckpt, const std::string& hf) {
  if (world_rank() == 0) {
    fs::create_directories(hf);
    fs::copy_file(ckpt + "/model.safetensors", hf + "/model.safetensors", fs::copy_options::overwrite_existing);
    fs::copy_file(ckpt + "/config.json", hf + "/config.json", fs::copy_options::overwrite_existing);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return hf;
}

TEST(Eval, CheckpointReproducesTheValLossTheTrainerLogged) {
  const TrainedRun& run = trained_run();
  ASSERT_EQ(run.val_loss.size(), 2u) << "evals at steps 3 and 6";
  for (const int64_t step : {3, 6}) {
    const EvalReport r = eval(checkpoint_dir(run.dir + "/run", step), run.tp);
    EXPECT_EQ(r.kind, "echo");
    EXPECT_EQ(r.step, step);
    EXPECT_EQ(r.tokens, 2 * 8 * 16) << "2 global batches of 8 x 16";
    EXPECT_NEAR(std::exp(r.loss), r.ppl, 1e-12 * r.ppl);
    const double logged = run.val_loss.at(step);
    // The same function, windows and summation order: expected bit for bit; the contract is 1e-6.
    EXPECT_NEAR(r.loss, logged, 1e-6 * logged) << "step " << step;
    if (world_rank() == 0)
      std::printf("step %lld: eval %.17g, logged %.17g (%s)\n", static_cast<long long>(step), r.loss, logged,
                  r.loss == logged ? "bit for bit" : "differs");
  }
  // The run directory means its newest complete checkpoint.
  const EvalReport latest = eval(run.dir + "/run", run.tp);
  EXPECT_EQ(latest.step, 6);
  EXPECT_EQ(latest.loss, eval(checkpoint_dir(run.dir + "/run", 6), run.tp).loss);
}

// A run directory whose newest step lost its COMPLETE marker: the latest complete step is
// evaluated, and the log says which newer one was passed over.
TEST(Eval, ARunDirectoryNamesANewerUnfinishedCheckpoint) {
  const TrainedRun& run = trained_run();
  const std::string copy = run.dir + "/damaged_run";
  if (world_rank() == 0) {
    fs::copy(run.dir + "/run", copy, fs::copy_options::recursive);
    fs::remove(fs::path(checkpoint_dir(copy, 6)) / "COMPLETE");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::string log;
  EvalReport r;
  {
    const echo::testing::LogCapture capture;
    r = eval(copy, run.tp);
    log = capture.text();
  }
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(r.checkpoint, checkpoint_dir(copy, 3));
  if (world_rank() == 0) {
    const std::string expected = "evaluating " + checkpoint_dir(copy, 3) + ", the latest complete checkpoint of " +
                                 copy + ": " + checkpoint_dir(copy, 6) + " is newer but has no COMPLETE marker";
    EXPECT_NE(log.find(expected), std::string::npos) << log;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Eval, ExactAllReduceAgreesAcrossTp) {
  const TrainedRun& run = trained_run();
  const std::string ckpt = checkpoint_dir(run.dir + "/run", 6);
  const double tp1 = eval(ckpt, 1, {"comm.allreduce=exact_fp32"}).loss;
  for (int tp = 2; tp <= world_size(); tp *= 2) {
    const double other = eval(ckpt, tp, {"comm.allreduce=exact_fp32"}).loss;
    EXPECT_NEAR(other, tp1, 1e-5 * tp1) << "tp " << tp;
  }
  // The comm setting is applied: 4-bit without compensation is not the exact sum (at tp = 1 every
  // all-reduce is the identity plus one quantization, so this needs tp > 1).
  const double no_comp = eval(ckpt, 2, {"comm.compensator.enabled=false"}).loss;
  EXPECT_NE(no_comp, tp1);
}

TEST(Eval, HuggingFaceFolderOfTheSameWeightsGivesTheSameLoss) {
  const TrainedRun& run = trained_run();
  const std::string ckpt = checkpoint_dir(run.dir + "/run", 6);
  const std::string hf = hf_folder_of(ckpt, run.dir + "/hf");
  // config.json gives the shape; the rest of the trainer's setting comes from --set.
  const std::vector<std::string> setting = {"run.seed=7",          "data.eos_id=63",       "data.seq_len=16",
                                            "train.micro_batch=2", "train.global_batch=8", "train.eval_batches=2",
                                            "comm.allreduce=echo", "comm.group_size=32"};
  const EvalReport r = eval(hf, run.tp, setting, run.dir + "/data/valid");
  EXPECT_EQ(r.kind, "hf");
  EXPECT_EQ(r.loss, eval(ckpt, run.tp).loss);
  // Beside model.safetensors an index: transformers loads model.safetensors, echo took the index
  // (another model, or here none at all) with no word.
  if (world_rank() == 0) std::ofstream(hf + "/model.safetensors.index.json") << R"({"weight_map": {}})";
  MPI_Barrier(MPI_COMM_WORLD);
  echo::testing::expect_error([&] { eval(hf, run.tp, setting, run.dir + "/data/valid"); },
                              "'" + hf + "' holds both model.safetensors and model.safetensors.index.json, which may "
                              "be different weights: remove one");
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::remove(hf + "/model.safetensors.index.json");
  MPI_Barrier(MPI_COMM_WORLD);
}

// A Hugging Face folder carries no evaluation batches: echo's defaults (20 global batches of
// 384) read the small validation set many times over. They are cut to read each sequence at
// most once, and as many as fit: one more batch of the same size is refused as a repeat.
TEST(Eval, HuggingFaceFolderDefaultsReadTheDataOnce) {
  const TrainedRun& run = trained_run();
  const std::string ckpt = checkpoint_dir(run.dir + "/run", 6);
  const std::string hf = hf_folder_of(ckpt, run.dir + "/hf_defaults");
  const std::string data = run.dir + "/data/valid";
  const EvalReport r = eval(hf, run.tp, {"data.eos_id=63", "data.seq_len=16"}, data);
  ASSERT_GE(r.batches, 1);
  const int global = r.micro_batch * r.num_micro * r.dp;
  EXPECT_LE(global, 384);
  EXPECT_EQ(r.tokens, int64_t{r.batches} * global * 16);
  EvalRequest req;
  req.checkpoint = hf;
  req.tp = run.tp;
  req.data = data;
  req.overrides = {"data.eos_id=63", "data.seq_len=16"};
  req.micro_batch = r.micro_batch;
  req.global_batch = global;
  req.batches = r.batches;
  EXPECT_EQ(evaluate_checkpoint(req).loss, r.loss);  // the same batches, given by hand
  ++req.batches;
  echo::testing::expect_error([&] { evaluate_checkpoint(req); }, "the batches repeat them");
  // Chosen by hand, a repeating count is still the user's (the trainer's setting, warned).
  EXPECT_EQ(eval(hf, run.tp,
                 {"data.eos_id=63", "data.seq_len=16", "train.micro_batch=" + std::to_string(global),
                  "train.global_batch=" + std::to_string(global * r.dp), "train.eval_batches=20"},
                 data)
                .batches,
            20);
}

// A Hugging Face folder's config.json says nothing of the layout: a model whose heads the defaults'
// parallel.tp (4) does not divide used to be refused ("'parallel.tp' = 4 does not divide
// 'model.heads' = 2", pointing at a line of config.json) whatever --tp was.
TEST(Eval, HuggingFaceFolderWithHeadsTheDefaultTpDoesNotDivide) {
  const TrainedRun& run = trained_run();
  const std::string dir = run.dir + "/two_heads";
  const config::Config cfg = config::parse_config(
      config_text(run.dir),
      "eval_test.yaml",
      {"parallel.tp=" + std::to_string(run.tp), "run.out_dir=" + dir, "model.heads=2", "model.kv_heads=2",
       "model.head_dim=16", "train.steps=1", "train.eval_interval=0", "train.checkpoint_interval=1"},
      world_size());
  {
    const dist::World world = dist::World::create(cfg.parallel.tp);
    Trainer trainer(cfg, world, RunDirMode::overwrite);
    trainer.run();
  }
  const std::string ckpt = checkpoint_dir(dir, 1), hf = hf_folder_of(ckpt, run.dir + "/hf_two_heads");
  const std::vector<std::string> setting = {"data.eos_id=63", "data.seq_len=16", "train.micro_batch=2",
                                            "train.global_batch=8", "train.eval_batches=1"};
  const EvalReport r = eval(hf, run.tp, setting, run.dir + "/data/valid");
  EXPECT_EQ(r.kind, "hf");
  EXPECT_EQ(r.tp, run.tp);
  EXPECT_TRUE(std::isfinite(r.loss));
}

void expect_input_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Eval, BadInputsAreRefusedInWords) {
  const TrainedRun& run = trained_run();
  const std::string ckpt = checkpoint_dir(run.dir + "/run", 6);
  expect_input_error([&] { eval(run.dir + "/no_such_run", 1); }, "does not exist");
  // A symbolic link at the name is not "does not exist": it says what is wrong with it.
  const std::string loop = run.dir + "/loop", dangling = run.dir + "/dangling";
  if (world_rank() == 0) {
    fs::remove(loop);
    fs::remove(dangling);
    fs::create_symlink(loop, loop);
    fs::create_symlink(run.dir + "/no_such_run", dangling);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect_input_error([&] { eval(loop, 1); },
                     "checkpoint '" + loop + "' cannot be resolved: it is a symbolic-link loop");
  expect_input_error([&] { eval(dangling, 1); }, "checkpoint '" + dangling + "' cannot be resolved: it is a symbolic "
                                                 "link to '" + run.dir + "/no_such_run', which does not exist");
  if (world_rank() == 0) fs::create_directories(run.dir + "/empty_run/checkpoints");
  MPI_Barrier(MPI_COMM_WORLD);
  expect_input_error([&] { eval(run.dir + "/empty_run", 1); }, "no complete checkpoint");
  expect_input_error([&] { eval(ckpt, 3); }, "does not divide model.heads = 4");
  expect_input_error([&] { eval(ckpt, 1, {}, run.dir + "/data/missing"); }, "missing.idx does not exist");
  // A dataset with an id beyond model.vocab_size = 64.
  const std::string bad =
      echo::testing::make_scratch_datasets("echo_eval", "badvocab", 5, {"valid"}, [](int d, auto& doc) {
        if (d == 3) doc[1] = 64;
      });
  expect_input_error([&] { eval(ckpt, 1, {}, bad + "/data/valid"); }, "token id 64 is out of range [0, 64)");
  expect_input_error([&] { eval(ckpt, 1, {"comm.bits=3"}); }, "comm.bits");
  // The layout comes from --tp: a --set of it was silently ignored.
  expect_input_error([&] { eval(ckpt, 1, {"parallel.tp=2"}); },
                     "--set parallel.tp: echo_eval takes its layout from --tp");
  // More batches than the data holds would wrap around and count sequences twice (it reported
  // more tokens than the data has). The largest count that fits is named, and it runs.
  EvalRequest req;
  req.checkpoint = ckpt;
  req.tp = run.tp;
  req.batches = 100000;
  const std::string too_many = echo::testing::error_of([&] { evaluate_checkpoint(req); });
  EXPECT_NE(too_many.find("100000 global batches of 8 sequences read 800000 sequences of 16 tokens, but the "
                          "evaluation data '" + run.dir + "/data/valid' holds "),
            std::string::npos)
      << too_many;
  const std::string advice = "set --batches to ";
  const size_t at = too_many.find(advice);
  ASSERT_NE(at, std::string::npos) << too_many;
  req.batches = std::stoi(too_many.substr(at + advice.size()));
  ASSERT_GT(req.batches, 2);
  EXPECT_EQ(evaluate_checkpoint(req).tokens, int64_t{req.batches} * 8 * 16);
  ++req.batches;
  EXPECT_NE(echo::testing::error_of([&] { evaluate_checkpoint(req); }), echo::testing::kNoErrorThrown);
  // Not one global batch fits: said so (the count that fits would be 0, itself refused).
  req.batches = 1;
  req.global_batch = 8192;
  req.micro_batch = 4096;
  const std::string too_big = echo::testing::error_of([&] { evaluate_checkpoint(req); });
  EXPECT_NE(too_big.find("the data holds fewer sequences than one global batch of 8192"), std::string::npos)
      << too_big;
  // --micro-batch 2^30 alone over dp = world ranks: micro_batch x dp overflowed an int and the
  // split check divided by zero (SIGFPE at dp = 4). Now the range check names the flag.
  req.tp = 1;
  req.global_batch = 0;
  req.micro_batch = 1 << 30;
  expect_input_error([&] { evaluate_checkpoint(req); }, "'train.micro_batch' = 1073741824 must be <= 65536");
  // A batch one rank cannot hold (65536 x 16384 tokens: the evaluation plan counts about 2.2 TiB
  // of activations per rank, where the config's own estimate stays under its 1 TiB bound) is refused
  // before the first tensor with the memory plan, as the trainer refuses it; it ended in
  // std::bad_alloc. No host has that much memory to spare, so the refusal does not depend on it.
  const std::string long_data =
      echo::testing::make_scratch_datasets("echo_eval", "long", 6, {"valid"}, [](int d, auto& doc) {
        if (d == 0) doc.resize(40000, 5);  // two samples of 16385 tokens
      });
  req.tp = run.tp;
  req.micro_batch = 65536;
  req.seq_len = 16384;
  req.data = long_data + "/data/valid";
  req.batches = 0;  // the recorded train.eval_batches: a repeat is warned about, not refused
  expect_input_error([&] { evaluate_checkpoint(req); }, "evaluating this model");
  // In echo_eval's terms: its options, not the config keys it refuses (--set parallel.tp).
  expect_input_error([&] { evaluate_checkpoint(req); },
                     "; a smaller --micro-batch or --seq-len, or a larger --tp, or fewer ranks per node, needs less");
}

// --config's parallel.tp is not the layout (--tp is): a file whose parallel.tp does not divide the
// heads, or one without a parallel: section whose default 4 does not, was refused for a value
// echo_eval never uses.
TEST(Eval, AConfigFilesParallelTpIsNotTheLayout) {
  const TrainedRun& run = trained_run();
  const std::string ckpt = checkpoint_dir(run.dir + "/run", 6);
  const std::string path = run.dir + "/tp3.yaml";
  if (world_rank() == 0) std::ofstream(path) << config_text(run.dir) << "parallel: {tp: 3}\n";
  MPI_Barrier(MPI_COMM_WORLD);
  EvalRequest req;
  req.checkpoint = ckpt;
  req.config_path = path;
  req.tp = run.tp;
  const EvalReport report = evaluate_checkpoint(req);
  EXPECT_EQ(report.loss, eval(ckpt, run.tp).loss);
}

// A Hugging Face folder's EOS comes from its files (train/hf_config.h) or is refused; before, the
// folder below (its config.json has no eos_token_id) was evaluated with echo's default 151643,
// out of range here, and silently wrong for a large vocabulary. --set data.eos_id wins.
TEST(Eval, HuggingFaceFolderEosComesFromItsFilesOrIsRefused) {
  const TrainedRun& run = trained_run();
  const std::string ckpt = checkpoint_dir(run.dir + "/run", 6);
  const std::string hf = hf_folder_of(ckpt, run.dir + "/hf_eos");
  // Our checkpoint's config.json names the EOS it was trained with.
  const std::vector<std::string> layout = {"data.seq_len=16", "train.micro_batch=2", "train.global_batch=8",
                                           "train.eval_batches=2"};
  EXPECT_EQ(eval(hf, run.tp, layout, run.dir + "/data/valid").config.data.eos_id, 63);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {  // a Hugging Face config.json that does not
    std::ifstream in(hf + "/config.json");
    auto j = nlohmann::json::parse(in);
    j.erase("eos_token_id");
    std::ofstream(hf + "/config.json") << j.dump(2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<std::string> setting = {"run.seed=7",           "data.seq_len=16",      "train.micro_batch=2",
                                      "train.global_batch=8", "train.eval_batches=2", "comm.allreduce=echo",
                                      "comm.group_size=32"};
  const std::string valid = run.dir + "/data/valid";
  expect_input_error([&] { eval(hf, run.tp, setting, valid); },
                     "Hugging Face folder '" + hf + "' does not say which token is the EOS");
  expect_input_error([&] { eval(hf, run.tp, setting, valid); }, "pass --set data.eos_id=N");
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::ofstream(hf + "/generation_config.json") << R"({"eos_token_id": [63, 63]})";
  MPI_Barrier(MPI_COMM_WORLD);
  const EvalReport r = eval(hf, run.tp, setting, valid);
  EXPECT_EQ(r.config.data.eos_id, 63);
  EXPECT_EQ(r.loss, eval(ckpt, run.tp).loss);
  setting.push_back("data.eos_id=62");
  EXPECT_EQ(eval(hf, run.tp, setting, valid).config.data.eos_id, 62);
}

// The evaluation data's sidecar (data/dataset_meta.h) against the checkpoint's data.eos_id and
// model.vocab_size: another EOS or a larger vocabulary is refused naming both and the fix; a
// matching sidecar changes nothing; without one the data is evaluated as before.
TEST(Eval, TheDataSidecarIsCheckedAgainstTheCheckpoint) {
  const TrainedRun& run = trained_run();
  const std::string ckpt = checkpoint_dir(run.dir + "/run", 6);
  const std::string dir = echo::testing::make_scratch_datasets("echo_eval", "meta", 5, {"valid"});
  const std::string data = dir + "/data/valid";
  const double unchecked = eval(ckpt, run.tp, {}, data).loss;  // no sidecar: accepted
  echo::testing::write_scratch_sidecar(data, 64, 62);
  expect_input_error([&] { eval(ckpt, run.tp, {}, data); },
                     "'data.eos_id' = 63 (data.eos_id of the checkpoint's recorded config) is not the EOS the data "
                     "was prepared with, 62 (special added token \"<|test|>\")");
  expect_input_error([&] { eval(ckpt, run.tp, {}, data); }, "pass --set data.eos_id=62");
  expect_input_error([&] { eval(ckpt, run.tp, {}, data); }, "evaluation data (" + data + ") was prepared with");
  EXPECT_EQ(eval(ckpt, run.tp, {"data.eos_id=62"}, data).config.data.eos_id, 62);
  echo::testing::write_scratch_sidecar(data, 65, 63);
  expect_input_error([&] { eval(ckpt, run.tp, {}, data); }, "'model.vocab_size' = 64 is smaller");
  echo::testing::write_scratch_sidecar(data, 64, 63);
  EXPECT_EQ(eval(ckpt, run.tp, {}, data).loss, unchecked);

  // The same documents stored with their EOS are packed as stored: the same stream, so bit for
  // bit the same loss. Without a sidecar (Megatron's --append-eod) because every checked document
  // ends in the EOS; with one because it says append_eos. A sidecar that says the EOS was not
  // stored is taken at its word: a second EOS after each document, and the loss moves.
  const std::string stored_dir = echo::testing::make_scratch_datasets(
      "echo_eval", "stored", 5, {"valid"}, [](int, std::vector<int32_t>& doc) { doc.push_back(63); });
  const std::string stored = stored_dir + "/data/valid";
  EXPECT_EQ(eval(ckpt, run.tp, {}, stored).loss, unchecked);
  echo::testing::write_scratch_sidecar(stored, 64, 63, std::string(64, 'a'), /*append_eos=*/true);
  EXPECT_EQ(eval(ckpt, run.tp, {}, stored).loss, unchecked);
  echo::testing::write_scratch_sidecar(stored, 64, 63, std::string(64, 'a'), /*append_eos=*/false);
  EXPECT_NE(eval(ckpt, run.tp, {}, stored).loss, unchecked);
}

// --dump-batch writes rank 0's last micro-batch as .npy (2, micro_batch, seq_len) int32; a write
// the disk refuses (/dev/full: the error shows only when the buffer is written out) is a run
// error naming the file, where it used to exit 0 with an empty file.
TEST(Eval, DumpBatchWritesTheBatchOrSaysItCouldNot) {
  const TrainedRun& run = trained_run();
  const std::string ckpt = checkpoint_dir(run.dir + "/run", 6);
  EvalRequest req;
  req.checkpoint = ckpt;
  req.tp = run.tp;
  // NOTE: the MPI transport: the write fails on rank 0 alone, and a rank unwinding an error does
  // not free the shared-memory window collectively (echo_eval's main aborts the job instead).
  req.overrides = {"comm.transport=mpi"};
  req.dump_batch = run.dir + "/batch.npy";
  evaluate_checkpoint(req);
  if (world_rank() == 0) {
    std::ifstream in(req.dump_batch, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 10u);
    EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
    const size_t header = 10 + static_cast<uint8_t>(bytes[8]) + 256 * static_cast<uint8_t>(bytes[9]);
    EXPECT_NE(bytes.find("'shape': (2, 2, 16)"), std::string::npos);
    EXPECT_EQ(bytes.size(), header + 2 * 2 * 16 * 4);
  }
  // An output never overwrites what is evaluated (a --dump-batch over the model it evaluates
  // once replaced model.safetensors with the .npy): refused on every rank, before any work.
  const std::string model_file = ckpt + "/model.safetensors", data_idx = run.dir + "/data/valid.idx";
  const std::string model_before = echo::testing::read_file(model_file);
  req.dump_batch = ckpt + "/./model.safetensors";
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { evaluate_checkpoint(req); }),
            "input: --dump-batch " + req.dump_batch + " is a file of the checkpoint folder '" + ckpt +
                "' being evaluated: it would be overwritten; write the output elsewhere");
  req.dump_batch = run.dir + "/batch.npy";
  req.json_out = run.dir + "/data/../data/valid.idx";
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { evaluate_checkpoint(req); }),
            "input: --json " + req.json_out + " is '" + data_idx +
                "', which this evaluation reads: it would be overwritten; write the output elsewhere");
  req.json_out = req.dump_batch;
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { evaluate_checkpoint(req); }),
            "input: --json " + req.json_out + " and --dump-batch " + req.dump_batch + " are the same file");
  // Nor a file another run, checkpoint or dataset needs (a sibling checkpoint's weights, the run's
  // metrics, the training set were once replaced): refused whatever folder is evaluated.
  if (world_rank() == 0) std::ofstream(run.dir + "/other.safetensors") << "weights";
  MPI_Barrier(MPI_COMM_WORLD);
  const std::pair<std::string, std::string> needed[] = {
      {run.dir + "/other.safetensors", "a weights file"},
      {run.dir + "/run/metrics.jsonl", "a file of the training run in '" + run.dir + "/run'"},
      {run.dir + "/data/train.bin", "a file of the dataset '" + run.dir + "/data/train'"},
      {run.dir + "/data/train.idx", "a file of the dataset '" + run.dir + "/data/train'"},
  };
  for (const auto& [out, why] : needed) {
    req.json_out = out;
    EXPECT_EQ(echo::testing::kind_and_what_of([&] { evaluate_checkpoint(req); }),
              "input: --json " + out + " is " + why + ": it would be overwritten; write the output elsewhere");
  }
  EXPECT_EQ(echo::testing::read_file(run.dir + "/other.safetensors"), "weights");
  req.json_out.clear();
  EXPECT_EQ(echo::testing::read_file(model_file), model_before);
  MPI_Barrier(MPI_COMM_WORLD);
  req.dump_batch = "/dev/full";
  const std::string error = echo::testing::kind_and_what_of([&] { evaluate_checkpoint(req); });
  if (world_rank() == 0) {
    EXPECT_EQ(error.rfind("run: --dump-batch /dev/full: write failed: No space left on device", 0), 0u) << error;
  } else {
    EXPECT_EQ(error, echo::testing::kNoErrorThrown);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // An output rank 0 cannot write (its folder does not exist, or is a file) is refused on every
  // rank before the evaluation; it used to fail only after it, and the result was lost.
  const std::string by_rank0 =
      world_size() > 1 ? fmt::format(" (reported by rank 0 of {})", world_size()) : std::string();
  req.dump_batch.clear();
  req.json_out = run.dir + "/no/such/folder/eval.json";
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { evaluate_checkpoint(req); }),
            "input: --json " + req.json_out + " cannot be written: its folder '" + run.dir +
                "/no/such/folder' does not exist (checked before evaluating, so no result is lost)" + by_rank0);
  req.json_out.clear();
  req.dump_batch = model_file + "/batch.npy";
  EXPECT_EQ(echo::testing::kind_and_what_of([&] { evaluate_checkpoint(req); }),
            "input: --dump-batch " + req.dump_batch + " cannot be written: its folder '" + model_file +
                "' is not a folder (checked before evaluating, so no result is lost)" + by_rank0);
  EXPECT_FALSE(fs::exists(run.dir + "/no"));
}

// An EOS no one chose (a Hugging Face folder's files, a --config without data.eos_id) is the one
// the data was prepared with when its sidecar says (Qwen3's chat config.json names <|im_end|>,
// echo_prep's data is split by <|endoftext|>); without a sidecar, the checkpoint's, never echo's
// default 151643 (out of range here: before, a --config without data.eos_id was refused for it).
// A chosen one (--set, a config that sets it, our recorded config) is checked, not replaced.
TEST(Eval, AnUnchosenEosIsTheDatasThenTheCheckpoints) {
  const TrainedRun& run = trained_run();
  const std::string ckpt = checkpoint_dir(run.dir + "/run", 6);
  const std::string dir = echo::testing::make_scratch_datasets("echo_eval", "settle", 9, {"valid"});
  const std::string data = dir + "/data/valid", hf = hf_folder_of(ckpt, dir + "/hf");  // eos_token_id 63
  const std::string with_eos = dir + "/with_eos.yaml", without_eos = dir + "/without_eos.yaml";
  if (world_rank() == 0) {
    std::string yaml = config_text(run.dir);
    std::ofstream(with_eos) << yaml;
    const std::string key = ", eos_id: 63";
    const size_t at = yaml.find(key);
    EXPECT_NE(at, std::string::npos);  // not ASSERT: the other ranks wait at the barrier below
    if (at != std::string::npos) yaml.erase(at, key.size());
    std::ofstream(without_eos) << yaml;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  auto eval_with = [&](const std::string& checkpoint, const std::string& config, std::vector<std::string> set) {
    EvalRequest req;
    req.checkpoint = checkpoint;
    req.config_path = config;
    req.tp = run.tp;
    req.overrides = std::move(set);
    req.data = data;
    return evaluate_checkpoint(req);
  };
  // The trained run's settings, which a Hugging Face folder does not carry.
  const std::vector<std::string> layout = {"run.seed=7",           "data.seq_len=16",      "train.micro_batch=2",
                                           "train.global_batch=8", "train.eval_batches=2", "comm.allreduce=echo",
                                           "comm.group_size=32"};
  EXPECT_EQ(eval_with(hf, "", layout).config.data.eos_id, 63);  // no sidecar: the folder's config.json
  EXPECT_EQ(eval_with(ckpt, without_eos, {}).config.data.eos_id, 63);  // no sidecar: the recorded config's

  echo::testing::write_scratch_sidecar(data, 64, 62);
  const EvalReport from_data = eval_with(hf, "", layout);
  EXPECT_EQ(from_data.config.data.eos_id, 62);
  EXPECT_EQ(from_data.loss, eval_with(ckpt, "", {"data.eos_id=62"}).loss);
  EXPECT_EQ(eval_with(ckpt, without_eos, {}).config.data.eos_id, 62);
  expect_input_error([&] { eval_with(ckpt, with_eos, {}); },
                     "'data.eos_id' = 63 (data.eos_id of the config '" + with_eos + "') is not the EOS the data");
  expect_input_error([&] { eval_with(ckpt, "", {}); }, "(data.eos_id of the checkpoint's recorded config)");
  expect_input_error([&] { eval_with(hf, "", {"data.eos_id=63", "data.seq_len=16"}); }, "(--set data.eos_id)");
}

// A run trained at dp = 1 with micro-batch = global batch (8), evaluated at tp = 1 over every rank:
// 8 x dp does not split the global batch, so the micro-batch is cut to 8 / dp (the sequences are
// the same, so is the loss); named options keep their refusal.
TEST(Eval, ARecordedMicroBatchThatDoesNotSplitAtThisDpIsCut) {
  if (world_size() < 2) GTEST_SKIP() << "needs dp > 1";
  const std::string dir = echo::testing::make_scratch_datasets("echo_eval", "whole", 43, {"train", "valid"});
  const config::Config cfg = config::parse_config(
      config_text(dir), "eval_test.yaml",
      {"parallel.tp=" + std::to_string(world_size()), "train.micro_batch=8", "train.eval_interval=0"}, world_size());
  {
    const dist::World world = dist::World::create(cfg.parallel.tp);
    Trainer trainer(cfg, world, RunDirMode::fresh);
    trainer.run();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string ckpt = checkpoint_dir(dir + "/run", 6);
  const EvalReport whole = eval(ckpt, world_size(), {"comm.allreduce=exact_fp32"});
  EXPECT_EQ(whole.micro_batch, 8);
  const EvalReport cut = eval(ckpt, 1, {"comm.allreduce=exact_fp32"});
  EXPECT_EQ(cut.dp, world_size());
  EXPECT_EQ(cut.micro_batch, 8 / world_size());
  EXPECT_EQ(cut.tokens, whole.tokens);
  EXPECT_NEAR(cut.loss, whole.loss, 1e-5 * whole.loss);
  EvalRequest req;
  req.checkpoint = ckpt;
  req.tp = 1;
  req.micro_batch = 8;
  req.global_batch = 8;
  expect_input_error([&] { evaluate_checkpoint(req); }, "'train.global_batch' = 8 is not a multiple of");
}

}  // namespace
}  // namespace echo::train
