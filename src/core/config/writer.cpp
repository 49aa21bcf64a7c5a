// Config -> YAML text with every key and a one-line comment each: the effective config a run
// writes beside its outputs, and the source of configs/default.yaml.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/config/schema.h"

namespace echo::config {
namespace {

constexpr std::size_t kCommentColumn = 40;

// Emits one "key: value  # doc" line per field, sections as nested blocks.
class Writer {
 public:
  std::string text;

  template <class T>
  void field(const char* key, T& value, const char* doc, const schema::Check& = {}) {
    line(fmt::format("{}: {}", key, schema::yaml_scalar(value)), doc);
  }

  template <class S>
  void section(const char* key, S& value, const char* doc) {
    if (depth_ == 0 && !text.empty()) text += '\n';
    line(fmt::format("{}:", key), doc);
    ++depth_;
    schema::visit(value, *this);
    --depth_;
  }

 private:
  void line(const std::string& body, const char* doc) {
    std::string out = std::string(2 * depth_, ' ') + body;
    out.resize(std::max(out.size() + 2, kCommentColumn), ' ');
    text += out + "# " + doc + "\n";
  }

  int depth_ = 0;
};

}  // namespace

std::string to_yaml(const Config& config) {
  Config values = config;  // the key table visits mutable structs; writing changes nothing
  Writer writer;
  schema::visit(values, writer);
  return writer.text;
}

void write_effective_config(const Config& config, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code error;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), error);
  ECHO_RUN_CHECK(!error, "cannot create the directory of '{}': {}", path, error.message());
  // Through a unique sibling temp file, synced and renamed (core/atomic_file.h), so a reader never
  // sees half a config: a directory at the name is refused before anything is written, and
  // nothing else beside it (a config.yaml.tmp of the user's) is touched.
  std::string text = "# Effective echo configuration: every key, defaults included";
  if (!config.source.empty()) text += "; loaded from " + config.source;
  text += ".\n" + to_yaml(config);
  write_file_atomic(path, text, fmt::format("cannot write the effective config '{}'", path));
}

}  // namespace echo::config
