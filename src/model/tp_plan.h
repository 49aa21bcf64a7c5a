// The tensor-parallel plan of Qwen3, in one place (Megatron): which weights are column- or
// row-parallel, which are vocab-parallel, which are replicated, and how each starts. Weights
// keep Hugging Face names and orientation (out_features, in_features), so y = x · W^T and a
// checkpoint maps one to one.
//   column: q/k/v, gate/up      rows (output features) split over tp
//   row:    o, down             columns (input features) split over tp
//   vocab:  embed_tokens, lm_head   rows (vocab) split over tp
//   replicated: the RMSNorm weights of the blocks and the final norm (must stay identical)
//   replicated_grad_sum: q_norm, k_norm (each rank uses them on its own heads only, so their
//     gradients are summed over the TP group; forgetting it is a silent bug)
#pragma once

#include <string>
#include <vector>

#include "model/model_shape.h"

namespace echo::model {

enum class ShardKind { replicated, replicated_grad_sum, column, row, vocab };
enum class InitKind { normal, normal_output, ones };

struct ParamSpec {
  std::string name;                 // Hugging Face tensor name
  std::vector<int64_t> full_shape;  // (out, in) for matrices, (dim) for norms
  ShardKind shard = ShardKind::replicated;
  InitKind init = InitKind::normal;
  bool weight_decay = true;         // matrices decay; norms do not

  // The one statement of the shard rule: the dimension split over tp (0 for column and vocab,
  // 1 for row, -1 when replicated) and the size of dimension d on one rank.
  int sharded_dim() const;
  int64_t local_dim(size_t d, int tp) const;
  std::vector<int64_t> local_shape(int tp) const;
  int64_t local_numel(int tp) const;  // no allocation: called per parameter in hot set-up loops
  // Global row-major index of local element `i` on tp rank `rank`.
  int64_t global_index(int64_t i, int tp, int rank) const;
};

// Index of each parameter of one block in the plan.
struct LayerParamIndex {
  size_t input_norm, q, k, v, q_norm, k_norm, o, post_norm, gate, up, down;
};

struct Qwen3Plan {
  std::vector<ParamSpec> params;
  size_t embed = 0;
  size_t lm_head = 0;  // == embed when tied
  size_t final_norm = 0;
  std::vector<LayerParamIndex> layers;
};

Qwen3Plan make_qwen3_plan(const ModelShape& shape);
// Elements of this rank's shard of every parameter (a tied embedding once): the length of the
// flat value and gradient buffers of ParameterSet, and what model/memory_plan.h sizes.
int64_t local_parameter_count(const Qwen3Plan& plan, int tp);

}  // namespace echo::model
