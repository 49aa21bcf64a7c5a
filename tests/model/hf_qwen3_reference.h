// An independent Qwen3 forward pass and causal-LM loss in long double, written from Hugging Face
// transformers' modeling_qwen3.py (Qwen3ForCausalLM) and from nothing of echo's: no echo header
// is included here, so a shared mistake cannot hide in a shared helper. Also a random Qwen3 state
// dict in Hugging Face names and layout, and a minimal writer of its own for the folder
// (config.json + model.safetensors), so echo's reader is checked against a second implementation
// of the format too.
//
// What modeling_qwen3.py does, and what this file mirrors:
//   Qwen3Model            h = embed_tokens[input_ids]; each Qwen3DecoderLayer; then norm(h)
//   Qwen3DecoderLayer     h = h + self_attn(input_layernorm(h)); h = h + mlp(post_attention_layernorm(h))
//   Qwen3RMSNorm          weight * x / sqrt(mean(x^2) + eps)
//   Qwen3Attention        q = q_norm(q_proj(x).view(..., heads, head_dim)): per head and BEFORE RoPE;
//                         k likewise with k_norm; v = v_proj(x); apply_rotary_pos_emb(q, k);
//                         repeat_kv: query head h reads kv head h / (heads / kv_heads);
//                         softmax(q k^T * head_dim^-0.5 + causal mask) v; o_proj over the heads
//                         concatenated in order (transpose(1, 2).reshape)
//   Qwen3RotaryEmbedding  inv_freq[i] = 1 / rope_theta^(2i / head_dim) for i < head_dim / 2;
//                         emb = cat(freqs, freqs); x * cos(emb) + rotate_half(x) * sin(emb) with
//                         rotate_half(x) = cat(-x2, x1); positions 0, 1, ... in every sequence
//   Qwen3MLP              down_proj(silu(gate_proj(x)) * up_proj(x))
//   Qwen3ForCausalLM      logits = lm_head(h), lm_head being embed_tokens when tie_word_embeddings
//   ForCausalLMLoss       (transformers/loss/loss_utils.py) labels shifted left by one within each
//                         sequence; mean over labels != -100 of -log softmax(logits)[label]
// NOTE: the math here is exact up to long double rounding. transformers itself computes RMSNorm's
// mean of squares, the attention softmax and the RoPE tables in float32 even in a float64 model
// (it casts to float32 there); that is rounding, not semantics, and is not copied.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace echo::model::testing::hf {

using Real = long double;
constexpr int32_t kIgnoreLabel = -100;  // torch.nn.functional.cross_entropy's ignore_index

// The keys of transformers' Qwen3Config that shape the forward pass.
struct Qwen3Config {
  int vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  double rope_theta = 10000.0, rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
};

// One tensor of a state dict, row-major fp32 (what the F32 file holds); an nn.Linear weight is
// (out_features, in_features).
struct Weight {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
using StateDict = std::map<std::string, Weight>;

// ---- random weights ---------------------------------------------------------------------------

// N(0, 1) by Box-Muller on std::mt19937_64, whose output the C++ standard fixes (that of
// std::normal_distribution it does not), so every standard library draws the same weights.
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : gen_(seed) {}
  double operator()() {
    const double u1 = uniform_open(), u2 = uniform_open();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  double uniform_open() { return (static_cast<double>(gen_() >> 11) + 0.5) * 0x1p-53; }  // in (0, 1)
  std::mt19937_64 gen_;
};

// How large the random weights are. Projections get std 1/sqrt(in_features), so every layer's
// output is O(1) and every path carries signal; norm weights are 1 + 0.1 N(0, 1), so a norm that
// ignored its weight would be visible.
struct WeightScales {
  double embed_std = 0.5;    // the residual stream starts at this size; small values make eps count
  double lm_head_std = 0.5;  // logits ~ lm_head_std * sqrt(hidden): a softmax neither flat nor one-hot
  double norm_spread = 0.1;
};

inline StateDict random_state_dict(const Qwen3Config& c, uint64_t seed, const WeightScales& scales = {}) {
  Gaussian normal(seed);
  StateDict sd;
  auto matrix = [&](const std::string& name, int64_t out, int64_t in, double std) {
    Weight& w = sd[name];
    w.shape = {out, in};
    w.values.resize(static_cast<size_t>(out * in));
    for (float& v : w.values) v = static_cast<float>(std * normal());
  };
  auto projection = [&](const std::string& name, int64_t out, int64_t in) {
    matrix(name, out, in, 1.0 / std::sqrt(static_cast<double>(in)));
  };
  auto norm = [&](const std::string& name, int64_t dim) {
    Weight& w = sd[name];
    w.shape = {dim};
    w.values.resize(static_cast<size_t>(dim));
    for (float& v : w.values) v = static_cast<float>(1.0 + scales.norm_spread * normal());
  };
  const int64_t H = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const int64_t q_dim = int64_t{c.num_attention_heads} * D, kv_dim = int64_t{c.num_key_value_heads} * D;
  matrix("model.embed_tokens.weight", c.vocab_size, H, scales.embed_std);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm.weight", H);
    projection(p + "self_attn.q_proj.weight", q_dim, H);
    projection(p + "self_attn.k_proj.weight", kv_dim, H);
    projection(p + "self_attn.v_proj.weight", kv_dim, H);
    projection(p + "self_attn.o_proj.weight", H, q_dim);
    norm(p + "self_attn.q_norm.weight", D);
    norm(p + "self_attn.k_norm.weight", D);
    norm(p + "post_attention_layernorm.weight", H);
    projection(p + "mlp.gate_proj.weight", F, H);
    projection(p + "mlp.up_proj.weight", F, H);
    projection(p + "mlp.down_proj.weight", H, F);
  }
  norm("model.norm.weight", H);
  // save_pretrained leaves a tied lm_head out of the file.
  if (!c.tie_word_embeddings) matrix("lm_head.weight", c.vocab_size, H, scales.lm_head_std);
  return sd;
}

