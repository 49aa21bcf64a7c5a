// load_tokenizer: "byte" or a tokenizer.json path (or a directory holding one).
#include <filesystem>

#include "core/error.h"
#include "core/text_file.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/hf_tokenizer.h"

namespace echo::tokenizer {

std::string tokenizer_file(const std::string& spec) {
  if (spec == "byte") return "";
  std::filesystem::path path(spec);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path /= "tokenizer.json";
  return path.string();
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const std::string& eos_token) {
  ECHO_INPUT_CHECK(!spec.empty(), "tokenizer spec is empty: use \"byte\" or a path to a tokenizer.json");
  if (spec == "byte") {
    ECHO_INPUT_CHECK(eos_token.empty() || eos_token == ByteTokenizer::kEosText,
                     "--eos-token {:?}: the byte tokenizer's EOS is fixed ({} = id {})", eos_token,
                     ByteTokenizer::kEosText, ByteTokenizer::kEosId);
    return std::make_unique<ByteTokenizer>();
  }
  const std::string path = tokenizer_file(spec);
  // Only nothing at the name "does not exist": a dangling or looping symbolic link there is
  // refused by the reader, which says what it is.
  ECHO_INPUT_CHECK(!is_absent(path),
                   "tokenizer.json '{}' does not exist (tokenizer spec {:?}: use \"byte\" "
                   "or a path to a Hugging Face tokenizer.json; scripts/get_data.sh fetches Qwen3's)",
                   path, spec);
  return HfTokenizer::from_file(path, eos_token);
}

}  // namespace echo::tokenizer
