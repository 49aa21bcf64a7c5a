// RemoveOnSignal: the paths live in static storage because the handler may read nothing else.
#include "core/remove_on_signal.h"

#include <pthread.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"

namespace echo {
namespace {

constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kMaxPaths = 8;
constexpr size_t kMaxPathBytes = 4096;

char g_paths[kMaxPaths][kMaxPathBytes];
volatile sig_atomic_t g_count = 0;
bool g_alive = false;  // a RemoveOnSignal exists (its handlers are installed, armed or not)

void remove_then_die(int sig) {
  for (sig_atomic_t i = 0; i < g_count; ++i) ::unlink(g_paths[i]);
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

RemoveOnSignal::RemoveOnSignal(const std::vector<std::string>& paths) {
  ECHO_CHECK(!g_alive, "RemoveOnSignal: one at a time");
  ECHO_CHECK(paths.size() <= kMaxPaths, "RemoveOnSignal: at most {} paths, got {}", kMaxPaths, paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    ECHO_CHECK(paths[i].size() < kMaxPathBytes, "RemoveOnSignal: path too long: {}", paths[i]);
    std::memcpy(g_paths[i], paths[i].c_str(), paths[i].size() + 1);
  }
  g_count = static_cast<sig_atomic_t>(paths.size());
  g_alive = true;
  struct sigaction sa {};
  sa.sa_handler = remove_then_die;
  sigemptyset(&sa.sa_mask);
  for (const int sig : kSignals) sigaddset(&sa.sa_mask, sig);  // one cleanup, not three nested
  sa.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) {
    // A signal the caller ignores (SIGHUP under nohup, SIGINT in a background job of a script)
    // stays ignored: it did not end the program before, so it must not now.
    sigaction(kSignals[i], nullptr, &previous_[i]);
    installed_[i] = previous_[i].sa_handler != SIG_IGN;
    if (installed_[i]) sigaction(kSignals[i], &sa, nullptr);
  }
}

RemoveOnSignal::~RemoveOnSignal() {
  disarm();
  for (int i = 0; i < 3; ++i)
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
