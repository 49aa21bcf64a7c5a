// echo_kernel_bench: the CUDA backend's kernels against the device's own ceilings, measured in
// the same run (a program, not a test; CUDA builds only):
//   ceilings   device-to-device copy bandwidth (bytes read + written) and a large bf16 GEMM
//   memory     RMSNorm, SwiGLU, residual add, f32->bf16 cast, AdamW as a fraction of the copy
//              ceiling (bytes each kernel must move at least, over its time)
//   compute    the Qwen3 GEMMs of one layer at the given tokens, bf16, and the FFN GEMMs in int8
//              (TN, cuBLASLt IMMA), as a fraction of the GEMM ceiling; attention forward and
//              backward (effective FLOP/s counting the causal half)
//   echo_kernel_bench [--tokens 16384] [--hidden 1024] [--ffn 3072] [--heads 16] [--kv-heads 8]
//                     [--head-dim 128] [--seq 2048] [--iters 20] [--json out.json]
//                     [--copy-mib 1024] [--gemm-ceiling-n 8192] [--adamw-params 67108864]
// (the last three size the ceilings and the AdamW row: the defaults are what a GPU needs to reach
// its peaks; the kernel emulator's test runs every row at small sizes.)
// Each number is the median of --iters timed runs (CUDA events) after 3 warm-ups.
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "apps/bench/machine.h"
#include "apps/output_option.h"
#include "apps/parse_command_line.h"
#include "attention.cuh"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/half.h"
#include "cuda_check.h"
#include "gemm.cuh"
#include "ops.cuh"

namespace echo {
namespace {

// Median milliseconds of `iters` runs of f on the stream, after 3 warm-ups.
double time_ms(cudaStream_t s, int iters, const std::function<void()>& f) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// A device tensor of random values in [-1, 1) (f32 or bf16), or random int8 / small ints.
Tensor random_device(std::vector<int64_t> shape, DType dtype, uint64_t seed) {
  Tensor host = Tensor::empty(shape, dtype);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t n = host.numel();
  switch (dtype) {
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) host.data<float>()[i] = u(gen);
      break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) host.data<uint16_t>()[i] = float_to_bf16_bits(u(gen));
      break;
    case DType::i8:
      for (int64_t i = 0; i < n; ++i) host.data<int8_t>()[i] = static_cast<int8_t>(gen() % 255 - 127);
      break;
    default:
      ECHO_FAIL("random_device: unsupported dtype {}", dtype);
  }
  return host.to(Device::cuda);
}

struct Row {
  std::string name;
  double ms = 0;
  double amount = 0;  // bytes (memory rows) or FLOP (compute rows)
  double ceiling = 0;
  bool memory = true;
  double rate() const { return amount / (ms * 1e-3); }
  double fraction() const { return ceiling > 0 ? rate() / ceiling : 0; }
};

