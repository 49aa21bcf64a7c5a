// echo_bench: the all-reduce benchmark, read like nccl-tests. For each message size it times
// the chosen implementation and, in the same run, the exact 16-bit all-reduce over the same
// transport and the MPI library's own fp32 MPI_Allreduce; it reports bytes on the wire, the
// error against the exact fp32 sum, whether every rank's output is bitwise identical, and where
// the implementation's time went (quantize, reduce, copy, decode, wait, and exchange = copy + wait,
// which compares the transports: over mpi the collectives hold the waiting).
//   mpirun -np 4 echo_bench --sizes 1K..256M --impl echo --bits 4 --transport shm --json out.jsonl
// A size is the byte size of the 16-bit message (n = size / 2 values), as in the paper.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "apps/bench/machine.h"
#include "apps/bench/quant_args.h"
#include "apps/bench/sizes.h"
#include "apps/bench/timing.h"
#include "apps/mpi_command_line.h"
#include "apps/output_option.h"
#include "comm/echo/echo_all_reduce.h"
#include "comm/echo/quantize.h"
#include "comm/exact_all_reduce.h"
#include "core/atomic_file.h"
#include "core/config/config.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/host_memory.h"
#include "dist/communicator.h"
#include "dist/guarded_main.h"
#include "dist/world.h"

namespace echo::bench {
namespace {

// The largest message echo_bench measures: the fp32 reference all-reduce of the same run moves
// 4 bytes per value through int-counted MPI calls, which a 1 GiB 16-bit message (2^29 values,
// 2 GiB in fp32) just fits.
constexpr size_t kMaxMessageBytes = size_t{1} << 30;
// Host memory one rank holds per byte of the 16-bit message: the input, work and reference
// vectors (3 x fp32 = 6 bytes), the fp32 reference's send/receive/gather buffers (6), the
// 16-bit baseline's (3), Echo's x' and two compensator buffers per direction (up to 10) and
// its code buffers (1). Rounded up: a size this refuses would have run the host out of memory.
constexpr size_t kHostBytesPerMessageByte = 26;

struct Options {
  std::string sizes = "1K..16M";
  int step_factor = 2;
  std::string impl = "echo";
  int bits = 4;
  int group_size = 128;
  std::string quantizer = "asym_zero_aware";
  bool compensate = false;
  std::string direction = "forward";
  std::string transport = "mpi";
  int threads = 1;
  int tiles = 16;      // shm: tiles per segment and round (comm.p2p_tiles)
  int slot_kib = 128;  // shm: KiB of a tile's slot (comm.p2p_slot_kib)
  int iters = 20;
  int warmup = 5;
  std::string json;
};

struct Row {
  size_t bytes = 0, count = 0, wire_bytes = 0, exact_wire_bytes = 0;
  LatencyStats impl, exact16, mpi, copy;
  comm::EngineTimes split;  // the implementation's engine over the timed calls (rank 0)
  double max_rel_err = 0;
  bool identical = false;
};

comm::TransportOptions transport_of(const Options& o) {
  comm::TransportOptions t;
  t.kind = o.transport == "shm" ? comm::TransportKind::shm : comm::TransportKind::mpi;
  t.threads = o.threads;
  t.geometry.tiles = o.tiles;
  t.geometry.slot_bytes = static_cast<size_t>(o.slot_kib) << 10;
  return t;
}

std::unique_ptr<comm::AllReduce> make_impl(const Options& o, const dist::Communicator& c) {
  if (o.impl == "exact") return std::make_unique<comm::ExactAllReduce>(c, comm::ExactPrecision::bf16, transport_of(o));
  if (o.impl == "exact_fp32")
    return std::make_unique<comm::ExactAllReduce>(c, comm::ExactPrecision::fp32, transport_of(o));
  ECHO_INPUT_CHECK(o.impl == "echo", "--impl '{}' is not one of exact, exact_fp32, echo", o.impl);
  comm::EchoOptions e;
  e.quant = {config::parse<QuantPolicy>(o.quantizer), o.bits, o.group_size};
  e.compensate = o.compensate;
  e.transport = transport_of(o);
  return std::make_unique<comm::EchoAllReduce>(c, e);
}

Row measure(const Options& o, const dist::Communicator& c, comm::AllReduce& impl, comm::AllReduce& exact16,
            comm::AllReduce& exact32, size_t bytes) {
  const comm::Site site{0, o.direction == "backward" ? comm::Direction::backward : comm::Direction::forward};
  Row row;
  row.bytes = bytes;
  row.count = bytes / 2;
  std::mt19937_64 gen(1234 + c.rank());
  std::normal_distribution<float> dist(0.1f, 1.0f);
  std::vector<float> input(row.count), work(row.count), ref(row.count);
  for (auto& v : input) v = dist(gen);
  const auto restore = [&] { std::copy(input.begin(), input.end(), work.begin()); };
  const auto run = [&](comm::AllReduce& ar) {
    return [&] {
      ar.begin_pass(site.direction);
      ar.all_reduce(std::span<float>(work), site);
    };
  };

  // Correctness first: error against the exact fp32 sum and identity across ranks.
  ref = input;
  exact32.all_reduce(std::span<float>(ref), site);
  restore();
  run(impl)();
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < row.count; ++i) {
    max_err = std::max(max_err, static_cast<double>(std::fabs(work[i] - ref[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[i])));
  }
  row.max_rel_err = max_ref > 0 ? max_err / max_ref : max_err;
  // Equal hashes on every rank <=> bitwise identical outputs, without moving the tensor.
  const uint64_t mine = fnv1a(work.data(), work.size() * sizeof(float));
  uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&mine, &lo, 1, MPI_UINT64_T, MPI_MIN, c.get());
  MPI_Allreduce(&mine, &hi, 1, MPI_UINT64_T, MPI_MAX, c.get());
  row.identical = lo == hi;

