// CUDA step reductions: accumulate_sum_squares (the gradient norm) and accumulate_max_abs (the
// divergence check), into an f64 scalar on the device (kernels/ops.cuh; docs/design.md §12).
//
// Design: two passes with a fixed shape. Pass 1 runs a block count that depends only on numel
// (never on the device), each block reducing a strided share into one double partial; pass 2, one
// block, reduces the partials in a fixed order and folds them into acc. So the bits repeat on every
// run and every GPU. Squares of f32 / bf16 values are exact in double, so the sum differs from
// the CPU's element-order sum only in the rounding of the additions. A non-finite element counts
// as +inf in the max (fmax would drop a NaN), as on the CPU.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "device_util.cuh"
#include "launch.cuh"
#include "ops.cuh"

namespace echo::cuda {

namespace {

using namespace detail;

constexpr int64_t kItemsPerThread = 8;  // pass-1 block count = numel / (kThreads * this), ...
constexpr int64_t kMaxPartials = 1024;  // ... at most this many

struct SquareOp {
  using Reduce = Sum;
  static constexpr double kIdentity = 0.0;
  __device__ static double map(float v) { return static_cast<double>(v) * static_cast<double>(v); }
};

struct AbsOp {
  using Reduce = Max;
  static constexpr double kIdentity = 0.0;  // |x| >= 0, and acc starts at or above 0
  __device__ static double map(float v) { return isfinite(v) ? static_cast<double>(fabsf(v)) : INFINITY; }
};

template <class Op, class T>
__global__ void partial_kernel(const T* __restrict__ x, int64_t n, double* __restrict__ partial) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double acc = Op::kIdentity;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    acc = typename Op::Reduce{}(acc, Op::map(load(x + i)));
  acc = block_reduce(acc, typename Op::Reduce{}, Op::kIdentity);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

template <class Op>
__global__ void final_kernel(const double* __restrict__ partial, int64_t count, double* __restrict__ acc) {
  double r = Op::kIdentity;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) r = typename Op::Reduce{}(r, partial[i]);
  r = block_reduce(r, typename Op::Reduce{}, Op::kIdentity);
  if (threadIdx.x == 0) {
    if constexpr (std::is_same_v<typename Op::Reduce, Sum>) {
      *acc += r;
    } else {
      // As the CPU's finite ? std::max(acc, max) : inf: a NaN already in acc stays NaN.
      const double a = *acc;
      *acc = isinf(r) ? INFINITY : (a < r ? r : a);
    }
  }
}

template <class Op>
void reduce_into(const char* op, const Tensor& x, Tensor& acc, cudaStream_t stream) {
  check_tensor(op, "x", x, {DType::f32, DType::bf16});
  check_tensor(op, "acc", acc, {DType::f64});
  ECHO_CHECK(acc.numel() == 1, "cuda::{}: acc must be one f64 element, got {}", op, acc.describe());
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t per_block = kThreads * kItemsPerThread;
  const int64_t blocks = std::min(kMaxPartials, (n + per_block - 1) / per_block);
  Scratch partial(static_cast<size_t>(blocks) * sizeof(double), stream);
  dispatch_activation(x.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, stream, partial_kernel<Op, T>)
    (ptr<T>(x), n, partial.as<double>());
  });
  CUDA_CHECK(cudaGetLastError());
  ECHO_LAUNCH(1, kThreads, 0, stream, final_kernel<Op>)(partial.as<double>(), blocks, ptr<double>(acc));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void accumulate_sum_squares(const Tensor& x, Tensor& acc, cudaStream_t stream) {
  reduce_into<SquareOp>("accumulate_sum_squares", x, acc, stream);
}

void accumulate_max_abs(const Tensor& x, Tensor& acc, cudaStream_t stream) {
  reduce_into<AbsOp>("accumulate_max_abs", x, acc, stream);
}

}  // namespace echo::cuda
