// bf16_codec.cuh: one thread per element, grid-stride; the conversions are core/half.h's ECHO_HD
// functions, so the bits are the host codec's.
// clang-format off
#include "launch.cuh"
#include "cuda_check.h"
// clang-format on

#include "bf16_codec.cuh"
#include "core/half.h"
#include "core/hd.h"
#include "device_util.cuh"

namespace echo::cuda {

namespace {

using detail::kThreads;

unsigned blocks(size_t n) { return detail::blocks_for(static_cast<int64_t>(n), kThreads); }

__global__ void encode_kernel(const float* __restrict__ x, size_t n, uint16_t* __restrict__ out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = float_to_bf16_bits(x[i]);
}

__global__ void round_kernel(float* acc, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    acc[i] = round_to_bf16(acc[i]);
}

__global__ void decode_add_kernel(const uint16_t* __restrict__ in, size_t n, float* __restrict__ acc) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    acc[i] = add_rn(acc[i], bf16_bits_to_float(in[i]));
}

__global__ void decode_kernel(const uint16_t* __restrict__ in, size_t n, float* __restrict__ out,
                              DeviceQuantReport* report) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = bf16_bits_to_float(in[i]);
    out[i] = v;
    if ((float_bits(v) & 0x7f800000u) == 0x7f800000u) {  // NaN or infinity
      atomicAdd(&report->bad_groups, 1ull);
      atomicMin(&report->first_bad_element, static_cast<unsigned long long>(i));
    }
  }
}

}  // namespace

void bf16_encode(const float* x, size_t n, uint8_t* out, cudaStream_t stream) {
  if (n == 0) return;
  ECHO_CHECK(x != nullptr && out != nullptr, "bf16_encode of {} values needs non-null buffers", n);
  ECHO_LAUNCH(blocks(n), kThreads, 0, stream, encode_kernel)(x, n, reinterpret_cast<uint16_t*>(out));
  CUDA_CHECK(cudaGetLastError());
}

void bf16_round(float* acc, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  ECHO_CHECK(acc != nullptr, "bf16_round of {} values needs a non-null buffer", n);
  ECHO_LAUNCH(blocks(n), kThreads, 0, stream, round_kernel)(acc, n);
  CUDA_CHECK(cudaGetLastError());
}

void bf16_decode_add(const uint8_t* in, size_t n, float* acc, cudaStream_t stream) {
  if (n == 0) return;
  ECHO_CHECK(in != nullptr && acc != nullptr, "bf16_decode_add of {} values needs non-null buffers", n);
  ECHO_LAUNCH(blocks(n), kThreads, 0, stream, decode_add_kernel)(reinterpret_cast<const uint16_t*>(in), n, acc);
  CUDA_CHECK(cudaGetLastError());
}

void bf16_decode(const uint8_t* in, size_t n, float* out, DeviceQuantReport* report, cudaStream_t stream) {
  if (n == 0) return;
  ECHO_CHECK(in != nullptr && out != nullptr && report != nullptr, "bf16_decode of {} values needs non-null buffers",
             n);
  ECHO_LAUNCH(blocks(n), kThreads, 0, stream, decode_kernel)(reinterpret_cast<const uint16_t*>(in), n, out, report);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
