// The dataset sidecar (data/dataset_meta.h): written and read back, refused when malformed
// (naming the file), and the run checks: a data.eos_id or model.vocab_size that does not fit the
// data is refused in words, a matching one accepted, a dataset without sidecar accepted with a
// log line, a sidecar left beside other data refused, train and valid of two tokenizers refused.
#include "data/dataset_meta.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <random>

#include "../support/log_capture.h"
#include "core/sha256.h"
#include "data_test_util.h"

namespace echo::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::error_of;
using testing::LogCapture;
using testing::random_documents;
using testing::Random;
using testing::ScratchDataTest;
using testing::ScratchDir;
using testing::write_dataset;

// A random dataset at `prefix` over ids below `vocab` and the sidecar echo_prep would write for it.
DatasetMeta make_dataset(const std::string& prefix, int64_t vocab, int64_t eos, Random& r) {
  std::vector<size_t> lengths(static_cast<size_t>(r.uniform(1, 12)));
  for (auto& n : lengths) n = static_cast<size_t>(r.uniform(0, 50));
  const auto docs = random_documents(lengths, 0, static_cast<int32_t>(vocab), r.gen());
  write_dataset(prefix, docs);
  DatasetMeta m;
  m.tokenizer = "/some/where/tokenizer.json";
  m.tokenizer_sha256 = sha256_hex(std::to_string(vocab));
  m.vocab_size = vocab;
  m.eos_id = eos;
  m.eos_source = "special added token \"<|endoftext|>\"";
  m.documents = docs.size();
  for (const auto& d : docs) m.tokens += d.size();
  write_dataset_meta(prefix, m);
  m.path = dataset_meta_path(prefix);
  return m;
}

class DatasetMetaTest : public ScratchDataTest {};

TEST_F(DatasetMetaTest, WrittenAndReadBack) {
  DatasetMeta m;
  m.tokenizer = r.uniform(0, 1) ? "byte" : dir.path("tok dir");
  m.tokenizer_sha256 = m.tokenizer == "byte" ? "" : sha256_hex(std::to_string(r.gen()));
  m.vocab_size = r.uniform(1, 1 << 20);
  m.eos_id = r.uniform(0, m.vocab_size - 1);
  m.eos_source = "--eos-token \"</s>\"";
  m.append_eos = r.uniform(0, 1) == 1;
  m.documents = static_cast<uint64_t>(r.uniform(0, int64_t{1} << 40));
  m.tokens = static_cast<uint64_t>(r.uniform(0, int64_t{1} << 50));
  const std::string prefix = dir.path("train");
  write_dataset_meta(prefix, m);
  EXPECT_FALSE(fs::exists(dataset_meta_path(prefix) + ".tmp"));
  const auto got = read_dataset_meta(prefix);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->path, prefix + ".meta.json");
  EXPECT_EQ(got->tokenizer, m.tokenizer);
  EXPECT_EQ(got->tokenizer_sha256, m.tokenizer_sha256);
  EXPECT_EQ(got->vocab_size, m.vocab_size);
  EXPECT_EQ(got->eos_id, m.eos_id);
  EXPECT_EQ(got->eos_source, m.eos_source);
  EXPECT_EQ(got->append_eos, m.append_eos);
  EXPECT_EQ(got->documents, m.documents);
  EXPECT_EQ(got->tokens, m.tokens);
  const auto j = nlohmann::json::parse(dataset_meta_json(m));
  EXPECT_EQ(j["format"], "echo-dataset-meta");
  EXPECT_EQ(j["version"], 1);
  EXPECT_FALSE(read_dataset_meta(dir.path("other")).has_value());
}

TEST_F(DatasetMetaTest, AMatchingRunIsAccepted) {
  const int64_t vocab = r.uniform(2, 200000), eos = r.uniform(0, vocab - 1);
  make_dataset(dir.path("train"), vocab, eos, r);
  const auto ds = IndexedDataset::open(dir.path("train"));
  LogCapture log;
  // A model with more rows than the tokenizer has ids (Qwen3: 151936 >= 151669) is fine.
  const auto meta = check_dataset_meta(ds, "data.train", {eos, "data.eos_id of the config", vocab + r.uniform(0, 300)});
  ASSERT_TRUE(meta.has_value());
  EXPECT_EQ(meta->eos_id, eos);
  EXPECT_THAT(log.text(), HasSubstr("data.eos_id and model.vocab_size agree"));
}