// ---- the Hugging Face folder ------------------------------------------------------------------

inline nlohmann::json config_json(const Qwen3Config& c) {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", "qwen3"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_hidden_layers", c.num_hidden_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_key_value_heads},
          {"head_dim", c.head_dim},
          {"rope_theta", c.rope_theta},
          {"rms_norm_eps", c.rms_norm_eps},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"rope_scaling", nullptr},
          {"use_sliding_window", false},
          {"max_position_embeddings", 4096},
          {"torch_dtype", "float32"}};
}

// The safetensors format as its specification (the huggingface/safetensors README) states it:
// an 8-byte little-endian header size N, N bytes of JSON {name: {"dtype", "shape",
// "data_offsets": [begin, end)}, "__metadata__": {...}}, then the tensors' raw little-endian
// bytes, offsets counted from the end of the header. The header is padded with spaces to a
// multiple of 8 bytes, as the reference writer pads it.
inline void write_safetensors(const std::string& path, const StateDict& sd) {
  static_assert(std::endian::native == std::endian::little, "the F32 data is written as the host's bytes");
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const auto& [name, w] : sd) {  // std::map: data in the order of the sorted names
    const uint64_t bytes = w.values.size() * sizeof(float);
    header[name] = {
        {"dtype", "F32"}, {"shape", w.shape}, {"data_offsets", nlohmann::json::array({offset, offset + bytes})}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  char size[8];
  for (int i = 0; i < 8; ++i) size[i] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(size, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, w] : sd)
    out.write(reinterpret_cast<const char*>(w.values.data()), static_cast<std::streamsize>(w.values.size() * 4));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

// `dir`/config.json and `dir`/model.safetensors: the folder save_pretrained writes.
inline void write_hf_folder(const std::string& dir, const Qwen3Config& c, const StateDict& sd) {
  std::ofstream config(dir + "/config.json", std::ios::trunc);
  config << config_json(c).dump(2) << "\n";
  config.close();
  if (!config) throw std::runtime_error("cannot write " + dir + "/config.json");
  write_safetensors(dir + "/model.safetensors", sd);
}

// ---- the forward pass -------------------------------------------------------------------------

// Activations: one row per token (batch-major, as input_ids.view(-1)), row-major.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<Real> v;
  Matrix() = default;
  Matrix(int64_t r, int64_t c) : rows(r), cols(c), v(static_cast<size_t>(r * c)) {}
  Real& at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  Real at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

// nn.Linear without bias: y = x W^T, W (out_features, in_features).
inline Matrix linear(const Matrix& x, const Weight& w) {
  if (w.shape.size() != 2 || w.shape[1] != x.cols) throw std::invalid_argument("linear: shape mismatch");
  const int64_t out = w.shape[0], in = w.shape[1];
  Matrix y(x.rows, out);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      Real s = 0;
      for (int64_t i = 0; i < in; ++i) s += x.at(r, i) * static_cast<Real>(w.values[static_cast<size_t>(o * in + i)]);
      y.at(r, o) = s;
    }
  return y;
}

