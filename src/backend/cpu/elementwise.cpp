// CPU elementwise helpers the model needs: the residual add and a plain copy.
#include <algorithm>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::cpu {

template <class T>
void add_inplace(T* y, const T* x, int64_t n) {
  ECHO_CHECK(n >= 0, "add_inplace: n {} < 0", n);
  ECHO_CHECK(n == 0 || (y && x), "add_inplace: null buffer");
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

template <class T>
void copy(T* y, const T* x, int64_t n) {
  ECHO_CHECK(n >= 0, "copy: n {} < 0", n);
  ECHO_CHECK(n == 0 || (y && x), "copy: null buffer");
  std::copy(x, x + n, y);
}

#define ECHO_INSTANTIATE_ELEMENTWISE(T)                \
  template void add_inplace<T>(T*, const T*, int64_t); \
  template void copy<T>(T*, const T*, int64_t);
ECHO_INSTANTIATE_ELEMENTWISE(float)
ECHO_INSTANTIATE_ELEMENTWISE(double)
#undef ECHO_INSTANTIATE_ELEMENTWISE

}  // namespace echo::cpu