TEST_F(DatasetMetaTest, ADatasetWithoutSidecarIsAcceptedWithALogLine) {
  write_dataset(dir.path("megatron"), random_documents({3, 0, 9}, 0, 1000, r.gen()));
  const auto ds = IndexedDataset::open(dir.path("megatron"));
  LogCapture log;
  EXPECT_FALSE(check_dataset_meta(ds, "data.valid", {151643, "data.eos_id of the config", 151936}).has_value());
  EXPECT_THAT(log.text(), HasSubstr("data.valid (" + dir.path("megatron") + "): no " + dir.path("megatron") +
                                    ".meta.json (not made by echo_prep): the tokenizer and EOS it was made with "
                                    "cannot be checked; data.eos_id = 151643 (data.eos_id of the config)"));
}

// The issue: the default eos 151643 lies inside a vocabulary of >= 151644 ids, so nothing else
// notices that it is not the data's EOS.
TEST_F(DatasetMetaTest, AnotherEosIsRefusedNamingBothAndTheFix) {
  const int64_t vocab = r.uniform(151644, 160000), eos = r.uniform(0, vocab - 1), run_eos = (eos + r.uniform(1, vocab - 1)) % vocab;
  const DatasetMeta m = make_dataset(dir.path("train"), vocab, eos, r);
  const auto ds = IndexedDataset::open(dir.path("train"));
  const std::string msg = error_of([&] { check_dataset_meta(ds, "data.train", {run_eos, "--set data.eos_id", vocab}); });
  EXPECT_THAT(msg, HasSubstr("data.train (" + dir.path("train") + ") was prepared with tokenizer "
                             "'/some/where/tokenizer.json' (vocab " + std::to_string(vocab) + ", eos " +
                             std::to_string(eos) + ": special added token \"<|endoftext|>\"), as its sidecar '" +
                             m.path + "' records"));
  EXPECT_THAT(msg, HasSubstr("'data.eos_id' = " + std::to_string(run_eos) + " (--set data.eos_id) is not the EOS the "
                             "data was prepared with, " + std::to_string(eos) + " (special added token"));
  EXPECT_THAT(msg, HasSubstr("pass --set data.eos_id=" + std::to_string(eos)));
  EXPECT_THAT(msg, HasSubstr("re-prepare the data with echo_prep"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("model.vocab_size' =")));
  const std::string kind = echo::testing::kind_and_what_of(
      [&] { check_dataset_meta(ds, "data.train", {run_eos, "--set data.eos_id", vocab}); });
  EXPECT_EQ(kind.rfind("input: ", 0), 0u) << kind;
}

TEST_F(DatasetMetaTest, AModelSmallerThanTheTokenizerIsRefused) {
  const int64_t vocab = r.uniform(300, 200000), eos = r.uniform(0, 255), model_vocab = r.uniform(257, vocab - 1);
  make_dataset(dir.path("v"), vocab, eos, r);
  const auto ds = IndexedDataset::open(dir.path("v"));
  const std::string msg = error_of([&] { check_dataset_meta(ds, "evaluation data", {eos, "x", model_vocab}); });
  EXPECT_THAT(msg, HasSubstr("'model.vocab_size' = " + std::to_string(model_vocab) + " is smaller than the vocabulary "
                             "of the tokenizer the data was prepared with (" + std::to_string(vocab) + ")"));
  EXPECT_THAT(msg, HasSubstr("use a model with model.vocab_size >= " + std::to_string(vocab)));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("data.eos_id' =")));
  // Both wrong (the byte quickstart's model on Qwen3 data): both said at once.
  const std::string both = error_of([&] { check_dataset_meta(ds, "data.train", {256, "x", 257}); });
  EXPECT_THAT(both, HasSubstr("'model.vocab_size' = 257 is smaller"));
  if (eos != 256) {
    EXPECT_THAT(both, HasSubstr("; and 'data.eos_id' = 256 (x) is not the EOS"));
  }
}

