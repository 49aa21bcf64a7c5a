// The tokenizer interface the data tools use, and the one place that turns a spec ("byte" or a
// Hugging Face tokenizer.json path) into a tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace echo::tokenizer {

// Text <-> token ids. encode never adds BOS/EOS (as HF's add_special_tokens=False); callers that
// pack documents append eos_id() themselves. Implementations are immutable after construction,
// so encode/decode may be called from many threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The bytes the ids stand for (not necessarily valid UTF-8 for a partial sequence). Throws
  // echo::Error for an id outside [0, vocab_size()) or one the vocabulary leaves unassigned.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The document separator: <|endoftext|> for Qwen3 and for the byte tokenizer. A Hugging Face
  // tokenizer finds it by the rule of hf_eos.h or refuses to load.
  virtual int32_t eos_id() const = 0;
  // Where eos_id() came from, for logs ("special added token \"<|endoftext|>\"").
  virtual std::string eos_source() const = 0;
  // One past the largest id (151,669 for Qwen3; the model pads its embedding beyond that).
  virtual int64_t vocab_size() const = 0;
};

// spec "byte": the byte-level tokenizer (ids 0..255 are bytes, 256 is <|endoftext|>, 257 ids).
// Anything else: a Hugging Face tokenizer.json (or a directory holding one) with a byte-level BPE
// model. `eos_token` (echo_prep --eos-token), when not empty, is the EOS's text: resolved through
// the tokenizer (the byte tokenizer's EOS is fixed, so only "<|endoftext|>" is accepted there).
// Throws echo::Error naming the file when it is missing, malformed or unsupported, or when no EOS
// is certain.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const std::string& eos_token = "");

// The tokenizer.json file load_tokenizer reads for `spec` (a directory's tokenizer.json), or ""
// for "byte", which reads none. Does not check that the file exists.
std::string tokenizer_file(const std::string& spec);

}  // namespace echo::tokenizer
