// echo_eval: perplexity of a checkpoint on an indexed dataset, at any tp and under any comm
// setting, so each row of the Echo paper's Table 4 is one command (docs/design.md §15a):
//   mpirun -np 4 echo_eval runs/x/checkpoints/step_00001000 --data data/demo/valid
//       --set comm.allreduce=echo --set comm.bits=4 [--set comm.compensator.enabled=false] [--json out.json]
// Prints "loss X ppl Y tokens Z" (rank 0). The loss is the trainer's val_loss for the same windows.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "core/atomic_file.h"
#include "apps/mpi_command_line.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/guarded_main.h"
#include "train/checkpoint_eval.h"

namespace echo {
namespace {

int eval_main(int argc, char** argv) {
  train::EvalRequest req;
  std::string json_path;
  CLI::App app{"echo_eval: perplexity of an echo or Hugging Face Qwen3 checkpoint on an indexed dataset"};
  app.add_option("checkpoint", req.checkpoint,
                 "run_dir/checkpoints/step_N, a run directory (its newest complete checkpoint) or a Hugging Face "
                 "Qwen3 folder (model.safetensors + config.json)")
      ->required();
  app.add_option("--data", req.data, "dataset prefix (PREFIX.bin/.idx); default: the config's data.valid");
  app.add_option("--config", req.config_path,
                 "YAML config to use instead of the checkpoint's recorded one (for a Hugging Face folder: instead "
                 "of its config.json)");
  app.add_option("--set", req.overrides, "override a config key: --set comm.bits=8 (repeatable)");
  const CLI::Option* tp_opt =
      app.add_option("--tp", req.tp, "tensor-parallel size (default: the number of ranks; dp = ranks / tp)");
  const CLI::Option* batches_opt =
      app.add_option("--batches", req.batches, "global batches to evaluate (default: train.eval_batches)");
  const CLI::Option* micro_opt =
      app.add_option("--micro-batch", req.micro_batch,
                     "sequences per forward (default: train.micro_batch; alone it also sets the global batch to "
                     "micro x dp)");
  const CLI::Option* global_opt =
      app.add_option("--global-batch", req.global_batch, "sequences per global batch (default: train.global_batch)");
  const CLI::Option* seq_opt = app.add_option("--seq-len", req.seq_len, "tokens per sequence (default: data.seq_len)");
  app.add_option("--json", json_path, "also write the result and its settings as one JSON object (rank 0)");
  app.add_option("--dump-batch", req.dump_batch,
                 "write the last evaluated micro-batch (tokens, targets) as an int32 .npy of shape (2, B, S) (rank 0)");
  int rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (const auto status = apps::parse_on_every_rank(app, argc, argv)) return *status;
  // 0 in EvalRequest means "the default"; a value given on the command line must be a real one.
  for (const auto& [opt, value] : {std::pair{tp_opt, req.tp},
                                   {batches_opt, req.batches},
                                   {micro_opt, req.micro_batch},
                                   {global_opt, req.global_batch},
                                   {seq_opt, req.seq_len}})
    ECHO_INPUT_CHECK(opt->count() == 0 || value > 0, "{} {}: must be positive", opt->get_name(), value);
  req.json_out = json_path;
  const train::EvalReport r = train::evaluate_checkpoint(req);
  if (rank != 0) return 0;
  std::printf("loss %.6f ppl %.4f tokens %lld\n", r.loss, r.ppl, static_cast<long long>(r.tokens));
  std::fflush(stdout);
  if (!json_path.empty()) {
    // Through a temp file renamed over it: a kill mid-write leaves no truncated result.
    write_file_atomic(json_path, train::eval_report_json(r) + "\n", "--json " + json_path);
  }
  return 0;
}

}  // namespace
}  // namespace echo

int main(int argc, char** argv) { return echo::dist::guarded_main(argc, argv, echo::eval_main); }
