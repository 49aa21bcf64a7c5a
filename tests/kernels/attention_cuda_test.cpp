// CUDA causal GQA attention (kernels/attention.cuh) against cpu::attention_forward / backward in
// double: out, lse, dq, dk, dv on several shapes (one token, odd lengths and head sizes, MHA and
// GQA groups of 2-4, batch > 1), f32 and bf16; bit-identical reruns; the causal mask (a later
// token cannot change an earlier row); argument errors. Skips without a CUDA device; fails
// instead under ECHO_REQUIRE_GPU=1 (tests/support/gpu_test.h).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../support/gpu_test.h"
#include "attention.cuh"
#include "backend/ops.h"
#include "core/half.h"
#include "core/tensor.h"
#include "cuda_check.h"
#include "gemm.cuh"

namespace echo {
namespace {

constexpr cudaStream_t kStream = nullptr;  // the legacy stream, ordered with Tensor's copies

struct AttnShape {
  int64_t batch, seq, n_q, n_kv, d;
};

std::string name(const AttnShape& s, DType dtype) {
  return fmt::format("{} batch {} seq {} n_q {} n_kv {} d {}", dtype, s.batch, s.seq, s.n_q, s.n_kv, s.d);
}

// Random values rounded to the dtype (so the CPU reference sees what the device holds).
std::vector<float> random_values(size_t n, uint32_t seed, DType dtype) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dtype == DType::bf16 ? round_to_bf16(normal(rng)) : normal(rng);
  return x;
}

Tensor to_device(const std::vector<float>& v, std::vector<int64_t> shape, DType dtype) {
  Tensor host = Tensor::from_vector(v, std::move(shape));
  if (dtype == DType::bf16) host = host.to(DType::bf16);
  return host.to(Device::cuda);
}

std::vector<double> download(const Tensor& t) {
  const std::vector<float> f = t.to(Device::cpu).to_f32().to_vector<float>();
  return std::vector<double>(f.begin(), f.end());
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// max |got - want| / max(max |want|, floor); NaN anywhere is infinite.
double relative_error(const std::vector<double>& got, const std::vector<double>& want, double floor = 0.0) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0, scale = floor;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0.0 ? err / scale : err;
}

// Device inputs, outputs and workspace for one shape.
struct DeviceAttention {
  Tensor q, k, v, dout, out, lse, dq, dk, dv, workspace;

  DeviceAttention(const AttnShape& s, DType dtype, const std::vector<float>& hq, const std::vector<float>& hk,
                  const std::vector<float>& hv, const std::vector<float>& hdout) {
    const std::vector<int64_t> q_shape{s.batch, s.seq, s.n_q, s.d}, kv_shape{s.batch, s.seq, s.n_kv, s.d};
    q = to_device(hq, q_shape, dtype);
    k = to_device(hk, kv_shape, dtype);
    v = to_device(hv, kv_shape, dtype);
    dout = to_device(hdout, q_shape, dtype);
    out = Tensor::empty(q_shape, dtype, Device::cuda);
    lse = Tensor::empty({s.batch, s.n_q, s.seq}, DType::f32, Device::cuda);
    dq = Tensor::empty(q_shape, dtype, Device::cuda);
    dk = Tensor::empty(kv_shape, dtype, Device::cuda);
    dv = Tensor::empty(kv_shape, dtype, Device::cuda);
    const size_t bytes = cuda::attention_workspace_bytes(s.batch, s.seq, s.n_q, s.n_kv, s.d, dtype);
    workspace = Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, Device::cuda);
  }

  void forward(cuda::GemmContext& ctx) { cuda::attention_forward(ctx, q, k, v, out, lse, workspace, kStream); }
  void backward(cuda::GemmContext& ctx) {
    cuda::attention_backward(ctx, dout, q, k, v, out, lse, dq, dk, dv, workspace, kStream);
  }
};

const AttnShape kShapes[] = {{1, 1, 1, 1, 8},    {2, 17, 4, 2, 16},  {1, 64, 8, 2, 32}, {2, 33, 6, 3, 24},
                             {1, 128, 4, 4, 64}, {1, 40, 4, 1, 128}, {3, 9, 2, 2, 20}};

