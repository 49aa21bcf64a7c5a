// The echo side of the Hugging Face reference tests (qwen3_reference_test at tp = 1,
// qwen3_reference_tp_mpi_test at tp = 2 and 4): the model configurations, the token batches,
// reading echo's log-probabilities, and the tolerances. The reference itself is
// hf_qwen3_reference.h, which knows nothing of echo.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "../support/vector_norms.h"
#include "core/config/config.h"
#include "hf_qwen3_reference.h"
#include "model/qwen3_model.h"
#include "train/hf_config.h"

namespace echo::model::testing {

// ---- tolerances --------------------------------------------------------------------------------
// echo runs in fp32 (unit roundoff 6e-8) and the reference in long double, so these bound fp32
// rounding only: each value is a few hundred roundings deep (dot products of <= 64 terms, norms,
// softmaxes, 2-3 layers) on O(1) activations. Measured at tp = 1, 2 and 4 (all cases): loss
// within 6e-8 relative, final hidden state within 6e-7 of its largest element (max |h| ~ 4-6),
// log-probabilities within 6.2e-6 (they reach -21, where one fp32 ulp is 1.9e-6). The bounds sit
// 8-30x above that; each mutation of the reference listed in qwen3_reference_test.cpp moves some
// case's loss by 1e-3 relative or more.
constexpr double kLossRelTol = 2e-6;     // |loss_echo - loss_ref| / loss_ref
constexpr double kHiddenRelTol = 1e-5;   // max |h_echo - h_ref| / max |h_ref|, final hidden state
constexpr double kLogProbAbsTol = 5e-5;  // max |log p_echo - log p_ref| over the positions and ids

// The weights' seed and the batch shape both tests use (tp = 1 and the MPI test at tp = 2, 4).
constexpr uint64_t kSeed = 20250611;
constexpr int64_t kBatch = 3, kSeq = 7;

// ---- configurations ---------------------------------------------------------------------------

struct ReferenceCase {
  const char* name;
  hf::Qwen3Config config;
  hf::WeightScales scales;
};
// GoogleTest names a failing case by this rather than by its bytes.
inline void PrintTo(const ReferenceCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<ReferenceCase> reference_cases() {
  hf::Qwen3Config base;
  base.vocab_size = 40;
  base.hidden_size = 32;
  base.intermediate_size = 48;
  base.num_hidden_layers = 2;
  base.num_attention_heads = 4;
  base.num_key_value_heads = 2;
  base.head_dim = 8;

  // The released Qwen3 values: rope_theta 1e6, eps 1e-6, tied embeddings (the small models).
  hf::Qwen3Config tied = base;
  tied.rope_theta = 1e6;
  tied.rms_norm_eps = 1e-6;
  tied.tie_word_embeddings = true;
  // transformers' Qwen3Config defaults for theta and tying, with another eps.
  hf::Qwen3Config untied = base;
  untied.rope_theta = 10000;
  untied.rms_norm_eps = 1e-5;
  untied.tie_word_embeddings = false;
  // One kv head for four query heads, head_dim 16 with heads * head_dim != hidden (as
  // Qwen3-0.6B: 16 x 128 heads on hidden 1024), an odd vocabulary, three layers.
  hf::Qwen3Config mqa = base;
  mqa.vocab_size = 37;
  mqa.hidden_size = 24;
  mqa.intermediate_size = 40;
  mqa.num_hidden_layers = 3;
  mqa.num_key_value_heads = 1;
  mqa.head_dim = 16;
  mqa.rope_theta = 10000;
  mqa.rms_norm_eps = 1e-5;
  // Plain multi-head attention (2 / 2), tied, another theta.
  hf::Qwen3Config mha = base;
  mha.num_attention_heads = 2;
  mha.num_key_value_heads = 2;
  mha.head_dim = 12;
  mha.rope_theta = 5e5;
  mha.rms_norm_eps = 1e-5;
  mha.tie_word_embeddings = true;
  // A residual stream of rms ~3e-3 at the first norm: mean(x^2) ~ eps, so rms_norm_eps (1e-5)
  // changes the outputs by tens of percent; in the other cases eps is a 1e-5 effect at most.
  hf::Qwen3Config small = untied;
  hf::WeightScales small_embeddings;
  small_embeddings.embed_std = 3e-3;

  // Eight query heads on four kv heads: the one case tp = 4 divides.
  hf::Qwen3Config wide = untied;
  wide.num_attention_heads = 8;
  wide.num_key_value_heads = 4;
  wide.rope_theta = 2e4;

  return {{"TiedGqa4x2Theta1e6Eps1e6", tied, {}},     {"UntiedGqa8x4Theta2e4", wide, {}},
          {"UntiedGqa4x2Theta1e4Eps1e5", untied, {}}, {"UntiedMqa4x1HeadDim16ThreeLayers", mqa, {}},
          {"TiedMha2x2HeadDim12Theta5e5", mha, {}},   {"UntiedSmallEmbeddingsEpsMatters", small, small_embeddings}};
}

// ---- batches ----------------------------------------------------------------------------------

// `batch` windows of seq + 1 ids. echo's data loader (data/data_loader.h, "Packing"; sample() in
// data/data_loader.cpp) cuts each sample of seq + 1 stream tokens into tokens = its first seq and
// targets = its last seq, every position counted, and Qwen3Model::forward returns the mean
// cross-entropy over the counted targets. Hugging Face given the whole window as input_ids and as
// labels predicts exactly those targets from exactly those prefixes (its last position predicts
// nothing, and by causality it changes no earlier logit): the two losses are one quantity.
struct Windows {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> ids;              // (batch, seq + 1): HF's input_ids and labels
  std::vector<int32_t> tokens, targets;  // (batch, seq): echo's Batch, as the data loader fills it
  Batch view() const { return {tokens.data(), targets.data(), batch, seq}; }
  int64_t positions() const { return batch * seq; }
};

inline Windows random_windows(int64_t batch, int64_t seq, int vocab, uint64_t seed) {
  Windows w{batch, seq, std::vector<int32_t>(batch * (seq + 1)), {}, {}};
  std::mt19937_64 gen(seed);
  for (int32_t& id : w.ids) id = static_cast<int32_t>(gen() % static_cast<uint64_t>(vocab));
  // The vocabulary's last id as an input and as a target (an off-by-one in the row count or the
  // vocab shard bounds would lose it).
  w.ids[1] = vocab - 1;
  w.ids[(batch - 1) * (seq + 1) + seq] = vocab - 1;
  w.ids[seq + 1 + seq / 2] = vocab - 1;
  for (int64_t b = 0; b < batch; ++b) {
    const auto row = w.ids.begin() + b * (seq + 1);
    w.tokens.insert(w.tokens.end(), row, row + seq);
    w.targets.insert(w.targets.end(), row + 1, row + seq + 1);
  }
  return w;
}

// ---- the reference's numbers ------------------------------------------------------------------

struct ReferenceResult {
  double loss = 0;
  std::vector<double> hidden;     // (positions, hidden): before model.norm
  std::vector<double> log_probs;  // (positions, vocab)
};

// The reference on the windows, its rows taken at echo's positions (the first seq of each window).
inline ReferenceResult reference_result(const hf::Qwen3Config& c, const hf::StateDict& sd, const Windows& w) {
  const int64_t hf_seq = w.seq + 1;
  const hf::ForwardOutput out = hf::Qwen3Reference(c, sd).forward(w.ids, w.batch, hf_seq);
  const hf::Matrix log_probs = hf::log_softmax(out.logits);
  ReferenceResult r;
  r.loss = static_cast<double>(hf::causal_lm_loss(out.logits, w.ids, w.batch, hf_seq));
  for (int64_t b = 0; b < w.batch; ++b)
    for (int64_t t = 0; t < w.seq; ++t) {
      for (int64_t i = 0; i < out.hidden.cols; ++i)
        r.hidden.push_back(static_cast<double>(out.hidden.at(b * hf_seq + t, i)));
      for (int64_t v = 0; v < log_probs.cols; ++v)
        r.log_probs.push_back(static_cast<double>(log_probs.at(b * hf_seq + t, v)));
    }
  return r;
}

// ---- echo -------------------------------------------------------------------------------------

// The model section as echo_eval reads it from a Hugging Face folder (train/checkpoint_eval.cpp,
// base_config): config.json through config_from_hf, then the YAML round trip its --set takes.
inline config::ModelConfig echo_model_config(const std::string& hf_dir) {
  return config::parse_config(config::to_yaml(train::config_from_hf(hf_dir)), hf_dir + "/config.json").model;
}

// log softmax(logits)[t] at every position and every id t, read off echo's loss: with one counted
// target the mean cross-entropy is that one term. echo keeps its logits private; this sees them up
// to the per-row constant no softmax sees, through echo's own LM head and cross-entropy.
inline std::vector<double> echo_log_probs(Qwen3Model<float>& model, const Windows& w) {
  const int64_t vocab = model.shape().vocab;
  std::vector<double> out;
  std::vector<int32_t> targets(w.positions(), kIgnoreIndex);
  for (int64_t p = 0; p < w.positions(); ++p) {
    for (int64_t t = 0; t < vocab; ++t) {
      targets[p] = static_cast<int32_t>(t);
      out.push_back(-model.forward({w.tokens.data(), targets.data(), w.batch, w.seq}, false));
    }
    targets[p] = kIgnoreIndex;
  }
  return out;
}

using echo::testing::max_abs;

template <class T>
double max_abs_diff(const std::vector<T>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return a.size() == b.size() ? m : INFINITY;
}

}  // namespace echo::model::testing
