// config.json (model section) and the EOS of a Hugging Face Qwen3 folder, for echo_eval.
#include "train/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/json_guard.h"
#include "core/log.h"
#include "core/text_file.h"
#include "tokenizer/hf_tokenizer.h"

namespace echo::train {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// NOTE: whether anything is at the name, not whether it is a regular file: a directory or a FIFO
// at config.json is read and refused as such ("cannot read ...: it is a directory"), not taken
// for a missing file and skipped or called absent.
bool anything_at(const fs::path& p) { return !is_absent(p.string()); }

Json read_object(const fs::path& file, const std::string& what) {
  const Json j = read_untrusted_json_file(file.string(), what);
  ECHO_INPUT_CHECK(j.is_object(), "{} is not a JSON object", what);
  return j;
}

// What every refusal below ends with.
constexpr const char* kPassEos =
    "pass --set data.eos_id=N (the EOS id of the tokenizer the data was prepared with: echo_prep logs it)";

// The folder's tokenizer.json EOS, loaded on first use (the Qwen3 one takes a moment to build).
class FolderTokenizer {
 public:
  explicit FolderTokenizer(const fs::path& folder) : path_(folder / "tokenizer.json") {}
  bool present() const { return anything_at(path_); }
  const fs::path& path() const { return path_; }
  const HfEos& eos() {
    if (!eos_) {
      try {
        // Not load_tokenizer: it would look inside a directory at the name for a tokenizer.json.
        const auto tok = tokenizer::HfTokenizer::from_file(path_.string());
        eos_ = HfEos{tok->eos_id(), fmt::format("tokenizer.json '{}': {}", path_.string(), tok->eos_source())};
      } catch (const InputError& e) {
        ECHO_INPUT_FAIL("{}; to evaluate without it, {}", e.message(), kPassEos);
      }
    }
    return *eos_;
  }

 private:
  fs::path path_;
  std::optional<HfEos> eos_;
};

// A single eos_token_id that is not the folder's tokenizer.json EOS is kept (the folder's files
// decide, in their order) but said: Qwen3's chat models name the chat-turn end <|im_end|> there,
// while text prepared with their tokenizer separates documents by <|endoftext|>.
void say_if_not_the_tokenizers(int64_t id, const std::string& source, FolderTokenizer& tokenizer) {
  if (!tokenizer.present()) return;
  try {
    const HfEos& tok = tokenizer.eos();
    if (tok.id != id)
      log::get("eval")->info(
          "{} is not the EOS {} of {}: evaluating with {}; if the data's documents are separated by {}, pass "
          "--set data.eos_id={} (data prepared by echo_prep says so itself in its sidecar)",
          source, tok.id, tok.source, id, tok.id, tok.id);
  } catch (const InputError& e) {  // only the comparison is lost: the EOS itself is config.json's
    log::get("eval")->warn("could not compare with the folder's tokenizer: {}", e.message());
  }
}

// `file`'s eos_token_id, or nullopt when it has none (absent or null).
std::optional<HfEos> eos_of_file(const fs::path& file, int64_t vocab_size, FolderTokenizer& tokenizer) {
  const std::string what = fmt::format("'{}'", file.string());
  const Json j = read_object(file, what);
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return std::nullopt;
  const Json& value = j["eos_token_id"];
  const std::string shown = json_excerpt(value);
  std::vector<int64_t> ids;
  if (value.is_number_integer()) {
    ids.push_back(value.get<int64_t>());
  } else if (value.is_array()) {
    for (const Json& v : value) {
      ECHO_INPUT_CHECK(v.is_number_integer(), "{}: eos_token_id = {} holds {}, which is not a token id; {}", what,
                       shown, json_excerpt(v), kPassEos);
      ids.push_back(v.get<int64_t>());
    }
  }
  ECHO_INPUT_CHECK(!ids.empty(), "{}: eos_token_id = {} is neither a token id nor a list of them; {}", what, shown,
                   kPassEos);
  for (const int64_t id : ids)
    ECHO_INPUT_CHECK(id >= 0 && id < vocab_size,
                     "{}: eos_token_id = {}: {} is outside the model's vocabulary [0, {}) (config.json vocab_size); {}",
                     what, shown, id, vocab_size, kPassEos);
  const std::string source = fmt::format("{} eos_token_id = {}", what, shown);
  if (std::all_of(ids.begin(), ids.end(), [&](int64_t id) { return id == ids[0]; })) {
    say_if_not_the_tokenizers(ids[0], source, tokenizer);
    return HfEos{static_cast<int>(ids[0]), source};
  }
  ECHO_INPUT_CHECK(tokenizer.present(),
                   "{}: eos_token_id = {} lists several ids, and the folder has no tokenizer.json ('{}') to tell "
                   "which one separates documents (Qwen lists the chat-turn end <|im_end|> before <|endoftext|>); {}",
                   what, shown, tokenizer.path().string(), kPassEos);
  const HfEos& tok = tokenizer.eos();
  ECHO_INPUT_CHECK(std::find(ids.begin(), ids.end(), tok.id) != ids.end(),
                   "{}: eos_token_id = {} does not hold the EOS {} of {}; {}", what, shown, tok.id, tok.source,
                   kPassEos);
  return HfEos{tok.id, fmt::format("{}, the EOS of {}", source, tok.source)};
}

// Keys that change the forward pass in ways echo's Qwen3 does not implement: read as the plain
// model they would give a wrong loss with no error.
void refuse_unsupported_architecture(const Json& j, const std::string& what) {
  auto unsupported = [&](const char* key, const std::string& why) {
    ECHO_INPUT_FAIL("{}: '{}' = {} {}; echo implements Qwen3 without it and would compute another model", what, key,
                    json_excerpt(j[key]), why);
  };
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) unsupported("rope_scaling", "scales RoPE");
  if (j.contains("attention_bias") && j["attention_bias"] != false) unsupported("attention_bias", "adds q/k/v/o biases");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") unsupported("hidden_act", "is not silu (SwiGLU's)");
  if (j.contains("use_sliding_window") && j["use_sliding_window"] != false)
    unsupported("use_sliding_window", "limits attention to a window");
}

}  // namespace

