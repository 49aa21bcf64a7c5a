// Exact int8 x int8 -> int32 GEMM on the CPU, the product every INT8 linear layer runs (forward
// X̂·Ŵ^T, backward Q·Ŵ and Q^T·X̂). Same row-major convention as cpu::gemm.
#pragma once

#include <cstdint>

namespace echo::quant {

// Which compiled variant runs. All give identical results (integer arithmetic is exact); they
// differ in speed. `automatic` takes the best one the CPU supports.
enum class Int8GemmKernel : uint8_t { automatic, avx512_vnni, avx2, generic };

// |C| <= k * 128^2 must fit in int32.
constexpr int64_t kInt8GemmMaxK = 131071;

// C (m, n) = op(A) · op(B), exact int32. op(A) is (m, k): A is (m, k), or (k, m) when trans_a;
// op(B) is (k, n): B is (k, n), or (n, k) when trans_b. Row-major, packed; C is overwritten.
// m, n, k >= 0; k <= kInt8GemmMaxK. Single-threaded (one rank per core, as the CPU backend runs).
void gemm_s8s32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const int8_t* a, const int8_t* b,
                int32_t* c, Int8GemmKernel kernel = Int8GemmKernel::automatic);

bool int8_gemm_kernel_supported(Int8GemmKernel kernel);
Int8GemmKernel int8_gemm_best_kernel();
const char* int8_gemm_kernel_name(Int8GemmKernel kernel);

}  // namespace echo::quant
