// The loop every parser fuzz test runs: build mutants of a seed file, feed each to the parser,
// and require that it ends in success or in echo::Error (the parsers' documented exception),
// never in another exception; signals and hangs fail the ctest entry itself (crash, timeout).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <typeinfo>

#include "core/error.h"
#include "fuzz/mutator.h"

namespace echo::fuzz {

// The bytes of the file at `path` ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes `bytes` to `path`, replacing it.
inline void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct Outcome {
  int accepted = 0, refused = 0;
};

// Runs `parse` on mutants 0 .. count-1; `parse` returns normally for an accepted input and lets
// the parser's echo::Error escape for a refused one, which must be an input error (a message for
// the user, no source location) unless `any_error` allows internal ones too.
inline Outcome run_mutants(const Mutator& mutator, uint64_t count, const std::function<void(const Mutant&)>& parse,
                           bool any_error = false) {
  Outcome outcome;
  for (uint64_t i = 0; i < count; ++i) {
    const Mutant m = mutator.make(i);
    try {
      parse(m);
      ++outcome.accepted;
    } catch (const Error& e) {
      ++outcome.refused;
      EXPECT_FALSE(e.message().empty()) << m.description;
      EXPECT_TRUE(any_error || e.kind() != Error::Kind::internal) << m.description << " ended in an internal error: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << m.description << " ended in a " << typeid(e).name() << ", not echo::Error: " << e.what();
    }
  }
  return outcome;
}

}  // namespace echo::fuzz
