// The cuBLASLt GEMMs of kernels/gemm.cuh against the CPU reference: f32 and bf16 gemm vs
// cpu::gemm_strided in double (all four transpose combinations, odd shapes, strided sub-matrix
// views, beta != 0, beta == 0 over NaN, k == 0), the same through the fallback kernel that runs
// what cuBLASLt offers no algorithm for, the strided-batched form on interleaved heads,
// and the int8 product bit for bit vs quant::gemm_s8s32 (every layout, padding, k past
// quant::kInt8GemmMaxK in chunks). Skips without a CUDA device; fails instead under
// ECHO_REQUIRE_GPU=1 (tests/support/gpu_test.h).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/gpu_test.h"
#include "backend/ops.h"
#include "core/half.h"
#include "core/tensor.h"
#include "cuda_check.h"
#include "gemm.cuh"
#include "quant/int8_gemm.h"

namespace echo {
namespace {

constexpr cudaStream_t kStream = nullptr;  // the legacy stream, ordered with Tensor's copies

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

float round_to(DType dtype, float v) { return dtype == DType::bf16 ? round_to_bf16(v) : v; }

// A device matrix (rows, cols): the whole of a contiguous tensor, or, when strided, the interior
// view [1, 1 + rows) x [2, 2 + cols) of a (rows + 3, cols + 5) parent, so its row stride is not its
// width and its first element is not aligned.
struct Operand {
  Tensor parent;
  Tensor view;
  std::vector<float> parent_values;  // as stored on the device (rounded to the dtype)
  int64_t rows = 0, cols = 0, parent_cols = 0, r0 = 0, c0 = 0;

  int64_t index(int64_t r, int64_t c) const { return (r0 + r) * parent_cols + c0 + c; }
  // The view's values in double, packed row-major.
  std::vector<double> values() const {
    std::vector<double> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = parent_values[index(r, c)];
    return out;
  }
};

Operand make_operand(int64_t rows, int64_t cols, DType dtype, bool strided, uint32_t seed, bool nan_view = false) {
  Operand op;
  op.rows = rows;
  op.cols = cols;
  const int64_t parent_rows = strided ? rows + 3 : rows;
  op.parent_cols = strided ? cols + 5 : cols;
  op.r0 = strided ? 1 : 0;
  op.c0 = strided ? 2 : 0;
  op.parent_values = random_floats(static_cast<size_t>(parent_rows * op.parent_cols), seed);
  for (float& v : op.parent_values) v = round_to(dtype, v);
  if (nan_view) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) op.parent_values[op.index(r, c)] = std::numeric_limits<float>::quiet_NaN();
  }
  Tensor host = Tensor::from_vector(op.parent_values, {parent_rows, op.parent_cols});
  if (dtype == DType::bf16) host = host.to(DType::bf16);
  op.parent = host.to(Device::cuda);
  op.view = strided ? op.parent.slice(0, op.r0, op.r0 + rows).slice(1, op.c0, op.c0 + cols) : op.parent;
  return op;
}

std::vector<float> download_f32(const Tensor& t) { return t.to(Device::cpu).to_f32().to_vector<float>(); }

// max |got - want| / max scale, with scale = |want| unless given (0 / 0 counts as 0, NaN as
// infinite).
double relative_error(const std::vector<double>& got, const std::vector<double>& want,
                      const std::vector<double>* scale_values = nullptr) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(scale_values ? (*scale_values)[i] : want[i]));
  }
  return scale > 0.0 ? err / scale : err;
}

