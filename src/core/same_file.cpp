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

bool is_inside(const fs::path& path, const fs::path& dir) {
  const fs::path p = resolved(path), d = resolved(dir);
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // the empty last element of a directory spelled with a trailing '/'
    if (pi == p.end() || *pi != *di) return false;
  }
  return pi != p.end() && !pi->empty();
}

}  // namespace echo