std::string hf_folder_of(const std::string& weights_path) {
  const fs::path p(weights_path);
  std::error_code ec;
  const fs::path folder = fs::is_directory(p, ec) ? p : p.parent_path();
  return folder.empty() ? "." : folder.string();
}

namespace {

// The model config.json `j` describes over echo's defaults (see config_from_hf).
config::Config model_of(const Json& j, const std::string& what) {
  // NOTE: a missing model_type is refused too: transformers' AutoConfig cannot place such a file,
  // and a Llama or Mistral config with the key deleted would otherwise pass for Qwen3's shapes.
  ECHO_INPUT_CHECK(j.contains("model_type"),
                   "{}: 'model_type' is missing; echo reads Qwen3 configs (\"model_type\": \"qwen3\", as "
                   "transformers writes it)",
                   what);
  ECHO_INPUT_CHECK(j["model_type"] == "qwen3", "{}: model_type {} is not qwen3 (echo runs Qwen3 models only)", what,
                   json_excerpt(j["model_type"]));
  auto integer = [&](const char* key) -> int {
    ECHO_INPUT_CHECK(j.contains(key), "{}: '{}' is missing", what, key);
    // 1e20 or 40960.0 (a float in JSON) is no integer; said with the value, not as "missing".
    ECHO_INPUT_CHECK(j[key].is_number_integer(), "{}: '{}' = {} is not an integer", what, key, json_excerpt(j[key]));
    // NOTE: checked before the narrowing: 2^32 + 64 would wrap to 64, 2^31 to a negative.
    constexpr uint64_t kMax = uint64_t{1} << 30;
    const uint64_t v = j[key].is_number_unsigned() ? j[key].get<uint64_t>() : 0;
    ECHO_INPUT_CHECK(v >= 1 && v <= kMax, "{}: '{}' = {} is out of range [1, {}]", what, key, json_excerpt(j[key]),
                     kMax);
    return static_cast<int>(v);
  };
  // A float key set to anything but a number (a string "10000") is refused, not left at the default.
  auto number = [&](const char* key, double& out) {
    if (!j.contains(key)) return;
    ECHO_INPUT_CHECK(j[key].is_number(), "{}: '{}' = {} is not a number", what, key, json_excerpt(j[key]));
    out = j[key].get<double>();
  };
  config::Config cfg;
  // The layout is the command line's (--tp, the ranks), set after the overrides: the defaults' tp
  // (4) must not refuse a model whose heads it does not divide before --tp is even looked at.
  cfg.parallel.tp = 1;
  auto& m = cfg.model;
  // config.json's vocab_size is the embedding's row count, already padded (Qwen3: 151,936): no
  // further padding, or the model would expect rows the file does not have.
  m.vocab_size = integer("vocab_size");
  m.vocab_pad_multiple = 1;
  m.hidden = integer("hidden_size");
  m.ffn = integer("intermediate_size");
  m.layers = integer("num_hidden_layers");
  m.heads = integer("num_attention_heads");
  m.kv_heads = j.contains("num_key_value_heads") ? integer("num_key_value_heads") : m.heads;
  m.head_dim = j.contains("head_dim") ? integer("head_dim") : m.hidden / m.heads;
  if (j.contains("max_position_embeddings")) m.max_position_embeddings = integer("max_position_embeddings");
  number("rope_theta", m.rope_base);
  number("rms_norm_eps", m.norm_eps);
  // transformers' Qwen3Config default is untied; the released small models set it true.
  if (j.contains("tie_word_embeddings"))
    ECHO_INPUT_CHECK(j["tie_word_embeddings"].is_boolean(), "{}: 'tie_word_embeddings' = {} is not true or false",
                     what, json_excerpt(j["tie_word_embeddings"]));
  m.tie_embeddings = j.value("tie_word_embeddings", false);
  refuse_unsupported_architecture(j, what);
  return cfg;
}

}  // namespace

