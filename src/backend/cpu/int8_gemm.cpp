// int8 GEMM through oneDNN.
#include "quant/int8_gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>

#include "core/error.h"

namespace echo::quant {

void gemm_s8s32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const int8_t* a, const int8_t* b,
                int32_t* c) {
  ECHO_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm_s8s32: bad shape m {} n {} k {}", m, n, k);
  ECHO_CHECK(k <= kInt8GemmMaxK, "gemm_s8s32: k = {} could overflow int32 (at most {})", k, kInt8GemmMaxK);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(c, c + m * n, 0);
    return;
  }
  ECHO_CHECK(a && b && c, "gemm_s8s32: null buffer");
  const int32_t no_offset = 0;
  // Row-major leading dimensions of the stored (not the transposed) operands.
  const dnnl_dim_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
  // NOTE: alpha = 1 and beta = 0 keep the int32 result exact (no float scaling on the way out).
  const dnnl_status_t st = dnnl_gemm_s8s8s32(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', 'F', m, n, k, 1.0f, a, lda, 0, b,
                                             ldb, 0, 0.0f, c, n, &no_offset);
  ECHO_CHECK(st == dnnl_success, "oneDNN dnnl_gemm_s8s8s32 failed with status {} (m {} n {} k {})",
             static_cast<int>(st), m, n, k);
}

}  // namespace echo::quant
