// The MMIDIDX writer and reader: round trips of random documents, the exact bytes of a small
// dataset, a hand-built Megatron-style uint16 dataset, and every open/scan error with its message.
#include "data/indexed_dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <numeric>

#include "data/content_hash.h"
#include "data/token_range.h"
#include "data_test_util.h"

namespace echo::data {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using testing::error_of;
using ::testing::HasSubstr;
using testing::random_documents;
using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;
using testing::write_dataset;

// Little-endian byte builder for hand-made index files.
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  Bytes& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  Bytes& magic() {
    for (char c : std::string("MMIDIDX\0\0", 9)) b.push_back(static_cast<uint8_t>(c));
    return *this;
  }
};

TEST(IndexedDatasetTest, RoundTripRandomDocuments) {
  ScratchDir dir;
  const std::string prefix = dir.path("rt");
  std::vector<size_t> lengths = {1, 0, 50000, 1, 2};
  std::mt19937_64 gen(7);
  for (int i = 0; i < 40; ++i) lengths.push_back(1 + gen() % 300);
  const auto docs = random_documents(lengths, 0, 151936, 11);
  const size_t total = std::accumulate(lengths.begin(), lengths.end(), size_t{0});

  IndexedDatasetWriter writer(prefix);
  for (const auto& d : docs) writer.add_document(d);
  EXPECT_EQ(writer.num_documents(), docs.size());
  EXPECT_EQ(writer.num_tokens(), total);
  EXPECT_TRUE(testing::fs::exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(testing::fs::exists(prefix + ".idx"));
  writer.finalize();
  EXPECT_FALSE(testing::fs::exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(testing::fs::exists(prefix + ".idx.tmp"));
  EXPECT_EQ(testing::fs::file_size(prefix + ".bin"), total * 4);
  EXPECT_EQ(testing::fs::file_size(prefix + ".idx"), 34 + 12 * docs.size() + 8 * (docs.size() + 1));

  IndexedDataset opened = IndexedDataset::open(prefix);
  const IndexedDataset ds = std::move(opened);  // movable: the mapping travels with it
  EXPECT_EQ(ds.dtype(), TokenDtype::kInt32);
  ASSERT_EQ(ds.num_documents(), docs.size());
  EXPECT_EQ(ds.num_sequences(), docs.size());
  EXPECT_EQ(ds.num_tokens(), total);
  uint64_t offset = 0;
  std::vector<int32_t> flat;
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(ds.document_offsets()[i], offset) << "document " << i;
    EXPECT_EQ(ds.document_length(i), docs[i].size());
    const auto got = ds.document(i);
    ASSERT_EQ(got.size(), docs[i].size()) << "document " << i;
    EXPECT_TRUE(std::equal(got.begin(), got.end(), docs[i].begin())) << "document " << i;
    offset += docs[i].size();
    flat.insert(flat.end(), docs[i].begin(), docs[i].end());
  }
  EXPECT_EQ(ds.document_offsets().back(), total);
  // copy_tokens across document boundaries: documents 1..4 (0, 50000, 1, 2 tokens) and into 5.
  std::vector<int32_t> got(50010);
  ds.copy_tokens(1, got.size(), got.data());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), flat.begin() + 1));
  EXPECT_THAT(error_of([&] { ds.document(docs.size()); }), HasSubstr("document 45 out of range (45 documents)"));
  EXPECT_THAT(error_of([&] { ds.copy_tokens(total - 1, 2, got.data()); }), HasSubstr("out of range"));
}

