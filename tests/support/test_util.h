// Small helpers shared by the test files: the message of an expected echo::Error, a file's bytes.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "core/error.h"

namespace echo::testing {

// The whole file as bytes ("" when it cannot be opened).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What error_of returns when nothing was thrown: no expected message contains it.
inline const std::string kNoErrorThrown = "<no echo::Error thrown>";

// The message of the echo::Error that `f` throws, or kNoErrorThrown.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const echo::Error& e) {
    return e.message();
  }
  return kNoErrorThrown;
}

// The full what() of the echo::Error that `f` throws (only an internal error's carries
// "[at file:line]"), prefixed by its kind: "input: ", "run: " or "internal: "; or kNoErrorThrown.
template <class F>
std::string kind_and_what_of(F&& f) {
  try {
    f();
  } catch (const echo::Error& e) {
    const char* kind = e.kind() == echo::Error::Kind::input ? "input: "
                       : e.kind() == echo::Error::Kind::run ? "run: "
                                                            : "internal: ";
    return kind + std::string(e.what());
  }
  return kNoErrorThrown;
}

// Expects `f` to throw an echo::Error whose message holds `needle` (a failure names both).
inline void expect_error(const std::function<void()>& f, const std::string& needle) {
  const std::string message = error_of(f);
  EXPECT_NE(message.find(needle), std::string::npos) << "expected '" << needle << "' in: " << message;
}

}  // namespace echo::testing
