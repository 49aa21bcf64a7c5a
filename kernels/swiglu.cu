// CUDA SwiGLU activation of the MLP, out = silu(gate) * up, and its backward (kernels/ops.cuh;
// CPU reference src/backend/cpu/swiglu.cpp). One thread per element (grid-stride), fp32 math in
// the CPU's order, results rounded once to the activation dtype.
#include "device_util.cuh"
#include "launch.cuh"
#include "ops.cuh"

namespace echo::cuda {

namespace {

using namespace detail;

template <class T>
__global__ void swiglu_forward_kernel(const T* gate, const T* up, int64_t n, T* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = load(gate + i);
    store(out + i, g / (1.0f + expf(-g)) * load(up + i));
  }
}

// silu(g) = g s, s = sigmoid(g);  silu'(g) = s (1 + g (1 - s)).
// NOTE: no __restrict__: an output may alias an input (each element is read before it is written).
template <class T>
__global__ void swiglu_backward_kernel(const T* dout, const T* gate, const T* up, int64_t n, T* dgate, T* dup) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = load(gate + i);
    const float u = load(up + i);
    const float dy = load(dout + i);
    const float s = 1.0f / (1.0f + expf(-g));
    store(dgate + i, dy * u * (s * (1.0f + g * (1.0f - s))));
    store(dup + i, dy * g * s);
  }
}

void check_like(const char* op, const char* name, const Tensor& t, const Tensor& ref) {
  check_tensor(op, name, t, {DType::f32, DType::bf16});
  check_same_dtype(op, name, t, ref, "gate");
  check_numel(op, name, t, ref.numel());
}

}  // namespace

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out, cudaStream_t stream) {
  const char* op = "swiglu_forward";
  check_tensor(op, "gate", gate, {DType::f32, DType::bf16});
  check_like(op, "up", up, gate);
  check_like(op, "out", out, gate);
  const int64_t n = gate.numel();
  if (n == 0) return;
  dispatch_activation(gate.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream, swiglu_forward_kernel<T>)
    (ptr<T>(gate), ptr<T>(up), n, ptr<T>(out));
  });
  CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup,
                     cudaStream_t stream) {
  const char* op = "swiglu_backward";
  check_tensor(op, "gate", gate, {DType::f32, DType::bf16});
  check_like(op, "dout", dout, gate);
  check_like(op, "up", up, gate);
  check_like(op, "dgate", dgate, gate);
  check_like(op, "dup", dup, gate);
  const int64_t n = gate.numel();
  if (n == 0) return;
  dispatch_activation(gate.dtype(), [&](auto type) {
    using T = typename decltype(type)::type;
    ECHO_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream, swiglu_backward_kernel<T>)
    (ptr<T>(dout), ptr<T>(gate), ptr<T>(up), n, ptr<T>(dgate), ptr<T>(dup));
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
