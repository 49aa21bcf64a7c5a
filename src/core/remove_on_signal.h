// Removes a program's partial output files (or scratch directories) when SIGINT, SIGTERM, SIGHUP
// or SIGUSR1 (what scripts/mpirun.sh passes a SIGTERM on as) ends it. A tool that
// streams into PREFIX.bin.tmp (echo_prep) cleans up after an error through destructors, but the
// default action of Ctrl-C ends the process without running any: the partial files stayed
// behind. The handler unlinks the registered paths (unlink is async-signal-safe) and then lets
// the signal end the process as before (exit status 128 + signal). A signal the process ignores
// when the object is made (nohup's SIGHUP) is left ignored.
//
// A stretch of work that must not be cut in half (renaming finished files into place) runs
// inside a StopSignalsDeferred: a signal then waits until it ends. Worker threads are started
// inside one too, so they inherit the blocked mask and a signal always reaches the thread that
// defers.
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace echo {

inline constexpr int kStopSignalCount = 4;  // SIGINT, SIGTERM, SIGHUP, SIGUSR1

class RemoveOnSignal {
 public:
  // Installs the handlers; at most 8 paths (files and directories together) of under 4096 bytes
  // each. A directory is removed with everything in it (`rm -rf` in a child process).
  explicit RemoveOnSignal(const std::vector<std::string>& paths, const std::vector<std::string>& directories = {});
  // Unregisters the paths and restores the previous handlers.
  ~RemoveOnSignal();
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

  // From now on a signal removes nothing (the files became the finished output).
  void disarm() noexcept;

 private:
  struct sigaction previous_[kStopSignalCount];
  bool installed_[kStopSignalCount] = {};  // false: the signal was ignored, and stays so
};

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread for its lifetime; one that arrived meanwhile is delivered
// when it ends.
class StopSignalsDeferred {
 public:
  StopSignalsDeferred();
  ~StopSignalsDeferred();
  StopSignalsDeferred(const StopSignalsDeferred&) = delete;
  StopSignalsDeferred& operator=(const StopSignalsDeferred&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace echo
