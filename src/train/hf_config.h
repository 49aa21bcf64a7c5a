// What echo_eval reads from a Hugging Face Qwen3 folder beside its weights: the model section of
// config.json, and the EOS id the data loader packs between documents; and echo_train's check of
// that config.json against its own when it starts from the folder (run.init_from).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/config/config.h"

namespace echo::train {

// The folder of `weights_path` (the folder itself, or the one holding a .safetensors/.index.json).
std::string hf_folder_of(const std::string& weights_path);

// The model section of the folder's config.json over echo's defaults (data.eos_id left alone:
// see hf_eos_id). Throws InputError naming the file for a missing or malformed one.
config::Config config_from_hf(const std::string& weights_path);

// For run.init_from: the folder's config.json (when it has one) read with config_from_hf's checks,
// and refused (InputError naming both values and the --set that fixes it) where it describes another
// model than `model`: vocab_size (padded), the shape, tie_word_embeddings, and rope_theta and
// rms_norm_eps where it sets them. Returns its max_position_embeddings (in [1, 2^30]) when it sets
// one, else nullopt. Not collective.
std::optional<int> check_init_from_config(const std::string& weights_path, const config::ModelConfig& model);

struct HfEos {
  int id = -1;
  std::string source;  // for the log: "config.json 'x' eos_token_id", ...
};

// The EOS of a Hugging Face folder, found with certainty or refused (InputError naming the folder
// and --set data.eos_id=N), never echo's Qwen3 default, which is wrong for any other vocabulary:
//   1. config.json's eos_token_id, then generation_config.json's: an integer, or a list. A list
//      of several ids is decided by the folder's tokenizer.json (its EOS by tokenizer/hf_eos.h
//      must be in the list). Without a tokenizer.json a list is refused rather than its first
//      element taken: Qwen2.5/Qwen3 list the chat-turn end <|im_end|> first, while packed
//      pretraining documents are separated by <|endoftext|>.
//   2. otherwise the EOS of the folder's tokenizer.json (and tokenizer_config.json).
// Every id must lie in [0, vocab_size).
HfEos hf_eos_id(const std::string& folder, int64_t vocab_size);

}  // namespace echo::train
