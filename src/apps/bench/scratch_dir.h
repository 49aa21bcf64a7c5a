// A benchmark's scratch directory: a fresh, uniquely named directory inside the one the user
// names, so that a benchmark given a directory that holds anything else (a training run, its
// checkpoints) removes only what it wrote itself.
#pragma once

#include <mpi.h>

#include <filesystem>
#include <string>
#include <vector>

namespace echo::bench {

// Collective over comm: rank 0 creates "<parent>/<prefix>.XXXXXX" (mkdtemp; `parent` is created
// first when it does not exist) and every rank learns its path, or every rank throws the same
// echo::InputError naming `flag` when it cannot be created. On destruction rank 0 removes the
// scratch directory and the directories it created for `parent` (every missing level of a/b/c),
// each only if it is then empty; nothing else under `parent` is ever touched.
class ScratchDir {
 public:
  ScratchDir(const std::string& parent, const std::string& prefix, const std::string& flag, MPI_Comm comm);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::filesystem::path> created_parents_;  // deepest first
  bool owner_ = false;                                  // rank 0: the one that removes
};

}  // namespace echo::bench
