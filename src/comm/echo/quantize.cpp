// Host implementation of the group quantizer (quantize.h): loops over groups calling the ECHO_HD
// arithmetic of quantizer.h, which kernels/quantize.cu shares, so the bytes match the GPU's; the
// per-group statistics and parameters run in vector lanes (host_lanes.h) that compute the same
// bits as those functions.
#include "comm/echo/quantize.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "comm/echo/host_lanes.h"
#include "comm/echo/quantizer.h"
#include "core/config/config.h"
#include "core/error.h"
#include "core/simd_clones.h"

namespace echo::comm {

namespace {

using host_lanes::kParamLanes;

// Elements handled per inner chunk: codes go to a stack buffer first, so the encode loop has no
// aliasing with the wire and vectorizes, and no call allocates.
constexpr size_t kChunk = 256;

// quantize() works on batches of up to 16 groups: the statistics of a whole batch first, then its
// wire parameters, one group per vector lane (host_lanes.h; per group they are a chain of a few
// dependent divisions, zero-aware five, which cost as much as the group's codes when computed one
// group at a time), then its codes, while the batch's 2048 values (8 KB) are still in L1.
constexpr size_t kBatchValues = 2048;
constexpr size_t kMaxBatchGroups = kParamLanes;

// The nibble (un)packing below reads and writes pairs of code bytes as one uint16.
static_assert(std::endian::native == std::endian::little);

// The codes of one group (not poisoned) into out. 4-bit codes are computed into a buffer, then
// packed: reading a pair of code bytes as one little-endian uint16 p = even | odd << 8, the packed
// byte even | odd << 4 is the low byte of p | p >> 4 (even < 16), a loop GCC vectorizes, where
// pack_nibbles over two strided bytes does not.
ECHO_INLINE void encode_group(const float* __restrict x, size_t len, const CodeMap& map, int bits,
                              uint8_t* __restrict out) {
  const CodeMap m = map;  // a local copy: the byte stores below may not alias it
  if (bits == 8) {
    for (size_t i = 0; i < len; ++i) out[i] = static_cast<uint8_t>(encode_code(x[i], m));
    return;
  }
  alignas(64) uint8_t codes[kChunk];
  for (size_t begin = 0; begin < len; begin += kChunk) {
    const size_t count = std::min(kChunk, len - begin);
    for (size_t i = 0; i < count; ++i) codes[i] = static_cast<uint8_t>(encode_code(x[begin + i], m));
    uint8_t* dst = out + begin / 2;
    const size_t pairs = count / 2;
    for (size_t k = 0; k < pairs; ++k) {
      uint16_t p;
      std::memcpy(&p, codes + 2 * k, sizeof p);
      dst[k] = static_cast<uint8_t>(p | (p >> 4));
    }
    if (count & 1) dst[pairs] = pack_nibbles(codes[count - 1], 0);  // a short group's last byte
  }
}

// quantize() for n > 0 values, with vectors of W floats for the statistics and parameters. One
// function per target (below), so the loops over groups and the per-group code all run in the
// target's ISA without a call per group.
template <int W>
ECHO_INLINE QuantReport quantize_groups(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire) {
  const WireLayout layout = wire_layout(n, spec);
  const size_t g = static_cast<size_t>(spec.group_size);
  const size_t batch = std::clamp<size_t>(kBatchValues / g, 1, kMaxBatchGroups);
  uint8_t* params = wire + layout.code_bytes;
  QuantReport report;
  WireParams w[kMaxBatchGroups];
  alignas(64) float mins[kMaxBatchGroups] = {}, maxs[kMaxBatchGroups] = {};
  alignas(64) uint32_t nonfinite[kMaxBatchGroups] = {};
  for (size_t first = 0; first < layout.num_groups; first += batch) {
    const size_t count = std::min(batch, layout.num_groups - first);
    for (size_t k = 0; k < count; ++k) {
      const size_t begin = (first + k) * g;
      const GroupStats s = host_lanes::group_stats<W>(x + begin, std::min(g, n - begin));
      mins[k] = s.min;
      maxs[k] = s.max;
      nonfinite[k] = s.nonfinite;
    }
    host_lanes::wire_params_lanes<W>(mins, maxs, nonfinite, count, spec.policy, spec.bits, w);
    for (size_t k = 0; k < count; ++k) {
      const size_t group_idx = first + k;
      const size_t begin = group_idx * g;
      const size_t len = std::min(g, n - begin);
      uint8_t* codes = wire + group_idx * layout.group_code_bytes;
      store_params(params + group_idx * layout.group_param_bytes, w[k], spec.policy);
      if (params_poisoned(w[k])) {
        if (report.bad_groups++ == 0) report.first_bad_element = begin;
        std::memset(codes, 0, group_code_bytes(len, spec.bits));
        continue;
      }
      encode_group(x + begin, len, code_map(w[k], spec.policy, spec.bits), spec.bits, codes);
    }
  }
  return report;
}

#if defined(ECHO_SIMD_VERSIONS)
ECHO_TARGET_V4 QuantReport quantize_all(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire) {
  return quantize_groups<16>(x, n, spec, wire);
}
ECHO_TARGET_V3 QuantReport quantize_all(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire) {
  return quantize_groups<8>(x, n, spec, wire);
}
ECHO_TARGET_DEFAULT QuantReport quantize_all(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire) {
  return quantize_groups<4>(x, n, spec, wire);
}
#else
QuantReport quantize_all(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire) {
  return quantize_groups<4>(x, n, spec, wire);
}
#endif

// One group's values from its codes (not poisoned). 4-bit codes are first unpacked to one byte
// each (byte b becomes the uint16 (b & 15) | (b >> 4) << 8, i.e. the two code bytes in element
// order), so both loops are plain element-wise ones GCC vectorizes. Each value is decode_code of
// its code, the same expression as the device's, so the bits do not depend on the clone.
// NOTE: a 16-entry table of decoded values per group would give the same bits, but a table lookup
// per element vectorizes only as a gather; decode_code is three vector ops (convert, subtract,
// multiply) per vector of codes.
template <bool kAdd>
ECHO_INLINE void decode_group(const uint8_t* __restrict in, size_t len, const DecodeMap& map, int bits,
                              float* __restrict out) {
  const DecodeMap d = map;
  if (bits == 8) {
    for (size_t i = 0; i < len; ++i) {
      const float v = decode_code(in[i], d);
      out[i] = kAdd ? add_rn(out[i], v) : v;
    }
    return;
  }
  alignas(64) uint8_t codes[kChunk];
  for (size_t begin = 0; begin < len; begin += kChunk) {
    const size_t count = std::min(kChunk, len - begin);
    const uint8_t* src = in + begin / 2;
    const size_t pairs = count / 2;
    for (size_t k = 0; k < pairs; ++k) {
      const uint16_t p = static_cast<uint16_t>((src[k] & 0x0fu) | ((src[k] >> 4) << 8));
      std::memcpy(codes + 2 * k, &p, sizeof p);
    }
    if (count & 1) codes[count - 1] = static_cast<uint8_t>(unpack_nibble(src[pairs], 0));
    float* dst = out + begin;
    for (size_t i = 0; i < count; ++i) {
      const float v = decode_code(codes[i], d);
      dst[i] = kAdd ? add_rn(dst[i], v) : v;
    }
  }
}

template <bool kAdd>
ECHO_INLINE QuantReport decode_groups(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out) {
  const WireLayout layout = wire_layout(n, spec);
  const size_t g = static_cast<size_t>(spec.group_size);
  const uint8_t* params = wire + layout.code_bytes;
  QuantReport report;
  for (size_t group_idx = 0; group_idx < layout.num_groups; ++group_idx) {
    const size_t begin = group_idx * g;
    const size_t len = std::min(g, n - begin);
    const WireParams w = load_params(params + group_idx * layout.group_param_bytes, spec.policy);
    const DecodeMap d = decode_map(w, spec.policy, spec.bits);
    if (d.poisoned) {
      if (report.bad_groups++ == 0) report.first_bad_element = begin;
      std::fill(out + begin, out + begin + len, quant_nan());
      continue;
    }
    decode_group<kAdd>(wire + group_idx * layout.group_code_bytes, len, d, spec.bits, out + begin);
  }
  return report;
}

// dequantize() / dequantize_add() for n > 0 values, one function per SIMD clone (target_clones
// takes no templates).
ECHO_SIMD_CLONES QuantReport decode_all(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out, bool add) {
  return add ? decode_groups<true>(wire, n, spec, out) : decode_groups<false>(wire, n, spec, out);
}

QuantReport decode(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out, bool add) {
  validate(spec);
  ECHO_CHECK(n == 0 || (wire != nullptr && out != nullptr), "dequantize of {} values needs non-null buffers", n);
  return n == 0 ? QuantReport{} : decode_all(wire, n, spec, out, add);
}

}  // namespace

void validate(const QuantSpec& spec) {
  ECHO_CHECK(quant_spec_supported(spec),
             "unsupported quantizer spec: policy {}, bits {} (4 or 8), group size {} (a power of two)",
             config::to_string(spec.policy), spec.bits, spec.group_size);
}

size_t num_groups(size_t n, const QuantSpec& spec) {
  validate(spec);
  return wire_layout(n, spec).num_groups;
}

size_t code_bytes(size_t n, const QuantSpec& spec) {
  validate(spec);
  return wire_layout(n, spec).code_bytes;
}

size_t param_bytes(size_t n, const QuantSpec& spec) {
  validate(spec);
  return wire_layout(n, spec).param_bytes;
}

size_t wire_bytes(size_t n, const QuantSpec& spec) {
  validate(spec);
  const WireLayout layout = wire_layout(n, spec);
  return layout.code_bytes + layout.param_bytes;
}

QuantReport quantize(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire) {
  validate(spec);
  ECHO_CHECK(n == 0 || (x != nullptr && wire != nullptr), "quantize of {} values needs non-null buffers", n);
  return n == 0 ? QuantReport{} : quantize_all(x, n, spec, wire);
}

QuantReport dequantize(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out) {
  return decode(wire, n, spec, out, false);
}

QuantReport dequantize_add(const uint8_t* wire, size_t n, const QuantSpec& spec, float* acc) {
  return decode(wire, n, spec, acc, true);
}

}  // namespace echo::comm
