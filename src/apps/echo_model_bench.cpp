// echo_model_bench: forward + backward throughput of the Qwen3 model on the CPU backend, in
// tokens per second, for a config's model and all-reduce (a program, not a test).
//   mpirun -np 2 echo_model_bench configs/model_bench.yaml --batch 4 --seq 128 --iters 5
// The TP group is the whole world (tp = world size); parallel.tp in the file is ignored.
#include <CLI/CLI.hpp>
#include <mpi.h>

#include <cstdio>
#include <random>

#include "apps/bench/timing.h"
#include "comm/make_all_reduce.h"
#include "core/config/config.h"
#include "dist/communicator.h"
#include "dist/guarded_main.h"
#include "model/qwen3_model.h"

namespace echo {
namespace {

int bench_main(int argc, char** argv) {
  std::string path;
  std::vector<std::string> overrides;
  int64_t batch = 4, seq = 128;
  int iters = 5, warmup = 1;
  CLI::App app{"echo_model_bench: Qwen3 forward+backward tokens/s on the CPU backend"};
  app.add_option("config", path, "YAML config (model and comm sections are used)")->required();
  app.add_option("--set", overrides, "override a key, e.g. --set comm.bits=8");
  app.add_option("--batch", batch, "sequences per step")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seq", seq, "tokens per sequence")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--iters", iters, "timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 1);
  }

  auto tp = dist::Communicator::borrow(MPI_COMM_WORLD);
  overrides.push_back("parallel.tp=" + std::to_string(tp.size()));
  const config::Config cfg = config::load_config(path, overrides, tp.size());
  const model::ModelShape shape = model::make_model_shape(cfg.model, tp.size(), tp.rank());
  auto blocks = comm::make_all_reduce(cfg.comm, cfg.run.device, tp, static_cast<int>(shape.layers));
  auto edge = comm::make_edge_all_reduce(cfg.comm, tp);
  model::CommTpOps ops(tp, *blocks, edge.get());
  model::Qwen3Model<float> m(shape, ops);
  m.init_weights(cfg.run.seed);
  m.set_int8_linear(quant::Int8LinearConfig::from(cfg.linear, cfg.run.seed), cfg.linear.projection_list());

  std::mt19937_64 gen(cfg.run.seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(cfg.model.vocab_size - 1));
  std::vector<int32_t> tokens(batch * seq), targets(batch * seq);
  for (auto& t : tokens) t = id(gen);
  for (auto& t : targets) t = id(gen);
  const model::Batch b{tokens.data(), targets.data(), batch, seq};

  const auto stats = bench::time_collective(tp.get(), warmup, iters, [] {}, [&] {
    m.params().zero_grads();
    m.forward_backward(b);
  });
  if (rank == 0) {
    const double tokens_per_s = static_cast<double>(batch * seq) / (stats.median_us * 1e-6);
    std::printf("echo_model_bench: layers=%lld hidden=%lld ffn=%lld heads=%lld/%lld head_dim=%lld vocab=%lld tp=%d "
                "allreduce=%s\n",
                static_cast<long long>(shape.layers), static_cast<long long>(shape.hidden),
                static_cast<long long>(shape.ffn), static_cast<long long>(shape.heads),
                static_cast<long long>(shape.kv_heads), static_cast<long long>(shape.head_dim),
                static_cast<long long>(shape.vocab), tp.size(), blocks->name().c_str());
    std::printf("batch=%lld seq=%lld  step median %.1f ms (p10 %.1f, p90 %.1f)  %.0f tokens/s forward+backward\n",
                static_cast<long long>(batch), static_cast<long long>(seq), stats.median_us / 1e3, stats.p10_us / 1e3,
                stats.p90_us / 1e3, tokens_per_s);
  }
  return 0;
}

}  // namespace
}  // namespace echo

int main(int argc, char** argv) { return echo::dist::guarded_main(argc, argv, echo::bench_main); }
