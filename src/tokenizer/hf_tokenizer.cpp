// Hugging Face tokenizer.json -> HfTokenizer: parsing (nlohmann-json) and the encode/decode
// pipeline described in hf_tokenizer.h.
#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "core/text_file.h"

namespace echo::tokenizer {
namespace {

using Json = nlohmann::json;

// GPT-2's pre-tokenization regex, which ByteLevel applies itself when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Ids index a table of max_id + 1 strings (32 bytes each, plus the text): 2^24 ids (16.8 M, 64
// times Qwen3's 151,669; a 537 MB table) is far beyond any published vocabulary, and a larger id
// is a corrupt file that would otherwise allocate gigabytes or die in std::bad_alloc.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// A token id from the file: a JSON integer (1.5 would be truncated to 1, silently merging two
// tokens) in [0, kMaxTokenId].
int32_t parse_id(const Json& value, const std::string& origin, const std::string& what) {
  ECHO_INPUT_CHECK(value.is_number_integer(), "{} is malformed: {} = {} is not an integer id", origin, what,
                   json_excerpt(value));
  const bool negative = value.is_number_unsigned() ? false : value.get<int64_t>() < 0;
  ECHO_INPUT_CHECK(!negative, "{}: {} = {} is a negative id", origin, what, json_excerpt(value));
  ECHO_INPUT_CHECK(
      value.get<uint64_t>() <= static_cast<uint64_t>(kMaxTokenId),
      "{}: {} = {} is too large: ids up to {} would need a {:.1f} GB id table; ids must be at most {}", origin, what,
      json_excerpt(value), json_excerpt(value),
      static_cast<double>(std::min<uint64_t>(value.get<uint64_t>(), uint64_t{1} << 40)) * sizeof(std::string) / 1e9,
      kMaxTokenId);
  return static_cast<int32_t>(value.get<int64_t>());
}

std::string type_of(const Json& node) { return node.is_object() ? node.value("type", std::string()) : std::string(); }

void parse_normalizer(const Json& node, const std::string& origin, std::vector<NormalForm>& forms) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "Sequence") {
    for (const Json& child : node.at("normalizers")) parse_normalizer(child, origin, forms);
  } else if (type == "NFC") {
    forms.push_back(NormalForm::kNFC);
  } else if (type == "NFD") {
    forms.push_back(NormalForm::kNFD);
  } else if (type == "NFKC") {
    forms.push_back(NormalForm::kNFKC);
  } else if (type == "NFKD") {
    forms.push_back(NormalForm::kNFKD);
  } else {
    ECHO_INPUT_FAIL("{}: normalizer type {:?} is not supported (NFC, NFD, NFKC, NFKD, Sequence or null)", origin, type);
  }
}

// Appends the steps of `node`; returns whether a ByteLevel step was among them.
bool parse_pre_tokenizer(const Json& node, const std::string& origin,
                         std::vector<HfTokenizer::PreTokenizerStep>& steps) {
  ECHO_INPUT_CHECK(!node.is_null(),
                   "{}: pre_tokenizer is null; only byte-level BPE (a ByteLevel pre_tokenizer) is supported", origin);
  const std::string type = type_of(node);
  if (type == "Sequence") {
    bool byte_level = false;
    for (const Json& child : node.at("pretokenizers")) byte_level |= parse_pre_tokenizer(child, origin, steps);
    return byte_level;
  }
  HfTokenizer::PreTokenizerStep step;
  if (type == "Split") {
    const Json& pattern = node.at("pattern");
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern.at("Regex").get<std::string>();
    } else {
      ECHO_INPUT_CHECK(pattern.contains("String"), "{}: Split pattern needs a \"Regex\" or a \"String\"", origin);
      regex = escape_regex(pattern.at("String").get<std::string>());
    }
    const std::string behavior = node.value("behavior", std::string("Isolated"));
    ECHO_INPUT_CHECK(behavior == "Isolated" || behavior == "Removed",
                     "{}: Split behavior {:?} is not supported (Isolated or Removed)", origin, behavior);
    ECHO_INPUT_CHECK(!node.value("invert", false), "{}: Split with invert: true is not supported", origin);
    step.regex.emplace(regex, origin + ": pre_tokenizer Split");
    step.keep_matches = behavior == "Isolated";
    steps.push_back(std::move(step));
    return false;
  }
  if (type == "ByteLevel") {
    step.add_prefix_space = node.value("add_prefix_space", true);
    if (node.value("use_regex", true)) step.regex.emplace(kGpt2Pattern, origin + ": pre_tokenizer ByteLevel");
    if (step.add_prefix_space || step.regex) steps.push_back(std::move(step));
    return true;
  }
  ECHO_INPUT_FAIL("{}: pre_tokenizer type {:?} is not supported (Split, ByteLevel or Sequence)", origin, type);
}

