// echo::Tensor: shapes, views sharing storage, slices, dtype checks, conversions, copies, and
// the cuda device tag (allocation and copies on a GPU, a clear error without one).
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <numeric>

#include "../support/gpu_test.h"
#include "core/half.h"

namespace echo {
namespace {

std::vector<float> iota_values(int64_t n, float start = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(DTypeTest, SizesNamesAndParsing) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::i8), 1u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i8, DType::i32, DType::u8}) {
    EXPECT_EQ(parse_dtype(to_string(d)), d);
  }
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(to_string(Device::cuda), "cuda");
  EXPECT_EQ(parse_device("cpu"), Device::cpu);
  EXPECT_EQ(fmt::format("{} on {}", DType::f16, Device::cpu), "f16 on cpu");
  EXPECT_EQ(parse_dtype("float64"), DType::f64);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_THROW(parse_dtype("float128"), Error);
  EXPECT_THROW(parse_device("tpu"), Error);
}

TEST(TensorTest, ShapesAndSizes) {
  const Tensor t = Tensor::empty({2, 3, 4}, DType::bf16);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(t.dim(0), 2);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_EQ(t.device(), Device::cpu);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.describe(), "bf16 (2, 3, 4) cpu");
  EXPECT_THROW(t.dim(3), Error);
  EXPECT_THROW(t.dim(-4), Error);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);

  const Tensor scalar = Tensor::zeros({}, DType::f32);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.data<float>()[0], 0.0f);
  const Tensor none = Tensor::empty({0, 5}, DType::i32);
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.nbytes(), 0u);
  EXPECT_THROW(Tensor::empty({2, -1}, DType::f32), Error);
  EXPECT_FALSE(Tensor().defined());
}

TEST(TensorTest, ZerosAreZero) {
  const Tensor t = Tensor::zeros({3, 5}, DType::i32);
  for (int32_t v : t.to_vector<int32_t>()) EXPECT_EQ(v, 0);
}

TEST(TensorTest, DataChecksTheElementType) {
  Tensor f = Tensor::zeros({4}, DType::f32);
  Tensor b = Tensor::zeros({4}, DType::bf16);
  Tensor h = Tensor::zeros({4}, DType::f16);
  Tensor q = Tensor::zeros({4}, DType::i8);
  Tensor i = Tensor::zeros({4}, DType::i32);
  Tensor u = Tensor::zeros({4}, DType::u8);
  EXPECT_NO_THROW(f.data<float>());
  EXPECT_NO_THROW(b.data<uint16_t>());
  EXPECT_NO_THROW(h.data<uint16_t>());
  EXPECT_NO_THROW(q.data<int8_t>());
  EXPECT_NO_THROW(i.data<int32_t>());
  EXPECT_NO_THROW(u.data<uint8_t>());
  EXPECT_THROW(f.data<uint16_t>(), Error);
  EXPECT_THROW(b.data<float>(), Error);
  EXPECT_THROW(q.data<uint8_t>(), Error);
  EXPECT_THROW(u.data<int8_t>(), Error);
  EXPECT_THROW(i.data<float>(), Error);
  const Tensor& cf = f;
  EXPECT_THROW(cf.data<int32_t>(), Error);
  try {
    b.data<float>();
    FAIL() << "expected echo::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("data<float>()"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("bf16"), std::string::npos) << e.message();
  }
}

