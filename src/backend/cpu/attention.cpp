// CPU causal GQA attention, forward and backward, per (batch, head) on the full (seq, seq)
// score matrix with OpenBLAS GEMMs; the softmax is exact (max-subtracted, masked entries set to
// exactly 0) and its log-sum-exp is saved so the backward recomputes P without a second pass.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::cpu {
namespace {

void check_attention_shape(const char* name, int64_t batch, int64_t seq, int64_t n_q, int64_t n_kv, int64_t d) {
  ECHO_CHECK(batch >= 0 && seq >= 0, "{}: bad shape (batch {}, seq {})", name, batch, seq);
  ECHO_CHECK(n_q > 0 && n_kv > 0 && d > 0, "{}: bad heads (n_q {}, n_kv {}, d {})", name, n_q, n_kv, d);
  ECHO_CHECK(n_q % n_kv == 0, "{}: n_q {} is not a multiple of n_kv {}", name, n_q, n_kv);
}

// One head's views: q-like rows are n_q * d apart, k-like rows n_kv * d apart.
struct HeadView {
  int64_t q_off, kv_off, ld_q, ld_kv, lse_off;
};

HeadView head_view(int64_t b, int64_t h, int64_t seq, int64_t n_q, int64_t n_kv, int64_t d) {
  const int64_t g = h / (n_q / n_kv);
  return {b * seq * n_q * d + h * d, b * seq * n_kv * d + g * d, n_q * d, n_kv * d, (b * n_q + h) * seq};
}

}  // namespace

template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t batch, int64_t seq, int64_t n_q, int64_t n_kv,
                       int64_t d, T* out, T* lse) {
  check_attention_shape("attention_forward", batch, seq, n_q, n_kv, d);
  if (batch == 0 || seq == 0) return;
  ECHO_CHECK(q && k && v && out && lse, "attention_forward: null buffer");
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<T> scores(seq * seq);  // (seq, seq): scaled scores, then probabilities
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < n_q; ++h) {
      const HeadView hv = head_view(b, h, seq, n_q, n_kv, d);
      // S = scale * Q_h K_g^T
      gemm_strided<T>(false, true, seq, seq, d, scale, q + hv.q_off, hv.ld_q, k + hv.kv_off, hv.ld_kv, T(0),
                      scores.data(), seq);
      for (int64_t i = 0; i < seq; ++i) {
        T* row = scores.data() + i * seq;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) m = std::max(m, static_cast<double>(row[j]));
        double l = 0.0;
        for (int64_t j = 0; j <= i; ++j) l += std::exp(static_cast<double>(row[j]) - m);
        const double inv_l = 1.0 / l;
        for (int64_t j = 0; j <= i; ++j) row[j] = static_cast<T>(std::exp(static_cast<double>(row[j]) - m) * inv_l);
        // NOTE: exact zeros above the diagonal, so a later token cannot change an earlier row.
        for (int64_t j = i + 1; j < seq; ++j) row[j] = T(0);
        lse[hv.lse_off + i] = static_cast<T>(m + std::log(l));
      }
      // O_h = P V_g
      gemm_strided<T>(false, false, seq, d, seq, T(1), scores.data(), seq, v + hv.kv_off, hv.ld_kv, T(0),
                      out + hv.q_off, hv.ld_q);
    }
  }
}

// With P = softmax(S), S = scale Q K^T, O = P V and D_i = dO_i . O_i (= sum_j P_ij dP_ij):
//   dP = dO V^T,  dS = P * (dP - D) (elementwise, D broadcast over columns),
//   dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dO.
template <class T>
void attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* out, const T* lse, int64_t batch,
                        int64_t seq, int64_t n_q, int64_t n_kv, int64_t d, T* dq, T* dk, T* dv) {
  check_attention_shape("attention_backward", batch, seq, n_q, n_kv, d);
  if (batch == 0 || seq == 0) return;
  ECHO_CHECK(dout && q && k && v && out && lse && dq && dk && dv, "attention_backward: null buffer");
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
  const int64_t kv_elems = batch * seq * n_kv * d;
  for (int64_t i = 0; i < kv_elems; ++i) dk[i] = T(0);
  for (int64_t i = 0; i < kv_elems; ++i) dv[i] = T(0);
  std::vector<T> probs(seq * seq);    // (seq, seq): P
  std::vector<T> dscores(seq * seq);  // (seq, seq): dP, then scale * dS
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < n_q; ++h) {
      const HeadView hv = head_view(b, h, seq, n_q, n_kv, d);
      const T* qh = q + hv.q_off;
      const T* kh = k + hv.kv_off;
      const T* vh = v + hv.kv_off;
      const T* doh = dout + hv.q_off;
      const T* oh = out + hv.q_off;
      gemm_strided<T>(false, true, seq, seq, d, scale, qh, hv.ld_q, kh, hv.ld_kv, T(0), probs.data(), seq);
      for (int64_t i = 0; i < seq; ++i) {
        T* row = probs.data() + i * seq;
        const double row_lse = static_cast<double>(lse[hv.lse_off + i]);
        for (int64_t j = 0; j <= i; ++j) row[j] = static_cast<T>(std::exp(static_cast<double>(row[j]) - row_lse));
        for (int64_t j = i + 1; j < seq; ++j) row[j] = T(0);
      }
      gemm_strided<T>(false, true, seq, seq, d, T(1), doh, hv.ld_q, vh, hv.ld_kv, T(0), dscores.data(), seq);
      for (int64_t i = 0; i < seq; ++i) {
        double di = 0.0;
        for (int64_t c = 0; c < d; ++c)
          di += static_cast<double>(doh[i * hv.ld_q + c]) * static_cast<double>(oh[i * hv.ld_q + c]);
        const T* p = probs.data() + i * seq;
        T* ds = dscores.data() + i * seq;
        for (int64_t j = 0; j <= i; ++j)
          ds[j] = static_cast<T>(static_cast<double>(p[j]) * (static_cast<double>(ds[j]) - di) * scale);
        for (int64_t j = i + 1; j < seq; ++j) ds[j] = T(0);
      }
      gemm_strided<T>(false, false, seq, d, seq, T(1), dscores.data(), seq, kh, hv.ld_kv, T(0), dq + hv.q_off, hv.ld_q);
      gemm_strided<T>(true, false, seq, d, seq, T(1), dscores.data(), seq, qh, hv.ld_q, T(1), dk + hv.kv_off, hv.ld_kv);
      gemm_strided<T>(true, false, seq, d, seq, T(1), probs.data(), seq, doh, hv.ld_q, T(1), dv + hv.kv_off, hv.ld_kv);
    }
  }
}

#define ECHO_INSTANTIATE_ATTENTION(T)                                                                               \
  template void attention_forward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t, T*, \
                                     T*);                                                                           \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                      int64_t, int64_t, int64_t, T*, T*, T*);
ECHO_INSTANTIATE_ATTENTION(float)
ECHO_INSTANTIATE_ATTENTION(double)
#undef ECHO_INSTANTIATE_ATTENTION

}  // namespace echo::cpu
