// The same Qwen3Model code on the CPU backend (fp32, the reference) and on the CUDA backend
// (bf16 activations and weight copies, fp32 master weights, gradients and AdamW): identical
// initial weights, and loss, gradients and a few optimizer steps within bf16 noise
// (docs/design.md §15). Skips without a CUDA device; fails instead under ECHO_REQUIRE_GPU=1.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../support/gpu_test.h"
#include "backend/backend.h"
#include "model_test_util.h"
#include "train/adamw.h"

namespace echo::model {
namespace {

// max |a - b| / max |b|: the error relative to the tensor's scale.
double scaled_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

config::ModelConfig parity_config() {
  config::ModelConfig c = testing::tiny_config(2, 4, 2);
  c.vocab_size = 61;  // not a multiple of anything the kernels tile by
  c.hidden = 48;
  c.ffn = 80;
  c.head_dim = 16;
  c.init_std = 0.1;
  return c;
}

TEST(Qwen3BackendParity, CudaMatchesTheCpuReferenceWithinBf16Noise) {
  ECHO_REQUIRE_DEVICE();
  const ModelShape shape = make_model_shape(parity_config(), 1, 0);
  ExactTpOps<float> solo;
  auto cuda = backend::make_backend(Device::cuda);
  Qwen3Model<float> ref(shape, solo), gpu(shape, solo, cuda.get());
  ref.init_weights(17);
  gpu.init_weights(17);
  for (size_t i = 0; i < ref.params().size(); ++i)
    ASSERT_EQ(gpu.params()[i].value_vector(), ref.params()[i].value_vector()) << "master weights start identical";

  const auto batch = testing::random_batch(3, 19, shape.vocab, 5);
  ref.params().zero_grads();
  gpu.params().zero_grads();
  const double loss_ref = ref.forward_backward(batch.view());
  const double loss_gpu = gpu.forward_backward(batch.view());
  EXPECT_NEAR(loss_gpu, loss_ref, 1e-2 * loss_ref);
  EXPECT_NE(loss_gpu, loss_ref) << "bf16 activations cannot give fp32's loss to the last bit";
  for (size_t i = 0; i < ref.params().size(); ++i)
    EXPECT_LT(scaled_error(gpu.params()[i].grad_vector(), ref.params()[i].grad_vector()), 5e-2)
        << ref.params()[i].spec->name;

  // A few AdamW steps on both: the losses stay together.
  train::AdamW opt_ref(ref.params()), opt_gpu(gpu.params());
  config::OptimConfig ocfg;
  for (int step = 0; step < 5; ++step) {
    opt_ref.step(ref.params(), 1e-2, ocfg);
    opt_gpu.step(gpu.params(), 1e-2, ocfg);
    const auto b = testing::random_batch(3, 19, shape.vocab, 100 + step);
    ref.params().zero_grads();
    gpu.params().zero_grads();
    const double lr = ref.forward_backward(b.view()), lg = gpu.forward_backward(b.view());
    EXPECT_NEAR(lg, lr, 2e-2 * lr) << "step " << step;
  }
}

TEST(Qwen3BackendParity, ActivationsOfTheCudaBackendAreBf16) {
  ECHO_REQUIRE_DEVICE();
  auto cuda = backend::make_backend(Device::cuda);
  EXPECT_EQ(cuda->activation_dtype(DType::f32), DType::bf16);
  EXPECT_EQ(cuda->statistic_dtype(DType::f32), DType::f32);
  const ModelShape shape = make_model_shape(parity_config(), 1, 0);
  ExactTpOps<float> solo;
  Qwen3Model<float> gpu(shape, solo, cuda.get());
  EXPECT_EQ(gpu.params().compute(0).dtype(), DType::bf16);
  EXPECT_EQ(gpu.params().value(0).dtype(), DType::f32);
  EXPECT_TRUE(gpu.params().value(0).is_cuda());
}

}  // namespace
}  // namespace echo::model