TEST(TensorTest, ViewsShareStorage) {
  Tensor t = Tensor::from_vector(iota_values(12), {3, 4});  // (rows, cols)
  Tensor v = t.view({2, 6});
  Tensor w = t.view({-1, 3});
  Tensor flat = t.flatten();
  EXPECT_EQ(w.shape(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(flat.shape(), (std::vector<int64_t>{12}));
  EXPECT_TRUE(v.shares_storage(t));
  EXPECT_TRUE(flat.shares_storage(t));
  EXPECT_EQ(t.storage_use_count(), 4);
  EXPECT_EQ(v.raw(), t.raw());
  v.data<float>()[7] = 100.0f;
  EXPECT_EQ(t.data<float>()[7], 100.0f);
  EXPECT_EQ(flat.data<float>()[7], 100.0f);
  EXPECT_THROW(t.view({5, 3}), Error);
  EXPECT_THROW(t.view({-1, 5}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
  EXPECT_FALSE(t.shares_storage(t.clone()));
}

TEST(TensorTest, LeadingSliceIsContiguousAndOffset) {
  Tensor t = Tensor::from_vector(iota_values(24), {4, 6});  // (rows, cols)
  Tensor rows = t.slice(0, 1, 3);                           // (2, 6)
  EXPECT_EQ(rows.shape(), (std::vector<int64_t>{2, 6}));
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.storage_offset(), 6);
  EXPECT_TRUE(rows.shares_storage(t));
  EXPECT_EQ(rows.data<float>()[0], 6.0f);
  EXPECT_EQ(rows.to_vector<float>(), iota_values(12, 6.0f));
  EXPECT_EQ(rows.flatten().numel(), 12);
  rows.data<float>()[1] = -1.0f;
  EXPECT_EQ(t.data<float>()[7], -1.0f);
  // A slice of a slice accumulates the offset.
  EXPECT_EQ(rows.slice(0, 1, 2).storage_offset(), 12);
  EXPECT_EQ(t.slice(0, 2, 2).numel(), 0);
  EXPECT_THROW(t.slice(0, 3, 5), Error);
  EXPECT_THROW(t.slice(0, 2, 1), Error);
  EXPECT_THROW(t.slice(2, 0, 1), Error);
}

TEST(TensorTest, ColumnSliceIsStrided) {
  Tensor t = Tensor::from_vector(iota_values(24), {4, 6});
  Tensor cols = t.slice(1, 2, 5);  // (4, 3), rows 6 apart
  EXPECT_EQ(cols.shape(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(cols.strides(), (std::vector<int64_t>{6, 1}));
  EXPECT_EQ(cols.storage_offset(), 2);
  EXPECT_FALSE(cols.is_contiguous());
  EXPECT_EQ(cols.describe(), "f32 (4, 3) cpu strided");
  EXPECT_THROW(cols.view({12}), Error);
  EXPECT_THROW(cols.flatten(), Error);
  EXPECT_EQ(cols.to_vector<float>(), (std::vector<float>{2, 3, 4, 8, 9, 10, 14, 15, 16, 20, 21, 22}));
  const Tensor c = cols.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage(t));
  EXPECT_TRUE(t.contiguous().shares_storage(t));
  // A single column of a single row is trivially contiguous.
  EXPECT_TRUE(t.slice(0, 1, 2).slice(1, 3, 4).is_contiguous());
}

TEST(TensorTest, CopyFromHandlesStrides) {
  Tensor t = Tensor::zeros({4, 6}, DType::f32);
  const Tensor src = Tensor::from_vector(iota_values(8, 1.0f), {4, 2});
  Tensor cols = t.slice(1, 1, 3);
  cols.copy_from(src);
  const std::vector<float> got = t.to_vector<float>();
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 6; ++c) {
      const float want = (c == 1 || c == 2) ? static_cast<float>(1 + r * 2 + (c - 1)) : 0.0f;
      EXPECT_EQ(got[r * 6 + c], want) << r << "," << c;
    }
  }
  // Strided to strided, 3-D.
  Tensor a = Tensor::from_vector(iota_values(60), {3, 4, 5});
  Tensor b = Tensor::zeros({3, 4, 5}, DType::f32);
  b.slice(1, 1, 3).slice(2, 0, 4).copy_from(a.slice(1, 0, 2).slice(2, 1, 5));
  const std::vector<float> bv = b.to_vector<float>();
  for (int i = 0; i < 3; ++i)
    for (int j = 1; j < 3; ++j)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(bv[i * 20 + j * 5 + k], static_cast<float>(i * 20 + (j - 1) * 5 + k + 1));
  EXPECT_EQ(bv[0], 0.0f);
  EXPECT_EQ(bv[4 + 5], 0.0f);  // column 4 of row 1 was outside the slice

  // Shape and dtype mismatches name both tensors.
  try {
    t.copy_from(src);
    FAIL() << "expected echo::Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("(4, 6)"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("(4, 2)"), std::string::npos) << e.message();
  }
  EXPECT_THROW(Tensor::zeros({4, 2}, DType::bf16).copy_from(src), Error);
}

TEST(TensorTest, FillZeroOnStridedView) {
  Tensor t = Tensor::from_vector(iota_values(6, 1.0f), {2, 3});
  t.slice(1, 1, 2).fill_zero();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 0, 3, 4, 0, 6}));
}

