// YAML tree -> typed Config: checks the shape (sections are mappings, keys are known and not
// repeated) and the type of each value. Ranges are left to checks.cpp, which also serves
// configs built in code.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <type_traits>

#include "core/input_excerpt.h"
#include "core/config/schema.h"
#include "core/config/stages.h"

namespace echo::config {
namespace {

using schema::dotted;

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "an empty value";
  if (node.IsSequence()) return "a sequence";
  if (node.IsMap()) return "a mapping";
  return fmt::format("'{}'", input_excerpt(node.Scalar()));
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// ---- scalar decoding: one overload per field type ----------------------------------------

template <class T>
bool decode_as(const YAML::Node& node, T& out) {
  return node.IsScalar() && YAML::convert<T>::decode(node, out);
}

// A scalar written as a plain decimal integer ([+-]digits, whatever its size), split in two.
struct DecimalLiteral {
  char sign = 0;  // '+', '-' or 0
  std::string_view digits;
};

std::optional<DecimalLiteral> decimal_literal(const YAML::Node& node) {
  if (!node.IsScalar()) return std::nullopt;
  DecimalLiteral lit{0, node.Scalar()};
  if (!lit.digits.empty() && (lit.digits[0] == '+' || lit.digits[0] == '-')) {
    lit.sign = lit.digits[0];
    lit.digits.remove_prefix(1);
  }
  const bool decimal = std::all_of(lit.digits.begin(), lit.digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (lit.digits.empty() || !decimal) return std::nullopt;
  return lit;
}

bool is_integer_literal(const YAML::Node& node, bool negative_ok) {
  const auto lit = decimal_literal(node);
  return lit && (negative_ok || lit->sign != '-');
}

// NOTE: yaml-cpp reads 010 as octal 8, as YAML 1.1 (and PyYAML, which scripts/sweep.py uses)
// does; YAML 1.2 reads it as 10. A leading zero is refused rather than read either way.
void refuse_leading_zero(const YAML::Node& node, const std::string& key, const Origins& origins) {
  const auto lit = decimal_literal(node);
  if (!lit || lit->digits.size() < 2 || lit->digits[0] != '0') return;
  const std::string_view digits = lit->digits;
  const size_t first = std::min(digits.find_first_not_of('0'), digits.size() - 1);
  fail_at(origins.where(key),
          fmt::format("'{}' = {} has a leading zero, which YAML readers disagree on (octal in YAML 1.1, decimal in "
                      "1.2); write it without: {}",
                      key, input_excerpt(node.Scalar()),
                      input_excerpt(fmt::format("{}{}", lit->sign == '-' ? "-" : "", digits.substr(first)))));
}

// An integer too large for the field is not "not an integer": say what is wrong with it, in the
// words of the key's own rule where that rule refuses it ('train.steps' = -99999999999999999999
// "must be >= 1"), else by the type's bound, never by a range the key's rule would not allow.
template <class Int>
[[noreturn]] void fail_out_of_range(const YAML::Node& node, const std::string& key, const Origins& origins,
                                    const schema::Check& check) {
  const bool negative = decimal_literal(node)->sign == '-';
  // A stand-in far beyond every rule's bounds that still converts to int64 (the rules cast).
  const std::string rule = check.number ? check.number(negative ? -9e18 : 9e18) : std::string();
  if (!rule.empty()) fail_at(origins.where(key), fmt::format("'{}' = {} {}", key, input_excerpt(node.Scalar()), rule));
  fail_at(origins.where(key), negative ? fmt::format("'{}' = {} is too small: it must be at least {}", key,
                                                     input_excerpt(node.Scalar()), std::numeric_limits<Int>::min())
                                       : fmt::format("'{}' = {} is too large: it must be at most {}", key,
                                                     input_excerpt(node.Scalar()), std::numeric_limits<Int>::max()));
}

// yaml-cpp reads 0x10 as 16, and the messages below would quote it as such; scripts/sweep.py
// refuses it for integer keys. Integers are decimal in echo's configs.
void refuse_hexadecimal(const YAML::Node& node, const std::string& key, const Origins& origins) {
  if (!node.IsScalar()) return;
  std::string_view text = node.Scalar();
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) text.remove_prefix(1);
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X'))
    fail_at(origins.where(key), fmt::format("'{}' = {} is hexadecimal: write integers in decimal", key,
                                            input_excerpt(node.Scalar())));
}

void decode(const YAML::Node& node, const std::string& key, const Origins& origins, int& out,
            const schema::Check& check) {
  refuse_hexadecimal(node, key, origins);
  refuse_leading_zero(node, key, origins);
  if (decode_as(node, out)) return;
  if (is_integer_literal(node, /*negative_ok=*/true)) fail_out_of_range<int>(node, key, origins, check);
  fail_at(origins.where(key), fmt::format("'{}' must be an integer, got {}", key, describe(node)));
}

void decode(const YAML::Node& node, const std::string& key, const Origins& origins, std::uint64_t& out,
            const schema::Check& check) {
  refuse_hexadecimal(node, key, origins);
  refuse_leading_zero(node, key, origins);
  if (decode_as(node, out)) return;
  if (is_integer_literal(node, /*negative_ok=*/false)) fail_out_of_range<std::uint64_t>(node, key, origins, check);
  fail_at(origins.where(key), fmt::format("'{}' must be a non-negative integer, got {}", key, describe(node)));
}

void decode(const YAML::Node& node, const std::string& key, const Origins& origins, double& out) {
  refuse_leading_zero(node, key, origins);  // 0300 is 300 here but 192 to PyYAML
  if (!decode_as(node, out))
    fail_at(origins.where(key), fmt::format("'{}' must be a number, got {}", key, describe(node)));
}

void decode(const YAML::Node& node, const std::string& key, const Origins& origins, bool& out) {
  if (!decode_as(node, out))
    fail_at(origins.where(key), fmt::format("'{}' must be true or false, got {}", key, describe(node)));
}

void decode(const YAML::Node& node, const std::string& key, const Origins& origins, std::string& out) {
  // NOTE: any scalar is a string here (out_dir: 2024 is the directory "2024"); only an
  // empty value, a sequence or a mapping is not.
  if (!node.IsScalar()) fail_at(origins.where(key), fmt::format("'{}' must be a string, got {}", key, describe(node)));
  out = node.Scalar();
}

template <ConfigEnum E>
void decode(const YAML::Node& node, const std::string& key, const Origins& origins, E& out) {
  const std::optional<E> value = node.IsScalar() ? try_parse<E>(node.Scalar()) : std::nullopt;
  if (!value)
    fail_at(origins.where(key), fmt::format("'{}' = {} is not one of: {}", key, describe(node), enum_choices<E>()));
  out = *value;
}

// ---- sections ----------------------------------------------------------------------------

// The entries of one mapping, indexed by key after checking that each key is known and given
// once; fills in the fields the visit names.
class SectionReader {
 public:
  SectionReader(const YAML::Node& map, std::string prefix, Origins& origins, const std::vector<std::string>& known)
      : prefix_(std::move(prefix)), origins_(origins) {
    for (auto it = map.begin(); it != map.end(); ++it) index(it->first, it->second, known);
  }