// Qwen3RMSNorm over every run of `dim` consecutive features: dim = cols for the hidden state,
// head_dim for q_norm / k_norm, which HF applies to the (..., heads, head_dim) view.
inline Matrix rms_norm(const Matrix& x, const Weight& w, int64_t dim, Real eps) {
  if (w.shape.size() != 1 || w.shape[0] != dim || x.cols % dim) throw std::invalid_argument("rms_norm: shape mismatch");
  Matrix y(x.rows, x.cols);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t g = 0; g < x.cols; g += dim) {
      Real mean_square = 0;
      for (int64_t i = 0; i < dim; ++i) mean_square += x.at(r, g + i) * x.at(r, g + i);
      mean_square /= dim;
      const Real inv_rms = 1 / std::sqrt(mean_square + eps);
      for (int64_t i = 0; i < dim; ++i) y.at(r, g + i) = static_cast<Real>(w.values[i]) * (x.at(r, g + i) * inv_rms);
    }
  return y;
}

// apply_rotary_pos_emb on x (tokens, heads * head_dim), token r at position positions[r].
inline void apply_rope(Matrix& x, int64_t head_dim, const std::vector<int64_t>& positions, Real theta) {
  const int64_t half = head_dim / 2;
  std::vector<Real> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = 1 / std::pow(theta, static_cast<Real>(2 * i) / head_dim);
  std::vector<Real> head(head_dim), rotated(head_dim);
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t h0 = 0; h0 < x.cols; h0 += head_dim) {
      for (int64_t j = 0; j < head_dim; ++j) head[j] = x.at(r, h0 + j);
      for (int64_t i = 0; i < half; ++i) {  // rotate_half: cat(-x2, x1)
        rotated[i] = -head[half + i];
        rotated[half + i] = head[i];
      }
      for (int64_t j = 0; j < head_dim; ++j) {
        const Real angle = static_cast<Real>(positions[r]) * inv_freq[j % half];  // emb = cat(freqs, freqs)
        x.at(r, h0 + j) = head[j] * std::cos(angle) + rotated[j] * std::sin(angle);
      }
    }
}

// eager_attention_forward under the causal mask, for `batch` sequences of `seq` tokens: q (tokens,
// heads * D), k and v (tokens, kv_heads * D). Returns (tokens, heads * D), the heads in order.
inline Matrix causal_attention(const Matrix& q, const Matrix& k, const Matrix& v, int64_t batch, int64_t seq,
                               int64_t heads, int64_t kv_heads, int64_t D) {
  const int64_t groups = heads / kv_heads;  // num_key_value_groups
  const Real scaling = 1 / std::sqrt(static_cast<Real>(D));
  Matrix out(q.rows, q.cols);
  std::vector<Real> p(seq);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kvh = h / groups;  // repeat_kv repeats each kv head for `groups` query heads in a row
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t qi = b * seq + i;
        Real max_score = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {  // the causal mask: key j <= query i
          Real s = 0;
          for (int64_t d = 0; d < D; ++d) s += q.at(qi, h * D + d) * k.at(b * seq + j, kvh * D + d);
          p[j] = s * scaling;
          max_score = std::max(max_score, p[j]);
        }
        Real total = 0;
        for (int64_t j = 0; j <= i; ++j) total += (p[j] = std::exp(p[j] - max_score));
        for (int64_t d = 0; d < D; ++d) {
          Real acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += p[j] / total * v.at(b * seq + j, kvh * D + d);
          out.at(qi, h * D + d) = acc;
        }
      }
    }
  return out;
}

inline Real silu(Real x) { return x / (1 + std::exp(-x)); }

struct ForwardOutput {
  Matrix hidden;  // the last decoder layer's output, before model.norm: (batch * seq, hidden_size)
  Matrix logits;  // (batch * seq, vocab_size)
};

// Qwen3ForCausalLM.forward without a cache: `input_ids` holds `batch` sequences of `seq` tokens
// with no padding, so position_ids are 0 .. seq-1 in each.
class Qwen3Reference {
 public:
  Qwen3Reference(const Qwen3Config& config, const StateDict& weights) : c_(config), sd_(weights) {}

