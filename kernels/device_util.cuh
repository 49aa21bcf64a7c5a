// Helpers shared by the element-wise, normalization, embedding, loss, optimizer and reduction
// kernels (kernels/ops.cuh): f32 / bf16 element loads and stores rounded like core/half.h,
// fixed-order warp and block reductions, launch sizing, stream-ordered scratch memory and the
// host-side argument checks. CUDA syntax: include it from .cu files only.
#pragma once

// clang-format off
#include "cuda_check.h"
// clang-format on

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"

namespace echo::cuda::detail {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
// Grids stay at or under 65535 blocks (legal in every dimension); the kernels loop over the rest.
constexpr int64_t kMaxBlocks = 65535;

inline unsigned blocks_for(int64_t work_items, int64_t items_per_block) {
  const int64_t blocks = (work_items + items_per_block - 1) / items_per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

// ---- Element access -----------------------------------------------------------------------------
// bf16 is read exactly and written with core/half.h's round-to-nearest-even, so a value rounds to
// the same bits here as in Tensor::to(DType::bf16) on the host (NaN included).

// Element <-> fp32 for the kernels templated on the element type (f32 or bf16): exact widening,
// round-to-nearest-even narrowing.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __ushort_as_bfloat16(float_to_bf16_bits(v));  // not __float2bfloat16_rn: NaN bits as on the host
}

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __ushort_as_bfloat16(float_to_bf16_bits(v)); }

// Stores a double rounded once to the element type (core/half.h's double_to_bf16_bits).
__device__ __forceinline__ void store_double(float* p, double v) { *p = static_cast<float>(v); }
__device__ __forceinline__ void store_double(__nv_bfloat16* p, double v) {
  *p = __ushort_as_bfloat16(double_to_bf16_bits(v));
}

// ---- Reductions ----------------------------------------------------------------------------------
// Butterfly (xor) shuffles: lane i combines op(v_i, v_j) and lane j op(v_j, v_i), the same bits
// for a commutative op, so every lane ends with the identical value; the order depends only on
// the launch shape, never on timing, so results repeat bit for bit.

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

// NaN wins from either side, so the op stays commutative (and a NaN row max poisons the loss).
struct Max {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return (a > b || a != a) ? a : b;
  }
};

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Reduces v over the block; every thread gets the result. All threads of the block must call it
// (it synchronizes). `identity` pads the missing warps of a partial last warp group.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T warp_values[kWarpSize];
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int num_warps = (static_cast<int>(blockDim.x) + kWarpSize - 1) / kWarpSize;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous call's readers are done with warp_values
  if (lane == 0) warp_values[warp] = v;
  __syncthreads();
  T r = lane < num_warps ? warp_values[lane] : identity;
  r = warp_reduce(r, op);
  return r;
}

// ---- Scratch memory --------------------------------------------------------------------------------
// Device memory ordered on the stream (cudaMallocAsync / cudaFreeAsync): the free is queued after
// the kernels that use it, so no synchronization is needed.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0) CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
  ~Scratch() {
    if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);  // NOTE: a destructor must not throw
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

// ---- Argument checks (host) ------------------------------------------------------------------------

inline std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType d : dtypes) {
    if (!s.empty()) s += " or ";
    s += to_string(d);
  }
  return s;
}

// t must be a defined, contiguous CUDA tensor of one of `dtypes`.
inline void check_tensor(std::string_view op, std::string_view name, const Tensor& t,
                         std::initializer_list<DType> dtypes) {
  ECHO_CHECK(t.defined(), "cuda::{}: {} is undefined", op, name);
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok |= t.dtype() == d;
  ECHO_CHECK(t.is_cuda() && t.is_contiguous() && dtype_ok, "cuda::{}: {} must be a contiguous cuda {} tensor, got {}",
             op, name, dtype_list(dtypes), t.describe());
}

// As the CPU backend, operands are matched by element count, so callers may pass any view shape.
inline void check_numel(std::string_view op, std::string_view name, const Tensor& t, int64_t numel) {
  ECHO_CHECK(t.numel() == numel, "cuda::{}: {} must hold {} elements, got {}", op, name, numel, t.describe());
}

inline void check_same_dtype(std::string_view op, std::string_view name, const Tensor& t, const Tensor& ref,
                             std::string_view ref_name) {
  ECHO_CHECK(t.dtype() == ref.dtype(), "cuda::{}: {} ({}) must have the dtype of {} ({})", op, name, t.describe(),
             ref_name, ref.describe());
}

// Calls f(T{}) with T = float for f32 and T = __nv_bfloat16 for bf16 (the activation dtypes).
template <class T>
struct Type {
  using type = T;
};

template <class F>
void dispatch_activation(DType dtype, F&& f) {
  if (dtype == DType::f32) {
    f(Type<float>{});
  } else {
    f(Type<__nv_bfloat16>{});
  }
}

template <class T>
T* ptr(Tensor& t) {
  return static_cast<T*>(t.raw());
}

template <class T>
const T* ptr(const Tensor& t) {
  return static_cast<const T*>(t.raw());
}

}  // namespace echo::cuda::detail
