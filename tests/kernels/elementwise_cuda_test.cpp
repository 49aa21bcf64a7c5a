// cuda::add_inplace, copy, cast, fill and scale: bit-identical to the host arithmetic the CPU
// backend does (one fp32 operation, rounded once through core/half.h), for odd sizes and several
// blocks; cast and fill round a double once (checked on values where rounding through float first
// would differ); every op refuses host tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../support/gpu_test.h"
#include "core/half.h"
#include "ops.cuh"
#include "ops_cuda_test_util.h"

namespace echo {
namespace {

using namespace echo::testing;

const int64_t kSizes[] = {1, 1000, 4099, (int64_t{1} << 20) + 3};

// The bits of a host tensor's elements, widened to 64 bits, for any dtype.
std::vector<uint64_t> element_bits(const Tensor& t) {
  sync_device();
  const Tensor h = t.to(Device::cpu);
  std::vector<uint64_t> bits(h.numel());
  const auto* p = static_cast<const uint8_t*>(h.raw());
  for (int64_t i = 0; i < h.numel(); ++i) {
    uint64_t b = 0;
    std::memcpy(&b, p + i * h.element_size(), h.element_size());
    bits[i] = b;
  }
  return bits;
}

// A host tensor of dtype from f64 values, each converted by `round` (which must be exact for the
// dtype's own values): the expected output or an exact input.
Tensor host_tensor(const std::vector<double>& v, DType dtype) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, dtype);
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::f32:
        static_cast<float*>(t.raw())[i] = static_cast<float>(v[i]);
        break;
      case DType::bf16:
        static_cast<uint16_t*>(t.raw())[i] = float_to_bf16_bits(static_cast<float>(v[i]));
        break;
      case DType::f16:
        static_cast<uint16_t*>(t.raw())[i] = float_to_half_bits(static_cast<float>(v[i]));
        break;
      default:
        static_cast<double*>(t.raw())[i] = v[i];
        break;
    }
  }
  return t;
}

double value_of(const Tensor& host, int64_t i) {
  switch (host.dtype()) {
    case DType::f32:
      return static_cast<const float*>(host.raw())[i];
    case DType::bf16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(host.raw())[i]);
    case DType::f16:
      return half_bits_to_float(static_cast<const uint16_t*>(host.raw())[i]);
    default:
      return static_cast<const double*>(host.raw())[i];
  }
}

// The nearest bf16 / f16 bit pattern to v, ties to even, by comparing v with the neighbours of a
// candidate in exact double arithmetic: independent of the kernels' round-to-odd. Normal range only.
uint16_t nearest_bits(double v, DType dtype) {
  const auto decode = [&](uint16_t b) -> double {
    return dtype == DType::bf16 ? bf16_bits_to_float(b) : half_bits_to_float(b);
  };
  const uint16_t c =
      dtype == DType::bf16 ? float_to_bf16_bits(static_cast<float>(v)) : float_to_half_bits(static_cast<float>(v));
  uint16_t best = c;
  for (uint16_t b : {static_cast<uint16_t>(c - 1), c, static_cast<uint16_t>(c + 1)}) {
    const double d = std::fabs(decode(b) - v), best_d = std::fabs(decode(best) - v);
    if (d < best_d || (d == best_d && (b & 1u) == 0)) best = b;
  }
  return best;
}

TEST(ElementwiseCuda, AddInplaceMatchesHostBitForBit) {
  ECHO_REQUIRE_DEVICE();
  uint32_t seed = 700;
  for (int64_t n : kSizes) {
    for (DType dy : {DType::f32, DType::bf16}) {
      for (DType dx : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dy) + " += " + dtype_name(dx) + " n " + std::to_string(n));
        const std::vector<float> y = rounded_to(random_floats(n, seed++), dy);
        const std::vector<float> x = rounded_to(random_floats(n, seed++, 0.01f), dx);
        std::vector<float> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = dy == DType::bf16 ? round_to_bf16(y[i] + x[i]) : y[i] + x[i];
        Tensor d_y = device_tensor(y, {n}, dy);
        cuda::add_inplace(d_y, device_tensor(x, {n}, dx), nullptr);
        EXPECT_TRUE(same_bits(host_floats(d_y), want));
      }
    }
  }
}

