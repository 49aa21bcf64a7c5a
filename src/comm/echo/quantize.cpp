// Host implementation of the group quantizer (quantize.h): loops over groups calling the ECHO_HD
// arithmetic of quantizer.h, which kernels/quantize.cu shares, so the bytes match the GPU's.
#include "comm/echo/quantize.h"

#include <algorithm>
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


#if defined(__GNUC__)
// NOTE: without fast-math GCC will not vectorize a float min/max reduction (x < m ? x : m is not
// MIN_EXPR under NaN and signed-zero rules), so the lanes are explicit GCC/Clang vectors of 16
// bytes (one SSE/NEON register; wider ones spill without AVX), two sets for instruction-level
// parallelism. Each lane applies exactly stats_add's select, so the result equals the scalar loop's
// (up to the sign of a zero min/max, which wire_params canonicalizes).
typedef float Floats4 __attribute__((vector_size(16)));
typedef uint32_t Words4 __attribute__((vector_size(16)));

struct LaneStats {
  Floats4 min, max;
  Words4 bad;
  void add(const float* x) {
    Floats4 v;
    std::memcpy(&v, x, sizeof v);
    min = v < min ? v : min;
    max = v > max ? v : max;
    Words4 bits;
    std::memcpy(&bits, &v, sizeof bits);
    bad |= (bits & 0x7f800000u) + 0x00800000u;  // nonfinite_mark, lane-wise
  }
  void merge_into(GroupStats& s) const {
    for (int j = 0; j < 4; ++j) stats_merge(s, GroupStats{min[j], max[j], bad[j]});
  }
};

ECHO_SIMD_CLONES GroupStats group_stats(const float* x, size_t len) {
  const float inf = bits_float(0x7f800000u);
  LaneStats a{{inf, inf, inf, inf}, {-inf, -inf, -inf, -inf}, {0, 0, 0, 0}};
  LaneStats b = a;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    a.add(x + i);
    b.add(x + i + 4);
  }
  GroupStats s = stats_empty();
  a.merge_into(s);
  b.merge_into(s);
  for (; i < len; ++i) stats_add(s, x[i]);
  return s;
}
#else
GroupStats group_stats(const float* x, size_t len) {
  GroupStats s = stats_empty();
  for (size_t i = 0; i < len; ++i) stats_add(s, x[i]);
  return s;
}
#endif

// Codes of x[0, len) into codes[0, len) (one per byte), len <= kChunk.
ECHO_SIMD_CLONES void encode_chunk(const float* x, size_t len, const CodeMap& map, uint8_t* codes) {
  const CodeMap m = map;  // a local copy: the byte stores below may not alias it
  for (size_t i = 0; i < len; ++i) codes[i] = static_cast<uint8_t>(encode_code(x[i], m));
}

void encode_group(const float* x, size_t len, const CodeMap& m, int bits, uint8_t* out) {
  alignas(64) uint8_t codes[kChunk];
  for (size_t begin = 0; begin < len; begin += kChunk) {
    const size_t count = std::min(kChunk, len - begin);
    encode_chunk(x + begin, count, m, codes);
    if (bits == 8) {
      std::memcpy(out + begin, codes, count);
      continue;
    }
    if (count & 1) codes[count] = 0;  // the high nibble of a short group's last byte
    uint8_t* dst = out + begin / 2;
    const size_t num_bytes = (count + 1) / 2;
    for (size_t k = 0; k < num_bytes; ++k) dst[k] = pack_nibbles(codes[2 * k], codes[2 * k + 1]);
  }
}

template <bool kAdd>
void decode_group(const uint8_t* in, size_t len, const DecodeMap& map, int bits, float* out) {
  const DecodeMap d = map;
  if (d.poisoned) {
    std::fill(out, out + len, quant_nan());
    return;
  }
  if (bits == 8) {
    for (size_t i = 0; i < len; ++i) {
      const float v = decode_code(in[i], d);
      out[i] = kAdd ? add_rn(out[i], v) : v;
    }
    return;
  }
  const size_t pairs = len / 2;
  for (size_t k = 0; k < pairs; ++k) {
    const uint8_t b = in[k];
    const float lo = decode_code(b & 0x0fu, d);
    const float hi = decode_code(b >> 4, d);
    out[2 * k] = kAdd ? add_rn(out[2 * k], lo) : lo;
    out[2 * k + 1] = kAdd ? add_rn(out[2 * k + 1], hi) : hi;
  }
  if (len & 1) {
    const float v = decode_code(in[pairs] & 0x0fu, d);
    out[len - 1] = kAdd ? add_rn(out[len - 1], v) : v;
  }
}

template <bool kAdd>
QuantReport decode(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out) {
  validate(spec);
  ECHO_CHECK(n == 0 || (wire != nullptr && out != nullptr), "dequantize of {} values needs non-null buffers", n);
  const WireLayout layout = wire_layout(n, spec);
  const size_t g = static_cast<size_t>(spec.group_size);
  const uint8_t* params = wire + layout.code_bytes;
  QuantReport report;
  for (size_t group_idx = 0; group_idx < layout.num_groups; ++group_idx) {
    const size_t begin = group_idx * g;
    const size_t len = std::min(g, n - begin);
    const WireParams w = load_params(params + group_idx * layout.group_param_bytes, spec.policy);
    const DecodeMap d = decode_map(w, spec.policy, spec.bits);
    if (d.poisoned && report.bad_groups++ == 0) report.first_bad_element = begin;
    decode_group<kAdd>(wire + group_idx * layout.group_code_bytes, len, d, spec.bits, out + begin);
  }
  return report;
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
  const WireLayout layout = wire_layout(n, spec);
  const size_t g = static_cast<size_t>(spec.group_size);
  uint8_t* params = wire + layout.code_bytes;
  QuantReport report;
  for (size_t group_idx = 0; group_idx < layout.num_groups; ++group_idx) {
    const size_t begin = group_idx * g;
    const size_t len = std::min(g, n - begin);
    uint8_t* codes = wire + group_idx * layout.group_code_bytes;
    const WireParams w = wire_params(group_stats(x + begin, len), spec.policy, spec.bits);
    store_params(params + group_idx * layout.group_param_bytes, w, spec.policy);
    if (params_poisoned(w)) {
      if (report.bad_groups++ == 0) report.first_bad_element = begin;
      std::memset(codes, 0, group_code_bytes(len, spec.bits));
      continue;
    }
    encode_group(x + begin, len, code_map(w, spec.policy, spec.bits), spec.bits, codes);
  }
  return report;
}

QuantReport dequantize(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out) {
  return decode<false>(wire, n, spec, out);
}

QuantReport dequantize_add(const uint8_t* wire, size_t n, const QuantSpec& spec, float* acc) {
  return decode<true>(wire, n, spec, acc);
}

}  // namespace echo::comm
