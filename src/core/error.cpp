// echo::Error construction: the message a user sees first, then (internal errors only) where it
// was raised.
#include "core/error.h"

#include <exception>
#include <vector>

namespace echo {

static std::string describe(const std::string& message, const char* file, int line, const char* condition,
                            Error::Kind kind) {
  if (kind != Error::Kind::internal) return message;
  if (condition) return fmt::format("{} [check '{}' failed at {}:{}]", message, condition, file, line);
  return fmt::format("{} [at {}:{}]", message, file, line);
}

Error::Error(std::string message, const char* file, int line, const char* condition)
    : Error(std::move(message), file, line, condition, Kind::internal) {}

Error::Error(std::string message, const char* file, int line, const char* condition, Kind kind)
    : std::runtime_error(describe(message, file, line, condition, kind)),
      message_(std::move(message)),
      file_(file),
      line_(line),
      condition_(condition),
      kind_(kind) {}

InputError::InputError(std::string message, const char* file, int line)
    : Error(std::move(message), file, line, nullptr, Kind::input) {}

RunError::RunError(std::string message, const char* file, int line)
    : Error(std::move(message), file, line, nullptr, Kind::run) {}

void rethrow_with_context(const Error& e, const std::string& before, const std::string& after) {
  std::string message = before + e.message() + after;
  switch (e.kind()) {
    case Error::Kind::input:
      throw InputError(std::move(message), e.file(), e.line());
    case Error::Kind::run:
      throw RunError(std::move(message), e.file(), e.line());
    default:
      throw Error(std::move(message), e.file(), e.line(), e.condition());
  }
}

void throw_error(const char* file, int line, const char* condition, std::string message) {
  throw Error(std::move(message), file, line, condition);
}

void throw_input_error(const char* file, int line, std::string message) {
  throw InputError(std::move(message), file, line);
}

void throw_run_error(const char* file, int line, std::string message) {
  throw RunError(std::move(message), file, line);
}

void raise_all(std::initializer_list<std::function<void()>> checks) {
  std::vector<Error> errors;
  std::exception_ptr first;  // rethrown as it was (an InputError stays one) when it is the only one
  for (const auto& check : checks) {
    try {
      check();
    } catch (const Error& e) {
      errors.push_back(e);
      if (!first) first = std::current_exception();
    }
  }
  if (errors.empty()) return;
  if (errors.size() == 1) std::rethrow_exception(first);
  std::string all = fmt::format("{} faults were noted in this step:", errors.size());
  for (size_t i = 0; i < errors.size(); ++i) all += fmt::format("\n  {}. {}", i + 1, errors[i].message());
  // A bug among them points into the source (the first bug's place); inputs alone stay an input
  // error; otherwise the run failed.
  bool all_input = true;
  for (const Error& e : errors) {
    if (e.kind() == Error::Kind::internal) throw_error(e.file(), e.line(), e.condition(), std::move(all));
    all_input = all_input && e.kind() == Error::Kind::input;
  }
  if (all_input) throw_input_error(errors.front().file(), errors.front().line(), std::move(all));
  throw_run_error(errors.front().file(), errors.front().line(), std::move(all));
}

}  // namespace echo
