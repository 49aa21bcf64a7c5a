// The device-side pieces of the deferred checks of Echo's device sites (comm/echo/device_qar.cpp,
// docs/design.md §2.1 "No per-op waits"), against the host arithmetic they replace:
// echo_rescale_exponent equals rescale_exponent (rescale.h) for every kind of max and notes a
// non-finite one; echo_scale_pow2 and echo_finish with e read from device memory give the bits of
// the same calls with e as a launch argument; note_if_poisoned keeps the smallest key of the calls
// whose report counts a poisoned group.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../support/gpu_test.h"
#include "../support/test_data.h"
#include "../support/test_util.h"
#include "comm/echo/compensator_math.h"
#include "comm/echo/quantize.h"
#include "comm/echo/rescale.h"
#include "compensator.cuh"
#include "core/hd.h"
#include "cuda_check.h"
#include "quantize.cuh"

namespace echo {
namespace {

constexpr unsigned long long kNone = ~0ull;

// A device copy of host values, freed at scope exit.
template <class T>
struct Device {
  explicit Device(const std::vector<T>& host) : n(host.size()) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)));
    if (n > 0) CUDA_CHECK(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  std::vector<T> get() const {
    std::vector<T> h(n);
    if (n > 0) CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* p = nullptr;
  size_t n;
};

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

std::vector<float> random_gradient(size_t n, uint64_t seed, float scale) {
  return echo::testing::random_normal(n, seed, 0, 0.0f, scale);
}

TEST(RescaleCuda, ExponentOnTheDeviceMatchesTheHostAndNotesANonFiniteMax) {
  ECHO_REQUIRE_DEVICE();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> maxima = {0.0f, 1e-45f, 3e-39f, 1.17549435e-38f, 1e-30f, 0.75f, 1.0f, 1024.0f, 2047.99f,
                               3.4e38f, inf};
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> exponent(-140.0f, 120.0f);
  for (int i = 0; i < 200; ++i) maxima.push_back(std::ldexp(1.0f + (i % 7) / 8.0f, static_cast<int>(exponent(rng))));
  for (float gmax : maxima) {
    uint32_t b = 0;
    std::memcpy(&b, &gmax, sizeof b);
    Device<uint32_t> max_bits({b});
    Device<int> e({12345});
    Device<unsigned long long> fault({kNone});
    cuda::echo_rescale_exponent(max_bits.p, e.p, 42, fault.p, nullptr);
    const bool finite = std::isfinite(gmax);
    EXPECT_EQ(e.get()[0], finite ? comm::rescale_exponent(gmax) : 0) << gmax;
    EXPECT_EQ(fault.get()[0], finite ? kNone : 42ull) << gmax;
  }
  // A smaller key wins over an earlier, larger one; a larger one does not replace it.
  const float bad = inf;
  uint32_t b = 0;
  std::memcpy(&b, &bad, sizeof b);
  Device<uint32_t> max_bits({b});
  Device<int> e({0});
  Device<unsigned long long> fault({kNone});
  for (unsigned long long key : {900ull, 300ull, 700ull}) cuda::echo_rescale_exponent(max_bits.p, e.p, key, fault.p, nullptr);
  EXPECT_EQ(fault.get()[0], 300ull);
}

TEST(RescaleCuda, ExponentFromDeviceMemoryGivesTheSameBits) {
  ECHO_REQUIRE_DEVICE();
  const size_t n = 3001;
  const comm::CompensatorCoeffs k{0.4f, 0.6f, 0.9f, 0.99f};
  for (int e : {-117, -3, 0, 7, 40, 125, 140}) {
    SCOPED_TRACE(e);
    const float scale = std::ldexp(1.0f, -e);  // x·2^e near 1: neither overflows nor flushes
    const std::vector<float> x = random_gradient(n, 100 + static_cast<uint32_t>(e + 200), scale);
    const std::vector<float> m1 = random_gradient(n, 7, scale * 0.1f), m2 = random_gradient(n, 8, scale * 0.05f);
    Device<int> e_device({e});
    Device<float> d_x(x);
    Device<float> y_host_e(std::vector<float>(n, 1.0f)), y_device_e(std::vector<float>(n, 2.0f));
    cuda::echo_scale_pow2(d_x.p, n, e, y_host_e.p, nullptr);
    cuda::echo_scale_pow2(d_x.p, n, 999, y_device_e.p, nullptr, e_device.p);  // 999: must be ignored
    const std::vector<float> scaled = y_host_e.get();
    ASSERT_EQ(bits(scaled), bits(y_device_e.get()));
    EXPECT_EQ(bits({scaled[5]}), bits({comm::scale_pow2(x[5], e)}));

    // finish: unscale, update the state from x', write the output; both ways.
    Device<float> a1(m1), a2(m2), b1(m1), b2(m2);
    Device<float> out_a(std::vector<float>(n, 0.0f)), out_b(std::vector<float>(n, 0.0f));
    cuda::echo_finish(y_host_e.p, n, e, d_x.p, 4.0f, a1.p, a2.p, &k, out_a.p, false, nullptr);
    cuda::echo_finish(y_device_e.p, n, -5, d_x.p, 4.0f, b1.p, b2.p, &k, out_b.p, false, nullptr, e_device.p);
    const std::vector<float> out = out_a.get();
    EXPECT_EQ(bits(out), bits(out_b.get()));
    EXPECT_EQ(bits(a1.get()), bits(b1.get()));
    EXPECT_EQ(bits(a2.get()), bits(b2.get()));
    for (size_t i = 0; i < n; i += 97) ASSERT_EQ(bits({out[i]}), bits({x[i]})) << i;  // 2^e then 2^-e: exact

    // finish_recompute (the fused site's: x' recomputed from x, output in place in x); both ways,
    // and against the host formulas.
    Device<float> xa(x), xb(x), c1(m1), c2(m2), d1(m1), d2(m2);
    cuda::echo_finish_recompute(y_host_e.p, n, e, xa.p, false, 4.0f, c1.p, c2.p, &k, nullptr);
    cuda::echo_finish_recompute(y_device_e.p, n, -5, xb.p, false, 4.0f, d1.p, d2.p, &k, nullptr, e_device.p);
    const std::vector<float> got_x = xa.get(), got_m1 = c1.get(), got_m2 = c2.get();
    EXPECT_EQ(bits(got_x), bits(xb.get()));
    EXPECT_EQ(bits(got_m1), bits(d1.get()));
    EXPECT_EQ(bits(got_m2), bits(d2.get()));
    for (size_t i = 0; i < n; i += 89) {
      float h1 = m1[i], h2 = m2[i];
      const float v = e != 0 ? comm::scale_pow2(scaled[i], -e) : scaled[i];
      comm::compensator_update(comm::compensate(x[i], h1, h2, k), v, 4.0f, h1, h2, k);
      ASSERT_EQ(bits({got_x[i], got_m1[i], got_m2[i]}), bits({v, h1, h2})) << i;
    }
  }
}

TEST(RescaleCuda, NoteIfPoisonedKeepsTheSmallestKeyOfPoisonedCalls) {
  ECHO_REQUIRE_DEVICE();
  const QuantSpec spec{QuantPolicy::asym_zero_aware, 4, 32};
  const size_t n = 32 * 6;
  std::vector<float> clean = random_gradient(n, 3, 1.0f), poisoned = clean;
  poisoned[70] = std::numeric_limits<float>::quiet_NaN();
  Device<cuda::DeviceQuantReport> report({cuda::DeviceQuantReport{}});
  Device<unsigned long long> word({kNone});
  Device<uint8_t> wire(std::vector<uint8_t>(comm::wire_bytes(n, spec)));
  struct Call {
    const std::vector<float>* x;
    unsigned long long key;
    unsigned long long want;  // the word after the call
  };
  const Call calls[] = {{&clean, 5, kNone}, {&poisoned, 800, 800}, {&clean, 1, 800}, {&poisoned, 200, 200},
                        {&poisoned, 600, 200}};
  for (const Call& c : calls) {
    Device<float> x(*c.x);
    cuda::reset_report(report.p, nullptr);
    cuda::quantize(x.p, n, spec, wire.p, report.p, nullptr);
    cuda::note_if_poisoned(report.p, c.key, word.p, nullptr);
    EXPECT_EQ(word.get()[0], c.want) << "key " << c.key;
  }
}

// A bf16 out overlapping the f32 y races in the kernel (thread i writes into the float thread i/2
// reads): refused before the launch, so this runs without a GPU (the pointers are never read).
// An f32 out may be y itself (each thread rewrites its own element), nothing else overlapping.
TEST(RescaleCuda, EchoFinishRefusesAnOutOverlappingY) {
  std::vector<float> y(64);
  const size_t n = y.size();
  for (void* out : {static_cast<void*>(y.data()), static_cast<void*>(y.data() + 10), static_cast<void*>(y.data() + 63)})
    EXPECT_NE(testing::error_of([&] {
                cuda::echo_finish(y.data(), n, 0, nullptr, 2.0f, nullptr, nullptr, nullptr, out, true, nullptr);
              }).find("echo_finish of 64 values: a bf16 out overlapping the f32 y races"),
              std::string::npos);
  // A shifted f32 out races the same way.
  EXPECT_NE(testing::error_of([&] {
              cuda::echo_finish(y.data(), n, 0, nullptr, 2.0f, nullptr, nullptr, nullptr, y.data() + 1, false, nullptr);
            }).find("echo_finish of 64 values: a f32 out overlapping the f32 y races"),
            std::string::npos);
}

}  // namespace
}  // namespace echo
