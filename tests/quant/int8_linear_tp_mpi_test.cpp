// The INT8 linear layer under Megatron TP over real MPI ranks (2 and 4): with the TP reductions
// a column shard and a row shard quantize exactly as the unsharded layer does (same scales, Δ,
// thresholds and codes: compared bitwise), so their outputs are the full layer's slices and the
// partial sums add up to it (to fp32 rounding).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "dist/communicator.h"
#include "quant/int8_linear.h"

namespace echo::quant {
namespace {

using config::BackwardRounding;
using config::EcMode;
using config::LinearMode;
using config::ThresholdMode;

constexpr int64_t kRows = 12, kSeq = 4, kIn = 24, kOut = 36;  // in, out divide by 2 and 4

std::vector<float> random_vec(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct Result {
  std::vector<float> y, dx, dw;
  Int8LinearSaved saved;
  Int8BackwardTrace trace;
};

Result run(const Int8LinearConfig& cfg, const LinearContext& ctx, const std::vector<float>& x,
           const std::vector<float>& w, const std::vector<float>& g, int64_t in, int64_t out) {
  Result r;
  r.y.resize(kRows * out);
  linear_forward(cfg, ctx, x.data(), w.data(), kRows, in, out, r.y.data(), r.saved);
  r.dx.assign(kRows * in, 0.0f);
  r.dw.assign(out * in, 0.0f);
  linear_backward(cfg, ctx, g.data(), x.data(), w.data(), r.saved, kRows, in, out, r.dx.data(), false, r.dw.data(),
                  &r.trace);
  return r;
}

void all_sum(std::vector<float>& v) {
  MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double m = 0.0, err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    m = std::max(m, double(std::abs(want[i])));
    err = std::max(err, double(std::abs(got[i] - want[i])));
  }
  EXPECT_LE(err, rtol * m) << what;
}

// Columns [c0, c0 + nc) of a (rows, cols) matrix.
template <class T>
std::vector<T> cols_of(const std::vector<T>& a, int64_t rows, int64_t cols, int64_t c0, int64_t nc) {
  std::vector<T> out(rows * nc);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < nc; ++c) out[r * nc + c] = a[r * cols + c0 + c];
  return out;
}

class Int8LinearTpTest : public ::testing::Test {
 protected:
  const dist::Communicator world = dist::Communicator::borrow(MPI_COMM_WORLD);
  const backend::TpReducer reducer = backend::make_mpi_reducer(world);
  const std::vector<float> x = random_vec(kRows * kIn, 1, 1.0f), w = random_vec(kOut * kIn, 2, 0.05f),
                           g = random_vec(kRows * kOut, 3, 1e-3f);
  const std::vector<Int8LinearConfig> configs = {
      {LinearMode::int8, BackwardRounding::s3r, ThresholdMode::per_token, EcMode::two_way, 11},
      {LinearMode::int8, BackwardRounding::s3r, ThresholdMode::per_example, EcMode::two_way, 12},
      {LinearMode::int8, BackwardRounding::sr_independent, ThresholdMode::per_token, EcMode::dx_only, 13},
      {LinearMode::int8, BackwardRounding::rtne, ThresholdMode::per_token, EcMode::none, 14}};
  std::string where(int c) const {
    return "config " + std::to_string(c) + " on rank " + std::to_string(world.rank()) + " of " +
           std::to_string(world.size());
  }
};

// Column-parallel: W's rows (output channels) sharded; Δ max-reduced, EC row sums sum-reduced.
TEST_F(Int8LinearTpTest, ColumnShardQuantizesLikeTheWholeLayer) {
  const int64_t out = kOut / world.size(), c0 = world.rank() * out;
  for (size_t c = 0; c < configs.size(); ++c) {
    const LinearContext full_ctx{.step = 5, .layer = 3, .site = 4, .seq_len = kSeq};
    const Result ref = run(configs[c], full_ctx, x, w, g, kIn, kOut);
    LinearContext ctx = full_ctx;
    ctx.channel_offset = c0;
    ctx.tp_style = TpStyle::column;
    ctx.tp = &reducer;
    const std::vector<float> w_shard(w.begin() + c0 * kIn, w.begin() + (c0 + out) * kIn);
    Result r = run(configs[c], ctx, x, w_shard, cols_of(g, kRows, kOut, c0, out), kIn, out);
    EXPECT_EQ(r.y, cols_of(ref.y, kRows, kOut, c0, out)) << where(c);
    EXPECT_EQ(r.trace.delta, ref.trace.delta) << where(c);
    EXPECT_EQ(r.trace.q, cols_of(ref.trace.q, kRows, kOut, c0, out)) << where(c);
    const std::vector<float> dw_ref(ref.dw.begin() + c0 * kIn, ref.dw.begin() + (c0 + out) * kIn);
    expect_near_all(r.dw, dw_ref, 1e-6, "dW rows, " + where(c));
    all_sum(r.dx);  // the model's backward block site
    expect_near_all(r.dx, ref.dx, 1e-5, "dX partial sums, " + where(c));
  }
}

// Row-parallel: X's and W's columns sharded, G replicated; s_x and s_w max-reduced in the forward.
TEST_F(Int8LinearTpTest, RowShardQuantizesLikeTheWholeLayer) {
  const int64_t in = kIn / world.size(), i0 = world.rank() * in;
  for (size_t c = 0; c < configs.size(); ++c) {
    const LinearContext full_ctx{.step = 6, .layer = 2, .site = 6, .seq_len = kSeq};
    const Result ref = run(configs[c], full_ctx, x, w, g, kIn, kOut);
    LinearContext ctx = full_ctx;
    ctx.tp_style = TpStyle::row;
    ctx.tp = &reducer;
    Result r = run(configs[c], ctx, cols_of(x, kRows, kIn, i0, in), cols_of(w, kOut, kIn, i0, in), g, in, kOut);
    EXPECT_EQ(r.saved.s_x.to_vector<float>(), ref.saved.s_x.to_vector<float>()) << where(c);
    EXPECT_EQ(r.saved.s_w.to_vector<float>(), ref.saved.s_w.to_vector<float>()) << where(c);
    EXPECT_EQ(r.trace.q, ref.trace.q) << where(c);
    // The int8 products are the full layer's columns exactly; the EC terms go through sgemm, whose
    // blocking may round a column slice differently in the last bit.
    expect_near_all(r.dx, cols_of(ref.dx, kRows, kIn, i0, in), 1e-6, "dX columns, " + where(c));
    expect_near_all(r.dw, cols_of(ref.dw, kOut, kIn, i0, in), 1e-6, "dW columns, " + where(c));
    all_sum(r.y);  // the model's forward block site
    expect_near_all(r.y, ref.y, 1e-5, "Y partial sums, " + where(c));
  }
}

}  // namespace
}  // namespace echo::quant