  ForwardOutput forward(const std::vector<int32_t>& input_ids, int64_t batch, int64_t seq) const {
    const int64_t H = c_.hidden_size, n = batch * seq;
    if (static_cast<int64_t>(input_ids.size()) != n) throw std::invalid_argument("forward: input_ids size");
    const Weight& embed = w("model.embed_tokens.weight");
    Matrix h(n, H);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < H; ++i) h.at(r, i) = embed.values[static_cast<size_t>(input_ids[r] * H + i)];
    std::vector<int64_t> positions(n);
    for (int64_t r = 0; r < n; ++r) positions[r] = r % seq;
    for (int l = 0; l < c_.num_hidden_layers; ++l) decoder_layer(l, h, batch, seq, positions);
    ForwardOutput out;
    out.hidden = h;
    const Matrix normed = rms_norm(h, w("model.norm.weight"), H, c_.rms_norm_eps);
    out.logits = linear(normed, c_.tie_word_embeddings ? embed : w("lm_head.weight"));
    return out;
  }

 private:
  const Weight& w(const std::string& name) const {
    const auto it = sd_.find(name);
    if (it == sd_.end()) throw std::out_of_range("no weight " + name);
    return it->second;
  }

  void decoder_layer(int l, Matrix& h, int64_t batch, int64_t seq, const std::vector<int64_t>& positions) const {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int64_t H = c_.hidden_size, D = c_.head_dim;
    const Real eps = c_.rms_norm_eps;
    // Self-attention block.
    const Matrix x = rms_norm(h, w(p + "input_layernorm.weight"), H, eps);
    Matrix q = rms_norm(linear(x, w(p + "self_attn.q_proj.weight")), w(p + "self_attn.q_norm.weight"), D, eps);
    Matrix k = rms_norm(linear(x, w(p + "self_attn.k_proj.weight")), w(p + "self_attn.k_norm.weight"), D, eps);
    const Matrix v = linear(x, w(p + "self_attn.v_proj.weight"));
    apply_rope(q, D, positions, c_.rope_theta);
    apply_rope(k, D, positions, c_.rope_theta);
    const Matrix attn = causal_attention(q, k, v, batch, seq, c_.num_attention_heads, c_.num_key_value_heads, D);
    add_in_place(h, linear(attn, w(p + "self_attn.o_proj.weight")));
    // MLP block.
    const Matrix y = rms_norm(h, w(p + "post_attention_layernorm.weight"), H, eps);
    const Matrix gate = linear(y, w(p + "mlp.gate_proj.weight"));
    Matrix act = linear(y, w(p + "mlp.up_proj.weight"));
    for (size_t i = 0; i < act.v.size(); ++i) act.v[i] *= silu(gate.v[i]);
    add_in_place(h, linear(act, w(p + "mlp.down_proj.weight")));
  }

  static void add_in_place(Matrix& h, const Matrix& delta) {
    for (size_t i = 0; i < h.v.size(); ++i) h.v[i] += delta.v[i];
  }

  Qwen3Config c_;
  const StateDict& sd_;
};

// log_softmax over each row.
inline Matrix log_softmax(const Matrix& logits) {
  Matrix out(logits.rows, logits.cols);
  for (int64_t r = 0; r < logits.rows; ++r) {
    Real max_logit = -INFINITY, total = 0;
    for (int64_t t = 0; t < logits.cols; ++t) max_logit = std::max(max_logit, logits.at(r, t));
    for (int64_t t = 0; t < logits.cols; ++t) total += std::exp(logits.at(r, t) - max_logit);
    const Real log_total = max_logit + std::log(total);
    for (int64_t t = 0; t < logits.cols; ++t) out.at(r, t) = logits.at(r, t) - log_total;
  }
  return out;
}

// ForCausalLMLoss with its default mean reduction: position t of a sequence predicts labels[t + 1]
// of the same sequence (the last position predicts nothing), -100 labels are left out.
inline Real causal_lm_loss(const Matrix& logits, const std::vector<int32_t>& labels, int64_t batch, int64_t seq) {
  const Matrix log_probs = log_softmax(logits);
  Real total = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t + 1 < seq; ++t) {
      const int32_t label = labels[static_cast<size_t>(b * seq + t + 1)];
      if (label == kIgnoreLabel) continue;
      total -= log_probs.at(b * seq + t, label);
      ++count;
    }
  return total / count;
}

}  // namespace echo::model::testing::hf
