// End-to-end tests of echo_prep (the binary beside this test's build tree): JSONL, JSON arrays
// and text in, indexed datasets out, read back with data::IndexedDataset; the train/valid split;
// identical output for any thread count; and the error messages for bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "data/indexed_dataset.h"
#include "data/split.h"

namespace echo {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// echo_prep is built into the project's binary directory; this test runs from
// <build>/tests/tokenizer/.
fs::path echo_prep_path() {
  return fs::read_symlink("/proc/self/exe").parent_path().parent_path().parent_path() / "echo_prep";
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> documents_of(const std::string& prefix) {
  const auto ds = data::IndexedDataset::open(prefix);
  std::vector<std::string> docs;
  for (size_t i = 0; i < ds.num_documents(); ++i) {
    std::string text;
    for (const int32_t id : ds.document(i)) {
      EXPECT_LT(id, 256);
      text.push_back(static_cast<char>(id));
    }
    docs.push_back(text);
  }
  return docs;
}

class EchoPrep : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(echo_prep_path()))
        << echo_prep_path() << " is not built (cmake --build ... --target echo_prep)";
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("echo_prep_test_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Runs echo_prep with `args`; returns the exit status, keeps stderr in err_.
  int run(const std::string& args) {
    const std::string cmd =
        echo_prep_path().string() + " " + args + " >" + path("stdout.txt") + " 2>" + path("stderr.txt");
    const int status = std::system(cmd.c_str());
    err_ = slurp(path("stderr.txt"));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  fs::path dir_;
  std::string err_;
};

TEST_F(EchoPrep, JsonlSplitsDocumentsByTheKeyedHash) {
  std::string jsonl;
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    texts.push_back("document " + std::to_string(i) + (i % 7 == 0 ? "\nwith\ttabs and \"quotes\" é" : ""));
    jsonl += nlohmann::json{{"id", i}, {"text", texts.back()}}.dump() + "\n";
    if (i == 50) jsonl += "\n";  // blank lines are skipped
  }
  const std::string in = write("in.jsonl", jsonl);
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + path("out/train") + " --valid-prefix " +
                path("out/valid") + " --valid-fraction 0.25 --seed 9 --threads 2"),
            0)
      << err_;
  std::vector<std::string> want_train, want_valid;
  for (size_t i = 0; i < texts.size(); ++i)
    (data::is_valid_document(i, 0.25, 9) ? want_valid : want_train).push_back(texts[i]);
  EXPECT_EQ(documents_of(path("out/train")), want_train);
  EXPECT_EQ(documents_of(path("out/valid")), want_valid);
  EXPECT_FALSE(want_valid.empty());
  EXPECT_THAT(err_, HasSubstr("200 documents"));
}

TEST_F(EchoPrep, JsonArraysOfStringsOrObjects) {
  // nlp-corpus ships files holding one JSON array of sentences.
  const std::string strings = write("doc-0.json", "[\n  \"First sentence.\",\n  \"Second one.\"\n]\n");
  const std::string objects = write("objs.json", R"([{"text": "third"}, {"text": "fourth", "meta": 1}])");
  ASSERT_EQ(run("--input " + strings + " " + objects + " --tokenizer byte --output-prefix " + path("train")), 0)
      << err_;
  EXPECT_THAT(documents_of(path("train")), ::testing::ElementsAre("First sentence.", "Second one.", "third", "fourth"));
}

TEST_F(EchoPrep, TextFilesAndTheirSplits) {
  const std::string a = write("a.txt", "para one\nstill one\n\n\npara two\n");
  const std::string b = write("b.txt", "");
  ASSERT_EQ(run("--format text --input " + a + " " + b + " --tokenizer byte --output-prefix " + path("file")), 0)
      << err_;
  EXPECT_THAT(documents_of(path("file")), ::testing::ElementsAre("para one\nstill one\n\n\npara two\n"));
  EXPECT_THAT(err_, HasSubstr("1 empty, skipped"));
  ASSERT_EQ(run("--format text --text-split paragraph --input " + a + " --tokenizer byte --output-prefix " + path("p")),
            0);
  EXPECT_THAT(documents_of(path("p")), ::testing::ElementsAre("para one\nstill one", "para two"));
  ASSERT_EQ(run("--format text --text-split line --input " + a + " --tokenizer byte --output-prefix " + path("l")), 0);
  EXPECT_THAT(documents_of(path("l")), ::testing::ElementsAre("para one", "still one", "para two"));
}

