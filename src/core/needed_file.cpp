// needed_file (core/needed_file.h).
#include "core/needed_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <string_view>
#include <system_error>

namespace echo {

namespace fs = std::filesystem;

std::string needed_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  const fs::path file = fs::weakly_canonical(fs::absolute(path), ec);  // where the write lands: links followed
  if (ec) return {};
  const std::string name = file.filename().string();
  if (name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json")) return "a weights file";
  for (const std::string_view ext : {".bin", ".idx", ".meta.json"}) {
    if (!name.ends_with(ext)) continue;
    const std::string prefix = file.string().substr(0, file.string().size() - ext.size());
    if (fs::exists(prefix + ".bin", ec) && fs::exists(prefix + ".idx", ec))
      return fmt::format("a file of the dataset '{}'", prefix);
  }
  for (fs::path dir = file.parent_path(); dir.has_relative_path(); dir = dir.parent_path()) {
    if (!fs::exists(dir / kRunLockFile, ec)) continue;
    const fs::path first = *file.lexically_relative(dir).begin();  // checkpoints/... counts as checkpoints
    if (first == kRunLockFile ||
        std::find(std::begin(kRunEntries), std::end(kRunEntries), first) != std::end(kRunEntries))
      return fmt::format("a file of the training run in '{}'", dir.string());
    break;
  }
  return {};
}

}  // namespace echo