std::vector<std::pair<std::string, std::string>> parse_merges(const Json& merges, const std::string& origin) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_array()) {  // tokenizers >= 0.20: ["a", "b"]
      ECHO_INPUT_CHECK(m.size() == 2, "{}: model.merges[{}] is not a pair", origin, i);
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {  // older files: "a b"
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      ECHO_INPUT_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                       "{}: model.merges[{}] = {:?} is not two tokens separated by one space", origin, i, s);
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    }
  }
  return out;
}

// What a byte-level vocab entry decodes to: each character of the table becomes its byte; a
// character outside the table (not produced by ByteLevel) is kept as its own UTF-8.
std::string byte_level_to_bytes(std::string_view token) {
  std::string out;
  std::size_t i = 0;
  while (i < token.size()) {
    const auto b0 = static_cast<unsigned char>(token[i]);
    const std::size_t n = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (std::size_t k = 1; k < n && i + k < token.size(); ++k) cp = (cp << 6) | (token[i + k] & 0x3F);
    const int byte = codepoint_to_byte(cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(token.substr(i, n));
    }
    i += n;
  }
  return out;
}

// One alternation that finds any of `tokens` (leftmost; longest first at the same start, as the
// tokenizers library's Aho-Corasick matcher does). Capture group k+1 is tokens[order[k]].
std::optional<Regex> added_token_matcher(const std::vector<HfTokenizer::AddedToken>& tokens, bool normalized,
                                         const std::string& origin, std::vector<int32_t>& group_ids) {
  std::vector<const HfTokenizer::AddedToken*> chosen;
  for (const auto& t : tokens)
    if (t.normalized == normalized && !t.content.empty()) chosen.push_back(&t);
  if (chosen.empty()) return std::nullopt;
  std::stable_sort(chosen.begin(), chosen.end(),
                   [](const auto* a, const auto* b) { return a->content.size() > b->content.size(); });
  std::string pattern;
  for (const auto* t : chosen) {
    if (!pattern.empty()) pattern += '|';
    pattern += '(';
    if (t->lstrip) pattern += R"(\s*)";
    if (t->single_word) pattern += R"((?<!\w))";
    pattern += escape_regex(t->content);
    if (t->single_word) pattern += R"((?!\w))";
    if (t->rstrip) pattern += R"(\s*)";
    pattern += ')';
    group_ids.push_back(t->id);
  }
  return Regex(pattern, origin + ": added_tokens");
}

}  // namespace

