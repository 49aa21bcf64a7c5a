// Run directory checks.
#include "train/run_dir.h"

#include <mpi.h>

#include <filesystem>

#include "core/error.h"
#include "dist/mpi_check.h"

namespace echo::train {

namespace fs = std::filesystem;

namespace {

// What marks a directory as holding a run: metrics or checkpoints. A config.yaml alone (left by a
// run that failed during start-up, before the trainer wrote it last) or an empty metrics file
// (a run stopped before its first step) is nothing to protect.
bool holds_run(const fs::path& dir) {
  std::error_code ec;
  const bool metrics = fs::is_regular_file(dir / "metrics.jsonl", ec) && fs::file_size(dir / "metrics.jsonl", ec) > 0;
  const bool checkpoints = fs::is_directory(dir / "checkpoints", ec) && !fs::is_empty(dir / "checkpoints", ec);
  return metrics || checkpoints;
}

std::string inspect(const std::string& out_dir, RunDirMode mode, bool& has_run) {
  const fs::path dir(out_dir);
  std::error_code ec;
  if (fs::exists(dir) && !fs::is_directory(dir)) return fmt::format("'run.out_dir' = {} is a file, not a directory", out_dir);
  has_run = fs::exists(dir) && holds_run(dir);
  if (has_run && mode == RunDirMode::fresh)
    return fmt::format(
        "'run.out_dir' = {} already holds a run (metrics.jsonl or checkpoints/); pass --resume to "
        "continue it or --overwrite to replace it",
        out_dir);
  // --overwrite clears the old run only once start-up has succeeded (clear_run_dir), so a start
  // that fails (a typo in data.train, a bad checkpoint to init from) keeps it.
  if (mode == RunDirMode::resume) {
    const fs::path root = dir / "checkpoints";
    if (fs::exists(root, ec) && !fs::is_directory(root, ec))
      return fmt::format("cannot resume the run in {}: {} is not a directory", out_dir, root.string());
  }
  fs::create_directories(dir, ec);
  if (ec) return fmt::format("cannot create 'run.out_dir' = {}: {}", out_dir, ec.message());
  return {};
}

}  // namespace

bool prepare_run_dir(const std::string& out_dir, RunDirMode mode, const dist::Communicator& world) {
  std::string error;
  bool has_run = false;
  if (world.rank() == 0) error = inspect(out_dir, mode, has_run);
  // Every rank learns the verdict, so all fail together instead of some waiting forever.
  int len = static_cast<int>(error.size()), flag = has_run ? 1 : 0;
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, 0, world.get()));
  MPI_CHECK(MPI_Bcast(&flag, 1, MPI_INT, 0, world.get()));
  error.resize(static_cast<size_t>(len));
  if (len > 0) MPI_CHECK(MPI_Bcast(error.data(), len, MPI_CHAR, 0, world.get()));
  ECHO_INPUT_CHECK(error.empty(), "{}", error);
  return flag != 0;
}

void clear_run_dir(const std::string& out_dir) {
  const fs::path dir(out_dir);
  for (const char* name : {"config.yaml", "metrics.jsonl", "checkpoints"}) {
    std::error_code ec;
    fs::remove_all(dir / name, ec);
    ECHO_INPUT_CHECK(!ec, "--overwrite: cannot clear {}: {}", (dir / name).string(), ec.message());
  }
}

}  // namespace echo::train
