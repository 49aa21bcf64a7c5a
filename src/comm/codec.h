// What travels on the wire in the two-phase all-reduce: a codec turns an fp32 segment into
// bytes and back. Three codecs share one reduce engine: fp32 (exact), bf16 (the 16-bit
// baseline) and the Echo group quantizer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/quant_spec.h"

namespace echo::comm {

class SegmentCodec {
 public:
  virtual ~SegmentCodec() = default;
  virtual size_t bytes(size_t n) const = 0;
  // Segment boundaries fall on multiples of this many elements (the quantizer's group size).
  virtual size_t granularity() const = 0;
  // How the owner's own segment enters the fp32 sum (Echo keeps it in full precision; the
  // 16-bit baseline rounds it like every other value).
  virtual void load_own(const float* x, size_t n, float* acc) const = 0;
  virtual void encode(const float* x, size_t n, uint8_t* out) const = 0;
  // Both decoders return how many entries came out bad (a poisoned group or a non-finite
  // value), so a fault on any rank is seen by every rank that decodes the same bytes.
  virtual size_t decode_add(const uint8_t* in, size_t n, float* acc) const = 0;
  virtual size_t decode(const uint8_t* in, size_t n, float* out) const = 0;
};

class Fp32Codec final : public SegmentCodec {
 public:
  size_t bytes(size_t n) const override { return 4 * n; }
  size_t granularity() const override { return 16; }
  void load_own(const float* x, size_t n, float* acc) const override;
  void encode(const float* x, size_t n, uint8_t* out) const override;
  size_t decode_add(const uint8_t* in, size_t n, float* acc) const override;
  size_t decode(const uint8_t* in, size_t n, float* out) const override;
};

class Bf16Codec final : public SegmentCodec {
 public:
  size_t bytes(size_t n) const override { return 2 * n; }
  size_t granularity() const override { return 32; }
  void load_own(const float* x, size_t n, float* acc) const override;
  void encode(const float* x, size_t n, uint8_t* out) const override;
  size_t decode_add(const uint8_t* in, size_t n, float* acc) const override;
  size_t decode(const uint8_t* in, size_t n, float* out) const override;
};

class QuantCodec final : public SegmentCodec {
 public:
  explicit QuantCodec(const QuantSpec& spec);
  size_t bytes(size_t n) const override;
  size_t granularity() const override { return static_cast<size_t>(spec_.group_size); }
  void load_own(const float* x, size_t n, float* acc) const override;
  void encode(const float* x, size_t n, uint8_t* out) const override;
  size_t decode_add(const uint8_t* in, size_t n, float* acc) const override;
  size_t decode(const uint8_t* in, size_t n, float* out) const override;

 private:
  QuantSpec spec_;
};

}  // namespace echo::comm