  // The split covers the timed calls only, as the latency columns do (a warm-up stall inflated it).
  row.impl = time_collective(c.get(), o.warmup, o.iters, restore, run(impl), [&] {
    if (impl.engine()) impl.engine()->reset_times();
  });
  if (impl.engine()) row.split = impl.engine()->times();
  row.exact16 = time_collective(c.get(), o.warmup, o.iters, restore, run(exact16));
  row.mpi = time_collective(c.get(), o.warmup, o.iters, restore, [&] {
    MPI_Allreduce(MPI_IN_PLACE, work.data(), static_cast<int>(row.count), MPI_FLOAT, MPI_SUM, c.get());
  });
  // The memory ceiling: every rank copies its fp32 input at once, as an all-reduce must at least
  // read x and write the sum over it.
  row.copy = time_collective(
      c.get(), o.warmup, o.iters, [] {}, [&] { std::memcpy(ref.data(), input.data(), row.count * sizeof(float)); });
  const size_t wire = impl.wire_bytes_per_rank(row.count, site), wire16 = exact16.wire_bytes_per_rank(row.count, site);
  MPI_Allreduce(&wire, &row.wire_bytes, 1, MPI_UINT64_T, MPI_MAX, c.get());
  MPI_Allreduce(&wire16, &row.exact_wire_bytes, 1, MPI_UINT64_T, MPI_MAX, c.get());
  return row;
}

double gbps(size_t bytes, double us) { return us > 0 ? static_cast<double>(bytes) / (us * 1e3) : 0.0; }

// Mean microseconds per timed call of each part (warm-up calls excluded), rank 0's view.
double per_call_us(double seconds, const comm::EngineTimes& t) { return t.calls > 0 ? 1e6 * seconds / t.calls : 0.0; }

// "exchange" = copy + wait is the part to compare between transports: over mpi the collectives
// (copy) hold the waiting for peers, over shm it is counted apart (comm::EngineTimes).
nlohmann::json split_json(const comm::EngineTimes& t) {
  return {{"quantize", per_call_us(t.encode_s, t)}, {"reduce", per_call_us(t.reduce_s, t)},
          {"copy", per_call_us(t.copy_s, t)},       {"decode", per_call_us(t.decode_s, t)},
          {"wait", per_call_us(t.wait_s, t)},       {"exchange", per_call_us(t.exchange_s(), t)}};
}

nlohmann::json to_json(const Options& o, int P, const Row& r) {
  const double bus = 2.0 * (P - 1) / P;
  return {{"impl", o.impl},
          {"bits", o.impl == "echo" ? o.bits : (o.impl == "exact" ? 16 : 32)},
          {"group_size", o.group_size},
          {"quantizer", o.quantizer},
          {"compensate", o.compensate},
          {"direction", o.direction},
          {"P", P},
          {"bytes", r.bytes},
          {"wire_bytes", r.wire_bytes},
          {"wire_ratio_vs_exact", static_cast<double>(r.wire_bytes) / std::max<size_t>(1, r.exact_wire_bytes)},
          {"median_us", r.impl.median_us},
          {"p10_us", r.impl.p10_us},
          {"p90_us", r.impl.p90_us},
          {"algbw_gbps", gbps(r.bytes, r.impl.median_us)},
          {"busbw_gbps", gbps(r.bytes, r.impl.median_us) * bus},
          {"exact_median_us", r.exact16.median_us},
          {"mpi_allreduce_fp32_median_us", r.mpi.median_us},
          {"transport", o.transport},
          {"threads", o.threads},
          {"tiles", o.tiles},
          {"slot_kib", o.slot_kib},
          {"copy_median_us", r.copy.median_us},
          {"fraction_of_copy", r.copy.median_us / r.impl.median_us},
          {"split_us_per_call", split_json(r.split)},
          {"speedup_vs_exact", r.exact16.median_us / r.impl.median_us},
          {"max_rel_err", r.max_rel_err},
          {"ranks_identical", r.identical},
          {"iters", o.iters},
          {"warmup", o.warmup}};
}

void print_header(const Options& o, int P, const MachineInfo& machine, const std::string& engine) {
  std::printf("%s", machine_header(machine).c_str());
  // What serves the calls: --transport shm falls back to mpi where shm cannot run (the log says why).
  std::printf("# engine: %s\n", engine.c_str());
  std::printf(
      "# echo_bench: impl=%s transport=%s threads=%d tiles=%d slot_kib=%d bits=%d group_size=%d quantizer=%s "
      "compensate=%d "
      "direction=%s P=%d iters=%d warmup=%d\n",
      o.impl.c_str(), o.transport.c_str(), o.threads, o.tiles, o.slot_kib, o.bits, o.group_size, o.quantizer.c_str(),
      o.compensate, o.direction.c_str(), P, o.iters, o.warmup);
  std::printf("# size = bytes of the 16-bit message; times are the slowest rank's; busbw = algbw * 2(P-1)/P\n");
  std::printf(
      "# exact16 = our 16-bit all-reduce over the same transport, mpi32 = MPI_Allreduce on fp32, both timed in this "
      "run\n");
  std::printf("# copy = every rank memcpy's its fp32 input at once (the memory ceiling); of_copy = copy / median\n");
  std::printf(
      "# split = rank 0's mean microseconds per timed call (median and p10/p90 are of the slowest rank): quantize /\n"
      "#   reduce / copy / decode / wait; exch = copy + wait, the\n"
      "#   figure to compare between transports (mpi: copy = the two collectives, the waiting for peers inside "
      "them)\n");
  std::printf("#%9s %10s %12s %6s %10s %10s %10s %8s %8s %10s %10s %8s %9s %7s %10s %5s  %s\n", "size", "count",
              "wire(B)", "wire/16", "median(us)", "p10(us)", "p90(us)", "algbw", "busbw", "exact16(us)", "mpi32(us)",
              "speedup", "copy(us)", "of_copy", "max_relerr", "ident", "split q/r/c/d/w (us)  exch(us)");
}

void print_row(int P, const Row& r) {
  const double alg = gbps(r.bytes, r.impl.median_us), bus = alg * 2.0 * (P - 1) / P;
  const comm::EngineTimes& t = r.split;
  std::printf(
      " %9s %10zu %12zu %6.3f %10.1f %10.1f %10.1f %8.3f %8.3f %10.1f %10.1f %8.2f %9.1f %7.3f %10.3e %5s  "
      "%.0f/%.0f/%.0f/%.0f/%.0f  %.0f\n",
      format_size(r.bytes).c_str(), r.count, r.wire_bytes,
      static_cast<double>(r.wire_bytes) / std::max<size_t>(1, r.exact_wire_bytes), r.impl.median_us, r.impl.p10_us,
      r.impl.p90_us, alg, bus, r.exact16.median_us, r.mpi.median_us, r.exact16.median_us / r.impl.median_us,
      r.copy.median_us, r.copy.median_us / r.impl.median_us, r.max_rel_err, r.identical ? "yes" : "NO",
      per_call_us(t.encode_s, t), per_call_us(t.reduce_s, t), per_call_us(t.copy_s, t), per_call_us(t.decode_s, t),
      per_call_us(t.wait_s, t), per_call_us(t.exchange_s(), t));
  std::fflush(stdout);
}

// Refuses, before allocating, a size list the ranks on this host could not hold: all ranks of
// a node share its MemAvailable.
void check_memory(const std::vector<size_t>& sizes, const dist::Communicator& world) {
  size_t largest = 0;
  for (size_t bytes : sizes) {
    ECHO_INPUT_CHECK(bytes >= 2, "size {} is smaller than one 16-bit value", bytes);
    largest = std::max(largest, bytes);
  }
  const int ranks_here = dist::node_place(world).local_size;
  const size_t need = largest * kHostBytesPerMessageByte * static_cast<size_t>(ranks_here);
  const std::optional<size_t> avail = host_memory_available_bytes();  // unknown: nothing to check against
  ECHO_INPUT_CHECK(!avail || need <= *avail,
                   "size {} needs about {:.1f} GiB of host memory ({} ranks on this host x {} bytes per message byte), "
                   "but only {:.1f} GiB is available; use smaller --sizes",
                   format_size(largest), static_cast<double>(need) / (1 << 30), ranks_here, kHostBytesPerMessageByte,
                   static_cast<double>(avail.value_or(0)) / (1 << 30));
}

int bench_main(int argc, char** argv) {
  Options o;
  CLI::App app{"echo_bench: Echo quantized all-reduce vs the exact 16-bit all-reduce, nccl-tests style"};
  app.add_option("--sizes", o.sizes, "sizes of the 16-bit message: 1K..256M, 64M or 1K,4K,1M")->capture_default_str();
  app.add_option("--step-factor", o.step_factor, "multiplier between sizes of a range (>= 2)")->capture_default_str();
  app.add_option("--impl", o.impl, "exact | exact_fp32 | echo")->capture_default_str();
  app.add_option("--bits", o.bits, "Echo bit width: 4 | 8")->capture_default_str();
  app.add_option("--group-size", o.group_size, "values per quantization group (power of two, 2 to 1048576)")
      ->capture_default_str();
  app.add_option("--quantizer", o.quantizer, "symmetric | asym_naive | asym_zero_aware")->capture_default_str();
  app.add_flag("--compensate", o.compensate, "run the error-feedback compensator");
  app.add_option("--transport", o.transport,
                 "mpi | shm: how the bytes travel (shm: the pipelined shared-memory protocol)")
      ->check(CLI::IsMember({"mpi", "shm"}))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "shm: threads per rank (1 to --tiles)")->capture_default_str();
  app.add_option("--tiles", o.tiles, "shm: tiles per segment and round, as comm.p2p_tiles (1 to 64)")
      ->capture_default_str();
  app.add_option("--slot-kib", o.slot_kib, "shm: KiB of a tile's slot, as comm.p2p_slot_kib (1 to 65536)")
      ->capture_default_str();
  app.add_option("--direction", o.direction, "forward | backward (backward adds the 2^e rescale)")
      ->check(CLI::IsMember({"forward", "backward"}))
      ->capture_default_str();
  // NOTE: numbers are checked below with messages in words, not by CLI11 validators.
  app.add_option("--iters", o.iters, "timed iterations per size (>= 1)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed iterations per size (>= 0)")->capture_default_str();
  app.add_option("--json", o.json, "write one JSON record per size to this file (rank 0)")
      ->check(echo::apps::writable_output());
  if (const auto status = apps::parse_on_every_rank(app, argc, argv)) return *status;
  ECHO_INPUT_CHECK(o.iters >= 1, "--iters must be at least 1 (got {}): the median needs one timed call per size",
                   o.iters);
  ECHO_INPUT_CHECK(o.warmup >= 0, "--warmup must be 0 or more (got {})", o.warmup);
  ECHO_INPUT_CHECK(o.tiles >= 1 && o.tiles <= 64, "--tiles must lie in [1, 64] (got {})", o.tiles);
  ECHO_INPUT_CHECK(o.slot_kib >= 1 && o.slot_kib <= 65536, "--slot-kib must lie in [1, 65536] (got {})", o.slot_kib);
  ECHO_INPUT_CHECK(o.threads >= 1 && o.threads <= o.tiles, "--threads must lie in [1, --tiles = {}] (got {})", o.tiles,
                   o.threads);
  ECHO_INPUT_CHECK(o.step_factor >= 2, "--step-factor must be at least 2 (got {})", o.step_factor);
  // The pipeline's knobs given with the MPI transport were ignored without a word (a sweep of
  // --threads over --transport mpi measured the same thing every time).
  if (o.transport == "mpi")
    for (const char* shm_only : {"--threads", "--tiles", "--slot-kib"})
      ECHO_INPUT_CHECK(app.count(shm_only) == 0,
                       "{} applies to --transport shm (the pipelined shared-memory protocol); --transport mpi, the "
                       "default, runs two MPI collectives on the calling thread",
                       shm_only);
  check_quant_bits("--bits", o.bits);
  check_group_size("--group-size", o.group_size);
  // Named here, with the option: config::parse's refusal further on named neither and carried a
  // source location, as an internal error.
  ECHO_INPUT_CHECK(config::try_parse<QuantPolicy>(o.quantizer).has_value(), "--quantizer '{}': expected one of {}",
                   o.quantizer, config::enum_choices<QuantPolicy>());

