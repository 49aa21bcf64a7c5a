// same_file (core/same_file.h): path identity by resolved place, then by file identity.
#include "core/same_file.h"

#include <system_error>

namespace echo {
namespace {

namespace fs = std::filesystem;

fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(p, ec);
  if (!ec) return r;
  r = fs::absolute(p, ec);
  return (ec ? p : r).lexically_normal();
}

}  // namespace

bool same_file(const fs::path& a, const fs::path& b) {
  if (resolved(a) == resolved(b)) return true;
  // NOTE: a hard link resolves to its own name, so only the file's identity (device and inode)
  // shows it; equivalent() fails with ec set when either path does not exist: then not the same.
  std::error_code ec;
  const bool same = fs::equivalent(a, b, ec);
  return same && !ec;
}

}  // namespace echo
