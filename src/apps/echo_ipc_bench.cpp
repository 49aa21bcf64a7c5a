// echo_ipc_bench: the rows of the Echo paper's Table 2 on CUDA device tensors (GitHub issue 11):
// the 16-bit all-reduce (NCCL between distinct GPUs, else host-staged over MPI, and over the
// cuda_ipc pipeline with bf16 on the wire), the two-collective quantized all-reduce
// (comm.allreduce: two_collective: NCCL between distinct GPUs, else host-staged over MPI), the
// pipelined cuda_ipc transport, and cuda_ipc with the compensator around it (unfused) and inside
// its tiles (fused), at 4 and 8 bits, in one run,
// beside this GPU's device-to-device copy ceiling. Like nccl-tests: every rank reduces a bf16
// tensor of the given size in place; the time is the slowest rank's, median of --iters after
// --warmup, with the input restored before each call (not timed).
//   mpirun -np 4 echo_ipc_bench --sizes 64M..1G --iters 80 --warmup 30 --json ipc.jsonl
// --out-of-place times every row a second time out of place, as nccl-tests does: the input stays
// in its own buffer and the call writes the sum into another. echo's AllReduce is in place, so
// that is one device-to-device copy of the input into the output buffer, timed, then the call
// (what a framework does with an in-place collective); `wrong` there counts the elements that
// differ from the same row's in-place output.
// --slot-kib 128,2048 repeats the cuda_ipc rows for each workspace slot size (the first is
// also the 16-bit pipeline's): with ~10·P kernel launches per tile (docs/design.md §7,
// "Launches"), the `tiles` column against the time says whether launches or bytes decide.
// `wrong` counts the elements where a quantized row's output differs from the two-collective
// output of the same input (the gpu tests tie both to the CPU reference bit for bit); the
// 16-bit row counts elements differing from rank 0's, the cuda_ipc 16-bit row those differing from
// the host-staged 16-bit all-reduce (equal by design: the same Bf16Codec arithmetic), the fused row those differing from the
// unfused one (the same bits by design, docs/design.md §7). Ranks take GPU local_rank % count;
// several ranks may share one GPU, where the copy ceiling is what the kernels share too.
// NOTE: never run on a GPU when written; scripts/device_check.sh runs it.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/bench/sizes.h"
#include "apps/bench/timing.h"
#include "apps/output_option.h"
#include "apps/parse_command_line.h"
#include "comm/echo/echo_all_reduce.h"
#include "comm/echo/quantize.h"
#include "comm/make_all_reduce.h"
#include "comm/p2p/cuda_ipc_all_reduce.h"
#include "comm/p2p/pipeline_schedule.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "cuda_check.h"
#include "dist/communicator.h"
#include "dist/guarded_main.h"
#include "dist/world.h"

