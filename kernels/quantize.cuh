// CUDA entry points of the group quantizer: the same ops, argument order and wire layout as the
// host ones in src/comm/echo/quantize.h, on device pointers and a stream. Both call the ECHO_HD
// arithmetic of src/comm/echo/quantizer.h, so the bytes are identical to the CPU's.
// Plain C++ can include this header (no CUDA syntax), so host code and tests call it directly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "comm/echo/quantize.h"
#include "core/quant_spec.h"

namespace echo::cuda {

// Poisoned-group counter in device memory. The kernels ADD to it (atomics), so one report can
// gather every call of a step and be read once; reset_report clears it. first_bad_element is the
// smallest first-element index of a poisoned group seen since the reset (~0 when none).
struct DeviceQuantReport {
  unsigned long long bad_groups;
  unsigned long long first_bad_element;
};

// Clears *report (device memory) on the stream.
void reset_report(DeviceQuantReport* report, cudaStream_t stream);
// Waits for the stream and returns the counts (bad_groups == 0: nothing poisoned).
comm::QuantReport read_report(const DeviceQuantReport* report, cudaStream_t stream);
// Without a wait: atomicMin(word, key) when the report counts a poisoned group (a fault the
// caller reads later, once per step).
void note_if_poisoned(const DeviceQuantReport* report, unsigned long long key, unsigned long long* word,
                      cudaStream_t stream);

// Quantizes x[0, n) into wire (comm::wire_bytes(n, spec) bytes). Poisoned groups are added to *report.
void quantize(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire, DeviceQuantReport* report,
              cudaStream_t stream);
// out[i] = dequantized value; poisoned groups decode to NaN and are added to *report.
void dequantize(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out, DeviceQuantReport* report,
                cudaStream_t stream);
// acc[i] += dequantized value; poisoned groups set acc to NaN there and are added to *report.
void dequantize_add(const uint8_t* wire, size_t n, const QuantSpec& spec, float* acc, DeviceQuantReport* report,
                    cudaStream_t stream);

}  // namespace echo::cuda