TEST_F(DatasetMetaTest, ASidecarBesideOtherDataIsRefused) {
  const std::string prefix = dir.path("train");
  DatasetMeta m = make_dataset(prefix, 1000, 999, r);
  const uint64_t docs = m.documents, tokens = m.tokens;
  m.documents += static_cast<uint64_t>(r.uniform(1, 5));
  write_dataset_meta(prefix, m);
  const auto ds = IndexedDataset::open(prefix);
  const std::string msg = error_of([&] { check_dataset_meta(ds, "data.train", {999, "x", 1000}); });
  EXPECT_THAT(msg, HasSubstr("data.train (" + prefix + "): its sidecar '" + prefix +
                             ".meta.json' does not describe this data: it says " + std::to_string(m.documents) +
                             " documents and " + std::to_string(tokens) + " tokens, but " + prefix + ".idx holds " +
                             std::to_string(docs) + " documents and " + std::to_string(tokens) + " tokens"));
  EXPECT_THAT(msg, HasSubstr("or the sidecar was made or edited by hand"));
  EXPECT_THAT(msg, HasSubstr("delete the file to use the dataset unchecked"));
}

// The review's case: a hand-made sidecar claiming 0 documents and 0 tokens. The message used to
// say the dataset "was rewritten after echo_prep wrote the sidecar", which it was not.
TEST_F(DatasetMetaTest, AHandMadeSidecarOfZeroTokensIsRefusedSayingWhatIsWrong) {
  const std::string prefix = dir.path("train");
  DatasetMeta m = make_dataset(prefix, 1000, 999, r);
  const uint64_t docs = m.documents, tokens = m.tokens;
  const auto ds = IndexedDataset::open(prefix);
  for (const uint64_t claimed_docs : {uint64_t{0}, docs}) {
    m.documents = claimed_docs;
    m.tokens = 0;
    write_dataset_meta(prefix, m);
    const std::string msg = error_of([&] { check_dataset_meta(ds, "data.train", {999, "x", 1000}); });
    if (tokens == 0 && claimed_docs == docs) {
      EXPECT_EQ(msg, testing::kNoErrorThrown) << "a true claim";
      continue;
    }
    EXPECT_THAT(msg, HasSubstr("does not describe this data: it says " + std::to_string(claimed_docs) +
                               " documents and 0 tokens, but " + prefix + ".idx holds " + std::to_string(docs) +
                               " documents and " + std::to_string(tokens) + " tokens (the data was rewritten after "
                               "echo_prep wrote the sidecar, or the sidecar was made or edited by hand)"));
  }
}

// The writer replaces a dataset whole: the old data's sidecar goes with it.
TEST_F(DatasetMetaTest, RewritingADatasetRemovesItsSidecar) {
  const std::string prefix = dir.path("train");
  make_dataset(prefix, 500, 3, r);
  ASSERT_TRUE(fs::exists(prefix + ".meta.json"));
  write_dataset(prefix, random_documents({4, 4}, 0, 500, r.gen()));
  EXPECT_FALSE(fs::exists(prefix + ".meta.json"));
  EXPECT_EQ(IndexedDataset::open(prefix).num_documents(), 2u);
}