config::Config config_from_hf(const std::string& weights_path) {
  const fs::path file = fs::path(hf_folder_of(weights_path)) / "config.json";
  ECHO_INPUT_CHECK(anything_at(file),
                   "no config.json beside the Hugging Face weights '{}': pass --config with a YAML whose model "
                   "section describes them",
                   weights_path);
  const std::string what = fmt::format("Hugging Face config '{}'", file.string());
  return model_of(read_object(file, what), what);
}

std::optional<int> check_init_from_config(const std::string& weights_path, const config::ModelConfig& model) {
  const fs::path file = fs::path(hf_folder_of(weights_path)) / "config.json";
  // Only an absent config.json is skipped: a directory or a FIFO there is refused by the reader.
  if (!anything_at(file)) return std::nullopt;
  const std::string what = fmt::format("run.init_from's config '{}'", file.string());
  const Json j = read_object(file, what);
  const config::ModelConfig hf = model_of(j, what).model;
  auto refuse = [&](const char* key, const auto& theirs, const char* field, const auto& ours, const std::string& fix) {
    ECHO_INPUT_FAIL("{}: '{}' = {}, but the config's model.{} = {}: the weights would be trained as another model; "
                    "pass {} (or start from a folder of this model)",
                    what, key, theirs, field, ours, fix);
  };
  auto same = [&](const char* key, auto theirs, const char* field, auto ours) {
    if (theirs != ours) refuse(key, theirs, field, ours, fmt::format("--set model.{}={}", field, theirs));
  };
  // The file's vocab_size is the padded row count (see model_of).
  if (hf.vocab_size != model.padded_vocab())
    refuse("vocab_size", hf.vocab_size, "vocab_size (padded)", model.padded_vocab(),
           fmt::format("--set model.vocab_size={} --set model.vocab_pad_multiple=1", hf.vocab_size));
  same("hidden_size", hf.hidden, "hidden", model.hidden);
  same("num_hidden_layers", hf.layers, "layers", model.layers);
  same("num_attention_heads", hf.heads, "heads", model.heads);
  same("num_key_value_heads", hf.kv_heads, "kv_heads", model.kv_heads);
  same("head_dim", hf.head_dim, "head_dim", model.head_dim);
  same("intermediate_size", hf.ffn, "ffn", model.ffn);
  same("tie_word_embeddings", hf.tie_embeddings, "tie_embeddings", model.tie_embeddings);
  // Absent, transformers' defaults would apply, which are not Qwen3's: only what the file says is compared.
  if (j.contains("rope_theta")) same("rope_theta", hf.rope_base, "rope_base", model.rope_base);
  if (j.contains("rms_norm_eps")) same("rms_norm_eps", hf.norm_eps, "norm_eps", model.norm_eps);
  if (!j.contains("max_position_embeddings")) return std::nullopt;
  return hf.max_position_embeddings;
}

HfEos hf_eos_id(const std::string& folder, int64_t vocab_size) {
  const fs::path dir(folder);
  FolderTokenizer tokenizer(dir);
  std::string looked;  // what was read and named no EOS, for the refusal
  for (const char* name : {"config.json", "generation_config.json"}) {
    const fs::path file = dir / name;
    if (!anything_at(file)) {
      looked += fmt::format("{}no {}", looked.empty() ? "" : ", ", name);
      continue;
    }
    if (auto eos = eos_of_file(file, vocab_size, tokenizer)) return *eos;
    looked += fmt::format("{}no eos_token_id in {}", looked.empty() ? "" : ", ", name);
  }
  ECHO_INPUT_CHECK(tokenizer.present(),
                   "Hugging Face folder '{}' does not say which token is the EOS ({}, no tokenizer.json), and echo's "
                   "default (Qwen3's 151643) would be a guess; {}",
                   folder, looked, kPassEos);
  const HfEos& eos = tokenizer.eos();
  ECHO_INPUT_CHECK(eos.id >= 0 && eos.id < vocab_size,
                   "Hugging Face folder '{}': the EOS {} of {} is outside the model's vocabulary [0, {}) "
                   "(config.json vocab_size); {}",
                   folder, eos.id, eos.source, vocab_size, kPassEos);
  return eos;
}

}  // namespace echo::train
