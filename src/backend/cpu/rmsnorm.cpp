// CPU RMSNorm forward and backward (the block norms, the final norm and q_norm / k_norm).
#include <cmath>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::cpu {

template <class T>
void rmsnorm_forward(const T* x, const T* w, int64_t rows, int64_t dim, T eps, T* out, T* rstd) {
  ECHO_CHECK(rows >= 0 && dim > 0, "rmsnorm_forward: bad shape (rows {}, dim {})", rows, dim);
  ECHO_CHECK(eps >= T(0), "rmsnorm_forward: eps {} < 0", static_cast<double>(eps));
  ECHO_CHECK(rows == 0 || (x && w && out && rstd), "rmsnorm_forward: null buffer");
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    T* yr = out + r * dim;
    T sum_sq = T(0);
    for (int64_t i = 0; i < dim; ++i) sum_sq += xr[i] * xr[i];
    const T s = T(1) / std::sqrt(sum_sq / static_cast<T>(dim) + eps);
    rstd[r] = s;
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * s * w[i];
  }
}

// y_i = x_i r w_i with r = (mean(x^2) + eps)^(-1/2), so dr/dx_j = -r^3 x_j / dim and
// dx_j = r w_j dy_j - (r^3 / dim) x_j sum_i(dy_i w_i x_i).
template <class T>
void rmsnorm_backward(const T* dout, const T* x, const T* w, const T* rstd, int64_t rows, int64_t dim, T* dx,
                      T* dw_accum) {
  ECHO_CHECK(rows >= 0 && dim > 0, "rmsnorm_backward: bad shape (rows {}, dim {})", rows, dim);
  ECHO_CHECK(rows == 0 || (dout && x && w && rstd && dx && dw_accum), "rmsnorm_backward: null buffer");
  for (int64_t r = 0; r < rows; ++r) {
    const T* dy = dout + r * dim;
    const T* xr = x + r * dim;
    T* dxr = dx + r * dim;
    const T s = rstd[r];
    T dot = T(0);  // sum_i dy_i w_i x_i
    for (int64_t i = 0; i < dim; ++i) dot += dy[i] * w[i] * xr[i];
    const T coef = s * s * s * dot / static_cast<T>(dim);
    for (int64_t i = 0; i < dim; ++i) {
      dxr[i] = s * w[i] * dy[i] - coef * xr[i];
      dw_accum[i] += dy[i] * xr[i] * s;
    }
  }
}

#define ECHO_INSTANTIATE_RMSNORM(T)                                                  \
  template void rmsnorm_forward<T>(const T*, const T*, int64_t, int64_t, T, T*, T*); \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, T*, T*);
ECHO_INSTANTIATE_RMSNORM(float)
ECHO_INSTANTIATE_RMSNORM(double)
#undef ECHO_INSTANTIATE_RMSNORM

}  // namespace echo::cpu
