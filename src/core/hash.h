// FNV-1a over bytes: a cheap fingerprint to compare buffers across ranks without moving them
// (equal hashes <=> bitwise-equal buffers, with overwhelming probability).
#pragma once

#include <cstddef>
#include <cstdint>

namespace echo {

inline uint64_t fnv1a(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace echo
