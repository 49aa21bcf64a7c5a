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

// fp32 arithmetic rounded once, identical on host and device. NOTE: nvcc contracts a * b + c
// into an FMA by default; code whose CPU and GPU results must match bit for bit (the Echo
// quantizer, the S3R rounding) computes through these, which the compiler may not fuse.
ECHO_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

ECHO_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

ECHO_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

ECHO_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Round half to even to an int, default rounding mode. Valid for |v| <= 2^22, which the callers
// guarantee by clipping first. On the host, adding 1.5·2^23 makes the FPU's own round-to-nearest-even
// drop the fraction and leaves round(v) in the low mantissa bits; this vectorizes, rintf without
// SSE4.1 does not.
ECHO_HD int round_to_int(float v) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#else
  return static_cast<int>(float_bits(v + 12582912.0f) - 0x4b400000u);
#endif
}

}  // namespace echo