std::vector<double> abs_of(std::vector<double> v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

struct GemmShape {
  int64_t m, n, k;
};

const GemmShape kShapes[] = {{1, 1, 1},      {7, 5, 3},   {64, 48, 32}, {33, 17, 65},
                             {128, 96, 257}, {5, 300, 1}, {1, 70, 129}, {3, 4, 0}};

// One gemm on the device vs cpu::gemm_strided<double>; also checks that nothing outside the c
// view changed. Returns the error relative to the largest |alpha| |op(a)| |op(b)| + |beta| |c|
// (the scale rounding errors grow with, so a result that cancels to near 0 is judged fairly).
double run_gemm_case(cuda::GemmContext& ctx, DType dtype, const GemmShape& s, bool ta, bool tb, double alpha,
                     double beta, bool strided, uint32_t seed, const std::string& where) {
  const Operand a = make_operand(ta ? s.k : s.m, ta ? s.m : s.k, dtype, strided, seed);
  const Operand b = make_operand(tb ? s.n : s.k, tb ? s.k : s.n, dtype, strided, seed + 1);
  Operand c = make_operand(s.m, s.n, dtype, strided, seed + 2, /*nan_view=*/beta == 0.0);
  std::vector<double> want = beta == 0.0 ? std::vector<double>(static_cast<size_t>(s.m * s.n), 0.0) : c.values();
  std::vector<double> magnitude = abs_of(want);
  const std::vector<double> av = a.values(), bv = b.values();
  const int64_t lda = std::max<int64_t>(1, a.cols), ldb = std::max<int64_t>(1, b.cols), ldc = std::max<int64_t>(1, s.n);
  cpu::gemm_strided<double>(ta, tb, s.m, s.n, s.k, alpha, av.data(), lda, bv.data(), ldb, beta, want.data(), ldc);
  cpu::gemm_strided<double>(ta, tb, s.m, s.n, s.k, std::abs(alpha), abs_of(av).data(), lda, abs_of(bv).data(), ldb,
                            std::abs(beta), magnitude.data(), ldc);
  cuda::gemm(ctx, ta, tb, alpha, a.view, b.view, beta, c.view, kStream);
  const std::vector<float> out = download_f32(c.parent);
  std::vector<double> got(want.size());
  for (int64_t r = 0; r < s.m; ++r)
    for (int64_t col = 0; col < s.n; ++col) got[r * s.n + col] = out[c.index(r, col)];
  // Outside the view: untouched, bit for bit.
  int64_t changed = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / c.parent_cols - c.r0;
    const int64_t col = static_cast<int64_t>(i) % c.parent_cols - c.c0;
    const bool inside = r >= 0 && r < s.m && col >= 0 && col < s.n;
    if (!inside && !(out[i] == c.parent_values[i])) ++changed;
  }
  EXPECT_EQ(changed, 0) << where << ": elements outside the c view changed";
  return relative_error(got, want, &magnitude);
}

// fallback: every product runs on gemm.cu's fallback kernel (what cuBLASLt's declining a shape
// falls back to), which must match the CPU the same way.
void check_gemm_dtype(DType dtype, double tolerance, bool fallback = false) {
  cuda::GemmContext ctx;
  ctx.use_fallback_only(fallback);
  uint32_t seed = 11;
  for (const GemmShape& s : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (double beta : {0.0, 0.75}) {
        for (bool strided : {false, true}) {
          const std::string where = fmt::format("{} m {} n {} k {} trans_a {} trans_b {} beta {} strided {}", dtype,
                                                s.m, s.n, s.k, ta, tb, beta, strided);
          const double err = run_gemm_case(ctx, dtype, s, ta, tb, 1.25, beta, strided, seed, where);
          seed += 3;
          EXPECT_LE(err, tolerance) << where;
        }
      }
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  if (fallback) {
    EXPECT_EQ(ctx.fallback_plan_count(), ctx.plan_count());
  } else if (dtype == DType::f32) {
    // cuBLASLt's fp32 kernels take 4-byte alignment: it declines none of these.
    EXPECT_EQ(ctx.fallback_plan_count(), 0u);
  } else {
    // bf16 views at odd columns are aligned to 2 bytes only; the device check's log shows how
    // many of them cuBLASLt declined (the results were checked above either way).
    std::printf("bf16: cuBLASLt declined %zu of %zu plans (the fallback kernel ran them)\n", ctx.fallback_plan_count(),
                ctx.plan_count());
  }
}

TEST(GemmCuda, F32MatchesCpu) {
  ECHO_REQUIRE_DEVICE();
  check_gemm_dtype(DType::f32, 1e-5);
}

TEST(GemmCuda, Bf16MatchesCpu) {
  ECHO_REQUIRE_DEVICE();
  check_gemm_dtype(DType::bf16, 1e-2);
}

TEST(GemmCuda, TheFallbackKernelMatchesCpu) {
  ECHO_REQUIRE_DEVICE();
  check_gemm_dtype(DType::f32, 1e-5, /*fallback=*/true);
  check_gemm_dtype(DType::bf16, 1e-2, /*fallback=*/true);
}

TEST(GemmCuda, LargerProblemsMatchCpu) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  const GemmShape s{300, 520, 1024};
  for (DType dtype : {DType::f32, DType::bf16}) {
    const double tol = dtype == DType::f32 ? 1e-5 : 1e-2;
    EXPECT_LE(run_gemm_case(ctx, dtype, s, false, true, 1.0, 0.0, false, 5, "large NT"), tol) << to_string(dtype);
    EXPECT_LE(run_gemm_case(ctx, dtype, s, true, false, 0.5, 1.0, true, 6, "large TN"), tol) << to_string(dtype);
  }
}

