// Helpers shared by the data tests: a scratch directory per test, raw file bytes, and the message
// of the echo::Error a call throws.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "data/indexed_dataset.h"
#include "../support/test_util.h"

namespace echo::data::testing {

using echo::testing::error_of;
using echo::testing::kNoErrorThrown;

namespace fs = std::filesystem;

// A fresh directory named after the running test, removed on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / (std::string("echo_data_") + info->test_suite_name() + "_" + info->name() +
                                         "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string prefix(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// Captures the "data" log (rank 0 of 1) for the life of the object.
class LogCapture {
 public:
  LogCapture() { log::init(0, 1, spdlog::level::info, {std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)}); }
  ~LogCapture() { log::init(0, 1); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
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
