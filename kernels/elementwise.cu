// CUDA elementwise ops: add_inplace, copy, cast, fill, scale (kernels/ops.cuh; CPU reference
// src/backend/cpu/elementwise.cpp). One thread per element, grid-stride. Conversions round once,
// to nearest even, through core/half.h, so a cast gives the bits Tensor::to gives on the host.
#include <cstring>
#include <type_traits>

#include "device_util.cuh"
#include "launch.cuh"
#include "ops.cuh"

namespace echo::cuda {

namespace {

using namespace detail;

// The storage type of each floating dtype (bf16 and f16 as bit patterns).
template <DType D>
struct Elem;
template <>
struct Elem<DType::f32> {
  using type = float;
};
template <>
struct Elem<DType::bf16> {
  using type = uint16_t;
};
template <>
struct Elem<DType::f16> {
  using type = uint16_t;
};
template <>
struct Elem<DType::f64> {
  using type = double;
};
template <DType D>
using elem_t = typename Elem<D>::type;

// f32, bf16 and f16 values are all exact in float.
template <DType D>
__device__ __forceinline__ float get_float(const elem_t<D>* p) {
  static_assert(D != DType::f64, "f64 goes through get_double");
  if constexpr (D == DType::f32) {
    return *p;
  } else if constexpr (D == DType::bf16) {
    return bf16_bits_to_float(*p);
  } else {
    return half_bits_to_float(*p);
  }
}

template <DType D>
__device__ __forceinline__ void put_float(elem_t<D>* p, float v) {
  static_assert(D != DType::f64, "f64 goes through put_double");
  if constexpr (D == DType::f32) {
    *p = v;
  } else if constexpr (D == DType::bf16) {
    *p = float_to_bf16_bits(v);
  } else {
    *p = float_to_half_bits(v);
  }
}

template <DType D>
__device__ __forceinline__ double get_double(const elem_t<D>* p) {
  if constexpr (D == DType::f64) {
    return *p;
  } else {
    return static_cast<double>(get_float<D>(p));
  }
}

// Rounded once: to bf16 / f16 through float rounded to odd (core/half.h).
template <DType D>
__device__ __forceinline__ void put_double(elem_t<D>* p, double v) {
  if constexpr (D == DType::f64) {
    *p = v;
  } else if constexpr (D == DType::f32) {
    *p = static_cast<float>(v);
  } else {
    put_float<D>(p, double_to_float_odd(v));
  }
}

template <DType DY, DType DX>
__global__ void add_kernel(elem_t<DY>* y, const elem_t<DX>* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    put_float<DY>(y + i, get_float<DY>(y + i) + get_float<DX>(x + i));
}

template <DType DY, DType DX>
__global__ void cast_kernel(elem_t<DY>* __restrict__ y, const elem_t<DX>* __restrict__ x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (DX != DType::f64 && DY != DType::f64) {
      put_float<DY>(y + i, get_float<DX>(x + i));
    } else {
      put_double<DY>(y + i, get_double<DX>(x + i));
    }
  }
}

template <class U>
__global__ void fill_kernel(U* y, int64_t n, U pattern) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = pattern;
}

// f64 multiplies in double; the others by the factor rounded to float, in float, rounded once.
template <DType D>
__global__ void scale_kernel(elem_t<D>* y, int64_t n, double factor) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const float factor_f = static_cast<float>(factor);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (D == DType::f64) {
      y[i] *= factor;
    } else {
      put_float<D>(y + i, get_float<D>(y + i) * factor_f);
    }
  }
}

// Calls f(std::integral_constant<DType, D>{}) for the floating dtype d.
template <class F>
void dispatch_float(DType d, F&& f) {
  switch (d) {
    case DType::f32:
      f(std::integral_constant<DType, DType::f32>{});
      return;
    case DType::bf16:
      f(std::integral_constant<DType, DType::bf16>{});
      return;
    case DType::f16:
      f(std::integral_constant<DType, DType::f16>{});
      return;
    case DType::f64:
      f(std::integral_constant<DType, DType::f64>{});
      return;
    default:
      ECHO_FAIL("cuda elementwise: {} is not a floating dtype", d);
  }
}

template <DType D>
elem_t<D>* typed(Tensor& t) {
  return static_cast<elem_t<D>*>(t.raw());
}

