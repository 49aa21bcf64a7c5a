// The shape of a Qwen3 model on one tensor-parallel rank: the config's sizes plus what this
// rank holds (its heads, kv heads, FFN columns and vocab rows). Built once from the config;
// every layer and the TP plan read it.
#pragma once

#include <cstdint>

#include "core/config/config.h"

namespace echo::model {

struct ModelShape {
  int64_t vocab = 0;  // padded vocab: embedding / LM-head rows
  int64_t hidden = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double rope_base = 1e6, norm_eps = 1e-6, init_std = 0.02;
  bool tie_embeddings = true;
  bool scale_output_init = true;  // output projections start with std / sqrt(2L)
  int tp = 1, tp_rank = 0;

  int64_t heads_local() const { return heads / tp; }
  int64_t kv_heads_local() const { return kv_heads / tp; }
  int64_t ffn_local() const { return ffn / tp; }
  int64_t vocab_local() const { return vocab / tp; }
  int64_t vocab_begin() const { return vocab_local() * tp_rank; }
  int64_t q_dim_local() const { return heads_local() * head_dim; }
  int64_t kv_dim_local() const { return kv_heads_local() * head_dim; }
  int num_sites() const { return static_cast<int>(2 * layers); }
};

// Throws echo::Error naming the key and the value when tp does not divide heads, kv_heads,
// ffn or the padded vocab, or a size is not positive.
ModelShape make_model_shape(const config::ModelConfig& cfg, int tp, int tp_rank);

}  // namespace echo::model
