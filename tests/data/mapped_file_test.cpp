// A dataset file truncated while it is mapped: the read that faults names the file and exits
// with kFaultExitCode (a bare SIGBUS before); a bus error elsewhere still takes its usual course.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <numeric>

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
      loader.micro_batch(step, 0, 4, 1, tokens, targets);
      sum += std::accumulate(tokens.begin(), tokens.end(), int64_t{0});
    }
    std::fprintf(stderr, "read past the end without a fault (%lld)\n", static_cast<long long>(sum));
    std::_Exit(0);
  };
  EXPECT_EXIT(read_after_truncation(), ::testing::ExitedWithCode(kFaultExitCode),
              // The death test re-runs this body in a child, whose scratch directory has its pid.
              "bus error reading the memory-mapped file '.*/corpus\\.bin'");
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
