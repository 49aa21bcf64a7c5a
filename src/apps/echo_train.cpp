// echo_train: train a Qwen3 model from a YAML config.
//   mpirun -np 2 echo_train configs/quickstart.yaml [--set optim.lr=3e-4 ...] [--resume | --overwrite]
#include <CLI/CLI.hpp>
#include <mpi.h>

#include "apps/mpi_command_line.h"
#include "core/config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/same_file.h"
#include "dist/guarded_main.h"
#include "dist/world.h"
#include "train/checkpoint/checkpoint.h"
#include "train/run_dir.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace echo {
namespace {

int train_main(int argc, char** argv) {
  std::string path;
  std::vector<std::string> overrides;
  bool resume = false, overwrite = false;
  CLI::App app{"echo_train: Qwen3 training with Echo 4-bit tensor-parallel all-reduce"};
  app.add_option("config", path, "YAML config (see configs/default.yaml for every key)")->required();
  app.add_option("--set", overrides, "override a key: --set optim.lr=3e-4 (repeatable)");
  auto* r = app.add_flag("--resume", resume, "continue the run in run.out_dir from its latest checkpoint");
  app.add_flag("--overwrite", overwrite, "replace the run in run.out_dir")->excludes(r);
  int rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (const auto status = apps::parse_on_every_rank(app, argc, argv)) return *status;
  const config::Config cfg = config::load_config(path, overrides, world_size);
  // The run writes its effective config to run.out_dir/config.yaml. A --resume of the run there
  // may read the one it wrote (rewriting it only adds the --set values); any other start would
  // replace a config the user wrote there, comments and all.
  ECHO_INPUT_CHECK((resume && train::holds_run(cfg.run.out_dir)) ||
                       !same_file(path, train::run_file(cfg.run.out_dir, "config.yaml")),
                   "the config {} is {}/config.yaml, where the run writes its effective config: it would be "
                   "replaced; keep the config outside run.out_dir",
                   path, cfg.run.out_dir);
  const dist::World world = dist::World::create(cfg.parallel.tp);
  const auto mode = resume ? train::RunDirMode::resume : overwrite ? train::RunDirMode::overwrite : train::RunDirMode::fresh;
  train::Trainer trainer(cfg, world, mode);
  const train::TrainResult result = trainer.run();
  if (rank == 0) {
    const char* how = result.stopped_by_signal ? "stopped" : "done";
    // A run that trained no step has no loss to report (a resume past train.steps, a signal in start-up).
    if (result.steps_run == 0)
      log::get("train")->info("{} at step {} without training a step", how, result.steps_done);
    else
      log::get("train")->info(
          "{} at step {}: loss {:.4f}; metrics in {}, {}", how, result.steps_done, result.last_loss,
          train::run_file(cfg.run.out_dir, "metrics.jsonl"),
          trainer.last_checkpoint_step() < 0
              ? std::string("no checkpoint saved (train.checkpoint_interval is 0)")
              : "last checkpoint " + train::checkpoint_dir(cfg.run.out_dir, trainer.last_checkpoint_step()));
  }
  return 0;
}

}  // namespace
}  // namespace echo

// A SIGTERM from the first instant of the process on is a stop request (train/stop_signal.h).
ECHO_CATCH_STOP_SIGNALS_FROM_EXEC();

int main(int argc, char** argv) {
  // Takes over the handlers installed at exec (before anything else, MPI_Init included): a SIGTERM
  // / SIGUSR1 during start-up (a scheduler's scancel, a user's kill) then stops the run cleanly
  // before its first step instead of killing the ranks. The trainer's loop shares this handler
  // and its flag.
  const echo::train::StopSignal stop;
  return echo::dist::guarded_main(argc, argv, echo::train_main);
}
