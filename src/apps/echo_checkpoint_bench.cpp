// echo_checkpoint_bench: wall time of save_checkpoint and load_checkpoint (weights and moments) of
// a config's model on the CPU backend, tp = world size (a program, not a test). The files stay in
// the page cache between iterations, so the times are the CPU side (gather, write, hash, read),
// not the disk's. The checkpoints go into a fresh directory it creates inside --dir
// (<dir>/echo_checkpoint_bench.XXXXXX) and removes at the end; nothing else in --dir is touched,
// so --dir may be any directory, a training run's included.
//   mpirun -np 2 echo_checkpoint_bench configs/model_bench.yaml --dir /tmp/ckbench --iters 5
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/bench/bench_config.h"
#include "apps/bench/machine.h"
#include "apps/bench/scratch_dir.h"
#include "apps/bench/timing.h"
#include "apps/mpi_command_line.h"
#include "backend/backend.h"
#include "core/config/config.h"
#include "core/error.h"
#include "dist/guarded_main.h"
#include "dist/world.h"
#include "model/model_shape.h"
#include "model/parameters.h"
#include "model/tp_plan.h"
#include "train/adamw.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checksums.h"
#include "train/checkpoint/safetensors.h"
#include "train/stop_signal.h"

namespace echo {
namespace {

int bench_main(int argc, char** argv) {
  std::string path, dir = std::filesystem::temp_directory_path().string();
  std::vector<std::string> overrides;
  int iters = 5, warmup = 1;
  CLI::App app{"echo_checkpoint_bench: save and load time of a training checkpoint"};
  app.add_option("config", path, "YAML config (its model section is used)")->required();
  app.add_option("--set", overrides, "override a key, e.g. --set model.layers=8");
  app.add_option("--dir", dir,
                 "directory to write into: the checkpoints go into a new echo_checkpoint_bench.XXXXXX in it, "
                 "removed at the end (--dir is created if missing; nothing else in it is touched)")
      ->capture_default_str();
  app.add_option("--iters", iters, "timed saves and loads (>= 1)")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed ones first (>= 0)")->capture_default_str();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (const auto status = apps::parse_on_every_rank(app, argc, argv)) return *status;
  ECHO_INPUT_CHECK(iters >= 1, "--iters must be at least 1 (got {})", iters);
  ECHO_INPUT_CHECK(warmup >= 0, "--warmup must be 0 or more (got {})", warmup);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Before the scratch directory: a refused config must leave nothing behind.
  const config::Config cfg = bench::load_with_settings("echo_checkpoint_bench", path, overrides,
                                                       {{"parallel.tp", size, "the number of ranks"}}, size);
  // NOTE: save_checkpoint prunes every other checkpoint of its run directory, so that directory
  // must be one this program made: given a training run as --dir, it would delete the run's.
  const bench::ScratchDir scratch(dir, "echo_checkpoint_bench", "--dir", MPI_COMM_WORLD);
  // A stop signal (Ctrl-C, kill, scripts/mpirun.sh's SIGUSR1) ends the bench between two saves or
  // loads, agreed on every rank, so ScratchDir removes its gigabytes of checkpoints while every
  // rank is alive (a rank that died of the signal made mpirun kill the others mid-removal).
  const train::StopSignal stop;
  struct Stopped {};
  const bench::MachineInfo machine = bench::describe_machine();
  dist::World world = dist::World::create(size);
  const model::ModelShape shape = model::make_model_shape(cfg.model, size, world.layout.tp_rank);
  const model::Qwen3Plan plan = model::make_qwen3_plan(shape);
  auto be = backend::make_backend(Device::cpu);
  model::ParameterSet<float> params(plan, shape, *be);
  params.init(cfg.run.seed);
  train::AdamW opt(params);
  // Moments that are not zero (a real run's are not): copies of the weights.
  int64_t numel = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    opt.exp_avg(i).copy_from(params[i].value);
    auto v = host_span<float>(opt.exp_avg_sq(i));
    const auto w = params[i].host_value();
    for (size_t k = 0; k < v.size(); ++k) v[k] = w[k] * w[k];
    numel += params[i].spec->local_numel(1);
  }
  const train::CheckpointMeta meta{1,           1, cfg.run.seed, size, 1, "", std::nullopt,
                                   std::nullopt};  // step 1, at data position 1, as the trainer writes
  const auto stop_point = [&] {
    if (stop.requested(world.world)) throw Stopped{};
  };
  const std::string ckpt = train::checkpoint_dir(scratch.path(), 1);
  bench::LatencyStats save, load;
  try {
    save = bench::time_collective(world.world.get(), warmup, iters, stop_point,
                                  [&] { train::save_checkpoint(scratch.path(), params, opt, meta, world, 1); });
    load = bench::time_collective(world.world.get(), warmup, iters, stop_point,
                                  [&] { train::load_checkpoint(ckpt, params, &opt, world); });
  } catch (const Stopped&) {
    if (rank == 0)
      std::fprintf(stderr, "echo_checkpoint_bench: stopped on %s before the measurement ended; removing %s\n",
                   stop.what().c_str(), scratch.path().c_str());
    return 1;
  }
  // The checksums' share of that: one rank hashing both safetensors files whole (warm cache), what
  // the writer adds to a save and a one-rank load to a load (P ranks share it).
  MPI_Barrier(MPI_COMM_WORLD);
  double hash_ms = 0;
  if (rank == 0) {
    const double t0 = MPI_Wtime();
    for (const char* rel : {"model.safetensors", "trainer/optimizer.safetensors"})
      train::checksum_safetensors(train::SafetensorsFile((std::filesystem::path(ckpt) / rel).string(),
                                                         data::MappedFile::Access::whole_file));
    hash_ms = (MPI_Wtime() - t0) * 1e3;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::error_code ec;
    const auto model_bytes = std::filesystem::file_size(std::filesystem::path(ckpt) / "model.safetensors", ec);
    std::printf("%s", bench::machine_header(machine).c_str());
    std::printf("echo_checkpoint_bench: layers=%lld hidden=%lld ffn=%lld vocab=%lld params=%lld (%.1f MB model, "
                "%.1f MB moments) tp=%d iters=%d\n",
                static_cast<long long>(shape.layers), static_cast<long long>(shape.hidden),
                static_cast<long long>(shape.ffn), static_cast<long long>(shape.vocab), static_cast<long long>(numel),
                model_bytes / 1e6, 2 * model_bytes / 1e6, size, iters);
    std::printf("save median %.1f ms (p10 %.1f, p90 %.1f)\n", save.median_us / 1e3, save.p10_us / 1e3,
                save.p90_us / 1e3);
    std::printf("load median %.1f ms (p10 %.1f, p90 %.1f)\n", load.median_us / 1e3, load.p10_us / 1e3,
                load.p90_us / 1e3);
    std::printf("XXH3-64 of both safetensors files on one rank: %.1f ms (%.1f GB/s)\n", hash_ms,
                3 * model_bytes / 1e6 / hash_ms);
  }
  return 0;
}

}  // namespace
}  // namespace echo

int main(int argc, char** argv) { return echo::dist::guarded_main(argc, argv, echo::bench_main); }
