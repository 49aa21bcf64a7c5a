// CUDA vocab-parallel embedding, forward and backward (kernels/ops.cuh; CPU reference
// src/backend/cpu/embedding.cpp, docs/design.md §3 and §5).
//
// Forward: one block per token row (grid-stride), copying the table row bit for bit or writing
// zeros for a token another shard holds.
// Backward, deterministic and bit-identical to the CPU: each token i this shard holds becomes the
// 64-bit key (local row << 32 | i); a radix sort of the keys (CUB) groups the tokens of a row in
// token order, whatever the sort's stability. One block per sorted position that starts a row's run
// then adds the run's dout rows, in token order, to the accumulator row, exactly the CPU's
// sequence of f32 additions. Tokens outside the shard sort after every held row and are skipped.
#include <bit>
#include <climits>
#include <cub/device/device_radix_sort.cuh>

#include "device_util.cuh"
#include "launch.cuh"
#include "ops.cuh"

namespace echo::cuda {

namespace {

using namespace detail;

template <class T>
__global__ void embedding_forward_kernel(const int32_t* __restrict__ tokens, int64_t n, const T* __restrict__ table,
                                         int64_t vocab_begin, int64_t vocab_local, int64_t hidden,
                                         T* __restrict__ out) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const int64_t row = static_cast<int64_t>(tokens[r]) - vocab_begin;
    const bool held = row >= 0 && row < vocab_local;
    T* dst = out + r * hidden;
    const T* src = table + (held ? row : 0) * hidden;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = held ? src[c] : T(0.0f);
  }
}

// key = (local row << 32) | token index; tokens this shard does not hold get row = vocab_local,
// which sorts after every held row.
__global__ void embedding_keys_kernel(const int32_t* __restrict__ tokens, int64_t n, int64_t vocab_begin,
                                      int64_t vocab_local, uint64_t* __restrict__ keys) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    const uint64_t r = row >= 0 && row < vocab_local ? static_cast<uint64_t>(row) : static_cast<uint64_t>(vocab_local);
    keys[i] = (r << 32) | static_cast<uint64_t>(i);
  }
}

template <class T>
__global__ void embedding_backward_kernel(const uint64_t* __restrict__ sorted, int64_t n, const T* __restrict__ dout,
                                          int64_t vocab_local, int64_t hidden, float* __restrict__ dtable_accum) {
  for (int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const uint64_t row = sorted[p] >> 32;
    // Only the first position of a held row's run does the work (a uniform branch per block).
    if (row >= static_cast<uint64_t>(vocab_local) || (p > 0 && (sorted[p - 1] >> 32) == row)) continue;
    float* dst = dtable_accum + static_cast<int64_t>(row) * hidden;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
      float acc = dst[c];
      for (int64_t q = p; q < n && (sorted[q] >> 32) == row; ++q) {
        const int64_t token = static_cast<int64_t>(sorted[q] & 0xffffffffu);
        acc += load(dout + token * hidden + c);
      }
      dst[c] = acc;
    }
  }
}

void check_tokens(const char* op, const Tensor& tokens, int64_t vocab_begin) {
  check_tensor(op, "tokens", tokens, {DType::i32});
  ECHO_CHECK(vocab_begin >= 0, "cuda::{}: vocab_begin {} < 0", op, vocab_begin);
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, int64_t vocab_begin, Tensor& out,
                       cudaStream_t stream) {
  const char* op = "embedding_forward";
  check_tokens(op, tokens, vocab_begin);
  check_tensor(op, "table", table, {DType::f32, DType::bf16});
  ECHO_CHECK(table.ndim() == 2 && table.dim(1) > 0, "cuda::{}: table must be (vocab_local, hidden), got {}", op,
             table.describe());
  const int64_t n = tokens.numel(), vocab_local = table.dim(0), hidden = table.dim(1);
  check_tensor(op, "out", out, {DType::f32, DType::bf16});
  check_same_dtype(op, "out", out, table, "table");
  check_numel(op, "out", out, n * hidden);
  if (n == 0) return;
  dispatch_activation(table.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(blocks_for(n, 1), kThreads, 0, stream, embedding_forward_kernel<T>)
    (ptr<int32_t>(tokens), n, ptr<T>(table), vocab_begin, vocab_local, hidden, ptr<T>(out));
  });
  CUDA_CHECK(cudaGetLastError());
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, int64_t vocab_begin, Tensor& dtable_accum,
                        cudaStream_t stream) {
  const char* op = "embedding_backward";
  check_tokens(op, tokens, vocab_begin);
  check_tensor(op, "dtable_accum", dtable_accum, {DType::f32});
  ECHO_CHECK(dtable_accum.ndim() == 2 && dtable_accum.dim(1) > 0,
             "cuda::{}: dtable_accum must be (vocab_local, hidden), got {}", op, dtable_accum.describe());
  const int64_t n = tokens.numel(), vocab_local = dtable_accum.dim(0), hidden = dtable_accum.dim(1);
  check_tensor(op, "dout", dout, {DType::f32, DType::bf16});
  check_numel(op, "dout", dout, n * hidden);
  // The key packs the token index in 32 bits and the row in the rest.
  ECHO_CHECK(n <= INT32_MAX && vocab_local < (int64_t{1} << 31), "cuda::{}: {} tokens or {} table rows is too many", op,
             n, vocab_local);
  if (n == 0 || vocab_local == 0) return;

  const int end_bit = 32 + static_cast<int>(std::bit_width(static_cast<uint64_t>(vocab_local)));
  const int num_items = static_cast<int>(n);
  size_t sort_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, static_cast<const uint64_t*>(nullptr),
                                            static_cast<uint64_t*>(nullptr), num_items, 0, end_bit, stream));
  Scratch keys(static_cast<size_t>(n) * sizeof(uint64_t), stream);
  Scratch sorted(static_cast<size_t>(n) * sizeof(uint64_t), stream);
  Scratch sort_temp(sort_bytes > 0 ? sort_bytes : 1, stream);  // a null pointer would mean a size query

  ECHO_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream, embedding_keys_kernel)
  (ptr<int32_t>(tokens), n, vocab_begin, vocab_local, keys.as<uint64_t>());
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cub::DeviceRadixSort::SortKeys(sort_temp.as<void>(), sort_bytes, keys.as<uint64_t>(),
                                            sorted.as<uint64_t>(), num_items, 0, end_bit, stream));
  dispatch_activation(dout.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(blocks_for(n, 1), kThreads, 0, stream, embedding_backward_kernel<T>)
    (sorted.as<uint64_t>(), n, ptr<T>(dout), vocab_local, hidden, ptr<float>(dtable_accum));
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
