// ModelConfig + TP layout -> ModelShape, with the divisibility checks of docs/design.md §3.
#include "model/model_shape.h"

#include "core/error.h"

namespace echo::model {

ModelShape make_model_shape(const config::ModelConfig& cfg, int tp, int tp_rank) {
  ECHO_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp, "bad tensor-parallel rank {} of {}", tp_rank, tp);
  ModelShape s;
  s.vocab = cfg.padded_vocab();
  s.hidden = cfg.hidden;
  s.ffn = cfg.ffn;
  s.layers = cfg.layers;
  s.heads = cfg.heads;
  s.kv_heads = cfg.kv_heads;
  s.head_dim = cfg.head_dim;
  s.rope_base = cfg.rope_base;
  s.norm_eps = cfg.norm_eps;
  s.init_std = cfg.init_std;
  s.tie_embeddings = cfg.tie_embeddings;
  s.scale_output_init = cfg.scale_output_init;
  s.tp = tp;
  s.tp_rank = tp_rank;
  const struct {
    const char* key;
    int64_t value;
  } sizes[] = {{"model.hidden", s.hidden},     {"model.ffn", s.ffn},           {"model.layers", s.layers},
               {"model.heads", s.heads},       {"model.kv_heads", s.kv_heads}, {"model.head_dim", s.head_dim},
               {"model.vocab_size", s.vocab}};
  for (const auto& sz : sizes) ECHO_CHECK(sz.value >= 1, "'{}' = {} must be >= 1", sz.key, sz.value);
  ECHO_CHECK(s.head_dim % 2 == 0, "'model.head_dim' = {} must be even (RoPE rotates pairs)", s.head_dim);
  ECHO_CHECK(s.heads % s.kv_heads == 0, "'model.heads' = {} must be a multiple of 'model.kv_heads' = {}", s.heads,
             s.kv_heads);
  const struct {
    const char* key;
    int64_t value;
  } split[] = {{"model.heads", s.heads},
               {"model.kv_heads", s.kv_heads},
               {"model.ffn", s.ffn},
               {"model.vocab_size (padded)", s.vocab}};
  for (const auto& sp : split)
    ECHO_CHECK(sp.value % tp == 0, "'parallel.tp' = {} does not divide '{}' = {}", tp, sp.key, sp.value);
  return s;
}

}  // namespace echo::model
