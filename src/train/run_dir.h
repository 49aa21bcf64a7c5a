// The output directory of a run: refuse to write over another run unless told (--resume
// continues it, --overwrite replaces it), and say so on every rank at once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/needed_file.h"
#include "dist/communicator.h"

namespace echo::train {

// kRunLockFile and kRunEntries, the names of a run directory's files, are in core/needed_file.h.
using echo::kRunEntries;
using echo::kRunLockFile;

enum class RunDirMode { fresh, resume, overwrite };

// Collective: rank 0 inspects out_dir and creates it, and every rank throws the same echo::Error
// when out_dir holds another run and mode is fresh (or, for resume, when its checkpoints/ is not
// a directory). Returns true when out_dir holds an earlier run (to resume, or for overwrite to
// clear with clear_run_dir once start-up has succeeded: a failed start keeps the old run).
// An exclusive advisory lock (flock) on <out_dir>/.echo_train.lock, held by rank 0 for as long as
// the run's Trainer lives, so that a second echo_train on the same run directory (a scheduler's
// requeue while the first still runs, a --resume typed twice) is refused instead of truncating the
// first one's metrics.jsonl and pruning its checkpoints. The directory itself is locked too, so a
// deleted lock file lets nobody in. The file stays once the run wrote into the directory (it holds
// the pid and host of the last holder; only the locks matter); a start-up refused before that
// removes the lock file and the folders acquire made, so a refused run leaves no trace. A lock file
// that is a link or not a regular file is refused, never followed.
class RunDirLock {
 public:
  RunDirLock() = default;
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  // "" when the lock is now held, else why not (another process holds it, or the folder or file
  // cannot be made or opened). Makes out_dir and its missing parents.
  std::string acquire(const std::string& out_dir);
  // The run wrote (or is about to write) into out_dir: the lock file and the folders stay.
  void keep() { kept_ = true; }
  // "" while out_dir still names the directory locked by acquire (and when no lock is held: ranks
  // other than 0), else why not: it was deleted, or moved away (and perhaps made again). A run
  // that wrote on would recreate the folder without its lock, where a second echo_train --resume
  // is then admitted and both write one run (found by a hostile test: rm -rf of a live run).
  std::string lost(const std::string& out_dir) const;

  // The points of acquire, in the order it passes them; each is passed only when reached.
  enum class Step {
    level_made,    // mkdir made a level of out_dir (path: the level)
    level_found,   // a level of out_dir was there already (path: the level)
    dir_opened,    // out_dir opened (path: out_dir)
    file_made,     // the lock file created by this call (O_EXCL) (path: the lock file)
    file_opened,   // the lock file, there already, opened (path: the lock file)
    file_checked,  // the file opened is a regular file with one link (path: the lock file)
    file_locked,   // the lock file's flock taken (path: the lock file)
    dir_locked,    // out_dir's flock taken (path: out_dir)
    name_checked,  // the name still leads to the file locked: the lock is held (path: the lock file)
  };
  // Called by acquire at each Step. Tests use it to pause one of two processes racing for one run
  // directory between chosen steps (tests/train/run_dir_race_test.cpp).
  void at_each_step(std::function<void(Step, const std::string& path)> hook) { at_step_ = std::move(hook); }

 private:
  void step(Step s, const std::string& path) const {
    if (at_step_) at_step_(s, path);
  }

  int dir_fd_ = -1;   // out_dir, locked
  int file_fd_ = -1;  // out_dir/.echo_train.lock, locked
  bool made_file_ = false;
  std::vector<std::string> made_dirs_;  // the levels acquire made, outermost first
  bool held_ = false;                   // acquire took the lock
  bool kept_ = false;
  std::function<void(Step, const std::string&)> at_step_;
};

// A file of the run directory: out_dir/name, one slash whatever out_dir ends with ("runs/a/" gave
// "runs/a//metrics.jsonl" in the log).
std::string run_file(const std::string& out_dir, const char* name);

// Whether out_dir holds a run: a non-empty metrics.jsonl or checkpoints/ (a config.yaml alone is
// not one).
bool holds_run(const std::string& out_dir);

// A file or folder the run reads, by its config key ("run.init_from", "data.train").
struct RunInput {
  std::string key, path;
};

// `lock` is taken on rank 0 before out_dir is inspected (other ranks leave it alone). Refused by
// name before anything is created: the file system's root, and a name so long that a checkpoint
// of last_step (train.steps) would need a path over PATH_MAX (longest_checkpoint_path). With
// --overwrite of a run, an input that lies in what clear_run_dir removes (a checkpoint given as
// run.init_from, as the resume error advises) is refused: it would be deleted after it was read.
bool prepare_run_dir(const std::string& out_dir, int64_t last_step, RunDirMode mode, const dist::Communicator& world,
                     RunDirLock& lock, const std::vector<RunInput>& inputs = {});

// Rank 0, for --overwrite, after start-up succeeded: removes the old run's config.yaml,
// metrics.jsonl and checkpoints/.
void clear_run_dir(const std::string& out_dir);

}  // namespace echo::train
