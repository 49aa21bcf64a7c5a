// The host quantizer (quantize.cpp: SIMD clones, batched groups, vectorized nibble packing) against
// a plain scalar reference written here from quantizer.h's ECHO_HD functions alone, one element at
// a time: the wire bytes and every decoded float must be bit-identical, for random data with
// special groups mixed in (NaN, ±Inf, fp16 scale overflow, all-zero with signed zeros, constant,
// tiny, one-sided, narrow offset), odd n, short last groups, unaligned input and every supported
// policy, bit width and a range of group sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "comm/echo/quantize.h"
#include "comm/echo/quantizer.h"

namespace echo::comm {
namespace {

// ---- the reference: quantizer.h, element by element -------------------------------------------

std::vector<uint8_t> reference_quantize(const float* x, size_t n, const QuantSpec& spec) {
  const WireLayout layout = wire_layout(n, spec);
  const size_t g = static_cast<size_t>(spec.group_size);
  std::vector<uint8_t> wire(layout.code_bytes + layout.param_bytes, 0);
  for (size_t group_idx = 0; group_idx < layout.num_groups; ++group_idx) {
    const size_t begin = group_idx * g;
    const size_t len = std::min(g, n - begin);
    GroupStats stats = stats_empty();
    for (size_t i = 0; i < len; ++i) stats_add(stats, x[begin + i]);
    const WireParams w = wire_params(stats, spec.policy, spec.bits);
    store_params(wire.data() + layout.code_bytes + group_idx * layout.group_param_bytes, w, spec.policy);
    uint8_t* codes = wire.data() + group_idx * layout.group_code_bytes;
    if (params_poisoned(w)) continue;  // all-zero codes, already there
    const CodeMap m = code_map(w, spec.policy, spec.bits);
    for (size_t i = 0; i < len; ++i) {
      const uint32_t code = encode_code(x[begin + i], m);
      if (spec.bits == 8) {
        codes[i] = static_cast<uint8_t>(code);
      } else if (i % 2 == 0) {
        codes[i / 2] = pack_nibbles(code, 0);
      } else {
        codes[i / 2] = static_cast<uint8_t>(codes[i / 2] | pack_nibbles(0, code));
      }
    }
  }
  return wire;
}

// out[i] = decoded value (add: out[i] + decoded value); a poisoned group writes kQuantNanBits.
size_t reference_decode(const uint8_t* wire, size_t n, const QuantSpec& spec, float* out, bool add) {
  const WireLayout layout = wire_layout(n, spec);
  const size_t g = static_cast<size_t>(spec.group_size);
  size_t bad = 0;
  for (size_t group_idx = 0; group_idx < layout.num_groups; ++group_idx) {
    const size_t begin = group_idx * g;
    const size_t len = std::min(g, n - begin);
    const WireParams w = load_params(wire + layout.code_bytes + group_idx * layout.group_param_bytes, spec.policy);
    const DecodeMap d = decode_map(w, spec.policy, spec.bits);
    bad += d.poisoned ? 1 : 0;
    const uint8_t* codes = wire + group_idx * layout.group_code_bytes;
    for (size_t i = 0; i < len; ++i) {
      if (d.poisoned) {
        out[begin + i] = quant_nan();
        continue;
      }
      const uint32_t code = spec.bits == 8 ? codes[i] : unpack_nibble(codes[i / 2], i);
      const float v = decode_code(code, d);
      out[begin + i] = add ? add_rn(out[begin + i], v) : v;
    }
  }
  return bad;
}

// ---- inputs ---------------------------------------------------------------------------------------

// Random groups of g values, most of them ordinary (a normal sample at a random scale, sometimes
// shifted to one side of zero), every few groups a special one.
std::vector<float> make_input(size_t n, size_t g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind_of(0, 21);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<float> x(n);
  for (size_t begin = 0; begin < n; begin += g) {
    const size_t len = std::min(g, n - begin);
    const int kind = kind_of(rng);
    const float scale = std::pow(10.0f, -6.0f + 10.0f * uniform(rng));
    const size_t at = begin + static_cast<size_t>(uniform(rng) * static_cast<float>(len - 1));
    for (size_t i = begin; i < begin + len; ++i) {
      const float v = scale * normal(rng);
      switch (kind) {
        case 0: x[i] = std::fabs(v); break;                                  // one side of zero
        case 1: x[i] = -std::fabs(v); break;
        case 2: x[i] = 1000.0f + 1e-4f * normal(rng); break;                 // narrow, far from zero
        case 3: x[i] = (i % 3 == 0) ? -0.0f : 0.0f; break;                   // signed zeros only
        case 4: x[i] = -2.5f; break;                                          // constant
        case 5: x[i] = 1e-9f * normal(rng); break;                           // below any fp16 scale
        case 6: x[i] = 1e6f * normal(rng); break;                            // scale overflows fp16
        case 7: x[i] = (i % 2 == 0) ? v : 0.0f; break;                       // many exact zeros
        case 11: x[i] = -std::fabs(v); break;                                // + one tiny positive (below)
        case 12: x[i] = std::fabs(v); break;                                 // + one tiny negative
        case 13: x[i] = 3e38f * std::tanh(normal(rng)); break;              // max - min overflows fp32
        case 14: x[i] = 1e-12f * normal(rng); break;                          // straddles zero, far too small
        case 15: x[i] = 1e-40f * normal(rng); break;                          // fp32 subnormals
        case 16: x[i] = std::fabs(v); break;                                 // + one small negative: 0 < λ < 1
        case 17: x[i] = -1000.0f + 1e-4f * normal(rng); break;
        case 18: x[i] = tiny * static_cast<float>(static_cast<int>(i % 7) - 3); break;  // the range underflows
        default: x[i] = v;
      }
    }
    if (kind == 8) x[at] = nan;  // poisoned groups
    if (kind == 9) x[at] = (at % 2) ? inf : -inf;
    if (kind == 10) x[at] = -0.0f;  // a signed zero in an ordinary group
    // zero-aware: λ rounds to 0 (tiny / s0 underflows) or the blended z to 2^b − 1
    if (kind == 11) x[at] = (begin / g % 2) ? 1e-30f : tiny;
    if (kind == 12) x[at] = (begin / g % 2) ? -1e-30f : -tiny;
    if (kind == 16) x[at] = -0.02f * scale;
  }
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b, size_t* first_diff) {
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    if (ua != ub) {
      *first_diff = i;
      return false;
    }
  }
  return true;
}

// ---- the comparison ---------------------------------------------------------------------------------

void check_against_reference(const QuantSpec& spec, size_t n, uint32_t seed) {
  SCOPED_TRACE("policy " + std::to_string(static_cast<int>(spec.policy)) + ", bits " + std::to_string(spec.bits) +
               ", group " + std::to_string(spec.group_size) + ", n " + std::to_string(n) + ", seed " +
               std::to_string(seed));
  const size_t g = static_cast<size_t>(spec.group_size);
  // One float in front, so the optimized path also reads an input not aligned to 8 bytes.
  std::vector<float> storage = make_input(n + 1, g, seed);
  const float* x = storage.data() + 1;

  const std::vector<uint8_t> expected = reference_quantize(x, n, spec);
  std::vector<uint8_t> wire(wire_bytes(n, spec), 0xa5);  // garbage fill: every byte must be written
  const QuantReport q = quantize(x, n, spec, wire.data());
  ASSERT_EQ(wire, expected);

  // dequantize, and dequantize_add onto a random accumulator with signed zeros in it.
  std::vector<float> out(n, -12345.0f), ref_out(n, -12345.0f);
  const QuantReport d = dequantize(wire.data(), n, spec, out.data());
  const size_t ref_bad = reference_decode(wire.data(), n, spec, ref_out.data(), false);
  size_t at = 0;
  EXPECT_TRUE(same_bits(out, ref_out, &at)) << "dequantize differs first at " << at;
  EXPECT_EQ(d.bad_groups, ref_bad);
  EXPECT_EQ(q.bad_groups, ref_bad);

  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> acc(n);
  for (size_t i = 0; i < n; ++i) acc[i] = (i % 7 == 0) ? -0.0f : normal(rng);
  std::vector<float> ref_acc = acc;
  const QuantReport a = dequantize_add(wire.data(), n, spec, acc.data());
  reference_decode(wire.data(), n, spec, ref_acc.data(), true);
  EXPECT_TRUE(same_bits(acc, ref_acc, &at)) << "dequantize_add differs first at " << at;
  EXPECT_EQ(a.bad_groups, ref_bad);
}

TEST(QuantizerReference, BitIdenticalToTheScalarReference) {
  uint32_t seed = 1;
  for (QuantPolicy policy : {QuantPolicy::symmetric, QuantPolicy::asym_naive, QuantPolicy::asym_zero_aware}) {
    for (int bits : {4, 8}) {
      for (int g : {1, 2, 8, 16, 32, 64, 128, 256, 512, 1024}) {
        const size_t gs = static_cast<size_t>(g);
        // Whole groups, a short odd last group, a single short group, and a few hundred groups.
        for (size_t n : {gs * 7, gs * 5 + gs / 2 + 1, gs / 2 + 1, size_t{1}, size_t{4097}, gs * 300 + 3}) {
          check_against_reference(QuantSpec{policy, bits, g}, n, seed++);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

}  // namespace
}  // namespace echo::comm
