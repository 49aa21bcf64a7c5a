// CPU vocab-parallel embedding: each TP rank holds a contiguous slice of the table's rows and
// contributes zero rows for the tokens it does not hold; the TP all-reduce sums the shards.
#include <algorithm>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::cpu {
namespace {

void check_embedding(const char* name, int64_t n, int64_t vocab_begin, int64_t vocab_local, int64_t hidden) {
  ECHO_CHECK(n >= 0 && hidden > 0, "{}: bad shape (n {}, hidden {})", name, n, hidden);
  ECHO_CHECK(vocab_begin >= 0 && vocab_local >= 0, "{}: bad vocab shard [{}, {} + {})", name, vocab_begin, vocab_begin,
             vocab_local);
}

}  // namespace

template <class T>
void embedding_forward(const int32_t* tokens, int64_t n, const T* table, int64_t vocab_begin, int64_t vocab_local,
                       int64_t hidden, T* out) {
  check_embedding("embedding_forward", n, vocab_begin, vocab_local, hidden);
  if (n == 0) return;
  ECHO_CHECK(tokens && out && (vocab_local == 0 || table), "embedding_forward: null buffer");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    ECHO_CHECK(tokens[i] >= 0, "embedding_forward: token {} at {} is negative", tokens[i], i);
    T* dst = out + i * hidden;
    if (row >= 0 && row < vocab_local) {
      std::copy(table + row * hidden, table + (row + 1) * hidden, dst);
    } else {
      std::fill(dst, dst + hidden, T(0));
    }
  }
}

template <class T>
void embedding_backward(const int32_t* tokens, int64_t n, const T* dout, int64_t vocab_begin, int64_t vocab_local,
                        int64_t hidden, T* dtable_accum) {
  check_embedding("embedding_backward", n, vocab_begin, vocab_local, hidden);
  if (n == 0) return;
  ECHO_CHECK(tokens && dout && (vocab_local == 0 || dtable_accum), "embedding_backward: null buffer");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(tokens[i]) - vocab_begin;
    ECHO_CHECK(tokens[i] >= 0, "embedding_backward: token {} at {} is negative", tokens[i], i);
    if (row < 0 || row >= vocab_local) continue;
    const T* src = dout + i * hidden;
    T* dst = dtable_accum + row * hidden;
    for (int64_t c = 0; c < hidden; ++c) dst[c] += src[c];
  }
}

#define ECHO_INSTANTIATE_EMBEDDING(T)                                                                   \
  template void embedding_forward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, T*); \
  template void embedding_backward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, T*);
ECHO_INSTANTIATE_EMBEDDING(float)
ECHO_INSTANTIATE_EMBEDDING(double)
#undef ECHO_INSTANTIATE_EMBEDDING

}  // namespace echo::cpu