TEST(TensorTest, FloatConversions) {
  const std::vector<float> values = {0.0f,     -0.0f,    1.0f,  -2.5f,  1.0f + 1.0f / 256.0f,
                                     65504.0f, 70000.0f, 1e-8f, 3.0e38f};
  const Tensor f = Tensor::from_vector(values, {3, 3});
  const Tensor b = f.to(DType::bf16);
  const Tensor h = f.to(DType::f16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(h.shape(), f.shape());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(b.data<uint16_t>()[i], float_to_bf16_bits(values[i])) << i;
    EXPECT_EQ(h.data<uint16_t>()[i], float_to_half_bits(values[i])) << i;
  }
  const std::vector<float> back_b = b.to_f32().to_vector<float>();
  const std::vector<float> back_h = h.to_f32().to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(float_bits(back_b[i]), float_bits(round_to_bf16(values[i]))) << i;
    EXPECT_EQ(float_bits(back_h[i]), float_bits(round_to_half(values[i]))) << i;
  }
  EXPECT_TRUE(std::isinf(back_h[6]));  // 70000 overflows fp16
  EXPECT_EQ(back_b[4], 1.0f);          // 1 + 2^-8 is a bf16 tie, rounds to even
  // bf16 <-> f16 goes through the exact f32 value and rounds once.
  const Tensor hb = b.to(DType::f16);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(hb.data<uint16_t>()[i], float_to_half_bits(bf16_bits_to_float(b.data<uint16_t>()[i])));
  }
  // Same dtype shares; a strided source converts in row-major order.
  EXPECT_TRUE(f.to(DType::f32).shares_storage(f));
  const Tensor col = f.slice(1, 1, 2).to(DType::bf16);
  EXPECT_EQ(col.shape(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(col.data<uint16_t>()[1], float_to_bf16_bits(values[4]));
}

TEST(TensorTest, IntegerConversionsAndRejections) {
  const Tensor q = Tensor::from_vector(std::vector<int8_t>{-128, -1, 0, 127}, {4});
  EXPECT_EQ(q.to_f32().to_vector<float>(), (std::vector<float>{-128, -1, 0, 127}));
  const Tensor u = Tensor::from_vector(std::vector<uint8_t>{0, 255}, {2});
  EXPECT_EQ(u.to_f32().to_vector<float>(), (std::vector<float>{0, 255}));
  const Tensor i = Tensor::from_vector(std::vector<int32_t>{-7, 1 << 24}, {2});
  EXPECT_EQ(i.to_f32().to_vector<float>(), (std::vector<float>{-7, 16777216.0f}));
  EXPECT_THROW(Tensor::zeros({2}, DType::f32).to(DType::i8), Error);
  EXPECT_THROW(q.to(DType::bf16), Error);
  EXPECT_THROW(Tensor::from_vector(iota_values(5), {2, 3}), Error);
  EXPECT_THROW(Tensor::from_vector(std::vector<uint16_t>{1, 2}, {2}, DType::f32), Error);
  EXPECT_NO_THROW(Tensor::from_vector(std::vector<uint16_t>{1, 2}, {2}, DType::f16));
}

TEST(TensorTest, CloneIsDeep) {
  Tensor t = Tensor::from_vector(iota_values(6), {2, 3});
  Tensor c = t.clone();
  c.data<float>()[0] = 42.0f;
  EXPECT_EQ(t.data<float>()[0], 0.0f);
  EXPECT_EQ(c.shape(), t.shape());
  EXPECT_EQ(t.slice(1, 0, 2).clone().to_vector<float>(), (std::vector<float>{0, 1, 3, 4}));
}

TEST(TensorTest, FromBlobRunsTheDeleterOnce) {
  std::vector<int32_t> buffer = {1, 2, 3, 4, 5, 6};
  int deletions = 0;
  {
    Tensor t = Tensor::from_blob(buffer.data(), {2, 3}, DType::i32, Device::cpu, [&](void*) { ++deletions; });
    Tensor v = t.slice(0, 1, 2);
    t = Tensor();
    EXPECT_EQ(deletions, 0);
    EXPECT_EQ(v.to_vector<int32_t>(), (std::vector<int32_t>{4, 5, 6}));
  }
  EXPECT_EQ(deletions, 1);
  EXPECT_THROW(Tensor::from_blob(nullptr, {2}, DType::f32), Error);
}

TEST(TensorCudaTest, DeviceAllocationAndCopies) {
  if (cuda_device_count() == 0) {
    // Without a GPU (or without the CUDA backend) a device tensor is a clear error, not a crash.
    try {
      Tensor::empty({16}, DType::f32, Device::cuda);
      FAIL() << "expected echo::Error";
    } catch (const Error& e) {
      const std::string m = e.message();
      EXPECT_TRUE(m.find("cudaMalloc") != std::string::npos || m.find("no CUDA backend") != std::string::npos) << m;
    }
    EXPECT_THROW(Tensor::zeros({0}, DType::f32, Device::cuda).to(DType::bf16), Error);  // conversions are host-only
  }
  ECHO_REQUIRE_DEVICE();  // device copies below need a GPU
  const Tensor host = Tensor::from_vector(iota_values(24, 1.0f), {4, 6});
  Tensor dev = host.to(Device::cuda);
  EXPECT_TRUE(dev.is_cuda());
  EXPECT_NE(dev.raw(), nullptr);
  EXPECT_THROW(dev.to_vector<float>(), Error);
  EXPECT_THROW(dev.to(DType::bf16), Error);
  EXPECT_EQ(dev.to(Device::cpu).to_vector<float>(), host.to_vector<float>());

  // device -> device, with a leading slice.
  Tensor dev2 = Tensor::zeros({2, 6}, DType::f32, Device::cuda);
  dev2.copy_from(dev.slice(0, 2, 4));
  EXPECT_EQ(dev2.to(Device::cpu).to_vector<float>(), iota_values(12, 13.0f));

  // Pitched copies: a column slice on the device to a contiguous host tensor and back.
  Tensor cols = Tensor::empty({4, 3}, DType::f32);
  cols.copy_from(dev.slice(1, 2, 5));
  EXPECT_EQ(cols.to_vector<float>(), host.slice(1, 2, 5).to_vector<float>());
  Tensor zeros = Tensor::zeros({4, 6}, DType::f32, Device::cuda);
  zeros.slice(1, 0, 3).copy_from(cols);
  const std::vector<float> z = zeros.to(Device::cpu).to_vector<float>();
  EXPECT_EQ(z[0], 3.0f);
  EXPECT_EQ(z[3], 0.0f);
  EXPECT_EQ(z[6 + 2], 11.0f);

  // A 3-D strided device copy that is not 2-D pitched is refused with a clear message.
  Tensor d3 = Tensor::zeros({2, 3, 4}, DType::f32, Device::cuda);
  EXPECT_THROW(d3.slice(1, 0, 2).slice(2, 0, 2).copy_from(Tensor::zeros({2, 2, 2}, DType::f32)), Error);

  Tensor z16 = Tensor::zeros({1000}, DType::bf16, Device::cuda);
  for (uint16_t v : z16.to(Device::cpu).to_vector<uint16_t>()) ASSERT_EQ(v, 0u);
}

}  // namespace
}  // namespace echo
