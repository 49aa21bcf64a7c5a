// Helpers of the CUDA op tests (tests/kernels/*_cuda_test.cpp, the kernels of kernels/ops.cuh):
// random inputs (never zero), host <-> device tensors, and the comparisons of docs/design.md §15:
// max-abs-normalized error against the CPU reference (f32 <= 1e-5, bf16 <= 1e-2) or identical bits.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"
#include "cuda_check.h"

namespace echo::testing {

// n normal(offset, scale) values, none zero.
inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(offset, scale);
  std::vector<float> v(n);
  for (float& x : v) {
    x = normal(rng);
    if (x == 0.0f) x = 0.25f * scale;
  }
  return v;
}

// The values as `dtype` holds them (bf16: rounded to nearest even), so the CPU reference and the
// kernel read the same numbers.
inline std::vector<float> rounded_to(std::vector<float> v, DType dtype) {
  if (dtype == DType::bf16)
    for (float& x : v) x = round_to_bf16(x);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// A cuda tensor of `dtype` holding `values` (exact in dtype: pass them through rounded_to first).
inline Tensor device_tensor(const std::vector<float>& values, std::vector<int64_t> shape, DType dtype) {
  Tensor host = Tensor::from_vector(values, std::move(shape));
  if (dtype != DType::f32) host = host.to(dtype);
  return host.to(Device::cuda);
}

inline Tensor device_i32(const std::vector<int32_t>& values, std::vector<int64_t> shape) {
  return Tensor::from_vector(values, std::move(shape)).to(Device::cuda);
}

// Waits for the device and surfaces a kernel fault here rather than in a later call.
inline void sync_device() { CUDA_CHECK(cudaDeviceSynchronize()); }

// A cuda (or host) f32 / bf16 tensor's values as floats (exact).
inline std::vector<float> host_floats(const Tensor& t) {
  sync_device();
  Tensor h = t.to(Device::cpu);
  if (h.dtype() != DType::f32) h = h.to(DType::f32);
  return h.to_vector<float>();
}

inline double tolerance(DType dtype) { return dtype == DType::bf16 ? 1e-2 : 1e-5; }

// max |got - want| / max |want| <= tol.
template <class W>
::testing::AssertionResult close_normalized(const std::vector<float>& got, const std::vector<W>& want, double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  double max_ref = 0.0, max_err = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
    const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (!(err <= max_err)) {  // NaN counts as the worst
      max_err = err;
      worst = i;
    }
  }
  const double normalized = max_err / (max_ref > 0.0 ? max_ref : 1.0);
  if (normalized <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max-abs-normalized error " << normalized << " > " << tol << " (worst at "
                                       << worst << ": got " << got[worst] << ", want " << want[worst] << ", max |want| "
                                       << max_ref << ")";
}

// Identical f32 bits (so -0 != +0 and NaN payloads count).
inline ::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (float_bits(got[i]) != float_bits(want[i]))
      return ::testing::AssertionFailure()
             << "first difference at " << i << ": got " << got[i] << " (0x" << std::hex << float_bits(got[i])
             << "), want " << want[i] << " (0x" << float_bits(want[i]) << ")";
  }
  return ::testing::AssertionSuccess();
}

inline std::string dtype_name(DType dtype) { return std::string(to_string(dtype)); }

}  // namespace echo::testing