namespace echo::bench {
namespace {

struct Options {
  std::string sizes = "64M..1G";
  int iters = 80;
  int warmup = 30;
  int group_size = 128;
  double peer_timeout_s = 60;
  std::vector<int> slot_kib{128};  // cuda_ipc workspace slot sizes, one set of cuda_ipc rows each
  int tiles = 16;                  // tiles per segment and round
  bool out_of_place = false;       // also time every row out of place
  std::string json;
};

struct RowSpec {
  std::string name;
  int bits = 0;  // 0: the 16-bit all-reduce
  comm::TransportKind transport = comm::TransportKind::mpi;
  bool compensate = false;
  bool fuse = false;
  int slot_kib = 0;  // cuda_ipc rows: the workspace slot size
};

// Table 2's rows; the cuda_ipc ones once per slot size (named with it when there are several).
std::vector<RowSpec> rows(const Options& o) {
  std::vector<RowSpec> out{{"16-bit", 0, comm::TransportKind::mpi},
                           {"two-collective 8-bit", 8, comm::TransportKind::mpi},
                           {"two-collective 4-bit", 4, comm::TransportKind::mpi}};
  for (size_t i = 0; i < o.slot_kib.size(); ++i) {
    const int kib = o.slot_kib[i];
    const std::string tag = o.slot_kib.size() > 1 ? fmt::format(" [{}K slots]", kib) : "";
    if (i == 0) out.push_back({"cuda_ipc 16-bit" + tag, 0, comm::TransportKind::cuda_ipc, false, false, kib});
    out.push_back({"cuda_ipc 8-bit" + tag, 8, comm::TransportKind::cuda_ipc, false, false, kib});
    out.push_back({"cuda_ipc 4-bit" + tag, 4, comm::TransportKind::cuda_ipc, false, false, kib});
    out.push_back({"cuda_ipc 4-bit + compensator" + tag, 4, comm::TransportKind::cuda_ipc, true, false, kib});
    out.push_back({"cuda_ipc 4-bit + fused compensator" + tag, 4, comm::TransportKind::cuda_ipc, true, true, kib});
  }
  return out;
}

comm::p2p::P2pGeometry geometry_of(const RowSpec& r, const Options& o, int ranks) {
  comm::p2p::P2pGeometry g;
  g.ranks = ranks;
  g.tiles = o.tiles;
  g.slot_bytes = static_cast<size_t>(r.slot_kib) << 10;
  return g;
}

// Tiles one call of n values moves over every segment (each rank pushes, reduces or decodes each
// once): 0 for the rows off the pipeline. The wire's shape is the host codec's, as the transport's.
size_t tiles_per_call(const RowSpec& r, const Options& o, int ranks, size_t n) {
  if (r.transport != comm::TransportKind::cuda_ipc) return 0;
  const comm::p2p::P2pGeometry g = geometry_of(r, o, ranks);
  if (r.bits == 0) return comm::p2p::make_pipeline_schedule(n, g, comm::Bf16Codec()).tile_count();
  const comm::QuantCodec codec({QuantPolicy::asym_zero_aware, r.bits, o.group_size});
  return comm::p2p::make_pipeline_schedule(n, g, codec).tile_count();
}

std::unique_ptr<comm::AllReduce> make_row(const RowSpec& r, const Options& o, const dist::Communicator& c) {
  comm::TransportOptions t;
  t.kind = r.transport;
  t.peer_timeout_s = o.peer_timeout_s;
  if (r.transport == comm::TransportKind::cuda_ipc) t.geometry = geometry_of(r, o, c.size());
  if (r.bits != 0 && r.transport == comm::TransportKind::mpi) {  // as comm.allreduce: two_collective
    t.kind = comm::TransportKind::automatic;
    t.pipelined = false;
  }
  if (r.bits == 0 && r.transport == comm::TransportKind::cuda_ipc) {  // built directly: distinct GPUs would get NCCL
    std::string why;
    auto ws = comm::p2p::CudaIpcWorkspace::for_group(c, t.geometry, &why);
    ECHO_CHECK(ws != nullptr, "row '{}' needs the cuda_ipc workspace, which failed: {}", r.name, why);
    return std::make_unique<comm::p2p::CudaIpcBf16AllReduce>(c, std::move(ws), t);
  }
  if (r.bits == 0) return comm::make_exact_all_reduce(c, comm::ExactPrecision::bf16, config::Device::cuda, t);
  comm::EchoOptions e;
  e.quant = {QuantPolicy::asym_zero_aware, r.bits, o.group_size};
  e.compensate = r.compensate;
  e.fuse = r.fuse;
  e.transport = t;
  return std::make_unique<comm::EchoAllReduce>(c, e);
}

// bf16 values of a rank's input: a cheap deterministic spread around 1, different per rank.
std::vector<uint16_t> input_bits(size_t n, int rank) {
  std::vector<uint16_t> v(n);
  uint64_t s = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank + 1);
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v[i] = float_to_bf16_bits(static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) * 0x1p-23f);
  }
  return v;
}

std::vector<uint16_t> to_host_bits(const Tensor& t) {
  std::vector<uint16_t> v(static_cast<size_t>(t.numel()));
  const Tensor h = t.to(Device::cpu);
  std::memcpy(v.data(), h.raw(), v.size() * sizeof(uint16_t));
  return v;
}

