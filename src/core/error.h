// The ECHO_CHECK family: every failed precondition throws echo::Error carrying the file, the
// line, the failed condition and a formatted message. main() catches, logs on the failing rank
// and aborts the MPI job, so no rank hangs.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace echo {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line, const char* condition);
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

[[noreturn]] void throw_error(const char* file, int line, const char* condition, std::string message);

}  // namespace echo

#define ECHO_CHECK(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond)) ::echo::throw_error(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define ECHO_FAIL(...) ::echo::throw_error(__FILE__, __LINE__, nullptr, ::fmt::format(__VA_ARGS__))
