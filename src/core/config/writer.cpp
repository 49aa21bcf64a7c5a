// Config -> YAML text with every key and a one-line comment each: the effective config a run
// writes beside its outputs, and the source of configs/default.yaml.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

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
  // NOTE: rename() cannot replace a directory; refused before anything is written (it used to
  // fail at the rename and leave the .tmp behind).
  ECHO_INPUT_CHECK(!fs::is_directory(fs::symlink_status(target, error)),
                   "cannot write the effective config '{}': it is a directory; move it away", path);
  // Write a sibling temp file and rename it, so a reader never sees half a config. Something
  // other than a file at the temp name (a FIFO would block the open) is not ours to remove.
  const fs::path temp = fs::path(path + ".tmp");
  const fs::file_status in_the_way = fs::symlink_status(temp, error);
  ECHO_INPUT_CHECK(!fs::exists(in_the_way) || fs::is_regular_file(in_the_way),
                   "cannot write the effective config '{}': '{}' is in the way (not a regular file); move it away",
                   path, temp.string());
  std::ofstream out(temp);
  ECHO_RUN_CHECK(out, "cannot write the effective config '{}': cannot create '{}': {}", path, temp.string(),
                 std::strerror(errno));
  try {  // from here on the temp file is ours: a failure removes it
    out << "# Effective echo configuration: every key, defaults included";
    if (!config.source.empty()) out << "; loaded from " << config.source;
    out << ".\n" << to_yaml(config);
    out.close();
    ECHO_RUN_CHECK(out, "cannot write the effective config '{}': writing '{}' failed", path, temp.string());
    fs::rename(temp, target, error);
    ECHO_RUN_CHECK(!error, "cannot write the effective config '{}': cannot rename '{}' to it: {}", path, temp.string(),
                   error.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    throw;
  }
}

}  // namespace echo::config
