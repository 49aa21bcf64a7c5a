// echo::Error construction: the message a user sees first, then where it was raised.
#include "core/error.h"

namespace echo {

static std::string describe(const std::string& message, const char* file, int line, const char* condition) {
  if (condition) return fmt::format("{} [check '{}' failed at {}:{}]", message, condition, file, line);
  return fmt::format("{} [at {}:{}]", message, file, line);
}

Error::Error(std::string message, const char* file, int line, const char* condition)
    : std::runtime_error(describe(message, file, line, condition)), message_(std::move(message)), file_(file), line_(line) {}

void throw_error(const char* file, int line, const char* condition, std::string message) {
  throw Error(std::move(message), file, line, condition);
}

}  // namespace echo
