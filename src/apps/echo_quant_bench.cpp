// echo_quant_bench: single-thread throughput of the CPU group quantizer (quantize and
// dequantize_add) on random fp32 data, per policy at b = 4 and 8, g = 128. Prints a table of the
// median (and min/max) over several runs in GB/s of fp32 input processed per core, and bytes on the
// wire. The same run times memory ceilings on the same buffers (`read`: a read-only pass over x;
// `update`: a read-modify-write pass over the accumulator; `copy`: memcpy of x into the
// accumulator, echo_bench's ceiling), so each row also says what fraction of the memory bandwidth
// it reaches: quantize against `read` (it reads 4 bytes a value and writes about half a byte),
// dequantize_add against `update` (it reads and writes the 4-byte accumulator, and reads the
// codes).
// A second table times the fused Echo site's compensator work (comm/echo/fused_echo_site.cpp) the
// way the shm pipeline runs it, tile by tile over state in DRAM, beside ceilings with the same mix
// of reads and writes (below, "The compensator's passes").
// Usage: echo_quant_bench [--mib N] [--runs R] [--group G] [--json FILE]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "apps/bench/machine.h"
#include "apps/bench/quant_args.h"
#include "apps/output_option.h"
#include "apps/parse_command_line.h"
#include "comm/echo/compensator.h"
#include "comm/echo/fused_echo_site.h"
#include "comm/echo/quantize.h"
#include "comm/p2p/p2p_geometry.h"
#include "core/atomic_file.h"
#include "core/config/config.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/simd_clones.h"

