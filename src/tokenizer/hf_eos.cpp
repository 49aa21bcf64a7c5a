// The EOS rule of hf_eos.h.
#include "tokenizer/hf_eos.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "core/json_guard.h"
#include "core/log.h"
#include "core/text_file.h"
#include "tokenizer/hf_tokenizer.h"

namespace echo::tokenizer {
namespace {

using Json = nlohmann::json;

// Token strings the EOS is looked up by among the special added tokens, best first.
constexpr std::string_view kEosCandidates[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};

const HfTokenizer::AddedToken* added_token(const HfTokenizer& tok, std::string_view content) {
  for (const auto& t : tok.added_tokens())
    if (t.content == content) return &t;
  return nullptr;
}

// Why no candidate counted, for the refusal: the first that exists but is not a special added one.
std::string near_misses(const HfTokenizer& tok) {
  std::string out;
  for (const std::string_view c : kEosCandidates) {
    if (const auto* t = added_token(tok, c)) {
      out += fmt::format("; {:?} is an added token (id {}) but not special", c, t->id);
    } else if (const auto id = tok.token_to_id(std::string(c))) {
      out += fmt::format("; {:?} is only an ordinary vocab entry (id {}), a piece of text BPE can produce", c, *id);
    }
  }
  return out;
}

// tokenizer_config.json's eos_token: its text, or nullopt when the file names none.
std::optional<std::string> configured_eos(const std::string& path) {
  const std::string what = fmt::format("tokenizer_config.json '{}'", path);
  const Json j = read_untrusted_json_file(path, what);
  ECHO_INPUT_CHECK(j.is_object(), "{} is not a JSON object", what);
  if (!j.contains("eos_token") || j["eos_token"].is_null()) return std::nullopt;
  const Json& eos = j["eos_token"];
  // transformers writes an AddedToken as {"__type": "AddedToken", "content": "</s>", ...}.
  const Json* content = &eos;
  if (eos.is_object() && eos.contains("content")) content = &eos["content"];
  ECHO_INPUT_CHECK(content->is_string() && !content->get<std::string>().empty(),
                   "{}: eos_token = {} is neither a token's text nor an object with a \"content\" text", what,
                   json_excerpt(eos));
  return content->get<std::string>();
}

// The id of `text`, which `named_by` says is the EOS. Honoured, as asked, but a text that is not
// a special token is warned about: the separator would also stand for that text inside documents.
int32_t resolve(const HfTokenizer& tok, const std::string& origin, const std::string& text,
                const std::string& named_by) {
  const auto id = tok.token_to_id(text);
  ECHO_INPUT_CHECK(id.has_value(),
                   "{} names the EOS {:?}, which is not a token of {} (neither an added token nor a "
                   "vocab entry)",
                   named_by, text, origin);
  if (const auto* t = added_token(tok, text); t == nullptr || !t->special)
    log::get("tokenizer")
        ->warn(
            "{} names the EOS {:?}, {} of {} (id {}), not a special token: text in a document can encode to "
            "it, and the model then sees a document boundary there",
            named_by, text, t ? "a non-special added token" : "an ordinary vocab entry", origin, *id);
  return *id;
}

}  // namespace

EosChoice choose_eos(const HfTokenizer& tok, const std::string& origin, const EosRule& rule) {
  if (!rule.eos_token.empty()) {
    return {resolve(tok, origin, rule.eos_token, "--eos-token"), fmt::format("--eos-token {:?}", rule.eos_token)};
  }
  for (const std::string_view c : kEosCandidates)
    if (const auto* t = added_token(tok, c); t && t->special)
      return {t->id, fmt::format("special added token {:?}", c)};
  std::string config_note = "no tokenizer_config.json was given";
  if (!rule.tokenizer_config_path.empty()) {
    // NOTE: only an absent file is skipped: a directory or a FIFO at the name is read, and its
    // reader says it cannot be, instead of this calling it missing.
    if (!is_absent(rule.tokenizer_config_path)) {
      if (const auto text = configured_eos(rule.tokenizer_config_path)) {
        const std::string named_by = fmt::format("eos_token of tokenizer_config.json '{}'", rule.tokenizer_config_path);
        return {resolve(tok, origin, *text, named_by), fmt::format("{} = {:?}", named_by, *text)};
      }
      config_note = fmt::format("tokenizer_config.json '{}' names no eos_token", rule.tokenizer_config_path);
    } else {
      config_note = fmt::format("there is no tokenizer_config.json beside it ('{}')", rule.tokenizer_config_path);
    }
  }
  ECHO_INPUT_FAIL(
      "{}: no EOS token found: none of <|endoftext|>, <|end_of_text|>, </s>, <eos> is a special added token{}; and {}. "
      "Name the document separator: echo_prep --eos-token TEXT, or a tokenizer_config.json "
      "with \"eos_token\" beside the tokenizer.json",
      origin, near_misses(tok), config_note);
}

}  // namespace echo::tokenizer
