// load_config: file -> YAML tree -> overrides -> typed Config -> checks; and the small helpers
// the structs carry.
#include "core/config/config.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <optional>
#include <tuple>
#include <utility>

#include "core/config/schema.h"
#include "core/config/stages.h"
#include "core/text_file.h"

namespace echo::config {
namespace {

// A YAML stream holds no control characters but tab, line feed and carriage return (YAML 1.2
// §5.1). yaml-cpp does not say so: a NUL byte ends a line to it, and the error it gives (e.g.
// "unknown escape character" one line further on) points away from the byte; a binary file
// given as the config fails with its first control byte named.
void refuse_control_characters(const std::string& text, const std::string& source_name) {
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\n') {
      ++line;
      line_start = i + 1;
    } else if ((byte < 0x20 && byte != '\t' && byte != '\r') || byte == 0x7F) {
      fail_at(fmt::format("{}:{}", source_name, line),
              fmt::format("a control character (byte 0x{:02x}) at column {}: a YAML config is text; a tab, a line "
                          "feed and a carriage return are the only control characters it may hold",
                          byte, i - line_start + 1));
    }
  }
}

YAML::Node parse_yaml(const std::string& text, const std::string& source_name) {
  refuse_control_characters(text, source_name);
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    const bool too_deep = dynamic_cast<const YAML::DeepRecursion*>(&e) != nullptr;
    fail_at(fmt::format("{}:{}", source_name, e.mark.line + 1),
            fmt::format("YAML {}{}", too_deep ? "" : "syntax error: ", yaml_error_text(e)));
  }
  // NOTE: YAML::Load would read the first document and silently drop the rest, so a config
  // pasted twice, or two configs in one file, would lose every key after the second '---'.
  if (documents.size() > 1)
    fail_at(fmt::format("{}:{}", source_name, documents[1].Mark().line + 1),
            fmt::format("a second YAML document (after a '---' line) starts here; a config file holds one "
                        "document, {} found",
                        documents.size()));
  return documents.empty() ? YAML::Node() : documents.front();
}

// Collects every leaf key in dotted form, descending into sections.
struct DottedKeys {
  std::string prefix;
  std::vector<std::string>* keys;
  template <class T>
  void field(const char* key, T&, const char*, const schema::Check& = {}) {
    keys->push_back(schema::dotted(prefix, key));
  }
  template <class S>
  void section(const char* key, S& value, const char*) {
    DottedKeys inner{schema::dotted(prefix, key), keys};
    schema::visit(value, inner);
  }
};

// A config file's text, or the config loader's "path: cannot open config file: ..." error.
std::string read_config_file(const std::string& path) {
  std::string why;
  std::optional<std::string> text = try_read_text_file(path, why);
  if (!text) fail_at(path, fmt::format("cannot open config file: {}", why));
  return std::move(*text);
}

}  // namespace

std::string yaml_error_text(const YAML::Exception& e) {
  // NOTE: yaml-cpp 0.7 throws DeepRecursion with the message "bad file" (ErrorMsg::BAD_FILE).
  if (const auto* deep = dynamic_cast<const YAML::DeepRecursion*>(&e))
    return fmt::format("nesting too deep: yaml-cpp reads at most {} levels of sequences and mappings", deep->depth());
  return e.msg;
}

std::vector<std::string> LinearConfig::projection_list() const {
  std::vector<std::string> names;
  std::string item;
  for (char ch : projections + ",") {
    if (ch == ',') {
      if (!item.empty()) names.push_back(item);
      item.clear();
    } else if (ch != ' ') {
      item += ch;
    }
  }
  return names;
}

std::int64_t ModelConfig::padded_vocab() const {
  ECHO_CHECK(vocab_size >= 1 && vocab_pad_multiple >= 1, "padded_vocab: vocab_size {} and vocab_pad_multiple {}",
             vocab_size, vocab_pad_multiple);
  const std::int64_t multiple = vocab_pad_multiple;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

QuantSpec CommConfig::quant_spec(int bits) const {
  ECHO_CHECK(bits == 4 || bits == 8, "quant_spec: bits must be 4 or 8, got {}", bits);
  return QuantSpec{quantizer, bits, group_size};
}

bool Config::operator==(const Config& o) const {
  return std::tie(run, model, parallel, comm, linear, optim, schedule, data, train) ==
         std::tie(o.run, o.model, o.parallel, o.comm, o.linear, o.optim, o.schedule, o.data, o.train);
}

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides, int world_size, LayoutChecks layout) {
  ECHO_CHECK(world_size >= 0, "world_size must be >= 0 (0: not known yet), got {}", world_size);
  Origins origins(source_name);
  YAML::Node root = parse_yaml(yaml_text, source_name);
  apply_overrides(root, overrides, origins);
  Config config = read_config(root, origins);
  check_config(config, origins, world_size, layout);
  config.source = source_name;
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides, int world_size,
                   LayoutChecks layout) {
  return parse_config(read_config_file(path), path, overrides, world_size, layout);
}

bool config_file_sets(const std::string& path, const std::string& dotted_key) {
  return tree_sets(parse_yaml(read_config_file(path), path), dotted_key);
}

void validate(const Config& config, int world_size) {
  // A Config built in code has no lines to point at: errors name its source, if any.
  const Origins origins(config.source.empty() ? "config" : config.source);
  check_config(config, origins, world_size, LayoutChecks::now);
}

std::vector<std::string> known_keys() {
  Config unused;
  std::vector<std::string> keys;
  DottedKeys lister{"", &keys};
  schema::visit(unused, lister);
  return keys;
}

}  // namespace echo::config
