// cuda::embedding_forward / embedding_backward against the CPU reference (cpu::embedding_*<float>
// on the same values): bit-identical, f32 and bf16, for vocab shards with tokens outside the shard,
// heavily repeated tokens (the backward must add each row's tokens in token order, as the CPU),
// hidden sizes that are not a multiple of 32, and an accumulator that already holds values.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "../support/gpu_test.h"
#include "backend/ops.h"
#include "ops.cuh"
#include "ops_cuda_test_util.h"

namespace echo {
namespace {

using namespace echo::testing;

struct Case {
  int64_t n, vocab, vocab_begin, vocab_local, hidden;
};

TEST(EmbeddingCuda, MatchesCpuBitForBit) {
  ECHO_REQUIRE_DEVICE();
  const Case cases[] = {
      {1, 10, 0, 10, 8},          {37, 50, 0, 50, 33},  {200, 100, 40, 30, 64},           {1000, 7, 2, 3, 129},
      {5000, 1000, 500, 500, 96}, {64, 100, 0, 100, 1}, {3000, 40000, 20000, 20000, 260}, {50, 100, 90, 10, 1000}};
  uint32_t seed = 400;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(dtype_name(dtype) + " n " + std::to_string(c.n) + " shard [" + std::to_string(c.vocab_begin) +
                   ", +" + std::to_string(c.vocab_local) + ") hidden " + std::to_string(c.hidden));
      std::mt19937 rng(seed++);
      std::uniform_int_distribution<int32_t> token_dist(0, static_cast<int32_t>(c.vocab - 1));
      std::vector<int32_t> tokens(c.n);
      for (int32_t& t : tokens) t = token_dist(rng);
      const std::vector<float> table = rounded_to(random_floats(c.vocab_local * c.hidden, seed++), dtype);
      const std::vector<float> dout = rounded_to(random_floats(c.n * c.hidden, seed++), dtype);
      const std::vector<float> acc0 = random_floats(c.vocab_local * c.hidden, seed++, 0.1f);

      std::vector<float> out_ref(c.n * c.hidden), acc_ref = acc0;
      cpu::embedding_forward<float>(tokens.data(), c.n, table.data(), c.vocab_begin, c.vocab_local, c.hidden,
                                    out_ref.data());
      cpu::embedding_backward<float>(tokens.data(), c.n, dout.data(), c.vocab_begin, c.vocab_local, c.hidden,
                                     acc_ref.data());

      Tensor d_tokens = device_i32(tokens, {c.n});
      Tensor d_table = device_tensor(table, {c.vocab_local, c.hidden}, dtype);
      Tensor d_out = Tensor::empty({c.n, c.hidden}, dtype, Device::cuda);
      cuda::embedding_forward(d_tokens, d_table, c.vocab_begin, d_out, nullptr);
      EXPECT_TRUE(same_bits(host_floats(d_out), out_ref));

      Tensor d_dout = device_tensor(dout, {c.n, c.hidden}, dtype);
      Tensor d_acc = device_tensor(acc0, {c.vocab_local, c.hidden}, DType::f32);
      cuda::embedding_backward(d_tokens, d_dout, c.vocab_begin, d_acc, nullptr);
      EXPECT_TRUE(same_bits(host_floats(d_acc), acc_ref));
    }
  }
}

TEST(EmbeddingCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  Tensor tokens = device_i32({1, 2, 3}, {3});
  Tensor table = device_tensor(random_floats(40, 1), {10, 4}, DType::f32);
  Tensor out_short = Tensor::empty({3, 3}, DType::f32, Device::cuda);
  Tensor out_bf16 = Tensor::empty({3, 4}, DType::bf16, Device::cuda);
  Tensor acc_bf16 = Tensor::empty({10, 4}, DType::bf16, Device::cuda);
  Tensor dout = device_tensor(random_floats(12, 2), {3, 4}, DType::f32);
  EXPECT_THROW(cuda::embedding_forward(tokens, table, 0, out_short, nullptr), Error);
  EXPECT_THROW(cuda::embedding_forward(tokens, table, 0, out_bf16, nullptr), Error);
  EXPECT_THROW(cuda::embedding_forward(tokens, table, -1, out_bf16, nullptr), Error);
  EXPECT_THROW(cuda::embedding_backward(tokens, dout, 0, acc_bf16, nullptr), Error);
  EXPECT_THROW(cuda::embedding_backward(table, dout, 0, acc_bf16, nullptr), Error);  // f32 tokens
}

}  // namespace
}  // namespace echo
