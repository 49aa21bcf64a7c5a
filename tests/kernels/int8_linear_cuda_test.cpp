// The CUDA INT8 S3R-EC linear (kernels/int8_linear.cuh) against the CPU reference
// quant::linear_forward / linear_backward: every rounding rule x threshold sharing x EC mode, f32
// and bf16 activations, odd shapes (in, out not multiples of 4, rows whole examples at a token
// offset), TpStyle::none and 2-shard column / row parallelism with the shards in threads behind an
// in-process reducer. Bit-identical: saved codes and scales, y, max |G'|, Δ, Q, E, the EC means,
// and dx, dw without EC (bf16: the CPU result rounded to bf16). With EC, dx and dw within 1e-6
// max-abs-normalized (f32) / 1e-2 (bf16): the CPU adds its corrections through OpenBLAS sgemm.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../support/cuda_pool.h"
#include "../support/gpu_test.h"
#include "../support/staged_device_reduce.h"
#include "../support/test_util.h"
#include "../support/thread_tp_group.h"
#include "backend/backend.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"
#include "cuda_check.h"
#include "gemm.cuh"
#include "int8_linear.cuh"
#include "ops_cuda_test_util.h"
#include "quant/error_correction.h"
#include "quant/int8_linear.h"

namespace echo::cuda {
namespace {

using config::BackwardRounding;
using config::EcMode;
using config::LinearMode;
using config::ThresholdMode;
using echo::testing::close_normalized;
using echo::testing::device_tensor;
using echo::testing::host_floats;
using echo::testing::random_floats;
using echo::testing::rounded_to;
using echo::testing::same_bits;

struct Shape {
  int64_t rows, seq, in, out;
};

// Odd sizes, in / out not multiples of 4 (gemm_s8s32 packs), one aligned shape (the direct TN path).
constexpr Shape kShapes[] = {{15, 5, 37, 23}, {8, 8, 9, 50}, {42, 7, 130, 67}, {64, 16, 96, 128}};

struct Rule {
  BackwardRounding rounding;
  ThresholdMode thresholds;
};
constexpr Rule kRules[] = {{BackwardRounding::rtne, ThresholdMode::per_token},
                           {BackwardRounding::sr_independent, ThresholdMode::independent},
                           {BackwardRounding::s3r, ThresholdMode::per_token},
                           {BackwardRounding::s3r, ThresholdMode::per_example},
                           {BackwardRounding::s3r, ThresholdMode::independent}};
constexpr EcMode kEcModes[] = {EcMode::none, EcMode::dx_only, EcMode::two_way};
constexpr uint64_t kSeed = 0x1234567890abcdefull;

quant::Int8LinearConfig make_config(const Rule& rule, EcMode ec) {
  return {LinearMode::int8, rule.rounding, rule.thresholds, ec, kSeed};
}

std::string describe(const quant::Int8LinearConfig& cfg, const Shape& s, DType act, bool accumulate) {
  return fmt::format("rounding {} thresholds {} ec {} shape ({}, {}, {}) seq {} {} accumulate {}",
                     static_cast<int>(cfg.rounding), static_cast<int>(cfg.thresholds), static_cast<int>(cfg.ec), s.rows,
                     s.in, s.out, s.seq, to_string(act), accumulate);
}

// One layer call's host inputs, already exact in the activation dtype (w and dw: f32 master).
struct Inputs {
  std::vector<float> x, w, dy, dx0, dw0;
};

Inputs make_inputs(const Shape& s, DType act, uint32_t seed) {
  return {rounded_to(random_floats(s.rows * s.in, seed, 1.0f), act), random_floats(s.out * s.in, seed + 1, 0.05f),
          rounded_to(random_floats(s.rows * s.out, seed + 2, 0.01f), act),
          rounded_to(random_floats(s.rows * s.in, seed + 3, 0.005f), act),
          random_floats(s.out * s.in, seed + 4, 0.05f)};
}

struct CpuResult {
  std::vector<float> y, dx, dw;
  quant::Int8LinearSaved saved;
  quant::Int8BackwardTrace trace;
  quant::StructuredError es;
};

CpuResult run_cpu(const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx, const Inputs& in, const Shape& s,
                  bool accumulate) {
  CpuResult r;
  r.y.resize(s.rows * s.out);
  quant::linear_forward(cfg, ctx, in.x.data(), in.w.data(), s.rows, s.in, s.out, r.y.data(), r.saved);
  r.dx = accumulate ? in.dx0 : std::vector<float>(s.rows * s.in, 0.0f);
  r.dw = in.dw0;
  quant::linear_backward(cfg, ctx, in.dy.data(), in.x.data(), in.w.data(), r.saved, s.rows, s.in, s.out, r.dx.data(),
                         accumulate, r.dw.data(), &r.trace);
  if (cfg.ec != EcMode::none)  // a collective under TpStyle::column: every CPU shard makes it
    r.es = quant::structured_error(r.trace.e.data(), s.rows, s.out, ctx.seq_len,
                                   ctx.tp_style == quant::TpStyle::column ? &ctx.tp->sum : nullptr);
  return r;
}

struct GpuResult {
  std::vector<float> y, dx, dw, s_x, s_w;
  std::vector<int8_t> x_q, w_q;
  Int8LinearTrace trace;
};

std::vector<int8_t> host_i8(const Tensor& t) { return t.to(Device::cpu).to_vector<int8_t>(); }

// With `faults` the calls take the backend's no-wait path (faults noted there, no trace kept);
// without, the waiting path with a trace.
GpuResult run_gpu(GemmContext& gemm, const quant::Int8LinearConfig& cfg, const quant::LinearContext& ctx,
                  const Inputs& in, const Shape& s, DType act, bool accumulate, cudaStream_t stream,
                  DeferredFaults* faults = nullptr) {
  GpuResult r;
  const Tensor x = device_tensor(in.x, {s.rows, s.in}, act);
  const Tensor w = device_tensor(in.w, {s.out, s.in}, DType::f32);
  Tensor y = Tensor::empty({s.rows, s.out}, act, Device::cuda);
  quant::Int8LinearSaved saved;
  int8_linear_forward(gemm, cfg, ctx, x, w, y, saved, stream, faults);
  const Tensor dy = device_tensor(in.dy, {s.rows, s.out}, act);
  // Without accumulation dx starts as garbage-like values that must be overwritten.
  Tensor dx = device_tensor(in.dx0, {s.rows, s.in}, act);
  Tensor dw = device_tensor(in.dw0, {s.out, s.in}, DType::f32);
  int8_linear_backward(gemm, cfg, ctx, dy, saved, &dx, accumulate, &dw, stream, faults ? nullptr : &r.trace, faults);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  r.y = host_floats(y);
  r.dx = host_floats(dx);
  r.dw = host_floats(dw);
  r.s_x = host_floats(saved.s_x);
  r.s_w = host_floats(saved.s_w);
  r.x_q = host_i8(saved.x_q);
  r.w_q = host_i8(saved.w_q);
  EXPECT_EQ(saved.rows, s.rows);
  EXPECT_EQ(saved.in, s.in);
  EXPECT_EQ(saved.out, s.out);
  return r;
}

std::vector<float> as_bf16(std::vector<float> v) { return rounded_to(std::move(v), DType::bf16); }

::testing::AssertionResult same_doubles(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "first difference at " << i << ": got " << got[i] << ", want " << want[i];
  return ::testing::AssertionSuccess();
}

void compare(const CpuResult& c, const GpuResult& g, const quant::Int8LinearConfig& cfg, DType act,
             const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(g.x_q, c.saved.x_q.to_vector<int8_t>());
  EXPECT_EQ(g.w_q, c.saved.w_q.to_vector<int8_t>());
  EXPECT_TRUE(same_bits(g.s_x, c.saved.s_x.to_vector<float>()));
  EXPECT_TRUE(same_bits(g.s_w, c.saved.s_w.to_vector<float>()));
  EXPECT_TRUE(same_bits(g.y, act == DType::f32 ? c.y : as_bf16(c.y))) << "y";
  EXPECT_EQ(float_bits(g.trace.g_amax), float_bits(c.trace.g_amax));
  EXPECT_EQ(float_bits(g.trace.delta), float_bits(c.trace.delta));
  EXPECT_EQ(g.trace.q, c.trace.q) << "gradient codes Q";
  EXPECT_TRUE(same_bits(g.trace.e, c.trace.e)) << "E";
  // The codes must not be trivial (the rounding rule is actually exercised).
  int nonzero = 0;
  for (int8_t v : g.trace.q) nonzero += v != 0;
  EXPECT_GT(nonzero, static_cast<int>(g.trace.q.size() / 2));
  if (cfg.ec == EcMode::none) {
    EXPECT_TRUE(same_bits(g.dx, act == DType::f32 ? c.dx : as_bf16(c.dx))) << "dx";
    EXPECT_TRUE(same_bits(g.dw, c.dw)) << "dw";
    return;
  }
  EXPECT_TRUE(same_doubles(g.trace.row_mean, c.es.row_mean)) << "r_t";
  EXPECT_TRUE(same_doubles(g.trace.col_mean, c.es.col_mean)) << "c_b";
  EXPECT_TRUE(same_doubles(g.trace.grand_mean, c.es.grand_mean)) << "m_b";
  EXPECT_TRUE(close_normalized(g.dx, c.dx, act == DType::f32 ? 1e-6 : 1e-2)) << "dx with EC";
  if (cfg.ec == EcMode::two_way)
    EXPECT_TRUE(close_normalized(g.dw, c.dw, 1e-6)) << "dw with EC";
  else
    EXPECT_TRUE(same_bits(g.dw, c.dw)) << "dw (dx_only: no correction)";
}

TEST(Int8LinearCudaTest, MatchesTheCpuReferenceForEveryRuleAndEcMode) {
  ECHO_REQUIRE_DEVICE();
  GemmContext gemm;
  const cudaStream_t stream = nullptr;
  int run = 0;
  for (size_t si = 0; si < std::size(kShapes); ++si) {
    const Shape& s = kShapes[si];
    for (DType act : {DType::f32, DType::bf16}) {
      const Inputs in = make_inputs(s, act, 100 + static_cast<uint32_t>(si) * 10);
      for (const Rule& rule : kRules)
        for (EcMode ec : kEcModes) {
          const quant::Int8LinearConfig cfg = make_config(rule, ec);
          quant::LinearContext ctx;
          ctx.step = 3;
          ctx.layer = 5;
          ctx.site = 2;
          ctx.token_offset = 2 * s.seq;         // global tokens; per_token groups of 16 straddle rows
          ctx.channel_offset = si % 2 ? 7 : 0;  // shard-local call starting mid-group of 16 channels
          ctx.seq_len = s.seq;
          const bool accumulate = run++ % 2 == 1;
          const CpuResult c = run_cpu(cfg, ctx, in, s, accumulate);
          const GpuResult g = run_gpu(gemm, cfg, ctx, in, s, act, accumulate, stream);
          compare(c, g, cfg, act, describe(cfg, s, act, accumulate));
        }
    }
  }
}

TEST(Int8LinearCudaTest, RepeatsBitForBit) {
  ECHO_REQUIRE_DEVICE();
  GemmContext gemm;
  const Shape s{48, 12, 75, 61};
  const Inputs in = make_inputs(s, DType::f32, 7);
  const auto cfg = make_config({BackwardRounding::s3r, ThresholdMode::independent}, EcMode::two_way);
  quant::LinearContext ctx;
  ctx.seq_len = s.seq;
  const GpuResult a = run_gpu(gemm, cfg, ctx, in, s, DType::f32, true, nullptr);
  const GpuResult b = run_gpu(gemm, cfg, ctx, in, s, DType::f32, true, nullptr);
  EXPECT_TRUE(same_bits(a.y, b.y));
  EXPECT_TRUE(same_bits(a.dx, b.dx));
  EXPECT_TRUE(same_bits(a.dw, b.dw));
  EXPECT_EQ(a.trace.q, b.trace.q);
}

using echo::testing::expect_error;
using echo::testing::ThreadTpGroup;
using echo::testing::with_staged_device;

// Columns [c0, c0 + nc) / rows [r0, r0 + nr) of a (rows, cols) matrix.
std::vector<float> cols_of(const std::vector<float>& a, int64_t rows, int64_t cols, int64_t c0, int64_t nc) {
  std::vector<float> out(rows * nc);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < nc; ++c) out[r * nc + c] = a[r * cols + c0 + c];
  return out;
}
std::vector<float> rows_of(const std::vector<float>& a, int64_t cols, int64_t r0, int64_t nr) {
  return {a.begin() + r0 * cols, a.begin() + (r0 + nr) * cols};
}

// Runs fn(rank) for each rank in its own thread and joins; exceptions are reported per rank.
void in_threads(int shards, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(shards);
  for (int r = 0; r < shards; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < shards; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Two shards of a (rows, in, out) layer in `style`, each GPU shard against the CPU shard with the
// same inputs and its own reducer group: with the reductions both quantize as the whole layer.
void check_tp(quant::TpStyle style, DType act) {
  constexpr int kShards = 2;
  const Shape full{12, 4, 38, 46};  // shards: in 19 or out 23
  const Shape s = style == quant::TpStyle::column ? Shape{full.rows, full.seq, full.in, full.out / kShards}
                                                  : Shape{full.rows, full.seq, full.in / kShards, full.out};
  const Inputs whole = make_inputs(full, act, 31);
  std::vector<Inputs> shard(kShards);
  for (int r = 0; r < kShards; ++r) {
    if (style == quant::TpStyle::column) {  // W's rows (output channels), dy's columns
      shard[r] = {whole.x, rows_of(whole.w, full.in, r * s.out, s.out),
                  cols_of(whole.dy, full.rows, full.out, r * s.out, s.out), whole.dx0,
                  rows_of(whole.dw0, full.in, r * s.out, s.out)};
    } else {  // X's and W's columns (input features); dy replicated
      shard[r] = {cols_of(whole.x, full.rows, full.in, r * s.in, s.in),
                  cols_of(whole.w, full.out, full.in, r * s.in, s.in), whole.dy,
                  cols_of(whole.dx0, full.rows, full.in, r * s.in, s.in),
                  cols_of(whole.dw0, full.out, full.in, r * s.in, s.in)};
    }
  }
  std::vector<std::unique_ptr<GemmContext>> gemms;
  std::vector<cudaStream_t> streams(kShards);
  for (int r = 0; r < kShards; ++r) {
    gemms.push_back(std::make_unique<GemmContext>());
    CUDA_CHECK(cudaStreamCreate(&streams[r]));
  }
  int run = 0;
  for (const Rule& rule : kRules)
    for (EcMode ec : kEcModes) {
      const quant::Int8LinearConfig cfg = make_config(rule, ec);
      const bool accumulate = run++ % 2 == 0;
      ThreadTpGroup cpu_group(kShards), gpu_group(kShards);
      std::vector<CpuResult> cpu(kShards);
      std::vector<GpuResult> gpu(kShards);
      auto context = [&](int r, const ThreadTpGroup& group) {
        quant::LinearContext ctx;
        ctx.step = 11;
        ctx.layer = 2;
        ctx.site = style == quant::TpStyle::column ? 4 : 6;
        ctx.token_offset = 3 * full.seq;
        ctx.seq_len = full.seq;
        ctx.tp_style = style;
        ctx.tp = &group.reducer(r);
        if (style == quant::TpStyle::column) ctx.channel_offset = r * s.out;
        return ctx;
      };
      in_threads(kShards, [&](int r) { cpu[r] = run_cpu(cfg, context(r, cpu_group), shard[r], s, accumulate); });
      in_threads(kShards, [&](int r) {
        CUDA_CHECK(cudaSetDevice(0));
        gpu[r] = run_gpu(*gemms[r], cfg, context(r, gpu_group), shard[r], s, act, accumulate, streams[r]);
      });
      for (int r = 0; r < kShards; ++r)
        compare(cpu[r], gpu[r], cfg, act, fmt::format("rank {} of {}", r, describe(cfg, s, act, accumulate)));
      // The backend's no-wait path with the reductions on the device reducer (NCCL between distinct
      // GPUs; staged through the threads here): the same bits as the waiting path.
      ThreadTpGroup device_group(kShards);
      std::vector<GpuResult> no_wait(kShards);
      std::vector<DeferredFaults> faults(kShards);
      in_threads(kShards, [&](int r) {
        CUDA_CHECK(cudaSetDevice(0));
        const backend::TpReducer reducer = with_staged_device(device_group.reducer(r));
        quant::LinearContext ctx = context(r, device_group);
        ctx.tp = &reducer;
        no_wait[r] = run_gpu(*gemms[r], cfg, ctx, shard[r], s, act, accumulate, streams[r], &faults[r]);
        faults[r].raise_if_any(streams[r]);  // nothing noted
      });
      for (int r = 0; r < kShards; ++r) {
        SCOPED_TRACE(fmt::format("device reducer, rank {} of {}", r, describe(cfg, s, act, accumulate)));
        EXPECT_TRUE(same_bits(no_wait[r].y, gpu[r].y)) << "y";
        EXPECT_TRUE(same_bits(no_wait[r].dx, gpu[r].dx)) << "dx";
        EXPECT_TRUE(same_bits(no_wait[r].dw, gpu[r].dw)) << "dw";
        EXPECT_TRUE(same_bits(no_wait[r].s_x, gpu[r].s_x)) << "s_x";
        EXPECT_TRUE(same_bits(no_wait[r].s_w, gpu[r].s_w)) << "s_w";
      }
      // The reductions made the shards agree on what the whole layer shares.
      if (style == quant::TpStyle::row) {
        EXPECT_EQ(gpu[0].s_x, gpu[1].s_x);
        EXPECT_EQ(gpu[0].s_w, gpu[1].s_w);
        EXPECT_EQ(gpu[0].trace.q, gpu[1].trace.q);
      } else {
        EXPECT_EQ(float_bits(gpu[0].trace.delta), float_bits(gpu[1].trace.delta));
        if (ec != EcMode::none) {
          EXPECT_TRUE(same_doubles(gpu[0].trace.row_mean, gpu[1].trace.row_mean));
        }
      }
    }
  for (int r = 0; r < kShards; ++r) CUDA_CHECK(cudaStreamDestroy(streams[r]));
}

TEST(Int8LinearCudaTest, ColumnParallelShardsMatchTheCpuShards) {
  ECHO_REQUIRE_DEVICE();
  check_tp(quant::TpStyle::column, DType::f32);
  check_tp(quant::TpStyle::column, DType::bf16);
}

TEST(Int8LinearCudaTest, RowParallelShardsMatchTheCpuShards) {
  ECHO_REQUIRE_DEVICE();
  check_tp(quant::TpStyle::row, DType::f32);
  check_tp(quant::TpStyle::row, DType::bf16);
}

TEST(Int8LinearCudaTest, NonFiniteOperandsAreErrorsNamingTheRow) {
  ECHO_REQUIRE_DEVICE();
  GemmContext gemm;
  const Shape s{8, 4, 20, 12};
  const Inputs in = make_inputs(s, DType::f32, 51);
  const auto cfg = make_config({BackwardRounding::s3r, ThresholdMode::per_token}, EcMode::two_way);
  quant::LinearContext ctx;
  ctx.seq_len = s.seq;
  quant::Int8LinearSaved saved;
  Tensor y = Tensor::empty({s.rows, s.out}, DType::f32, Device::cuda);
  std::vector<float> bad_x = in.x;
  bad_x[5 * s.in + 3] = std::numeric_limits<float>::quiet_NaN();
  bad_x[6 * s.in] = std::numeric_limits<float>::infinity();
  expect_error(
      [&] {
        int8_linear_forward(gemm, cfg, ctx, device_tensor(bad_x, {s.rows, s.in}, DType::f32),
                            device_tensor(in.w, {s.out, s.in}, DType::f32), y, saved, nullptr);
      },
      "row 5 of an operand (x)");
  std::vector<float> bad_w = in.w;
  bad_w[2 * s.in + 1] = -std::numeric_limits<float>::infinity();
  expect_error(
      [&] {
        int8_linear_forward(gemm, cfg, ctx, device_tensor(in.x, {s.rows, s.in}, DType::f32),
                            device_tensor(bad_w, {s.out, s.in}, DType::f32), y, saved, nullptr);
      },
      "row 2 of an operand (w)");
  // A good forward, then a backward whose gradient holds an infinity.
  int8_linear_forward(gemm, cfg, ctx, device_tensor(in.x, {s.rows, s.in}, DType::f32),
                      device_tensor(in.w, {s.out, s.in}, DType::f32), y, saved, nullptr);
  std::vector<float> bad_dy = in.dy;
  bad_dy[3 * s.out + 7] = std::numeric_limits<float>::infinity();
  Tensor dx = Tensor::empty({s.rows, s.in}, DType::f32, Device::cuda);
  Tensor dw = device_tensor(in.dw0, {s.out, s.in}, DType::f32);
  expect_error(
      [&] {
        int8_linear_backward(gemm, cfg, ctx, device_tensor(bad_dy, {s.rows, s.out}, DType::f32), saved, &dx, false, &dw,
                             nullptr);
      },
      "row 3 of G'");
  // Partial examples are refused as on the CPU.
  quant::LinearContext odd = ctx;
  odd.seq_len = 3;
  expect_error(
      [&] {
        int8_linear_backward(gemm, cfg, odd, device_tensor(in.dy, {s.rows, s.out}, DType::f32), saved, &dx, false, &dw,
                             nullptr);
      },
      "whole examples");
}

// With a DeferredFaults record (the backend's way: no wait per call, Δ read on the device), the
// results are the same bits as the waiting path's, for every rule and EC mode.
TEST(Int8LinearCudaTest, DeferredFaultPathGivesTheSameBits) {
  ECHO_REQUIRE_DEVICE();
  GemmContext gemm;
  DeferredFaults faults;
  const Shape s{48, 12, 75, 61};
  for (DType act : {DType::f32, DType::bf16}) {
    const Inputs in = make_inputs(s, act, 31);
    for (const Rule& rule : kRules)
      for (EcMode ec : kEcModes) {
        const auto cfg = make_config(rule, ec);
        quant::LinearContext ctx;
        ctx.step = 2;
        ctx.layer = 1;
        ctx.site = 4;
        ctx.seq_len = s.seq;
        SCOPED_TRACE(describe(cfg, s, act, true));
        const GpuResult want = run_gpu(gemm, cfg, ctx, in, s, act, true, nullptr);
        const GpuResult got = run_gpu(gemm, cfg, ctx, in, s, act, true, nullptr, &faults);
        faults.raise_if_any(nullptr);  // nothing noted
        EXPECT_TRUE(same_bits(got.y, want.y)) << "y";
        EXPECT_TRUE(same_bits(got.dx, want.dx)) << "dx";
        EXPECT_TRUE(same_bits(got.dw, want.dw)) << "dw";
      }
  }
}

// A NaN or infinity noted in the record raises once, at raise_if_any, naming layer, site, operand
// and row (the earliest layer's, then the smallest row); the record is clear afterwards.
TEST(Int8LinearCudaTest, DeferredFaultsRaiseOnceNamingLayerSiteAndRow) {
  ECHO_REQUIRE_DEVICE();
  GemmContext gemm;
  DeferredFaults faults;
  const Shape s{8, 4, 20, 12};
  const Inputs in = make_inputs(s, DType::f32, 52);
  const auto cfg = make_config({BackwardRounding::s3r, ThresholdMode::per_token}, EcMode::two_way);
  quant::LinearContext ctx;
  ctx.seq_len = s.seq;
  ctx.layer = 3;
  ctx.site = 1;
  quant::Int8LinearSaved saved;
  Tensor y = Tensor::empty({s.rows, s.out}, DType::f32, Device::cuda);
  std::vector<float> bad_x = in.x;
  bad_x[6 * s.in + 2] = std::numeric_limits<float>::quiet_NaN();
  bad_x[5 * s.in + 3] = std::numeric_limits<float>::infinity();
  const Tensor w = device_tensor(in.w, {s.out, s.in}, DType::f32);
  int8_linear_forward(gemm, cfg, ctx, device_tensor(bad_x, {s.rows, s.in}, DType::f32), w, y, saved, nullptr,
                      &faults);  // no error yet
  quant::LinearContext later = ctx;
  later.layer = 7;
  int8_linear_forward(gemm, cfg, later, device_tensor(bad_x, {s.rows, s.in}, DType::f32), w, y, saved, nullptr,
                      &faults);
  expect_error([&] { faults.raise_if_any(nullptr); }, "layer 3, site 1 (k): row 5 of the input x");
  faults.raise_if_any(nullptr);  // cleared: no error
  // The gradient: a good forward, then a backward whose dy holds an infinity.
  int8_linear_forward(gemm, cfg, ctx, device_tensor(in.x, {s.rows, s.in}, DType::f32), w, y, saved, nullptr, &faults);
  std::vector<float> bad_dy = in.dy;
  bad_dy[4 * s.out + 7] = -std::numeric_limits<float>::infinity();
  Tensor dx = Tensor::empty({s.rows, s.in}, DType::f32, Device::cuda);
  Tensor dw = device_tensor(in.dw0, {s.out, s.in}, DType::f32);
  int8_linear_backward(gemm, cfg, ctx, device_tensor(bad_dy, {s.rows, s.out}, DType::f32), saved, &dx, false, &dw,
                       nullptr, nullptr, &faults);
  expect_error([&] { faults.raise_if_any(nullptr); }, "row 4 of the output gradient");
  // The backend raises what its ops noted, once.
  const auto be = backend::make_backend(Device::cuda);
  Tensor y2 = be->empty({s.rows, s.out}, DType::f32);
  be->int8_linear_forward(cfg, ctx, device_tensor(bad_x, {s.rows, s.in}, DType::f32), w, y2, saved);
  expect_error([&] { be->raise_deferred_faults(); }, "row 5 of the input x");
  be->raise_deferred_faults();
}

// The CUDA backend's int8 ops are these functions on its own stream (bf16 activations, as the model
// passes them), and either output may be left out.
TEST(Int8LinearCudaTest, CudaBackendRunsTheInt8Linear) {
  ECHO_REQUIRE_DEVICE();
  const auto be = backend::make_backend(Device::cuda);
  const Shape s{10, 5, 33, 21};
  const Inputs in = make_inputs(s, DType::bf16, 77);
  const auto cfg = make_config({BackwardRounding::s3r, ThresholdMode::per_token}, EcMode::two_way);
  quant::LinearContext ctx;
  ctx.seq_len = s.seq;
  ctx.token_offset = s.seq;
  const CpuResult c = run_cpu(cfg, ctx, in, s, false);
  const Tensor x = device_tensor(in.x, {s.rows, s.in}, DType::bf16);
  const Tensor w = device_tensor(in.w, {s.out, s.in}, DType::f32);
  Tensor y = be->empty({s.rows, s.out}, DType::bf16);
  quant::Int8LinearSaved saved;
  be->int8_linear_forward(cfg, ctx, x, w, y, saved);
  const Tensor dy = device_tensor(in.dy, {s.rows, s.out}, DType::bf16);
  Tensor dx = be->empty({s.rows, s.in}, DType::bf16);
  Tensor dw = device_tensor(in.dw0, {s.out, s.in}, DType::f32);
  be->int8_linear_backward(cfg, ctx, dy, saved, &dx, false, &dw);
  be->synchronize();
  EXPECT_TRUE(same_bits(host_floats(y), as_bf16(c.y)));
  EXPECT_TRUE(close_normalized(host_floats(dx), c.dx, 1e-2));
  EXPECT_TRUE(close_normalized(host_floats(dw), c.dw, 1e-6));
  // Only dW, then only dX: each equals its part of the full call.
  Tensor dw2 = device_tensor(in.dw0, {s.out, s.in}, DType::f32);
  be->int8_linear_backward(cfg, ctx, dy, saved, nullptr, false, &dw2);
  Tensor dx2 = be->empty({s.rows, s.in}, DType::bf16);
  be->int8_linear_backward(cfg, ctx, dy, saved, &dx2, false, nullptr);
  be->synchronize();
  EXPECT_TRUE(same_bits(host_floats(dw2), host_floats(dw)));
  EXPECT_TRUE(same_bits(host_floats(dx2), host_floats(dx)));
}

// The saved operands come from the stream-ordered pool, which the start-up reservation fills:
// allocated with cudaMalloc they needed their bytes a second time beside the reservation, and the
// model's drop of them after each layer's backward was a cudaFree, a wait for the whole device.
TEST(Int8LinearCudaTest, SavedOperandsComeFromThePool) {
  ECHO_REQUIRE_DEVICE();
  GemmContext gemm;
  const Shape s{64, 16, 96, 80};
  const Inputs in = make_inputs(s, DType::f32, 11);
  const auto cfg = make_config({BackwardRounding::s3r, ThresholdMode::independent}, EcMode::none);
  quant::LinearContext ctx;
  ctx.seq_len = s.seq;
  const Tensor x = device_tensor(in.x, {s.rows, s.in}, DType::f32);
  const Tensor w = device_tensor(in.w, {s.out, s.in}, DType::f32);
  Tensor y = Tensor::empty({s.rows, s.out}, DType::f32, Device::cuda);
  using echo::testing::cuda_pool_used_bytes;
  {
    // The GemmContext keeps its grown scratch in the pool: warmed up first, it holds it already.
    quant::Int8LinearSaved warm_up;
    int8_linear_forward(gemm, cfg, ctx, x, w, y, warm_up, nullptr);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  const uint64_t before = cuda_pool_used_bytes();
  quant::Int8LinearSaved saved;
  int8_linear_forward(gemm, cfg, ctx, x, w, y, saved, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const uint64_t operands = saved.x_q.nbytes() + saved.s_x.nbytes() + saved.w_q.nbytes() + saved.s_w.nbytes();
  EXPECT_GE(cuda_pool_used_bytes() - before, operands)
      << "the forward's scratch is freed; the saved operands stay in the pool";
  saved = {};
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(cuda_pool_used_bytes(), before) << "dropped, they go back to the pool";
}

}  // namespace
}  // namespace echo::cuda
