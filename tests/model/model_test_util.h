// Tiny Qwen3 shapes and batches for the model tests.
#pragma once

#include <random>
#include <vector>

#include "model/model_shape.h"
#include "model/qwen3_model.h"

namespace echo::model::testing {

inline config::ModelConfig tiny_config(int layers = 2, int heads = 4, int kv_heads = 2) {
  config::ModelConfig c;
  c.vocab_size = 32;
  c.vocab_pad_multiple = 8;
  c.hidden = 16;
  c.ffn = 24;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = 8;
  c.rope_base = 10000.0;
  c.norm_eps = 1e-6;
  c.tie_embeddings = false;
  c.init_std = 0.2;  // large enough that every path carries signal in a 2-layer model
  return c;
}

struct TokenBatch {
  std::vector<int32_t> tokens, targets;
  int64_t batch, seq;
  Batch view() const { return {tokens.data(), targets.data(), batch, seq}; }
};

// Random tokens; targets are the next token, with one ignored position.
inline TokenBatch random_batch(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  TokenBatch b{std::vector<int32_t>(batch * seq), std::vector<int32_t>(batch * seq), batch, seq};
  for (auto& t : b.tokens) t = id(gen);
  for (auto& t : b.targets) t = id(gen);
  if (b.targets.size() > 2) b.targets[1] = kIgnoreIndex;
  return b;
}

}  // namespace echo::model::testing
