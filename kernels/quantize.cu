// CUDA group quantizer: quantize / dequantize / dequantize_add on device pointers with the wire
// layout of src/comm/echo/quantize.h, calling the ECHO_HD arithmetic of quantizer.h.
//
// Design: quantize runs one warp per group (8 groups per 256-thread block, grid-stride over groups).
// The lanes stride over the group for the statistics, reduce them with shuffles (min/max/or are
// exact and order-free; wire_params canonicalizes the sign of zero), so every lane derives the same
// fp16 parameters the CPU does; lane 0 stores them and reports a poisoned group, and the lanes write
// the codes, one byte each (two elements at 4 bits). dequantize runs one thread per element; the
// thread of a group's first element reports a poisoned group. Bit-identity with the CPU rests on
// quantizer.h using __f*_rn intrinsics on the device (no FMA contraction, no fast-math).
// clang-format off
#include "launch.cuh"
#include "cuda_check.h"
// clang-format on

#include "comm/echo/quantizer.h"
#include "quantize.cuh"

namespace echo::cuda {

namespace {

using comm::CodeMap;
using comm::DecodeMap;
using comm::GroupStats;
using comm::WireLayout;
using comm::WireParams;

constexpr int kBlockThreads = 256;
constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr size_t kMaxBlocks = size_t{1} << 16;  // grid-stride beyond this

static __device__ void report_poisoned(DeviceQuantReport* report, size_t first_element) {
  atomicAdd(&report->bad_groups, 1ull);
  atomicMin(&report->first_bad_element, static_cast<unsigned long long>(first_element));
}

template <int kBits>
static __global__ void quantize_kernel(const float* __restrict__ x, size_t n, QuantSpec spec, WireLayout layout,
                                       uint8_t* __restrict__ wire, DeviceQuantReport* report) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const size_t warp_idx = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  const size_t num_warps = static_cast<size_t>(gridDim.x) * blockDim.x / kWarpSize;
  const size_t g = static_cast<size_t>(spec.group_size);
  uint8_t* params = wire + layout.code_bytes;
  // NOTE: the loop bound is uniform across the warp, so every lane reaches the shuffles.
  for (size_t group_idx = warp_idx; group_idx < layout.num_groups; group_idx += num_warps) {
    const size_t begin = group_idx * g;
    const int len = static_cast<int>(g < n - begin ? g : n - begin);
    const float* xg = x + begin;
    GroupStats stats = comm::stats_empty();
    for (int i = lane; i < len; i += kWarpSize) comm::stats_add(stats, xg[i]);
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const GroupStats other{__shfl_xor_sync(kFullMask, stats.min, offset),
                             __shfl_xor_sync(kFullMask, stats.max, offset),
                             __shfl_xor_sync(kFullMask, stats.nonfinite, offset)};
      comm::stats_merge(stats, other);
    }
    const WireParams w = comm::wire_params(stats, spec.policy, kBits);
    const bool poisoned = comm::params_poisoned(w);
    if (lane == 0) {
      comm::store_params(params + group_idx * layout.group_param_bytes, w, spec.policy);
      if (poisoned) report_poisoned(report, begin);
    }
    uint8_t* codes = wire + group_idx * layout.group_code_bytes;
    const int num_bytes = static_cast<int>(comm::group_code_bytes(static_cast<size_t>(len), kBits));
    const CodeMap m = comm::code_map(w, spec.policy, kBits);
    for (int k = lane; k < num_bytes; k += kWarpSize) {
      uint8_t byte = 0;  // a poisoned group's codes are all zero
      if (!poisoned) {
        if constexpr (kBits == 8) {
          byte = static_cast<uint8_t>(comm::encode_code(xg[k], m));
        } else {
          const int e = 2 * k;
          const uint32_t lo = comm::encode_code(xg[e], m);
          const uint32_t hi = e + 1 < len ? comm::encode_code(xg[e + 1], m) : 0u;
          byte = comm::pack_nibbles(lo, hi);
        }
      }
      codes[k] = byte;
    }
  }
}

template <int kBits, bool kAdd>
static __global__ void dequantize_kernel(const uint8_t* __restrict__ wire, size_t n, QuantSpec spec, WireLayout layout,
                                         int group_shift, float* out, DeviceQuantReport* report) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t group_mask = (size_t{1} << group_shift) - 1;
  const uint8_t* params = wire + layout.code_bytes;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t group_idx = i >> group_shift;
    const size_t j = i & group_mask;
    const WireParams w = comm::load_params(params + group_idx * layout.group_param_bytes, spec.policy);
    const DecodeMap d = comm::decode_map(w, spec.policy, kBits);
    const uint8_t* codes = wire + group_idx * layout.group_code_bytes;
    const uint32_t code = kBits == 8 ? codes[j] : comm::unpack_nibble(codes[j >> 1], j);
    if (d.poisoned) {
      out[i] = comm::quant_nan();
      if (j == 0) report_poisoned(report, i);
      continue;
    }
    const float v = comm::decode_code(code, d);
    out[i] = kAdd ? echo::add_rn(out[i], v) : v;
  }
}

