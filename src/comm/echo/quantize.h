// Host entry points of the group quantizer (docs/design.md §6). The arithmetic itself lives
// in quantizer.h (ECHO_HD) and is shared with kernels/quantize.cu.
//
// Wire layout of n values quantized with spec (g = group_size, G = ceil(n / g) groups):
//   [codes: G groups, each ceil(len * bits / 8) bytes, len = g except a short last group]
//   [params: G groups, each 2 bytes (symmetric: scale) or 4 bytes (asym: scale, zero), fp16]
// 4-bit codes are packed two per byte, the even element in the low nibble.
// A group holding a non-finite value, or whose scale would overflow fp16, is written with a
// poisoned scale (fp16 NaN) so that every rank that decodes it sees the fault; dequantize
// reports such groups instead of passing garbage on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/quant_spec.h"

namespace echo::comm {

using echo::QuantPolicy;
using echo::QuantSpec;

// Throws echo::Error when spec is not supported (bits not 4/8, group size not a power of two).
void validate(const QuantSpec& spec);

size_t num_groups(size_t n, const QuantSpec& spec);
size_t code_bytes(size_t n, const QuantSpec& spec);   // bytes of packed codes for n values
size_t param_bytes(size_t n, const QuantSpec& spec);  // bytes of fp16 group parameters
size_t wire_bytes(size_t n, const QuantSpec& spec);   // code_bytes + param_bytes

struct QuantReport {
  size_t bad_groups = 0;         // groups poisoned (non-finite input or fp16 scale overflow)
  size_t first_bad_element = 0;  // index of the first element of the first poisoned group
  bool ok() const { return bad_groups == 0; }
};

// Quantizes x[0, n) into wire (wire_bytes(n, spec) bytes).
QuantReport quantize(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire);
// out[i] = dequantized value; poisoned groups decode to NaN and are counted.
QuantReport dequantize(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out);
// acc[i] += dequantized value (the owner's fp32 sum); poisoned groups make acc NaN there.
QuantReport dequantize_add(const uint8_t* wire, size_t n, const QuantSpec& spec, float* acc);

}  // namespace echo::comm