// The expected files, written out byte by byte: [7, 8, 9] and [151935].
TEST(IndexedDatasetTest, HeaderLayoutIsByteExact) {
  ScratchDir dir;
  const std::string prefix = dir.path("two");
  write_dataset(prefix, {{7, 8, 9}, {151935}});
  const std::vector<uint8_t> expected_idx = {
      0x4D, 0x4D, 0x49, 0x44, 0x49, 0x44, 0x58, 0x00, 0x00,  // "MMIDIDX\0\0"
      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // version 1
      0x04,                                                  // dtype int32
      0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // 2 sequences
      0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // 3 document indices
      0x03, 0x00, 0x00, 0x00,                                // length 3
      0x01, 0x00, 0x00, 0x00,                                // length 1
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // pointer 0
      0x0C, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // pointer 12
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // document index 0
      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // document index 1
      0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,        // document index 2 = sequence count
  };
  const std::vector<uint8_t> expected_bin = {
      0x07, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00,  // 7 8 9
      0x7F, 0x51, 0x02, 0x00,                                                  // 151935 = 0x2517F
  };
  EXPECT_THAT(read_bytes(prefix + ".idx"), ElementsAreArray(expected_idx));
  EXPECT_THAT(read_bytes(prefix + ".bin"), ElementsAreArray(expected_bin));
}

// A Megatron-style uint16 dataset made by hand: three sequences, the first document made of two
// of them (a sentence-split document), document indices [0, 2, 3].
TEST(IndexedDatasetTest, ReadsHandBuiltUint16Dataset) {
  ScratchDir dir;
  const std::string prefix = dir.path("u16");
  Bytes idx;
  idx.magic().put<uint64_t>(1).put<uint8_t>(8).put<uint64_t>(3).put<uint64_t>(3);
  idx.put<int32_t>(2).put<int32_t>(3).put<int32_t>(1);
  idx.put<int64_t>(0).put<int64_t>(4).put<int64_t>(10);
  idx.put<int64_t>(0).put<int64_t>(2).put<int64_t>(3);
  write_bytes(prefix + ".idx", idx.b);
  Bytes bin;
  for (uint16_t t : {65535, 1, 2, 3, 40000, 500}) bin.put<uint16_t>(t);
  write_bytes(prefix + ".bin", bin.b);

  const IndexedDataset ds = IndexedDataset::open(prefix);
  EXPECT_EQ(ds.dtype(), TokenDtype::kUint16);
  EXPECT_EQ(ds.num_sequences(), 3u);
  ASSERT_EQ(ds.num_documents(), 2u);
  EXPECT_EQ(ds.num_tokens(), 6u);
  EXPECT_THAT(ds.document_u16(0), ElementsAre(65535, 1, 2, 3, 40000));
  EXPECT_THAT(ds.document_u16(1), ElementsAre(500));
  std::vector<int32_t> all(6);
  ds.copy_tokens(0, 6, all.data());
  EXPECT_THAT(all, ElementsAre(65535, 1, 2, 3, 40000, 500));  // zero-extended, never -1
  EXPECT_THAT(error_of([&] { ds.document(0); }), HasSubstr("document() reads int32 tokens, the dataset holds uint16"));
  EXPECT_NO_THROW(check_token_range(ds, 65536, "data.train"));
  // The content hash of 2-byte tokens, on the range scan's pass and alone: XXH3-64 of the dtype
  // code, the document boundaries in tokens (0, 5, 6) and the .bin's bytes, assembled here.
  Bytes hashed;
  hashed.put<uint8_t>(8).put<uint64_t>(0).put<uint64_t>(5).put<uint64_t>(6);
  hashed.b.insert(hashed.b.end(), bin.b.begin(), bin.b.end());
  const uint64_t expected_hash = XXH3_64bits(hashed.b.data(), hashed.b.size());
  EXPECT_EQ(check_token_range_and_hash(ds, 65536, "data.train"), expected_hash);
  EXPECT_EQ(content_hash(ds), expected_hash);
  EXPECT_THAT(error_of([&] { check_token_range(ds, 65535, "data.train"); }),
              HasSubstr("data.train (" + prefix +
                        ".bin): document 0, position 0: token id 65535 is out of range "
                        "[0, 65535)"));
}

