// RemoveOnSignal: the paths live in static storage because the handler may read nothing else.
#include "core/remove_on_signal.h"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"

namespace echo {
namespace {

constexpr int kSignals[kStopSignalCount] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
constexpr int kMaxPaths = 8;
constexpr size_t kMaxPathBytes = 4096;

char g_paths[kMaxPaths][kMaxPathBytes];
bool g_is_directory[kMaxPaths] = {};
volatile sig_atomic_t g_count = 0;
bool g_alive = false;  // a RemoveOnSignal exists (its handlers are installed, armed or not)

// `rm -rf -- dir` in a child: no tree walk is async-signal-safe in this process, but _Fork (no
// atfork handlers, unlike fork in a process MPI has hooked), execve and waitpid are.
void remove_directory(const char* dir) {
  const pid_t pid = ::_Fork();
  if (pid == 0) {
    char rm[] = "rm", rf[] = "-rf", dashes[] = "--";
    char* const argv[] = {rm, rf, dashes, const_cast<char*>(dir), nullptr};
    char* const envp[] = {nullptr};
    ::execve("/bin/rm", argv, envp);
    ::_exit(127);
  }
  if (pid > 0) ::waitpid(pid, nullptr, 0);
}

void remove_then_die(int sig) {
  for (sig_atomic_t i = 0; i < g_count; ++i) {
    if (g_is_directory[i])
      remove_directory(g_paths[i]);
    else
      ::unlink(g_paths[i]);
  }
  // The default action, raised again: it is delivered when this handler returns (the signal is
  // blocked inside its own handler) and ends the process as if no handler had been installed.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : kSignals) sigaddset(&set, sig);
  return set;
}

}  // namespace

RemoveOnSignal::RemoveOnSignal(const std::vector<std::string>& paths, const std::vector<std::string>& directories) {
  ECHO_CHECK(!g_alive, "RemoveOnSignal: one at a time");
  const size_t count = paths.size() + directories.size();
  ECHO_CHECK(count <= kMaxPaths, "RemoveOnSignal: at most {} paths, got {}", kMaxPaths, count);
  for (size_t i = 0; i < count; ++i) {
    const bool directory = i >= paths.size();
    const std::string& path = directory ? directories[i - paths.size()] : paths[i];
    ECHO_CHECK(path.size() < kMaxPathBytes, "RemoveOnSignal: path too long: {}", path);
    std::memcpy(g_paths[i], path.c_str(), path.size() + 1);
    g_is_directory[i] = directory;
  }
  g_count = static_cast<sig_atomic_t>(count);
  g_alive = true;
  struct sigaction sa {};
  sa.sa_handler = remove_then_die;
  sigemptyset(&sa.sa_mask);
  for (const int sig : kSignals) sigaddset(&sa.sa_mask, sig);  // one cleanup, not several nested
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < kStopSignalCount; ++i) {
    // A signal the caller ignores (SIGHUP under nohup, SIGINT in a background job of a script)
    // stays ignored: it did not end the program before, so it must not now.
    sigaction(kSignals[i], nullptr, &previous_[i]);
    installed_[i] = previous_[i].sa_handler != SIG_IGN;
    if (installed_[i]) sigaction(kSignals[i], &sa, nullptr);
  }
}

RemoveOnSignal::~RemoveOnSignal() {
  disarm();
  for (int i = 0; i < kStopSignalCount; ++i)
    if (installed_[i]) sigaction(kSignals[i], &previous_[i], nullptr);
  g_alive = false;
}

void RemoveOnSignal::disarm() noexcept { g_count = 0; }

StopSignalsDeferred::StopSignalsDeferred() {
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, &previous_);
}

StopSignalsDeferred::~StopSignalsDeferred() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

}  // namespace echo
