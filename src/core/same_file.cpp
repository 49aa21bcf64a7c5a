// same_file (core/same_file.h): path identity by resolved place, then by file identity.
#include "core/same_file.h"

#include <system_error>

namespace echo {
namespace {

namespace fs = std::filesystem;

fs::path resolved(const fs::path& p) {
  std::error_code ec;
  // NOTE: absolute first: libstdc++'s weakly_canonical leaves a relative path whose first element
  // does not exist as it is, while "./x" comes back absolute, so the two spellings differed.
  fs::path abs = fs::absolute(p, ec);
  if (ec) return p.lexically_normal();
  // A dangling symbolic link leads where a write through it creates its target; weakly_canonical
  // stops at it (the target does not exist), so it is followed here (bounded, as the kernel does).
  fs::path followed = abs;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(followed, ec)) && !fs::exists(followed, ec); ++hops) {
    const fs::path target = fs::read_symlink(followed, ec);
    if (ec || hops == 40) {  // a loop: compared by its own name
      followed = abs;
      break;
    }
    followed = target.is_absolute() ? target : followed.parent_path() / target;
  }
  abs = followed;
  fs::path r = fs::weakly_canonical(abs, ec);
  return (ec ? abs : r).lexically_normal();
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

namespace {

// Whether the resolved `p` lies below the resolved directory `d`, element by element.
bool below(const fs::path& p, const fs::path& d) {
  if (d.empty()) return false;
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // the empty last element of a directory spelled with a trailing '/'
    if (pi == p.end() || *pi != *di) return false;
  }
  return pi != p.end() && !pi->empty();
}

}  // namespace

bool is_inside(const fs::path& path, const fs::path& dir) {
  if (path.empty() || dir.empty()) return false;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec);
  if (ec) return false;
  const fs::path folder = resolved(dir);
  // Where the name itself is (its folder resolved, its last element as given), and where it
  // leads: a symbolic link in the folder is inside it wherever it points (a Hugging Face cache's
  // snapshot holds links into ../../blobs), and a link elsewhere that points in is inside too.
  const fs::path location = (resolved(abs.parent_path()) / abs.filename()).lexically_normal();
  return below(location, folder) || below(resolved(abs), folder);
}

}  // namespace echo