std::unique_ptr<HfTokenizer> HfTokenizer::from_file(const std::string& path, const std::string& eos_token) {
  const std::string origin = fmt::format("tokenizer.json '{}'", path);
  const std::string text = read_text_file(path, origin);
  const std::filesystem::path beside = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  return from_json(text, origin, EosRule{eos_token, beside.string()});
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_json(std::string_view json_text, const std::string& origin,
                                                    const EosRule& eos_rule) {
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  tok->origin_ = origin;
  // NOTE: bounded before the DOM is built: the normalizer and pre_tokenizer are parsed by
  // recursion and copied (Json::value), both once per nesting level.
  const Json root = parse_untrusted_json(json_text, origin);
  try {
    ECHO_INPUT_CHECK(root.is_object() && root.contains("model"), "{} has no \"model\" object; is it a tokenizer.json?",
                     origin);
    const Json& model = root.at("model");
    const std::string model_type = type_of(model);
    ECHO_INPUT_CHECK(model_type == "BPE" || (model_type.empty() && model.contains("merges")),
                     "{}: model type {:?} is not supported (only BPE)", origin, model_type);
    ECHO_INPUT_CHECK(model.value("dropout", Json()).is_null() || model.at("dropout").get<double>() == 0.0,
                     "{}: BPE dropout is not supported (it makes encoding random)", origin);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const Json v = model.value(key, Json());
      ECHO_INPUT_CHECK(v.is_null() || v.get<std::string>().empty(), "{}: model.{} = {} is not supported", origin, key,
                       json_excerpt(v));
    }
    ECHO_INPUT_CHECK(!model.value("byte_fallback", false), "{}: model.byte_fallback is not supported", origin);

    parse_normalizer(root.value("normalizer", Json()), origin, tok->normal_forms_);
    const bool byte_level = parse_pre_tokenizer(root.value("pre_tokenizer", Json()), origin, tok->pre_tokenizer_);
    ECHO_INPUT_CHECK(byte_level, "{}: the pre_tokenizer has no ByteLevel step; only byte-level BPE is supported",
                     origin);
    const Json decoder = root.value("decoder", Json());
    ECHO_INPUT_CHECK(decoder.is_null() || type_of(decoder) == "ByteLevel",
                     "{}: decoder type {:?} is not supported (ByteLevel)", origin, type_of(decoder));

    std::unordered_map<std::string, int32_t> vocab;
    const Json& vocab_json = model.at("vocab");
    ECHO_INPUT_CHECK(vocab_json.is_object(), "{}: model.vocab is not an object", origin);
    vocab.reserve(vocab_json.size());
    int64_t max_id = -1;
    // Which vocab token holds each id, to refuse two tokens sharing one (decode could not
    // tell them apart).
    std::unordered_map<int32_t, std::string> vocab_token_of;
    vocab_token_of.reserve(vocab_json.size());
    for (const auto& [token, id_json] : vocab_json.items()) {
      const int32_t id = parse_id(id_json, origin, fmt::format("model.vocab[{:?}]", token));
      const auto [other, fresh] = vocab_token_of.emplace(id, token);
      ECHO_INPUT_CHECK(fresh, "{}: model.vocab[{:?}] and model.vocab[{:?}] share id {}", origin, other->second, token,
                       id);
      vocab.emplace(token, id);
      max_id = std::max<int64_t>(max_id, id);
    }
    ECHO_INPUT_CHECK(model.contains("merges"), "{}: model.merges is missing", origin);
    const auto merges = parse_merges(model.at("merges"), origin);

    BpeOptions options;
    options.ignore_merges = model.value("ignore_merges", false);
    const Json unk = model.value("unk_token", Json());
    if (!unk.is_null()) {
      const auto it = vocab.find(unk.get<std::string>());
      ECHO_INPUT_CHECK(it != vocab.end(), "{}: model.unk_token {} is not in model.vocab", origin, json_excerpt(unk));
      options.unk_id = it->second;
    }

    std::unordered_map<int32_t, std::string> added_token_of;
    for (const Json& a : root.value("added_tokens", Json::array())) {
      AddedToken t;
      t.content = a.at("content").get<std::string>();
      t.id = parse_id(a.at("id"), origin, fmt::format("the id of added token {:?}", t.content));
      const auto [other, fresh] = added_token_of.emplace(t.id, t.content);
      ECHO_INPUT_CHECK(fresh, "{}: added tokens {:?} and {:?} share id {}", origin, other->second, t.content, t.id);
      // An added token may repeat a vocab entry (GPT-2 lists <|endoftext|> in both), but only
      // with the same text.
      if (const auto v = vocab_token_of.find(t.id); v != vocab_token_of.end())
        ECHO_INPUT_CHECK(byte_level_to_bytes(v->second) == t.content,
                         "{}: added token {:?} has id {}, which model.vocab gives to {:?}", origin, t.content, t.id,
                         v->second);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      t.normalized = a.value("normalized", false);
      t.special = a.value("special", false);
      max_id = std::max<int64_t>(max_id, t.id);
      tok->added_tokens_.push_back(std::move(t));
    }
    ECHO_INPUT_CHECK(max_id >= 0, "{}: model.vocab is empty", origin);

    tok->id_to_bytes_.assign(static_cast<std::size_t>(max_id + 1), std::string());
    tok->id_assigned_.assign(static_cast<std::size_t>(max_id + 1), false);
    for (const auto& [token, id] : vocab) {
      tok->id_to_bytes_[id] = byte_level_to_bytes(token);
      tok->id_assigned_[id] = true;
    }
    for (const auto& t : tok->added_tokens_) {
      tok->id_to_bytes_[t.id] = t.content;  // added tokens decode to their text, not byte-level
      tok->id_assigned_[t.id] = true;
    }
    tok->model_ = std::make_unique<BpeModel>(std::move(vocab), merges, options, origin);
    tok->raw_added_ = added_token_matcher(tok->added_tokens_, false, origin, tok->raw_added_ids_);
    tok->normalized_added_ = added_token_matcher(tok->added_tokens_, true, origin, tok->normalized_added_ids_);

    // NOTE: the model is complete here: the rule resolves token texts through token_to_id.
    EosChoice eos = choose_eos(*tok, origin, eos_rule);
    tok->eos_id_ = eos.id;
    tok->eos_source_ = std::move(eos.source);
  } catch (const Json::exception& e) {
    ECHO_INPUT_FAIL("{} is malformed: {}", origin, e.what());
  }
  return tok;
}

