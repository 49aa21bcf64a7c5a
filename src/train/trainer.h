// The training loop (docs/design.md §12): data -> micro-batches -> forward/backward with the
// configured TP all-reduce -> DP average -> global-norm clip -> AdamW -> metrics, eval and
// checkpoints, resumable bit for bit, stoppable by SIGTERM/SIGINT.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "comm/all_reduce.h"
#include "core/config/config.h"
#include "data/data_loader.h"
#include "data/indexed_dataset.h"
#include "dist/world.h"
#include "model/memory_plan.h"
#include "model/qwen3_model.h"
#include "train/adamw.h"
#include "train/gradients.h"
#include "train/metrics.h"
#include "train/run_dir.h"

namespace echo::train {

class StopSignal;

struct TrainResult {
  int64_t steps_done = 0;      // optimizer steps completed, counting those before a resume
  int64_t steps_run = 0;       // steps this invocation trained (0: last_loss means nothing)
  double last_loss = 0;
  bool stopped_by_signal = false;
};

class Trainer {
 public:
  Trainer(const config::Config& cfg, const dist::World& world, RunDirMode mode);
  // Trains to train.steps, or stops (with a checkpoint) after stop_after steps of this
  // process's run when stop_after > 0, as a SIGTERM would.
  TrainResult run(int64_t stop_after = 0);
  // Called on every rank after each checkpoint this run saves, with its step. Tests use it to
  // deliver a signal while a save is under way.
  void after_each_save(std::function<void(int64_t step)> hook) { after_save_ = std::move(hook); }
  // Called on every rank after each micro-batch's forward and backward, with the step being
  // trained (1-based) and the micro-batch (0-based). Tests use it to deliver a signal mid-step.
  void after_each_micro_batch(std::function<void(int64_t step, int micro)> hook) { after_micro_ = std::move(hook); }
  // The step of the newest checkpoint in run.out_dir, this run's or the one it resumed from; -1
  // when there is none (train.checkpoint_interval 0 and no signal).
  int64_t last_checkpoint_step() const { return last_saved_step_; }

 private:
  // The step's mean loss over the DP ranks; none when `abandon` (asked after each micro-batch but
  // the last) said to stop: the step is then dropped, weights and optimizer untouched.
  std::optional<double> train_step(int64_t step, bool telemetry, const std::function<bool()>& abandon);
  // The validation loss (NaN without validation data); none when a stop was asked during it
  // (`stop`, checked after each batch).
  std::optional<double> evaluate(const StopSignal& stop);
  // Rank 0: the val_loss line of metrics.jsonl and the progress line, the latter followed by note.
  void record_eval(int64_t step, double val_loss, std::string_view note = {});
  void open_data();
  void save(int64_t steps_done);
  // Rank 0, before each line it writes to the run directory: throws when run.out_dir is no longer
  // the directory locked at start-up (RunDirLock::lost).
  void check_run_dir_kept() const;
  // At the end of a run (finished or stopped): the metrics file is still the one written (MetricsLog::why_lost).
  void check_metrics_kept() const;
  void log_telemetry(int64_t step);
  // "the last good checkpoint <dir> is kept", for the messages of a step that went bad.
  std::string kept_checkpoint() const;

  config::Config cfg_;
  const dist::World& world_;
  bool stopped_in_start_up_ = false;  // a signal arrived before start-up ended: nothing was written
  // Resumed from a step whose evaluation a stop abandoned: run() does that evaluation first.
  bool eval_owed_ = false;
  RunDirLock run_lock_;  // rank 0: no other echo_train writes this run while this one lives
  model::ModelShape shape_;
  model::MemoryPlan memory_plan_;  // per rank, checked at start-up and logged against the peak
  std::unique_ptr<backend::Backend> backend_;  // of run.device; everything below computes on it
  std::unique_ptr<comm::AllReduce> blocks_, edge_;
  std::unique_ptr<model::CommTpOps> tp_ops_;
  std::unique_ptr<model::Qwen3Model<float>> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<GradientSync> grad_sync_;  // after backend_: NCCL needs the device chosen
  std::optional<data::IndexedDataset> train_data_, valid_data_;
  std::optional<data::DataLoader> train_loader_, valid_loader_;
  MetricsLog metrics_;
  DevicePeak peak_;
  int num_micro_ = 1;
  int64_t start_step_ = 0;
  // Training samples read so far, counting those before a resume: where the next step's global
  // batch starts (DataLoader::micro_batch), saved in each checkpoint.
  uint64_t consumed_samples_ = 0;
  uint64_t train_data_hash_ = 0;  // data.train's content (data/content_hash.h), recorded in each checkpoint
  int64_t last_saved_step_ = -1;  // the newest checkpoint of this run (or resumed from); -1: none
  int64_t num_params_ = 0;
  std::vector<int32_t> tokens_, targets_;
  std::function<void(int64_t)> after_save_;
  std::function<void(int64_t, int)> after_micro_;
};

}  // namespace echo::train
