// The CUDA group quantizer against the CPU one: the wire bytes (codes and fp16 parameters) must be
// bit-identical and the dequantized values identical, on random shapes, policies and bit widths.
// Skips without a CUDA device; fails instead under ECHO_REQUIRE_GPU=1 (tests/support/gpu_test.h).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../support/gpu_test.h"
#include "comm/echo/quantize.h"
#include "cuda_check.h"
#include "quantize.cuh"

namespace echo {
namespace {

using comm::QuantReport;

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};

// RAII device buffer of count T.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
    ptr_.reset(p);
  }
  T* get() const { return static_cast<T*>(ptr_.get()); }
  void upload(const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    CUDA_CHECK(cudaMemcpy(host.data(), get(), count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t count_;
  std::unique_ptr<void, CudaFree> ptr_;
};

std::vector<float> random_values(size_t n, int shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-0.5f, 2.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (shape % 4) {
      case 0:
        x[i] = normal(rng);
        break;
      case 1:
        x[i] = 4.0f + normal(rng);  // mostly one-sided groups: the naive branch
        break;
      case 2:
        x[i] = uniform(rng) * 1e-3f;
        break;
      default:
        x[i] = normal(rng) * (i % 29 == 3 ? 50.0f : 0.05f);
        break;
    }
    if (x[i] == 0.0f) x[i] = 0.5f;
  }
  return x;
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

struct Shape {
  size_t n;
  int group_size;
};

TEST(QuantizeCuda, MatchesCpuBitForBit) {
  ECHO_REQUIRE_DEVICE();
  const Shape shapes[] = {{1, 128}, {7, 8},     {128, 128},   {1000, 128}, {4099, 128}, {33, 1},
                          {65, 2},  {3001, 64}, {70000, 128}, {5000, 512}, {129, 32}};
  cudaStream_t stream = nullptr;
  DeviceBuffer<cuda::DeviceQuantReport> report(1);
  uint32_t seed = 1;
  for (QuantPolicy policy : {QuantPolicy::symmetric, QuantPolicy::asym_naive, QuantPolicy::asym_zero_aware}) {
    for (int bits : {4, 8}) {
      for (const Shape& s : shapes) {
        for (int shape = 0; shape < 4; ++shape) {
          const QuantSpec spec{policy, bits, s.group_size};
          const std::vector<float> x = random_values(s.n, shape, seed++);
          const size_t bytes = comm::wire_bytes(s.n, spec);
          std::vector<uint8_t> cpu_wire(bytes);
          ASSERT_TRUE(comm::quantize(x.data(), s.n, spec, cpu_wire.data()).ok());
          std::vector<float> cpu_out(s.n);
          ASSERT_TRUE(comm::dequantize(cpu_wire.data(), s.n, spec, cpu_out.data()).ok());
          std::vector<float> cpu_acc = random_values(s.n, 0, seed++);
          const std::vector<float> acc0 = cpu_acc;
          ASSERT_TRUE(comm::dequantize_add(cpu_wire.data(), s.n, spec, cpu_acc.data()).ok());

          DeviceBuffer<float> d_x(s.n), d_out(s.n), d_acc(s.n);
          DeviceBuffer<uint8_t> d_wire(bytes);
          d_x.upload(x);
          d_acc.upload(acc0);
          cuda::reset_report(report.get(), stream);
          cuda::quantize(d_x.get(), s.n, spec, d_wire.get(), report.get(), stream);
          cuda::dequantize(d_wire.get(), s.n, spec, d_out.get(), report.get(), stream);
          cuda::dequantize_add(d_wire.get(), s.n, spec, d_acc.get(), report.get(), stream);
          EXPECT_TRUE(cuda::read_report(report.get(), stream).ok());
          const std::string where = "policy " + std::to_string(static_cast<int>(policy)) + " bits " +
                                    std::to_string(bits) + " n " + std::to_string(s.n) + " g " +
                                    std::to_string(s.group_size) + " shape " + std::to_string(shape);
          ASSERT_EQ(d_wire.download(), cpu_wire) << where;
          ASSERT_EQ(bits_of(d_out.download()), bits_of(cpu_out)) << where;
          ASSERT_EQ(bits_of(d_acc.download()), bits_of(cpu_acc)) << where;
        }
      }
    }
  }
}

// Poisoned groups: same bytes as the CPU, counted by the device report, NaN after decoding.
TEST(QuantizeCuda, PoisonedGroupsMatchCpuAndAreReported) {
  ECHO_REQUIRE_DEVICE();
  cudaStream_t stream = nullptr;
  DeviceBuffer<cuda::DeviceQuantReport> report(1);
  for (QuantPolicy policy : {QuantPolicy::symmetric, QuantPolicy::asym_zero_aware}) {
    for (int bits : {4, 8}) {
      const QuantSpec spec{policy, bits, 32};
      const size_t n = 32 * 10 + 7;
      std::vector<float> x = random_values(n, 0, 99);
      x[40] = std::numeric_limits<float>::quiet_NaN();
      x[130] = std::numeric_limits<float>::infinity();
      x[322] = 3e7f;                                      // short last group: scale overflows fp16
      std::fill(x.begin() + 192, x.begin() + 224, 0.0f);  // an all-zero group, not poisoned
      const size_t bytes = comm::wire_bytes(n, spec);
      std::vector<uint8_t> cpu_wire(bytes);
      const QuantReport cpu_report = comm::quantize(x.data(), n, spec, cpu_wire.data());
      ASSERT_EQ(cpu_report.bad_groups, 3u);

      DeviceBuffer<float> d_x(n), d_out(n);
      DeviceBuffer<uint8_t> d_wire(bytes);
      d_x.upload(x);
      cuda::reset_report(report.get(), stream);
      cuda::quantize(d_x.get(), n, spec, d_wire.get(), report.get(), stream);
      const QuantReport q = cuda::read_report(report.get(), stream);
      EXPECT_EQ(q.bad_groups, 3u);
      EXPECT_EQ(q.first_bad_element, 32u);
      EXPECT_EQ(d_wire.download(), cpu_wire);

      cuda::reset_report(report.get(), stream);
      cuda::dequantize(d_wire.get(), n, spec, d_out.get(), report.get(), stream);
      const QuantReport d = cuda::read_report(report.get(), stream);
      EXPECT_EQ(d.bad_groups, 3u);
      EXPECT_EQ(d.first_bad_element, 32u);
      std::vector<float> cpu_out(n);
      comm::dequantize(cpu_wire.data(), n, spec, cpu_out.data());
      EXPECT_EQ(bits_of(d_out.download()), bits_of(cpu_out));
      const std::vector<float> out = d_out.download();
      for (size_t i = 0; i < n; ++i) {
        const size_t group_idx = i / 32;
        EXPECT_EQ(std::isnan(out[i]), group_idx == 1 || group_idx == 4 || group_idx == 10) << i;
      }
    }
  }
}

TEST(QuantizeCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  DeviceBuffer<cuda::DeviceQuantReport> report(1);
  DeviceBuffer<float> x(8);
  DeviceBuffer<uint8_t> wire(64);
  EXPECT_THROW(cuda::quantize(x.get(), 8, QuantSpec{QuantPolicy::symmetric, 5, 8}, wire.get(), report.get(), nullptr),
               echo::Error);
  EXPECT_THROW(cuda::quantize(x.get(), 8, QuantSpec{QuantPolicy::symmetric, 4, 8}, wire.get(), nullptr, nullptr),
               echo::Error);
  EXPECT_NO_THROW(cuda::quantize(nullptr, 0, QuantSpec{}, nullptr, report.get(), nullptr));
}

}  // namespace
}  // namespace echo