template <DType D>
const elem_t<D>* typed(const Tensor& t) {
  return static_cast<const elem_t<D>*>(t.raw());
}

void check_pair(const char* op, const Tensor& y, const Tensor& x, std::initializer_list<DType> dtypes) {
  check_tensor(op, "y", y, dtypes);
  check_tensor(op, "x", x, dtypes);
  check_numel(op, "x", x, y.numel());
}

}  // namespace

void add_inplace(Tensor& y, const Tensor& x, cudaStream_t stream) {
  check_pair("add_inplace", y, x, {DType::f32, DType::bf16});
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_float(y.dtype(), [&](auto dy) {
    dispatch_float(x.dtype(), [&](auto dx) {
      constexpr DType DY = decltype(dy)::value, DX = decltype(dx)::value;
      if constexpr (DY != DType::f64 && DY != DType::f16 && DX != DType::f64 && DX != DType::f16) {
        ECHO_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream, add_kernel<DY, DX>)(typed<DY>(y), typed<DX>(x), n);
      }
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void copy(Tensor& y, const Tensor& x, cudaStream_t stream) {
  const auto check = [](const char* name, const Tensor& t) {
    ECHO_CHECK(t.defined(), "cuda::copy: {} is undefined", name);
    ECHO_CHECK(t.is_cuda() && t.is_contiguous(), "cuda::copy: {} must be a contiguous cuda tensor, got {}", name,
               t.describe());
  };
  check("y", y);
  check("x", x);
  check_same_dtype("copy", "x", x, y, "y");
  check_numel("copy", "x", x, y.numel());
  if (y.nbytes() == 0 || y.raw() == x.raw()) return;
  CUDA_CHECK(cudaMemcpyAsync(y.raw(), x.raw(), y.nbytes(), cudaMemcpyDeviceToDevice, stream));
}

void cast(Tensor& y, const Tensor& x, cudaStream_t stream) {
  check_pair("cast", y, x, {DType::f32, DType::bf16, DType::f16, DType::f64});
  if (y.dtype() == x.dtype()) return copy(y, x, stream);
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_float(y.dtype(), [&](auto dy) {
    dispatch_float(x.dtype(), [&](auto dx) {
      constexpr DType DY = decltype(dy)::value, DX = decltype(dx)::value;
      ECHO_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream, cast_kernel<DY, DX>)(typed<DY>(y), typed<DX>(x), n);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void fill(Tensor& y, double value, cudaStream_t stream) {
  check_tensor("fill", "y", y, {DType::f32, DType::bf16, DType::f16, DType::f64});
  const int64_t n = y.numel();
  if (n == 0) return;
  const unsigned blocks = blocks_for(n, kThreads);
  switch (y.dtype()) {
    case DType::f32:
      ECHO_LAUNCH(blocks, kThreads, 0, stream, fill_kernel<uint32_t>)
      (static_cast<uint32_t*>(y.raw()), n, float_bits(static_cast<float>(value)));
      break;
    case DType::bf16:
      ECHO_LAUNCH(blocks, kThreads, 0, stream, fill_kernel<uint16_t>)
      (static_cast<uint16_t*>(y.raw()), n, double_to_bf16_bits(value));
      break;
    case DType::f16:
      ECHO_LAUNCH(blocks, kThreads, 0, stream, fill_kernel<uint16_t>)
      (static_cast<uint16_t*>(y.raw()), n, double_to_half_bits(value));
      break;
    default: {
      uint64_t bits;
      std::memcpy(&bits, &value, sizeof bits);
      ECHO_LAUNCH(blocks, kThreads, 0, stream, fill_kernel<uint64_t>)(static_cast<uint64_t*>(y.raw()), n, bits);
      break;
    }
  }
  CUDA_CHECK(cudaGetLastError());
}

void scale(Tensor& y, double factor, cudaStream_t stream) {
  check_tensor("scale", "y", y, {DType::f32, DType::bf16, DType::f64});
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_float(y.dtype(), [&](auto dy) {
    constexpr DType D = decltype(dy)::value;
    if constexpr (D != DType::f16) {
      ECHO_LAUNCH(blocks_for(n, kThreads), kThreads, 0, stream, scale_kernel<D>)(typed<D>(y), n, factor);
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
