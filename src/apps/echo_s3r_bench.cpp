// echo_s3r_bench: forward + backward of one SwiGLU FFN block (gate/up column-, down row-parallel
// at tp = 1) on the CPU, per linear-layer mode, after the S3R paper's Table III (shapes scaled
// down from W1-W9). Prints the median time, the ratio to the fp32 baseline measured in the same
// run, and the share spent quantizing (scales, RTNE, thresholds, rounding), in the GEMMs and in
// S3R-EC; plus the int8 GEMM against OpenBLAS sgemm on the block's shapes. A program, not a test.
//   echo_s3r_bench --shapes 128x512,256x1024,512x2048 --tokens 256 --seq 64 --reps 5
#include <cblas.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "apps/bench/machine.h"
#include "apps/output_option.h"
#include "apps/parse_command_line.h"
#include "backend/ops.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/philox.h"
#include "quant/int8_gemm.h"
#include "quant/int8_linear.h"
#include "quant/int8_quantize.h"

namespace echo {
namespace {

using config::BackwardRounding;
using config::EcMode;
using config::LinearMode;
using config::ThresholdMode;
using quant::Int8LinearConfig;
using quant::LinearContext;
using quant::LinearTimes;
using Clock = std::chrono::steady_clock;

struct Shape {
  std::string name;
  int64_t hidden, ffn;
};

struct Mode {
  const char* key;  // for --modes
  const char* name;
  Int8LinearConfig cfg;
};

std::vector<Mode> modes(uint64_t seed) {
  const auto int8 = [&](BackwardRounding r, ThresholdMode t, EcMode ec) {
    return Int8LinearConfig{LinearMode::int8, r, t, ec, seed};
  };
  return {
      {"fp32", "fp32 (bf16 mode)", {LinearMode::bf16, BackwardRounding::rtne, ThresholdMode::per_token, EcMode::none, seed}},
      {"rtne", "int8 rtne", int8(BackwardRounding::rtne, ThresholdMode::per_token, EcMode::none)},
      {"sr", "indep. SR", int8(BackwardRounding::sr_independent, ThresholdMode::per_token, EcMode::none)},
      {"s3r", "S3R per_token", int8(BackwardRounding::s3r, ThresholdMode::per_token, EcMode::none)},
      {"dx_only", "S3R-EC dx_only", int8(BackwardRounding::s3r, ThresholdMode::per_token, EcMode::dx_only)},
      {"two_way", "S3R-EC two_way", int8(BackwardRounding::s3r, ThresholdMode::per_token, EcMode::two_way)}};
}

// A generator from all 64 bits of a seed. Seeds below 2^32 seed mt19937 directly, as before this
// took 64 bits, so the figures in docs/ reproduce; a larger seed goes through a seed_seq of both
// halves (truncating it ran the data of seed % 2^32).
std::mt19937 generator_of(uint64_t seed) {
  if (seed >> 32 == 0) return std::mt19937(static_cast<uint32_t>(seed));
  std::seed_seq halves{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  return std::mt19937(halves);
}

std::vector<float> random_vec(int64_t n, uint64_t seed, float scale) {
  std::mt19937 rng = generator_of(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One FFN block: y = down(silu(gate(x)) * up(x)), and its backward for an upstream gradient g.
struct FfnBlock {
  int64_t tokens, seq, hidden, ffn;
  std::vector<float> x, w_gate, w_up, w_down, g;                      // inputs
  std::vector<float> gate, up, act, y, dact, dgate, dup, dx, dw_gate, dw_up, dw_down;  // work
  quant::Int8LinearSaved s_gate, s_up, s_down;

  FfnBlock(int64_t t, int64_t s, int64_t h, int64_t f, uint64_t seed)
      : tokens(t),
        seq(s),
        hidden(h),
        ffn(f),
        x(random_vec(t * h, seed, 1.0f)),
        w_gate(random_vec(f * h, seed + 1, 0.02f)),
        w_up(random_vec(f * h, seed + 2, 0.02f)),
        w_down(random_vec(h * f, seed + 3, 0.02f)),
        g(random_vec(t * h, seed + 4, 1e-3f)),
        gate(t * f),
        up(t * f),
        act(t * f),
        y(t * h),
        dact(t * f),
        dgate(t * f),
        dup(t * f),
        dx(t * h),
        dw_gate(f * h),
        dw_up(f * h),
        dw_down(h * f) {}

  void step(const Int8LinearConfig& cfg, uint32_t step_idx, LinearTimes& times) {
    // Sites of the layer's FFN projections (any fixed numbering works; the model owns the real one).
    const LinearContext c_gate{.step = step_idx, .layer = 0, .site = 4, .seq_len = seq};
    LinearContext c_up = c_gate, c_down = c_gate;
    c_up.site = 5, c_down.site = 6;
    const int64_t T = tokens, H = hidden, F = ffn;
    quant::linear_forward(cfg, c_gate, x.data(), w_gate.data(), T, H, F, gate.data(), s_gate, &times);
    quant::linear_forward(cfg, c_up, x.data(), w_up.data(), T, H, F, up.data(), s_up, &times);
    cpu::swiglu_forward<float>(gate.data(), up.data(), T * F, act.data());
    quant::linear_forward(cfg, c_down, act.data(), w_down.data(), T, F, H, y.data(), s_down, &times);

    quant::Int8BackwardTrace trace;
    trace.keep_tensors = false;
    quant::linear_backward(cfg, c_down, g.data(), act.data(), w_down.data(), s_down, T, F, H, dact.data(), false,
                           dw_down.data(), &trace);
    cpu::swiglu_backward<float>(dact.data(), gate.data(), up.data(), T * F, dgate.data(), dup.data());
    quant::linear_backward(cfg, c_gate, dgate.data(), x.data(), w_gate.data(), s_gate, T, H, F, dx.data(), false,
                           dw_gate.data(), &trace);
    quant::linear_backward(cfg, c_up, dup.data(), x.data(), w_up.data(), s_up, T, H, F, dx.data(), true,
                           dw_up.data(), &trace);
    times.quantize += trace.times.quantize;
    times.gemm += trace.times.gemm;
    times.ec += trace.times.ec;
  }
};

struct Stats {
  double median_ms, p10_ms, p90_ms, mean_ms;
};

Stats summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) { return ms[static_cast<size_t>(q * (ms.size() - 1) + 0.5)]; };
  double sum = 0;
  for (double v : ms) sum += v;
  return {at(0.5), at(0.1), at(0.9), sum / static_cast<double>(ms.size())};
}

template <class Fn>
Stats time_ms(int warmup, int reps, Fn&& fn) {
  std::vector<double> ms;
  for (int i = 0; i < warmup + reps; ++i) {
    const auto t0 = Clock::now();
    fn(i);
    const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i >= warmup) ms.push_back(dt);
  }
  return summarize(std::move(ms));
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// The cost of drawing S3R thresholds: quantize_gradient on a (rows x 1) gradient, where the
// Philox calls weigh most next to the per-row rounding. Median ns per token (row) of this
// thread's CPU time, so that other processes on a shared machine do not count.
double threshold_ns_per_token(quant::ThresholdSharing sharing, int64_t rows, int warmup, int reps, uint64_t seed) {
  const std::vector<float> g = random_vec(rows, seed, 40.0f);
  std::vector<int8_t> q(rows);
  const quant::ThresholdStream stream{philox_key(seed), 0, quant::layer_site_word(0, 4), sharing};
  std::vector<double> ms;
  for (int i = 0; i < warmup + reps; ++i) {
    quant::GradientRounding rule{true, stream, 0, 0, 64};
    rule.stream.step = static_cast<uint32_t>(i);
    const double t0 = thread_cpu_ms();
    quant::quantize_gradient(g.data(), rows, 1, 127.0f, rule, q.data(), nullptr);
    if (i >= warmup) ms.push_back(thread_cpu_ms() - t0);
  }
  return summarize(std::move(ms)).median_ms * 1e6 / static_cast<double>(rows);
}

// Each of the block's matrices, (tokens, hidden), (tokens, ffn) and (ffn, hidden), holds at most
// this many values. Measured peak memory is about 100 bytes per value of such a matrix (fp32
// weights, activations, gradients, their int8 copies and the GEMM outputs): 1.6 GiB at the limit
// (120 MB at 1024x1024 with 1024 tokens, 430 MB at 2048x2048 with 2048). The paper's W2 (1024x4096
// at 256 tokens) is a quarter of the limit.
constexpr int64_t kMaxMatrixValues = int64_t{1} << 24;

// "HIDDENxFFN": two positive decimal integers, each at most kMaxMatrixValues.
Shape parse_shape(const std::string& s) {
  const auto dims = [](const std::string& t, int64_t& v) {
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos) return false;
    v = std::stoll(t);
    return v >= 1 && v <= kMaxMatrixValues;
  };
  const auto x = s.find('x');
  Shape sh{s, 0, 0};
  ECHO_INPUT_CHECK(x != std::string::npos && dims(s.substr(0, x), sh.hidden) && dims(s.substr(x + 1), sh.ffn),
                   "--shapes takes HIDDENxFFN items of two whole numbers from 1 to {}, e.g. 512x2048 (got '{}')",
                   kMaxMatrixValues, s);
  ECHO_INPUT_CHECK(sh.hidden * sh.ffn <= kMaxMatrixValues,
                   "--shapes {}: hidden x ffn = {} values, more than the {} this benchmark allows (about 1.6 GiB "
                   "at that size)",
                   s, sh.hidden * sh.ffn, kMaxMatrixValues);
  return sh;
}

int bench_main(int argc, char** argv) {
  std::vector<std::string> shape_args = {"128x512", "256x1024", "512x2048"};
  int64_t tokens = 256, seq = 64;
  int reps = 5, warmup = 1, blas_threads = 1;
  uint64_t seed = 1234;
  std::string json_path;
  std::vector<std::string> mode_keys = {"fp32", "rtne", "sr", "s3r", "dx_only", "two_way"};
  CLI::App app{"echo_s3r_bench: SwiGLU FFN block forward+backward per linear mode (S3R paper Table III, scaled down)"};
  app.add_option("--shapes", shape_args, "HIDDENxFFN list (paper W1 = 512x2048, W2 = 1024x4096)")
      ->delimiter(',')
      ->capture_default_str();
  // CLI::Range, not CLI::PositiveNumber: its message printed the largest double in 309 digits.
  const auto positive = CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max());
  const auto non_negative = CLI::Range(0, std::numeric_limits<int>::max());
  app.add_option("--tokens", tokens, "tokens per micro-batch (T)")->check(positive)->capture_default_str();
  app.add_option("--seq", seq, "tokens per example (S); divides --tokens")->check(positive)->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions (median, p10, p90)")->check(positive)->capture_default_str();
  app.add_option("--warmup", warmup, "untimed repetitions")->check(non_negative)->capture_default_str();
  app.add_option("--blas-threads", blas_threads,
                 "OpenBLAS threads (oneDNN's int8 GEMM follows OMP_NUM_THREADS, every core when unset: "
                 "set OMP_NUM_THREADS to match)")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--seed", seed, "data and threshold seed")->capture_default_str();
  app.add_option("--modes", mode_keys, "which of fp32,rtne,sr,s3r,dx_only,two_way to run")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--json", json_path, "also write the results as JSON to this file")
      ->check(echo::apps::writable_output());
  try {
    echo::apps::parse_naming_unknown_options(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  ECHO_INPUT_CHECK(tokens % seq == 0,
                   "--seq {} must divide --tokens {} (a micro-batch is whole examples of --seq tokens)", seq, tokens);
  ECHO_INPUT_CHECK(tokens <= kMaxMatrixValues, "--tokens must be at most {} (got {})", kMaxMatrixValues, tokens);
  std::vector<std::string> known;
  for (const Mode& m : modes(seed)) known.push_back(m.key);
  for (const std::string& key : mode_keys)
    ECHO_INPUT_CHECK(std::find(known.begin(), known.end(), key) != known.end(), "--modes: '{}' is not one of {}", key,
                     fmt::join(known, ", "));
  ECHO_INPUT_CHECK(!mode_keys.empty(), "--modes names no mode; choose from {}", fmt::join(known, ", "));
  // Parsed before any timing, so a bad item is refused at once rather than after the others ran.
  std::vector<Shape> shapes;
  for (const std::string& arg : shape_args) {
    shapes.push_back(parse_shape(arg));
    ECHO_INPUT_CHECK(tokens * std::max(shapes.back().hidden, shapes.back().ffn) <= kMaxMatrixValues,
                     "--tokens {} x the larger side of --shapes {} = {} values, more than the {} this benchmark allows "
                     "(about 1.6 GiB at that size)",
                     tokens, arg, tokens * std::max(shapes.back().hidden, shapes.back().ffn), kMaxMatrixValues);
  }

  openblas_set_num_threads(blas_threads);
  // OpenBLAS caps the count at its build's maximum without a word: the header would misreport it.
  ECHO_INPUT_CHECK(openblas_get_num_threads() == blas_threads,
                   "--blas-threads {}: this OpenBLAS runs at most {} threads", blas_threads,
                   openblas_get_num_threads());
  const std::string core = openblas_get_corename();
  const bench::MachineInfo machine = bench::describe_machine();  // after the thread count is set
  std::printf("%s", bench::machine_header(machine).c_str());
  std::printf("echo_s3r_bench: SwiGLU FFN block fwd+bwd, T = %lld tokens (%lld examples x %lld), %d reps (median)\n",
              static_cast<long long>(tokens), static_cast<long long>(tokens / seq), static_cast<long long>(seq), reps);
  // oneDNN's OpenMP threads are fixed when the runtime starts; a count other than OpenBLAS's
  // (every core by default, on a machine that runs other work) compares unequal thread counts.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const std::string omp_threads =
      omp && *omp ? fmt::format("OMP_NUM_THREADS={}", omp) : "OMP_NUM_THREADS unset: every core";
  std::printf("int8 GEMM: oneDNN dnnl_gemm_s8s8s32 (%s); OpenBLAS core: %s (%d thread%s)\n", omp_threads.c_str(),
              core.c_str(), blas_threads, blas_threads == 1 ? "" : "s");
  if (!omp || std::string(omp) != std::to_string(blas_threads))
    std::printf(
        "NOTE: oneDNN's int8 GEMM does not run on --blas-threads %d thread%s; set OMP_NUM_THREADS=%d for an\n"
        "      equal comparison (with more threads than free cores it can be many times slower).\n",
        blas_threads, blas_threads == 1 ? "" : "s", blas_threads);
  if (core == "Prescott" || core == "Core2" || core == "Nehalem")
    std::printf("NOTE: OpenBLAS did not recognise this CPU and runs its %s (SSE) kernels; set e.g.\n"
                "      OPENBLAS_CORETYPE=SkylakeX (AVX-512) or Haswell (AVX2) for a fair fp32 baseline.\n",
                core.c_str());

  nlohmann::json out = nlohmann::json::array();
  {
    const int64_t rows = int64_t{1} << 20;
    const double per_token = threshold_ns_per_token(quant::ThresholdSharing::per_token, rows, warmup, reps, seed);
    const double per_example = threshold_ns_per_token(quant::ThresholdSharing::per_example, rows, warmup, reps, seed);
    std::printf("S3R threshold draw (quantize_gradient on %lld x 1, thread CPU time): per_token %.2f ns/token, "
                "per_example %.2f ns/token\n",
                static_cast<long long>(rows), per_token, per_example);
    out.push_back({{"kind", "threshold_draw"}, {"rows", rows}, {"per_token_ns", per_token},
                   {"per_example_ns", per_example}});
  }
  for (const Shape& sh : shapes) {
    FfnBlock block(tokens, seq, sh.hidden, sh.ffn, seed);
    const int64_t T = tokens, H = sh.hidden, F = sh.ffn;

    // The block's GEMMs alone: forward gate (T, F) = X·W^T and backward dW (F, H) = Q^T·X̂.
    std::vector<int8_t> a8(T * H, 3), b8(F * H, -5), g8(T * F, 7);
    std::vector<int32_t> c32(std::max(T * F, F * H));
    std::vector<float> c32f(std::max(T * F, F * H));
    const Stats i8_nt = time_ms(warmup, reps, [&](int) {
      quant::gemm_s8s32(false, true, T, F, H, a8.data(), b8.data(), c32.data());
    });
    const Stats f32_nt = time_ms(warmup, reps, [&](int) {
      cpu::gemm<float>(false, true, T, F, H, 1.0f, block.x.data(), block.w_gate.data(), 0.0f, c32f.data());
    });
    const Stats i8_tn = time_ms(warmup, reps, [&](int) {
      quant::gemm_s8s32(true, false, F, H, T, g8.data(), a8.data(), c32.data());
    });
    const Stats f32_tn = time_ms(warmup, reps, [&](int) {
      cpu::gemm<float>(true, false, F, H, T, 1.0f, block.dgate.data(), block.x.data(), 0.0f, c32f.data());
    });
    std::printf("\n== %s: hidden %lld, ffn %lld ==\n", sh.name.c_str(), static_cast<long long>(H),
                static_cast<long long>(F));
    std::printf("GEMM (T,F,H)=(%lld,%lld,%lld)  X·W^T: int8 %.3f ms, sgemm %.3f ms (int8 %.2fx);  Q^T·X: int8 %.3f ms, "
                "sgemm %.3f ms (int8 %.2fx)\n",
                static_cast<long long>(T), static_cast<long long>(F), static_cast<long long>(H), i8_nt.median_ms,
                f32_nt.median_ms, f32_nt.median_ms / i8_nt.median_ms, i8_tn.median_ms, f32_tn.median_ms,
                f32_tn.median_ms / i8_tn.median_ms);
    std::printf("%-18s %10s %10s %10s %9s %9s %8s %8s %8s %8s\n", "mode", "median ms", "p10 ms", "p90 ms", "vs fp32",
                "vs S3R", "quant%", "gemm%", "ec%", "other%");

    double base_ms = 0, s3r_ms = 0;
    for (const Mode& m : modes(seed)) {
      if (std::find(mode_keys.begin(), mode_keys.end(), m.key) == mode_keys.end()) continue;
      LinearTimes t;
      const Stats st = time_ms(warmup, reps, [&](int i) {
        LinearTimes step_t;
        block.step(m.cfg, static_cast<uint32_t>(i), step_t);
        if (i >= warmup) t.quantize += step_t.quantize, t.gemm += step_t.gemm, t.ec += step_t.ec;
      });
      if (m.cfg.mode == LinearMode::bf16) base_ms = st.median_ms;
      const bool is_s3r = m.cfg.rounding == BackwardRounding::s3r && m.cfg.ec == EcMode::none;
      if (is_s3r) s3r_ms = st.median_ms;
      const double total = (t.quantize + t.gemm + t.ec) * 1e3 / reps;  // ms per rep inside the linears
      const double per_rep = st.mean_ms;  // the shares are of the mean, as the parts are summed
      const double q = 100.0 * t.quantize * 1e3 / reps / per_rep, g = 100.0 * t.gemm * 1e3 / reps / per_rep,
                   e = 100.0 * t.ec * 1e3 / reps / per_rep;
      char vs_s3r[16] = "";
      if (m.cfg.ec != EcMode::none && s3r_ms > 0)
        std::snprintf(vs_s3r, sizeof vs_s3r, "%+.1f%%", 100.0 * (st.median_ms / s3r_ms - 1.0));
      char vs_base[16] = "n/a";
      if (base_ms > 0) std::snprintf(vs_base, sizeof vs_base, "%.2fx", base_ms / st.median_ms);
      std::printf("%-18s %10.3f %10.3f %10.3f %9s %9s %7.1f%% %7.1f%% %7.1f%% %7.1f%%\n", m.name, st.median_ms,
                  st.p10_ms, st.p90_ms, vs_base, vs_s3r, q, g, e, std::max(0.0, 100.0 - q - g - e));
      out.push_back({{"shape", sh.name},
                     {"hidden", H},
                     {"ffn", F},
                     {"tokens", T},
                     {"seq", seq},
                     {"mode", m.name},
                     {"median_ms", st.median_ms},
                     {"p10_ms", st.p10_ms},
                     {"p90_ms", st.p90_ms},
                     {"speedup_vs_fp32", base_ms > 0 ? base_ms / st.median_ms : 0.0},
                     {"quantize_ms", t.quantize * 1e3 / reps},
                     {"gemm_ms", t.gemm * 1e3 / reps},
                     {"ec_ms", t.ec * 1e3 / reps},
                     {"linear_ms", total},
                     {"gemm_int8_nt_ms", i8_nt.median_ms},
                     {"sgemm_nt_ms", f32_nt.median_ms},
                     {"gemm_int8_tn_ms", i8_tn.median_ms},
                     {"sgemm_tn_ms", f32_tn.median_ms},
                     {"openblas_core", core},
                     {"int8_gemm", "onednn"}});
    }
  }
  if (!json_path.empty()) {
    write_file_atomic(json_path, nlohmann::json{{"machine", bench::to_json(machine)}, {"results", out}}.dump(2) + "\n",
                      "--json " + json_path);
    std::printf("\nwrote %s\n", json_path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace echo

int main(int argc, char** argv) {
  try {
    return echo::bench_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "echo_s3r_bench: %s\n", e.what());
    return 1;
  }
}
