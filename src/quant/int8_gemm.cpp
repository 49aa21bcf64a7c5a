// Exact int8 GEMM: pack, then 4x4 tiles of dot products that GCC vectorizes.
//
// Design: both operands are packed with the contraction index contiguous, op(A) as (m, kp) and
// op(B)^T as (n, kp), kp = k rounded up to 64 (zero padding), rows padded to 4. A is stored
// biased, a + 128 as uint8, so the inner product is the unsigned x signed byte dot product that
// GCC maps to VPDPBUSD under AVX512-VNNI (to widening multiplies and adds on AVX2 / SSE2: slower,
// same result); the bias is removed
// exactly afterwards: sum (a + 128) b = sum a b + 128 sum b, with sum b precomputed per column of
// op(B) and per k block. Every k block of kKc <= 4096 keeps its biased partial within int32
// (4096 * 255 * 128 < 2^31); the corrected partials are the exact ones, bounded by
// k * 128^2 < 2^31. The transposes the backward needs are folded into the packing.
// The kernel body is written once and compiled per ISA through target attributes; the variant
// is chosen at run time from cpuid (GCC's __builtin_cpu_supports), so the binary stays portable.
#include "quant/int8_gemm.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.h"

namespace echo::quant {

namespace {

constexpr int64_t kMr = 4;       // tile rows of op(A)
constexpr int64_t kNr = 4;       // tile rows of op(B)^T
constexpr int64_t kKAlign = 64;  // one zmm of bytes
constexpr int64_t kKc = 4096;    // k block: 8 rows of 4 KiB stay in L1
constexpr int64_t kNc = 64;      // rows of op(B)^T per panel: 64 x 4 KiB = 256 KiB, in L2

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// out[i * 4 + j] = sum_k a[i * ld + k] * b[j * ld + k], k < kc (a multiple of 64).
// NOTE: no intrinsics on purpose: GCC's vectorizer turns this into 16 VPDPBUSD per 64 bytes of k
// under avx512vnni (16 zmm accumulators), and stays correct on any target.
[[gnu::always_inline]] inline void tile_4x4(const uint8_t* __restrict a, const int8_t* __restrict b, int64_t ld,
                                            int64_t kc, int32_t* __restrict out) {
  int32_t s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
  int32_t s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
  const uint8_t *a0 = a, *a1 = a + ld, *a2 = a + 2 * ld, *a3 = a + 3 * ld;
  const int8_t *b0 = b, *b1 = b + ld, *b2 = b + 2 * ld, *b3 = b + 3 * ld;
  for (int64_t k = 0; k < kc; ++k) {
    const int32_t x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
    const int32_t y0 = b0[k], y1 = b1[k], y2 = b2[k], y3 = b3[k];
    s00 += x0 * y0, s01 += x0 * y1, s02 += x0 * y2, s03 += x0 * y3;
    s10 += x1 * y0, s11 += x1 * y1, s12 += x1 * y2, s13 += x1 * y3;
    s20 += x2 * y0, s21 += x2 * y1, s22 += x2 * y2, s23 += x2 * y3;
    s30 += x3 * y0, s31 += x3 * y1, s32 += x3 * y2, s33 += x3 * y3;
  }
  out[0] = s00, out[1] = s01, out[2] = s02, out[3] = s03;
  out[4] = s10, out[5] = s11, out[6] = s12, out[7] = s13;
  out[8] = s20, out[9] = s21, out[10] = s22, out[11] = s23;
  out[12] = s30, out[13] = s31, out[14] = s32, out[15] = s33;
}

using TileFn = void (*)(const uint8_t*, const int8_t*, int64_t, int64_t, int32_t*);

[[gnu::target("avx512f,avx512bw,avx512vl,avx512vnni")]] void tile_avx512_vnni(const uint8_t* a, const int8_t* b,
                                                                             int64_t ld, int64_t kc, int32_t* out) {
  tile_4x4(a, b, ld, kc, out);
}

[[gnu::target("avx2")]] void tile_avx2(const uint8_t* a, const int8_t* b, int64_t ld, int64_t kc, int32_t* out) {
  tile_4x4(a, b, ld, kc, out);
}

void tile_generic(const uint8_t* a, const int8_t* b, int64_t ld, int64_t kc, int32_t* out) {
  tile_4x4(a, b, ld, kc, out);
}

bool cpu_has_avx512_vnni() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

TileFn tile_fn(Int8GemmKernel kernel) {
  switch (kernel) {
    case Int8GemmKernel::avx512_vnni:
      return tile_avx512_vnni;
    case Int8GemmKernel::avx2:
      return tile_avx2;
    case Int8GemmKernel::generic:
      return tile_generic;
    default:
      return tile_fn(int8_gemm_best_kernel());
  }
}

// dst (rows_pad, kp) = src' where src'[r][k] = trans ? src[k * rows + r] : src[r * k_len + k],
// each byte XOR `flip` (0x80 biases int8 to uint8), padding = `flip` (the code 0).
void pack(const int8_t* src, bool trans, int64_t rows, int64_t k_len, int64_t rows_pad, int64_t kp, uint8_t flip,
          uint8_t* dst) {
  const auto* s = reinterpret_cast<const uint8_t*>(src);
  for (int64_t r = 0; r < rows; ++r) std::fill(dst + r * kp + k_len, dst + (r + 1) * kp, flip);
  std::fill(dst + rows * kp, dst + rows_pad * kp, flip);
  if (!trans) {
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* sr = s + r * k_len;
      uint8_t* dr = dst + r * kp;
      for (int64_t k = 0; k < k_len; ++k) dr[k] = sr[k] ^ flip;
    }
    return;
  }
  constexpr int64_t kBlock = 64;  // transpose in 64 x 64 blocks: reads and writes stay in cache
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock)
    for (int64_t k0 = 0; k0 < k_len; k0 += kBlock) {
      const int64_t r1 = std::min(rows, r0 + kBlock), k1 = std::min(k_len, k0 + kBlock);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t k = k0; k < k1; ++k) dst[r * kp + k] = s[k * rows + r] ^ flip;
    }
}