void check_against_cpu(DType dtype, double tol, double lse_tol) {
  cuda::GemmContext ctx;
  uint32_t seed = 1;
  for (const AttnShape& s : kShapes) {
    const std::string where = name(s, dtype);
    const size_t nq = static_cast<size_t>(s.batch * s.seq * s.n_q * s.d);
    const size_t nkv = static_cast<size_t>(s.batch * s.seq * s.n_kv * s.d);
    const std::vector<float> hq = random_values(nq, seed++, dtype), hk = random_values(nkv, seed++, dtype),
                             hv = random_values(nkv, seed++, dtype), hdo = random_values(nq, seed++, dtype);
    // Reference in double.
    const std::vector<double> q = to_double(hq), k = to_double(hk), v = to_double(hv), dout = to_double(hdo);
    std::vector<double> out(nq), lse(static_cast<size_t>(s.batch * s.n_q * s.seq)), dq(nq), dk(nkv), dv(nkv);
    cpu::attention_forward<double>(q.data(), k.data(), v.data(), s.batch, s.seq, s.n_q, s.n_kv, s.d, out.data(),
                                   lse.data());
    cpu::attention_backward<double>(dout.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), s.batch, s.seq,
                                    s.n_q, s.n_kv, s.d, dq.data(), dk.data(), dv.data());

    DeviceAttention dev(s, dtype, hq, hk, hv, hdo);
    dev.forward(ctx);
    dev.backward(ctx);
    EXPECT_LE(relative_error(download(dev.out), out), tol) << where << " out";
    // lse is O(1) (a log of a sum of at least one exp): judged against 1 where its values are small.
    EXPECT_LE(relative_error(download(dev.lse), lse, 1.0), lse_tol) << where << " lse";
    // NOTE: with one token P = 1 and dS = dO.V - dO.O = 0 up to rounding: dq and dk are zeros that
    // only an absolute bound can judge.
    const double grad_floor = s.seq == 1 ? 1.0 : 0.0;
    EXPECT_LE(relative_error(download(dev.dq), dq, grad_floor), tol) << where << " dq";
    EXPECT_LE(relative_error(download(dev.dk), dk, grad_floor), tol) << where << " dk";
    EXPECT_LE(relative_error(download(dev.dv), dv), tol) << where << " dv";
  }
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(AttentionCuda, F32MatchesCpu) {
  ECHO_REQUIRE_DEVICE();
  check_against_cpu(DType::f32, 1e-5, 1e-5);
}

TEST(AttentionCuda, Bf16MatchesCpu) {
  ECHO_REQUIRE_DEVICE();
  // Scores, softmax and lse are f32 from bf16 inputs, so lse keeps near-f32 accuracy.
  check_against_cpu(DType::bf16, 1e-2, 1e-3);
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu);
  std::vector<uint32_t> out(static_cast<size_t>(h.numel()));
  if (h.dtype() == DType::f32) {
    std::memcpy(out.data(), h.raw(), out.size() * 4);
  } else {
    std::vector<uint16_t> b(out.size());
    std::memcpy(b.data(), h.raw(), b.size() * 2);
    std::copy(b.begin(), b.end(), out.begin());
  }
  return out;
}

TEST(AttentionCuda, RerunsAreBitIdentical) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  const AttnShape s{2, 48, 8, 2, 32};
  for (DType dtype : {DType::f32, DType::bf16}) {
    const size_t nq = static_cast<size_t>(s.batch * s.seq * s.n_q * s.d);
    const size_t nkv = static_cast<size_t>(s.batch * s.seq * s.n_kv * s.d);
    DeviceAttention dev(s, dtype, random_values(nq, 1, dtype), random_values(nkv, 2, dtype),
                        random_values(nkv, 3, dtype), random_values(nq, 4, dtype));
    dev.forward(ctx);
    dev.backward(ctx);
    const auto out = bits_of(dev.out), lse = bits_of(dev.lse), dq = bits_of(dev.dq), dk = bits_of(dev.dk),
               dv = bits_of(dev.dv);
    dev.forward(ctx);
    dev.backward(ctx);
    EXPECT_EQ(bits_of(dev.out), out) << to_string(dtype);
    EXPECT_EQ(bits_of(dev.lse), lse) << to_string(dtype);
    EXPECT_EQ(bits_of(dev.dq), dq) << to_string(dtype);
    EXPECT_EQ(bits_of(dev.dk), dk) << to_string(dtype);
    EXPECT_EQ(bits_of(dev.dv), dv) << to_string(dtype);
  }
}

