// Run directory checks.
#include "train/run_dir.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <mpi.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"
#include "core/input_excerpt.h"
#include "core/log.h"
#include "core/same_file.h"
#include "dist/collective_watchdog.h"
#include "dist/mpi_check.h"
#include "train/checkpoint/checkpoint.h"

namespace echo::train {

namespace fs = std::filesystem;

std::string run_file(const std::string& out_dir, const char* name) {
  // NOTE: not lexically_normal, which would also fold "link/.." where the link names a folder elsewhere.
  const size_t end = out_dir.find_last_not_of('/');
  return (end == std::string::npos ? std::string() : out_dir.substr(0, end + 1)) + "/" + name;
}

// What marks a directory as holding a run: metrics or checkpoints. A config.yaml alone (left by a
// run that failed during start-up, before the trainer wrote it last) or an empty metrics file
// (a run stopped before its first step) is nothing to protect.
bool holds_run(const std::string& out_dir) {
  const fs::path dir(out_dir);
  std::error_code ec;
  const bool metrics = fs::is_regular_file(dir / "metrics.jsonl", ec) && fs::file_size(dir / "metrics.jsonl", ec) > 0;
  const bool checkpoints = fs::is_directory(dir / "checkpoints", ec) && !fs::is_empty(dir / "checkpoints", ec);
  return metrics || checkpoints;
}

namespace {

// Why out_dir's name alone makes it unusable for a run that saves up to last_step, or "".
std::string refuse_name(const std::string& out_dir, int64_t last_step) {
  // The root holds no run of its own: a run there writes config.yaml, metrics.jsonl, checkpoints/
  // and its lock file among the system's folders.
  std::error_code root_error;
  if (fs::weakly_canonical(out_dir, root_error) == "/")
    return fmt::format(
        "'run.out_dir' = {} is the file system's root: a run writes config.yaml, metrics.jsonl, checkpoints/ and a "
        "lock file there; give it a folder of its own",
        input_excerpt(out_dir));
  // A run.out_dir so long that a checkpoint's files cannot be named failed at the first save,
  // after the steps before it; refused before anything is created.
  const std::string longest = longest_checkpoint_path(out_dir, last_step);
  if (longest.size() >= PATH_MAX)
    return fmt::format(
        "'run.out_dir' is {} bytes long: a checkpoint's files would be named by paths of up to {} bytes (run.out_dir "
        "followed by {}), over this system's limit of {} (PATH_MAX); choose a shorter run.out_dir",
        out_dir.size(), longest.size(), input_excerpt(longest.substr(out_dir.size())), PATH_MAX - 1);
  return {};
}

// Why --overwrite of the run in `dir` would delete one of `inputs`, or "".
std::string overwritten_input(const fs::path& dir, const std::vector<RunInput>& inputs) {
  for (const RunInput& input : inputs) {
    if (input.path.empty()) continue;
    for (const char* name : kRunEntries) {
      const fs::path cleared = dir / name;
      if (!is_inside(input.path, cleared) && !same_file(input.path, cleared.string())) continue;
      return fmt::format(
          "'{}' = {} lies in {}, which --overwrite deletes once start-up has succeeded (after it was read): copy it "
          "out of the run directory first (cp -r) and point {} at the copy, or choose another run.out_dir; nothing "
          "was changed",
          input.key, input.path, cleared.string(), input.key);
    }
  }
  return {};
}

std::string inspect(const std::string& out_dir, int64_t last_step, RunDirMode mode, bool& has_run, RunDirLock& lock,
                    const std::vector<RunInput>& inputs) {
  if (std::string refused = refuse_name(out_dir, last_step); !refused.empty()) return refused;
  const fs::path dir(out_dir);
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);  // never throws: a bad name is a message
  if (ec && ec != std::errc::no_such_file_or_directory)
    return fmt::format("cannot use 'run.out_dir' = {}: {}", out_dir, ec.message());
  if (fs::exists(status) && !fs::is_directory(status))
    return fmt::format("'run.out_dir' = {} is a file, not a directory", out_dir);
  // Before anything is looked at: another echo_train may be writing this run right now.
  if (std::string error = lock.acquire(out_dir); !error.empty()) return error;
  has_run = holds_run(dir);
  if (has_run && mode == RunDirMode::fresh)
    return fmt::format(
        "'run.out_dir' = {} already holds a run (metrics.jsonl or checkpoints/); pass --resume to "
        "continue it or --overwrite to replace it",
        out_dir);
  // --overwrite clears the old run only once start-up has succeeded (clear_run_dir), so a start
  // that fails (a typo in data.train, a bad checkpoint to init from) keeps it.
  if (has_run && mode == RunDirMode::overwrite)
    if (std::string refused = overwritten_input(dir, inputs); !refused.empty()) return refused;
  if (mode == RunDirMode::resume) {
    const fs::path root = dir / "checkpoints";
    if (fs::exists(root, ec) && !fs::is_directory(root, ec))
      return fmt::format("cannot resume the run in {}: {} is not a directory", out_dir, root.string());
  }
  // The trainer writes config.yaml last, once start-up has succeeded: a directory there would
  // fail only then, after the data scans and a checkpoint load.
  const fs::path config = dir / "config.yaml";
  if (fs::is_directory(fs::symlink_status(config, ec)))
    return fmt::format(
        "cannot use 'run.out_dir' = {}: {} is a directory, where the run writes its effective config; move it away",
        out_dir, config.string());
  return {};
}

}  // namespace