TEST(GemmCuda, PlansAreCachedPerKey) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  const Operand a = make_operand(16, 8, DType::f32, false, 1);
  const Operand b = make_operand(8, 12, DType::f32, false, 2);
  Operand c = make_operand(16, 12, DType::f32, false, 3);
  EXPECT_EQ(ctx.plan_count(), 0u);
  cuda::gemm(ctx, false, false, 1.0, a.view, b.view, 0.0, c.view, kStream);
  EXPECT_EQ(ctx.plan_count(), 1u);
  const std::vector<float> first = download_f32(c.parent);
  cuda::gemm(ctx, false, false, 1.0, a.view, b.view, 0.0, c.view, kStream);
  EXPECT_EQ(ctx.plan_count(), 1u);
  EXPECT_EQ(download_f32(c.parent), first);                                  // same plan, same bits
  cuda::gemm(ctx, false, false, 1.0, a.view, b.view, 0.5, c.view, kStream);  // beta does not enter the key
  EXPECT_EQ(ctx.plan_count(), 1u);
}

// Heads of a (seq, heads, d) tensor as one strided batch: A_h = X[:, h, :] (ld heads * d, batch
// stride d), as attention uses it, in f32 and in bf16 with an f32 output; on cuBLASLt and on the
// fallback kernel.
TEST(GemmCuda, StridedBatchedOverInterleavedHeads) {
  ECHO_REQUIRE_DEVICE();
  const int64_t seq = 19, heads = 3, d = 12;
  for (const bool fallback : {false, true})
    for (DType in_dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(fallback ? "on the fallback kernel" : "on cuBLASLt");
      cuda::GemmContext ctx;
      ctx.use_fallback_only(fallback);
      const Operand x = make_operand(seq, heads * d, in_dtype, false, 7);     // (seq, heads*d)
      const Operand y = make_operand(seq, heads * d, in_dtype, false, 8);     // (seq, heads*d)
      Tensor s = Tensor::zeros({heads, seq, seq}, DType::f32, Device::cuda);  // S_h = X_h Y_h^T
      const double alpha = 0.3;
      cuda::gemm_strided_batched(ctx, false, true, seq, seq, d, heads, alpha,
                                 cuda::MatrixRef{x.view.raw(), in_dtype, heads * d, d},
                                 cuda::MatrixRef{y.view.raw(), in_dtype, heads * d, d}, 0.0,
                                 cuda::MatrixRef{s.raw(), DType::f32, seq, seq * seq}, kStream);
      const std::vector<float> got = download_f32(s);
      const std::vector<double> xv = x.values(), yv = y.values();
      std::vector<double> want(static_cast<size_t>(heads * seq * seq));
      for (int64_t h = 0; h < heads; ++h) {
        cpu::gemm_strided<double>(false, true, seq, seq, d, alpha, xv.data() + h * d, heads * d, yv.data() + h * d,
                                  heads * d, 0.0, want.data() + h * seq * seq, seq);
      }
      EXPECT_LE(relative_error(std::vector<double>(got.begin(), got.end()), want), 1e-5) << to_string(in_dtype);

      // The Tensor form on the same data: C_h = S_h X_h written back into a (seq, heads*d) tensor.
      if (in_dtype == DType::f32) {
        Tensor out = Tensor::zeros({seq, heads * d}, DType::f32, Device::cuda);
        Tensor s0 = s.view({heads * seq, seq}).slice(0, 0, seq);
        Tensor x0 = x.view.slice(1, 0, d);
        Tensor out0 = out.slice(1, 0, d);
        cuda::gemm_batched(ctx, false, false, heads, 1.0, s0, seq * seq, x0, d, 0.0, out0, d, kStream);
        const std::vector<float> o = download_f32(out);
        std::vector<double> want_o(static_cast<size_t>(seq * heads * d));
        for (int64_t h = 0; h < heads; ++h) {
          // The device's S_h as the input, so only this product's error is measured.
          const std::vector<double> sh(got.begin() + h * seq * seq, got.begin() + (h + 1) * seq * seq);
          cpu::gemm_strided<double>(false, false, seq, d, seq, 1.0, sh.data(), seq, xv.data() + h * d, heads * d, 0.0,
                                    want_o.data() + h * d, heads * d);
        }
        EXPECT_LE(relative_error(std::vector<double>(o.begin(), o.end()), want_o), 1e-5);
      }
    }
}

