// A dataset file truncated while it is mapped: the read that faults names the file and exits
// with kFaultExitCode (a bare SIGBUS before); a bus error elsewhere still takes its usual course.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <csignal>
#include <fstream>
#include <numeric>
#include <random>

#include "data/data_loader.h"
#include "data/fault_names.h"
#include "data/mapped_file.h"
#include "data_test_util.h"

namespace echo::data {
namespace {

using testing::ScratchDir;

// The loader reads a .bin that another process cut to a few bytes after the run opened it.
TEST(MappedFileDeathTest, ATruncatedBinNamesTheFileInsteadOfABareSigbus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScratchDir dir;
  const std::string prefix = dir.path("corpus");
  // 64 KiB of tokens, so the truncated tail spans whole pages.
  testing::write_dataset(prefix, testing::random_documents(std::vector<size_t>(16, 1024), 0, 1000, 5));
  auto read_after_truncation = [&] {
    const IndexedDataset ds = IndexedDataset::open(prefix);
    DataLoader loader(ds, {64, 1, 999, 0, 1});
    std::vector<int32_t> tokens, targets;
    loader.micro_batch(0, 0, 4, 1, tokens, targets);  // fine while the file is whole
    ::truncate((prefix + ".bin").c_str(), 16);
    int64_t sum = 0;
    for (uint64_t step = 0; step < 64; ++step) {
      loader.micro_batch(step * 4, 0, 4, 1, tokens, targets);
      sum += std::accumulate(tokens.begin(), tokens.end(), int64_t{0});
    }
    std::fprintf(stderr, "read past the end without a fault (%lld)\n", static_cast<long long>(sum));
    std::_Exit(0);
  };
  EXPECT_EXIT(read_after_truncation(), ::testing::ExitedWithCode(kFaultExitCode),
              // The death test re-runs this body in a child, whose scratch directory has its pid.
              "bus error reading the memory-mapped file '.*/corpus\\.bin'");
}

// Resident KiB of the mapping that starts at `addr`, from /proc/self/smaps ("Rss:"), or -1.
long mapping_rss_kib(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t want = reinterpret_cast<uintptr_t>(addr);
  bool in_it = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.find('-') != std::string::npos && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find(':') > line.find(' ')) {
      in_it = std::stoull(line.substr(0, line.find('-')), nullptr, 16) == want;
      continue;
    }
    if (in_it && line.rfind("Rss:", 0) == 0) return std::stol(line.substr(4));
  }
  return -1;
}

// Access::whole_file (MAP_POPULATE, for checksums) maps the same bytes as the default, for
// random contents and sizes around page boundaries, and an empty file as empty; its pages are
// mapped up front (resident before any read), the default's only when touched.
// A FIFO at a dataset's or a checkpoint's name used to block open() until a writer came (a hang
// of the run); /dev/zero is refused the same way.
TEST(MappedFileTest, OnlyRegularFilesAreMapped) {
  ScratchDir dir;
  const std::string fifo = dir.path("x.idx");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    EXPECT_EQ(echo::testing::kind_and_what_of([&] { MappedFile::open(path); }), "input: " + path + ": not a regular file");
  }
}

TEST(MappedFileTest, WholeFileAccessMapsTheSameBytes) {
  ScratchDir dir;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  for (const size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4097}, size_t{(1 << 20) + 3}}) {
    std::vector<uint8_t> bytes(size);
    for (auto& b : bytes) b = static_cast<uint8_t>(gen());
    const std::string path = dir.path("f" + std::to_string(size));
    testing::write_bytes(path, bytes);
    const MappedFile whole = MappedFile::open(path, MappedFile::Access::whole_file);
    const MappedFile random = MappedFile::open(path);
    ASSERT_EQ(whole.size(), size);
    ASSERT_EQ(random.size(), size);
    if (size == 0) {
      EXPECT_EQ(whole.data(), nullptr);
      continue;
    }
    if (size > (1 << 20)) {
      EXPECT_GE(mapping_rss_kib(whole.data()), 1024) << "whole_file: populated";
      EXPECT_EQ(mapping_rss_kib(random.data()), 0) << "random: nothing mapped before a read";
    }
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), whole.data())) << size;
    EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), random.data())) << size;
  }
}

// A SIGBUS that is not a read of a registered mapping is left alone: it goes to the handler that
// was there before (a sanitizer's, which reports and exits) or takes the default action (killed).
bool died_of_someone_elses_handling(int status) {
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGBUS;
  return WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != kFaultExitCode;
}

TEST(MappedFileDeathTest, OtherBusErrorsKeepTheirDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScratchDir dir;
  const std::string path = dir.path("f");
  testing::write_bytes(path, std::vector<uint8_t>(8192, 1));
  EXPECT_EXIT(
      {
        const MappedFile f = MappedFile::open(path);  // installs the handler
        std::raise(SIGBUS);                           // si_addr is not in any mapping
        std::_Exit(0);
      },
      died_of_someone_elses_handling, "");
}

}  // namespace
}  // namespace echo::data
