// The fp32, bf16 and quantizer codecs of the two-phase all-reduce.
#include "comm/codec.h"

#include <cmath>
#include <cstring>

#include "comm/echo/quantize.h"
#include "core/half.h"

namespace echo::comm {

namespace {
// NOTE: a rank whose own segment is empty passes n == 0 with null pointers, and memcpy with a
// null pointer is undefined even for 0 bytes (UBSan reports it), so every copy goes through here.
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

size_t count_non_finite(const float* x, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += !std::isfinite(x[i]);
  return bad;
}
}  // namespace

// ---- fp32 ----------------------------------------------------------------------------------

void Fp32Codec::load_own(const float* x, size_t n, float* acc) const { copy_bytes(acc, x, 4 * n); }

void Fp32Codec::encode(const float* x, size_t n, uint8_t* out) const { copy_bytes(out, x, 4 * n); }

size_t Fp32Codec::decode_add(const uint8_t* in, size_t n, float* acc) const {
  const float* v = reinterpret_cast<const float*>(in);
  for (size_t i = 0; i < n; ++i) acc[i] += v[i];
  return 0;  // a non-finite addend shows up in the final decode
}

size_t Fp32Codec::decode(const uint8_t* in, size_t n, float* out) const {
  copy_bytes(out, in, 4 * n);
  return count_non_finite(out, n);
}

// ---- bf16 ----------------------------------------------------------------------------------

void Bf16Codec::load_own(const float* x, size_t n, float* acc) const {
  for (size_t i = 0; i < n; ++i) acc[i] = round_to_bf16(x[i]);
}

void Bf16Codec::encode(const float* x, size_t n, uint8_t* out) const {
  uint16_t* h = reinterpret_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; ++i) h[i] = float_to_bf16_bits(x[i]);
}

size_t Bf16Codec::decode_add(const uint8_t* in, size_t n, float* acc) const {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(in);
  for (size_t i = 0; i < n; ++i) acc[i] += bf16_bits_to_float(h[i]);
  return 0;
}

size_t Bf16Codec::decode(const uint8_t* in, size_t n, float* out) const {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(in);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(h[i]);
  return count_non_finite(out, n);
}

// ---- group quantizer -------------------------------------------------------------------------

QuantCodec::QuantCodec(const QuantSpec& spec) : spec_(spec) { validate(spec_); }

size_t QuantCodec::bytes(size_t n) const { return wire_bytes(n, spec_); }

void QuantCodec::load_own(const float* x, size_t n, float* acc) const { copy_bytes(acc, x, 4 * n); }

void QuantCodec::encode(const float* x, size_t n, uint8_t* out) const { quantize(x, n, spec_, out); }

size_t QuantCodec::decode_add(const uint8_t* in, size_t n, float* acc) const {
  return dequantize_add(in, n, spec_, acc).bad_groups;
}

size_t QuantCodec::decode(const uint8_t* in, size_t n, float* out) const {
  return dequantize(in, n, spec_, out).bad_groups;
}

}  // namespace echo::comm