// Adds (first k block: stores) a 4x4 tile minus its bias into C, clipped to the m x n corner.
void store_tile(const int32_t* t, const int32_t* bias, int64_t num_kb, int64_t kb, int64_t i, int64_t j, int64_t m,
                int64_t n, int32_t* c) {
  const int64_t ni = std::min(kMr, m - i), nj = std::min(kNr, n - j);
  int32_t b[kNr];
  for (int64_t jj = 0; jj < nj; ++jj) b[jj] = bias[(j + jj) * num_kb + kb];
  for (int64_t ii = 0; ii < ni; ++ii) {
    int32_t* cr = c + (i + ii) * n + j;
    const int32_t* tr = t + ii * kNr;
    if (kb == 0) {
      for (int64_t jj = 0; jj < nj; ++jj) cr[jj] = tr[jj] - b[jj];
    } else {
      for (int64_t jj = 0; jj < nj; ++jj) cr[jj] += tr[jj] - b[jj];
    }
  }
}

}  // namespace

bool int8_gemm_kernel_supported(Int8GemmKernel kernel) {
  switch (kernel) {
    case Int8GemmKernel::avx512_vnni:
      return cpu_has_avx512_vnni();
    case Int8GemmKernel::avx2:
      return __builtin_cpu_supports("avx2");
    default:
      return true;
  }
}

Int8GemmKernel int8_gemm_best_kernel() {
  if (cpu_has_avx512_vnni()) return Int8GemmKernel::avx512_vnni;
  if (__builtin_cpu_supports("avx2")) return Int8GemmKernel::avx2;
  return Int8GemmKernel::generic;
}

const char* int8_gemm_kernel_name(Int8GemmKernel kernel) {
  switch (kernel) {
    case Int8GemmKernel::avx512_vnni:
      return "avx512_vnni";
    case Int8GemmKernel::avx2:
      return "avx2";
    case Int8GemmKernel::generic:
      return "generic";
    default:
      return int8_gemm_kernel_name(int8_gemm_best_kernel());
  }
}

void gemm_s8s32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const int8_t* a, const int8_t* b,
                int32_t* c, Int8GemmKernel kernel) {
  ECHO_CHECK(m >= 0 && n >= 0 && k >= 0, "int8 gemm sizes must be non-negative, got m={} n={} k={}", m, n, k);
  ECHO_CHECK(k <= kInt8GemmMaxK, "int8 gemm: k = {} exceeds {}, past which int32 sums may overflow", k,
             kInt8GemmMaxK);
  ECHO_CHECK(int8_gemm_kernel_supported(kernel), "int8 gemm kernel {} is not supported by this CPU",
             int8_gemm_kernel_name(kernel));
  if (m == 0 || n == 0) return;
  ECHO_CHECK(c != nullptr && (k == 0 || (a != nullptr && b != nullptr)), "int8 gemm: null operand");
  if (k == 0) {
    std::fill(c, c + m * n, 0);
    return;
  }
  const TileFn tile = tile_fn(kernel);
  const int64_t kp = round_up(k, kKAlign), mp = round_up(m, kMr), np = round_up(n, kNr);
  // op(A) as (mp, kp) biased uint8; op(B)^T as (np, kp) int8 (B (k, n) not transposed needs the transpose).
  // NOTE: new T[] leaves the buffers uninitialized; pack() writes every byte, padding included.
  std::unique_ptr<uint8_t[]> ap(new uint8_t[mp * kp]), bp(new uint8_t[np * kp]);
  pack(a, trans_a, m, k, mp, kp, 0x80, ap.get());
  pack(b, !trans_b, n, k, np, kp, 0x00, bp.get());
  const auto* bs = reinterpret_cast<const int8_t*>(bp.get());

  const int64_t num_kb = (kp + kKc - 1) / kKc;
  std::vector<int32_t> bias(np * num_kb);  // 128 * sum of op(B)[k][j] over block kb: (np, num_kb)
  for (int64_t j = 0; j < np; ++j)
    for (int64_t kb = 0; kb < num_kb; ++kb) {
      int32_t s = 0;
      for (int64_t q = kb * kKc; q < std::min(kp, (kb + 1) * kKc); ++q) s += bs[j * kp + q];
      bias[j * num_kb + kb] = 128 * s;
    }

  int32_t t[kMr * kNr];
  for (int64_t kb = 0; kb < num_kb; ++kb) {
    const int64_t k0 = kb * kKc, kc = std::min(kp, k0 + kKc) - k0;
    for (int64_t j0 = 0; j0 < np; j0 += kNc) {
      const int64_t j1 = std::min(np, j0 + kNc);
      for (int64_t i = 0; i < mp; i += kMr)
        for (int64_t j = j0; j < j1; j += kNr) {
          tile(ap.get() + i * kp + k0, bs + j * kp + k0, kp, kc, t);
          store_tile(t, bias.data(), num_kb, kb, i, j, m, n, c);
        }
    }
  }
}

}  // namespace echo::quant
