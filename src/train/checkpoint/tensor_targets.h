// Reading a checkpoint's tensors into this rank's shards: which tensors the model expects (one
// Target per parameter or optimizer moment), the check that a file set holds exactly those, with
// the model's shapes and float dtypes, and the read itself with its value checks. Shared by the
// resume (checkpoint.cpp) and the Hugging Face initialisation (hf_weights.cpp).
#pragma once

#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/parameters.h"
#include "train/adamw.h"
#include "train/checkpoint/safetensors.h"

namespace echo::train::ckpt {

// The model's shape as its parameters describe it (what config.json and a shape check need).
struct ShapeSummary {
  int64_t vocab = 0, hidden = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool tie_embeddings = true;
};
ShapeSummary summarize(const model::ParameterSet<float>& params);

// Each parameter's shard (and its optimizer moments, when opt is given) must be its share of the
// full tensor at this tp; a mismatch is a caller bug (parameters built for another tp).
void check_shards(const model::ParameterSet<float>& params, const AdamW* opt, int tp);

// One destination: the full tensor `name` of spec's shape, read into `out` (this rank's shard).
struct Target {
  std::string name;
  const model::ParamSpec* spec;
  std::span<float> out;
  // A device tensor is read through a host copy (`staged`) and then copied to `stage_to`.
  Tensor* stage_to = nullptr;
  Tensor staged;
};

// The target `name` of spec's shape, read into dest (host or device).
Target make_target(std::string name, const model::ParamSpec* spec, Tensor& dest);
// One target per parameter, under its Hugging Face name.
std::vector<Target> param_targets(model::ParameterSet<float>& params);

using TensorFiles = std::map<std::string, const SafetensorsFile*>;  // tensor name -> file holding it
TensorFiles index_of(const SafetensorsFile& file);

// Checks that every target is present with its shape and a float dtype and that the files hold
// nothing else (except names in `ignored`); throws an echo::InputError naming the first problem
// and counting the rest. `source` names the files in messages.
void check_targets(const TensorFiles& files, const std::vector<Target>& targets, const std::set<std::string>& ignored,
                   const std::string& source);

// Reads every target's shard of this rank; returns "" or the first problem (a read error, or a
// value the tensor cannot hold), so the caller can agree on it across ranks before any throws.
std::string read_targets(const TensorFiles& files, const std::vector<Target>& targets, int tp, int tp_rank);

}  // namespace echo::train::ckpt
