// Fuzz test of the MMIDIDX reader (IndexedDataset::open): a few hundred seeded mutants of a
// valid index (edge-of-range counts, lengths and pointers spliced into the binary header and
// arrays), sometimes with a truncated .bin, each end in success or in an echo::InputError, never
// a signal, a hang or another exception. An accepted dataset is read whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/indexed_dataset.h"
#include "fuzz/fuzz_util.h"

namespace echo::data {
namespace {

namespace fs = std::filesystem;
using fuzz::slurp;
using fuzz::spit;

void read_everything(const std::string& prefix) {
  const IndexedDataset ds = IndexedDataset::open(prefix);
  std::vector<int32_t> tokens(ds.num_tokens());
  ds.copy_tokens(0, tokens.size(), tokens.data());
  uint64_t total = 0;
  for (size_t i = 0; i < ds.num_documents(); ++i) total += ds.document_length(i);
  ASSERT_EQ(total, ds.num_tokens());
}

TEST(MmidxFuzz, MutantsEndInSuccessOrInputError) {
  const fs::path dir = fs::temp_directory_path() / ("echo_mmidx_fuzz_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string seed_prefix = (dir / "seed").string();
  {
    IndexedDatasetWriter writer(seed_prefix);
    const std::vector<std::vector<int32_t>> docs = {{5, 6, 7}, {}, {151643}, {1, 2, 3, 4, 5, 6, 7, 8}, {9}};
    for (const auto& d : docs) writer.add_document(d);
    writer.finalize();
  }
  const std::string idx = slurp(seed_prefix + ".idx"), bin = slurp(seed_prefix + ".bin");
  read_everything(seed_prefix);

  // Little-endian 8-byte counts that matter: 0, 1, the seed's own counts off by one, huge ones.
  std::vector<std::string> tokens;
  for (uint64_t v : {0ull, 1ull, 4ull, 5ull, 6ull, 7ull, 1ull << 31, 1ull << 60, ~0ull, ~0ull >> 1}) {
    std::string t(8, '\0');
    std::memcpy(t.data(), &v, 8);
    tokens.push_back(t);
  }
  tokens.push_back(std::string("MMIDIDX\0\0", 9));
  tokens.push_back(std::string("\xff\xff\xff\x7f", 4));
  tokens.push_back(std::string("\x08", 1));  // the uint16 dtype code
  const fuzz::Mutator mutator(idx, tokens);
  const std::string prefix = (dir / "mutant").string();
  const fuzz::Outcome outcome = fuzz::run_mutants(mutator, 400, [&](const fuzz::Mutant& m) {
    spit(prefix + ".idx", m.bytes);
    // Every fifth mutant also loses the end of its .bin.
    const bool cut = m.description.size() % 5 == 0;
    spit(prefix + ".bin", cut ? bin.substr(0, bin.size() / 2) : bin);
    read_everything(prefix);
  });
  fs::remove_all(dir);
  std::printf("mutants: %d accepted, %d refused\n", outcome.accepted, outcome.refused);
  EXPECT_GT(outcome.accepted, 5);
  EXPECT_GT(outcome.refused, 200);
}

}  // namespace
}  // namespace echo::data
