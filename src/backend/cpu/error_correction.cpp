// S3R-EC reductions (in double, so the residual sums of the reference stay at rounding level) and
// corrections (rank-(B + 1) fp32 GEMMs, B = examples: small next to the layer's own products).
#include "quant/error_correction.h"

#include <algorithm>

#include "backend/ops.h"
#include "core/error.h"

namespace echo::quant {

StructuredError structured_error(const float* e, int64_t rows, int64_t cols, int64_t seq_len,
                                 const std::function<void(std::span<double>)>* sum_over_tp) {
  ECHO_CHECK(seq_len >= 1 && rows % seq_len == 0, "error correction: {} tokens are not whole examples of {}", rows,
             seq_len);
  StructuredError es;
  es.rows = rows, es.cols = cols, es.seq_len = seq_len;
  const int64_t num_b = rows / seq_len;
  // Row sums plus the channel count, reduced together over TP when the channels are sharded.
  std::vector<double> sums(rows + 1, 0.0);
  es.col_mean.assign(num_b * cols, 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    const float* et = e + t * cols;
    double* cb = es.col_mean.data() + (t / seq_len) * cols;
    double lanes[8] = {};  // independent partial sums: the loop vectorizes without reassociation flags
    int64_t h = 0;
    for (; h + 8 <= cols; h += 8)
      for (int j = 0; j < 8; ++j) lanes[j] += et[h + j];
    for (; h < cols; ++h) lanes[0] += et[h];
    for (h = 0; h < cols; ++h) cb[h] += et[h];
    sums[t] = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  }
  sums[rows] = static_cast<double>(cols);
  if (sum_over_tp && *sum_over_tp) (*sum_over_tp)(std::span<double>(sums));
  const double global_cols = sums[rows];
  ECHO_CHECK(global_cols > 0, "error correction needs at least one channel");
  es.row_mean.resize(rows);
  for (int64_t t = 0; t < rows; ++t) es.row_mean[t] = sums[t] / global_cols;
  es.grand_mean.assign(num_b, 0.0);
  for (int64_t b = 0; b < num_b; ++b) {
    double m = 0.0;
    for (int64_t s = 0; s < seq_len; ++s) m += es.row_mean[b * seq_len + s];
    es.grand_mean[b] = m / static_cast<double>(seq_len);
    for (int64_t h = 0; h < cols; ++h) es.col_mean[b * cols + h] /= static_cast<double>(seq_len);
  }
  return es;
}

void structured_error_matrix(const StructuredError& es, double* out) {
  for (int64_t t = 0; t < es.rows; ++t) {
    const int64_t b = t / es.seq_len;
    const double* cb = es.col_mean.data() + b * es.cols;
    for (int64_t h = 0; h < es.cols; ++h) out[t * es.cols + h] = es.row_mean[t] + cb[h] - es.grand_mean[b];
  }
}

// Both corrections are rank-(B + 1) products, B = examples: one column per example (the channel
// term) plus one for the token term. They run as small fp32 GEMMs through cpu::gemm on the codes
// converted to float (exact: |codes| <= 127, and their sums over <= 2^17 rows stay below 2^24).

void correct_dx(const StructuredError& es, const int8_t* w_q, const float* s_x, int64_t in, float* dx) {
  const int64_t num_b = es.num_examples(), out = es.cols, rows = es.rows, k = num_b + 1;
  // R (B + 1, in) = [c_1^T; ...; c_B^T; 1^T] · Ŵ: the channel terms c_b^T·Ŵ and the column sums of Ŵ.
  std::vector<float> wf(w_q, w_q + out * in), cext(k * out), r(k * in);
  for (int64_t b = 0; b < num_b; ++b)
    for (int64_t h = 0; h < out; ++h) cext[b * out + h] = static_cast<float>(es.col_mean[b * out + h]);
  std::fill(cext.begin() + num_b * out, cext.end(), 1.0f);
  cpu::gemm<float>(false, false, k, in, out, 1.0f, cext.data(), wf.data(), 0.0f, r.data());
  // dx += L·R, L[t, b(t)] = -1/s_x[t], L[t, B] = -(r_t - m_b)/s_x[t].
  std::vector<float> l(rows * k, 0.0f);
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t b = t / es.seq_len;
    const double inv_sx = 1.0 / s_x[t];
    l[t * k + b] = static_cast<float>(-inv_sx);
    l[t * k + num_b] = static_cast<float>(-(es.row_mean[t] - es.grand_mean[b]) * inv_sx);
  }
  cpu::gemm<float>(false, false, rows, in, k, 1.0f, l.data(), r.data(), 1.0f, dx);
}

void correct_dw(const StructuredError& es, const int8_t* x_q, const float* s_w, int64_t in, float* dw) {
  const int64_t num_b = es.num_examples(), out = es.cols, rows = es.rows, k = num_b + 1;
  // N (B + 1, in) = P · X̂ with P[b, t] = [t in b] (xsum_b) and P[B, t] = r_t - m_b (u).
  std::vector<float> xf(x_q, x_q + rows * in), p(k * rows, 0.0f), n(k * in);
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t b = t / es.seq_len;
    p[b * rows + t] = 1.0f;
    p[num_b * rows + t] = static_cast<float>(es.row_mean[t] - es.grand_mean[b]);
  }
  cpu::gemm<float>(false, false, k, in, rows, 1.0f, p.data(), xf.data(), 0.0f, n.data());
  // dw += M·N, M[h, b] = -c_b[h]/s_w[h], M[h, B] = -1/s_w[h].
  std::vector<float> m(out * k);
  for (int64_t h = 0; h < out; ++h) {
    const double inv_sw = 1.0 / s_w[h];
    for (int64_t b = 0; b < num_b; ++b) m[h * k + b] = static_cast<float>(-es.col_mean[b * out + h] * inv_sw);
    m[h * k + num_b] = static_cast<float>(-inv_sw);
  }
  cpu::gemm<float>(false, false, out, in, k, 1.0f, m.data(), n.data(), 1.0f, dw);
}

}  // namespace echo::quant