  template <class T>
  void field(const char* key, T& out, const char*, const schema::Check& check = {}) {
    auto it = values_.find(key);
    if (it == values_.end()) return;
    // The integer decoders name the key's rule when a value is beyond the type's range.
    if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::uint64_t>)
      decode(it->second, dotted(prefix_, key), origins_, out, check);
    else
      decode(it->second, dotted(prefix_, key), origins_, out);
  }

  template <class S>
  void section(const char* key, S& out, const char*);

 private:
  void index(const YAML::Node& key_node, const YAML::Node& value, const std::vector<std::string>& known);

  std::string prefix_;
  Origins& origins_;
  std::map<std::string, YAML::Node> values_;
  std::map<std::string, int> lines_;
};

void SectionReader::index(const YAML::Node& key_node, const YAML::Node& value, const std::vector<std::string>& known) {
  const int line = key_node.Mark().line + 1;
  if (!key_node.IsScalar())
    fail_at(origins_.where_line(prefix_, line),
            fmt::format("a key in '{}' must be a plain name, got {}", prefix_.empty() ? "the top level" : prefix_,
                        describe(key_node)));
  const std::string& name = key_node.Scalar();
  const std::string key = dotted(prefix_, name);
  if (auto seen = lines_.find(name); seen != lines_.end())
    fail_at(origins_.where_line(key, line),
            fmt::format("duplicate key '{}' (first given on line {})", input_excerpt(key), seen->second));
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    const std::string what =
        prefix_.empty()
            ? fmt::format("unknown top-level section '{}' (known sections: {})", input_excerpt(key), join(known))
            : fmt::format("unknown key '{}' (known keys in '{}': {})", input_excerpt(key), prefix_, join(known));
    fail_at(origins_.where_line(key, line), what);
  }
  origins_.add_line(key, line);
  lines_[name] = line;
  values_.emplace(name, value);  // a copy shares the node (assignment would merge into it)
}

// Reads `node` (the value of section `prefix`) into `out`; an absent or empty section keeps
// every default.
template <class S>
void read_section(const YAML::Node& node, const std::string& prefix, S& out, Origins& origins) {
  if (!node.IsDefined() || node.IsNull()) return;
  if (!node.IsMap())
    fail_at(origins.where(prefix), fmt::format("'{}' must be a mapping of keys ({}), got {}", prefix,
                                               join(schema::keys_of<S>()), describe(node)));
  SectionReader reader(node, prefix, origins, schema::keys_of<S>());
  schema::visit(out, reader);
}

template <class S>
void SectionReader::section(const char* key, S& out, const char*) {
  if (auto it = values_.find(key); it != values_.end()) read_section(it->second, dotted(prefix_, key), out, origins_);
}

}  // namespace

void check_top_level(const YAML::Node& root, const Origins& origins) {
  if (!root.IsNull() && !root.IsMap())
    fail_at(origins.source_name(), fmt::format("the top level must be a mapping of sections ({}), got {}",
                                               join(schema::keys_of<Config>()), describe(root)));
}

Config read_config(const YAML::Node& root, Origins& origins) {
  check_top_level(root, origins);
  Config config;
  if (root.IsNull()) return config;  // an empty file: every default
  SectionReader reader(root, "", origins, schema::keys_of<Config>());
  schema::visit(config, reader);
  return config;
}

}  // namespace echo::config
