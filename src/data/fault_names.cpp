// The mapping registry and the SIGBUS handler. The handler only reads the registry (atomics and
// fixed char arrays, no allocation, no locks) and calls async-signal-safe functions.
#include "data/fault_names.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>

namespace echo::data {
namespace {

struct Region {
  std::atomic<const uint8_t*> begin{nullptr};
  std::atomic<size_t> size{0};
  char path[1024] = {};
  size_t path_len = 0;
};

constexpr size_t kRegions = 256;
// NOTE: process-wide by necessity: a signal handler has no other way to reach the mappings.
Region g_regions[kRegions];
std::mutex g_mutex;  // serialises register / unregister (never taken by the handler)
struct sigaction g_previous {};
std::once_flag g_installed;

void write_all(const char* text, size_t len) {
  while (len > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, len);
    if (n <= 0) return;
    text += n;
    len -= static_cast<size_t>(n);
  }
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto* addr = static_cast<const uint8_t*>(info->si_addr);
  for (const Region& r : g_regions) {
    const uint8_t* begin = r.begin.load(std::memory_order_acquire);
    if (begin == nullptr || addr < begin || addr >= begin + r.size.load(std::memory_order_relaxed)) continue;
    static constexpr char kHead[] = "echo: fatal: bus error reading the memory-mapped file '";
    static constexpr char kTail[] =
        "': it was truncated or rewritten while this run had it open; restore the file (for the demo data "
        "`bash scripts/get_data.sh --force`) and --resume\n";
    // One write() of the whole line: every rank mapping the file faults at once, and separate
    // writes of head, path and tail interleave on a shared stderr (seen under mpirun), which
    // garbles the file name. Under PIPE_BUF bytes a single write to a pipe is atomic.
    char line[sizeof kHead + sizeof Region::path + sizeof kTail];
    const size_t path_len = std::min(r.path_len, sizeof Region::path);
    std::memcpy(line, kHead, sizeof kHead - 1);
    std::memcpy(line + sizeof kHead - 1, r.path, path_len);
    std::memcpy(line + sizeof kHead - 1 + path_len, kTail, sizeof kTail - 1);
    write_all(line, sizeof kHead - 1 + path_len + sizeof kTail - 1);
    ::_exit(kFaultExitCode);
  }
  // Not one of ours: whoever handled SIGBUS before (Open MPI prints a backtrace), else the default.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if ((g_previous.sa_flags & SA_SIGINFO) == 0 && g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: raised again it stays pending (blocked in here) and kills on return.
  std::signal(SIGBUS, SIG_DFL);
  std::raise(SIGBUS);
}

void install() {
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

void register_mapping(const uint8_t* begin, size_t size, const std::string& path) {
  if (begin == nullptr || size == 0) return;
  std::call_once(g_installed, install);
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Region& r : g_regions) {
    if (r.begin.load(std::memory_order_relaxed) != nullptr) continue;
    r.path_len = std::min(path.size(), sizeof r.path - 1);
    std::memcpy(r.path, path.data(), r.path_len);
    r.path[r.path_len] = '\0';
    r.size.store(size, std::memory_order_relaxed);
    r.begin.store(begin, std::memory_order_release);  // published last: the handler sees a whole entry
    return;
  }
}

void unregister_mapping(const uint8_t* begin) noexcept {
  if (begin == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  for (Region& r : g_regions)
    if (r.begin.load(std::memory_order_relaxed) == begin) {
      r.begin.store(nullptr, std::memory_order_release);
      return;
    }
}

}  // namespace echo::data
