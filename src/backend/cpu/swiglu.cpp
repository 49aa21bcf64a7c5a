// CPU SwiGLU activation of the MLP: out = silu(gate) * up, and its backward.
#include <cmath>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::cpu {

template <class T>
void swiglu_forward(const T* gate, const T* up, int64_t n, T* out) {
  ECHO_CHECK(n >= 0, "swiglu_forward: n {} < 0", n);
  ECHO_CHECK(n == 0 || (gate && up && out), "swiglu_forward: null buffer");
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    out[i] = g / (T(1) + std::exp(-g)) * up[i];
  }
}

// silu(g) = g s, s = sigmoid(g);  silu'(g) = s (1 + g (1 - s)).
template <class T>
void swiglu_backward(const T* dout, const T* gate, const T* up, int64_t n, T* dgate, T* dup) {
  ECHO_CHECK(n >= 0, "swiglu_backward: n {} < 0", n);
  ECHO_CHECK(n == 0 || (dout && gate && up && dgate && dup), "swiglu_backward: null buffer");
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    const T s = T(1) / (T(1) + std::exp(-g));
    const T dy = dout[i];
    dgate[i] = dy * up[i] * (s * (T(1) + g * (T(1) - s)));
    dup[i] = dy * g * s;
  }
}

#define ECHO_INSTANTIATE_SWIGLU(T)                                  \
  template void swiglu_forward<T>(const T*, const T*, int64_t, T*); \
  template void swiglu_backward<T>(const T*, const T*, const T*, int64_t, T*, T*);
ECHO_INSTANTIATE_SWIGLU(float)
ECHO_INSTANTIATE_SWIGLU(double)
#undef ECHO_INSTANTIATE_SWIGLU

}  // namespace echo::cpu