void check_spec(const QuantSpec& spec) {
  ECHO_CHECK(comm::quant_spec_supported(spec),
             "unsupported quantizer spec: bits {} (4 or 8), group size {} (a power of two), policy {}", spec.bits,
             spec.group_size, static_cast<int>(spec.policy));
}

unsigned blocks_for(size_t work_items, size_t items_per_block) {
  const size_t blocks = (work_items + items_per_block - 1) / items_per_block;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

int log2_exact(int v) {
  int shift = 0;
  while ((1 << shift) < v) ++shift;
  return shift;
}

void launch_quantize(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire, DeviceQuantReport* report,
                     cudaStream_t stream) {
  check_spec(spec);
  ECHO_CHECK(report != nullptr, "cuda::quantize needs a device report for poisoned groups");
  if (n == 0) return;
  ECHO_CHECK(x != nullptr && wire != nullptr, "cuda::quantize of {} values needs non-null buffers", n);
  const WireLayout layout = comm::wire_layout(n, spec);
  const unsigned blocks = blocks_for(layout.num_groups, kBlockThreads / kWarpSize);
  if (spec.bits == 4) {
    ECHO_LAUNCH(blocks, kBlockThreads, 0, stream, quantize_kernel<4>)(x, n, spec, layout, wire, report);
  } else {
    ECHO_LAUNCH(blocks, kBlockThreads, 0, stream, quantize_kernel<8>)(x, n, spec, layout, wire, report);
  }
  CUDA_CHECK(cudaGetLastError());
}

template <bool kAdd>
void launch_dequantize(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out, DeviceQuantReport* report,
                       cudaStream_t stream) {
  check_spec(spec);
  ECHO_CHECK(report != nullptr, "cuda::dequantize needs a device report for poisoned groups");
  if (n == 0) return;
  ECHO_CHECK(wire != nullptr && out != nullptr, "cuda::dequantize of {} values needs non-null buffers", n);
  const WireLayout layout = comm::wire_layout(n, spec);
  const int shift = log2_exact(spec.group_size);
  const unsigned blocks = blocks_for(n, kBlockThreads);
  if (spec.bits == 4) {
    ECHO_LAUNCH(blocks, kBlockThreads, 0, stream, dequantize_kernel<4, kAdd>)
    (wire, n, spec, layout, shift, out, report);
  } else {
    ECHO_LAUNCH(blocks, kBlockThreads, 0, stream, dequantize_kernel<8, kAdd>)
    (wire, n, spec, layout, shift, out, report);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void reset_report(DeviceQuantReport* report, cudaStream_t stream) {
  ECHO_CHECK(report != nullptr, "reset_report needs a device report");
  CUDA_CHECK(cudaMemsetAsync(&report->bad_groups, 0, sizeof report->bad_groups, stream));
  CUDA_CHECK(cudaMemsetAsync(&report->first_bad_element, 0xff, sizeof report->first_bad_element, stream));
}

namespace {
__global__ void note_if_poisoned_kernel(const DeviceQuantReport* report, unsigned long long key,
                                        unsigned long long* word) {
  if (report->bad_groups > 0) atomicMin(word, key);
}
}  // namespace

void note_if_poisoned(const DeviceQuantReport* report, unsigned long long key, unsigned long long* word,
                      cudaStream_t stream) {
  ECHO_CHECK(report != nullptr && word != nullptr, "note_if_poisoned needs a device report and a word");
  ECHO_LAUNCH(1, 1, 0, stream, note_if_poisoned_kernel)(report, key, word);
  CUDA_CHECK(cudaGetLastError());
}

comm::QuantReport read_report(const DeviceQuantReport* report, cudaStream_t stream) {
  ECHO_CHECK(report != nullptr, "read_report needs a device report");
  DeviceQuantReport host{};
  CUDA_CHECK(cudaMemcpyAsync(&host, report, sizeof host, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  comm::QuantReport r;
  r.bad_groups = static_cast<size_t>(host.bad_groups);
  r.first_bad_element = host.bad_groups > 0 ? static_cast<size_t>(host.first_bad_element) : 0;
  return r;
}

void quantize(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire, DeviceQuantReport* report,
              cudaStream_t stream) {
  launch_quantize(x, n, spec, wire, report, stream);
}

void dequantize(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out, DeviceQuantReport* report,
                cudaStream_t stream) {
  launch_dequantize<false>(wire, n, spec, out, report, stream);
}

void dequantize_add(const uint8_t* wire, size_t n, const QuantSpec& spec, float* acc, DeviceQuantReport* report,
                    cudaStream_t stream) {
  launch_dequantize<true>(wire, n, spec, acc, report, stream);
}

}  // namespace echo::cuda