HfTokenizer::~HfTokenizer() = default;

std::optional<int32_t> HfTokenizer::token_to_id(const std::string& token) const {
  for (const auto& t : added_tokens_)
    if (t.content == token) return t.id;
  const auto it = model_->vocab().find(bytes_to_byte_level(token));
  if (it != model_->vocab().end()) return it->second;
  return std::nullopt;
}

bool HfTokenizer::regex_jit() const {
  return std::all_of(pre_tokenizer_.begin(), pre_tokenizer_.end(),
                     [](const PreTokenizerStep& s) { return !s.regex || s.regex->jit_compiled(); });
}

template <class OnGap>
void HfTokenizer::split_added(std::string_view text, const std::optional<Regex>& matcher,
                              const std::vector<int32_t>& group_ids, std::vector<int32_t>& out, OnGap&& on_gap) const {
  if (!matcher) {
    on_gap(text);
    return;
  }
  std::vector<Match> matches;
  matcher->find_all(text, matches);
  std::size_t prev = 0;
  for (const Match& m : matches) {
    if (m.begin > prev) on_gap(text.substr(prev, m.begin - prev));
    ECHO_CHECK(m.group >= 1 && static_cast<std::size_t>(m.group) <= group_ids.size(),
               "{}: added-token match without a group", origin_);
    out.push_back(group_ids[m.group - 1]);
    prev = m.end;
  }
  if (prev < text.size()) on_gap(text.substr(prev));
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = repair_utf8(text);
    text = repaired;
  }
  split_added(text, raw_added_, raw_added_ids_, out, [&](std::string_view segment) {
    std::string buffer;
    for (const NormalForm form : normal_forms_) {
      std::string next;
      if (normalize(segment, form, next)) {
        buffer = std::move(next);
        segment = buffer;
      }
    }
    split_added(segment, normalized_added_, normalized_added_ids_, out,
                [&](std::string_view gap) { encode_normalized(gap, out); });
  });
  return out;
}

void HfTokenizer::encode_normalized(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> pieces{text}, next;
  std::deque<std::string> arena;  // pieces that gained a prefix space (deque: stable addresses)
  std::vector<Match> matches;
  for (const PreTokenizerStep& step : pre_tokenizer_) {
    next.clear();
    for (std::string_view piece : pieces) {
      if (step.add_prefix_space && !piece.empty() && piece.front() != ' ') {
        std::string& spaced = arena.emplace_back();
        spaced.reserve(piece.size() + 1);
        spaced.push_back(' ');
        spaced.append(piece);
        piece = spaced;
      }
      if (!step.regex) {
        next.push_back(piece);
        continue;
      }
      matches.clear();
      step.regex->find_all(piece, matches);
      std::size_t prev = 0;
      for (const Match& m : matches) {
        if (m.begin > prev) next.push_back(piece.substr(prev, m.begin - prev));
        if (step.keep_matches) next.push_back(piece.substr(m.begin, m.end - m.begin));
        prev = m.end;
      }
      if (prev < piece.size()) next.push_back(piece.substr(prev));
    }
    std::swap(pieces, next);
  }
  for (const std::string_view piece : pieces) model_->encode_word(piece, out);
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    ECHO_CHECK(id >= 0 && static_cast<std::size_t>(id) < id_to_bytes_.size() && id_assigned_[id],
               "{}: id {} at position {} is not in the vocabulary (size {})", origin_, id, i, id_to_bytes_.size());
    out += id_to_bytes_[id];
  }
  return out;
}

}  // namespace echo::tokenizer