TEST_F(EchoPrep, OutputDoesNotDependOnThreadsOrChunks) {
  std::string jsonl;
  for (int i = 0; i < 3000; ++i) jsonl += nlohmann::json{{"text", std::string(i % 97, 'a' + i % 26)}}.dump() + "\n";
  const std::string in = write("in.jsonl", jsonl);
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + path("t1") + " --threads 1"), 0) << err_;
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --output-prefix " + path("t3") + " --threads 3 --chunk-mb 1"), 0)
      << err_;
  EXPECT_EQ(slurp(path("t1.bin")), slurp(path("t3.bin")));
  EXPECT_EQ(slurp(path("t1.idx")), slurp(path("t3.idx")));
}

TEST_F(EchoPrep, AppendEosStoresTheTokenizersEos) {
  const std::string in = write("in.jsonl", "{\"text\": \"ab\"}\n");
  ASSERT_EQ(run("--input " + in + " --tokenizer byte --append-eos --output-prefix " + path("e")), 0) << err_;
  const auto ds = data::IndexedDataset::open(path("e"));
  EXPECT_THAT(std::vector<int32_t>(ds.document(0).begin(), ds.document(0).end()),
              ::testing::ElementsAre('a', 'b', 256));
}

TEST_F(EchoPrep, ErrorsNameTheFileAndLine) {
  const std::string bad = write("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  EXPECT_NE(run("--input " + bad + " --tokenizer byte --output-prefix " + path("x")), 0);
  EXPECT_THAT(err_, HasSubstr(bad + ":2: malformed JSON line"));
  EXPECT_FALSE(fs::exists(path("x.idx")));

  const std::string no_text = write("notext.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"body\": \"c\"}\n");
  EXPECT_NE(run("--input " + no_text + " --tokenizer byte --output-prefix " + path("x")), 0);
  EXPECT_THAT(err_, HasSubstr(no_text + ":3: no \"text\" field"));

  const std::string not_string = write("num.jsonl", "{\"text\": 5}\n");
  EXPECT_NE(run("--input " + not_string + " --tokenizer byte --output-prefix " + path("x")), 0);
  EXPECT_THAT(err_, HasSubstr(not_string + ":1: \"text\" is a number, not a string"));

  const std::string bad_array = write("arr.json", "[\"a\",\n\"b\",\n]");
  EXPECT_NE(run("--input " + bad_array + " --tokenizer byte --output-prefix " + path("x")), 0);
  EXPECT_THAT(err_, HasSubstr(bad_array + ":3: malformed JSON array"));

  EXPECT_NE(run("--input " + path("missing.jsonl") + " --tokenizer byte --output-prefix " + path("x")), 0);
  EXPECT_THAT(err_, HasSubstr("input '" + path("missing.jsonl") + "' does not exist"));

  const std::string ok = write("ok.jsonl", "{\"text\": \"a\"}\n");
  EXPECT_NE(run("--input " + ok + " --tokenizer byte --output-prefix " + path("x") + " --valid-fraction 0.1"), 0);
  EXPECT_THAT(err_, HasSubstr("--valid-fraction needs --valid-prefix"));

  EXPECT_NE(run("--input " + ok + " --tokenizer " + path("nope.json") + " --output-prefix " + path("x")), 0);
  EXPECT_THAT(err_, HasSubstr("nope.json' does not exist"));
}

}  // namespace
}  // namespace echo
