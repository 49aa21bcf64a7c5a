// The Qwen3 parameter list and each parameter's shard rule.
#include "model/tp_plan.h"

#include <fmt/format.h>

#include "core/error.h"

namespace echo::model {

int ParamSpec::sharded_dim() const {
  switch (shard) {
    case ShardKind::column:
    case ShardKind::vocab:
      return 0;  // whole rows (output features or vocabulary entries)
    case ShardKind::row:
      return 1;  // whole columns (input features)
    default:
      return -1;
  }
}

int64_t ParamSpec::local_dim(size_t d, int tp) const {
  return static_cast<int>(d) == sharded_dim() ? full_shape[d] / tp : full_shape[d];
}

std::vector<int64_t> ParamSpec::local_shape(int tp) const {
  std::vector<int64_t> s(full_shape.size());
  for (size_t d = 0; d < s.size(); ++d) s[d] = local_dim(d, tp);
  return s;
}

int64_t ParamSpec::local_numel(int tp) const {
  int64_t n = 1;
  for (size_t d = 0; d < full_shape.size(); ++d) n *= local_dim(d, tp);
  return n;
}

// Called once per element (weight init, checkpoint scatter and gather): plain arithmetic, no
// temporary shape vectors.
int64_t ParamSpec::global_index(int64_t i, int tp, int rank) const {
  switch (sharded_dim()) {
    case 0:  // whole rows: the shard is one contiguous block
      return i + rank * local_numel(tp);
    case 1: {  // a block of columns of every row (matrices only)
      const int64_t local_cols = local_dim(1, tp);
      const int64_t row = i / local_cols, col = i % local_cols;
      return row * full_shape[1] + rank * local_cols + col;
    }
    default:
      return i;
  }
}

Qwen3Plan make_qwen3_plan(const ModelShape& s) {
  Qwen3Plan plan;
  auto add = [&](std::string name, std::vector<int64_t> shape, ShardKind shard, InitKind init) {
    const bool is_norm = init == InitKind::ones;
    plan.params.push_back({std::move(name), std::move(shape), shard, init, !is_norm});
    return plan.params.size() - 1;
  };
  const int64_t H = s.hidden, D = s.head_dim;
  plan.embed = add("model.embed_tokens.weight", {s.vocab, H}, ShardKind::vocab, InitKind::normal);
  plan.params[plan.embed].weight_decay = false;  // embeddings do not decay (docs/design.md §12)
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    LayerParamIndex li;
    li.input_norm = add(p + "input_layernorm.weight", {H}, ShardKind::replicated, InitKind::ones);
    li.q = add(p + "self_attn.q_proj.weight", {s.heads * D, H}, ShardKind::column, InitKind::normal);
    li.k = add(p + "self_attn.k_proj.weight", {s.kv_heads * D, H}, ShardKind::column, InitKind::normal);
    li.v = add(p + "self_attn.v_proj.weight", {s.kv_heads * D, H}, ShardKind::column, InitKind::normal);
    li.q_norm = add(p + "self_attn.q_norm.weight", {D}, ShardKind::replicated_grad_sum, InitKind::ones);
    li.k_norm = add(p + "self_attn.k_norm.weight", {D}, ShardKind::replicated_grad_sum, InitKind::ones);
    li.o = add(p + "self_attn.o_proj.weight", {H, s.heads * D}, ShardKind::row, InitKind::normal_output);
    li.post_norm = add(p + "post_attention_layernorm.weight", {H}, ShardKind::replicated, InitKind::ones);
    li.gate = add(p + "mlp.gate_proj.weight", {s.ffn, H}, ShardKind::column, InitKind::normal);
    li.up = add(p + "mlp.up_proj.weight", {s.ffn, H}, ShardKind::column, InitKind::normal);
    li.down = add(p + "mlp.down_proj.weight", {H, s.ffn}, ShardKind::row, InitKind::normal_output);
    plan.layers.push_back(li);
  }
  plan.final_norm = add("model.norm.weight", {H}, ShardKind::replicated, InitKind::ones);
  plan.lm_head = s.tie_embeddings ? plan.embed : add("lm_head.weight", {s.vocab, H}, ShardKind::vocab, InitKind::normal);
  return plan;
}

int64_t local_parameter_count(const Qwen3Plan& plan, int tp) {
  int64_t total = 0;
  for (const auto& spec : plan.params) total += spec.local_numel(tp);
  return total;
}

}  // namespace echo::model
