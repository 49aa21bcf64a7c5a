// Initialising a model from a Hugging Face Qwen3 checkpoint (run.init_from, echo_eval on a
// Hugging Face folder): a .safetensors file, a sharded index, or a folder holding either.
#pragma once

#include <string>

#include "dist/world.h"
#include "model/parameters.h"

namespace echo::train {

// Initialises the weights from a Hugging Face Qwen3 checkpoint: `path` is a .safetensors file,
// a model.safetensors.index.json (weight_map over shard files), or a directory holding either (one
// holding both is refused: transformers would load model.safetensors, which may differ).
// F32, BF16, F16 (and F64) tensors are converted to fp32. A tied model (tie_embeddings) may lack
// lm_head.weight, and one present is ignored, as transformers does; an untied model whose files
// have no lm_head.weight is an error. Missing tensors, shape mismatches and unexpected tensors
// (other than rotary_emb.inv_freq buffers) are refused on every rank, naming the tensor and both
// shapes; nothing is modified then. A model.safetensors with trainer/checksums.json beside it (one
// of our step folders) is verified against it first, as load_checkpoint does. Collective over
// world.world (one agreement).
void load_hf_weights(const std::string& path, model::ParameterSet<float>& params, const dist::World& world);

// Single-process form for a parameter set built with tp = 1 (tools, tests); not collective.
// Throws when a parameter is sharded (its rank is unknown here: use the World overload).
void load_hf_weights(const std::string& path, model::ParameterSet<float>& params);

}  // namespace echo::train
