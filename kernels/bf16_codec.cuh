// The 16-bit baseline's codec on device pointers (comm::Bf16Codec on the host, comm/codec.h):
// values travel as bf16 (round to nearest even, core/half.h), the owner's own values are rounded
// the same way before the fp32 sum, and decoding counts the non-finite outputs, as the host codec
// does. The cuda_ipc transport uses it for bits 16 (docs/design.md §7). Built only with the CUDA
// backend; all calls enqueue on `stream` and do not wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "quantize.cuh"  // DeviceQuantReport

namespace echo::cuda {

// out[i] (2 bytes each) = bf16 bits of x[i].
void bf16_encode(const float* x, size_t n, uint8_t* out, cudaStream_t stream);
// acc[i] = round_to_bf16(acc[i]), in place (Bf16Codec::load_own).
void bf16_round(float* acc, size_t n, cudaStream_t stream);
// acc[i] += float(in[i]) in fp32 (Bf16Codec::decode_add).
void bf16_decode_add(const uint8_t* in, size_t n, float* acc, cudaStream_t stream);
// out[i] = float(in[i]); the non-finite outputs are added to report->bad_groups (and the smallest
// such i, an index into this call's values, atomicMin'd into first_bad_element), as
// Bf16Codec::decode counts them.
void bf16_decode(const uint8_t* in, size_t n, float* out, DeviceQuantReport* report, cudaStream_t stream);

}  // namespace echo::cuda
