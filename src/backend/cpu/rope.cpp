// CPU rotary position embedding, non-interleaved rotate-half convention (Hugging Face Qwen3):
// element i of a head pairs with element i + head_dim / 2.
#include <cmath>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::cpu {
namespace {

// sign = +1: the forward rotation by +theta; sign = -1: its transpose (rotation by -theta).
template <class T>
void rope_rotate(T* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, double base,
                 double sign, const char* name) {
  ECHO_CHECK(tokens >= 0 && heads >= 0, "{}: bad shape (tokens {}, heads {})", name, tokens, heads);
  ECHO_CHECK(head_dim > 0 && head_dim % 2 == 0, "{}: head_dim {} must be positive and even", name, head_dim);
  ECHO_CHECK(base > 0.0, "{}: base {} must be positive", name, base);
  if (tokens == 0 || heads == 0) return;
  ECHO_CHECK(x != nullptr && positions != nullptr, "{}: null buffer", name);
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(half);  // base^(-2i/d)
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(base, -2.0 * static_cast<double>(i) / head_dim);
  std::vector<double> cos_t(half), sin_t(half);
  for (int64_t t = 0; t < tokens; ++t) {
    const double pos = static_cast<double>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const double theta = pos * inv_freq[i];
      cos_t[i] = std::cos(theta);
      sin_t[i] = sign * std::sin(theta);
    }
    for (int64_t h = 0; h < heads; ++h) {
      T* xh = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(xh[i]);
        const double b = static_cast<double>(xh[i + half]);
        xh[i] = static_cast<T>(a * cos_t[i] - b * sin_t[i]);
        xh[i + half] = static_cast<T>(b * cos_t[i] + a * sin_t[i]);
      }
    }
  }
}

}  // namespace

template <class T>
void rope_forward(T* x, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, double base) {
  rope_rotate(x, positions, tokens, heads, head_dim, base, 1.0, "rope_forward");
}

// The rotation is orthogonal, so its transpose is the rotation by -theta.
template <class T>
void rope_backward(T* dx, const int32_t* positions, int64_t tokens, int64_t heads, int64_t head_dim, double base) {
  rope_rotate(dx, positions, tokens, heads, head_dim, base, -1.0, "rope_backward");
}

#define ECHO_INSTANTIATE_ROPE(T)                                                        \
  template void rope_forward<T>(T*, const int32_t*, int64_t, int64_t, int64_t, double); \
  template void rope_backward<T>(T*, const int32_t*, int64_t, int64_t, int64_t, double);
ECHO_INSTANTIATE_ROPE(float)
ECHO_INSTANTIATE_ROPE(double)
#undef ECHO_INSTANTIATE_ROPE

}  // namespace echo::cpu