// finalize() when a rename fails (injected: the tests run as root, so permissions cannot refuse
// one; a vanished temporary file or a directory in the way can). A sidecar must never sit beside
// data it does not describe, and old data that stays must keep its sidecar (before, the sidecar
// was removed first, so a failed .bin rename left the old data unverified).
TEST_F(DatasetMetaTest, AFailedRenameInFinalizeKeepsTheOldDataWithItsSidecar) {
  const std::string prefix = dir.path("train");
  const DatasetMeta old = make_dataset(prefix, 500, 3, r);
  const auto old_sidecar = testing::read_bytes(old.path);
  const auto old_idx = testing::read_bytes(prefix + ".idx");
  const auto new_docs = random_documents({3, 1, 4}, 0, 500, r.gen());
  // The old data must still be usable, and verified, as it was.
  const auto expect_old_data_verified = [&] {
    EXPECT_EQ(testing::read_bytes(old.path), old_sidecar);
    EXPECT_EQ(testing::read_bytes(prefix + ".idx"), old_idx);
    const auto ds = IndexedDataset::open(prefix);
    EXPECT_TRUE(check_dataset_meta(ds, "data.train", {3, "x", 500}).has_value());
    EXPECT_FALSE(fs::exists(old.path + ".old"));
  };
  {  // the .bin rename fails: the sidecar, moved aside, goes back
    IndexedDatasetWriter w(prefix);
    for (const auto& d : new_docs) w.add_document(d);
    fs::remove(prefix + ".bin.tmp");
    const std::string msg = echo::testing::kind_and_what_of([&] { w.finalize(); });
    EXPECT_EQ(msg, "run: cannot rename " + prefix + ".bin.tmp to " + prefix + ".bin: No such file or directory");
  }
  expect_old_data_verified();
  {  // the sidecar cannot be moved aside (a directory at the aside name): nothing changes
    fs::create_directories(old.path + ".old/x");
    IndexedDatasetWriter w(prefix);
    for (const auto& d : new_docs) w.add_document(d);
    const std::string msg = echo::testing::kind_and_what_of([&] { w.finalize(); });
    EXPECT_THAT(msg, HasSubstr("run: cannot move the old sidecar " + old.path + " aside to " + old.path + ".old: "));
    fs::remove_all(old.path + ".old");
  }
  expect_old_data_verified();
  EXPECT_FALSE(fs::exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(fs::exists(prefix + ".idx.tmp"));
  {  // the .idx rename fails (a directory in the way) after the new .bin is in place: no sidecar
    fs::remove(prefix + ".idx");
    fs::create_directories(prefix + ".idx/x");
    IndexedDatasetWriter w(prefix);
    for (const auto& d : new_docs) w.add_document(d);
    const std::string msg = echo::testing::kind_and_what_of([&] { w.finalize(); });
    EXPECT_THAT(msg, HasSubstr("run: cannot rename " + prefix + ".idx.tmp to " + prefix + ".idx: "));
    EXPECT_THAT(msg, HasSubstr(prefix + ".bin is already the new data's, so the dataset is unusable until it is "
                                        "written again"));
    EXPECT_FALSE(fs::exists(old.path));
    EXPECT_FALSE(fs::exists(old.path + ".old"));
    fs::remove_all(prefix + ".idx");
  }
  write_dataset(prefix, new_docs);  // and a rerun succeeds, leaving no sidecar of the old data
  EXPECT_EQ(IndexedDataset::open(prefix).num_documents(), new_docs.size());
  EXPECT_FALSE(fs::exists(old.path));
  EXPECT_FALSE(fs::exists(old.path + ".old"));
}

TEST_F(DatasetMetaTest, AMalformedSidecarIsRefusedNamingIt) {
  const std::string prefix = dir.path("train");
  const DatasetMeta good = make_dataset(prefix, 1000, 7, r);
  const std::string path = good.path;
  const auto good_json = nlohmann::json::parse(dataset_meta_json(good));
  const auto with = [&](const char* key, nlohmann::json value) {
    auto j = good_json;
    if (value.is_discarded())
      j.erase(key);
    else
      j[key] = value;
    return j.dump();
  };
  const nlohmann::json gone(nlohmann::json::value_t::discarded);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"format\": ", "is not valid JSON"},
      {"[1, 2]", "must hold a JSON object, got array"},
      {std::string(200, '[') + std::string(200, ']'), "nests arrays/objects more than 128 deep"},
      {with("format", "megatron"), "\"format\" is \"megatron\", not \"echo-dataset-meta\""},
      {with("version", 2), "has version 2, and this echo reads version 1"},
      {with("eos_id", gone), "has no \"eos_id\" field"},
      {with("eos_id", "7"), "\"eos_id\" must be an integer in [0, 999], got \"7\""},
      {with("eos_id", 7.5), "\"eos_id\" must be an integer in [0, 999], got 7.5"},
      {with("eos_id", 1000), "\"eos_id\" must be an integer in [0, 999], got 1000"},
      {with("vocab_size", -4), "\"vocab_size\" must be an integer in [1, 2147483647], got -4"},
      {with("documents", -1), "\"documents\" must be an integer"},
      {with("tokens", nlohmann::json::array()), "\"tokens\" must be an integer"},
      {with("append_eos", "yes"), "\"append_eos\" must be true or false, got \"yes\""},
      {with("tokenizer", 5), "\"tokenizer\" must be a string of at most 4096 bytes, got 5"},
      {with("eos_source", std::string(5000, 'x')), "\"eos_source\" must be a string of at most 4096 bytes"},
      {with("tokenizer_sha256", "abc"), "\"tokenizer_sha256\" must be null or 64 hex digits, got \"abc\""},
      {std::string(kMaxDatasetMetaBytes + 1, ' '), "is larger than 1048576 bytes"},
  };
  const auto ds = IndexedDataset::open(prefix);
  for (const auto& [text, needle] : cases) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    const std::string kind = echo::testing::kind_and_what_of([&] { check_dataset_meta(ds, "data.train", {7, "x", 1000}); });
    EXPECT_EQ(kind.rfind("input: ", 0), 0u) << kind;
    EXPECT_THAT(kind, HasSubstr("dataset sidecar '" + path + "'")) << needle;
    EXPECT_THAT(kind, HasSubstr(needle));
    EXPECT_THAT(kind, HasSubstr("re-prepare the data with echo_prep")) << needle;
  }
  fs::remove(path);
  fs::create_directories(path);
  EXPECT_THAT(error_of([&] { read_dataset_meta(prefix); }),
              HasSubstr("cannot read dataset sidecar '" + path + "': it is a directory"));
  fs::remove(path);
  // A symbolic link that leads nowhere is a sidecar that cannot be read, not an absent one (which
  // would leave the data unchecked).
  fs::create_symlink(dir.path("nowhere.meta.json"), path);
  EXPECT_THAT(error_of([&] { read_dataset_meta(prefix); }),
              HasSubstr("cannot read dataset sidecar '" + path + "': it is a symbolic link to '" +
                        dir.path("nowhere.meta.json") + "', which does not exist"));
  fs::remove(path);
  fs::create_symlink(path, path);  // a loop
  EXPECT_THAT(error_of([&] { read_dataset_meta(prefix); }),
              HasSubstr("cannot read dataset sidecar '" + path + "': it is a symbolic-link loop"));
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);  // refused at once, not waited on for a writer
  EXPECT_THAT(error_of([&] { read_dataset_meta(prefix); }),
              HasSubstr("cannot read dataset sidecar '" + path + "': it is not a regular file"));
}