// Changing the last token's q, k and v leaves every earlier row's output and lse bit for bit: the
// masked probabilities are exact zeros.
TEST(AttentionCuda, LaterTokensDoNotChangeEarlierRows) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  const AttnShape s{1, 24, 4, 2, 16};
  const size_t nq = static_cast<size_t>(s.seq * s.n_q * s.d), nkv = static_cast<size_t>(s.seq * s.n_kv * s.d);
  std::vector<float> hq = random_values(nq, 5, DType::f32), hk = random_values(nkv, 6, DType::f32),
                     hv = random_values(nkv, 7, DType::f32);
  const std::vector<float> hdo = random_values(nq, 8, DType::f32);
  DeviceAttention a(s, DType::f32, hq, hk, hv, hdo);
  a.forward(ctx);
  const std::vector<double> out_a = download(a.out), lse_a = download(a.lse);
  const size_t q_row = static_cast<size_t>(s.n_q * s.d), kv_row = static_cast<size_t>(s.n_kv * s.d);
  for (size_t i = nq - q_row; i < nq; ++i) hq[i] = 3.0f * hq[i] + 1.0f;
  for (size_t i = nkv - kv_row; i < nkv; ++i) {
    hk[i] = -2.0f * hk[i];
    hv[i] = 5.0f + hv[i];
  }
  DeviceAttention b(s, DType::f32, hq, hk, hv, hdo);
  b.forward(ctx);
  const std::vector<double> out_b = download(b.out), lse_b = download(b.lse);
  for (size_t i = 0; i < nq - q_row; ++i) ASSERT_EQ(out_a[i], out_b[i]) << "out element " << i;
  for (int64_t h = 0; h < s.n_q; ++h) {
    for (int64_t i = 0; i + 1 < s.seq; ++i) ASSERT_EQ(lse_a[h * s.seq + i], lse_b[h * s.seq + i]) << h << ", " << i;
  }
}

TEST(AttentionCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  cuda::GemmContext ctx;
  const AttnShape s{1, 8, 4, 2, 16};
  const size_t nq = static_cast<size_t>(s.seq * s.n_q * s.d), nkv = static_cast<size_t>(s.seq * s.n_kv * s.d);
  DeviceAttention dev(s, DType::f32, random_values(nq, 1, DType::f32), random_values(nkv, 2, DType::f32),
                      random_values(nkv, 3, DType::f32), random_values(nq, 4, DType::f32));
  Tensor small = Tensor::empty({1024}, DType::u8, Device::cuda);
  try {
    cuda::attention_forward(ctx, dev.q, dev.k, dev.v, dev.out, dev.lse, small, kStream);
    ADD_FAILURE() << "a small workspace accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("attention_forward"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("workspace"), std::string::npos) << e.message();
  }
  Tensor lse_bf16 = Tensor::empty({s.batch, s.n_q, s.seq}, DType::bf16, Device::cuda);
  try {
    cuda::attention_forward(ctx, dev.q, dev.k, dev.v, dev.out, lse_bf16, dev.workspace, kStream);
    ADD_FAILURE() << "a bf16 lse accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("bf16 (1, 4, 8) cuda"), std::string::npos) << e.message();
  }
  Tensor k3 = Tensor::empty({s.batch, s.seq, 3, s.d}, DType::f32, Device::cuda);  // 4 % 3 != 0
  EXPECT_THROW(cuda::attention_forward(ctx, dev.q, k3, k3, dev.out, dev.lse, dev.workspace, kStream), Error);
  Tensor k_bf16 = Tensor::empty({s.batch, s.seq, s.n_kv, s.d}, DType::bf16, Device::cuda);
  EXPECT_THROW(cuda::attention_forward(ctx, dev.q, k_bf16, dev.v, dev.out, dev.lse, dev.workspace, kStream), Error);
  Tensor dk_short = Tensor::empty({s.batch, s.seq - 1, s.n_kv, s.d}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::attention_backward(ctx, dev.dout, dev.q, dev.k, dev.v, dev.out, dev.lse, dev.dq, dk_short, dev.dv,
                                        dev.workspace, kStream),
               Error);
  Tensor q_host = dev.q.to(Device::cpu);
  EXPECT_THROW(cuda::attention_forward(ctx, q_host, dev.k, dev.v, dev.out, dev.lse, dev.workspace, kStream), Error);
}

}  // namespace
}  // namespace echo
