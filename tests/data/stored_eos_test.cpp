// Documents that already end in the EOS (data/stored_eos.h): which documents the sampled check
// looks at, what it finds, the loader refusing an append_eos claim the data does not keep (and a
// sidecar claiming 0 tokens), and the eos_stored rule with and without a sidecar.
#include "data/stored_eos.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "data/data_loader.h"
#include "data_test_util.h"

namespace echo::data {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::LogCapture;
using testing::random_documents;
using testing::Random;
using testing::ScratchDataTest;
using testing::ScratchDir;
using testing::write_dataset;

// `num_docs` random documents of 1..30 ids in [0, 1000) other than `eos`, each ending in `eos`.
std::vector<std::vector<int32_t>> documents_ending_in(int32_t eos, size_t num_docs, Random& r) {
  std::vector<size_t> lengths(num_docs);
  for (auto& n : lengths) n = static_cast<size_t>(r.uniform(0, 29));
  auto docs = random_documents(lengths, 0, 1000, r.gen());
  for (auto& d : docs) {
    for (auto& t : d)
      if (t == eos) t = eos + 1;
    d.push_back(eos);
  }
  return docs;
}

void write_sidecar(const std::string& prefix, const IndexedDataset& ds, int32_t eos, bool append_eos) {
  DatasetMeta m;
  m.tokenizer = "byte";
  m.vocab_size = 1001;
  m.eos_id = eos;
  m.eos_source = "--eos-token";
  m.append_eos = append_eos;
  m.documents = ds.num_documents();
  m.tokens = ds.num_tokens();
  write_dataset_meta(prefix, m);
}

class StoredEos : public ScratchDataTest {};

TEST_F(StoredEos, CheckedDocumentsSpreadEvenlyFromFirstToLast) {
  for (size_t d : {size_t{1}, size_t{2}, size_t{3}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{1} << 62})
    EXPECT_EQ(eos_check_documents(d).size(), std::min(d, kMaxEosChecks)) << d;
  EXPECT_TRUE(eos_check_documents(0).empty());
  EXPECT_EQ(eos_check_documents(1), std::vector<size_t>{0});
  for (int trial = 0; trial < 50; ++trial) {
    const size_t d = static_cast<size_t>(trial < 40 ? r.uniform(2, 100000) : r.uniform(2, int64_t{1} << 62));
    const auto docs = eos_check_documents(d);
    ASSERT_EQ(docs.size(), std::min(d, kMaxEosChecks)) << d;
    EXPECT_EQ(docs.front(), 0u);
    EXPECT_EQ(docs.back(), d - 1);
    // Evenly: every gap is floor or ceil of (D - 1) / (n - 1); so also strictly increasing.
    const size_t lo = (d - 1) / (docs.size() - 1), hi = lo + ((d - 1) % (docs.size() - 1) != 0);
    for (size_t i = 1; i < docs.size(); ++i) {
      ASSERT_GE(docs[i] - docs[i - 1], std::max<size_t>(lo, 1)) << "D " << d << " i " << i;
      ASSERT_LE(docs[i] - docs[i - 1], hi) << "D " << d << " i " << i;
    }
  }
}

// A checked document whose last token is not the EOS is found, by index and token; an empty one
// too; documents between the checked ones are not looked at.
TEST_F(StoredEos, TheFirstCheckedDocumentWithoutEosIsFound) {
  const int32_t eos = static_cast<int32_t>(r.uniform(0, 998));
  auto docs = documents_ending_in(eos, static_cast<size_t>(r.uniform(5000, 9000)), r);
  write_dataset(dir.path("good"), docs);
  EXPECT_FALSE(find_document_without_eos(IndexedDataset::open(dir.path("good")), eos).has_value());

  const auto checked = eos_check_documents(docs.size());
  const size_t bad = checked[static_cast<size_t>(r.uniform(0, static_cast<int64_t>(checked.size()) - 1))];
  const int32_t other = eos == 0 ? 1 : eos - 1;
  docs[bad].back() = other;
  write_dataset(dir.path("bad"), docs);
  const auto found = find_document_without_eos(IndexedDataset::open(dir.path("bad")), eos);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->document, bad);
  EXPECT_EQ(found->last_token, std::optional<int32_t>(other));
  EXPECT_EQ(describe_missing_eos(*found), "ends in token " + std::to_string(other));

  docs[bad].clear();
  write_dataset(dir.path("empty"), docs);
  const auto empty = find_document_without_eos(IndexedDataset::open(dir.path("empty")), eos);
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->document, bad);
  EXPECT_FALSE(empty->last_token.has_value());
  EXPECT_EQ(describe_missing_eos(*empty), "is empty");

  // Only the last token of each checked document is read: an EOS-less one in between is missed.
  docs[bad].push_back(eos);
  size_t unchecked = 1;
  while (std::binary_search(checked.begin(), checked.end(), unchecked)) ++unchecked;
  docs[unchecked].back() = other;
  write_dataset(dir.path("between"), docs);
  EXPECT_FALSE(find_document_without_eos(IndexedDataset::open(dir.path("between")), eos).has_value());
}

