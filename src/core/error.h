// The ECHO_CHECK family: every failed precondition throws echo::Error carrying the file, the
// line, the failed condition and a formatted message. main() catches, logs on the failing rank
// and aborts the MPI job, so no rank hangs.
//
// Three kinds of error. An internal error (ECHO_CHECK, ECHO_FAIL) is a broken invariant or a
// misuse of an API: its what() ends with "[check '...' failed at file:line]" so a bug report
// points into the source. An input error (ECHO_INPUT_CHECK, ECHO_INPUT_FAIL, echo::InputError)
// is a problem in what the user gave echo (a config file or --set, a dataset, a checkpoint, a
// tokenizer.json, a command-line value). A run error (ECHO_RUN_CHECK, ECHO_RUN_FAIL,
// echo::RunError) is the run's own failure, not a bug: the file system refused a write (a full
// disk, a permission), or training diverged. The last two kinds' messages already name the file,
// key, value or step to look at, and what() is that message alone; the source location would
// only be noise to the user.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace echo {

class Error : public std::runtime_error {
 public:
  enum class Kind { internal, input, run };

  Error(std::string message, const char* file, int line, const char* condition);
  // The message without the source location.
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }
  // The failed condition's text for an ECHO_CHECK, else nullptr.
  const char* condition() const { return condition_; }
  Kind kind() const { return kind_; }
  // True for an InputError.
  bool is_input() const { return kind_ == Kind::input; }

 protected:
  Error(std::string message, const char* file, int line, const char* condition, Kind kind);

 private:
  std::string message_;
  const char* file_;
  int line_;
  const char* condition_;
  Kind kind_ = Kind::internal;
};

// A problem in the user's input; what() == message() (file()/line() still say where it was
// raised, for a debugger).
class InputError : public Error {
 public:
  InputError(std::string message, const char* file, int line);
};

// The run's own failure (see above); what() == message().
class RunError : public Error {
 public:
  RunError(std::string message, const char* file, int line);
};

// `e` again as `before` + its message + `after`, keeping its kind (and, for an internal error,
// where it was raised): for a caller that knows what the thrower did not (the training step).
[[noreturn]] void rethrow_with_context(const Error& e, const std::string& before, const std::string& after = "");

[[noreturn]] void throw_error(const char* file, int line, const char* condition, std::string message);
[[noreturn]] void throw_input_error(const char* file, int line, std::string message);
[[noreturn]] void throw_run_error(const char* file, int line, std::string message);

// Runs every check, then rethrows: nothing when none threw, the one echo::Error as it was, or one
// Error whose message lists each in order. For faults noted on the device during a step and read
// together at its end, so that a fault downstream (a NaN reaching the next layer) does not hide
// the one that caused it.
void raise_all(std::initializer_list<std::function<void()>> checks);

}  // namespace echo

#define ECHO_CHECK(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond)) ::echo::throw_error(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define ECHO_FAIL(...) ::echo::throw_error(__FILE__, __LINE__, nullptr, ::fmt::format(__VA_ARGS__))

#define ECHO_INPUT_CHECK(cond, ...)                                                         \
  do {                                                                                      \
    if (!(cond)) ::echo::throw_input_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define ECHO_INPUT_FAIL(...) ::echo::throw_input_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

#define ECHO_RUN_CHECK(cond, ...)                                                         \
  do {                                                                                    \
    if (!(cond)) ::echo::throw_run_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define ECHO_RUN_FAIL(...) ::echo::throw_run_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
