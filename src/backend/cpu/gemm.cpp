// CPU GEMM: row-major C = alpha * op(A) * op(B) + beta * C through OpenBLAS (cblas_sgemm /
// cblas_dgemm); the only matrix product in the CPU backend.
#include <cblas.h>

#include <algorithm>
#include <climits>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::cpu {
namespace {

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a, int lda,
               const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <class T>
void gemm_strided(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                  const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  ECHO_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm: negative dimension (m {}, n {}, k {})", m, n, k);
  // NOTE: this OpenBLAS takes 32-bit ints (blasint); larger problems must be split by the caller.
  ECHO_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX,
             "gemm: dimension over INT_MAX (m {}, n {}, k {})", m, n, k);
  if (m == 0 || n == 0) return;
  const int64_t a_cols = trans_a ? m : k;  // A as stored: (m, k), or (k, m) when trans_a
  const int64_t b_cols = trans_b ? k : n;  // B as stored: (k, n), or (n, k) when trans_b
  ECHO_CHECK(lda >= std::max<int64_t>(1, a_cols), "gemm: lda {} < columns of A {}", lda, a_cols);
  ECHO_CHECK(ldb >= std::max<int64_t>(1, b_cols), "gemm: ldb {} < columns of B {}", ldb, b_cols);
  ECHO_CHECK(ldc >= n, "gemm: ldc {} < n {}", ldc, n);
  ECHO_CHECK(c != nullptr && (k == 0 || (a != nullptr && b != nullptr)), "gemm: null buffer");
  blas_gemm(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
            static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
            c, static_cast<int>(ldc));
}

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, const T* b, T beta, T* c) {
  // Packed storage; a zero-width operand still needs a leading dimension >= 1 for BLAS.
  const int64_t lda = std::max<int64_t>(1, trans_a ? m : k);
  const int64_t ldb = std::max<int64_t>(1, trans_b ? k : n);
  gemm_strided(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, std::max<int64_t>(1, n));
}

#define ECHO_INSTANTIATE_GEMM(T)                                                                                       \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, const T*, T, T*);                          \
  template void gemm_strided<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T, T*, \
                                int64_t);
ECHO_INSTANTIATE_GEMM(float)
ECHO_INSTANTIATE_GEMM(double)
#undef ECHO_INSTANTIATE_GEMM

}  // namespace echo::cpu