// The loader, told the documents end in the EOS (a sidecar's append_eos), refuses data whose
// checked documents do not, naming the dataset, the document, the token, the EOS and the fix.
TEST_F(StoredEos, TheLoaderRefusesAnAppendEosClaimTheDataDoesNotKeep) {
  const int32_t eos = static_cast<int32_t>(r.uniform(0, 998));
  auto docs = documents_ending_in(eos, static_cast<size_t>(r.uniform(2, 6000)), r);
  const std::string prefix = dir.path("train");
  LoaderOptions opt{.seq_len = 8, .eos_id = eos};
  opt.eos_stored = true;
  write_dataset(prefix, docs);
  const auto good = IndexedDataset::open(prefix);
  EXPECT_EQ(error_of([&] { DataLoader loader(good, opt); }), testing::kNoErrorThrown);

  const auto checked = eos_check_documents(docs.size());
  const size_t bad = checked[static_cast<size_t>(r.uniform(0, static_cast<int64_t>(checked.size()) - 1))];
  docs[bad].back() = eos + 1;
  write_dataset(prefix, docs);
  const auto ds = IndexedDataset::open(prefix);
  const std::string msg = echo::testing::kind_and_what_of([&] { DataLoader loader(ds, opt); });
  EXPECT_EQ(msg.rfind("input: " + prefix + ": the documents are taken to end in the EOS " + std::to_string(eos) +
                          " (its sidecar " + prefix + ".meta.json says \"append_eos\": true), but document " +
                          std::to_string(bad) + " of " + std::to_string(docs.size()) + " ends in token " +
                          std::to_string(eos + 1) + ":",
                      0),
            0u)
      << msg;
  EXPECT_THAT(msg, HasSubstr("re-prepare the data with echo_prep, or delete the sidecar"));
  opt.eos_stored = false;  // appending is always possible
  EXPECT_EQ(DataLoader(ds, opt).stream_length(), ds.num_tokens() + ds.num_documents());
}

// The review's case: a hand-made sidecar saying append_eos over documents that hold 0 tokens
// used to wrap the stream length around ("1152921504606846975 samples of seq_len 16 per epoch").
TEST_F(StoredEos, ASidecarClaimingStoredEosOverEmptyDocumentsNamesTheEmptyDocument) {
  const size_t num_docs = static_cast<size_t>(r.uniform(1, 50));
  const std::string prefix = dir.path("train");
  write_dataset(prefix, std::vector<std::vector<int32_t>>(num_docs));
  const auto ds = IndexedDataset::open(prefix);
  write_sidecar(prefix, ds, 7, /*append_eos=*/true);
  ASSERT_TRUE(check_dataset_meta(ds, "data.train", {7, "x", 1001}).has_value());  // its counts are true
  LoaderOptions opt{.seq_len = 16, .eos_id = 7};
  opt.eos_stored = true;
  const std::string msg = error_of([&] { DataLoader loader(ds, opt); });
  EXPECT_THAT(msg, HasSubstr("but document 0 of " + std::to_string(num_docs) + " is empty"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("samples of seq_len")));
}

// The rule echo_train and echo_eval share: a sidecar's append_eos decides; without one, data
// whose checked documents all end in the EOS (Megatron's --append-eod) is packed as stored, with
// one log line saying so, and any other data gets the EOS appended, silently as before.
TEST_F(StoredEos, WithoutASidecarDataEndingInTheEosIsPackedAsStored) {
  const int32_t eos = static_cast<int32_t>(r.uniform(0, 998));
  auto docs = documents_ending_in(eos, static_cast<size_t>(r.uniform(1, 9000)), r);
  const std::string prefix = dir.path("train");
  write_dataset(prefix, docs);
  {
    const auto ds = IndexedDataset::open(prefix);
    LogCapture log;
    EXPECT_TRUE(decide_eos_stored(ds, std::nullopt, eos, "data.train"));
    EXPECT_THAT(log.text(),
                HasSubstr("data.train (" + prefix + "): all " + std::to_string(std::min(docs.size(), kMaxEosChecks)) +
                          " documents checked (of " + std::to_string(docs.size()) +
                          ") already end in data.eos_id = " + std::to_string(eos)));
    EXPECT_THAT(log.text(), HasSubstr("packed as stored, without a second EOS after each"));
    EXPECT_FALSE(decide_eos_stored(ds, std::nullopt, eos + 1, "data.train")) << "another EOS: appended";
    // The sidecar's word decides, whatever the tokens; a sidecar that says the EOS was not stored
    // over documents that all end in it (a literal "<|endoftext|>" in the text) is obeyed, and said.
    write_sidecar(prefix, ds, eos, false);
    EXPECT_THAT(log.text(), Not(HasSubstr("second one")));
    EXPECT_FALSE(decide_eos_stored(ds, read_dataset_meta(prefix), eos, "data.train"));
    EXPECT_THAT(log.text(), HasSubstr("already end in data.eos_id = " + std::to_string(eos) + ", but its sidecar '" +
                                      prefix + ".meta.json' says the EOS was not stored (\"append_eos\": false), so a "
                                      "second one is packed after each"));
    write_sidecar(prefix, ds, eos, true);
    EXPECT_TRUE(decide_eos_stored(ds, read_dataset_meta(prefix), eos, "data.train"));
    std::filesystem::remove(prefix + ".meta.json");
  }
  // One checked document without it (the last, always checked): appended, and nothing logged.
  docs.back().back() = eos + 1;
  write_dataset(prefix, docs);
  const auto ds = IndexedDataset::open(prefix);
  LogCapture log;
  EXPECT_FALSE(decide_eos_stored(ds, std::nullopt, eos, "data.train"));
  EXPECT_EQ(log.text(), "");
}

}  // namespace
}  // namespace echo::data