TEST(GemmCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  Tensor a = Tensor::zeros({4, 5}, DType::f32, Device::cuda);
  Tensor b = Tensor::zeros({5, 6}, DType::f32, Device::cuda);
  Tensor c = Tensor::zeros({4, 6}, DType::f32, Device::cuda);
  Tensor b_bf16 = Tensor::zeros({5, 6}, DType::bf16, Device::cuda);
  Tensor c_bad = Tensor::zeros({4, 7}, DType::f32, Device::cuda);
  Tensor host = Tensor::zeros({5, 6}, DType::f32);
  Tensor three_d = Tensor::zeros({1, 5, 6}, DType::f32, Device::cuda);
  Tensor i8 = Tensor::zeros({5, 6}, DType::i8, Device::cuda);

  try {
    cuda::gemm(ctx, false, false, 1.0, a, b_bf16, 0.0, c, kStream);
    ADD_FAILURE() << "mixed dtypes accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("gemm"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("bf16 (5, 6) cuda"), std::string::npos) << e.message();
  }
  try {
    cuda::gemm(ctx, false, false, 1.0, a, b, 0.0, c_bad, kStream);
    ADD_FAILURE() << "mismatched shapes accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("f32 (4, 7) cuda"), std::string::npos) << e.message();
  }
  EXPECT_THROW(cuda::gemm(ctx, true, false, 1.0, a, b, 0.0, c, kStream), Error);  // op(a) is (5, 4)
  EXPECT_THROW(cuda::gemm(ctx, false, false, 1.0, a, host, 0.0, c, kStream), Error);
  EXPECT_THROW(cuda::gemm(ctx, false, false, 1.0, a, three_d, 0.0, c, kStream), Error);
  EXPECT_THROW(cuda::gemm(ctx, false, false, 1.0, a, i8, 0.0, c, kStream), Error);
  EXPECT_THROW(cuda::gemm_s8s32(ctx, false, false, a, b, c, kStream), Error);  // f32 operands
  // (bf16, bf16, f32) is the batched form's mix only.
  Tensor a_bf16 = Tensor::zeros({4, 5}, DType::bf16, Device::cuda);
  EXPECT_THROW(cuda::gemm(ctx, false, false, 1.0, a_bf16, b_bf16, 0.0, c, kStream), Error);
  EXPECT_NO_THROW(cuda::gemm_batched(ctx, false, false, 1, 1.0, a_bf16, 0, b_bf16, 0, 0.0, c, 0, kStream));
  // A batch cuBLASLt cannot count (its batch count is an int32).
  try {
    cuda::gemm_strided_batched(ctx, false, false, 4, 6, 5, int64_t{1} << 31, 1.0,
                               cuda::MatrixRef{a.raw(), DType::f32, 5, 0}, cuda::MatrixRef{b.raw(), DType::f32, 6, 0},
                               0.0, cuda::MatrixRef{c.raw(), DType::f32, 6, 0}, kStream);
    ADD_FAILURE() << "a batch of 2^31 accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("2147483648"), std::string::npos) << e.message();
  }
  // A leading dimension below the row width.
  EXPECT_THROW(
      cuda::gemm_strided_batched(ctx, false, false, 4, 6, 5, 1, 1.0, cuda::MatrixRef{a.raw(), DType::f32, 4, 0},
                                 cuda::MatrixRef{b.raw(), DType::f32, 6, 0}, 0.0,
                                 cuda::MatrixRef{c.raw(), DType::f32, 6, 0}, kStream),
      Error);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- int8 -------------------------------------------------------------------------------------------

struct I8Operand {
  Tensor parent;
  Tensor view;
  std::vector<int8_t> packed;  // the view's values, row-major packed
};

I8Operand make_i8(int64_t rows, int64_t cols, bool strided, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-128, 127);
  const int64_t pr = strided ? rows + 2 : rows, pc = strided ? cols + 3 : cols;
  const int64_t r0 = strided ? 1 : 0, c0 = strided ? 1 : 0;  // odd offset: unaligned rows
  std::vector<int8_t> values(static_cast<size_t>(pr * pc));
  for (int8_t& v : values) v = static_cast<int8_t>(dist(rng));
  I8Operand op;
  op.parent = Tensor::from_vector(values, {pr, pc}).to(Device::cuda);
  op.view = strided ? op.parent.slice(0, r0, r0 + rows).slice(1, c0, c0 + cols) : op.parent;
  op.packed.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) op.packed[r * cols + c] = values[(r0 + r) * pc + c0 + c];
  return op;
}