class IndexedDatasetErrorTest : public ::testing::Test {
 protected:
  void SetUp() override { write_dataset(prefix_, {{7, 8, 9}, {151935}}); }
  std::vector<uint8_t> idx() const { return read_bytes(prefix_ + ".idx"); }
  std::string open_error() const {
    return error_of([&] { IndexedDataset::open(prefix_); });
  }

  ScratchDir dir_;
  std::string prefix_ = dir_.path("x");
};

TEST_F(IndexedDatasetErrorTest, MissingFiles) {
  EXPECT_THAT(error_of([&] { IndexedDataset::open(dir_.path("nope")); }),
              HasSubstr(dir_.path("nope") + ".idx: no such file"));
  testing::fs::remove(prefix_ + ".bin");
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".bin: no such file"));
}

TEST_F(IndexedDatasetErrorTest, BadMagic) {
  auto bytes = idx();
  bytes[3] = 'X';
  write_bytes(prefix_ + ".idx", bytes);
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".idx: bad magic: not a Megatron-LM MMIDIDX index"));
  write_bytes(prefix_ + ".idx", {'M', 'M', 'I'});
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".idx: bad magic"));
}

TEST_F(IndexedDatasetErrorTest, UnsupportedVersionAndDtype) {
  auto bytes = idx();
  bytes[9] = 2;
  write_bytes(prefix_ + ".idx", bytes);
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".idx: unsupported version 2 (expected 1)"));
  SetUp();  // a fresh, valid dataset
  bytes = idx();
  bytes[17] = 6;
  write_bytes(prefix_ + ".idx", bytes);
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".idx: unsupported dtype code 6 (float64)"));
}

TEST_F(IndexedDatasetErrorTest, TruncatedIndex) {
  auto bytes = idx();
  ASSERT_EQ(bytes.size(), 82u);
  bytes.pop_back();
  write_bytes(prefix_ + ".idx", bytes);
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".idx: truncated index: the header promises 2 sequences and 3 document "
                                                "indices (82 bytes), the file has 81 bytes"));
  bytes.resize(20);
  write_bytes(prefix_ + ".idx", bytes);
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".idx: truncated header: 20 bytes, the MMIDIDX header has 34"));
  // A header that promises absurd counts must not overflow the size check.
  bytes = Bytes().magic().put<uint64_t>(1).put<uint8_t>(4).put<uint64_t>(~uint64_t{0}).put<uint64_t>(1).b;
  write_bytes(prefix_ + ".idx", bytes);
  EXPECT_THAT(open_error(), HasSubstr("(more than 2^64 bytes), the file has 34 bytes"));
}

TEST_F(IndexedDatasetErrorTest, TruncatedBin) {
  auto bin = read_bytes(prefix_ + ".bin");
  bin.pop_back();
  write_bytes(prefix_ + ".bin", bin);
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".bin: truncated: " + prefix_ +
                                      ".idx says 4 int32 tokens (16 bytes), the file has 15 bytes"));
}

// A .bin longer than its index says (another run's .idx beside it, or an index that names uint16
// for int32 tokens) used to be read silently: every token is then wrong.
TEST_F(IndexedDatasetErrorTest, BinLongerThanTheIndexSays) {
  auto bin = read_bytes(prefix_ + ".bin");
  bin.insert(bin.end(), {0, 0, 0, 0});
  write_bytes(prefix_ + ".bin", bin);
  EXPECT_EQ(open_error(), prefix_ + ".bin: 20 bytes, but " + prefix_ +
                              ".idx says 4 int32 tokens (16 bytes): the .bin and .idx do not belong together (mixed "
                              "up files, or the index names the wrong dtype)");
  // One document of int32 tokens whose index claims uint16 (with several, the pointers give it away).
  const std::string one = dir_.path("one");
  write_dataset(one, {{7, 8, 9, 10}});
  auto bytes = read_bytes(one + ".idx");
  bytes[17] = 8;  // dtype code: uint16, so the index covers only the first 8 bytes
  write_bytes(one + ".idx", bytes);
  EXPECT_EQ(error_of([&] { IndexedDataset::open(one); }),
            one + ".bin: 16 bytes, but " + one +
                ".idx says 4 uint16 tokens (8 bytes): the .bin and .idx do not belong together (mixed up files, or "
                "the index names the wrong dtype)");
}