TEST_F(DatasetMetaTest, TrainAndValidOfTwoTokenizersAreRefused) {
  const int64_t vocab = r.uniform(300, 5000);
  const DatasetMeta train = make_dataset(dir.path("train"), vocab, 256, r);
  DatasetMeta valid = make_dataset(dir.path("valid"), vocab, 256, r);
  valid.tokenizer = "tokenizer.json";  // the same file under another name: the same tokenizer
  EXPECT_NO_THROW(check_same_preparation(train, "data.train", valid, "data.valid"));
  valid.tokenizer_sha256 = sha256_hex("another file");
  std::string msg = error_of([&] { check_same_preparation(train, "data.train", valid, "data.valid"); });
  EXPECT_THAT(msg, HasSubstr("data.train (" + dir.path("train") + ") and data.valid (" + dir.path("valid") +
                             ") were prepared with different tokenizers"));
  EXPECT_THAT(msg, HasSubstr("sha256 " + valid.tokenizer_sha256));
  EXPECT_THAT(msg, HasSubstr("re-prepare both with one echo_prep run"));
  valid = train;
  valid.vocab_size += r.uniform(1, 10);
  EXPECT_THAT(error_of([&] { check_same_preparation(train, "data.train", valid, "data.valid"); }),
              HasSubstr("vocab " + std::to_string(valid.vocab_size)));
}

}  // namespace
}  // namespace echo::data
