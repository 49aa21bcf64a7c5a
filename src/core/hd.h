// ECHO_HD marks arithmetic shared by the CPU reference and the CUDA kernels: it compiles as
// __host__ __device__ under nvcc and as plain inline C++ elsewhere, so CPU tests run the
// kernels' own math.
#pragma once

#if defined(__CUDACC__)
#define ECHO_HD __host__ __device__ __forceinline__
#else
#define ECHO_HD inline
#endif

#include <cstdint>
#include <cstring>

namespace echo {

// Reinterprets the bits of a float (device intrinsics under nvcc, memcpy on the host).
ECHO_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ECHO_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace echo
