// A Hugging Face tokenizer.json with a byte-level BPE model (Qwen2/Qwen3, GPT-2, Llama 3 style).
//
// encode(text) follows the tokenizers library's order:
//   1. repair ill-formed UTF-8 (U+FFFD), then split out added tokens whose `normalized` is false
//      (<|endoftext|>, <|im_start|>, ...: leftmost, longest first; never split further);
//   2. normalize each remaining segment (NFC for Qwen3), then split out added tokens whose
//      `normalized` is true;
//   3. pre-tokenize: the Split regex (PCRE2, UTF + UCP, JIT) and/or ByteLevel's own GPT-2 regex;
//   4. BPE each pre-token over its bytes (the byte-level character table is applied inside).
// decode maps ids back to bytes: added tokens to their content, the rest through the byte-level
// table. Supported: normalizer null | NFC | NFD | NFKC | NFKD | Sequence of those; pre_tokenizer
// Split (Isolated or Removed) | ByteLevel | Sequence; model BPE without dropout; decoder ByteLevel.
// Anything else is an error naming the file, rather than a silently different tokenization.
// The EOS is chosen by the rule of hf_eos.h (special added tokens, then tokenizer_config.json, or
// an explicit --eos-token), never by a vocab entry that merely spells "</s>".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/hf_eos.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace echo::tokenizer {

class HfTokenizer final : public Tokenizer {
 public:
  // Parses `path` (a tokenizer.json); the EOS rule reads the tokenizer_config.json beside it when
  // it needs to. `eos_token` (echo_prep --eos-token), when not empty, names the EOS instead.
  // Throws echo::Error naming the file on any problem, and when no EOS is certain.
  static std::unique_ptr<HfTokenizer> from_file(const std::string& path, const std::string& eos_token = "");
  // Parses tokenizer.json text; `origin` names it in errors.
  static std::unique_ptr<HfTokenizer> from_json(std::string_view json_text, const std::string& origin,
                                                const EosRule& eos_rule = {});
  ~HfTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int32_t eos_id() const override { return eos_id_; }
  std::string eos_source() const override { return eos_source_; }
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_bytes_.size()); }

  // The id of a vocab entry or added token given as text (e.g. "<|im_start|>"), if any.
  std::optional<int32_t> token_to_id(const std::string& token) const;
  // Whether the pre-tokenizer regexes run JIT-compiled (false when PCRE2 has no JIT here).
  bool regex_jit() const;

  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool lstrip = false, rstrip = false, single_word = false, normalized = false, special = false;
  };
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }

  // One pre-tokenization step: split by a regex, optionally prefix a space (ByteLevel).
  struct PreTokenizerStep {
    std::optional<Regex> regex;
    bool keep_matches = true;  // false: Split behavior "Removed" (the gaps are kept alone)
    bool add_prefix_space = false;
  };

 private:
  HfTokenizer() = default;
  // Splits `text` by added tokens (`matcher`), appending their ids and sending the gaps on.
  template <class OnGap>
  void split_added(std::string_view text, const std::optional<Regex>& matcher, const std::vector<int32_t>& group_ids,
                   std::vector<int32_t>& out, OnGap&& on_gap) const;
  void encode_normalized(std::string_view text, std::vector<int32_t>& out) const;

  std::string origin_;
  std::vector<NormalForm> normal_forms_;
  std::vector<PreTokenizerStep> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::vector<AddedToken> added_tokens_;
  // Matchers for added tokens, before and after normalization; capture group g (1-based) of a
  // match is added token group_ids[g - 1].
  std::optional<Regex> raw_added_, normalized_added_;
  std::vector<int32_t> raw_added_ids_, normalized_added_ids_;
  std::vector<std::string> id_to_bytes_;  // what each id decodes to
  std::vector<bool> id_assigned_;
  int32_t eos_id_ = -1;
  std::string eos_source_;
};

}  // namespace echo::tokenizer
