// echo_model_bench: training-step throughput of the Qwen3 model (forward + backward, and the
// AdamW update with --adamw) on the backend of run.device, in tokens per second, for a config's
// model and all-reduce (a program, not a test).
//   mpirun -np 2 echo_model_bench configs/model_bench.yaml --batch 4 --seq 128 --iters 5 [--json out.json]
//   echo_model_bench configs/model_bench.yaml --set run.device=cuda --adamw   (one GPU)
// The TP group is the whole world (tp = world size); parallel.tp in the file is ignored. Each
// timed step ends with the backend synchronized, so device work is inside the time.
#include <fmt/format.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>

#include "apps/bench/bench_config.h"
#include "apps/bench/machine.h"
#include "apps/bench/timing.h"
#include "apps/mpi_command_line.h"
#include "apps/output_option.h"
#include "backend/backend.h"
#include "comm/make_all_reduce.h"
#include "core/atomic_file.h"
#include "core/config/config.h"
#include "core/error.h"
#include "core/same_file.h"
#include "dist/communicator.h"
#include "dist/guarded_main.h"
#include "dist/world.h"
#include "model/qwen3_model.h"
#include "train/adamw.h"
#include "train/step_memory.h"

namespace echo {
namespace {

int bench_main(int argc, char** argv) {
  std::string path;
  std::vector<std::string> overrides;
  int64_t batch = 4, seq = 128;
  int iters = 5, warmup = 1;
  std::string json_path;
  bool adamw = false;
  CLI::App app{"echo_model_bench: Qwen3 training-step tokens/s on the backend of run.device"};
  app.add_option("config", path, "YAML config (model and comm sections are used)")->required();
  app.add_option("--set", overrides, "override a key, e.g. --set comm.bits=8");
  // NOTE: numbers are checked below with messages in words, not by CLI11 validators.
  app.add_option("--batch", batch, "sequences per step (>= 1; sets train.micro_batch)")->capture_default_str();
  app.add_option("--seq", seq, "tokens per sequence (>= 1; sets data.seq_len)")->capture_default_str();
  app.add_option("--iters", iters, "timed steps (>= 1)")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps (>= 0)")->capture_default_str();
  app.add_option("--json", json_path, "also write the result as JSON to this file (rank 0)")
      ->check(echo::apps::writable_output());
  app.add_flag("--adamw", adamw, "time the AdamW update too (a whole training step without data loading)");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (const auto status = apps::parse_on_every_rank(app, argc, argv)) return *status;
  ECHO_INPUT_CHECK(json_path.empty() || !same_file(json_path, path),
                   "--json {} is the config file {}: the result would replace it", json_path, path);
  ECHO_INPUT_CHECK(batch >= 1, "--batch must be at least 1 (got {})", batch);
  ECHO_INPUT_CHECK(seq >= 1, "--seq must be at least 1 (got {})", seq);
  ECHO_INPUT_CHECK(iters >= 1, "--iters must be at least 1 (got {}): the median needs one timed step", iters);
  ECHO_INPUT_CHECK(warmup >= 0, "--warmup must be 0 or more (got {})", warmup);
  const bench::MachineInfo machine = bench::describe_machine();

  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  // The step's shape goes through the config's checks (INT8 limits, the 1 TiB bound) and the
  // trainer's memory plan, so a batch that cannot fit is refused by name, not by bad_alloc.
  const std::vector<bench::BenchSetting> settings = {{"parallel.tp", tp.size(), "the number of ranks"},
                                                     {"train.micro_batch", batch, "--batch"},
                                                     {"train.global_batch", batch, "--batch"},
                                                     {"data.seq_len", seq, "--seq"}};
  const config::Config cfg = bench::load_with_settings("echo_model_bench", path, overrides, settings, tp.size());
  const model::ModelShape shape = model::make_model_shape(cfg.model, tp.size(), tp.rank());
  const Device device = cfg.run.device == config::Device::cuda ? Device::cuda : Device::cpu;
  const dist::NodePlace node = dist::node_place(tp);
  auto be = backend::make_backend(device, {node.local_rank, node.local_size});  // chooses the rank's GPU first
  train::reserve_step_memory(cfg, shape, *be, model::Pass::training,
                             fmt::format("echo_model_bench --batch {} --seq {}", batch, seq),
                             "a smaller --batch, --seq or model");
  auto blocks = comm::make_all_reduce(cfg.comm, cfg.run.device, tp, static_cast<int>(shape.layers));
  auto edge = comm::make_edge_all_reduce(cfg.comm, tp);
  model::CommTpOps ops(tp, *blocks, edge.get(), cfg.run.device, comm::transport_options_from(cfg.comm));
  model::Qwen3Model<float> m(shape, ops, be.get());
  m.init_weights(cfg.run.seed);
  m.set_int8_linear(quant::Int8LinearConfig::from(cfg.linear, cfg.run.seed), cfg.linear.projection_list());

  std::mt19937_64 gen(cfg.run.seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(cfg.model.vocab_size - 1));
  std::vector<int32_t> tokens(batch * seq), targets(batch * seq);
  for (auto& t : tokens) t = id(gen);
  for (auto& t : targets) t = id(gen);
  const model::Batch b{tokens.data(), targets.data(), batch, seq};

  train::AdamW opt(m.params());
  const config::OptimConfig ocfg;
  const auto stats = bench::time_collective(
      tp.get(), warmup, iters, [] {},
      [&] {
        m.params().zero_grads();
        m.forward_backward(b);
        if (adamw) opt.step(m.params(), 1e-5, ocfg);
        be->synchronize();
      });
  if (rank == 0) {
    const double tokens_per_s = static_cast<double>(batch * seq) / (stats.median_us * 1e-6);
    std::printf("%s", bench::machine_header(machine).c_str());
    std::printf(
        "echo_model_bench: layers=%lld hidden=%lld ffn=%lld heads=%lld/%lld head_dim=%lld vocab=%lld tp=%d "
        "allreduce=%s backend=%s\n",
        static_cast<long long>(shape.layers), static_cast<long long>(shape.hidden), static_cast<long long>(shape.ffn),
        static_cast<long long>(shape.heads), static_cast<long long>(shape.kv_heads),
        static_cast<long long>(shape.head_dim), static_cast<long long>(shape.vocab), tp.size(), blocks->name().c_str(),
        be->name().c_str());
    std::printf("batch=%lld seq=%lld  step median %.1f ms (p10 %.1f, p90 %.1f)  %.0f tokens/s %s\n",
                static_cast<long long>(batch), static_cast<long long>(seq), stats.median_us / 1e3, stats.p10_us / 1e3,
                stats.p90_us / 1e3, tokens_per_s, adamw ? "forward+backward+adamw" : "forward+backward");
    if (!json_path.empty()) {
      const nlohmann::json out = {{"layers", shape.layers},
                                  {"hidden", shape.hidden},
                                  {"ffn", shape.ffn},
                                  {"heads", shape.heads},
                                  {"kv_heads", shape.kv_heads},
                                  {"head_dim", shape.head_dim},
                                  {"vocab", shape.vocab},
                                  {"tp", tp.size()},
                                  {"allreduce", blocks->name()},
                                  {"backend", be->name()},
                                  {"adamw", adamw},
                                  {"batch", batch},
                                  {"seq", seq},
                                  {"iters", iters},
                                  {"warmup", warmup},
                                  {"median_ms", stats.median_us / 1e3},
                                  {"p10_ms", stats.p10_us / 1e3},
                                  {"p90_ms", stats.p90_us / 1e3},
                                  {"tokens_per_s", tokens_per_s},
                                  {"machine", bench::to_json(machine)}};
      write_file_atomic(json_path, out.dump(2) + "\n", "--json " + json_path);
    }
  }
  return 0;
}

}  // namespace
}  // namespace echo

int main(int argc, char** argv) { return echo::dist::guarded_main(argc, argv, echo::bench_main); }