// c's view (m, n) from a device i32 tensor; a strided c is the interior [1, 1 + m) x [3, 3 + n) of
// an (m + 2, n + 5) parent filled with a sentinel.
struct I32Out {
  Tensor parent;
  Tensor view;
  int64_t pc = 0, r0 = 0, c0 = 0;
};

constexpr int32_t kSentinel = 0x5a5a5a5a;

I32Out make_i32_out(int64_t m, int64_t n, bool strided) {
  I32Out o;
  const int64_t pr = strided ? m + 2 : m;
  o.pc = strided ? n + 5 : n;
  o.r0 = strided ? 1 : 0;
  o.c0 = strided ? 3 : 0;
  o.parent =
      Tensor::from_vector(std::vector<int32_t>(static_cast<size_t>(pr * o.pc), kSentinel), {pr, o.pc}).to(Device::cuda);
  o.view = strided ? o.parent.slice(0, o.r0, o.r0 + m).slice(1, o.c0, o.c0 + n) : o.parent;
  return o;
}

// Exact reference: quant::gemm_s8s32 where it serves k, else int64 sums (which must fit in int32).
std::vector<int32_t> reference_s8(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const std::vector<int8_t>& a,
                                  const std::vector<int8_t>& b) {
  std::vector<int32_t> c(static_cast<size_t>(m * n));
  if (k <= quant::kInt8GemmMaxK) {
    quant::gemm_s8s32(ta, tb, m, n, k, a.data(), b.data(), c.data());
    return c;
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t av = ta ? a[kk * m + i] : a[i * k + kk];
        const int64_t bv = tb ? b[j * k + kk] : b[kk * n + j];
        sum += av * bv;
      }
      EXPECT_LE(std::abs(sum), static_cast<int64_t>(INT32_MAX)) << "test data overflows int32";
      c[i * n + j] = static_cast<int32_t>(sum);
    }
  }
  return c;
}

void check_s8(cuda::GemmContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, bool strided, uint32_t seed,
              const I8Operand* a_in = nullptr, const I8Operand* b_in = nullptr) {
  const std::string where = fmt::format("m {} n {} k {} trans_a {} trans_b {} strided {}", m, n, k, ta, tb, strided);
  const I8Operand a = a_in ? *a_in : make_i8(ta ? k : m, ta ? m : k, strided, seed);
  const I8Operand b = b_in ? *b_in : make_i8(tb ? n : k, tb ? k : n, strided, seed + 1);
  I32Out c = make_i32_out(m, n, strided);
  cuda::gemm_s8s32(ctx, ta, tb, a.view, b.view, c.view, kStream);
  const std::vector<int32_t> want = reference_s8(ta, tb, m, n, k, a.packed, b.packed);
  const std::vector<int32_t> out = c.parent.to(Device::cpu).to_vector<int32_t>();
  int64_t wrong = 0, sentinel_changed = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / c.pc - c.r0, col = static_cast<int64_t>(i) % c.pc - c.c0;
    if (r >= 0 && r < m && col >= 0 && col < n) {
      if (out[i] != want[r * n + col] && wrong++ < 3) {
        ADD_FAILURE() << where << ": c[" << r << ", " << col << "] = " << out[i] << ", want " << want[r * n + col];
      }
    } else if (out[i] != kSentinel) {
      ++sentinel_changed;
    }
  }
  EXPECT_EQ(wrong, 0) << where;
  EXPECT_EQ(sentinel_changed, 0) << where << ": elements outside the c view changed";
}