  auto world = dist::Communicator::borrow(MPI_COMM_WORLD);
  // The workspace limit of the config's comm.p2p_* keys (2 x tiles x P slots per rank).
  const double workspace_gib = 2.0 * o.tiles * static_cast<double>(o.slot_kib) / (1024.0 * 1024.0);
  ECHO_INPUT_CHECK(o.transport == "mpi" || workspace_gib * world.size() <= 4.0,
                   "--tiles {} x --slot-kib {} would take {:.1f} GiB of shared memory per rank at P = {} (2 x tiles x "
                   "P slots), more than the 4 GiB echo allows",
                   o.tiles, o.slot_kib, workspace_gib * world.size(), world.size());
  const auto sizes = parse_sizes(o.sizes, static_cast<size_t>(o.step_factor), kMaxMessageBytes,
                                 "echo_bench's largest message (--sizes)");
  require_16bit_values(sizes, "--sizes");
  if (o.impl == "echo") require_one_group(sizes, o.group_size);  // as echo_quant_bench refuses
  const MachineInfo machine = describe_machine();
  check_memory(sizes, world);
  auto impl = make_impl(o, world);
  if (o.impl == "echo" && o.transport == "shm") {
    // A group larger than a slot would send every call over mpi while the header says shm.
    const size_t group_bytes = comm::wire_bytes(static_cast<size_t>(o.group_size),
                                                {config::parse<QuantPolicy>(o.quantizer), o.bits, o.group_size});
    ECHO_INPUT_CHECK(group_bytes <= (static_cast<size_t>(o.slot_kib) << 10),
                     "--slot-kib {} holds no {}-bit group of --group-size {} ({} bytes encoded): every call would "
                     "go over mpi; raise --slot-kib",
                     o.slot_kib, o.bits, o.group_size, group_bytes);
  }
  comm::ExactAllReduce exact16(world, comm::ExactPrecision::bf16, transport_of(o)),
      exact32(world, comm::ExactPrecision::fp32);
  // --json is rewritten whole (write_file_atomic) after every size: an interrupted run leaves the
  // rows measured so far, never a truncated line, and until the first row the old file stays; a
  // full disk is an error.
  std::string json_lines;
  // /dev/stdout, a FIFO or another non-file target is written as a stream, once, row by row (there
  // is nothing to rename over, and rewriting would repeat the rows).
  std::optional<StreamOutput> json_stream;
  if (world.rank() == 0 && !o.json.empty() && writes_in_place(o.json)) json_stream.emplace(o.json, "--json " + o.json);
  const std::string engine = comm::describe(*impl);
  if (world.rank() == 0) print_header(o, world.size(), machine, engine);
  for (size_t bytes : sizes) {
    const Row row = measure(o, world, *impl, exact16, exact32, bytes);
    if (world.rank() != 0) continue;
    print_row(world.size(), row);
    if (!o.json.empty()) {
      nlohmann::json record = to_json(o, world.size(), row);
      record["machine"] = to_json(machine);
      record["engine"] = engine;
      if (json_stream) {
        json_stream->write(record.dump() + '\n');
      } else {
        json_lines += record.dump() + '\n';
        write_file_atomic(o.json, json_lines, "--json " + o.json);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace echo::bench

int main(int argc, char** argv) { return echo::dist::guarded_main(argc, argv, echo::bench::bench_main); }