size_t differing(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

double copy_ceiling_gbps(const Tensor& src, Tensor& dst, const dist::Communicator& c, int iters) {
  const size_t bytes = static_cast<size_t>(src.numel()) * 2;
  const LatencyStats s = time_collective(
      c.get(), 3, iters, [] { CUDA_CHECK(cudaDeviceSynchronize()); },
      [&] {
        CUDA_CHECK(cudaMemcpy(dst.raw(), src.raw(), bytes, cudaMemcpyDeviceToDevice));
      });
  return static_cast<double>(bytes) / (s.median_us * 1e3);
}

int bench_main(int argc, char** argv) {
  Options o;
  CLI::App app{"echo_ipc_bench: the Echo paper's Table 2 rows on CUDA device tensors (cuda_ipc vs two-collective)"};
  app.add_option("--sizes", o.sizes, "16-bit message sizes: 64M..1G, 256M or 64M,1G")->capture_default_str();
  app.add_option("--iters", o.iters, "timed calls per size and row (>= 1)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed calls per size and row (>= 0)")->capture_default_str();
  app.add_option("--group-size", o.group_size, "values per quantization group")->capture_default_str();
  app.add_option("--peer-timeout", o.peer_timeout_s, "cuda_ipc: seconds a wait for a peer may last (0.001 to 86400)")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  app.add_option("--slot-kib", o.slot_kib, "cuda_ipc workspace slot sizes in KiB, one set of cuda_ipc rows each")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--tiles", o.tiles, "cuda_ipc tiles per segment and round")->capture_default_str();
  app.add_flag("--out-of-place", o.out_of_place, "also time every row out of place (input kept, sum in another buffer)");
  app.add_option("--json", o.json, "write one JSON record per size and row to this file (rank 0)")
      ->check(echo::apps::writable_output());
  try {
    echo::apps::parse_naming_unknown_options(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  ECHO_INPUT_CHECK(o.iters >= 1 && o.warmup >= 0, "--iters must be >= 1 and --warmup >= 0");
  ECHO_INPUT_CHECK(!o.slot_kib.empty(), "--slot-kib needs at least one size");
  for (int kib : o.slot_kib)
    ECHO_INPUT_CHECK(kib >= 1 && kib <= 65536, "--slot-kib {} is outside [1, 65536]", kib);
  ECHO_INPUT_CHECK(o.tiles >= 1 && o.tiles <= 64, "--tiles {} is outside [1, 64]", o.tiles);
  ECHO_INPUT_CHECK(o.group_size >= 1 && o.group_size <= 4096 && (o.group_size & (o.group_size - 1)) == 0,
                   "--group-size {} must be a power of two in [1, 4096]", o.group_size);
  // A row whose codec group does not fit a slot would quietly run the two-collective path.
  const size_t widest_group = comm::wire_bytes(static_cast<size_t>(o.group_size),
                                               QuantSpec{QuantPolicy::asym_zero_aware, 8, o.group_size});
  for (int kib : o.slot_kib)
    ECHO_INPUT_CHECK(widest_group <= (static_cast<size_t>(kib) << 10),
                     "--slot-kib {} holds no 8-bit group of --group-size {} ({} bytes encoded): the cuda_ipc rows "
                     "would not be pipelined",
                     kib, o.group_size, widest_group);
  // The sizes are checked before the device is: a bad --sizes is named on a machine without one.
  const std::vector<size_t> sizes = parse_sizes(o.sizes);
  require_16bit_values(sizes, "--sizes");
  require_one_group(sizes, o.group_size);
  auto world = dist::Communicator::borrow(MPI_COMM_WORLD);
  const int devices = cuda_device_count();
  ECHO_INPUT_CHECK(devices > 0, "echo_ipc_bench needs a usable CUDA device (none found, or no driver)");
  CUDA_CHECK(cudaSetDevice(dist::node_local_rank(world) % devices));
  const int P = world.size(), me = world.rank();
  std::ofstream json;
  if (me == 0 && !o.json.empty()) {
    json.open(o.json);
    ECHO_RUN_CHECK(json.is_open(), "--json {}: cannot open it for writing: {}", o.json, std::strerror(errno));
  }
  if (me == 0) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("# echo_ipc_bench: %d ranks, %d GPU(s) visible (%s); median of %d after %d warm-ups, %s; "
                "cuda_ipc: %d tiles a round\n",
                P, devices, prop.name, o.iters, o.warmup, o.out_of_place ? "in place and out of place" : "in place",
                o.tiles);
    std::printf("%8s  %-48s %5s %12s %10s %10s %8s %7s %10s\n", "size", "row", "place", "median(us)", "algbw",
                "ceiling", "frac", "tiles", "wrong");
  }
  std::vector<std::string> wrong_rows;  // "SIZE ROW (in|out): N wrong", for the exit status
  for (size_t bytes : sizes) {
    const size_t n = bytes / 2;
    const std::vector<uint16_t> host = input_bits(n, me);
    const Tensor pristine = Tensor::from_vector(host, {static_cast<int64_t>(n)}, DType::bf16).to(Device::cuda);
    Tensor x = Tensor::empty({static_cast<int64_t>(n)}, DType::bf16, Device::cuda);
    const double ceiling = copy_ceiling_gbps(pristine, x, world, 10);
    auto restore = [&] {
      CUDA_CHECK(cudaMemcpy(x.raw(), pristine.raw(), n * 2, cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaDeviceSynchronize());
    };
    std::vector<uint16_t> two_collective[9];  // by bits: the reference of the cuda_ipc rows
    std::vector<uint16_t> unfused;            // the reference of the fused row
    for (const RowSpec& r : rows(o)) {
      auto impl = make_row(r, o, world);
      const comm::Site site{0, comm::Direction::forward};
      const LatencyStats s = time_collective(
          world.get(), o.warmup, o.iters, restore, [&] {
            impl->begin_pass(comm::Direction::forward);
            impl->all_reduce(x, site);
            CUDA_CHECK(cudaDeviceSynchronize());
          });
      // Correctness: two calls on the pristine input, the second without begin_pass, so that it
      // runs on the compensator state the first left (a fused update that went wrong shows there).
      restore();
      impl->begin_pass(comm::Direction::forward);
      impl->all_reduce(x, site);
      restore();
      impl->all_reduce(x, site);
      impl->raise_deferred_faults();  // a poisoned output noted on the device (Echo over NCCL)
      const std::vector<uint16_t> out = to_host_bits(x);
      if (r.transport == comm::TransportKind::cuda_ipc) {
        const auto* echo = dynamic_cast<const comm::EchoAllReduce*>(impl.get());
        const std::string used = r.bits == 0 ? comm::describe(*impl)
                                 : echo && echo->device_path() ? echo->device_path()->transport()
                                                               : "none";
        ECHO_CHECK(used == (r.bits == 0 ? "exact over cuda_ipc" : "cuda_ipc"),
                   "row '{}' asked for cuda_ipc but ran over '{}' (the log says why the workspace failed)", r.name,
                   used);
      }
      size_t wrong = 0;
      if (r.bits == 0 && r.transport == comm::TransportKind::mpi) {
        std::vector<uint16_t> root = out;
        MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_UINT16_T, 0, world.get());
        wrong = differing(out, root);
      } else if (r.bits == 0) {
        // Against the host-staged 16-bit all-reduce (Bf16Codec's arithmetic, which this row
        // reproduces bit for bit); the 16-bit row may be NCCL, whose bf16 sum rounds per hop.
        comm::ExactAllReduce host(world, comm::ExactPrecision::bf16);
        restore();
        host.all_reduce(x, site);
        wrong = differing(out, to_host_bits(x));
      } else if (r.transport == comm::TransportKind::mpi) {
        two_collective[r.bits] = out;
      } else if (!r.compensate) {
        wrong = differing(out, two_collective[r.bits]);
      } else if (!r.fuse) {
        unfused = out;
      } else {
        wrong = differing(out, unfused);
      }
      const size_t tiles = tiles_per_call(r, o, P, n);
      auto report = [&](const char* place, const LatencyStats& stats, size_t wrong_here) {
        unsigned long long mine = wrong_here, total = 0;
        MPI_Allreduce(&mine, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, world.get());
        if (total > 0)
          wrong_rows.push_back(fmt::format("{} {} ({}): {} wrong", format_size(bytes), r.name, place, total));
        const double algbw = static_cast<double>(bytes) / (stats.median_us * 1e3);
        if (me != 0) return;
        std::printf("%8s  %-48s %5s %12.1f %10.1f %10.1f %8.3f %7zu %10llu\n", format_size(bytes).c_str(),
                    r.name.c_str(), place, stats.median_us, algbw, ceiling, algbw / ceiling, tiles, total);
        std::fflush(stdout);
        if (json.is_open())
          json << nlohmann::json{{"size", bytes},         {"row", r.name},          {"ranks", P},
                                 {"place", place},        {"median_us", stats.median_us},
                                 {"p10_us", stats.p10_us}, {"p90_us", stats.p90_us}, {"algbw_gbps", algbw},
                                 {"copy_ceiling_gbps", ceiling}, {"wrong", total},
                                 {"iters", o.iters},      {"warmup", o.warmup},
                                 {"slot_kib", r.slot_kib}, {"tiles_per_round", o.tiles}, {"tiles_per_call", tiles}}
                      .dump()
               << "\n";
      };
      report("in", s, wrong);
      if (!o.out_of_place) continue;

      // Out of place: pristine is the send buffer (never written), x the receive buffer.
      auto copy_in = [&] {
        CUDA_CHECK(cudaMemcpyAsync(x.raw(), pristine.raw(), n * 2, cudaMemcpyDeviceToDevice, cudaStreamLegacy));
      };
      const LatencyStats s_oop = time_collective(
          world.get(), o.warmup, o.iters, [] { CUDA_CHECK(cudaDeviceSynchronize()); }, [&] {
            impl->begin_pass(comm::Direction::forward);
            copy_in();
            impl->all_reduce(x, site);
            CUDA_CHECK(cudaDeviceSynchronize());
          });
      impl->begin_pass(comm::Direction::forward);
      copy_in();
      impl->all_reduce(x, site);
      copy_in();
      impl->all_reduce(x, site);
      impl->raise_deferred_faults();
      report("out", s_oop, differing(to_host_bits(x), out));
    }
  }
  // Every row is printed first; then a wrong element anywhere is the run's failure (the device
  // check reads only the exit status).
  if (!wrong_rows.empty()) {
    if (me == 0)
      fmt::print(stderr, "echo_ipc_bench: FAILED: {} row(s) with wrong elements: {}\n", wrong_rows.size(),
                 fmt::join(wrong_rows, "; "));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace echo::bench

int main(int argc, char** argv) { return echo::dist::guarded_main(argc, argv, echo::bench::bench_main); }