RunDirLock::~RunDirLock() {
  // A start-up refused before the run wrote anything (a memory plan, a bad checkpoint) leaves the
  // folder as it found it: an empty run directory with only a lock file looked like a run to clean.
  // NOTE: only a lock this run held: one that lost the race to another echo_train must leave that
  // run's file (and so its folder, which rmdir then cannot remove) alone.
  if (!kept_ && held_ && made_file_) ::unlinkat(dir_fd_, kRunLockFile, 0);
  for (const int fd : {file_fd_, dir_fd_})  // closing releases the flocks
    if (fd >= 0) ::close(fd);
  if (!kept_)
    for (auto made = made_dirs_.rbegin(); made != made_dirs_.rend(); ++made)
      if (::rmdir(made->c_str()) != 0) break;  // not empty (someone else's file): it stays, and so do its parents
}

std::string RunDirLock::acquire(const std::string& out_dir) {
  // Made level by level, recording the levels this call made (and only those), so that a refused
  // start-up can remove them again (~RunDirLock): "missing/../kept" makes "missing" alone.
  fs::path level;
  for (const fs::path& part : fs::path(out_dir)) {
    level /= part;
    if (part.empty()) continue;  // the empty last element of a name ending in '/'
    if (::mkdir(level.c_str(), 0777) == 0) {
      made_dirs_.push_back(level.string());
      step(Step::level_made, level.string());
    } else if (errno != EEXIST) {
      return fmt::format("cannot create 'run.out_dir' = {}: {}", out_dir, std::strerror(errno));
    } else {
      step(Step::level_found, level.string());
    }
  }
  const std::string path = (fs::path(out_dir) / kRunLockFile).string();
  const int dir_fd = ::open(out_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return fmt::format("cannot open the run directory {}: {}", out_dir, std::strerror(errno));
  step(Step::dir_opened, out_dir);
  // NOTE: O_NOFOLLOW and no O_TRUNC: the pid is written into the file, and a link planted at the
  // name (or a FIFO) would have its target overwritten or block the open. O_EXCL first tells
  // whether this run made the file (a link at the name exists too, and is refused below).
  int fd = ::openat(dir_fd, kRunLockFile, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  made_file_ = fd >= 0;
  if (fd < 0 && errno == EEXIST) fd = ::openat(dir_fd, kRunLockFile, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  const int open_error = errno;
  if (fd >= 0) step(made_file_ ? Step::file_made : Step::file_opened, path);
  // The lock file this call opened was unlinked before it was locked: by the refused start-up of
  // another echo_train that made it (~RunDirLock), which has let go of the run directory by then.
  const auto removed = [&path] {
    return fmt::format(
        "the run directory's lock file {} was removed or replaced while this echo_train took its lock (another "
        "echo_train's start-up on the same run.out_dir was refused at that moment); run it again",
        path);
  };
  struct stat st {};
  const bool stat_ok = fd >= 0 && ::fstat(fd, &st) == 0;
  // NOTE: a regular file with no link left was unlinked since the open above (no hard link
  // planted): "is a file with 0 hard links ...; remove it" sent the user after a file that was gone
  // (found by tests/train/run_dir_race_test.cpp, a start-up paused between this open and fstat).
  if (stat_ok && S_ISREG(st.st_mode) && st.st_nlink == 0) {
    ::close(fd);
    ::close(dir_fd);
    made_file_ = false;
    return removed();
  }
  // A hard link planted at the name is a regular file too: its target would be truncated.
  if (!stat_ok || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    if (fd >= 0) ::close(fd);
    ::close(dir_fd);
    if (fd >= 0 || open_error == ELOOP)
      return fmt::format(
          "the run directory's lock file {} is {}: echo_train writes its pid there and follows no "
          "link; remove it",
          path,
          fd < 0                ? std::string("a symbolic link")
          : S_ISREG(st.st_mode) ? fmt::format("a file with {} hard links", st.st_nlink)
                                : std::string("not a regular file"));
    return fmt::format("cannot open the run directory's lock file {}: {}", path, std::strerror(open_error));
  }
  step(Step::file_checked, path);
  dir_fd_ = dir_fd;
  file_fd_ = fd;
  // Both the directory and the file are locked: deleting the file (a "stale lock" cleanup) leaves
  // the directory's lock, and an echo_train from before the directory lock still sees the file's.
  std::string unlocked[2];  // why the file's, the directory's lock could not be taken
  for (const int locked : {fd, dir_fd}) {
    if (::flock(locked, LOCK_EX | LOCK_NB) == 0) {
      step(locked == fd ? Step::file_locked : Step::dir_locked, locked == fd ? path : out_dir);
      continue;
    }
    const int err = errno;
    if (err != EWOULDBLOCK) {
      unlocked[locked == fd ? 0 : 1] = std::strerror(err);
      continue;
    }
    std::string holder(256, '\0');
    const ssize_t n = ::pread(fd, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? static_cast<size_t>(n) : 0);
    holder = holder.substr(0, holder.find('\n'));
    made_dirs_.clear();  // the holder's run lives in them
    made_file_ = false;
    ::close(std::exchange(dir_fd_, -1));  // none of this directory is ours
    ::close(std::exchange(file_fd_, -1));
    return fmt::format(
        "'run.out_dir' = {} is in use by another echo_train{} (it holds the lock on {}); wait for it to end, stop "
        "it, or use another run.out_dir",
        out_dir, holder.empty() ? "" : " (" + holder + ")", locked == fd ? path : out_dir);
  }
  // A file system without locks must not stop every run: go on, saying what is not guarded. NOTE:
  // NFS emulates flock with fcntl locks, which a directory (open read-only) cannot take.
  if (!unlocked[0].empty() && !unlocked[1].empty())
    ECHO_WARN("train", "cannot lock {} ({}) nor {} ({}): another echo_train on this run directory would not be noticed",
              path, unlocked[0], out_dir, unlocked[1]);
  else if (!unlocked[1].empty())
    ECHO_INFO("train",
              "cannot lock the run directory {} itself ({}); {} is locked, but deleting it while this run "
              "lives would let another echo_train in",
              out_dir, unlocked[1], path);
  else if (!unlocked[0].empty())
    ECHO_INFO("train", "cannot lock {} ({}); the run directory itself is locked", path, unlocked[0]);
  // The name must still lead to the file locked: a refused start-up removes the lock file it made
  // (~RunDirLock), and a file opened before that and locked after is no one's lock.
  struct stat named {};
  if (::fstatat(dir_fd, kRunLockFile, &named, AT_SYMLINK_NOFOLLOW) != 0 || named.st_dev != st.st_dev ||
      named.st_ino != st.st_ino) {
    ::close(std::exchange(dir_fd_, -1));
    ::close(std::exchange(file_fd_, -1));
    made_file_ = false;
    return removed();
  }
  held_ = true;
  step(Step::name_checked, path);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string holder = fmt::format("pid {} on {}\n", ::getpid(), host);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, holder.data(), holder.size(), 0) < 0) {
    // Only informative; the lock itself is held.
  }
  return {};
}

std::string RunDirLock::lost(const std::string& out_dir) const {
  if (dir_fd_ < 0) return {};
  struct stat held {};
  struct stat named {};
  if (::fstat(dir_fd_, &held) != 0) return {};  // nothing to compare with: not a verdict
  const char* why = nullptr;
  if (held.st_nlink == 0)
    why = "was deleted";
  else if (::stat(out_dir.c_str(), &named) != 0)
    why = "was moved away or deleted";
  else if (named.st_dev != held.st_dev || named.st_ino != held.st_ino)
    why =
        "now names another directory than the one this run locked (that one was moved or deleted and the name "
        "made again, a link at the name was pointed elsewhere, or a file system was mounted over it)";
  if (why == nullptr) return {};
  return fmt::format(
      "the run directory {} {} while this run was writing it: stopping, since writing on would make the folder "
      "again without its lock (a second echo_train could then write the same run) and put metrics and checkpoints "
      "where they belong to no run",
      out_dir, why);
}

bool prepare_run_dir(const std::string& out_dir, int64_t last_step, RunDirMode mode, const dist::Communicator& world,
                     RunDirLock& lock, const std::vector<RunInput>& inputs) {
  std::string error;
  bool has_run = false;
  if (world.rank() == 0) error = inspect(out_dir, last_step, mode, has_run, lock, inputs);
  // Every rank learns the verdict, so all fail together instead of some waiting forever.
  int len = static_cast<int>(error.size()), flag = has_run ? 1 : 0;
  const dist::CollectiveScope watched("the start-up's run-directory check (MPI_Bcast from rank 0)", world,
                                      dist::Patience::slow);
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, 0, world.get()));
  MPI_CHECK(MPI_Bcast(&flag, 1, MPI_INT, 0, world.get()));
  error.resize(static_cast<size_t>(len));
  if (len > 0) MPI_CHECK(MPI_Bcast(error.data(), len, MPI_CHAR, 0, world.get()));
  ECHO_INPUT_CHECK(error.empty(), "{}", error);
  return flag != 0;
}