namespace {

using echo::QuantPolicy;
using echo::QuantSpec;

// The input and accumulator are two fp32 buffers of --mib MiB each, plus the codes.
constexpr size_t kMaxMib = 16384;

struct Options {
  std::string mib_text = "64";  // parsed by hand, so every bad value gets the same message
  size_t mib = 0;
  int runs = 7;
  int group_size = 128;
  std::string json;
};

// Returns the options, or an exit code when parsing ended the program (--help, a CLI error).
std::variant<Options, int> parse(int argc, char** argv) {
  Options o;
  CLI::App app{"echo_quant_bench: single-thread throughput of the CPU group quantizer"};
  app.add_option("--mib", o.mib_text, "MiB of fp32 input (1 .. 16384)")->capture_default_str();
  app.add_option("--runs", o.runs, "timed runs per policy (>= 1)")->capture_default_str();
  app.add_option("--group", o.group_size,
                 "values per quantization group (power of two, 2 to 1048576, at most the values)")
      ->capture_default_str();
  app.add_option("--json", o.json, "also write the table as JSON to this file")->check(echo::apps::writable_output());
  try {
    echo::apps::parse_naming_unknown_options(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::string& t = o.mib_text;
  const bool digits_only = !t.empty() && t.size() <= 6 && t.find_first_not_of("0123456789") == std::string::npos;
  o.mib = digits_only ? std::stoull(t) : 0;
  ECHO_INPUT_CHECK(o.mib >= 1 && o.mib <= kMaxMib, "--mib must be a whole number of MiB from 1 to {} (got '{}')", kMaxMib, t);
  ECHO_INPUT_CHECK(o.runs >= 1, "--runs must be at least 1 (got {})", o.runs);
  echo::bench::check_group_size("--group", o.group_size);
  // A group longer than the input would time one partial group, and the compensator's tile
  // (whole groups) would be longer than the buffers it walks.
  const size_t values = o.mib * (size_t{1} << 20) / sizeof(float);
  ECHO_INPUT_CHECK(static_cast<size_t>(o.group_size) <= values,
                   "--group {} is longer than the {} values of --mib {}; use a smaller --group or a larger --mib",
                   o.group_size, values, o.mib);
  const std::optional<size_t> avail = echo::host_memory_available_bytes();  // unknown: nothing to check against
  // x, acc, the compensator's m1 and m2, and (at most) 8-bit codes with parameters.
  const size_t need = 5 * o.mib * (size_t{1} << 20);
  ECHO_INPUT_CHECK(!avail || need <= *avail, "--mib {} needs about {:.1f} GiB but only {:.1f} GiB is available",
                   o.mib, static_cast<double>(need) / (1 << 30), static_cast<double>(avail.value_or(0)) / (1 << 30));
  return o;
}

struct Stats {
  double median, min, max;  // GB/s
};

// Runs fn `runs` times (after one warm-up) and returns GB/s of `bytes` per run.
template <typename Fn>
Stats measure(size_t bytes, int runs, Fn&& fn) {
  fn();
  std::vector<double> gbps;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    gbps.push_back(static_cast<double>(bytes) / std::chrono::duration<double>(t1 - t0).count() / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  return {gbps[gbps.size() / 2], gbps.front(), gbps.back()};
}

// A read-only pass over x that the compiler cannot drop or stop early: an integer sum of the bit
// patterns (vectorizes without fast-math, unlike a float sum), compiled for the widest vectors the
// CPU has, like the quantizer's loops, so the ceiling is the memory's and not this loop's.
ECHO_SIMD_CLONES uint32_t read_all(const float* x, size_t n) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(x);
  uint32_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += w[i];
  return sum;
}

// A read-modify-write pass over acc (flips the lowest bit of every word; run twice it is a no-op).
ECHO_SIMD_CLONES void update_all(float* acc, size_t n) {
  uint32_t* w = reinterpret_cast<uint32_t*>(acc);
  for (size_t i = 0; i < n; ++i) w[i] ^= 1u;
}

// The compensator's passes. The shm pipeline (comm/p2p/shm_pipelined_reduce.cpp) calls the fused
// site's load() on each tile it pushes or reduces (x' = (x + c)·2^e into a tile buffer, which it
// then encodes) and finish() on each tile it has decoded (unscale, x' recomputed from x, m1, m2,
// the update of m1, m2, the output into x). A tile is the 4-bit g = 128 tile of the default
// geometry (128 KiB slots / 68 bytes a group = 1927 groups, 246656 values, 0.94 MiB of fp32),
// so the tile buffer stays in L2 while x, m1 and m2 come from DRAM. Bytes through memory, per value:
//   load:   reads x, m1, m2 = 12 bytes (the tile written is in cache);
//   finish: reads x, m1, m2 and writes them back = 24 bytes (the tile of y read is in cache; the
//           stores go to lines the same loop has just read, so no extra read for ownership).
//   decode+finish: the tail as it runs, 4-bit zero-aware codes (0.53 bytes a value) decoded into
//           the tile, then finish: 24.53 bytes.
// The ceilings run the same tile loop with the same streams and the simplest work on them:
//   read3:   t[i] = x[i] ^ m1[i] ^ m2[i] (bit patterns) into the tile;
//   update3: x[i] ^= t[i] & f, m1[i] ^= f, m2[i] ^= f, f = 0 at run time (each of x, m1, m2 read
//            and stored, t read).
size_t pipeline_tile_elems(int group_size) {
  const QuantSpec spec{QuantPolicy::asym_zero_aware, 4, group_size};
  const size_t group_bytes = echo::comm::wire_bytes(static_cast<size_t>(group_size), spec);
  return static_cast<size_t>(group_size) * std::max<size_t>(1, echo::comm::p2p::P2pGeometry{}.slot_bytes / group_bytes);
}

ECHO_SIMD_CLONES void read3_tile(const float* __restrict x, const float* __restrict m1, const float* __restrict m2, size_t n,
                                 float* __restrict t) {
  const uint32_t* a = reinterpret_cast<const uint32_t*>(x);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(m1);
  const uint32_t* c = reinterpret_cast<const uint32_t*>(m2);
  uint32_t* out = reinterpret_cast<uint32_t*>(t);
  for (size_t i = 0; i < n; ++i) out[i] = a[i] ^ b[i] ^ c[i];
}

// `flip` is 0 at run time (the compiler cannot know): every value is read and stored unchanged, so
// the passes timed after this one see the same data.
ECHO_SIMD_CLONES void update3_tile(float* __restrict x, float* __restrict m1, float* __restrict m2, const float* __restrict t,
                                   size_t n, uint32_t flip) {
  uint32_t* a = reinterpret_cast<uint32_t*>(x);
  uint32_t* b = reinterpret_cast<uint32_t*>(m1);
  uint32_t* c = reinterpret_cast<uint32_t*>(m2);
  const uint32_t* in = reinterpret_cast<const uint32_t*>(t);
  for (size_t i = 0; i < n; ++i) {
    a[i] ^= in[i] & flip;
    b[i] ^= flip;
    c[i] ^= flip;
  }
}

// fn(begin, size) for every tile of [0, n).
template <typename Fn>
void for_tiles(size_t n, size_t tile, Fn&& fn) {
  for (size_t begin = 0; begin < n; begin += tile) fn(begin, std::min(tile, n - begin));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto parsed = parse(argc, argv);
    if (const int* code = std::get_if<int>(&parsed)) return *code;
    const Options& opt = std::get<Options>(parsed);
    const echo::bench::MachineInfo machine = echo::bench::describe_machine();
    const size_t mib = opt.mib;
    const size_t n = mib * (size_t{1} << 20) / sizeof(float);
    std::vector<float> x(n), acc(n, 0.0f);
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);

    std::printf("%s", echo::bench::machine_header(machine).c_str());
    std::printf("echo_quant_bench: %zu MiB fp32 (%zu values), group %d, 1 thread, %d runs (median [min, max])\n", mib,
                n, opt.group_size, opt.runs);
    const size_t bytes = n * sizeof(float);
    volatile uint32_t sink = 0;
    const Stats read = measure(bytes, opt.runs, [&] { sink = sink + read_all(x.data(), n); });
    const Stats update = measure(bytes, opt.runs, [&] { update_all(acc.data(), n); });
    const Stats copy = measure(bytes, opt.runs, [&] { std::memcpy(acc.data(), x.data(), bytes); });
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::printf("memory ceilings, GB/s of fp32 values: read %.2f [%.2f, %.2f], update %.2f [%.2f, %.2f], copy %.2f [%.2f, %.2f]\n",
                read.median, read.min, read.max, update.median, update.min, update.max, copy.median, copy.min, copy.max);
    std::printf("%-16s %4s %12s %24s %7s %24s %9s\n", "policy", "bits", "wire B/elem", "quantize GB/s", "of_read",
                "dequantize_add GB/s", "of_update");
    nlohmann::json rows = nlohmann::json::array();
    for (QuantPolicy policy : {QuantPolicy::symmetric, QuantPolicy::asym_naive, QuantPolicy::asym_zero_aware}) {
      for (int bits : {4, 8}) {
        const QuantSpec spec{policy, bits, opt.group_size};
        std::vector<uint8_t> wire(echo::comm::wire_bytes(n, spec));
        const Stats q = measure(bytes, opt.runs, [&] {
          const auto report = echo::comm::quantize(x.data(), n, spec, wire.data());
          ECHO_CHECK(report.ok(), "unexpected poisoned groups");
        });
        const Stats d = measure(bytes, opt.runs, [&] {
          const auto report = echo::comm::dequantize_add(wire.data(), n, spec, acc.data());
          ECHO_CHECK(report.ok(), "unexpected poisoned groups");
        });
        const std::string name(echo::config::to_string(policy));
        const double wire_per_elem = static_cast<double>(wire.size()) / static_cast<double>(n);
        std::printf("%-16s %4d %12.4f %8.2f [%5.2f, %5.2f] %7.2f %8.2f [%5.2f, %5.2f] %9.2f\n", name.c_str(), bits,
                    wire_per_elem, q.median, q.min, q.max, q.median / read.median, d.median, d.min, d.max,
                    d.median / update.median);
        rows.push_back({{"policy", name},
                        {"bits", bits},
                        {"group_size", opt.group_size},
                        {"mib", mib},
                        {"runs", opt.runs},
                        {"wire_bytes_per_elem", wire_per_elem},
                        {"quantize_gbps", {{"median", q.median}, {"min", q.min}, {"max", q.max}}},
                        {"dequantize_add_gbps", {{"median", d.median}, {"min", d.min}, {"max", d.max}}},
                        {"quantize_of_read", q.median / read.median},
                        {"dequantize_add_of_update", d.median / update.median}});
      }
    }

    // The compensator's passes (see pipeline_tile_elems). m1, m2 hold residual-sized values; the
    // state evolves from run to run (finish writes it) but stays finite and normal.
    // x is copied (finish writes its output there); the ceilings run on the same buffers.
    // NOTE: at most n (parse() keeps a group within n; a tile of several groups may not be).
    const size_t tile = std::min(n, pipeline_tile_elems(opt.group_size));
    std::vector<float> xs(x), t(tile);
    for (size_t i = 0; i < tile; ++i) t[i] = 2.0f * x[i];
    echo::comm::Compensator comp(echo::comm::CompensatorCoeffs{});
    comp.prepare(n, "echo_quant_bench");
    float* c1 = comp.m1_data();
    float* c2 = comp.m2_data();
    std::normal_distribution<float> residual(0.0f, 0.05f);
    for (size_t i = 0; i < n; ++i) {
      c1[i] = residual(rng);
      c2[i] = residual(rng);
    }
    echo::comm::FusedEchoSite site(comp, 2);
    // The tail's codes, one encoding per tile as the pipeline's gather slots hold them.
    const QuantSpec tail_spec{QuantPolicy::asym_zero_aware, 4, opt.group_size};
    const size_t tile_wire = echo::comm::wire_bytes(tile, tail_spec);
    std::vector<uint8_t> tail_codes((n + tile - 1) / tile * tile_wire);
    for_tiles(n, tile, [&](size_t b, size_t m) {
      ECHO_CHECK(echo::comm::quantize(xs.data() + b, m, tail_spec, tail_codes.data() + b / tile * tile_wire).ok(),
                 "unexpected poisoned groups");
    });
    const double tail_code_per_value = static_cast<double>(echo::comm::wire_bytes(n, tail_spec)) / static_cast<double>(n);
    volatile uint32_t zero = 0;  // update3's operand: its stores leave the values as they were
    const uint32_t flip = zero;
    struct PassRow {
      const char* name;
      double bytes_per_value;
      const char* ceiling;
      Stats s;
    };
    std::vector<PassRow> passes;
    const auto time_pass = [&](const char* name, double bytes_per_value, const char* ceiling, auto&& fn) {
      passes.push_back({name, bytes_per_value, ceiling,
                        measure(static_cast<size_t>(bytes_per_value * static_cast<double>(n)), opt.runs, fn)});
    };
    time_pass("read3", 12, "", [&] { for_tiles(n, tile, [&](size_t b, size_t m) { read3_tile(xs.data() + b, c1 + b, c2 + b, m, t.data()); }); });
    time_pass("update3", 24, "", [&] { for_tiles(n, tile, [&](size_t b, size_t m) { update3_tile(xs.data() + b, c1 + b, c2 + b, t.data(), m, flip); }); });
    for (int e : {0, 5}) {
      site.set_exponent(e);
      const bool fwd = e == 0;
      time_pass(fwd ? "load e=0" : "load e=5", 12, "read3",
                [&] { for_tiles(n, tile, [&](size_t b, size_t m) { site.load(xs.data(), b, m, t.data()); }); });
      time_pass(fwd ? "finish e=0" : "finish e=5", 24, "update3",
                [&] { for_tiles(n, tile, [&](size_t b, size_t m) { site.finish(xs.data(), b, m, t.data()); }); });
    }
    site.set_exponent(0);
    time_pass("decode+finish e=0", 24 + tail_code_per_value, "update3", [&] {
      for_tiles(n, tile, [&](size_t b, size_t m) {
        ECHO_CHECK(echo::comm::dequantize(tail_codes.data() + b / tile * tile_wire, m, tail_spec, t.data()).ok(),
                   "unexpected poisoned groups");
        site.finish(xs.data(), b, m, t.data());
      });
    });
    // What decoding in L1-sized pieces inside finish would buy (the pipeline decodes a whole tile,
    // 0.94 MiB, into L2 first): the same codes cut into 16-group chunks, each encoded on its own,
    // decoded into the first 2048 values of the tile buffer and finished at once.
    const size_t chunk = std::min(tile, 16 * static_cast<size_t>(opt.group_size));  // whole groups, fits the tile buffer
    const size_t chunk_wire = echo::comm::wire_bytes(chunk, tail_spec);
    std::vector<uint8_t> chunk_codes((n + chunk - 1) / chunk * chunk_wire);
    for_tiles(n, chunk, [&](size_t b, size_t m) {
      ECHO_CHECK(echo::comm::quantize(xs.data() + b, m, tail_spec, chunk_codes.data() + b / chunk * chunk_wire).ok(),
                 "unexpected poisoned groups");
    });
    time_pass("decode+finish/16g", 24 + tail_code_per_value, "update3", [&] {
      for_tiles(n, chunk, [&](size_t b, size_t m) {
        ECHO_CHECK(echo::comm::dequantize(chunk_codes.data() + b / chunk * chunk_wire, m, tail_spec, t.data()).ok(),
                   "unexpected poisoned groups");
        site.finish(xs.data(), b, m, t.data());
      });
    });
    const auto ceiling_of = [&](const std::string& name) {
      for (const PassRow& p : passes)
        if (name == p.name) return p.s.median;
      return 0.0;
    };
    std::printf("compensator passes, tile %zu values (in cache), x/m1/m2 %zu MiB each; GB/s = bytes through memory\n", tile,
                mib);
    std::printf("%-18s %8s %24s %10s %8s %10s\n", "pass", "B/value", "GB/s moved", "ns/value", "ceiling", "of_ceiling");
    nlohmann::json pass_rows = nlohmann::json::array();
    for (const PassRow& p : passes) {
      const double ceil = p.ceiling[0] ? ceiling_of(p.ceiling) : p.s.median;
      std::printf("%-18s %8.2f %8.2f [%5.2f, %5.2f] %10.3f %8s %10.2f\n", p.name, p.bytes_per_value, p.s.median, p.s.min,
                  p.s.max, p.bytes_per_value / p.s.median, p.ceiling[0] ? p.ceiling : "-", p.s.median / ceil);
      pass_rows.push_back({{"pass", p.name},
                           {"bytes_per_value", p.bytes_per_value},
                           {"gbps", {{"median", p.s.median}, {"min", p.s.min}, {"max", p.s.max}}},
                           {"ns_per_value", p.bytes_per_value / p.s.median},
                           {"ceiling", p.ceiling},
                           {"of_ceiling", p.s.median / ceil}});
    }

    if (!opt.json.empty()) {
      const nlohmann::json ceilings{{"read_gbps", {{"median", read.median}, {"min", read.min}, {"max", read.max}}},
                                    {"update_gbps", {{"median", update.median}, {"min", update.min}, {"max", update.max}}},
                                    {"copy_gbps", {{"median", copy.median}, {"min", copy.min}, {"max", copy.max}}}};
      echo::write_file_atomic(opt.json,
                              nlohmann::json{{"machine", echo::bench::to_json(machine)},
                                             {"memory_ceilings", ceilings},
                                             {"results", rows},
                                             {"compensator_tile_elems", tile},
                                             {"compensator_passes", pass_rows}}
                                      .dump(2) +
                                  "\n",
                              "--json " + opt.json);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "echo_quant_bench: %s\n", e.what());
    return 1;
  }
}
