// ScratchDir: mkdtemp on rank 0, the path (or the error) broadcast to every rank.
#include "apps/bench/scratch_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "dist/mpi_check.h"

namespace echo::bench {
namespace fs = std::filesystem;

namespace {

// Removes the directories made for the parent, deepest first, stopping at the first that is not
// empty: fs::remove deletes only an empty directory, so a level that something else wrote into
// meanwhile stays, and so do the levels above it.
void remove_created(const std::vector<fs::path>& created) {
  std::error_code ec;
  for (const fs::path& dir : created)
    if (!fs::remove(dir, ec)) break;
}

// Rank 0: creates the scratch directory; returns its path, or sets `error`.
// `created` gets the directories it made for `parent`, deepest first (all of a/b/c for a --dir
// a/b/c where nothing existed), so the destructor can take back exactly those.
std::string make_scratch(const std::string& parent, const std::string& prefix, const std::string& flag,
                         std::vector<fs::path>& created, std::string& error) {
  std::error_code ec;
  fs::path base = parent;  // where the scratch directory goes
  if (!fs::exists(parent, ec)) {
    fs::path level = fs::path(parent).lexically_normal();
    if (!level.has_filename()) level = level.parent_path();  // "a/b/c/" is a/b/c
    base = level;  // a/../b/c with a missing is b/c: the levels counted are the ones made
    for (fs::path p = level; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      created.push_back(p);
      if (p == p.parent_path()) break;
    }
    fs::create_directories(level, ec);  // the path whose levels were counted
    if (ec) {
      error = fmt::format("{} '{}' does not exist and cannot be created: {}", flag, parent, ec.message());
      return {};
    }
  } else if (!fs::is_directory(parent, ec)) {
    error = fmt::format("{} '{}' is not a directory", flag, parent);
    return {};
  }
  std::string templ = (base / (prefix + ".XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    error = fmt::format("{} '{}': cannot create a scratch directory in it: {}", flag, parent, std::strerror(errno));
    remove_created(created);  // no destructor runs after the constructor throws
    return {};
  }
  return std::string(buf.data());
}

void broadcast(std::string& text, MPI_Comm comm) {
  int len = static_cast<int>(text.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, 0, comm));
  text.resize(static_cast<size_t>(len));
  if (len > 0) MPI_CHECK(MPI_Bcast(text.data(), len, MPI_CHAR, 0, comm));
}

}  // namespace

ScratchDir::ScratchDir(const std::string& parent, const std::string& prefix, const std::string& flag, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string error;
  if (rank == 0) path_ = make_scratch(parent, prefix, flag, created_parents_, error);
  // Every rank learns the verdict, so all fail together instead of some waiting in a collective.
  broadcast(error, comm);
  ECHO_INPUT_CHECK(error.empty(), "{}", error);
  broadcast(path_, comm);
  owner_ = rank == 0;
}

ScratchDir::~ScratchDir() {
  if (!owner_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
  remove_created(created_parents_);
}

}  // namespace echo::bench
