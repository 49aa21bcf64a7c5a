// echo_quant_bench: single-thread throughput of the CPU group quantizer (quantize and
// dequantize_add) on random fp32 data, per policy at b = 4 and 8, g = 128. Prints a table of the
// median (and min/max) over several runs in GB/s of fp32 input processed per core, and bytes on the
// wire. The same run times memory ceilings on the same buffers (`read`: a read-only pass over x;
// `update`: a read-modify-write pass over the accumulator; `copy`: memcpy of x into the
// accumulator, echo_bench's ceiling), so each row also says what fraction of the memory bandwidth
// it reaches: quantize against `read` (it reads 4 bytes a value and writes about half a byte),
// dequantize_add against `update` (it reads and writes the 4-byte accumulator, and reads the
// codes).
// Usage: echo_quant_bench [--mib N] [--runs R] [--group G] [--json FILE]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "apps/bench/machine.h"
#include "comm/echo/quantize.h"
#include "core/config/config.h"
#include "core/error.h"
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
  app.add_option("--group", o.group_size, "values per quantization group")->capture_default_str();
  app.add_option("--json", o.json, "also write the table as JSON to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::string& t = o.mib_text;
  const bool digits_only = !t.empty() && t.size() <= 6 && t.find_first_not_of("0123456789") == std::string::npos;
  o.mib = digits_only ? std::stoull(t) : 0;
  ECHO_INPUT_CHECK(o.mib >= 1 && o.mib <= kMaxMib, "--mib must be a whole number of MiB from 1 to {} (got '{}')", kMaxMib, t);
  ECHO_INPUT_CHECK(o.runs >= 1, "--runs must be at least 1 (got {})", o.runs);
  const size_t avail = echo::bench::available_memory_bytes();
  const size_t need = 3 * o.mib * (size_t{1} << 20);  // x, acc and (at most) 8-bit codes with parameters
  ECHO_INPUT_CHECK(avail == 0 || need <= avail, "--mib {} needs about {:.1f} GiB but only {:.1f} GiB is available", o.mib,
             static_cast<double>(need) / (1 << 30), static_cast<double>(avail) / (1 << 30));
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
    if (!opt.json.empty()) {
      std::ofstream f(opt.json);
      ECHO_INPUT_CHECK(f.good(), "cannot write --json file '{}'", opt.json);
      const nlohmann::json ceilings{{"read_gbps", {{"median", read.median}, {"min", read.min}, {"max", read.max}}},
                                    {"update_gbps", {{"median", update.median}, {"min", update.min}, {"max", update.max}}},
                                    {"copy_gbps", {{"median", copy.median}, {"min", copy.min}, {"max", copy.max}}}};
      f << nlohmann::json{{"machine", echo::bench::to_json(machine)}, {"memory_ceilings", ceilings}, {"results", rows}}.dump(2)
        << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "echo_quant_bench: %s\n", e.what());
    return 1;
  }
}