namespace {

// Removes echo's own folders from a run's checkpoints/ (and the folder, when nothing else is
// left); gives back the names of what it kept. A user's step_best or notes there were deleted with
// it, though no save ever prunes them.
std::vector<std::string> clear_echo_checkpoints(const fs::path& checkpoints) {
  std::vector<std::string> kept;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoints, ec)) {
    const std::string name = entry.path().filename().string();
    if (!is_echo_checkpoint_name(name)) {
      kept.push_back(name);
      continue;
    }
    fs::remove_all(entry.path(), ec);
    ECHO_RUN_CHECK(!ec, "--overwrite: cannot clear {}: {}", entry.path().string(), ec.message());
  }
  ECHO_RUN_CHECK(!ec, "--overwrite: cannot list {}: {}", checkpoints.string(), ec.message());
  if (kept.empty()) fs::remove(checkpoints, ec);
  std::sort(kept.begin(), kept.end());
  return kept;
}

}  // namespace

void clear_run_dir(const std::string& out_dir) {
  const fs::path dir(out_dir);
  std::vector<std::string> kept;
  for (const char* name : kRunEntries) {
    const fs::path path = dir / name;
    std::error_code ec;
    if (path.filename() == "checkpoints" && fs::is_directory(fs::symlink_status(path, ec))) {
      kept = clear_echo_checkpoints(path);
      continue;
    }
    fs::remove_all(path, ec);
    ECHO_RUN_CHECK(!ec, "--overwrite: cannot clear {}: {}", path.string(), ec.message());
  }
  if (!kept.empty())
    ECHO_WARN("train",
              "--overwrite kept what echo did not name in {}: {} (move it away if it belongs to the old run; no save "
              "ever prunes it)",
              (dir / "checkpoints").string(), fmt::join(kept, ", "));
}

}  // namespace echo::train