TEST(ElementwiseCuda, CopyIsExact) {
  ECHO_REQUIRE_DEVICE();
  for (int64_t n : kSizes) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32}) {
      SCOPED_TRACE(dtype_name(dtype) + " n " + std::to_string(n));
      std::vector<uint8_t> bytes(n * dtype_size(dtype));
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
      Tensor host = Tensor::empty({n}, dtype);
      std::memcpy(host.raw(), bytes.data(), bytes.size());
      Tensor d_x = host.to(Device::cuda);
      Tensor d_y = Tensor::empty({n}, dtype, Device::cuda);
      cuda::copy(d_y, d_x, nullptr);
      EXPECT_EQ(element_bits(d_y), element_bits(host));
    }
  }
}

TEST(ElementwiseCuda, CastRoundsOnce) {
  ECHO_REQUIRE_DEVICE();
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
  uint32_t seed = 800;
  for (int64_t n : kSizes) {
    // Doubles in f16's normal range with bits below float's precision, plus values where rounding
    // through float first would land on a tie and round the wrong way.
    std::vector<double> v(n);
    const std::vector<float> r = random_floats(n, seed++, 20.0f);
    for (int64_t i = 0; i < n; ++i) {
      v[i] = static_cast<double>(r[i]) * (1.0 + 1e-9 * static_cast<double>(i % 7));
      if (std::fabs(v[i]) < 1e-3) v[i] = 0.5;
    }
    v[0] = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);              // bf16: 0x3f81, not 0x3f80
    if (n > 1) v[1] = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);  // f16: 0x3c01, not 0x3c00
    for (DType dx : dtypes) {
      // Inputs exact in dx.
      const Tensor host_x = host_tensor(v, dx);
      Tensor d_x = host_x.to(Device::cuda);
      for (DType dy : dtypes) {
        SCOPED_TRACE(dtype_name(dx) + " -> " + dtype_name(dy) + " n " + std::to_string(n));
        Tensor d_y = Tensor::empty({n}, dy, Device::cuda);
        cuda::cast(d_y, d_x, nullptr);
        std::vector<uint64_t> want(n);
        for (int64_t i = 0; i < n; ++i) {
          const double x = value_of(host_x, i);
          if (dy == DType::f64) {
            std::memcpy(&want[i], &x, sizeof x);
          } else if (dy == DType::f32) {
            want[i] = float_bits(static_cast<float>(x));
          } else {
            want[i] = nearest_bits(x, dy);
          }
        }
        EXPECT_EQ(element_bits(d_y), want);
      }
    }
  }
}

TEST(ElementwiseCuda, CastMatchesHostConversionOnSpecialValues) {
  ECHO_REQUIRE_DEVICE();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {0.0f, -0.0f, inf, -inf, std::nanf(""), 70000.0f, 1e-30f, -3.4e38f, 1e-7f};
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor host = Tensor::from_vector(x, {n});
  for (DType dy : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dy));
    Tensor d_y = Tensor::empty({n}, dy, Device::cuda);
    cuda::cast(d_y, host.to(Device::cuda), nullptr);
    EXPECT_EQ(element_bits(d_y), element_bits(host.to(dy)));  // the CPU backend's cast
    Tensor d_back = Tensor::empty({n}, DType::f32, Device::cuda);
    cuda::cast(d_back, d_y, nullptr);
    EXPECT_EQ(element_bits(d_back), element_bits(host.to(dy).to(DType::f32)));
  }
}