TEST(GemmS8Cuda, ExactInEveryLayout) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  // Multiples of 16 from 32 rows (the TN layout runs in place), multiples of 4 and odd sizes
  // (packed and padded to 16), and one-wide ones.
  const GemmShape shapes[] = {{64, 32, 128}, {8, 4, 4},  {67, 45, 301},   {1, 1, 1},    {5, 3, 7},
                              {3, 130, 64},  {96, 7, 2}, {128, 64, 1000}, {16, 16, 16}, {48, 20, 36}};
  uint32_t seed = 100;
  for (const GemmShape& s : shapes) {
    for (int t = 0; t < 4; ++t) {
      for (bool strided : {false, true}) {
        check_s8(ctx, t & 1, t & 2, s.m, s.n, s.k, strided, seed);
        seed += 2;
      }
    }
  }
}

// k past kInt8GemmMaxK runs in chunks; row 0 x column 0 pushes the first chunk's partial sum to
// 127 * 127 * kInt8ChunkK (just under INT32_MAX), then the later chunks pull it back down.
TEST(GemmS8Cuda, LongKIsSplitIntoExactChunks) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  for (int64_t k : {int64_t{140001}, 2 * cuda::kInt8ChunkK + 8}) {
    const int64_t m = 3, n = 5;
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      std::mt19937 rng(static_cast<uint32_t>(k + t));
      std::uniform_int_distribution<int> dist(-128, 127);
      std::vector<int8_t> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
      for (int8_t& v : a) v = static_cast<int8_t>(dist(rng));
      for (int8_t& v : b) v = static_cast<int8_t>(dist(rng));
      for (int64_t kk = 0; kk < k; ++kk) {
        (ta ? a[kk * m] : a[kk]) = 127;                                                  // op(A)[0, kk]
        (tb ? b[kk] : b[kk * n]) = kk < cuda::kInt8ChunkK ? int8_t{127} : int8_t{-128};  // op(B)[kk, 0]
      }
      I8Operand ao, bo;
      ao.packed = a;
      bo.packed = b;
      ao.parent = ao.view = Tensor::from_vector(a, {ta ? k : m, ta ? m : k}).to(Device::cuda);
      bo.parent = bo.view = Tensor::from_vector(b, {tb ? n : k, tb ? k : n}).to(Device::cuda);
      check_s8(ctx, ta, tb, m, n, k, false, 0, &ao, &bo);
    }
  }
  // The TN layout with m, n, k multiples of 16 (m >= 32) runs in place, also in chunks.
  check_s8(ctx, false, true, 32, 16, 2 * cuda::kInt8ChunkK + 16, false, 77);
}

TEST(GemmS8Cuda, EmptyAndZeroK) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  for (int t = 0; t < 4; ++t) check_s8(ctx, t & 1, t & 2, 6, 5, 0, t >= 2, 3);  // C = 0
  I8Operand a = make_i8(0, 4, false, 1), b = make_i8(4, 3, false, 2);
  I32Out c = make_i32_out(0, 3, false);
  EXPECT_NO_THROW(cuda::gemm_s8s32(ctx, false, false, a.view, b.view, c.view, kStream));
}

TEST(GemmS8Cuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  Tensor a = Tensor::zeros({4, 8}, DType::i8, Device::cuda);
  Tensor b = Tensor::zeros({8, 4}, DType::i8, Device::cuda);
  Tensor c = Tensor::zeros({4, 4}, DType::i32, Device::cuda);
  Tensor c_f32 = Tensor::zeros({4, 4}, DType::f32, Device::cuda);
  Tensor c_bad = Tensor::zeros({4, 5}, DType::i32, Device::cuda);
  try {
    cuda::gemm_s8s32(ctx, false, false, a, b, c_f32, kStream);
    ADD_FAILURE() << "an f32 c accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("gemm_s8s32"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("f32 (4, 4) cuda"), std::string::npos) << e.message();
  }
  EXPECT_THROW(cuda::gemm_s8s32(ctx, false, false, a, b, c_bad, kStream), Error);
  EXPECT_THROW(cuda::gemm_s8s32(ctx, false, true, a, b, c, kStream), Error);  // op(b) is (4, 8)
  EXPECT_THROW(cuda::gemm_s8s32(ctx, false, false, a.to(Device::cpu), b, c, kStream), Error);
}

}  // namespace
}  // namespace echo
