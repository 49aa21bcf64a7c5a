// LD_PRELOADed into echo_train by run_control_test.sh: its initializer stands for a shared
// library's slow static initialisation (cuBLASLt's takes about half a second), the window in which
// a SIGTERM killed a rank before main() installed its handler. It creates the file
// $ECHO_SLOW_START_DIR/<pid>, so the test knows whom to signal and when, then waits 5 s.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace {

[[gnu::constructor]] void wait_like_a_slow_library() {
  const char* dir = std::getenv("ECHO_SLOW_START_DIR");
  if (dir == nullptr) return;
  std::ofstream(std::string(dir) + "/" + std::to_string(::getpid())).flush();
  // sleep_until resumes after a handled signal interrupts it: the whole 5 s pass either way.
  std::this_thread::sleep_until(std::chrono::steady_clock::now() + std::chrono::seconds(5));
}

}  // namespace