TEST(ElementwiseCuda, FillRoundsOnce) {
  ECHO_REQUIRE_DEVICE();
  const double tie_bf16 = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  const double tie_f16 = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{70001}}) {
    for (double value : {0.1, -3.75, tie_bf16, tie_f16}) {
      for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
        SCOPED_TRACE(dtype_name(dtype) + " value " + std::to_string(value) + " n " + std::to_string(n));
        uint64_t want = 0;
        if (dtype == DType::f32) {
          want = float_bits(static_cast<float>(value));
        } else if (dtype == DType::f64) {
          std::memcpy(&want, &value, sizeof value);
        } else {
          want = nearest_bits(value, dtype);
        }
        Tensor d_y = Tensor::empty({n}, dtype, Device::cuda);
        cuda::fill(d_y, value, nullptr);
        EXPECT_EQ(element_bits(d_y), std::vector<uint64_t>(n, want));
      }
    }
  }
  // The ties themselves, by hand.
  EXPECT_EQ(nearest_bits(tie_bf16, DType::bf16), 0x3f81u);
  EXPECT_EQ(nearest_bits(tie_f16, DType::f16), 0x3c01u);
}

TEST(ElementwiseCuda, ScaleMatchesHostBitForBit) {
  ECHO_REQUIRE_DEVICE();
  const double factor = 0.3;  // not exact in float: f32 / bf16 multiply by float(0.3), as the CPU backend
  const float f = static_cast<float>(factor);
  uint32_t seed = 900;
  for (int64_t n : kSizes) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
      SCOPED_TRACE(dtype_name(dtype) + " n " + std::to_string(n));
      const std::vector<float> y = rounded_to(random_floats(n, seed++), dtype);
      std::vector<double> yd = to_double(y);
      if (dtype == DType::f64)
        for (int64_t i = 0; i < n; ++i) yd[i] *= 1.0 + 1e-12 * static_cast<double>(i % 5);  // use double's bits
      Tensor d_y = host_tensor(yd, dtype).to(Device::cuda);
      cuda::scale(d_y, factor, nullptr);
      std::vector<uint64_t> want(n);
      for (int64_t i = 0; i < n; ++i) {
        if (dtype == DType::f64) {
          const double r = yd[i] * factor;
          std::memcpy(&want[i], &r, sizeof r);
        } else if (dtype == DType::f32) {
          want[i] = float_bits(y[i] * f);
        } else {
          want[i] = float_to_bf16_bits(y[i] * f);
        }
      }
      EXPECT_EQ(element_bits(d_y), want);
    }
  }
}

// The argument checks run before any CUDA call, so this part needs no device.
TEST(ElementwiseCuda, OpsRefuseHostTensors) {
  Tensor y = Tensor::zeros({4}, DType::f32), x = Tensor::zeros({4}, DType::f32);
  Tensor acc = Tensor::zeros({1}, DType::f64), pos = Tensor::zeros({4}, DType::i32);
  Tensor x3 = Tensor::zeros({4, 1, 2}, DType::f32), m = Tensor::zeros({4}, DType::f32);
  const auto refuses = [](auto&& call, const char* op) {
    try {
      call();
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(op), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("cpu"), std::string::npos) << e.message();
      return;
    }
    ADD_FAILURE() << op << " accepted host tensors";
  };
  refuses([&] { cuda::add_inplace(y, x, nullptr); }, "add_inplace");
  refuses([&] { cuda::copy(y, x, nullptr); }, "copy");
  refuses([&] { cuda::cast(y, x, nullptr); }, "cast");
  refuses([&] { cuda::fill(y, 1.0, nullptr); }, "fill");
  refuses([&] { cuda::scale(y, 2.0, nullptr); }, "scale");
  refuses([&] { cuda::swiglu_forward(y, x, m, nullptr); }, "swiglu_forward");
  refuses([&] { cuda::rope_forward(x3, pos, 1e6, nullptr); }, "rope_forward");
  refuses([&] { cuda::adamw_step(y, x, m, m, 1.0f, backend::AdamWScalars{}, nullptr); }, "adamw_step");
  refuses([&] { cuda::accumulate_sum_squares(x, acc, nullptr); }, "accumulate_sum_squares");
  refuses([&] { cuda::accumulate_max_abs(x, acc, nullptr); }, "accumulate_max_abs");
}

}  // namespace
}  // namespace echo
