// CUDA kernels of the Echo compensator and backward rescaling (compensator.cuh): one thread per
// element (grid-stride), calling the ECHO_HD arithmetic the CPU reference calls; the group max
// is exact in any order (max is order-free), so a block reduction plus one atomicMax suffices.
// clang-format off
#include "launch.cuh"
#include "cuda_check.h"
// clang-format on

#include "comm/echo/rescale.h"
#include "compensator.cuh"
#include "core/half.h"

namespace echo::cuda {

namespace {

constexpr int kBlockThreads = 256;
constexpr size_t kMaxBlocks = size_t{1} << 16;  // grid-stride beyond this

unsigned blocks_for(size_t n) {
  const size_t blocks = (n + kBlockThreads - 1) / kBlockThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

static __device__ float load_value(const void* x, bool x_bf16, size_t i) {
  return x_bf16 ? bf16_bits_to_float(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
}

// The coefficients travel by value (a kernel argument), so no device copy of them is needed.
static __global__ void compensate_kernel(const void* x, bool x_bf16, size_t n, const float* m1, const float* m2,
                                         bool compensate_on, comm::CompensatorCoeffs k, float* x_comp, float* y,
                                         uint32_t* max_bits) {
  __shared__ uint32_t block_max;
  if (threadIdx.x == 0) block_max = 0;
  __syncthreads();
  uint32_t local = 0;  // bits of a non-negative float: ordered like the values
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = load_value(x, x_bf16, i);
    const float c = compensate_on ? comm::compensate(v, m1[i], m2[i], k) : v;
    if (x_comp != nullptr) x_comp[i] = c;
    if (y != nullptr) y[i] = comm::scale_pow2(c, 0);
    // As on the CPU, a non-finite value enters as +inf, never NaN (NaN bits would order above
    // +inf, and MPI_MAX need not propagate NaN anyway).
    const uint32_t bits = comm::absmax_bits(c);
    local = bits > local ? bits : local;
  }
  if (max_bits != nullptr) {
    atomicMax(&block_max, local);
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(max_bits, block_max);
  }
}

static __global__ void scale_pow2_kernel(const float* x, size_t n, int e_host, const int* e_device, float* y) {
  const int e = e_device != nullptr ? *e_device : e_host;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = comm::scale_pow2(x[i], e);
}

// v = y[i] unscaled; the compensator update from x' = x_comp[i], or, when x_comp is null (the
// fused site), x' recomputed from the input x[i] and the not yet updated m1, m2; out[i] = v.
static __global__ void finish_kernel(const float* y, size_t n, int e_host, const int* e_device, const float* x_comp,
                                     const void* x, bool x_bf16, float num_ranks, float* m1, float* m2,
                                     bool compensate_on, comm::CompensatorCoeffs k, void* out, bool out_bf16) {
  const int e = e_device != nullptr ? *e_device : e_host;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = e != 0 ? comm::scale_pow2(y[i], -e) : y[i];
    if (compensate_on) {
      float a = m1[i], b = m2[i];
      const float c = x_comp != nullptr ? x_comp[i] : comm::compensate(load_value(x, x_bf16, i), a, b, k);
      comm::compensator_update(c, v, num_ranks, a, b, k);
      m1[i] = a;
      m2[i] = b;
    }
    if (out_bf16)
      static_cast<uint16_t*>(out)[i] = float_to_bf16_bits(v);
    else
      static_cast<float*>(out)[i] = v;
  }
}

// One thread: e from the group's max |x'| (bits of a non-negative float, +inf for a non-finite
// entry); a non-finite max is noted in *fault (atomicMin of fault_key) and gives e = 0.
static __global__ void rescale_exponent_kernel(const uint32_t* max_bits, int* exponent, unsigned long long fault_key,
                                               unsigned long long* fault) {
  const float gmax = bits_float(*max_bits);
  const bool finite = gmax <= 3.402823466e38f;
  if (!finite) atomicMin(fault, fault_key);
  *exponent = finite ? comm::rescale_exponent(gmax) : 0;
}

}  // namespace

void echo_rescale_exponent(const uint32_t* max_bits, int* exponent, unsigned long long fault_key,
                           unsigned long long* fault, cudaStream_t stream) {
  ECHO_CHECK(max_bits != nullptr && exponent != nullptr && fault != nullptr,
             "echo_rescale_exponent needs the max, the exponent and the fault word");
  ECHO_LAUNCH(1, 1, 0, stream, rescale_exponent_kernel)(max_bits, exponent, fault_key, fault);
  CUDA_CHECK(cudaGetLastError());
}

void echo_compensate(const void* x, bool x_bf16, size_t n, const float* m1, const float* m2,
                     const comm::CompensatorCoeffs* coeffs, float* x_comp, float* y, uint32_t* max_bits,
                     cudaStream_t stream) {
  if (n == 0) return;
  ECHO_CHECK(x != nullptr && (x_comp != nullptr || max_bits != nullptr),
             "echo_compensate of {} values needs an input and an output (x' or the max)", n);
  ECHO_CHECK(coeffs == nullptr || (m1 != nullptr && m2 != nullptr), "echo_compensate needs the compensator state");
  ECHO_LAUNCH(blocks_for(n), kBlockThreads, 0, stream, compensate_kernel)
  (x, x_bf16, n, m1, m2, coeffs != nullptr, coeffs ? *coeffs : comm::CompensatorCoeffs{}, x_comp, y, max_bits);
  CUDA_CHECK(cudaGetLastError());
}

void echo_scale_pow2(const float* x, size_t n, int e, float* y, cudaStream_t stream, const int* e_device) {
  if (n == 0) return;
  ECHO_CHECK(x != nullptr && y != nullptr, "echo_scale_pow2 of {} values needs non-null buffers", n);
  ECHO_LAUNCH(blocks_for(n), kBlockThreads, 0, stream, scale_pow2_kernel)(x, n, e, e_device, y);
  CUDA_CHECK(cudaGetLastError());
}

void echo_finish(const float* y, size_t n, int e, const float* x_comp, float num_ranks, float* m1, float* m2,
                 const comm::CompensatorCoeffs* coeffs, void* out, bool out_bf16, cudaStream_t stream,
                 const int* e_device) {
  if (n == 0) return;
  ECHO_CHECK(y != nullptr && out != nullptr, "echo_finish of {} values needs non-null buffers", n);
  ECHO_CHECK(coeffs == nullptr || (x_comp != nullptr && m1 != nullptr && m2 != nullptr),
             "echo_finish needs x' and the compensator state to update it");
  {
    // Each thread reads y[i] and writes out[i]: only out == y as f32 (its own element) is safe; any
    // other overlap writes into an element another thread may not have read yet.
    const auto* y_begin = reinterpret_cast<const char*>(y);
    const auto* out_begin = static_cast<const char*>(out);
    const bool apart = out_begin + (out_bf16 ? 2 : 4) * n <= y_begin || y_begin + 4 * n <= out_begin;
    ECHO_CHECK(apart || (!out_bf16 && out_begin == y_begin),
               "echo_finish of {} values: a {} out overlapping the f32 y races (give it its own buffer, or y itself "
               "as f32)",
               n, out_bf16 ? "bf16" : "f32");
  }
  ECHO_LAUNCH(blocks_for(n), kBlockThreads, 0, stream, finish_kernel)
  (y, n, e, e_device, x_comp, nullptr, false, num_ranks, m1, m2, coeffs != nullptr,
   coeffs ? *coeffs : comm::CompensatorCoeffs{}, out, out_bf16);
  CUDA_CHECK(cudaGetLastError());
}

void echo_finish_recompute(const float* y, size_t n, int e, void* x, bool x_bf16, float num_ranks, float* m1, float* m2,
                           const comm::CompensatorCoeffs* coeffs, cudaStream_t stream, const int* e_device) {
  if (n == 0) return;
  ECHO_CHECK(y != nullptr && x != nullptr, "echo_finish_recompute of {} values needs non-null buffers", n);
  ECHO_CHECK(coeffs == nullptr || (m1 != nullptr && m2 != nullptr),
             "echo_finish_recompute needs the compensator state to update it");
  // NOTE: x is read and written by the same thread, element by element: in place is safe.
  ECHO_LAUNCH(blocks_for(n), kBlockThreads, 0, stream, finish_kernel)
  (y, n, e, e_device, nullptr, x, x_bf16, num_ranks, m1, m2, coeffs != nullptr,
   coeffs ? *coeffs : comm::CompensatorCoeffs{}, x, x_bf16);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace echo::cuda