TEST_F(IndexedDatasetErrorTest, PointersOutOfOrder) {
  auto bytes = idx();
  bytes[34 + 8 + 8] = 8;  // second pointer 12 -> 8: overlaps the first sequence
  write_bytes(prefix_ + ".idx", bytes);
  EXPECT_THAT(open_error(),
              HasSubstr(prefix_ + ".idx: pointers out of order: sequence 1 starts at byte 8, expected 12"));
}

TEST_F(IndexedDatasetErrorTest, DocumentIndicesInconsistent) {
  auto bytes = idx();
  bytes[34 + 8 + 16 + 16] = 1;  // last document index 2 -> 1
  write_bytes(prefix_ + ".idx", bytes);
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".idx: the last document index is 1, expected the sequence count 2"));
  SetUp();
  bytes = idx();
  bytes[34 + 8 + 16] = 1;  // first document index 0 -> 1
  write_bytes(prefix_ + ".idx", bytes);
  EXPECT_THAT(open_error(), HasSubstr(prefix_ + ".idx: the first document index is 1, expected 0"));
}

TEST_F(IndexedDatasetErrorTest, OutOfRangeToken) {
  write_dataset(prefix_, {{1, 2, 3}, {4, 5, 999, 1000, 6}});
  const IndexedDataset ds = IndexedDataset::open(prefix_);
  EXPECT_NO_THROW(check_token_range(ds, 1001, "data.train"));
  EXPECT_THAT(error_of([&] { check_token_range(ds, 1000, "data.train"); }),
              HasSubstr("data.train (" + prefix_ +
                        ".bin): document 1, position 3: token id 1000 is out of range "
                        "[0, 1000)"));
  write_dataset(prefix_, {{1, 2, 3}, {4}, {5, -7}});
  const IndexedDataset neg = IndexedDataset::open(prefix_);
  EXPECT_THAT(error_of([&] { check_token_range(neg, 1000, "data.valid"); }),
              HasSubstr("data.valid (" + prefix_ + ".bin): document 2, position 1: token id -7 is out of range"));
}

TEST(IndexedDatasetWriterTest, AbandonedWriterLeavesNoFiles) {
  ScratchDir dir;
  const std::string prefix = dir.path("abandoned");
  {
    IndexedDatasetWriter writer(prefix);
    const std::vector<int32_t> doc = {1, 2, 3};
    writer.add_document(doc);
    EXPECT_TRUE(testing::fs::exists(prefix + ".bin.tmp"));
  }
  EXPECT_FALSE(testing::fs::exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(testing::fs::exists(prefix + ".bin"));
  EXPECT_FALSE(testing::fs::exists(prefix + ".idx"));

  IndexedDatasetWriter writer(prefix);
  writer.finalize();
  const std::vector<int32_t> doc = {1};
  EXPECT_THAT(error_of([&] { writer.add_document(doc); }), HasSubstr("add_document after finalize"));
  EXPECT_THAT(error_of([&] { writer.finalize(); }), HasSubstr("finalize called twice"));
  const IndexedDataset empty = IndexedDataset::open(prefix);
  EXPECT_EQ(empty.num_documents(), 0u);
  EXPECT_EQ(empty.num_tokens(), 0u);

  EXPECT_THAT(error_of([&] { IndexedDatasetWriter(dir.path("no/such/dir/x")); }),
              HasSubstr(dir.path("no/such/dir/x") + ".bin.tmp: cannot create: No such file or directory"));
}

}  // namespace
}  // namespace echo::data
