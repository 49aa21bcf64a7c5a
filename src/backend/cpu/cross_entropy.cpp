// CPU vocab-parallel cross-entropy (Megatron's VocabParallelCrossEntropy): each TP rank holds a
// slice of the vocab columns; the row max, the sum of exp and the target logit are combined
// exactly across the group through a TpReducer, so the op itself has no MPI in it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::cpu {

int64_t count_targets(const int32_t* targets, int64_t tokens, int32_t ignore_index) {
  ECHO_CHECK(tokens >= 0, "count_targets: tokens {} < 0", tokens);
  ECHO_CHECK(tokens == 0 || targets, "count_targets: null buffer");
  return std::count_if(targets, targets + tokens, [&](int32_t t) { return t != ignore_index; });
}

namespace {

void check_cross_entropy(const char* name, const int32_t* targets, int64_t tokens, int64_t vocab_begin,
                         int64_t vocab_local, int32_t ignore_index) {
  ECHO_CHECK(tokens >= 0, "{}: tokens {} < 0", name, tokens);
  ECHO_CHECK(vocab_begin >= 0 && vocab_local > 0, "{}: bad vocab shard [{}, {} + {})", name, vocab_begin, vocab_begin,
             vocab_local);
  for (int64_t t = 0; t < tokens; ++t)
    ECHO_CHECK(targets[t] == ignore_index || targets[t] >= 0, "{}: target {} at {} is negative (ignore_index {})", name,
               targets[t], t, ignore_index);
}

}  // namespace

// NOTE: every rank of the TP group must reach both reducer calls (they are collectives), so the
// checks that can fail after the first call depend only on reduced values, identical on all ranks.
template <class T>
double cross_entropy_forward(const T* logits, const int32_t* targets, int64_t tokens, int64_t vocab_begin,
                             int64_t vocab_local, int32_t ignore_index, const TpReducer& reducer, T* lse) {
  ECHO_CHECK(reducer.max && reducer.sum, "cross_entropy_forward: reducer without max / sum");
  ECHO_CHECK(tokens == 0 || (logits && targets && lse), "cross_entropy_forward: null buffer");
  check_cross_entropy("cross_entropy_forward", targets, tokens, vocab_begin, vocab_local, ignore_index);
  const int64_t vocab_end = vocab_begin + vocab_local;

  std::vector<double> row_max(tokens, -std::numeric_limits<double>::infinity());  // (tokens)
  for (int64_t t = 0; t < tokens; ++t) {
    const T* row = logits + t * vocab_local;
    for (int64_t j = 0; j < vocab_local; ++j) row_max[t] = std::max(row_max[t], static_cast<double>(row[j]));
  }
  reducer.max(row_max);

  // One sum reduction of three (tokens) blocks: sum of exp(logit - max), the target logit (only
  // its owner contributes), and the number of owners (must be exactly 1 for a counted token).
  std::vector<double> sums(3 * tokens, 0.0);
  double* sum_exp = sums.data();
  double* target_logit = sums.data() + tokens;
  double* owners = sums.data() + 2 * tokens;
  for (int64_t t = 0; t < tokens; ++t) {
    const T* row = logits + t * vocab_local;
    double s = 0.0;
    for (int64_t j = 0; j < vocab_local; ++j) s += std::exp(static_cast<double>(row[j]) - row_max[t]);
    sum_exp[t] = s;
    const int64_t target = targets[t];
    if (targets[t] != ignore_index && target >= vocab_begin && target < vocab_end) {
      target_logit[t] = static_cast<double>(row[target - vocab_begin]);
      owners[t] = 1.0;
    }
  }
  reducer.sum(sums);

  double loss = 0.0;
  int64_t count = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const double row_lse = row_max[t] + std::log(sum_exp[t]);
    lse[t] = static_cast<T>(row_lse);
    if (targets[t] == ignore_index) continue;
    ECHO_CHECK(owners[t] == 1.0, "cross_entropy_forward: target {} at {} is held by {} vocab shards, not 1", targets[t],
               t, owners[t]);
    loss += row_lse - target_logit[t];
    ++count;
  }
  return count > 0 ? loss / static_cast<double>(count) : 0.0;
}

template <class T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, int64_t tokens, int64_t vocab_begin,
                            int64_t vocab_local, int32_t ignore_index, int64_t count, T dloss, T* dlogits) {
  ECHO_CHECK(tokens == 0 || (logits && targets && lse && dlogits), "cross_entropy_backward: null buffer");
  check_cross_entropy("cross_entropy_backward", targets, tokens, vocab_begin, vocab_local, ignore_index);
  // count may exceed this call's counted tokens (a mean over several micro-batches), never fall short.
  const int64_t local_count = count_targets(targets, tokens, ignore_index);
  ECHO_CHECK(count >= local_count, "cross_entropy_backward: count {} < {} counted targets", count, local_count);
  const double scale = count > 0 ? static_cast<double>(dloss) / static_cast<double>(count) : 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    const T* row = logits + t * vocab_local;
    T* drow = dlogits + t * vocab_local;
    if (targets[t] == ignore_index) {
      std::fill(drow, drow + vocab_local, T(0));
      continue;
    }
    const double row_lse = static_cast<double>(lse[t]);
    for (int64_t j = 0; j < vocab_local; ++j)
      drow[j] = static_cast<T>(std::exp(static_cast<double>(row[j]) - row_lse) * scale);
    const int64_t local_target = static_cast<int64_t>(targets[t]) - vocab_begin;
    if (local_target >= 0 && local_target < vocab_local)
      drow[local_target] = static_cast<T>((std::exp(static_cast<double>(row[local_target]) - row_lse) - 1.0) * scale);
  }
}

#define ECHO_INSTANTIATE_CROSS_ENTROPY(T)                                                                         \
  template double cross_entropy_forward<T>(const T*, const int32_t*, int64_t, int64_t, int64_t, int32_t,          \
                                           const TpReducer&, T*);                                                 \
  template void cross_entropy_backward<T>(const T*, const int32_t*, const T*, int64_t, int64_t, int64_t, int32_t, \
                                          int64_t, T, T*);
ECHO_INSTANTIATE_CROSS_ENTROPY(float)
ECHO_INSTANTIATE_CROSS_ENTROPY(double)
#undef ECHO_INSTANTIATE_CROSS_ENTROPY

}  // namespace echo::cpu
