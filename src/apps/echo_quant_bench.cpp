// echo_quant_bench: single-thread throughput of the CPU group quantizer (quantize and
// dequantize_add) on random fp32 data, per policy at b = 4 and 8, g = 128. Prints a table of the
// median (and min/max) over several runs in GB/s of fp32 input processed per core, and bytes on the
// wire. Usage: echo_quant_bench [--mib N] [--runs R] [--group G]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/echo/quantize.h"
#include "core/config/config.h"
#include "core/error.h"

namespace {

using echo::QuantPolicy;
using echo::QuantSpec;

struct Options {
  size_t mib = 64;
  int runs = 7;
  int group_size = 128;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--mib" && has_value) {
      o.mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--runs" && has_value) {
      o.runs = std::atoi(argv[++i]);
    } else if (arg == "--group" && has_value) {
      o.group_size = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--mib N] [--runs R] [--group G]\n", argv[0]);
      std::exit(arg == "--help" || arg == "-h" ? 0 : 2);
    }
  }
  ECHO_CHECK(o.mib > 0 && o.runs > 0, "--mib and --runs must be positive");
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

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options opt = parse(argc, argv);
    const size_t n = opt.mib * (size_t{1} << 20) / sizeof(float);
    std::vector<float> x(n), acc(n, 0.0f);
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);

    std::printf("echo_quant_bench: %zu MiB fp32 (%zu values), group %d, 1 thread, %d runs (median [min, max])\n",
                opt.mib, n, opt.group_size, opt.runs);
    std::printf("%-16s %4s %12s %24s %24s\n", "policy", "bits", "wire B/elem", "quantize GB/s", "dequantize_add GB/s");
    for (QuantPolicy policy : {QuantPolicy::symmetric, QuantPolicy::asym_naive, QuantPolicy::asym_zero_aware}) {
      for (int bits : {4, 8}) {
        const QuantSpec spec{policy, bits, opt.group_size};
        std::vector<uint8_t> wire(echo::comm::wire_bytes(n, spec));
        const size_t bytes = n * sizeof(float);
        const Stats q = measure(bytes, opt.runs, [&] {
          const auto report = echo::comm::quantize(x.data(), n, spec, wire.data());
          ECHO_CHECK(report.ok(), "unexpected poisoned groups");
        });
        const Stats d = measure(bytes, opt.runs, [&] {
          const auto report = echo::comm::dequantize_add(wire.data(), n, spec, acc.data());
          ECHO_CHECK(report.ok(), "unexpected poisoned groups");
        });
        std::printf("%-16s %4d %12.4f %8.2f [%5.2f, %5.2f] %8.2f [%5.2f, %5.2f]\n", std::string(echo::config::to_string(policy)).c_str(), bits,
                    static_cast<double>(wire.size()) / static_cast<double>(n), q.median, q.min, q.max, d.median, d.min,
                    d.max);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "echo_quant_bench: %s\n", e.what());
    return 1;
  }
}
