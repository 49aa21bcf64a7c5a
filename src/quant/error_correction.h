// S3R-EC (S3R paper §III-D, docs/design.md §11): the structured part of the known rounding error
// E = ΔQ − G', per example b (seq_len consecutive tokens): E^str_b = r·1^T + 1·c_b^T − m_b·1·1^T,
// the orthogonal projection of E_b onto row-constant plus column-constant matrices, and its
// effect on the two backward products, subtracted after the unchanged int8 GEMMs.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace echo::quant {

struct StructuredError {
  int64_t rows = 0, cols = 0, seq_len = 0;
  std::vector<double> row_mean;    // (rows)  r_t = mean of E[t, :] over all (global) channels
  std::vector<double> col_mean;    // (rows / seq_len, cols)  c_b[h] = mean of E[t, h] over the tokens of b
  std::vector<double> grand_mean;  // (rows / seq_len)  m_b = mean of E_b
  int64_t num_examples() const { return seq_len > 0 ? rows / seq_len : 0; }
};

// e: (rows, cols), rows a multiple of seq_len. For a column-parallel shard, `sum_over_tp` sums
// the row sums (and the channel count) over the TP group, so r and m cover the global channels
// and every shard corrects as the whole layer would; nullptr when e holds every channel.
StructuredError structured_error(const float* e, int64_t rows, int64_t cols, int64_t seq_len,
                                 const std::function<void(std::span<double>)>* sum_over_tp = nullptr);

// out (rows, cols) = E^str (for tests and diagnostics).
void structured_error_matrix(const StructuredError& es, double* out);

// dx (rows, in) -= diag(s_x)^-1 · (E^str · Ŵ) = diag(s_x)^-1 · ((r_t − m_b)·wsum + c_b^T·Ŵ): the
// token term through the column sums wsum = Σ_h Ŵ[h, :] ("W·1_D" in the paper's (in, out)
// orientation), the channel term as c_b^T·Ŵ.
// w_q: (cols, in) = (out, in)  s_x: (rows)
void correct_dx(const StructuredError& es, const int8_t* w_q, const float* s_x, int64_t in, float* dx);

// dw (cols, in) -= diag(s_w)^-1 · (E^str^T · X̂) = diag(s_w)^-1 · (1·u^T + Σ_b c_b·xsum_b^T),
// u = Σ_t (r_t − m_b) X̂[t, :], xsum_b = Σ_{t in b} X̂[t, :].   x_q: (rows, in)  s_w: (cols)
void correct_dw(const StructuredError& es, const int8_t* x_q, const float* s_w, int64_t in, float* dw);

}  // namespace echo::quant
