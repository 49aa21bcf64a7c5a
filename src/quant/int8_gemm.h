// Exact int8 x int8 -> int32 GEMM on the CPU, the product every INT8 linear layer runs (forward
// X̂·Ŵ^T, backward Q·Ŵ and Q^T·X̂). Same row-major convention as cpu::gemm. Runs on oneDNN's
// dnnl_gemm_s8s8s32 (Debian's libdnnl): measured 2-5x faster than a hand-written VNNI kernel
// on this project's shapes, and bit-identical (integer accumulation is exact).
#pragma once

#include <cstdint>

#include "core/int8_limits.h"

namespace echo::quant {

// |C| <= k * 128^2 must fit in int32 (the config refuses shapes beyond it for linear.mode int8).
using echo::kInt8GemmMaxK;

// C (m, n) = op(A) · op(B), exact int32. op(A) is (m, k): A is (m, k), or (k, m) when trans_a;
// op(B) is (k, n): B is (k, n), or (n, k) when trans_b. Row-major, packed; C is overwritten.
// m, n, k >= 0; k <= kInt8GemmMaxK.
void gemm_s8s32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const int8_t* a, const int8_t* b,
                int32_t* c);

}  // namespace echo::quant