int bench_main(int argc, char** argv) {
  int64_t tokens = 16384, hidden = 1024, ffn = 3072, heads = 16, kv_heads = 8, head_dim = 128, seq = 2048;
  int64_t copy_mib = 1024, gemm_ceiling_n = 8192, adamw_params = int64_t{64} << 20;
  int iters = 20;
  std::string json_path;
  CLI::App app{"echo_kernel_bench: CUDA kernels against the copy and GEMM ceilings of this GPU"};
  app.add_option("--tokens", tokens, "tokens per step (rows of the activations)")->capture_default_str();
  app.add_option("--hidden", hidden, "model width")->capture_default_str();
  app.add_option("--ffn", ffn, "MLP width")->capture_default_str();
  app.add_option("--heads", heads, "query heads")->capture_default_str();
  app.add_option("--kv-heads", kv_heads, "key/value heads")->capture_default_str();
  app.add_option("--head-dim", head_dim, "head dimension")->capture_default_str();
  app.add_option("--seq", seq, "sequence length for attention (batch = tokens / seq)")->capture_default_str();
  app.add_option("--iters", iters, "timed runs per kernel (median)")->capture_default_str();
  app.add_option("--json", json_path, "also write the results as JSON")->check(echo::apps::writable_output());
  app.add_option("--copy-mib", copy_mib, "bytes (MiB) of the device-to-device copy ceiling")->capture_default_str();
  app.add_option("--gemm-ceiling-n", gemm_ceiling_n, "n of the n x n x n bf16 GEMM ceiling")->capture_default_str();
  app.add_option("--adamw-params", adamw_params, "fp32 parameters of the cast and AdamW rows")->capture_default_str();
  try {
    echo::apps::parse_naming_unknown_options(app, argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto [name, v] : {std::pair{"--tokens", tokens},
                         {"--hidden", hidden},
                         {"--ffn", ffn},
                         {"--heads", heads},
                         {"--kv-heads", kv_heads},
                         {"--head-dim", head_dim},
                         {"--seq", seq},
                         {"--copy-mib", copy_mib},
                         {"--gemm-ceiling-n", gemm_ceiling_n},
                         {"--adamw-params", adamw_params}})
    ECHO_INPUT_CHECK(v >= 1, "{} must be at least 1 (got {})", name, v);
  ECHO_INPUT_CHECK(iters >= 1, "--iters must be at least 1 (got {})", iters);
  ECHO_INPUT_CHECK(tokens % seq == 0, "--tokens ({}) must be a multiple of --seq ({})", tokens, seq);
  ECHO_INPUT_CHECK(heads % kv_heads == 0, "--heads ({}) must be a multiple of --kv-heads ({})", heads, kv_heads);
  ECHO_INPUT_CHECK(cuda_device_count() > 0, "echo_kernel_bench needs a CUDA device; none is usable here");
  const bench::MachineInfo machine = bench::describe_machine();
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));

  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  cuda::GemmContext gemm;
  std::vector<Row> rows;

  // ---- ceilings ----
  const int64_t copy_bytes = copy_mib << 20;
  Tensor src = Tensor::empty({copy_bytes}, DType::u8, Device::cuda),
         dst = Tensor::empty({copy_bytes}, DType::u8, Device::cuda);
  const double copy_ms = time_ms(
      s, iters, [&] { CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), copy_bytes, cudaMemcpyDeviceToDevice, s)); });
  const double copy_ceiling = 2.0 * copy_bytes / (copy_ms * 1e-3);
  rows.push_back({fmt::format("copy d2d {} MiB (ceiling)", copy_mib), copy_ms, 2.0 * copy_bytes, copy_ceiling, true});
  src = {}, dst = {};
  const int64_t big = gemm_ceiling_n;
  Tensor ga = random_device({big, big}, DType::bf16, 1), gb = random_device({big, big}, DType::bf16, 2);
  Tensor gc = Tensor::empty({big, big}, DType::bf16, Device::cuda);
  const double big_ms = time_ms(s, iters, [&] { cuda::gemm(gemm, false, true, 1.0, ga, gb, 0.0, gc, s); });
  const double gemm_ceiling = 2.0 * big * big * big / (big_ms * 1e-3);
  rows.push_back({fmt::format("bf16 gemm {}^3 (ceiling)", big), big_ms, 2.0 * big * big * big, gemm_ceiling, false});
  ga = {}, gb = {}, gc = {};

  // ---- memory-bound kernels (bf16 activations) ----
  const int64_t n = tokens * hidden, nf = tokens * ffn;
  Tensor x = random_device({tokens, hidden}, DType::bf16, 3), w = random_device({hidden}, DType::bf16, 4);
  Tensor out = Tensor::empty({tokens, hidden}, DType::bf16, Device::cuda),
         rstd = Tensor::empty({tokens}, DType::f32, Device::cuda);
  rows.push_back({"rmsnorm fwd", time_ms(s, iters, [&] { cuda::rmsnorm_forward(x, w, 1e-6, out, rstd, s); }),
                  2.0 * n * 2 + tokens * 4.0, copy_ceiling, true});
  Tensor gate = random_device({tokens, ffn}, DType::bf16, 5), up = random_device({tokens, ffn}, DType::bf16, 6);
  Tensor act = Tensor::empty({tokens, ffn}, DType::bf16, Device::cuda);
  rows.push_back({"swiglu fwd", time_ms(s, iters, [&] { cuda::swiglu_forward(gate, up, act, s); }), 3.0 * nf * 2,
                  copy_ceiling, true});
  rows.push_back(
      {"residual add", time_ms(s, iters, [&] { cuda::add_inplace(out, x, s); }), 3.0 * n * 2, copy_ceiling, true});
  const int64_t params = adamw_params;
  Tensor pw = random_device({params}, DType::f32, 7), pg = random_device({params}, DType::f32, 8);
  Tensor pm = random_device({params}, DType::f32, 9), pv = random_device({params}, DType::f32, 10);
  Tensor pbf = Tensor::empty({params}, DType::bf16, Device::cuda);
  rows.push_back({fmt::format("cast f32->bf16 ({})", params), time_ms(s, iters, [&] { cuda::cast(pbf, pw, s); }),
                  params * 6.0, copy_ceiling, true});
  backend::AdamWScalars sc{0.9f, 0.95f, 0.1f, 0.05f, 1e-4f, 1.0f, 1e-8f};
  // AdamW reads w, g, m, v and writes w, m, v; v starts at 0 so it stays a valid second moment.
  cuda::scale(pv, 0.0, s);
  rows.push_back({fmt::format("adamw ({})", params),
                  time_ms(s, iters, [&] { cuda::adamw_step(pw, pg, pm, pv, 0.999f, sc, s); }), params * 28.0,
                  copy_ceiling, true});
  pw = {}, pg = {}, pm = {}, pv = {}, pbf = {};

  // ---- GEMMs of one layer (bf16, y = x W^T) and the FFN in int8 ----
  const int64_t qkv = (heads + 2 * kv_heads) * head_dim;
  auto linear_row = [&](const std::string& name, int64_t in, int64_t outf) {
    Tensor a = random_device({tokens, in}, DType::bf16, 11), wt = random_device({outf, in}, DType::bf16, 12);
    Tensor y = Tensor::empty({tokens, outf}, DType::bf16, Device::cuda);
    const double ms = time_ms(s, iters, [&] { cuda::gemm(gemm, false, true, 1.0, a, wt, 0.0, y, s); });
    rows.push_back({name, ms, 2.0 * tokens * in * outf, gemm_ceiling, false});
  };
  linear_row("gemm qkv bf16", hidden, qkv);
  linear_row("gemm o bf16", heads * head_dim, hidden);
  linear_row("gemm gate|up bf16", hidden, 2 * ffn);
  linear_row("gemm down bf16", ffn, hidden);
  auto int8_row = [&](const std::string& name, int64_t in, int64_t outf) {
    Tensor a = random_device({tokens, in}, DType::i8, 13), wt = random_device({outf, in}, DType::i8, 14);
    Tensor y = Tensor::empty({tokens, outf}, DType::i32, Device::cuda);
    const double ms = time_ms(s, iters, [&] { cuda::gemm_s8s32(gemm, false, true, a, wt, y, s); });
    rows.push_back({name, ms, 2.0 * tokens * in * outf, gemm_ceiling, false});
  };
  int8_row("gemm gate|up int8 (vs bf16 ceiling)", hidden, 2 * ffn);
  int8_row("gemm down int8 (vs bf16 ceiling)", ffn, hidden);

  // ---- attention (causal: half of the score matrix counts) ----
  const int64_t batch = tokens / seq;
  Tensor q = random_device({batch, seq, heads, head_dim}, DType::bf16, 15);
  Tensor k = random_device({batch, seq, kv_heads, head_dim}, DType::bf16, 16);
  Tensor v = random_device({batch, seq, kv_heads, head_dim}, DType::bf16, 17);
  Tensor o = Tensor::empty(q.shape(), DType::bf16, Device::cuda);
  Tensor lse = Tensor::empty({batch, heads, seq}, DType::f32, Device::cuda);
  Tensor ws = Tensor::empty(
      {static_cast<int64_t>(cuda::attention_workspace_bytes(batch, seq, heads, kv_heads, head_dim, DType::bf16))},
      DType::u8, Device::cuda);
  const double attn_flop = 4.0 * batch * heads * seq * seq * head_dim / 2;
  rows.push_back({"attention fwd", time_ms(s, iters, [&] { cuda::attention_forward(gemm, q, k, v, o, lse, ws, s); }),
                  attn_flop, gemm_ceiling, false});
  Tensor dq = Tensor::empty(q.shape(), DType::bf16, Device::cuda),
         dk = Tensor::empty(k.shape(), DType::bf16, Device::cuda),
         dv = Tensor::empty(v.shape(), DType::bf16, Device::cuda);
  rows.push_back({"attention bwd",
                  time_ms(s, iters, [&] { cuda::attention_backward(gemm, o, q, k, v, o, lse, dq, dk, dv, ws, s); }),
                  2.5 * attn_flop, gemm_ceiling, false});

  std::printf("%s", bench::machine_header(machine).c_str());
  std::printf("# GPU: %s, %d SMs, %.0f GiB\n", prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  std::printf("# tokens %lld hidden %lld ffn %lld heads %lld/%lld head_dim %lld seq %lld; median of %d\n",
              static_cast<long long>(tokens), static_cast<long long>(hidden), static_cast<long long>(ffn),
              static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(head_dim),
              static_cast<long long>(seq), iters);
  std::printf("%-38s %10s %14s %10s\n", "kernel", "ms", "rate", "of ceiling");
  nlohmann::json report = {{"machine", bench::to_json(machine)}, {"gpu", prop.name}, {"rows", nlohmann::json::array()}};
  for (const Row& r : rows) {
    const std::string rate =
        r.memory ? fmt::format("{:.0f} GB/s", r.rate() / 1e9) : fmt::format("{:.1f} TFLOP/s", r.rate() / 1e12);
    std::printf("%-38s %10.3f %14s %9.1f%%\n", r.name.c_str(), r.ms, rate.c_str(), 100.0 * r.fraction());
    report["rows"].push_back({{"kernel", r.name},
                              {"ms", r.ms},
                              {"rate", r.rate()},
                              {"unit", r.memory ? "B/s" : "FLOP/s"},
                              {"fraction_of_ceiling", r.fraction()}});
  }
  if (!json_path.empty()) {
    write_file_atomic(json_path, report.dump(2) + "\n", "--json " + json_path);
  }
  cudaStreamDestroy(s);
  return 0;
}

}  // namespace
}  // namespace echo

int main(int argc, char** argv) {
  try {
    return echo::bench_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "echo_kernel_bench: %s\n", e.what());
    return 1;
  }
}
