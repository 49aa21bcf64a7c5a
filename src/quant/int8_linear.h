// The linear layer of `linear.mode` (docs/design.md §11) on the CPU, in the Hugging Face
// orientation the model uses: Y (rows, out) = X (rows, in) · W^T, W (out, in).
//   bf16: plain fp32 GEMMs through cpu::gemm (the baseline; bf16 on the GPU).
//   int8: forward RTNE per-token / per-output-channel; backward G' = diag(s_x)·G·diag(s_w),
//         Δ = max|G'|/127, Q = codes of G'/Δ (rtne | sr_independent | s3r), computed once for
//         dX = diag(s_x)^-1·(Δ·Q·Ŵ) and dW = diag(s_w)^-1·(Δ·Q^T·X̂); S3R-EC subtracts the
//         structured error from dX (dx_only, two_way) and dW (two_way).
// NOTE: the S3R paper writes W as (in, out); in our orientation s_w scales the ROWS of W and dW (output
// channels), so dW's rescaling is on the left: diag(s_w)^-1 · (Q^T·X̂).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/tp_reducer.h"
#include "core/tensor.h"
#include "core/config/config.h"
#include "quant/s3r_math.h"

namespace echo::quant {

struct Int8LinearConfig {
  config::LinearMode mode = config::LinearMode::int8;
  config::BackwardRounding rounding = config::BackwardRounding::s3r;
  config::ThresholdMode thresholds = config::ThresholdMode::per_token;  // s3r only; sr_independent is independent
  config::EcMode ec = config::EcMode::two_way;
  uint64_t seed = 0;  // the run seed: the Philox key of every threshold

  static Int8LinearConfig from(const config::LinearConfig& c, uint64_t seed) {
    return {c.mode, c.backward_rounding, c.thresholds, c.ec, seed};
  }
  bool stochastic() const { return rounding != config::BackwardRounding::rtne; }
  ThresholdSharing sharing() const;
};

// How a shard's scales and error means become the whole layer's (Megatron TP, docs/design.md §3).
//   none:   the call holds the whole layer (tp = 1), or shard-local scales are wanted.
//   column: X replicated, W's rows (output channels) sharded: Δ is max-reduced and the EC row
//           sums are sum-reduced over TP; set channel_offset = tp_rank * out.
//   row:    X's and W's columns (input features) sharded, G replicated: s_x and s_w are
//           max-reduced over TP in the forward, after which G', Q and E agree on every rank.
// With the reduction every shard quantizes exactly as the unsharded layer does (same codes).
enum class TpStyle : uint8_t { none, column, row };

// Where a call sits: the Philox counter fields and the offsets that make its indices global.
struct LinearContext {
  uint32_t step = 0;
  uint32_t layer = 0;          // < 2^24
  uint32_t site = 0;           // < 256: which projection of the layer (q, k, v, o, gate, up, down, ...)
  int64_t token_offset = 0;    // global index of local row 0 among the step's tokens (DP rank, micro-batch)
  int64_t channel_offset = 0;  // global index of local output channel 0 (column shard)
  int64_t seq_len = 0;         // tokens per example (rows are whole examples); needed by per_example and EC
  TpStyle tp_style = TpStyle::none;
  const backend::TpReducer* tp = nullptr;  // required unless tp_style is none
};

// What the int8 forward keeps for backward (undefined tensors in bf16 mode), on the device of
// the call's operands.
struct Int8LinearSaved {
  int64_t rows = 0, in = 0, out = 0;
  Tensor x_q;  // i8 (rows, in)  X̂
  Tensor s_x;  // f32 (rows)
  Tensor w_q;  // i8 (out, in)  Ŵ
  Tensor s_w;  // f32 (out)
};

// Device memory one INT8 projection needs beyond its saved operands (model/memory_plan.h):
// `transient`, freed when its forward or backward returns (the larger of the two), and `kept`,
// held by the backend afterwards for reuse (the largest over all calls counts once).
struct Int8LinearScratch {
  size_t transient = 0;
  size_t kept = 0;
};

// The bytes of the four tensors of Int8LinearSaved for (rows, in, out).
constexpr size_t int8_saved_bytes(int64_t rows, int64_t in, int64_t out) {
  return static_cast<size_t>(rows * in + out * in) + 4 * static_cast<size_t>(rows + out);
}

// Seconds spent, accumulated over calls (for the benchmark).
struct LinearTimes {
  double quantize = 0;  // scales, RTNE, G', thresholds and rounding
  double gemm = 0;      // int8 or fp32 GEMMs and their rescaling
  double ec = 0;        // structured error and its corrections
};

// Optional view into a backward (tests, diagnostics).
struct Int8BackwardTrace {
  bool keep_tensors = true;  // copy G', Q and E below
  float g_amax = 0, delta = 0;
  std::vector<float> g_scaled;  // (rows, out)  G'
  std::vector<int8_t> q;        // (rows, out)  Q
  std::vector<float> e;         // (rows, out)  E = ΔQ − G'
  LinearTimes times;
};

// y (rows, out) = x (rows, in) · W^T, w: (out, in). int8: fills `saved`.
void linear_forward(const Int8LinearConfig& cfg, const LinearContext& ctx, const float* x, const float* w,
                    int64_t rows, int64_t in, int64_t out, float* y, Int8LinearSaved& saved,
                    LinearTimes* times = nullptr);

// dx (rows, in) (+)= dL/dX and dw_accum (out, in) += dL/dW for dy = dL/dY (rows, out), as the
// model's linear_dx / linear_dw do. Either output may be null (skipped). x and w are the
// forward's operands (read in bf16 mode only; int8 reads `saved`).
void linear_backward(const Int8LinearConfig& cfg, const LinearContext& ctx, const float* dy, const float* x,
                     const float* w, const Int8LinearSaved& saved, int64_t rows, int64_t in, int64_t out, float* dx,
                     bool accumulate_dx, float* dw_accum, Int8BackwardTrace* trace = nullptr);

}  // namespace echo::quant
