// Helpers shared by the data tests: a scratch directory per test (tests/support/scratch_dir.h), raw
// file bytes, random documents written as a dataset, and the message of the echo::Error a call throws.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../support/log_capture.h"
#include "../support/scratch_dir.h"
#include "../support/test_util.h"
#include "core/error.h"
#include "data/indexed_dataset.h"

namespace echo::data::testing {

using echo::testing::error_of;
using echo::testing::kNoErrorThrown;
using echo::testing::LogCapture;
using echo::testing::ScratchDir;

namespace fs = std::filesystem;

// A fresh seed per run (print it with SCOPED_TRACE): a test must hold for any sizes it draws.
struct Random {
  uint64_t seed = std::random_device{}();
  std::mt19937_64 gen{seed};
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
};

// The fixture of tests that write data: a scratch directory, a fresh seed, and the seed in the
// trace of every failure (so a size that breaks a test can be drawn again).
class ScratchDataTest : public ::testing::Test {
 protected:
  ScratchDir dir;
  Random r;

 private:
  ::testing::ScopedTrace seed_trace_{__FILE__, __LINE__, "seed " + std::to_string(r.seed)};
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Documents with the given lengths and ids uniform in [lo, hi).
inline std::vector<std::vector<int32_t>> random_documents(const std::vector<size_t>& lengths, int32_t lo, int32_t hi,
                                                          uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> id(lo, hi - 1);
  std::vector<std::vector<int32_t>> docs;
  for (size_t n : lengths) {
    std::vector<int32_t> d(n);
    for (auto& t : d) t = id(gen);
    docs.push_back(std::move(d));
  }
  return docs;
}

inline void write_dataset(const std::string& prefix, const std::vector<std::vector<int32_t>>& docs) {
  IndexedDatasetWriter writer(prefix);
  for (const auto& d : docs) writer.add_document(d);
  writer.finalize();
}

}  // namespace echo::data::testing
