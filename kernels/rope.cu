// CUDA rotary position embedding, non-interleaved rotate-half (Hugging Face Qwen3), forward and
// its transpose (kernels/ops.cuh; CPU reference src/backend/cpu/rope.cpp, docs/design.md §5).
//
// Design: one thread per (token, i < head_dim / 2) computes the angle pos * base^(-2i/d), its
// cos and sin in double with no cache (any position works, as on the CPU), then rotates that pair
// in every head of the token; consecutive threads take consecutive i, so the loads coalesce.
#include "device_util.cuh"
#include "launch.cuh"
#include "ops.cuh"

namespace echo::cuda {

namespace {

using namespace detail;

// sign = +1: rotation by +theta; sign = -1: its transpose (rotation by -theta).
template <class T>
__global__ void rope_kernel(T* __restrict__ x, const int32_t* __restrict__ positions, int64_t tokens, int64_t heads,
                            int64_t head_dim, double base, double sign) {
  const int64_t half = head_dim / 2;
  const int64_t pairs = tokens * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < pairs; k += stride) {
    const int64_t t = k / half;
    const int64_t i = k - t * half;
    const double inv_freq = pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double theta = static_cast<double>(positions[t]) * inv_freq;
    double sin_t, cos_t;
    sincos(theta, &sin_t, &cos_t);
    sin_t *= sign;
    T* xt = x + t * heads * head_dim + i;
    for (int64_t h = 0; h < heads; ++h) {
      T* xh = xt + h * head_dim;
      const double a = static_cast<double>(load(xh));
      const double b = static_cast<double>(load(xh + half));
      store_double(xh, a * cos_t - b * sin_t);
      store_double(xh + half, b * cos_t + a * sin_t);
    }
  }
}

void rope_rotate(const char* op, const char* x_name, Tensor& x, const Tensor& positions, double base, double sign,
                 cudaStream_t stream) {
  check_tensor(op, x_name, x, {DType::f32, DType::bf16});
  ECHO_CHECK(x.ndim() == 3, "cuda::{}: {} must be (tokens, heads, head_dim), got {}", op, x_name, x.describe());
  const int64_t tokens = x.dim(0), heads = x.dim(1), head_dim = x.dim(2);
  ECHO_CHECK(head_dim > 0 && head_dim % 2 == 0, "cuda::{}: head_dim of {} must be positive and even", op, x.describe());
  check_tensor(op, "positions", positions, {DType::i32});
  check_numel(op, "positions", positions, tokens);
  ECHO_CHECK(base > 0.0, "cuda::{}: base {} must be positive", op, base);
  if (tokens == 0 || heads == 0) return;
  const unsigned blocks = blocks_for(tokens * (head_dim / 2), kThreads);
  dispatch_activation(x.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(blocks, kThreads, 0, stream, rope_kernel<T>)
    (ptr<T>(x), ptr<int32_t>(positions), tokens, heads, head_dim, base, sign);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rope_forward(Tensor& x, const Tensor& positions, double base, cudaStream_t stream) {
  rope_rotate("rope_forward", "x", x, positions, base, 1.0, stream);
}

// The rotation is orthogonal, so its transpose is the rotation by -theta.
void rope_backward(Tensor& dx, const Tensor& positions, double base, cudaStream_t stream) {
  rope_rotate("rope_backward", "dx", dx, positions, base, -1.0, stream);
}

}  // namespace echo::cuda
