// Host implementation of the group quantizer (quantize.h): loops over groups calling the ECHO_HD
// arithmetic of quantizer.h, which kernels/quantize.cu shares, so the bytes match the GPU's.
#include "comm/echo/quantize.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "comm/echo/quantizer.h"
#include "core/config/config.h"
#include "core/error.h"
#include "core/simd_clones.h"

namespace echo::comm {

namespace {

// Elements handled per inner chunk: codes go to a stack buffer first, so the encode loop has no
// aliasing with the wire and vectorizes, and no call allocates.
constexpr size_t kChunk = 256;

// quantize() works on batches of groups: the statistics of a whole batch first, then its wire
// parameters, then its codes. The parameters are a chain of a few dependent divisions per group
// (zero-aware: five); with the groups of a batch independent of each other the CPU overlaps those
// chains instead of waiting on each between two groups' vector loops, and 2048 values (8 KB) are
// still in L1 when they are encoded.
constexpr size_t kBatchValues = 2048;
constexpr size_t kMaxBatchGroups = 16;

// The nibble (un)packing below reads and writes pairs of code bytes as one uint16.
static_assert(std::endian::native == std::endian::little);

#if defined(__GNUC__)
#define ECHO_INLINE inline __attribute__((always_inline))  // compiled into each SIMD clone that calls it
// NOTE: without fast-math GCC will not vectorize a float min/max reduction (x < m ? x : m is not
// MIN_EXPR under NaN and signed-zero rules), so the lanes are explicit GCC/Clang vectors. 64 bytes:
// one AVX-512 register, two AVX2 or four SSE registers (the three accumulators still fit the 16 xmm
// registers of the baseline clone). Each lane applies exactly stats_add's select (x86 minps/maxps
// compute that select), and the lanes never hold NaN, so any merge order gives the scalar loop's
// min and max up to the sign of a zero, which wire_params canonicalizes.
typedef float Floats16 __attribute__((vector_size(64)));
typedef uint32_t Words16 __attribute__((vector_size(64)));
typedef float Floats8 __attribute__((vector_size(32)));
typedef uint32_t Words8 __attribute__((vector_size(32)));
typedef float Floats4 __attribute__((vector_size(16)));
typedef uint32_t Words4 __attribute__((vector_size(16)));

#define lower8(v) __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)
#define upper8(v) __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)
#define lower4(v) __builtin_shufflevector(v, v, 0, 1, 2, 3)
#define upper4(v) __builtin_shufflevector(v, v, 4, 5, 6, 7)
#define half_min(a, b) ((b) < (a) ? (b) : (a))  // stats_merge's selects, lane-wise
#define half_max(a, b) ((b) > (a) ? (b) : (a))

ECHO_INLINE GroupStats group_stats(const float* x, size_t len) {
  const float inf = bits_float(0x7f800000u);
  const Floats16 zeros = {};
  Floats16 min = zeros + inf, max = zeros - inf;
  Words16 bad = {};
  size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    Floats16 v;
    std::memcpy(&v, x + i, sizeof v);
    min = v < min ? v : min;
    max = v > max ? v : max;
    Words16 bits;
    std::memcpy(&bits, &v, sizeof bits);
    bad |= (bits & 0x7f800000u) + 0x00800000u;  // nonfinite_mark, lane-wise
  }
  // Merge the lanes as a tree, halving the width each step (a scalar merge of 16 lanes costs as
  // much as the loop over a 128-value group).
  Floats8 min8 = half_min(lower8(min), upper8(min)), max8 = half_max(lower8(max), upper8(max));
  Words8 bad8 = lower8(bad) | upper8(bad);
  Floats4 min4 = half_min(lower4(min8), upper4(min8)), max4 = half_max(lower4(max8), upper4(max8));
  Words4 bad4 = lower4(bad8) | upper4(bad8);
  min4 = half_min(min4, __builtin_shufflevector(min4, min4, 2, 3, 0, 1));
  max4 = half_max(max4, __builtin_shufflevector(max4, max4, 2, 3, 0, 1));
  bad4 |= __builtin_shufflevector(bad4, bad4, 2, 3, 0, 1);
  GroupStats s{min4[0], max4[0], bad4[0]};
  stats_merge(s, GroupStats{min4[1], max4[1], bad4[1]});
  for (; i < len; ++i) stats_add(s, x[i]);
  return s;
}
#undef lower8
#undef upper8
#undef lower4
#undef upper4
#undef half_min
#undef half_max
#else
#define ECHO_INLINE inline
GroupStats group_stats(const float* x, size_t len) {
  GroupStats s = stats_empty();
  for (size_t i = 0; i < len; ++i) stats_add(s, x[i]);
  return s;
}
#endif

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

// quantize() for n > 0 values; one function per SIMD clone, so the loops over groups and the
// per-group code all run in the clone's ISA without a call per group.
ECHO_SIMD_CLONES QuantReport quantize_groups(const float* x, size_t n, const QuantSpec& spec, uint8_t* wire) {
  const WireLayout layout = wire_layout(n, spec);
  const size_t g = static_cast<size_t>(spec.group_size);
  const size_t batch = std::clamp<size_t>(kBatchValues / g, 1, kMaxBatchGroups);
  uint8_t* params = wire + layout.code_bytes;
  QuantReport report;
  WireParams w[kMaxBatchGroups];
  for (size_t first = 0; first < layout.num_groups; first += batch) {
    const size_t count = std::min(batch, layout.num_groups - first);
    for (size_t k = 0; k < count; ++k) {
      const size_t begin = (first + k) * g;
      w[k] = wire_params(group_stats(x + begin, std::min(g, n - begin)), spec.policy, spec.bits);
    }
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

// One group's values from its codes (not poisoned). 4-bit codes are first unpacked to one byte
// each (byte b becomes the uint16 (b & 15) | (b >> 4) << 8, i.e. the two code bytes in element
// order), so both loops are plain element-wise ones GCC vectorizes. Each value is decode_code of
// its code, the same expression as the device's, so the bits do not depend on the clone.
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
  return n == 0 ? QuantReport{} : quantize_groups(x, n, spec, wire);
}

QuantReport dequantize(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out) {
  return decode(wire, n, spec, out, false);
}

QuantReport dequantize_add(const uint8_t* wire, size_t n, const QuantSpec& spec, float* acc) {
  return decode(wire, n, spec, acc, true);
}

}  // namespace echo::comm
